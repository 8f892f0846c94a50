//! The four Agent Merge tools' input, checked the way VS Code parses it, in its words.

use serde_json::{Map, Value};

use crate::store::AgentMergeOptions;

pub const SET: &str = "setAgentMergeEnabled";
pub const READ_CI: &str = "readAgentMergeCI";
pub const REPLY: &str = "replyToAgentMergeReviewThread";
pub const RERUN: &str = "rerunAgentMergeWorkflow";

/// When it merges: always, only while unchanged by Agent Merge, or never.
pub const MERGE_VALUES: [&str; 3] = ["always", "ifUnchanged", "never"];
const OPTIONS: [&str; 5] = ["enabled", "addressReviews", "fixCI", "resolveConflicts", "mergePullRequest"];

fn as_record<'a>(input: &'a Value, tool: &str) -> Result<&'a Map<String, Value>, String> {
    input.as_object().ok_or_else(|| format!("Invalid {tool} input: expected an object."))
}

fn required_string<'a>(args: &'a Map<String, Value>, field: &str, tool: &str) -> Result<&'a str, String> {
    match args.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        _ => Err(format!("Invalid {tool} input: {field} must be a non-empty string.")),
    }
}

fn optional_bool(args: &Map<String, Value>, field: &str, tool: &str) -> Result<Option<bool>, String> {
    match args.get(field) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be a boolean.")),
    }
}

/// A `replyToAgentMergeReviewThread` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The thread's GraphQL node id.
    pub thread_id: String,
    /// What to say.
    pub body: String,
    /// Resolve the thread once the reply is published (default true).
    pub resolve: bool,
}

pub fn reply(input: &Value) -> Result<Reply, String> {
    let args = as_record(input, REPLY)?;
    let thread_id = required_string(args, "threadId", REPLY)?.to_owned();
    let body = required_string(args, "body", REPLY)?.to_owned();
    let resolve = optional_bool(args, "resolve", REPLY)?.unwrap_or(true);
    Ok(Reply { thread_id, body, resolve })
}

/// A `rerunAgentMergeWorkflow` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    /// The workflow run.
    pub run_id: String,
    /// Rerun only its failed jobs (default true).
    pub failed_jobs_only: bool,
}

pub fn rerun(input: &Value) -> Result<Rerun, String> {
    let args = as_record(input, RERUN)?;
    let run_id = required_string(args, "runId", RERUN)?.to_owned();
    let failed_jobs_only = optional_bool(args, "failedJobsOnly", RERUN)?.unwrap_or(true);
    Ok(Rerun { run_id, failed_jobs_only })
}

fn bounded(args: &Map<String, Value>, field: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
    match args.get(field) {
        None => Ok(None),
        Some(value) => match value.as_u64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(format!("Invalid {READ_CI} input: {field} must be an integer between {min} and {max}.")),
        },
    }
}

/// Checks a `readAgentMergeCI` request: each mode takes its own fields, a cursor comes alone.
pub fn read_ci(input: &Value) -> Result<(), String> {
    let args = as_record(input, READ_CI)?;
    const MAX: u64 = 9_007_199_254_740_991;
    let mode = match args.get("mode") {
        None => "summary",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => "",
    };
    let fields: &[&str] = if args.contains_key("cursor") {
        &["cursor"]
    } else {
        match mode {
            "summary" => &["mode", "jobId"],
            "tail" => &["mode", "evidenceId", "lineCount"],
            "range" => &["mode", "evidenceId", "startLine", "startColumn", "endLine"],
            "search" => &["mode", "evidenceId", "query", "startLine", "contextLines"],
            _ => &[],
        }
    };
    if fields.is_empty() || args.keys().any(|k| !fields.contains(&k.as_str())) {
        return Err(format!("Invalid {READ_CI} input: unsupported fields or mode. Pass a cursor alone."));
    }
    if args.contains_key("cursor") {
        return required_string(args, "cursor", READ_CI).map(|_| ());
    }
    if mode == "summary" {
        return match args.get("jobId") {
            None => Ok(()),
            Some(_) => required_string(args, "jobId", READ_CI).map(|_| ()),
        };
    }
    required_string(args, "evidenceId", READ_CI)?;
    if mode == "tail" {
        return bounded(args, "lineCount", 1, 200).map(|_| ());
    }
    let start = bounded(args, "startLine", 1, MAX)?.unwrap_or(1);
    if mode == "range" {
        bounded(args, "endLine", start, start + 199)?;
        return bounded(args, "startColumn", 1, MAX).map(|_| ());
    }
    let query = required_string(args, "query", READ_CI)?;
    if query.chars().count() > 200 || query.contains(['\r', '\n']) {
        return Err(format!("Invalid {READ_CI} input: query must be a single line of at most 200 characters."));
    }
    bounded(args, "contextLines", 0, 5).map(|_| ())
}

/// A `setAgentMergeEnabled` request: on or off, and the options it names.
pub fn set(input: &Value) -> Result<(bool, AgentMergeOptions), String> {
    let args = as_record(input, SET)?;
    if args.keys().any(|k| !OPTIONS.contains(&k.as_str())) {
        return Err(format!("Invalid {SET} input: unsupported configuration option."));
    }
    let merge = match args.get("mergePullRequest") {
        None => None,
        Some(Value::String(m)) if MERGE_VALUES.contains(&m.as_str()) => Some(m.clone()),
        Some(_) => return Err(format!("Invalid {SET} input: mergePullRequest must be always, ifUnchanged, or never.")),
    };
    let enabled = match args.get("enabled") {
        Some(Value::Bool(b)) => *b,
        _ => return Err(format!("Invalid {SET} input: enabled must be a boolean.")),
    };
    Ok((
        enabled,
        AgentMergeOptions {
            address_reviews: optional_bool(args, "addressReviews", SET)?,
            fix_ci: optional_bool(args, "fixCI", SET)?,
            resolve_conflicts: optional_bool(args, "resolveConflicts", SET)?,
            merge_pull_request: merge,
        },
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn input_is_checked_in_vs_codes_words() {
        for bad in [
            json!(null),
            json!({}),
            json!({ "enabled": "true" }),
            json!({ "enabled": true, "mergePullRequest": "sometimes" }),
            json!({ "enabled": true, "session": "x" }),
        ] {
            assert!(set(&bad).expect_err("refused").starts_with("Invalid setAgentMergeEnabled input"), "{bad}");
        }
        for bad in [
            json!({ "mode": "other" }),
            json!({ "mode": "tail" }),
            json!({ "cursor": "c", "mode": "range" }),
            json!({ "mode": "range", "evidenceId": "e", "endLine": 201 }),
            json!({ "mode": "search", "evidenceId": "e", "query": "x", "contextLines": 6 }),
        ] {
            assert!(read_ci(&bad).expect_err("refused").starts_with("Invalid readAgentMergeCI input"), "{bad}");
        }
        assert!(read_ci(&json!({})).is_ok());
        assert!(read_ci(&json!({ "mode": "range", "evidenceId": "e", "startLine": 10 })).is_ok());
        assert_eq!(
            reply(&json!({ "threadId": "T", "body": "Done." })),
            Ok(Reply { thread_id: "T".into(), body: "Done.".into(), resolve: true })
        );
        assert_eq!(rerun(&json!({ "runId": "7" })), Ok(Rerun { run_id: "7".into(), failed_jobs_only: true }));
    }
}

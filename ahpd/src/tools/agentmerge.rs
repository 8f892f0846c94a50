//! VS Code's four Agent Merge tools, in its names and words: `setAgentMergeEnabled`,
//! `readAgentMergeCI`, `replyToAgentMergeReviewThread` and `rerunAgentMergeWorkflow`.
//!
//! `setAgentMergeEnabled` turns Agent Merge on, off or different for the calling chat's folder and
//! answers the configuration in force there, including when it merges; enabling captures the
//! folder's current Git branch as its target. The configuration is kept in memory, per session
//! and folder. The other three act only inside a repair turn Agent Merge started, for what that
//! turn was asked to fix. This host never starts one (it has no GitHub watch), so after checking
//! their input they refuse in VS Code's words, telling the model to end the turn rather than reach
//! for another GitHub tool or the CLI.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{Group, HostTools, Refusal, ToolCall, ToolInfo, ToolResult};
use crate::host::Host;

const SET: &str = "setAgentMergeEnabled";
const READ_CI: &str = "readAgentMergeCI";
const REPLY: &str = "replyToAgentMergeReviewThread";
const RERUN: &str = "rerunAgentMergeWorkflow";

const MERGE_VALUES: [&str; 3] = ["always", "ifUnchanged", "never"];
const OPTIONS: [&str; 5] = ["enabled", "addressReviews", "fixCI", "resolveConflicts", "mergePullRequest"];

/// The options a call may change; absent ones stay as they were.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    address_reviews: Option<bool>,
    fix_ci: Option<bool>,
    resolve_conflicts: Option<bool>,
    merge_pull_request: Option<String>,
}

/// One folder's Agent Merge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FolderMerge {
    enabled: bool,
    overrides: Overrides,
    /// The branch captured when it was first enabled.
    target: Option<String>,
}

/// Agent Merge's configuration, by session and folder.
#[derive(Default)]
pub struct AgentMerge {
    folders: HashMap<(String, PathBuf), FolderMerge>,
}

/// The four tools.
pub fn tools() -> Vec<ToolInfo> {
    let set = ToolInfo::new(
        Group::AgentMerge,
        SET,
        "Enable, disable, or configure Agent Merge for the current chat's folder when the user asks to start, stop, or configure Agent Merge, keep a pull request green, or merge it when ready; other folders are unchanged. Not for one-off pull request inspection or repair. This does not change the global Agent Merge setting or GitHub auto-merge. Enablement and supplied options persist for this folder. Only change options the user requests. Enabling monitoring alone does not enable automatic merging: for an explicit \"merge when green\" request, set mergePullRequest to \"always\", or \"ifUnchanged\" if the user wants to review agent-made changes first. Use the returned effective configuration when explaining what will happen. Initial enablement captures the current Git branch and returns target.branchName; autonomous work starts after the current turn ends. Calling again updates the configuration even when already enabled without changing the target; omitted options stay unchanged. The current tool-approval policy applies.",
        json!({
            "type": "object",
            "properties": {
                "enabled": { "type": "boolean", "description": "Whether Agent Merge should monitor and act on the pull request for this chat's folder. Pass true to update options while keeping it enabled." },
                "addressReviews": { "type": "boolean", "description": "Whether to address new pull request review comments. Omit to preserve the current option." },
                "fixCI": { "type": "boolean", "description": "Whether to fix failing CI checks. Omit to preserve the current option." },
                "resolveConflicts": { "type": "boolean", "description": "Whether to resolve merge conflicts and update a behind branch. Omit to preserve the current option." },
                "mergePullRequest": { "type": "string", "enum": MERGE_VALUES, "description": "When to merge automatically once ready: always, only while unchanged by Agent Merge, or never. Omit to preserve the current option." },
            },
            "required": ["enabled"],
        }),
    )
    .titled("Configure Agent Merge")
    .writes()
    .deferred()
    .not_read_only();
    let reply = ToolInfo::new(
        Group::AgentMerge,
        REPLY,
        "Reply to an unresolved review thread authorized for the active Agent Merge turn and optionally resolve it.",
        json!({
            "type": "object",
            "properties": {
                "threadId": { "type": "string", "description": "GraphQL node ID of an authorized unresolved review thread." },
                "body": { "type": "string", "description": "Concise reply describing how the feedback was addressed." },
                "resolve": { "type": "boolean", "description": "Whether to resolve the thread after posting the reply. Defaults to true." },
            },
            "required": ["threadId", "body"],
        }),
    )
    .titled("Reply to Agent Merge Review Thread")
    .writes()
    .deferred()
    .not_read_only();
    let rerun = ToolInfo::new(
        Group::AgentMerge,
        RERUN,
        "Rerun a GitHub Actions workflow associated with a failed required check in the active Agent Merge turn. If its current attempt is still running, Agent Merge defers the rerun until it finishes, provided CI repair remains enabled and the pull request head is unchanged. Continue other actionable work; do not poll or repeat a deferred request.",
        json!({
            "type": "object",
            "properties": {
                "runId": { "type": "string", "description": "GitHub Actions workflow run ID." },
                "failedJobsOnly": { "type": "boolean", "description": "Whether to rerun only failed jobs. Defaults to true." },
            },
            "required": ["runId"],
        }),
    )
    .titled("Rerun Agent Merge Workflow")
    .writes()
    .deferred()
    .not_read_only();
    vec![
        set,
        ToolInfo::new(
            Group::AgentMerge,
            READ_CI,
            "Read CI diagnostics for failed required checks authorized for the active Agent Merge turn. Defaults to a bounded summary of checks, annotations, jobs, failed steps, and failure excerpts. Use a returned evidenceId for a line-numbered tail, range, or literal search with context; pass a returned cursor alone to continue. Responses are capped at 48 KB and job downloads at 16 MiB/30 seconds. Summary pages also respect cache capacity; inspect a page before continuing. Cached evidence expires five minutes after its last summary or on eviction; use summary with jobId to reacquire just that job. Evidence is scoped to this turn, pull request head, workflow attempt, and job. A tail is the real end only when complete is true; a download limit is terminal, not evidence that the unseen log succeeded. Concurrent reads are queued, with waiting included in the three-minute call limit. Follow the returned operations rather than repeating the summary or using other GitHub tools.",
            json!({
                "type": "object",
                "properties": {
                    "mode": { "type": "string", "enum": ["summary", "tail", "range", "search"], "description": "Diagnostic operation. Defaults to summary." },
                    "evidenceId": { "type": "string", "description": "Host-owned job evidence ID returned by a summary." },
                    "jobId": { "type": "string", "description": "Select one authorized failed job in summary mode, including to reacquire expired or evicted evidence." },
                    "cursor": { "type": "string", "description": "Continuation returned by this tool. Pass alone; expired or stale cursors fail explicitly." },
                    "startLine": { "type": "integer", "minimum": 1, "description": "First line for range or search, inclusive. Defaults to 1." },
                    "startColumn": { "type": "integer", "minimum": 1, "description": "First column of a range, for continuing a long line. Defaults to 1." },
                    "endLine": { "type": "integer", "minimum": 1, "description": "Last range line, inclusive. At most 200 lines per requested range." },
                    "lineCount": { "type": "integer", "minimum": 1, "maximum": 200, "description": "Number of tail lines. Defaults to 100; response budget may return fewer." },
                    "query": { "type": "string", "minLength": 1, "maxLength": 200, "description": "Case-insensitive literal search text, not a regular expression." },
                    "contextLines": { "type": "integer", "minimum": 0, "maximum": 5, "description": "Lines surrounding each search match. Defaults to 2." },
                },
            }),
        )
        .titled("Read Agent Merge CI")
        .read_only()
        .deferred(),
        reply,
        rerun,
    ]
}

/// Runs one of the four; `None` for another tool's name.
pub async fn run(tools: &HostTools, host: &Host, name: &str, call: &ToolCall) -> Option<ToolResult> {
    Some(match name {
        SET => set_enabled(tools, host, call),
        READ_CI => read_ci(&call.input).and_then(|()| unauthorized("fixCI")),
        REPLY => reply_input(&call.input).and_then(|()| unauthorized("addressReviews")),
        RERUN => rerun_input(&call.input).and_then(|()| unauthorized("fixCI")),
        _ => return None,
    })
}

/// VS Code's refusal for a repair tool outside a repair turn, and its repair prompt's rule: stop
/// rather than try another way.
fn unauthorized(action: &str) -> ToolResult {
    Err(format!(
        "Agent Merge action '{action}' is not authorized for the active turn. Stop the turn without trying another method: do not use the GitHub CLI, GitHub MCP tools, or any other method for this action."
    ).into())
}

fn as_record<'a>(input: &'a Value, tool: &str) -> Result<&'a Map<String, Value>, Refusal> {
    input.as_object().ok_or_else(|| format!("Invalid {tool} input: expected an object.").into())
}

fn required_string(args: &Map<String, Value>, field: &str, tool: &str) -> Result<(), Refusal> {
    match args.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(()),
        _ => Err(format!("Invalid {tool} input: {field} must be a non-empty string.").into()),
    }
}

fn optional_bool(args: &Map<String, Value>, field: &str, tool: &str) -> Result<Option<bool>, Refusal> {
    match args.get(field) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be a boolean.").into()),
    }
}

fn reply_input(input: &Value) -> Result<(), Refusal> {
    let args = as_record(input, REPLY)?;
    required_string(args, "threadId", REPLY)?;
    required_string(args, "body", REPLY)?;
    optional_bool(args, "resolve", REPLY).map(|_| ())
}

fn rerun_input(input: &Value) -> Result<(), Refusal> {
    let args = as_record(input, RERUN)?;
    required_string(args, "runId", RERUN)?;
    optional_bool(args, "failedJobsOnly", RERUN).map(|_| ())
}

fn bounded(args: &Map<String, Value>, field: &str, min: u64, max: u64) -> Result<Option<u64>, Refusal> {
    match args.get(field) {
        None => Ok(None),
        Some(value) => match value.as_u64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(format!("Invalid {READ_CI} input: {field} must be an integer between {min} and {max}.").into()),
        },
    }
}

/// Checks a `readAgentMergeCI` request the way VS Code parses one: each mode takes its own fields,
/// a cursor comes alone.
fn read_ci(input: &Value) -> Result<(), Refusal> {
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
        return Err(format!("Invalid {READ_CI} input: unsupported fields or mode. Pass a cursor alone.").into());
    }
    if args.contains_key("cursor") {
        return required_string(args, "cursor", READ_CI);
    }
    if mode == "summary" {
        return match args.get("jobId") {
            None => Ok(()),
            Some(_) => required_string(args, "jobId", READ_CI),
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
    required_string(args, "query", READ_CI)?;
    let query = args.get("query").and_then(Value::as_str).unwrap_or("");
    if query.chars().count() > 200 || query.contains(['\r', '\n']) {
        return Err(format!("Invalid {READ_CI} input: query must be a single line of at most 200 characters.").into());
    }
    bounded(args, "contextLines", 0, 5).map(|_| ())
}

/// The options a `setAgentMergeEnabled` call names.
fn set_input(input: &Value) -> Result<(bool, Overrides), Refusal> {
    let args = as_record(input, SET)?;
    if args.keys().any(|k| !OPTIONS.contains(&k.as_str())) {
        return Err(format!("Invalid {SET} input: unsupported configuration option.").into());
    }
    let merge = match args.get("mergePullRequest") {
        None => None,
        Some(Value::String(m)) if MERGE_VALUES.contains(&m.as_str()) => Some(m.clone()),
        Some(_) => {
            return Err(format!("Invalid {SET} input: mergePullRequest must be always, ifUnchanged, or never.").into())
        }
    };
    let enabled = match args.get("enabled") {
        Some(Value::Bool(b)) => *b,
        _ => return Err(format!("Invalid {SET} input: enabled must be a boolean.").into()),
    };
    Ok((
        enabled,
        Overrides {
            address_reviews: optional_bool(args, "addressReviews", SET)?,
            fix_ci: optional_bool(args, "fixCI", SET)?,
            resolve_conflicts: optional_bool(args, "resolveConflicts", SET)?,
            merge_pull_request: merge,
        },
    ))
}

fn set_enabled(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    let (enabled, asked) = set_input(&call.input)?;
    let session = call
        .session
        .clone()
        .ok_or_else(|| format!("{SET} configures the folder of the chat it is called from, and this call has none."))?;
    let folder = {
        let mut core = host.lock();
        if !host.ensure_loaded(&mut core, &session) {
            return Err(format!("Agent Merge cannot be configured for unknown session {session}.").into());
        }
        core.session(&session).and_then(|m| m.working_directory.clone())
    };
    let Some(folder) = folder else {
        return Err("Agent Merge cannot be enabled for a session without a working directory.".into());
    };
    let key = (session, folder.clone());
    let current = tools.state().agent_merge.folders.get(&key).cloned().unwrap_or_default();
    let target = match (&current.target, enabled) {
        (Some(target), _) => Some(target.clone()),
        (None, true) => Some(current_branch(&folder).ok_or_else(|| {
            "Agent Merge cannot be enabled because the current Git branch could not be determined.".to_owned()
        })?),
        (None, false) => None,
    };
    let next = FolderMerge { enabled, overrides: merged(&current.overrides, &asked), target };
    let answer = configuration_of(&next);
    tools.state().agent_merge.folders.insert(key, next);
    Ok(answer.to_string())
}

fn merged(current: &Overrides, asked: &Overrides) -> Overrides {
    Overrides {
        address_reviews: asked.address_reviews.or(current.address_reviews),
        fix_ci: asked.fix_ci.or(current.fix_ci),
        resolve_conflicts: asked.resolve_conflicts.or(current.resolve_conflicts),
        merge_pull_request: asked.merge_pull_request.clone().or_else(|| current.merge_pull_request.clone()),
    }
}

/// The configuration in force for a folder, as VS Code answers it: its defaults under the
/// folder's options, and whether (and on what branch) it is watching.
fn configuration_of(folder: &FolderMerge) -> Value {
    let o = &folder.overrides;
    let configuration = json!({
        "addressReviews": o.address_reviews.unwrap_or(true),
        "fixCI": o.fix_ci.unwrap_or(true),
        "resolveConflicts": o.resolve_conflicts.unwrap_or(true),
        "mergePullRequest": o.merge_pull_request.clone().unwrap_or_else(|| "never".to_owned()),
        "mergeMethod": "auto",
        "replyAttribution": true,
    });
    if !folder.enabled {
        return json!({ "enabled": false, "configuration": configuration, "monitoring": "disabled" });
    }
    json!({
        "enabled": true,
        "configuration": configuration,
        "monitoring": "waitingForPullRequest",
        "target": { "branchName": folder.target },
    })
}

/// The branch checked out in `folder` (or the repository above it), read from Git's own files.
fn current_branch(folder: &Path) -> Option<String> {
    let mut dir = Some(folder);
    while let Some(here) = dir {
        let dot_git = here.join(".git");
        let git_dir = if dot_git.is_dir() {
            Some(dot_git)
        } else if dot_git.is_file() {
            // A worktree: `.git` names the folder that holds its HEAD.
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let path = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
            Some(if path.is_absolute() { path } else { here.join(path) })
        } else {
            None
        };
        if let Some(git_dir) = git_dir {
            let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
            let branch = head.trim().strip_prefix("ref: refs/heads/")?;
            return (!branch.is_empty()).then(|| branch.to_owned());
        }
        dir = here.parent();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_persist_and_merging_is_off_until_asked() {
        let folder = FolderMerge { enabled: true, overrides: Overrides::default(), target: Some("feature".into()) };
        let answer = configuration_of(&folder);
        assert_eq!(answer["configuration"]["mergePullRequest"], "never");
        let asked = set_input(&json!({ "enabled": true, "mergePullRequest": "always" })).expect("valid").1;
        let later =
            merged(&merged(&folder.overrides, &asked), &Overrides { fix_ci: Some(false), ..Overrides::default() });
        assert_eq!(later.merge_pull_request.as_deref(), Some("always"), "omitted options stay unchanged");
        assert_eq!(later.fix_ci, Some(false));
    }

    #[test]
    fn input_is_checked_in_vs_codes_words() {
        for bad in [
            json!(null),
            json!({}),
            json!({ "enabled": "true" }),
            json!({ "enabled": true, "mergePullRequest": "sometimes" }),
            json!({ "enabled": true, "session": "x" }),
        ] {
            assert!(set_input(&bad).expect_err("refused").starts_with("Invalid setAgentMergeEnabled input"), "{bad}");
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
    }

    #[test]
    fn the_branch_is_read_from_git_head_and_a_worktree_file() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(current_branch(&dir.path().join("nowhere")), None);
        std::fs::create_dir_all(dir.path().join("repo/.git")).expect("git dir");
        std::fs::write(dir.path().join("repo/.git/HEAD"), "ref: refs/heads/feature\n").expect("head");
        std::fs::create_dir_all(dir.path().join("repo/src")).expect("src");
        assert_eq!(current_branch(&dir.path().join("repo/src")).as_deref(), Some("feature"));
        std::fs::create_dir_all(dir.path().join("wt-git")).expect("wt git dir");
        std::fs::write(dir.path().join("wt-git/HEAD"), "ref: refs/heads/tools\n").expect("head");
        std::fs::create_dir_all(dir.path().join("wt")).expect("wt");
        std::fs::write(dir.path().join("wt/.git"), format!("gitdir: {}\n", dir.path().join("wt-git").display()))
            .expect("file");
        assert_eq!(current_branch(&dir.path().join("wt")).as_deref(), Some("tools"));
    }
}

//! `list_sessions` and `get_current_session`: the catalogue's rows as the reference host serializes
//! them, from the same store `listSessions` answers from, each with its `openLink` and, when the
//! session has a chat that is not its default, its `chats`.

use std::collections::HashSet;

use ahp_types::state::{ChatInteractivity, ChatOrigin, SessionChatSummary, SessionSummary};
use serde_json::{json, Map, Value};

use super::super::{Refusal, ToolCall, ToolResult};
use super::{calling_session, links, remote, ListSessions};
use crate::host::facade::status;
use crate::host::{Core, Host};

/// The status names `list_sessions` filters by.
pub const STATUS_VALUES: [&str; 5] = ["idle", "inProgress", "inputNeeded", "error", "archived"];

/// A status bitset in the reference host's words: `inputNeeded` before `inProgress` (its bits
/// include it), then `error`, then `archived`.
pub fn status_names(bits: u32) -> Vec<&'static str> {
    let mut names = Vec::new();
    if bits & status::INPUT_NEEDED == status::INPUT_NEEDED {
        names.push("inputNeeded");
    } else if bits & status::IN_PROGRESS != 0 {
        names.push("inProgress");
    } else if bits & status::IDLE != 0 {
        names.push("idle");
    }
    if bits & status::ERROR != 0 {
        names.push("error");
    }
    if bits & status::IS_ARCHIVED != 0 {
        names.push("archived");
    }
    names
}

fn status_words(bits: u32) -> String {
    let names = status_names(bits);
    if names.is_empty() {
        "unknown".to_owned()
    } else {
        names.join(",")
    }
}

/// `list_sessions`: this host's sessions and the remote hosts', newest first; a remote's row
/// names its machine (`remote`) and its link the agent there (`<agent>@<remote>`).
pub fn list_sessions(host: &Host, _call: &ToolCall, args: ListSessions) -> ToolResult {
    let filters = Filters::parse(args)?;
    let elsewhere = remote::summaries(host);
    let remote_uris: HashSet<String> = elsewhere.iter().map(|s| s.resource.clone()).collect();
    let mut core = host.lock();
    let mut summaries = catalogue(&core)?;
    summaries.extend(elsewhere);
    // The store pages newest first; the remotes' sessions take their places among them.
    summaries.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
    let rows: Vec<Value> = summaries
        .iter()
        .filter(|s| filters.admits(s))
        .map(|s| {
            let mut row = row(&mut core, host, s);
            if let Some(machine) = remote::machine(s, &remote_uris) {
                row.insert("remote".into(), json!(machine));
            }
            Value::Object(row)
        })
        .collect();
    Ok(json!({ "sessions": rows }).to_string())
}

/// `get_current_session`.
pub fn get_current_session(host: &Host, call: &ToolCall) -> ToolResult {
    let session = calling_session(call, "get_current_session needs a calling session.")?;
    let mut core = host.lock();
    let summary = core.summary_of(session).ok_or_else(|| "get_current_session needs a calling session.".to_owned())?;
    Ok(Value::Object(row(&mut core, host, &summary)).to_string())
}

/// Every stored session's summary, newest first (the store is the catalogue: sessions in memory
/// write theirs whenever it changes).
fn catalogue(core: &Core) -> Result<Vec<SessionSummary>, Refusal> {
    let mut all = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let page = core
            .store()
            .page(after.as_ref().map(|(m, u)| (m.as_str(), u.as_str())), 1000)
            .map_err(|e| e.to_string())?;
        all.extend(page.items.into_iter().filter_map(|v| serde_json::from_value::<SessionSummary>(v).ok()));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
}

/// One row, as the reference host serializes a session, with this host's `chats`.
pub fn row(core: &mut Core, host: &Host, summary: &SessionSummary) -> Map<String, Value> {
    let session = summary.resource.as_str();
    let mut row = Map::new();
    row.insert("session".into(), json!(session));
    row.insert("openLink".into(), json!(links::session_link(&summary.provider, session)));
    if !summary.title.is_empty() {
        row.insert("title".into(), json!(summary.title));
    }
    row.insert("status".into(), json!(status_words(summary.status)));
    if let Some(activity) = summary.activity.as_ref().filter(|a| !a.is_empty()) {
        row.insert("activity".into(), json!(activity));
    }
    if let Some(dirs) = summary.working_directories.as_ref().filter(|d| !d.is_empty()) {
        row.insert("workingDirectory".into(), json!(dirs[0]));
        if dirs.len() > 1 {
            row.insert("workingDirectories".into(), json!(dirs));
        }
    }
    if let Some(project) = &summary.project {
        row.insert("project".into(), json!(project.display_name));
        row.insert("projectUri".into(), json!(project.uri));
    }
    if summary.status & status::IS_READ == 0 {
        row.insert("unread".into(), json!(true));
    }
    row.insert("createdAt".into(), json!(summary.created_at));
    row.insert("modifiedAt".into(), json!(summary.modified_at));
    if let Some(changes) = summary.changes.as_ref().filter(|_| has_changes(summary)) {
        row.insert("changes".into(), json!(changes));
    }
    if let Some(chats) = chats(core, host, summary) {
        row.insert("chats".into(), Value::Array(chats));
    }
    row
}

/// The row's chats: the default first with `main: true`, then each other chat a person can see;
/// absent when the default is the only one.
fn chats(core: &mut Core, host: &Host, summary: &SessionSummary) -> Option<Vec<Value>> {
    let session = summary.resource.as_str();
    let default = summary.default_chat.as_deref()?;
    let listed = summary.chats.as_ref()?;
    let others: Vec<&SessionChatSummary> = listed.iter().filter(|c| c.resource != default && visible(c)).collect();
    if others.is_empty() {
        return None;
    }
    // Which agent each chat runs is on its record: load the session to read it.
    host.ensure_loaded(core, session);
    let mut out = Vec::new();
    let main = listed.iter().find(|c| c.resource == default);
    let mut first = json!({
        "title": main.map(|c| c.title.clone()).unwrap_or_else(|| summary.title.clone()),
        "openLink": links::session_link(&summary.provider, session),
        "main": true,
    });
    if let Some(bits) = main.and_then(|c| c.status) {
        first["status"] = json!(status_words(bits));
    }
    out.push(first);
    for chat in others {
        let mut entry = json!({
            "title": chat.title,
            "openLink": links::chat_link(&summary.provider, session, &chat.resource, Some(default)),
        });
        if let Some(bits) = chat.status {
            entry["status"] = json!(status_words(bits));
        }
        if let Some(harness) = super::harness_of(core, &chat.resource) {
            entry["harness"] = json!(harness);
        }
        out.push(entry);
    }
    Some(out)
}

/// A tool's chat and a hidden one are left out, as VS Code's host leaves both out.
fn visible(chat: &SessionChatSummary) -> bool {
    !matches!(chat.origin, Some(ChatOrigin::Tool { .. })) && chat.interactivity != Some(ChatInteractivity::Hidden)
}

/// `list_sessions`' filters.
struct Filters {
    session: Option<String>,
    status: Option<Vec<String>>,
    workspace: Option<String>,
    with_changes: bool,
    unread: bool,
    with_pull_request: bool,
    include_archived: bool,
    created_after: Option<i64>,
    created_before: Option<i64>,
}

impl Filters {
    fn parse(args: ListSessions) -> Result<Self, Refusal> {
        const TOOL: &str = "list_sessions";
        let status = match &args.status {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                let names: Vec<String> = items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
                let invalid: Vec<&str> =
                    names.iter().map(String::as_str).filter(|n| !STATUS_VALUES.contains(n)).collect();
                if !invalid.is_empty() {
                    return Err(format!(
                        "Invalid {TOOL} input: unknown status value(s) {}. Valid values: {}.",
                        invalid.join(", "),
                        STATUS_VALUES.join(", ")
                    )
                    .into());
                }
                Some(names)
            }
            Some(_) => return Err(format!("Invalid {TOOL} input: status must be an array of status names.").into()),
        };
        Ok(Self {
            session: non_empty(TOOL, args.session, "session")?,
            status,
            workspace: non_empty(TOOL, args.workspace, "workspace")?,
            with_changes: args.with_changes.unwrap_or(false),
            unread: args.unread.unwrap_or(false),
            with_pull_request: args.with_pull_request.unwrap_or(false),
            include_archived: args.include_archived.unwrap_or(false),
            created_after: timestamp(TOOL, args.created_after.as_ref(), "createdAfter")?,
            created_before: timestamp(TOOL, args.created_before.as_ref(), "createdBefore")?,
        })
    }

    fn admits(&self, s: &SessionSummary) -> bool {
        if let Some(asked) = &self.session {
            // A direct lookup ignores every other filter.
            let wanted = links::parse(asked).map(|t| t.session).unwrap_or_else(|| asked.clone());
            return s.resource == wanted;
        }
        let names = status_names(s.status);
        if let Some(status) = &self.status {
            if !names.iter().any(|n| status.iter().any(|x| x == n)) {
                return false;
            }
        }
        if let Some(workspace) = &self.workspace {
            if !matches_workspace(s, workspace) {
                return false;
            }
        }
        // What a session changed is on its summary (its worktree's branch, or what its turns
        // changed); this host keeps no pull requests on a session yet.
        if self.with_changes && !has_changes(s) {
            return false;
        }
        if self.with_pull_request {
            return false;
        }
        if self.unread && s.status & status::IS_READ != 0 {
            return false;
        }
        let asks_archived = self.status.as_ref().is_some_and(|st| st.iter().any(|x| x == "archived"));
        if !self.include_archived && !asks_archived && s.status & status::IS_ARCHIVED != 0 {
            return false;
        }
        let created = s.created_at.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).unwrap_or(0);
        if self.created_after.is_some_and(|after| created < after) {
            return false;
        }
        if self.created_before.is_some_and(|before| created > before) {
            return false;
        }
        true
    }
}

/// True when a session changed at least one file.
fn has_changes(s: &SessionSummary) -> bool {
    s.changes.as_ref().and_then(|c| c.files).is_some_and(|n| n > 0)
}

fn non_empty(tool: &str, given: Option<String>, field: &str) -> Result<Option<String>, Refusal> {
    match given {
        Some(s) if s.is_empty() => Err(format!("Invalid {tool} input: {field} must be a non-empty string.").into()),
        other => Ok(other),
    }
}

fn timestamp(tool: &str, given: Option<&Value>, field: &str) -> Result<Option<i64>, Refusal> {
    match given {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => s.parse::<jiff::Timestamp>().map(|t| Some(t.as_millisecond())).map_err(|_| {
            format!("Invalid {tool} input: {field} must be a valid ISO-8601 timestamp (e.g. 2025-01-31T00:00:00Z).")
                .into()
        }),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be an ISO-8601 timestamp string.").into()),
    }
}

/// A project name, a project URI, or a working directory (path or `file://` URI).
fn matches_workspace(s: &SessionSummary, workspace: &str) -> bool {
    if s.project.as_ref().is_some_and(|p| p.display_name.eq_ignore_ascii_case(workspace) || p.uri == workspace) {
        return true;
    }
    let wanted = as_file_uri(workspace);
    s.working_directories.iter().flatten().any(|d| as_file_uri(d) == wanted)
}

fn as_file_uri(text: &str) -> String {
    let uri = if text.starts_with('/') { format!("file://{text}") } else { text.to_owned() };
    uri.trim_end_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_match_the_reference() {
        assert_eq!(status_names(status::IDLE), vec!["idle"]);
        assert_eq!(status_names(status::INPUT_NEEDED), vec!["inputNeeded"]);
        assert_eq!(status_names(status::IN_PROGRESS | status::ERROR), vec!["inProgress", "error"]);
        assert_eq!(status_names(status::IDLE | status::IS_ARCHIVED | status::IS_READ), vec!["idle", "archived"]);
        assert_eq!(status_words(0), "unknown");
    }

    #[test]
    fn a_bad_status_filter_names_the_valid_ones() {
        let args: ListSessions = serde_json::from_value(json!({ "status": ["busy"] })).expect("arguments");
        let refused = Filters::parse(args).err().unwrap_or_default();
        assert_eq!(
            refused,
            "Invalid list_sessions input: unknown status value(s) busy. Valid values: idle, inProgress, inputNeeded, error, archived."
        );
    }
}

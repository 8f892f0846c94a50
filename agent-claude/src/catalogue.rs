//! Claude's own sessions, read from its files without starting anything: the transcripts under
//! `<config dir>/projects/<encoded working directory>/<session id>.jsonl`, listed, found by id,
//! and read back as AHP turns.
//!
//! A transcript is one JSON entry per line. The entries read here: `user` (a person's prompt
//! opens a turn under its `uuid`; `tool_result` blocks finish calls; local-command echoes and
//! meta entries are skipped), `assistant` (one content block per entry), `system` with subtype
//! `compact_boundary`, and the title entries (`custom-title`, `ai-title`, `summary`). Everything
//! else is skipped. A call the record holds no result for never finished: it is read back
//! cancelled (`skipped`), and so is the turn holding it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ahp_types::state::Turn;
use protocol::{At, Listed};
use serde_json::{json, Value};

use agent_runner::listing::title_from;

use crate::tools::{self, name_call, Owner};

/// Claude's folder name for a working directory: every character that is not a letter or a
/// digit becomes `-`.
pub fn encode_dir(path: &str) -> String {
    path.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// True for an id that can only name a file in a projects folder (no separators, no dots).
fn safe_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn read_entries(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

fn file_uri(path: &str) -> String {
    format!("file://{path}")
}

/// The rows listed before, so listing again reads only the transcripts that changed.
pub use agent_runner::listing::Summaries;

/// Every session under `projects`, newest first, reading again only the files `summaries` has
/// not read as they are now.
pub fn list(summaries: &mut Summaries, projects: &Path) -> Vec<Listed> {
    summaries.list(projects, summarize)
}

/// The file of session `id`: in the folder of `at.workingDirectory` first, then anywhere.
pub fn locate(projects: &Path, id: &str, at: &At) -> Option<PathBuf> {
    if !safe_id(id) {
        return None;
    }
    let name = format!("{id}.jsonl");
    if let Some(dir) = &at.working_directory {
        let path = projects.join(encode_dir(dir)).join(&name);
        if path.is_file() {
            return Some(path);
        }
    }
    let dirs = std::fs::read_dir(projects).ok()?;
    dirs.flatten().map(|d| d.path().join(&name)).find(|p| p.is_file())
}

/// The row `list` gives for session `id`.
pub fn find(projects: &Path, id: &str, at: &At) -> Option<Listed> {
    locate(projects, id, at).and_then(|f| summarize(&f))
}

/// A person's prompt in a `user` entry: its text, or `None` for tool results, meta entries and
/// the CLI's own echoes.
fn prompt_text(entry: &Value) -> Option<String> {
    if entry["type"] != "user" || entry["isMeta"] == Value::Bool(true) || entry["isCompactSummary"] == Value::Bool(true)
    {
        return None;
    }
    if entry["isSidechain"] == Value::Bool(true) {
        return None;
    }
    let content = &entry["message"]["content"];
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            if blocks.iter().any(|b| b["type"] == "tool_result") {
                return None;
            }
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        }
        _ => return None,
    };
    let trimmed = text.trim_start();
    if trimmed.is_empty()
        || trimmed.starts_with("<local-command")
        || trimmed.starts_with("<command-name>")
        || trimmed.starts_with("<system-reminder>")
        || trimmed.starts_with("[Request interrupted by user")
    {
        return None;
    }
    Some(text)
}

fn summarize(file: &Path) -> Option<Listed> {
    let id = file.file_stem()?.to_str()?.to_owned();
    let entries = read_entries(file);
    let first_prompt = entries.iter().find_map(prompt_text)?;
    let title = entries
        .iter()
        .rev()
        .find_map(|e| match e["type"].as_str() {
            Some("custom-title") => e["customTitle"].as_str().or(e["title"].as_str()),
            Some("ai-title") => e["aiTitle"].as_str().or(e["title"].as_str()),
            Some("summary") => e["summary"].as_str(),
            _ => None,
        })
        .map(str::to_owned)
        .unwrap_or_else(|| title_from(&first_prompt));
    let stamps: Vec<&str> = entries.iter().filter_map(|e| e["timestamp"].as_str()).collect();
    let modified =
        std::fs::metadata(file).and_then(|m| m.modified()).ok().and_then(|t| jiff::Timestamp::try_from(t).ok());
    let created_at = stamps.first().map(|s| (*s).to_owned()).or_else(|| modified.map(|t| t.to_string()))?;
    let modified_at = stamps.last().map(|s| (*s).to_owned()).unwrap_or_else(|| created_at.clone());
    let cwd = entries.iter().find_map(|e| e["cwd"].as_str());
    Some(Listed { id, title, created_at, modified_at, working_directories: cwd.map(file_uri).into_iter().collect() })
}

/// One turn being read back.
struct Reading {
    id: String,
    started_at: Option<String>,
    last_at: Option<String>,
    text: String,
    parts: Vec<Value>,
    /// Tool-use id → index into `parts`.
    calls: HashMap<String, usize>,
    cancelled: bool,
    usage: (i64, i64, i64),
    model: Option<String>,
    next_part: usize,
}

impl Reading {
    fn part_id(&mut self) -> String {
        let id = format!("{}:{}", self.id, self.next_part);
        self.next_part += 1;
        id
    }

    fn finish(self) -> Option<Turn> {
        let mut cancelled = self.cancelled;
        let parts: Vec<Value> = self
            .parts
            .into_iter()
            .map(|mut part| {
                if part["toolCall"]["status"] == "running" {
                    // No result in the record: the call never finished.
                    cancelled = true;
                    let call = &mut part["toolCall"];
                    call["status"] = json!("cancelled");
                    call["reason"] = json!("skipped");
                    if let Value::Object(map) = call {
                        map.remove("confirmed");
                    }
                }
                part
            })
            .collect();
        let duration = match (&self.started_at, &self.last_at) {
            (Some(a), Some(b)) => match (a.parse::<jiff::Timestamp>(), b.parse::<jiff::Timestamp>()) {
                (Ok(a), Ok(b)) => Some((b.as_millisecond() - a.as_millisecond()).max(0)),
                _ => None,
            },
            _ => None,
        };
        let (input, output, cache_read) = self.usage;
        let turn = json!({
            "id": self.id,
            "startedAt": self.started_at,
            "duration": duration,
            "message": {"text": self.text, "origin": {"kind": "user"}},
            "responseParts": parts,
            "usage": if input + output > 0 { json!({"inputTokens": input, "outputTokens": output, "cacheReadTokens": cache_read, "model": self.model}) } else { Value::Null },
            "state": if cancelled { "cancelled" } else { "complete" },
        });
        let turn = strip_nulls(turn);
        match serde_json::from_value::<Turn>(turn) {
            Ok(turn) => Some(turn),
            Err(e) => {
                tracing::warn!(error = %e, "a transcript turn could not be read back");
                None
            }
        }
    }
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// Session `id` read back as turns, oldest first; `None` when there is no record of it.
pub fn transcript(projects: &Path, id: &str, at: &At, kept: &[protocol::KeptResource]) -> Option<Vec<Turn>> {
    let file = locate(projects, id, at)?;
    Some(turns_of(&read_entries(&file), kept))
}

/// The turns a transcript's entries hold; `kept` is what the host kept of its tool results'
/// images (seed 004's `kept`), each named again by its reference.
pub fn turns_of(entries: &[Value], kept: &[protocol::KeptResource]) -> Vec<Turn> {
    let mut turns = Vec::new();
    let mut current: Option<Reading> = None;
    for entry in entries {
        if entry["isSidechain"] == Value::Bool(true) {
            continue;
        }
        if let Some(text) = prompt_text(entry) {
            if let Some(done) = current.take() {
                turns.extend(done.finish());
            }
            let stamp = entry["timestamp"].as_str().map(str::to_owned);
            current = Some(Reading {
                id: entry["uuid"].as_str().unwrap_or_default().to_owned(),
                started_at: stamp.clone(),
                last_at: stamp,
                text,
                parts: Vec::new(),
                calls: HashMap::new(),
                cancelled: false,
                usage: (0, 0, 0),
                model: None,
                next_part: 0,
            });
            continue;
        }
        let Some(turn) = current.as_mut() else { continue };
        if let Some(stamp) = entry["timestamp"].as_str() {
            turn.last_at = Some(stamp.to_owned());
        }
        match entry["type"].as_str() {
            Some("assistant") => read_assistant(turn, &entry["message"]),
            Some("user") => read_user(turn, entry, &agent_runner::KeptLookup(kept)),
            Some("system") if entry["subtype"] == "compact_boundary" => {
                turn.parts.push(json!({"kind": "systemNotification", "content": "The conversation was compacted."}));
            }
            _ => {}
        }
    }
    if let Some(done) = current.take() {
        turns.extend(done.finish());
    }
    turns
}

fn read_assistant(turn: &mut Reading, message: &Value) {
    let usage = &message["usage"];
    turn.usage.0 += usage["input_tokens"].as_i64().unwrap_or(0);
    turn.usage.1 += usage["output_tokens"].as_i64().unwrap_or(0);
    turn.usage.2 += usage["cache_read_input_tokens"].as_i64().unwrap_or(0);
    if let Some(model) = message["model"].as_str() {
        turn.model = Some(model.to_owned());
    }
    for block in message["content"].as_array().map(Vec::as_slice).unwrap_or_default() {
        match block["type"].as_str() {
            Some("text") => {
                let id = turn.part_id();
                turn.parts.push(json!({"kind": "markdown", "id": id, "content": block["text"]}));
            }
            Some("thinking") => {
                let id = turn.part_id();
                turn.parts.push(json!({"kind": "reasoning", "id": id, "content": block["thinking"]}));
            }
            Some("tool_use") => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else { continue };
                let named = name_call(name, &[]);
                let input = &block["input"];
                let mut call = json!({
                    "status": "running",
                    "toolCallId": id,
                    "toolName": named.tool_name,
                    "displayName": named.display_name,
                    "invocationMessage": tools::invocation_message(&named, input),
                    "toolInput": input.to_string(),
                    "confirmed": "not-needed",
                });
                if let Some(contributor) = named.contributor() {
                    call["contributor"] = serde_json::to_value(contributor).unwrap_or(Value::Null);
                }
                if named.owner == Owner::Question {
                    call["displayName"] = json!("Question");
                }
                turn.calls.insert(id.to_owned(), turn.parts.len());
                turn.parts.push(json!({"kind": "toolCall", "toolCall": call}));
            }
            _ => {}
        }
    }
}

fn read_user(turn: &mut Reading, entry: &Value, kept: &agent_runner::KeptLookup<'_>) {
    let content = &entry["message"]["content"];
    if let Value::Array(blocks) = content {
        for block in blocks {
            match block["type"].as_str() {
                Some("tool_result") => {
                    let Some(index) = block["tool_use_id"].as_str().and_then(|id| turn.calls.get(id)).copied() else {
                        continue;
                    };
                    let success = block["is_error"] != Value::Bool(true);
                    let text = tools::result_text(&block["content"]);
                    let call = &mut turn.parts[index]["toolCall"];
                    let named = name_call(call["toolName"].as_str().unwrap_or(""), &[]);
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    let images = tools::result_images(&block["content"], id, &named.tool_name, kept);
                    let input: Value =
                        call["toolInput"].as_str().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Value::Null);
                    call["status"] = json!("completed");
                    call["success"] = json!(success);
                    call["pastTenseMessage"] = json!(tools::past_tense_message(&named, &input, success));
                    let mut shown =
                        if text.is_empty() { Vec::new() } else { vec![json!({"type": "text", "text": text})] };
                    shown.extend(images.iter().filter_map(|c| serde_json::to_value(c).ok()));
                    if !shown.is_empty() {
                        call["content"] = Value::Array(shown);
                    }
                    if !success {
                        call["error"] = json!(text);
                    }
                }
                Some("text")
                    if block["text"].as_str().is_some_and(|t| t.starts_with("[Request interrupted by user")) =>
                {
                    turn.cancelled = true;
                }
                _ => {}
            }
        }
    } else if content.as_str().is_some_and(|t| t.starts_with("[Request interrupted by user")) {
        turn.cancelled = true;
    }
}

/// The chain entry the first of `prompts` (uuids of prompt entries, oldest first) follows in a
/// record: where a copy that leaves those prompts out ends. None when none of them is on it.
pub fn entry_before(record: &str, prompts: &[&str]) -> Option<String> {
    record.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok()).find_map(|entry| {
        let uuid = entry["uuid"].as_str()?;
        if !prompts.contains(&uuid) {
            return None;
        }
        entry["parentUuid"].as_str().map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{ResponsePart, ToolCallState, TurnState};

    fn entries() -> Vec<Value> {
        vec![
            json!({"type": "queue-operation", "operation": "enqueue"}),
            json!({"type": "user", "uuid": "u1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w",
                   "message": {"role": "user", "content": [{"type": "text", "text": "run it"}]}}),
            json!({"type": "assistant", "uuid": "a1", "timestamp": "2026-01-01T00:00:00.500Z",
                   "message": {"model": "claude-x", "content": [{"type": "thinking", "thinking": "hm"}], "usage": {"input_tokens": 5, "output_tokens": 2}}}),
            json!({"type": "assistant", "uuid": "a2", "message": {"content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}}),
            json!({"type": "user", "uuid": "r1", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"}]}}),
            json!({"type": "assistant", "uuid": "a3", "timestamp": "2026-01-01T00:00:02.000Z", "message": {"content": [{"type": "text", "text": "done"}]}}),
            json!({"type": "user", "uuid": "m1", "isMeta": true, "message": {"role": "user", "content": "<local-command-caveat>x"}}),
            json!({"type": "user", "uuid": "u2", "timestamp": "2026-01-01T00:01:00.000Z", "message": {"role": "user", "content": "second"}}),
            json!({"type": "assistant", "uuid": "a4", "message": {"content": [{"type": "tool_use", "id": "toolu_2", "name": "Write", "input": {"file_path": "/w/x"}}]}}),
            json!({"type": "user", "uuid": "i1", "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user for tool use]"}]}}),
        ]
    }

    #[test]
    fn a_picture_read_back_is_named_by_what_the_host_kept_or_left_out() {
        let image = |data: &str| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
        let entries = vec![
            json!({"type": "user", "uuid": "u1", "message": {"role": "user", "content": [{"type": "text", "text": "look"}]}}),
            json!({"type": "assistant", "uuid": "a1", "message": {"content": [
                {"type": "tool_use", "id": "toolu_1", "name": "mcp__probe__screenshot", "input": {}}]}}),
            json!({"type": "user", "uuid": "r1", "message": {"role": "user", "content": [{"type": "tool_result",
                "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "two"}, image("iVBO"), image("AAAA")]}]}}),
        ];
        let content_ref = ahp_types::state::ContentRef {
            uri: "session-db-resource:/s/c/toolu_1/1".into(),
            size_hint: Some(3),
            content_type: Some("image/png".into()),
            nonce: None,
        };
        let kept = [protocol::KeptResource { call_id: "toolu_1".into(), index: 1, content_ref }];
        let turns = turns_of(&entries, &kept);
        let ResponsePart::ToolCall(call) = &turns[0].response_parts[0] else { panic!("a tool call") };
        let ToolCallState::Completed(done) = &call.tool_call else { panic!("completed: {:?}", call.tool_call) };
        let shown = serde_json::to_value(&done.content).expect("content");
        assert_eq!(
            shown,
            json!([
                {"type": "text", "text": "two"},
                {"type": "resource", "uri": "session-db-resource:/s/c/toolu_1/1", "sizeHint": 3, "contentType": "image/png"},
                {"type": "text", "text": "An image was left out: ahpd kept no copy of it."},
            ])
        );
    }

    #[test]
    fn reads_turns_with_their_parts_and_endings() {
        let turns = turns_of(&entries(), &[]);
        assert_eq!(turns.len(), 2);
        let first = &turns[0];
        assert_eq!(first.id, "u1");
        assert_eq!(first.message.text, "run it");
        assert_eq!(first.state, TurnState::Complete);
        assert_eq!(first.duration, Some(2000));
        assert!(matches!(first.response_parts[0], ResponsePart::Reasoning(_)));
        let ResponsePart::ToolCall(call) = &first.response_parts[1] else { panic!("a tool call") };
        let ToolCallState::Completed(done) = &call.tool_call else { panic!("completed: {:?}", call.tool_call) };
        assert_eq!(done.tool_call_id, "toolu_1");
        assert!(done.success);
        assert!(matches!(first.response_parts[2], ResponsePart::Markdown(_)));
        let second = &turns[1];
        assert_eq!(second.state, TurnState::Cancelled);
        let ResponsePart::ToolCall(call) = &second.response_parts[0] else { panic!("a tool call") };
        assert!(matches!(call.tool_call, ToolCallState::Cancelled(_)));
    }

    /// A fresh projects folder for test `name`, and in it the folder Claude keeps `working_directory`'s
    /// sessions in.
    fn projects_with_folder(name: &str, working_directory: &str) -> (PathBuf, PathBuf) {
        let root = std::env::temp_dir().join(format!("ahpd-claude-{name}-{}", std::process::id()));
        let dir = root.join(encode_dir(working_directory));
        std::fs::create_dir_all(&dir).expect("mkdir");
        (root, dir)
    }

    #[test]
    fn lists_and_finds_sessions_by_folder_and_id() {
        let (root, dir) = projects_with_folder("catalogue", "/w");
        let lines: Vec<String> = entries().iter().map(Value::to_string).collect();
        std::fs::write(dir.join("11111111-2222-3333-4444-555555555555.jsonl"), lines.join("\n")).expect("write");
        std::fs::write(dir.join("22222222-2222-3333-4444-555555555555.jsonl"), "{\"type\":\"queue-operation\"}\n")
            .expect("write");
        let rows = list(&mut Summaries::default(), &root);
        assert_eq!(rows.len(), 1, "a file without a prompt is not a session: {rows:?}");
        assert_eq!(rows[0].title, "run it");
        assert_eq!(rows[0].working_directories, vec!["file:///w".to_owned()]);
        let at = At { working_directory: Some("/w".into()) };
        assert_eq!(
            find(&root, "11111111-2222-3333-4444-555555555555", &at).map(|r| r.id),
            Some("11111111-2222-3333-4444-555555555555".into())
        );
        assert!(find(&root, "../etc", &At::default()).is_none());
        assert_eq!(
            transcript(&root, "11111111-2222-3333-4444-555555555555", &At::default(), &[]).map(|t| t.len()),
            Some(2)
        );
        assert!(transcript(&root, "33333333-2222-3333-4444-555555555555", &At::default(), &[]).is_none());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn listing_again_reads_only_the_files_that_changed() {
        let (root, dir) = projects_with_folder("summaries", "/w");
        let lines: Vec<String> = entries().iter().map(Value::to_string).collect();
        let (a, b) = (dir.join("aaaaaaaa-1.jsonl"), dir.join("bbbbbbbb-1.jsonl"));
        std::fs::write(&a, lines.join("\n")).expect("write");
        std::fs::write(&b, lines.join("\n")).expect("write");
        let mut summaries = Summaries::default();
        assert_eq!(list(&mut summaries, &root).len(), 2);
        assert_eq!(summaries.reads(), 2);
        assert_eq!(list(&mut summaries, &root).len(), 2);
        assert_eq!(summaries.reads(), 2, "nothing changed, nothing read");
        let titled = json!({"type": "custom-title", "customTitle": "renamed"});
        std::fs::write(&a, format!("{}\n{titled}", lines.join("\n"))).expect("write");
        let rows = list(&mut summaries, &root);
        assert_eq!(summaries.reads(), 3, "the changed file alone is read again");
        assert!(rows.iter().any(|r| r.id == "aaaaaaaa-1" && r.title == "renamed"), "{rows:?}");
        std::fs::remove_file(&b).expect("rm");
        assert_eq!(list(&mut summaries, &root).len(), 1, "a deleted file leaves the list");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn encodes_folders_as_claude_does() {
        assert_eq!(encode_dir("/tmp/cc/work"), "-tmp-cc-work");
        assert_eq!(encode_dir("/home/me/my.project"), "-home-me-my-project");
    }

    #[test]
    fn a_cut_ends_at_the_entry_the_first_dropped_prompt_follows() {
        let record = [
            r#"{"type":"user","uuid":"p1","parentUuid":null}"#,
            r#"{"type":"assistant","uuid":"a1","parentUuid":"p1"}"#,
            r#"{"type":"user","uuid":"p2","parentUuid":"a1"}"#,
            r#"{"type":"assistant","uuid":"a2","parentUuid":"p2"}"#,
        ]
        .join("\n");
        assert_eq!(entry_before(&record, &["p2"]).as_deref(), Some("a1"));
        assert_eq!(entry_before(&record, &["gone", "p2"]).as_deref(), Some("a1"));
        assert_eq!(entry_before(&record, &["elsewhere"]), None);
    }
}

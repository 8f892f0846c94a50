//! Reads a pi session file back as AHP turns, without starting pi (`agent/transcript` after a
//! restart).
//!
//! A session file is a tree of entries; the conversation is the branch from the last entry back to
//! the root. Every user message opens a turn named by its entry id (what the worker recorded the
//! live turn as), but for the one a resumed turn was sent again with, which goes on with its turn;
//! assistant messages add their thinking, text and tool calls, tool results complete those calls,
//! and the last assistant message says how the turn ended. Custom messages (the host's hidden
//! instructions among them) are never shown. A call the file holds no result for never finished:
//! it reads back cancelled with reason `skipped`.

use std::collections::HashMap;
use std::path::Path;

use ahp_types::state::Turn;
use serde_json::{json, Value};

use agent_runner::KeptLookup;
use protocol::KeptResource;

use crate::event::content_text;

/// What went wrong reading a session file.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The file could not be read.
    #[error("the pi session file {path} could not be read: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A turn did not have AHP's shape (a bug here).
    #[error("a turn read from {path} is not an AHP turn: {reason}")]
    Shape {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The turns of the session file at `path`; `None` when there is no such file.
/// `kept` is what the parent kept of its tool results' images (seed 004's `kept`): each is named by
/// its reference again, and one it kept nowhere is left out with a sentence.
pub fn read_transcript(path: &Path, kept: &[KeptResource]) -> Result<Option<Vec<Turn>>, TranscriptError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TranscriptError::Read { path: path.display().to_string(), reason: e.to_string() }),
    };
    let turns = turns_of(&text, kept)
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<Turn>, _>>()
        .map_err(|e| TranscriptError::Shape { path: path.display().to_string(), reason: e.to_string() })?;
    Ok(Some(turns))
}

/// The conversation's entries, oldest first: the branch that ends at the last entry written.
fn branch(text: &str) -> Vec<Value> {
    let entries: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e.get("type").and_then(Value::as_str) != Some("session"))
        .collect();
    let by_id: HashMap<&str, &Value> = entries.iter().filter_map(|e| Some((e.get("id")?.as_str()?, e))).collect();
    let mut chain = Vec::new();
    let mut next = entries.last().and_then(|e| e.get("id")).and_then(Value::as_str);
    while let Some(id) = next {
        let Some(entry) = by_id.get(id) else { break };
        chain.push((*entry).clone());
        next = entry.get("parentId").and_then(Value::as_str);
        if chain.len() > entries.len() {
            break; // a cycle: the file is damaged, keep what was read
        }
    }
    chain.reverse();
    chain
}

/// One turn being read back.
struct Reading {
    id: String,
    started_at: String,
    started_ms: i64,
    ended_ms: i64,
    text: String,
    parts: Vec<Value>,
    calls: HashMap<String, usize>,
    stop_reason: Option<String>,
    error_message: Option<String>,
    usage: Option<(i64, i64, i64)>,
    model: Option<String>,
}

fn turns_of(text: &str, kept: &[KeptResource]) -> Vec<Value> {
    let mut turns = Vec::new();
    let mut current: Option<Reading> = None;
    for entry in branch(text) {
        match entry.get("type").and_then(Value::as_str) {
            Some("message") => {
                let message = entry.get("message").cloned().unwrap_or(Value::Null);
                match message.get("role").and_then(Value::as_str) {
                    // A resumed turn's second prompt goes on with the turn it resumes.
                    Some("user") if current.is_some() && resumes(&message) => {}
                    Some("user") => {
                        if let Some(done) = current.take() {
                            turns.push(done.finish());
                        }
                        current = Some(Reading::open(&entry, &message));
                    }
                    Some("assistant") => {
                        if let Some(turn) = current.as_mut() {
                            turn.assistant(&message);
                        }
                    }
                    Some("toolResult") => {
                        if let Some(turn) = current.as_mut() {
                            turn.tool_result(&message, &KeptLookup(kept));
                        }
                    }
                    _ => {}
                }
            }
            Some("compaction") => {
                if let Some(turn) = current.as_mut() {
                    turn.parts
                        .push(json!({"kind": "systemNotification", "content": "The conversation was compacted."}));
                }
            }
            // custom_message (hidden instructions), model changes, labels: nothing a person reads.
            _ => {}
        }
    }
    if let Some(done) = current.take() {
        turns.push(done.finish());
    }
    turns
}

/// The prompt the worker sent a turn it resumed (`session/resumeTurn`).
fn resumes(message: &Value) -> bool {
    content_text(message.get("content").unwrap_or(&Value::Null)).starts_with(agent_runner::RESUMED)
}

fn millis(message: &Value) -> i64 {
    message.get("timestamp").and_then(Value::as_i64).unwrap_or(0)
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn iso_of(entry: &Value, message: &Value) -> String {
    if let Some(ts) = str_of(entry, "timestamp") {
        if let Ok(parsed) = ts.parse::<jiff::Timestamp>() {
            return format!("{parsed:.3}");
        }
    }
    jiff::Timestamp::from_millisecond(millis(message))
        .map(|t| format!("{t:.3}"))
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
}

impl Reading {
    fn open(entry: &Value, message: &Value) -> Self {
        let ms = millis(message);
        Self {
            id: str_of(entry, "id").unwrap_or_default().to_owned(),
            started_at: iso_of(entry, message),
            started_ms: ms,
            ended_ms: ms,
            text: content_text(message.get("content").unwrap_or(&Value::Null)),
            parts: Vec::new(),
            calls: HashMap::new(),
            stop_reason: None,
            error_message: None,
            usage: None,
            model: None,
        }
    }

    fn part_id(&self) -> String {
        format!("{}:{}", self.id, self.parts.len())
    }

    fn assistant(&mut self, message: &Value) {
        self.ended_ms = self.ended_ms.max(millis(message));
        self.stop_reason = str_of(message, "stopReason").map(str::to_owned);
        self.error_message = str_of(message, "errorMessage").map(str::to_owned);
        if let (Some(provider), Some(model)) = (str_of(message, "provider"), str_of(message, "model")) {
            self.model = Some(format!("{provider}/{model}"));
        }
        if let Some(usage) = message.get("usage") {
            let n = |k: &str| usage.get(k).and_then(Value::as_i64).unwrap_or(0);
            let (i, o, c) = self.usage.unwrap_or((0, 0, 0));
            self.usage = Some((i + n("input"), o + n("output"), c + n("cacheRead")));
        }
        let blocks = message.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
        for block in blocks {
            match str_of(&block, "type") {
                Some("text") => {
                    let text = str_of(&block, "text").unwrap_or_default();
                    if !text.is_empty() {
                        let id = self.part_id();
                        self.parts.push(json!({"kind": "markdown", "id": id, "content": text}));
                    }
                }
                Some("thinking") => {
                    let text = str_of(&block, "thinking").unwrap_or_default();
                    if !text.is_empty() {
                        let id = self.part_id();
                        self.parts.push(json!({"kind": "reasoning", "id": id, "content": text}));
                    }
                }
                Some("toolCall") => self.tool_call(&block),
                _ => {}
            }
        }
    }

    fn tool_call(&mut self, block: &Value) {
        let id = str_of(block, "id").unwrap_or_default().to_owned();
        let name = str_of(block, "name").unwrap_or("tool").to_owned();
        let input = block.get("arguments").cloned().unwrap_or(Value::Null);
        let display = crate::mapper::display_name_of(&name);
        let (invocation, _) = crate::mapper::describe(&name, &display, false, Some(&input));
        self.calls.insert(id.clone(), self.parts.len());
        // Cancelled until its result is read: a call the file holds no result for never finished.
        self.parts.push(json!({
            "kind": "toolCall",
            "toolCall": {
                "status": "cancelled",
                "toolCallId": id,
                "toolName": name,
                "displayName": display,
                "invocationMessage": invocation,
                "toolInput": input.to_string(),
                "reason": "skipped",
            }
        }));
    }

    fn tool_result(&mut self, message: &Value, kept: &KeptLookup<'_>) {
        self.ended_ms = self.ended_ms.max(millis(message));
        let Some(id) = str_of(message, "toolCallId") else { return };
        let Some(&index) = self.calls.get(id) else { return };
        let success = !message.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let content = message.get("content").unwrap_or(&Value::Null);
        let text = content_text(content);
        let call = &mut self.parts[index]["toolCall"];
        let display = call["displayName"].as_str().unwrap_or("Tool").to_owned();
        let name = call["toolName"].as_str().unwrap_or_default().to_owned();
        let input: Option<Value> = call["toolInput"].as_str().and_then(|s| serde_json::from_str(s).ok());
        let (_, past) = crate::mapper::describe(&name, &display, false, input.as_ref());
        call["status"] = json!("completed");
        call["success"] = json!(success);
        call["confirmed"] = json!("not-needed");
        call["pastTenseMessage"] = json!(if success { past } else { format!("{display} failed") });
        if success {
            let shown = crate::event::shown_content(content, id, &name, kept);
            call["content"] = serde_json::to_value(shown).unwrap_or_else(|_| json!([{"type": "text", "text": text}]));
        } else {
            call["error"] = json!(text);
        }
        if let Some(object) = call.as_object_mut() {
            object.remove("reason");
        }
    }

    fn finish(mut self) -> Value {
        let state = match self.stop_reason.as_deref() {
            Some("aborted") => "cancelled",
            Some("error") => "error",
            // A turn that stopped while its tools ran (pi went away) did not finish.
            Some("toolUse") => "cancelled",
            _ => "complete",
        };
        if state == "error" {
            let message = self.error_message.clone().unwrap_or_else(|| "The model answered with an error.".to_owned());
            self.parts.push(json!({"kind": "error", "error": {"errorType": "agentRunFailed", "message": message}}));
        }
        let mut turn = json!({
            "id": self.id,
            "startedAt": self.started_at,
            "duration": (self.ended_ms - self.started_ms).max(0),
            "message": {"text": self.text, "origin": {"kind": "user"}},
            "responseParts": self.parts,
            "state": state,
        });
        if let Some((input, output, cache_read)) = self.usage {
            turn["usage"] = json!({"inputTokens": input, "outputTokens": output, "cacheReadTokens": cache_read, "model": self.model});
        }
        turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{ResponsePart, ToolCallState, TurnState};

    const SESSION: &str = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-11-30T02:32:25.258Z","cwd":"/w"}
{"type":"model_change","id":"m1","parentId":null,"timestamp":"2026-11-30T02:32:25.300Z","provider":"mock","modelId":"mock-model"}
{"type":"message","id":"u1","parentId":"m1","timestamp":"2026-11-30T02:32:26.000Z","message":{"role":"user","content":[{"type":"text","text":"please [[bash echo hi]]"}],"timestamp":1796005946000}}
{"type":"custom_message","id":"c1","parentId":"u1","timestamp":"2026-11-30T02:32:26.001Z","customType":"ahpd-instructions","content":"SECRET","display":false}
{"type":"message","id":"a1","parentId":"c1","timestamp":"2026-11-30T02:32:26.100Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"toolCall","id":"call_1","name":"bash","arguments":{"command":"echo hi"}}],"provider":"mock","model":"mock-model","usage":{"input":10,"output":5,"cacheRead":0},"stopReason":"toolUse","timestamp":1796005946100}}
{"type":"message","id":"r1","parentId":"a1","timestamp":"2026-11-30T02:32:26.200Z","message":{"role":"toolResult","toolCallId":"call_1","toolName":"bash","content":[{"type":"text","text":"hi\n"}],"isError":false,"timestamp":1796005946200}}
{"type":"message","id":"a2","parentId":"r1","timestamp":"2026-11-30T02:32:26.300Z","message":{"role":"assistant","content":[{"type":"text","text":"tool said: hi"}],"stopReason":"stop","timestamp":1796005946300}}
{"type":"message","id":"u2","parentId":"a2","timestamp":"2026-11-30T02:32:27.000Z","message":{"role":"user","content":[{"type":"text","text":"[[error]]"}],"timestamp":1796005947000}}
{"type":"message","id":"a3","parentId":"u2","timestamp":"2026-11-30T02:32:27.100Z","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"400 mock: scripted error","timestamp":1796005947100}}
{"type":"message","id":"u3","parentId":"a3","timestamp":"2026-11-30T02:32:28.000Z","message":{"role":"user","content":"run it","timestamp":1796005948000}}
{"type":"message","id":"a4","parentId":"u3","timestamp":"2026-11-30T02:32:28.100Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_2","name":"bash","arguments":{"command":"sleep 9"}}],"stopReason":"toolUse","timestamp":1796005948100}}
"#;

    #[test]
    fn a_session_file_reads_back_as_turns() {
        let turns: Vec<Turn> =
            turns_of(SESSION, &[]).into_iter().map(|t| serde_json::from_value(t).expect("a turn")).collect();
        assert_eq!(turns.len(), 3);

        let first = &turns[0];
        assert_eq!(first.id, "u1");
        assert_eq!(first.state, TurnState::Complete);
        assert_eq!(first.message.text, "please [[bash echo hi]]");
        assert_eq!(first.duration, Some(300));
        assert!(matches!(&first.response_parts[0], ResponsePart::Reasoning(r) if r.content == "hmm"));
        let ResponsePart::ToolCall(call) = &first.response_parts[1] else { panic!("a tool call") };
        let ToolCallState::Completed(done) = &call.tool_call else { panic!("completed: {:?}", call.tool_call) };
        assert!(done.success);
        assert!(matches!(&first.response_parts[2], ResponsePart::Markdown(m) if m.content == "tool said: hi"));
        let text = serde_json::to_string(first).expect("encodes");
        assert!(!text.contains("SECRET"), "hidden instructions never read back");
        assert_eq!(first.usage.as_ref().and_then(|u| u.input_tokens), Some(10));

        assert_eq!(turns[1].state, TurnState::Error);
        assert!(
            matches!(turns[1].response_parts.last(), Some(ResponsePart::Error(e)) if e.error.message == "400 mock: scripted error")
        );

        assert_eq!(turns[2].state, TurnState::Cancelled);
        let ResponsePart::ToolCall(call) = &turns[2].response_parts[0] else { panic!("a tool call") };
        assert!(matches!(&call.tool_call, ToolCallState::Cancelled(_)));
    }

    #[test]
    fn a_branch_is_followed_from_the_last_entry() {
        let forked = format!(
            "{SESSION}{}\n",
            r#"{"type":"message","id":"u9","parentId":"a2","timestamp":"2026-11-30T02:33:00.000Z","message":{"role":"user","content":"other way","timestamp":1796005980000}}"#
        );
        let turns = turns_of(&forked, &[]);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[1]["id"], "u9");
    }

    #[test]
    fn a_resumed_turn_reads_back_as_the_one_turn() {
        let resumed = format!(
            "{}\n{}\n",
            r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-11-30T02:33:00.000Z","message":{"role":"user","content":"tell me","timestamp":1796005980000}}"#,
            json!({"type": "message", "id": "u2", "parentId": "u1", "timestamp": "2026-11-30T02:33:01.000Z",
                   "message": {"role": "user", "content": format!("{}\n\ntell me", agent_runner::RESUMED),
                               "timestamp": 1_796_005_981_000_i64}}),
        );
        let resumed = format!(
            "{resumed}{}\n",
            r#"{"type":"message","id":"a1","parentId":"u2","timestamp":"2026-11-30T02:33:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"told"}],"stopReason":"stop","timestamp":1796005982000}}"#
        );
        let turns = turns_of(&resumed, &[]);
        assert_eq!(turns.len(), 1, "{turns:?}");
        assert_eq!(turns[0]["id"], "u1");
        assert_eq!(turns[0]["message"]["text"], "tell me");
        assert!(turns[0].to_string().contains("told"));
    }

    #[test]
    fn no_file_is_no_record() {
        let missing = std::env::temp_dir().join("ahpd-pi-no-such-session.jsonl");
        assert!(read_transcript(&missing, &[]).expect("reads").is_none());
    }
}

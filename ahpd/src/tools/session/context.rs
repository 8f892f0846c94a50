//! `get_session_context`: a chat's newest turns and its running one, cut to the level asked for
//! (the reference host's caps), or one page of up to 8000 characters of a reply that was cut, with
//! the pending messages the calling chat left there and the agent of a chat that runs another one.

use ahp_types::state::{ChatState, Message, ResponsePart, ToolCallState, Turn, TurnState};
use serde_json::{json, Map, Value};

use super::super::{Refusal, ToolCall, ToolResult};
use super::{harness_of, link_of, resolve, GetSessionContext};
use crate::host::Host;

/// The levels of detail.
pub const DETAILS: [&str; 3] = ["summary", "digest", "full"];
/// The most characters one page of a reply carries.
pub const PAGE: usize = 8000;
const DEFAULT_LIMIT: usize = 10;
const MAX_LIMIT: usize = 50;
/// A failed tool call's error is cut to this many characters.
const ERROR_CAP: usize = 200;

/// Per-level caps, in characters: the user's message, the assistant's reply, a tool call's input
/// (0 leaves the field out).
struct Caps {
    user: usize,
    assistant: usize,
    tool_input: usize,
    tool_calls: bool,
}

fn caps(detail: &str) -> Caps {
    match detail {
        "digest" => Caps { user: 300, assistant: 800, tool_input: 0, tool_calls: true },
        "full" => Caps { user: 1000, assistant: 2000, tool_input: 200, tool_calls: true },
        _ => Caps { user: 160, assistant: 140, tool_input: 0, tool_calls: false },
    }
}

const TOOL: &str = "get_session_context";

/// `get_session_context`: of a chat here, or of one another host runs (mirrored here to be read).
pub async fn get_session_context(host: &Host, call: &ToolCall, args: GetSessionContext) -> ToolResult {
    let asked = args.session.as_str();
    let detail = match &args.detail {
        None | Some(Value::Null) => "summary",
        Some(Value::String(d)) if DETAILS.contains(&d.as_str()) => d.as_str(),
        Some(_) => return Err(format!("Invalid {TOOL} input: detail must be one of {}.", DETAILS.join(", ")).into()),
    };
    let limit = match &args.transcript_limit {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() && n >= 1.0 => (n.floor() as usize).min(MAX_LIMIT),
            _ => return Err(format!("Invalid {TOOL} input: transcriptLimit must be a positive number.").into()),
        },
    };
    let response_turn = args.response_turn_id.as_deref();
    let unknown =
        || format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).");
    let elsewhere = super::remote::resolve(host, asked, &unknown).await?;
    let mut core = host.lock();
    let target = match elsewhere {
        Some(target) => target,
        None => resolve(host, &mut core, asked, &unknown)?,
    };
    let state = core
        .chat_state(&target.chat)
        .ok_or_else(|| format!("Invalid {TOOL} input: {asked} is not a chat this host is running."))?;
    let mut out = Map::new();
    out.insert("session".into(), json!(target.session));
    out.insert("openLink".into(), json!(link_of(&core, &target.session, &target.chat)));
    if let Some(turn_id) = response_turn {
        let text = reply_of(state, turn_id)
            .ok_or_else(|| format!("Invalid {TOOL} input: responseTurnId must name a turn of this chat."))?;
        page(&mut out, turn_id, &text, args.response_offset.as_ref())?;
        return Ok(Value::Object(out).to_string());
    }
    let (transcript, has_more, truncated) = transcript(state, detail, limit);
    out.insert("detail".into(), json!(detail));
    out.insert("transcript".into(), Value::Array(transcript));
    out.insert("hasMoreHistory".into(), json!(has_more));
    out.insert("truncated".into(), json!(truncated));
    if let Some(caller_chat) = call.chat.as_deref() {
        out.insert("messagesSentByMe".into(), Value::Array(sent_by(state, caller_chat)));
    }
    if let Some(harness) = harness_of(&core, &target.chat) {
        out.insert("harness".into(), json!(harness));
    }
    Ok(Value::Object(out).to_string())
}

/// The assistant's reply of a turn (ended or running), as the transcript cut it.
fn reply_of(state: &ChatState, turn_id: &str) -> Option<String> {
    if let Some(turn) = state.turns.iter().find(|t| t.id == turn_id) {
        return Some(assistant_text(&turn.response_parts));
    }
    state.active_turn.as_ref().filter(|t| t.id == turn_id).map(|t| assistant_text(&t.response_parts))
}

/// One page of a reply: `responseLength`, the text, `nextResponseOffset` while more remains, and
/// `truncated`.
fn page(out: &mut Map<String, Value>, turn_id: &str, text: &str, offset: Option<&Value>) -> Result<(), Refusal> {
    let length = text.chars().count();
    let offset = match offset {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && (n as usize) <= length => n as usize,
            _ => {
                return Err(
                    format!("Invalid {TOOL} input: responseOffset must be a whole number from 0 to {length}.").into()
                )
            }
        },
    };
    let chunk: String = text.chars().skip(offset).take(PAGE).collect();
    let end = offset + chunk.chars().count();
    out.insert("responseTurnId".into(), json!(turn_id));
    out.insert("responseOffset".into(), json!(offset));
    out.insert("responseLength".into(), json!(length));
    out.insert("response".into(), json!(chunk));
    if end < length {
        out.insert("nextResponseOffset".into(), json!(end));
    }
    out.insert("truncated".into(), json!(end < length));
    Ok(())
}

/// The newest `limit` turns (the running one last), whether older ones exist behind them, and
/// whether anything was cut.
fn transcript(state: &ChatState, detail: &str, limit: usize) -> (Vec<Value>, bool, bool) {
    let caps = caps(detail);
    let mut entries: Vec<(&str, &Message, &[ResponsePart], &str)> = state
        .turns
        .iter()
        .map(|t: &Turn| (t.id.as_str(), &t.message, t.response_parts.as_slice(), turn_state(&t.state)))
        .collect();
    if let Some(active) = &state.active_turn {
        entries.push((active.id.as_str(), &active.message, active.response_parts.as_slice(), "inProgress"));
    }
    let start = entries.len().saturating_sub(limit);
    let mut truncated = start > 0;
    let turns = entries[start..]
        .iter()
        .enumerate()
        .map(|(i, (id, message, parts, state))| {
            let mut turn = json!({ "turn": start + i + 1, "state": state });
            if let Some((user, cut)) = cut(&message.text, caps.user) {
                turn["user"] = json!(user);
                truncated |= cut;
            }
            if let Some((assistant, cut)) = cut(&assistant_text(parts), caps.assistant) {
                turn["assistant"] = json!(assistant);
                if cut {
                    truncated = true;
                    turn["assistantTruncated"] = json!(true);
                    turn["responseTurnId"] = json!(id);
                }
            }
            if caps.tool_calls {
                let calls: Vec<Value> = tool_calls(parts).map(|tc| tool_call(tc, caps.tool_input)).collect();
                if !calls.is_empty() {
                    turn["toolCalls"] = Value::Array(calls);
                }
            }
            turn
        })
        .collect();
    (turns, start > 0, truncated)
}

fn turn_state(state: &TurnState) -> &'static str {
    match state {
        TurnState::Complete => "complete",
        TurnState::Cancelled => "cancelled",
        TurnState::Error => "error",
    }
}

/// Text cut to `max` characters with an ellipsis; `None` for nothing (or a level that omits it).
fn cut(text: &str, max: usize) -> Option<(String, bool)> {
    let text = text.trim();
    if max == 0 || text.is_empty() {
        return None;
    }
    if text.chars().count() <= max {
        return Some((text.to_owned(), false));
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    Some((format!("{kept}…"), true))
}

/// The markdown of a turn's reply, in stream order.
fn assistant_text(parts: &[ResponsePart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect::<String>()
        .trim()
        .to_owned()
}

fn tool_calls(parts: &[ResponsePart]) -> impl Iterator<Item = &ToolCallState> {
    parts.iter().filter_map(|p| match p {
        ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
        _ => None,
    })
}

/// A tool call as `{name, status}`: `ok` on a completed one, `reason` on a cancelled one, `error`
/// (cut to 200 characters) on one that failed, `input` at `full` alone.
fn tool_call(state: &ToolCallState, input_cap: usize) -> Value {
    let raw = serde_json::to_value(state).unwrap_or(Value::Null);
    let mut out = json!({
        "name": raw.get("toolName").cloned().unwrap_or(Value::Null),
        "status": raw.get("status").cloned().unwrap_or(Value::Null),
    });
    match state {
        ToolCallState::Completed(c) => {
            out["ok"] = json!(c.success);
            if !c.success {
                let error = match &c.error {
                    Some(e) => e.get("message").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| match e {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }),
                    None => String::new(),
                };
                if let Some((error, _)) = cut(&error, ERROR_CAP) {
                    out["error"] = json!(error);
                }
            }
        }
        ToolCallState::Cancelled(_) => {
            out["reason"] = raw.get("reason").cloned().unwrap_or(Value::Null);
        }
        _ => {}
    }
    if input_cap > 0 {
        if let Some((input, _)) = raw.get("toolInput").and_then(Value::as_str).and_then(|i| cut(i, input_cap)) {
            out["input"] = json!(input);
        }
    }
    out
}

/// The pending messages the calling chat left in this chat.
fn sent_by(state: &ChatState, caller_chat: &str) -> Vec<Value> {
    let steering = state.steering_message.iter().map(|m| (m, "steer"));
    let queued = state.queued_messages.iter().flatten().map(|m| (m, "queue"));
    steering
        .chain(queued)
        .filter(|(m, _)| super::asks::sent_from(&m.message) == Some(caller_chat))
        .map(|(m, delivery)| {
            json!({
                "messageId": m.id,
                "revision": crate::host::facade::revision_of(&m.message),
                "delivery": delivery,
                "status": "pending",
                "message": m.message.text,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_with_an_ellipsis() {
        assert_eq!(cut("  hello ", 10), Some(("hello".into(), false)));
        assert_eq!(cut("abcdef", 4), Some(("abc…".into(), true)));
        assert_eq!(cut("abc", 0), None);
        assert_eq!(cut("   ", 10), None);
    }

    #[test]
    fn pages_are_8000_characters() {
        let text: String = "é".repeat(PAGE + 5);
        let mut out = Map::new();
        page(&mut out, "t", &text, None).expect("page");
        assert_eq!(out["responseLength"], PAGE + 5);
        assert_eq!(out["response"].as_str().map(|s| s.chars().count()), Some(PAGE));
        assert_eq!(out["nextResponseOffset"], PAGE);
        assert_eq!(out["truncated"], true);
        let mut last = Map::new();
        page(&mut last, "t", &text, Some(&json!(PAGE))).expect("page");
        assert_eq!(last["response"].as_str().map(|s| s.chars().count()), Some(5));
        assert!(last.get("nextResponseOffset").is_none());
        assert_eq!(last["truncated"], false);
        assert!(page(&mut Map::new(), "t", &text, Some(&json!(-1))).is_err());
    }
}

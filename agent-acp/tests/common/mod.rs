//! Helpers the agent-acp tests share: a worker served in process through `TestParent`, scratch
//! folders, and readers of a folded turn.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_runner::testing::{start, TestParent, ToolHandler};
use ahp_types::common::JsonObject;
use ahp_types::state::{ChatState, ResponsePart, ToolCallState, Turn};
use protocol::{Start, ToolOutcome};
use serde_json::Value;

/// A generous safety net around awaits on a 2-core machine; never an assertion about speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The scripted ACP agent.
pub fn fake_agent() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake_acp_agent.py").to_owned()
}

/// A fresh folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("agent-acp-test-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir.canonicalize().expect("a real path")
}

/// Options running the fake agent with `flags`.
pub fn fake_options(flags: &[&str]) -> JsonObject {
    let mut args = vec![Value::String(fake_agent())];
    args.extend(flags.iter().map(|f| Value::String((*f).to_owned())));
    let mut options = JsonObject::new();
    options.insert("command".into(), Value::String("python3".into()));
    options.insert("args".into(), Value::Array(args));
    options
}

fn no_tools() -> ToolHandler {
    Arc::new(|call| ToolOutcome::failed(format!("no tool {}", call.name)))
}

/// A parent that has shaken hands with an in-process `acp` worker.
pub async fn parent(provider: &str, options: JsonObject, data_dir: &Path) -> TestParent {
    let parent = TestParent::in_process(agent_acp::factory(), no_tools());
    parent
        .initialize(provider, "acp", options, Some(data_dir.display().to_string()))
        .await
        .expect("the worker's handshake");
    parent
}

/// A start for chat `name` in `dir`.
pub fn start_in(name: &str, dir: &Path) -> Start {
    let mut s = start(&format!("ahp-session:/{name}"), &format!("ahp-chat:/{name}"));
    s.working_directory = Some(dir.display().to_string());
    s
}

/// Hands `text` as turn `turn_id` and waits for the turn to end.
pub async fn turn(parent: &mut TestParent, chat: &str, turn_id: &str, text: &str) -> Turn {
    parent.send(chat, turn_id, text).await.expect("the prompt is taken");
    parent.until_idle(chat, PATIENCE).await.expect("the turn ends")
}

/// The turn's markdown, joined.
pub fn markdown(parts: &[ResponsePart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect()
}

/// The turn's reasoning, joined.
pub fn reasoning(parts: &[ResponsePart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Reasoning(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

/// The turn's tool calls.
pub fn calls(parts: &[ResponsePart]) -> Vec<ToolCallState> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(t) => Some(t.tool_call.clone()),
            _ => None,
        })
        .collect()
}

/// The error part's message, when the turn failed.
pub fn error_message(parts: &[ResponsePart]) -> Option<(String, String)> {
    parts.iter().find_map(|p| match p {
        ResponsePart::Error(e) => Some((e.error.error_type.clone(), e.error.message.clone())),
        _ => None,
    })
}

/// The calls of the running turn waiting for a confirmation.
pub fn pending_confirmations(chat: &ChatState) -> Vec<ahp_types::state::ToolCallPendingConfirmationState> {
    chat.active_turn
        .iter()
        .flat_map(|t| t.response_parts.iter())
        .filter_map(|p| match p {
            ResponsePart::ToolCall(t) => match &t.tool_call {
                ToolCallState::PendingConfirmation(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The running turn's markdown so far.
pub fn active_markdown(chat: &ChatState) -> String {
    chat.active_turn.as_ref().map(|t| markdown(&t.response_parts)).unwrap_or_default()
}

/// A JSON object literal as an options object.
pub fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("an object, not {other}"),
    }
}

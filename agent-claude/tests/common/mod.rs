//! Shared scaffolding for the worker-level tests: the `claude` worker served in process under
//! `TestParent`, a temporary `HOME` and working folder, a tool handler that records its calls,
//! and where the CLI (real or fake) is.
//!
//! The real CLI is found at `$AHPD_CLAUDE_BIN`, else `$AHPD_TEST_CACHE/claude/node_modules/.bin/claude`,
//! else `<repo>/.cache/claude/node_modules/.bin/claude` (where `scripts/deps/claude.sh` puts it).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::testing::{start, Said, TestParent, ToolHandler};
use ahp::reducers::ReduceOutcome;
use ahp_types::actions::StateAction;
use ahp_types::common::JsonObject;
use ahp_types::state::{ChatState, ResponsePart, ToolCallState, ToolDefinition, Turn};
use protocol::{Start, ToolOutcome, ToolRunParams, ToolSpec};
use serde_json::{json, Value};

/// A generous safety net around one turn of the real CLI.
pub const TURN: Duration = Duration::from_secs(90);

/// The real `claude`, installed by `scripts/test`.
#[allow(unused_imports)] // not every test binary runs the real CLI
pub use tests::installed::claude_bin;

/// The scripted stand-in for edge cases.
pub fn fake_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/claude")
}

pub use tempfile::TempDir;

/// A folder removed when dropped, inside the canonical temporary folder: the CLI reports its cwd
/// canonical, so folder names in `~/.claude/projects` match.
pub fn temp_dir(label: &str) -> TempDir {
    let parent = std::env::temp_dir().canonicalize().unwrap_or_else(|_| std::env::temp_dir());
    tempfile::Builder::new().prefix(&format!("ahpd-claude-{label}-")).tempdir_in(parent).expect("a temporary folder")
}

/// The calls the test's tool handler was asked to run.
pub type ToolCalls = Arc<Mutex<Vec<ToolRunParams>>>;

/// A handler that answers `list_sessions` and a client's `openFile`, and records every call.
pub fn tool_handler() -> (ToolHandler, ToolCalls) {
    let calls: ToolCalls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let handler: ToolHandler = Arc::new(move |call: ToolRunParams| {
        let name = call.name.clone();
        if let Ok(mut c) = seen.lock() {
            c.push(call);
        }
        match name.as_str() {
            "list_sessions" => ToolOutcome::ok("SESSIONS: alpha, beta"),
            "c1__openFile" => ToolOutcome::ok("opened it"),
            other => ToolOutcome::failed(format!("no tool {other}")),
        }
    });
    (handler, calls)
}

/// A tool spec: the host's own when `owner` is none.
pub fn tool_spec(name: &str, owner: Option<&str>, display: Option<&str>) -> ToolSpec {
    ToolSpec {
        definition: ToolDefinition {
            name: name.into(),
            title: None,
            description: Some(format!("The {name} tool")),
            input_schema: Some(json!({"type": "object", "properties": {}})),
            output_schema: None,
            annotations: None,
            meta: None,
        },
        owner: owner.map(str::to_owned),
        display_name: display.map(str::to_owned),
        defer_loading: false,
        effects: None,
    }
}

/// The `options` of a `claude` entry running `command` with `env`.
pub fn options(command: &Path, env: Value) -> JsonObject {
    let options = json!({"command": command, "env": env});
    options.as_object().cloned().unwrap_or_default()
}

/// A chat's start in `dir` with a fresh conversation uuid.
pub fn chat_start(chat: &str, dir: &Path) -> Start {
    let mut s = start("ahp-session:/claude-test", chat);
    s.conversation_id = uuid_like();
    s.working_directory = Some(dir.display().to_string());
    s
}

/// A fresh conversation id.
pub fn uuid_like() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// What one turn said.
pub struct Ran {
    pub turn: Turn,
    pub actions: Vec<StateAction>,
    pub recorded: Vec<(String, String)>,
}

impl Ran {
    /// The turn's answer: its markdown parts joined.
    pub fn text(&self) -> String {
        markdown(&self.turn)
    }
}

/// The markdown of a turn.
pub fn markdown(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// The tool calls of a turn.
pub fn tool_calls(turn: &Turn) -> Vec<ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(t) => Some(t.tool_call.clone()),
            _ => None,
        })
        .collect()
}

/// Sends `text` as turn `turn_id` and collects what the worker says until the turn ends.
pub async fn run_turn(parent: &mut TestParent, chat: &str, turn_id: &str, text: &str) -> Ran {
    parent.send(chat, turn_id, text).await.expect("the prompt is handed over");
    finish_turn(parent, chat).await
}

fn is_ending(action: &StateAction) -> bool {
    matches!(action, StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) | StateAction::ChatError(_))
}

/// Collects what the worker says until it ends the running turn, and answers that turn as folded.
pub async fn finish_turn(parent: &mut TestParent, chat: &str) -> Ran {
    let mut actions = Vec::new();
    let mut recorded = Vec::new();
    let deadline = tokio::time::Instant::now() + TURN;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match parent.next(left).await {
            Some(Said::Action { action, outcome, .. }) => {
                assert!(
                    !matches!(outcome, Some(ReduceOutcome::Invalid(_))),
                    "the reducer refused {action:?}: {outcome:?}"
                );
                let ended = is_ending(&action);
                actions.push(action);
                if ended {
                    let state = parent.chat(chat).expect("the chat");
                    assert!(state.active_turn.is_none(), "the ending ended the turn");
                    let turn = state.turns.last().cloned().expect("a turn");
                    return Ran { turn, actions, recorded };
                }
            }
            Some(Said::TurnRecorded { turn_id, transcript_id, .. }) => recorded.push((turn_id, transcript_id)),
            None => panic!("the worker said nothing more within {TURN:?}; chat: {:#?}", parent.chat(chat)),
        }
    }
}

/// Waits until `predicate` holds on the folded chat, keeping what was said.
pub async fn wait_for(parent: &mut TestParent, chat: &str, predicate: impl Fn(&ChatState) -> bool) -> Vec<StateAction> {
    let mut actions = Vec::new();
    let deadline = tokio::time::Instant::now() + TURN;
    loop {
        if let Some(state) = parent.chat(chat) {
            if predicate(&state) {
                return actions;
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match parent.next(left).await {
            Some(Said::Action { action, .. }) => actions.push(action),
            Some(_) => {}
            None => panic!("the condition did not hold within {TURN:?}; chat: {:#?}", parent.chat(chat)),
        }
    }
}

/// The tool calls of the running turn.
pub fn active_calls(state: &ChatState) -> Vec<ToolCallState> {
    state
        .active_turn
        .as_ref()
        .map(|t| {
            t.response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::ToolCall(c) => Some(c.tool_call.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

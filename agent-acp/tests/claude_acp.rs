//! The `acp` worker driving the real Claude ACP adapters against the project's mock Anthropic
//! API (`tests::mocks::anthropic`), as the daemon drives a worker (`TestParent`).
//!
//! `@agentclientprotocol/claude-agent-acp` (the current adapter) shows a streamed turn, a
//! permission allowed and one denied, a cancel mid-turn and a resume in a fresh worker;
//! `@zed-industries/claude-code-acp` (the older one, which routes its file and shell tools
//! through the client) shows `fs/*` and `terminal/*` end to end. Both are installed by
//! `scripts/deps/acp.sh` (run by `scripts/test`) under `$AHPD_TEST_CACHE/acp`.

mod common;

use std::path::Path;

use agent_runner::testing::TestParent;
use ahp_types::actions::{ChatToolCallConfirmedAction, StateAction};
use ahp_types::state::{ToolCallState, TurnState};
use common::*;
use protocol::methods::parent as methods;
use protocol::ConfirmParams;
use serde_json::{json, Value};
use tests::mocks::anthropic::{MockAnthropic, THINKING};

fn claude_agent_acp() -> String {
    tests::installed::claude_agent_acp().display().to_string()
}

fn claude_code_acp() -> String {
    tests::installed::claude_code_acp().display().to_string()
}

/// Options running `command` against `mock`, with a home of its own.
fn options(command: &str, mock: &MockAnthropic, home: &Path) -> ahp_types::common::JsonObject {
    let mut env: serde_json::Map<String, Value> =
        mock.cli_env().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    env.insert("HOME".into(), json!(home.display().to_string()));
    // MCP tools from mcpServers would hide behind tool search otherwise (ACP has no alwaysLoad).
    env.insert("ENABLE_TOOL_SEARCH".into(), json!("false"));
    // The adapters refuse to skip permissions as root unless told they are sandboxed.
    env.insert("IS_SANDBOX".into(), json!("1"));
    object(json!({"command": command, "env": env}))
}

async fn confirm(parent: &TestParent, chat: &str, turn_id: &str, call_id: &str, approved: bool) {
    let action = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: turn_id.into(),
        tool_call_id: call_id.into(),
        meta: None,
        approved,
        confirmed: None,
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: None,
    });
    parent.apply_client_action(chat, &action);
    let params = ConfirmParams {
        chat: chat.into(),
        turn_id: turn_id.into(),
        tool_call_id: call_id.into(),
        approved,
        option_id: None,
        decision_source: Some("user-action".into()),
        edited_tool_input: None,
    };
    assert_eq!(parent.confirm(params).await.expect("confirm"), json!({"handled": true}));
}

/// Sends `text` and answers the one question it raises with `approved`, then waits for the end.
async fn turn_asking(
    parent: &mut TestParent,
    chat: &str,
    turn_id: &str,
    text: &str,
    approved: bool,
) -> ahp_types::state::Turn {
    parent.send(chat, turn_id, text).await.expect("send");
    let state = parent.until(chat, PATIENCE, |c| !pending_confirmations(c).is_empty()).await.expect("a question");
    let call = pending_confirmations(&state).remove(0);
    assert!(call.options.as_ref().is_some_and(|o| !o.is_empty()), "the agent's own options: {call:?}");
    confirm(parent, chat, turn_id, &call.tool_call_id, approved).await;
    parent.until_idle(chat, PATIENCE).await.expect("the turn ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_agent_acp_streams_asks_cancels_and_resumes() {
    let mock = MockAnthropic::start().await.expect("the mock");
    let (dir, home) = (scratch("claude-acp"), scratch("claude-acp-home"));
    let command = claude_agent_acp();
    let chat = "ahp-chat:/claude";

    let mut parent = parent("claude-acp", options(&command, &mock, &home), &dir).await;
    let mut start = start_in("claude", &dir);
    // The adapter's default mode lets a model classifier decide; `default` asks the client.
    start.settings.insert("permissionMode".into(), json!("default"));
    let created = parent.create(start).await.expect("create");
    let id = created.conversation_id.expect("the adapter's session id");
    assert!(created.models.is_some_and(|m| !m.is_empty()), "the adapter's models");

    // A streamed turn, thinking first.
    let one = turn(&mut parent, chat, "t1", "THINK REPLY:the answer is forty-two").await;
    assert_eq!(one.state, TurnState::Complete, "{one:?}");
    assert!(markdown(&one.response_parts).contains("the answer is forty-two"), "{one:?}");
    assert!(reasoning(&one.response_parts).contains(THINKING), "{one:?}");

    // A permission asked in the client and allowed: the command runs.
    let allowed = turn_asking(
        &mut parent,
        chat,
        "t2",
        r#"TOOL:Bash ARGS:{"command":"touch allowed.txt","description":"Make a file"}"#,
        true,
    )
    .await;
    assert_eq!(allowed.state, TurnState::Complete, "{allowed:?}");
    assert!(dir.join("allowed.txt").exists(), "the allowed command ran");
    assert!(calls(&allowed.response_parts).iter().any(|c| matches!(c, ToolCallState::Completed(s) if s.success)));

    // One denied: it does not.
    let denied = turn_asking(
        &mut parent,
        chat,
        "t3",
        r#"TOOL:Bash ARGS:{"command":"touch denied.txt","description":"Make a file"}"#,
        false,
    )
    .await;
    assert!(!dir.join("denied.txt").exists(), "the denied command did not run");
    assert!(calls(&denied.response_parts).iter().any(|c| matches!(c, ToolCallState::Cancelled(_))), "{denied:?}");

    // A cancel mid-turn.
    parent
        .send(chat, "t4", "SLOW REPLY:one two three four five six seven eight nine ten eleven twelve")
        .await
        .expect("send");
    parent.until(chat, PATIENCE, |c| !active_markdown(c).is_empty()).await.expect("it streams");
    parent.abort(chat, Some("t4")).await.expect("abort");
    let stopped = parent.until_idle(chat, PATIENCE).await.expect("the turn ends");
    assert_eq!(stopped.state, TurnState::Cancelled);
    parent.peer().request_value(methods::SHUTDOWN, json!({})).await.expect("shutdown");

    // A fresh worker resumes the conversation with session/load.
    let mut again = parent_named("claude-acp", options(&command, &mock, &home), &dir).await;
    let mut start = start_in("claude", &dir);
    start.resume = true;
    start.conversation_id = id.clone();
    let resumed = again.create(start).await.expect("resume");
    assert_eq!(resumed.conversation_id.as_deref(), Some(id.as_str()));
    let five = turn(&mut again, chat, "t5", "REPLY:still here").await;
    assert_eq!(five.state, TurnState::Complete, "{five:?}");
    assert_eq!(markdown(&five.response_parts), "still here", "the replayed history is not shown again");
    let last = mock.turn_requests().pop().expect("a request");
    assert!(last.transcript_text().contains("the answer is forty-two"), "the model saw the earlier turns");
    again.peer().request_value(methods::SHUTDOWN, json!({})).await.expect("shutdown");
}

async fn parent_named(provider: &str, options: ahp_types::common::JsonObject, dir: &Path) -> TestParent {
    parent(provider, options, dir).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_acp_reads_writes_and_runs_through_the_client() {
    let mock = MockAnthropic::start().await.expect("the mock");
    let (dir, home, elsewhere) = (scratch("code-acp"), scratch("code-acp-home"), scratch("code-acp-elsewhere"));
    let mut parent = parent("code-acp", options(&claude_code_acp(), &mock, &home), &dir).await;
    let chat = "ahp-chat:/code";
    let mut start = start_in("code", &dir);
    start.settings.insert("permissionMode".into(), json!("bypassPermissions"));
    parent.create(start).await.expect("create");

    let inside = dir.join("written.txt");
    let write =
        format!(r#"TOOL:mcp__acp__Write ARGS:{{"file_path":"{}","content":"hello via acp\n"}}"#, inside.display());
    let wrote = turn(&mut parent, chat, "t1", &write).await;
    assert_eq!(wrote.state, TurnState::Complete, "{wrote:?}");
    assert_eq!(std::fs::read_to_string(&inside).expect("written through fs/write_text_file"), "hello via acp\n");

    let read = format!(r#"TOOL:mcp__acp__Read ARGS:{{"file_path":"{}"}}"#, inside.display());
    let read = turn(&mut parent, chat, "t2", &read).await;
    assert!(markdown(&read.response_parts).contains("hello via acp"), "read through fs/read_text_file: {read:?}");

    let outside = elsewhere.join("outside.txt");
    let escape = format!(r#"TOOL:mcp__acp__Write ARGS:{{"file_path":"{}","content":"nope"}}"#, outside.display());
    let refused = turn(&mut parent, chat, "t3", &escape).await;
    assert!(!outside.exists(), "a write outside the session's folders is refused");
    assert!(markdown(&refused.response_parts).contains("outside this session's folders"), "{refused:?}");

    let run = r#"TOOL:mcp__acp__Bash ARGS:{"command":"echo $((6 * 7)) > answer.txt && cat answer.txt","description":"Compute","timeout":10000}"#;
    let ran = turn(&mut parent, chat, "t4", run).await;
    assert_eq!(ran.state, TurnState::Complete, "{ran:?}");
    assert_eq!(std::fs::read_to_string(dir.join("answer.txt")).expect("ran through terminal/create").trim(), "42");
    assert!(markdown(&ran.response_parts).contains("42"), "the terminal's output reached the model: {ran:?}");
    parent.peer().request_value(methods::CLOSE, json!({"chat": chat})).await.expect("close");
}

/// A tiny MCP server (streamable HTTP, revision 2025-06-18, JSON answers) standing in for the
/// daemon's `/ahp-mcp/<id>`: one tool, `list_sessions`, behind one bearer token. Answers its URL
/// and the calls it ran.
async fn tiny_tools_endpoint(token: &'static str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = calls.clone();
    let handler = move |headers: HeaderMap, body: String| {
        let seen = seen.clone();
        async move {
            let authorized =
                headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {token}"));
            if !authorized {
                return (StatusCode::UNAUTHORIZED, "this tools server answers only its own session's token")
                    .into_response();
            }
            let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let Some(id) = message.get("id").cloned() else {
                return StatusCode::ACCEPTED.into_response();
            };
            let result = match message["method"].as_str().unwrap_or_default() {
                "initialize" => {
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                       "serverInfo": {"name": "ahpd", "version": "test"}})
                }
                "tools/list" => {
                    json!({"tools": [{"name": "list_sessions", "description": "Lists the host's sessions",
                                                  "inputSchema": {"type": "object", "properties": {}}}]})
                }
                "tools/call" => {
                    agent_runner::lock(&seen).push(message["params"].clone());
                    json!({"content": [{"type": "text", "text": "sessions: alpha, beta"}]})
                }
                other => {
                    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no {other}")}});
                    return ([("content-type", "application/json")], error.to_string()).into_response();
                }
            };
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
            ([("content-type", "application/json")], answer.to_string()).into_response()
        }
    };
    let app = axum::Router::new()
        .route("/ahp-mcp/test", axum::routing::post(handler).get(|| async { StatusCode::METHOD_NOT_ALLOWED }));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("a port");
    let url = format!("http://{}/ahp-mcp/test", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_agent_acp_calls_a_host_tool_through_the_tools_endpoint() {
    let mock = MockAnthropic::start().await.expect("the mock");
    let (dir, home) = (scratch("claude-mcp"), scratch("claude-mcp-home"));
    let (url, calls) = tiny_tools_endpoint("s3cret").await;
    let mut parent = parent("claude-acp", options(&claude_agent_acp(), &mock, &home), &dir).await;
    let chat = "ahp-chat:/mcp";
    let mut start = start_in("mcp", &dir);
    start.settings.insert("permissionMode".into(), json!("default"));
    start.tools_endpoint = Some(protocol::ToolsEndpoint { url, token: "s3cret".into() });
    parent.create(start).await.expect("create");

    parent.send(chat, "t1", "TOOL:mcp__ahp__list_sessions ARGS:{}").await.expect("send");
    // The adapter may ask before it calls a tool of an MCP server: allow it if it does.
    let state = parent
        .until(chat, PATIENCE, |c| c.active_turn.is_none() || !pending_confirmations(c).is_empty())
        .await
        .expect("a question or the end");
    if let Some(call) = pending_confirmations(&state).first() {
        confirm(&parent, chat, "t1", &call.tool_call_id, true).await;
    }
    let done = parent.until_idle(chat, PATIENCE).await.expect("the turn ends");
    assert_eq!(done.state, TurnState::Complete, "{done:?}");
    assert!(markdown(&done.response_parts).contains("sessions: alpha, beta"), "the tool's real answer: {done:?}");
    assert_eq!(agent_runner::lock(&calls).len(), 1, "called once, with the bearer token");
    let turn_request = mock.turn_requests().pop().expect("a request");
    assert!(
        turn_request.tool_names().iter().any(|n| n == "mcp__ahp__list_sessions"),
        "offered up front, no tool search"
    );
    parent.peer().request_value(methods::CLOSE, json!({"chat": chat})).await.expect("close");
}

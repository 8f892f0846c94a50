//! The tools endpoints: one MCP server per session under `/ahp-mcp/<id>` (streamable HTTP,
//! revision 2025-06-18, one bearer token per session) for backends that cannot take tools in
//! process, and `/mcp` for a caller with no session (the sessionless tools).
//!
//! Each answers `initialize`, `tools/list` and `tools/call` with JSON responses, `202` to a
//! notification, and a GET event stream that says `notifications/tools/list_changed` when the
//! session's set changes. A wrong or missing token, an unknown path, a batch or a body that is not
//! JSON each get their own status and JSON-RPC error, and touch nothing.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast;

pub use crate::host::endpoints::PREFIX;
use crate::host::facade::{Caller, ToolCall};
use crate::host::Host;
use crate::users::constant_time_eq;

/// The MCP revision this host speaks.
pub const MCP_REVISION: &str = "2025-06-18";
/// Who a message on a tools endpoint comes from.
enum Door {
    /// A session's own endpoint.
    Session(String),
    /// `/mcp`: a caller with no session.
    Sessionless(Caller),
}

fn rpc_error(status: StatusCode, id: Value, code: i32, message: impl Into<String>) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message.into() } });
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

fn rpc_result(id: Value, result: Value) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
    (StatusCode::OK, [("content-type", "application/json")], body.to_string()).into_response()
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    constant_time_eq(value.as_bytes(), format!("Bearer {token}").as_bytes())
}

/// The session an endpoint path serves, once its token checked out; else the response to send.
#[allow(clippy::result_large_err)]
fn authorize(host: &Host, id: &str, headers: &HeaderMap) -> Result<String, Response> {
    let core = host.lock();
    let Some(endpoint) = core.endpoints().get(id) else {
        return Err(rpc_error(StatusCode::NOT_FOUND, Value::Null, -32001, format!("No tools server at {PREFIX}/{id}")));
    };
    if !bearer_matches(headers, &endpoint.token) {
        return Err(rpc_error(
            StatusCode::UNAUTHORIZED,
            Value::Null,
            -32001,
            "This tools server answers only its own session's token",
        ));
    }
    Ok(endpoint.session.clone())
}

/// `POST /ahp-mcp/<id>`: one JSON-RPC message.
pub async fn post_session(
    State(host): State<Host>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let session = match authorize(&host, &id, &headers) {
        Ok(session) => session,
        Err(response) => return response,
    };
    handle(&host, Door::Session(session), body).await
}

/// `POST /mcp`: one JSON-RPC message from a caller with no session, whom the listener let in.
pub async fn post_sessionless(host: &Host, caller: Caller, body: Bytes) -> Response {
    handle(host, Door::Sessionless(caller), body).await
}

/// `GET /mcp`: an event stream that says when the sessionless tools change.
pub fn get_sessionless(host: &Host) -> Response {
    let rx = host.lock().endpoints_mut().sessionless_stream();
    Sse::new(changes(rx)).keep_alive(KeepAlive::default()).into_response()
}

/// A refusal at `/mcp`'s door, in the endpoint's shape.
pub fn door_refusal(status: StatusCode, message: impl Into<String>) -> Response {
    rpc_error(status, Value::Null, -32001, message)
}

/// `GET /ahp-mcp/<id>`: an event stream that says when the session's tools change.
pub async fn get_session(State(host): State<Host>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Err(response) = authorize(&host, &id, &headers) {
        return response;
    }
    let rx = match host.lock().endpoints().get(&id) {
        Some(endpoint) => endpoint.changes(),
        None => {
            return rpc_error(StatusCode::NOT_FOUND, Value::Null, -32001, format!("No tools server at {PREFIX}/{id}"))
        }
    };
    Sse::new(changes(rx)).keep_alive(KeepAlive::default()).into_response()
}

fn changes(rx: broadcast::Receiver<()>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                let note = json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" });
                Some((Ok(Event::default().event("message").data(note.to_string())), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

/// Any other method under the prefix.
pub async fn other_method() -> Response {
    rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        Value::Null,
        -32000,
        "This tools server takes POST (and GET for its event stream)",
    )
}

/// An unknown path under the prefix.
pub async fn unknown_path(uri: axum::http::Uri) -> Response {
    rpc_error(StatusCode::NOT_FOUND, Value::Null, -32001, format!("No tools server at {}", uri.path()))
}

/// Handles one JSON-RPC message for a session's endpoint or the sessionless one.
async fn handle(host: &Host, door: Door, body: Bytes) -> Response {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, format!("Parse error: {e}")),
    };
    if message.is_array() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "Batches are not supported: send one JSON-RPC message per request",
        );
    }
    let Some(object) = message.as_object() else {
        return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, "A message must be a JSON-RPC 2.0 object");
    };
    let Some(id) = object.get("id").cloned().filter(|v| !v.is_null()) else {
        // A notification (notifications/initialized, …) or a response: nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let method = object.get("method").and_then(Value::as_str).unwrap_or("");
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "initialize" => rpc_result(
            id,
            json!({
                "protocolVersion": MCP_REVISION,
                "capabilities": { "tools": { "listChanged": true } },
                "serverInfo": { "name": "ahpd", "version": env!("CARGO_PKG_VERSION") },
            }),
        ),
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({ "tools": list(host, &door) })),
        "tools/call" => call(host, door, id, params).await,
        other => rpc_error(
            StatusCode::OK,
            id,
            -32601,
            format!("This server answers initialize, tools/list and tools/call, not {other}"),
        ),
    }
}

/// The tools an endpoint offers, in MCP's shape.
fn list(host: &Host, door: &Door) -> Vec<Value> {
    let core = host.lock();
    let definitions = match door {
        Door::Session(session) => core.tool_specs(session).into_iter().map(|spec| spec.definition).collect(),
        Door::Sessionless(caller) => {
            core.sessionless_tools(caller).into_iter().map(|tool| tool.definition).collect::<Vec<_>>()
        }
    };
    definitions
        .into_iter()
        .map(|d| {
            let mut tool = json!({ "name": d.name, "inputSchema": d.input_schema.unwrap_or_else(|| json!({ "type": "object", "properties": {} })) });
            if let Some(description) = d.description {
                tool["description"] = Value::String(description);
            }
            if let Some(annotations) = d.annotations {
                tool["annotations"] = serde_json::to_value(annotations).unwrap_or(Value::Null);
            }
            tool
        })
        .collect()
}

async fn call(host: &Host, door: Door, id: Value, params: Value) -> Response {
    let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
        return rpc_error(StatusCode::OK, id, -32602, "tools/call needs a tool name");
    };
    let input = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
    let tool_use =
        params.get("_meta").and_then(|m| m.get("claudecode/toolUseId")).and_then(Value::as_str).map(str::to_owned);
    let session = match door {
        Door::Session(session) => session,
        Door::Sessionless(caller) => return call_sessionless(host, caller, id, name, input).await,
    };
    let (chat, turn_id, offered, client_tool, sender) = {
        let core = host.lock();
        let offered = core.offers_host_tool(&session, &name);
        let (chat, turn) = core.calling_chat(&session, tool_use.as_deref());
        // The call acts as the person who sent the running turn; with none running, nobody.
        let sender = chat.as_deref().and_then(|c| core.running_sender(c));
        (chat, turn, offered, core.client_tool(&session, &name).is_some(), sender)
    };
    if client_tool {
        // A client's tool: handed to its owner through the parent, like any backend's call.
        let Some(chat) = chat else {
            return rpc_error(StatusCode::OK, id, -32602, format!("{name} was called with no chat to run it in"));
        };
        let outcome = host.run_client_tool(&chat, tool_use, &name, input).await;
        let mut result = json!({ "content": [{ "type": "text", "text": outcome.text }] });
        if !outcome.success {
            result["isError"] = Value::Bool(true);
        }
        return rpc_result(id, result);
    }
    if !offered {
        return rpc_error(StatusCode::OK, id, -32602, format!("No tool named {name}"));
    }
    let call =
        ToolCall { session: Some(session), chat, turn_id, tool_call_id: tool_use, caller: Caller::Turn(sender), input };
    let outcome = host.run_tool(&name, call).await;
    let mut result = json!({ "content": [{ "type": "text", "text": outcome.text }] });
    if !outcome.success {
        result["isError"] = Value::Bool(true);
    }
    rpc_result(id, result)
}

/// A call on `/mcp`: a tool this caller is listed, run with no session, chat or turn.
async fn call_sessionless(host: &Host, caller: Caller, id: Value, name: String, input: Value) -> Response {
    let listed = host.lock().sessionless_tools(&caller).iter().any(|t| t.definition.name == name);
    if !listed {
        return rpc_error(StatusCode::OK, id, -32602, format!("No tool named {name}"));
    }
    let call = ToolCall { session: None, chat: None, turn_id: None, tool_call_id: None, caller, input };
    let outcome = host.run_tool(&name, call).await;
    let mut result = json!({ "content": [{ "type": "text", "text": outcome.text }] });
    if !outcome.success {
        result["isError"] = Value::Bool(true);
    }
    rpc_result(id, result)
}

impl crate::host::Core {
    /// The chat (and its running turn) a call on a session's endpoint comes from: the chat whose
    /// running turn holds the call the harness named, else the one chat with a turn running, else
    /// the session's default chat.
    pub fn calling_chat(&self, session: &str, tool_use: Option<&str>) -> (Option<String>, Option<String>) {
        let Some(state) = self.session_state(session) else { return (None, None) };
        let running: Vec<(String, String)> = state
            .chats
            .iter()
            .filter_map(|c| {
                let turn = self.chat_state(&c.resource)?.active_turn.as_ref()?;
                Some((c.resource.clone(), turn.id.clone()))
            })
            .collect();
        if let Some(tool_use) = tool_use {
            for (chat, turn) in &running {
                let holds = self.chat_state(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| {
                    t.response_parts.iter().any(|p| matches!(p, ahp_types::state::ResponsePart::ToolCall(tc)
                        if serde_json::to_value(&tc.tool_call).ok().and_then(|v| v.get("toolCallId").cloned()) == Some(Value::from(tool_use))))
                });
                if holds {
                    return (Some(chat.clone()), Some(turn.clone()));
                }
            }
        }
        if running.len() == 1 {
            return (Some(running[0].0.clone()), Some(running[0].1.clone()));
        }
        (state.default_chat.clone(), None)
    }
}

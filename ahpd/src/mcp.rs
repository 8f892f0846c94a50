//! The tools endpoints: one MCP server per session under `/ahp-mcp/<id>` (one bearer token per
//! session) for backends that cannot take tools in process, and `/mcp` for a caller with no
//! session (the sessionless tools). Both are `rmcp`'s streamable HTTP server, stateless and
//! answering in JSON, mounted on the daemon's router; [`ToolsServer`] is its handler.
//!
//! What rmcp does not carry is the smallest layer of ours, on top of it: the doors (this file's
//! [`session_door`], behind `server::tools_door`'s Host and Origin checks, and
//! `server::sessionless_door` for `/mcp`) check the bearer and put the
//! caller in the request's extensions, where the handler reads it; [`one_message`] refuses a body
//! that is not one JSON-RPC message with a JSON-RPC error (rmcp answers it with a bare 415); and
//! the GET event stream that says `notifications/tools/list_changed`, which rmcp's stateless mode
//! has no stream for.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, ErrorData, Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerJsonRpcMessage, ServerNotification, Tool, ToolAnnotations, ToolListChangedNotification,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use crate::host::endpoints::PREFIX;
use crate::host::facade::{Caller, ToolCall};
use crate::host::held::{Leave, Unasked};
use crate::host::Host;
use crate::users::constant_time_eq;

/// The largest message body read (rmcp's own default).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Who a message on a tools endpoint comes from: put in the request's extensions by the door,
/// read by [`ToolsServer`].
#[derive(Debug, Clone)]
pub enum Door {
    /// A session's own endpoint.
    Session(String),
    /// `/mcp`: a caller with no session.
    Sessionless(Caller),
}

/// rmcp's streamable HTTP server, serving [`ToolsServer`] with no sessions.
pub type Server = StreamableHttpService<ToolsServer, NeverSessionManager>;

/// The MCP server both endpoints run: rmcp's streamable HTTP server with no sessions of its own
/// (each POST stands alone, as the host's endpoints always did), answering in JSON, stopping with
/// the daemon. The `Host` check is the door's: a backend may reach its endpoint at any address the
/// daemon listens on, and both endpoints' doors check `Host` and `Origin` as the WebSocket's does
/// (`server::check_web`).
pub fn service(host: Host, cancel: CancellationToken) -> Server {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .disable_allowed_hosts()
        .with_cancellation_token(cancel);
    StreamableHttpService::new(
        move || Ok(ToolsServer { host: host.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

fn rpc_error(status: StatusCode, code: i32, message: impl Into<String>) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message.into() } });
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

/// A refusal given before the request's body was read, which says the connection closes. The
/// server cannot keep a connection alive past a body it did not read (hyper drains what has
/// arrived and closes otherwise), and a client that was not told would send its next request down
/// the closed connection: the 2.x Python SDK, refused its `server/discover`, falls back to
/// `initialize` on the same connection and meets "Server disconnected without sending a response".
fn refusal_unread(status: StatusCode, code: i32, message: impl Into<String>) -> Response {
    let mut response = rpc_error(status, code, message);
    response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    response
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
    // An id nobody has and a known id with a wrong token get one answer, so ids cannot be probed.
    let refused =
        || refusal_unread(StatusCode::UNAUTHORIZED, -32001, "This tools server answers only its own session's token");
    let core = host.lock();
    let Some(endpoint) = core.endpoints().get(id) else {
        return Err(refused());
    };
    if !bearer_matches(headers, &endpoint.token) {
        return Err(refused());
    }
    Ok(endpoint.session.clone())
}

/// The door of `/ahp-mcp/<id>`: only the session's own token passes, and the request goes on
/// carrying [`Door::Session`].
pub async fn session_door(
    State(host): State<Host>,
    Path(id): Path<String>,
    mut request: Request,
    next: Next,
) -> Response {
    match authorize(&host, &id, request.headers()) {
        Ok(session) => {
            request.extensions_mut().insert(Door::Session(session));
            next.run(request).await
        }
        Err(refusal) => refusal,
    }
}

/// A refusal at `/mcp`'s door, in the endpoint's shape (the body unread: the connection closes).
pub fn door_refusal(status: StatusCode, message: impl Into<String>) -> Response {
    refusal_unread(status, -32001, message)
}

/// In front of rmcp on a POST: a body that is not JSON, a batch, or not one JSON-RPC message gets
/// its JSON-RPC error (-32700, -32600) and a 400, and touches nothing; one message goes on.
pub async fn one_message(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            format!("A message may be at most {MAX_BODY_BYTES} bytes"),
        );
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, -32700, format!("Parse error: {e}")),
    };
    if message.is_array() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "Batches are not supported: send one JSON-RPC message per request",
        );
    }
    if !message.is_object() {
        return rpc_error(StatusCode::BAD_REQUEST, -32600, "A message must be a JSON-RPC 2.0 object");
    }
    if let Err(e) = serde_json::from_value::<ClientJsonRpcMessage>(message) {
        return rpc_error(StatusCode::BAD_REQUEST, -32600, format!("Not an MCP message this server reads: {e}"));
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// `GET /ahp-mcp/<id>`, past its door: an event stream that says when the session's tools change.
pub async fn session_stream(State(host): State<Host>, Path(id): Path<String>) -> Response {
    let Some(rx) = host.lock().endpoints().get(&id).map(|endpoint| endpoint.changes()) else {
        return rpc_error(StatusCode::NOT_FOUND, -32001, format!("No tools server at {PREFIX}/{id}"));
    };
    Sse::new(changes(rx)).keep_alive(KeepAlive::default()).into_response()
}

/// `GET /mcp`, past its door: an event stream that says when the sessionless tools change.
pub fn sessionless_stream(host: &Host) -> Response {
    let rx = host.lock().endpoints_mut().sessionless_stream();
    Sse::new(changes(rx)).keep_alive(KeepAlive::default()).into_response()
}

fn changes(rx: broadcast::Receiver<()>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                let note = ServerJsonRpcMessage::notification(ServerNotification::ToolListChangedNotification(
                    ToolListChangedNotification::default(),
                ));
                let data = serde_json::to_string(&note).unwrap_or_default();
                Some((Ok(Event::default().event("message").data(data)), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

/// Any other method under the prefix.
pub async fn other_method() -> Response {
    refusal_unread(
        StatusCode::METHOD_NOT_ALLOWED,
        -32000,
        "This tools server takes POST (and GET for its event stream)",
    )
}

/// An unknown path under the prefix.
pub async fn unknown_path(uri: axum::http::Uri) -> Response {
    refusal_unread(StatusCode::NOT_FOUND, -32001, format!("No tools server at {}", uri.path()))
}

/// rmcp's handler for both endpoints: `tools/list` and `tools/call` for whoever the door let in.
#[derive(Clone)]
pub struct ToolsServer {
    host: Host,
}

impl ServerHandler for ToolsServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("ahpd", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(list(&self.host, &door_of(&context)?)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let door = door_of(&context)?;
        let name = request.name.into_owned();
        let input = request.arguments.map_or_else(|| json!({}), Value::Object);
        let tool_use = context.meta.get("claudecode/toolUseId").and_then(Value::as_str).map(str::to_owned);
        match door {
            Door::Session(session) => call(&self.host, session, name, input, tool_use).await,
            Door::Sessionless(caller) => call_sessionless(&self.host, caller, name, input).await,
        }
        .map(CallToolResponse::from)
    }

    /// A method rmcp does not know, or a known one whose params did not read as its type (a
    /// `tools/call` with no tool name comes here as a custom request).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(match request.method.as_str() {
            "tools/call" => ErrorData::invalid_params(
                "tools/call needs a tool name (a string), and arguments that are an object when given",
                None,
            ),
            other => ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("This server answers initialize, tools/list and tools/call, not {other}"),
                None,
            ),
        })
    }
}

/// The door the request came through (its extensions, from [`session_door`] or `/mcp`'s).
fn door_of(context: &RequestContext<RoleServer>) -> Result<Door, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Door>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("The request came through no door", None))
}

/// The tools a door offers, as MCP tools: the definitions' names, descriptions, input schemas
/// and annotations (`deferLoading` is the host's hint to a harness, never on the wire).
fn list(host: &Host, door: &Door) -> Vec<Tool> {
    let core = host.lock();
    let definitions = match door {
        Door::Session(session) => core.tool_specs(session).into_iter().map(|spec| spec.definition).collect(),
        Door::Sessionless(caller) => {
            core.sessionless_tools(caller).into_iter().map(|tool| tool.definition).collect::<Vec<_>>()
        }
    };
    definitions.into_iter().map(mcp_tool).collect()
}

fn mcp_tool(definition: ahp_types::state::ToolDefinition) -> Tool {
    let mut tool = Tool::default();
    tool.name = definition.name.into();
    tool.description = definition.description.map(Into::into);
    tool.input_schema = Arc::new(match definition.input_schema {
        Some(Value::Object(schema)) => schema,
        _ => json!({ "type": "object", "properties": {} }).as_object().cloned().unwrap_or_default(),
    });
    tool.annotations = definition
        .annotations
        .and_then(|a| serde_json::to_value(a).ok())
        .and_then(|a| serde_json::from_value::<ToolAnnotations>(a).ok());
    tool
}

fn result_of(outcome: protocol::ToolOutcome) -> CallToolResult {
    let content = vec![ContentBlock::text(outcome.text)];
    if outcome.success {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// A call on a session's endpoint: a client's tool goes to its owner through the parent, a host
/// tool the session is offered runs as the person who sent the running turn.
async fn call(
    host: &Host,
    session: String,
    name: String,
    input: Value,
    tool_use: Option<String>,
) -> Result<CallToolResult, ErrorData> {
    let (chat, turn_id, offered, client_tool, sender) = {
        let core = host.lock();
        let offered = core.offers_host_tool(&session, &name);
        let (chat, turn) = core.calling_chat(&session, tool_use.as_deref());
        // The call acts as the person who sent the running turn; with none running, nobody.
        let sender = chat.as_deref().and_then(|c| core.running_sender(c));
        (chat, turn, offered, core.client_tool(&session, &name).is_some(), sender)
    };
    if client_tool {
        let Some(chat) = chat else {
            return Err(ErrorData::invalid_params(format!("{name} was called with no chat to run it in"), None));
        };
        return Ok(result_of(host.run_client_tool(&chat, tool_use, &name, input).await));
    }
    if !offered {
        return Err(ErrorData::invalid_params(format!("No tool named {name}"), None));
    }
    // The host's backstop: a destructive tool the agent called without asking waits for a person.
    let unasked = Unasked {
        session: &session,
        chat: chat.as_deref(),
        tool_call_id: tool_use.as_deref(),
        name: &name,
        input: &input,
    };
    let drawn = match host.leave_for(unasked).await {
        Leave::Run { drawn } => drawn,
        Leave::Refused(why) => return Ok(CallToolResult::error(vec![ContentBlock::text(why)])),
    };
    let calling = chat.clone();
    let call =
        ToolCall { session: Some(session), chat, turn_id, tool_call_id: tool_use, caller: Caller::Turn(sender), input };
    let outcome = host.run_tool(&name, call).await;
    if let (Some(chat), Some(drawn)) = (calling, drawn) {
        host.complete_drawn(&chat, drawn, &outcome);
    }
    Ok(result_of(outcome))
}

/// A call on `/mcp`: a tool this caller is listed, run with no session, chat or turn.
async fn call_sessionless(
    host: &Host,
    caller: Caller,
    name: String,
    input: Value,
) -> Result<CallToolResult, ErrorData> {
    let listed = host.lock().sessionless_tools(&caller).iter().any(|t| t.definition.name == name);
    if !listed {
        return Err(ErrorData::invalid_params(format!("No tool named {name}"), None));
    }
    let call = ToolCall { session: None, chat: None, turn_id: None, tool_call_id: None, caller, input };
    Ok(result_of(host.run_tool(&name, call).await))
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

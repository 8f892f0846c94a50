//! A scripted mock of the Anthropic Messages API on 127.0.0.1, for driving the real `claude` CLI
//! (and anything built on it, such as claude-agent-acp) in tests without a network.
//!
//! # Use
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let mock = tests::mocks::anthropic::MockAnthropic::start().await?;
//! // Point the CLI at it: ANTHROPIC_BASE_URL=<mock.base_url()>, ANTHROPIC_API_KEY=dummy,
//! // CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, HOME=<a temporary folder>.
//! let env = mock.cli_env();
//! // ... run a turn whose prompt says what the model does ...
//! let turns = mock.turn_requests(); // what the model was sent, oldest first
//! assert!(turns[0].last_user_text().contains("hello"));
//! # Ok(()) }
//! ```
//!
//! # The script
//!
//! Every `POST /v1/messages` is answered from the **user text after the last assistant message**
//! (text blocks only; `role: "system"` entries and `<system-reminder>` blocks the CLI adds are
//! skipped). Keywords, combinable:
//!
//! | keyword | the model |
//! |---|---|
//! | `TOOL:<Name> ARGS:{json}` | says "I will call <Name>." and calls tool `<Name>` (one of the request's `tools`) with the JSON (to the end of the line) as input; `ARGS` may be left out (`{}`) |
//! | `THINK` | thinks ("Let me think about this briefly.") before answering |
//! | `SLOW` | waits 400 ms between stream events (for interrupts) |
//! | `LONG` | streams its answer in 60 pieces rather than 3 (with `SLOW`, a reply that runs for half a minute) |
//! | `ERROR` | the request fails with HTTP 400 `invalid_request_error` (not retried by the CLI); read from the last text of the last user message alone, since the CLI sends a prompt whose request failed again with the next one |
//! | `REPLY:<text>` | answers exactly `<text>` (to the end of the line) |
//! | anything else | answers `Hello from the mock model. You said: <last line>` |
//!
//! A side call (`tool_choice` `tool` or `any`, or a JSON `output_format`: Claude Code's auto-mode
//! classifier and its other small questions) is answered as [`super::side`] says: the forced tool
//! called with arguments of its schema's shape, read as the test's verdict (`allow` unless it
//! chose), or the JSON object as text.
//!
//! When the last user message carries a `tool_result`, the model answers
//! `Tool result received: <result text>` (and ` You also said: <text>` for text beside it, which is
//! where a steering message taken in at a tool call lands) and ends its turn.
//!
//! Streaming (`stream: true`) is answered as SSE (`message_start`, `content_block_*` with
//! `text_delta` / `thinking_delta` / `signature_delta` / `input_json_delta`, `message_delta`,
//! `message_stop`), anything else as one JSON message. `POST /v1/messages/count_tokens` answers
//! `{"input_tokens": 42}`, `GET /v1/models` a short list, `HEAD` anything 200.
//!
//! Every request is recorded ([`MockAnthropic::requests`]) before it is answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::lock;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use super::side::{self, Side, SideCalls};

/// What the thinking block says when a prompt asks for `THINK`.
pub const THINKING: &str = "Let me think about this briefly.";
/// The answer's opening when nothing else was asked.
pub const HELLO: &str = "Hello from the mock model. You said: ";
/// How long `SLOW` waits between stream events.
pub const SLOW_EVENT_DELAY: Duration = Duration::from_millis(400);
/// How many pieces a `LONG` answer's text is streamed in.
pub const LONG_PIECES: usize = 60;

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET`, `POST`, `HEAD`.
    pub method: String,
    /// The path without the query string (`/v1/messages`).
    pub path: String,
    /// The query string, if any (`beta=true`).
    pub query: Option<String>,
    /// Headers, lower-case names.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` when there was none or it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// True for `POST /v1/messages`.
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && self.path == "/v1/messages"
    }

    /// True for a request that carries a conversation turn: a streamed `POST /v1/messages` that
    /// offers tools (side requests such as a model probe or a title offer none).
    pub fn is_turn(&self) -> bool {
        self.is_messages()
            && self.body["stream"] == Value::Bool(true)
            && !self.tool_names().is_empty()
            && !self.is_side()
    }

    /// True for a side call ([`super::side`]): a forced tool choice or a request for JSON.
    pub fn is_side(&self) -> bool {
        side::anthropic(&self.body).is_some()
    }

    /// The model asked for.
    pub fn model(&self) -> Option<&str> {
        self.body["model"].as_str()
    }

    /// The `messages` array.
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"].as_array().cloned().unwrap_or_default()
    }

    /// Every text of every message, in order, `role: text` per line (tool results included as
    /// their text): handy for "did the model see X".
    pub fn transcript_text(&self) -> String {
        let mut out = String::new();
        for message in self.messages() {
            let role = message["role"].as_str().unwrap_or("?");
            for text in all_texts(&message["content"]) {
                out.push_str(role);
                out.push_str(": ");
                out.push_str(&text);
                out.push('\n');
            }
        }
        out
    }

    /// The system prompt, its text blocks joined by new lines.
    pub fn system_text(&self) -> String {
        match &self.body["system"] {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
            _ => String::new(),
        }
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// The user text the script is read from (see the module docs).
    pub fn last_user_text(&self) -> String {
        trailing_user_text(&self.body)
    }
}

/// A running mock. Dropping it stops the server.
pub struct MockAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<RecordedRequest>>,
    arrived: Notify,
    /// How many streamed replies lost their client before their last event.
    cut_off: std::sync::atomic::AtomicUsize,
    cut: Notify,
    side: Side,
}

impl MockAnthropic {
    /// Starts a mock on 127.0.0.1 with a port the system picks.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stop_rx.await;
            });
            if let Err(e) = serve.await {
                eprintln!("mock-anthropic stopped: {e}");
            }
        });
        Ok(Self { addr, shared, stop: Some(stop_tx) })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment a CLI needs to talk to this mock and nothing else (without `HOME`, which a
    /// test sets to a folder of its own).
    pub fn cli_env(&self) -> BTreeMap<String, String> {
        [
            ("ANTHROPIC_BASE_URL", self.base_url()),
            ("ANTHROPIC_API_KEY", "dummy".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The requests that carried a conversation turn ([`RecordedRequest::is_turn`]), oldest first.
    pub fn turn_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_turn).collect()
    }

    /// From now on the side calls ([`super::side`]) are answered as `choice` says.
    pub fn side_calls(&self, choice: SideCalls) {
        self.shared.side.choose(choice);
    }

    /// The side calls answered so far, oldest first.
    pub fn side_answered(&self) -> Vec<side::Answered> {
        self.shared.side.answered()
    }

    /// Waits until a request matching `predicate` has arrived (or `within` passed), answering it.
    pub async fn wait_for(
        &self,
        within: Duration,
        predicate: impl Fn(&RecordedRequest) -> bool,
    ) -> Option<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            if let Some(found) = self.requests().into_iter().find(|r| predicate(r)) {
                return Some(found);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}

impl MockAnthropic {
    /// Waits until `n` streamed replies were cut off by their client going away before the last
    /// event (or `within` passed), and answers how many were.
    pub async fn until_replies_cut_off(&self, n: usize, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let cut = self.shared.cut.notified();
            let now = self.shared.cut_off.load(std::sync::atomic::Ordering::SeqCst);
            if now >= n || tokio::time::timeout_at(deadline, cut).await.is_err() {
                return self.shared.cut_off.load(std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: header_map(&parts.headers),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    lock(&shared.requests).push(recorded.clone());
    shared.arrived.notify_waiters();

    match (&parts.method, recorded.path.as_str()) {
        (&Method::HEAD, _) => StatusCode::OK.into_response(),
        (&Method::GET, path) if path.starts_with("/v1/models") => json_response(StatusCode::OK, models()),
        (&Method::POST, "/v1/messages/count_tokens") => json_response(StatusCode::OK, json!({"input_tokens": 42})),
        (&Method::POST, "/v1/messages") => answer_messages(&recorded.body, shared.clone()),
        _ => json_response(
            StatusCode::NOT_FOUND,
            json!({"type": "error", "error": {"type": "not_found_error", "message": "mock: no such path"}}),
        ),
    }
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [("content-type", "application/json"), ("request-id", "req_mock")], body.to_string()).into_response()
}

fn models() -> Value {
    let model = |id: &str, name: &str| json!({"type": "model", "id": id, "display_name": name, "created_at": "2025-01-01T00:00:00Z"});
    json!({
        "data": [model("claude-opus-5-5", "Claude Opus 5.5"), model("claude-sonnet-5-5", "Claude Sonnet 5.5"), model("claude-haiku-5-5", "Claude Haiku 5.5")],
        "has_more": false, "first_id": "claude-opus-5-5", "last_id": "claude-haiku-5-5"
    })
}

/// A content block the mock model answers with.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Thinking(String),
    Text(String),
    ToolUse { id: String, name: String, input: Value },
}

impl Block {
    fn to_json(&self) -> Value {
        match self {
            Block::Thinking(t) => json!({"type": "thinking", "thinking": t, "signature": "mock-signature"}),
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::ToolUse { id, name, input } => json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        }
    }
}

/// What the script decided for one request.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    blocks: Vec<Block>,
    stop_reason: &'static str,
    delay: Duration,
    /// How many pieces each text block is streamed in.
    pieces: usize,
    error: bool,
}

fn answer_messages(body: &Value, shared: Arc<Shared>) -> Response {
    let plan = match side::anthropic(body) {
        Some(asked) => side_plan(&asked, shared.side.answer(&asked)),
        None => plan_reply(body),
    };
    if plan.error {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "mock: the prompt asked for an error"}}),
        );
    }
    let model = body["model"].as_str().unwrap_or("mock-model").to_owned();
    let id = format!("msg_mock_{}", unique());
    if body["stream"] != Value::Bool(true) {
        let content: Vec<Value> = plan.blocks.iter().map(Block::to_json).collect();
        return json_response(
            StatusCode::OK,
            json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
                   "stop_reason": plan.stop_reason, "stop_sequence": null, "usage": usage(12)}),
        );
    }
    stream_response(sse_events(&id, &model, &plan), plan.delay, shared)
}

fn usage(output_tokens: u64) -> Value {
    json!({"input_tokens": 25, "output_tokens": output_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

/// Streams events with `delay` between them; stops (and counts the reply cut off) when the client
/// goes away.
fn stream_response(events: Vec<(String, Value)>, delay: Duration, shared: Arc<Shared>) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for (name, data) in events {
            let frame = format!("event: {name}\ndata: {data}\n\n");
            if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                // The client hung up (an interrupt, a killed CLI): stop streaming.
                shared.cut_off.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                shared.cut.notify_waiters();
                return;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .header("request-id", "req_mock")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn sse_events(id: &str, model: &str, plan: &Plan) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    let mut push = |name: &str, data: Value| events.push((name.to_owned(), data));
    push(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(1)}}),
    );
    push("ping", json!({"type": "ping"}));
    for (index, block) in plan.blocks.iter().enumerate() {
        let start = match block {
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::Thinking(_) => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::ToolUse { id, name, .. } => json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
        };
        push("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": start}));
        let delta = |delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        match block {
            Block::Text(text) => {
                for piece in chunks(text, plan.pieces) {
                    push("content_block_delta", delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Block::Thinking(thinking) => {
                for piece in chunks(thinking, 2) {
                    push("content_block_delta", delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                push("content_block_delta", delta(json!({"type": "signature_delta", "signature": "mock-signature"})));
            }
            Block::ToolUse { input, .. } => {
                for piece in chunks(&input.to_string(), 2) {
                    push("content_block_delta", delta(json!({"type": "input_json_delta", "partial_json": piece})));
                }
            }
        }
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
    }
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": plan.stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 12}}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    events
}

/// Splits `s` into about `n` pieces on character boundaries.
fn chunks(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let step = (chars.len() / n.max(1)).max(1);
    chars.chunks(step).map(|c| c.iter().collect()).collect()
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}{:04x}", nanos & 0xffff_ffff_ffff, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The text blocks of a message's content that a person wrote (not the CLI's reminders).
fn user_texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .filter(|t| !t.trim_start().starts_with("<system-reminder>"))
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Every text in a message's content, tool results' texts included.
fn all_texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .flat_map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().map(|t| vec![t.to_owned()]).unwrap_or_default(),
                Some("tool_result") => all_texts(&b["content"]),
                _ => Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The user text after the last assistant message; `role: "system"` entries are skipped.
fn trailing_user_text(body: &Value) -> String {
    let mut texts: Vec<String> = Vec::new();
    for message in body["messages"].as_array().map(Vec::as_slice).unwrap_or_default().iter().rev() {
        match message["role"].as_str() {
            Some("assistant") => break,
            Some("user") => {
                let mut these = user_texts(&message["content"]);
                these.append(&mut texts);
                texts = these;
            }
            _ => {}
        }
    }
    texts.join("\n")
}

/// The last text a person wrote: the last text block of the last user message (the CLI merges a
/// prompt whose request failed into the next one).
fn last_user_message_text(body: &Value) -> String {
    let messages = body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let last = messages.iter().rev().find(|m| m["role"] == "user");
    last.and_then(|m| user_texts(&m["content"]).pop()).unwrap_or_default()
}

fn last_tool_result(body: &Value) -> Option<String> {
    let last_user = body["messages"].as_array()?.iter().rev().find(|m| m["role"] == "user")?;
    let results: Vec<&Value> = last_user["content"].as_array()?.iter().filter(|b| b["type"] == "tool_result").collect();
    let last = results.last()?;
    Some(all_texts(&last["content"]).join(" "))
}

/// The rest of the line after `marker`, trimmed.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let start = text.find(marker)? + marker.len();
    Some(text[start..].lines().next().unwrap_or("").trim())
}

/// The reply to a side call: the forced tool called with `answer`, or `answer` as text.
fn side_plan(asked: &side::Asked, answer: Value) -> Plan {
    let mut plan = Plan { blocks: Vec::new(), stop_reason: "end_turn", delay: Duration::ZERO, pieces: 1, error: false };
    match asked {
        side::Asked::Call { name, .. } => {
            plan.blocks.push(Block::ToolUse {
                id: format!("toolu_mock_{}", unique()),
                name: name.clone(),
                input: answer,
            });
            plan.stop_reason = "tool_use";
        }
        side::Asked::Json { .. } => plan.blocks.push(Block::Text(answer.to_string())),
    }
    plan
}

fn plan_reply(body: &Value) -> Plan {
    let text = trailing_user_text(body);
    let delay = if text.contains("SLOW") { SLOW_EVENT_DELAY } else { Duration::ZERO };
    let pieces = if text.contains("LONG") { LONG_PIECES } else { 3 };
    let mut plan = Plan { blocks: Vec::new(), stop_reason: "end_turn", delay, pieces, error: false };
    if let Some(result) = last_tool_result(body) {
        let mut answer = format!("Tool result received: {}", truncate(&result, 200));
        let extra = text.trim();
        if !extra.is_empty() {
            answer.push_str(&format!(" You also said: {}", truncate(extra, 200)));
        }
        plan.blocks.push(Block::Text(answer));
        return plan;
    }
    if last_user_message_text(body).contains("ERROR") {
        plan.error = true;
        return plan;
    }
    if text.contains("THINK") {
        plan.blocks.push(Block::Thinking(THINKING.to_owned()));
    }
    let offered: Vec<String> = body["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    if let Some(name) = after(&text, "TOOL:").and_then(|rest| rest.split_whitespace().next()) {
        if offered.iter().any(|o| o == name) {
            let input = after(&text, "ARGS:").and_then(|a| serde_json::from_str(a).ok()).unwrap_or_else(|| json!({}));
            plan.blocks.push(Block::Text(format!("I will call {name}.")));
            plan.blocks.push(Block::ToolUse { id: format!("toolu_mock_{}", unique()), name: name.to_owned(), input });
            plan.stop_reason = "tool_use";
            return plan;
        }
        plan.blocks.push(Block::Text(format!("I was not offered a tool called {name}.")));
        return plan;
    }
    if let Some(reply) = after(&text, "REPLY:") {
        plan.blocks.push(Block::Text(reply.to_owned()));
        return plan;
    }
    let last_line = text.trim().lines().last().unwrap_or("").trim();
    plan.blocks.push(Block::Text(format!("{HELLO}{}", truncate(last_line, 80))));
    plan
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: Value) -> Value {
        json!({"model": "m", "stream": true, "messages": messages, "tools": [{"name": "Bash"}, {"name": "mcp__host__list_sessions"}]})
    }

    #[test]
    fn reads_the_script_after_the_last_assistant_message_skipping_system_entries() {
        let b = body(json!([
            {"role": "user", "content": "TOOL:Bash"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>ERROR THINK</system-reminder>"}, {"type": "text", "text": "THINK please"}]},
            {"role": "system", "content": "an environment note"}
        ]));
        assert_eq!(trailing_user_text(&b), "THINK please");
        let plan = plan_reply(&b);
        assert_eq!(plan.blocks[0], Block::Thinking(THINKING.into()));
        assert_eq!(plan.blocks[1], Block::Text(format!("{HELLO}THINK please")));
    }

    #[test]
    fn an_error_is_asked_for_by_the_last_prompt_alone() {
        let failed_then_more = body(json!([
            {"role": "user", "content": [{"type": "text", "text": "ERROR please"}, {"type": "text", "text": "fine now?"}]}
        ]));
        assert!(!plan_reply(&failed_then_more).error);
        assert!(plan_reply(&body(json!([{"role": "user", "content": "ERROR please"}]))).error);
    }

    #[test]
    fn calls_an_offered_tool_with_its_args() {
        let plan =
            plan_reply(&body(json!([{"role": "user", "content": "go TOOL:mcp__host__list_sessions ARGS:{\"a\": 1}"}])));
        assert_eq!(plan.stop_reason, "tool_use");
        assert!(
            matches!(&plan.blocks[1], Block::ToolUse { name, input, .. } if name == "mcp__host__list_sessions" && input == &json!({"a": 1}))
        );
        let not_offered = plan_reply(&body(json!([{"role": "user", "content": "TOOL:Nope"}])));
        assert_eq!(not_offered.stop_reason, "end_turn");
    }

    #[test]
    fn answers_a_tool_result_and_what_came_beside_it() {
        let plan = plan_reply(&body(json!([
            {"role": "user", "content": "TOOL:Bash"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "42"}]}, {"type": "text", "text": "steer"}]}
        ])));
        assert_eq!(plan.blocks, vec![Block::Text("Tool result received: 42 You also said: steer".into())]);
    }

    #[test]
    fn streams_every_block_in_order() {
        let plan = Plan {
            blocks: vec![Block::Thinking("hm".into()), Block::Text("hello".into())],
            stop_reason: "end_turn",
            delay: Duration::ZERO,
            pieces: 3,
            error: false,
        };
        let names: Vec<String> = sse_events("m1", "x", &plan).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.first().map(String::as_str), Some("message_start"));
        assert_eq!(names.last().map(String::as_str), Some("message_stop"));
        assert_eq!(names.iter().filter(|n| *n == "content_block_start").count(), 2);
    }

    #[tokio::test]
    async fn records_requests_and_answers_json_and_sse() {
        let mock = MockAnthropic::start().await.expect("mock");
        let client = SimpleHttp(mock.addr);
        let (status, text) = client
            .post(
                "/v1/messages?beta=true",
                &json!({"model": "m", "messages": [{"role": "user", "content": "REPLY:pong"}]}),
            )
            .await;
        assert_eq!(status, 200);
        assert!(text.contains("pong"), "{text}");
        let (_, sse) = client
            .post(
                "/v1/messages",
                &json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert!(sse.contains("event: message_stop"), "{sse}");
        let requests = mock.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].query.as_deref(), Some("beta=true"));
        assert_eq!(requests[1].last_user_text(), "hi");
    }

    /// Just enough HTTP/1.1 to test the mock without pulling in a client crate.
    struct SimpleHttp(SocketAddr);

    impl SimpleHttp {
        async fn post(&self, path: &str, body: &Value) -> (u16, String) {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(self.0).await.expect("connect");
            let body = body.to_string();
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await.expect("write");
            stream.write_all(body.as_bytes()).await.expect("write");
            let mut out = String::new();
            stream.read_to_string(&mut out).await.expect("read");
            let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
            (status, out)
        }
    }
}

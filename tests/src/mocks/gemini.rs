//! A scripted mock of the Gemini API (`generativelanguage`'s `v1beta/models/*`) on 127.0.0.1, for
//! driving the real Gemini CLI (`gemini --acp`) in tests without a network.
//!
//! The CLI is pointed at it with `GOOGLE_GEMINI_BASE_URL` and a dummy `GEMINI_API_KEY`
//! ([`MockGemini::cli_env`]; the CLI then signs in as its "gateway" and sends the key as
//! `x-goog-api-key`). Every `POST .../models/<model>:streamGenerateContent` (the conversation) is
//! answered from the **user text after the last model turn** (text parts, not thoughts), a user
//! part acted on once:
//!
//! | the conversation | the reply |
//! |---|---|
//! | ends with a `functionResponse` | text `tool said: <first line of its output>` |
//! | `[[error]]` in the user text | HTTP 400 with an error body (not retried) |
//! | `[[call NAME {json}]]` | one `functionCall`: `NAME` with those arguments |
//! | `[[think]]` | a thought part (`thought: true`) first, then text `thought done` |
//! | `[[hold]]` | the first word, then nothing until [`MockGemini::release`] (or the client hangs up) |
//! | `[[slow]]` | twenty words, a little apart |
//! | anything else | text `mock reply to: <the last text part>` |
//!
//! A user part is acted on once: a later request that carries it again at the same place (the
//! turn after a stopped one, a conversation loaded again) answers only what is new.
//!
//! The CLI also asks the model small questions of its own (which model to route to, whether the
//! model should go on speaking, whether it is looping): a request for JSON (`responseMimeType`,
//! `responseJsonSchema`) or one forcing a function call (`functionCallingConfig.mode: ANY`) is a side
//! call, answered with an object of the shape asked, read as [`super::side`] says (the first of each
//! `enum` that is not a verdict, so the next speaker is the `user`); a `generateContent` otherwise
//! with a line of text; neither counts as acting on the conversation. `countTokens` answers 42.
//! Every request is recorded ([`MockGemini::requests`]) before it is answered.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::lock;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use super::holds::Holds;
use super::side::{self, Side, SideCalls};

/// What the thought part says when a prompt asks for `[[think]]`.
pub const THOUGHT: &str = "**Weighing it** Let me think about this.";

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`.
    pub method: String,
    /// The path without the query (`/v1beta/models/gemini-2.5-pro:streamGenerateContent`).
    pub path: String,
    /// The JSON body (`Null` when there was none).
    pub body: Value,
}

impl Recorded {
    /// The model named in the path.
    pub fn model(&self) -> &str {
        let last = self.path.rsplit('/').next().unwrap_or_default();
        last.split(':').next().unwrap_or_default()
    }

    /// The method after the model (`streamGenerateContent`, `generateContent`, `countTokens`).
    pub fn verb(&self) -> &str {
        self.path.rsplit_once(':').map(|(_, verb)| verb).unwrap_or_default()
    }

    /// True for a side call ([`super::side`]): JSON or a forced function call asked for.
    pub fn is_side(&self) -> bool {
        side::gemini(&self.body).is_some()
    }

    /// True for a request that carries the conversation: a streamed one that offers tools.
    pub fn is_turn(&self) -> bool {
        self.verb() == "streamGenerateContent" && !self.is_side() && !self.tool_names().is_empty()
    }

    /// The `contents` array.
    pub fn contents(&self) -> Vec<Value> {
        self.body["contents"].as_array().cloned().unwrap_or_default()
    }

    /// The names of the functions offered.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
        tools
            .iter()
            .flat_map(|t| t["functionDeclarations"].as_array().cloned().unwrap_or_default())
            .filter_map(|f| f["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Every part of every content, in order, `role: text` per line (a call as `role: call NAME
    /// {args}`, a function's answer as `role: NAME answered {response}`): handy for "did the model
    /// see X".
    pub fn transcript_text(&self) -> String {
        let mut out = String::new();
        for content in self.contents() {
            let role = content["role"].as_str().unwrap_or("?");
            for part in content["parts"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let line = if let Some(text) = part["text"].as_str() {
                    text.to_owned()
                } else if let Some(call) = part.get("functionCall") {
                    format!("call {} {}", call["name"].as_str().unwrap_or_default(), call["args"])
                } else if let Some(answer) = part.get("functionResponse") {
                    format!("{} answered {}", answer["name"].as_str().unwrap_or_default(), answer["response"])
                } else {
                    continue;
                };
                out.push_str(&format!("{role}: {line}\n"));
            }
        }
        out
    }

    /// The user texts after the last model turn, joined by new lines.
    pub fn last_user_text(&self) -> String {
        trailing_user_parts(&self.body).into_iter().map(|(_, text)| text).collect::<Vec<_>>().join("\n")
    }
}

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    answered: Mutex<HashSet<(usize, String)>>,
    arrived: Notify,
    holds: Holds,
    side: Side,
}

/// A running mock. Dropping it stops the server.
pub struct MockGemini {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for MockGemini {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl MockGemini {
    /// Starts a mock on 127.0.0.1 with a port the system picks.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            answered: Mutex::new(HashSet::new()),
            arrived: Notify::new(),
            holds: Holds::default(),
            side: Side::default(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stop_rx.await;
            });
            if let Err(e) = serve.await {
                eprintln!("mock-gemini stopped: {e}");
            }
        });
        Ok(Self { addr, shared, stop: Some(stop_tx) })
    }

    /// `http://127.0.0.1:PORT`, for `GOOGLE_GEMINI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the Gemini CLI needs to talk to this mock (without `HOME`, which a test sets to a folder
    /// of its own).
    pub fn cli_env(&self) -> BTreeMap<String, String> {
        [("GOOGLE_GEMINI_BASE_URL", self.base_url()), ("GEMINI_API_KEY", "mock-dummy-key".to_owned())]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// The requests that carried the conversation ([`Recorded::is_turn`]), oldest first.
    pub fn turn_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(Recorded::is_turn).collect()
    }

    /// Waits until a request matching `predicate` has arrived (or `within` passed).
    pub async fn wait_for(&self, within: Duration, predicate: impl Fn(&Recorded) -> bool) -> Option<Recorded> {
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

    /// Lets one held stream (`[[hold]]`) finish; a release given before the stream holds waits for it.
    pub fn release(&self) {
        self.shared.holds.release();
    }

    /// How many streams are holding right now.
    pub fn holding(&self) -> usize {
        self.shared.holds.holding()
    }

    /// Waits until exactly `count` streams hold, at most `within`.
    pub async fn until_holding(&self, count: usize, within: Duration) -> Result<(), String> {
        self.shared.holds.until_holding(count, within).await
    }

    /// From now on the side calls ([`super::side`]) are answered as `choice` says.
    pub fn side_calls(&self, choice: SideCalls) {
        self.shared.side.choose(choice);
    }

    /// The side calls answered so far, oldest first.
    pub fn side_answered(&self) -> Vec<side::Answered> {
        self.shared.side.answered()
    }
}

// ---------------------------------------------------------------- HTTP

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    lock(&shared.requests).push(recorded.clone());
    shared.arrived.notify_waiters();
    match (&parts.method, recorded.verb()) {
        (&Method::GET, _) if recorded.path.ends_with("/models") => {
            let models = ["gemini-2.5-pro", "gemini-2.5-flash"].map(|m| json!({"name": format!("models/{m}")}));
            json_response(StatusCode::OK, json!({ "models": models }))
        }
        (&Method::POST, "countTokens") => json_response(StatusCode::OK, json!({"totalTokens": 42})),
        (&Method::POST, "generateContent" | "streamGenerateContent") if recorded.is_side() => {
            let asked = side::gemini(&recorded.body).unwrap_or(side::Asked::Json { schema: json!({}) });
            let answer = shared.side.answer(&asked);
            let plan = match asked {
                side::Asked::Call { name, .. } => {
                    Plan { reply: Reply::Call { name, args: answer }, ..Plan::text(String::new()) }
                }
                side::Asked::Json { .. } => Plan::text(answer.to_string()),
            };
            reply(&recorded, plan, shared)
        }
        (&Method::POST, "generateContent") => {
            let answer = Plan::text(format!("mock reply to: {}", last_text(&recorded.body)));
            reply(&recorded, answer, shared)
        }
        (&Method::POST, "streamGenerateContent") => {
            let plan = {
                let mut answered = lock(&shared.answered);
                let plan = plan(&recorded.body, &answered);
                answered.extend(user_parts(&recorded.body));
                plan
            };
            reply(&recorded, plan, shared)
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            json!({"error": {"code": 404, "message": format!("mock: no such path {}", recorded.path), "status": "NOT_FOUND"}}),
        ),
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

/// Answers `plan` as one JSON response or as SSE, as the request's verb asks.
fn reply(recorded: &Recorded, plan: Plan, shared: Arc<Shared>) -> Response {
    if plan.error {
        let error = json!({"error": {"code": 400, "message": "mock: the prompt asked for an error", "status": "INVALID_ARGUMENT"}});
        return json_response(StatusCode::BAD_REQUEST, error);
    }
    let model = recorded.model().to_owned();
    if recorded.verb() != "streamGenerateContent" {
        return json_response(StatusCode::OK, response(&model, plan.parts(), Some("STOP")));
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let frame = |value: Value| Ok(Bytes::from(format!("data: {value}\r\n\r\n")));
        let mut chunks: Vec<Value> = Vec::new();
        if let Some(thought) = &plan.thought {
            chunks.push(json!({"text": thought, "thought": true}));
        }
        match &plan.reply {
            Reply::Call { name, args } => chunks.push(json!({"functionCall": {"name": name, "args": args}})),
            Reply::Text(text) => {
                let words = if plan.slow || plan.hold { 1 } else { 3 };
                chunks.extend(pieces(text, words).into_iter().map(|piece| json!({ "text": piece })));
            }
        }
        let first_text = chunks.iter().position(|c| c.get("text").is_some() && c.get("thought").is_none());
        for (i, part) in chunks.into_iter().enumerate() {
            if tx.send(frame(response(&model, vec![part], None))).await.is_err() {
                return; // the client hung up (a cancel): nothing to answer any more
            }
            if plan.hold && Some(i) == first_text {
                shared.holds.hold(tx.closed()).await;
            }
            if plan.slow {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let _ = tx.send(frame(response(&model, vec![json!({"text": ""})], Some("STOP")))).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// One `GenerateContentResponse` carrying `parts`.
fn response(model: &str, parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    let mut answer = json!({"candidates": [candidate], "modelVersion": model});
    if finish.is_some() {
        answer["usageMetadata"] = json!({"promptTokenCount": 25, "candidatesTokenCount": 12, "totalTokenCount": 37});
    }
    answer
}

// ---------------------------------------------------------------- the script

#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Text(String),
    Call { name: String, args: Value },
}

#[derive(Debug, Clone, PartialEq)]
struct Plan {
    thought: Option<String>,
    reply: Reply,
    hold: bool,
    slow: bool,
    error: bool,
}

impl Plan {
    fn text(text: String) -> Self {
        Self { thought: None, reply: Reply::Text(text), hold: false, slow: false, error: false }
    }

    /// The whole answer's parts, for a reply that is not streamed.
    fn parts(&self) -> Vec<Value> {
        let mut parts = Vec::new();
        if let Some(thought) = &self.thought {
            parts.push(json!({"text": thought, "thought": true}));
        }
        parts.push(match &self.reply {
            Reply::Text(text) => json!({ "text": text }),
            Reply::Call { name, args } => json!({"functionCall": {"name": name, "args": args}}),
        });
        parts
    }
}

fn parts_of(content: &Value) -> &[Value] {
    content["parts"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The text parts a person's side wrote (not thoughts), each with the place of its content.
fn user_parts(body: &Value) -> Vec<(usize, String)> {
    let contents = body["contents"].as_array().map(Vec::as_slice).unwrap_or_default();
    contents
        .iter()
        .enumerate()
        .filter(|(_, c)| c["role"] == "user")
        .flat_map(|(i, c)| {
            parts_of(c)
                .iter()
                .filter(|p| p["thought"] != true)
                .filter_map(move |p| p["text"].as_str().map(|t| (i, t.to_owned())))
        })
        .collect()
}

/// The user text parts after the last model turn.
fn trailing_user_parts(body: &Value) -> Vec<(usize, String)> {
    let contents = body["contents"].as_array().map(Vec::as_slice).unwrap_or_default();
    let from = contents.iter().rposition(|c| c["role"] == "model").map_or(0, |i| i + 1);
    user_parts(body).into_iter().filter(|(i, _)| *i >= from).collect()
}

/// The last text part of the last content, for a question the CLI asks on its own.
fn last_text(body: &Value) -> String {
    let contents = body["contents"].as_array().map(Vec::as_slice).unwrap_or_default();
    let last = contents.last().map(parts_of).unwrap_or_default();
    let text = last.iter().rev().find_map(|p| p["text"].as_str()).unwrap_or_default();
    text.trim().chars().take(200).collect()
}

/// What the last function answered, when the conversation ends with a function's answer.
fn function_answer(body: &Value) -> Option<String> {
    let contents = body["contents"].as_array()?;
    let answer = parts_of(contents.last()?).iter().rev().find_map(|p| p.get("functionResponse"))?;
    let response = &answer["response"];
    Some(match response.get("output").or_else(|| response.get("error")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => response.to_string(),
    })
}

/// The inside of the first `[[name ...]]` directive in `text`, after the name.
fn directive<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("[[{name}");
    let mut from = 0;
    while let Some(at) = text[from..].find(&open) {
        let start = from + at + open.len();
        let rest = &text[start..];
        let end = rest.find("]]")?;
        let inner = &rest[..end];
        if inner.is_empty() || inner.starts_with(char::is_whitespace) {
            return Some(inner.trim());
        }
        from = start;
    }
    None
}

fn plan(body: &Value, answered: &HashSet<(usize, String)>) -> Plan {
    if let Some(output) = function_answer(body) {
        let first = output.trim().lines().next().unwrap_or_default().to_owned();
        return Plan::text(format!("tool said: {first}"));
    }
    let trailing = trailing_user_parts(body);
    let fresh: Vec<&(usize, String)> = trailing.iter().filter(|p| !answered.contains(*p)).collect();
    let text = fresh.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n");
    // Asked again with nothing new: answer the last words, not their directives.
    let last = fresh.last().copied().or(trailing.last()).map(|(_, t)| t.trim().to_owned()).unwrap_or_default();
    let reply = if let Some(call) = directive(&text, "call") {
        let (name, args) = call.split_once(char::is_whitespace).unwrap_or((call, "{}"));
        Reply::Call { name: name.to_owned(), args: serde_json::from_str(args.trim()).unwrap_or_else(|_| json!({})) }
    } else if directive(&text, "slow").is_some() {
        Reply::Text((0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "))
    } else if directive(&text, "hold").is_some() {
        Reply::Text("holding on released".into())
    } else if directive(&text, "think").is_some() {
        Reply::Text("thought done".into())
    } else {
        Reply::Text(format!("mock reply to: {}", last.chars().take(200).collect::<String>()))
    };
    Plan {
        thought: directive(&text, "think").map(|_| THOUGHT.to_owned()),
        reply,
        hold: directive(&text, "hold").is_some(),
        slow: directive(&text, "slow").is_some(),
        error: directive(&text, "error").is_some(),
    }
}

/// Splits text into pieces of `n` words, keeping the spaces.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').collect();
    words
        .chunks(n.max(1))
        .enumerate()
        .map(|(i, group)| if i == 0 { group.join(" ") } else { format!(" {}", group.join(" ")) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }

    fn body(contents: Value) -> Value {
        json!({ "contents": contents })
    }

    #[test]
    fn directives_pick_the_reply() {
        let none = HashSet::new();
        let call = plan(&body(json!([user("<session_context>..."), user("[[call list_sessions {\"a\": 1}]]")])), &none);
        assert_eq!(call.reply, Reply::Call { name: "list_sessions".into(), args: json!({"a": 1}) });
        assert!(plan(&body(json!([user("[[error]] now")])), &none).error);
        let thought = plan(&body(json!([user("[[think]] about it")])), &none);
        assert_eq!(thought.thought.as_deref(), Some(THOUGHT));
        assert_eq!(thought.reply, Reply::Text("thought done".into()));
        let held = plan(&body(json!([user("[[hold]]")])), &none);
        assert!(held.hold);
        let echo = plan(&body(json!([{"role": "user", "parts": [{"text": "context"}, {"text": "hello"}]}])), &none);
        assert_eq!(echo.reply, Reply::Text("mock reply to: hello".into()));
        let answered = body(json!([
            user("[[call x {}]]"),
            {"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {"output": "42\nmore"}}}]}
        ]));
        assert_eq!(plan(&answered, &none).reply, Reply::Text("tool said: 42".into()));
    }

    #[test]
    fn a_part_is_acted_on_once() {
        let first = body(json!([user("[[hold]] and wait")]));
        let answered: HashSet<_> = user_parts(&first).into_iter().collect();
        let after_a_stop = body(json!([user("[[hold]] and wait"), user("hello again")]));
        let after = plan(&after_a_stop, &answered);
        assert!(!after.hold);
        assert_eq!(after.reply, Reply::Text("mock reply to: hello again".into()));
        let again = plan(&first, &answered);
        assert!(!again.hold);
        assert_eq!(again.reply, Reply::Text("mock reply to: [[hold]] and wait".into()));
    }

    #[test]
    fn a_schema_is_answered_in_its_shape() {
        let schema = json!({"type": "object", "properties": {
            "reasoning": {"type": "string"},
            "next_speaker": {"type": "string", "enum": ["user", "model"]},
            "score": {"type": "INTEGER", "minimum": 1},
            "list": {"type": "array"}
        }});
        let answer = Side::default().answer(&side::Asked::Json { schema });
        assert_eq!(answer, json!({"reasoning": "mock", "next_speaker": "user", "score": 1, "list": []}));
    }

    #[tokio::test]
    async fn streams_a_reply_and_records_the_request() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mock = MockGemini::start().await.expect("mock");
        let mut stream = tokio::net::TcpStream::connect(mock.addr).await.expect("connects");
        let payload = json!({"contents": [user("hello there")], "tools": [{"functionDeclarations": [{"name": "x"}]}]});
        let payload = payload.to_string();
        let request = format!(
            "POST /v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
            payload.len()
        );
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"finishReason\":\"STOP\""), "{answer}");
        let turns = mock.turn_requests();
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].model(), "gemini-2.5-pro");
        assert_eq!(turns[0].last_user_text(), "hello there");
    }
}

//! A scripted mock of an OpenAI-compatible chat completions API on 127.0.0.1 (issue 9).
//!
//! Agents that speak the OpenAI dialect (pi's `openai-completions` provider) are pointed at
//! [`MockOpenAi::base_url`]. The reply is chosen from the conversation, not from a model, so a test
//! says what the model does by what it asks:
//!
//! | the conversation | the reply |
//! |---|---|
//! | a forced tool choice (`tool_choice` `required` or naming a function) | a call of that function, its arguments shaped and read as [`super::side`] says (a safety classifier's verdict, `allow` unless the test chose) |
//! | `response_format` `json_schema` / `json_object` | the JSON object, shaped the same way |
//! | a system prompt that asks for a title | text `Mock title` (opencode and kilo ask beside each first prompt) |
//! | ends with a tool result | text `tool said: <first line of the result>` |
//! | `[[error]]` in the last user text | HTTP 400 with an error body (not retried) |
//! | `[[error500]]` | HTTP 500 (a client treats it as transient and retries) |
//! | `[[bash CMD]]` | one tool call: `bash {"command": CMD}` |
//! | `[[call NAME {json}]]` | one tool call: `NAME` with those arguments |
//! | `[[think]]` | reasoning deltas (`reasoning_content`), then the reply |
//! | `[[hold]]` | the first words, then nothing until [`MockOpenAi::release`] (or the client hangs up) |
//! | `[[slow]]` | twenty words, a little apart |
//! | anything else | text `mock reply to: <last user text>` |
//!
//! "The last user text" is the trailing run of user messages joined by new lines: an agent may send
//! words beside the prompt as a user message of their own (pi's custom messages), and those count.
//! A user message is acted on once: a later request that carries it again at the same place (an
//! automatic retry, the turn after a stopped one whose answer the agent dropped) answers only the
//! messages that are new, so `[[error500]]` fails once and its retry succeeds.
//! Every request is recorded ([`MockOpenAi::requests`]) so a test can assert what the model was sent.
//! The HTTP is a small hand-written HTTP/1.1 server (one request per connection, `Connection: close`)
//! so the mock needs nothing beyond tokio.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::lock;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::holds::Holds;
use super::side::{self, Side, SideCalls};

/// The model id the mock lists and answers as.
pub const MODEL_ID: &str = "mock-model";

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The path, without the query.
    pub path: String,
    /// The JSON body (`null` for a GET).
    pub body: Value,
}

impl Recorded {
    /// The `messages` of a chat completions request.
    pub fn messages(&self) -> Vec<Value> {
        self.body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default()
    }

    /// Every text the request carries in its messages (system prompt included), joined.
    pub fn all_text(&self) -> String {
        self.messages().iter().map(|m| text_of(m.get("content"))).collect::<Vec<_>>().join("\n")
    }

    /// Whether the agent asked for the conversation's title rather than a turn of it.
    pub fn asks_for_a_title(&self) -> bool {
        asks_for_a_title(&self.body)
    }

    /// Whether this is a side call ([`super::side`]): a forced tool choice or a request for JSON.
    pub fn is_side(&self) -> bool {
        side::openai_chat(&self.body).is_some()
    }
}

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    answered: Mutex<HashSet<(usize, String)>>,
    arrived: Notify,
    holds: Holds,
    side: Side,
}

/// The running mock; stops serving when dropped.
pub struct MockOpenAi {
    port: u16,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for MockOpenAi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl MockOpenAi {
    /// Listens on 127.0.0.1 on a free port and serves until dropped.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            answered: Mutex::new(HashSet::new()),
            arrived: Notify::new(),
            holds: Holds::default(),
            side: Side::default(),
        });
        let serving = shared.clone();
        let server = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        connections.spawn(serve(stream, serving.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Self { port, shared, server })
    }

    /// The base URL an OpenAI client is given: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every chat completions request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).iter().filter(|r| r.path.ends_with("/chat/completions")).cloned().collect()
    }

    /// The chat completions requests that are turns of the conversation (not an agent's request
    /// for a title, which runs beside the first prompt, nor another side call), oldest first.
    pub fn turn_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| !r.asks_for_a_title() && !r.is_side()).collect()
    }

    /// From now on the side calls ([`super::side`]) are answered as `choice` says.
    pub fn side_calls(&self, choice: SideCalls) {
        self.shared.side.choose(choice);
    }

    /// The side calls answered so far, oldest first.
    pub fn side_answered(&self) -> Vec<side::Answered> {
        self.shared.side.answered()
    }

    /// Waits until at least `count` chat completions requests arrived, at most `within`.
    pub async fn wait_for_requests(&self, count: usize, within: Duration) -> Result<Vec<Recorded>, String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            let requests = self.requests();
            if requests.len() >= count {
                return Ok(requests);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(format!("the mock got {} of {count} requests within {within:?}", requests.len()));
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

    /// Waits until exactly `count` streams hold, at most `within`: a test that releases a stream
    /// after the agent that held one died waits until that one ended, or the release goes to it.
    pub async fn until_holding(&self, count: usize, within: Duration) -> Result<(), String> {
        self.shared.holds.until_holding(count, within).await
    }

    /// A pi `models.json` with one provider, `provider`, pointing at this mock.
    pub fn pi_models_json(&self, provider: &str) -> Value {
        json!({
            "providers": {
                provider: {
                    "baseUrl": self.base_url(),
                    "api": "openai-completions",
                    "apiKey": "mock-dummy-key",
                    "compat": { "supportsDeveloperRole": false, "supportsReasoningEffort": false },
                    "models": [{
                        "id": MODEL_ID, "name": "Mock Model", "reasoning": false,
                        "input": ["text"], "contextWindow": 32000, "maxTokens": 4096
                    }]
                }
            }
        })
    }
}

// ---------------------------------------------------------------- the script

/// What the mock answers with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Text(String),
    Tool { name: String, args: Value },
    Error(u16),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) thinking: Option<String>,
    pub(crate) reply: Reply,
    pub(crate) hold: bool,
    pub(crate) slow: bool,
}

pub(crate) fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") | Some("input_text") | Some("output_text") => {
                    b.get("text").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The inside of the first `[[name ...]]` directive in `text`, after the name.
pub(crate) fn directive<'a>(text: &'a str, name: &str) -> Option<&'a str> {
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

/// The user messages a request carries, by their place in `messages`: what a later request that
/// carries them again (a retry, the turn after a stop) does not act on a second time.
pub(crate) fn user_messages(body: &Value) -> Vec<(usize, String)> {
    let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|(i, m)| (i, text_of(m.get("content"))))
        .collect()
}

/// The words a title request's system prompt opens with (opencode's and kilo's title agent).
const TITLE_PROMPT: &str = "You are a title generator";

/// Whether the request's system prompt asks for a title: it runs beside a turn and carries the
/// same user words, so its directives are not acted on.
fn asks_for_a_title(body: &Value) -> bool {
    let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    messages.iter().any(|m| {
        m.get("role").and_then(Value::as_str) == Some("system") && text_of(m.get("content")).contains(TITLE_PROMPT)
    })
}

pub(crate) fn plan(body: &Value, answered: &HashSet<(usize, String)>) -> Plan {
    let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let plain = |reply| Plan { thinking: None, reply, hold: false, slow: false };
    if asks_for_a_title(body) {
        return plain(Reply::Text("Mock title".into()));
    }
    if let Some(last) = messages.last() {
        if last.get("role").and_then(Value::as_str) == Some("tool") {
            let result = text_of(last.get("content"));
            let first = result.trim().lines().next().unwrap_or_default().to_owned();
            return plain(Reply::Text(format!("tool said: {first}")));
        }
    }
    let trailing_from =
        messages.iter().rposition(|m| m.get("role").and_then(Value::as_str) != Some("user")).map_or(0, |i| i + 1);
    let trailing: Vec<(usize, String)> = user_messages(body).into_iter().filter(|(i, _)| *i >= trailing_from).collect();
    let fresh: Vec<String> = trailing.iter().filter(|m| !answered.contains(*m)).map(|(_, text)| text.clone()).collect();
    let text = fresh.join("\n");
    // Asked again with nothing new (a retry): answer the last words, not their directives.
    let echoed =
        if fresh.is_empty() { trailing.last().map(|(_, text)| text.clone()).unwrap_or_default() } else { text.clone() };
    let reply = if directive(&text, "error500").is_some() {
        Reply::Error(500)
    } else if directive(&text, "error").is_some() {
        Reply::Error(400)
    } else if let Some(command) = directive(&text, "bash") {
        Reply::Tool { name: "bash".into(), args: json!({ "command": command }) }
    } else if let Some(call) = directive(&text, "call") {
        let (name, args) = call.split_once(char::is_whitespace).unwrap_or((call, "{}"));
        let args = serde_json::from_str(args.trim()).unwrap_or_else(|_| json!({}));
        Reply::Tool { name: name.to_owned(), args }
    } else if directive(&text, "slow").is_some() {
        Reply::Text((0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "))
    } else if directive(&text, "hold").is_some() {
        Reply::Text("holding on released".into())
    } else if directive(&text, "think").is_some() {
        Reply::Text("thought done".into())
    } else {
        Reply::Text(format!("mock reply to: {}", echoed.trim().chars().take(200).collect::<String>()))
    };
    Plan {
        thinking: directive(&text, "think").map(|_| "Let me think about this. ".to_owned()),
        reply,
        hold: directive(&text, "hold").is_some(),
        slow: directive(&text, "slow").is_some(),
    }
}

/// The reply to a side call: the forced function called with `answer`, or `answer` as text.
pub(crate) fn side_plan(asked: &side::Asked, answer: Value) -> Plan {
    let reply = match asked {
        side::Asked::Call { name, .. } => Reply::Tool { name: name.clone(), args: answer },
        side::Asked::Json { .. } => Reply::Text(answer.to_string()),
    };
    Plan { thinking: None, reply, hold: false, slow: false }
}

/// Splits text into chunks of `n` words, keeping the spaces.
pub(crate) fn chunks(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').collect();
    words
        .chunks(n.max(1))
        .enumerate()
        .map(|(i, group)| if i == 0 { group.join(" ") } else { format!(" {}", group.join(" ")) })
        .collect()
}

// ---------------------------------------------------------------- HTTP

pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) body: Value,
}

pub(crate) async fn read_request(reader: &mut BufReader<OwnedReadHalf>) -> Option<Request> {
    let mut line = String::new();
    reader.read_line(&mut line).await.ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.split('?').next().unwrap_or_default().trim_end_matches('/').to_owned();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut raw = vec![0u8; length];
    reader.read_exact(&mut raw).await.ok()?;
    let body = if raw.is_empty() { Value::Null } else { serde_json::from_slice(&raw).unwrap_or(Value::Null) };
    Some(Request { method, path, body })
}

pub(crate) async fn respond_json(out: &mut OwnedWriteHalf, status: u16, body: &Value) -> std::io::Result<()> {
    let data = body.to_string();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        data.len()
    );
    out.write_all(head.as_bytes()).await?;
    out.write_all(data.as_bytes()).await?;
    out.flush().await
}

async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let Some(request) = read_request(&mut reader).await else { return };
    lock(&shared.requests).push(Recorded { path: request.path.clone(), body: request.body.clone() });
    shared.arrived.notify_waiters();
    let result = match (request.method.as_str(), request.path.as_str()) {
        ("GET", path) if path.ends_with("/models") => {
            let list = json!({"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "mock"}]});
            respond_json(&mut write, 200, &list).await
        }
        ("POST", path) if path.ends_with("/chat/completions") => {
            chat_completions(&mut write, reader.into_inner(), &request.body, &shared).await
        }
        _ => {
            respond_json(&mut write, 404, &json!({"error": {"message": format!("unknown path {}", request.path)}}))
                .await
        }
    };
    if let Err(e) = result {
        // The client hung up (an abort): nothing to answer any more.
        let _ = e;
    }
}

async fn chat_completions(
    out: &mut OwnedWriteHalf,
    read: OwnedReadHalf,
    body: &Value,
    shared: &Shared,
) -> std::io::Result<()> {
    let plan = match side::openai_chat(body) {
        // A side call runs beside a turn and carries its words: they are not acted on.
        Some(asked) => side_plan(&asked, shared.side.answer(&asked)),
        None => {
            let mut answered = lock(&shared.answered);
            let plan = plan(body, &answered);
            if !asks_for_a_title(body) {
                answered.extend(user_messages(body));
            }
            plan
        }
    };
    if let Reply::Error(status) = plan.reply {
        let error = json!({"error": {"message": "mock: scripted error", "type": "invalid_request_error"}});
        return respond_json(out, status, &error).await;
    }
    let model = body.get("model").and_then(Value::as_str).unwrap_or(MODEL_ID).to_owned();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if !stream {
        return respond_json(out, 200, &whole_completion(&plan, &model)).await;
    }
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    )
    .await?;
    let mut sse = Sse { out, id: format!("chatcmpl-{}", std::process::id()), model };
    sse.chunk(json!({"role": "assistant", "content": ""}), None).await?;
    if let Some(thinking) = &plan.thinking {
        for piece in chunks(thinking, 3) {
            sse.chunk(json!({ "reasoning_content": piece }), None).await?;
        }
    }
    match &plan.reply {
        Reply::Tool { name, args } => {
            let call_id = format!("call_{:08x}", rand_u32());
            let args = args.to_string();
            let half = args.len() / 2;
            let (first, second) = args.split_at(args.char_indices().map(|(i, _)| i).find(|i| *i >= half).unwrap_or(0));
            sse.chunk(json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}), None).await?;
            sse.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": first}}]}), None).await?;
            sse.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": second}}]}), None).await?;
            sse.chunk(json!({}), Some("tool_calls")).await?;
        }
        Reply::Text(text) => {
            let pieces = chunks(text, if plan.slow || plan.hold { 1 } else { 3 });
            for (i, piece) in pieces.iter().enumerate() {
                sse.chunk(json!({ "content": piece }), None).await?;
                if plan.hold && i == 0 {
                    shared.holds.hold(read_half_closed(read)).await;
                    break;
                }
                if plan.slow {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            if plan.hold {
                for piece in pieces.iter().skip(1) {
                    sse.chunk(json!({ "content": piece }), None).await?;
                }
            }
            sse.chunk(json!({}), Some("stop")).await?;
        }
        Reply::Error(_) => {}
    }
    if body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false) {
        sse.usage().await?;
    }
    sse.done().await
}

/// Resolves once the client closes its side of the connection.
pub(crate) async fn read_half_closed(mut read: OwnedReadHalf) {
    let mut buf = [0u8; 256];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn whole_completion(plan: &Plan, model: &str) -> Value {
    let (message, finish) = match &plan.reply {
        Reply::Tool { name, args } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{:08x}", rand_u32()), "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            "tool_calls",
        ),
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::Error(_) => (json!({"role": "assistant", "content": ""}), "stop"),
    };
    json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

struct Sse<'a> {
    out: &'a mut OwnedWriteHalf,
    id: String,
    model: String,
}

impl Sse<'_> {
    async fn data(&mut self, data: &str) -> std::io::Result<()> {
        self.out.write_all(format!("data: {data}\n\n").as_bytes()).await?;
        self.out.flush().await
    }

    async fn chunk(&mut self, delta: Value, finish: Option<&str>) -> std::io::Result<()> {
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": 0, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        });
        self.data(&chunk.to_string()).await
    }

    async fn usage(&mut self) -> std::io::Result<()> {
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": 0, "model": self.model,
            "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        });
        self.data(&chunk.to_string()).await
    }

    async fn done(&mut self) -> std::io::Result<()> {
        self.data("[DONE]").await
    }
}

/// A small pseudo-random number for call ids (unique enough within one test).
pub(crate) fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0x5eed);
    let n = NEXT.fetch_add(0x9e37_79b9, Ordering::Relaxed);
    n ^ std::process::id()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [{"type": "text", "text": text}]})
    }

    #[test]
    fn directives_pick_the_reply() {
        let none = HashSet::new();
        let body = json!({"messages": [user("please [[bash echo hi]]")]});
        assert_eq!(plan(&body, &none).reply, Reply::Tool { name: "bash".into(), args: json!({"command": "echo hi"}) });
        let body = json!({"messages": [user("[[call ahp_ping {\"text\": \"x\"}]]")]});
        assert_eq!(plan(&body, &none).reply, Reply::Tool { name: "ahp_ping".into(), args: json!({"text": "x"}) });
        let body = json!({"messages": [user("[[error500]] now")]});
        assert_eq!(plan(&body, &none).reply, Reply::Error(500));
        let body = json!({"messages": [user("[[error]] now")]});
        assert_eq!(plan(&body, &none).reply, Reply::Error(400));
        let body = json!({"messages": [user("[[think]] about it")]});
        assert!(plan(&body, &none).thinking.is_some());
        let body = json!({"messages": [user("hello"), user("hidden words")]});
        assert_eq!(plan(&body, &none).reply, Reply::Text("mock reply to: hello\nhidden words".into()));
        let body = json!({"messages": [user("[[bash echo hi]]"), {"role": "tool", "content": "hi\n"}]});
        assert_eq!(plan(&body, &none).reply, Reply::Text("tool said: hi".into()));
        let system = json!({"role": "system", "content": "You are a title generator. You output ONLY a thread title."});
        let body = json!({"messages": [system, user("Generate a title"), user("[[hold]] [[call x {}]]")]});
        let title = plan(&body, &none);
        assert_eq!((title.reply, title.hold), (Reply::Text("Mock title".into()), false));
    }

    #[test]
    fn a_message_is_acted_on_once() {
        let first = json!({"messages": [user("[[hold]] and wait")]});
        let answered: HashSet<_> = user_messages(&first).into_iter().collect();
        let after_a_stop = json!({"messages": [user("[[hold]] and wait"), user("hello again")]});
        let after = plan(&after_a_stop, &answered);
        assert!(!after.hold);
        assert_eq!(after.reply, Reply::Text("mock reply to: hello again".into()));
        let retried = plan(&first, &answered);
        assert_eq!(retried.reply, Reply::Text("mock reply to: [[hold]] and wait".into()));
        assert!(!retried.hold);
    }

    #[test]
    fn chunks_keep_the_spaces() {
        assert_eq!(chunks("a b c d", 3).concat(), "a b c d");
        assert_eq!(chunks("a b c d", 1), vec!["a", " b", " c", " d"]);
    }

    #[tokio::test]
    async fn streams_a_reply_and_records_the_request() {
        let mock = MockOpenAi::start().await.expect("mock starts");
        let mut stream = TcpStream::connect(("127.0.0.1", mock.port())).await.expect("connects");
        let body = json!({"model": MODEL_ID, "stream": true, "messages": [user("hello there")]}).to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        assert!(answer.starts_with("HTTP/1.1 200"));
        assert!(answer.contains("mock reply to:"));
        assert!(answer.trim_end().ends_with("data: [DONE]"));
        let requests = mock.requests();
        assert_eq!(requests.len(), 1);
        assert!(requests[0].all_text().contains("hello there"));
    }
}

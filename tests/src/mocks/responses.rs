//! A scripted mock of the OpenAI Responses API (`POST /v1/responses`, streamed) on 127.0.0.1, for
//! agents that speak it (Codex, through `codex-acp`).
//!
//! The script is the chat completions mock's ([`super::openai`]), read from the Responses `input`
//! instead of `messages`: a test says what the model does by what it asks.
//!
//! | the conversation | the reply |
//! |---|---|
//! | ends with a tool result (`function_call_output`) | text `tool said: <first line of the result>` |
//! | `[[error]]` / `[[error500]]` in the last user text | HTTP 400 / 500 with an error body |
//! | `[[bash CMD]]` | one call of Codex's shell tool: `exec_command {"cmd": CMD}` |
//! | `[[call NAME {json}]]` | one `function_call`: `NAME` with those arguments |
//! | `[[think]]` | a reasoning summary, streamed, then the reply |
//! | `[[hold]]` | the first word, then nothing until [`MockResponses::release`] (or the client hangs up) |
//! | `[[slow]]` | twenty words, a little apart |
//! | anything else | text `mock reply to: <last user text>` |
//!
//! A side call (`tool_choice` `required` or naming a function, `text.format` `json_schema` /
//! `json_object`) is answered as [`super::side`] says, the test's verdict (`allow` unless it chose),
//! and its words are not acted on.
//!
//! A user message that is only a tagged context block (`<environment_context>…</environment_context>`,
//! which Codex sends as a user message of its own before the prompt) is not the person's words and
//! is left out of "the last user text". The stream is the events Codex reads: `response.created`,
//! `response.output_item.added`, `response.output_text.delta`, `response.reasoning_summary_text.delta`,
//! `response.output_item.done` (a `message`, `reasoning` or `function_call` item) and
//! `response.completed` with usage. Every request is recorded ([`MockResponses::requests`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::lock;
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::holds::Holds;
use super::openai::{
    chunks, plan, rand_u32, read_half_closed, read_request, respond_json, side_plan, text_of, user_messages, Plan,
    Reply,
};
use super::side::{self, Side, SideCalls};

/// The model id the mock lists (any id a request names is answered as).
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
    /// The `input` items of a Responses request.
    pub fn input(&self) -> Vec<Value> {
        self.body.get("input").and_then(Value::as_array).cloned().unwrap_or_default()
    }

    /// The texts of the person's messages (context blocks left out), oldest first.
    pub fn user_texts(&self) -> Vec<String> {
        user_messages(&as_chat(&self.body)).into_iter().map(|(_, text)| text).collect()
    }

    /// Every text the request carries in its input (messages, calls and their results), joined.
    pub fn all_text(&self) -> String {
        self.input()
            .iter()
            .map(|item| match item.get("type").and_then(Value::as_str) {
                Some("function_call") => item.get("arguments").and_then(Value::as_str).unwrap_or_default().to_owned(),
                Some("function_call_output") | Some("custom_tool_call_output") => output_text(item.get("output")),
                _ => text_of(item.get("content")),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether this is a side call ([`super::side`]): a forced tool choice or a request for JSON.
    pub fn is_side(&self) -> bool {
        side::responses(&self.body).is_some()
    }

    /// The names of the tools the request offers the model; a tool inside a `namespace` (Codex
    /// groups an MCP server's tools as `mcp__<server>`) as `<namespace>__<tool>`.
    pub fn tool_names(&self) -> Vec<String> {
        let name = |t: &Value| t.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        offered(&self.body)
            .iter()
            .flat_map(|t| match t.get("tools").and_then(Value::as_array) {
                Some(inner) if t.get("type").and_then(Value::as_str) == Some("namespace") => {
                    inner.iter().map(|i| format!("{}__{}", name(t), name(i))).collect()
                }
                _ => vec![name(t)],
            })
            .collect()
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
pub struct MockResponses {
    port: u16,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for MockResponses {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl MockResponses {
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

    /// Every Responses request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).iter().filter(|r| r.path.ends_with("/responses")).cloned().collect()
    }

    /// The Responses requests that are turns of the conversation (not side calls), oldest first.
    pub fn turn_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| !r.is_side()).collect()
    }

    /// From now on the side calls ([`super::side`]) are answered as `choice` says.
    pub fn side_calls(&self, choice: SideCalls) {
        self.shared.side.choose(choice);
    }

    /// The side calls answered so far, oldest first.
    pub fn side_answered(&self) -> Vec<side::Answered> {
        self.shared.side.answered()
    }

    /// Waits until at least `count` Responses requests arrived, at most `within`.
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

    /// Waits until exactly `count` streams hold, at most `within`.
    pub async fn until_holding(&self, count: usize, within: Duration) -> Result<(), String> {
        self.shared.holds.until_holding(count, within).await
    }

    /// A Codex `config.toml` whose model provider `mock` is this mock, speaking the Responses API,
    /// its key read from `$MOCK_API_KEY`, with no retries (a scripted error fails at once). `model`
    /// is a slug Codex's bundled catalog knows, so it does not warn that it lacks the model's metadata.
    pub fn codex_config_toml(&self, model: &str) -> String {
        format!(
            "model = \"{model}\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"Mock\"\n\
             base_url = \"{}\"\nwire_api = \"responses\"\nenv_key = \"MOCK_API_KEY\"\n\
             request_max_retries = 0\nstream_max_retries = 0\n",
            self.base_url()
        )
    }
}

// ---------------------------------------------------------------- the script

/// The text of a tool result's `output` (a string, or content items).
fn output_text(output: Option<&Value>) -> String {
    match output {
        Some(Value::Object(o)) => text_of(o.get("content")),
        other => text_of(other),
    }
}

/// A user message that is only a tagged block of context the agent adds (`<environment_context>`).
fn is_context_block(text: &str) -> bool {
    let text = text.trim();
    text.starts_with('<') && text.ends_with('>')
}

/// The Responses `input` as the chat completions `messages` the shared script reads: the person's
/// messages as `user`, tool results as `tool`, everything else the model or agent said as
/// `assistant`/`system`.
fn as_chat(body: &Value) -> Value {
    let input = body.get("input").and_then(Value::as_array).cloned().unwrap_or_default();
    let messages: Vec<Value> = input
        .iter()
        .filter_map(|item| match (item.get("type").and_then(Value::as_str), item.get("role").and_then(Value::as_str)) {
            (Some("function_call_output") | Some("custom_tool_call_output"), _) => {
                Some(json!({"role": "tool", "content": output_text(item.get("output"))}))
            }
            (Some("function_call") | Some("custom_tool_call"), _) => Some(json!({"role": "assistant", "content": ""})),
            (_, Some("user")) => {
                let text = text_of(item.get("content"));
                (!is_context_block(&text)).then(|| json!({"role": "user", "content": text}))
            }
            (_, Some("assistant")) => Some(json!({"role": "assistant", "content": text_of(item.get("content"))})),
            (_, Some(role)) => Some(json!({"role": role, "content": ""})),
            _ => None,
        })
        .collect();
    json!({ "messages": messages })
}

/// The `tools` a request offers.
fn offered(body: &Value) -> Vec<Value> {
    body.get("tools").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// A call of `name` as the model makes it: `<namespace>__<tool>` of an offered namespace is the
/// tool `<tool>` in that namespace.
fn call_item(body: &Value, name: &str) -> Value {
    let namespace = offered(body).into_iter().find_map(|t| {
        let space = t.get("name").and_then(Value::as_str)?;
        let tool = name.strip_prefix(space)?.strip_prefix("__")?;
        (t.get("type").and_then(Value::as_str) == Some("namespace")).then(|| (space.to_owned(), tool.to_owned()))
    });
    match namespace {
        Some((space, tool)) => json!({"type": "function_call", "namespace": space, "name": tool}),
        None => json!({"type": "function_call", "name": name}),
    }
}

/// What the mock answers `body` with; the shared script, with `[[bash]]` as Codex's shell tool.
fn plan_for(body: &Value, answered: &HashSet<(usize, String)>) -> Plan {
    let mut plan = plan(&as_chat(body), answered);
    if let Reply::Tool { name, args } = &plan.reply {
        if name == "bash" {
            let command = args.get("command").cloned().unwrap_or_default();
            plan.reply = Reply::Tool { name: "exec_command".into(), args: json!({ "cmd": command }) };
        }
    }
    plan
}

// ---------------------------------------------------------------- HTTP

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
        ("POST", path) if path.ends_with("/responses") => {
            responses(&mut write, reader.into_inner(), &request.body, &shared).await
        }
        _ => {
            respond_json(&mut write, 404, &json!({"error": {"message": format!("unknown path {}", request.path)}}))
                .await
        }
    };
    // An error is the client hanging up (an interrupt): nothing to answer any more.
    drop(result);
}

async fn responses(
    out: &mut OwnedWriteHalf,
    read: OwnedReadHalf,
    body: &Value,
    shared: &Shared,
) -> std::io::Result<()> {
    let plan = match side::responses(body) {
        Some(asked) => side_plan(&asked, shared.side.answer(&asked)),
        None => {
            let mut answered = lock(&shared.answered);
            let plan = plan_for(body, &answered);
            answered.extend(user_messages(&as_chat(body)));
            plan
        }
    };
    if let Reply::Error(status) = plan.reply {
        let error = json!({"error": {"message": "mock: scripted error", "type": "invalid_request_error"}});
        return respond_json(out, status, &error).await;
    }
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    )
    .await?;
    let id = format!("{:08x}", rand_u32());
    let mut sse = Sse { out, index: 0 };
    sse.event("response.created", json!({"response": {"id": format!("resp_{id}"), "status": "in_progress"}})).await?;
    if let Some(thinking) = &plan.thinking {
        let item = format!("rs_{id}");
        sse.event("response.output_item.added", json!({"item": {"type": "reasoning", "id": item, "summary": []}}))
            .await?;
        for piece in chunks(thinking, 3) {
            let delta = json!({"item_id": item, "summary_index": 0, "delta": piece});
            sse.event("response.reasoning_summary_text.delta", delta).await?;
        }
        let done = json!({"type": "reasoning", "id": item, "summary": [{"type": "summary_text", "text": thinking}]});
        sse.event("response.output_item.done", json!({ "item": done })).await?;
        sse.index += 1;
    }
    match &plan.reply {
        Reply::Tool { name, args } => {
            let mut call = call_item(body, name);
            call["id"] = json!(format!("fc_{id}"));
            call["call_id"] = json!(format!("call_{id}"));
            call["arguments"] = json!(args.to_string());
            call["status"] = json!("completed");
            let mut added = call.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            sse.event("response.output_item.added", json!({ "item": added })).await?;
            sse.event("response.output_item.done", json!({ "item": call })).await?;
        }
        Reply::Text(text) => {
            let item = format!("msg_{id}");
            let empty =
                json!({"type": "message", "id": item, "role": "assistant", "status": "in_progress", "content": []});
            sse.event("response.output_item.added", json!({ "item": empty })).await?;
            let pieces = chunks(text, if plan.slow || plan.hold { 1 } else { 3 });
            let mut held = false;
            for (i, piece) in pieces.iter().enumerate() {
                let delta = json!({"item_id": item, "content_index": 0, "delta": piece});
                sse.event("response.output_text.delta", delta).await?;
                if plan.hold && i == 0 && !held {
                    held = true;
                    shared.holds.hold(read_half_closed(read)).await;
                    break;
                }
                if plan.slow {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            if held {
                for piece in pieces.iter().skip(1) {
                    let delta = json!({"item_id": item, "content_index": 0, "delta": piece});
                    sse.event("response.output_text.delta", delta).await?;
                }
            }
            let done = json!({"type": "message", "id": item, "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]});
            sse.event("response.output_item.done", json!({ "item": done })).await?;
        }
        Reply::Error(_) => {}
    }
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                       "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15});
    let completed = json!({"id": format!("resp_{id}"), "status": "completed", "usage": usage});
    sse.event("response.completed", json!({ "response": completed })).await
}

struct Sse<'a> {
    out: &'a mut OwnedWriteHalf,
    /// The `output_index` of the item being streamed.
    index: usize,
}

impl Sse<'_> {
    /// One server-sent event named `kind`, its data `fields` with `type` (and `output_index`) added.
    async fn event(&mut self, kind: &str, mut fields: Value) -> std::io::Result<()> {
        fields["type"] = json!(kind);
        if kind.starts_with("response.output") || kind.starts_with("response.reasoning") {
            fields["output_index"] = json!(self.index);
        }
        self.out.write_all(format!("event: {kind}\ndata: {fields}\n\n").as_bytes()).await?;
        self.out.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    #[test]
    fn the_script_reads_the_responses_input() {
        let none = HashSet::new();
        let context = user("<environment_context>\n  <cwd>/x</cwd>\n</environment_context>");
        let body = json!({"input": [context, user("hello")]});
        assert_eq!(plan_for(&body, &none).reply, Reply::Text("mock reply to: hello".into()));
        let body = json!({"input": [user("[[bash echo hi]]")]});
        assert_eq!(
            plan_for(&body, &none).reply,
            Reply::Tool { name: "exec_command".into(), args: json!({"cmd": "echo hi"}) }
        );
        let body = json!({"input": [user("[[call mcp__ahp__list_sessions {}]]"),
            {"type": "function_call", "call_id": "c", "name": "mcp__ahp__list_sessions", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "first line\nsecond"}]});
        assert_eq!(plan_for(&body, &none).reply, Reply::Text("tool said: first line".into()));
        let recorded = Recorded { path: "/v1/responses".into(), body };
        let tools = json!({"tools": [{"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "mcp__ahp", "tools": [{"type": "function", "name": "list_sessions"}]}]});
        let call = call_item(&tools, "mcp__ahp__list_sessions");
        assert_eq!((call["namespace"].as_str(), call["name"].as_str()), (Some("mcp__ahp"), Some("list_sessions")));
        assert_eq!(call_item(&tools, "exec_command")["namespace"], Value::Null);
        let offered = Recorded { path: "/v1/responses".into(), body: tools };
        assert_eq!(offered.tool_names(), vec!["exec_command", "mcp__ahp__list_sessions"]);
        assert!(recorded.all_text().contains("second"), "{}", recorded.all_text());
        assert_eq!(recorded.user_texts(), vec!["[[call mcp__ahp__list_sessions {}]]"]);
    }

    #[tokio::test]
    async fn streams_a_reply_and_records_the_request() {
        let mock = MockResponses::start().await.expect("mock starts");
        let mut stream = TcpStream::connect(("127.0.0.1", mock.port)).await.expect("connects");
        let body = json!({"model": MODEL_ID, "stream": true, "input": [user("hello there")]}).to_string();
        let request = format!(
            "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        assert!(answer.starts_with("HTTP/1.1 200"));
        assert!(answer.contains("event: response.output_text.delta"));
        assert!(answer.contains("mock reply to: hello there"));
        assert!(answer.trim_end().lines().last().is_some_and(|l| l.contains("\"response.completed\"")), "{answer}");
        assert_eq!(mock.requests().len(), 1);
    }
}

//! The `notes` test agent: seed 004's second example. It keeps notes in a folder and has a tool that
//! runs without asking (`read`), one that waits to be allowed (`write`), and a question that is not
//! about a tool (`ask`, or `read` with no name). It also calls any tool it was offered (`call`),
//! which makes it the scripted agent the tool tests drive.
//!
//! A message is a list of commands separated by `;` or new lines; they run side by side, so one
//! message can park two questions at once:
//!
//! ```text
//! read NAME | read | write NAME TEXT | list | ask QUESTION | call TOOL {json} | fail | error
//! | later TEXT | wait MS | endpoint | tools | edit PATH TEXT | where
//! ```
//!
//! `edit` writes a file in the folder the chat works in, as a coding agent does (asking first as
//! `write` does), and `where` says that folder.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputQuestion, ChatInputRequest, ChatInputResponseKind,
    ChatInputTextQuestion, ConfirmationOption, ConfirmationOptionKind, Message, MessageKind, MessageOrigin,
    SessionConfigPropertySchema, SessionConfigSchema, ToolCallClientContributor, ToolCallContributor,
};
use async_trait::async_trait;
use futures_util::future::join_all;
use protocol::{
    AgentDescriptor, AgentFeatures, AnswerParams, ConfirmParams, InitializeParams, Policy, SchemaResult,
    SendMessageParams, SetConfigResult, Start, ToolSpec,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::agent::{accepted, not_offered, not_writable, Agent, AgentError, Session};
use crate::host::SessionHost;
use crate::sync::lock;
use crate::turn::{tool_result, Question, TurnWriter};

const ASK: [&str; 3] = ["writes", "always", "never"];

/// The notes agent. Options: `dir` (where notes live; default a `notes` folder in the worker's
/// data folder).
pub struct Notes {
    dir: PathBuf,
    reveal_endpoint: bool,
}

impl Notes {
    /// Builds the agent from its config entry's options.
    pub fn from_init(init: &InitializeParams) -> Self {
        let dir = match init.options.get("dir").and_then(Value::as_str) {
            Some(dir) => PathBuf::from(dir),
            None => match &init.data_dir {
                Some(data) => PathBuf::from(data).join("notes"),
                None => std::env::temp_dir().join("ahpd-notes"),
            },
        };
        // For tests that drive the session's tools endpoint with a real MCP client.
        let reveal_endpoint = init.options.get("revealEndpoint").and_then(Value::as_bool).unwrap_or(false);
        Self { dir, reveal_endpoint }
    }
}

fn notes_schema() -> SchemaResult {
    let ask = SessionConfigPropertySchema {
        r#type: "string".into(),
        title: "Ask before".into(),
        description: Some("Which tool calls wait for a person to allow them".into()),
        default: Some(Value::String("writes".into())),
        r#enum: Some(ASK.iter().map(|v| Value::String((*v).into())).collect()),
        enum_labels: Some(vec!["Writes".into(), "Every call".into(), "Never".into()]),
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(true),
    };
    let mut defaults = JsonObject::new();
    defaults.insert("ask".into(), Value::String("writes".into()));
    SchemaResult {
        schema: SessionConfigSchema {
            r#type: "object".into(),
            properties: [("ask".to_owned(), ask)].into_iter().collect(),
            required: None,
        },
        defaults,
    }
}

#[async_trait]
impl Agent for Notes {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: "notes".into(),
            display_name: "Notes".into(),
            description: Some("Keeps notes; asks before it writes one".into()),
            capabilities: Some(crate::agent::multiple_chats()),
            features: AgentFeatures {
                steering: true,
                inherited_chat_config: true,
                resume: true,
                ..AgentFeatures::default()
            },
        }
    }

    fn schema(&self, _policy: &Policy) -> SchemaResult {
        notes_schema()
    }

    /// A session a session tool makes asks before the same calls as the chat that made it.
    fn inherited_chat_config(&self, config: &JsonObject) -> JsonObject {
        config.iter().filter(|(key, _)| *key == "ask").map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let mut settings = notes_schema().defaults;
        if let Some(Value::String(ask)) = start.settings.get("ask") {
            if ASK.contains(&ask.as_str()) {
                settings.insert("ask".into(), Value::String(ask.clone()));
            }
        }
        let session = Arc::new(NotesSession {
            host,
            dir: self.dir.clone(),
            folder: start.working_directory.as_ref().map(PathBuf::from),
            state: Mutex::new(NotesState {
                settings,
                tools: start.tools,
                endpoint: start.tools_endpoint.filter(|_| self.reveal_endpoint),
                queue: VecDeque::new(),
                running: None,
                confirmations: HashMap::new(),
                questions: HashMap::new(),
                next_own_turn: 0,
            }),
        });
        Ok(Arc::new(session))
    }
}

struct Decision {
    approved: bool,
}

struct Answered {
    response: ChatInputResponseKind,
    answers: HashMap<String, ChatInputAnswer>,
}

struct NotesState {
    settings: JsonObject,
    tools: Vec<ToolSpec>,
    endpoint: Option<protocol::ToolsEndpoint>,
    queue: VecDeque<SendMessageParams>,
    running: Option<(String, CancellationToken, Writer)>,
    // Parked questions live in maps keyed by id: two parallel tools ask twice before either is
    // answered, and one slot would lose the first.
    confirmations: HashMap<String, oneshot::Sender<Decision>>,
    questions: HashMap<String, oneshot::Sender<Answered>>,
    next_own_turn: u32,
}

struct NotesSession {
    host: SessionHost,
    dir: PathBuf,
    /// The folder the chat works in (its session's, or its own).
    folder: Option<PathBuf>,
    state: Mutex<NotesState>,
}

type Writer = Arc<Mutex<TurnWriter>>;

/// A call that writes, as the person is asked about it.
struct WriteCall {
    tool: &'static str,
    display: &'static str,
    invocation: String,
    input: Value,
    question: String,
    denied: String,
}

/// One command of a message.
#[derive(Debug, Clone, PartialEq)]
enum Command {
    Read(Option<String>),
    Write(String, String),
    List,
    Ask(String),
    Call(String, Value),
    Fail,
    Error,
    Later(String),
    Wait(u64),
    Endpoint,
    Tools,
    Edit(String, String),
    Where,
    Unknown(String),
}

fn parse(text: &str) -> Vec<Command> {
    text.split([';', '\n']).map(str::trim).filter(|c| !c.is_empty()).map(parse_one).collect()
}

fn parse_one(command: &str) -> Command {
    let (verb, rest) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
    let rest = rest.trim();
    match verb {
        "read" if rest.is_empty() => Command::Read(None),
        "read" => Command::Read(Some(rest.to_owned())),
        "write" => {
            let (name, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            Command::Write(name.to_owned(), text.trim().to_owned())
        }
        "list" => Command::List,
        "ask" => Command::Ask(rest.to_owned()),
        "call" => {
            let (name, json) = rest.split_once(char::is_whitespace).unwrap_or((rest, "{}"));
            let input = serde_json::from_str(json.trim()).unwrap_or(Value::Object(JsonObject::new()));
            Command::Call(name.to_owned(), input)
        }
        "fail" => Command::Fail,
        "error" => Command::Error,
        "later" => Command::Later(rest.to_owned()),
        "wait" => Command::Wait(rest.parse().unwrap_or(1000)),
        "endpoint" => Command::Endpoint,
        "tools" => Command::Tools,
        "edit" => {
            let (path, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            Command::Edit(path.to_owned(), text.trim().to_owned())
        }
        "where" => Command::Where,
        _ => Command::Unknown(command.to_owned()),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.')
}

impl NotesSession {
    fn pump(self: &Arc<Self>) {
        let (params, cancel, writer) = {
            let mut state = lock(&self.state);
            if state.running.is_some() {
                return;
            }
            let Some(params) = state.queue.pop_front() else {
                return;
            };
            let cancel = CancellationToken::new();
            let writer: Writer = Arc::new(Mutex::new(TurnWriter::new(self.host.clone(), params.turn_id.clone())));
            state.running = Some((params.turn_id.clone(), cancel.clone(), writer.clone()));
            (params, cancel, writer)
        };
        let session = self.clone();
        tokio::spawn(async move {
            let later = session.run_turn(params, cancel, writer).await;
            for text in later {
                session.own_turn(text).await;
            }
            lock(&session.state).running = None;
            session.pump();
        });
    }

    /// Runs one turn; answers the `later` texts to start as turns of its own afterwards.
    async fn run_turn(
        self: &Arc<Self>,
        params: SendMessageParams,
        cancel: CancellationToken,
        writer: Writer,
    ) -> Vec<String> {
        let commands = parse(&params.message.text);
        let mut later = Vec::new();
        let mut fail_turn = false;
        let mut work = Vec::new();
        for (n, command) in commands.into_iter().enumerate() {
            match command {
                Command::Later(text) => later.push(text),
                Command::Error => fail_turn = true,
                other => work.push(self.clone().run_command(writer.clone(), n, other)),
            }
        }
        let finished = tokio::select! {
            _ = cancel.cancelled() => false,
            _ = join_all(work) => true,
        };
        let mut turn = lock(&writer);
        if !finished {
            drop(turn);
            self.settle_parked();
            lock(&writer).cancelled();
            return Vec::new();
        }
        if fail_turn {
            turn.error("notesError", "You asked this turn to fail.");
        } else {
            turn.complete();
        }
        later
    }

    async fn own_turn(self: &Arc<Self>, text: String) {
        let id = {
            let mut state = lock(&self.state);
            state.next_own_turn += 1;
            format!("notes-own-{}-{}", uuid_like(), state.next_own_turn)
        };
        let message = Message {
            text: text.clone(),
            origin: MessageOrigin { kind: MessageKind::Agent },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        };
        let mut turn = TurnWriter::start_own(self.host.clone(), id, message);
        turn.text(&format!("Later, as you asked: {text}"));
        turn.complete();
    }

    fn tool_call_id(writer: &Writer, n: usize) -> String {
        format!("{}:tool{n}", lock(writer).turn_id())
    }

    fn ask_setting(&self) -> String {
        lock(&self.state).settings.get("ask").and_then(Value::as_str).unwrap_or("writes").to_owned()
    }

    async fn run_command(self: Arc<Self>, writer: Writer, n: usize, command: Command) {
        match command {
            Command::Read(Some(name)) => self.read(&writer, n, &name).await,
            Command::Read(None) => {
                let Some(name) = self.ask_for_note_name(&writer, n).await else {
                    let mut w = lock(&writer);
                    w.end_part();
                    w.text("Nothing read.");
                    return;
                };
                self.read(&writer, n, &name).await;
            }
            Command::Write(name, text) => self.write(&writer, n, &name, &text).await,
            Command::Edit(path, text) => self.edit(&writer, n, &path, &text).await,
            Command::Where => {
                let said = match &self.folder {
                    Some(folder) => format!("folder {}", folder.display()),
                    None => "no folder".to_owned(),
                };
                let mut w = lock(&writer);
                w.end_part();
                w.text(&said);
            }
            Command::List => self.list(&writer, n).await,
            Command::Ask(question) => self.ask(&writer, n, &question).await,
            Command::Call(name, input) => self.call(&writer, n, &name, input).await,
            Command::Fail => {
                let id = Self::tool_call_id(&writer, n);
                let mut w = lock(&writer);
                w.tool_start(&id, "fail", "Fail", None);
                w.tool_running(&id, "Failing on purpose", None);
                w.tool_complete(&id, tool_result(false, "Failed", None, Some("This tool always fails.".into())));
            }
            Command::Endpoint => {
                let said = match &lock(&self.state).endpoint {
                    Some(e) => format!("endpoint {} {}", e.url, e.token),
                    None => "no endpoint".to_owned(),
                };
                let mut w = lock(&writer);
                w.end_part();
                w.text(&said);
            }
            Command::Tools => {
                // The tools this session was handed, as the host last set them.
                let names: Vec<String> = lock(&self.state).tools.iter().map(|t| t.definition.name.clone()).collect();
                let mut w = lock(&writer);
                w.end_part();
                w.text(&format!("tools: {}", names.join(", ")));
            }
            Command::Wait(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let mut w = lock(&writer);
                w.end_part();
                w.text(&format!("Waited {ms} ms."));
            }
            Command::Unknown(what) => {
                let mut w = lock(&writer);
                w.end_part();
                w.text(&format!(
                    "Notes does not know \"{what}\". It understands: read NAME, read, write NAME TEXT, list, ask QUESTION, call TOOL {{json}}, fail, error, later TEXT, wait MS, endpoint, tools, edit PATH TEXT, where."
                ));
            }
            Command::Later(_) | Command::Error => {}
        }
    }

    /// Parks a confirmation question for a tool call and waits for the person.
    async fn confirmation(
        &self,
        writer: &Writer,
        id: &str,
        invocation: &str,
        input: Option<String>,
        title: String,
    ) -> bool {
        let (tx, rx) = oneshot::channel();
        lock(&self.state).confirmations.insert(id.to_owned(), tx);
        let options = Some(vec![
            ConfirmationOption {
                id: "allow".into(),
                label: "Allow".into(),
                kind: ConfirmationOptionKind::Approve,
                group: None,
            },
            ConfirmationOption {
                id: "deny".into(),
                label: "Deny".into(),
                kind: ConfirmationOptionKind::Deny,
                group: None,
            },
        ]);
        lock(writer).tool_asks(id, invocation, input, Question { title, options, meta: None });
        // A dropped sender is a question abort or close settled: the call does not run.
        rx.await.map(|d| d.approved).unwrap_or(false)
    }

    async fn read(&self, writer: &Writer, n: usize, name: &str) {
        let id = Self::tool_call_id(writer, n);
        lock(writer).tool_start(&id, "read", "Read note", None);
        let invocation = format!("Reading note {name}");
        let input = Some(serde_json::json!({ "name": name }).to_string());
        if self.ask_setting() == "always" {
            if !self.confirmation(writer, &id, &invocation, input, format!("Read note {name}?")).await {
                let mut w = lock(writer);
                w.end_part();
                w.text(&format!("Not read: {name}."));
                return;
            }
        } else {
            lock(writer).tool_running(&id, &invocation, input);
        }
        let read = if valid_name(name) {
            tokio::fs::read_to_string(self.dir.join(name)).await.map_err(|_| format!("There is no note called {name}."))
        } else {
            Err(format!("{name} is not a note name."))
        };
        let mut w = lock(writer);
        match read {
            Ok(text) => {
                w.tool_complete(&id, tool_result(true, format!("Read note {name}"), Some(text.clone()), None));
                w.end_part();
                w.text(&format!("{name}: {text}"));
            }
            Err(why) => {
                w.tool_complete(&id, tool_result(false, format!("Could not read note {name}"), None, Some(why)))
            }
        }
    }

    /// Starts a call that writes: it asks first unless the ask setting is `never`. Answers the
    /// call's id when it may go ahead; a denial is said in the turn.
    async fn may_write(&self, writer: &Writer, n: usize, call: WriteCall) -> Option<String> {
        let id = Self::tool_call_id(writer, n);
        lock(writer).tool_start(&id, call.tool, call.display, None);
        let input = Some(call.input.to_string());
        if self.ask_setting() == "never" {
            lock(writer).tool_running(&id, &call.invocation, input);
            return Some(id);
        }
        if self.confirmation(writer, &id, &call.invocation, input, call.question).await {
            return Some(id);
        }
        let mut w = lock(writer);
        w.end_part();
        w.text(&call.denied);
        None
    }

    /// Ends a call that wrote: its result (`done`, `failed`: its past tense), and `said` in the
    /// turn when it worked.
    fn wrote(writer: &Writer, id: &str, result: Result<(), String>, [done, said, failed]: [String; 3]) {
        let mut w = lock(writer);
        match result {
            Ok(()) => {
                w.tool_complete(id, tool_result(true, done, None, None));
                w.end_part();
                w.text(&said);
            }
            Err(why) => w.tool_complete(id, tool_result(false, failed, None, Some(why))),
        }
    }

    async fn write(&self, writer: &Writer, n: usize, name: &str, text: &str) {
        let call = WriteCall {
            tool: "write",
            display: "Write note",
            invocation: format!("Writing note {name}"),
            input: serde_json::json!({ "name": name, "text": text }),
            question: format!("Write note {name}?"),
            denied: format!("Not written: {name}."),
        };
        let Some(id) = self.may_write(writer, n, call).await else { return };
        let written = if valid_name(name) {
            let dir = self.dir.clone();
            let path = dir.join(name);
            async move {
                tokio::fs::create_dir_all(&dir).await?;
                tokio::fs::write(&path, text).await
            }
            .await
            .map_err(|e| format!("Could not write note {name}: {e}"))
        } else {
            Err(format!("{name} is not a note name."))
        };
        let words = [format!("Wrote note {name}"), format!("Wrote {name}."), format!("Could not write note {name}")];
        Self::wrote(writer, &id, written, words);
    }

    /// Writes a file in the chat's folder (a path inside it), asking first as `write` does.
    async fn edit(&self, writer: &Writer, n: usize, path: &str, text: &str) {
        let call = WriteCall {
            tool: "edit",
            display: "Edit file",
            invocation: format!("Editing {path}"),
            input: serde_json::json!({ "path": path, "text": text }),
            question: format!("Edit {path}?"),
            denied: format!("Not edited: {path}."),
        };
        let Some(id) = self.may_write(writer, n, call).await else { return };
        let inside = !path.is_empty()
            && std::path::Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        let written = match (&self.folder, inside) {
            (Some(folder), true) => {
                let target = folder.join(path);
                let contents = format!("{text}\n");
                async move {
                    if let Some(parent) = target.parent() {
                        tokio::fs::create_dir_all(parent).await?;
                    }
                    tokio::fs::write(&target, contents).await
                }
                .await
                .map_err(|e| format!("Could not edit {path}: {e}"))
            }
            (None, _) => Err("This chat works in no folder.".to_owned()),
            (_, false) => Err(format!("{path} is not a path inside the chat's folder.")),
        };
        let words = [format!("Edited {path}"), format!("Edited {path}."), format!("Could not edit {path}")];
        Self::wrote(writer, &id, written, words);
    }

    async fn list(&self, writer: &Writer, n: usize) {
        let id = Self::tool_call_id(writer, n);
        {
            let mut w = lock(writer);
            w.tool_start(&id, "list", "List notes", None);
            w.tool_running(&id, "Listing notes", None);
        }
        let mut names = Vec::new();
        if let Ok(mut entries) = tokio::fs::read_dir(&self.dir).await {
            while let Ok(Some(entry)) = entries.next_entry().await {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        let text = if names.is_empty() { "No notes yet.".to_owned() } else { names.join("\n") };
        lock(writer).tool_complete(&id, tool_result(true, "Listed notes", Some(text), None));
    }

    async fn question(&self, writer: &Writer, id: String, message: &str, question: &str) -> Option<Answered> {
        let (tx, rx) = oneshot::channel();
        lock(&self.state).questions.insert(id.clone(), tx);
        lock(writer).input_requested(ChatInputRequest {
            id,
            message: Some(message.to_owned()),
            url: None,
            questions: Some(vec![ChatInputQuestion::Text(ChatInputTextQuestion {
                id: "answer".into(),
                title: None,
                message: question.to_owned(),
                required: Some(true),
                format: None,
                min: None,
                max: None,
                default_value: None,
            })]),
            answers: None,
        });
        rx.await.ok()
    }

    async fn ask_for_note_name(&self, writer: &Writer, n: usize) -> Option<String> {
        let id = format!("{}:question{n}", lock(writer).turn_id());
        let answered = self.question(writer, id, "Which note should I read?", "Note name").await?;
        if answered.response != ChatInputResponseKind::Accept {
            return None;
        }
        text_answer(&answered.answers)
    }

    async fn ask(&self, writer: &Writer, n: usize, question: &str) {
        let id = format!("{}:question{n}", lock(writer).turn_id());
        let answered = self.question(writer, id, question, question).await;
        let reply = match answered {
            Some(a) if a.response == ChatInputResponseKind::Accept => {
                format!("You answered: {}", text_answer(&a.answers).unwrap_or_default())
            }
            Some(_) => "You declined.".to_owned(),
            None => "The question was withdrawn.".to_owned(),
        };
        let mut w = lock(writer);
        w.end_part();
        w.text(&reply);
    }

    async fn call(&self, writer: &Writer, n: usize, name: &str, input: Value) {
        let id = Self::tool_call_id(writer, n);
        let spec = lock(&self.state).tools.iter().find(|t| t.definition.name == name).cloned();
        let (tool_name, contributor) = match &spec {
            Some(ToolSpec { owner: Some(client), display_name, .. }) => (
                display_name.clone().unwrap_or_else(|| name.to_owned()),
                Some(ToolCallContributor::Client(ToolCallClientContributor { client_id: client.clone() })),
            ),
            _ => (name.to_owned(), None),
        };
        {
            let mut w = lock(writer);
            w.tool_start(&id, &tool_name, &tool_name, contributor);
            w.tool_running(&id, &format!("Calling {tool_name}"), Some(input.to_string()));
        }
        let turn_id = lock(writer).turn_id().to_owned();
        let outcome = self.host.run_tool(&turn_id, &id, name, input).await;
        let mut w = lock(writer);
        match outcome {
            Ok(outcome) => {
                let past = outcome.past_tense_message.clone().unwrap_or_else(|| {
                    if outcome.success {
                        format!("Called {tool_name}")
                    } else {
                        format!("{tool_name} failed")
                    }
                });
                w.tool_complete(
                    &id,
                    tool_result(outcome.success, past, Some(outcome.text.clone()), outcome.error.clone()),
                );
                w.end_part();
                w.text(&format!("{tool_name} said: {}", outcome.text));
            }
            Err(e) => {
                w.tool_complete(&id, tool_result(false, format!("{tool_name} failed"), None, Some(e.to_string())))
            }
        }
    }

    /// Abort and close settle everything parked: a question left standing would keep the session
    /// reporting input needed for the rest of its life.
    fn settle_parked(&self) {
        let mut state = lock(&self.state);
        state.confirmations.clear();
        state.questions.clear();
    }
}

fn text_answer(answers: &HashMap<String, ChatInputAnswer>) -> Option<String> {
    answers.values().find_map(|a| match a {
        ChatInputAnswer::Submitted(answered) | ChatInputAnswer::Draft(answered) => match &answered.value {
            ChatInputAnswerValue::Text(t) => Some(t.value.clone()),
            _ => None,
        },
        ChatInputAnswer::Skipped(_) => None,
    })
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{nanos:x}")
}

#[async_trait]
impl Session for Arc<NotesSession> {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        lock(&self.state).queue.push_back(params);
        self.pump();
        Ok(())
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        let mut state = lock(&self.state);
        state.queue.clear();
        if let Some((_, cancel, _)) = &state.running {
            cancel.cancel();
        }
        state.confirmations.clear();
        state.questions.clear();
        Ok(())
    }

    async fn steer(&self, params: protocol::SteerParams) -> Result<bool, AgentError> {
        let writer = match &lock(&self.state).running {
            Some((turn_id, _, writer)) if *turn_id == params.turn_id => writer.clone(),
            _ => return Ok(false),
        };
        let mut w = lock(&writer);
        w.end_part();
        w.text(&format!("Steered: {}", params.message.text));
        Ok(true)
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        let parked = lock(&self.state).confirmations.remove(&params.tool_call_id);
        Ok(match parked {
            Some(tx) => tx.send(Decision { approved: params.approved }).is_ok(),
            None => false,
        })
    }

    async fn answer(&self, params: AnswerParams) -> Result<bool, AgentError> {
        let parked = lock(&self.state).questions.remove(&params.request_id);
        Ok(match parked {
            Some(tx) => tx.send(Answered { response: params.response, answers: params.answers }).is_ok(),
            None => false,
        })
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "ask" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(v) if ASK.contains(&v) => {
                lock(&self.state).settings.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        lock(&self.state).settings.clone()
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        lock(&self.state).tools = tools;
        Ok(())
    }

    async fn close(&self) {
        let _ = Session::abort(self, None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands() {
        assert_eq!(
            parse("read a; write b hello world\nask why?; call list_sessions {}"),
            vec![
                Command::Read(Some("a".into())),
                Command::Write("b".into(), "hello world".into()),
                Command::Ask("why?".into()),
                Command::Call("list_sessions".into(), serde_json::json!({})),
            ]
        );
        assert_eq!(parse("read"), vec![Command::Read(None)]);
        assert_eq!(
            parse("edit src/a.txt two words; where"),
            vec![Command::Edit("src/a.txt".into(), "two words".into()), Command::Where]
        );
    }

    #[test]
    fn note_names_stay_in_their_folder() {
        assert!(valid_name("todo.md"));
        assert!(!valid_name("../etc/passwd"));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name(""));
    }
}

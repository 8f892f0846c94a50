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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputQuestion, ChatInputRequest, ChatInputResponseKind,
    ChatInputTextQuestion, ConfirmationOption, ConfirmationOptionKind, ErrorInfo, Message, MessageKind, MessageOrigin,
    ToolCallClientContributor, ToolCallContributor,
};
use async_trait::async_trait;
use futures_util::future::join_all;
use protocol::{
    AgentDescriptor, AgentFeatures, AnswerParams, ConfirmParams, InitializeParams, Policy, SchemaResult,
    SendMessageParams, SetConfigResult, Start, ToolSpec,
};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::agent::{accepted, not_offered, not_writable, Agent, AgentError, Session};
use crate::engine::policy::{self, Asked, Context, Mode, Verdict};
use crate::engine::{Backend, Engine, Kind, Mapper, Settled, State};
use crate::host::SessionHost;
use crate::turn::{error_info, tool_result, Question, TurnEnd, TurnWriter};

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
    let ask = crate::schema::choice(
        "Ask before",
        "Which tool calls wait for a person to allow them",
        "writes",
        &ASK,
        &["Writes", "Every call", "Never"],
    );
    crate::schema::schema_of(vec![("ask", ask)])
}

#[async_trait]
impl Agent for Notes {
    /// Notes runs no program, so nothing of it needs a box: its edits are writes into the
    /// chat's own folder (a confined session's worktree). It takes confined sessions, so the
    /// levels' own parts (the box's life, `!` commands and terminals inside) are tested without a
    /// CLI.
    fn confines(&self) -> bool {
        true
    }

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
        let backend =
            NotesBackend { dir: self.dir.clone(), folder: start.working_directory.as_ref().map(PathBuf::from) };
        let own = NotesState {
            settings,
            tools: start.tools,
            endpoint: start.tools_endpoint.filter(|_| self.reveal_endpoint),
            next_own_turn: 0,
        };
        Ok(Arc::new(NotesSession(Engine::start(host, backend, own))))
    }
}

/// What a notes session keeps besides the engine's state.
struct NotesState {
    settings: JsonObject,
    tools: Vec<ToolSpec>,
    endpoint: Option<protocol::ToolsEndpoint>,
    next_own_turn: u32,
}

/// Notes on the session engine: its runtime is the turn itself, its commands run side by side.
struct NotesBackend {
    dir: PathBuf,
    /// The folder the chat works in (its session's, or its own).
    folder: Option<PathBuf>,
}

struct NotesTurn {
    writer: TurnWriter,
}

impl Mapper for NotesTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }
}

/// What became of a question a command asked.
enum Heard {
    /// A person answered.
    Answer(ChatInputResponseKind, HashMap<String, ChatInputAnswer>),
    /// Nobody will: the turn stopped.
    Withdrawn,
    /// Nobody watches the turn (seed 003): the agent decides itself.
    Nobody,
}

/// A call that may wait for a person, as they are asked about it.
struct AskedCall {
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

#[async_trait]
impl Backend for NotesBackend {
    type State = NotesState;
    type Turn = NotesTurn;
    /// How a person's answer reaches the command that parked its question.
    type Reply = oneshot::Sender<Settled>;

    fn open(&self, _own: &mut NotesState, writer: TurnWriter, _params: &SendMessageParams) -> NotesTurn {
        NotesTurn { writer }
    }

    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let stop = {
            let mut state = engine.lock();
            if !state.mark_sent(&params.turn_id) {
                return Ok(());
            }
            state.stop_token().unwrap_or_default()
        };
        let turn = Commands { engine, turn_id: params.turn_id.clone(), unattended: params.unattended };
        let mut later = Vec::new();
        let mut fail_turn = false;
        let mut work = Vec::new();
        for (n, command) in parse(&params.message.text).into_iter().enumerate() {
            match command {
                Command::Later(text) => later.push(text),
                Command::Error => fail_turn = true,
                other => work.push(turn.run(n, other)),
            }
        }
        let finished = tokio::select! {
            _ = stop.cancelled() => false,
            _ = join_all(work) => true,
        };
        let end = match (finished, fail_turn) {
            (false, _) => TurnEnd::Cancelled,
            (true, true) => TurnEnd::Error(error_info("notesError", "You asked this turn to fail.")),
            (true, false) => TurnEnd::Complete,
        };
        engine.end_turn(&mut engine.lock(), end);
        if finished {
            for text in later {
                turn.own_turn(text);
            }
        }
        Ok(())
    }

    fn interrupt(&self, _engine: &Engine<Self>, _state: &mut State<Self>) {
        // The turn's commands see its stop.
    }

    fn settle(&self, _engine: &Engine<Self>, _state: &mut State<Self>, reply: Self::Reply, settled: Settled) {
        let _ = reply.send(settled);
    }

    async fn stop(&self, _engine: &Engine<Self>, _running: bool) {}
}

/// One turn's commands, saying what they do in the turn while it runs.
struct Commands<'a> {
    engine: &'a Engine<NotesBackend>,
    turn_id: String,
    unattended: bool,
}

impl Commands<'_> {
    fn backend(&self) -> &NotesBackend {
        self.engine.backend()
    }

    /// Says something in the turn, while it runs.
    fn say<R>(&self, said: impl FnOnce(&mut TurnWriter) -> R) -> Option<R> {
        let mut state = self.engine.lock();
        if state.turn_id() != Some(self.turn_id.as_str()) {
            return None;
        }
        state.sent().map(|turn| said(&mut turn.writer))
    }

    /// Says `text` in a part of its own.
    fn text(&self, text: &str) {
        self.say(|w| {
            w.end_part();
            w.text(text);
        });
    }

    fn tool_call_id(&self, n: usize) -> String {
        format!("{}:tool{n}", self.turn_id)
    }

    /// Whether a call waits for a person, by the session's `ask` setting and what the call is.
    fn verdict(&self, asked: Asked<'_>) -> Verdict {
        let mode = {
            let state = self.engine.lock();
            Mode::from_ask(state.own.settings.get("ask").and_then(Value::as_str), Mode::Writes)
        };
        policy::decide(asked, Context::new(mode, self.unattended))
    }

    fn own_turn(&self, text: String) {
        let id = {
            let mut state = self.engine.lock();
            state.own.next_own_turn += 1;
            format!("notes-own-{}-{}", uuid_like(), state.own.next_own_turn)
        };
        let message = Message {
            text: text.clone(),
            origin: MessageOrigin { kind: MessageKind::Agent },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        };
        let mut turn = TurnWriter::start_own(self.engine.host().clone(), id, message);
        turn.text(&format!("Later, as you asked: {text}"));
        turn.complete();
    }

    async fn run(&self, n: usize, command: Command) {
        match command {
            Command::Read(Some(name)) => self.read(n, &name).await,
            Command::Read(None) => {
                let Some(name) = self.ask_for_note_name(n).await else {
                    self.text("Nothing read.");
                    return;
                };
                self.read(n, &name).await;
            }
            Command::Write(name, text) => self.write(n, &name, &text).await,
            Command::Edit(path, text) => self.edit(n, &path, &text).await,
            Command::Where => {
                let said = match &self.backend().folder {
                    Some(folder) => format!("folder {}", folder.display()),
                    None => "no folder".to_owned(),
                };
                self.text(&said);
            }
            Command::List => self.list(n).await,
            Command::Ask(question) => self.ask(n, &question).await,
            Command::Call(name, input) => self.call(n, &name, input).await,
            Command::Fail => {
                let id = self.tool_call_id(n);
                self.say(|w| {
                    w.tool_start(&id, "fail", "Fail", None);
                    w.tool_running(&id, "Failing on purpose", None);
                    w.tool_complete(&id, tool_result(false, "Failed", None, Some("This tool always fails.".into())));
                });
            }
            Command::Endpoint => {
                let said = match &self.engine.lock().own.endpoint {
                    Some(e) => format!("endpoint {} {}", e.url, e.token),
                    None => "no endpoint".to_owned(),
                };
                self.text(&said);
            }
            Command::Tools => {
                // The tools this session was handed, as the host last set them.
                let names: Vec<String> =
                    self.engine.lock().own.tools.iter().map(|t| t.definition.name.clone()).collect();
                self.text(&format!("tools: {}", names.join(", ")));
            }
            Command::Wait(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.text(&format!("Waited {ms} ms."));
            }
            Command::Unknown(what) => self.text(&format!(
                "Notes does not know \"{what}\". It understands: read NAME, read, write NAME TEXT, list, ask QUESTION, call TOOL {{json}}, fail, error, later TEXT, wait MS, endpoint, tools, edit PATH TEXT, where."
            )),
            Command::Later(_) | Command::Error => {}
        }
    }

    /// Parks a confirmation question for a tool call and waits for the person: true when they
    /// allowed it (a stop withdraws it: the call does not run).
    async fn confirmation(&self, id: &str, invocation: &str, input: Option<String>, title: String) -> bool {
        let (tx, rx) = oneshot::channel();
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
        {
            let mut state = self.engine.lock();
            if state.turn_id() != Some(self.turn_id.as_str()) {
                return false;
            }
            let Some(turn) = state.sent() else { return false };
            turn.writer.tool_asks(id, invocation, input, Question { title, options, meta: None });
            state.park(id, Kind::Confirmation, tx);
        }
        matches!(rx.await, Ok(Settled::Confirmed { approved: true, .. }))
    }

    /// Starts a call that may wait for a person; answers whether it goes ahead (a denial is
    /// said in the turn).
    async fn may_run(&self, id: &str, asked: Asked<'_>, call: &AskedCall) -> bool {
        let input = Some(call.input.to_string());
        if self.verdict(asked) == Verdict::Run {
            self.say(|w| w.tool_running(id, &call.invocation, input));
            return true;
        }
        if self.confirmation(id, &call.invocation, input, call.question.clone()).await {
            return true;
        }
        self.text(&call.denied);
        false
    }

    async fn read(&self, n: usize, name: &str) {
        let id = self.tool_call_id(n);
        self.say(|w| w.tool_start(&id, "read", "Read note", None));
        let call = AskedCall {
            invocation: format!("Reading note {name}"),
            input: serde_json::json!({ "name": name }),
            question: format!("Read note {name}?"),
            denied: format!("Not read: {name}."),
        };
        if !self.may_run(&id, Asked::Own { reads_only: true }, &call).await {
            return;
        }
        let read = if valid_name(name) {
            let path = self.backend().dir.join(name);
            tokio::fs::read_to_string(path).await.map_err(|_| format!("There is no note called {name}."))
        } else {
            Err(format!("{name} is not a note name."))
        };
        self.say(|w| match read {
            Ok(text) => {
                w.tool_complete(&id, tool_result(true, format!("Read note {name}"), Some(text.clone()), None));
                w.end_part();
                w.text(&format!("{name}: {text}"));
            }
            Err(why) => {
                w.tool_complete(&id, tool_result(false, format!("Could not read note {name}"), None, Some(why)))
            }
        });
    }

    /// Starts a call that writes: it asks first unless the ask setting is `never`. Answers the
    /// call's id when it may go ahead; a denial is said in the turn.
    async fn may_write(&self, n: usize, tool: &str, display: &str, call: AskedCall) -> Option<String> {
        let id = self.tool_call_id(n);
        self.say(|w| w.tool_start(&id, tool, display, None));
        self.may_run(&id, Asked::Own { reads_only: false }, &call).await.then_some(id)
    }

    /// Ends a call that wrote: its result (`done`, `failed`: its past tense), and `said` in the
    /// turn when it worked.
    fn wrote(&self, id: &str, result: Result<(), String>, [done, said, failed]: [String; 3]) {
        self.say(|w| match result {
            Ok(()) => {
                w.tool_complete(id, tool_result(true, done, None, None));
                w.end_part();
                w.text(&said);
            }
            Err(why) => w.tool_complete(id, tool_result(false, failed, None, Some(why))),
        });
    }

    async fn write(&self, n: usize, name: &str, text: &str) {
        let call = AskedCall {
            invocation: format!("Writing note {name}"),
            input: serde_json::json!({ "name": name, "text": text }),
            question: format!("Write note {name}?"),
            denied: format!("Not written: {name}."),
        };
        let Some(id) = self.may_write(n, "write", "Write note", call).await else { return };
        let written = if valid_name(name) {
            let dir = self.backend().dir.clone();
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
        self.wrote(&id, written, words);
    }

    /// Writes a file in the chat's folder (a path inside it), asking first as `write` does.
    async fn edit(&self, n: usize, path: &str, text: &str) {
        let call = AskedCall {
            invocation: format!("Editing {path}"),
            input: serde_json::json!({ "path": path, "text": text }),
            question: format!("Edit {path}?"),
            denied: format!("Not edited: {path}."),
        };
        let Some(id) = self.may_write(n, "edit", "Edit file", call).await else { return };
        let inside = !path.is_empty()
            && std::path::Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        let written = match (&self.backend().folder, inside) {
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
        self.wrote(&id, written, words);
    }

    async fn list(&self, n: usize) {
        let id = self.tool_call_id(n);
        self.say(|w| {
            w.tool_start(&id, "list", "List notes", None);
            w.tool_running(&id, "Listing notes", None);
        });
        let mut names = Vec::new();
        if let Ok(mut entries) = tokio::fs::read_dir(&self.backend().dir).await {
            while let Ok(Some(entry)) = entries.next_entry().await {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        let text = if names.is_empty() { "No notes yet.".to_owned() } else { names.join("\n") };
        self.say(|w| w.tool_complete(&id, tool_result(true, "Listed notes", Some(text), None)));
    }

    /// Asks a person a question that is not about a tool, unless nobody watches the turn.
    async fn question(&self, id: String, message: &str, question: &str) -> Heard {
        if self.verdict(Asked::Question) == Verdict::DecideYourself {
            return Heard::Nobody;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.engine.lock();
            if state.turn_id() != Some(self.turn_id.as_str()) {
                return Heard::Withdrawn;
            }
            let Some(turn) = state.sent() else { return Heard::Withdrawn };
            turn.writer.input_requested(ChatInputRequest {
                id: id.clone(),
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
            state.park(id, Kind::Question, tx);
        }
        match rx.await {
            Ok(Settled::Answered { response, answers }) => Heard::Answer(response, answers),
            _ => Heard::Withdrawn,
        }
    }

    async fn ask_for_note_name(&self, n: usize) -> Option<String> {
        let id = format!("{}:question{n}", self.turn_id);
        match self.question(id, "Which note should I read?", "Note name").await {
            Heard::Answer(ChatInputResponseKind::Accept, answers) => text_answer(&answers),
            _ => None,
        }
    }

    async fn ask(&self, n: usize, question: &str) {
        let id = format!("{}:question{n}", self.turn_id);
        let reply = match self.question(id, question, question).await {
            Heard::Answer(ChatInputResponseKind::Accept, answers) => {
                format!("You answered: {}", text_answer(&answers).unwrap_or_default())
            }
            Heard::Answer(..) => "You declined.".to_owned(),
            Heard::Withdrawn => "The question was withdrawn.".to_owned(),
            Heard::Nobody => policy::NOBODY_TO_ASK.to_owned(),
        };
        self.text(&reply);
    }

    /// Calls a tool the session was offered; one that declares itself destructive waits for a
    /// person first.
    async fn call(&self, n: usize, name: &str, input: Value) {
        let id = self.tool_call_id(n);
        let spec = policy::offered(&self.engine.lock().own.tools, name).cloned();
        let (tool_name, contributor) = match &spec {
            Some(ToolSpec { owner: Some(client), display_name, .. }) => (
                display_name.clone().unwrap_or_else(|| name.to_owned()),
                Some(ToolCallContributor::Client(ToolCallClientContributor { client_id: client.clone() })),
            ),
            _ => (name.to_owned(), None),
        };
        self.say(|w| w.tool_start(&id, &tool_name, &tool_name, contributor));
        let call = AskedCall {
            invocation: format!("Calling {tool_name}"),
            input: input.clone(),
            question: format!("Allow {tool_name}?"),
            denied: format!("Not run: {tool_name}."),
        };
        let asked = Asked::Offered(spec.as_ref().and_then(|s| s.effects.as_ref()));
        if !self.may_run(&id, asked, &call).await {
            return;
        }
        let outcome = self.engine.host().run_tool(&self.turn_id, &id, name, input).await;
        self.say(|w| match outcome {
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
        });
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

struct NotesSession(Arc<Engine<NotesBackend>>);

#[async_trait]
impl Session for NotesSession {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        self.0.send_message(params)
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.0.abort();
        Ok(())
    }

    async fn steer(&self, params: protocol::SteerParams) -> Result<bool, AgentError> {
        let mut state = self.0.lock();
        if state.turn_id() != Some(params.turn_id.as_str()) {
            return Ok(false);
        }
        let Some(turn) = state.sent() else { return Ok(false) };
        turn.writer.end_part();
        turn.writer.text(&format!("Steered: {}", params.message.text));
        Ok(true)
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.0.confirm(params))
    }

    async fn answer(&self, params: AnswerParams) -> Result<bool, AgentError> {
        Ok(self.0.answer(params))
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "ask" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(v) if ASK.contains(&v) => {
                self.0.lock().own.settings.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        self.0.lock().own.settings.clone()
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        self.0.lock().own.tools = tools;
        Ok(())
    }

    async fn close(&self) {
        self.0.close().await;
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

//! One chat on one `claude` process, kept open between turns.
//!
//! A driver task takes the turns handed with `sendMessage` one at a time: it (re)starts the CLI
//! when there is none (`--session-id` for a new conversation, `--resume` once the CLI has a
//! record of it), writes the prompt as a stream-json `user` line with a uuid of ours, and leaves
//! the turn to the CLI's output, which a reader task per process maps through [`TurnMapper`].
//! The turn ends at the CLI's `result` (exactly one ending), when a person stops it (at once,
//! and the CLI is interrupted; its output up to its `result` is dropped), or when the CLI exits or
//! prints something that is not JSON (an error carrying its stderr tail; the next message starts
//! a fresh process on the same session id).
//!
//! Control requests the CLI sends are answered here: `can_use_tool` becomes a confirmation or,
//! for `AskUserQuestion`, a chat input request; `mcp_message` is served by the in-process `host`
//! and `client` servers ([`crate::mcp`]); anything else is answered with an error at once.
//!
//! An unattended turn (nobody watches it: a wakeup's) runs on a process started without
//! `AskUserQuestion` (`--disallowedTools`), so the model is not offered the tool at all (seed
//! 003); the next attended turn starts one that offers it again. The CLI fixes its tools when it
//! starts, so this is the one way to take the tool away for a single turn.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::{
    accepted, not_offered, not_writable, resumed_request, AgentError, Session, SessionHost, TurnEnd, TurnWriter,
};
use ahp_types::actions::{SessionMcpServerStateChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{
    ErrorInfo, McpServerErrorState, McpServerReadyState, McpServerStartingState, McpServerState, McpServerStoppedState,
    ModelSelection,
};
use async_trait::async_trait;
use protocol::{
    AnswerParams, Attachment, AttachmentSupport, ConfirmParams, Decision, ResumeTurnParams, SendMessageParams,
    SetConfigResult, SteerParams, ToolOutcome, ToolSpec,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mapper::TurnMapper;
use crate::mcp::{self, McpReply};
use crate::permissions;
use crate::process::{describe_end, Cli, CliEvent, ControlError};
use crate::subagents::{self, Subagents};
use crate::tools::{name_call, Owner, CLIENT_SERVER, HOST_SERVER};
use crate::PERMISSION_MODE_KEY;
use agent_runner::attachments;
use agent_runner::child::ChildCommand;
use agent_runner::lock;

/// How long the CLI may take to answer `initialize` (it starts MCP servers first).
const INITIALIZE_WITHIN: Duration = Duration::from_secs(60);
/// How long a control request from us may wait.
const CONTROL_WITHIN: Duration = Duration::from_secs(30);
/// How long a stopped turn's output may take to reach its `result` before the process is killed.
const DRAIN_WITHIN: Duration = Duration::from_secs(15);

/// Everything fixed for the life of the chat.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The CLI and its environment.
    pub command: String,
    /// Extra arguments from the options.
    pub extra_args: Vec<String>,
    /// Extra environment from the options.
    pub env: BTreeMap<String, String>,
    /// The conversation's uuid (the CLI's session id).
    pub session_id: String,
    /// Where the CLI runs.
    pub cwd: PathBuf,
    /// More folders it may reach.
    pub additional_directories: Vec<String>,
    /// `--mcp-config`.
    pub mcp_config: Value,
    /// `--append-system-prompt`, when there is anything to say.
    pub append_system_prompt: Option<String>,
    /// The permission modes this session offers (its policy may withhold one).
    pub permission_modes: Vec<&'static str>,
    /// What `--settings` carries: the operator's managed settings (`Start.policy.managedSettings`),
    /// which the CLI enforces on the calls it never asks the host about, and the output style.
    pub cli_settings: Option<Value>,
    /// The host keeps what a command printed as an exited terminal (`Start.terminalOutputs`).
    pub terminal_outputs: bool,
}

/// Where a conversation that begins as a copy of another is copied from (`Start.cut`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFrom {
    /// The CLI's session id of the source.
    pub source: String,
    /// The last chain entry copied (`--resume-session-at`); the whole record when none.
    pub at: Option<String>,
}

/// How one process of this chat begins its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin<'a> {
    /// A new conversation under the spec's id.
    New,
    /// The conversation the CLI has a record of.
    Resume,
    /// A copy of another conversation (through one entry of it) under the spec's id.
    Fork(&'a ForkFrom),
}

/// How one process of this chat runs, besides how it begins its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch<'a> {
    /// `--model`.
    pub model: Option<&'a str>,
    /// `--permission-mode`.
    pub permission_mode: &'a str,
    /// Somebody watches its turns, so the model may ask them (`AskUserQuestion` is offered).
    pub asking: bool,
}

/// The argv for one process of this chat.
pub fn launch_args(spec: &SessionSpec, begin: Begin<'_>, launch: Launch<'_>) -> Vec<String> {
    let Launch { model, permission_mode, asking } = launch;
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // The `=` form, as the SDKs use it, so a value is never read as a flag.
    match begin {
        Begin::New => args.push(format!("--session-id={}", spec.session_id)),
        Begin::Resume => args.push(format!("--resume={}", spec.session_id)),
        Begin::Fork(from) => {
            args.push(format!("--resume={}", from.source));
            args.push("--fork-session".to_owned());
            args.push(format!("--session-id={}", spec.session_id));
            if let Some(at) = &from.at {
                args.push(format!("--resume-session-at={at}"));
            }
        }
    }
    args.push(format!("--mcp-config={}", spec.mcp_config));
    if let Some(model) = model {
        args.push(format!("--model={model}"));
    }
    if permission_mode != "default" {
        args.push(format!("--permission-mode={permission_mode}"));
    }
    if let Some(prompt) = &spec.append_system_prompt {
        args.push(format!("--append-system-prompt={prompt}"));
    }
    if let Some(settings) = &spec.cli_settings {
        args.push(format!("--settings={settings}"));
    }
    if !asking {
        // Nobody can answer: the model is not offered the tool at all (seed 003).
        args.push(format!("--disallowedTools={}", crate::tools::ASK_USER_QUESTION));
    }
    for dir in &spec.additional_directories {
        args.push(format!("--add-dir={dir}"));
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// An MCP server's state from the status Claude's `system/init` reports for it.
pub fn mcp_state(status: &str) -> McpServerState {
    match status {
        "connected" => McpServerState::Ready(McpServerReadyState {}),
        "pending" => McpServerState::Starting(McpServerStartingState { blocking: None }),
        "disabled" => McpServerState::Stopped(McpServerStoppedState {}),
        other => McpServerState::Error(McpServerErrorState {
            error: ErrorInfo {
                error_type: "mcpServer".into(),
                message: format!("Claude Code reports the server {other}"),
                stack: None,
                meta: None,
            },
        }),
    }
}

/// What Claude takes as attachments beside text: images and PDFs, as content blocks of their own.
pub const ATTACHMENT_TYPES: [&str; 5] = ["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"];

/// What this backend takes as attachments.
pub fn attachment_support() -> AttachmentSupport {
    AttachmentSupport { types: ATTACHMENT_TYPES.iter().map(|t| (*t).to_owned()).collect(), max_bytes: None }
}

/// An attachment as a content block of a user message: an image, a PDF as a document, anything
/// else as text with its label and where it is from.
pub fn attachment_block(attachment: &Attachment) -> Value {
    let Some(data) = attachment.data.as_ref().filter(|_| attachments::is_binary(attachment)) else {
        return json!({"type": "text", "text": attachments::as_text(attachment)});
    };
    let source = json!({"type": "base64", "media_type": attachment.content_type, "data": data});
    if attachment.content_type.starts_with("image/") {
        json!({"type": "image", "source": source})
    } else {
        let mut block = json!({"type": "document", "source": source, "title": attachment.label});
        if let Some(at) = attachments::location(attachment) {
            block["context"] = json!(at);
        }
        block
    }
}

/// A stream-json `user` line: the turn's instructions, its attachments, then the words.
pub fn user_line(
    text: &str,
    attachments: &[Attachment],
    instructions: Option<&str>,
    uuid: &str,
    priority: Option<&str>,
) -> Value {
    let mut content = Vec::new();
    if let Some(instructions) = instructions.filter(|i| !i.trim().is_empty()) {
        content.push(json!({"type": "text", "text": instructions}));
    }
    content.extend(attachments.iter().map(attachment_block));
    content.push(json!({"type": "text", "text": text}));
    let mut line = json!({"type": "user", "message": {"role": "user", "content": content},
                          "parent_tool_use_id": null, "session_id": "", "uuid": uuid});
    if let Some(priority) = priority {
        line["priority"] = json!(priority);
    }
    line
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Handed, the process is being started; not written yet.
    Preparing,
    /// Written to the CLI; its output is this turn's.
    Sent,
    /// Stopped: said cancelled already; the CLI's output up to its `result` is dropped.
    Draining,
}

struct Steer {
    /// The CLI took it in (or dropped it): it no longer waits.
    started: bool,
    text: String,
}

struct Running {
    mapper: TurnMapper,
    phase: Phase,
    generation: u64,
    uuid: String,
    recorded: bool,
    steers: HashMap<String, Steer>,
    /// The Task subagents it started, each shown in a chat of its own.
    subagents: Subagents,
    /// Nobody watches it: nobody can answer a question.
    unattended: bool,
}

impl Running {
    /// Says the turn's end, and that of every subagent still running in it.
    fn end(&mut self, end: TurnEnd) {
        let how = match &end {
            TurnEnd::Complete => subagents::End::Complete,
            TurnEnd::Cancelled | TurnEnd::Error(_) => subagents::End::Cancelled,
        };
        self.subagents.end_all(&how);
        self.mapper.writer().end(end);
    }
}

impl Running {
    /// A steering message left the CLI's queue; one the model reads is shown in the turn, where
    /// it came in (the parent took it off the chat when it was handed over).
    fn steer_left_queue(&mut self, uuid: &str, read: bool) {
        let Some(steer) = self.steers.get_mut(uuid) else { return };
        if steer.started {
            return;
        }
        steer.started = true;
        if read {
            let text = steer.text.clone();
            self.mapper.writer().notification(&text);
        }
    }
}

struct Live {
    cli: Arc<Cli>,
    generation: u64,
    /// The tools changed: restart before the next turn.
    stale: bool,
    /// The CLI reports `command_lifecycle` (so a steer still queued at `result` is known to run next).
    lifecycle: bool,
    /// It offers `AskUserQuestion` (started for attended turns).
    asking: bool,
}

/// A `can_use_tool` waiting for a person.
struct Parked {
    generation: u64,
    request_id: String,
    request: Value,
}

struct State {
    /// Handed turns, each with whether it is a lost turn that goes on (`resumeTurn`).
    queue: VecDeque<(SendMessageParams, bool)>,
    turn: Option<Running>,
    live: Option<Live>,
    generation: u64,
    /// The CLI has a record of this conversation: a new process resumes it.
    exists: bool,
    /// The conversation begins as a copy of another, until the CLI has a record of it.
    fork: Option<ForkFrom>,
    /// What a person answered to questions of a turn this session resumes, after the process
    /// that asked them was gone: carried out when the CLI asks the same again.
    decisions: Vec<Decision>,
    model: Option<String>,
    permission_mode: String,
    tools: Vec<ToolSpec>,
    /// By tool call id.
    confirmations: HashMap<String, Parked>,
    /// By input request id (the `AskUserQuestion` tool-use id).
    questions: HashMap<String, Parked>,
    /// Said before the next prompt (see `Initial::unsaid_instructions`).
    unsaid_instructions: Option<String>,
    closed: bool,
}

pub(crate) struct Core {
    host: SessionHost,
    spec: SessionSpec,
    state: Mutex<State>,
    wake: Notify,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// The chat, as the runtime holds it.
pub struct ClaudeSession {
    core: Arc<Core>,
}

/// What a new session starts with besides its spec.
pub struct Initial {
    /// Continue an existing conversation.
    pub resume: bool,
    /// `--model`.
    pub model: Option<String>,
    /// `--permission-mode`.
    pub permission_mode: String,
    /// The tools offered in process.
    pub tools: Vec<ToolSpec>,
    /// Instructions a resumed conversation was not started with. The CLI keeps the system prompt
    /// a conversation began with and ignores `--append-system-prompt` on `--resume`, so these
    /// open the first prompt this session sends instead.
    pub unsaid_instructions: Option<String>,
    /// Begin as a copy of another conversation.
    pub fork: Option<ForkFrom>,
}

impl ClaudeSession {
    /// Starts the chat's driver; the CLI itself starts with the first turn.
    pub fn start(host: SessionHost, spec: SessionSpec, initial: Initial) -> Self {
        let core = Arc::new(Core {
            host,
            spec,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                turn: None,
                live: None,
                generation: 0,
                exists: initial.resume,
                fork: initial.fork,
                decisions: Vec::new(),
                model: initial.model,
                permission_mode: initial.permission_mode,
                tools: initial.tools,
                confirmations: HashMap::new(),
                questions: HashMap::new(),
                unsaid_instructions: initial.unsaid_instructions,
                closed: false,
            }),
            wake: Notify::new(),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let driver = core.clone();
        core.tasks.spawn(async move { driver.drive().await });
        Self { core }
    }
}

impl Core {
    fn cli_of(&self, generation: u64) -> Option<Arc<Cli>> {
        lock(&self.state).live.as_ref().filter(|l| l.generation == generation).map(|l| l.cli.clone())
    }

    /// Takes the handed turns one at a time, for as long as the chat lives.
    async fn drive(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.wake.notified() => {}
            }
            while let Some(params) = self.next_turn() {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = self.clone().begin(params) => {}
                }
            }
        }
    }

    /// The head of the queue, made the running turn; none while a turn runs.
    fn next_turn(&self) -> Option<SendMessageParams> {
        let mut state = lock(&self.state);
        if state.closed || state.turn.is_some() {
            return None;
        }
        let (params, resumed) = state.queue.pop_front()?;
        let writer = if resumed { TurnWriter::resuming } else { TurnWriter::new };
        let writer = writer(self.host.clone(), params.turn_id.clone());
        let mapper = TurnMapper::new(writer, state.tools.clone()).with_terminal_outputs(self.spec.terminal_outputs);
        state.turn = Some(Running {
            mapper,
            phase: Phase::Preparing,
            generation: 0,
            uuid: uuid::Uuid::new_v4().to_string(),
            recorded: false,
            steers: HashMap::new(),
            subagents: Subagents::new(self.spec.terminal_outputs),
            unattended: params.unattended,
        });
        Some(params)
    }

    /// Starts the CLI if needed and hands it the prompt.
    async fn begin(self: Arc<Self>, params: SendMessageParams) {
        let started = self.clone().ensure_cli(!params.unattended).await;
        let mut state = lock(&self.state);
        let Some(turn) = state.turn.as_mut() else { return };
        if turn.phase != Phase::Preparing {
            // Stopped while the process started: said cancelled already, never sent.
            state.turn = None;
            drop(state);
            self.wake.notify_one();
            return;
        }
        let (cli, generation) = match started {
            Ok(pair) => pair,
            Err(why) => {
                turn.end(TurnEnd::Error(agent_runner::error_info("claudeNotStarted", why)));
                state.turn = None;
                drop(state);
                self.wake.notify_one();
                return;
            }
        };
        let unsaid = state.unsaid_instructions.take();
        let Some(turn) = state.turn.as_mut() else { return };
        let instructions = match (unsaid, params.instructions.as_deref()) {
            (Some(unsaid), Some(turn_words)) => Some(format!("{unsaid}\n\n{turn_words}")),
            (unsaid, turn_words) => unsaid.or(turn_words.map(str::to_owned)),
        };
        let line = user_line(&params.message.text, &params.attachments, instructions.as_deref(), &turn.uuid, None);
        turn.generation = generation;
        turn.phase = Phase::Sent;
        if !cli.send(&line) {
            tracing::warn!("the prompt could not be written: the CLI's stdin is closed");
        }
    }

    /// The live process, started (and initialized) when there is none, it went stale, or it
    /// offers `AskUserQuestion` otherwise than `asking` says.
    async fn ensure_cli(self: Arc<Self>, asking: bool) -> Result<(Arc<Cli>, u64), String> {
        let stale = {
            let mut state = lock(&self.state);
            match &state.live {
                Some(live) if !live.stale && live.asking == asking => return Ok((live.cli.clone(), live.generation)),
                Some(_) => state.live.take().map(|l| l.cli),
                None => None,
            }
        };
        if let Some(old) = stale {
            old.stop().await;
        }
        let (launch, generation) = {
            let mut state = lock(&self.state);
            state.generation += 1;
            let begin = match (&state.fork, state.exists) {
                (Some(from), false) => Begin::Fork(from),
                (_, true) => Begin::Resume,
                (None, false) => Begin::New,
            };
            let launch = Launch { model: state.model.as_deref(), permission_mode: &state.permission_mode, asking };
            let args = launch_args(&self.spec, begin, launch);
            let launch = ChildCommand::new(&self.spec.command).args(args).envs(&self.spec.env).cwd(&self.spec.cwd);
            (launch, state.generation)
        };
        let (cli, events) = Cli::spawn(launch).map_err(|e| e.to_string())?;
        let closed = {
            let mut state = lock(&self.state);
            if !state.closed {
                state.live = Some(Live { cli: cli.clone(), generation, stale: false, lifecycle: false, asking });
            }
            state.closed
        };
        if closed {
            // Closed while it started: it must not outlive the session.
            cli.kill().await;
            return Err("The conversation was closed.".to_owned());
        }
        let reader = self.clone();
        self.tasks.spawn(async move { reader.read(generation, events).await });
        // `forwardSubagentText`: a Task subagent's text and thinking reach us, for its own chat.
        let init = json!({"subtype": "initialize", "hooks": null, "sdkMcpServers": [HOST_SERVER, CLIENT_SERVER],
                          "forwardSubagentText": true});
        match cli.control(init, INITIALIZE_WITHIN).await {
            Ok(_) => Ok((cli, generation)),
            Err(e) => {
                let why = match e {
                    ControlError::Refused(why) => format!("Claude Code would not start the conversation: {why}"),
                    ControlError::Gone => describe_end(cli.command(), cli.wait_exit(Duration::from_secs(1)).await),
                    ControlError::Timeout => "Claude Code did not answer when it was started".to_owned(),
                };
                {
                    let mut state = lock(&self.state);
                    if state.live.as_ref().is_some_and(|l| l.generation == generation) {
                        state.live = None;
                    }
                }
                cli.kill().await;
                Err(with_tail(why, &cli.stderr_tail()))
            }
        }
    }

    /// Reads one process's output until it ends.
    async fn read(self: Arc<Self>, generation: u64, mut events: mpsc::UnboundedReceiver<CliEvent>) {
        loop {
            let event = tokio::select! {
                _ = self.cancel.cancelled() => return,
                event = events.recv() => event,
            };
            match event {
                Some(CliEvent::Line(line)) => self.clone().on_line(generation, line),
                Some(CliEvent::Garbage(excerpt)) => {
                    let why = format!("Claude Code printed a line that is not JSON: {excerpt:?}");
                    self.broken(generation, "claudeProtocolError", why, true).await;
                    return;
                }
                Some(CliEvent::Ended) | None => {
                    let status = match self.cli_of(generation) {
                        Some(cli) => Some(cli.wait_exit(Duration::from_secs(2)).await),
                        None => None,
                    };
                    let why = describe_end("Claude Code", status.flatten());
                    self.broken(generation, "claudeExited", why, false).await;
                    return;
                }
            }
        }
    }

    /// The process is gone or unusable: the running turn ends in an error carrying its stderr.
    async fn broken(&self, generation: u64, error_type: &str, why: String, kill: bool) {
        let cli = {
            let mut state = lock(&self.state);
            if state.live.as_ref().is_some_and(|l| l.generation == generation) {
                state.live.take().map(|l| l.cli)
            } else {
                None
            }
        };
        let tail = match cli {
            Some(cli) => {
                if kill {
                    cli.kill().await;
                } else {
                    cli.stop().await;
                }
                cli.stderr_tail()
            }
            None => String::new(),
        };
        let message = with_tail(why, &tail);
        {
            let mut state = lock(&self.state);
            state.confirmations.retain(|_, p| p.generation != generation);
            state.questions.retain(|_, p| p.generation != generation);
            let ours = state.turn.as_ref().is_some_and(|t| t.generation == generation && t.phase != Phase::Preparing);
            if ours {
                if let Some(mut turn) = state.turn.take() {
                    if turn.phase == Phase::Sent {
                        tracing::warn!(%message, "claude stopped during a turn");
                        turn.end(TurnEnd::Error(agent_runner::error_info(error_type, message)));
                    }
                }
            }
        }
        self.wake.notify_one();
    }

    fn on_line(self: Arc<Self>, generation: u64, line: Value) {
        if line["type"] == "system" && line["subtype"] == "init" {
            self.say_mcp_servers(&line);
        }
        match line["type"].as_str() {
            Some("control_request") => self.on_control_request(generation, &line),
            Some("control_cancel_request") => self.on_control_cancel(&line),
            Some("command_lifecycle") => self.on_lifecycle(generation, &line),
            Some("keep_alive") => {}
            _ => self.on_output(generation, &line),
        }
    }

    /// Says the state of each of the deployment's MCP servers as the CLI's `system/init` reports
    /// it (its own in-process servers left out).
    fn say_mcp_servers(&self, line: &Value) {
        for server in line["mcp_servers"].as_array().into_iter().flatten() {
            let (Some(name), Some(status)) = (server["name"].as_str(), server["status"].as_str()) else { continue };
            if [HOST_SERVER, CLIENT_SERVER].contains(&name) {
                continue;
            }
            let state = mcp_state(status);
            let action = StateAction::SessionMcpServerStateChanged(Box::new(SessionMcpServerStateChangedAction {
                id: name.to_owned(),
                state,
                channel: None,
            }));
            self.host.emit_session(action);
        }
    }

    /// Says `turn/recorded` for the turn's prompt, once the CLI shows it has it.
    fn record(&self, state: &mut State) {
        let Some(turn) = state.turn.as_mut() else { return };
        if !turn.recorded {
            turn.recorded = true;
            state.exists = true;
            state.fork = None;
            self.host.turn_recorded(turn.mapper.turn_id(), &turn.uuid);
        }
    }

    fn on_output(&self, generation: u64, line: &Value) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let phase = match state.turn.as_ref() {
            Some(turn) if turn.generation == generation => turn.phase,
            Some(_) => return,
            None => {
                tracing::debug!(kind = %line["type"], "claude output with no turn running");
                return;
            }
        };
        match phase {
            Phase::Preparing => return,
            Phase::Draining => {
                if line["type"] == "result" {
                    state.turn = None;
                    drop(guard);
                    self.wake.notify_one();
                }
                return;
            }
            Phase::Sent => {}
        }
        if let (Some(uuids), Some(turn)) = (line["user_message_uuids"].as_array(), state.turn.as_mut()) {
            for uuid in uuids.iter().filter_map(Value::as_str) {
                turn.steer_left_queue(uuid, true);
            }
        }
        if let Some(turn) = state.turn.as_mut() {
            if self.subagent_line(turn, line) {
                return;
            }
        }
        match line["type"].as_str() {
            Some("result") => {
                self.record(state);
                self.on_result(state, line);
                return;
            }
            Some("stream_event" | "assistant") => self.record(state),
            Some("system") if line["subtype"] == "status" => {
                if let Some(mode) = line["permissionMode"].as_str() {
                    state.permission_mode = mode.to_owned();
                }
            }
            _ => {}
        }
        if let Some(turn) = state.turn.as_mut() {
            turn.mapper.line(line);
        }
    }

    /// Takes a subagent's line to its own chat (true), and notes in the turn's own lines where a
    /// subagent starts and ends (false: the turn maps them too).
    fn subagent_line(&self, turn: &mut Running, line: &Value) -> bool {
        let input = |turn: &Running, call: &str| turn.mapper.call(call).map(|c| c.input.clone()).unwrap_or_default();
        if let Some(call) = subagents::parent_of(line) {
            let input = input(turn, call);
            turn.subagents.line(&self.host, turn.mapper.tools(), call, &input, line);
            return true;
        }
        match (line["type"].as_str(), line["subtype"].as_str()) {
            (Some("system"), Some("task_started")) => {
                let input = input(turn, line["tool_use_id"].as_str().unwrap_or_default());
                turn.subagents.task_started(&self.host, turn.mapper.tools(), line, &input);
            }
            (Some("system"), Some("task_notification")) => turn.subagents.notification(line),
            (Some("user"), _) => turn.subagents.results(line),
            _ => {}
        }
        false
    }

    fn on_result(&self, state: &mut State, line: &Value) {
        let lifecycle = state.live.as_ref().is_some_and(|l| l.lifecycle);
        let Some(turn) = state.turn.as_mut() else { return };
        let (usage, end) = turn.mapper.finish(line);
        turn.mapper.writer().usage(usage);
        // A steering message the CLI did not take in at a tool call runs as a prompt of its own
        // right after this one: the turn goes on until that one's result.
        if lifecycle && turn.steers.values().any(|s| !s.started) {
            return;
        }
        turn.end(end);
        state.turn = None;
        self.wake.notify_one();
    }

    fn on_lifecycle(&self, generation: u64, line: &Value) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        if let Some(live) = state.live.as_mut().filter(|l| l.generation == generation) {
            live.lifecycle = true;
        }
        let Some(uuid) = line["command_uuid"].as_str() else { return };
        let state_now = line["state"].as_str().unwrap_or("");
        let started = matches!(state_now, "started" | "completed" | "cancelled");
        let Some(turn) = state.turn.as_mut().filter(|t| t.generation == generation && t.phase == Phase::Sent) else {
            return;
        };
        if uuid == turn.uuid && started {
            self.record(state);
            return;
        }
        if started {
            turn.steer_left_queue(uuid, state_now != "cancelled");
        }
    }

    fn on_control_request(self: Arc<Self>, generation: u64, line: &Value) {
        let request_id = line["request_id"].as_str().unwrap_or_default().to_owned();
        let request = &line["request"];
        let Some(cli) = self.cli_of(generation) else { return };
        match request["subtype"].as_str() {
            Some("can_use_tool") => self.on_can_use_tool(generation, &cli, request_id, request),
            Some("mcp_message") => self.on_mcp_message(&cli, request_id, request),
            other => {
                let what = other.unwrap_or("a request without a subtype");
                tracing::info!(subtype = %what, "answering a control request ahpd does not know with an error");
                cli.respond(&request_id, Err(format!("ahpd does not answer {what}")));
            }
        }
    }

    fn on_can_use_tool(&self, generation: u64, cli: &Arc<Cli>, request_id: String, request: &Value) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let tool_name = request["tool_name"].as_str().unwrap_or("").to_owned();
        let tool_use_id = request["tool_use_id"].as_str().map(str::to_owned).unwrap_or_else(|| request_id.clone());
        let named = name_call(&tool_name, &state.tools);
        let destructive = destructive(&named.owner, &state.tools);
        let Some(turn) = state.turn.as_mut().filter(|t| t.generation == generation && t.phase == Phase::Sent) else {
            cli.respond(&request_id, Ok(permissions::withdrawn()));
            return;
        };
        let mapper = &mut turn.mapper;
        if let Some(decision) = take_decision(&mut state.decisions, &tool_name, &request["input"]) {
            // Answered by a person after the process that first asked was gone.
            let answer = match decision {
                Decision::Answer { response, answers, .. } => {
                    permissions::answers_decision(&request["input"], &response, &answers)
                }
                Decision::Confirmation { approved, option_id, .. } => {
                    mapper.start_call(&tool_use_id, &tool_name);
                    mapper.set_input(&tool_use_id, &request["input"]);
                    if approved {
                        mapper.running(&tool_use_id);
                    }
                    permissions::decision(request, approved, option_id.as_deref(), None)
                }
            };
            cli.respond(&request_id, Ok(answer));
            return;
        }
        match named.owner {
            Owner::Question if turn.unattended => {
                // Not offered in an unattended turn; a CLI that asks anyway is told to decide.
                cli.respond(&request_id, Ok(permissions::nobody_to_ask()));
            }
            Owner::Question => {
                let asked = permissions::input_request(&tool_use_id, &request["input"]);
                mapper.writer().input_requested(asked);
                state.questions.insert(tool_use_id, Parked { generation, request_id, request: request.clone() });
            }
            Owner::Host(_) | Owner::Client { .. } if !destructive => {
                // The host's and the clients' tools are the host's to govern: they run as asked.
                cli.respond(&request_id, Ok(permissions::allow_as_is(request)));
            }
            _ => {
                mapper.start_call(&tool_use_id, &tool_name);
                mapper.set_input(&tool_use_id, &request["input"]);
                let question = permissions::question(&named, request);
                mapper.ask(&tool_use_id, question);
                state.confirmations.insert(tool_use_id, Parked { generation, request_id, request: request.clone() });
            }
        }
    }

    fn on_control_cancel(&self, line: &Value) {
        let Some(request_id) = line["request_id"].as_str() else { return };
        let mut state = lock(&self.state);
        state.confirmations.retain(|_, p| p.request_id != request_id);
        state.questions.retain(|_, p| p.request_id != request_id);
    }

    fn on_mcp_message(self: Arc<Self>, cli: &Arc<Cli>, request_id: String, request: &Value) {
        let server = request["server_name"].as_str().unwrap_or("").to_owned();
        let reply = {
            let state = lock(&self.state);
            mcp::handle(&server, &request["message"], &state.tools)
        };
        match reply {
            McpReply::Now(answer) => {
                cli.respond(&request_id, Ok(json!({"mcp_response": answer})));
            }
            McpReply::Call { id, name, arguments, tool_use_id } => {
                let tool_call_id = tool_use_id.unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4()));
                let turn_id = {
                    let mut state = lock(&self.state);
                    match state.turn.as_mut().filter(|t| t.phase == Phase::Sent) {
                        Some(turn) => {
                            let model_name = format!("mcp__{server}__{name}");
                            turn.mapper.start_call(&tool_call_id, &model_name);
                            turn.mapper.set_input(&tool_call_id, &arguments);
                            turn.mapper.running(&tool_call_id);
                            Some(turn.mapper.turn_id().to_owned())
                        }
                        None => None,
                    }
                };
                let Some(turn_id) = turn_id else {
                    let answer = mcp::call_result(&id, &ToolOutcome::failed("No turn is running."));
                    cli.respond(&request_id, Ok(json!({"mcp_response": answer})));
                    return;
                };
                let (core, cli) = (self.clone(), cli.clone());
                self.tasks.spawn(async move {
                    let outcome = tokio::select! {
                        _ = core.cancel.cancelled() => ToolOutcome::failed("The session closed."),
                        outcome = core.host.run_tool(&turn_id, &tool_call_id, &name, arguments) => {
                            outcome.unwrap_or_else(|e| ToolOutcome::failed(e.to_string()))
                        }
                    };
                    {
                        let mut state = lock(&core.state);
                        if let Some(turn) =
                            state.turn.as_mut().filter(|t| t.mapper.turn_id() == turn_id && t.phase == Phase::Sent)
                        {
                            turn.mapper.complete_from_outcome(&tool_call_id, &outcome);
                        }
                    }
                    cli.respond(&request_id, Ok(json!({"mcp_response": mcp::call_result(&id, &outcome)})));
                });
            }
        }
    }

    /// Answers every parked question of the CLI as withdrawn.
    fn settle_parked(&self, state: &mut State) {
        let parked: Vec<Parked> =
            state.confirmations.drain().map(|(_, p)| p).chain(state.questions.drain().map(|(_, p)| p)).collect();
        for p in parked {
            if let Some(live) = state.live.as_ref().filter(|l| l.generation == p.generation) {
                live.cli.respond(&p.request_id, Ok(permissions::withdrawn()));
            }
        }
    }

    async fn abort(self: Arc<Self>) {
        let interrupt = {
            let mut state = lock(&self.state);
            state.queue.clear();
            self.settle_parked(&mut state);
            let live = state.live.as_ref().map(|l| (l.cli.clone(), l.generation));
            match state.turn.as_mut() {
                Some(turn) if turn.phase == Phase::Preparing => {
                    turn.end(TurnEnd::Cancelled);
                    turn.phase = Phase::Draining;
                    None
                }
                Some(turn) if turn.phase == Phase::Sent => {
                    turn.end(TurnEnd::Cancelled);
                    turn.phase = Phase::Draining;
                    let target = live.filter(|(_, g)| *g == turn.generation);
                    if target.is_none() {
                        // Its process is gone already: nothing will drain.
                        state.turn = None;
                        self.wake.notify_one();
                    }
                    target
                }
                _ => None,
            }
        };
        let Some((cli, generation)) = interrupt else { return };
        // `cancel_queued` drops a steering message the CLI holds for after this turn: a stop drops
        // everything handed behind the stopped turn.
        if let Err(e) = cli.control(json!({"subtype": "interrupt", "cancel_queued": true}), CONTROL_WITHIN).await {
            tracing::warn!(error = %e, "claude did not take the interrupt; stopping it");
            cli.kill().await;
            return;
        }
        // The CLI answers the interrupt and then ends the turn with a `result`; if that never
        // comes, the process is in no state to take the next turn.
        let core = self.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = core.cancel.cancelled() => {}
                _ = tokio::time::sleep(DRAIN_WITHIN) => {
                    let stuck = lock(&core.state).turn.as_ref().is_some_and(|t| t.phase == Phase::Draining && t.generation == generation);
                    if stuck {
                        tracing::warn!("claude did not finish a stopped turn; stopping it");
                        cli.kill().await;
                    }
                }
            }
        });
    }
}

/// True for a host or client tool whose spec says it destroys something: it waits for a person.
fn destructive(owner: &Owner, tools: &[ToolSpec]) -> bool {
    let offered = match owner {
        Owner::Host(name) => tools.iter().find(|t| t.owner.is_none() && &t.definition.name == name),
        Owner::Client { offered, .. } => tools.iter().find(|t| t.owner.is_some() && &t.definition.name == offered),
        _ => return false,
    };
    offered.and_then(|t| t.effects.as_ref()).is_some_and(|e| e.destructive)
}

/// The decision a person made on the same question (a question, or a call of the same tool with
/// the same input) before this process asked it, taken out of `decisions`.
fn take_decision(decisions: &mut Vec<Decision>, tool_name: &str, input: &Value) -> Option<Decision> {
    let at = decisions.iter().position(|d| match d {
        Decision::Answer { .. } => tool_name == crate::tools::ASK_USER_QUESTION,
        Decision::Confirmation { tool_name: name, tool_input, .. } => {
            name == tool_name
                && tool_input
                    .as_deref()
                    .and_then(|text| serde_json::from_str::<Value>(text).ok())
                    .is_none_or(|asked| asked == *input)
        }
    })?;
    Some(decisions.remove(at))
}

fn with_tail(why: String, tail: &str) -> String {
    if tail.is_empty() {
        why
    } else {
        format!("{why}. Its last words: {tail}")
    }
}

#[async_trait]
impl Session for ClaudeSession {
    fn conversation_id(&self) -> Option<String> {
        Some(self.core.spec.session_id.clone())
    }

    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        attachments::refuse_untaken("claude", &attachment_support(), &params.attachments)?;
        let mut state = lock(&self.core.state);
        if state.closed {
            return Err(AgentError::Failed("This conversation is closed.".into()));
        }
        state.queue.push_back((params, false));
        drop(state);
        self.core.wake.notify_one();
        Ok(())
    }

    /// The lost turn goes on in the resumed conversation: the CLI reads its record back, is told
    /// the turn was cut off and given its request again; what a person answered meanwhile is
    /// carried out when it asks the same again.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        let mut state = lock(&self.core.state);
        if state.closed {
            return Err(AgentError::Failed("This conversation is closed.".into()));
        }
        let (params, decisions) = resumed_request(params);
        state.decisions = decisions;
        state.queue.push_back((params, true));
        drop(state);
        self.core.wake.notify_one();
        Ok(())
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        let wanted = (model.id != "default").then(|| model.id.clone());
        let cli = {
            let mut state = lock(&self.core.state);
            state.model = wanted.clone();
            state.live.as_ref().filter(|l| !l.stale).map(|l| l.cli.clone())
        };
        let Some(cli) = cli else { return Ok(()) };
        let request = json!({"subtype": "set_model", "model": wanted});
        cli.control(request, CONTROL_WITHIN)
            .await
            .map(|_| ())
            .map_err(|e| AgentError::Failed(format!("The harness would not take model {}: {e}", model.id)))
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.core.clone().abort().await;
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let mut state = lock(&self.core.state);
        let live = state.live.as_ref().map(|l| (l.cli.clone(), l.generation));
        let Some(turn) = state.turn.as_mut() else { return Ok(false) };
        if turn.phase != Phase::Sent || turn.mapper.turn_id() != params.turn_id {
            return Ok(false);
        }
        let Some((cli, _)) = live.filter(|(_, g)| *g == turn.generation) else { return Ok(false) };
        let uuid = uuid::Uuid::new_v4().to_string();
        if !cli.send(&user_line(&params.message.text, &params.attachments, None, &uuid, Some("next"))) {
            return Ok(false);
        }
        turn.steers.insert(uuid.clone(), Steer { started: false, text: params.message.text.clone() });
        // The CLI writes the steering message down as a prompt of its own: the same turn.
        self.core.host.turn_recorded(&params.turn_id, &uuid);
        Ok(true)
    }

    /// Stops one Task subagent of the running turn (`stop_task`); its chat's turn ends cancelled.
    async fn stop_worker(&self, tool_call_id: String) -> Result<bool, AgentError> {
        let (cli, task) = {
            let state = lock(&self.core.state);
            let Some(turn) = state.turn.as_ref() else { return Ok(false) };
            let Some(task) = turn.subagents.task_id(&tool_call_id) else { return Ok(false) };
            let Some(live) = state.live.as_ref().filter(|l| l.generation == turn.generation) else { return Ok(false) };
            (live.cli.clone(), task)
        };
        cli.control(json!({"subtype": "stop_task", "task_id": task}), CONTROL_WITHIN)
            .await
            .map_err(|e| AgentError::Failed(format!("Claude Code would not stop the subagent: {e}")))?;
        if let Some(turn) = lock(&self.core.state).turn.as_mut() {
            turn.subagents.ended(&tool_call_id, subagents::End::Cancelled);
        }
        Ok(true)
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        let mut state = lock(&self.core.state);
        let Some(parked) = state.confirmations.remove(&params.tool_call_id) else { return Ok(false) };
        let answer = permissions::decision(
            &parked.request,
            params.approved,
            params.option_id.as_deref(),
            params.edited_tool_input.as_deref(),
        );
        if !params.approved {
            if let Some(turn) = state.turn.as_mut() {
                turn.mapper.denied(&params.tool_call_id);
            }
        }
        if let Some(live) = state.live.as_ref().filter(|l| l.generation == parked.generation) {
            live.cli.respond(&parked.request_id, Ok(answer));
        }
        Ok(true)
    }

    async fn answer(&self, params: AnswerParams) -> Result<bool, AgentError> {
        let state = &mut *lock(&self.core.state);
        let Some(parked) = state.questions.remove(&params.request_id) else { return Ok(false) };
        let answer = permissions::answers_decision(&parked.request["input"], &params.response, &params.answers);
        if let Some(live) = state.live.as_ref().filter(|l| l.generation == parked.generation) {
            live.cli.respond(&parked.request_id, Ok(answer));
        }
        Ok(true)
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != PERMISSION_MODE_KEY {
            return Ok(not_writable(&key));
        }
        let Some(mode) = value.as_str().filter(|m| self.core.spec.permission_modes.contains(m)).map(str::to_owned)
        else {
            return Ok(not_offered(&key, &value));
        };
        let cli = {
            let state = lock(&self.core.state);
            state.live.as_ref().filter(|l| !l.stale).map(|l| l.cli.clone())
        };
        if let Some(cli) = cli {
            if let Err(e) = cli.control(json!({"subtype": "set_permission_mode", "mode": mode}), CONTROL_WITHIN).await {
                return Ok(SetConfigResult {
                    accepted: false,
                    refusal: Some(format!("Claude Code would not switch to {mode}: {e}")),
                });
            }
        }
        lock(&self.core.state).permission_mode = mode;
        Ok(accepted())
    }

    async fn settings(&self) -> JsonObject {
        let mut values = JsonObject::new();
        values.insert(PERMISSION_MODE_KEY.into(), json!(lock(&self.core.state).permission_mode));
        values
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        let mut state = lock(&self.core.state);
        let names = |t: &[ToolSpec]| t.iter().map(|s| s.definition.name.clone()).collect::<Vec<_>>();
        if names(&state.tools) != names(&tools) {
            // The CLI lists an in-process server's tools once: a new set needs a new process,
            // which resumes the conversation before the next turn.
            if let Some(live) = state.live.as_mut() {
                live.stale = true;
            }
        }
        state.tools = tools;
        Ok(())
    }

    async fn close(&self) {
        let cli = {
            let mut state = lock(&self.core.state);
            state.closed = true;
            state.queue.clear();
            self.core.settle_parked(&mut state);
            if let Some(mut turn) = state.turn.take() {
                turn.end(TurnEnd::Cancelled);
            }
            state.live.take().map(|l| l.cli)
        };
        self.core.cancel.cancel();
        if let Some(cli) = cli {
            cli.stop().await;
        }
        self.core.tasks.close();
        self.core.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SessionSpec {
        SessionSpec {
            command: "claude".into(),
            extra_args: vec!["--extra".into()],
            env: BTreeMap::new(),
            session_id: "11111111-2222-3333-4444-555555555555".into(),
            cwd: PathBuf::from("/w"),
            additional_directories: vec!["/more".into()],
            mcp_config: json!({"mcpServers": {}}),
            append_system_prompt: Some("Be brief.".into()),
            permission_modes: vec!["default"],
            cli_settings: None,
            terminal_outputs: false,
        }
    }

    #[test]
    fn the_operators_managed_settings_reach_the_cli_as_settings() {
        let attended = Launch { model: None, permission_mode: "default", asking: true };
        assert!(!launch_args(&spec(), Begin::New, attended).iter().any(|a| a.starts_with("--settings")));
        let managed = SessionSpec { cli_settings: Some(json!({"permissions": {"deny": ["Bash"]}})), ..spec() };
        let args = launch_args(&managed, Begin::New, Launch { model: None, permission_mode: "default", asking: true });
        assert!(args.contains(&r#"--settings={"permissions":{"deny":["Bash"]}}"#.to_owned()), "{args:?}");
    }

    #[test]
    fn a_new_conversation_and_a_resumed_one() {
        let attended = Launch { model: None, permission_mode: "default", asking: true };
        let new = launch_args(&spec(), Begin::New, attended);
        for flag in ["-p", "--verbose", "--include-partial-messages", "stdio"] {
            assert!(new.contains(&flag.to_owned()), "{flag}: {new:?}");
        }
        assert!(new.contains(&"--session-id=11111111-2222-3333-4444-555555555555".to_owned()));
        assert!(new.contains(&"--append-system-prompt=Be brief.".to_owned()));
        assert!(new.contains(&"--add-dir=/more".to_owned()));
        assert_eq!(new.last().map(String::as_str), Some("--extra"), "the options' arguments come last");
        assert!(!new.iter().any(|a| a.starts_with("--model") || a.starts_with("--permission-mode")));
        assert!(!new.iter().any(|a| a.starts_with("--disallowedTools")), "an attended turn may ask: {new:?}");
        let launch = Launch { model: Some("haiku"), permission_mode: "plan", asking: false };
        let resumed = launch_args(&spec(), Begin::Resume, launch);
        assert!(resumed.contains(&"--disallowedTools=AskUserQuestion".to_owned()), "nobody to ask: {resumed:?}");
        assert!(resumed.contains(&"--resume=11111111-2222-3333-4444-555555555555".to_owned()));
        assert!(
            resumed.contains(&"--model=haiku".to_owned()) && resumed.contains(&"--permission-mode=plan".to_owned())
        );
    }

    #[test]
    fn a_copy_resumes_its_source_through_the_kept_entry_under_its_own_id() {
        let from = ForkFrom { source: "aaaaaaaa-0000-0000-0000-000000000000".into(), at: Some("e-9".into()) };
        let args =
            launch_args(&spec(), Begin::Fork(&from), Launch { model: None, permission_mode: "default", asking: true });
        for flag in [
            "--resume=aaaaaaaa-0000-0000-0000-000000000000",
            "--fork-session",
            "--session-id=11111111-2222-3333-4444-555555555555",
            "--resume-session-at=e-9",
        ] {
            assert!(args.contains(&flag.to_owned()), "{flag}: {args:?}");
        }
        let whole = ForkFrom { at: None, ..from };
        let args =
            launch_args(&spec(), Begin::Fork(&whole), Launch { model: None, permission_mode: "default", asking: true });
        assert!(!args.iter().any(|a| a.starts_with("--resume-session-at")), "{args:?}");
    }

    #[test]
    fn the_clis_mcp_statuses_become_server_states() {
        assert!(matches!(mcp_state("connected"), McpServerState::Ready(_)));
        assert!(matches!(mcp_state("pending"), McpServerState::Starting(_)));
        assert!(matches!(mcp_state("disabled"), McpServerState::Stopped(_)));
        let McpServerState::Error(failed) = mcp_state("failed") else { panic!("an error") };
        assert_eq!(failed.error.message, "Claude Code reports the server failed");
    }

    #[test]
    fn a_prompt_carries_our_uuid_and_the_turns_instructions_before_it() {
        let line = user_line("hello", &[], Some("Mind the tests."), "u-1", Some("next"));
        assert_eq!(line["uuid"], "u-1");
        assert_eq!(line["priority"], "next");
        assert_eq!(line["message"]["content"][0]["text"], "Mind the tests.");
        assert_eq!(line["message"]["content"][1]["text"], "hello");
        assert!(user_line("hi", &[], None, "u-2", None).get("priority").is_none());
    }
}

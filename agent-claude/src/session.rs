//! One chat on one `claude` process, kept open between turns, on the session engine.
//!
//! The engine takes the turns handed with `sendMessage` one at a time; for each, this backend
//! (re)starts the CLI when there is none (`--session-id` for a new conversation, `--resume` once
//! the CLI has a record of it; [`crate::launch`]), writes the prompt as a stream-json `user` line
//! with a uuid of ours, and leaves the turn to the CLI's output, which a reader task per process
//! maps through [`TurnMapper`]. The turn ends at the CLI's `result` (exactly one ending), when a
//! person stops it (at once, and the CLI is interrupted; its output up to its `result` is
//! dropped), or when the CLI exits or prints something that is not JSON (an error carrying its
//! last words on stderr; the next message starts a fresh process on the same session id).
//!
//! Control requests the CLI sends are answered here: `can_use_tool` becomes a confirmation or,
//! for `AskUserQuestion`, a chat input request, parked with the engine, as the engine's policy
//! decides; `mcp_message` is served by the in-process `host` and `client` servers
//! ([`crate::mcp`]); anything else is answered with an error at once.
//!
//! An unattended turn (nobody watches it: a wakeup's) runs on a process started without
//! `AskUserQuestion` (`--disallowedTools`), so the model is not offered the tool at all (seed
//! 003); the next attended turn starts one that offers it again. The CLI fixes its tools when it
//! starts, so this is the one way to take the tool away for a single turn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_runner::child::ChildCommand;
use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use agent_runner::engine::{Asking, Backend, Engine, Kind, Mapper, Phase, Settled, State};
use agent_runner::{accepted, attachments, error_info, not_offered, not_writable};
use agent_runner::{AgentError, Session, SessionHost, TurnEnd, TurnWriter};
use ahp_types::actions::{SessionMcpServerStateChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ErrorInfo, ModelSelection};
use async_trait::async_trait;
use protocol::{
    AnswerParams, ConfirmParams, ResumeTurnParams, SendMessageParams, SetConfigResult, SteerParams, ToolOutcome,
    ToolSpec,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::launch::{attachment_support, launch_args, mcp_state, user_line, Begin, ForkFrom, Launch, SessionSpec};
use crate::mapper::TurnMapper;
use crate::mcp::{self, McpReply};
use crate::permissions;
use crate::process::{describe_end, Cli, CliEvent, ControlError};
use crate::subagents::{self, Subagents};
use crate::tools::{name_call, Owner, CLIENT_SERVER, HOST_SERVER};
use crate::PERMISSION_MODE_KEY;

/// How long the CLI may take to answer `initialize` (it starts MCP servers first).
const INITIALIZE_WITHIN: Duration = Duration::from_secs(60);
/// How long a control request from us may wait.
const CONTROL_WITHIN: Duration = Duration::from_secs(30);
/// How long a stopped turn's output may take to reach its `result` before the process is killed.
const DRAIN_WITHIN: Duration = Duration::from_secs(15);

/// A steering message handed to the CLI.
struct Steer {
    /// The CLI took it in (or dropped it): it no longer waits.
    started: bool,
    text: String,
}

/// The running turn.
struct ClaudeTurn {
    mapper: TurnMapper,
    /// The process its prompt went to.
    generation: u64,
    uuid: String,
    recorded: bool,
    steers: HashMap<String, Steer>,
    /// The Task subagents it started, each shown in a chat of its own.
    subagents: Subagents,
}

impl Mapper for ClaudeTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        self.mapper.writer()
    }

    /// Says the turn's end, and that of every subagent still running in it.
    fn end(&mut self, end: TurnEnd) {
        let how = match &end {
            TurnEnd::Complete => subagents::End::Complete,
            TurnEnd::Cancelled | TurnEnd::Error(_) => subagents::End::Cancelled,
        };
        self.subagents.end_all(&how);
        self.mapper.writer().end(end);
    }

    fn answered(&mut self, call: &str, approved: bool) {
        if !approved {
            self.mapper.denied(call);
        }
    }
}

impl ClaudeTurn {
    /// A steering message left the CLI's queue; one the model reads is shown in the turn, where
    /// it came in (the parent took it off the chat when it was handed over).
    fn steer_left_queue(&mut self, uuid: &str, read: bool) {
        let Some(steer) = self.steers.get_mut(uuid).filter(|s| !s.started) else { return };
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

/// A `can_use_tool` waiting for a person, answered to the process that asked it.
struct Parked {
    generation: u64,
    request_id: String,
    request: Value,
}

/// What a Claude session keeps besides the engine's state.
struct ClaudeState {
    live: Option<Live>,
    generation: u64,
    /// The CLI has a record of this conversation: a new process resumes it.
    exists: bool,
    /// The conversation begins as a copy of another, until the CLI has a record of it.
    fork: Option<ForkFrom>,
    model: Option<String>,
    permission_mode: String,
    tools: Vec<ToolSpec>,
    /// Said before the next prompt (see `Initial::unsaid_instructions`).
    unsaid_instructions: Option<String>,
}

impl ClaudeState {
    fn cli_of(&self, generation: u64) -> Option<Arc<Cli>> {
        self.live.as_ref().filter(|l| l.generation == generation).map(|l| l.cli.clone())
    }

    /// The live process, unless it is to be started again before the next turn.
    fn fresh_cli(&self) -> Option<Arc<Cli>> {
        self.live.as_ref().filter(|l| !l.stale).map(|l| l.cli.clone())
    }
}

/// Claude Code as an engine's backend: the spec its processes are launched from.
struct Claude {
    spec: SessionSpec,
}

/// The chat, as the runtime holds it.
pub struct ClaudeSession {
    engine: Arc<Engine<Claude>>,
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
    /// Starts the chat's engine; the CLI itself starts with the first turn.
    pub fn start(host: SessionHost, spec: SessionSpec, initial: Initial) -> Self {
        let own = ClaudeState {
            live: None,
            generation: 0,
            exists: initial.resume,
            fork: initial.fork,
            model: initial.model,
            permission_mode: initial.permission_mode,
            tools: initial.tools,
            unsaid_instructions: initial.unsaid_instructions,
        };
        Self { engine: Engine::start(host, Claude { spec }, own) }
    }
}

impl Claude {
    /// The live process, started (and initialized) when there is none, it went stale, or it
    /// offers `AskUserQuestion` otherwise than `asking` says.
    async fn ensure_cli(&self, engine: &Engine<Self>, asking: bool) -> Result<(Arc<Cli>, u64), String> {
        let stale = {
            let mut state = engine.lock();
            match &state.own.live {
                Some(live) if !live.stale && live.asking == asking => return Ok((live.cli.clone(), live.generation)),
                Some(_) => state.own.live.take().map(|l| l.cli),
                None => None,
            }
        };
        if let Some(old) = stale {
            old.stop().await;
        }
        let (launch, generation) = {
            let own = &mut engine.lock().own;
            own.generation += 1;
            let begin = match (&own.fork, own.exists) {
                (Some(from), false) => Begin::Fork(from),
                (_, true) => Begin::Resume,
                (None, false) => Begin::New,
            };
            let launch = Launch { model: own.model.as_deref(), permission_mode: &own.permission_mode, asking };
            let args = launch_args(&self.spec, begin, launch);
            let launch = ChildCommand::new(&self.spec.command)
                .args(args)
                .envs(&self.spec.env)
                .cwd(&self.spec.cwd)
                .confined(self.spec.confined.as_ref());
            (launch, own.generation)
        };
        let (cli, events) = Cli::spawn(launch).map_err(|e| e.to_string())?;
        let closed = {
            let mut state = engine.lock();
            if !state.is_closed() {
                state.own.live = Some(Live { cli: cli.clone(), generation, stale: false, lifecycle: false, asking });
            }
            state.is_closed()
        };
        let Some(reader) = engine.arc().filter(|_| !closed) else {
            // Closed while it started: it must not outlive the session.
            cli.kill().await;
            return Err("The conversation was closed.".to_owned());
        };
        engine.spawn(async move { Claude::read(&reader, generation, events).await });
        // `forwardSubagentText`: a Task subagent's text and thinking reach us, for its own chat.
        let init = json!({"subtype": "initialize", "hooks": null, "sdkMcpServers": [HOST_SERVER, CLIENT_SERVER],
                          "forwardSubagentText": true});
        let why = match cli.control(init, INITIALIZE_WITHIN).await {
            Ok(_) => return Ok((cli, generation)),
            Err(ControlError::Refused(why)) => format!("Claude Code would not start the conversation: {why}"),
            Err(ControlError::Gone) => describe_end(cli.command(), cli.wait_exit(Duration::from_secs(1)).await),
            Err(ControlError::Timeout) => "Claude Code did not answer when it was started".to_owned(),
        };
        {
            let mut state = engine.lock();
            if state.own.live.as_ref().is_some_and(|l| l.generation == generation) {
                state.own.live = None;
            }
        }
        cli.kill().await;
        Err(cli.last_words(why))
    }

    /// Reads one process's output until it ends.
    async fn read(engine: &Engine<Self>, generation: u64, mut events: mpsc::UnboundedReceiver<CliEvent>) {
        let claude = engine.backend();
        loop {
            match events.recv().await {
                Some(CliEvent::Line(line)) => claude.on_line(engine, generation, &line),
                Some(CliEvent::Garbage(excerpt)) => {
                    let why = format!("Claude Code printed a line that is not JSON: {excerpt:?}");
                    return Self::broken(engine, generation, "claudeProtocolError", why, true).await;
                }
                Some(CliEvent::Ended) | None => {
                    let cli = engine.lock().own.cli_of(generation);
                    let status = match cli {
                        Some(cli) => cli.wait_exit(Duration::from_secs(2)).await,
                        None => None,
                    };
                    let why = describe_end("Claude Code", status);
                    return Self::broken(engine, generation, "claudeExited", why, false).await;
                }
            }
        }
    }

    /// The process is gone or unusable: the running turn ends in an error carrying its last words.
    async fn broken(engine: &Engine<Self>, generation: u64, error_type: &str, why: String, kill: bool) {
        let cli = {
            let mut state = engine.lock();
            let ours = state.own.live.as_ref().is_some_and(|l| l.generation == generation);
            if ours {
                state.own.live.take().map(|l| l.cli)
            } else {
                None
            }
        };
        let message = match cli {
            Some(cli) if kill => {
                cli.kill().await;
                cli.last_words(why)
            }
            Some(cli) => {
                cli.stop().await;
                cli.last_words(why)
            }
            None => why,
        };
        let mut guard = engine.lock();
        let state = &mut *guard;
        // Nobody will hear an answer to what it asked.
        state.forget_parked(|p| p.generation != generation);
        let ours = state.turn().is_some_and(|t| t.generation == generation) && state.phase() != Some(Phase::Preparing);
        if ours {
            if state.phase() == Some(Phase::Sent) {
                tracing::warn!(%message, "claude stopped during a turn");
            }
            engine.end_turn(state, TurnEnd::Error(error_info(error_type, message)));
        }
    }

    fn on_line(&self, engine: &Engine<Self>, generation: u64, line: &Value) {
        if line["type"] == "system" && line["subtype"] == "init" {
            self.say_mcp_servers(engine.host(), line);
        }
        match line["type"].as_str() {
            Some("control_request") => self.on_control_request(engine, generation, line),
            Some("control_cancel_request") => {
                let Some(request_id) = line["request_id"].as_str() else { return };
                engine.lock().forget_parked(|p| p.request_id != request_id);
            }
            Some("command_lifecycle") => self.on_lifecycle(engine, generation, line),
            Some("keep_alive") => {}
            _ => self.on_output(engine, generation, line),
        }
    }

    /// Says the state of each of the deployment's MCP servers as the CLI's `system/init` reports
    /// it (its own in-process servers left out).
    fn say_mcp_servers(&self, host: &SessionHost, line: &Value) {
        for server in line["mcp_servers"].as_array().into_iter().flatten() {
            let (Some(name), Some(status)) = (server["name"].as_str(), server["status"].as_str()) else { continue };
            if [HOST_SERVER, CLIENT_SERVER].contains(&name) {
                continue;
            }
            let changed =
                SessionMcpServerStateChangedAction { id: name.to_owned(), state: mcp_state(status), channel: None };
            host.emit_session(StateAction::SessionMcpServerStateChanged(Box::new(changed)));
        }
    }

    /// Says `turn/recorded` for the turn's prompt, once the CLI shows it has it.
    fn record(host: &SessionHost, state: &mut State<Self>) {
        let (own, Some(turn)) = state.own_and_turn() else { return };
        if !turn.recorded {
            turn.recorded = true;
            own.exists = true;
            own.fork = None;
            host.turn_recorded(turn.mapper.turn_id(), &turn.uuid);
        }
    }

    fn on_output(&self, engine: &Engine<Self>, generation: u64, line: &Value) {
        let mut guard = engine.lock();
        let state = &mut *guard;
        match (state.turn().map(|t| t.generation == generation), state.phase()) {
            (Some(true), Some(Phase::Sent)) => {}
            // Stopped: its output up to its `result` is dropped; then the next turn may begin.
            (Some(true), Some(Phase::Stopped)) if line["type"] == "result" => {
                return engine.end_turn(state, TurnEnd::Cancelled);
            }
            (None, _) => return tracing::debug!(kind = %line["type"], "claude output with no turn running"),
            _ => return,
        }
        let host = engine.host();
        let Some(turn) = state.turn() else { return };
        for uuid in line["user_message_uuids"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            turn.steer_left_queue(uuid, true);
        }
        if subagent_line(host, turn, line) {
            return;
        }
        match line["type"].as_str() {
            Some("result") => {
                Self::record(host, state);
                return self.on_result(engine, state, line);
            }
            Some("stream_event" | "assistant") => Self::record(host, state),
            Some("system") if line["subtype"] == "status" => {
                if let Some(mode) = line["permissionMode"].as_str() {
                    state.own.permission_mode = mode.to_owned();
                }
            }
            _ => {}
        }
        if let Some(turn) = state.turn() {
            turn.mapper.line(line);
        }
    }

    fn on_result(&self, engine: &Engine<Self>, state: &mut State<Self>, line: &Value) {
        let lifecycle = state.own.live.as_ref().is_some_and(|l| l.lifecycle);
        let Some(turn) = state.turn() else { return };
        let (usage, end) = turn.mapper.finish(line);
        turn.mapper.writer().usage(usage);
        // A steering message the CLI did not take in at a tool call runs as a prompt of its own
        // right after this one: the turn goes on until that one's result.
        if lifecycle && turn.steers.values().any(|s| !s.started) {
            return;
        }
        engine.end_turn(state, end);
    }

    fn on_lifecycle(&self, engine: &Engine<Self>, generation: u64, line: &Value) {
        let mut guard = engine.lock();
        let state = &mut *guard;
        if let Some(live) = state.own.live.as_mut().filter(|l| l.generation == generation) {
            live.lifecycle = true;
        }
        let Some(uuid) = line["command_uuid"].as_str() else { return };
        let now = line["state"].as_str().unwrap_or("");
        if !matches!(now, "started" | "completed" | "cancelled") {
            return;
        }
        let Some(turn) = state.sent().filter(|t| t.generation == generation) else { return };
        if uuid == turn.uuid {
            Self::record(engine.host(), state);
        } else {
            turn.steer_left_queue(uuid, now != "cancelled");
        }
    }

    fn on_control_request(&self, engine: &Engine<Self>, generation: u64, line: &Value) {
        let request_id = line["request_id"].as_str().unwrap_or_default().to_owned();
        let request = &line["request"];
        let Some(cli) = engine.lock().own.cli_of(generation) else { return };
        match request["subtype"].as_str() {
            Some("can_use_tool") => {
                let confined = self.spec.confined.is_some();
                Self::on_can_use_tool(&mut engine.lock(), confined, generation, &cli, request_id, request)
            }
            Some("mcp_message") => Self::on_mcp_message(engine, &cli, request_id, request),
            other => {
                let what = other.unwrap_or("a request without a subtype");
                tracing::info!(subtype = %what, "answering a control request ahpd does not know with an error");
                cli.respond(&request_id, Err(format!("ahpd does not answer {what}")));
            }
        }
    }

    /// The CLI asks whether a call may run: the engine's policy decides what waits for a person.
    fn on_can_use_tool(
        state: &mut State<Self>,
        confined: bool,
        generation: u64,
        cli: &Cli,
        request_id: String,
        request: &Value,
    ) {
        let tool_name = request["tool_name"].as_str().unwrap_or("").to_owned();
        let input = &request["input"];
        let tool_use_id = request["tool_use_id"].as_str().map(str::to_owned).unwrap_or_else(|| request_id.clone());
        let named = name_call(&tool_name, &state.own.tools);
        let asked = match &named.owner {
            Owner::Question => Asked::Question,
            Owner::Host(_) | Owner::Client { .. } => Asked::Offered(offered(&named.owner, &state.own.tools)),
            Owner::Cli => Asked::Own { reads_only: false },
        };
        let verdict = policy::decide(asked, Context::new(Mode::Runtime, state.unattended()).confined(confined));
        let asking =
            if named.owner == Owner::Question { Asking::Question } else { Asking::Tool { tool: &tool_name, input } };
        let decided = state.take_decision(asking);
        let Some(turn) = state.sent().filter(|t| t.generation == generation) else {
            cli.respond(&request_id, Ok(permissions::withdrawn()));
            return;
        };
        let mapper = &mut turn.mapper;
        let answer = match (decided, verdict) {
            // Answered by a person after the process that first asked was gone.
            (Some(Settled::Answered { response, answers }), _) => {
                permissions::answers_decision(input, &response, &answers)
            }
            (Some(Settled::Confirmed { approved, option_id, .. }), _) => {
                mapper.start_call(&tool_use_id, &tool_name);
                mapper.set_input(&tool_use_id, input);
                if approved {
                    mapper.running(&tool_use_id);
                }
                permissions::decision(request, approved, option_id.as_deref(), None)
            }
            // Not offered in an unattended turn; a CLI that asks anyway is told to decide.
            (_, Verdict::DecideYourself) => permissions::nobody_to_ask(),
            // The host's and the clients' tools are the host's to govern: they run as asked.
            (_, Verdict::Run) => permissions::allow_as_is(request),
            (_, Verdict::Ask) => {
                mapper.writer().input_requested(permissions::input_request(&tool_use_id, input));
                state.park(tool_use_id, Kind::Question, Parked { generation, request_id, request: request.clone() });
                return;
            }
            (_, Verdict::Confirm) => {
                mapper.start_call(&tool_use_id, &tool_name);
                mapper.set_input(&tool_use_id, input);
                mapper.ask(&tool_use_id, permissions::question(&named, request));
                let parked = Parked { generation, request_id, request: request.clone() };
                state.park(tool_use_id, Kind::Confirmation, parked);
                return;
            }
        };
        cli.respond(&request_id, Ok(answer));
    }

    fn on_mcp_message(engine: &Engine<Self>, cli: &Arc<Cli>, request_id: String, request: &Value) {
        let server = request["server_name"].as_str().unwrap_or("").to_owned();
        let reply = mcp::handle(&server, &request["message"], &engine.lock().own.tools);
        let (id, name, arguments, tool_use_id) = match reply {
            McpReply::Now(answer) => {
                cli.respond(&request_id, Ok(json!({"mcp_response": answer})));
                return;
            }
            McpReply::Call { id, name, arguments, tool_use_id } => (id, name, arguments, tool_use_id),
        };
        let tool_call_id = tool_use_id.unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4()));
        let turn_id = engine.lock().sent().map(|turn| {
            turn.mapper.start_call(&tool_call_id, &format!("mcp__{server}__{name}"));
            turn.mapper.set_input(&tool_call_id, &arguments);
            turn.mapper.running(&tool_call_id);
            turn.mapper.turn_id().to_owned()
        });
        let Some(turn_id) = turn_id else {
            let answer = mcp::call_result(&id, &ToolOutcome::failed("No turn is running."));
            cli.respond(&request_id, Ok(json!({"mcp_response": answer})));
            return;
        };
        let (Some(runner), cli) = (engine.arc(), cli.clone()) else { return };
        engine.spawn(async move {
            let ran = runner.host().run_tool(&turn_id, &tool_call_id, &name, arguments).await;
            let outcome = ran.unwrap_or_else(|e| ToolOutcome::failed(e.to_string()));
            if let Some(turn) = runner.lock().sent().filter(|t| t.mapper.turn_id() == turn_id) {
                turn.mapper.complete_from_outcome(&tool_call_id, &outcome);
            }
            cli.respond(&request_id, Ok(json!({"mcp_response": mcp::call_result(&id, &outcome)})));
        });
    }
}

/// Takes a subagent's line to its own chat (true), and notes in the turn's own lines where a
/// subagent starts and ends (false: the turn maps them too).
fn subagent_line(host: &SessionHost, turn: &mut ClaudeTurn, line: &Value) -> bool {
    let input = |turn: &ClaudeTurn, call: &str| turn.mapper.call(call).map(|c| c.input.clone()).unwrap_or_default();
    if let Some(call) = subagents::parent_of(line) {
        let input = input(turn, call);
        turn.subagents.line(host, turn.mapper.tools(), call, &input, line);
        return true;
    }
    match (line["type"].as_str(), line["subtype"].as_str()) {
        (Some("system"), Some("task_started")) => {
            let input = input(turn, line["tool_use_id"].as_str().unwrap_or_default());
            turn.subagents.task_started(host, turn.mapper.tools(), line, &input);
        }
        (Some("system"), Some("task_notification")) => turn.subagents.notification(line),
        (Some("user"), _) => turn.subagents.results(line),
        _ => {}
    }
    false
}

/// The spec of the host's or a client's tool a call names, by the effects it declares.
fn offered<'a>(owner: &Owner, tools: &'a [ToolSpec]) -> Option<&'a protocol::ToolEffects> {
    let spec = match owner {
        Owner::Host(name) => tools.iter().find(|t| t.owner.is_none() && &t.definition.name == name),
        Owner::Client { offered, .. } => tools.iter().find(|t| t.owner.is_some() && &t.definition.name == offered),
        _ => None,
    };
    spec.and_then(|t| t.effects.as_ref())
}

#[async_trait]
impl Backend for Claude {
    type State = ClaudeState;
    type Turn = ClaudeTurn;
    type Reply = Parked;

    fn open(&self, own: &mut ClaudeState, writer: TurnWriter, _params: &SendMessageParams) -> ClaudeTurn {
        let terminals = self.spec.terminal_outputs;
        ClaudeTurn {
            mapper: TurnMapper::new(writer, own.tools.clone()).with_terminal_outputs(terminals),
            generation: 0,
            uuid: uuid::Uuid::new_v4().to_string(),
            recorded: false,
            steers: HashMap::new(),
            subagents: Subagents::new(terminals),
        }
    }

    /// Starts the CLI if needed and hands it the prompt.
    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let started = self.ensure_cli(engine, !params.unattended).await;
        let (cli, generation) = started.map_err(|why| error_info("claudeNotStarted", why))?;
        let mut guard = engine.lock();
        let state = &mut *guard;
        if !state.mark_sent(&params.turn_id) {
            return Ok(());
        }
        let instructions = match (state.own.unsaid_instructions.take(), params.instructions) {
            (Some(unsaid), Some(turn_words)) => Some(format!("{unsaid}\n\n{turn_words}")),
            (unsaid, turn_words) => unsaid.or(turn_words),
        };
        let Some(turn) = state.turn() else { return Ok(()) };
        turn.generation = generation;
        let line = user_line(&params.message.text, &params.attachments, instructions.as_deref(), &turn.uuid, None);
        if !cli.send(&line) {
            tracing::warn!("the prompt could not be written: the CLI's stdin is closed");
        }
        Ok(())
    }

    /// `interrupt`: `cancel_queued` drops a steering message the CLI holds for after this turn
    /// (a stop drops everything handed behind the stopped turn). The CLI answers it and then ends
    /// the turn with a `result`; if that never comes, the process is in no state to take the next.
    fn interrupt(&self, engine: &Engine<Self>, state: &mut State<Self>) {
        let generation = state.turn().map(|t| t.generation).unwrap_or_default();
        let (Some(cli), Some(drained)) = (state.own.cli_of(generation), engine.arc()) else {
            // Its process is gone already: nothing will drain.
            return engine.end_turn(state, TurnEnd::Cancelled);
        };
        engine.spawn(async move {
            let interrupt = json!({"subtype": "interrupt", "cancel_queued": true});
            if let Err(e) = cli.control(interrupt, CONTROL_WITHIN).await {
                tracing::warn!(error = %e, "claude did not take the interrupt; stopping it");
                return cli.kill().await;
            }
            tokio::time::sleep(DRAIN_WITHIN).await;
            let stuck = {
                let mut state = drained.lock();
                state.phase() == Some(Phase::Stopped) && state.turn().is_some_and(|t| t.generation == generation)
            };
            if stuck {
                tracing::warn!("claude did not finish a stopped turn; stopping it");
                cli.kill().await;
            }
        });
    }

    fn settle(&self, _engine: &Engine<Self>, state: &mut State<Self>, parked: Parked, settled: Settled) {
        let answer = match settled {
            Settled::Confirmed { approved, option_id, edited_input } => {
                permissions::decision(&parked.request, approved, option_id.as_deref(), edited_input.as_deref())
            }
            Settled::Answered { response, answers } => {
                permissions::answers_decision(&parked.request["input"], &response, &answers)
            }
            Settled::Withdrawn => permissions::withdrawn(),
        };
        if let Some(cli) = state.own.cli_of(parked.generation) {
            cli.respond(&parked.request_id, Ok(answer));
        }
    }

    async fn stop(&self, engine: &Engine<Self>, _running: bool) {
        let live = engine.lock().own.live.take();
        if let Some(live) = live {
            live.cli.stop().await;
        }
    }
}

#[async_trait]
impl Session for ClaudeSession {
    fn conversation_id(&self) -> Option<String> {
        Some(self.engine.backend().spec.session_id.clone())
    }

    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        attachments::refuse_untaken("claude", &attachment_support(), &params.attachments)?;
        self.engine.send_message(params)
    }

    /// The lost turn goes on in the resumed conversation: the CLI reads its record back, is told
    /// the turn was cut off and given its request again; what a person answered meanwhile is
    /// carried out when it asks the same again.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        self.engine.resume_turn(params)
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        let wanted = (model.id != "default").then(|| model.id.clone());
        let cli = {
            let own = &mut self.engine.lock().own;
            own.model = wanted.clone();
            own.fresh_cli()
        };
        let Some(cli) = cli else { return Ok(()) };
        let request = json!({"subtype": "set_model", "model": wanted});
        cli.control(request, CONTROL_WITHIN)
            .await
            .map(|_| ())
            .map_err(|e| AgentError::Failed(format!("The harness would not take model {}: {e}", model.id)))
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.engine.abort();
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let mut state = self.engine.lock();
        if state.turn_id() != Some(params.turn_id.as_str()) || state.phase() != Some(Phase::Sent) {
            return Ok(false);
        }
        let (own, Some(turn)) = state.own_and_turn() else { return Ok(false) };
        let Some(cli) = own.cli_of(turn.generation) else { return Ok(false) };
        let uuid = uuid::Uuid::new_v4().to_string();
        if !cli.send(&user_line(&params.message.text, &params.attachments, None, &uuid, Some("next"))) {
            return Ok(false);
        }
        turn.steers.insert(uuid.clone(), Steer { started: false, text: params.message.text.clone() });
        // The CLI writes the steering message down as a prompt of its own: the same turn.
        self.engine.host().turn_recorded(&params.turn_id, &uuid);
        Ok(true)
    }

    /// Stops one Task subagent of the running turn (`stop_task`); its chat's turn ends cancelled.
    async fn stop_worker(&self, tool_call_id: String) -> Result<bool, AgentError> {
        let (cli, task) = {
            let mut guard = self.engine.lock();
            let (own, Some(turn)) = guard.own_and_turn() else { return Ok(false) };
            let Some(task) = turn.subagents.task_id(&tool_call_id) else { return Ok(false) };
            let Some(cli) = own.cli_of(turn.generation) else { return Ok(false) };
            (cli, task)
        };
        cli.control(json!({"subtype": "stop_task", "task_id": task}), CONTROL_WITHIN)
            .await
            .map_err(|e| AgentError::Failed(format!("Claude Code would not stop the subagent: {e}")))?;
        if let Some(turn) = self.engine.lock().turn() {
            turn.subagents.ended(&tool_call_id, subagents::End::Cancelled);
        }
        Ok(true)
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.engine.confirm(params))
    }

    async fn answer(&self, params: AnswerParams) -> Result<bool, AgentError> {
        Ok(self.engine.answer(params))
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != PERMISSION_MODE_KEY {
            return Ok(not_writable(&key));
        }
        let modes = &self.engine.backend().spec.permission_modes;
        let Some(mode) = value.as_str().filter(|m| modes.contains(m)).map(str::to_owned) else {
            return Ok(not_offered(&key, &value));
        };
        let cli = self.engine.lock().own.fresh_cli();
        if let Some(cli) = cli {
            if let Err(e) = cli.control(json!({"subtype": "set_permission_mode", "mode": mode}), CONTROL_WITHIN).await {
                let refusal = Some(format!("Claude Code would not switch to {mode}: {e}"));
                return Ok(SetConfigResult { accepted: false, refusal });
            }
        }
        self.engine.lock().own.permission_mode = mode;
        Ok(accepted())
    }

    async fn settings(&self) -> JsonObject {
        let mut values = JsonObject::new();
        values.insert(PERMISSION_MODE_KEY.into(), json!(self.engine.lock().own.permission_mode));
        values
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        let own = &mut self.engine.lock().own;
        let names = |t: &[ToolSpec]| t.iter().map(|s| s.definition.name.clone()).collect::<Vec<_>>();
        if names(&own.tools) != names(&tools) {
            // The CLI lists an in-process server's tools once: a new set needs a new process,
            // which resumes the conversation before the next turn.
            if let Some(live) = own.live.as_mut() {
                live.stale = true;
            }
        }
        own.tools = tools;
        Ok(())
    }

    async fn close(&self) {
        self.engine.close().await;
    }
}

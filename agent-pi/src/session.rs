//! One conversation on the session engine: one `pi --mode rpc` child (its launcher), pi's records
//! fed to the running turn's [`TurnMapper`] in pi's order, the bridge's questions (tool gates, host
//! tool calls, entry ids) answered, and `abort` said to pi (its interrupt). The queue, the parked
//! gates, abort and close are the engine's ([`agent_runner::engine`]).

use std::path::PathBuf;
use std::sync::Arc;

use agent_runner::child::ChildCommand;
use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use agent_runner::engine::{Asking, Backend, Engine, Kind, Mapper, Phase, Settled, State};
use agent_runner::{accepted, error_info, not_offered, not_writable, AgentError, Question, Session, SessionHost};
use agent_runner::{attachments, TurnEnd, TurnWriter};
use ahp_types::common::JsonObject;
use ahp_types::state::{ConfirmationOption, ConfirmationOptionKind, ErrorInfo, ModelSelection};
use async_trait::async_trait;
use protocol::{ConfirmParams, ResumeTurnParams, SendMessageParams, SetConfigResult, Start, SteerParams, ToolSpec};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::commands::{
    attachment_support, bridge_command, bridge_tools, catalog_of, gate_answer, not_run, prompt_command, BRIDGE, DENIED,
};
use crate::event::PiRecord;
use crate::mapper::{display_name_of, Step, ToolCatalog, TurnMapper};
use crate::models::{split_model_id, thinking_level};
use crate::options::{path_string, PiOptions};
use crate::process::{Output, PiError, PiProcess, UiAnswer};

/// The `ask` setting: which of pi's own tool calls wait for a person.
pub const ASK: [&str; 3] = ["never", "writes", "always"];
/// pi's tools that only read.
const READ_ONLY_TOOLS: [&str; 4] = ["read", "grep", "find", "ls"];

/// The schema's defaults for a session's settings, with the start's values over them.
pub fn settings_for(start: &Start) -> JsonObject {
    let mut settings = JsonObject::new();
    let ask = start.settings.get("ask").and_then(Value::as_str).filter(|v| ASK.contains(v)).unwrap_or("never");
    settings.insert("ask".into(), Value::String(ask.to_owned()));
    settings
}

/// pi's launcher: how its child starts, and what its bridge is set up with.
struct Pi {
    options: Arc<PiOptions>,
    launch: ChildCommand,
    instructions: Vec<String>,
}

/// What a pi session keeps besides the engine's state.
struct PiState {
    pi: Option<Arc<PiProcess>>,
    /// The `get_state` asked after `agent_end`; what arrives before its answer decides the end.
    barrier: Option<String>,
    /// The `get_state` asked after a prompt was taken: a prompt an extension handled starts no run.
    prompt_check: Option<String>,
    settings: JsonObject,
    tools: Vec<ToolSpec>,
    catalog: ToolCatalog,
    /// The session runs in a box: pi's own tools run without a person (the box holds them).
    confined: bool,
}

/// The running turn.
struct PiTurn(TurnMapper);

impl Mapper for PiTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        self.0.writer()
    }

    fn end(&mut self, end: TurnEnd) {
        self.0.say_end(end);
    }

    fn answered(&mut self, call: &str, approved: bool) {
        if !approved {
            self.0.denied(call);
        }
    }
}

/// A bridge dialog waiting for a person, answered to the pi that asked it.
enum Dialog {
    /// May pi run one of its own tools.
    Gate { pi: Arc<PiProcess>, dialog: String },
    /// May the host run a tool of its own or a client's that waits for a person.
    Tool { pi: Arc<PiProcess>, dialog: String, turn_id: String, request: Value },
}

/// A pi conversation.
pub struct PiSession {
    engine: Arc<Engine<Pi>>,
    /// The id its session file is kept under (a new one when it began as a cut).
    conversation_id: String,
    /// It began as a cut, which its session file holds already.
    cut: bool,
}

fn refused(e: PiError) -> AgentError {
    match e {
        PiError::Refused(sentence) => AgentError::Refused(sentence),
        other => AgentError::Failed(other.to_string()),
    }
}

fn allow_deny() -> Vec<ConfirmationOption> {
    let option =
        |id: &str, label: &str, kind| ConfirmationOption { id: id.into(), label: label.into(), kind, group: None };
    vec![
        option("allow", "Allow", ConfirmationOptionKind::Approve),
        option("deny", "Deny", ConfirmationOptionKind::Deny),
    ]
}

impl PiSession {
    /// Starts pi for `start` and waits until it answers.
    pub async fn start(options: Arc<PiOptions>, start: Start, host: SessionHost) -> Result<Self, AgentError> {
        let folder = match &start.working_directory {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                if !dir.is_dir() {
                    return Err(AgentError::Refused(format!("The folder {} does not exist.", dir.display())));
                }
                Some(dir)
            }
            None => None,
        };
        // A cut begins a session file of its own, copied from its source's: the source keeps
        // its record whole (a fork's source is another chat's, which goes on as it was).
        let conversation_id = match &start.cut {
            Some(cut) if cut.source == start.conversation_id => uuid::Uuid::new_v4().to_string(),
            _ => start.conversation_id.clone(),
        };
        let catalogue = options.catalogue();
        let at = protocol::At { working_directory: start.working_directory.clone() };
        // Without the session's folder, a conversation runs where its record says it began (pi
        // runs a session file's tools there): a cut where its source ran, so the files its kept
        // turns made are at hand; a new one in a scratch folder of its own.
        let run_at = |record: Option<&std::path::Path>| -> Result<PathBuf, AgentError> {
            if let Some(dir) = folder.clone().or_else(|| record.and_then(crate::cut::recorded_folder)) {
                return Ok(dir);
            }
            let dir = options.scratch_dir(&conversation_id);
            std::fs::create_dir_all(&dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
            Ok(dir)
        };
        let (session_file, cwd) = if let Some(cut) = &start.cut {
            // Not found, it is read where older ahpd kept it, which says pi has no such record.
            let source_file = catalogue.locate(&cut.source, &at).unwrap_or_else(|| catalogue.legacy_file(&cut.source));
            let cwd = run_at(Some(&source_file))?;
            let file = catalogue.new_file(&cwd, &conversation_id);
            crate::cut::write_cut(&source_file, &file, cut, &conversation_id)?;
            (file, cwd)
        } else {
            match catalogue.locate(&conversation_id, &at) {
                Some(file) => {
                    if !start.resume {
                        tracing::warn!(file = %file.display(), "a new conversation names a session file that exists: pi continues it");
                    }
                    let cwd = run_at(Some(&file))?;
                    // An older ahpd's file, or one whose chat moved, goes where pi looks for it.
                    (catalogue.keep_in(&file, &cwd)?, cwd)
                }
                None => {
                    let cwd = run_at(None)?;
                    (catalogue.new_file(&cwd, &conversation_id), cwd)
                }
            }
        };
        if folder.is_some() {
            crate::cut::run_in(&session_file, &cwd)?;
        }
        let mut args = vec!["--mode".to_owned(), "rpc".to_owned(), "--session".to_owned(), path_string(&session_file)];
        let bridge = if start.confined.is_some() { options.boxed_bridge()? } else { options.bridge_path() };
        args.extend(["-e".to_owned(), path_string(&bridge)]);
        args.extend(options.args.iter().cloned());
        let launch = ChildCommand::new(&options.command)
            .args(args)
            .cwd(cwd)
            .envs(options.pi_env())
            .confined(start.confined.as_ref());
        let backend = Pi { options: options.clone(), launch, instructions: start.instructions.clone() };
        let own = PiState {
            pi: None,
            barrier: None,
            prompt_check: None,
            settings: settings_for(&start),
            catalog: catalog_of(&start.tools),
            tools: start.tools.clone(),
            confined: start.confined.is_some(),
        };
        let engine = Engine::start(host, backend, own);
        let model = start.model.clone().or_else(|| options.model.clone().map(|id| ModelSelection { id, config: None }));
        let started = match Pi::start_pi(&engine).await {
            Ok(pi) => match model {
                Some(model) => set_model(&pi, &model).await,
                None => Ok(()),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            engine.close().await;
            return Err(e);
        }
        Ok(Self { engine, conversation_id, cut: start.cut.is_some() })
    }
}

async fn set_model(pi: &PiProcess, model: &ModelSelection) -> Result<(), AgentError> {
    let Some((provider, model_id)) = split_model_id(&model.id) else {
        return Err(AgentError::Refused(format!("pi names models provider/model; {} is not one.", model.id)));
    };
    pi.request(json!({"type": "set_model", "provider": provider, "modelId": model_id})).await.map_err(refused)?;
    if let Some(level) = thinking_level(model) {
        pi.request(json!({"type": "set_thinking_level", "level": level})).await.map_err(refused)?;
    }
    Ok(())
}

impl Pi {
    /// Spawns pi, reads its records, waits for `get_state`, and hands the bridge its setup.
    async fn start_pi(engine: &Engine<Self>) -> Result<Arc<PiProcess>, AgentError> {
        let backend = engine.backend();
        let (pi, output) = PiProcess::spawn(&backend.launch).map_err(|e| {
            AgentError::Failed(format!(
                "{e}. Install pi (npm install -g @mariozechner/pi-coding-agent) or set the worker's `command` option."
            ))
        })?;
        {
            let mut state = engine.lock();
            state.own.pi = Some(pi.clone());
            state.own.barrier = None;
        }
        if let Some(reader) = engine.arc() {
            let process = pi.clone();
            engine.spawn(async move { Pi::read(&reader, process, output).await });
        }
        let ready = pi.request_within(json!({"type": "get_state"}), backend.options.ready_timeout).await;
        if let Err(e) = ready {
            pi.stop().await;
            return Err(AgentError::Failed(format!("pi did not start: {e}")));
        }
        let tools = bridge_tools(&engine.lock().own.tools);
        let setup = json!({"op": "setup", "system": backend.instructions, "tools": tools});
        if let Err(e) = pi.request(bridge_command(setup)).await {
            pi.stop().await;
            return Err(AgentError::Failed(format!("pi did not take ahpd's bridge: {e}")));
        }
        Ok(pi)
    }

    /// Feeds pi's records to the session until pi goes away.
    async fn read(engine: &Engine<Self>, pi: Arc<PiProcess>, mut output: mpsc::UnboundedReceiver<Output>) {
        loop {
            match output.recv().await {
                Some(Output::Record(record)) => Self::on_record(engine, &pi, *record),
                Some(Output::Ended(why)) => return Self::on_gone(engine, &pi, why),
                None => return Self::on_gone(engine, &pi, "its output closed".to_owned()),
            }
        }
    }

    fn on_record(engine: &Engine<Self>, pi: &Arc<PiProcess>, record: PiRecord) {
        let mut guard = engine.lock();
        let state = &mut *guard;
        let step = match &record {
            PiRecord::ExtensionUiRequest { id, method, title, placeholder, status_key, status_text, .. } => {
                let bridge =
                    |text: &Option<String>| text.as_deref().and_then(|t| serde_json::from_str::<Value>(t).ok());
                match method.as_str() {
                    "input" if title.as_deref() == Some(BRIDGE) => match bridge(placeholder) {
                        Some(request) if request["op"] == "gate" => Self::gate(state, pi, id, &request),
                        Some(request) if request["op"] == "tool" => Self::host_tool(engine, state, pi, id, request),
                        _ => pi.answer_ui(id, UiAnswer::Cancelled),
                    },
                    "setStatus" if status_key.as_deref() == Some(BRIDGE) => {
                        Self::entry(engine, state, bridge(status_text));
                    }
                    // Another extension's dialog: nobody here can answer it, so pi must not wait.
                    "select" | "confirm" | "input" | "editor" => pi.answer_ui(id, UiAnswer::Cancelled),
                    "notify" => tracing::info!("pi: {}", title.as_deref().unwrap_or_default()),
                    _ => {}
                }
                Step::Continue
            }
            PiRecord::Response { id: Some(id), .. } if state.own.barrier.as_deref() == Some(id.as_str()) => {
                state.own.barrier = None;
                state.turn().map_or(Step::Continue, |turn| turn.0.on_barrier())
            }
            PiRecord::Response { id: Some(id), data, .. } if state.own.prompt_check.as_deref() == Some(id.as_str()) => {
                state.own.prompt_check = None;
                let streaming = data.as_ref().and_then(|d| d["isStreaming"].as_bool()).unwrap_or(true);
                match state.turn() {
                    // pi took the prompt and nothing runs: an extension's command handled it.
                    Some(turn) if turn.0.is_preparing() && !streaming => turn.0.finish(TurnEnd::Complete),
                    _ => Step::Continue,
                }
            }
            PiRecord::ExtensionError { extension_path, event, error } => {
                tracing::warn!(extension = %extension_path, event = %event, "a pi extension failed: {error}");
                Step::Continue
            }
            _ => match state.own_and_turn() {
                (own, Some(turn)) => turn.0.on_record(&record, &own.catalog),
                (_, None) => Step::Continue,
            },
        };
        match step {
            Step::Barrier => {
                let id = pi.next_id();
                state.own.barrier = Some(id.clone());
                pi.send(json!({"type": "get_state", "id": id}));
            }
            // The mapper said the ending (or the engine did, for a stopped turn).
            Step::Ended => engine.end_turn(state, TurnEnd::Complete),
            Step::Continue => {}
        }
    }

    /// The session entry a user message became: the turn's prompt is recorded under it.
    fn entry(engine: &Engine<Self>, state: &mut State<Self>, note: Option<Value>) {
        let Some(note) = note else { return };
        let (Some("entry"), Some(entry)) = (note["op"].as_str(), note["id"].as_str()) else { return };
        if let Some(turn) = state.turn() {
            if let Some(entry) = turn.0.user_entry(entry) {
                engine.host().turn_recorded(turn.0.turn_id(), &entry);
            }
        }
    }

    /// pi is about to run one of its own tools: allowed, or a person asked, as the policy says.
    fn gate(state: &mut State<Self>, pi: &Arc<PiProcess>, dialog: &str, request: &Value) {
        let call_id = request["toolCallId"].as_str().unwrap_or_default();
        let tool = request["toolName"].as_str().unwrap_or_default();
        let input = &request["input"];
        let answer = |allowed| pi.answer_ui(dialog, UiAnswer::Value(gate_answer(allowed).to_string()));
        let mode = Mode::from_ask(state.own.settings.get("ask").and_then(Value::as_str), Mode::Never);
        let asked = Asked::Own { reads_only: READ_ONLY_TOOLS.contains(&tool) };
        let verdict = policy::decide(asked, Context::new(mode, state.unattended()).confined(state.own.confined));
        if state.phase() != Some(Phase::Sent) {
            // No turn to ask in: what needs a person does not run.
            return answer(if verdict == Verdict::Run { Ok(()) } else { Err(policy::STOPPED) });
        }
        let decided = state.take_decision(Asking::Tool { tool, input });
        let Some(turn) = state.sent() else { return };
        match decided {
            // Answered by a person after the pi that first asked was gone.
            Some(Settled::Confirmed { approved, .. }) => {
                if approved {
                    turn.0.gate(call_id, tool, input, None);
                }
                answer(if approved { Ok(()) } else { Err(DENIED) });
            }
            _ if verdict == Verdict::Run => {
                turn.0.gate(call_id, tool, input, None);
                answer(Ok(()));
            }
            _ => {
                let title = match (tool, input["command"].as_str()) {
                    ("bash", Some(command)) => format!("Run {command}?"),
                    _ => format!("Allow {}?", display_name_of(tool)),
                };
                turn.0.gate(call_id, tool, input, Some(Question { title, options: Some(allow_deny()), meta: None }));
                let parked = Dialog::Gate { pi: pi.clone(), dialog: dialog.to_owned() };
                state.park(call_id, Kind::Confirmation, parked);
            }
        }
    }

    /// The model called a tool the host or a client offers: the parent runs it, once a person
    /// allowed it where its spec says it waits for one.
    fn host_tool(engine: &Engine<Self>, state: &mut State<Self>, pi: &Arc<PiProcess>, dialog: &str, request: Value) {
        let Some(turn_id) = state.turn_id().filter(|_| state.phase() == Some(Phase::Sent)).map(str::to_owned) else {
            return pi.answer_ui(dialog, UiAnswer::Value(not_run("No turn is running.").to_string()));
        };
        let call_id = request["toolCallId"].as_str().unwrap_or_default().to_owned();
        let name = request["name"].as_str().unwrap_or_default().to_owned();
        let input = request.get("input").cloned().unwrap_or(Value::Null);
        let parked = Dialog::Tool { pi: pi.clone(), dialog: dialog.to_owned(), turn_id, request };
        let Some(tool) = state.own.catalog.get(&name).filter(|t| t.asks).cloned() else {
            return Self::run_host_tool(engine, parked);
        };
        let decided = state.take_decision(Asking::Tool { tool: &name, input: &input });
        let Some(turn) = state.sent() else { return };
        match decided {
            // Answered by a person after the pi that first asked was gone.
            Some(Settled::Confirmed { approved: true, .. }) => {
                turn.0.gate(&call_id, &name, &input, None);
                Self::run_host_tool(engine, parked);
            }
            Some(_) => Self::answer(
                engine,
                parked,
                Settled::Confirmed { approved: false, option_id: None, edited_input: None },
            ),
            None => {
                let title = format!("Allow {}?", tool.display_name);
                turn.0.gate(&call_id, &name, &input, Some(Question { title, options: Some(allow_deny()), meta: None }));
                state.park(call_id, Kind::Confirmation, parked);
            }
        }
    }

    fn run_host_tool(engine: &Engine<Self>, parked: Dialog) {
        let Dialog::Tool { pi, dialog, turn_id, request } = parked else { return };
        let host = engine.host().clone();
        engine.spawn(async move {
            let call_id = request["toolCallId"].as_str().unwrap_or_default();
            let name = request["name"].as_str().unwrap_or_default();
            let input = request.get("input").cloned().unwrap_or(Value::Null);
            let answer = match host.run_tool(&turn_id, call_id, name, input).await {
                Ok(o) => json!({"success": o.success, "text": o.text, "error": o.error}),
                Err(e) => not_run(&e.to_string()),
            };
            pi.answer_ui(&dialog, UiAnswer::Value(answer.to_string()));
        });
    }

    /// Answers a parked dialog as a person settled it.
    fn answer(engine: &Engine<Self>, parked: Dialog, settled: Settled) {
        let approved = matches!(settled, Settled::Confirmed { approved: true, .. });
        let why = if settled == Settled::Withdrawn { policy::STOPPED } else { DENIED };
        match parked {
            Dialog::Gate { pi, dialog } => {
                let allowed = if approved { Ok(()) } else { Err(why) };
                pi.answer_ui(&dialog, UiAnswer::Value(gate_answer(allowed).to_string()));
            }
            tool if approved => Self::run_host_tool(engine, tool),
            Dialog::Tool { pi, dialog, .. } => pi.answer_ui(&dialog, UiAnswer::Value(not_run(why).to_string())),
        }
    }

    /// pi went away: the running turn fails with what it said; the next message starts it again.
    fn on_gone(engine: &Engine<Self>, pi: &Arc<PiProcess>, why: String) {
        {
            let mut state = engine.lock();
            if !state.own.pi.as_ref().is_some_and(|current| Arc::ptr_eq(current, pi)) {
                return;
            }
            state.own.pi = None;
            if state.phase().is_some_and(|p| p != Phase::Preparing) {
                let end = TurnEnd::Error(error_info("agentRunFailed", format!("pi stopped: {why}")));
                engine.end_turn(&mut state, end);
            }
        }
        let pi = pi.clone();
        engine.spawn(async move { pi.stop().await });
    }

    /// `/compact [instructions]`: pi summarises the conversation so far.
    async fn compact(engine: &Engine<Self>, pi: &PiProcess, turn_id: &str, instructions: &str) {
        let mut command = json!({"type": "compact"});
        if !instructions.is_empty() {
            command["customInstructions"] = Value::String(instructions.to_owned());
        }
        let answer = pi.request(command).await;
        let mut state = engine.lock();
        if state.turn_id() != Some(turn_id) {
            return;
        }
        let end = match answer {
            Ok(answer) => {
                let note = match answer.data.as_ref().and_then(|d| d["tokensBefore"].as_i64()) {
                    Some(tokens) => format!("Compacted the conversation ({tokens} tokens before)."),
                    None => "Compacted the conversation.".to_owned(),
                };
                if let Some(turn) = state.sent() {
                    turn.0.notification(&note);
                }
                TurnEnd::Complete
            }
            Err(e) => TurnEnd::Error(error_info("agentRunFailed", format!("Compaction failed: {e}"))),
        };
        engine.end_turn(&mut state, end);
    }
}

#[async_trait]
impl Backend for Pi {
    type State = PiState;
    type Turn = PiTurn;
    type Reply = Dialog;

    fn open(&self, own: &mut PiState, writer: TurnWriter, _params: &SendMessageParams) -> PiTurn {
        own.barrier = None;
        own.prompt_check = None;
        PiTurn(TurnMapper::new(writer))
    }

    /// The bridge learns the turn (and its hidden instructions), then pi is handed the prompt.
    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let send_failed = |e: &dyn std::fmt::Display| error_info("sendFailed", e.to_string());
        let turn_id = params.turn_id.clone();
        let running = engine.lock().own.pi.clone();
        let pi = match running {
            Some(pi) => pi,
            None => Self::start_pi(engine).await.map_err(|e| send_failed(&e))?,
        };
        let text = params.message.text.clone();
        if let Some(instructions) = text.trim_start().strip_prefix("/compact") {
            if engine.lock().mark_sent(&turn_id) {
                Self::compact(engine, &pi, &turn_id, instructions.trim()).await;
            }
            return Ok(());
        }
        let turn = json!({"op": "turn", "turnId": turn_id, "instructions": params.instructions});
        pi.request(bridge_command(turn)).await.map_err(|e| send_failed(&e))?;
        if !engine.lock().mark_sent(&turn_id) {
            return Ok(());
        }
        pi.request(prompt_command("prompt", &text, &params.attachments)).await.map_err(|e| send_failed(&e))?;
        let mut state = engine.lock();
        if state.turn_id() != Some(turn_id.as_str()) {
            return Ok(());
        }
        // A stop that raced the prompt reached pi before its run began: say it again.
        if state.phase() == Some(Phase::Stopped) {
            pi.send(json!({"type": "abort"}));
        }
        let check = pi.next_id();
        state.own.prompt_check = Some(check.clone());
        pi.send(json!({"type": "get_state", "id": check}));
        Ok(())
    }

    fn interrupt(&self, engine: &Engine<Self>, state: &mut State<Self>) {
        match &state.own.pi {
            Some(pi) => pi.send(json!({"type": "abort"})),
            // Nothing will finish the turn.
            None => engine.end_turn(state, TurnEnd::Cancelled),
        }
    }

    fn settle(&self, engine: &Engine<Self>, _state: &mut State<Self>, reply: Dialog, settled: Settled) {
        Self::answer(engine, reply, settled);
    }

    async fn stop(&self, engine: &Engine<Self>, _running: bool) {
        let pi = engine.lock().own.pi.take();
        if let Some(pi) = pi {
            pi.stop().await;
        }
    }
}

#[async_trait]
impl Session for PiSession {
    fn conversation_id(&self) -> Option<String> {
        Some(self.conversation_id.clone())
    }

    fn cut_kept(&self) -> bool {
        self.cut
    }

    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        attachments::refuse_untaken("pi", &attachment_support(), &params.attachments)?;
        self.engine.send_message(params)
    }

    /// The lost turn goes on: pi continues the conversation's session file (which holds the
    /// turn's prompt and what it finished), told the turn was cut off and given its request
    /// again; what a person answered meanwhile is carried out when pi asks the same again.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        self.engine.resume_turn(params)
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        let pi = self.engine.lock().own.pi.clone();
        let pi = pi.ok_or_else(|| AgentError::Failed("pi is not running".into()))?;
        set_model(&pi, &model).await
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.engine.abort();
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let pi = {
            let mut state = self.engine.lock();
            let running = state.turn_id() == Some(params.turn_id.as_str())
                && state.sent().is_some_and(|turn| turn.0.is_running());
            match (&state.own.pi, running) {
                (Some(pi), true) => pi.clone(),
                _ => return Ok(false),
            }
        };
        let steer = prompt_command("steer", &params.message.text, &params.attachments);
        Ok(pi.request(steer).await.is_ok())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.engine.confirm(params))
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "ask" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(v) if ASK.contains(&v) => {
                self.engine.lock().own.settings.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        self.engine.lock().own.settings.clone()
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        let (pi, offered) = {
            let mut state = self.engine.lock();
            state.own.catalog = catalog_of(&tools);
            let offered = bridge_tools(&tools);
            state.own.tools = tools;
            (state.own.pi.clone(), offered)
        };
        // A pi started later gets the tools in its setup.
        if let Some(pi) = pi {
            pi.request(bridge_command(json!({"op": "tools", "tools": offered}))).await.map_err(refused)?;
        }
        Ok(())
    }

    async fn close(&self) {
        self.engine.close().await;
    }
}

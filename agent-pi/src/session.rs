//! One conversation: one `pi --mode rpc` child, the turns handed to it one after another, and the
//! bridge's questions (tool gates, host tool calls, entry ids) answered.
//!
//! The driver keeps all state under one lock and never holds it across an await: records from pi
//! are fed to the running turn's [`TurnMapper`] as they arrive (in pi's order), and what needs a
//! round trip (a prompt, a host tool) runs in a task tracked for the session's lifetime.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::{
    accepted, error_info, not_offered, not_writable, resumed_request, AgentError, Question, Session, SessionHost,
    TurnEnd, TurnWriter,
};
use ahp_types::common::JsonObject;
use ahp_types::state::{ConfirmationOption, ConfirmationOptionKind, ModelSelection};
use async_trait::async_trait;
use protocol::{
    Attachment, AttachmentSupport, ConfirmParams, Decision, ResumeTurnParams, SendMessageParams, SetConfigResult,
    Start, SteerParams, ToolSpec,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::PiRecord;
use crate::mapper::{display_name_of, HostTool, Step, ToolCatalog, TurnMapper};
use crate::models::{split_model_id, thinking_level};
use crate::options::{path_string, PiOptions};
use crate::process::{Output, PiError, PiProcess, UiAnswer};
use agent_runner::attachments;
use agent_runner::child::ChildCommand;
use agent_runner::lock;

/// The bridge's dialog title and status key.
const BRIDGE: &str = "ahpd";
/// How long `session/close` waits for the session's tasks after stopping pi.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The `ask` setting: which of pi's own tool calls wait for a person.
pub const ASK: [&str; 3] = ["never", "writes", "always"];
/// pi's tools that only read.
const READ_ONLY_TOOLS: [&str; 4] = ["read", "grep", "find", "ls"];

/// The turn pi is working on.
struct Live {
    mapper: TurnMapper,
    prompt_sent: bool,
}

struct State {
    pi: Option<Arc<PiProcess>>,
    /// Why pi went away, until it is started again.
    gone: Option<String>,
    /// Turns handed, oldest first; true for one the host resumed (`session/resumeTurn`).
    queue: VecDeque<(SendMessageParams, bool)>,
    /// What people answered a resumed turn's questions while its pi was gone: carried out when
    /// pi asks the same again.
    decisions: Vec<Decision>,
    turn: Option<Live>,
    barrier: Option<String>,
    /// The `get_state` asked after a prompt was taken: a prompt an extension handled starts no run.
    prompt_check: Option<String>,
    /// Tool calls waiting for a person: call id → the bridge's dialog id.
    gates: HashMap<String, String>,
    settings: JsonObject,
    tools: Vec<ToolSpec>,
    catalog: ToolCatalog,
}

/// A pi conversation.
pub struct PiSession {
    inner: Arc<Inner>,
    /// The id its session file is kept under (a new one when it began as a cut).
    conversation_id: String,
    /// It began as a cut, which its session file holds already.
    cut: bool,
}

struct Inner {
    host: SessionHost,
    options: Arc<PiOptions>,
    launch: ChildCommand,
    instructions: Vec<String>,
    state: Mutex<State>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// The schema's defaults for a session's settings, with the start's values over them.
pub fn settings_for(start: &Start) -> JsonObject {
    let mut settings = JsonObject::new();
    let ask = start.settings.get("ask").and_then(Value::as_str).filter(|v| ASK.contains(v)).unwrap_or("never");
    settings.insert("ask".into(), Value::String(ask.to_owned()));
    settings
}

fn catalog_of(tools: &[ToolSpec]) -> ToolCatalog {
    tools
        .iter()
        .map(|spec| {
            let display_name = spec
                .display_name
                .clone()
                .or_else(|| spec.definition.title.clone())
                .unwrap_or_else(|| spec.definition.name.clone());
            (spec.definition.name.clone(), HostTool { display_name, owner: spec.owner.clone() })
        })
        .collect()
}

/// The tools as the bridge registers them with pi.
fn bridge_tools(tools: &[ToolSpec]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|spec| {
                let d = &spec.definition;
                json!({
                    "name": d.name,
                    "label": spec.display_name.clone().or_else(|| d.title.clone()).unwrap_or_else(|| d.name.clone()),
                    "description": d.description.clone().unwrap_or_else(|| d.name.clone()),
                    "parameters": d.input_schema.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                })
            })
            .collect(),
    )
}

/// The images pi's prompt takes beside its text.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What pi takes as attachments: images; the rest is said as text.
pub fn attachment_support() -> AttachmentSupport {
    AttachmentSupport { types: IMAGE_TYPES.iter().map(|t| (*t).to_owned()).collect(), max_bytes: None }
}

/// A prompt (or a steer) as pi's RPC takes it: each text attachment said before the words, with
/// its label and where it is from, and the images beside them.
pub fn prompt_command(kind: &str, text: &str, attachments: &[Attachment]) -> Value {
    let mut said: Vec<String> =
        attachments.iter().filter(|a| !attachments::is_binary(a)).map(attachments::as_text).collect();
    said.push(text.to_owned());
    let mut command = json!({"type": kind, "message": said.join("\n\n")});
    let images: Vec<Value> = attachments
        .iter()
        .filter(|a| attachments::is_binary(a))
        .filter_map(|a| Some(json!({"type": "image", "data": a.data.as_ref()?, "mimeType": a.content_type})))
        .collect();
    if !images.is_empty() {
        command["images"] = Value::Array(images);
    }
    command
}

/// A message for the bridge's `/ahpd` command, as the prompt that carries it.
fn bridge_command(message: Value) -> Value {
    json!({ "type": "prompt", "message": format!("/{BRIDGE} {message}") })
}

/// The bridge's answer to a tool gate.
fn gate_answer(approved: bool) -> Value {
    if approved {
        json!({"allow": true})
    } else {
        json!({"allow": false, "reason": "The user denied this tool call."})
    }
}

/// Whether a person allowed a call of `tool` with `input` before this pi asked it (a decision
/// on a resumed turn's parked question), taken out of `decisions`.
fn take_decision(decisions: &mut Vec<Decision>, tool: &str, input: &Value) -> Option<bool> {
    let at = decisions.iter().position(|d| match d {
        Decision::Confirmation { tool_name, tool_input, .. } => {
            tool_name == tool
                && tool_input
                    .as_deref()
                    .and_then(|text| serde_json::from_str::<Value>(text).ok())
                    .is_none_or(|asked| asked == *input)
        }
        // pi asks a person nothing but whether a tool may run.
        Decision::Answer { .. } => false,
    })?;
    match decisions.remove(at) {
        Decision::Confirmation { approved, .. } => Some(approved),
        Decision::Answer { .. } => None,
    }
}

fn refused(e: PiError) -> AgentError {
    match e {
        PiError::Refused(sentence) => AgentError::Refused(sentence),
        other => AgentError::Failed(other.to_string()),
    }
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
        let mut args = vec![
            "--mode".to_owned(),
            "rpc".to_owned(),
            "--session".to_owned(),
            path_string(&session_file),
            "-e".to_owned(),
            path_string(&options.bridge_path()),
        ];
        args.extend(options.args.iter().cloned());
        let launch = ChildCommand::new(&options.command).args(args).cwd(cwd).envs(options.pi_env());
        let tools = start.tools.clone();
        let inner = Arc::new(Inner {
            host,
            options: options.clone(),
            launch,
            instructions: start.instructions.clone(),
            state: Mutex::new(State {
                pi: None,
                gone: None,
                queue: VecDeque::new(),
                decisions: Vec::new(),
                turn: None,
                barrier: None,
                prompt_check: None,
                gates: HashMap::new(),
                settings: settings_for(&start),
                catalog: catalog_of(&tools),
                tools,
            }),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        if let Err(e) = inner.start_pi().await {
            inner.shut().await;
            return Err(e);
        }
        let model = start.model.clone().or_else(|| options.model.clone().map(|id| ModelSelection { id, config: None }));
        if let Some(model) = model {
            if let Err(e) = inner.set_model(&model).await {
                inner.shut().await;
                return Err(e);
            }
        }
        Ok(Self { inner, conversation_id, cut: start.cut.is_some() })
    }
}

impl Inner {
    fn pi(&self) -> Option<Arc<PiProcess>> {
        lock(&self.state).pi.clone()
    }

    /// Spawns pi, reads its records, waits for `get_state`, and hands the bridge its setup.
    async fn start_pi(self: &Arc<Self>) -> Result<Arc<PiProcess>, AgentError> {
        let (pi, output) = PiProcess::spawn(&self.launch).map_err(|e| {
            AgentError::Failed(format!(
                "{e}. Install pi (npm install -g @mariozechner/pi-coding-agent) or set the worker's `command` option."
            ))
        })?;
        {
            let mut state = lock(&self.state);
            state.pi = Some(pi.clone());
            state.gone = None;
            state.barrier = None;
        }
        let reader = self.clone();
        let process = pi.clone();
        self.tasks.spawn(async move { reader.read(process, output).await });
        let ready = pi.request_within(json!({"type": "get_state"}), self.options.ready_timeout).await;
        if let Err(e) = ready {
            pi.stop().await;
            return Err(AgentError::Failed(format!("pi did not start: {e}")));
        }
        let tools = bridge_tools(&lock(&self.state).tools);
        let setup = json!({"op": "setup", "system": self.instructions, "tools": tools});
        if let Err(e) = pi.request(bridge_command(setup)).await {
            pi.stop().await;
            return Err(AgentError::Failed(format!("pi did not take ahpd's bridge: {e}")));
        }
        Ok(pi)
    }

    /// Feeds pi's records to the session until pi goes away or the session closes.
    async fn read(self: Arc<Self>, pi: Arc<PiProcess>, mut output: mpsc::UnboundedReceiver<Output>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                next = output.recv() => match next {
                    Some(Output::Record(record)) => self.on_record(&pi, *record),
                    Some(Output::Ended(why)) => return self.on_gone(&pi, why),
                    None => return self.on_gone(&pi, "its output closed".to_owned()),
                }
            }
        }
    }

    fn on_record(self: &Arc<Self>, pi: &Arc<PiProcess>, record: PiRecord) {
        let ended = {
            let mut state = lock(&self.state);
            let state = &mut *state;
            let step = match &record {
                PiRecord::ExtensionUiRequest { id, method, title, placeholder, status_key, status_text, .. } => {
                    self.on_ui(
                        state,
                        pi,
                        id,
                        method,
                        title.as_deref(),
                        placeholder.as_deref(),
                        status_key.as_deref(),
                        status_text.as_deref(),
                    );
                    Step::Continue
                }
                PiRecord::Response { id: Some(id), .. } if state.barrier.as_deref() == Some(id.as_str()) => {
                    state.barrier = None;
                    state.turn.as_mut().map_or(Step::Continue, |live| live.mapper.on_barrier())
                }
                PiRecord::Response { id: Some(id), data, .. } if state.prompt_check.as_deref() == Some(id.as_str()) => {
                    state.prompt_check = None;
                    let streaming = data.as_ref().and_then(|d| d["isStreaming"].as_bool()).unwrap_or(true);
                    match state.turn.as_mut() {
                        // pi took the prompt and nothing runs: an extension's command handled it.
                        Some(live) if live.mapper.is_preparing() && !streaming => live.mapper.finish(TurnEnd::Complete),
                        _ => Step::Continue,
                    }
                }
                PiRecord::ExtensionError { extension_path, event, error } => {
                    tracing::warn!(extension = %extension_path, event = %event, "a pi extension failed: {error}");
                    Step::Continue
                }
                _ => match state.turn.as_mut() {
                    Some(live) => live.mapper.on_record(&record, &state.catalog),
                    None => Step::Continue,
                },
            };
            match step {
                Step::Barrier => {
                    let id = pi.next_id();
                    state.barrier = Some(id.clone());
                    pi.send(json!({"type": "get_state", "id": id}));
                    false
                }
                Step::Ended => {
                    Self::turn_over(state);
                    true
                }
                Step::Continue => false,
            }
        };
        if ended {
            self.pump();
        }
    }

    /// The running turn ended: nothing of it stays parked.
    fn turn_over(state: &mut State) {
        state.turn = None;
        state.barrier = None;
        state.prompt_check = None;
        state.gates.clear();
        // A resumed turn's answers are for its own calls only.
        state.decisions.clear();
    }

    #[allow(clippy::too_many_arguments)]
    fn on_ui(
        self: &Arc<Self>,
        state: &mut State,
        pi: &Arc<PiProcess>,
        id: &str,
        method: &str,
        title: Option<&str>,
        placeholder: Option<&str>,
        status_key: Option<&str>,
        status_text: Option<&str>,
    ) {
        let bridge = |text: Option<&str>| text.and_then(|t| serde_json::from_str::<Value>(t).ok());
        match method {
            "input" if title == Some(BRIDGE) => match bridge(placeholder) {
                Some(request) if request["op"] == "gate" => self.gate(state, pi, id, &request),
                Some(request) if request["op"] == "tool" => self.host_tool(state, pi, id, request),
                _ => pi.answer_ui(id, UiAnswer::Cancelled),
            },
            "setStatus" if status_key == Some(BRIDGE) => {
                let Some(note) = bridge(status_text) else { return };
                let (Some("entry"), Some(entry)) = (note["op"].as_str(), note["id"].as_str()) else { return };
                if let Some(live) = state.turn.as_mut() {
                    if let Some(entry) = live.mapper.user_entry(entry) {
                        self.host.turn_recorded(live.mapper.turn_id(), &entry);
                    }
                }
            }
            // Another extension's dialog: nobody here can answer it, so pi must not wait for one.
            "select" | "confirm" | "input" | "editor" => pi.answer_ui(id, UiAnswer::Cancelled),
            "notify" => tracing::info!("pi: {}", title.unwrap_or_default()),
            _ => {}
        }
    }

    /// pi is about to run one of its own tools: allow it, or ask a person as the settings say.
    fn gate(&self, state: &mut State, pi: &Arc<PiProcess>, dialog: &str, request: &Value) {
        let call_id = request["toolCallId"].as_str().unwrap_or_default();
        let tool = request["toolName"].as_str().unwrap_or_default();
        let input = &request["input"];
        let Some(live) = state.turn.as_mut() else {
            pi.answer_ui(dialog, UiAnswer::Value(json!({"allow": true}).to_string()));
            return;
        };
        let ask = match state.settings.get("ask").and_then(Value::as_str).unwrap_or("never") {
            "always" => true,
            "writes" => !READ_ONLY_TOOLS.contains(&tool),
            _ => false,
        };
        if let Some(approved) = take_decision(&mut state.decisions, tool, input) {
            // Answered by a person after the pi that first asked was gone.
            if approved {
                live.mapper.gate(call_id, tool, input, None);
            }
            pi.answer_ui(dialog, UiAnswer::Value(gate_answer(approved).to_string()));
            return;
        }
        if !ask {
            live.mapper.gate(call_id, tool, input, None);
            pi.answer_ui(dialog, UiAnswer::Value(gate_answer(true).to_string()));
            return;
        }
        let options = vec![
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
        ];
        let title = match (tool, input["command"].as_str()) {
            ("bash", Some(command)) => format!("Run {command}?"),
            _ => format!("Allow {}?", display_name_of(tool)),
        };
        live.mapper.gate(call_id, tool, input, Some(Question { title, options: Some(options), meta: None }));
        state.gates.insert(call_id.to_owned(), dialog.to_owned());
    }

    /// The model called a tool the host or a client offers: the parent runs it.
    fn host_tool(self: &Arc<Self>, state: &State, pi: &Arc<PiProcess>, dialog: &str, request: Value) {
        let Some(turn_id) = state.turn.as_ref().map(|live| live.mapper.turn_id().to_owned()) else {
            let answer = json!({"success": false, "text": "No turn is running."});
            pi.answer_ui(dialog, UiAnswer::Value(answer.to_string()));
            return;
        };
        let (host, pi, dialog, cancel) = (self.host.clone(), pi.clone(), dialog.to_owned(), self.cancel.clone());
        self.tasks.spawn(async move {
            let call_id = request["toolCallId"].as_str().unwrap_or_default();
            let name = request["name"].as_str().unwrap_or_default();
            let input = request.get("input").cloned().unwrap_or(Value::Null);
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = host.run_tool(&turn_id, call_id, name, input) => outcome,
            };
            let answer = match outcome {
                Ok(o) => json!({"success": o.success, "text": o.text, "error": o.error}),
                Err(e) => json!({"success": false, "text": e.to_string()}),
            };
            pi.answer_ui(&dialog, UiAnswer::Value(answer.to_string()));
        });
    }

    /// pi went away: the running turn fails with what it said; the next message starts it again.
    fn on_gone(self: &Arc<Self>, pi: &Arc<PiProcess>, why: String) {
        {
            let mut state = lock(&self.state);
            if !state.pi.as_ref().is_some_and(|current| Arc::ptr_eq(current, pi)) {
                return;
            }
            state.pi = None;
            state.gone = Some(why.clone());
            state.queue.clear();
            if let Some(mut live) = state.turn.take() {
                live.mapper.finish(TurnEnd::Error(error_info("agentRunFailed", format!("pi stopped: {why}"))));
            }
            Self::turn_over(&mut state);
        }
        let pi = pi.clone();
        self.tasks.spawn(async move { pi.stop().await });
    }

    /// Starts the next handed turn when none runs.
    fn pump(self: &Arc<Self>) {
        let params = {
            let mut state = lock(&self.state);
            if state.turn.is_some() {
                return;
            }
            let Some((params, resumed)) = state.queue.pop_front() else { return };
            let writer = if resumed { TurnWriter::resuming } else { TurnWriter::new };
            let writer = writer(self.host.clone(), params.turn_id.clone());
            state.turn = Some(Live { mapper: TurnMapper::new(writer), prompt_sent: false });
            params
        };
        let inner = self.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = inner.cancel.cancelled() => {}
                _ = inner.run_prompt(params) => {}
            }
        });
    }

    /// Ends the turn `turn_id` if it is still the running one.
    fn end_turn(self: &Arc<Self>, turn_id: &str, end: TurnEnd) {
        let ended = {
            let mut state = lock(&self.state);
            match state.turn.as_mut() {
                Some(live) if live.mapper.turn_id() == turn_id => {
                    live.mapper.finish(end);
                    Self::turn_over(&mut state);
                    true
                }
                _ => false,
            }
        };
        if ended {
            self.pump();
        }
    }

    /// Hands pi one turn: the bridge learns the turn (and its hidden instructions), then the prompt.
    async fn run_prompt(self: &Arc<Self>, params: SendMessageParams) {
        let turn_id = params.turn_id.clone();
        let pi = match self.pi() {
            Some(pi) => pi,
            None => match self.start_pi().await {
                Ok(pi) => pi,
                Err(e) => return self.end_turn(&turn_id, TurnEnd::Error(error_info("sendFailed", e.to_string()))),
            },
        };
        let text = params.message.text.clone();
        if let Some(instructions) = text.trim_start().strip_prefix("/compact") {
            return self.compact(&pi, &turn_id, instructions.trim()).await;
        }
        let turn = json!({"op": "turn", "turnId": turn_id, "instructions": params.instructions});
        if let Err(e) = pi.request(bridge_command(turn)).await {
            return self.end_turn(&turn_id, TurnEnd::Error(error_info("sendFailed", e.to_string())));
        }
        // A turn stopped while it was being prepared is never sent.
        let stopped = {
            let mut state = lock(&self.state);
            match state.turn.as_mut() {
                Some(live) if live.mapper.turn_id() == turn_id => {
                    live.prompt_sent = !live.mapper.abort_requested();
                    !live.prompt_sent
                }
                _ => return,
            }
        };
        if stopped {
            return self.end_turn(&turn_id, TurnEnd::Cancelled);
        }
        match pi.request(prompt_command("prompt", &text, &params.attachments)).await {
            Ok(_) => {
                let mut state = lock(&self.state);
                let Some(live) = state.turn.as_ref().filter(|live| live.mapper.turn_id() == turn_id) else { return };
                // A stop that raced the prompt reached pi before its run began: say it again.
                if live.mapper.abort_requested() {
                    pi.send(json!({"type": "abort"}));
                }
                let check = pi.next_id();
                state.prompt_check = Some(check.clone());
                pi.send(json!({"type": "get_state", "id": check}));
            }
            Err(e) => self.end_turn(&turn_id, TurnEnd::Error(error_info("sendFailed", e.to_string()))),
        }
    }

    /// `/compact [instructions]`: pi summarises the conversation so far.
    async fn compact(self: &Arc<Self>, pi: &Arc<PiProcess>, turn_id: &str, instructions: &str) {
        let mut command = json!({"type": "compact"});
        if !instructions.is_empty() {
            command["customInstructions"] = Value::String(instructions.to_owned());
        }
        let answer = pi.request(command).await;
        let ended = {
            let mut state = lock(&self.state);
            let Some(live) = state.turn.as_mut().filter(|live| live.mapper.turn_id() == turn_id) else { return };
            match answer {
                Ok(answer) => {
                    let before = answer.data.as_ref().and_then(|d| d["tokensBefore"].as_i64());
                    let note = match before {
                        Some(tokens) => format!("Compacted the conversation ({tokens} tokens before)."),
                        None => "Compacted the conversation.".to_owned(),
                    };
                    live.mapper.notification(&note);
                    live.mapper.finish(TurnEnd::Complete);
                }
                Err(e) => {
                    live.mapper.finish(TurnEnd::Error(error_info("agentRunFailed", format!("Compaction failed: {e}"))));
                }
            }
            Self::turn_over(&mut state);
            true
        };
        if ended {
            self.pump();
        }
    }

    async fn set_model(&self, model: &ModelSelection) -> Result<(), AgentError> {
        let Some((provider, model_id)) = split_model_id(&model.id) else {
            return Err(AgentError::Refused(format!("pi names models provider/model; {} is not one.", model.id)));
        };
        let pi = self.pi().ok_or_else(|| AgentError::Failed("pi is not running".into()))?;
        pi.request(json!({"type": "set_model", "provider": provider, "modelId": model_id})).await.map_err(refused)?;
        if let Some(level) = thinking_level(model) {
            pi.request(json!({"type": "set_thinking_level", "level": level})).await.map_err(refused)?;
        }
        Ok(())
    }

    /// Answers every parked question no (a stop, a close): nothing waits for a person any more.
    fn settle_gates(state: &mut State) {
        let gates: Vec<(String, String)> = state.gates.drain().collect();
        if let Some(pi) = &state.pi {
            for (_, dialog) in gates {
                pi.answer_ui(
                    &dialog,
                    UiAnswer::Value(json!({"allow": false, "reason": "The turn was stopped."}).to_string()),
                );
            }
        }
    }

    /// Stops pi and every task of the session.
    async fn shut(&self) {
        self.cancel.cancel();
        let pi = lock(&self.state).pi.take();
        if let Some(pi) = pi {
            pi.stop().await;
        }
        self.tasks.close();
        let _ = tokio::time::timeout(CLOSE_GRACE, self.tasks.wait()).await;
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
        lock(&self.inner.state).queue.push_back((params, false));
        self.inner.pump();
        Ok(())
    }

    /// The lost turn goes on: pi continues the conversation's session file (which holds the
    /// turn's prompt and what it finished), told the turn was cut off and given its request
    /// again; what a person answered meanwhile is carried out when pi asks the same again.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        let (params, decisions) = resumed_request(params);
        {
            let mut state = lock(&self.inner.state);
            state.decisions = decisions;
            state.queue.push_back((params, true));
        }
        self.inner.pump();
        Ok(())
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        self.inner.set_model(&model).await
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        let mut state = lock(&self.inner.state);
        state.queue.clear();
        Inner::settle_gates(&mut state);
        let sent = match state.turn.as_mut() {
            Some(live) => {
                live.mapper.request_abort();
                live.prompt_sent
            }
            None => false,
        };
        if sent {
            if let Some(pi) = &state.pi {
                pi.send(json!({"type": "abort"}));
            }
        }
        Ok(())
    }

    async fn steer(&self, params: SteerParams) -> Result<bool, AgentError> {
        let pi = {
            let state = lock(&self.inner.state);
            let running = state
                .turn
                .as_ref()
                .is_some_and(|live| live.mapper.turn_id() == params.turn_id && live.mapper.is_running());
            match (&state.pi, running) {
                (Some(pi), true) => pi.clone(),
                _ => return Ok(false),
            }
        };
        let steer = prompt_command("steer", &params.message.text, &params.attachments);
        Ok(pi.request(steer).await.is_ok())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        let mut state = lock(&self.inner.state);
        let Some(dialog) = state.gates.remove(&params.tool_call_id) else { return Ok(false) };
        if !params.approved {
            if let Some(live) = state.turn.as_mut() {
                live.mapper.denied(&params.tool_call_id);
            }
        }
        if let Some(pi) = &state.pi {
            pi.answer_ui(&dialog, UiAnswer::Value(gate_answer(params.approved).to_string()));
        }
        Ok(true)
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        if key != "ask" {
            return Ok(not_writable(&key));
        }
        match value.as_str() {
            Some(v) if ASK.contains(&v) => {
                lock(&self.inner.state).settings.insert(key, value);
                Ok(accepted())
            }
            _ => Ok(not_offered(&key, &value)),
        }
    }

    async fn settings(&self) -> JsonObject {
        lock(&self.inner.state).settings.clone()
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        let (pi, offered) = {
            let mut state = lock(&self.inner.state);
            state.catalog = catalog_of(&tools);
            let offered = bridge_tools(&tools);
            state.tools = tools;
            (state.pi.clone(), offered)
        };
        // A pi started later gets the tools in its setup.
        if let Some(pi) = pi {
            pi.request(bridge_command(json!({"op": "tools", "tools": offered}))).await.map_err(refused)?;
        }
        Ok(())
    }

    async fn close(&self) {
        {
            let mut state = lock(&self.inner.state);
            state.queue.clear();
            Inner::settle_gates(&mut state);
            if let Some(mut live) = state.turn.take() {
                live.mapper.finish(TurnEnd::Cancelled);
            }
            Inner::turn_over(&mut state);
        }
        self.inner.shut().await;
    }
}

//! One conversation with an ACP agent on the session engine: its launcher ([`crate::connect`]:
//! its own agent process, started again on the next message when it dies, the conversation
//! reloaded with `session/load`), the mapper of what it streams ([`TurnMap`]), a turn as one
//! `session/prompt`, `session/cancel` as its interrupt, and the client methods it is served. The
//! queue, the permission requests it parks, abort and close are the engine's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionUpdate, AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES};
use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use agent_runner::engine::{Backend, Engine, Kind, Mapper, Settled, State};
use agent_runner::rpc::{Incoming, PeerError, Request, Responder};
use agent_runner::{accepted, attachments, error_info, lock, not_offered, not_writable, resumed_request};
use agent_runner::{AgentError, Session, SessionHost, TurnEnd, TurnWriter};
use ahp_types::common::JsonObject;
use ahp_types::state::{ErrorInfo, ModelSelection, SessionModelInfo};
use async_trait::async_trait;
use protocol::{
    codes, Attachment, ConfirmParams, McpServer, ResumeTurnParams, RpcError, SendMessageParams, SetConfigResult, Start,
    ToolSpec, ToolsEndpoint,
};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::{self, Folders, Terminals};
use crate::config::Offers;
use crate::connect::{folders_of, how_it_ended, refusal, Link, Opening, Wanted, AUTH_REQUIRED};
use crate::fork::History;
use crate::handshake::{Caps, EXIT_GRACE};
use crate::mapping::{chosen_option, permission_answer, prompt_end, tool_name, TurnMap};
use crate::shared::Shared;

/// How long a stopped turn waits for the agent to answer its prompt `cancelled`.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// The ACP backend of one conversation: what its launcher starts the agent with.
pub(crate) struct Acp {
    pub shared: Arc<Shared>,
    pub mcp_servers: Option<BTreeMap<String, McpServer>>,
    pub tools_endpoint: Option<ToolsEndpoint>,
    pub instructions: Vec<String>,
    pub additional_directories: Vec<String>,
    /// The operator's policy restricts elevated auto-approval: the modes that act without
    /// asking are not set, whoever asks.
    pub restricted: bool,
    pub cwd: PathBuf,
    pub folders: Arc<Folders>,
    pub terminals: Arc<Terminals>,
    /// The session's box: the agent and every command it has run start through its launcher,
    /// and what the agent asks about runs without a person (the box holds it).
    pub confined: Option<protocol::Confined>,
    pub generations: AtomicU64,
    /// What the agent's conversation cost so far, as it last said.
    pub cost: Arc<Mutex<Option<f64>>>,
}

/// What an ACP session keeps besides the engine's state.
pub(crate) struct AcpState {
    pub link: Option<Link>,
    pub acp_id: Option<String>,
    pub first_prompt: bool,
    pub offers: Offers,
    pub values: JsonObject,
    pub wanted: Wanted,
    pub loading: bool,
    /// When the agent last said something while a `session/load` was being read, to tell when
    /// a replay that trails the load's answer has ended (`crate::connect`).
    pub replay_heard: std::time::Instant,
    /// The user text `session/load` replayed, to tell whether the conversation heard the
    /// session's instructions (a client's rule may have joined them since it began).
    pub replayed: String,
    /// The turns a `session/load` replayed, while a fork reads its source.
    pub history: Option<History>,
    /// A fork's earlier turns, opening its first prompt; then the turn that carried them is
    /// said recorded, so the host stops carrying the cut.
    pub fork_context: Option<String>,
    /// The host's and clients' tools, which the agent calls through the `ahp` server.
    pub tools: Vec<ToolSpec>,
    /// The calls the person refused since the running prompt was sent or the agent last went on
    /// (called something), by their titles: an agent that ends its prompt on a refusal is
    /// told and goes on.
    pub refused: Vec<Refused>,
}

/// A call the person refused in the running prompt.
pub(crate) struct Refused {
    /// Its id.
    call: String,
    /// What the agent titled it.
    title: String,
}

/// The running turn: its map, and what its usage is said with.
pub(crate) struct AcpTurn {
    pub map: TurnMap,
    model: Option<String>,
    cost: Arc<Mutex<Option<f64>>>,
}

impl Mapper for AcpTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        self.map.writer()
    }

    /// The plan closed, what the turn used and cost, then its ending; a failure says no usage.
    fn end(&mut self, end: TurnEnd) {
        if self.map.writer().is_ended() {
            return;
        }
        if let TurnEnd::Error(error) = end {
            self.map.finish(TurnEnd::Error(error), None, None);
            return;
        }
        let mut cost = lock(&self.cost);
        *cost = self.map.finish(end, *cost, self.model.take());
    }

    fn answered(&mut self, call: &str, approved: bool) {
        self.map.answered(call, approved);
    }
}

/// A permission request waiting for a person, answered to the agent that asked it.
pub(crate) struct Parked {
    responder: Responder,
    options: Vec<acp::PermissionOption>,
    /// The call asked about.
    call: String,
    /// What the call is, as the agent titled it.
    title: Option<String>,
    pub generation: u64,
}

/// One conversation; see the module docs.
pub struct AcpSession {
    engine: Arc<Engine<Acp>>,
}

impl AcpSession {
    /// Starts the agent for `start` and opens its conversation.
    pub async fn open(shared: Arc<Shared>, start: Start, host: SessionHost) -> Result<Self, AgentError> {
        let (cwd, roots) = folders_of(&shared, &start)?;
        let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
        let folders = Arc::new(Folders::new(roots));
        let terminals =
            Arc::new(Terminals::new(folders.clone(), tasks.clone(), cancel.clone()).confined(start.confined.clone()));
        let mut wanted = Wanted { model: start.model.as_ref().map(|m| m.id.clone()), config: BTreeMap::new() };
        wanted.config.extend(start.settings.iter().map(|(k, v)| (k.clone(), v.clone())));
        // An agent whose own start lets a model decide for the person begins a new conversation
        // in the mode its preset names, unless the person chose one.
        if let (false, Some(mode)) = (start.resume, &shared.options.starting_mode) {
            wanted.config.entry(crate::config::MODE_KEY.to_owned()).or_insert_with(|| Value::from(mode.as_str()));
        }
        let backend = Acp {
            shared,
            mcp_servers: start.mcp_servers.clone(),
            tools_endpoint: start.tools_endpoint.clone(),
            instructions: start.instructions.clone(),
            additional_directories: start.additional_directories.clone(),
            restricted: crate::config::restricts(&start.policy),
            cwd,
            folders,
            terminals,
            confined: start.confined.clone(),
            generations: AtomicU64::new(0),
            cost: Arc::default(),
        };
        let own = AcpState {
            link: None,
            acp_id: start.resume.then(|| start.conversation_id.clone()),
            first_prompt: !start.resume,
            offers: Offers::default(),
            values: JsonObject::new(),
            wanted,
            loading: false,
            replay_heard: std::time::Instant::now(),
            replayed: String::new(),
            history: None,
            fork_context: None,
            tools: start.tools.clone(),
            refused: Vec::new(),
        };
        let engine = Engine::start_on(host, backend, own, tasks, cancel);
        // A fork is opened anew until its cut is on record (a truncation is not offered).
        let fork = start.cut.clone().filter(|cut| cut.source != start.conversation_id);
        let opening = match (&fork, start.resume) {
            (Some(_), _) => Opening::Fork,
            (None, true) => Opening::Resume,
            (None, false) => Opening::New,
        };
        if let Err(sentence) = engine.backend().connect(&engine, opening, fork.as_ref()).await {
            engine.close().await;
            return Err(AgentError::Failed(sentence));
        }
        Ok(Self { engine })
    }

    fn provider(&self) -> &str {
        self.engine.backend().provider()
    }

    fn live_link(&self) -> Option<Link> {
        self.engine.lock().own.link.clone().filter(|l| !l.peer.is_ended())
    }
}

impl Acp {
    pub(crate) fn provider(&self) -> &str {
        &self.shared.provider
    }

    /// What the agent sends: updates to the running turn or the session, its questions, and the
    /// client methods (run as tasks of their own, so a terminal waited on holds nothing up).
    pub(crate) fn on_message(engine: &Engine<Self>, generation: u64, message: Incoming) {
        let acp = engine.backend();
        match message {
            Incoming::Notification { method, params } if method == CLIENT_METHOD_NAMES.session_update => {
                // Read in place: the update's own JSON is still there to name a kind the schema does not know.
                match acp::SessionNotification::deserialize(&params) {
                    Ok(notification) => acp.on_update(engine, generation, &notification.update),
                    Err(why) => {
                        let why = format!("this host's ACP schema does not read it: {why}");
                        acp.shared.unmapped(&update_kind(&params), &why)
                    }
                }
            }
            Incoming::Notification { method, .. } => {
                acp.shared.unmapped(&method, "a notification this host does not use")
            }
            Incoming::Request(Request { method, params, responder }) => {
                if method == CLIENT_METHOD_NAMES.session_request_permission {
                    match serde_json::from_value::<acp::RequestPermissionRequest>(params) {
                        Ok(request) => Self::on_permission(engine, generation, responder, request),
                        Err(why) => {
                            responder.respond(Err(RpcError::new(codes::INVALID_PARAMS, format!("{method}: {why}"))))
                        }
                    }
                } else {
                    let (folders, terminals) = (acp.folders.clone(), acp.terminals.clone());
                    let closing = engine.closing().clone();
                    engine.spawn(async move {
                        let answer = tokio::select! {
                            answer = client::serve(&folders, &terminals, &method, params) => answer,
                            _ = closing.cancelled() => Err(RpcError::new(codes::SHUTTING_DOWN, "the session closed")),
                        };
                        if let Err(e) = &answer {
                            tracing::info!(method, error = %e.message, "refused a client method");
                        }
                        responder.respond(answer);
                    });
                }
            }
        }
    }

    fn on_update(&self, engine: &Engine<Self>, generation: u64, update: &SessionUpdate) {
        match update {
            SessionUpdate::CurrentModeUpdate(mode) => {
                self.moved(engine, |o| o.mode_moved(&mode.current_mode_id.to_string()))
            }
            SessionUpdate::ConfigOptionUpdate(options) => {
                self.moved(engine, |o| o.options = crate::config::parse_options(&options.config_options))
            }
            SessionUpdate::AvailableCommandsUpdate(commands) => {
                self.shared.learn_commands(crate::probe::commands_of(commands));
            }
            _ => {
                let mut guard = engine.lock();
                let (own, turn) = guard.own_and_turn();
                let current = own.link.as_ref().is_some_and(|l| l.generation == generation);
                // A subagent's words are its own chat's, never the conversation's history.
                if own.loading {
                    own.replay_heard = std::time::Instant::now();
                    if crate::subagents::parent_call(update).is_none() {
                        replayed(own, update);
                    }
                }
                if own.loading || !current {
                    // The history session/load replays is the host's already.
                    return;
                }
                if went_on(update, &own.refused) {
                    // The agent went on after a refusal of this prompt: it needs no telling.
                    own.refused.clear();
                }
                let taken = turn.is_some_and(|turn| turn.map.update(update, &self.terminals));
                drop(guard);
                if !taken {
                    let kind = update_kind(&serde_json::to_value(update).unwrap_or_default());
                    self.shared.unmapped(&kind, "an update outside a turn, or of a kind this host does not show");
                }
            }
        }
    }

    /// The agent asks before a call runs: a person decides, or (a host tool the agent calls
    /// through the `ahp` server that declares nothing destructive) it runs as asked.
    fn on_permission(
        engine: &Engine<Self>,
        generation: u64,
        responder: Responder,
        request: acp::RequestPermissionRequest,
    ) {
        let mut state = engine.lock();
        let named = tool_name(&request.tool_call).or_else(|| request.tool_call.fields.title.clone());
        let asked = match policy::offered_through_ahp(&state.own.tools, named.as_deref().unwrap_or_default()) {
            Some(spec) => Asked::Offered(spec.effects.as_ref()),
            None => Asked::Own { reads_only: false },
        };
        let context = Context::new(Mode::Runtime, state.unattended()).confined(engine.backend().confined.is_some());
        if policy::decide(asked, context) == Verdict::Run {
            responder.ok(permission_answer(chosen_option(&request.options, true, None)));
            return;
        }
        let asked = state.sent().and_then(|turn| turn.map.ask(&request.tool_call, &request.options));
        let Some(call_id) = asked else {
            drop(state);
            // Nobody is there to ask: the agent hears it was cancelled.
            responder.ok(permission_answer(None));
            return;
        };
        let title = request.tool_call.fields.title.clone().filter(|t| !t.trim().is_empty());
        let parked = Parked { responder, options: request.options, call: call_id.clone(), title, generation };
        if let Some(older) = state.park(call_id, Kind::Confirmation, parked) {
            older.responder.ok(permission_answer(None));
        }
    }

    /// The words that tell the agent the person's "no" when it ended its prompt on a refusal,
    /// nobody having stopped the turn and no call of its after it: `cancelled` (Codex's only "no"
    /// to an escalated command is "abort"), or `end_turn` from an agent whose preset says its "no"
    /// stops the prompt (Qwen Code, Copilot). The turn goes on, as a "no" lets it on the agents
    /// whose "no" does.
    fn going_on_after_a_refusal(
        &self,
        engine: &Engine<Self>,
        answer: &Result<Value, PeerError>,
        stopped: bool,
    ) -> Option<String> {
        let refused = std::mem::take(&mut engine.lock().own.refused);
        let stops_after_a_no = self.shared.options.stops_after_a_no;
        let ended = answer
            .as_ref()
            .ok()
            .and_then(|a| serde_json::from_value::<acp::PromptResponse>(a.clone()).ok())
            .is_some_and(|a| match a.stop_reason {
                acp::StopReason::Cancelled => true,
                acp::StopReason::EndTurn => stops_after_a_no,
                _ => false,
            });
        if stopped || !ended || refused.is_empty() {
            return None;
        }
        let what: Vec<String> = refused
            .iter()
            .map(|r| if r.title.is_empty() { "that".to_owned() } else { format!("\"{}\"", r.title) })
            .collect();
        Some(format!(
            "I declined {}, so it was not run. Go on without it, or tell me what you would do instead.",
            what.join(" and ")
        ))
    }

    /// The prompt's blocks: the session's instructions opening its first prompt (an ACP server
    /// keeps its own system prompt), the turn's own instructions, the attachments, then the words.
    fn prompt_blocks(&self, params: &SendMessageParams, first: bool, caps: &Caps) -> Vec<acp::ContentBlock> {
        let mut blocks = Vec::new();
        if first && !self.instructions.is_empty() {
            blocks.push(text_block(self.instructions.join("\n\n")));
        }
        if let Some(instructions) = params.instructions.as_ref().filter(|i| !i.trim().is_empty()) {
            blocks.push(text_block(instructions.clone()));
        }
        blocks.extend(params.attachments.iter().map(|a| attachment_block(a, caps)));
        blocks.push(text_block(params.message.text.clone()));
        blocks
    }

    /// The live agent, started again when it is gone; none when the turn was stopped meanwhile.
    async fn link_for(&self, engine: &Engine<Self>, stop: &CancellationToken) -> Result<Option<Link>, ErrorInfo> {
        if let Some(link) = engine.lock().own.link.clone().filter(|l| !l.peer.is_ended()) {
            return Ok(Some(link));
        }
        let opened = tokio::select! {
            opened = self.connect(engine, Opening::Restart, None) => opened,
            _ = stop.cancelled() => return Ok(None),
        };
        opened.map_err(|sentence| error_info("agentUnavailable", sentence))?;
        let link = engine.lock().own.link.clone();
        let ended = || error_info("agentUnavailable", format!("{}: the agent ended as it started", self.provider()));
        link.map(Some).ok_or_else(ended)
    }

    /// How the turn ends, from the prompt's answer.
    fn end_of(&self, link: &Link, answer: Result<Value, PeerError>, stopped: bool) -> TurnEnd {
        let error = match answer {
            _ if stopped => return TurnEnd::Cancelled,
            Ok(answer) => {
                let answer = serde_json::from_value::<acp::PromptResponse>(answer).map_err(|e| e.to_string());
                return prompt_end(self.provider(), &answer);
            }
            Err(PeerError::Rpc(error)) if error.code == AUTH_REQUIRED => {
                error_info("authRequired", self.sign_in_needed(&link.caps))
            }
            Err(error @ (PeerError::Rpc(_) | PeerError::Decode(_))) => {
                let why = refusal(error);
                error_info("agentError", format!("{}: the agent failed the turn: {why}", self.provider()))
            }
            Err(PeerError::Closed) => {
                let why = format!(
                    "{}: {} {} in the middle of the turn; the next message starts it again",
                    self.provider(),
                    self.shared.options.command_line(),
                    how_it_ended(&link.process)
                );
                error_info("agentExited", link.process.tail().last_words(why))
            }
        };
        TurnEnd::Error(error)
    }
}

/// Keeps what `session/load` replays of a conversation: its user text, and a fork's exchanges.
fn replayed(own: &mut AcpState, update: &SessionUpdate) {
    let text = |chunk: &acp::ContentChunk| match &chunk.content {
        acp::ContentBlock::Text(text) => Some(text.text.clone()),
        _ => None,
    };
    match update {
        SessionUpdate::UserMessageChunk(chunk) => {
            let Some(text) = text(chunk) else { return };
            own.replayed.push_str(&text);
            if let Some(history) = own.history.as_mut() {
                history.user(&text);
            }
        }
        SessionUpdate::AgentMessageChunk(chunk) => {
            if let (Some(text), Some(history)) = (text(chunk), own.history.as_mut()) {
                history.agent(&text);
            }
        }
        _ => {}
    }
}

#[async_trait]
impl Backend for Acp {
    type State = AcpState;
    type Turn = AcpTurn;
    type Reply = Parked;

    fn open(&self, own: &mut AcpState, writer: TurnWriter, _params: &SendMessageParams) -> AcpTurn {
        let model = own.offers.current_model();
        AcpTurn { map: TurnMap::new(self.provider(), writer), model, cost: self.cost.clone() }
    }

    /// The whole turn: the agent started again when it is gone, then one `session/prompt`.
    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let stop = engine.lock().stop_token().unwrap_or_default();
        let link = self.link_for(engine, &stop).await?;
        let (acp_id, prompt, forked) = {
            let mut state = engine.lock();
            // A turn stopped while the agent started is never sent.
            let sent = state.mark_sent(&params.turn_id);
            let Some(link) = link.as_ref().filter(|_| sent) else { return Ok(()) };
            let first = std::mem::replace(&mut state.own.first_prompt, false);
            let mut prompt = self.prompt_blocks(&params, first, &link.caps);
            let forked = state.own.fork_context.take();
            if let Some(context) = &forked {
                prompt.insert(0, text_block(context.clone()));
            }
            (state.own.acp_id.clone().unwrap_or_default(), prompt, forked)
        };
        let Some(link) = link else { return Ok(()) };
        let mut answer = prompt_once(engine, &link, &acp_id, prompt, &stop).await;
        while let Some(words) = self.going_on_after_a_refusal(engine, &answer, stop.is_cancelled()) {
            answer = prompt_once(engine, &link, &acp_id, vec![text_block(words)], &stop).await;
        }
        if answer.is_err() {
            if let Some(context) = forked.clone() {
                // The prompt may not have reached the agent's record: the next one carries them again.
                engine.lock().own.fork_context.get_or_insert(context);
            }
        }
        if matches!(answer, Err(PeerError::Closed)) {
            link.process.settle(Duration::from_secs(1)).await;
            let mut state = engine.lock();
            if state.own.link.as_ref().is_some_and(|l| l.generation == link.generation) {
                state.own.link = None;
            }
        }
        if let (Ok(answer), Some(turn)) = (&answer, engine.lock().turn()) {
            if let Ok(answer) = serde_json::from_value::<acp::PromptResponse>(answer.clone()) {
                turn.map.response_usage(answer.usage);
            }
            if forked.is_some() {
                // The fork's earlier turns are in its own conversation now: the agent loads
                // them with it, so the host stops carrying the cut. ACP names no turns, so the
                // turn is recorded under its own id.
                engine.host().turn_recorded(&params.turn_id, &params.turn_id);
            }
        }
        let end = self.end_of(&link, answer, stop.is_cancelled());
        engine.end_turn(&mut engine.lock(), end);
        Ok(())
    }

    /// `session/cancel`: the questions were answered `cancelled` first, as ACP asks.
    fn interrupt(&self, _engine: &Engine<Self>, state: &mut State<Self>) {
        if let (Some(link), Some(acp_id)) = (&state.own.link, &state.own.acp_id) {
            link.peer.notify(AGENT_METHOD_NAMES.session_cancel, acp::CancelNotification::new(acp_id.clone()));
        }
    }

    fn settle(&self, _engine: &Engine<Self>, state: &mut State<Self>, parked: Parked, settled: Settled) {
        let option = match settled {
            Settled::Confirmed { approved, option_id, .. } => {
                let option = chosen_option(&parked.options, approved, option_id.as_deref());
                if approved {
                    let label = parked.options.iter().find(|o| Some(&o.option_id) == option.as_ref()).map(|o| &o.name);
                    if let Some(turn) = state.turn() {
                        turn.map.answered_yes(&parked.call, label.map_or("Allowed", |l| l.as_str()));
                    }
                } else {
                    let title = parked.title.clone().unwrap_or_default();
                    state.own.refused.push(Refused { call: parked.call.clone(), title });
                }
                option
            }
            Settled::Answered { .. } | Settled::Withdrawn => None,
        };
        parked.responder.ok(permission_answer(option));
    }

    /// Stops the agent and its terminals.
    async fn stop(&self, engine: &Engine<Self>, running: bool) {
        let (link, acp_id) = {
            let mut state = engine.lock();
            (state.own.link.take(), state.own.acp_id.clone())
        };
        if let (Some(link), Some(acp_id), true) = (&link, acp_id, running) {
            link.peer.notify(AGENT_METHOD_NAMES.session_cancel, acp::CancelNotification::new(acp_id));
        }
        if let Some(link) = link {
            link.peer.close_output();
            link.process.stop(EXIT_GRACE).await;
            link.peer.end();
        }
        self.terminals.kill_all();
    }
}

/// What a session/update names itself as (its `sessionUpdate`), for a line about one not shown.
fn update_kind(params: &Value) -> String {
    let update = params.get("update").unwrap_or(params);
    update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("(no sessionUpdate)").to_owned()
}

/// One `session/prompt` and its answer; a stopped turn's agent was told (`session/cancel`) and
/// answers `cancelled`, and one that never does is not waited for for ever.
async fn prompt_once(
    engine: &Engine<Acp>,
    link: &Link,
    acp_id: &str,
    prompt: Vec<acp::ContentBlock>,
    stop: &CancellationToken,
) -> Result<Value, PeerError> {
    engine.lock().own.refused.clear();
    let request = acp::PromptRequest::new(acp_id.to_owned(), prompt);
    let asked = link.peer.request_value(AGENT_METHOD_NAMES.session_prompt, request);
    tokio::pin!(asked);
    tokio::select! {
        answer = &mut asked => answer,
        _ = stop.cancelled() => tokio::time::timeout(CANCEL_GRACE, &mut asked).await.unwrap_or(Ok(Value::Null)),
    }
}

/// Whether an update of the running prompt shows the agent going on of its own after the refusals
/// `refused`: a new call of its (a subagent's are its own chat's; the refused call said again, as
/// Kilo does, is not new). Words are not: an agent may say its own "cancelled" as it stops
/// (Copilot does).
fn went_on(update: &SessionUpdate, refused: &[Refused]) -> bool {
    let SessionUpdate::ToolCall(call) = update else { return false };
    let again = refused.iter().any(|r| r.call == call.tool_call_id.to_string());
    crate::subagents::parent_call(update).is_none() && !again
}

fn text_block(text: String) -> acp::ContentBlock {
    acp::ContentBlock::Text(acp::TextContent::new(text))
}

/// An attachment as a prompt block the agent declared it takes (`promptCapabilities`): an image or
/// audio as itself, text as an embedded resource where the agent takes those, else as a text
/// block with its label and where it is from.
fn attachment_block(attachment: &Attachment, caps: &Caps) -> acp::ContentBlock {
    if let Some(data) = attachment.data.as_ref().filter(|_| attachments::is_binary(attachment)) {
        let kind = &attachment.content_type;
        if kind.starts_with("image/") && caps.image {
            return acp::ContentBlock::Image(acp::ImageContent::new(data.clone(), kind.clone()));
        }
        if kind.starts_with("audio/") && caps.audio {
            return acp::ContentBlock::Audio(acp::AudioContent::new(data.clone(), kind.clone()));
        }
    }
    match (&attachment.text, caps.embedded_context) {
        (Some(text), true) => {
            let mut uri = attachment.uri.clone().unwrap_or_else(|| format!("attachment:{}", attachment.label));
            if let Some(range) = &attachment.selection {
                uri = format!("{uri}#L{}-L{}", range.start.line + 1, range.end.line + 1);
            }
            let contents = acp::TextResourceContents::new(text.clone(), uri).mime_type(attachment.content_type.clone());
            acp::ContentBlock::Resource(acp::EmbeddedResource::new(
                acp::EmbeddedResourceResource::TextResourceContents(contents),
            ))
        }
        _ => text_block(attachments::as_text(attachment)),
    }
}

#[async_trait]
impl Session for AcpSession {
    fn conversation_id(&self) -> Option<String> {
        self.engine.lock().own.acp_id.clone()
    }

    /// An agent that declared `loadSession` takes this conversation up again once it is closed,
    /// so the host may unload it when idle.
    fn resumable(&self) -> bool {
        self.engine.lock().own.link.as_ref().is_some_and(|l| l.caps.load_session)
    }

    /// The lost turn goes on in the conversation `session/load` took up again (the parent
    /// started it with `resume`), told it was cut off and given its request again. What a person
    /// answered meanwhile is not carried: the agent asks again when it runs the tool again.
    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        if !self.resumable() {
            return Err(AgentError::Refused(format!(
                "{}: this ACP server cannot load a session, so a turn it lost cannot be resumed",
                self.provider()
            )));
        }
        let (params, _decisions) = resumed_request(params);
        self.send_message(params).await
    }

    fn models(&self) -> Option<Vec<SessionModelInfo>> {
        let models = self.engine.lock().own.offers.models(self.provider());
        (!models.is_empty()).then_some(models)
    }

    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        let caps = self.engine.lock().own.link.as_ref().map(|l| l.caps.attachments());
        if let Some(support) = caps {
            attachments::refuse_untaken(self.provider(), &support, &params.attachments)?;
        }
        self.engine.send_message(params)
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        let ask = self.engine.lock().own.offers.ask_model(self.provider(), &model.id);
        let ask = ask.map_err(|e| AgentError::Refused(e.to_string()))?;
        let Some(link) = self.live_link() else {
            self.engine.lock().own.wanted.model = Some(model.id);
            return Ok(());
        };
        self.engine.backend().ask(&self.engine, &link, &ask).await.map_err(|why| {
            AgentError::Refused(format!("{}: the agent would not take model {}: {why}", self.provider(), model.id))
        })
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.engine.abort();
        Ok(())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.engine.confirm(params))
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        let acp = self.engine.backend();
        let ask = match acp.offered_in(&self.engine.lock().own, &key, &value) {
            Ok(Some(ask)) => ask,
            Ok(None) => return Ok(not_writable(&key)),
            Err(_) => return Ok(not_offered(&key, &value)),
        };
        // Held before the request goes out, so the agent's own update echoing it is not news.
        let before = self.engine.lock().own.values.insert(key.clone(), value.clone());
        let Some(link) = self.live_link() else {
            self.engine.lock().own.wanted.config.insert(key, value);
            return Ok(accepted());
        };
        let Err(why) = acp.ask(&self.engine, &link, &ask).await else { return Ok(accepted()) };
        let values = &mut self.engine.lock().own.values;
        match before {
            Some(before) => values.insert(key.clone(), before),
            None => values.remove(&key),
        };
        let refusal = Some(format!("{}: {key} was not set: {why}", self.provider()));
        Ok(SetConfigResult { accepted: false, refusal })
    }

    async fn settings(&self) -> JsonObject {
        self.engine.lock().own.values.clone()
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        self.engine.lock().own.tools = tools;
        Ok(())
    }

    async fn close(&self) {
        self.engine.close().await;
    }
}

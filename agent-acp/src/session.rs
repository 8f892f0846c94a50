//! One conversation with an ACP agent: its own agent process (started again on the next message
//! when it dies, the conversation reloaded with `session/load`), the handshake, the turns one
//! after another, the questions it parks, and the client methods it is served. Every message is
//! the `agent-client-protocol` schema's type, carried by agent-runner's JSON-RPC peer.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionUpdate, AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES};
use agent_runner::{
    accepted, not_offered, not_writable, resumed_request, AgentError, Session, SessionHost, TurnWriter,
};
use ahp_types::actions::{SessionConfigChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ModelSelection, SessionModelInfo};
use async_trait::async_trait;
use protocol::{
    codes, Attachment, ConfirmParams, Cut, McpServer, ResumeTurnParams, RpcError, SendMessageParams, SetConfigResult,
    Start, ToolsEndpoint,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::{self, Folders, Terminals};
use crate::config::{request_of, withheld, Ask, AskRequest, NotOffered, Offers};
use crate::fork::History;
use crate::handshake::{initialize_request, Caps, ACP_VERSION, EXIT_GRACE};
use crate::mapping::{chosen_option, permission_answer, prompt_end, TurnMap};
use crate::shared::Shared;
use agent_runner::attachments;
use agent_runner::child::{describe_exit, Child, ChildCommand};
use agent_runner::lock;
use agent_runner::rpc::{Incoming, Peer, PeerError, Request, Responder};

/// How long a stopped turn waits for the agent to answer its prompt `cancelled`.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// ACP's `auth_required` error code.
const AUTH_REQUIRED: i32 = -32000;

/// A live agent process and the conversation with it.
#[derive(Clone)]
struct Link {
    peer: Peer,
    process: Arc<Child>,
    caps: Caps,
    generation: u64,
}

struct Running {
    abort: CancellationToken,
}

/// A permission request waiting for a person.
struct Parked {
    responder: Responder,
    options: Vec<acp::PermissionOption>,
}

/// Changes asked while no agent ran, made when one next opens.
#[derive(Default)]
struct Wanted {
    model: Option<String>,
    config: BTreeMap<String, Value>,
}

struct State {
    link: Option<Link>,
    acp_id: Option<String>,
    first_prompt: bool,
    queue: VecDeque<SendMessageParams>,
    running: Option<Running>,
    turn: Option<TurnMap>,
    parked: HashMap<String, Parked>,
    offers: Offers,
    values: JsonObject,
    wanted: Wanted,
    loading: bool,
    /// The user text `session/load` replayed, to tell whether the conversation heard the
    /// session's instructions (a client's rule may have joined them since it began).
    replayed: String,
    /// The turns a `session/load` replayed, while a fork reads its source.
    history: Option<History>,
    /// A fork's earlier turns, opening its first prompt; then the turn that carried them is
    /// said recorded, so the host stops carrying the cut.
    fork_context: Option<String>,
    cost: Option<f64>,
}

struct Inner {
    shared: Arc<Shared>,
    host: SessionHost,
    mcp_servers: Option<BTreeMap<String, McpServer>>,
    tools_endpoint: Option<ToolsEndpoint>,
    instructions: Vec<String>,
    additional_directories: Vec<String>,
    /// The operator's policy restricts elevated auto-approval: the modes that act without
    /// asking are not set, whoever asks.
    restricted: bool,
    cwd: PathBuf,
    folders: Arc<Folders>,
    terminals: Arc<Terminals>,
    state: Mutex<State>,
    wake: Notify,
    cancel: CancellationToken,
    tracker: TaskTracker,
    generations: AtomicU64,
}

/// One conversation; see the module docs.
#[derive(Clone)]
pub struct AcpSession {
    inner: Arc<Inner>,
}

/// Why the agent is being opened.
#[derive(Clone, Copy, PartialEq)]
enum Opening {
    /// `session/create` with a new conversation.
    New,
    /// `session/create` resuming one (after a restart of the daemon or of this worker).
    Resume,
    /// The agent died; the next message starts it again.
    Restart,
    /// `session/create` of a fork of another conversation (`Start.cut`): a new session whose first
    /// prompt carries the source's kept turns.
    Fork,
}

impl AcpSession {
    /// Starts the agent for `start` and opens its conversation.
    pub async fn open(shared: Arc<Shared>, start: Start, host: SessionHost) -> Result<Self, AgentError> {
        let (cwd, roots) = folders_of(&shared, &start)?;
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let folders = Arc::new(Folders::new(roots));
        let terminals = Arc::new(Terminals::new(folders.clone(), tracker.clone(), cancel.clone()));
        let mut wanted = Wanted { model: start.model.as_ref().map(|m| m.id.clone()), config: BTreeMap::new() };
        for (key, value) in &start.settings {
            wanted.config.insert(key.clone(), value.clone());
        }
        let session = AcpSession {
            inner: Arc::new(Inner {
                shared,
                host,
                mcp_servers: start.mcp_servers.clone(),
                tools_endpoint: start.tools_endpoint.clone(),
                instructions: start.instructions.clone(),
                additional_directories: start.additional_directories.clone(),
                restricted: crate::config::restricts(&start.policy),
                cwd,
                folders,
                terminals,
                state: Mutex::new(State {
                    link: None,
                    acp_id: start.resume.then(|| start.conversation_id.clone()),
                    first_prompt: !start.resume,
                    queue: VecDeque::new(),
                    running: None,
                    turn: None,
                    parked: HashMap::new(),
                    offers: Offers::default(),
                    values: JsonObject::new(),
                    wanted,
                    loading: false,
                    replayed: String::new(),
                    history: None,
                    fork_context: None,
                    cost: None,
                }),
                wake: Notify::new(),
                cancel,
                tracker,
                generations: AtomicU64::new(0),
            }),
        };
        // A fork is opened anew until its cut is on record (a truncation is not offered).
        let fork = start.cut.clone().filter(|cut| cut.source != start.conversation_id);
        let opening = match (&fork, start.resume) {
            (Some(_), _) => Opening::Fork,
            (None, true) => Opening::Resume,
            (None, false) => Opening::New,
        };
        if let Err(sentence) = session.connect(opening, fork.as_ref()).await {
            session.shut().await;
            return Err(AgentError::Failed(sentence));
        }
        let pump = session.clone();
        session.inner.tracker.spawn(async move { pump.pump().await });
        Ok(session)
    }

    fn provider(&self) -> &str {
        &self.inner.shared.provider
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// How to set `key` to `value` (as [`Offers::ask`] answers), a mode this session's policy
    /// withholds being one the agent does not offer.
    fn offered_in(&self, state: &State, key: &str, value: &Value) -> Result<Option<Ask>, NotOffered> {
        if withheld(self.inner.restricted, key, value) {
            return Err(NotOffered);
        }
        state.offers.ask(key, value)
    }

    fn offered(&self, key: &str, value: &Value) -> Result<Option<Ask>, NotOffered> {
        let state = self.state();
        self.offered_in(&state, key, value)
    }

    /// The agent process and the conversation in it: spawn, `initialize`, `authenticate`, then
    /// `session/new` or `session/load`, then the settings this session was started or since set
    /// with. On failure the process is stopped and the sentence says why, with its stderr.
    async fn connect(&self, opening: Opening, fork: Option<&Cut>) -> Result<(), String> {
        let shared = &self.inner.shared;
        let options = &shared.options;
        let generation = self.inner.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let process_cwd = options.cwd.clone().unwrap_or_else(|| self.inner.cwd.clone());
        // Something the agent left behind when it ends (a helper holding its stdout) ends with it.
        let (process, mut pipes) = ChildCommand::new(&options.command)
            .args(&options.args)
            .envs(&options.env)
            .cwd(&process_cwd)
            .end_group_with_leader()
            .spawn()
            .map_err(|e| format!("{}: {e}", self.provider()))?;
        let process = Arc::new(process);
        let stdin = pipes.take_stdin().map_err(|e| format!("{}: {e}", self.provider()))?;
        let handler = self.clone();
        let peer = Peer::start_foreign(pipes.stdout, stdin, move |message| handler.on_message(generation, message));
        self.watch(peer.clone(), process.clone(), generation);
        let link = Link { peer: peer.clone(), process: process.clone(), caps: Caps::default(), generation };
        match self.handshake(link, opening, fork).await {
            Ok(()) => Ok(()),
            Err(sentence) => {
                peer.close_output();
                process.signal(nix::sys::signal::Signal::SIGTERM);
                process.stop(Duration::from_millis(500)).await;
                process.settle(Duration::from_secs(1)).await;
                peer.end();
                // A refusal needs no stderr beside it; anything else might.
                let quiet = process.tail().is_blank();
                Err(if quiet { sentence } else { with_tail(&process, sentence) })
            }
        }
    }

    /// One step of the handshake, bounded by the start timeout, its answer read as `R`.
    async fn step<R: DeserializeOwned>(&self, link: &Link, method: &str, params: impl Serialize) -> Result<R, String> {
        let answer = self.step_value(link, method, params).await?;
        serde_json::from_value(answer).map_err(|why| {
            format!("{}: {} answered {method} oddly: {why}", self.provider(), self.inner.shared.options.command_line())
        })
    }

    /// One step of the handshake, its answer as it came.
    async fn step_value(&self, link: &Link, method: &str, params: impl Serialize) -> Result<Value, String> {
        let options = &self.inner.shared.options;
        let command = options.command_line();
        let provider = self.provider();
        let asked = link.peer.request_value(method, params);
        let answer = tokio::select! {
            answer = tokio::time::timeout(options.start_timeout, asked) => answer,
            _ = self.inner.cancel.cancelled() => return Err(format!("{provider}: the session closed while {command} was starting")),
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(PeerError::Rpc(error)))
                if error.code == AUTH_REQUIRED && method != AGENT_METHOD_NAMES.authenticate =>
            {
                Err(self.sign_in_needed(&link.caps))
            }
            Ok(Err(PeerError::Rpc(error))) => Err(format!("{provider}: {command} refused {method}: {}", error.message)),
            Ok(Err(PeerError::Decode(why))) => Err(format!("{provider}: {command} answered {method} oddly: {why}")),
            Ok(Err(PeerError::Closed)) => {
                link.process.settle(Duration::from_secs(1)).await;
                Err(format!("{provider}: {command} {} before it answered {method}", how_it_ended(&link.process)))
            }
            Err(_) => Err(format!(
                "{provider}: {command} did not answer {method} within {} s, so it was stopped",
                options.start_timeout.as_secs_f64()
            )),
        }
    }

    fn sign_in_needed(&self, caps: &Caps) -> String {
        let offered =
            if caps.auth_methods.is_empty() { "no sign-in method".to_owned() } else { caps.auth_methods.join(", ") };
        format!(
            "{}: this ACP server wants to be signed in before it answers, and offers {offered}; set the authenticate option to the one to use",
            self.provider()
        )
    }

    async fn handshake(&self, mut link: Link, opening: Opening, fork: Option<&Cut>) -> Result<(), String> {
        let provider = self.provider().to_owned();
        let options = self.inner.shared.options.clone();
        let init: acp::InitializeResponse =
            self.step(&link, AGENT_METHOD_NAMES.initialize, initialize_request()).await?;
        if init.protocol_version != ACP_VERSION {
            return Err(format!(
                "{provider}: {} speaks ACP version {}, and this host speaks {ACP_VERSION}",
                options.command_line(),
                init.protocol_version
            ));
        }
        link.caps = Caps::from_answer(&init);
        self.inner.shared.learn_attachments(link.caps.attachments());
        if let Some(auth) = &options.authenticate {
            if !link.caps.auth_methods.contains(&auth.method_id) {
                let offered = if link.caps.auth_methods.is_empty() {
                    "no sign-in method".to_owned()
                } else {
                    link.caps.auth_methods.join(", ")
                };
                return Err(format!("{provider} offers {offered}, not {}", auth.method_id));
            }
            let _: Value = self
                .step_value(
                    &link,
                    AGENT_METHOD_NAMES.authenticate,
                    acp::AuthenticateRequest::new(auth.method_id.clone()),
                )
                .await?;
        }
        let servers = mcp_servers(
            &provider,
            self.inner.mcp_servers.as_ref(),
            self.inner.tools_endpoint.as_ref().filter(|_| options.host_tools),
            link.caps.mcp_http,
        );
        let cwd = self.inner.cwd.clone();
        if let Some(cut) = fork {
            self.read_fork(&link, cut).await?;
        }
        let known = self.state().acp_id.clone();
        let answer = match (opening, known) {
            (Opening::Resume | Opening::Restart, Some(id)) if link.caps.load_session => {
                {
                    let mut state = self.state();
                    state.loading = true;
                    state.replayed.clear();
                }
                let load = acp::LoadSessionRequest::new(id.clone(), cwd).mcp_servers(servers);
                let loaded = self.step_value(&link, AGENT_METHOD_NAMES.session_load, load).await;
                {
                    let mut state = self.state();
                    state.loading = false;
                    let replayed = std::mem::take(&mut state.replayed);
                    let words = self.inner.instructions.join("\n\n");
                    if loaded.is_ok() && !words.trim().is_empty() && !replayed.contains(&words) {
                        // The conversation never heard these words (or not all of them): they
                        // open its next prompt, as they opened its first.
                        state.first_prompt = true;
                    }
                }
                (id, loaded?)
            }
            (Opening::Resume, Some(id)) => {
                return Err(format!(
                    "{provider}: this ACP server cannot load a session, so \"{id}\" cannot be resumed"
                ));
            }
            (opening, _) => {
                let mut new = acp::NewSessionRequest::new(cwd).mcp_servers(servers);
                if link.caps.additional_directories {
                    new = new.additional_directories(
                        self.inner.additional_directories.iter().map(PathBuf::from).collect::<Vec<_>>(),
                    );
                }
                let answer = self.step_value(&link, AGENT_METHOD_NAMES.session_new, new).await?;
                let opened: acp::NewSessionResponse = acp::NewSessionResponse::deserialize(&answer).map_err(|why| {
                    format!("{provider}: {} answered session/new oddly: {why}", options.command_line())
                })?;
                if opening == Opening::Restart {
                    // Said in the turn that started it again, and the new conversation opens
                    // with the session's instructions as the first one did.
                    let notice = format!(
                        "{provider}: the agent was started again and cannot load its conversation, so a new one began"
                    );
                    tracing::warn!("{notice}");
                    let mut state = self.state();
                    state.first_prompt = true;
                    if let Some(turn) = state.turn.as_mut() {
                        turn.notice(&notice);
                    }
                }
                (opened.session_id.to_string(), answer)
            }
        };
        let (acp_id, answer) = answer;
        let offers = Offers::from_answer(&answer);
        {
            let mut state = self.state();
            state.acp_id = Some(acp_id);
            state.link = Some(link.clone());
        }
        // A new or resumed session says every value the agent starts at; a restarted one only what moved.
        self.learn(offers, opening != Opening::Restart);
        self.apply_wanted(&link).await;
        Ok(())
    }

    /// Reads the turns a fork keeps from its source: the source loaded in this agent
    /// (`session/load`), its replay kept turn by turn, less the turns the fork leaves out; then
    /// the source is closed again where the agent can. They open the fork's first prompt.
    async fn read_fork(&self, link: &Link, cut: &Cut) -> Result<(), String> {
        let provider = self.provider();
        if !link.caps.load_session {
            return Err(format!(
                "{provider}: this ACP server cannot load a session, so conversation \"{}\" cannot be forked",
                cut.source
            ));
        }
        {
            let mut state = self.state();
            state.loading = true;
            state.history = Some(History::default());
        }
        let load = acp::LoadSessionRequest::new(cut.source.clone(), self.inner.cwd.clone());
        let loaded = self.step_value(link, AGENT_METHOD_NAMES.session_load, load).await;
        let history = {
            let mut state = self.state();
            state.loading = false;
            state.replayed.clear();
            state.history.take().unwrap_or_default()
        };
        loaded?;
        if link.caps.close_session {
            let close = acp::CloseSessionRequest::new(cut.source.clone());
            if let Err(why) = self.step_value(link, AGENT_METHOD_NAMES.session_close, close).await {
                tracing::info!(provider, "the fork's source stays open in its agent: {why}");
            }
        }
        let mut state = self.state();
        state.fork_context = crate::fork::context(&history.kept(cut.dropped.len()));
        state.first_prompt = true;
        Ok(())
    }

    /// Takes what the agent now offers: the values that moved are said to every client, the
    /// models and controls reach the agent's probe and schema.
    fn learn(&self, offers: Offers, all: bool) {
        let moved = {
            let mut state = self.state();
            let values = offers.values();
            let moved: JsonObject = values
                .iter()
                .filter(|(k, v)| all || state.values.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            state.values.extend(values);
            state.offers = offers.clone();
            moved
        };
        self.say_config(moved);
        self.inner.shared.learn_offers(&offers);
    }

    fn say_config(&self, moved: JsonObject) {
        if !moved.is_empty() {
            self.inner.host.emit_session(StateAction::SessionConfigChanged(SessionConfigChangedAction {
                config: moved,
                replace: None,
            }));
        }
    }

    /// Makes the settings this session was started with or given while no agent ran.
    async fn apply_wanted(&self, link: &Link) {
        let wanted = std::mem::take(&mut self.state().wanted);
        if let Some(model) = wanted.model {
            let ask = self.state().offers.ask_model(self.provider(), &model);
            match ask {
                Ok(ask) => {
                    if let Err(why) = self.ask(link, &ask).await {
                        tracing::warn!(
                            provider = self.provider(),
                            model,
                            why,
                            "the model this session asked for was not set"
                        );
                    }
                }
                Err(why) => {
                    tracing::warn!(provider = self.provider(), %why, "the model this session asked for was not set")
                }
            }
        }
        for (key, value) in wanted.config {
            let ask = self.offered(&key, &value);
            match ask {
                Ok(Some(ask)) => {
                    if let Err(why) = self.ask(link, &ask).await {
                        tracing::warn!(provider = self.provider(), key, why, "a setting was not made");
                    }
                }
                Ok(None) => {}
                Err(_) => {
                    tracing::warn!(provider = self.provider(), key, %value, "the agent does not offer this value")
                }
            }
        }
    }

    /// Asks the agent for a change and learns what it answers.
    async fn ask(&self, link: &Link, ask: &Ask) -> Result<(), String> {
        let Some(acp_id) = self.state().acp_id.clone() else {
            return Err("no conversation is open".into());
        };
        let Some(request) = request_of(ask, &acp_id) else {
            return Ok(());
        };
        let (peer, method) = (&link.peer, request.method());
        let answer = match request {
            AskRequest::Mode(params) => peer.request_value(method, params).await,
            AskRequest::Option(params) => peer.request_value(method, params).await,
            AskRequest::Model(params) => peer.request_value(method, params).await,
        }
        .map_err(refusal)?;
        match ask {
            Ask::SetOption { .. } => {
                // An answer without the options (or one the schema cannot read) moves nothing.
                if let Ok(answer) = serde_json::from_value::<acp::SetSessionConfigOptionResponse>(answer) {
                    let mut offers = self.state().offers.clone();
                    offers.options = crate::config::parse_options(&answer.config_options);
                    self.learn(offers, false);
                }
            }
            Ask::SetMode(id) => {
                let mut offers = self.state().offers.clone();
                offers.mode_moved(id);
                self.learn(offers, false);
            }
            Ask::SetModel(id) => {
                let mut offers = self.state().offers.clone();
                offers.legacy_model_moved(id);
                self.learn(offers, false);
            }
            Ask::Nothing => {}
        }
        Ok(())
    }

    /// Notices the agent's end while no turn is waiting on it, so the next message starts it again.
    fn watch(&self, peer: Peer, process: Arc<Child>, generation: u64) {
        let session = self.clone();
        let cancel = self.inner.cancel.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = peer.ended() => {}
                _ = async {
                    process.wait().await;
                    // Something it left behind may hold its stdout open; its answers are over.
                    tokio::time::sleep(EXIT_GRACE).await;
                } => peer.end(),
            }
            let mut state = session.state();
            if state.link.as_ref().is_some_and(|l| l.generation == generation) {
                state.link = None;
                let dropped: Vec<_> = state.parked.drain().collect();
                drop(state);
                drop(dropped);
                tracing::warn!(provider = session.provider(), "the ACP agent ended; the next message starts it again");
            }
        });
    }

    /// What the agent sends: updates to the running turn or the session, its questions, and the
    /// client methods (run as tasks of their own, so a terminal waited on holds nothing up).
    fn on_message(&self, generation: u64, message: Incoming) {
        match message {
            Incoming::Notification { method, params } if method == CLIENT_METHOD_NAMES.session_update => {
                // Read in place: the update's own JSON is still there to name a kind the schema does not know.
                match acp::SessionNotification::deserialize(&params) {
                    Ok(notification) => self.on_update(generation, &notification.update),
                    Err(why) => {
                        let why = format!("this host's ACP schema does not read it: {why}");
                        self.inner.shared.unmapped(&update_kind(&params), &why)
                    }
                }
            }
            Incoming::Notification { method, .. } => {
                self.inner.shared.unmapped(&method, "a notification this host does not use")
            }
            Incoming::Request(Request { method, params, responder }) => {
                if method == CLIENT_METHOD_NAMES.session_request_permission {
                    match serde_json::from_value::<acp::RequestPermissionRequest>(params) {
                        Ok(request) => self.on_permission(responder, request),
                        Err(why) => {
                            responder.respond(Err(RpcError::new(codes::INVALID_PARAMS, format!("{method}: {why}"))))
                        }
                    }
                } else {
                    let (folders, terminals, cancel) =
                        (self.inner.folders.clone(), self.inner.terminals.clone(), self.inner.cancel.clone());
                    self.inner.tracker.spawn(async move {
                        tokio::select! {
                            answer = client::serve(&folders, &terminals, &method, params) => {
                                if let Err(e) = &answer {
                                    tracing::info!(method, error = %e.message, "refused a client method");
                                }
                                responder.respond(answer);
                            }
                            _ = cancel.cancelled() => responder.respond(Err(RpcError::new(codes::SHUTTING_DOWN, "the session closed"))),
                        }
                    });
                }
            }
        }
    }

    fn on_update(&self, generation: u64, update: &SessionUpdate) {
        match update {
            SessionUpdate::CurrentModeUpdate(mode) => {
                let mut offers = self.state().offers.clone();
                offers.mode_moved(&mode.current_mode_id.to_string());
                self.learn(offers, false);
            }
            SessionUpdate::ConfigOptionUpdate(options) => {
                let mut offers = self.state().offers.clone();
                offers.options = crate::config::parse_options(&options.config_options);
                self.learn(offers, false);
            }
            SessionUpdate::AvailableCommandsUpdate(commands) => {
                self.inner.shared.learn_commands(crate::probe::commands_of(commands));
            }
            _ => {
                let mut state = self.state();
                let current = state.link.as_ref().is_some_and(|l| l.generation == generation);
                // A subagent's words are its own chat's, never the conversation's history.
                if state.loading && crate::subagents::parent_call(update).is_none() {
                    match update {
                        SessionUpdate::UserMessageChunk(acp::ContentChunk {
                            content: acp::ContentBlock::Text(text),
                            ..
                        }) => {
                            state.replayed.push_str(&text.text);
                            if let Some(history) = state.history.as_mut() {
                                history.user(&text.text);
                            }
                        }
                        SessionUpdate::AgentMessageChunk(acp::ContentChunk {
                            content: acp::ContentBlock::Text(text),
                            ..
                        }) => {
                            if let Some(history) = state.history.as_mut() {
                                history.agent(&text.text);
                            }
                        }
                        _ => {}
                    }
                }
                if state.loading || !current {
                    // The history session/load replays is the host's already.
                    return;
                }
                let terminals = self.inner.terminals.clone();
                let taken = match state.turn.as_mut() {
                    Some(turn) => turn.update(update, &terminals),
                    None => false,
                };
                drop(state);
                if !taken {
                    let kind = update_kind(&serde_json::to_value(update).unwrap_or_default());
                    self.inner.shared.unmapped(&kind, "an update outside a turn, or of a kind this host does not show");
                }
            }
        }
    }

    fn on_permission(&self, responder: Responder, request: acp::RequestPermissionRequest) {
        let mut state = self.state();
        let running = state.running.is_some();
        let asked = match state.turn.as_mut() {
            Some(turn) if running => turn.ask(&request.tool_call, &request.options),
            _ => None,
        };
        let Some(call_id) = asked else {
            drop(state);
            // Nobody is there to ask: the agent hears it was cancelled.
            responder.ok(permission_answer(None));
            return;
        };
        if let Some(older) = state.parked.insert(call_id, Parked { responder, options: request.options }) {
            older.responder.ok(permission_answer(None));
        }
    }

    /// Runs handed turns one after another until the session closes.
    async fn pump(&self) {
        loop {
            let next = {
                let mut state = self.state();
                match state.queue.pop_front() {
                    Some(params) => {
                        let abort = CancellationToken::new();
                        state.running = Some(Running { abort: abort.clone() });
                        Some((params, abort))
                    }
                    None => None,
                }
            };
            match next {
                Some((params, abort)) => {
                    self.run_turn(params, abort).await;
                    let mut state = self.state();
                    state.running = None;
                    state.turn = None;
                }
                None => tokio::select! {
                    _ = self.inner.wake.notified() => {}
                    _ = self.inner.cancel.cancelled() => return,
                },
            }
        }
    }

    fn end_turn(&self, end: agent_runner::TurnEnd) {
        let mut state = self.state();
        let (cost, model) = (state.cost, state.offers.current_model());
        if let Some(mut turn) = state.turn.take() {
            state.cost = turn.finish(end, cost, model);
        }
    }

    fn fail_turn(&self, kind: &str, sentence: String) {
        if let Some(mut turn) = self.state().turn.take() {
            turn.fail(kind, sentence);
        }
    }

    async fn run_turn(&self, params: SendMessageParams, abort: CancellationToken) {
        let writer = TurnWriter::new(self.inner.host.clone(), params.turn_id.clone());
        self.state().turn = Some(TurnMap::new(self.provider(), writer));
        let stopped = || abort.is_cancelled() || self.inner.cancel.is_cancelled();

        let live = self.state().link.clone().filter(|l| !l.peer.is_ended());
        let link = match live {
            Some(link) => link,
            None => {
                let opened = tokio::select! {
                    opened = self.connect(Opening::Restart, None) => opened,
                    _ = abort.cancelled() => Err(String::new()),
                    _ = self.inner.cancel.cancelled() => Err(String::new()),
                };
                if stopped() {
                    self.end_turn(agent_runner::TurnEnd::Cancelled);
                    return;
                }
                if let Err(sentence) = opened {
                    self.fail_turn("agentUnavailable", sentence);
                    return;
                }
                match self.state().link.clone() {
                    Some(link) => link,
                    None => {
                        self.fail_turn(
                            "agentUnavailable",
                            format!("{}: the agent ended as it started", self.provider()),
                        );
                        return;
                    }
                }
            }
        };
        if stopped() {
            self.end_turn(agent_runner::TurnEnd::Cancelled);
            return;
        }
        let (acp_id, prompt, forked) = {
            let mut state = self.state();
            let first = std::mem::replace(&mut state.first_prompt, false);
            let mut prompt = self.prompt_blocks(&params, first, &link.caps);
            let forked = state.fork_context.take();
            if let Some(context) = &forked {
                prompt.insert(0, text_block(context.clone()));
            }
            (state.acp_id.clone().unwrap_or_default(), prompt, forked)
        };
        let asked = link.peer.request_value(AGENT_METHOD_NAMES.session_prompt, acp::PromptRequest::new(acp_id, prompt));
        tokio::pin!(asked);
        let answer = tokio::select! {
            answer = &mut asked => Some(answer),
            _ = abort.cancelled() => None,
            _ = self.inner.cancel.cancelled() => None,
        };
        let answer = match answer {
            Some(answer) => answer,
            // Stopped: the agent was told (session/cancel) and answers `cancelled`; one that
            // never does is not waited for for ever.
            None => match tokio::time::timeout(CANCEL_GRACE, &mut asked).await {
                Ok(answer) => answer,
                Err(_) => serde_json::to_value(acp::PromptResponse::new(acp::StopReason::Cancelled))
                    .map_err(|e| PeerError::Decode(e.to_string())),
            },
        };
        if let (Err(_), Some(context)) = (&answer, &forked) {
            // The prompt may not have reached the agent's record: the next one carries them again.
            self.state().fork_context.get_or_insert_with(|| context.clone());
        }
        match answer {
            Ok(answer) => {
                let answer = serde_json::from_value::<acp::PromptResponse>(answer).map_err(|e| e.to_string());
                let end =
                    if stopped() { agent_runner::TurnEnd::Cancelled } else { prompt_end(self.provider(), &answer) };
                if let (Some(turn), Ok(answer)) = (self.state().turn.as_mut(), answer) {
                    turn.response_usage(answer.usage);
                }
                if forked.is_some() {
                    // The fork's earlier turns are in its own conversation now: the agent loads
                    // them with it, so the host stops carrying the cut. ACP names no turns, so
                    // the turn is recorded under its own id.
                    self.inner.host.turn_recorded(&params.turn_id, &params.turn_id);
                }
                self.end_turn(end);
            }
            Err(_) if stopped() => self.end_turn(agent_runner::TurnEnd::Cancelled),
            Err(PeerError::Rpc(error)) if error.code == AUTH_REQUIRED => {
                self.fail_turn("authRequired", self.sign_in_needed(&link.caps));
            }
            Err(error @ (PeerError::Rpc(_) | PeerError::Decode(_))) => {
                self.fail_turn(
                    "agentError",
                    format!("{}: the agent failed the turn: {}", self.provider(), refusal(error)),
                );
            }
            Err(PeerError::Closed) => {
                link.process.settle(Duration::from_secs(1)).await;
                let sentence = with_tail(
                    &link.process,
                    format!(
                        "{}: {} {} in the middle of the turn; the next message starts it again",
                        self.provider(),
                        self.inner.shared.options.command_line(),
                        how_it_ended(&link.process)
                    ),
                );
                {
                    let mut state = self.state();
                    if state.link.as_ref().is_some_and(|l| l.generation == link.generation) {
                        state.link = None;
                    }
                    state.parked.clear();
                }
                self.fail_turn("agentExited", sentence);
            }
        }
    }

    /// The prompt's blocks: the session's instructions opening its first prompt (an ACP server
    /// keeps its own system prompt), the turn's own instructions, the attachments, then the words.
    fn prompt_blocks(&self, params: &SendMessageParams, first: bool, caps: &Caps) -> Vec<acp::ContentBlock> {
        let mut blocks = Vec::new();
        if first && !self.inner.instructions.is_empty() {
            blocks.push(text_block(self.inner.instructions.join("\n\n")));
        }
        if let Some(instructions) = params.instructions.as_ref().filter(|i| !i.trim().is_empty()) {
            blocks.push(text_block(instructions.clone()));
        }
        blocks.extend(params.attachments.iter().map(|a| attachment_block(a, caps)));
        blocks.push(text_block(params.message.text.clone()));
        blocks
    }

    /// Stops everything: the turn, the questions, the agent, its terminals, every task.
    async fn shut(&self) {
        let (link, parked, acp_id, running) = {
            let mut state = self.state();
            state.queue.clear();
            let parked: Vec<Parked> = state.parked.drain().map(|(_, p)| p).collect();
            (state.link.take(), parked, state.acp_id.clone(), state.running.is_some())
        };
        for p in parked {
            p.responder.ok(permission_answer(None));
        }
        if let (Some(link), Some(acp_id), true) = (&link, &acp_id, running) {
            link.peer.notify(AGENT_METHOD_NAMES.session_cancel, acp::CancelNotification::new(acp_id.clone()));
        }
        self.inner.cancel.cancel();
        if let Some(link) = link {
            link.peer.close_output();
            link.process.stop(EXIT_GRACE).await;
            link.peer.end();
        }
        self.inner.terminals.kill_all();
        self.inner.tracker.close();
        if tokio::time::timeout(Duration::from_secs(5), self.inner.tracker.wait()).await.is_err() {
            tracing::warn!(provider = self.provider(), "a task of this session did not stop in time");
        }
    }
}

/// The session's folder and the folders it may reach: its working directory (which must exist),
/// or a folder of its own under the worker's data dir when it has none.
fn folders_of(shared: &Shared, start: &Start) -> Result<(PathBuf, Vec<PathBuf>), AgentError> {
    let cwd = match &start.working_directory {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if !dir.is_dir() {
                return Err(AgentError::Refused(format!(
                    "{}: the session's folder {} does not exist",
                    shared.provider,
                    dir.display()
                )));
            }
            dir
        }
        None => {
            let base = shared.data_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("ahpd-acp"));
            let name: String = start
                .conversation_id
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
                .collect();
            let dir = base.join("sessions").join(name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| AgentError::Failed(format!("{}: {}: {e}", shared.provider, dir.display())))?;
            dir
        }
    };
    let mut roots = vec![cwd.clone()];
    roots.extend(start.additional_directories.iter().map(PathBuf::from));
    Ok((cwd, roots))
}

/// The MCP servers handed to `session/new`: the deployment's, in ACP's shapes, then the session's
/// own endpoint as `ahp`, where the agent takes servers over HTTP.
fn mcp_servers(
    provider: &str,
    configured: Option<&BTreeMap<String, McpServer>>,
    endpoint: Option<&ToolsEndpoint>,
    http: bool,
) -> Vec<acp::McpServer> {
    let headers = |map: &BTreeMap<String, String>| -> Vec<acp::HttpHeader> {
        map.iter().map(|(name, value)| acp::HttpHeader::new(name.clone(), value.clone())).collect()
    };
    let mut servers = Vec::new();
    for (name, server) in configured.into_iter().flatten() {
        if name == "ahp" && endpoint.is_some() && http {
            tracing::warn!(provider, "an MCP server named ahp was left out: the name is the host tools'");
            continue;
        }
        match server {
            McpServer::Stdio { command, args, cwd, env } => {
                if cwd.is_some() {
                    tracing::info!(
                        provider,
                        server = name,
                        "ACP carries no cwd for a stdio MCP server; it starts where the agent does"
                    );
                }
                let env = env.iter().map(|(name, value)| acp::EnvVariable::new(name.clone(), value.clone())).collect();
                servers.push(acp::McpServer::Stdio(
                    acp::McpServerStdio::new(name.clone(), command.clone()).args(args.clone()).env(env),
                ));
            }
            McpServer::Http { url, headers: pairs } if http => {
                servers.push(acp::McpServer::Http(
                    acp::McpServerHttp::new(name.clone(), url.clone()).headers(headers(pairs)),
                ));
            }
            McpServer::Http { .. } => {
                tracing::info!(
                    provider,
                    server = name,
                    "this ACP server takes no MCP server over HTTP, so it was left out"
                );
            }
        }
    }
    match endpoint {
        Some(endpoint) if http => {
            let bearer = acp::HttpHeader::new("Authorization", format!("Bearer {}", endpoint.token));
            servers
                .push(acp::McpServer::Http(acp::McpServerHttp::new("ahp", endpoint.url.clone()).headers(vec![bearer])));
        }
        Some(_) => tracing::info!(
            provider,
            "ahp: this ACP server takes no MCP server over HTTP, so the host tools were left out"
        ),
        None => {}
    }
    servers
}

/// What a session/update names itself as (its `sessionUpdate`), for a line about one not shown.
fn update_kind(params: &Value) -> String {
    let update = params.get("update").unwrap_or(params);
    update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("(no sessionUpdate)").to_owned()
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
        self.state().acp_id.clone()
    }

    /// An agent that declared `loadSession` takes this conversation up again once it is closed,
    /// so the host may unload it when idle.
    fn resumable(&self) -> bool {
        self.state().link.as_ref().is_some_and(|l| l.caps.load_session)
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
        let models = self.state().offers.models(self.provider());
        (!models.is_empty()).then_some(models)
    }

    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        if self.inner.cancel.is_cancelled() {
            return Err(AgentError::Failed(format!("{}: the session is closed", self.provider())));
        }
        let caps = self.state().link.as_ref().map(|l| l.caps.attachments());
        if let Some(support) = caps {
            attachments::refuse_untaken(self.provider(), &support, &params.attachments)?;
        }
        self.state().queue.push_back(params);
        self.inner.wake.notify_one();
        Ok(())
    }

    async fn change_model(&self, model: ModelSelection) -> Result<(), AgentError> {
        let (ask, link) = {
            let state = self.state();
            let ask =
                state.offers.ask_model(self.provider(), &model.id).map_err(|e| AgentError::Refused(e.to_string()))?;
            (ask, state.link.clone().filter(|l| !l.peer.is_ended()))
        };
        match link {
            Some(link) => self.ask(&link, &ask).await.map_err(|why| {
                AgentError::Refused(format!("{}: the agent would not take model {}: {why}", self.provider(), model.id))
            }),
            None => {
                self.state().wanted.model = Some(model.id);
                Ok(())
            }
        }
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        let (parked, cancel) = {
            let mut state = self.state();
            state.queue.clear();
            let parked: Vec<Parked> = state.parked.drain().map(|(_, p)| p).collect();
            let cancel = state.running.as_ref().map(|r| {
                let target = state.link.as_ref().zip(state.acp_id.as_ref()).map(|(l, id)| (l.peer.clone(), id.clone()));
                (r.abort.clone(), target)
            });
            (parked, cancel)
        };
        // The questions are answered `cancelled` first, then the turn is cancelled, as ACP asks.
        for p in parked {
            p.responder.ok(permission_answer(None));
        }
        if let Some((abort, target)) = cancel {
            if let Some((peer, acp_id)) = target {
                peer.notify(AGENT_METHOD_NAMES.session_cancel, acp::CancelNotification::new(acp_id));
            }
            abort.cancel();
        }
        Ok(())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        let Some(parked) = self.state().parked.remove(&params.tool_call_id) else {
            return Ok(false);
        };
        let option = chosen_option(&parked.options, params.approved, params.option_id.as_deref());
        parked.responder.ok(permission_answer(option));
        Ok(true)
    }

    async fn set_config(&self, key: String, value: Value) -> Result<SetConfigResult, AgentError> {
        let (ask, link) = {
            let state = self.state();
            (self.offered_in(&state, &key, &value), state.link.clone().filter(|l| !l.peer.is_ended()))
        };
        let ask = match ask {
            Ok(Some(ask)) => ask,
            Ok(None) => return Ok(not_writable(&key)),
            Err(_) => return Ok(not_offered(&key, &value)),
        };
        // Held before the request goes out, so the agent's own update echoing it is not news.
        let before = self.state().values.insert(key.clone(), value.clone());
        let Some(link) = link else {
            self.state().wanted.config.insert(key, value);
            return Ok(accepted());
        };
        match self.ask(&link, &ask).await {
            Ok(()) => Ok(accepted()),
            Err(why) => {
                let mut state = self.state();
                match before {
                    Some(before) => state.values.insert(key.clone(), before),
                    None => state.values.remove(&key),
                };
                Ok(SetConfigResult {
                    accepted: false,
                    refusal: Some(format!("{}: {key} was not set: {why}", self.provider())),
                })
            }
        }
    }

    async fn settings(&self) -> JsonObject {
        self.state().values.clone()
    }

    async fn close(&self) {
        self.shut().await;
    }
}

/// How much of the agent's stderr tail goes into a message a person reads.
const TAIL_SHOWN: usize = 2 * 1024;

/// What went wrong with a request to the agent, in words.
fn refusal(error: PeerError) -> String {
    match error {
        PeerError::Rpc(error) => error.message,
        PeerError::Closed => "the agent's output ended before it answered".to_owned(),
        PeerError::Decode(why) => why,
    }
}

/// How the agent ended, in words, or that it closed its output while it lives on.
fn how_it_ended(process: &Child) -> String {
    if process.has_exited() {
        describe_exit(process.status())
    } else {
        "closed its output".to_owned()
    }
}

/// `sentence`, then the tail of the agent's stderr, for a message a person reads.
fn with_tail(process: &Child, sentence: String) -> String {
    let tail = process.tail().text_within(TAIL_SHOWN);
    if tail.is_empty() {
        format!("{sentence}. It said nothing on stderr.")
    } else {
        format!("{sentence}. Its stderr ended with:\n{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mcp_servers_take_acp_shapes_and_the_endpoint_needs_http() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "files".to_owned(),
            McpServer::Stdio {
                command: "srv".into(),
                args: vec!["/x".into()],
                cwd: Some("/srv".into()),
                env: [("T".to_owned(), "1".to_owned())].into_iter().collect(),
            },
        );
        configured.insert(
            "issues".to_owned(),
            McpServer::Http {
                url: "http://i".into(),
                headers: [("H".to_owned(), "v".to_owned())].into_iter().collect(),
            },
        );
        let endpoint = ToolsEndpoint { url: "http://127.0.0.1:1/ahp-mcp/x".into(), token: "tok".into() };
        let json = |servers: Vec<acp::McpServer>| -> Vec<Value> {
            servers.into_iter().map(|s| serde_json::to_value(s).expect("json")).collect()
        };
        let with_http = json(mcp_servers("p", Some(&configured), Some(&endpoint), true));
        assert_eq!(
            with_http,
            vec![
                json!({"name": "files", "command": "srv", "args": ["/x"], "env": [{"name": "T", "value": "1"}]}),
                json!({"type": "http", "name": "issues", "url": "http://i", "headers": [{"name": "H", "value": "v"}]}),
                json!({"type": "http", "name": "ahp", "url": "http://127.0.0.1:1/ahp-mcp/x",
                       "headers": [{"name": "Authorization", "value": "Bearer tok"}]}),
            ]
        );
        let without_http = json(mcp_servers("p", Some(&configured), Some(&endpoint), false));
        assert_eq!(without_http.len(), 1);
        assert_eq!(without_http[0]["name"], "files");
    }
}

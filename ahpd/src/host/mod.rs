//! The host: the one process that holds state. Sessions, chats, turns, who is subscribed to what,
//! and what each backend's worker is doing with each chat.
//!
//! Every change goes through the one write path ([`write`], `Core::apply`) under one lock, so what
//! a client folds through the official reducers is what the host holds, by construction. Work
//! that waits (a worker's answer, a store write that is not on the turn's path) happens outside
//! the lock: each chat has a driver task ([`driver`]) that hands its operations to the worker in
//! order.
//!
//! The host's own tools are not its own modules: it is built with them ([`ports::Tools`]) and
//! knows them only as the catalogue of what a session is offered and a hook for a turn's end; they
//! reach it through [`facade`].

pub mod account;
pub mod actions;
pub mod attachments;
pub mod budget;
pub mod catalog;
pub mod clients;
pub mod commands;
pub mod completions;
pub mod config;
pub mod core;
pub mod deliver;
pub mod deltas;
pub mod driver;
pub mod edits;
pub mod endpoints;
pub mod errors;
pub mod facade;
pub mod foreign;
pub mod grants;
pub mod held;
pub mod limits;
pub mod mcpservers;
pub mod mirrors;
pub mod offer;
pub mod persist;
pub mod ports;
pub mod questions;
pub mod remembered;
pub mod requests;
pub mod ring;
pub mod rootconfig;
pub mod rules;
pub mod status;
pub mod subagents;
pub mod terminal_channels;
pub mod turns;
pub mod unload;
pub mod usage;
pub mod write;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use agent_runner::sync::lock;
use ahp_types::state::{AgentInfo, RootState, SessionModelInfo, SessionSummary};
use protocol::{AgentDescriptor, SchemaResult};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use self::config::{HostConfig, LiveSettings};
use self::core::{Channels, ConnId, Frame};
use self::driver::Op;
use crate::supervisor::{Supervisor, WorkerEvent};

/// What the host knows of one backend.
pub struct AgentEntry {
    /// The provider id.
    pub provider: String,
    /// What its worker said it is, once it said so.
    pub descriptor: Option<AgentDescriptor>,
    /// Its session config schema and defaults.
    pub schema: Option<SchemaResult>,
    /// The models it offers.
    pub models: Vec<SessionModelInfo>,
    /// The commands behind a slash it reported.
    pub commands: Vec<protocol::SlashCommand>,
    /// What it takes as attachments, when its probe said more than its handshake.
    pub attachments: Option<protocol::AttachmentSupport>,
    /// Its capabilities, when its probe said more than its descriptor (this run's, or the
    /// store's): they stand in the descriptor's stead.
    pub capabilities: Option<ahp_types::state::AgentCapabilities>,
    /// The schema its worker last said after a probe (this run's, or the store's from an earlier
    /// one), as the worker said it: it stands until the worker's probe answers again.
    pub remembered: Option<SchemaResult>,
}

/// The host's own record of a session, beside its channel state.
pub struct SessionMeta {
    /// The backend.
    pub provider: String,
    /// When it was created (ISO-8601).
    pub created_at: String,
    /// The folder it runs in.
    pub working_directory: Option<PathBuf>,
    /// The summary root subscribers were last told.
    pub last_summary: SessionSummary,
    /// Its annotations channel.
    pub annotations: String,
    /// Who owns it (`user:<id>`), under a users directory.
    pub owner: Option<String>,
    /// The session whose tools created it.
    pub parent: Option<String>,
    /// How many create links sit above it.
    pub depth: u32,
    /// Root subscribers were told of it (`root/sessionAdded`), so changes to its summary are
    /// theirs to hear.
    pub announced: bool,
    /// What it changed, at a glance (its summary's `changes`), as its workspaces feature said.
    pub changes: Option<ahp_types::state::ChangesSummary>,
}

/// A call of a client's tool, waiting for that client.
pub struct ClientCall {
    /// The client that runs it.
    pub owner: String,
    /// The tool's name as the client announced it.
    pub name: String,
    /// The turn it belongs to.
    pub turn_id: String,
    /// Who waits for its outcome: the backend's call, until it is answered.
    pub(super) waiter: Option<tokio::sync::oneshot::Sender<protocol::ToolOutcome>>,
}

/// A turn restored after a restart, whose parked questions its backend no longer holds.
#[derive(Debug, Clone)]
pub struct ParkedTurn {
    /// The turn.
    pub turn_id: String,
    /// What people answered so far.
    pub decisions: Vec<protocol::Decision>,
}

/// A backend's session, as this host names it.
#[derive(Debug, Clone)]
pub struct ForeignRow {
    /// The agent that holds it.
    pub provider: String,
    /// Its row.
    pub row: protocol::Listed,
}

/// The host's own record of a chat.
pub struct ChatMeta {
    /// The session it belongs to.
    pub session: String,
    /// The id the backend keeps the conversation under.
    pub conversation_id: String,
    /// The backend has this conversation on record (a restart resumes rather than starts it).
    pub started_in_backend: bool,
    /// Operations for the backend, in order (the host's alone to send).
    driver: mpsc::UnboundedSender<Op>,
    /// The worker incarnation the backend session lives in; actions from any other are dropped.
    pub live: Option<u64>,
    /// When the running turn began, for durations the host measures itself.
    pub turn_clock: Option<(String, Instant)>,
    /// A client's own action started the running turn. Else the host or the backend began it, at
    /// a moment no client chose (a turn's end, a clock), so a client's message that meets it is
    /// queued behind it rather than refused (`actions.rs`).
    pub client_started: bool,
    /// The running turn whose prompt is on its way to the worker (queued for the driver or being
    /// sent), not yet taken: a worker that dies meanwhile leaves it to the driver (`driver.rs`).
    pub handing_over: Option<String>,
    /// Turns that ended recently, so a late ending from the backend is recognised and dropped.
    pub ended: VecDeque<String>,
    /// A steering message handed to the backend that it has not taken yet.
    pub steering_offered: Option<String>,
    /// The chat's first turn names it (the deferred title strategy).
    pub titled: bool,
    /// Its title in the session's catalogue.
    pub title: String,
    /// Its place among the session's chats.
    pub position: i64,
    /// What the backend wrote each turn down as (turn id → transcript id).
    pub transcripts: std::collections::HashMap<String, String>,
    /// Who sent each turn (`user:<id>`, `root`), and who left each pending message.
    pub senders: std::collections::HashMap<String, String>,
    /// Calls of clients' tools waiting for their client, by tool call id.
    pub client_calls: std::collections::HashMap<String, ClientCall>,
    /// The agent it runs, when that is not its session's.
    pub harness: Option<crate::store::records::Harness>,
    /// The folder it works in, when that is not its session's (`isolate_session`).
    pub working_directory: Option<PathBuf>,
    /// A cut of the conversation the backend has not put on record yet (a truncation, or the
    /// fork the chat began as): every start of its backend session carries it until then.
    pub cut: Option<protocol::Cut>,
    /// The backend said this conversation resumes once closed (`CreateResult.resumable`).
    pub resumable: bool,
    /// A turn restored at start-up whose backend lost the questions it had parked: what people
    /// answer, handed over with `session/resumeTurn` once every question is answered.
    pub parked: Option<ParkedTurn>,
}

/// Everything under the host's lock. Its fields are the host's own: the tools and the doors read
/// it through the accessors in `facade.rs` and change it through the write path and the turn
/// engine.
pub struct Core {
    /// Channel states, sequence numbers, subscriptions.
    ch: Channels,
    /// Sessions by URI.
    sessions: HashMap<String, SessionMeta>,
    /// Chats by URI.
    chats: HashMap<String, ChatMeta>,
    /// Backends in the config's order.
    agents: Vec<AgentEntry>,
    /// Client ids seen by this process (reconnect replays only for these).
    known_clients: HashSet<String>,
    /// Under a users directory, the person each client id was first claimed by: nobody else may
    /// take it over (and with it the tool calls owed to it).
    client_owners: HashMap<String, String>,
    /// The session store.
    store: crate::store::Store,
    /// Chats whose running turn changed since it was last checkpointed.
    running_dirty: HashSet<String>,
    /// What memory holds and the store could not keep (`store/health.rs`), written again once it can.
    unkept: crate::store::health::Unkept,
    /// The daemon keys that apply live.
    settings: LiveSettings,
    /// The providers whose sessions do without this host's own tools.
    host_tools_withheld: std::collections::BTreeSet<String>,
    /// Each session's `/ahp-mcp` endpoint.
    endpoints: endpoints::Endpoints,
    /// Grace periods of clients whose connections closed: (session, client) → generation.
    grace: std::collections::HashMap<(String, String), u64>,
    /// The users directory; absent: nobody to ask, every caller may do everything.
    users: Option<crate::users::Users>,
    /// The agents' own sessions from the last listing, by the URI they are served under.
    foreign: std::collections::HashMap<String, ForeignRow>,
    /// The rules copied from each session's clients: session, then client id.
    client_rules: std::collections::HashMap<String, std::collections::BTreeMap<String, rules::CopiedRules>>,
    /// The configured MCP servers each session stopped (`mcpservers.rs`).
    mcp_stopped: std::collections::HashMap<String, std::collections::BTreeSet<String>>,
    /// Chats whose backend session starts again once their running turn ends (their rules or
    /// their session's folder changed meanwhile).
    restart_after_turn: HashSet<String>,
    /// Questions asked a person in a running turn for a host tool, waiting for the answer.
    questions: questions::Questions,
    /// The host's own tools: the catalogue, and the hook for turn ends.
    tools: Arc<dyn ports::Tools>,
    /// Sessions' folders and what changed in them.
    workspaces: Arc<dyn ports::Workspaces>,
    /// The host's clock (manual in tests), for what the tools count over time.
    clock: crate::clock::Clock,
    /// Chats of unloaded sessions whose drivers are still closing their backend sessions: a chat
    /// loaded again starts only once its last driver is done.
    retiring: HashMap<String, tokio_util::sync::CancellationToken>,
    /// The terminals feature (ptys and their processes), when this host serves terminals.
    terminals: Option<Arc<dyn ports::Terminals>>,
    /// The Agent Merge feature, when this host has one (`ports::AgentMerge`).
    agent_merge: Option<Arc<dyn ports::AgentMerge>>,
    /// The feature that confines sessions (a sandbox, a container), when there is one.
    boxes: Option<Arc<dyn ports::Boxes>>,
    /// What keeps content a part would carry inline, when this host keeps any (`ports::Resources`).
    resources: Option<Arc<dyn ports::Resources>>,
    /// The terminals the root lists, in the order they were opened.
    terminal_list: Vec<String>,
    /// The `!` command each chat runs or ran last: (turn id, terminal channel).
    command_turns: HashMap<String, (String, String)>,
    /// The largest attachment a message may carry, once read.
    attachment_limit: u64,
    /// Backends' streamed text held back to be merged (`deltas.rs`).
    deltas: deltas::Coalescer,
    /// Open backend sessions under `maxBackendProcesses` (`budget.rs`).
    budget: budget::Budget,
    /// The remote hosts feature, when remotes are configured (`ports::Remotes`).
    remotes: Option<Arc<dyn ports::Remotes>>,
    /// The automations feature, when this host keeps automations (`ports::Automations`).
    automations: Option<Arc<dyn ports::Automations>>,
    /// Channels another host runs, mirrored here (`mirrors.rs`).
    mirrored: HashSet<String>,
    /// The agents the remotes offer, listed after this host's own.
    remote_agents: Vec<AgentInfo>,
}

/// The host; cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

/// A [`Host`] that does not keep it alive.
#[derive(Clone)]
pub struct WeakHost(Weak<Inner>);

impl WeakHost {
    /// The host, while it lives.
    pub fn upgrade(&self) -> Option<Host> {
        self.0.upgrade().map(|inner| Host { inner })
    }
}

struct Inner {
    core: Mutex<Core>,
    supervisor: Supervisor,
    config: HostConfig,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Host {
    /// A host for the given backends, offering `features.tools` as its own and keeping sessions'
    /// folders with `features.workspaces`; call [`Host::run_events`] to start handling what
    /// workers say.
    pub fn new(
        config: HostConfig,
        store: crate::store::Store,
        supervisor: Supervisor,
        features: ports::Features,
        cancel: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        let ports::Features { tools, workspaces } = features;
        let agents = supervisor.providers().into_iter().map(|provider| AgentEntry::new(provider, &store)).collect();
        let stored = store.count().unwrap_or_else(|e| {
            tracing::error!("{e}");
            0
        });
        let root = RootState {
            agents: Vec::new(),
            active_sessions: Some(stored),
            terminals: None,
            config: config.root_config.clone(),
            meta: None,
        };
        let core = Core {
            ch: Channels::new(root, config.replay_capacity),
            sessions: HashMap::new(),
            chats: HashMap::new(),
            agents,
            known_clients: HashSet::new(),
            client_owners: HashMap::new(),
            store,
            running_dirty: HashSet::new(),
            unkept: Default::default(),
            settings: config.settings.clone(),
            host_tools_withheld: config.host_tools_withheld.clone(),
            endpoints: endpoints::Endpoints::default(),
            grace: std::collections::HashMap::new(),
            users: config.users.clone(),
            foreign: std::collections::HashMap::new(),
            client_rules: std::collections::HashMap::new(),
            mcp_stopped: std::collections::HashMap::new(),
            restart_after_turn: HashSet::new(),
            questions: Default::default(),
            tools,
            workspaces,
            clock: config.clock.clone(),
            retiring: HashMap::new(),
            terminals: None,
            agent_merge: None,
            boxes: None,
            resources: None,
            terminal_list: Vec::new(),
            command_turns: HashMap::new(),
            attachment_limit: config.attachment_limit,
            deltas: deltas::Coalescer::default(),
            budget: budget::Budget::default(),
            remotes: None,
            automations: None,
            mirrored: HashSet::new(),
            remote_agents: Vec::new(),
        };
        Self { inner: Arc::new(Inner { core: Mutex::new(core), supervisor, config, cancel, tracker }) }
    }

    /// A handle that does not keep the host alive (for a feature's tasks, which the host holds).
    pub fn downgrade(&self) -> WeakHost {
        WeakHost(Arc::downgrade(&self.inner))
    }

    /// Locks the host's state. Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic under the lock leaves state that was being changed; keep serving rather than
        // take every client down with it.
        lock(&self.inner.core)
    }

    /// The settings.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// The worker supervisor.
    pub fn supervisor(&self) -> &Supervisor {
        &self.inner.supervisor
    }

    /// The daemon's cancellation token.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Spawns a tracked task that stops with the daemon.
    pub fn spawn<F>(&self, name: &'static str, future: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let cancel = self.inner.cancel.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => tracing::trace!(task = name, "stopped with the daemon"),
                _ = future => {}
            }
        });
    }

    /// Registers a connection; frames for it go to `tx`; `kick` drops it.
    pub fn connect(
        &self,
        tx: mpsc::Sender<Frame>,
        kick: CancellationToken,
        principal: crate::users::Principal,
    ) -> ConnId {
        self.lock().ch.add_conn(tx, kick, principal)
    }

    /// Forgets a connection.
    pub fn disconnect(&self, id: ConnId) {
        let mut core = self.lock();
        if let Some(entry) = core.ch.remove_conn(id) {
            tracing::debug!(conn = id, client = ?entry.client_id, "connection closed");
            if let Some(client_id) = &entry.client_id {
                let watched: Vec<String> = entry.subs.iter().cloned().collect();
                self.client_connection_closed(&mut core, client_id, &watched);
            }
        }
    }

    /// Handles what workers say until the daemon stops.
    pub fn run_events(&self, mut events: mpsc::UnboundedReceiver<WorkerEvent>) {
        let host = self.clone();
        self.spawn("worker events", async move {
            while let Some(event) = events.recv().await {
                host.on_worker_event(event);
            }
        });
    }

    fn on_worker_event(&self, event: WorkerEvent) {
        match event {
            WorkerEvent::Ready { provider, descriptor, schema, .. } => self.agent_ready(&provider, descriptor, schema),
            WorkerEvent::Probed { provider, probe, schema } => self.agent_probed(&provider, probe, schema),
            WorkerEvent::Emit { incarnation, params, .. } => self.backend_emit(incarnation, params),
            WorkerEvent::TurnRecorded { params, incarnation, .. } => self.turn_recorded(incarnation, params),
            WorkerEvent::SubagentStarted { params, incarnation, .. } => self.subagent_started(incarnation, params),
            WorkerEvent::ToolRun { params, responder, .. } => self.run_backend_call(params, responder),
            WorkerEvent::KeepResource { incarnation, params, .. } => self.keep_resource(incarnation, params),
            WorkerEvent::KeepTerminal { incarnation, params, .. } => {
                let mut core = self.lock();
                // Only the worker that holds the chat keeps outputs for it.
                if core.chats.get(&params.chat).and_then(|m| m.live) == Some(incarnation) {
                    core.keep_backend_output(params, self.config().terminals.scrollback_bytes);
                }
            }
            WorkerEvent::Exited { provider, incarnation, reason } => {
                self.worker_exited(&provider, incarnation, &reason)
            }
        }
    }

    /// The backend wrote a turn down: under the id it first said (a steering message written
    /// down later belongs to the same turn), and a cut waiting for its record is on it now.
    fn turn_recorded(&self, incarnation: u64, params: protocol::TurnRecordedParams) {
        let mut core = self.lock();
        let Some(meta) = core.chats.get_mut(&params.chat).filter(|m| m.live == Some(incarnation)) else { return };
        meta.transcripts.entry(params.turn_id).or_insert(params.transcript_id);
        core.cut_kept(&params.chat);
    }

    fn agent_ready(&self, provider: &str, mut descriptor: AgentDescriptor, mut schema: SchemaResult) {
        let mut core = self.lock();
        if let Some(learned) = core.agent(provider).and_then(|a| a.capabilities.clone()) {
            descriptor.capabilities = Some(learned);
        }
        if descriptor.features.probe && schema.schema.properties.is_empty() {
            // A worker that knows its controls only once it has asked its agent (ACP): what the
            // agent offered when last probed stands until the probe answers again.
            if let Some(remembered) = core.agent(provider).and_then(|a| a.remembered.clone()) {
                schema = remembered;
            }
        }
        mark_dynamic(provider, &descriptor, &mut schema);
        // The host's own settings (isolation, …) join every agent's.
        core.workspaces.extend_schema(provider, &mut schema);
        if let Some(entry) = core.agents.iter_mut().find(|a| a.provider == provider) {
            entry.descriptor = Some(descriptor);
            entry.schema = Some(schema);
        }
        core.publish_agents();
        // The agents a session may start are part of create_session's schema.
        self.offers_changed(&mut core);
    }

    fn agent_probed(&self, provider: &str, probe: protocol::ProbeResult, schema: Option<protocol::SchemaResult>) {
        let mut core = self.lock();
        core.remember_offers(provider, &probe, schema.as_ref());
        let schema = schema.map(|mut schema| {
            core.workspaces.extend_schema(provider, &mut schema);
            schema
        });
        if let Some(entry) = core.agents.iter_mut().find(|a| a.provider == provider) {
            if let Some(mut schema) = schema {
                if let Some(descriptor) = &entry.descriptor {
                    mark_dynamic(provider, descriptor, &mut schema);
                }
                // What later sessions start with, and what a client may change from now on.
                entry.schema = Some(schema);
            }
            entry.commands = probe.commands;
            if probe.attachments.is_some() {
                entry.attachments = probe.attachments;
            }
            if let Some(capabilities) = probe.capabilities {
                if let Some(descriptor) = entry.descriptor.as_mut() {
                    descriptor.capabilities = Some(capabilities.clone());
                }
                entry.capabilities = Some(capabilities);
            }
            entry.offer_models(probe.models);
        }
        core.publish_agents();
        core.publish_commands(provider);
        core.account_said(provider, probe.account);
    }

    fn run_backend_call(&self, params: protocol::ToolRunParams, responder: agent_runner::rpc::Responder) {
        let host = self.clone();
        self.spawn("tool call", async move {
            let outcome = host.run_tool_for_chat(params).await;
            responder.ok(outcome);
        });
    }
}

impl Core {
    /// The root state's agent list from what the workers said, sent if it changed.
    pub fn publish_agents(&mut self) {
        let agents: Vec<AgentInfo> = self
            .agents
            .iter()
            .filter_map(|entry| {
                let d = entry.descriptor.as_ref()?;
                Some(AgentInfo {
                    provider: entry.provider.clone(),
                    display_name: d.display_name.clone(),
                    description: d.description.clone().unwrap_or_default(),
                    models: entry.models.clone(),
                    protected_resources: None,
                    customizations: None,
                    capabilities: d.capabilities.clone(),
                })
            })
            .chain(self.remote_agents.iter().cloned())
            .collect();
        if agents != self.ch.root.agents {
            let action =
                ahp_types::actions::StateAction::RootAgentsChanged(ahp_types::actions::RootAgentsChangedAction {
                    agents,
                });
            self.apply(ahp_types::ROOT_RESOURCE_URI, action, None, None);
        }
    }

    /// The entry for a provider.
    pub fn agent(&self, provider: &str) -> Option<&AgentEntry> {
        self.agents.iter().find(|a| a.provider == provider)
    }

    /// The feature that keeps sessions' folders and what changed in them.
    pub fn workspaces(&self) -> Arc<dyn ports::Workspaces> {
        self.workspaces.clone()
    }

    /// The sessions' tools endpoints.
    pub fn endpoints(&self) -> &endpoints::Endpoints {
        &self.endpoints
    }

    /// The sessions' tools endpoints, to open one or say where they are served.
    pub fn endpoints_mut(&mut self) -> &mut endpoints::Endpoints {
        &mut self.endpoints
    }
}

/// Marks the keys of its own schema a backend answers completions for as `enumDynamic` (seed 004:
/// a client then asks `sessionConfigCompletions` rather than take it for a fact typed in); a key
/// it names that its schema does not declare is skipped, and said in the log.
fn mark_dynamic(provider: &str, descriptor: &AgentDescriptor, schema: &mut SchemaResult) {
    for key in &descriptor.features.completions {
        match schema.schema.properties.get_mut(key) {
            Some(property) => property.enum_dynamic = Some(true),
            None => tracing::warn!(
                provider,
                key,
                "the agent answers completions for a key its schema does not declare; skipped"
            ),
        }
    }
}

/// Milliseconds elapsed since `since`, as AHP's `duration` wants them.
pub fn millis_since(since: Instant) -> i64 {
    i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// Now, as an RFC 3339 timestamp with milliseconds.
pub fn now_iso() -> String {
    agent_runner::now_iso()
}

/// Keeps `ids` bounded while remembering the newest.
pub fn remember(ids: &mut VecDeque<String>, id: String) {
    if ids.len() == 16 {
        ids.pop_front();
    }
    ids.push_back(id);
}

/// A fresh id for something the host makes.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The id part of an `ahp-session:/<id>` or `ahp-chat:/<id>` URI.
pub fn uri_id(uri: &str) -> &str {
    uri.rsplit_once(":/").map(|(_, id)| id).unwrap_or(uri)
}

impl Host {
    /// With a users directory: the principal a presented token makes a connection (`Root` for the
    /// deployment's own token, a person for theirs, `Nobody` for none), or `Err` for a token that
    /// is nobody's. Without one: `None` (the door's token check alone decides).
    pub fn person_of_token(&self, offered: Option<&str>) -> Option<Result<crate::users::Principal, ()>> {
        use crate::users::Principal;
        let mut core = self.lock();
        core.users.as_ref()?;
        core.refresh_users();
        let users = core.users.as_mut()?;
        let Some(token) = offered else { return Some(Ok(Principal::Nobody)) };
        if self
            .config()
            .root_token
            .as_deref()
            .is_some_and(|root| crate::users::constant_time_eq(root.as_bytes(), token.as_bytes()))
        {
            return Some(Ok(Principal::Root));
        }
        Some(users.person_of(token).map(Principal::Person).ok_or(()))
    }
}

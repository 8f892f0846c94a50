//! One remote host's link: this daemon as an AHP client of the remote, opened as its entry says,
//! kept up with backoff, and caught up by `reconnect` when it comes back (a replay relayed
//! envelope by envelope, or the snapshots of a remote that restarted).
//!
//! What the link keeps is only what routing and relaying need: the remote's root (its agents and
//! terminals), its sessions' summaries and chats (which channels are whose), the channels mirrored
//! here with the sequence number each was seeded at, and the relayed actions waiting for their
//! echo. The channels' states themselves are the host's (`host/mirrors.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_runner::lock;
use agent_runner::rpc::{Incoming, Peer, PeerError};
use ahp::reducers::apply_action_to_root;
use ahp_types::actions::{ActionEnvelope, ActionOrigin, StateAction};
use ahp_types::commands::{InitializeResult, ReconnectResult};
use ahp_types::state::{AgentInfo, RootState, Snapshot, SnapshotState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};

use super::spec::RemoteSpec;
use super::transport::{self, Opened};
use super::Remotes;
use crate::host::facade::{AhpError, WeakHost, CHANGESET_SCHEME};
use crate::host::{Core, Host};

/// How a link is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    /// Opening for the first time.
    Connecting,
    /// Up.
    Connected,
    /// Down, tried again with backoff; why it went down.
    Reconnecting(String),
    /// The remote refused this host (a wrong token); tried again all the same, with backoff.
    Refused(String),
}

impl std::fmt::Display for LinkStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkStatus::Connecting => f.write_str("connecting"),
            LinkStatus::Connected => f.write_str("connected"),
            LinkStatus::Reconnecting(why) => write!(f, "reconnecting: {why}"),
            LinkStatus::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

/// A channel mirrored here, or on its way.
enum Mirror {
    /// Subscribed on the remote, its snapshot not here yet: what the remote says on it meanwhile.
    Opening(Vec<ActionEnvelope>),
    /// Seeded from the remote's snapshot taken at this sequence number.
    Open(u64),
}

/// A relayed action waiting for its echo: who sent it here, under which origin (none for the
/// host's own), and, for the host's own, who waits to hear how the remote took it.
struct Echo {
    sender: Option<(u64, ActionOrigin)>,
    answer: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    /// What was relayed, to refuse it to its sender if the link loses it.
    channel: String,
    action: StateAction,
}

/// What the link knows, under its lock.
struct State {
    status: LinkStatus,
    peer: Option<Peer>,
    /// The last remote `serverSeq` relayed (what a `reconnect` resumes after).
    last_seq: u64,
    root: Option<RootState>,
    /// The remote's sessions, as its root says them (its provider names).
    sessions: BTreeMap<String, Value>,
    /// Sessions created through this link whose `root/sessionAdded` has not come yet.
    claimed: HashSet<String>,
    /// Chat → its session.
    chats: HashMap<String, String>,
    /// Terminals the remote lists or this link created.
    terminals: HashSet<String>,
    channels: HashMap<String, Mirror>,
    pending: HashMap<i64, Echo>,
    next_client_seq: i64,
}

/// One remote host.
pub struct Link {
    spec: RemoteSpec,
    /// This daemon's `clientId` at the remote, the same across reconnects (a replay needs it).
    client_id: String,
    state: Mutex<State>,
    /// A channel finished opening (or failed to).
    opened: tokio::sync::Notify,
}

impl Link {
    /// A link not opened yet.
    pub fn new(spec: RemoteSpec) -> Arc<Self> {
        let client_id = format!("ahpd-link-{}-{}", spec.name, crate::host::facade::new_id());
        Arc::new(Self {
            spec,
            client_id,
            state: Mutex::new(State {
                status: LinkStatus::Connecting,
                peer: None,
                last_seq: 0,
                root: None,
                sessions: BTreeMap::new(),
                claimed: HashSet::new(),
                chats: HashMap::new(),
                terminals: HashSet::new(),
                channels: HashMap::new(),
                pending: HashMap::new(),
                next_client_seq: 1,
            }),
            opened: tokio::sync::Notify::new(),
        })
    }

    /// The remote's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its entry.
    pub fn spec(&self) -> &RemoteSpec {
        &self.spec
    }

    /// How the link is now.
    pub fn status(&self) -> LinkStatus {
        lock(&self.state).status.clone()
    }

    /// The remote's agents as this host offers them: `<agent>@<name>`, "<display name> (<name>)".
    pub fn agents(&self) -> Vec<AgentInfo> {
        let state = lock(&self.state);
        let Some(root) = &state.root else { return Vec::new() };
        root.agents
            .iter()
            .map(|agent| AgentInfo {
                provider: format!("{}@{}", agent.provider, self.spec.name),
                display_name: format!("{} ({})", agent.display_name, self.spec.name),
                ..agent.clone()
            })
            .collect()
    }

    /// The remote's sessions as this host lists them (the provider named as here).
    pub fn sessions(&self) -> Vec<Value> {
        lock(&self.state).sessions.values().map(|summary| self.renamed(summary.clone())).collect()
    }

    /// A summary with its provider named as here.
    fn renamed(&self, mut summary: Value) -> Value {
        if let Some(provider) = summary.get("provider").and_then(Value::as_str) {
            summary["provider"] = Value::String(format!("{provider}@{}", self.spec.name));
        }
        summary
    }

    /// True when this remote holds `key`: a provider `<agent>@<name>`, or a channel of its.
    pub fn holds(&self, key: &str) -> bool {
        if !key.contains(':') {
            return key.rsplit_once('@').is_some_and(|(agent, name)| !agent.is_empty() && name == self.spec.name);
        }
        let state = lock(&self.state);
        let session_held = |session: &str| state.sessions.contains_key(session) || state.claimed.contains(session);
        if state.channels.contains_key(key) || session_held(key) || state.chats.contains_key(key) {
            return true;
        }
        if let Some(session) = key.strip_suffix("/annotations") {
            return session_held(session);
        }
        if let Some(rest) = key.strip_prefix(CHANGESET_SCHEME) {
            let mut parts = rest.split('/');
            return match (parts.next(), parts.next()) {
                (Some("session"), Some(id)) => session_held(&format!("ahp-session:/{id}")),
                (Some("chat"), Some(id)) => state.chats.contains_key(&format!("ahp-chat:/{id}")),
                _ => false,
            };
        }
        state.terminals.contains(key)
    }

    /// The sentence a command or action on this remote gets while its link is down.
    fn not_connected(&self, state: &State) -> String {
        format!("{} is not connected ({})", self.spec.name, state.status)
    }

    /// The peer, while connected.
    fn connected_peer(&self) -> Result<Peer, String> {
        let state = lock(&self.state);
        match (&state.status, &state.peer) {
            (LinkStatus::Connected, Some(peer)) => Ok(peer.clone()),
            _ => Err(self.not_connected(&state)),
        }
    }

    /// Keeps the link up until the daemon stops: opened, served until it drops, opened again
    /// after a backoff that grows with each failure and starts again after a stable run.
    pub async fn run(self: Arc<Self>, host: WeakHost, feature: Arc<Remotes>) {
        let mut failures = 0u32;
        loop {
            let why = match transport::open(&self.spec.name, &self.spec.reach).await {
                Err(why) => {
                    failures = failures.saturating_add(1);
                    why
                }
                Ok(opened) => {
                    let began = Instant::now();
                    let why = self.serve(&host, &feature, opened).await;
                    // A cut after a healthy spell is tried again soon; cuts in quick
                    // succession back off.
                    failures = if began.elapsed() >= HEALTHY { 0 } else { failures.saturating_add(1) };
                    why
                }
            };
            let wait = retry_after(failures);
            tracing::warn!(remote = %self.spec.name, "the link to the remote host is down: {why}");
            {
                let mut state = lock(&self.state);
                state.peer = None;
                // Whoever waits on the host's own action hears now; a replay may still carry it.
                for echo in state.pending.values_mut() {
                    if let Some(answer) = echo.answer.take() {
                        let _ = answer.send(Err(format!(
                            "the link to {} dropped before it answered ({why}); it may still take it",
                            self.spec.name
                        )));
                    }
                }
                let said = format!("{why}; {}", next_try(wait));
                state.status = if why.contains("HTTP 401") || why.contains("HTTP 403") {
                    LinkStatus::Refused(said)
                } else {
                    LinkStatus::Reconnecting(said)
                };
            }
            let Some(host) = host.upgrade() else { return };
            feature.publish(&host);
            drop(host);
            tokio::time::sleep(wait).await;
        }
    }

    /// Serves one open link: the handshake, then what the remote says, until it ends; answers
    /// why it ended.
    async fn serve(&self, weak: &WeakHost, feature: &Arc<Remotes>, opened: Opened) -> String {
        let Opened { peer, mut incoming, child } = opened;
        let Some(host) = weak.upgrade() else { return "the daemon is stopping".into() };
        if let Err(why) = self.handshake(&host, &peer).await {
            return how_it_ended(why, child.as_ref()).await;
        }
        self.refuse_lost(&host);
        {
            let mut state = lock(&self.state);
            state.peer = Some(peer.clone());
            state.status = LinkStatus::Connected;
        }
        tracing::info!(remote = %self.spec.name, reach = %self.spec.reach.describe(), "the link to the remote host is up");
        feature.publish(&host);
        drop(host);
        loop {
            tokio::select! {
                message = incoming.recv() => match message {
                    Some(message) => self.on_incoming(weak, feature, message),
                    None => break,
                },
                end = peer.ended() => {
                    while let Ok(message) = incoming.try_recv() {
                        self.on_incoming(weak, feature, message);
                    }
                    return how_it_ended(format!("the link closed: {end}"), child.as_ref()).await;
                }
            }
        }
        how_it_ended("the link closed".into(), child.as_ref()).await
    }

    /// The relayed actions whose echo did not come before the link dropped nor in what the
    /// remote said since (a replay holds every echo it gave; snapshots hold none): each sender is
    /// told, rather than wait for ever.
    fn refuse_lost(&self, host: &Host) {
        let lost: Vec<Echo> = lock(&self.state).pending.drain().map(|(_, echo)| echo).collect();
        if lost.is_empty() {
            return;
        }
        let name = &self.spec.name;
        let why = format!(
            "the link to {name} dropped before {name} answered this; look at the session before sending it again"
        );
        let mut core = host.lock();
        for echo in lost {
            if let Some(answer) = echo.answer {
                let _ = answer.send(Err(why.clone()));
            }
            if let Some((conn, origin)) = echo.sender {
                core.refuse_relayed(conn, &echo.channel, &echo.action, origin, &why);
            }
        }
    }

    /// `reconnect` where this link has seen the remote before (a replay, or snapshots), else
    /// `initialize` and a fresh subscribe of every mirrored channel; then the sessions listed.
    async fn handshake(&self, host: &Host, peer: &Peer) -> Result<(), String> {
        let (last_seq, mut subscriptions) = {
            let state = lock(&self.state);
            let open: Vec<String> = state.channels.keys().cloned().collect();
            (state.last_seq, open)
        };
        subscriptions.insert(0, ROOT_RESOURCE_URI.to_owned());
        let resumed = if last_seq > 0 {
            let params = json!({
                "channel": ROOT_RESOURCE_URI,
                "clientId": self.client_id,
                "lastSeenServerSeq": last_seq,
                "subscriptions": subscriptions,
            });
            match peer.request::<_, ReconnectResult>("reconnect", params).await {
                Ok(result) => {
                    self.caught_up(host, result, &subscriptions);
                    true
                }
                Err(PeerError::Rpc(e)) => {
                    tracing::info!(remote = %self.spec.name, "the remote would not resume ({}); starting afresh", e.message);
                    false
                }
                Err(e) => return Err(e.to_string()),
            }
        } else {
            false
        };
        if !resumed {
            self.initialize(host, peer).await?;
        }
        self.list_sessions(host, peer).await
    }

    async fn initialize(&self, host: &Host, peer: &Peer) -> Result<(), String> {
        let params = json!({
            "channel": ROOT_RESOURCE_URI,
            "clientId": self.client_id,
            "protocolVersions": [ahp_types::PROTOCOL_VERSION],
            "initialSubscriptions": [ROOT_RESOURCE_URI],
            "clientInfo": {"name": "ahpd", "version": env!("CARGO_PKG_VERSION")},
        });
        let result: InitializeResult = peer.request("initialize", params).await.map_err(|e| match e {
            PeerError::Rpc(e) => format!("the remote refused the handshake: {}", e.message),
            other => other.to_string(),
        })?;
        let channels: Vec<String> = {
            let mut state = lock(&self.state);
            state.last_seq = u64::try_from(result.server_seq).unwrap_or(0);
            for snapshot in result.snapshots {
                if let SnapshotState::Root(root) = snapshot.state {
                    state.terminals.extend(root_terminals(&root));
                    state.root = Some(*root);
                }
            }
            state.channels.keys().cloned().collect()
        };
        // What was mirrored is mirrored again, from the remote's state now.
        for channel in channels {
            match self.subscribe(peer, &channel).await {
                Ok(snapshot) => self.seed(host, snapshot),
                Err(_) => self.forget(host, &channel),
            }
        }
        Ok(())
    }

    /// What `reconnect` answered: a replay relayed envelope by envelope, or snapshots that
    /// replace what is mirrored (a channel absent from either is gone there).
    fn caught_up(&self, host: &Host, result: ReconnectResult, asked: &[String]) {
        match result {
            ReconnectResult::Replay(replay) => {
                let weak = host.downgrade();
                for envelope in replay.actions {
                    self.on_envelope(&weak, None, envelope);
                }
                for gone in replay.missing {
                    self.forget(host, &gone);
                }
            }
            ReconnectResult::Snapshot(result) => {
                // Numbered afresh (a remote that restarted counts from its own start): what comes
                // next follows these snapshots, whatever was seen before.
                let now = result.snapshots.iter().map(|s| u64::try_from(s.from_seq).unwrap_or(0)).max().unwrap_or(0);
                // Past what could be replayed, the echoes still awaited will not come: their
                // senders are told once the handshake is done (`refuse_lost`).
                lock(&self.state).last_seq = now;
                let mut seen = HashSet::new();
                for snapshot in result.snapshots {
                    seen.insert(snapshot.resource.clone());
                    if let SnapshotState::Root(root) = snapshot.state {
                        let mut state = lock(&self.state);
                        state.terminals.extend(root_terminals(&root));
                        state.root = Some(*root);
                    } else {
                        self.seed(host, snapshot);
                    }
                }
                for gone in asked.iter().filter(|c| !seen.contains(*c)) {
                    self.forget(host, gone);
                }
            }
        }
    }

    /// Lists the remote's sessions (every page) and tells this host's root watchers what changed.
    async fn list_sessions(&self, host: &Host, peer: &Peer) -> Result<(), String> {
        let mut listed = BTreeMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = json!({"channel": ROOT_RESOURCE_URI});
            if let Some(cursor) = &cursor {
                params["cursor"] = json!(cursor);
            }
            let page: Value = peer.request_value("listSessions", params).await.map_err(|e| e.to_string())?;
            for item in page["items"].as_array().into_iter().flatten() {
                if let Some(uri) = item["resource"].as_str() {
                    listed.insert(uri.to_owned(), item.clone());
                }
            }
            match page["nextCursor"].as_str() {
                Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_owned()),
                _ => break,
            }
        }
        let mut state = lock(&self.state);
        let before = std::mem::take(&mut state.sessions);
        for summary in listed.values() {
            track_summary(&mut state, summary);
        }
        state.sessions = listed;
        let added: Vec<Value> =
            state.sessions.iter().filter(|(uri, _)| !before.contains_key(*uri)).map(|(_, s)| s.clone()).collect();
        let removed: Vec<String> = before.keys().filter(|uri| !state.sessions.contains_key(*uri)).cloned().collect();
        drop(state);
        let mut core = host.lock();
        for summary in added {
            let params = json!({"channel": ROOT_RESOURCE_URI, "summary": self.renamed(summary)});
            core.announce_remote("root/sessionAdded", &params);
        }
        for session in removed {
            core.announce_remote("root/sessionRemoved", &json!({"channel": ROOT_RESOURCE_URI, "session": session}));
        }
        Ok(())
    }

    /// Subscribes to `channel` on the remote and answers its snapshot.
    async fn subscribe(&self, peer: &Peer, channel: &str) -> Result<Snapshot, AhpError> {
        let answer = peer.request_value("subscribe", json!({"channel": channel})).await.map_err(|e| self.error(e))?;
        let snapshot = answer.get("snapshot").cloned().unwrap_or(Value::Null);
        serde_json::from_value(snapshot)
            .map_err(|e| AhpError::internal(format!("{} answered a snapshot that does not read: {e}", self.spec.name)))
    }

    /// Makes sure `channel` is mirrored here: subscribed on the remote and seeded from its snapshot
    /// (one subscribe, however many clients ask at once).
    pub async fn open(&self, host: &Host, channel: &str) -> Result<(), AhpError> {
        let peer = loop {
            let notified = self.opened.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.state);
                match state.channels.get(channel) {
                    Some(Mirror::Open(_)) => return Ok(()),
                    Some(Mirror::Opening(_)) => {}
                    None => {
                        let peer = match (&state.status, &state.peer) {
                            (LinkStatus::Connected, Some(peer)) => peer.clone(),
                            _ => return Err(AhpError::not_found(self.not_connected(&state))),
                        };
                        state.channels.insert(channel.to_owned(), Mirror::Opening(Vec::new()));
                        break peer;
                    }
                }
            }
            notified.await;
        };
        let result = match self.subscribe(&peer, channel).await {
            Ok(snapshot) => {
                self.seed(host, snapshot);
                Ok(())
            }
            Err(e) => {
                lock(&self.state).channels.remove(channel);
                Err(e)
            }
        };
        self.opened.notify_waiters();
        result
    }

    /// Seeds (or replaces) the mirror of a channel from the remote's snapshot, then relays what
    /// the remote said on it meanwhile, past the snapshot.
    fn seed(&self, host: &Host, mut snapshot: Snapshot) {
        let channel = snapshot.resource.clone();
        let from = u64::try_from(snapshot.from_seq).unwrap_or(0);
        let mut state = lock(&self.state);
        if let SnapshotState::Session(session) = &mut snapshot.state {
            for chat in &session.chats {
                state.chats.insert(chat.resource.clone(), channel.clone());
            }
            session.provider = format!("{}@{}", session.provider, self.spec.name);
        }
        let waiting = match state.channels.insert(channel, Mirror::Open(from)) {
            Some(Mirror::Opening(waiting)) => waiting,
            _ => Vec::new(),
        };
        let mut core = host.lock();
        core.seed_mirror(snapshot);
        for envelope in waiting.into_iter().filter(|e| e.server_seq > from) {
            self.deliver(&mut state, &mut core, envelope);
        }
    }

    /// Stops mirroring a channel nobody here watches: unsubscribed there, forgotten here.
    pub fn let_go(&self, host: &Host, channel: &str) {
        let peer = {
            let mut state = lock(&self.state);
            if !matches!(state.channels.get(channel), Some(Mirror::Open(_))) {
                return;
            }
            state.channels.remove(channel);
            state.peer.clone()
        };
        if let Some(peer) = peer {
            peer.notify("unsubscribe", json!({"channel": channel}));
        }
        host.lock().forget_mirror(channel);
        tracing::debug!(remote = %self.spec.name, channel, "let go of a remote channel nobody here watches");
    }

    /// Forgets a channel the remote no longer has.
    fn forget(&self, host: &Host, channel: &str) {
        lock(&self.state).channels.remove(channel);
        host.lock().forget_mirror(channel);
    }

    /// Something the remote said that is not an answer.
    fn on_incoming(&self, weak: &WeakHost, feature: &Arc<Remotes>, message: Incoming) {
        match message {
            Incoming::Request(request) => {
                // The remote asks its clients for files and plugins (`resource*`): this host
                // lends it none of its clients'.
                let why = format!("ahpd relays no {} to a remote host", request.method);
                request.responder.err(protocol::RpcError::new(protocol::codes::METHOD_NOT_FOUND, why));
            }
            Incoming::Notification { method, params } => match method.as_str() {
                "action" => match serde_json::from_value::<ActionEnvelope>(params) {
                    Ok(envelope) => self.on_envelope(weak, Some(feature), envelope),
                    Err(e) => tracing::debug!(remote = %self.spec.name, "an action that does not read: {e}"),
                },
                "root/sessionAdded" | "root/sessionRemoved" | "root/sessionSummaryChanged" => {
                    if let Some(host) = weak.upgrade() {
                        self.on_catalogue(&host, &method, params);
                    }
                }
                _ => {}
            },
        }
    }

    /// A change to the remote's catalogue: kept, and told to this host's root watchers.
    fn on_catalogue(&self, host: &Host, method: &str, mut params: Value) {
        let mut state = lock(&self.state);
        let mut gone = Vec::new();
        match method {
            "root/sessionAdded" => {
                let summary = params["summary"].clone();
                if let Some(uri) = summary["resource"].as_str() {
                    state.claimed.remove(uri);
                    track_summary(&mut state, &summary);
                    state.sessions.insert(uri.to_owned(), summary.clone());
                }
                params["summary"] = self.renamed(summary);
            }
            "root/sessionRemoved" => {
                if let Some(session) = params["session"].as_str() {
                    state.sessions.remove(session);
                    gone = channels_of_session(&state, session);
                    for channel in &gone {
                        state.channels.remove(channel);
                    }
                    state.chats.retain(|_, s| s != session);
                }
            }
            _ => {
                if let (Some(session), Some(changes)) = (params["session"].as_str(), params["changes"].as_object()) {
                    if let Some(summary) = state.sessions.get_mut(session).and_then(Value::as_object_mut) {
                        for (key, value) in changes {
                            summary.insert(key.clone(), value.clone());
                        }
                    }
                    let summary = state.sessions.get(session).cloned().unwrap_or(Value::Null);
                    track_summary(&mut state, &summary);
                }
            }
        }
        let mut core = host.lock();
        for channel in gone {
            core.forget_mirror(&channel);
        }
        core.announce_remote(method, &params);
    }

    /// An action the remote said: the root's kept here, a mirrored channel's relayed.
    fn on_envelope(&self, weak: &WeakHost, feature: Option<&Arc<Remotes>>, envelope: ActionEnvelope) {
        let mut state = lock(&self.state);
        if envelope.server_seq <= state.last_seq {
            return;
        }
        state.last_seq = envelope.server_seq;
        if envelope.channel == ROOT_RESOURCE_URI {
            let changed_agents = matches!(envelope.action, StateAction::RootAgentsChanged(_));
            if let Some(root) = state.root.as_mut() {
                apply_action_to_root(root, &envelope.action);
                let terminals = root_terminals(root);
                state.terminals.extend(terminals);
            }
            drop(state);
            if let (true, Some(feature), Some(host)) = (changed_agents, feature, weak.upgrade()) {
                feature.publish(&host);
            }
            return;
        }
        match state.channels.get_mut(&envelope.channel) {
            None => return,
            Some(Mirror::Opening(waiting)) => {
                waiting.push(envelope);
                return;
            }
            Some(Mirror::Open(from)) if envelope.server_seq <= *from => return,
            Some(Mirror::Open(_)) => {}
        }
        let Some(host) = weak.upgrade() else { return };
        let mut core = host.lock();
        self.deliver(&mut state, &mut core, envelope);
    }

    /// Relays one envelope of a mirrored channel to the host: an echo of a client's action here
    /// answers that client under its own origin (or refuses it); anything else is committed as
    /// the remote said it.
    fn deliver(&self, state: &mut State, core: &mut Core, envelope: ActionEnvelope) {
        let ActionEnvelope { channel, action, origin, rejection_reason, .. } = envelope;
        if let StateAction::SessionChatAdded(added) = &action {
            state.chats.insert(added.summary.resource.clone(), channel.clone());
        }
        let ours = origin.as_ref().is_some_and(|o| o.client_id == self.client_id);
        let echo = origin.as_ref().filter(|_| ours).and_then(|o| state.pending.remove(&o.client_seq));
        let (sender, answer) = echo.map_or((None, None), |e| (e.sender, e.answer));
        if let Some(answer) = answer {
            let _ = answer.send(rejection_reason.clone().map_or(Ok(()), Err));
        }
        match (sender, rejection_reason) {
            (Some((conn, origin)), Some(reason)) => core.refuse_relayed(conn, &channel, &action, origin, &reason),
            (Some((conn, origin)), None) => {
                core.apply(&channel, action, Some(origin), Some(conn));
            }
            (None, Some(reason)) => {
                if ours {
                    tracing::info!(remote = %self.spec.name, channel, "the remote refused the host's own action: {reason}");
                }
            }
            (None, None) => {
                core.apply(&channel, action, origin.filter(|_| !ours), None);
            }
        }
    }

    /// A client's request relayed as sent (the provider named as the remote names it).
    pub async fn request(&self, weak: WeakHost, method: &str, mut params: Value) -> Result<Value, AhpError> {
        let peer = self.connected_peer().map_err(AhpError::not_found)?;
        let suffix = format!("@{}", self.spec.name);
        if let Some(provider) = params.get("provider").and_then(Value::as_str) {
            params["provider"] = json!(provider.strip_suffix(&suffix).unwrap_or(provider));
        }
        let channel = params.get("channel").and_then(Value::as_str).unwrap_or_default().to_owned();
        match method {
            "createSession" => {
                // The creator there is this host's link: its clients' ids and progress stay here.
                if let Some(object) = params.as_object_mut() {
                    object.remove("activeClient");
                    object.remove("progressToken");
                }
                lock(&self.state).claimed.insert(channel.clone());
            }
            "createTerminal" => {
                lock(&self.state).terminals.insert(channel.clone());
            }
            _ => {}
        }
        let answer = peer.request_value(method, params).await.map_err(|e| self.error(e));
        if answer.is_err() && method == "createSession" {
            lock(&self.state).claimed.remove(&channel);
        }
        drop(weak);
        answer
    }

    /// A client's action on a mirrored channel, relayed as sent under this link's own client
    /// sequence number; the echo answers it (`deliver`), and a link that is down refuses it.
    pub fn relay_action(&self, host: &Host, conn: u64, channel: &str, action: StateAction, origin: ActionOrigin) {
        if let Err(why) = self.relay(channel, action.clone(), Some((conn, origin.clone()))) {
            host.lock().refuse_relayed(conn, channel, &action, origin, &why);
        }
    }

    /// Relays an action for `sender` (a client here, or none for the host's own); `Err` says why
    /// it could not go.
    pub fn relay(&self, channel: &str, action: StateAction, sender: Option<(u64, ActionOrigin)>) -> Result<(), String> {
        self.relay_echo(channel, action, sender, None)
    }

    /// Relays an action of the host's own on a mirrored channel; answers what tells how the
    /// remote took it (its echo, or its refusal's reason), or why it could not go.
    pub fn relay_answered(
        &self,
        channel: &str,
        action: StateAction,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<(), String>>, String> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.relay_echo(channel, action, None, Some(answer))?;
        Ok(answered)
    }

    fn relay_echo(
        &self,
        channel: &str,
        action: StateAction,
        sender: Option<(u64, ActionOrigin)>,
        answer: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    ) -> Result<(), String> {
        let mut state = lock(&self.state);
        let peer = match (&state.status, &state.peer) {
            (LinkStatus::Connected, Some(peer)) => peer.clone(),
            _ => return Err(self.not_connected(&state)),
        };
        let client_seq = state.next_client_seq;
        state.next_client_seq += 1;
        peer.notify("dispatchAction", json!({"channel": channel, "clientSeq": client_seq, "action": action}));
        state.pending.insert(client_seq, Echo { sender, answer, channel: channel.to_owned(), action });
        Ok(())
    }

    /// A failed relayed request as the remote said it, or why no answer came.
    fn error(&self, e: PeerError) -> AhpError {
        match e {
            PeerError::Rpc(e) => AhpError { code: e.code, message: e.message, data: e.data },
            PeerError::Closed => AhpError::internal(format!("{}'s link closed before it answered", self.spec.name)),
            PeerError::Decode(why) => {
                AhpError::internal(format!("{} answered what does not read: {why}", self.spec.name))
            }
        }
    }

    /// What `ahpd status` says of this remote.
    pub fn describe(&self) -> Value {
        let agents: Vec<String> = self.agents().into_iter().map(|a| a.provider).collect();
        let state = lock(&self.state);
        json!({
            "name": self.spec.name,
            "displayName": self.spec.display_name,
            "reach": self.spec.reach.describe(),
            "state": state.status.to_string(),
            "agents": agents,
            "sessions": state.sessions.len(),
            "mirrored": state.channels.len(),
        })
    }
}

/// The terminals a remote's root lists.
fn root_terminals(root: &RootState) -> Vec<String> {
    root.terminals.iter().flatten().map(|t| t.resource.clone()).collect()
}

/// Notes which chats a summary says are its session's.
fn track_summary(state: &mut State, summary: &Value) {
    let Some(session) = summary["resource"].as_str() else { return };
    let chats = summary["chats"].as_array().into_iter().flatten().filter_map(|c| c["resource"].as_str());
    let default = summary["defaultChat"].as_str();
    for chat in chats.chain(default) {
        state.chats.insert(chat.to_owned(), session.to_owned());
    }
}

/// Every mirrored channel of a session: itself, its annotations, its chats, its changesets.
fn channels_of_session(state: &State, session: &str) -> Vec<String> {
    let id = session.strip_prefix("ahp-session:/").unwrap_or(session);
    let chat_ids: Vec<&str> = state
        .chats
        .iter()
        .filter(|(_, s)| s.as_str() == session)
        .filter_map(|(c, _)| c.strip_prefix("ahp-chat:/"))
        .collect();
    state
        .channels
        .keys()
        .filter(|channel| {
            channel.as_str() == session
                || channel.strip_suffix("/annotations") == Some(session)
                || channel.strip_prefix("ahp-chat:/").is_some_and(|c| chat_ids.contains(&c))
                || channel.strip_prefix(CHANGESET_SCHEME).is_some_and(|rest| {
                    rest.split('/').nth(1).is_some_and(|owner| owner == id || chat_ids.contains(&owner))
                })
        })
        .cloned()
        .collect()
}

/// A link that was up this long before it was cut is tried again within a second, however many
/// cuts came before.
const HEALTHY: Duration = Duration::from_secs(30);
/// The first wait: a second, so that a remote whose daemon is being restarted by its service
/// manager has its successor up when `ahpd --stdio` comes (docs/remotes.md).
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between attempts to reach a remote: a person waits on it.
const RETRY_CAP: Duration = Duration::from_secs(10);
/// How long a command form's process may take to end once its output closed.
const ENDING_WITHIN: Duration = Duration::from_secs(2);

/// The wait before the next attempt, after `failures` in a row since the last healthy spell:
/// 1 s, 2 s, 4 s, 8 s, then 10 s.
fn retry_after(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.min(8)).unwrap_or(u32::MAX);
    RETRY_FIRST.checked_mul(factor).map_or(RETRY_CAP, |d| d.min(RETRY_CAP))
}

/// "next try at 14:03:07" (the local time).
fn next_try(wait: Duration) -> String {
    let at = jiff::SignedDuration::try_from(wait)
        .ok()
        .and_then(|wait| jiff::Zoned::now().checked_add(wait).ok())
        .map(|at| at.strftime("%H:%M:%S").to_string());
    match at {
        Some(at) => format!("next try at {at}"),
        None => format!("next try in {} s", wait.as_secs()),
    }
}

/// `why` with how the command form's process ended ("was killed by signal 9 (SIGKILL)"), and its
/// last stderr line when it ended on its own with a failure (the cause, as ssh says it); a process
/// still running is described by its last stderr line alone.
async fn how_it_ended(why: String, child: Option<&agent_runner::child::Child>) -> String {
    let Some(child) = child else { return why };
    let last = child.tail().text_within(300);
    let last = last.trim().lines().last().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned);
    match child.wait_within(ENDING_WITHIN).await {
        Some(status) => {
            let ended = agent_runner::child::describe_exit(Some(status));
            match last {
                Some(line) if status.code().is_some_and(|code| code != 0) => {
                    format!("{why}: the link process {ended} ({line})")
                }
                _ => format!("{why}: the link process {ended}"),
            }
        }
        None => match last {
            Some(line) => format!("{why} ({line})"),
            None => why,
        },
    }
}

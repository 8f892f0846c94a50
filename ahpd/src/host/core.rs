//! The channels: their states folded through the official reducers, one global `serverSeq`, the
//! replay ring, subscriptions, and fan-out to connections. [`Channels::commit`] is the bottom of
//! the one write path (`write.rs`, its only caller).
//!
//! Everything here runs under the host's one lock and never awaits. An action is applied to the
//! channel's state with `ahp::reducers`, given the next sequence number, kept in the replay ring,
//! and sent to every connection subscribed to its channel, in that order, so a snapshot taken under
//! the same lock contains exactly the actions up to its `fromSeq`.

use std::collections::{HashMap, HashSet};

use ahp::reducers::{
    apply_action_to_annotations, apply_action_to_automation, apply_action_to_automation_run, apply_action_to_changeset,
    apply_action_to_chat, apply_action_to_root, apply_action_to_session, apply_action_to_terminal, ReduceOutcome,
};
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::{
    AnnotationsState, AutomationRunState, AutomationState, ChangesetState, ChatState, RootState, SessionState,
    Snapshot, SnapshotState, TerminalState,
};
use axum::extract::ws::Utf8Bytes;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A serialized message ready for any transport; cloning it shares the bytes.
pub type Frame = Utf8Bytes;

/// A connection's id, unique for the life of the process.
pub type ConnId = u64;

/// Where a channel's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// `ahp-root://`.
    Root,
    /// `ahp-session:/<id>`.
    Session,
    /// `ahp-chat:/<id>`.
    Chat,
    /// `ahp-session:/<id>/annotations`.
    Annotations,
    /// `ahp-changeset:/<…>`: what changed in a session's or a chat's files, minted by the host
    /// (expanded from a `Changeset.uriTemplate`) and computed when first watched.
    Changeset,
    /// `ahp-terminal:/<id>`.
    Terminal,
    /// `ahp-automations://`: the automation catalogue, served while a feature keeps one.
    Automations,
    /// `ahp-automation-run:/<id>`: one automation run.
    AutomationRun,
}

/// The scheme of the changeset channels.
pub const CHANGESET_SCHEME: &str = "ahp-changeset:/";

/// The automation catalogue's channel.
pub const AUTOMATIONS_URI: &str = "ahp-automations://";

/// The scheme of the automation run channels.
pub const AUTOMATION_RUN_SCHEME: &str = "ahp-automation-run:/";

/// Classifies a channel URI by its shape, without looking it up.
pub fn channel_kind(uri: &str) -> Option<ChannelKind> {
    if uri == ahp_types::ROOT_RESOURCE_URI {
        return Some(ChannelKind::Root);
    }
    if let Some(rest) = uri.strip_prefix("ahp-session:/") {
        return match rest.split_once('/') {
            None if !rest.is_empty() => Some(ChannelKind::Session),
            Some((id, "annotations")) if !id.is_empty() => Some(ChannelKind::Annotations),
            _ => None,
        };
    }
    if uri.strip_prefix(CHANGESET_SCHEME).is_some_and(|rest| !rest.is_empty()) {
        return Some(ChannelKind::Changeset);
    }
    if let Some(rest) = uri.strip_prefix("ahp-terminal:/") {
        return (!rest.is_empty() && !rest.contains('/')).then_some(ChannelKind::Terminal);
    }
    if uri == AUTOMATIONS_URI {
        return Some(ChannelKind::Automations);
    }
    if let Some(rest) = uri.strip_prefix(AUTOMATION_RUN_SCHEME) {
        return (!rest.is_empty() && !rest.contains('/')).then_some(ChannelKind::AutomationRun);
    }
    match uri.strip_prefix("ahp-chat:/") {
        Some(rest) if !rest.is_empty() && !rest.contains('/') => Some(ChannelKind::Chat),
        _ => None,
    }
}

/// One connection's sending side and what it is subscribed to.
pub struct ConnEntry {
    tx: mpsc::Sender<Frame>,
    kick: CancellationToken,
    /// The channels this connection receives.
    pub subs: HashSet<String>,
    /// The `clientId` from `initialize`/`reconnect`, once it came.
    pub client_id: Option<String>,
    /// Who is behind it (set at the door).
    pub principal: crate::users::Principal,
    /// Requests this host sent the connection, waiting for its answer, by id. Dropped with the
    /// connection, which tells each waiter the client went.
    pending: HashMap<u64, oneshot::Sender<ClientAnswer>>,
}

/// What a client answered a request this host sent it: its `result`, or its `error` object.
pub type ClientAnswer = Result<serde_json::Value, serde_json::Value>;

/// What a commit did.
#[derive(Debug, Clone, PartialEq)]
pub enum Committed {
    /// The action went out with this sequence number; the reducer took it as the outcome says.
    Sent { seq: u64, outcome: ReduceOutcome },
    /// The reducer found it out of scope or invalid; nothing went out.
    Refused(ReduceOutcome),
    /// No such channel.
    NoChannel,
}

/// The channel states and everything that moves them.
pub struct Channels {
    seq: u64,
    ring: super::ring::ReplayRing,
    /// The root channel's state.
    pub root: RootState,
    /// Session channel states by URI.
    pub sessions: HashMap<String, SessionState>,
    /// Chat channel states by URI.
    pub chats: HashMap<String, ChatState>,
    /// Annotations channel states by URI.
    pub annotations: HashMap<String, AnnotationsState>,
    /// Changeset channel states by URI (only while somebody watches them).
    pub changesets: HashMap<String, ChangesetState>,
    /// Terminal channel states by URI.
    pub terminals: HashMap<String, TerminalState>,
    /// The automation catalogue, while a feature keeps one (`facade::Automations`).
    pub automations: Option<AutomationState>,
    /// Automation run channel states by URI (the runs the catalogue retains).
    pub automation_runs: HashMap<String, AutomationRunState>,
    subscribers: HashMap<String, HashSet<ConnId>>,
    /// The sequence number at which each channel loaded from the store was loaded: a client whose
    /// last number is not past it saw the channel before it was unloaded (or never), so a replay
    /// would not rebuild what the host holds now.
    loaded_at: HashMap<String, u64>,
    conns: HashMap<ConnId, ConnEntry>,
    next_conn: ConnId,
    next_request: u64,
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    channel: &'a str,
    action: &'a StateAction,
    #[serde(rename = "serverSeq")]
    server_seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'a ActionOrigin>,
    #[serde(rename = "rejectionReason", skip_serializing_if = "Option::is_none")]
    rejection_reason: Option<&'a str>,
}

/// Encodes a JSON-RPC notification.
pub fn notification<P: Serialize>(method: &str, params: &P) -> Frame {
    #[derive(Serialize)]
    struct Out<'a, P> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a P,
    }
    encode(&Out { jsonrpc: "2.0", method, params })
}

fn encode<T: Serialize>(value: &T) -> Frame {
    match serde_json::to_string(value) {
        Ok(s) => Frame::from(s),
        Err(e) => {
            tracing::error!(error = %e, "could not encode an outgoing message");
            Frame::from_static("{}")
        }
    }
}

fn action_frame(envelope_json: &str) -> Frame {
    Frame::from(format!(r#"{{"jsonrpc":"2.0","method":"action","params":{envelope_json}}}"#))
}

impl Channels {
    /// An empty host with a root state and a replay ring of `ring_capacity` envelopes.
    pub fn new(root: RootState, ring_capacity: usize) -> Self {
        Self {
            seq: 0,
            ring: super::ring::ReplayRing::new(ring_capacity),
            root,
            sessions: HashMap::new(),
            chats: HashMap::new(),
            annotations: HashMap::new(),
            changesets: HashMap::new(),
            terminals: HashMap::new(),
            automations: None,
            automation_runs: HashMap::new(),
            subscribers: HashMap::new(),
            loaded_at: HashMap::new(),
            conns: HashMap::new(),
            next_conn: 1,
            next_request: 1,
        }
    }

    /// The last sequence number given out (0 before the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// True when the channel exists.
    pub fn has_channel(&self, uri: &str) -> bool {
        match channel_kind(uri) {
            Some(ChannelKind::Root) => true,
            Some(ChannelKind::Session) => self.sessions.contains_key(uri),
            Some(ChannelKind::Chat) => self.chats.contains_key(uri),
            Some(ChannelKind::Annotations) => self.annotations.contains_key(uri),
            Some(ChannelKind::Changeset) => self.changesets.contains_key(uri),
            Some(ChannelKind::Terminal) => self.terminals.contains_key(uri),
            Some(ChannelKind::Automations) => self.automations.is_some(),
            Some(ChannelKind::AutomationRun) => self.automation_runs.contains_key(uri),
            None => false,
        }
    }

    /// Says who is behind a connection now (it signed in or out).
    pub fn set_principal(&mut self, conn: ConnId, principal: crate::users::Principal) {
        if let Some(entry) = self.conns.get_mut(&conn) {
            entry.principal = principal;
        }
    }

    /// Registers a connection whose outgoing queue is `tx`; `kick` is cancelled to drop it.
    pub fn add_conn(
        &mut self,
        tx: mpsc::Sender<Frame>,
        kick: CancellationToken,
        principal: crate::users::Principal,
    ) -> ConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(
            id,
            ConnEntry { tx, kick, subs: HashSet::new(), client_id: None, principal, pending: HashMap::new() },
        );
        id
    }

    /// Forgets a connection and its subscriptions; answers what it was subscribed to.
    pub fn remove_conn(&mut self, id: ConnId) -> Option<ConnEntry> {
        let entry = self.conns.remove(&id)?;
        for channel in &entry.subs {
            if let Some(set) = self.subscribers.get_mut(channel) {
                set.remove(&id);
                if set.is_empty() {
                    self.subscribers.remove(channel);
                    self.forget_unwatched(channel);
                }
            }
        }
        Some(entry)
    }

    /// Every open connection.
    pub fn conn_ids(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }

    /// A connection's entry.
    pub fn conn(&self, id: ConnId) -> Option<&ConnEntry> {
        self.conns.get(&id)
    }

    /// A connection's entry, to change.
    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut ConnEntry> {
        self.conns.get_mut(&id)
    }

    /// Connections holding `client_id`, other than `except`.
    pub fn conns_of_client(&self, client_id: &str, except: ConnId) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(id, c)| **id != except && c.client_id.as_deref() == Some(client_id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Sends a connection a request of this host's own (AHP's server-to-client `resource*`
    /// commands); answers its id and where the answer will arrive, or `None` when the connection
    /// is gone.
    pub fn request(
        &mut self,
        id: ConnId,
        method: &str,
        params: &serde_json::Value,
    ) -> Option<(u64, oneshot::Receiver<ClientAnswer>)> {
        let request = self.next_request;
        self.next_request += 1;
        let (tx, rx) = oneshot::channel();
        self.conns.get_mut(&id)?.pending.insert(request, tx);
        let frame = serde_json::json!({ "jsonrpc": "2.0", "id": request, "method": method, "params": params });
        self.send(id, Frame::from(frame.to_string()));
        Some((request, rx))
    }

    /// Hands a client's answer to the request it answers; false when no such request waits.
    pub fn settle_request(&mut self, id: ConnId, request: u64, answer: ClientAnswer) -> bool {
        match self.conns.get_mut(&id).and_then(|c| c.pending.remove(&request)) {
            Some(waiter) => waiter.send(answer).is_ok(),
            None => false,
        }
    }

    /// Stops waiting for a request's answer (its time ran out).
    pub fn forget_request(&mut self, id: ConnId, request: u64) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.pending.remove(&request);
        }
    }

    /// Drops a connection that cannot keep up, or that another connection replaced.
    pub fn kick(&mut self, id: ConnId, why: &str) {
        if let Some(conn) = self.conns.get(&id) {
            tracing::info!(conn = id, why, "dropping a connection");
            conn.kick.cancel();
        }
    }

    /// Subscribes a connection to a channel (idempotent).
    pub fn subscribe(&mut self, id: ConnId, channel: &str) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.subs.insert(channel.to_owned());
            self.subscribers.entry(channel.to_owned()).or_default().insert(id);
        }
    }

    /// Unsubscribes a connection from a channel; answers whether it was subscribed.
    pub fn unsubscribe(&mut self, id: ConnId, channel: &str) -> bool {
        let was = self.conns.get_mut(&id).map(|c| c.subs.remove(channel)).unwrap_or(false);
        if let Some(set) = self.subscribers.get_mut(channel) {
            set.remove(&id);
            if set.is_empty() {
                self.subscribers.remove(channel);
                self.forget_unwatched(channel);
            }
        }
        was
    }

    /// A changeset channel nobody watches is forgotten: it is computed again when next watched.
    fn forget_unwatched(&mut self, channel: &str) {
        if channel_kind(channel) == Some(ChannelKind::Changeset) {
            self.changesets.remove(channel);
            self.loaded_at.remove(channel);
        }
    }

    /// True when the connection receives the channel.
    pub fn is_subscribed(&self, id: ConnId, channel: &str) -> bool {
        self.conns.get(&id).is_some_and(|c| c.subs.contains(channel))
    }

    /// Connections subscribed to a channel.
    pub fn subscribers_of(&self, channel: &str) -> Vec<ConnId> {
        self.subscribers.get(channel).map(|s| s.iter().copied().collect()).unwrap_or_default()
    }

    /// Notes that `channel` was just loaded from the store.
    pub fn mark_loaded(&mut self, channel: &str) {
        self.loaded_at.insert(channel.to_owned(), self.seq);
    }

    /// True when some connection watches `channel`.
    pub fn is_watched(&self, channel: &str) -> bool {
        self.subscribers.get(channel).is_some_and(|s| !s.is_empty())
    }

    /// Unsubscribes everybody from a channel that is going away.
    pub fn drop_channel(&mut self, channel: &str) {
        self.loaded_at.remove(channel);
        if let Some(set) = self.subscribers.remove(channel) {
            for id in set {
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.subs.remove(channel);
                }
            }
        }
    }

    /// Queues a frame for one connection; one that cannot take it is dropped rather than buffered
    /// without bound (it can reconnect and resume).
    pub fn send(&self, id: ConnId, frame: Frame) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        if conn.kick.is_cancelled() {
            // Being dropped: a frame sent after one that was lost would leave a hole in what the
            // client folds, where a reconnect's replay fills it.
            return;
        }
        match conn.tx.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                let kick = conn.kick.clone();
                tracing::warn!(conn = id, "a client stopped reading; dropping it so it can reconnect and resume");
                kick.cancel();
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Sends a frame to every subscriber of a channel: the same bytes to each (a `Frame` is
    /// shared, so a clone is a count, not a copy), with nothing allocated per subscriber.
    pub fn broadcast(&self, channel: &str, frame: &Frame) {
        let Some(set) = self.subscribers.get(channel) else {
            return;
        };
        for id in set {
            self.send(*id, frame.clone());
        }
    }

    /// Applies an action to its channel's state with the official reducer and, unless the reducer
    /// found it out of scope or invalid, says it to every subscriber with the next sequence number.
    /// `extra` also receives it (a client that dispatched to a channel it does not watch). Only the
    /// write path (`write.rs`) calls it: it does what each channel kind needs beside.
    pub(super) fn commit(
        &mut self,
        channel: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        extra: Option<ConnId>,
    ) -> Committed {
        let outcome = match self.reduce(channel, &action) {
            Some(outcome) => outcome,
            None => return Committed::NoChannel,
        };
        if matches!(outcome, ReduceOutcome::OutOfScope | ReduceOutcome::Invalid(_)) {
            tracing::warn!(channel, ?outcome, kind = action_type(&action), "an action the reducer would not take");
            return Committed::Refused(outcome);
        }
        let seq = self.next_seq();
        let envelope = encode_envelope(channel, &action, seq, origin.as_ref(), None);
        let frame = action_frame(&envelope);
        self.retain(seq, channel, &envelope);
        self.broadcast(channel, &frame);
        if let Some(id) = extra {
            if !self.is_subscribed(id, channel) {
                self.send(id, frame);
            }
        }
        Committed::Sent { seq, outcome }
    }

    /// Applies an action as [`commit`](Self::commit) does, and says it to `readers` alone: what
    /// only some may read (`account.rs`). Not kept for replay: a reconnect past it is answered
    /// with a snapshot, cut for the reconnecting person.
    pub(super) fn commit_to(&mut self, channel: &str, action: StateAction, readers: &[ConnId]) {
        match self.reduce(channel, &action) {
            Some(ReduceOutcome::OutOfScope | ReduceOutcome::Invalid(_)) | None => return,
            Some(_) => {}
        }
        let seq = self.next_seq();
        let frame = action_frame(&encode_envelope(channel, &action, seq, None, None));
        for id in readers {
            self.send(*id, frame.clone());
        }
        self.mark_loaded(channel);
    }

    /// Sends a refused client action back to the connection that dispatched it, with the reason
    /// and a fresh sequence number. Nothing changes and nobody else is told.
    pub fn reject(&mut self, id: ConnId, channel: &str, action: &StateAction, origin: ActionOrigin, reason: &str) {
        let seq = self.next_seq();
        let envelope = encode_envelope(channel, action, seq, Some(&origin), Some(reason));
        self.send(id, action_frame(&envelope));
    }

    /// Sends an action to one connection only, without changing state or keeping it for replay
    /// (`chat/turnsLoaded` answers the connection that paged).
    pub fn send_private(&mut self, id: ConnId, channel: &str, action: &StateAction) -> u64 {
        let seq = self.next_seq();
        let envelope = encode_envelope(channel, action, seq, None, None);
        self.send(id, action_frame(&envelope));
        seq
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn retain(&mut self, seq: u64, channel: &str, envelope: &str) {
        self.ring.push(seq, channel, envelope);
    }

    fn reduce(&mut self, channel: &str, action: &StateAction) -> Option<ReduceOutcome> {
        Some(match channel_kind(channel)? {
            ChannelKind::Root => apply_action_to_root(&mut self.root, action),
            ChannelKind::Session => apply_action_to_session(self.sessions.get_mut(channel)?, action),
            ChannelKind::Chat => apply_action_to_chat(self.chats.get_mut(channel)?, action),
            ChannelKind::Annotations => apply_action_to_annotations(self.annotations.get_mut(channel)?, action),
            ChannelKind::Changeset => apply_action_to_changeset(self.changesets.get_mut(channel)?, action),
            ChannelKind::Terminal => apply_action_to_terminal(self.terminals.get_mut(channel)?, action),
            ChannelKind::Automations => apply_action_to_automation(self.automations.as_mut()?, action),
            ChannelKind::AutomationRun => {
                apply_action_to_automation_run(self.automation_runs.get_mut(channel)?, action)
            }
        })
    }

    /// The channel's state as a snapshot taken now.
    pub fn snapshot(&self, uri: &str) -> Option<Snapshot> {
        let state = match channel_kind(uri)? {
            ChannelKind::Root => SnapshotState::Root(Box::new(self.root.clone())),
            ChannelKind::Session => SnapshotState::Session(Box::new(self.sessions.get(uri)?.clone())),
            ChannelKind::Chat => SnapshotState::Chat(Box::new(self.chats.get(uri)?.clone())),
            ChannelKind::Annotations => SnapshotState::Annotations(Box::new(self.annotations.get(uri)?.clone())),
            ChannelKind::Changeset => SnapshotState::Changeset(Box::new(self.changesets.get(uri)?.clone())),
            ChannelKind::Terminal => SnapshotState::Terminal(Box::new(self.terminals.get(uri)?.clone())),
            ChannelKind::Automations => SnapshotState::Automations(Box::new(self.automations.clone()?)),
            ChannelKind::AutomationRun => {
                SnapshotState::AutomationRun(Box::new(self.automation_runs.get(uri)?.clone()))
            }
        };
        Some(Snapshot { resource: uri.to_owned(), state, from_seq: seq_i64(self.seq) })
    }

    /// Every retained envelope after `after` on the given channels, oldest first, as one JSON
    /// array, or `None` when the ring no longer holds all of them, or when one of the channels was
    /// loaded from the store since (the state it was loaded as is not the one those envelopes built
    /// on).
    pub fn replay_since(&self, after: u64, channels: &HashSet<String>) -> Option<String> {
        if after > self.seq {
            return None;
        }
        if channels.iter().any(|c| self.loaded_at.get(c).is_some_and(|at| *at >= after)) {
            return None;
        }
        if after < self.seq {
            let oldest = self.ring.oldest_seq()?;
            if oldest > after + 1 {
                return None;
            }
        }
        Some(self.ring.json_after(after, channels))
    }
}

/// A sequence number as the `i64` AHP's snapshot and handshake fields use.
pub fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn encode_envelope(
    channel: &str,
    action: &StateAction,
    seq: u64,
    origin: Option<&ActionOrigin>,
    reason: Option<&str>,
) -> String {
    let out = EnvelopeOut { channel, action, server_seq: seq, origin, rejection_reason: reason };
    serde_json::to_string(&out).unwrap_or_else(|e| {
        tracing::error!(error = %e, "could not encode an action");
        String::from("{}")
    })
}

/// The `type` string of an action, for logs and refusals.
pub fn action_type(action: &StateAction) -> String {
    match serde_json::to_value(action) {
        Ok(v) => v.get("type").and_then(|t| t.as_str()).unwrap_or("unknown").to_owned(),
        Err(_) => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_channels_by_shape() {
        assert_eq!(channel_kind("ahp-root://"), Some(ChannelKind::Root));
        assert_eq!(channel_kind("ahp-session:/abc"), Some(ChannelKind::Session));
        assert_eq!(channel_kind("ahp-session:/abc/annotations"), Some(ChannelKind::Annotations));
        assert_eq!(channel_kind("ahp-chat:/c1"), Some(ChannelKind::Chat));
        assert_eq!(channel_kind("ahp-session:/"), None);
        assert_eq!(channel_kind("ahp-chat:/a/b"), None);
        assert_eq!(channel_kind("ahp-terminal:/t1"), Some(ChannelKind::Terminal));
        assert_eq!(channel_kind("ahp-terminal:/"), None);
        assert_eq!(channel_kind("file:///x"), None);
        assert_eq!(channel_kind("ahp-changeset:/session/abc/branch"), Some(ChannelKind::Changeset));
        assert_eq!(channel_kind("ahp-changeset:/"), None);
        assert_eq!(channel_kind("ahp-automations://"), Some(ChannelKind::Automations));
        assert_eq!(channel_kind("ahp-automation-run:/r1"), Some(ChannelKind::AutomationRun));
        assert_eq!(channel_kind("ahp-automation-run:/"), None);
    }
}

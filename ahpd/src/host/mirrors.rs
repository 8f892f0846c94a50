//! Channels another host runs, mirrored here (seed 004's relay): the remotes feature seeds each
//! from the remote's snapshot and commits what the remote says on it through the one write path,
//! where a mirrored channel is only folded, numbered and fanned out (the remote keeps its records,
//! runs its turns and writes its store). A client's command or action on one is handed to the
//! feature as the client sent it ([`super::ports::Remotes`]); nothing here decides for the remote.

use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::{AgentInfo, Snapshot, SnapshotState};
use serde_json::Value;

use super::core::{channel_kind, ChannelKind, ConnId};
use super::{Core, Host};

impl Core {
    /// True when `channel` mirrors a channel another host runs.
    pub fn is_mirrored(&self, channel: &str) -> bool {
        self.mirrored.contains(channel)
    }

    /// Seeds (or replaces) a mirrored channel with the state its host's snapshot holds. A channel
    /// whose state is replaced (its host restarted, or the link came back past what it could
    /// replay) has its watchers dropped: their reconnect gets a snapshot of the new state.
    pub fn seed_mirror(&mut self, snapshot: Snapshot) {
        let uri = snapshot.resource;
        let replaced = self.mirrored.contains(&uri) && self.ch.has_channel(&uri);
        match snapshot.state {
            SnapshotState::Session(state) => {
                self.ch.sessions.insert(uri.clone(), *state);
            }
            SnapshotState::Chat(state) => {
                self.ch.chats.insert(uri.clone(), *state);
            }
            SnapshotState::Annotations(state) => {
                self.ch.annotations.insert(uri.clone(), *state);
            }
            SnapshotState::Changeset(state) => {
                self.ch.changesets.insert(uri.clone(), *state);
            }
            SnapshotState::Terminal(state) => {
                self.ch.terminals.insert(uri.clone(), *state);
            }
            _ => return,
        }
        if replaced {
            for conn in self.ch.subscribers_of(&uri) {
                self.ch.kick(conn, "a mirrored channel was replaced by its host's snapshot");
            }
        }
        self.ch.mark_loaded(&uri);
        self.mirrored.insert(uri);
    }

    /// Forgets a mirrored channel (its session is gone there): nobody receives it any more.
    pub fn forget_mirror(&mut self, uri: &str) {
        if !self.mirrored.remove(uri) {
            return;
        }
        self.ch.drop_channel(uri);
        match channel_kind(uri) {
            Some(ChannelKind::Session) => {
                self.ch.sessions.remove(uri);
            }
            Some(ChannelKind::Chat) => {
                self.ch.chats.remove(uri);
            }
            Some(ChannelKind::Annotations) => {
                self.ch.annotations.remove(uri);
            }
            Some(ChannelKind::Changeset) => {
                self.ch.changesets.remove(uri);
            }
            Some(ChannelKind::Terminal) => {
                self.ch.terminals.remove(uri);
            }
            _ => {}
        }
    }

    /// The mirrored channels no connection here watches.
    pub fn unwatched_mirrors(&self) -> Vec<String> {
        self.mirrored.iter().filter(|uri| !self.ch.is_watched(uri)).cloned().collect()
    }

    /// Answers a relayed action that its host refused to the connection that sent it, under the
    /// client's own origin; nothing changes and nobody else is told.
    pub fn refuse_relayed(
        &mut self,
        conn: ConnId,
        channel: &str,
        action: &StateAction,
        origin: ActionOrigin,
        why: &str,
    ) {
        self.ch.reject(conn, channel, action, origin, why);
    }

    /// The agents the remotes offer, as this host names them; the root lists them after its own.
    pub fn set_remote_agents(&mut self, agents: Vec<AgentInfo>) {
        if self.remote_agents != agents {
            self.remote_agents = agents;
            self.publish_agents();
        }
    }

    /// The agents the remotes offer, as this host names them (`<agent>@<remote>`).
    pub fn remote_agents(&self) -> &[AgentInfo] {
        &self.remote_agents
    }

    /// Says a root notification a remote sent about one of its sessions to this host's root
    /// watchers who may read sessions.
    pub fn announce_remote<P: serde::Serialize>(&mut self, method: &str, params: &P) {
        let frame = super::core::notification(method, params);
        self.announce_session(&frame);
    }
}

impl Host {
    /// The remotes feature, when a remote holds `key` (a channel).
    pub(super) fn remote_for(&self, key: &str) -> Option<std::sync::Arc<dyn super::ports::Remotes>> {
        let remotes = self.lock().remotes.clone()?;
        remotes.holds(key).then_some(remotes)
    }

    /// The remotes feature, when the request names what a remote holds (`Remotes::relays`).
    pub(super) fn remote_for_request(
        &self,
        method: &str,
        params: &Value,
    ) -> Option<std::sync::Arc<dyn super::ports::Remotes>> {
        let remotes = self.lock().remotes.clone()?;
        remotes.relays(method, params).then_some(remotes)
    }

    /// The remotes feature, when remotes are configured (the session tools reach remote sessions
    /// through it).
    pub fn remotes(&self) -> Option<std::sync::Arc<dyn super::ports::Remotes>> {
        self.lock().remotes.clone()
    }

    /// Registers the remotes feature (the daemon does, when remotes are configured).
    pub fn serve_remotes(&self, feature: std::sync::Arc<dyn super::ports::Remotes>) {
        self.lock().remotes = Some(feature);
    }
}

//! What `ahpd status` reads from the running host: how many sessions it keeps, which agents it
//! offers and whether each one's worker runs, which clients are away in their grace period, and
//! which turns are running (a restart that is not forced waits for none), how many backend sessions
//! are open and the processes under the daemon with their memory, and whether the store can write.

use serde::{Deserialize, Serialize};

use super::Host;

/// The host's part of `ahpd status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// Sessions in the store (loaded or not).
    pub sessions: i64,
    /// Of those, the ones in memory now (used lately, or watched, or running).
    #[serde(default)]
    pub loaded_sessions: usize,
    /// Clients in their disconnect grace period (their connections closed, their place and calls
    /// kept), counted once per session.
    #[serde(default)]
    pub clients_away: usize,
    /// Backend sessions open now (a Claude or pi process each), and the cap on them
    /// (`maxBackendProcesses`, 0: none).
    #[serde(default)]
    pub backend_sessions: usize,
    #[serde(default)]
    pub max_backend_processes: usize,
    /// The processes under the daemon: its workers and what they run, with their memory.
    #[serde(default)]
    pub processes: Vec<crate::procs::ProcessStatus>,
    /// The configured agents, in the config's order.
    pub agents: Vec<AgentStatus>,
    /// Turns running now, by chat.
    pub running_turns: Vec<RunningTurn>,
    /// While the session store cannot write: why, and what to do (`store/health.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_cannot_write: Option<String>,
    /// Each remote host: its name, how it is reached, its link's state and its agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<serde_json::Value>,
}

/// One agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The provider id clients name.
    pub provider: String,
    /// What its worker said it is, once it said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Its worker runs and has finished its handshake.
    pub running: bool,
}

/// One running turn.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningTurn {
    /// The session.
    pub session: String,
    /// The chat.
    pub chat: String,
    /// The turn's id.
    pub turn: String,
}

impl Host {
    /// Sessions, agents and running turns, read under the lock.
    pub fn status(&self) -> HostStatus {
        // Asked before the lock: the feature takes it itself.
        let remotes = self.lock().remotes.clone().map(|r| r.describe()).unwrap_or_default();
        let core = self.lock();
        let sessions = core.store.count().unwrap_or_else(|e| {
            tracing::warn!("{e}");
            i64::try_from(core.sessions.len()).unwrap_or(i64::MAX)
        });
        let agents = core
            .agents
            .iter()
            .map(|a| AgentStatus {
                provider: a.provider.clone(),
                display_name: a.descriptor.as_ref().map(|d| d.display_name.clone()),
                running: self.supervisor().current(&a.provider).is_some(),
            })
            .collect();
        let mut running_turns: Vec<RunningTurn> = core
            .ch
            .chats
            .iter()
            // A mirrored chat's turn runs on its own host.
            .filter(|(chat, _)| !core.mirrored.contains(*chat))
            .filter_map(|(chat, state)| {
                let turn = state.active_turn.as_ref()?;
                let session = core.chats.get(chat).map(|m| m.session.clone()).unwrap_or_default();
                Some(RunningTurn { session, chat: chat.clone(), turn: turn.id.clone() })
            })
            .collect();
        running_turns.sort_by(|a, b| a.chat.cmp(&b.chat));
        HostStatus {
            sessions,
            loaded_sessions: core.loaded_sessions(),
            clients_away: core.clients_away(),
            backend_sessions: core.open_backend_sessions(),
            max_backend_processes: self.config().max_backend_processes,
            processes: crate::procs::descendants_of(std::process::id()),
            agents,
            running_turns,
            store_cannot_write: core.store.cannot_write(),
            remotes,
        }
    }
}

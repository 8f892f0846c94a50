//! The deployment's MCP servers (`mcpServers`) as each session shows them and a client starts and
//! stops them, for a backend that says their state (`features.mcpStatus`: Claude): each is a top-level `McpServerCustomization` on the session's `customizations`
//! (beside the clients' plugins, `rules.rs`), its state what the backend reported
//! (`session/mcpServerStateChanged`, from Claude's `system/init`), `starting` until it does. A
//! client's `session/mcpServerStopRequested` takes the server out of what that session's chats
//! are started with, and `session/mcpServerStartRequested` puts it back: a backend reads its
//! servers when it starts, so the chats restart between turns. A stopped server stays stopped
//! while the daemon runs (not across a restart); a backend's report for it is not said.

use std::collections::BTreeSet;

use ahp_types::actions::StateAction;
use ahp_types::state::{
    Customization, McpServerCustomization, McpServerStartingState, McpServerState, McpServerStoppedState,
};

use super::{Core, Host};

/// The URI a configured server is shown under.
fn uri_of(name: &str) -> String {
    format!("ahpd-mcp:{name}")
}

impl Core {
    /// The servers `session` stopped.
    fn stopped(&self, session: &str) -> BTreeSet<String> {
        self.mcp_stopped.get(session).cloned().unwrap_or_default()
    }

    /// The configured servers as `session` shows them: stopped ones stopped, the rest in the state
    /// the session holds for them (`starting` when it holds none). None for a session whose
    /// backend does not say their state (`features.mcpStatus`).
    pub fn mcp_customizations(&self, session: &str) -> Vec<Customization> {
        let provider = self.ch.sessions.get(session).map(|s| s.provider.clone()).unwrap_or_default();
        self.mcp_customizations_of(session, &provider)
    }

    fn mcp_customizations_of(&self, session: &str, provider: &str) -> Vec<Customization> {
        let says_state =
            self.agent(provider).and_then(|a| a.descriptor.as_ref()).is_some_and(|d| d.features.mcp_status);
        if !says_state {
            return Vec::new();
        }
        let stopped = self.stopped(session);
        let held = self.ch.sessions.get(session).and_then(|s| s.customizations.as_deref()).unwrap_or_default();
        let held_state = |name: &str| {
            held.iter().find_map(|c| match c {
                Customization::McpServer(m) if m.id == name => Some(m.state.clone()),
                _ => None,
            })
        };
        self.settings
            .mcp_servers
            .iter()
            .flatten()
            .map(|(name, _)| {
                let state = if stopped.contains(name) {
                    McpServerState::Stopped(McpServerStoppedState {})
                } else {
                    held_state(name).unwrap_or(McpServerState::Starting(McpServerStartingState { blocking: None }))
                };
                Customization::McpServer(Box::new(McpServerCustomization {
                    id: name.clone(),
                    uri: uri_of(name),
                    name: name.clone(),
                    icons: None,
                    range: None,
                    meta: None,
                    enablement: None,
                    state,
                    channel: None,
                    mcp_app: None,
                }))
            })
            .collect()
    }

    /// What a session opened or loaded shows first: the configured servers, or nothing.
    pub fn initial_customizations(&self, session: &str, provider: &str) -> Option<Vec<Customization>> {
        let servers = self.mcp_customizations_of(session, provider);
        (!servers.is_empty()).then_some(servers)
    }

    /// The servers `session`'s chats are started with: the configured ones less those stopped.
    pub fn mcp_servers_for(&self, session: &str) -> Option<std::collections::BTreeMap<String, protocol::McpServer>> {
        let stopped = self.stopped(session);
        let mut servers = self.settings.mcp_servers.clone()?;
        servers.retain(|name, _| !stopped.contains(name));
        Some(servers)
    }

    /// False for a backend's report on a server the session stopped (a chat not yet restarted
    /// may still run it).
    pub fn mcp_report_applies(&self, session: &str, action: &StateAction) -> bool {
        match action {
            StateAction::SessionMcpServerStateChanged(a) => !self.stopped(session).contains(&a.id),
            _ => true,
        }
    }
}

impl Host {
    /// A client asked to start (`run`) or stop server `id` of `session` (the request is said
    /// already): its chats restart between turns with the servers that run.
    pub(super) fn mcp_server_requested(&self, core: &mut Core, session: &str, id: &str, run: bool) {
        let stopped = core.mcp_stopped.entry(session.to_owned()).or_default();
        let changed = if run { stopped.remove(id) } else { stopped.insert(id.to_owned()) };
        if !changed {
            return;
        }
        tracing::info!(
            session,
            server = id,
            run,
            "an MCP server was toggled; the session's chats restart between turns"
        );
        super::rules::restart_live_chats(core, session);
    }
}

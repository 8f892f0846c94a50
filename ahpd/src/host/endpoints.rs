//! The session tools endpoints the host hands its backends (`/ahp-mcp/<id>`, one bearer token per
//! session): which is open, for which session, with which token, and who listens for a change of
//! a session's tools. `mcp.rs` serves them over HTTP.

use std::collections::HashMap;

use tokio::sync::broadcast;

/// The path prefix of the per-session endpoints.
pub const PREFIX: &str = "/ahp-mcp";

/// One session's endpoint.
pub struct Endpoint {
    /// The session it serves.
    pub session: String,
    /// Its bearer token.
    pub token: String,
    changed: broadcast::Sender<()>,
}

impl Endpoint {
    /// A new listener for the session's changes.
    pub fn changes(&self) -> broadcast::Receiver<()> {
        self.changed.subscribe()
    }
}

/// Every open endpoint, by path id and by session.
#[derive(Default)]
pub struct Endpoints {
    by_id: HashMap<String, Endpoint>,
    by_session: HashMap<String, String>,
    base: Option<String>,
    /// `/mcp`'s event streams, once one was opened.
    sessionless: Option<broadcast::Sender<()>>,
}

impl Endpoints {
    /// Where the daemon listens (`http://HOST:PORT`); without it no endpoint can be opened (a
    /// daemon over stdio serves none).
    pub fn set_base(&mut self, base: String) {
        self.base = Some(base);
    }

    /// The session's endpoint, opened on first use: its URL and token.
    pub fn open(&mut self, session: &str) -> Option<protocol::ToolsEndpoint> {
        let base = self.base.clone()?;
        if let Some(id) = self.by_session.get(session) {
            let endpoint = self.by_id.get(id)?;
            return Some(protocol::ToolsEndpoint {
                url: format!("{base}{PREFIX}/{id}"),
                token: endpoint.token.clone(),
            });
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (changed, _) = broadcast::channel(16);
        self.by_id.insert(id.clone(), Endpoint { session: session.to_owned(), token: token.clone(), changed });
        self.by_session.insert(session.to_owned(), id.clone());
        Some(protocol::ToolsEndpoint { url: format!("{base}{PREFIX}/{id}"), token })
    }

    /// Closes the session's endpoint (the session is gone).
    pub fn close(&mut self, session: &str) {
        if let Some(id) = self.by_session.remove(session) {
            self.by_id.remove(&id);
        }
    }

    /// Tells the session's event streams that its tools changed.
    pub fn tools_changed(&self, session: &str) {
        if let Some(endpoint) = self.by_session.get(session).and_then(|id| self.by_id.get(id)) {
            let _ = endpoint.changed.send(());
        }
    }

    /// Tells `/mcp`'s event streams that the sessionless tools changed.
    pub fn sessionless_tools_changed(&self) {
        if let Some(tx) = &self.sessionless {
            let _ = tx.send(());
        }
    }

    /// A new listener for `/mcp`'s changes.
    pub fn sessionless_stream(&mut self) -> broadcast::Receiver<()> {
        self.sessionless.get_or_insert_with(|| broadcast::channel(16).0).subscribe()
    }

    /// The endpoint at path id `id`.
    pub fn get(&self, id: &str) -> Option<&Endpoint> {
        self.by_id.get(id)
    }
}

//! Sessions: `createSession`, `disposeSession` and `listSessions` (the store's catalogue, with the
//! agents' own sessions merged in when an agent keeps some).

use ahp_types::actions::{SessionActiveClientSetAction, StateAction};
use ahp_types::commands::{CreateSessionParams, DisposeSessionParams, ListSessionsParams};
use ahp_types::notifications::SessionRemovedParams;
use ahp_types::state::{SessionActiveClient, SessionConfigState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::Value;

use super::{check_root_channel, Reply};
use crate::host::catalog::{decode_cursor, encode_cursor, path_of, resolve_config, Farewell, NewSession};
use crate::host::core::{channel_kind, notification, ChannelKind};
use crate::host::errors::AhpError;
use crate::host::ports::FolderRequest;
use crate::host::requests::ConnState;
use crate::host::{Core, Host};

/// One page of stored sessions, and what asked for it.
pub struct StorePage {
    /// The summaries.
    pub items: Vec<Value>,
    /// Where the next page starts, when there is one.
    pub next: Option<(String, String)>,
    /// True when the store holds more after these.
    pub store_has_more: bool,
    /// The page size asked for.
    pub limit: usize,
    /// The row this page starts after (modifiedAt, uri).
    pub after: Option<(String, String)>,
}

impl Host {
    pub(super) fn create_session(&self, conn: &mut ConnState, reply: Reply, params: CreateSessionParams) {
        let now = self.config().clock.now();
        let planned =
            conn.created.check(now, conn.limits.max_sessions_per_minute).and_then(|()| self.plan_session(conn, params));
        let (new, active_client) = match planned {
            Ok(planned) => planned,
            Err(e) => return reply.send(self, Err(e)),
        };
        conn.created.record(now);
        let workspaces = self.lock().workspaces.clone();
        if !workspaces.needs_folder(&new.config.values) {
            self.open_created(&mut self.lock(), new, active_client);
            return reply.send(self, Ok(Value::Null));
        }
        // A worktree is cut first; the session opens in it, and the answer waits for both.
        let host = self.clone();
        self.spawn("cut a new session's worktree", async move {
            let result = host.open_in_new_folder(workspaces.as_ref(), new, active_client).await;
            reply.send(&host, result.map(|()| Value::Null));
        });
    }

    /// Makes the folder a new session asked for, then opens the session in it; a session that
    /// cannot open leaves no folder behind.
    async fn open_in_new_folder(
        &self,
        workspaces: &dyn crate::host::ports::Workspaces,
        mut new: NewSession,
        active_client: Option<SessionActiveClient>,
    ) -> Result<(), AhpError> {
        let from = new.working_directory.clone().ok_or_else(|| {
            AhpError::invalid_params(
                "Invalid createSession params: isolation \"worktree\" cuts a worktree from the session's folder, and this session has none; name one in workingDirectories",
            )
        })?;
        let request = FolderRequest {
            owner: new.uri.clone(),
            session: new.uri.clone(),
            from,
            title: None,
            settings: new.config.values.clone(),
        };
        let folder = workspaces.make_folder(self, request).await?;
        let mut core = self.lock();
        if core.ch.sessions.contains_key(&new.uri) || core.store.has_session(&new.uri).unwrap_or(false) {
            workspaces.settle(&mut core, &new.uri, false);
            return Err(AhpError::session_exists(&new.uri));
        }
        let uri = new.uri.clone();
        new.working_directory = Some(folder);
        self.open_created(&mut core, new, active_client);
        workspaces.settle(&mut core, &uri, true);
        // A confined session's box is opened as it is made (a container is made meanwhile), so
        // it is ready by its first turn.
        let _ = core.open_box(&uri);
        Ok(())
    }

    /// Checks a `createSession` and works out the session it asks for.
    fn plan_session(
        &self,
        conn: &ConnState,
        params: CreateSessionParams,
    ) -> Result<(NewSession, Option<SessionActiveClient>), AhpError> {
        let uri = params.channel.clone();
        if channel_kind(&uri) != Some(ChannelKind::Session) {
            return Err(AhpError::invalid_params(format!(
                "Invalid createSession params: channel must be an ahp-session:/<id> URI, not {uri}"
            )));
        }
        let working_directory = match params.working_directories.as_ref().and_then(|d| d.first()) {
            None => self.config().default_directory.clone(),
            Some(dir) => {
                let path = path_of(dir).ok_or_else(|| {
                    AhpError::invalid_params(format!(
                        "Invalid createSession params: {dir} is not a file:// URI of an absolute path"
                    ))
                })?;
                if !path.is_dir() {
                    return Err(AhpError::invalid_params(format!(
                        "Invalid createSession params: {} is not a directory",
                        path.display()
                    )));
                }
                Some(path)
            }
        };
        let mut core = self.lock();
        if core.ch.sessions.contains_key(&uri) || core.store.has_session(&uri).unwrap_or(false) {
            return Err(AhpError::session_exists(&uri));
        }
        // A session the store cannot keep is not made, as a turn is not begun (`store/health.rs`).
        if core.store.trouble().is_some() && !core.retry_store() {
            return Err(AhpError::internal(core.store.cannot_write().unwrap_or_default()));
        }
        let provider = core.pick_provider(params.provider.as_deref())?;
        let schema = core.started_schema(&provider)?;
        let values = resolve_config(&schema, params.config.as_ref())?;
        if let Some(active) = &params.active_client {
            if conn.client_id.as_deref() != Some(active.client_id.as_str()) {
                return Err(AhpError::invalid_params(
                    "Invalid createSession params: activeClient.clientId must be this connection's clientId",
                ));
            }
        }
        let new = NewSession {
            uri,
            provider,
            config: SessionConfigState { schema: schema.schema.clone(), values },
            working_directory,
            // Under a users directory the person who opened it owns it: deleting is their say.
            owner: core.users.as_ref().and(conn.principal.as_sender()),
            parent: None,
            depth: 0,
        };
        Ok((new, params.active_client))
    }

    /// Opens a session a client asked for, with the client active in it when it said so.
    fn open_created(&self, core: &mut Core, new: NewSession, active_client: Option<SessionActiveClient>) {
        let uri = new.uri.clone();
        self.open_session(core, new, |core| {
            if let Some(active) = active_client {
                let action =
                    StateAction::SessionActiveClientSet(SessionActiveClientSetAction { active_client: active });
                core.apply(&uri, action, None, None);
            }
        });
    }

    pub(super) fn dispose_session_command(
        &self,
        _conn: &mut ConnState,
        params: DisposeSessionParams,
    ) -> Result<Value, AhpError> {
        self.dispose_session(&params.channel).map(|()| Value::Null)
    }

    /// Deletes a session: out of memory (its chats' backend sessions closed) and out of the store,
    /// and root subscribers told.
    pub fn dispose_session(&self, uri: &str) -> Result<(), AhpError> {
        let mut core = self.lock();
        if !self.ensure_loaded(&mut core, uri) {
            return Err(AhpError::session_not_found(uri));
        }
        // Its worktree goes too, unless something in it is not merged (told while the session's
        // folders can still be read).
        let event = crate::host::ports::Event::SessionRemoved { session: uri.to_owned() };
        core.workspaces.clone().event(&mut core, event);
        if let Some(agent_merge) = core.agent_merge.clone() {
            agent_merge.session_removed(uri);
        }
        if let Some(resources) = core.resources.clone() {
            resources.session_removed(uri);
        }
        core.remove_session_state(uri, Farewell::Close);
        // Its box goes once its processes were told to close.
        if let Some(boxes) = core.boxes.clone() {
            boxes.session_removed(uri);
        }
        if let Err(e) = core.store.delete_session(uri) {
            tracing::error!("{e}");
        }
        core.publish_session_count();
        let frame = notification(
            "root/sessionRemoved",
            &SessionRemovedParams { channel: ROOT_RESOURCE_URI.to_owned(), session: uri.to_owned() },
        );
        core.announce_session(&frame);
        Ok(())
    }

    pub(super) fn list_sessions(&self, _conn: &mut ConnState, reply: Reply, params: ListSessionsParams) {
        if !self.has_catalogue() && self.lock().remotes.is_none() {
            return reply.send(self, self.list_stored_sessions(params));
        }
        let host = self.clone();
        self.spawn("list sessions with the agents' own", async move {
            let result = host.list_with_catalogue(params).await;
            reply.send(&host, result);
        });
    }

    fn list_stored_sessions(&self, params: ListSessionsParams) -> Result<Value, AhpError> {
        let page = self.list_sessions_page(params)?;
        let mut result = serde_json::json!({ "items": page.items });
        if let Some((modified, uri)) = page.next {
            result["nextCursor"] = Value::String(encode_cursor(&modified, &uri));
        }
        Ok(result)
    }

    /// One page of the store's sessions for `listSessions` params.
    pub(crate) fn list_sessions_page(&self, params: ListSessionsParams) -> Result<StorePage, AhpError> {
        check_root_channel("listSessions", &params.channel)?;
        let limit = match params.limit {
            None => 1000,
            Some(n) if n >= 1 => usize::try_from(n.min(1000)).unwrap_or(1000),
            Some(n) => {
                return Err(AhpError::invalid_params(format!(
                    "Invalid listSessions params: limit must be at least 1, not {n}"
                )))
            }
        };
        let after = match params.cursor.as_deref() {
            None => None,
            Some(cursor) => Some(decode_cursor(cursor).ok_or_else(|| {
                AhpError::invalid_params(format!(
                    "Invalid listSessions params: cursor {cursor} is not one this host gave"
                ))
            })?),
        };
        // The store is the catalogue: sessions not used since start-up are listed from it without
        // being loaded, and the live ones write their summary there whenever it changes.
        let core = self.lock();
        let page = core
            .store
            .page(after.as_ref().map(|(m, u)| (m.as_str(), u.as_str())), limit)
            .map_err(|e| AhpError::internal(e.to_string()))?;
        Ok(StorePage { store_has_more: page.next.is_some(), items: page.items, next: page.next, limit, after })
    }
}

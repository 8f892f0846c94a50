//! Sessions and chats as a catalogue: creating and disposing them, the summaries list views read,
//! the session's chat entries, and its `inputNeeded` list — the upkeep the reducers leave to the
//! host.

use std::collections::VecDeque;

use ahp_types::actions::{
    PartialChatSummary, RootActiveSessionsChangedAction, SessionChatAddedAction, SessionChatUpdatedAction,
    SessionDefaultChatChangedAction, SessionInputNeededRemovedAction, SessionInputNeededSetAction,
    SessionWorkingDirectoryReplacedAction, SessionWorkingDirectorySetAction, StateAction,
};
use ahp_types::common::JsonObject;
use ahp_types::notifications::{PartialSessionSummary, SessionAddedParams, SessionSummaryChangedParams};
use ahp_types::state::{
    AnnotationsState, ChatState, ChatSummary, ResponsePart, SessionChatInputRequest, SessionChatSummary,
    SessionConfigState, SessionInputRequest, SessionLifecycle, SessionState, SessionSummary,
    SessionToolClientExecutionRequest, SessionToolConfirmationRequest, ToolCallConfirmationState, ToolCallState,
};
use ahp_types::ROOT_RESOURCE_URI;
use protocol::SchemaResult;
use serde_json::Value;

use super::core::notification;
use super::driver::{spawn_driver, Op};
use super::errors::AhpError;
use super::{now_iso, uri_id, ChatMeta, Core, Host, SessionMeta};

/// Status bits (AHP's `SessionStatus`).
pub mod status {
    /// No turn, nothing pending.
    pub const IDLE: u32 = 1;
    /// The last turn ended in error.
    pub const ERROR: u32 = 2;
    /// A turn runs.
    pub const IN_PROGRESS: u32 = 8;
    /// A turn waits for a person (includes `IN_PROGRESS`).
    pub const INPUT_NEEDED: u32 = 24;
    /// The activity bits.
    pub const ACTIVITY: u32 = 0b11111;
    /// Seen since it last changed.
    pub const IS_READ: u32 = 32;
    /// Archived.
    pub const IS_ARCHIVED: u32 = 64;
}

const NEW_SESSION_TITLE: &str = "New session";

/// A session about to be opened, however it was asked for.
pub struct NewSession {
    /// Its channel.
    pub uri: String,
    /// Its backend.
    pub provider: String,
    /// Its config schema and values (already checked).
    pub config: SessionConfigState,
    /// The folder it runs in.
    pub working_directory: Option<std::path::PathBuf>,
    /// Who owns it.
    pub owner: Option<String>,
    /// The session whose tools created it.
    pub parent: Option<String>,
    /// How many create links sit above it.
    pub depth: u32,
}

/// The config values a session starts with: the schema's defaults under what the client chose,
/// each checked against the schema.
pub fn resolve_config(schema: &SchemaResult, given: Option<&JsonObject>) -> Result<JsonObject, AhpError> {
    let mut values = schema.defaults.clone();
    for (key, value) in given.into_iter().flatten() {
        check_config_value(schema, key, value)?;
        values.insert(key.clone(), value.clone());
    }
    Ok(values)
}

/// Checks one config value against the schema, in words a person can act on.
pub fn check_config_value(schema: &SchemaResult, key: &str, value: &Value) -> Result<(), AhpError> {
    let Some(property) = schema.schema.properties.get(key) else {
        return Err(AhpError::invalid_params(format!("Session configuration '{key}' is not a setting of this agent.")));
    };
    if let Some(allowed) = &property.r#enum {
        if property.enum_dynamic != Some(true) && !allowed.contains(value) {
            let shown = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return Err(AhpError::invalid_params(format!("Session configuration '{key}' does not offer '{shown}'.")));
        }
    }
    let type_ok = match property.r#type.as_str() {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    if !type_ok {
        return Err(AhpError::invalid_params(format!("Session configuration '{key}' must be a {}.", property.r#type)));
    }
    Ok(())
}

fn empty_chat(uri: &str, now: &str) -> ChatState {
    ChatState {
        resource: uri.to_owned(),
        title: String::new(),
        status: status::IDLE,
        activity: None,
        modified_at: now.to_owned(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

fn chat_summary(chat: &ChatState, title: &str) -> ChatSummary {
    ChatSummary {
        resource: chat.resource.clone(),
        title: title.to_owned(),
        status: chat.status,
        activity: chat.activity.clone(),
        modified_at: chat.modified_at.clone(),
        changes: chat.changes.clone(),
        origin: chat.origin.clone(),
        movable: chat.movable,
        interactivity: chat.interactivity,
        working_directories: chat.working_directories.clone(),
    }
}

/// A path from a `file://` URI (or a plain absolute path).
pub fn path_of(uri: &str) -> Option<std::path::PathBuf> {
    let path = uri.strip_prefix("file://").unwrap_or(uri);
    let path = std::path::PathBuf::from(path);
    path.is_absolute().then_some(path)
}

impl Core {
    /// The chats of a session, in its catalogue's order (none for a session that is not loaded).
    pub fn chats_of(&self, session: &str) -> Vec<String> {
        self.ch.sessions.get(session).map(|s| s.chats.iter().map(|c| c.resource.clone()).collect()).unwrap_or_default()
    }

    /// True when `provider`'s agent holds more than one chat per session.
    pub fn holds_many_chats(&self, provider: &str) -> bool {
        self.agent(provider)
            .and_then(|a| a.descriptor.as_ref())
            .and_then(|d| d.capabilities.as_ref())
            .and_then(|c| c.multiple_chats.as_ref())
            .is_some()
    }

    /// The provider a request names, or the first backend that is up.
    pub fn pick_provider(&self, asked: Option<&str>) -> Result<String, AhpError> {
        let offered: Vec<&str> =
            self.agents.iter().filter(|a| a.descriptor.is_some()).map(|a| a.provider.as_str()).collect();
        match asked {
            Some(p) if offered.contains(&p) => Ok(p.to_owned()),
            Some(p) if self.agents.iter().any(|a| a.provider == p) => {
                Err(AhpError::provider_not_found(format!("The {p} agent has not started; see the daemon's log")))
            }
            Some(p) => Err(AhpError::provider_not_found(format!(
                "This host offers no agent called {p}; it offers {}",
                if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
            ))),
            None => offered
                .first()
                .map(|p| (*p).to_owned())
                .ok_or_else(|| AhpError::provider_not_found("This host offers no agent yet")),
        }
    }

    /// The session config schema `provider`'s agent said it has, once it started.
    pub fn started_schema(&self, provider: &str) -> Result<SchemaResult, AhpError> {
        self.agent(provider)
            .and_then(|a| a.schema.clone())
            .ok_or_else(|| AhpError::provider_not_found(format!("The {provider} agent has not started yet")))
    }

    /// Tells root subscribers how many sessions there are, when it changed.
    pub fn publish_session_count(&mut self) {
        // Counted in the store: sessions not used since the daemon started are not in memory.
        let count = self.store.count().unwrap_or_else(|e| {
            tracing::error!("{e}");
            i64::try_from(self.sessions.len()).unwrap_or(i64::MAX)
        });
        if self.ch.root.active_sessions != Some(count) {
            let action =
                StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction { active_sessions: count });
            self.apply(ROOT_RESOURCE_URI, action, None, None);
        }
    }

    /// A summary nobody has been told yet (every field differs from the first real one).
    pub fn placeholder_summary(&self, uri: &str, provider: &str, created_at: &str) -> SessionSummary {
        SessionSummary {
            provider: provider.to_owned(),
            title: String::new(),
            status: 0,
            activity: None,
            origin: None,
            project: None,
            working_directories: None,
            annotations: None,
            resource: uri.to_owned(),
            created_at: created_at.to_owned(),
            modified_at: created_at.to_owned(),
            changes: None,
            meta: None,
            chats: None,
            default_chat: None,
        }
    }

    /// A session's summary as list views show it.
    pub fn summary_of(&self, uri: &str) -> Option<SessionSummary> {
        let state = self.ch.sessions.get(uri)?;
        let meta = self.sessions.get(uri)?;
        let chats: Vec<&ChatState> = state.chats.iter().filter_map(|c| self.ch.chats.get(&c.resource)).collect();
        let default = state.default_chat.as_ref().and_then(|d| self.ch.chats.get(d));
        let mut activity = default.map(|c| c.status & status::ACTIVITY).unwrap_or(status::IDLE);
        if chats.iter().any(|c| c.status & status::ACTIVITY == status::INPUT_NEEDED) {
            activity = status::INPUT_NEEDED;
        } else if activity == status::IDLE && chats.iter().any(|c| c.status & status::ACTIVITY == status::ERROR) {
            activity = status::ERROR;
        }
        let flags = state.status & !status::ACTIVITY;
        let modified_at = chats.iter().map(|c| c.modified_at.clone()).max().unwrap_or_else(|| meta.created_at.clone());
        let compact = (state.chats.len() > 1).then(|| {
            state
                .chats
                .iter()
                .map(|c| SessionChatSummary {
                    resource: c.resource.clone(),
                    title: c.title.clone(),
                    origin: c.origin.clone(),
                    interactivity: c.interactivity,
                    status: Some(c.status),
                    changes: c.changes.clone(),
                })
                .collect()
        });
        Some(SessionSummary {
            provider: state.provider.clone(),
            title: state.title.clone(),
            status: activity | flags,
            activity: state.activity.clone(),
            origin: state.origin.clone(),
            project: state.project.clone(),
            working_directories: state.working_directories.clone(),
            annotations: state.annotations.clone(),
            resource: uri.to_owned(),
            created_at: meta.created_at.clone(),
            modified_at,
            changes: meta.changes.clone(),
            meta: None,
            chats: compact,
            default_chat: state.default_chat.clone(),
        })
    }

    /// Tells root subscribers what changed in a session's summary since they were last told.
    pub fn sync_summary(&mut self, session: &str) {
        if self.tell_summary(session) {
            self.persist_session(session);
        }
    }

    /// Tells root subscribers what changed in an announced session's summary since they were last
    /// told; answers whether anything had. A session not announced yet (`root/sessionAdded` is
    /// on its way) has nobody to tell.
    pub(super) fn tell_summary(&mut self, session: &str) -> bool {
        let Some(now) = self.summary_of(session) else {
            return false;
        };
        let Some(meta) = self.sessions.get_mut(session).filter(|m| m.announced) else {
            return false;
        };
        let before = &meta.last_summary;
        if *before == now {
            return false;
        }
        let changes = PartialSessionSummary {
            provider: None,
            title: (before.title != now.title).then(|| now.title.clone()),
            status: (before.status != now.status).then_some(now.status),
            activity: (before.activity != now.activity).then(|| now.activity.clone().unwrap_or_default()),
            origin: None,
            project: None,
            working_directories: (before.working_directories != now.working_directories)
                .then(|| now.working_directories.clone().unwrap_or_default()),
            annotations: None,
            resource: None,
            created_at: None,
            modified_at: (before.modified_at != now.modified_at).then(|| now.modified_at.clone()),
            changes: (before.changes != now.changes).then(|| now.changes.clone().unwrap_or_default()),
            meta: None,
            chats: (before.chats != now.chats).then(|| now.chats.clone().unwrap_or_default()),
            default_chat: (before.default_chat != now.default_chat).then(|| now.default_chat.clone()).flatten(),
        };
        meta.last_summary = now;
        let params =
            SessionSummaryChangedParams { channel: ROOT_RESOURCE_URI.to_owned(), session: session.to_owned(), changes };
        let frame = notification("root/sessionSummaryChanged", &params);
        self.announce_session(&frame);
        true
    }

    /// Keeps the session's entry for a chat in step with the chat's own state (status, activity,
    /// modified time) with `session/chatUpdated`, then the root summary.
    pub fn sync_chat(&mut self, chat: &str) {
        let Some(state) = self.ch.chats.get(chat) else {
            return;
        };
        let Some(session) = self.chats.get(chat).map(|m| m.session.clone()) else {
            return;
        };
        let Some(entry) = self.ch.sessions.get(&session).and_then(|s| s.chats.iter().find(|c| c.resource == chat))
        else {
            return;
        };
        let changes = PartialChatSummary {
            resource: None,
            title: None,
            status: (entry.status != state.status).then_some(state.status),
            activity: (entry.activity != state.activity).then(|| state.activity.clone()).flatten(),
            modified_at: (entry.modified_at != state.modified_at).then(|| state.modified_at.clone()),
            changes: None,
            origin: None,
            movable: None,
            interactivity: None,
            working_directories: None,
        };
        let cleared_activity = entry.activity.is_some() && state.activity.is_none();
        if cleared_activity {
            // A partial update cannot clear a field: send the whole entry again.
            let summary = chat_summary(state, &entry.title);
            let action = StateAction::SessionChatAdded(SessionChatAddedAction { summary });
            self.apply(&session, action, None, None);
        } else if changes.status.is_some() || changes.activity.is_some() || changes.modified_at.is_some() {
            let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat.to_owned(), changes });
            self.apply(&session, action, None, None);
        }
    }

    /// Moves a session to another folder: its record and state say the new one, and each of its
    /// chats' backends starts again there (a busy one once its turn ends).
    pub fn move_session_folder(&mut self, session: &str, folder: &std::path::Path) {
        let new_uri = crate::fileuri::file_uri(folder);
        let old_uri = self.ch.sessions.get(session).and_then(|s| s.working_directories.as_ref()?.first().cloned());
        let action = match old_uri {
            Some(directory) => StateAction::SessionWorkingDirectoryReplaced(SessionWorkingDirectoryReplacedAction {
                directory,
                replacement: new_uri,
            }),
            None => StateAction::SessionWorkingDirectorySet(SessionWorkingDirectorySetAction { directory: new_uri }),
        };
        if let Some(meta) = self.sessions.get_mut(session) {
            meta.working_directory = Some(folder.to_owned());
        }
        self.apply(session, action, None, None);
        self.advertise_changesets(session);
        for chat in self.backend_chats_of(session) {
            self.restart_between_turns(&chat);
        }
        tracing::info!(session, folder = %folder.display(), "moved to a new workspace");
    }

    /// Moves one chat to a folder of its own (`isolate_session`): its record and state say so, the
    /// session lists the folder among its own, and the chat's backend starts again there (once
    /// its running turn ends).
    pub fn move_chat_folder(&mut self, chat: &str, folder: &std::path::Path) {
        let Some(session) = self.chats.get(chat).map(|m| m.session.clone()) else { return };
        let directory = crate::fileuri::file_uri(folder);
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.working_directory = Some(folder.to_owned());
        }
        self.persist_chat(chat);
        let action =
            StateAction::SessionWorkingDirectorySet(SessionWorkingDirectorySetAction { directory: directory.clone() });
        self.apply(&session, action, None, None);
        let action = StateAction::ChatWorkingDirectorySet(ahp_types::actions::ChatWorkingDirectorySetAction {
            directory: directory.clone(),
        });
        self.apply(chat, action, None, None);
        let changes = PartialChatSummary {
            working_directories: self.ch.chats.get(chat).and_then(|c| c.working_directories.clone()),
            ..PartialChatSummary::default()
        };
        let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat.to_owned(), changes });
        self.apply(&session, action, None, None);
        self.advertise_changesets(&session);
        self.restart_between_turns(chat);
        tracing::info!(chat, folder = %folder.display(), "moved to a folder of its own");
    }

    /// Says again what changesets a session and its chats advertise, where that changed (a
    /// folder moved, a worktree was cut or let go).
    pub fn advertise_changesets(&mut self, session: &str) {
        let wanted = self.workspaces.session_changesets(self, session);
        if self.ch.sessions.get(session).is_some_and(|s| s.changesets != wanted) {
            let action = StateAction::SessionChangesetsChanged(ahp_types::actions::SessionChangesetsChangedAction {
                changesets: wanted,
            });
            self.apply(session, action, None, None);
        }
        for chat in self.chats_of(session) {
            let wanted = self.workspaces.chat_changesets(self, &chat);
            if self.ch.chats.get(&chat).is_some_and(|c| c.changesets != wanted) {
                let action = StateAction::ChatChangesetsChanged(ahp_types::actions::ChatChangesetsChangedAction {
                    changesets: wanted,
                });
                self.apply(&chat, action, None, None);
            }
        }
    }

    /// What a session (and, with `chat`, one of its chats) changed, at a glance: the session's
    /// summary carries it, and the chat's catalogue entry (`session/chatUpdated`).
    pub fn set_changes(
        &mut self,
        session: &str,
        chat: Option<&str>,
        changes: Option<ahp_types::state::ChangesSummary>,
    ) {
        match chat {
            None => {
                let Some(meta) = self.sessions.get_mut(session) else { return };
                if meta.changes == changes {
                    return;
                }
                meta.changes = changes;
                self.persist_session(session);
                self.tell_summary(session);
            }
            Some(chat) => {
                let Some(entry) =
                    self.ch.sessions.get(session).and_then(|s| s.chats.iter().find(|c| c.resource == chat))
                else {
                    return;
                };
                let Some(changes) = changes.filter(|c| entry.changes.as_ref() != Some(c)) else { return };
                let changes = PartialChatSummary { changes: Some(changes), ..PartialChatSummary::default() };
                let action =
                    StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat.to_owned(), changes });
                self.apply(session, action, None, None);
                self.persist_chat(chat);
            }
        }
    }

    /// Renames a chat in its session's catalogue (and the session, for its default chat).
    pub fn set_chat_title(&mut self, chat: &str, title: &str) {
        let Some(session) = self.chats.get(chat).map(|m| m.session.clone()) else {
            return;
        };
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.title = title.to_owned();
        }
        self.persist_chat(chat);
        let changes = PartialChatSummary { title: Some(title.to_owned()), ..PartialChatSummary::default() };
        self.apply(
            &session,
            StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat.to_owned(), changes }),
            None,
            None,
        );
        let is_default = self.ch.sessions.get(&session).and_then(|s| s.default_chat.as_deref()) == Some(chat);
        if is_default {
            let action = StateAction::SessionTitleChanged(ahp_types::actions::SessionTitleChangedAction {
                title: title.to_owned(),
            });
            self.apply(&session, action, None, None);
        }
    }

    /// Raises and takes down the session's `inputNeeded` entries for a chat from the chat's
    /// state: a call waiting to be allowed, a question waiting for an answer.
    pub fn sync_input_needed(&mut self, chat: &str) {
        let Some(state) = self.ch.chats.get(chat) else {
            return;
        };
        let Some(session) = self.chats.get(chat).map(|m| m.session.clone()) else {
            return;
        };
        let owners = self.client_call_owners(chat);
        let wanted = wanted_input(chat, state, &owners);
        let current: Vec<SessionInputRequest> = self
            .ch
            .sessions
            .get(&session)
            .and_then(|s| s.input_needed.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| input_chat(r) == Some(chat))
            .collect();
        for old in &current {
            let id = input_id(old).unwrap_or_default().to_owned();
            if !wanted.iter().any(|w| input_id(w) == Some(id.as_str())) {
                self.apply(
                    &session,
                    StateAction::SessionInputNeededRemoved(SessionInputNeededRemovedAction { id }),
                    None,
                    None,
                );
            }
        }
        for request in wanted {
            if !current.contains(&request) {
                self.apply(
                    &session,
                    StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction { request })),
                    None,
                    None,
                );
            }
        }
    }
}

fn wanted_input(
    chat: &str,
    state: &ChatState,
    owners: &std::collections::HashMap<String, String>,
) -> Vec<SessionInputRequest> {
    let Some(turn) = &state.active_turn else {
        return Vec::new();
    };
    let mut wanted = Vec::new();
    for part in &turn.response_parts {
        match part {
            ResponsePart::ToolCall(tc) => {
                let confirmation = match &tc.tool_call {
                    ToolCallState::PendingConfirmation(p) => {
                        Some((p.tool_call_id.clone(), ToolCallConfirmationState::PendingConfirmation(p.clone())))
                    }
                    ToolCallState::PendingResultConfirmation(p) => {
                        Some((p.tool_call_id.clone(), ToolCallConfirmationState::PendingResultConfirmation(p.clone())))
                    }
                    _ => None,
                };
                if let ToolCallState::Running(running) = &tc.tool_call {
                    if let Some(client_id) = owners.get(&running.tool_call_id) {
                        wanted.push(SessionInputRequest::ToolClientExecution(SessionToolClientExecutionRequest {
                            id: format!("toolClientExecution:{chat}:{}:{}", turn.id, running.tool_call_id),
                            chat: chat.to_owned(),
                            turn_id: turn.id.clone(),
                            client_id: client_id.clone(),
                            tool_call: running.clone(),
                        }));
                    }
                }
                if let Some((id, tool_call)) = confirmation {
                    wanted.push(SessionInputRequest::ToolConfirmation(SessionToolConfirmationRequest {
                        id: format!("toolConfirmation:{chat}:{id}"),
                        chat: chat.to_owned(),
                        turn_id: turn.id.clone(),
                        tool_call,
                    }));
                }
            }
            ResponsePart::InputRequest(r) if r.response.is_none() => {
                wanted.push(SessionInputRequest::ChatInput(SessionChatInputRequest {
                    id: format!("chatInput:{chat}:{}", r.request.id),
                    chat: chat.to_owned(),
                    request: r.request.clone(),
                }));
            }
            _ => {}
        }
    }
    wanted
}

fn input_id(request: &SessionInputRequest) -> Option<&str> {
    match request {
        SessionInputRequest::ChatInput(r) => Some(&r.id),
        SessionInputRequest::ToolConfirmation(r) => Some(&r.id),
        SessionInputRequest::ToolClientExecution(r) => Some(&r.id),
        SessionInputRequest::ToolAuthentication(r) => Some(&r.id),
        SessionInputRequest::Unknown(_) => None,
    }
}

fn input_chat(request: &SessionInputRequest) -> Option<&str> {
    match request {
        SessionInputRequest::ChatInput(r) => Some(&r.chat),
        SessionInputRequest::ToolConfirmation(r) => Some(&r.chat),
        SessionInputRequest::ToolClientExecution(r) => Some(&r.chat),
        SessionInputRequest::ToolAuthentication(r) => Some(&r.chat),
        SessionInputRequest::Unknown(_) => None,
    }
}

impl Host {
    /// Opens a session however it was asked for (a client's `createSession`, a session tool): its
    /// channels, its record, its default chat and the backend's start, then tells root subscribers.
    /// `before_announce` runs once the default chat exists and before the session is announced.
    /// Answers the default chat.
    pub(crate) fn open_session(
        &self,
        core: &mut Core,
        new: NewSession,
        before_announce: impl FnOnce(&mut Core),
    ) -> String {
        let NewSession { uri, provider, config, working_directory, owner, parent, depth } = new;
        let now = now_iso();
        let state = SessionState {
            provider: provider.clone(),
            title: NEW_SESSION_TITLE.to_owned(),
            status: status::IDLE,
            activity: None,
            origin: None,
            project: None,
            working_directories: working_directory.as_ref().map(|d| vec![crate::fileuri::file_uri(d)]),
            annotations: None,
            lifecycle: SessionLifecycle::Creating,
            creation_error: None,
            server_tools: None,
            active_clients: Vec::new(),
            chats: Vec::new(),
            default_chat: None,
            config: Some(config),
            customizations: core.initial_customizations(&uri, &provider),
            changesets: None,
            input_needed: None,
            meta: core.with_commands(&provider, None),
        };
        let annotations = format!("{uri}/annotations");
        core.ch.sessions.insert(uri.clone(), state);
        core.ch.annotations.insert(annotations.clone(), AnnotationsState { annotations: Vec::new() });
        let placeholder = core.placeholder_summary(&uri, &provider, &now);
        core.sessions.insert(
            uri.clone(),
            SessionMeta {
                provider: provider.clone(),
                created_at: now.clone(),
                working_directory,
                last_summary: placeholder,
                annotations,
                owner,
                parent,
                depth,
                announced: false,
                changes: None,
            },
        );
        let server_tools = core.server_tools(&uri);
        let changesets = core.workspaces.session_changesets(core, &uri);
        if let Some(state) = core.ch.sessions.get_mut(&uri) {
            state.server_tools = Some(server_tools);
            state.changesets = changesets;
        }
        core.persist_session(&uri);
        let chat = format!("ahp-chat:/{}", uri_id(&uri));
        self.add_chat(core, &uri, &chat, &now, true);
        before_announce(core);
        core.publish_session_count();
        if let Some(summary) = core.summary_of(&uri) {
            if let Some(meta) = core.sessions.get_mut(&uri) {
                meta.last_summary = summary.clone();
                meta.announced = true;
            }
            let frame = notification(
                "root/sessionAdded",
                &SessionAddedParams { channel: ROOT_RESOURCE_URI.to_owned(), summary },
            );
            core.announce_session(&frame);
        }
        if let Some(meta) = core.chats.get(&chat) {
            let by = core.clock().after(super::driver::CREATE_WITHIN);
            let _ = meta.driver.send(Op::Ensure { announce_by: Some(by) });
        }
        chat
    }

    /// Adds a chat to a session: its state, its driver, and its catalogue entry.
    pub(crate) fn add_chat(&self, core: &mut Core, session: &str, chat: &str, now: &str, default: bool) {
        self.add_chat_with(core, session, chat, now, default, None);
    }

    /// Adds a chat that runs `harness`'s agent and settings rather than its session's (`None`: the
    /// session's).
    pub(crate) fn add_chat_with(
        &self,
        core: &mut Core,
        session: &str,
        chat: &str,
        now: &str,
        default: bool,
        harness: Option<crate::store::records::Harness>,
    ) {
        self.add_chat_shaped(core, session, chat, now, harness, ChatShape { default, ..ChatShape::default() });
    }

    /// Adds a chat that may not be a plain new one: a fork (its origin and the turns it copies),
    /// a subagent's (its origin, read-only, titled by its task).
    pub(crate) fn add_chat_shaped(
        &self,
        core: &mut Core,
        session: &str,
        chat: &str,
        now: &str,
        harness: Option<crate::store::records::Harness>,
        shape: ChatShape,
    ) {
        let provider = match &harness {
            Some(h) => h.provider.clone(),
            None => core.sessions.get(session).map(|m| m.provider.clone()).unwrap_or_default(),
        };
        let mut state = empty_chat(chat, now);
        state.origin = shape.origin;
        state.interactivity = shape.interactivity;
        state.title = shape.title.clone();
        state.turns = shape.turns;
        core.ch.chats.insert(chat.to_owned(), state.clone());
        let driver = spawn_driver(self.clone(), chat.to_owned(), provider, None);
        let position = core.ch.sessions.get(session).map(|s| s.chats.len()).unwrap_or(0);
        let titled = !shape.title.is_empty() || !state.turns.is_empty();
        core.chats.insert(
            chat.to_owned(),
            ChatMeta {
                session: session.to_owned(),
                conversation_id: uri_id(chat).to_owned(),
                started_in_backend: false,
                driver,
                live: None,
                turn_clock: None,
                client_started: false,
                handing_over: None,
                ended: VecDeque::new(),
                steering_offered: None,
                titled,
                title: shape.title.clone(),
                position: i64::try_from(position).unwrap_or(0),
                transcripts: shape.transcripts,
                client_calls: std::collections::HashMap::new(),
                senders: std::collections::HashMap::new(),
                harness,
                working_directory: None,
                cut: shape.cut,
                resumable: false,
                parked: None,
            },
        );
        let changesets = core.workspaces.chat_changesets(core, chat);
        if let Some(state) = core.ch.chats.get_mut(chat) {
            state.changesets = changesets;
        }
        core.persist_chat(chat);
        core.store_turns(chat);
        let state = core.ch.chats.get(chat).cloned().unwrap_or(state);
        let summary = chat_summary(&state, &shape.title);
        core.apply(session, StateAction::SessionChatAdded(SessionChatAddedAction { summary }), None, None);
        if shape.default {
            let action = StateAction::SessionDefaultChatChanged(SessionDefaultChatChangedAction {
                default_chat: Some(chat.to_owned()),
            });
            core.apply(session, action, None, None);
        }
    }

    /// Opens a chat beside a session's others (a client's `createChat`, a session tool): its
    /// state, its driver, its catalogue entry, and its backend's start. `harness` is the agent it
    /// runs when that is not its session's.
    pub(crate) fn open_chat(
        &self,
        core: &mut Core,
        session: &str,
        chat: &str,
        harness: Option<crate::store::records::Harness>,
    ) {
        self.add_chat_with(core, session, chat, &now_iso(), false, harness);
        if let Some(meta) = core.chats.get(chat) {
            let _ = meta.driver.send(Op::Ensure { announce_by: None });
        }
    }
}

/// What a chat begins with beyond an empty one.
#[derive(Default)]
pub(crate) struct ChatShape {
    /// It becomes its session's default chat.
    pub default: bool,
    /// Where it came from.
    pub origin: Option<ahp_types::state::ChatOrigin>,
    /// Whether people may send it messages.
    pub interactivity: Option<ahp_types::state::ChatInteractivity>,
    /// Its title.
    pub title: String,
    /// The turns it holds already (a fork's copy).
    pub turns: Vec<ahp_types::state::Turn>,
    /// What the backend wrote those turns down as.
    pub transcripts: std::collections::HashMap<String, String>,
    /// The cut its backend begins from.
    pub cut: Option<protocol::Cut>,
}

/// How a chat's driver ends when the chat leaves memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Farewell {
    /// The chat is gone for good: its backend session is closed.
    Close,
    /// The chat is unloaded: its backend session is closed, and the chat's next driver waits for
    /// that close before it starts the conversation again.
    Unload,
}

impl Core {
    /// Takes a chat's channel and records out of memory and ends its driver.
    pub(super) fn remove_chat_state(&mut self, chat: &str, farewell: Farewell) {
        self.command_turns.remove(chat);
        self.budget_forget(chat);
        if farewell == Farewell::Close {
            self.remove_chat_terminals(chat);
        }
        if let Some(meta) = self.chats.remove(chat) {
            match farewell {
                Farewell::Close => {
                    let _ = meta.driver.send(Op::Close);
                }
                Farewell::Unload => {
                    let closed = tokio_util::sync::CancellationToken::new();
                    if meta.driver.send(Op::Unload(closed.clone())).is_ok() {
                        self.retiring.insert(chat.to_owned(), closed);
                    }
                }
            }
        }
        self.ch.chats.remove(chat);
        self.ch.drop_channel(chat);
    }

    /// Takes a session's channels (its chats' and annotations' too) and the host's records of it
    /// out of memory, ending each chat's driver, and closes its tools endpoint.
    pub(super) fn remove_session_state(&mut self, session: &str, farewell: Farewell) {
        self.remove_session_terminals(session, farewell == Farewell::Close);
        for chat in self.chats_of(session) {
            self.remove_chat_state(&chat, farewell);
        }
        if let Some(meta) = self.sessions.remove(session) {
            self.ch.annotations.remove(&meta.annotations);
            self.ch.drop_channel(&meta.annotations);
        }
        self.ch.sessions.remove(session);
        self.ch.drop_channel(session);
        self.endpoints.close(session);
        self.client_rules.remove(session);
    }
}

/// The cursor of the listing page that starts after (`modified_at`, `uri`).
pub fn encode_cursor(modified_at: &str, uri: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{modified_at}\n{uri}"))
}

pub fn decode_cursor(cursor: &str) -> Option<(String, String)> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (modified, uri) = text.split_once('\n')?;
    Some((modified.to_owned(), uri.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let c = encode_cursor("2026-01-01T00:00:00.000Z", "ahp-session:/x");
        assert_eq!(decode_cursor(&c), Some(("2026-01-01T00:00:00.000Z".into(), "ahp-session:/x".into())));
        assert_eq!(decode_cursor("garbage!"), None);
    }
    use agent_runner::echo::echo_schema;

    #[test]
    fn config_is_checked_against_the_schema() {
        let schema = echo_schema();
        let mut given = JsonObject::new();
        given.insert("voice".into(), Value::from("shouty"));
        assert_eq!(resolve_config(&schema, Some(&given)).expect("ok")["voice"], "shouty");
        given.insert("voice".into(), Value::from("loud"));
        assert_eq!(
            resolve_config(&schema, Some(&given)).expect_err("refused").message,
            "Session configuration 'voice' does not offer 'loud'."
        );
        let mut unknown = JsonObject::new();
        unknown.insert("colour".into(), Value::from("red"));
        assert!(resolve_config(&schema, Some(&unknown)).is_err());
        assert_eq!(resolve_config(&schema, None).expect("defaults")["voice"], "plain");
    }
}

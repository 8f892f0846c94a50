//! The host's face toward its features (its own tools, `tools/`; sessions' folders and what changed
//! in them, `worktrees/`; its terminals, `terminals/`; Agent Merge, `agentmerge/`): the one way
//! they reach it, and the one way it reaches them.
//!
//! The host knows its features only through the traits registered with it: [`Tools`] (the
//! catalogue — which tools a session is offered, and running a call of one — and one hook for a
//! turn's end) and [`Workspaces`] (a session's folder made before it opens, the changesets it
//! advertises and serves, and the events that change them), both given when it is built
//! ([`super::Host::new`]), and [`Terminals`] (opening one, its input and size, ending its process,
//! and running a `!` command), registered with [`Host::serve_terminals`], and [`AgentMerge`]
//! (what its four tools do), registered with [`Host::serve_agent_merge`], and [`Resources`] (the
//! content a part would carry inline, kept in the session's folder), registered with
//! [`Host::serve_resources`], [`Boxes`] (how a confined session's processes are started: a
//! sandbox, a container), registered with [`Host::serve_boxes`], and [`Automations`] (the
//! automation catalogue and its runs, on their AHP channels), registered with
//! [`Host::serve_automations`]. It never names a
//! feature module. The features reach the host through this module alone: what they may read of
//! its state ([`Core`]'s accessors below), what they may do ([`Core::apply`], the turn engine,
//! delivering a message to a chat ([`Host::deliver`]), opening sessions and chats, asking a person,
//! opening terminal channels), and the types and helpers re-exported here. Nothing under `host/` imports a feature, and `ahpd/tests/tidy.rs`
//! keeps it so.

use std::path::{Path, PathBuf};

use ahp_types::actions::{SessionMetaChangedAction, StateAction};
use ahp_types::state::{AnnotationsState, ChangesetState, ChatState, SessionState};
use serde_json::Value;

use super::{Core, Host};
use crate::clock::Clock;
use crate::store::Store;

pub use super::catalog::{check_config_value, path_of, resolve_config, status, NewSession};
pub use super::commands::CHAT_MOVES_OFF;
pub use super::config::TerminalSettings;
pub use super::core::{Committed, AUTOMATIONS_URI, AUTOMATION_RUN_SCHEME, CHANGESET_SCHEME};
pub use super::deliver::{queued_message, revision_of, was_queued_behind, Delivered, Sender};
pub use super::errors::AhpError;
pub use super::grants::refusal;
pub use super::limits::over_limit;
pub use super::ports::{
    AgentMerge, Asker, Automations, Boxes, Caller, CommandRun, Event, Features, FolderRequest, Offered, Pending,
    Relayed, Remotes, Resources, Terminals, ToolCall, ToolRun, Tools, Watching, Workspaces,
};
pub use super::questions::{Answer, Unanswered};
pub use super::requests::{ClientRequestError, ClientResource, CLIENT_REQUEST_TIMEOUT};
pub use super::terminal_channels::{claiming_session, content_bytes, is_running, output_of, tail, COMMAND_PREFIX};
pub use super::turns::{host_turn, RunningCall};
pub use super::WeakHost;
pub use super::{new_id, now_iso, uri_id, AgentEntry, ChatMeta, LiveSettings, SessionMeta};
pub use crate::fileuri::file_uri;
pub use crate::store::KeptTerminalRecord;
pub use crate::users::Principal;

/// The key on a confined session's `_meta` where a client reads its box ([`Core::open_box`]).
pub const BOX_META_KEY: &str = "ahpd.box";

impl Host {
    /// Registers the automations feature (the daemon does): the catalogue channel is served from
    /// `catalogue` on.
    pub fn serve_automations(
        &self,
        feature: std::sync::Arc<dyn Automations>,
        catalogue: ahp_types::state::AutomationState,
    ) {
        let mut core = self.lock();
        core.automations = Some(feature);
        core.ch.automations = Some(catalogue);
        core.ch.mark_loaded(AUTOMATIONS_URI);
    }
}

impl Core {
    /// The automation catalogue as it stands.
    pub fn automations_state(&self) -> Option<&ahp_types::state::AutomationState> {
        self.ch.automations.as_ref()
    }

    /// A run's channel state.
    pub fn automation_run_state(&self, uri: &str) -> Option<&ahp_types::state::AutomationRunState> {
        self.ch.automation_runs.get(uri)
    }

    /// Serves a run's channel from `state` on (a new run, or one read back from the store).
    pub fn open_automation_run(&mut self, state: ahp_types::state::AutomationRunState) {
        let uri = state.resource.clone();
        self.ch.automation_runs.insert(uri.clone(), state);
        self.ch.mark_loaded(&uri);
    }

    /// Stops serving a run's channel (its automation is gone, or its summary left the history).
    pub fn close_automation_run(&mut self, uri: &str) {
        self.ch.automation_runs.remove(uri);
        self.ch.drop_channel(uri);
    }

    /// Says where a session came from, before it is announced (an automation's run opens it):
    /// part of its state from its first snapshot on, and kept with it.
    pub fn set_session_origin(&mut self, session: &str, origin: ahp_types::state::SessionOrigin) {
        if let Some(state) = self.ch.sessions.get_mut(session) {
            state.origin = Some(origin);
        }
        self.persist_session(session);
    }
}

impl Host {
    /// Registers the feature that confines sessions (the daemon does; without one no session is
    /// confined).
    pub fn serve_boxes(&self, feature: std::sync::Arc<dyn Boxes>) {
        self.lock().boxes = Some(feature);
    }

    /// Registers the feature that keeps content a part would carry inline (the daemon does; a
    /// host without one keeps none).
    pub fn serve_resources(&self, feature: std::sync::Arc<dyn Resources>) {
        self.lock().resources = Some(feature);
    }

    /// Keeps what the live worker of its chat handed over (`resource/keep`), before the next thing
    /// that worker says is taken: the events of a worker are handled in order, and the part that
    /// names the content comes after it.
    pub(super) fn keep_resource(&self, incarnation: u64, params: protocol::KeepResourceParams) {
        let found = {
            let core = self.lock();
            let session =
                core.chats.get(&params.chat).filter(|m| m.live == Some(incarnation)).map(|m| m.session.clone());
            session.zip(core.resources.clone())
        };
        let Some((session, feature)) = found else { return };
        let (chat, call) = (params.chat.clone(), params.call_id.clone());
        if let Err(why) = feature.keep(&session, params) {
            tracing::warn!(chat, call, "a tool result's content was not kept: {why}");
        }
    }

    /// Registers the Agent Merge feature (the daemon does; a host without one refuses its tools).
    pub fn serve_agent_merge(&self, feature: std::sync::Arc<dyn AgentMerge>) {
        self.lock().agent_merge = Some(feature);
    }

    /// The Agent Merge feature, when this host has one.
    pub fn agent_merge(&self) -> Option<std::sync::Arc<dyn AgentMerge>> {
        self.lock().agent_merge.clone()
    }
}

/// What the tools (and the doors) read of the host's state, under its lock.
impl Core {
    /// How what runs for `session` is confined (its box's launcher), or `None` for a session on
    /// the machine itself: the one answer the backends' starts, the `!` commands and the
    /// terminals all take.
    pub fn confinement(&self, session: &str) -> Option<protocol::Confined> {
        let boxes = self.boxes.as_ref()?;
        let settings = self.ch.sessions.get(session)?.config.as_ref()?.values.clone();
        let folder = self.session(session)?.working_directory.clone()?;
        boxes.confine(session, &settings, &folder)
    }

    /// What `ahpd status` says of `session`'s box, when it has one.
    pub fn box_of(&self, session: &str) -> Option<Value> {
        self.boxes.as_ref()?.describe(session)
    }

    /// [`Core::confinement`], with the box said on the session's `_meta` (`BOX_META_KEY`: its
    /// level, engine, what it reaches and its limits) for a client to draw in the session's header,
    /// through the one write path when it changed. What changes by itself (a container's use of
    /// memory and CPU, its id once made) is `ahpd status`'s.
    pub fn open_box(&mut self, session: &str) -> Option<protocol::Confined> {
        let confined = self.confinement(session)?;
        let Some(Value::Object(described)) = self.box_of(session) else { return Some(confined) };
        let kept = ["level", "engine", "reaches", "cpuLimit", "memoryLimitBytes"];
        let shown: serde_json::Map<String, Value> =
            described.into_iter().filter(|(k, v)| kept.contains(&k.as_str()) && !v.is_null()).collect();
        let shown = Value::Object(shown);
        let mut meta = self.session_state(session).and_then(|s| s.meta.clone()).unwrap_or_default();
        if meta.get(BOX_META_KEY) != Some(&shown) {
            meta.insert(BOX_META_KEY.to_owned(), shown);
            let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) });
            self.apply(session, action, None, None);
        }
        Some(confined)
    }

    /// A chat's channel state.
    pub fn chat_state(&self, chat: &str) -> Option<&ChatState> {
        self.ch.chats.get(chat)
    }

    /// A session's channel state.
    pub fn session_state(&self, session: &str) -> Option<&SessionState> {
        self.ch.sessions.get(session)
    }

    /// Every session in memory, with its channel state.
    pub fn session_states(&self) -> impl Iterator<Item = (&String, &SessionState)> {
        self.ch.sessions.iter()
    }

    /// An annotations channel's state.
    pub fn annotations_state(&self, channel: &str) -> Option<&AnnotationsState> {
        self.ch.annotations.get(channel)
    }

    /// The host's record of a session.
    pub fn session(&self, session: &str) -> Option<&SessionMeta> {
        self.sessions.get(session)
    }

    /// The host's record of a chat.
    pub fn chat(&self, chat: &str) -> Option<&ChatMeta> {
        self.chats.get(chat)
    }

    /// The backends, in the config's order.
    pub fn agents(&self) -> &[AgentEntry] {
        &self.agents
    }

    /// The session store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The daemon keys that apply live.
    pub fn settings(&self) -> &LiveSettings {
        &self.settings
    }

    /// True under a users directory (somebody to ask about grants).
    pub fn has_users(&self) -> bool {
        self.users.is_some()
    }

    /// The host's clock (manual in tests).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The folder a chat works in: its own (`isolate_session`), else its session's.
    pub fn chat_folder(&self, chat: &str) -> Option<PathBuf> {
        let meta = self.chats.get(chat)?;
        meta.working_directory.clone().or_else(|| self.sessions.get(&meta.session)?.working_directory.clone())
    }

    /// A changeset channel's state, while somebody watches it.
    pub fn changeset_state(&self, uri: &str) -> Option<&ChangesetState> {
        self.ch.changesets.get(uri)
    }

    /// The changeset channels somebody watches now.
    pub fn changeset_channels(&self) -> Vec<String> {
        self.ch.changesets.keys().cloned().collect()
    }

    /// Forgets a changeset channel (its session or chat is gone), unsubscribing its watchers.
    pub fn drop_changeset(&mut self, uri: &str) {
        self.ch.changesets.remove(uri);
        self.ch.drop_channel(uri);
    }

    /// True when the folder is one the host has a session (or chat) working in now.
    pub fn folder_in_use(&self, folder: &Path) -> bool {
        self.sessions.values().any(|m| m.working_directory.as_deref() == Some(folder))
            || self.chats.values().any(|m| m.working_directory.as_deref() == Some(folder))
    }

    /// Names a chat for good: its title is not taken from its first message afterwards.
    pub fn name_chat(&mut self, chat: &str, title: &str) {
        self.set_chat_title(chat, title);
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.titled = true;
        }
    }
}

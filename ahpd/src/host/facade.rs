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
//! (what its four tools do), registered with [`Host::serve_agent_merge`]. It never names a
//! feature module. The features reach the host through this module alone: what they may read of
//! its state ([`Core`]'s accessors below), what they may do ([`Core::apply`], the turn engine,
//! opening sessions and chats, asking a person, opening terminal channels), and the types and
//! helpers re-exported here. Nothing under `host/` imports a feature, and `ahpd/tests/tidy.rs`
//! keeps it so.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use ahp_types::commands::{InvokeChangesetOperationParams, InvokeChangesetOperationResult, ResourceReadResult};
use ahp_types::common::JsonObject;
use ahp_types::state::{AnnotationsState, Changeset, ChangesetState, ChatState, SessionState};
use protocol::{SchemaResult, ToolOutcome, ToolSpec};
use serde_json::Value;

use super::{Core, Host};
use crate::clock::Clock;
use crate::store::Store;

pub use super::actions::was_queued_behind;
pub use super::catalog::{check_config_value, path_of, resolve_config, status, NewSession};
pub use super::commands::CHAT_MOVES_OFF;
pub use super::core::{Committed, CHANGESET_SCHEME};
pub use super::errors::AhpError;
pub use super::grants::refusal;
pub use super::limits::over_limit;
pub use super::mirrors::Relayed;
pub use super::questions::{Answer, Unanswered};
pub use super::requests::{file_uri, ClientRequestError, ClientResource, CLIENT_REQUEST_TIMEOUT};
pub use super::terminal_channels::{
    claiming_session, content_bytes, is_running, output_of, tail, TerminalSettings, COMMAND_PREFIX,
};
pub use super::turns::{host_turn, RunningCall};
pub use super::WeakHost;
pub use super::{new_id, now_iso, uri_id, AgentEntry, ChatMeta, LiveSettings, SessionMeta};
pub use crate::store::KeptTerminalRecord;
pub use crate::users::Principal;

/// The features a host is built with.
pub struct Features {
    /// Its own tools.
    pub tools: std::sync::Arc<dyn Tools>,
    /// Sessions' folders and what changed in them.
    pub workspaces: std::sync::Arc<dyn Workspaces>,
}

/// What the host asks of its own tools.
pub trait Tools: Send + Sync + 'static {
    /// The catalogue: the host's own tools `session` is offered now, as its backends are handed
    /// them, after every switch and in the session's own wording.
    fn offered(&self, core: &Core, session: &str) -> Vec<Offered>;

    /// Runs a call of one of them (the host bounds it: `crate::bounds`).
    fn run<'a>(&'a self, host: &'a Host, name: &'a str, call: ToolCall) -> ToolRun<'a>;

    /// True for a tool that may wait for a person's answer: it waits as long as a client's tool.
    fn waits_for_person(&self, name: &str) -> bool;

    /// A turn ended in `chat` (completed, cancelled or failed), before anything queued behind it
    /// starts.
    fn turn_ended(&self, core: &mut Core, chat: &str, turn_id: &str);
}

/// What the host asks of its terminals: the ptys and the processes on them. Every method runs
/// under the host's lock and returns at once; what takes time runs in the feature's own tasks,
/// which reach the host again through a [`WeakHost`].
pub trait Terminals: Send + Sync + 'static {
    /// `createTerminal`, once the host checked the channel is new, the claimed session is loaded
    /// and the asker may write to it: opens the terminal (its channel through
    /// [`Core::open_terminal`]) or says why not.
    fn create(
        &self,
        core: &mut Core,
        asker: &Asker,
        params: ahp_types::commands::CreateTerminalParams,
    ) -> Result<(), AhpError>;

    /// A client's `terminal/input`, said already: written to the terminal's pty.
    fn input(&self, uri: &str, data: &str);

    /// A client's `terminal/resized`, said already: the terminal's pty takes the size.
    fn resize(&self, uri: &str, cols: u16, rows: u16);

    /// Ends a terminal's processes now (disposed, its session deleted, its command stopped). The
    /// host closes the channel itself where it goes.
    fn end(&self, uri: &str);

    /// Runs a `!` command as the host's turn (said already); the feature ends the turn when the
    /// command exits. `Err` says why it could not start (the host fails the turn with it).
    fn run_command(&self, core: &mut Core, run: CommandRun) -> Result<(), String>;
}

/// What the host's Agent Merge tools ask of the Agent Merge feature: each answers its tool's
/// text, or the refusal's sentence.
pub trait AgentMerge: Send + Sync + 'static {
    /// `setAgentMergeEnabled`.
    fn configure<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>>;
    /// `readAgentMergeCI`.
    fn read_ci<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>>;
    /// `replyToAgentMergeReviewThread`.
    fn reply<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>>;
    /// `rerunAgentMergeWorkflow`.
    fn rerun<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>>;
    /// A session is being deleted: its folders' watches stop. Called under the host's lock.
    fn session_removed(&self, session: &str);
    /// What the watch of a session's folder is doing (`None`: no watch runs for it).
    fn monitoring(&self, session: &str, folder: &str) -> Option<String>;
}

/// What the host asks of its remote hosts (`remotes/`): the sessions other ahpd hosts run,
/// mirrored here (`mirrors.rs`). The host never calls it under its lock: each method may take the
/// lock itself.
pub trait Remotes: Send + Sync + 'static {
    /// True when a remote holds `key`: a channel of one of its sessions, a provider named
    /// `<agent>@<remote>`, or a changeset of one of its sessions.
    fn holds(&self, key: &str) -> bool;
    /// True when a client's request names what a remote holds (its channel, the provider
    /// `<agent>@<remote>` it creates a session on, the session a terminal claims): it is relayed.
    fn relays(&self, method: &str, params: &Value) -> bool;
    /// Makes sure `channel` is mirrored here (subscribing to it on its remote when it is not yet),
    /// so a client's subscribe is answered from the host's own state.
    fn open<'a>(&'a self, host: &'a Host, channel: &'a str) -> Pending<'a, Result<(), AhpError>>;
    /// A client's request, as it sent it, relayed to the remote that holds what it names.
    fn request(&self, host: &Host, method: &str, params: Value) -> Relayed;
    /// A client's action on a mirrored channel, its grant checked: relayed as sent; the remote's
    /// echo, or its refusal, answers the client under `origin`.
    fn action(
        &self,
        host: &Host,
        conn: super::core::ConnId,
        channel: &str,
        action: ahp_types::actions::StateAction,
        origin: ahp_types::actions::ActionOrigin,
    );
    /// An action of the host's own (a session tool's message) on a mirrored channel, relayed
    /// with no client behind it, once the remote echoed it; `Err` says why it was not taken (the
    /// remote's refusal in its words, or the link down). The channel must be mirrored (`open`):
    /// the echo is heard on it.
    fn dispatch<'a>(
        &'a self,
        host: &'a Host,
        channel: &'a str,
        action: ahp_types::actions::StateAction,
    ) -> Pending<'a, Result<(), String>>;
    /// The remotes' sessions, as summaries this host lists beside its own.
    fn sessions(&self) -> Vec<Value>;
    /// What `ahpd status` says of each remote: its name, how it is reached, its link's state and
    /// its agents.
    fn describe(&self) -> Vec<Value>;
}

impl Host {
    /// Registers the Agent Merge feature (the daemon does; a host without one refuses its tools).
    pub fn serve_agent_merge(&self, feature: std::sync::Arc<dyn AgentMerge>) {
        self.lock().agent_merge = Some(feature);
    }

    /// The Agent Merge feature, when this host has one.
    pub fn agent_merge(&self) -> Option<std::sync::Arc<dyn AgentMerge>> {
        self.lock().agent_merge.clone()
    }
}

/// How a turn the host began itself went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostTurn {
    /// Its turn began, with this id.
    Began(String),
    /// A turn was running: its message is queued behind it, with this id.
    Queued(String),
}

impl Host {
    /// Begins a turn the host starts itself in `chat` (a wakeup's, an Agent Merge repair's), as
    /// `sender` when somebody is behind it: the chat is loaded from the store if it sleeps, its
    /// agent must be running, and a turn running there already has the message queued behind it.
    pub fn begin_host_turn(
        &self,
        core: &mut Core,
        chat: &str,
        message: ahp_types::state::Message,
        sender: Option<String>,
    ) -> Result<HostTurn, String> {
        if !self.ensure_loaded(core, chat) {
            return Err("its chat could not be loaded".into());
        }
        if let Some(sentence) = core.store().cannot_write() {
            return Err(sentence);
        }
        let provider = core.chat(chat).and_then(|m| core.session(&m.session)).map(|s| s.provider.clone());
        let provider = provider.unwrap_or_default();
        // The worker's own state, not what its `Ready` said: at start-up that event may still be
        // on its way to the host when the first host turns begin.
        if self.supervisor().current(&provider).is_none() {
            return Err(format!("the {provider} agent is not running, so the session cannot resume"));
        }
        if core.running_turn(chat).is_some() {
            let id = new_id();
            if let Some(sender) = sender {
                core.note_sender(chat, &id, sender);
            }
            let action = ahp_types::actions::StateAction::ChatPendingMessageSet(
                ahp_types::actions::ChatPendingMessageSetAction {
                    kind: ahp_types::state::PendingMessageKind::Queued,
                    id: id.clone(),
                    message,
                },
            );
            return match core.apply(chat, action, None, None) {
                Committed::Sent { .. } => Ok(HostTurn::Queued(id)),
                _ => Err("the chat would not queue its message".into()),
            };
        }
        let start = host_turn(message, None);
        let turn_id = start.turn_id.clone();
        if let Some(sender) = sender {
            core.note_sender(chat, &turn_id, sender);
        }
        core.start_turn(chat, start, None);
        if core.running_turn(chat).as_deref() == Some(turn_id.as_str()) {
            Ok(HostTurn::Began(turn_id))
        } else {
            Err("the chat would not take the turn".into())
        }
    }
}

/// Who asks for a terminal.
#[derive(Debug, Clone)]
pub struct Asker {
    /// The asking connection's `clientId`.
    pub client_id: Option<String>,
    /// The person behind it.
    pub principal: Principal,
}

/// A `!` command to run as the host's own turn.
#[derive(Debug, Clone)]
pub struct CommandRun {
    /// The chat's session.
    pub session: String,
    /// The chat.
    pub chat: String,
    /// The turn (said already).
    pub turn_id: String,
    /// What to run (the message after its prefix).
    pub command: String,
    /// The session's folder, when it has one.
    pub cwd: Option<PathBuf>,
    /// The terminal channel to run it on (minted by the host).
    pub terminal: String,
}

/// A tool call on its way.
pub type ToolRun<'a> = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'a>>;

/// Work a feature does outside the host's lock.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the host asks of the feature that keeps sessions' folders and what changed in them (a
/// worktree each, changesets): the host asks it, and the backends only ever see a folder.
pub trait Workspaces: Send + Sync + 'static {
    /// Adds the host's own session settings (isolation, …) to an agent's config schema, with this
    /// deployment's defaults for `provider`'s sessions.
    fn extend_schema(&self, provider: &str, schema: &mut SchemaResult);

    /// True for a session setting that is the host's own: it is never handed to a backend.
    fn owns_setting(&self, key: &str) -> bool;

    /// True when a session with these settings needs its folder made before it opens.
    fn needs_folder(&self, settings: &JsonObject) -> bool;

    /// Makes the folder a session (or one chat) works in, cut from `request.from`: a worktree on a
    /// branch of its own. Nothing is left behind when it is refused.
    fn make_folder<'a>(&'a self, host: &'a Host, request: FolderRequest) -> Pending<'a, Result<PathBuf, AhpError>>;

    /// The folder made for `owner` is in use (`true`), or is not needed after all and goes.
    fn settle(&self, core: &mut Core, owner: &str, used: bool);

    /// The changesets a session advertises (`SessionState.changesets`).
    fn session_changesets(&self, core: &Core, session: &str) -> Option<Vec<Changeset>>;

    /// The changesets a chat advertises (`ChatState.changesets`).
    fn chat_changesets(&self, core: &Core, chat: &str) -> Option<Vec<Changeset>>;

    /// A changeset channel's state, computed when it is first watched.
    fn open_changeset<'a>(&'a self, host: &'a Host, uri: &'a str) -> Pending<'a, Result<ChangesetState, AhpError>>;

    /// Runs `invokeChangesetOperation`; `sender` is who asked (`root`, `user:<id>`).
    fn invoke<'a>(
        &'a self,
        host: &'a Host,
        params: InvokeChangesetOperationParams,
        sender: Option<String>,
    ) -> Pending<'a, Result<InvokeChangesetOperationResult, AhpError>>;

    /// Reads a content URI a changeset names (`resourceRead`); `None` when the URI is not one of
    /// this feature's.
    fn read<'a>(&'a self, host: &'a Host, uri: &'a str) -> Option<Pending<'a, Result<ResourceReadResult, AhpError>>>;

    /// A turn is about to be handed to the backend of `chat`: what the turn changes is measured
    /// from here.
    fn turn_starting<'a>(&'a self, host: &'a Host, chat: &'a str, turn_id: &'a str) -> Pending<'a, ()>;

    /// Something happened that may change what the feature shows; called under the host's lock,
    /// so it only notes the work and returns.
    fn event(&self, core: &mut Core, event: Event);

    /// Answers, once a deleted session's folders were seen to, what became of them in a
    /// sentence (empty when there was nothing to say). Ask before the session is deleted.
    fn when_released(&self, session: &str) -> tokio::sync::oneshot::Receiver<String>;
}

/// What happened, for [`Workspaces::event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A tool call completed in the chat's running turn (a file may have been written).
    ToolCompleted { chat: String },
    /// A turn ended in the chat.
    TurnEnded { chat: String, turn_id: String },
    /// A session was archived, or brought back.
    Archived { session: String, archived: bool },
    /// A session was deleted.
    SessionRemoved { session: String },
    /// A client marked files of a changeset reviewed (or not).
    Reviewed { changeset: String, files: Vec<String>, reviewed: bool },
}

/// A folder to make for a session or a chat.
#[derive(Debug, Clone)]
pub struct FolderRequest {
    /// The session or chat it is for.
    pub owner: String,
    /// That owner's session.
    pub session: String,
    /// The folder it is cut from.
    pub from: PathBuf,
    /// The session's title, to name the branch after.
    pub title: Option<String>,
    /// The session's settings (a branch name, files to carry over).
    pub settings: JsonObject,
}

/// One of the host's own tools as a session is offered it.
#[derive(Debug, Clone)]
pub struct Offered {
    /// How a backend is handed it (its definition is what `serverTools` reports).
    pub spec: ToolSpec,
    /// When a tool nothing asks for is worth calling, for the system prompt.
    pub instruction: Option<&'static str>,
}

/// Who is behind a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A turn, sent by this person (`None`: nobody is behind it, or no users directory).
    Turn(Option<String>),
    /// This host's root connection.
    Root,
    /// A person, with no session.
    Person(String),
}

/// One call of a host tool.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The calling session (absent for a sessionless call).
    pub session: Option<String>,
    /// The calling chat.
    pub chat: Option<String>,
    /// The turn the call belongs to.
    pub turn_id: Option<String>,
    /// The call's id, as the backend said it.
    pub tool_call_id: Option<String>,
    /// Who is behind it.
    pub caller: Caller,
    /// The arguments.
    pub input: Value,
}

/// What the tools (and the doors) read of the host's state, under its lock.
impl Core {
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

//! The host's ports: what its internals need of the world beside it, and nothing they do. The
//! traits of the features the host is built with or that register with it ([`Tools`],
//! [`Workspaces`], [`Terminals`], [`AgentMerge`], [`Remotes`], [`Resources`], [`Boxes`],
//! [`Automations`]), the events it tells
//! them ([`Event`]), and the plain values that cross (a tool call and who is behind it, a folder to
//! make, a `!` command to run). The host's internals name these here; the features read them
//! through [`super::facade`], which re-exports them beside what the features may call.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use ahp_types::commands::{InvokeChangesetOperationParams, InvokeChangesetOperationResult, ResourceReadResult};
use ahp_types::common::JsonObject;
use ahp_types::state::{Changeset, ChangesetState};
use protocol::{SchemaResult, ToolOutcome, ToolSpec};
use serde_json::Value;

use super::errors::AhpError;
use super::{Core, Host};
use crate::users::Principal;

/// What a relayed request answers, later.
pub type Relayed = Pin<Box<dyn Future<Output = Result<Value, AhpError>> + Send>>;

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
/// which reach the host again through a [`WeakHost`](super::WeakHost).
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
    fn watching(&self, session: &str, folder: &str) -> Option<Watching>;
}

/// What the Agent Merge watch of a folder is doing, as `ahpd status` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watching {
    /// Its word: `monitoringPullRequest`, `backingOff`, `stoppedForBadCredentials`, …
    pub monitoring: String,
    /// Why it is not following the pull request, in a sentence.
    pub reason: Option<String>,
    /// When it asks GitHub next (RFC 3339), while it waits for a time.
    pub retry_at: Option<String>,
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

/// What the host asks of the feature that keeps content a part would carry inline (seed 004's
/// `storeToolResultResource`: `resource/keep`, `resourceRead` of a `session-db-resource:` URI, a
/// transcript's `kept`). Without one, a session keeps no content: its starts say so and a backend
/// leaves such content out with a sentence.
pub trait Resources: Send + Sync + 'static {
    /// The largest content kept (`toolResultResourceLimitBytes`), handed to every start.
    fn limit_bytes(&self) -> u64;
    /// Keeps what a backend handed over for a chat of `session`, before anything the backend says
    /// after it is taken: `Ok` with its URI, or why it was not kept. Writes a file; never called
    /// under the host's lock.
    fn keep(&self, session: &str, params: protocol::KeepResourceParams) -> Result<String, String>;
    /// Reads a kept content back, byte for byte (`resourceRead`), once the host checked who asks.
    fn read(
        &self,
        uri: &str,
        encoding: Option<ahp_types::commands::ContentEncoding>,
    ) -> Result<ResourceReadResult, AhpError>;
    /// What was kept for `chat` of `session`, for a transcript read back.
    fn kept_for(&self, session: &str, chat: &str) -> Vec<protocol::KeptResource>;
    /// A session was deleted: what was kept for it goes.
    fn session_removed(&self, session: &str);
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

impl Caller {
    /// The person a call acts as: root, the person calling with no session, or the person who
    /// sent the calling turn (nobody, when nobody is behind it).
    pub fn principal(&self) -> Principal {
        match self {
            Caller::Root => Principal::Root,
            Caller::Person(id) => Principal::Person(id.clone()),
            Caller::Turn(sender) => Principal::from_sender(sender.as_deref()),
        }
    }

    /// Who a turn this call leaves for later (a wakeup's, an Agent Merge repair's) acts as: the
    /// sender of the calling turn, and never more; nobody for a call from outside a turn.
    pub fn turn_sender(&self) -> Option<String> {
        match self {
            Caller::Turn(sender) => sender.clone(),
            Caller::Root | Caller::Person(_) => None,
        }
    }
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

/// What the host asks of the feature that confines sessions (`confine/`): a session whose
/// `isolation` is a box's level has every process started for it (its backend's CLI, its `!`
/// commands, its terminals) go through the box's launcher.
pub trait Boxes: Send + Sync + 'static {
    /// How what runs for `session` is started, given its settings and folder: `None` when the
    /// session is not confined. A session whose box cannot be made gets a launcher that says why
    /// and fails, never one that runs outside. Called under the host's lock: it returns at once.
    fn confine(&self, session: &str, settings: &JsonObject, folder: &Path) -> Option<protocol::Confined>;
    /// A session was deleted: its box goes (its proxy, its container).
    fn session_removed(&self, session: &str);
    /// What `ahpd status` and the window say of `session`'s box, when it has one.
    fn describe(&self, session: &str) -> Option<Value>;
}

/// What the host asks of the automations feature (`automations/`): the catalogue on
/// `ahp-automations://` and each run on `ahp-automation-run:/<id>`, whose states the feature sets
/// through [`Core::open_automations`], [`Core::open_automation_run`] and [`Core::apply`].
pub trait Automations: Send + Sync + 'static {
    /// What `InitializeResult.automations` advertises.
    fn capabilities(&self) -> ahp_types::commands::AutomationCapabilities;

    /// Checks a client's request on the catalogue or a run's channel (`automation/createRequested`,
    /// `automation/updateRequested`, `automation/removed`, `automationRun/cancelRequested`), under
    /// the host's lock: `Err` is the refusal's sentence. Nothing changes here.
    fn check(
        &self,
        core: &Core,
        principal: &Principal,
        channel: &str,
        action: &ahp_types::actions::StateAction,
    ) -> Result<(), String>;

    /// Acts on a request [`Automations::check`] let through, once it was said, under the lock.
    fn accepted(
        &self,
        host: &Host,
        core: &mut Core,
        principal: &Principal,
        channel: &str,
        action: &ahp_types::actions::StateAction,
    );

    /// `runAutomation`: the run's channel, the same for the same `requestId`. Takes the host's
    /// lock itself.
    fn run(
        &self,
        host: &Host,
        principal: &Principal,
        params: ahp_types::commands::RunAutomationParams,
    ) -> Result<ahp_types::commands::RunAutomationResult, AhpError>;

    /// `fetchAutomationRuns`: one older page joins the entry's runs. Takes the host's lock itself.
    fn fetch_runs(&self, host: &Host, params: ahp_types::commands::FetchAutomationRunsParams) -> Result<(), AhpError>;

    /// `listAutomationTriggerDefinitions`: the event triggers this host defines.
    fn trigger_definitions(
        &self,
        params: &ahp_types::commands::ListAutomationTriggerDefinitionsParams,
    ) -> ahp_types::commands::ListAutomationTriggerDefinitionsResult;

    /// A turn ended in `chat` and what waited behind it began (or nothing did), under the lock.
    fn turn_ended(&self, core: &mut Core, chat: &str);

    /// `ahpd/automationSchedulePreview`: a schedule's next `count` occurrences after `after`
    /// (RFC 3339; absent: now), or why the schedule is refused, in the words a definition's
    /// refusal uses.
    fn preview(&self, params: &Value, now: u64) -> Result<Value, AhpError>;
}

//! The records the store keeps, as JSON in their rows. Every field a later version adds has a
//! default, so a row an older ahpd wrote still reads (`tests` load a version-1 file to prove it).

use ahp_types::common::JsonObject;
use ahp_types::state::{ChangesSummary, ChatOrigin, Message, PendingMessage, Turn};
use serde::{Deserialize, Serialize};

/// A session, beside what its chats hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session channel.
    pub uri: String,
    /// The backend.
    pub provider: String,
    /// ISO-8601.
    pub created_at: String,
    /// Its title (its default chat's).
    #[serde(default)]
    pub title: String,
    /// The client bits of its status (`IsRead` 32, `IsArchived` 64).
    #[serde(default)]
    pub flags: u32,
    /// The folder it runs in (a path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Its config values.
    #[serde(default)]
    pub config: JsonObject,
    /// Its default chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_chat: Option<String>,
    /// Who owns it (`user:<id>`), under a users directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The session whose tools created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// How many create links sit above it.
    #[serde(default)]
    pub depth: u32,
    /// The session's `_meta` (artifacts live here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// What it changed, at a glance (its summary's `changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesSummary>,
    /// Where it came from (an automation's run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ahp_types::state::SessionOrigin>,
}

/// A chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatRecord {
    /// The chat channel.
    pub uri: String,
    /// Its session.
    pub session: String,
    /// Its place among the session's chats.
    pub position: i64,
    /// Its title in the session's catalogue.
    #[serde(default)]
    pub title: String,
    /// The id the backend keeps the conversation under.
    pub conversation_id: String,
    /// The backend holds the conversation (the next start resumes it).
    #[serde(default)]
    pub started_in_backend: bool,
    /// Where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ChatOrigin>,
    /// Messages queued behind the running turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<PendingMessage>,
    /// A steering message not yet taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<PendingMessage>,
    /// The draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Message>,
    /// The client bits of its status.
    #[serde(default)]
    pub flags: u32,
    /// When it last changed (ISO-8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_at: Option<String>,
    /// The agent it runs, when that is not its session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<Harness>,
    /// The folder it works in, when that is not its session's (`isolate_session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// What it changed, at a glance (its catalogue entry's `changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesSummary>,
    /// A cut of the conversation its backend has not put on record yet (a truncation, or the
    /// fork it began as).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<protocol::Cut>,
    /// Its backend said the conversation resumes once closed (`CreateResult.resumable`: an ACP
    /// agent that declared `loadSession`), so after a restart it may be forked, and a turn it lost
    /// resumed, before its backend runs again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumable: bool,
}

/// A chat that runs another agent than its session's (a session tool's `create_session` with
/// `currentSession` and an agent or settings of its own): that agent and the settings it runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Harness {
    /// The provider the chat runs.
    pub provider: String,
    /// Its config values in force.
    #[serde(default)]
    pub settings: JsonObject,
}

/// A turn that ended, as every client folded it, with the host's own facts about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// The turn.
    pub turn: Turn,
    /// What the backend wrote it down as, when it said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_id: Option<String>,
    /// Who sent it (`user:<id>`), under a users directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
}

/// A wakeup `schedule_wakeup` left on a chat: the turn to begin when it is due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WakeupRecord {
    /// The chat the turn begins in.
    pub chat: String,
    /// Its session.
    pub session: String,
    /// The text the turn begins with.
    pub prompt: String,
    /// When it is due, in milliseconds since the epoch on the host's clock.
    pub due_at_ms: u64,
    /// When it was asked for (ISO-8601).
    pub scheduled_at: String,
    /// Who was behind the turn that asked for it (`user:<id>`), under a users directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
}

/// A worktree ahpd cut for a session (or for one chat, `isolate_session`): where it is, which
/// branch it is on, and what it was cut from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeRecord {
    /// The session or chat channel it was cut for.
    pub owner: String,
    /// Its session.
    pub session: String,
    /// The top of the checkout it was cut from (the base).
    pub repo: String,
    /// The worktree's folder.
    pub path: String,
    /// Where inside it the session works (its folder's place in the repository kept).
    pub folder: String,
    /// Its branch.
    pub branch: String,
    /// The branch the base had checked out when it was cut (merges go there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    /// The commit it was cut from.
    pub base_commit: String,
    /// When it was cut (ISO-8601).
    pub created_at: String,
    /// Where it is in its life.
    pub state: WorktreeState,
}

/// Where a worktree is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WorktreeState {
    /// Being cut: no session works in it yet (one found at start-up was interrupted, and goes).
    Creating,
    /// A session works in it.
    Ready,
    /// Its folder was removed with nothing left in it (its session was archived); its branch
    /// stays, and the folder comes back when the session works again.
    Released,
}

/// What a terminal printed, kept so its channel reads back after a restart as an exited terminal:
/// a `!` command's terminal, and an output a backend handed the host (`terminal/keep`, seed 004's
/// `terminalOutputs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptTerminalRecord {
    /// The terminal channel.
    pub uri: String,
    /// The session it belongs to.
    pub session: String,
    /// The chat it belongs to.
    pub chat: String,
    /// Its title.
    pub title: String,
    /// Where it ran (a `file:` URI), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// What it printed (its last bytes, at most the scrollback a terminal keeps).
    pub output: String,
    /// How it ended, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// It ran on a pseudo-terminal (its output may hold VT sequences).
    #[serde(default)]
    pub is_pty: bool,
}

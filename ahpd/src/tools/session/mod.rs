//! The reference host's session tools, by name, schema and wording (seed 000 "The host's own
//! tools"), with this host's two readers (`readers.rs`) in their place in the list: what an agent
//! inside one session cannot see for itself — the sessions beside it, the chats inside them — and
//! the means to start, message, rename, archive, move and delete them, bounded by `limits`.
//!
//! The group is split by what a tool does: `rows` reads the catalogue (`list_sessions`,
//! `get_current_session`), `context` reads a chat (`get_session_context`), `spawn` makes things
//! and counts them (`create_session`, `create_chat`, `send_message`), and `manage` changes what
//! exists (`rename_chat`, `archive_chat`, `set_workspace`, `isolate_session`, `delete_session`,
//! `move_session`). `links` is the open-link shape they answer and take; `remote` reaches the
//! sessions other hosts run (listed, made, messaged and read through the remotes feature).

mod asks;
mod context;
pub mod links;
mod manage;
mod remote;
mod rows;
mod spawn;

use ahp_types::common::JsonObject;
use ahp_types::state::ToolAnnotations;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

pub use self::manage::{turn_ended, WorkspaceRequest};
use super::table::Declared;
use super::{declare, readers, Group, Own, Refusal, Tool, ToolCall};
use crate::host::{Core, Host};

/// The session tools and the two readers, in the order seed 000's table lists them.
pub fn tools() -> Vec<Tool> {
    let mut all = vec![list_sessions()];
    all.extend(readers::tools());
    all.extend([
        get_current_session(),
        get_session_context(),
        send_message(),
        create_session(),
        create_chat(),
        rename_chat(),
        archive_chat(),
        set_workspace(),
        isolate_session(),
        delete_session(),
        move_session(),
    ]);
    all
}

/// A tool that takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// A session tool with the reference host's title and annotations, taking `A`.
fn tool<A: DeserializeOwned + JsonSchema + Send + 'static>(
    name: &str,
    title: &str,
    description: &str,
    read_only: bool,
) -> Declared<A> {
    declare::<A>(Group::Session, name, description).with(|mut info| {
        info.definition.title = Some(title.to_owned());
        info.definition.annotations = Some(ToolAnnotations {
            title: None,
            read_only_hint: Some(read_only),
            destructive_hint: None,
            idempotent_hint: None,
            open_world_hint: None,
        });
        if read_only {
            info.effects.reads = true;
        } else {
            info.effects.writes = true;
        }
        info
    })
}

/// `list_sessions`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListSessions {
    /// Return only the session with this URI or `agent-host-session://` link (a direct lookup that ignores the other filters). Use this to fetch one known session's metadata.
    pub session: Option<String>,
    /// Only return sessions whose status matches one of these (e.g. `inputNeeded` for sessions awaiting a reply, `inProgress` for running ones, `archived` for sessions marked Done/completed — implies `includeArchived`). Omit to return every status.
    #[schemars(with = "Option<Own<Vec<String>>>", extend("items" = { "type": "string", "enum": rows::STATUS_VALUES }))]
    pub status: Option<Value>,
    /// Only return sessions for this project name, project URI, or working directory path/URI.
    pub workspace: Option<String>,
    /// When true, only return sessions that have pending worktree changes.
    pub with_changes: Option<bool>,
    /// When true, only return sessions with updates the user has not seen yet.
    pub unread: Option<bool>,
    /// When true, only return sessions that have a linked GitHub pull request.
    pub with_pull_request: Option<bool>,
    /// Whether to include archived sessions. Defaults to false; set true to also return archived sessions.
    pub include_archived: Option<bool>,
    /// Only return sessions created at or after this time (ISO-8601 timestamp, e.g. `2025-01-31T00:00:00Z`).
    #[schemars(with = "Option<Own<String>>")]
    pub created_after: Option<Value>,
    /// Only return sessions created at or before this time (ISO-8601 timestamp).
    #[schemars(with = "Option<Own<String>>")]
    pub created_before: Option<Value>,
}

fn list_sessions() -> Tool {
    tool::<ListSessions>(
        "list_sessions",
        "List Sessions",
        "List sessions and their compact metadata (status, activity, working directory, project, worktree changes, git/GitHub info, timestamps). Each result includes `session` for identity and tool inputs and `openLink` for clickable Markdown links; do not use `session` as a link target. Pass `session` to fetch a single known session by URI. By default archived sessions are omitted. Optionally filter by `status`, `workspace`, `withChanges`, `unread`, `withPullRequest`, `includeArchived`, `createdAfter`, or `createdBefore`.",
        true,
    )
    .with(|info| info.grant("session:read").sessionless())
    .answers(|cx, args| rows::list_sessions(cx.host, cx.call, args))
}

fn get_current_session() -> Tool {
    tool::<NoArgs>(
        "get_current_session",
        "Get Current Session",
        "Get metadata and the open link for the session this conversation is running in. Use this to reference the current session (for example before adding a chat to it).",
        true,
    )
    .with(|info| info.grant("session:read"))
    .answers(|cx, _| rows::get_current_session(cx.host, cx.call))
}

/// `get_session_context`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetSessionContext {
    /// The session or chat to read: a session URI from `list_sessions`, or an `agent-host-session://` link. A link carrying a chat id targets that specific chat.
    pub session: String,
    /// How much conversation detail to return. `summary` (default): status and a short per-turn gist (the message plus a compact snippet of the reply). `digest`: adds the full assistant reply text and tool-call names. `full`: adds tool-call inputs. Higher levels return more tokens.
    #[schemars(with = "Option<Own<String>>", extend("enum" = context::DETAILS))]
    pub detail: Option<Value>,
    /// Maximum number of most-recent turns to include. Defaults to 10; capped at 50.
    #[schemars(with = "Option<Own<f64>>")]
    pub transcript_limit: Option<Value>,
    /// A `responseTurnId` from an earlier answer, whose reply was cut at its level's cap: answers that turn's reply whole, one page of up to 8000 characters at a time, instead of a transcript.
    pub response_turn_id: Option<String>,
    /// With `responseTurnId`: where the page starts in the reply, in characters. 0 (the default) first, then each `nextResponseOffset`, until `truncated` is false.
    #[schemars(with = "Option<Own<f64>>")]
    pub response_offset: Option<Value>,
}

fn get_session_context() -> Tool {
    tool::<GetSessionContext>(
        "get_session_context",
        "Get Session Context",
        "Read the recent conversation of an existing session or chat: a compacted transcript of its turns (messages, replies, and tool calls). Use this to see what a session you created is doing, or to gather context before sending it a message. Returns a compacted summary by default (`detail: \"summary\"`); request `digest` or `full` for more detail. A reply cut at its level's cap carries `assistantTruncated` and a `responseTurnId` that reads it whole. For session metadata (status, working directory, changes, …) use `list_sessions` with the `session` argument.",
        true,
    )
    .with(|info| info.grant("session:read").sessionless())
    .runs(|cx, args| Box::pin(context::get_session_context(cx.host, cx.call, args)))
}

/// `send_message`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SendMessage {
    /// The session or chat to message: a session URI from `list_sessions`, or an `agent-host-session://` link. A link carrying a chat id targets that specific chat.
    pub session: String,
    /// The message to send.
    pub message: String,
}

fn send_message() -> Tool {
    tool::<SendMessage>(
        "send_message",
        "Send Message",
        "Send a message to an existing session or chat, starting a new turn there. Provide a session URI from `list_sessions` or an `agent-host-session://` link; a link carrying a chat id targets that specific chat. If the target chat is busy, the message is queued and starts after the active turn completes successfully. Delivery is asynchronous — this tool does not wait for or return the reply.",
        false,
    )
    .with(|info| info.grant("session:write").sessionless())
    .runs(|cx, args| Box::pin(spawn::send_message(cx.tools, cx.host, cx.call, args)))
}

/// `create_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateSession {
    /// Set to `independent` only when the user explicitly asks for a sibling session or a top-level session. Otherwise omit it: the work is created as a new chat in the current session (`currentSession`), including when the user asks for a "new session" or a "new chat".
    #[schemars(extend("enum" = ["currentSession", "independent"]))]
    pub relationship: Option<String>,
    /// Initial prompt to send to the new chat or session.
    pub prompt: String,
    /// Workspace for the delegated work: a unique project name, project/workspace URI, absolute folder path, or working directory from an existing session. Omit if the work does not need a workspace. For `currentSession`, also omit it when the work is in the current session's workspace.
    pub workspace: Option<String>,
    /// Set true when the work needs an isolated Git worktree for the workspace. A worktree is not needed for read-only work. Only valid when `workspace` is also set.
    pub worktree: Option<bool>,
    /// Short title for the new chat or independent session.
    #[schemars(length(max = 200))]
    pub title: String,
    /// Optional model ID or display name. Defaults to the current chat's model. For `currentSession`, the model must belong to the current session's provider; for `independent`, the model selects the new session's provider.
    pub model: Option<String>,
    /// The agent the new session runs, by its id (see `list_agents`).
    pub agent: Option<String>,
    /// Settings for the new session, as that agent's settings name them (see `list_agents`). A value its settings rule out is refused before anything starts. With `currentSession` they apply to the new chat alone.
    pub config: Option<JsonObject>,
}

fn create_session() -> Tool {
    tool::<CreateSession>(
        "create_session",
        "Create Session",
        "Create delegated work and start it with an initial prompt.",
        false,
    )
    .with(|info| info.grant("session:write").sessionless().for_session(asks::create_session_for))
    .runs(|cx, args| Box::pin(spawn::create_session(cx.tools, cx.host, cx.call, args)))
}

/// `create_chat`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateChat {
    /// Optional session to add the chat to: a session URI from `list_sessions` or an `agent-host-session://` link. Defaults to the current session when omitted.
    pub session: Option<String>,
    /// Initial prompt to send to the new chat.
    pub prompt: String,
    /// Optional title for the new chat.
    #[schemars(length(max = 200))]
    pub title: Option<String>,
    /// Optional model ID or display name. Defaults to the current chat's model.
    pub model: Option<String>,
}

fn create_chat() -> Tool {
    tool::<CreateChat>(
        "create_chat",
        "Create Chat",
        "Add a new chat to an existing session and start it with an initial prompt. Prefer this for parallel subtasks that should remain part of one user-visible unit of work, sharing the session's workspace, lifecycle, and aggregate diff. Omit `session` to add the chat to the current session; otherwise pass a session URI from `list_sessions`. Optionally pass a `model` to use for the chat (defaults to the current chat's model).",
        false,
    )
    .with(|info| info.grant("session:write").sessionless())
    .answers(|cx, args| spawn::create_chat(cx.tools, cx.host, cx.call, args))
}

/// `rename_chat`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RenameChat {
    /// Optional owning session: a session URI from `list_sessions` or an `agent-host-session://` link. When provided with `chat`, it must match that chat's session.
    pub session: Option<String>,
    /// The chat to rename: pass an `agent-host-session://` session or chat link. Omit when renaming the chat in which this tool is running.
    pub chat: Option<String>,
    /// Short, descriptive chat title, ideally 1-4 words.
    #[schemars(length(max = 200))]
    pub title: String,
    /// Set to true only when this call is fulfilling the host's automatic title reminder. Omit for user-requested renames.
    #[schemars(with = "Option<Own<bool>>")]
    pub automatic: Option<Value>,
}

fn rename_chat() -> Tool {
    tool::<RenameChat>(
        "rename_chat",
        "Rename Chat",
        "Rename one specific chat so it is easy to find later. Renaming the default chat also names its owning session, while peer-chat titles remain independent. Use a short, human-friendly chat name in sentence case (1-4 words). Pass an `agent-host-session://` session or chat link to target another chat, or omit `chat` to rename the chat in which this tool is running. Name a fresh chat once its scope is clear. Call this tool again whenever the user explicitly asks to rename the chat; every invocation replaces the current title.",
        false,
    )
    .with(|info| info.deferred().grant("session:write").sessionless().for_session(manage::rename_chat_for))
    .answers(|cx, args| manage::rename_chat(cx.host, cx.call, args))
}

/// `archive_chat`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ArchiveChat {
    /// What to archive: an `agent-host-session://` link from `list_sessions`. A link to a nested chat archives that chat alone; a session link, or the link of a session's main chat (`main: true` in its `chats`), archives the whole session.
    pub chat: String,
}

/// What archiving asks (seed 000): `chat:mark` for a nested chat, `session:mark` for a whole
/// session; with no session it is listed behind `session:write`, as the other writes are.
const ARCHIVE_GRANTS: &[&str] = &["chat:mark", "session:mark"];

fn archive_chat() -> Tool {
    tool::<ArchiveChat>(
        "archive_chat",
        "Archive Chat",
        "Archive a nested chat alone, or a whole session by its link or its main chat's link, the way a person marks one done. Refuses the chat this tool runs in and the main chat of the current session.",
        false,
    )
    .with(|info| info.asks_one_of(ARCHIVE_GRANTS, "session:write").sessionless())
    .answers(manage::archive_chat)
}

/// `set_workspace`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetWorkspace {
    /// Absolute local folder path or file URI to set as the current session's workspace. Use an exact path from the user or `list_sessions`; do not guess.
    pub workspace_folder: String,
    /// Whether to create an isolated Git worktree and use it as the workspace. Include this choice in the required user confirmation immediately before calling this tool.
    pub isolation: bool,
}

fn set_workspace() -> Tool {
    tool::<SetWorkspace>(
        "set_workspace",
        "Set Workspace",
        "Attach a real workspace only to modify its files or run commands requiring its project environment. Do not use for self-contained scratch work on attachments, pasted/generated content, or throwaway/exportable artifacts. The session, chat, and history are preserved. Immediately before every call, use the available user-input tool to ask one question confirming both workspace and isolation, even if already specified; tool approval is not confirmation. Set `isolation` to true for a managed Git worktree or false for the folder directly. After this turn, the host attaches the workspace and continues the original task. Make this the turn's final tool call.",
        false,
    )
    .with(|info| info.deferred().grant("session:write"))
    .runs(|cx, args| Box::pin(manage::set_workspace(cx.tools, cx.host, cx.call, args)))
}

fn isolate_session() -> Tool {
    tool::<NoArgs>(
        "isolate_session",
        "Isolate Session",
        "Move only this chat into a new Git worktree cut from the folder it works in, so its changes stay apart from the session's other chats. Acted on when this turn ends; the other chats keep their folders. Make this the turn's final tool call.",
        false,
    )
    .with(|info| info.deferred().grant("session:write").for_session(manage::isolate_session_for))
    .runs(|cx, _| Box::pin(manage::isolate_session(cx.tools, cx.host, cx.call)))
}

/// `delete_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteSession {
    /// The session to delete: a session URI from `list_sessions` or an `agent-host-session://` link (e.g. from `create_session`).
    pub session: String,
}

fn delete_session() -> Tool {
    tool::<DeleteSession>(
        "delete_session",
        "Delete Session",
        "Permanently delete a session (identified by a session URI from `list_sessions`), including its stored data. This cannot be undone. Refuses to delete the current session.",
        false,
    )
    .with(|info| {
        let mut info = info.destructive().grant("session:write").sessionless();
        if let Some(a) = info.definition.annotations.as_mut() {
            a.read_only_hint = Some(false);
        }
        info
    })
    .runs(|cx, args| Box::pin(manage::delete_session(cx.host, cx.call, args)))
}

/// `move_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MoveSession {
    /// What to move: a nested chat's or a session's `agent-host-session://` link.
    pub session: String,
    /// The session to move it into: a session URI from `list_sessions` or its link. Omit with `relationship: "independent"`.
    pub into: Option<String>,
    /// The chat in the destination it should sit behind, by its link. Omit to put it at the end.
    pub after: Option<String>,
    /// Set to `independent` to make it a session of its own instead of moving it into another.
    #[schemars(extend("enum" = ["independent"]))]
    pub relationship: Option<String>,
}

fn move_session() -> Tool {
    tool::<MoveSession>(
        "move_session",
        "Move Session",
        "Reorder a nested session in its session, move it into another session, or make it a session of its own. Moves the same way a person's move in the Agents window does, and is refused in the same words.",
        false,
    )
    .with(|info| info.grant("session:write").sessionless())
    .answers(|cx, args| manage::move_session(cx.host, cx.call, args))
}

/// The calling session, or the refusal a call with none gets.
fn calling_session<'a>(call: &'a ToolCall, refusal: &str) -> Result<&'a str, Refusal> {
    call.session.as_deref().ok_or_else(|| refusal.into())
}

/// A session and, within it, the chat a tool's argument names.
#[derive(Debug, Clone)]
struct Resolved {
    session: String,
    /// The chat named, or the session's default chat.
    chat: String,
    /// True when the argument named the session (or its default chat) rather than a nested chat.
    is_default: bool,
}

/// Resolves a `session` (or `chat`) argument to a session this host runs, loading it from the
/// store if it sleeps there, and the chat it names; `unknown` is the refusal for a session or chat
/// this host does not run.
fn resolve(host: &Host, core: &mut Core, input: &str, unknown: &dyn Fn() -> String) -> Result<Resolved, Refusal> {
    let target = links::parse(input).ok_or_else(unknown)?;
    let session = if target.session.is_empty() {
        // A bare chat URI: its session is the one that holds it.
        let chat = target.chat.clone().unwrap_or_default();
        if !host.ensure_loaded(core, &chat) {
            return Err(unknown().into());
        }
        core.chat(&chat).map(|m| m.session.clone()).ok_or_else(unknown)?
    } else {
        target.session.clone()
    };
    if core.is_mirrored(&session) {
        return Err(format!("{session} runs on another host, which this tool does not reach (list_sessions, get_session_context, send_message and create_session do).").into());
    }
    if !host.ensure_loaded(core, &session) {
        return Err(unknown().into());
    }
    let state = core.session_state(&session).ok_or_else(unknown)?;
    let default = state.default_chat.clone().unwrap_or_default();
    let chat = target.chat.unwrap_or_else(|| default.clone());
    if !state.chats.iter().any(|c| c.resource == chat) {
        return Err(unknown().into());
    }
    Ok(Resolved { is_default: chat == default, session, chat })
}

/// The provider a session runs (`<agent>@<remote>` for one another host runs).
fn provider_of(core: &Core, session: &str) -> String {
    match core.session(session) {
        Some(meta) => meta.provider.clone(),
        None => core.session_state(session).map(|s| s.provider.clone()).unwrap_or_default(),
    }
}

/// The agent of a chat that runs another one than its session's.
fn harness_of(core: &Core, chat: &str) -> Option<String> {
    core.chat(chat)?.harness.as_ref().map(|h| h.provider.clone())
}

/// The open link of a chat (its session's link for the default chat).
fn link_of(core: &Core, session: &str, chat: &str) -> String {
    let default = core.session_state(session).and_then(|s| s.default_chat.as_deref());
    links::chat_link(&provider_of(core, session), session, chat, default)
}

/// A title as a tool takes it: whitespace collapsed, not empty, at most 200 characters.
fn title_arg(tool: &str, title: &str) -> Result<String, Refusal> {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return Err(format!("Invalid {tool} input: title must contain non-whitespace characters.").into());
    }
    if title.chars().count() > 200 {
        return Err(format!("Invalid {tool} input: title must not exceed 200 characters.").into());
    }
    Ok(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_session_tools_and_two_readers_in_the_seeds_order() {
        let names: Vec<String> = tools().into_iter().map(|t| t.info.definition.name).collect();
        assert_eq!(
            names,
            [
                "list_sessions",
                "list_agents",
                "list_models",
                "get_current_session",
                "get_session_context",
                "send_message",
                "create_session",
                "create_chat",
                "rename_chat",
                "archive_chat",
                "set_workspace",
                "isolate_session",
                "delete_session",
                "move_session"
            ]
        );
    }

    #[test]
    fn eleven_are_sessionless() {
        let sessionless: Vec<String> =
            tools().into_iter().filter(|t| t.info.sessionless).map(|t| t.info.definition.name).collect();
        assert_eq!(sessionless.len(), 11, "{sessionless:?}");
        for absent in ["get_current_session", "set_workspace", "isolate_session"] {
            assert!(!sessionless.iter().any(|n| n == absent), "{absent}");
        }
    }

    #[test]
    fn titles_are_collapsed_and_bounded() {
        assert_eq!(title_arg("rename_chat", "  a \n b ").as_deref(), Ok("a b"));
        assert_eq!(
            title_arg("rename_chat", "   ").expect_err("empty"),
            "Invalid rename_chat input: title must contain non-whitespace characters."
        );
        assert_eq!(
            title_arg("create_session", &"x".repeat(201)).expect_err("long"),
            "Invalid create_session input: title must not exceed 200 characters."
        );
    }
}

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

mod context;
pub mod links;
mod manage;
mod remote;
mod rows;
mod spawn;

use ahp_types::state::ToolAnnotations;
use serde_json::{json, Value};

pub use self::manage::{turn_ended, WorkspaceRequest};
use super::{readers, Caller, Group, HostTools, Refusal, ToolCall, ToolInfo, ToolResult};
use crate::host::{Core, Host};
use crate::users::Principal;

/// The session tools and the two readers, in the order seed 000's table lists them.
pub fn tools() -> Vec<ToolInfo> {
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

/// Runs one of the session tools; `None` for another tool's name.
pub async fn run(tools: &HostTools, host: &Host, name: &str, call: &ToolCall) -> Option<ToolResult> {
    Some(match name {
        "list_sessions" => rows::list_sessions(host, call),
        "get_current_session" => rows::get_current_session(host, call),
        "get_session_context" => context::get_session_context(host, call).await,
        "send_message" => spawn::send_message(tools, host, call).await,
        "create_session" => spawn::create_session(tools, host, call).await,
        "create_chat" => spawn::create_chat(tools, host, call),
        "rename_chat" => manage::rename_chat(host, call),
        "archive_chat" => manage::archive_chat(host, call),
        "set_workspace" => manage::set_workspace(tools, host, call).await,
        "isolate_session" => manage::isolate_session(tools, host, call).await,
        "delete_session" => manage::delete_session(host, call).await,
        "move_session" => manage::move_session(host, call),
        _ => return None,
    })
}

/// A session tool with the reference host's title and annotations.
fn tool(name: &str, title: &str, description: &str, schema: Value, read_only: bool) -> ToolInfo {
    let mut info = ToolInfo::new(Group::Session, name, description, schema);
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
}

fn list_sessions() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "Return only the session with this URI or `agent-host-session://` link (a direct lookup that ignores the other filters). Use this to fetch one known session's metadata." },
            "status": {
                "type": "array",
                "items": { "type": "string", "enum": rows::STATUS_VALUES },
                "description": "Only return sessions whose status matches one of these (e.g. `inputNeeded` for sessions awaiting a reply, `inProgress` for running ones, `archived` for sessions marked Done/completed — implies `includeArchived`). Omit to return every status."
            },
            "workspace": { "type": "string", "description": "Only return sessions for this project name, project URI, or working directory path/URI." },
            "withChanges": { "type": "boolean", "description": "When true, only return sessions that have pending worktree changes." },
            "unread": { "type": "boolean", "description": "When true, only return sessions with updates the user has not seen yet." },
            "withPullRequest": { "type": "boolean", "description": "When true, only return sessions that have a linked GitHub pull request." },
            "includeArchived": { "type": "boolean", "description": "Whether to include archived sessions. Defaults to false; set true to also return archived sessions." },
            "createdAfter": { "type": "string", "description": "Only return sessions created at or after this time (ISO-8601 timestamp, e.g. `2025-01-31T00:00:00Z`)." },
            "createdBefore": { "type": "string", "description": "Only return sessions created at or before this time (ISO-8601 timestamp)." }
        }
    });
    tool(
        "list_sessions",
        "List Sessions",
        "List sessions and their compact metadata (status, activity, working directory, project, worktree changes, git/GitHub info, timestamps). Each result includes `session` for identity and tool inputs and `openLink` for clickable Markdown links; do not use `session` as a link target. Pass `session` to fetch a single known session by URI. By default archived sessions are omitted. Optionally filter by `status`, `workspace`, `withChanges`, `unread`, `withPullRequest`, `includeArchived`, `createdAfter`, or `createdBefore`.",
        schema,
        true,
    )
    .sessionless("session:read")
}

fn get_current_session() -> ToolInfo {
    tool(
        "get_current_session",
        "Get Current Session",
        "Get metadata and the open link for the session this conversation is running in. Use this to reference the current session (for example before adding a chat to it).",
        json!({ "type": "object", "properties": {} }),
        true,
    )
    .grant("session:read")
}

fn get_session_context() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "The session or chat to read: a session URI from `list_sessions`, or an `agent-host-session://` link. A link carrying a chat id targets that specific chat." },
            "detail": {
                "type": "string",
                "enum": context::DETAILS,
                "description": "How much conversation detail to return. `summary` (default): status and a short per-turn gist (the message plus a compact snippet of the reply). `digest`: adds the full assistant reply text and tool-call names. `full`: adds tool-call inputs. Higher levels return more tokens."
            },
            "transcriptLimit": { "type": "number", "description": "Maximum number of most-recent turns to include. Defaults to 10; capped at 50." },
            "responseTurnId": { "type": "string", "description": "A `responseTurnId` from an earlier answer, whose reply was cut at its level's cap: answers that turn's reply whole, one page of up to 8000 characters at a time, instead of a transcript." },
            "responseOffset": { "type": "number", "description": "With `responseTurnId`: where the page starts in the reply, in characters. 0 (the default) first, then each `nextResponseOffset`, until `truncated` is false." }
        },
        "required": ["session"]
    });
    tool(
        "get_session_context",
        "Get Session Context",
        "Read the recent conversation of an existing session or chat: a compacted transcript of its turns (messages, replies, and tool calls). Use this to see what a session you created is doing, or to gather context before sending it a message. Returns a compacted summary by default (`detail: \"summary\"`); request `digest` or `full` for more detail. A reply cut at its level's cap carries `assistantTruncated` and a `responseTurnId` that reads it whole. For session metadata (status, working directory, changes, …) use `list_sessions` with the `session` argument.",
        schema,
        true,
    )
    .sessionless("session:read")
}

fn send_message() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "The session or chat to message: a session URI from `list_sessions`, or an `agent-host-session://` link. A link carrying a chat id targets that specific chat." },
            "message": { "type": "string", "description": "The message to send." }
        },
        "required": ["session", "message"]
    });
    tool(
        "send_message",
        "Send Message",
        "Send a message to an existing session or chat, starting a new turn there. Provide a session URI from `list_sessions` or an `agent-host-session://` link; a link carrying a chat id targets that specific chat. If the target chat is busy, the message is queued and starts after the active turn completes successfully. Delivery is asynchronous — this tool does not wait for or return the reply.",
        schema,
        false,
    )
    .sessionless("session:write")
}

fn create_session() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "relationship": {
                "type": "string",
                "enum": ["currentSession", "independent"],
                "description": "Set to `independent` only when the user explicitly asks for a sibling session or a top-level session. Otherwise omit it: the work is created as a new chat in the current session (`currentSession`), including when the user asks for a \"new session\" or a \"new chat\"."
            },
            "prompt": { "type": "string", "description": "Initial prompt to send to the new chat or session." },
            "workspace": { "type": "string", "description": "Workspace for the delegated work: a unique project name, project/workspace URI, absolute folder path, or working directory from an existing session. Omit if the work does not need a workspace. For `currentSession`, also omit it when the work is in the current session's workspace." },
            "worktree": { "type": "boolean", "description": "Set true when the work needs an isolated Git worktree for the workspace. A worktree is not needed for read-only work. Only valid when `workspace` is also set." },
            "title": { "type": "string", "maxLength": 200, "description": "Short title for the new chat or independent session." },
            "model": { "type": "string", "description": "Optional model ID or display name. Defaults to the current chat's model. For `currentSession`, the model must belong to the current session's provider; for `independent`, the model selects the new session's provider." },
            "agent": { "type": "string", "description": "The agent the new session runs, by its id (see `list_agents`)." },
            "config": { "type": "object", "description": "Settings for the new session, as that agent's settings name them (see `list_agents`). A value its settings rule out is refused before anything starts. With `currentSession` they apply to the new chat alone." }
        },
        "required": ["prompt", "title"]
    });
    tool(
        "create_session",
        "Create Session",
        "Create delegated work and start it with an initial prompt.",
        schema,
        false,
    )
    .sessionless("session:write")
    .for_session(spawn::create_session_for)
}

fn create_chat() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "Optional session to add the chat to: a session URI from `list_sessions` or an `agent-host-session://` link. Defaults to the current session when omitted." },
            "prompt": { "type": "string", "description": "Initial prompt to send to the new chat." },
            "title": { "type": "string", "maxLength": 200, "description": "Optional title for the new chat." },
            "model": { "type": "string", "description": "Optional model ID or display name. Defaults to the current chat's model." }
        },
        "required": ["prompt"]
    });
    tool(
        "create_chat",
        "Create Chat",
        "Add a new chat to an existing session and start it with an initial prompt. Prefer this for parallel subtasks that should remain part of one user-visible unit of work, sharing the session's workspace, lifecycle, and aggregate diff. Omit `session` to add the chat to the current session; otherwise pass a session URI from `list_sessions`. Optionally pass a `model` to use for the chat (defaults to the current chat's model).",
        schema,
        false,
    )
    .sessionless("session:write")
}

fn rename_chat() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "Optional owning session: a session URI from `list_sessions` or an `agent-host-session://` link. When provided with `chat`, it must match that chat's session." },
            "chat": { "type": "string", "description": "The chat to rename: pass an `agent-host-session://` session or chat link. Omit when renaming the chat in which this tool is running." },
            "title": { "type": "string", "maxLength": 200, "description": "Short, descriptive chat title, ideally 1-4 words." },
            "automatic": { "type": "boolean", "description": "Set to true only when this call is fulfilling the host's automatic title reminder. Omit for user-requested renames." }
        },
        "required": ["title"]
    });
    tool(
        "rename_chat",
        "Rename Chat",
        "Rename one specific chat so it is easy to find later. Renaming the default chat also names its owning session, while peer-chat titles remain independent. Use a short, human-friendly chat name in sentence case (1-4 words). Pass an `agent-host-session://` session or chat link to target another chat, or omit `chat` to rename the chat in which this tool is running. Name a fresh chat once its scope is clear. Call this tool again whenever the user explicitly asks to rename the chat; every invocation replaces the current title.",
        schema,
        false,
    )
    .deferred()
    .sessionless("session:write")
    .for_session(manage::rename_chat_for)
}

fn archive_chat() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "chat": { "type": "string", "description": "What to archive: an `agent-host-session://` link from `list_sessions`. A link to a nested chat archives that chat alone; a session link, or the link of a session's main chat (`main: true` in its `chats`), archives the whole session." }
        },
        "required": ["chat"]
    });
    tool(
        "archive_chat",
        "Archive Chat",
        "Archive a nested chat alone, or a whole session by its link or its main chat's link, the way a person marks one done. Refuses the chat this tool runs in and the main chat of the current session.",
        schema,
        false,
    )
    .sessionless("session:write")
}

fn set_workspace() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "workspaceFolder": { "type": "string", "description": "Absolute local folder path or file URI to set as the current session's workspace. Use an exact path from the user or `list_sessions`; do not guess." },
            "isolation": { "type": "boolean", "description": "Whether to create an isolated Git worktree and use it as the workspace. Include this choice in the required user confirmation immediately before calling this tool." }
        },
        "required": ["workspaceFolder", "isolation"]
    });
    tool(
        "set_workspace",
        "Set Workspace",
        "Attach a real workspace only to modify its files or run commands requiring its project environment. Do not use for self-contained scratch work on attachments, pasted/generated content, or throwaway/exportable artifacts. The session, chat, and history are preserved. Immediately before every call, use the available user-input tool to ask one question confirming both workspace and isolation, even if already specified; tool approval is not confirmation. Set `isolation` to true for a managed Git worktree or false for the folder directly. After this turn, the host attaches the workspace and continues the original task. Make this the turn's final tool call.",
        schema,
        false,
    )
    .deferred()
    .grant("session:write")
}

fn isolate_session() -> ToolInfo {
    tool(
        "isolate_session",
        "Isolate Session",
        "Move only this chat into a new Git worktree cut from the folder it works in, so its changes stay apart from the session's other chats. Acted on when this turn ends; the other chats keep their folders. Make this the turn's final tool call.",
        json!({ "type": "object", "properties": {} }),
        false,
    )
    .deferred()
    .grant("session:write")
    .for_session(manage::isolate_session_for)
}

fn delete_session() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "The session to delete: a session URI from `list_sessions` or an `agent-host-session://` link (e.g. from `create_session`)." }
        },
        "required": ["session"]
    });
    let mut info = tool(
        "delete_session",
        "Delete Session",
        "Permanently delete a session (identified by a session URI from `list_sessions`), including its stored data. This cannot be undone. Refuses to delete the current session.",
        schema,
        false,
    )
    .destructive()
    .sessionless("session:write");
    if let Some(a) = info.definition.annotations.as_mut() {
        a.read_only_hint = Some(false);
    }
    info
}

fn move_session() -> ToolInfo {
    let schema = json!({
        "type": "object",
        "properties": {
            "session": { "type": "string", "description": "What to move: a nested chat's or a session's `agent-host-session://` link." },
            "into": { "type": "string", "description": "The session to move it into: a session URI from `list_sessions` or its link. Omit with `relationship: \"independent\"`." },
            "after": { "type": "string", "description": "The chat in the destination it should sit behind, by its link. Omit to put it at the end." },
            "relationship": { "type": "string", "enum": ["independent"], "description": "Set to `independent` to make it a session of its own instead of moving it into another." }
        },
        "required": ["session"]
    });
    tool(
        "move_session",
        "Move Session",
        "Reorder a nested session in its session, move it into another session, or make it a session of its own. Moves the same way a person's move in the Agents window does, and is refused in the same words.",
        schema,
        false,
    )
    .sessionless("session:write")
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

/// Who a call acts as: the caller with no session; inside one, the person who sent the running
/// turn. A turn nobody is behind, and a call reached with no turn running at all (a window
/// outliving the turn it sent), is nobody: it reads and writes nothing (seed 000 "Grants").
fn acting(call: &ToolCall) -> Principal {
    match &call.caller {
        Caller::Root => Principal::Root,
        Caller::Person(id) => Principal::Person(id.clone()),
        Caller::Turn(sender) => Principal::from_sender(sender.as_deref()),
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

/// Reads an optional boolean argument.
fn optional_bool(tool: &str, input: &Value, field: &str) -> Result<Option<bool>, Refusal> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be a boolean.").into()),
    }
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
        let names: Vec<String> = tools().into_iter().map(|t| t.definition.name).collect();
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
            tools().into_iter().filter(|t| t.sessionless).map(|t| t.definition.name).collect();
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

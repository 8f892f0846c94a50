//! The session tools that change what exists: `rename_chat`, `archive_chat`, `set_workspace`,
//! `isolate_session`, `delete_session` and `move_session`.
//!
//! `set_workspace` and `isolate_session` cannot act when they are called — the agent is restarted
//! in the new folder, and a restart mid-turn is a turn that never finishes — so each records a
//! request that [`turn_ended`] carries out when the turn completes and drops when it is cancelled
//! or fails. A worktree either asks for is cut at the call (so a refusal reaches the model while
//! it can still act on it), and taken back with nothing left of it when the request is dropped.

use std::path::PathBuf;

use ahp_types::actions::{ChatIsArchivedChangedAction, SessionIsArchivedChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ChatOrigin, Message, MessageKind, MessageOrigin, TurnState};
use serde_json::{json, Value};

use super::super::{Cx, HostTools, Refusal, ToolCall, ToolInfo, ToolResult};
use super::{link_of, resolve, title_arg, ArchiveChat, DeleteSession, MoveSession, RenameChat, SetWorkspace};
use crate::host::facade::{file_uri, host_turn, FolderRequest, Sender, CHAT_MOVES_OFF};
use crate::host::{Core, Host};
use crate::users::Principal;

/// A workspace change waiting for the turn that asked for it to end.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    /// The turn that asked.
    pub turn_id: String,
    /// The folder the session (or chat) moves to.
    pub folder: PathBuf,
    /// What moves, and whether a worktree was cut for it.
    pub moves: Moves,
}

/// What a workspace change moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moves {
    /// The whole session (`set_workspace`); `cut` when its folder is a worktree cut for it.
    Session { cut: bool },
    /// The calling chat alone, into a worktree cut for it (`isolate_session`).
    Chat,
}

// --- rename_chat -----------------------------------------------------------------------------

/// `rename_chat` as this host offers it: every session runs under the deferred title strategy (the
/// host names a chat after its first message), so `automatic` is left out and the description
/// says to rename only on request, as VS Code's host words it for that strategy.
pub fn rename_chat_for(_core: &Core, _session: Option<&str>, mut info: ToolInfo) -> Option<ToolInfo> {
    info.definition.description = Some("Rename one specific chat when the user explicitly asks to rename it. Automatic naming is handled by the host; do not call this tool to name a fresh chat. Renaming the default chat also names its owning session, while peer-chat titles remain independent. Use a short, human-friendly chat name in sentence case (1-4 words). Pass an `agent-host-session://` session or chat link to target another chat, or omit `chat` to rename the chat in which this tool is running. Every invocation replaces the current title.".to_owned());
    if let Some(properties) =
        info.definition.input_schema.as_mut().and_then(|s| s.get_mut("properties")).and_then(Value::as_object_mut)
    {
        properties.remove("automatic");
    }
    Some(info)
}

/// `rename_chat`.
pub fn rename_chat(host: &Host, call: &ToolCall, args: RenameChat) -> ToolResult {
    const TOOL: &str = "rename_chat";
    let title = title_arg(TOOL, &args.title)?;
    let (asked_session, asked_chat) = (args.session.as_deref(), args.chat.as_deref());
    let mut core = host.lock();
    let known_session = |core: &mut Core, asked: &str| {
        resolve(host, core, asked, &|| {
            format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).")
        })
        .map(|r| r.session)
    };
    let chat = match asked_chat {
        Some(asked) => {
            let target = resolve(host, &mut core, asked, &|| {
                format!("Invalid {TOOL} input: chat must be an agent-host-session:// link targeting a known chat.")
            })?;
            if let Some(s) = asked_session {
                if known_session(&mut core, s)? != target.session {
                    return Err(format!("Invalid {TOOL} input: session must match the owning session of chat.").into());
                }
            }
            target.chat
        }
        None => {
            let (Some(session), Some(chat)) = (call.session.clone(), call.chat.clone()) else {
                return Err(format!(
                    "Invalid {TOOL} input: chat must target a known chat, or the tool must run inside that chat."
                )
                .into());
            };
            if let Some(s) = asked_session {
                if known_session(&mut core, s)? != session {
                    return Err(
                        format!("Invalid {TOOL} input: session must match the current chat's owning session.").into()
                    );
                }
            }
            chat
        }
    };
    core.name_chat(&chat, &title);
    Ok(format!("Renamed chat to \"{title}\"."))
}

// --- archive_chat ----------------------------------------------------------------------------

/// `archive_chat`: a nested chat asks `chat:mark`, a whole session `session:mark` (its declared
/// grants, asked once the target is known).
pub fn archive_chat(cx: Cx<'_>, args: ArchiveChat) -> ToolResult {
    const TOOL: &str = "archive_chat";
    let (host, call) = (cx.host, cx.call);
    let asked = args.chat.as_str();
    let mut core = host.lock();
    let target = resolve(host, &mut core, asked, &|| {
        format!("Invalid {TOOL} input: chat must be an agent-host-session:// link targeting a known chat.")
    })?;
    let link = link_of(&core, &target.session, &target.chat);
    if target.is_default {
        if call.session.as_deref() == Some(target.session.as_str()) {
            return Err(
                format!("Invalid {TOOL} input: refusing to archive the main chat of the current session.").into()
            );
        }
        cx.require(&core, "session:mark")?;
        let action = StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: true });
        core.apply(&target.session, action, None, None);
        return Ok(format!("Archived session ({link})."));
    }
    if call.chat.as_deref() == Some(target.chat.as_str()) {
        return Err(format!("Invalid {TOOL} input: refusing to archive the current chat.").into());
    }
    cx.require(&core, "chat:mark")?;
    let action = StateAction::ChatIsArchivedChanged(ChatIsArchivedChangedAction { is_archived: true });
    core.apply(&target.chat, action, None, None);
    Ok(format!("Archived chat ({link})."))
}

// --- set_workspace and isolate_session -------------------------------------------------------

/// `set_workspace`: recorded now (a worktree cut now, when isolation asks for one), carried out
/// when the turn completes.
pub async fn set_workspace(tools: &HostTools, host: &Host, call: &ToolCall, args: SetWorkspace) -> ToolResult {
    const TOOL: &str = "set_workspace";
    let (Some(session), Some(chat), Some(turn_id)) = (call.session.clone(), call.chat.clone(), call.turn_id.clone())
    else {
        return Err(format!("{TOOL} must run from an active chat turn.").into());
    };
    let folder = local_folder(&args.workspace_folder)
        .ok_or_else(|| format!("Invalid {TOOL} input: workspaceFolder must be an absolute local path or file URI."))?;
    let isolation = args.isolation;
    if !folder.is_dir() {
        return Err(format!("Invalid {TOOL} input: {} is not a directory.", folder.display()).into());
    }
    let (title, settings) = {
        let core = host.lock();
        running(&core, TOOL, &chat, &turn_id)?;
        let state = core.session_state(&session);
        let settings = state.and_then(|s| s.config.as_ref()).map(|c| c.values.clone()).unwrap_or_default();
        (state.map(|s| s.title.clone()), settings)
    };
    let folder = if isolation {
        let request = FolderRequest { owner: session.clone(), session: session.clone(), from: folder, title, settings };
        cut(host, TOOL, request).await?
    } else {
        folder
    };
    let uri = file_uri(&folder);
    wait_for_turn(
        tools,
        host,
        TOOL,
        chat,
        WorkspaceRequest { turn_id, folder, moves: Moves::Session { cut: isolation } },
    )?;
    Ok(format!(
        "Workspace will be set to {uri} after this turn ends. End this turn now without calling more tools or replying; the host will continue the original task automatically in the selected workspace."
    ))
}

/// Refuses a call that does not come from the running turn of its chat.
fn running(core: &Core, tool: &str, chat: &str, turn_id: &str) -> Result<(), Refusal> {
    let running = core.chat_state(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == turn_id);
    if running {
        Ok(())
    } else {
        Err(format!("{tool} must run from an active chat turn.").into())
    }
}

/// Cuts the worktree a request asks for; a refusal is the feature's sentence, as the tool's
/// input's fault.
async fn cut(host: &Host, tool: &str, request: FolderRequest) -> Result<PathBuf, Refusal> {
    let workspaces = host.lock().workspaces();
    Ok(workspaces.make_folder(host, request).await.map_err(|e| format!("Invalid {tool} input: {}", e.message))?)
}

/// Keeps a workspace change until its turn ends; one it replaces is dropped. Whether the turn
/// still runs is asked under the same lock its ending takes: a turn that ended while the tool
/// worked (a worktree takes a while to cut) would never carry the change out, and the worktree
/// cut for it would stay. Then nothing is left of the change, and the call is refused.
fn wait_for_turn(
    tools: &HostTools,
    host: &Host,
    tool: &str,
    chat: String,
    request: WorkspaceRequest,
) -> Result<(), Refusal> {
    let mut core = host.lock();
    if let Err(refusal) = running(&core, tool, &chat, &request.turn_id) {
        drop_worktree(&mut core, &chat, &request);
        return Err(refusal);
    }
    let replaced = tools.state().workspace_requests.insert(chat.clone(), request);
    if let Some(replaced) = replaced {
        drop_worktree(&mut core, &chat, &replaced);
    }
    Ok(())
}

/// An absolute local path or `file://` URI with no query or fragment.
fn local_folder(asked: &str) -> Option<PathBuf> {
    let path = match asked.strip_prefix("file://") {
        Some(rest) => rest,
        None if asked.starts_with('/') => asked,
        None => return None,
    };
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return None;
    }
    Some(PathBuf::from(path))
}

/// `isolate_session` is offered only to a chat of a session whose agent keeps a folder per chat:
/// here every chat is a conversation of its own, started in the folder the host names, so that is
/// a session in a folder whose agent holds more than one chat (one of a single chat moves as a
/// whole with `set_workspace`).
pub fn isolate_session_for(core: &Core, session: Option<&str>, info: ToolInfo) -> Option<ToolInfo> {
    let session = session?;
    let meta = core.session(session)?;
    (meta.working_directory.is_some() && core.holds_many_chats(&meta.provider)).then_some(info)
}

/// `isolate_session`: a worktree cut now from the calling chat's folder; the chat moves into it
/// when the turn completes, and the session's other chats keep their folders.
pub async fn isolate_session(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "isolate_session";
    let (Some(session), Some(chat), Some(turn_id)) = (call.session.clone(), call.chat.clone(), call.turn_id.clone())
    else {
        return Err(format!("{TOOL} must run from an active chat turn.").into());
    };
    let request = {
        let core = host.lock();
        running(&core, TOOL, &chat, &turn_id)?;
        if core.chat_state(&chat).is_some_and(|c| matches!(c.origin, Some(ChatOrigin::Tool { .. }))) {
            return Err(
                format!("{TOOL} moves one of a session's own chats, never a worker chat a tool call spawned.").into()
            );
        }
        let from = core
            .chat_folder(&chat)
            .ok_or_else(|| format!("{TOOL} needs a folder to cut the worktree from, and this chat works in none."))?;
        let settings =
            core.session_state(&session).and_then(|s| s.config.as_ref()).map(|c| c.values.clone()).unwrap_or_default();
        let title = core.chat(&chat).map(|m| m.title.clone()).filter(|t| !t.is_empty());
        FolderRequest { owner: chat.clone(), session, from, title, settings }
    };
    let folder = cut(host, TOOL, request).await?;
    let uri = file_uri(&folder);
    wait_for_turn(tools, host, TOOL, chat, WorkspaceRequest { turn_id, folder, moves: Moves::Chat })?;
    Ok(format!(
        "This chat will move to its own worktree {uri} after this turn ends; the session's other chats keep their folders. End this turn now without calling more tools or replying; the host will continue the original task automatically in the worktree."
    ))
}

/// A turn ended in `chat`: a workspace change it asked for is carried out when it completed and
/// dropped when it was cancelled or failed.
pub fn turn_ended(tools: &HostTools, core: &mut Core, chat: &str, ended: &str) {
    let Some(request) = take_request(tools, chat, ended) else { return };
    let completed = core
        .chat_state(chat)
        .and_then(|c| c.turns.iter().rev().find(|t| t.id == ended))
        .is_some_and(|t| t.state == TurnState::Complete);
    if !completed {
        tracing::info!(chat, turn = ended, "the turn did not complete; its workspace change is dropped");
        drop_worktree(core, chat, &request);
        return;
    }
    move_folder(core, chat, ended, request);
}

/// The worktree cut for a request that is dropped goes, with nothing left of it.
fn drop_worktree(core: &mut Core, chat: &str, request: &WorkspaceRequest) {
    let owner = match request.moves {
        Moves::Session { cut: true } => core.chat(chat).map(|m| m.session.clone()),
        Moves::Chat => Some(chat.to_owned()),
        Moves::Session { cut: false } => None,
    };
    if let Some(owner) = owner {
        let workspaces = core.workspaces();
        workspaces.settle(core, &owner, false);
    }
}

/// The workspace change the turn `ended` asked for in `chat`, taken out of the waiting ones.
fn take_request(tools: &HostTools, chat: &str, ended: &str) -> Option<WorkspaceRequest> {
    let mut state = tools.state();
    let waiting = state.workspace_requests.get(chat)?;
    if waiting.turn_id != ended {
        return None;
    }
    state.workspace_requests.remove(chat)
}

/// Moves the chat's session (or the chat alone) to the requested folder: its record and state,
/// the backends restarted there (a busy one when its turn ends), and the calling chat continued as
/// the person of the turn that asked for it.
fn move_folder(core: &mut Core, chat: &str, ended: &str, request: WorkspaceRequest) {
    let Some(session) = core.chat(chat).map(|m| m.session.clone()) else { return };
    let new_uri = file_uri(&request.folder);
    let workspaces = core.workspaces();
    let (label, text) = match request.moves {
        Moves::Session { cut } => {
            if cut {
                workspaces.settle(core, &session, true);
            }
            core.move_session_folder(&session, &request.folder);
            ("Workspace set", format!("The workspace is now {new_uri}. Continue the original task there."))
        }
        Moves::Chat => {
            workspaces.settle(core, chat, true);
            core.move_chat_folder(chat, &request.folder);
            (
                "Chat isolated",
                format!("This chat now works in its own worktree, {new_uri}. Continue the original task there."),
            )
        }
    };
    // The host continues the task the turn was doing, in the new folder.
    let mut meta = JsonObject::new();
    meta.insert("vscode.chat.requestHiddenFromTranscript".into(), json!(true));
    meta.insert("vscode.chat.systemInitiatedLabel".into(), json!(label));
    meta.insert("vscode.chat.workspaceContinuation".into(), json!({ "workspaceFolder": new_uri }));
    let message = Message {
        text,
        origin: MessageOrigin { kind: MessageKind::Agent },
        attachments: None,
        model: None,
        agent: None,
        meta: Some(meta),
    };
    let sender = Sender::Host { person: core.sender_of(chat, ended) };
    if let Err(why) = core.deliver(chat, host_turn(message, None), sender) {
        tracing::warn!(chat, "the task could not be continued in its new folder: {why}");
    }
}

// --- delete_session and move_session ---------------------------------------------------------

/// `delete_session`: as the person whose turn it was called in, or the calling session's owner —
/// never the model, and never whichever connection started the session it names. Its worktree
/// goes with it unless something in it is uncommitted or unmerged; the answer says which.
pub async fn delete_session(host: &Host, call: &ToolCall, args: DeleteSession) -> ToolResult {
    const TOOL: &str = "delete_session";
    let asked = args.session.as_str();
    let session = {
        let mut core = host.lock();
        let target = resolve(host, &mut core, asked, &|| {
            format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).")
        })?;
        if call.session.as_deref() == Some(target.session.as_str()) {
            return Err(format!("Invalid {TOOL} input: refusing to delete the current session.").into());
        }
        // Deleting is the owner's own say, asked of the person the call acts as.
        let principal = call.caller.principal();
        if principal == Principal::Nobody && core.has_users() {
            return Err("this turn may not session:write here".into());
        }
        core.may_dispose(&principal, &target.session).map_err(|e| e.message)?;
        target.session
    };
    let released = host.lock().workspaces().when_released(&session);
    host.dispose_session(&session).map_err(|e| e.message)?;
    let said = tokio::time::timeout(std::time::Duration::from_secs(30), released).await.ok().and_then(Result::ok);
    let said = said.filter(|s| !s.is_empty()).map(|s| format!(" {s}")).unwrap_or_default();
    Ok(format!("Deleted session {session}.{said} Reply with one short sentence confirming the session was deleted."))
}

/// `move_session`: the host's `moveChat`, refused in its words while chat moves are off.
pub fn move_session(host: &Host, _call: &ToolCall, args: MoveSession) -> ToolResult {
    const TOOL: &str = "move_session";
    let (asked, into) = (args.session.as_str(), args.into.as_deref());
    let independent = match args.relationship.as_deref() {
        None => false,
        Some("independent") => true,
        Some(_) => return Err(format!("Invalid {TOOL} input: relationship must be \"independent\".").into()),
    };
    match (into, independent) {
        (Some(_), true) => {
            return Err(format!("Invalid {TOOL} input: pass into or relationship \"independent\", not both.").into())
        }
        (None, false) => {
            return Err(format!(
                "Invalid {TOOL} input: pass into for the destination session, or relationship \"independent\" for a session of its own."
            ).into())
        }
        _ => {}
    }
    let mut core = host.lock();
    resolve(host, &mut core, asked, &|| {
        format!("Invalid {TOOL} input: session must be an agent-host-session:// link targeting a known chat.")
    })?;
    if let Some(into) = into {
        resolve(host, &mut core, into, &|| {
            format!("Invalid {TOOL} input: into must match the URI of a known session (see list_sessions).")
        })?;
    }
    Err(CHAT_MOVES_OFF.into())
}

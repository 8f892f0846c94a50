//! The session tools that change what exists: `rename_chat`, `archive_chat`, `set_workspace` (and
//! the `isolate_session` this host withholds), `delete_session` and `move_session`.
//!
//! `set_workspace` cannot act when it is called — the agent is restarted in the new folder, and a
//! restart mid-turn is a turn that never finishes — so it records a request that [`turn_ended`]
//! carries out when the turn completes and drops when it is cancelled or fails.

use std::path::PathBuf;

use ahp_types::actions::{ChatIsArchivedChangedAction, SessionIsArchivedChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{Message, MessageKind, MessageOrigin, TurnState};
use serde_json::{json, Value};

use super::super::{authorize, optional_str, required_str, HostTools, ToolCall, ToolInfo, ToolResult};
use super::{acting, link_of, optional_bool, resolve, title_arg};
use crate::host::facade::{file_uri, host_turn, CHAT_MOVES_OFF};
use crate::host::{Core, Host};
use crate::users::Principal;

/// A workspace change waiting for the turn that asked for it to end.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    /// The turn that asked.
    pub turn_id: String,
    /// The folder the session moves to.
    pub folder: PathBuf,
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
pub fn rename_chat(host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "rename_chat";
    let input = &call.input;
    let title = title_arg(TOOL, required_str(TOOL, input, "title")?)?;
    let asked_session = optional_str(TOOL, input, "session")?;
    let asked_chat = optional_str(TOOL, input, "chat")?;
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
    authorize(&core, call, "session:write")?;
    core.name_chat(&chat, &title);
    Ok(format!("Renamed chat to \"{title}\"."))
}

// --- archive_chat ----------------------------------------------------------------------------

/// `archive_chat`.
pub fn archive_chat(host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "archive_chat";
    let asked = required_str(TOOL, &call.input, "chat")?;
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
        authorize(&core, call, "session:mark")?;
        let action = StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: true });
        core.apply(&target.session, action, None, None);
        return Ok(format!("Archived session ({link})."));
    }
    if call.chat.as_deref() == Some(target.chat.as_str()) {
        return Err(format!("Invalid {TOOL} input: refusing to archive the current chat.").into());
    }
    authorize(&core, call, "chat:mark")?;
    let action = StateAction::ChatIsArchivedChanged(ChatIsArchivedChangedAction { is_archived: true });
    core.apply(&target.chat, action, None, None);
    Ok(format!("Archived chat ({link})."))
}

// --- set_workspace and isolate_session -------------------------------------------------------

/// `set_workspace`: recorded now, carried out when the turn completes.
pub fn set_workspace(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "set_workspace";
    let (Some(chat), Some(turn_id)) = (call.chat.clone(), call.turn_id.clone()) else {
        return Err(format!("{TOOL} must run from an active chat turn.").into());
    };
    let asked = required_str(TOOL, &call.input, "workspaceFolder")?;
    let folder = local_folder(asked)
        .ok_or_else(|| format!("Invalid {TOOL} input: workspaceFolder must be an absolute local path or file URI."))?;
    let isolation = optional_bool(TOOL, &call.input, "isolation")?
        .ok_or_else(|| format!("Invalid {TOOL} input: isolation must be a boolean."))?;
    if isolation {
        return Err(format!(
            "Invalid {TOOL} input: this host cannot make an isolated worktree; call {TOOL} again with isolation false to work in the folder itself."
        ).into());
    }
    if !folder.is_dir() {
        return Err(format!("Invalid {TOOL} input: {} is not a directory.", folder.display()).into());
    }
    let core = host.lock();
    authorize(&core, call, "session:write")?;
    let running = core.chat_state(&chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == turn_id);
    if !running {
        return Err(format!("{TOOL} must run from an active chat turn.").into());
    }
    let uri = file_uri(&folder);
    tools.state().workspace_requests.insert(chat, WorkspaceRequest { turn_id, folder });
    Ok(format!(
        "Workspace will be set to {uri} after this turn ends. End this turn now without calling more tools or replying; the host will continue the original task automatically in the selected workspace."
    ))
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

/// `isolate_session` is offered only to a chat of a session whose agent keeps a folder per chat;
/// no agent this host runs does, so it is withheld from every session (and listed to none).
pub fn isolate_session_for(_core: &Core, _session: Option<&str>, _info: ToolInfo) -> Option<ToolInfo> {
    None
}

/// `isolate_session`, should a call reach it anyway.
pub fn isolate_session(_host: &Host, _call: &ToolCall) -> ToolResult {
    Err("isolate_session needs an agent that keeps a folder per chat, and this session's agent keeps one folder for the whole session; use set_workspace to move the session.".into())
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
        return;
    }
    move_session_folder(core, chat, request);
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

/// Moves the chat's session to the requested folder: its record and state, every chat's backend
/// restarted there (a busy one when its turn ends), and the calling chat continued.
fn move_session_folder(core: &mut Core, chat: &str, request: WorkspaceRequest) {
    let Some(session) = core.chat(chat).map(|m| m.session.clone()) else { return };
    let new_uri = file_uri(&request.folder);
    core.move_session_folder(&session, &request.folder);
    // The host continues the task the turn was doing, in the new folder.
    let mut meta = JsonObject::new();
    meta.insert("vscode.chat.requestHiddenFromTranscript".into(), json!(true));
    meta.insert("vscode.chat.systemInitiatedLabel".into(), json!("Workspace set"));
    meta.insert("vscode.chat.workspaceContinuation".into(), json!({ "workspaceFolder": new_uri }));
    let message = Message {
        text: format!("The workspace is now {new_uri}. Continue the original task there."),
        origin: MessageOrigin { kind: MessageKind::Agent },
        attachments: None,
        model: None,
        agent: None,
        meta: Some(meta),
    };
    core.start_turn(chat, host_turn(message, None), None);
}

// --- delete_session and move_session ---------------------------------------------------------

/// `delete_session`: as the person whose turn it was called in, or the calling session's owner —
/// never the model, and never whichever connection started the session it names.
pub fn delete_session(host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "delete_session";
    let asked = required_str(TOOL, &call.input, "session")?;
    let session = {
        let mut core = host.lock();
        let target = resolve(host, &mut core, asked, &|| {
            format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).")
        })?;
        if call.session.as_deref() == Some(target.session.as_str()) {
            return Err(format!("Invalid {TOOL} input: refusing to delete the current session.").into());
        }
        authorize(&core, call, "session:write")?;
        // Deleting is the owner's own say, asked of the person the call acts as.
        let principal = acting(call);
        if principal == Principal::Nobody && core.has_users() {
            return Err("this turn may not session:write here".into());
        }
        core.may_dispose(&principal, &target.session).map_err(|e| e.message)?;
        target.session
    };
    host.dispose_session(&session).map_err(|e| e.message)?;
    Ok(format!("Deleted session {session}. Reply with one short sentence confirming the session was deleted."))
}

/// `move_session`: the host's `moveChat`, refused in its words while chat moves are off.
pub fn move_session(host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "move_session";
    let input = &call.input;
    let asked = required_str(TOOL, input, "session")?;
    let into = optional_str(TOOL, input, "into")?;
    let _after = optional_str(TOOL, input, "after")?;
    let independent = match optional_str(TOOL, input, "relationship")? {
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
    authorize(&core, call, "session:write")?;
    Err(CHAT_MOVES_OFF.into())
}

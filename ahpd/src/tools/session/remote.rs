//! The session tools on sessions another host runs (issue 31, seed 004's relay): a remote's
//! sessions are listed beside this host's, `create_session` with an agent `<agent>@<remote>` makes
//! its session there, and `send_message` and `get_session_context` reach its chats, each through
//! the remotes feature ([`crate::host::facade::Remotes`]): a remote channel is mirrored here (its
//! state read as a local one is), and what the tool does is relayed to the remote as the host's own.
//!
//! The calling person's grants here are checked as for a local session, and what a tool makes
//! there is counted in the calling tree's limits as a local child is; the remote decides by the
//! link's token, and its refusal is the tool's, in its words.

use std::collections::HashSet;
use std::sync::Arc;

use ahp_types::actions::{SessionTitleChangedAction, StateAction};
use ahp_types::state::{Message, MessageKind, SessionSummary};
use serde_json::{json, Value};

use super::super::limits::{depth_refusal, Budget, MAX_SPAWN_DEPTH};
use super::super::{HostTools, Refusal, ToolCall, ToolResult};
use super::asks::{check_agent, resolve_model, tool_message, Account, CreateArgs, CREATE};
use super::{link_of, links, Resolved};
use crate::host::facade::{host_turn, new_id, queued_message, Remotes};
use crate::host::{Core, Host};

/// The remotes feature, when a remote holds `key` (a provider `<agent>@<remote>`, a channel).
pub fn holder(host: &Host, key: &str) -> Option<Arc<dyn Remotes>> {
    host.remotes().filter(|remotes| remotes.holds(key))
}

/// The remotes' sessions, as `list_sessions` lists them beside this host's (their provider named
/// `<agent>@<remote>`).
pub fn summaries(host: &Host) -> Vec<SessionSummary> {
    let Some(remotes) = host.remotes() else { return Vec::new() };
    remotes.sessions().into_iter().filter_map(|summary| serde_json::from_value(summary).ok()).collect()
}

/// The remote a listed session runs on: the name its provider carries after `@`.
pub fn machine<'a>(summary: &'a SessionSummary, remote: &HashSet<String>) -> Option<&'a str> {
    if !remote.contains(&summary.resource) {
        return None;
    }
    summary.provider.rsplit_once('@').map(|(_, name)| name)
}

/// Resolves a tool's `session` argument to a session a remote holds and the chat it names, both
/// mirrored here so their state reads as a local one's; `None` when no remote holds it (the tool
/// looks among this host's own).
pub async fn resolve(
    host: &Host,
    input: &str,
    unknown: &(dyn Fn() -> String + Sync),
) -> Result<Option<Resolved>, Refusal> {
    let Some(remotes) = host.remotes() else { return Ok(None) };
    let Some(target) = links::parse(input) else { return Ok(None) };
    let session = if target.session.is_empty() {
        let chat = target.chat.clone().unwrap_or_default();
        match session_of_chat(remotes.as_ref(), &chat) {
            Some(session) => session,
            None => return Ok(None),
        }
    } else {
        target.session.clone()
    };
    if !remotes.holds(&session) {
        return Ok(None);
    }
    remotes.open(host, &session).await.map_err(|e| e.message)?;
    let (chat, is_default) = {
        let core = host.lock();
        let state = core.session_state(&session).ok_or_else(unknown)?;
        let default = state.default_chat.clone().unwrap_or_default();
        let chat = target.chat.unwrap_or_else(|| default.clone());
        if !state.chats.iter().any(|c| c.resource == chat) {
            return Err(unknown().into());
        }
        let is_default = chat == default;
        (chat, is_default)
    };
    remotes.open(host, &chat).await.map_err(|e| e.message)?;
    Ok(Some(Resolved { session, chat, is_default }))
}

/// The remote session a chat URI belongs to, from the remotes' listing.
fn session_of_chat(remotes: &dyn Remotes, chat: &str) -> Option<String> {
    remotes.sessions().into_iter().find_map(|summary| {
        let named = |c: &Value| c.as_str() == Some(chat);
        let listed = summary["chats"].as_array().into_iter().flatten().any(|c| named(&c["resource"]));
        (named(&summary["defaultChat"]) || listed).then(|| summary["resource"].as_str().map(str::to_owned)).flatten()
    })
}

/// A `send_message` on its way to a mirrored chat: the action, whether it waits behind what runs
/// there, and the chat's link.
pub struct Outgoing {
    action: StateAction,
    queued: bool,
    link: String,
}

/// `send_message` to a mirrored chat, its grant and budget checked under `core`: counted now
/// (under the same hold as the check), as the host's own queued message, which the remote starts
/// at once when its chat is free and keeps behind what runs there otherwise (what is mirrored
/// here may lag: a turn begun instead could be refused by a chat that just got busy).
pub fn outgoing(core: &Core, account: &Account<'_>, target: &Resolved, message: Message) -> Outgoing {
    account.spend(core, Budget::Messages);
    Outgoing {
        action: queued_message(new_id(), as_client(message)).1,
        queued: core.is_busy(&target.chat),
        link: link_of(core, &target.session, &target.chat),
    }
}

/// Relays a `send_message` and answers as the remote took it; given back to the budget if not.
pub async fn send_message(host: &Host, account: &Account<'_>, chat: &str, outgoing: Outgoing) -> ToolResult {
    let Outgoing { action, queued, link } = outgoing;
    let sent = match host.remotes() {
        Some(remotes) => remotes.dispatch(host, chat, action).await,
        None => Err(format!("No remote host holds {chat}")),
    };
    if let Err(why) = sent {
        account.refund(Budget::Messages);
        return Err(why.into());
    }
    Ok(format!("Message {} ({link}).", if queued { "queued" } else { "sent" }))
}

/// `create_session` with an agent a remote offers: the session is made there under a new URI
/// (`createSession` relayed), its default chat mirrored here, titled, and its first turn begun;
/// counted in the calling tree's limits as a local child is (its depth too).
pub async fn create_session(
    tools: &HostTools,
    host: &Host,
    call: &ToolCall,
    args: &CreateArgs<'_>,
    remotes: Arc<dyn Remotes>,
) -> ToolResult {
    let agent = args.agent.unwrap_or_default();
    if !args.independent {
        return Err(format!(
            "Invalid {CREATE} input: {agent} runs on another host, in a session of its own there; use relationship \"independent\"."
        )
        .into());
    }
    let uri = format!("ahp-session:/{}", new_id());
    let (account, model) = {
        let mut core = host.lock();
        check_agent(&core, agent)?;
        let model = args.model.map(|asked| resolve_model(&core, CREATE, asked, Some(agent))).transpose()?.map(|m| m.1);
        let account = Account::of(tools, host, &mut core, call);
        let parent_depth = call.session.as_deref().and_then(|s| core.session(s)).map_or(0, |m| m.depth);
        if account.counts() && parent_depth >= MAX_SPAWN_DEPTH {
            return Err(depth_refusal(parent_depth).into());
        }
        account.check(&core, Budget::Sessions)?;
        // Counted now, under the same hold as the check, so concurrent calls cannot slip past a
        // full budget while the remote works; given back if the remote makes nothing.
        account.spend(&core, Budget::Sessions);
        (account, model)
    };
    let params = create_params(&uri, agent, args);
    if let Err(e) = remotes.request(host, "createSession", params).await {
        account.refund(Budget::Sessions);
        return Err(e.message.into());
    }
    account.adopt(&uri);
    remotes.open(host, &uri).await.map_err(|e| e.message)?;
    let chat = host
        .lock()
        .session_state(&uri)
        .and_then(|s| s.default_chat.clone())
        .ok_or_else(|| format!("{agent} made {uri} but it has no chat to start"))?;
    remotes.open(host, &chat).await.map_err(|e| e.message)?;
    let message = as_client(tool_message(call, args.prompt, model));
    remotes.dispatch(host, &chat, StateAction::ChatTurnStarted(host_turn(message, None))).await?;
    // Named after its first turn began: there, a turn names a session nobody named yet.
    let title = StateAction::SessionTitleChanged(SessionTitleChangedAction { title: args.title.clone() });
    remotes.dispatch(host, &uri, title).await?;
    Ok(format!("New session created ({}).", links::session_link(agent, &uri)))
}

/// A tool's message as this host, a client there, may send it: a client's message is the user's
/// (the delegation `_meta` still says which session, chat and turn it came from).
fn as_client(mut message: Message) -> Message {
    message.origin.kind = MessageKind::User;
    message
}

/// `createSession`'s parameters for a remote agent: the settings asked for (with a worktree, the
/// remote's own isolation), and the folder asked for, as the remote names folders.
fn create_params(uri: &str, agent: &str, args: &CreateArgs<'_>) -> Value {
    let mut config = args.config.clone();
    if args.worktree {
        config.insert("isolation".into(), Value::from("worktree"));
    }
    let mut params = json!({ "channel": uri, "provider": agent });
    if !config.is_empty() {
        params["config"] = Value::Object(config);
    }
    if let Some(folder) = args.workspace {
        let uri = if folder.starts_with('/') { format!("file://{folder}") } else { folder.to_owned() };
        params["workingDirectories"] = json!([uri]);
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::common::JsonObject;

    fn args<'a>(config: JsonObject, workspace: Option<&'a str>, worktree: bool) -> CreateArgs<'a> {
        CreateArgs {
            independent: true,
            prompt: "p",
            title: "t".into(),
            workspace,
            model: None,
            agent: Some("echo@devbox"),
            config,
            worktree,
        }
    }

    #[test]
    fn create_session_asks_the_remote_for_the_settings_and_folder_named() {
        let plain = create_params("ahp-session:/x", "echo@devbox", &args(JsonObject::new(), None, false));
        assert_eq!(plain, json!({ "channel": "ahp-session:/x", "provider": "echo@devbox" }));
        let mut config = JsonObject::new();
        config.insert("voice".into(), json!("loud"));
        let full = create_params("ahp-session:/x", "echo@devbox", &args(config, Some("/srv/repo"), true));
        assert_eq!(full["config"], json!({ "voice": "loud", "isolation": "worktree" }));
        assert_eq!(full["workingDirectories"], json!(["file:///srv/repo"]));
        let by_uri = create_params("ahp-session:/x", "echo@devbox", &args(JsonObject::new(), Some("file:///w"), false));
        assert_eq!(by_uri["workingDirectories"], json!(["file:///w"]));
    }

    #[test]
    fn a_remote_row_names_its_machine_and_a_local_one_none() {
        let summary = |uri: &str, provider: &str| -> SessionSummary {
            serde_json::from_value(json!({
                "resource": uri, "provider": provider, "title": "", "status": 1,
                "createdAt": "2026-01-01T00:00:00Z", "modifiedAt": "2026-01-01T00:00:00Z"
            }))
            .expect("a summary")
        };
        let remote: HashSet<String> = ["ahp-session:/far".to_owned()].into();
        assert_eq!(machine(&summary("ahp-session:/far", "echo@devbox"), &remote), Some("devbox"));
        assert_eq!(machine(&summary("ahp-session:/near", "echo@devbox"), &remote), None);
    }
}

//! What a making tool's call asks for, worked out once whether it is made here (`spawn.rs`) or
//! relayed to another host (`remote.rs`): `create_session`'s arguments, the agents a caller may
//! start and the models it may name, the message a tool sends (marked with where it came from),
//! and the account in the orchestration limits its counts go to.

use ahp_types::common::JsonObject;
use ahp_types::state::{Message, MessageKind, MessageOrigin, ModelSelection};
use serde_json::json;

use super::super::limits::{Budget, Scope};
use super::super::{HostTools, Refusal, ToolCall, ToolInfo};
use super::{title_arg, CreateSession};
use crate::host::{Core, Host};

/// The `_meta` key that says which session, chat and turn a tool's message came from.
const DELEGATION: &str = "vscode.chat.delegation";
/// The refusal for `currentSession` with no calling session (the `/mcp` door).
pub(super) const NEEDS_SESSION: &str = "currentSession needs a calling session; use independent";

/// The tool `create_session` is named in its refusals.
pub(super) const CREATE: &str = "create_session";

/// The agents a caller may start: every agent that is up (a users directory would narrow it to
/// the ones no record holds for somebody else), then the remote hosts' (`<agent>@<remote>`).
fn startable(core: &Core) -> Vec<(String, String, String)> {
    let remote =
        core.remote_agents().iter().map(|a| (a.provider.clone(), a.display_name.clone(), a.description.clone()));
    core.agents()
        .iter()
        .filter_map(|a| {
            let d = a.descriptor.as_ref()?;
            Some((a.provider.clone(), d.display_name.clone(), d.description.clone().unwrap_or_default()))
        })
        .chain(remote)
        .collect()
}

/// Refuses an agent this host does not offer, naming the ones it does.
pub(super) fn check_agent(core: &Core, agent: &str) -> Result<(), Refusal> {
    let offered: Vec<String> = startable(core).into_iter().map(|(id, _, _)| id).collect();
    if offered.iter().any(|p| p == agent) {
        return Ok(());
    }
    Err(format!(
        "Invalid {CREATE} input: agent must be one of the agents this host offers ({}).",
        if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
    )
    .into())
}

/// `create_session`'s wording for a session: `agent` is an enum of the agents the caller may
/// start, each named in its description.
pub fn create_session_for(core: &Core, _session: Option<&str>, mut info: ToolInfo) -> Option<ToolInfo> {
    let agents = startable(core);
    let named: Vec<String> = agents
        .iter()
        .map(
            |(id, name, about)| {
                if about.is_empty() {
                    format!("`{id}` ({name})")
                } else {
                    format!("`{id}` ({name}: {about})")
                }
            },
        )
        .collect();
    if let Some(agent) = info.definition.input_schema.as_mut().and_then(|s| s.pointer_mut("/properties/agent")) {
        agent["enum"] = json!(agents.iter().map(|(id, _, _)| id).collect::<Vec<_>>());
        agent["description"] = json!(format!(
            "The agent the new session runs, by its id (see `list_agents`): {}. Omitted, it is the agent of the `model` asked for, else the current chat's, else the first this host holds. With `currentSession` it is the agent of the new chat alone.",
            named.join("; ")
        ));
    }
    Some(info)
}

/// The calling chat's model: its running turn's, else its draft's, else its last turn's.
pub(super) fn chat_model(core: &Core, chat: &str) -> Option<ModelSelection> {
    let state = core.chat_state(chat)?;
    state
        .active_turn
        .as_ref()
        .and_then(|t| t.message.model.clone())
        .or_else(|| state.draft.as_ref().and_then(|d| d.model.clone()))
        .or_else(|| state.turns.last().and_then(|t| t.message.model.clone()))
}

/// A model by id, else by name, among the models of `provider` (or every agent's here: another
/// host's agent's models are looked in only when it is named).
pub(super) fn resolve_model(
    core: &Core,
    tool: &str,
    asked: &str,
    provider: Option<&str>,
) -> Result<(String, ModelSelection), Refusal> {
    let candidates: Vec<(&str, &ahp_types::state::SessionModelInfo)> = core
        .agents()
        .iter()
        .filter(|a| a.descriptor.is_some() && provider.is_none_or(|p| p == a.provider))
        .flat_map(|a| a.models.iter().map(move |m| (a.provider.as_str(), m)))
        .chain(
            core.remote_agents()
                .iter()
                .filter(|a| provider == Some(a.provider.as_str()))
                .flat_map(|a| a.models.iter().map(move |m| (a.provider.as_str(), m))),
        )
        .collect();
    let by_id: Vec<_> = candidates.iter().filter(|(_, m)| m.id == asked).collect();
    let matches = if by_id.is_empty() { candidates.iter().filter(|(_, m)| m.name == asked).collect() } else { by_id };
    match matches.as_slice() {
        [(p, m)] => Ok(((*p).to_owned(), ModelSelection { id: m.id.clone(), config: None })),
        [] => Err(format!(
            "Invalid {tool} input: model must match an available model id or name{}.",
            provider.map(|p| format!(" for provider \"{p}\"")).unwrap_or_default()
        )
        .into()),
        many => Err(format!(
            "Invalid {tool} input: model \"{asked}\" is ambiguous; use one of these model ids: {}.",
            many.iter().map(|(_, m)| m.id.as_str()).collect::<Vec<_>>().join(", ")
        )
        .into()),
    }
}

/// The chat a tool message came from, from its delegation `_meta`.
pub fn sent_from(message: &Message) -> Option<&str> {
    message.meta.as_ref()?.get(DELEGATION)?.get("sourceChat")?.as_str()
}

/// A message a tool sends: the agent's own from inside a session, marked with where it came
/// from; the caller's, with no delegation, from a call with no session.
pub(super) fn tool_message(call: &ToolCall, text: &str, model: Option<ModelSelection>) -> Message {
    let (kind, meta) = match &call.session {
        Some(session) => {
            let mut delegation = json!({ "sourceSession": session });
            if let Some(chat) = &call.chat {
                delegation["sourceChat"] = json!(chat);
            }
            if let Some(turn) = &call.turn_id {
                delegation["sourceTurnId"] = json!(turn);
            }
            let mut meta = JsonObject::new();
            meta.insert(DELEGATION.into(), delegation);
            (MessageKind::Agent, Some(meta))
        }
        None => (MessageKind::User, None),
    };
    Message { text: text.to_owned(), origin: MessageOrigin { kind }, attachments: None, model, agent: None, meta }
}

/// Where a call's counts are kept: under its tree's root (or its session, when the limits count
/// per session) in the tools' limits, or nowhere when nothing is counted (limits off, or a call
/// with no session, which has no tree to charge).
pub(super) struct Account<'t> {
    tools: &'t HostTools,
    key: Option<(String, Scope)>,
}

impl<'t> Account<'t> {
    pub(super) fn of(tools: &'t HostTools, host: &Host, core: &mut Core, call: &ToolCall) -> Self {
        let key = call.session.as_deref().and_then(|session| {
            if !core.settings().orchestration_limits {
                return None;
            }
            if core.settings().limits_per_session {
                return Some((session.to_owned(), Scope::Session));
            }
            Some((tree_root(tools, host, core, session), Scope::Tree))
        });
        Self { tools, key }
    }

    /// True when the call is counted at all.
    pub(super) fn counts(&self) -> bool {
        self.key.is_some()
    }

    /// Refuses when the budget is spent.
    pub(super) fn check(&self, core: &Core, budget: Budget) -> Result<(), Refusal> {
        let Some((key, scope)) = &self.key else { return Ok(()) };
        let now = core.clock().now();
        self.tools.state().limits.check(key, budget, *scope, now)
    }

    /// Counts what happened.
    pub(super) fn spend(&self, core: &Core, budget: Budget) {
        if let Some((key, _)) = &self.key {
            let now = core.clock().now();
            self.tools.state().limits.spend(key, budget, now);
        }
    }

    /// Gives back the newest count: what was counted before another host did it, and it did not.
    pub(super) fn refund(&self, budget: Budget) {
        if let Some((key, _)) = &self.key {
            self.tools.state().limits.refund(key, budget);
        }
    }

    /// Remembers that a new session belongs to the tree this call is counted in.
    pub(super) fn adopt(&self, session: &str) {
        if let Some((root, Scope::Tree)) = &self.key {
            self.tools.state().limits.note_root(session, root);
        }
    }
}

/// The session at the top of `session`'s tree: the one nothing started, read through the parent
/// links the store keeps. A parent that was deleted still names the tree.
fn tree_root(tools: &HostTools, host: &Host, core: &mut Core, session: &str) -> String {
    if let Some(root) = tools.state().limits.known_root(session).map(str::to_owned) {
        return root;
    }
    let mut current = session.to_owned();
    // A chain is four sessions long at most while the limits are on; the bound only guards a
    // store somebody edited into a loop.
    for _ in 0..64 {
        host.ensure_loaded(core, &current);
        match core.session(&current).and_then(|m| m.parent.clone()) {
            Some(parent) => current = parent,
            None => break,
        }
    }
    current
}

/// `create_session`'s arguments, as what they ask for.
pub(super) struct CreateArgs<'a> {
    pub(super) independent: bool,
    pub(super) prompt: &'a str,
    pub(super) title: String,
    pub(super) workspace: Option<&'a str>,
    pub(super) model: Option<&'a str>,
    pub(super) agent: Option<&'a str>,
    pub(super) config: JsonObject,
    /// The new session works in a worktree of its own.
    pub(super) worktree: bool,
}

impl<'a> CreateArgs<'a> {
    pub(super) fn parse(call: &ToolCall, given: &'a CreateSession) -> Result<Self, Refusal> {
        let independent = match given.relationship.as_deref() {
            None | Some("currentSession") => false,
            Some("independent") => true,
            Some(_) => {
                return Err(format!(
                    "Invalid {CREATE} input: relationship must be \"currentSession\" or \"independent\"."
                )
                .into())
            }
        };
        if !independent && call.session.is_none() {
            return Err(NEEDS_SESSION.into());
        }
        let title = title_arg(CREATE, &given.title)?;
        let (workspace, worktree) = (given.workspace.as_deref(), given.worktree);
        if !independent && (workspace.is_some() || worktree.is_some()) {
            return Err(format!(
                "Invalid {CREATE} input: workspace and worktree are only valid with relationship \"independent\"."
            )
            .into());
        }
        Ok(Self {
            independent,
            prompt: &given.prompt,
            title,
            workspace,
            model: given.model.as_deref(),
            agent: given.agent.as_deref(),
            config: given.config.clone().unwrap_or_default(),
            worktree: worktree == Some(true),
        })
    }
}

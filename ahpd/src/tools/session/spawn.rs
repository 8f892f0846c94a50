//! The session tools that make things, and the limits that bound them: `create_session`,
//! `create_chat` and `send_message`.
//!
//! Each checks its bound and does its work under one hold of the host's lock, then counts what it
//! did, so concurrent calls of a runaway agent cannot slip past a full budget, and a call refused
//! for any other reason costs nothing. What they start goes through the host's own turn engine:
//! a turn when the chat is free, a queued pending message when it is busy.

use std::path::PathBuf;
use std::time::Duration;

use ahp_types::actions::{ChatPendingMessageSetAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{Message, MessageKind, MessageOrigin, ModelSelection, PendingMessageKind};
use protocol::SchemaResult;
use serde_json::{json, Value};

use super::super::limits::{depth_refusal, Budget, Scope, MAX_SPAWN_DEPTH};
use super::super::{authorize, optional_str, required_str, HostTools, Refusal, ToolCall, ToolInfo, ToolResult};
use super::{acting, link_of, links, optional_bool, provider_of, remote, resolve, title_arg};
use crate::host::facade::{check_config_value, host_turn, new_id, path_of, resolve_config, FolderRequest, NewSession};
use crate::host::{Core, Host};
use crate::store::records::Harness;

/// The `_meta` key that says which session, chat and turn a tool's message came from.
const DELEGATION: &str = "vscode.chat.delegation";
/// The `_meta` key of a pending message's revision.
const REVISION: &str = "ahpd.revision";
/// How long a worker may take to say which settings a new session inherits.
const INHERIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The refusal for `currentSession` with no calling session (the `/mcp` door).
pub const NEEDS_SESSION: &str = "currentSession needs a calling session; use independent";

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

/// The chat a tool message came from, from its delegation `_meta`.
pub fn sent_from(message: &Message) -> Option<&str> {
    message.meta.as_ref()?.get(DELEGATION)?.get("sourceChat")?.as_str()
}

/// A pending message's revision (1 until it is replaced).
pub fn revision_of(message: &Message) -> u64 {
    message.meta.as_ref().and_then(|m| m.get(REVISION)).and_then(Value::as_u64).unwrap_or(1)
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

/// The agent a chat runs.
fn chat_provider(core: &Core, chat: &str) -> Option<String> {
    let meta = core.chat(chat)?;
    Some(meta.harness.as_ref().map(|h| h.provider.clone()).unwrap_or_else(|| provider_of(core, &meta.session)))
}

/// The calling chat's model: its running turn's, else its draft's, else its last turn's.
fn chat_model(core: &Core, chat: &str) -> Option<ModelSelection> {
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

/// Starts `message` in `chat` now when it is free, or queues it behind what runs or waits there.
/// Answers whether it was queued.
fn deliver(core: &mut Core, chat: &str, message: Message, sender: Option<String>) -> bool {
    if !busy(core, chat) {
        start(core, chat, message, sender);
        return false;
    }
    let (id, action) = queued(message);
    if let Some(sender) = sender {
        core.note_sender(chat, &id, sender);
    }
    core.apply(chat, action, None, None);
    core.start_next(chat);
    true
}

/// True when a turn runs in `chat` or messages wait there: a new one queues behind them.
pub(super) fn busy(core: &Core, chat: &str) -> bool {
    core.chat_state(chat).is_some_and(|c| {
        c.active_turn.is_some()
            || c.steering_message.is_some()
            || c.queued_messages.as_ref().is_some_and(|q| !q.is_empty())
    })
}

/// `message` as a queued pending message (a tool's carries its revision): its id and the action.
pub(super) fn queued(mut message: Message) -> (String, StateAction) {
    if message.meta.is_some() {
        message.meta.get_or_insert_with(JsonObject::new).insert(REVISION.into(), json!(1));
    }
    let id = new_id();
    let action = StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction {
        kind: PendingMessageKind::Queued,
        id: id.clone(),
        message,
    });
    (id, action)
}

/// Starts a turn of `message` in `chat`, as `sender`'s: a turn a session tool begins carries the
/// person of the turn that began it.
fn start(core: &mut Core, chat: &str, message: Message, sender: Option<String>) {
    let turn = host_turn(message, None);
    if let Some(sender) = sender {
        core.note_sender(chat, &turn.turn_id, sender);
    }
    core.start_turn(chat, turn, None);
}

/// Opens a chat in `session` and starts `message` there.
fn open_chat(
    host: &Host,
    core: &mut Core,
    session: &str,
    title: Option<&str>,
    message: Message,
    sender: Option<String>,
    harness: Option<Harness>,
) -> String {
    let chat = format!("ahp-chat:/{}", new_id());
    host.open_chat(core, session, &chat, harness);
    if let Some(title) = title {
        core.name_chat(&chat, title);
    }
    start(core, &chat, message, sender);
    chat
}

/// Refuses a second chat on an agent that holds one per session, in `createChat`'s words.
fn can_open_chat(core: &Core, provider: &str) -> Result<(), Refusal> {
    if core.holds_many_chats(provider) {
        Ok(())
    } else {
        Err(format!("The {provider} agent holds one chat per session; it cannot open another").into())
    }
}

// --- send_message ----------------------------------------------------------------------------

/// `send_message`: to a chat here, or to a chat another host runs (`remote`).
pub async fn send_message(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "send_message";
    let text = required_str(TOOL, &call.input, "message")?;
    let asked = required_str(TOOL, &call.input, "session")?;
    let unknown =
        || format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).");
    let elsewhere = remote::resolve(host, asked, &unknown).await?;
    let account;
    let (chat, outgoing) = {
        let mut core = host.lock();
        let target = match elsewhere {
            Some(target) => target,
            None => resolve(host, &mut core, asked, &unknown)?,
        };
        if call.chat.as_deref() == Some(target.chat.as_str()) {
            return Err(format!("Invalid {TOOL} input: refusing to send a message to the current chat.").into());
        }
        authorize(&core, call, "session:write")?;
        account = Account::of(tools, host, &mut core, call);
        account.check(&core, Budget::Messages)?;
        let message = tool_message(call, text, None);
        if !core.is_mirrored(&target.chat) {
            let sender = acting(call).as_sender();
            let queued = deliver(&mut core, &target.chat, message, sender);
            account.spend(&core, Budget::Messages);
            let link = link_of(&core, &target.session, &target.chat);
            return Ok(format!("Message {} ({link}).", if queued { "queued" } else { "sent" }));
        }
        // Another host runs the chat: relayed once the lock is let go.
        let outgoing = remote::outgoing(&core, &account, &target, message);
        (target.chat, outgoing)
    };
    remote::send_message(host, &account, &chat, outgoing).await
}

// --- create_chat -----------------------------------------------------------------------------

/// `create_chat`.
pub fn create_chat(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    const TOOL: &str = "create_chat";
    let input = &call.input;
    let prompt = required_str(TOOL, input, "prompt")?;
    let title = optional_str(TOOL, input, "title")?.map(|t| title_arg(TOOL, t)).transpose()?;
    let model = optional_str(TOOL, input, "model")?;
    let asked = optional_str(TOOL, input, "session")?;
    let mut core = host.lock();
    let session = match (asked, &call.session) {
        (Some(asked), _) => {
            resolve(host, &mut core, asked, &|| {
                format!("Invalid {TOOL} input: session must match the URI of a known session (see list_sessions).")
            })?
            .session
        }
        (None, Some(current)) => current.clone(),
        (None, None) => {
            return Err(format!(
                "Invalid {TOOL} input: no session provided and the current session could not be determined."
            )
            .into())
        }
    };
    authorize(&core, call, "session:write")?;
    let provider = provider_of(&core, &session);
    let model = match model {
        Some(asked) => Some(resolve_model(&core, TOOL, asked, Some(&provider))?.1),
        None => call
            .chat
            .as_deref()
            .filter(|c| chat_provider(&core, c).as_deref() == Some(provider.as_str()))
            .and_then(|c| chat_model(&core, c)),
    };
    can_open_chat(&core, &provider)?;
    let account = Account::of(tools, host, &mut core, call);
    account.check(&core, Budget::Chats)?;
    let message = tool_message(call, prompt, model);
    let sender = acting(call).as_sender();
    let chat = open_chat(host, &mut core, &session, title.as_deref(), message, sender, None);
    account.spend(&core, Budget::Chats);
    Ok(format!("Chat created ({}).", link_of(&core, &session, &chat)))
}

// --- create_session --------------------------------------------------------------------------

/// `create_session`'s arguments, checked for shape.
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

pub(super) const CREATE: &str = "create_session";

impl<'a> CreateArgs<'a> {
    fn parse(call: &'a ToolCall) -> Result<Self, Refusal> {
        let input = &call.input;
        let independent = match optional_str(CREATE, input, "relationship")? {
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
        let prompt = required_str(CREATE, input, "prompt")?;
        let title = title_arg(CREATE, required_str(CREATE, input, "title")?)?;
        let workspace = optional_str(CREATE, input, "workspace")?;
        let worktree = optional_bool(CREATE, input, "worktree")?;
        if !independent && (workspace.is_some() || worktree.is_some()) {
            return Err(format!(
                "Invalid {CREATE} input: workspace and worktree are only valid with relationship \"independent\"."
            )
            .into());
        }
        let config = match input.get("config") {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(_) => return Err(format!("Invalid {CREATE} input: config must be an object.").into()),
        };
        Ok(Self {
            independent,
            prompt,
            title,
            workspace,
            model: optional_str(CREATE, input, "model")?,
            agent: optional_str(CREATE, input, "agent")?,
            config,
            worktree: worktree == Some(true),
        })
    }
}

/// What `create_session` worked out before anything starts.
struct Plan {
    provider: String,
    model: Option<ModelSelection>,
    schema: SchemaResult,
    /// Ask this provider's worker which of these settings (the calling chat's) a new session
    /// inherits.
    inherit: Option<JsonObject>,
    working_directory: Option<PathBuf>,
}

/// `create_session`.
pub async fn create_session(tools: &HostTools, host: &Host, call: &ToolCall) -> ToolResult {
    let args = CreateArgs::parse(call)?;
    if let Some(remotes) = args.agent.and_then(|agent| remote::holder(host, agent)) {
        return remote::create_session(tools, host, call, &args, remotes).await;
    }
    let plan = {
        let mut core = host.lock();
        authorize(&core, call, "session:write")?;
        plan(host, &mut core, call, &args)?
    };
    let inherited = match &plan.inherit {
        Some(config) => inherited_config(host, &plan.provider, config).await,
        None => JsonObject::new(),
    };
    let mut values = settings(&plan.schema, inherited, &args.config)?;
    if args.independent {
        // The host's own isolation wins over a key of the same name.
        if args.worktree {
            values.insert("isolation".into(), Value::from("worktree"));
        }
        let uri = format!("ahp-session:/{}", new_id());
        let workspaces = host.lock().workspaces();
        let mut plan = plan;
        if workspaces.needs_folder(&values) {
            let from = plan.working_directory.clone().ok_or_else(|| {
                format!("Invalid {CREATE} input: a worktree is cut from a folder; name one in workspace.")
            })?;
            let request = FolderRequest {
                owner: uri.clone(),
                session: uri.clone(),
                from,
                title: Some(args.title.clone()),
                settings: values.clone(),
            };
            let folder = workspaces
                .make_folder(host, request)
                .await
                .map_err(|e| format!("Invalid {CREATE} input: {}", e.message))?;
            plan.working_directory = Some(folder);
        }
        let mut core = host.lock();
        let account = Account::of(tools, host, &mut core, call);
        let made = create_independent(&account, host, &mut core, call, &args, plan, values, &uri);
        // A worktree cut for a session that did not open goes with nothing left of it.
        workspaces.settle(&mut core, &uri, made.is_ok());
        made
    } else {
        let mut core = host.lock();
        let account = Account::of(tools, host, &mut core, call);
        create_in_current(&account, host, &mut core, call, &args, plan, values)
    }
}

fn plan(host: &Host, core: &mut Core, call: &ToolCall, args: &CreateArgs<'_>) -> Result<Plan, Refusal> {
    if let Some(agent) = args.agent {
        check_agent(core, agent)?;
    }
    // Absent, the agent is one of this host's own (another host's is named for).
    let offered: Vec<String> =
        core.agents().iter().filter(|a| a.descriptor.is_some()).map(|a| a.provider.clone()).collect();
    let calling_provider = call.chat.as_deref().and_then(|c| chat_provider(core, c));
    // The agents the model is looked up in: the one named, else (for a chat in this session) the
    // calling chat's; an independent session may take its agent from the model.
    let scope =
        args.agent.map(str::to_owned).or_else(|| if args.independent { None } else { calling_provider.clone() });
    let asked_model = args.model.map(|m| resolve_model(core, CREATE, m, scope.as_deref())).transpose()?;
    // Absent, the agent is the model's, then the calling chat's, then the first this host holds.
    let provider = args
        .agent
        .map(str::to_owned)
        .or_else(|| asked_model.as_ref().map(|(p, _)| p.clone()))
        .or_else(|| calling_provider.clone())
        .or_else(|| offered.first().cloned())
        .ok_or_else(|| format!("Invalid {CREATE} input: this host offers no agent yet."))?;
    let same_agent = calling_provider.as_deref() == Some(provider.as_str());
    let model = match asked_model {
        Some((_, model)) => Some(model),
        None if same_agent => call.chat.as_deref().and_then(|c| chat_model(core, c)),
        None => None,
    };
    let entry = core.agent(&provider);
    let schema = entry
        .and_then(|a| a.schema.clone())
        .ok_or_else(|| format!("Invalid {CREATE} input: the {provider} agent has not started yet."))?;
    let answers_inherit = entry.and_then(|a| a.descriptor.as_ref()).is_some_and(|d| d.features.inherited_chat_config);
    let inherit = (args.independent && same_agent && answers_inherit)
        .then(|| call.chat.as_deref().map(|c| chat_settings(core, c)))
        .flatten();
    let working_directory = if args.independent { Some(workspace(host, core, call, args.workspace)?) } else { None };
    Ok(Plan { provider, model, schema, inherit, working_directory: working_directory.flatten() })
}

/// The settings a chat runs on: its own, or its session's.
fn chat_settings(core: &Core, chat: &str) -> JsonObject {
    let Some(meta) = core.chat(chat) else { return JsonObject::new() };
    if let Some(h) = &meta.harness {
        return h.settings.clone();
    }
    core.session_state(&meta.session).and_then(|s| s.config.as_ref()).map(|c| c.values.clone()).unwrap_or_default()
}

/// The folder a new session works in: the one asked for, else the calling session's, else the
/// host's default.
fn workspace(host: &Host, core: &Core, call: &ToolCall, asked: Option<&str>) -> Result<Option<PathBuf>, Refusal> {
    let Some(asked) = asked else {
        let calling = call.session.as_deref().and_then(|s| core.session(s)).and_then(|m| m.working_directory.clone());
        return Ok(calling.or_else(|| host.config().default_directory.clone()));
    };
    let by_project = core
        .session_states()
        .map(|(_, s)| s)
        .filter_map(|s| s.project.as_ref())
        .find(|p| p.display_name.eq_ignore_ascii_case(asked))
        .and_then(|p| path_of(&p.uri));
    match path_of(asked).or(by_project) {
        Some(path) if path.is_dir() => Ok(Some(path)),
        _ => Err(format!(
            "Invalid {CREATE} input: workspace must match a unique known project name, project URI, working directory, absolute path, or valid URI string."
        ).into()),
    }
}

/// Asks the agent's worker which of the calling chat's settings a new session inherits; nothing
/// when it cannot say.
async fn inherited_config(host: &Host, provider: &str, config: &JsonObject) -> JsonObject {
    let ask = async {
        let worker = host.supervisor().worker(provider, host.config().worker_wait).await.map_err(|e| e.to_string())?;
        let params = protocol::ConfigValues { config: config.clone() };
        worker
            .peer
            .request::<_, protocol::ConfigValues>(protocol::methods::parent::INHERITED_CHAT_CONFIG, params)
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(INHERIT_TIMEOUT, ask).await {
        Ok(Ok(values)) => values.config,
        Ok(Err(e)) => {
            tracing::warn!(provider, "could not ask which settings a new session inherits: {e}");
            JsonObject::new()
        }
        Err(_) => {
            tracing::warn!(provider, "the agent did not say which settings a new session inherits in time");
            JsonObject::new()
        }
    }
}

/// The new session's settings: the schema's defaults, under what it inherits, under what the call
/// names — each checked against the schema; a value of the call's it rules out refuses the call.
fn settings(schema: &SchemaResult, inherited: JsonObject, asked: &JsonObject) -> Result<JsonObject, Refusal> {
    let mut given = JsonObject::new();
    for (key, value) in inherited {
        match check_config_value(schema, &key, &value) {
            Ok(()) => {
                given.insert(key, value);
            }
            Err(e) => tracing::debug!(key, "an inherited setting the schema rules out is left out: {}", e.message),
        }
    }
    for (key, value) in asked {
        check_config_value(schema, key, value).map_err(|e| format!("Invalid {CREATE} input: {}", e.message))?;
        given.insert(key.clone(), value.clone());
    }
    resolve_config(schema, Some(&given)).map_err(|e| format!("Invalid {CREATE} input: {}", e.message).into())
}

#[allow(clippy::too_many_arguments)]
fn create_independent(
    account: &Account<'_>,
    host: &Host,
    core: &mut Core,
    call: &ToolCall,
    args: &CreateArgs<'_>,
    plan: Plan,
    values: JsonObject,
    uri: &str,
) -> ToolResult {
    let parent_depth = call.session.as_deref().and_then(|s| core.session(s)).map_or(0, |m| m.depth);
    if account.counts() && parent_depth >= MAX_SPAWN_DEPTH {
        return Err(depth_refusal(parent_depth).into());
    }
    account.check(core, Budget::Sessions)?;
    let uri = uri.to_owned();
    let owner = owner_for(core, call);
    let new = NewSession {
        uri: uri.clone(),
        provider: plan.provider.clone(),
        config: ahp_types::state::SessionConfigState { schema: plan.schema.schema.clone(), values },
        working_directory: plan.working_directory,
        owner,
        parent: call.session.clone(),
        depth: if call.session.is_some() { parent_depth + 1 } else { 0 },
    };
    let chat = host.open_session(core, new, |_| {});
    core.name_chat(&chat, &args.title);
    let message = tool_message(call, args.prompt, plan.model);
    let sender = acting(call).as_sender();
    start(core, &chat, message, sender);
    account.adopt(&uri);
    account.spend(core, Budget::Sessions);
    Ok(format!("New session created ({}).", links::session_link(&plan.provider, &uri)))
}

fn create_in_current(
    account: &Account<'_>,
    host: &Host,
    core: &mut Core,
    call: &ToolCall,
    args: &CreateArgs<'_>,
    plan: Plan,
    values: JsonObject,
) -> ToolResult {
    let session = call.session.clone().ok_or_else(|| NEEDS_SESSION.to_owned())?;
    let session_provider = provider_of(core, &session);
    // An agent or settings of its own make the chat a harness: it runs them while the session
    // keeps its own.
    let harness = (plan.provider != session_provider || !args.config.is_empty())
        .then(|| Harness { provider: plan.provider.clone(), settings: values });
    if harness.is_none() {
        can_open_chat(core, &session_provider).map_err(|e| format!("Invalid {CREATE} input: {e}."))?;
    }
    account.check(core, Budget::Chats)?;
    let message = tool_message(call, args.prompt, plan.model);
    let sender = acting(call).as_sender();
    let chat = open_chat(host, core, &session, Some(&args.title), message, sender, harness);
    account.spend(core, Budget::Chats);
    Ok(format!("Chat created in the current session ({}).", link_of(core, &session, &chat)))
}

/// Who owns what a call makes, under a users directory: the person who asked for it (the sender
/// of the calling turn, or the caller with no session), else the calling session's owner.
fn owner_for(core: &Core, call: &ToolCall) -> Option<String> {
    core.has_users().then_some(())?;
    acting(call)
        .as_sender()
        .or_else(|| call.session.as_deref().and_then(|s| core.session(s)).and_then(|m| m.owner.clone()))
}

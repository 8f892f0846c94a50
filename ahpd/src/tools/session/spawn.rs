//! The session tools that make things here, and the limits that bound them: `create_session`,
//! `create_chat` and `send_message` (what a call asks for is worked out in `asks.rs`; a chat or
//! an agent another host holds is handed to `remote.rs`).
//!
//! Each checks its bound and does its work under one hold of the host's lock, then counts what it
//! did, so concurrent calls of a runaway agent cannot slip past a full budget, and a call refused
//! for any other reason costs nothing. What they start goes through the host's own turn engine:
//! a turn when the chat is free, a queued pending message when it is busy.

use std::path::PathBuf;
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{Message, ModelSelection};
use protocol::SchemaResult;
use serde_json::Value;

use super::super::limits::{depth_refusal, Budget, MAX_SPAWN_DEPTH};
use super::super::{HostTools, Refusal, ToolCall, ToolResult};
use super::asks::{chat_model, check_agent, resolve_model, tool_message, Account, CreateArgs, CREATE, NEEDS_SESSION};
use super::{link_of, links, provider_of, remote, resolve, title_arg, CreateChat, CreateSession, SendMessage};
use crate::host::facade::{
    check_config_value, host_turn, new_id, path_of, resolve_config, Delivered, FolderRequest, NewSession, Sender,
};
use crate::host::{Core, Host};
use crate::store::records::Harness;

/// How long a worker may take to say which settings a new session inherits.
const INHERIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers a tool's `message` to `chat` as `call`'s person's (the host decides whether it starts
/// or queues: `host::deliver`).
fn deliver(host: &Host, core: &mut Core, chat: &str, call: &ToolCall, message: Message) -> Result<Delivered, Refusal> {
    let sender = Sender::Host { person: call.caller.principal().as_sender() };
    Ok(host.deliver(core, chat, host_turn(message, None), sender)?)
}

/// Opens a chat in `session` and delivers `call`'s `message` there.
fn open_chat(
    host: &Host,
    core: &mut Core,
    session: &str,
    title: Option<&str>,
    call: &ToolCall,
    message: Message,
    harness: Option<Harness>,
) -> Result<String, Refusal> {
    let chat = format!("ahp-chat:/{}", new_id());
    host.open_chat(core, session, &chat, harness);
    if let Some(title) = title {
        core.name_chat(&chat, title);
    }
    deliver(host, core, &chat, call, message)?;
    Ok(chat)
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
pub async fn send_message(tools: &HostTools, host: &Host, call: &ToolCall, args: SendMessage) -> ToolResult {
    const TOOL: &str = "send_message";
    let (text, asked) = (args.message.as_str(), args.session.as_str());
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
        account = Account::of(tools, host, &mut core, call);
        account.check(&core, Budget::Messages)?;
        let message = tool_message(call, text, None);
        if !core.is_mirrored(&target.chat) {
            let delivered = deliver(host, &mut core, &target.chat, call, message)?;
            account.spend(&core, Budget::Messages);
            let link = link_of(&core, &target.session, &target.chat);
            let how = match delivered {
                Delivered::Started(_) => "sent",
                Delivered::Queued(_) => "queued",
            };
            return Ok(format!("Message {how} ({link})."));
        }
        // Another host runs the chat: relayed once the lock is let go.
        let outgoing = remote::outgoing(&core, &account, &target, message);
        (target.chat, outgoing)
    };
    remote::send_message(host, &account, &chat, outgoing).await
}

// --- create_chat -----------------------------------------------------------------------------

/// `create_chat`.
pub fn create_chat(tools: &HostTools, host: &Host, call: &ToolCall, args: CreateChat) -> ToolResult {
    const TOOL: &str = "create_chat";
    let prompt = args.prompt.as_str();
    let title = args.title.as_deref().map(|t| title_arg(TOOL, t)).transpose()?;
    let model = args.model.as_deref();
    let asked = args.session.as_deref();
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
    let provider = provider_of(&core, &session);
    let model = match model {
        Some(asked) => Some(resolve_model(&core, TOOL, asked, Some(&provider))?.1),
        None => call
            .chat
            .as_deref()
            .filter(|c| core.chat_provider(c).as_deref() == Some(provider.as_str()))
            .and_then(|c| chat_model(&core, c)),
    };
    can_open_chat(&core, &provider)?;
    let account = Account::of(tools, host, &mut core, call);
    account.check(&core, Budget::Chats)?;
    let message = tool_message(call, prompt, model);
    let chat = open_chat(host, &mut core, &session, title.as_deref(), call, message, None)?;
    account.spend(&core, Budget::Chats);
    Ok(format!("Chat created ({}).", link_of(&core, &session, &chat)))
}

// --- create_session --------------------------------------------------------------------------

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
pub async fn create_session(tools: &HostTools, host: &Host, call: &ToolCall, given: CreateSession) -> ToolResult {
    let args = CreateArgs::parse(call, &given)?;
    if let Some(remotes) = args.agent.and_then(|agent| remote::holder(host, agent)) {
        return remote::create_session(tools, host, call, &args, remotes).await;
    }
    let plan = {
        let mut core = host.lock();
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
    let calling_provider = call.chat.as_deref().and_then(|c| core.chat_provider(c));
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
    deliver(host, core, &chat, call, message)?;
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
    let chat = open_chat(host, core, &session, Some(&args.title), call, message, harness)?;
    account.spend(core, Budget::Chats);
    Ok(format!("Chat created in the current session ({}).", link_of(core, &session, &chat)))
}

/// Who owns what a call makes, under a users directory: the person who asked for it (the sender
/// of the calling turn, or the caller with no session), else the calling session's owner.
fn owner_for(core: &Core, call: &ToolCall) -> Option<String> {
    core.has_users().then_some(())?;
    call.caller
        .principal()
        .as_sender()
        .or_else(|| call.session.as_deref().and_then(|s| core.session(s)).and_then(|m| m.owner.clone()))
}

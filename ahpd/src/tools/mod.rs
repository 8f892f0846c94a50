//! The host's own tools (seed 000): what each is, which sessions are offered which, and running a
//! call. The host bounds every call it dispatches (`crate::bounds`, seed 003): a tool here says
//! only whether it may wait for a person.
//!
//! A tool is a [`ToolInfo`] (its definition and host-side facts) and a branch of its group's `run`.
//! The groups live beside this file: `session` (the reference host's session tools and this host's
//! two readers), `artifacts`, `comments`, `agentmerge`, and `own` (`ahp_resource`,
//! `ahp_terminals`) with `wakeups` (`schedule_wakeup` and the timer that begins its turns).
//!
//! [`HostTools`] is what a host is built with ([`crate::host::Host::new`]): it answers the host's
//! [`Tools`] (the catalogue, running a call, a turn's end) and keeps what the tools hold between
//! calls. The tools reach the host through `crate::host::facade` alone.

pub mod agentmerge;
pub mod artifacts;
pub mod comments;
pub mod limits;
pub mod offers;
pub mod own;
pub mod readers;
pub mod session;
pub mod wakeups;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ahp_types::state::{ToolAnnotations, ToolDefinition};
use protocol::{ToolEffects, ToolOutcome, ToolSpec};
use serde_json::Value;

pub use crate::host::facade::{Caller, ToolCall};
use crate::host::facade::{Offered, ToolRun, Tools};
use crate::host::{Core, Host};

/// Which of seed 000's families a tool belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The reference host's session tools and this host's two readers (`sessionTools` switches
    /// these).
    Session,
    /// `add_artifact_or_reference` and its two siblings.
    Artifact,
    /// The six comment tools.
    Comment,
    /// The four Agent Merge tools.
    AgentMerge,
    /// This host's own three.
    Own,
}

/// One host tool: its definition and what the host knows about it.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    /// Its family.
    pub group: Group,
    /// The definition the model is offered and `serverTools` reports.
    pub definition: ToolDefinition,
    /// When a tool nothing asks for is worth calling, for the system prompt while it is offered.
    pub instruction: Option<&'static str>,
    /// The harness may hide it behind tool search (never on the wire).
    pub defer_loading: bool,
    /// It runs with no calling session (listed on `/mcp`).
    pub sessionless: bool,
    /// The grant a caller needs (`session:read`, `session:write`, `session:review`, …).
    pub grant: Option<&'static str>,
    /// It does more than a session's ordinary work: offered only with `advancedTools`.
    pub advanced_permission: bool,
    /// What running it does.
    pub effects: ToolEffects,
    /// It may wait for a person (a question in the calling turn): its deadline is the one a
    /// client's tool has (`clientToolTimeoutMs`), not a host tool's (`crate::bounds`).
    pub waits_for_person: bool,
    /// The wording one session is offered (VS Code's `getDefinitionForSession`), or `None` when the
    /// tool is not for that session (`isEnabledForSession` false). Asked with no session for a
    /// sessionless caller.
    pub for_session: Option<ForSession>,
}

/// Tailors a tool to a session (`None`: a sessionless caller), or withholds it.
pub type ForSession = fn(&Core, Option<&str>, ToolInfo) -> Option<ToolInfo>;

/// What the host's tools keep between calls. Taken after the host's lock (a tool decides under
/// the host's lock, and counts under both), and never held while the host's lock is taken.
#[derive(Default)]
pub struct ToolState {
    /// The session tools' counts.
    pub limits: limits::Limits,
    /// Workspace changes waiting for their turn to end, by chat.
    pub workspace_requests: std::collections::HashMap<String, session::WorkspaceRequest>,
}

/// This host's own tools, as a host is built with them: the catalogue and what the tools keep.
#[derive(Default)]
pub struct HostTools {
    state: Mutex<ToolState>,
}

impl HostTools {
    /// The tools a daemon offers, ready to register with its host.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// What the tools keep; see [`ToolState`] for when it may be taken.
    pub fn state(&self) -> MutexGuard<'_, ToolState> {
        // A panic in a tool leaves its counts as they were; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Tools for HostTools {
    fn offered(&self, core: &Core, session: &str) -> Vec<Offered> {
        offered(core, session)
            .into_iter()
            .map(|t| Offered {
                spec: ToolSpec {
                    definition: t.definition,
                    owner: None,
                    display_name: None,
                    defer_loading: t.defer_loading,
                    effects: Some(t.effects),
                },
                instruction: t.instruction,
            })
            .collect()
    }

    fn run<'a>(&'a self, host: &'a Host, name: &'a str, call: ToolCall) -> ToolRun<'a> {
        Box::pin(run(self, host, name, call))
    }

    fn waits_for_person(&self, name: &str) -> bool {
        find(name).is_some_and(|t| t.waits_for_person)
    }

    fn turn_ended(&self, core: &mut Core, chat: &str, turn_id: &str) {
        session::turn_ended(self, core, chat, turn_id);
    }
}

impl ToolInfo {
    /// A tool of `group` named `name`, described, with an input schema.
    pub fn new(group: Group, name: &str, description: &str, input_schema: Value) -> Self {
        Self {
            group,
            definition: ToolDefinition {
                name: name.to_owned(),
                title: None,
                description: Some(description.to_owned()),
                input_schema: Some(input_schema),
                output_schema: None,
                annotations: None,
                meta: None,
            },
            instruction: None,
            defer_loading: false,
            sessionless: false,
            grant: None,
            advanced_permission: false,
            effects: ToolEffects::default(),
            waits_for_person: false,
            for_session: None,
        }
    }

    /// Tailors (or withholds) the tool per session.
    pub fn for_session(mut self, tailor: ForSession) -> Self {
        self.for_session = Some(tailor);
        self
    }

    /// This tool as `session` is offered it (`None`: withheld from it).
    pub fn tailored(&self, core: &Core, session: Option<&str>) -> Option<ToolInfo> {
        match self.for_session {
            Some(tailor) => tailor(core, session, self.clone()),
            None => Some(self.clone()),
        }
    }

    /// Gives it a title.
    pub fn titled(mut self, title: &str) -> Self {
        self.definition.title = Some(title.to_owned());
        self
    }

    /// Marks it as one that may wait for a person's answer.
    pub fn waits_for_person(mut self) -> Self {
        self.waits_for_person = true;
        self
    }

    /// Marks it read-only.
    pub fn read_only(mut self) -> Self {
        let annotations = self.definition.annotations.get_or_insert_with(empty_annotations);
        annotations.read_only_hint = Some(true);
        self.effects.reads = true;
        self
    }

    /// Marks it destructive.
    pub fn destructive(mut self) -> Self {
        let annotations = self.definition.annotations.get_or_insert_with(empty_annotations);
        annotations.destructive_hint = Some(true);
        self.effects.writes = true;
        self.effects.destructive = true;
        self
    }

    /// Marks it as one that writes (not destructively).
    pub fn writes(mut self) -> Self {
        self.effects.writes = true;
        self
    }

    /// Says `readOnlyHint: false` in its annotations, as the reference's definition does.
    pub fn not_read_only(mut self) -> Self {
        self.definition.annotations.get_or_insert_with(empty_annotations).read_only_hint = Some(false);
        self
    }

    /// Lists it on `/mcp` for a caller with no session, behind `grant`.
    pub fn sessionless(mut self, grant: &'static str) -> Self {
        self.sessionless = true;
        self.grant = Some(grant);
        self
    }

    /// The grant a turn's person needs.
    pub fn grant(mut self, grant: &'static str) -> Self {
        self.grant = Some(grant);
        self
    }

    /// Hidden behind tool search.
    pub fn deferred(mut self) -> Self {
        self.defer_loading = true;
        self
    }

    /// Carries an instruction.
    pub fn instruction(mut self, text: &'static str) -> Self {
        self.instruction = Some(text);
        self
    }
}

fn empty_annotations() -> ToolAnnotations {
    ToolAnnotations {
        title: None,
        read_only_hint: None,
        destructive_hint: None,
        idempotent_hint: None,
        open_world_hint: None,
    }
}

/// Every host tool, in the order seed 000 lists them.
pub fn catalog() -> &'static [ToolInfo] {
    static CATALOG: OnceLock<Vec<ToolInfo>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let mut all = Vec::new();
        all.extend(session::tools());
        all.extend(artifacts::tools());
        all.extend(comments::tools());
        all.extend(agentmerge::tools());
        all.extend(own::tools());
        all
    })
}

/// A tool by name.
pub fn find(name: &str) -> Option<&'static ToolInfo> {
    catalog().iter().find(|t| t.definition.name == name)
}

/// What a tool answers: text for the model (and maybe rich content), or its refusal.
pub type ToolResult = Result<String, Refusal>;

/// Why a tool did not do what it was asked, in the sentence the model reads (seed 000's words,
/// or the reference host's, where they give one). A refusal is the call's result, never cut short.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl std::ops::Deref for Refusal {
    type Target = str;

    /// The sentence.
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for Refusal {
    fn eq(&self, sentence: &&str) -> bool {
        self.0 == *sentence
    }
}

impl From<String> for Refusal {
    fn from(sentence: String) -> Self {
        Self(sentence)
    }
}

impl From<&str> for Refusal {
    fn from(sentence: &str) -> Self {
        Self(sentence.to_owned())
    }
}

/// Runs a host tool by name (the host bounds it: its deadline and its output cap).
async fn run(tools: &HostTools, host: &Host, name: &str, call: ToolCall) -> ToolOutcome {
    let Some(info) = find(name) else {
        return ToolOutcome::failed(format!("No tool named {name} is offered in this session."));
    };
    // A person removed or given another role is so from their turn's next call on.
    host.lock().refresh_users();
    match dispatch(tools, host, info, call).await {
        Ok(text) => {
            let mut outcome = ToolOutcome::ok(text);
            outcome.past_tense_message = Some(format!("Ran {name}"));
            outcome
        }
        Err(Refusal(why)) => {
            let mut outcome = ToolOutcome::failed(why);
            outcome.past_tense_message = Some(format!("{name} failed"));
            outcome
        }
    }
}

async fn dispatch(tools: &HostTools, host: &Host, info: &ToolInfo, call: ToolCall) -> ToolResult {
    let name = info.definition.name.as_str();
    // The session group checks its own grants; the others ask theirs here (seed 000 "Grants").
    if let Some(grant) = info.grant.filter(|_| call.session.is_some() && info.group != Group::Session) {
        authorize(&host.lock(), &call, grant)?;
    }
    let result = match info.group {
        Group::Session => match readers::run(host, name, &call).await {
            Some(result) => Some(result),
            None => session::run(tools, host, name, &call).await,
        },
        Group::Artifact => artifacts::run(host, name, &call).await,
        Group::Comment => comments::run(host, name, &call).await,
        Group::AgentMerge => agentmerge::run(host, name, &call).await,
        Group::Own => match own::run(host, name, &call).await {
            Some(result) => Some(result),
            None => wakeups::run(host, name, &call).await,
        },
    };
    result.unwrap_or_else(|| Err(format!("No tool named {name} is offered in this session.").into()))
}

/// The host tools offered to a session, after every switch and the session's own wording.
pub fn offered(core: &Core, session: &str) -> Vec<ToolInfo> {
    let Some(provider) = core.session_state(session).map(|s| s.provider.clone()) else { return Vec::new() };
    let settings = core.settings();
    let session_tools = settings.session_tools
        && (settings.session_tools_providers.is_empty() || settings.session_tools_providers.contains(&provider));
    catalog()
        .iter()
        .filter(|t| !t.advanced_permission || settings.advanced_tools)
        .filter(|t| t.group != Group::Session || session_tools)
        .filter_map(|t| t.tailored(core, Some(session)))
        .collect()
}

/// Checks that whoever is behind a call holds `grant` (seed 000 "Grants"). A host with no users
/// directory has nobody to ask, and its tools act as they always did; the users directory (issue
/// 10) answers here in the host's own words: `<person> may not <grant> here`, or `this turn may not
/// session:write here` where nobody is behind the call.
pub fn authorize(core: &Core, call: &ToolCall, grant: &str) -> Result<(), Refusal> {
    use crate::users::Principal;
    if !core.has_users() {
        return Ok(());
    }
    let principal = match &call.caller {
        Caller::Root => Principal::Root,
        Caller::Person(id) => Principal::Person(id.clone()),
        Caller::Turn(sender) => Principal::from_sender(sender.as_deref()),
    };
    if principal == Principal::Nobody {
        // Nobody behind the call: it holds the read half alone.
        return if crate::users::covers("*:read", grant) {
            Ok(())
        } else {
            Err(format!("this turn may not {grant} here").into())
        };
    }
    if core.allows(&principal, grant) {
        Ok(())
    } else {
        Err(crate::host::facade::refusal(&principal, grant).into())
    }
}

/// Reads a required string argument, or says which one is missing, in the reference host's words.
pub fn required_str<'a>(tool: &str, input: &'a Value, field: &str) -> Result<&'a str, Refusal> {
    match input.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        _ => Err(format!("Invalid {tool} input: {field} must be a non-empty string.").into()),
    }
}

/// Reads an optional string argument.
pub fn optional_str<'a>(tool: &str, input: &'a Value, field: &str) -> Result<Option<&'a str>, Refusal> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be a string.").into()),
    }
}

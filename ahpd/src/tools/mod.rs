//! The host's own tools (seed 000): what each is, which sessions are offered which, and running a
//! call. The host bounds every call it dispatches (`crate::bounds`, seed 003): a tool here says
//! only whether it may wait for a person.
//!
//! A tool is declared once, in the typed table (`table.rs`): a [`Tool`] is its [`ToolInfo`] (its
//! definition, with the input schema derived from its arguments' struct, and host-side facts: what
//! it asks of the person behind a call, its effects, whether it runs with no session) and its run,
//! which takes those arguments checked and deserialized. The table dispatches every call and checks
//! the declared grant before the tool runs. The groups declare their tools beside this file:
//! `session` (the reference host's session tools and this host's two readers), `artifacts`,
//! `comments`, `agentmerge`, and `own` (`ahp_resource`, `ahp_terminals`) with `wakeups`
//! (`schedule_wakeup` and the timer that begins its turns), and `computer` (the computer plugin's
//! three, which declare advanced permission).
//!
//! [`HostTools`] is what a host is built with ([`crate::host::Host::new`]): it answers the host's
//! [`Tools`] (the catalogue, running a call, a turn's end) and keeps what the tools hold between
//! calls. The tools reach the host through `crate::host::facade` alone.

pub mod agentmerge;
pub mod artifacts;
pub mod comments;
pub mod computer;
pub mod limits;
pub mod offers;
pub mod own;
pub mod readers;
pub mod session;
pub mod table;
pub mod wakeups;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use agent_runner::sync::lock;
use ahp_types::state::{ToolAnnotations, ToolDefinition};
use protocol::{ToolEffects, ToolOutcome, ToolSpec};
use serde_json::Value;

pub use self::table::{declare, Asks, Cx, Own, Tool};
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
    /// The computer plugin's three (advanced permission).
    Computer,
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
    /// What a call asks of the person behind it (`session:read`, `session:write`, …), checked
    /// before the tool runs.
    pub asks: Asks,
    /// The grant a caller with no session needs to see it listed, when it is not the one a call
    /// asks (`archive_chat`: `session:write`, where a call asks `chat:mark` or `session:mark`).
    pub listed_behind: Option<&'static str>,
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
        lock(&self.state)
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
        find(name).is_some_and(|t| t.info.waits_for_person)
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
            asks: Asks::Nothing,
            listed_behind: None,
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

    /// Lists it on `/mcp` for a caller with no session, behind the grant a call asks.
    pub fn sessionless(mut self) -> Self {
        self.sessionless = true;
        self
    }

    /// The grant a call asks of the person behind it, checked before the tool runs.
    pub fn grant(mut self, grant: &'static str) -> Self {
        self.asks = Asks::Grant(grant);
        self
    }

    /// Asks one of `grants` by what a call names; listed with no session behind `listed`.
    pub fn asks_one_of(mut self, grants: &'static [&'static str], listed: &'static str) -> Self {
        self.asks = Asks::OneOf(grants);
        self.listed_behind = Some(listed);
        self
    }

    /// The grant a caller with no session needs to see it (none: every caller sees it).
    pub fn listing_grant(&self) -> Option<&'static str> {
        match self.asks {
            Asks::Grant(grant) => Some(grant),
            Asks::Nothing | Asks::OneOf(_) => self.listed_behind,
        }
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
pub fn catalog() -> &'static [Tool] {
    static CATALOG: OnceLock<Vec<Tool>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let mut all = Vec::new();
        all.extend(session::tools());
        all.extend(artifacts::tools());
        all.extend(comments::tools());
        all.extend(agentmerge::tools());
        all.extend(own::tools());
        all.extend(computer::tools());
        all
    })
}

/// A tool by name.
pub fn find(name: &str) -> Option<&'static Tool> {
    catalog().iter().find(|t| t.info.definition.name == name)
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
    let Some(tool) = find(name) else {
        return ToolOutcome::failed(format!("No tool named {name} is offered in this session."));
    };
    // A person removed or given another role is so from their turn's next call on.
    host.lock().refresh_users();
    match tool.call(tools, host, &call).await {
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

/// The host tools offered to a session, after every switch and the session's own wording.
pub fn offered(core: &Core, session: &str) -> Vec<ToolInfo> {
    let Some(provider) = core.session_state(session).map(|s| s.provider.clone()) else { return Vec::new() };
    let settings = core.settings();
    let session_tools = settings.session_tools
        && (settings.session_tools_providers.is_empty() || settings.session_tools_providers.contains(&provider));
    catalog()
        .iter()
        .map(|t| &t.info)
        .filter(|t| !t.advanced_permission || settings.advanced_tools)
        .filter(|t| t.group != Group::Session || session_tools)
        .filter_map(|t| t.tailored(core, Some(session)))
        .collect()
}

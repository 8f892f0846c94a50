//! What waits for a person, decided once for every backend: [`decide`].
//!
//! Three things decide it. **What the call is**: one of the runtime's own tools (its shell, its
//! edits), a tool the host or a client offers, read by the effects its spec declares, or a question
//! that is not about a tool. **The session's mode**: the runtime's own ask setting (pi's and notes'
//! `ask`), or the runtime deciding for itself and asking only what it wants a person to decide
//! (Claude Code's permission mode, an ACP agent's mode), `never` among them. **Whether anybody
//! watches the turn** (seed 003): an unattended turn is not offered the question tool, and a
//! question its runtime asks anyway is answered [`NOBODY_TO_ASK`]; a confirmation still parks and
//! waits (automations rely on that: nothing destructive happens unseen).
//!
//! A host's or client's tool that declares itself destructive waits for a person in every mode,
//! attended or not; any other such tool runs as asked (the host governs its own tools, and a client
//! its own). [`Context::confined`] marks a session whose runtime runs confined (a sandbox, a
//! container: `Start.confined`): there a never-ask mode is safe, so it is offered even where the
//! operator's policy withholds it elsewhere and is the session's default ([`never_ask_offered`],
//! [`never_ask_by_default`]), and the runtime's own tools run without a person whatever the mode.
//! What leaves the box (a network host not allowed) is refused by the box itself, in the tool's
//! own result.

use protocol::{ToolEffects, ToolSpec};

/// What a question asked in an unattended turn is answered: nobody can, so the model decides.
pub const NOBODY_TO_ASK: &str = "Nobody is watching this run, so nobody can answer a question. Make the choice you judge best, say which and why, and carry on.";

/// What a person is told a denied call did, in the runtime's answer.
pub const DENIED: &str = "The person denied this tool call.";

/// What a parked call or question is answered when its turn was stopped.
pub const STOPPED: &str = "The turn was stopped.";

/// What the runtime is about to do, as the policy reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Asked<'a> {
    /// One of the runtime's own tools; `reads_only` when it only reads.
    Own {
        /// It only reads.
        reads_only: bool,
    },
    /// A tool the host or a client offers, by the effects its spec declares (none: it claims
    /// nothing).
    Offered(Option<&'a ToolEffects>),
    /// A question that is not about a tool.
    Question,
}

/// Which of the runtime's own tool calls wait for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The runtime decides by its own setting, and what it asks about is a person's to decide.
    Runtime,
    /// None (a never-ask mode).
    Never,
    /// Those that write.
    Writes,
    /// Every one.
    Always,
}

impl Mode {
    /// An `ask` setting's value (`never`, `writes`, `always`); `fallback` for any other.
    pub fn from_ask(value: Option<&str>, fallback: Mode) -> Mode {
        match value {
            Some("never") => Mode::Never,
            Some("writes") => Mode::Writes,
            Some("always") => Mode::Always,
            _ => fallback,
        }
    }
}

/// The session and turn a call is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The session's mode.
    pub mode: Mode,
    /// Nobody watches the turn.
    pub unattended: bool,
    /// The runtime runs confined (a sandbox or container), so its own tools cannot reach past it.
    pub confined: bool,
}

impl Context {
    /// A turn of an unconfined session in `mode`.
    pub fn new(mode: Mode, unattended: bool) -> Self {
        Self { mode, unattended, confined: false }
    }

    /// The same turn, confined or not.
    pub fn confined(self, confined: bool) -> Self {
        Self { confined, ..self }
    }
}

/// True when a session is offered its runtime's never-ask mode (`bypassPermissions`, `yolo`,
/// `full-access`): always in a confined session; outside, unless the operator's policy restricts
/// auto-approval (`autoApprovePolicyRestricted`), as before.
pub fn never_ask_offered(restricted_by_policy: bool, confined: bool) -> bool {
    confined || !restricted_by_policy
}

/// True when a session that chose no mode starts in its runtime's never-ask mode: only a confined
/// one, where nothing the runtime runs reaches past the box.
pub fn never_ask_by_default(confined: bool) -> bool {
    confined
}

/// What happens to the call or question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It runs without asking.
    Run,
    /// The call waits until a person allows or denies it.
    Confirm,
    /// The question waits for a person's answer.
    Ask,
    /// Nobody can answer: the runtime is told [`NOBODY_TO_ASK`] and decides itself.
    DecideYourself,
}

/// What waits for a person; see the module docs.
pub fn decide(asked: Asked<'_>, context: Context) -> Verdict {
    match asked {
        Asked::Question if context.unattended => Verdict::DecideYourself,
        Asked::Question => Verdict::Ask,
        Asked::Offered(effects) if effects.is_some_and(|e| e.destructive) => Verdict::Confirm,
        Asked::Offered(_) => Verdict::Run,
        Asked::Own { .. } if context.confined => Verdict::Run,
        Asked::Own { reads_only } => match context.mode {
            Mode::Runtime | Mode::Always => Verdict::Confirm,
            Mode::Writes if !reads_only => Verdict::Confirm,
            Mode::Writes | Mode::Never => Verdict::Run,
        },
    }
}

/// The host's or a client's tool the model calls `name`, among those the session offers.
pub fn offered<'a>(tools: &'a [ToolSpec], name: &str) -> Option<&'a ToolSpec> {
    tools.iter().find(|t| t.definition.name == name)
}

/// The tool the session offers that the runtime names `name` through the MCP server the host's
/// tools are handed to an ACP agent as (`ahp`): `mcp__ahp__x` as Claude names it, `ahp__x`,
/// `ahp.x`, `ahp/x`, or `ahp: x`.
pub fn offered_through_ahp<'a>(tools: &'a [ToolSpec], name: &str) -> Option<&'a ToolSpec> {
    let name = name.trim();
    let bare = ["mcp__ahp__", "ahp__", "ahp.", "ahp/", "ahp:"].iter().find_map(|p| name.strip_prefix(p))?;
    offered(tools, bare.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(destructive: bool) -> ToolEffects {
        ToolEffects { reads: false, writes: true, network: false, destructive }
    }

    const MODES: [Mode; 4] = [Mode::Runtime, Mode::Never, Mode::Writes, Mode::Always];

    #[test]
    fn a_destructive_host_or_client_tool_waits_for_a_person_in_every_mode_watched_or_not() {
        let destructive = effects(true);
        for mode in MODES {
            for unattended in [false, true] {
                for confined in [false, true] {
                    let context = Context { mode, unattended, confined };
                    assert_eq!(decide(Asked::Offered(Some(&destructive)), context), Verdict::Confirm, "{context:?}");
                }
            }
        }
    }

    #[test]
    fn any_other_host_or_client_tool_runs_as_asked() {
        for mode in MODES {
            let context = Context::new(mode, false);
            assert_eq!(decide(Asked::Offered(Some(&effects(false))), context), Verdict::Run);
            assert_eq!(decide(Asked::Offered(None), context), Verdict::Run, "claims nothing");
        }
    }

    #[test]
    fn the_runtimes_own_tools_follow_the_sessions_mode() {
        let own = |reads_only, mode| decide(Asked::Own { reads_only }, Context::new(mode, false));
        assert_eq!(own(false, Mode::Runtime), Verdict::Confirm, "the runtime asked, a person decides");
        assert_eq!(own(true, Mode::Runtime), Verdict::Confirm);
        assert_eq!(own(false, Mode::Never), Verdict::Run);
        assert_eq!(own(true, Mode::Writes), Verdict::Run);
        assert_eq!(own(false, Mode::Writes), Verdict::Confirm);
        assert_eq!(own(true, Mode::Always), Verdict::Confirm);
        // Unattended, a confirmation still waits.
        assert_eq!(decide(Asked::Own { reads_only: false }, Context::new(Mode::Always, true)), Verdict::Confirm);
    }

    #[test]
    fn a_confined_runtimes_own_tools_run_without_a_person() {
        for mode in MODES {
            let context = Context { mode, unattended: false, confined: true };
            assert_eq!(decide(Asked::Own { reads_only: false }, context), Verdict::Run, "{mode:?}");
        }
    }

    #[test]
    fn never_ask_is_offered_everywhere_confined_and_outside_only_where_the_policy_allows_it() {
        assert!(never_ask_offered(false, false));
        assert!(!never_ask_offered(true, false), "the policy withholds it on the machine itself");
        assert!(never_ask_offered(true, true), "a box keeps what it runs in");
        assert!(never_ask_by_default(true));
        assert!(!never_ask_by_default(false));
    }

    #[test]
    fn a_question_is_a_persons_unless_nobody_watches() {
        for mode in MODES {
            assert_eq!(decide(Asked::Question, Context::new(mode, false)), Verdict::Ask);
            assert_eq!(decide(Asked::Question, Context::new(mode, true)), Verdict::DecideYourself);
        }
    }

    #[test]
    fn an_ask_setting_reads_as_a_mode() {
        assert_eq!(Mode::from_ask(Some("never"), Mode::Writes), Mode::Never);
        assert_eq!(Mode::from_ask(Some("always"), Mode::Never), Mode::Always);
        assert_eq!(Mode::from_ask(Some("sometimes"), Mode::Writes), Mode::Writes);
        assert_eq!(Mode::from_ask(None, Mode::Never), Mode::Never);
    }

    #[test]
    fn the_host_tools_are_named_through_the_ahp_server() {
        let spec = |name: &str| ToolSpec {
            definition: ahp_types::state::ToolDefinition {
                name: name.into(),
                title: None,
                description: None,
                input_schema: None,
                output_schema: None,
                annotations: None,
                meta: None,
            },
            owner: None,
            display_name: None,
            defer_loading: false,
            effects: None,
        };
        let tools = vec![spec("delete_session"), spec("list_sessions")];
        for name in ["mcp__ahp__delete_session", "ahp__delete_session", "ahp: delete_session", "ahp/delete_session"] {
            assert_eq!(offered_through_ahp(&tools, name).map(|t| t.definition.name.as_str()), Some("delete_session"));
        }
        assert!(offered_through_ahp(&tools, "delete_session").is_none(), "not named through the server");
        assert!(offered_through_ahp(&tools, "mcp__other__delete_session").is_none());
        assert!(offered_through_ahp(&tools, "mcp__ahp__nothing").is_none());
    }
}

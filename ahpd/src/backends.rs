//! The one table of backend kinds this build can run: what `ahpd worker <kind>` serves, which kinds
//! a config entry may name, which may run inside the daemon, and which agent programs are looked
//! for on the PATH when no `agents` are configured. Adding a backend is one row here.
//!
//! The rows name the backend crates (linked into this binary so `ahpd worker <kind>` can serve
//! them) and nothing else about them: what a backend does stays in its crate, behind the worker
//! protocol.

use agent_runner::AgentFactory;
use ahp_types::common::JsonObject;
use serde_json::Value;

/// One backend kind.
pub struct Backend {
    /// The kind a config entry names (`"kind": "claude"`) and `ahpd worker <kind>` serves.
    pub kind: &'static str,
    /// The crate it lives in (its README documents its options).
    pub crate_dir: &'static str,
    /// What it is, for `ahpd agents` and the docs.
    pub about: &'static str,
    /// Builds the agent `ahpd worker <kind>` serves.
    pub factory: fn() -> Option<AgentFactory>,
    /// It may be served inside the daemon over an in-memory pipe (`inProcess: true`).
    pub in_process: bool,
    /// The agents of this kind offered without configuration when their program is on the PATH.
    pub known: fn() -> Vec<KnownAgent>,
}

/// An agent a backend knows how to run when its program is on the PATH.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownAgent {
    /// The provider id it is offered under (another one's id gets `-<kind>` after it).
    pub name: &'static str,
    /// The program looked for on the PATH.
    pub program: &'static str,
    /// What a person reads.
    pub display_name: &'static str,
    /// The entry's options; `command` is set to the program found when the backend takes it.
    pub options: JsonObject,
    /// The backend is told the path of the program found (`options.command`).
    pub takes_command: bool,
    /// Other programs it runs, which must be on the PATH too (pi-acp runs pi).
    pub also_runs: &'static [&'static str],
}

/// The kind of an entry that runs a worker program of its own (`docs/workers.md`).
pub const COMMAND_KIND: &str = "command";

/// Every backend kind this build runs, in the order agents are detected.
pub const BACKENDS: &[Backend] = &[
    Backend {
        kind: "echo",
        crate_dir: "agent-runner",
        about: "says your words back (a test agent, always offered)",
        factory: || agent_runner::builtin_factory("echo"),
        in_process: true,
        known: Vec::new,
    },
    Backend {
        kind: "notes",
        crate_dir: "agent-runner",
        about: "tools that run and ask (a test agent)",
        factory: || agent_runner::builtin_factory("notes"),
        in_process: true,
        known: Vec::new,
    },
    Backend {
        kind: "claude",
        crate_dir: "agent-claude",
        about: "the Claude Code CLI",
        factory: || Some(agent_claude::factory()),
        in_process: false,
        known: || vec![program_agent("claude", "claude", "Claude Code")],
    },
    Backend {
        kind: "pi",
        crate_dir: "agent-pi",
        about: "pi, over its RPC mode",
        factory: || Some(agent_pi::factory()),
        in_process: false,
        known: || vec![program_agent("pi", "pi", "pi")],
    },
    Backend {
        kind: "acp",
        crate_dir: "agent-acp",
        about: "any Agent Client Protocol agent, by preset or command",
        factory: || Some(agent_acp::factory()),
        in_process: false,
        known: acp_presets,
    },
];

fn program_agent(name: &'static str, program: &'static str, display_name: &'static str) -> KnownAgent {
    KnownAgent { name, program, display_name, options: JsonObject::new(), takes_command: true, also_runs: &[] }
}

/// Each ACP preset is an agent of kind `acp` (its preset carries its arguments, so the command is
/// left to it and found on the PATH by the worker).
fn acp_presets() -> Vec<KnownAgent> {
    agent_acp::PRESETS
        .iter()
        .map(|preset| {
            let mut options = JsonObject::new();
            options.insert("preset".into(), Value::from(preset.name));
            KnownAgent {
                name: preset.name,
                program: preset.command,
                display_name: preset.display_name,
                options,
                takes_command: false,
                also_runs: preset.also_runs,
            }
        })
        .collect()
}

/// The backend of `kind`.
pub fn backend(kind: &str) -> Option<&'static Backend> {
    BACKENDS.iter().find(|b| b.kind == kind)
}

/// Every kind an `agents` entry may name: the backends, then `command`.
pub fn entry_kinds() -> Vec<&'static str> {
    BACKENDS.iter().map(|b| b.kind).chain([COMMAND_KIND]).collect()
}

/// The kinds this build serves as `ahpd worker <kind>`, for messages.
pub fn worker_kinds() -> String {
    BACKENDS.iter().map(|b| b.kind).collect::<Vec<_>>().join(", ")
}

/// The factory `ahpd worker <kind>` serves.
pub fn factory(kind: &str) -> Option<AgentFactory> {
    backend(kind).and_then(|b| (b.factory)())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_served_and_named_once() {
        let mut kinds: Vec<&str> = BACKENDS.iter().map(|b| b.kind).collect();
        for kind in &kinds {
            assert!(factory(kind).is_some(), "{kind} has a factory");
        }
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), BACKENDS.len(), "no kind twice");
        assert!(factory("nothing").is_none());
        assert_eq!(entry_kinds().last(), Some(&COMMAND_KIND));
    }

    #[test]
    fn the_acp_presets_are_known_agents_with_their_programs() {
        let acp = backend("acp").map(|b| (b.known)()).unwrap_or_default();
        let gemini = acp.iter().find(|k| k.name == "gemini").expect("gemini");
        assert_eq!(gemini.program, "gemini");
        assert_eq!(gemini.options.get("preset"), Some(&Value::from("gemini")));
        assert!(!gemini.takes_command);
        assert_eq!(acp.len(), agent_acp::PRESETS.len());
    }
}

//! The ACP backend: any Agent Client Protocol agent (Gemini CLI, Codex, goose, claude-agent-acp,
//! ...) as a worker of kind `acp`, reaching host tools over the session's `/ahp-mcp` endpoint.
//!
//! Each conversation runs its own agent process (in its own process group, stderr kept as a
//! tail), speaking ACP v1 over its stdio: `initialize`, an optional `authenticate`, `session/new`
//! (or `session/load` to resume), then `session/prompt` per turn. What the agent streams becomes
//! chat actions ([`mapping`]); what it offers becomes config keys and models ([`config`]); what
//! it asks of its client - files inside the session's folders, terminals - is served here
//! ([`client`]). What it offers is also asked once per worker, before any session, of a
//! short-lived session of its own ([`probe`]).
//!
//! Every ACP message is a type of the `agent-client-protocol` schema (`agent-client-protocol-schema`,
//! the exact version `agent-client-protocol` 5.2 re-exports as `schema`), carried by
//! `agent_runner::rpc`'s peer started for a foreign program (`Peer::start_foreign`) rather than
//! the crate's own connection: an agent is someone else's program - string ids, stray lines on
//! stdout and update kinds newer than the schema must not end a conversation - and the worker
//! keeps one JSON-RPC layer. What the schema cannot read is said once at debug per kind
//! ([`shared::Shared::unmapped`]) and the session goes on.
//!
//! **Invariant:** this crate never depends on `ahpd`; it is a backend on `agent-runner`.

pub mod agent;
pub mod catalogue;
pub mod client;
pub mod config;
pub mod connect;
pub mod fork;
pub mod handshake;
pub mod mapping;
pub mod options;
pub mod probe;
pub mod session;
pub mod shared;
pub mod subagents;
pub mod visit;

use std::path::PathBuf;
use std::sync::Arc;

use agent_runner::{Agent, AgentError, AgentFactory};

pub use agent::AcpAgent;
pub use options::{AcpOptions, PRESETS};

/// The factory `ahpd worker acp` runs: reads the entry's options and builds the agent.
pub fn factory() -> AgentFactory {
    Box::new(|init, context| {
        let options = AcpOptions::from_options(&init.options).map_err(|e| AgentError::Failed(e.to_string()))?;
        let data_dir = init.data_dir.as_ref().map(PathBuf::from);
        Ok(Arc::new(AcpAgent::new(init.provider.clone(), options, data_dir, context)) as Arc<dyn Agent>)
    })
}

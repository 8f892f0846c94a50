//! ahpd: the daemon that runs coding-agent CLIs side by side and serves them over the Agent Host
//! Protocol. It is the parent and holds all state; every backend runs out of process as a worker
//! (`docs/workers.md`). See `docs/architecture.md` for the code map.
//!
//! **Invariant:** no backend-specific code lives here beyond the table of kinds (`backends.rs`); a
//! backend is a worker reached through the worker protocol, even when the worker is this same
//! binary re-executed (`ahpd worker <kind>`).

pub mod agentmerge;
pub mod agents;
pub mod automations;
pub mod backends;
pub mod bare;
pub mod bounds;
pub mod cli;
pub mod clock;
pub mod config;
pub mod confine;
pub mod control;
pub mod daemon;
pub mod fileuri;
pub mod fsutil;
pub mod github;
pub mod host;
pub mod kept;
pub mod logging;
pub mod mcp;
pub mod memory;
pub mod paths;
pub mod procs;
pub mod programs;
pub mod remotes;
pub mod server;
pub mod service;
pub mod shortcommand;
pub mod store;
pub mod supervisor;
pub mod terminals;
pub mod token;
pub mod tools;
pub mod users;
pub mod verbs;
pub mod web;
pub mod worker;
pub mod worktrees;

//! The worker side of ahpd: the runtime every backend links, the `Agent`/`Session` contract, and
//! the two test agents (`echo`, `notes`).
//!
//! A backend implements [`Agent`] and [`Session`]; [`run_stdio_worker`] serves it over the worker's
//! stdin/stdout. [`TurnWriter`] keeps seed 004's rules for saying a turn. [`rpc::Peer`] is the
//! line-delimited JSON-RPC peer both ends of the worker protocol use. [`child::ChildCommand`]
//! starts every child process of the daemon and the backends, each in its own process group.
//!
//! **Invariant:** this crate knows nothing of WebSocket, clients or the daemon's state; stdout is
//! frames only and every log line goes to stderr.

#![deny(clippy::print_stdout)]

pub mod agent;
pub mod attachments;
pub mod child;
pub mod echo;
pub mod engine;
pub mod host;
pub mod kept;
pub mod lines;
pub mod listing;
pub mod notes;
pub mod parent;
pub mod rpc;
pub mod runtime;
pub mod schema;
pub mod sync;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod turn;

pub use agent::{accepted, not_offered, not_writable, Agent, AgentError, Session};
pub use host::SessionHost;
pub use kept::{Keeper, KeptLookup};
pub use runtime::{init_stderr_logging, run_stdio_worker, serve, AgentFactory, WorkerContext};
pub use sync::lock;
pub use turn::{error_info, now_iso, resumed_request, tool_result, Question, TurnEnd, TurnWriter, RESUMED};

use std::sync::Arc;

/// The factory for a built-in test agent kind (`echo`, `notes`), or `None` for another kind.
pub fn builtin_factory(kind: &str) -> Option<AgentFactory> {
    match kind {
        "echo" => Some(Box::new(|init, _ctx| Ok(Arc::new(echo::Echo::from_init(init)) as Arc<dyn Agent>))),
        "notes" => Some(Box::new(|init, _ctx| Ok(Arc::new(notes::Notes::from_init(init)) as Arc<dyn Agent>))),
        _ => None,
    }
}

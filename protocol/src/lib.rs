//! The worker protocol: the types ahpd and a backend worker exchange over the worker's stdio.
//!
//! A worker is a child process that runs one backend (echo, notes, claude, an ACP agent, pi). The
//! parent (`ahpd`) and the worker speak newline-delimited JSON-RPC 2.0 over the worker's
//! stdin/stdout, with requests in both directions. This crate holds the message shapes and the
//! framing rules only: it does no IO and knows nothing about tokio, so a worker written in any
//! language can be checked against the same definitions (`docs/workers.md` is the prose twin).
//!
//! **Invariant:** nothing here performs IO or depends on an async runtime.

pub mod frame;
pub mod kept;
pub mod methods;
pub mod types;

pub use ahp_types;
pub use frame::{Frame, FrameError, RpcError, MAX_FRAME_BYTES};
pub use kept::{kept_resource_uri, KeptResource, KEPT_SCHEME};
pub use types::*;

/// The worker protocol's version. A parent refuses a worker whose handshake names another one.
pub const WORKER_PROTOCOL_VERSION: u32 = 1;

/// Error codes the worker protocol uses beside JSON-RPC's own.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i32 = -32700;
    /// The message is not a JSON-RPC 2.0 request, response or notification.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The method is not one this peer answers.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// The params do not have the shape the method takes.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Something went wrong inside the peer.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The backend refused the request; `message` is its own sentence, to be shown as it is.
    pub const REFUSED: i32 = -32040;
    /// The backend does not offer this part of the contract (an optional method).
    pub const NOT_SUPPORTED: i32 = -32041;
    /// The request names a chat the worker holds no session for.
    pub const UNKNOWN_CHAT: i32 = -32042;
    /// The request was cancelled because the peer is shutting down.
    pub const SHUTTING_DOWN: i32 = -32043;
}

//! The Claude Code backend: the real `claude` CLI driven over stream-json and its control channel, as a worker (issue 7).
//!
//! Not built yet: this crate will own one backend on `agent-runner`, and must never depend on `ahpd`.

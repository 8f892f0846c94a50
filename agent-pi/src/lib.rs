//! The pi backend: `pi --mode rpc` as a worker (issue 9).
//!
//! Not built yet: this crate will own one backend on `agent-runner`, and must never depend on `ahpd`.

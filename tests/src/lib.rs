//! End-to-end test helpers: run `ahpd` as a real process, talk to it with the official AHP client,
//! fold what it says through the official reducers, and serve mock model APIs for the real CLIs.
//!
//! **Invariant:** nothing here is needed at run time; only the test suite links this crate.

pub mod browser;
pub mod client;
pub mod daemon;
pub mod git;
pub mod installed;
pub mod load;
pub mod mcp;
pub mod mocks;
pub mod opencode_family;
pub mod plugins;
pub mod remotes;
pub mod turns;

pub use client::{strip_nulls, turn_text, user_message, Mirror, TestClient, PATIENCE};
pub use daemon::{Daemon, DaemonOptions, Home, VerbRun};
pub mod raw;
pub mod sshd;
pub mod stdio;

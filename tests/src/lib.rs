//! End-to-end test helpers: run `ahpd` as a real process, talk to it with the official AHP client,
//! fold what it says through the official reducers, and serve mock model APIs for the real CLIs.
//!
//! **Invariant:** nothing here is needed at run time; only the test suite links this crate.

pub mod agents;
pub mod browser;
pub mod client;
pub mod clock;
pub mod containers;
pub mod daemon;
pub mod git;
pub mod installed;
pub mod load;
pub mod mcp;
pub mod mocks;
pub mod pictures;
pub mod plugins;
pub mod presets;
pub mod remotes;
pub mod skip;
pub mod store;
pub mod turns;

pub use client::{strip_nulls, turn_text, user_message, Mirror, TestClient, PATIENCE};
pub use daemon::{Daemon, DaemonOptions, Home, VerbRun};
pub mod raw;
pub mod sshd;
pub mod stdio;

//! The host's rules, one test each, on the in-process world (`ahpd/tests/world/`): the bare host
//! with echo, notes and a slow echo served in process, clients that speak only in frames, a
//! manual clock, and every client's folds held against the host's snapshots after each step.
//! Each module is one domain of the rules (seeds 000, 003, 004); each test is named for the rule
//! it checks.

#[path = "../world/mod.rs"]
mod world;

mod client_tools;
mod confirmations;
mod delivery;
mod endings;
mod folding;
mod grants;
mod limits;
mod orchestration;
mod queueing;
mod session_tools;
mod tool_grants;
mod turns;
mod wakeups;

//! Scripted mock APIs on 127.0.0.1 that the real agent CLIs (the model APIs) and the daemon (GitHub,
//! for Agent Merge) are pointed at in tests.
//!
//! Each mock answers by a script taken from the prompt it receives, so a test says what the model
//! does by what it asks. No network leaves the machine.

pub mod anthropic;
pub mod gemini;
pub mod github;
pub mod holds;
pub mod openai;
pub mod responses;
pub mod side;

//! Scripted mock model APIs on 127.0.0.1 that the real agent CLIs are pointed at in tests.
//!
//! Each mock answers by a script taken from the prompt it receives, so a test says what the model
//! does by what it asks. No network leaves the machine.

pub mod anthropic;
pub mod gemini;
pub mod openai;

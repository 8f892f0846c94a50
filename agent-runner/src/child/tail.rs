//! The bounded tail of what a child process wrote to stderr, kept for the messages that say why it
//! died, read as plain text (a program's colour codes taken out: the tail reaches every client).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// How much of a process's stderr is kept.
pub const TAIL_BYTES: usize = 16 * 1024;

/// How much of it a sentence a person reads carries ([`Tail::last_words`]).
pub const LAST_WORDS_BYTES: usize = 2 * 1024;

/// The last [`TAIL_BYTES`] a process wrote to stderr. Cheap to clone; every clone is the same tail.
#[derive(Clone, Default)]
pub struct Tail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

impl Tail {
    pub(crate) fn push(&self, chunk: &[u8]) {
        let mut bytes = lock(&self.bytes);
        bytes.extend(chunk);
        let over = bytes.len().saturating_sub(TAIL_BYTES);
        bytes.drain(..over);
    }

    /// True when the process said nothing but blanks.
    pub fn is_blank(&self) -> bool {
        lock(&self.bytes).iter().all(u8::is_ascii_whitespace)
    }

    /// All of the tail as text, trimmed.
    pub fn text(&self) -> String {
        self.text_within(TAIL_BYTES)
    }

    /// The last `limit` bytes of the tail as text, trimmed, without terminal escape codes (a
    /// program's colours); a character cut in two at the start is left out rather than shown as a
    /// replacement character.
    pub fn text_within(&self, limit: usize) -> String {
        let bytes = lock(&self.bytes);
        let skip = bytes.len().saturating_sub(limit);
        let kept: Vec<u8> =
            bytes.iter().skip(skip).skip_while(|b| skip > 0 && (**b & 0b1100_0000) == 0b1000_0000).copied().collect();
        strip_ansi_escapes::strip_str(String::from_utf8_lossy(&kept)).trim().to_owned()
    }

    /// `why` the process ended (or could not be asked), with its last words on stderr when it
    /// said anything: the one sentence the backends and the daemon's supervisor say it in.
    pub fn last_words(&self, why: impl Into<String>) -> String {
        let why = why.into();
        let tail = self.text_within(LAST_WORDS_BYTES);
        if tail.is_empty() {
            why
        } else {
            format!("{why}. Its last words on stderr: {tail}")
        }
    }

    /// The last `n` lines, joined with newlines.
    pub fn last_lines(&self, n: usize) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_and_lines() {
        let tail = Tail::default();
        tail.push(&vec![b'a'; TAIL_BYTES]);
        tail.push(b"one\ntwo\nthe end\n");
        assert_eq!(lock(&tail.bytes).len(), TAIL_BYTES);
        assert!(tail.text_within(20).ends_with("the end"));
        assert_eq!(tail.last_lines(2), "two\nthe end");
        assert!(!tail.is_blank());
    }

    #[test]
    fn a_programs_colours_are_left_out() {
        let tail = Tail::default();
        tail.push(b"\x1b[2m2026-01-01T00:00:00Z\x1b[0m \x1b[33m WARN\x1b[0m something\n");
        assert_eq!(tail.text(), "2026-01-01T00:00:00Z  WARN something");
    }

    #[test]
    fn last_words_follow_why_and_are_left_out_when_there_were_none() {
        let tail = Tail::default();
        assert_eq!(tail.last_words("claude exited with code 1"), "claude exited with code 1");
        tail.push(b"\n  boom\n");
        assert_eq!(
            tail.last_words("claude exited with code 1"),
            "claude exited with code 1. Its last words on stderr: boom"
        );
    }

    #[test]
    fn a_character_cut_at_the_start_is_left_out() {
        let tail = Tail::default();
        tail.push("é!".as_bytes());
        assert_eq!(tail.text_within(2), "!");
        assert!(Tail::default().is_blank());
    }
}

//! Shell integration's escape sequences taken out of a terminal's output, as AHP requires of
//! `terminal/data`: the OSC sequences a shell prints to mark prompts and commands (`OSC 133`,
//! VS Code's `OSC 633`) and to say its folder (`OSC 7`). Everything else — colours, cursor moves,
//! a title (`OSC 0`/`OSC 2`) — passes as it came.
//!
//! Output arrives in pieces, and a sequence may be cut anywhere, so the filter keeps its state
//! between pieces and holds back only the few bytes of a sequence's start it has not decided on.

/// The OSC numbers that are shell integration.
const STRIPPED: [u32; 3] = [7, 133, 633];

/// The longest sequence body skipped before the filter gives up on finding its end (a program
/// that never ends one must not silence the terminal for ever).
const MAX_SKIP: usize = 64 * 1024;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Passing bytes through.
    #[default]
    Text,
    /// After an ESC: `]` starts an OSC.
    Escape,
    /// After `ESC ]`: reading the OSC's number.
    Number(u32),
    /// Inside a stripped sequence, `skipped` bytes in.
    Skipping(usize),
    /// Inside a stripped sequence, after an ESC (a `\` ends it).
    SkippingEscape(usize),
}

/// Strips shell integration from a stream of terminal output.
#[derive(Debug, Default)]
pub struct ShellIntegration {
    state: State,
    /// The bytes of a sequence's start not yet decided on (`ESC ] 1 3`).
    held: Vec<u8>,
}

impl ShellIntegration {
    /// Filters the next piece of output; answers what passes.
    pub fn filter(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        let mut rest = input;
        while !rest.is_empty() {
            // Text up to the next ESC passes in one piece; only what follows an ESC is looked at
            // byte by byte.
            if self.state == State::Text {
                let text = rest.iter().position(|b| *b == ESC).unwrap_or(rest.len());
                out.extend_from_slice(&rest[..text]);
                rest = &rest[text..];
                if rest.is_empty() {
                    break;
                }
            }
            let (&byte, after) = rest.split_first().unwrap_or((&0, &[]));
            rest = after;
            self.step(byte, &mut out);
        }
        out
    }

    /// Takes one byte of a sequence (or the ESC that may start one).
    fn step(&mut self, byte: u8, out: &mut Vec<u8>) {
        self.state = match self.state {
            State::Text if byte == ESC => self.hold(byte, State::Escape),
            State::Text => {
                out.push(byte);
                State::Text
            }
            State::Escape if byte == b']' => self.hold(byte, State::Number(0)),
            State::Escape => self.pass(out, byte),
            State::Number(n) if byte.is_ascii_digit() && self.held.len() < 12 => {
                self.hold(byte, State::Number(n.saturating_mul(10).saturating_add(u32::from(byte - b'0'))))
            }
            State::Number(n) if STRIPPED.contains(&n) && matches!(byte, b';' | BEL) => {
                self.held.clear();
                if byte == BEL {
                    State::Text
                } else {
                    State::Skipping(0)
                }
            }
            State::Number(_) => self.pass(out, byte),
            State::Skipping(_) if byte == BEL => State::Text,
            State::Skipping(n) if byte == ESC => State::SkippingEscape(n + 1),
            State::Skipping(n) if n >= MAX_SKIP => State::Text,
            State::Skipping(n) => State::Skipping(n + 1),
            State::SkippingEscape(_) if byte == b'\\' => State::Text,
            State::SkippingEscape(n) => State::Skipping(n + 1),
        };
    }

    /// What is held back at the end of the stream, as it came (an unfinished start of a sequence
    /// that was not shell integration after all).
    pub fn finish(&mut self) -> Vec<u8> {
        self.state = State::Text;
        std::mem::take(&mut self.held)
    }

    fn hold(&mut self, byte: u8, next: State) -> State {
        self.held.push(byte);
        next
    }

    /// Not a stripped sequence: what was held goes out with this byte. An ESC starts a new one.
    fn pass(&mut self, out: &mut Vec<u8>, byte: u8) -> State {
        out.append(&mut self.held);
        if byte == ESC {
            self.held.push(byte);
            return State::Escape;
        }
        out.push(byte);
        State::Text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> String {
        let mut filter = ShellIntegration::default();
        let mut out = filter.filter(input);
        out.extend(filter.finish());
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn shell_integration_goes_and_the_rest_stays() {
        assert_eq!(all(b"a\x1b]633;A\x07b\x1b]133;D;0\x1b\\c"), "abc");
        assert_eq!(all(b"\x1b]7;file://host/tmp\x07$ "), "$ ");
        assert_eq!(all(b"\x1b]0;title\x07\x1b[31mred\x1b[0m"), "\x1b]0;title\x07\x1b[31mred\x1b[0m");
        assert_eq!(all(b"\x1b]1337;x\x07"), "\x1b]1337;x\x07");
        assert_eq!(all(b"\x1b\x1b]633;E;ls\x07!"), "\x1b!");
    }

    #[test]
    fn a_sequence_cut_anywhere_is_still_found() {
        let input = b"one\x1b]633;C\x07two\x1b]0;t\x07three";
        for cut in 0..input.len() {
            let mut filter = ShellIntegration::default();
            let mut out = filter.filter(&input[..cut]);
            out.extend(filter.filter(&input[cut..]));
            out.extend(filter.finish());
            assert_eq!(String::from_utf8(out).expect("utf-8"), "onetwo\x1b]0;t\x07three", "cut at {cut}");
        }
    }

    #[test]
    fn a_sequence_that_never_ends_stops_being_skipped() {
        let mut input = b"\x1b]633;".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_SKIP + 10));
        assert_eq!(all(&input).len(), 9);
    }
}

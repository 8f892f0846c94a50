//! One terminal's life, as a task: what its program prints goes out as `terminal/data` (shell
//! integration stripped, whole characters only, a bounded piece at a time), the scrollback is
//! kept under its bound, what clients type and the sizes they ask reach the pty in the order they
//! were said, and when the program exits (or is ended, or runs past its deadline) everything it
//! printed is read before `terminal/exited` says its code. The end of its output is not its exit
//! (seed 003): a program that closes its output and goes on running is still running.

use std::time::Duration;

use ahp_types::actions::{StateAction, TerminalClearedAction, TerminalDataAction, TerminalExitedAction};
use pty_process::{OwnedReadPty, OwnedWritePty, Size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::escapes::ShellIntegration;
use super::pty::PtyProcess;
use crate::clock::{Clock, Millis};
use crate::host::facade::{content_bytes, output_of, tail};
use crate::host::{Core, Host};

/// The most a terminal says in one `terminal/data` (a burst of output is many of them, so what
/// the replay ring holds of it stays bounded).
const PIECE_BYTES: usize = 8 * 1024;

/// How long, after its program exited, a terminal's last output is read for at most (what it
/// left running was killed, so the pty closes at once; this is a safety net).
const DRAIN_WITHIN: Duration = Duration::from_secs(2);

/// What a client asked of a running terminal, in the order it was said.
#[derive(Debug)]
pub enum Control {
    /// Bytes to type.
    Input(String),
    /// A new size: columns, rows.
    Resize(u16, u16),
}

/// What a terminal task needs.
pub struct Terminal {
    /// Its channel.
    pub uri: String,
    /// Its program.
    pub process: PtyProcess,
    /// What the program prints.
    pub reader: OwnedReadPty,
    /// What it reads.
    pub writer: OwnedWritePty,
    /// What clients ask of it.
    pub control: mpsc::UnboundedReceiver<Control>,
    /// Cancelled to end it.
    pub end: CancellationToken,
    /// The bytes of output it keeps.
    pub scrollback: usize,
    /// When it is stopped if it still runs (a `!` command's deadline), on the host's clock.
    pub deadline: Option<(Clock, Millis)>,
}

/// How a terminal's program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// Its exit code (128 + the signal for one a signal ended).
    pub code: Option<i64>,
    /// It ran past its deadline and was stopped.
    pub timed_out: bool,
    /// The bytes of output it printed in all, as the program wrote them ([`program_bytes`]; its
    /// scrollback may keep fewer).
    pub printed: u64,
}

/// How many bytes the program wrote to say `text`, as its terminal shows it: the terminal puts a
/// `\r` before each `\n` a program writes (the tty's `onlcr`), which the program did not print.
/// `after_cr`: the text before this ended with `\r` (a `\r\n` cut between two reads).
pub fn program_bytes(text: &str, after_cr: bool) -> u64 {
    let mut added = 0u64;
    let mut last_cr = after_cr;
    for byte in text.bytes() {
        if byte == b'\n' && last_cr {
            added += 1;
        }
        last_cr = byte == b'\r';
    }
    (text.len() as u64).saturating_sub(added)
}

/// Output on its way to `terminal/data`: shell integration out, a character cut between two
/// reads held until it is whole, and what the program printed counted.
#[derive(Default)]
struct Output {
    filter: ShellIntegration,
    partial: Vec<u8>,
    /// The bytes the program printed so far ([`program_bytes`]).
    printed: u64,
    /// The text said so far ended with `\r`.
    after_cr: bool,
}

impl Output {
    fn text(&mut self, bytes: &[u8]) -> String {
        let mut pending = std::mem::take(&mut self.partial);
        pending.extend(self.filter.filter(bytes));
        let whole = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            // A character cut at the end waits for its other bytes; bytes that are not UTF-8 at
            // all are shown as such.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => pending.len(),
        };
        self.partial = pending.split_off(whole);
        self.counted(String::from_utf8_lossy(&pending).into_owned())
    }

    fn finish(&mut self) -> String {
        let mut rest = std::mem::take(&mut self.partial);
        rest.extend(self.filter.finish());
        self.counted(String::from_utf8_lossy(&rest).into_owned())
    }

    fn counted(&mut self, text: String) -> String {
        if !text.is_empty() {
            self.printed += program_bytes(&text, self.after_cr);
            self.after_cr = text.ends_with('\r');
        }
        text
    }
}

/// Runs a terminal until its program exits, it is ended, or its deadline passes; answers how the
/// program ended. What follows the exit (saying it, a command's turn) is the caller's.
pub async fn run(host: &Host, mut t: Terminal) -> Ended {
    let mut output = Output::default();
    let mut buf = vec![0u8; PIECE_BYTES];
    let mut reading = true;
    let mut timed_out = false;
    let deadline = t.deadline.clone();
    let due = async {
        match deadline {
            Some((clock, due)) => clock.sleep_until(due).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(due);
    let code = loop {
        tokio::select! {
            biased;
            () = t.end.cancelled() => {
                t.process.killer().kill();
                break t.process.wait().await;
            }
            code = t.process.wait() => break code,
            () = &mut due => {
                timed_out = true;
                t.process.killer().kill();
                break t.process.wait().await;
            }
            Some(control) = t.control.recv() => apply_control(&mut t.writer, control).await,
            read = t.reader.read(&mut buf), if reading => match read {
                Ok(n) if n > 0 => say(host, &t.uri, output.text(&buf[..n]), t.scrollback),
                // The output closed (EIO once nothing holds the pty's other side). That is not the
                // program's exit: it may go on running, and the terminal with it, until it exits.
                _ => reading = false,
            },
        }
    };
    if reading {
        drain(host, &mut t, &mut output, &mut buf).await;
    }
    say(host, &t.uri, output.finish(), t.scrollback);
    Ended { code, timed_out, printed: output.printed }
}

/// Reads what the program printed before it exited, until the pty closes.
async fn drain(host: &Host, t: &mut Terminal, output: &mut Output, buf: &mut [u8]) {
    let read_all = async {
        loop {
            match t.reader.read(buf).await {
                Ok(n) if n > 0 => say(host, &t.uri, output.text(&buf[..n]), t.scrollback),
                _ => break,
            }
        }
    };
    if tokio::time::timeout(DRAIN_WITHIN, read_all).await.is_err() {
        tracing::debug!(terminal = %t.uri, "a terminal's pty stayed open after its program exited");
    }
}

async fn apply_control(writer: &mut OwnedWritePty, control: Control) {
    let result = match control {
        Control::Input(data) => writer.write_all(data.as_bytes()).await.map_err(|e| e.to_string()),
        Control::Resize(cols, rows) => writer.resize(Size::new(rows, cols)).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "a terminal's pty did not take what a client sent");
    }
}

/// Says output on the terminal's channel, then keeps its scrollback under the bound.
fn say(host: &Host, uri: &str, text: String, scrollback: usize) {
    if text.is_empty() {
        return;
    }
    let mut core = host.lock();
    core.apply(uri, StateAction::TerminalData(TerminalDataAction { data: text }), None, None);
    bound_scrollback(&mut core, uri, scrollback);
}

/// A terminal holding more than `scrollback` bytes is cleared and given back its newest half:
/// every client folds the same two actions, so what each holds stays bounded with the host's.
/// Half, so a busy terminal is trimmed once per half a scrollback rather than at every piece.
pub fn bound_scrollback(core: &mut Core, uri: &str, scrollback: usize) {
    let Some(state) = core.terminal_state(uri) else { return };
    if content_bytes(state) <= scrollback {
        return;
    }
    let kept = tail(&output_of(state), scrollback / 2).to_owned();
    core.apply(uri, StateAction::TerminalCleared(TerminalClearedAction {}), None, None);
    core.apply(uri, StateAction::TerminalData(TerminalDataAction { data: kept }), None, None);
}

/// Says the terminal's program exited.
pub fn say_exited(core: &mut Core, uri: &str, code: Option<i64>) {
    core.apply(uri, StateAction::TerminalExited(TerminalExitedAction { exit_code: code }), None, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_between_reads_is_held_until_whole() {
        let mut out = Output::default();
        let bytes = "é!".as_bytes();
        assert_eq!(out.text(&bytes[..1]), "");
        assert_eq!(out.text(&bytes[1..]), "é!");
        assert_eq!(out.text(b"\xff\xfe"), "\u{fffd}\u{fffd}");
        assert_eq!(out.finish(), "");
    }

    #[test]
    fn the_terminals_carriage_returns_are_not_counted_as_printed_even_across_reads() {
        assert_eq!(program_bytes("y\r\ny\r\n", false), 4, "`yes` printed y\\n twice");
        assert_eq!(program_bytes("a\r\r\n", false), 3, "a program's own \\r\\n");
        assert_eq!(program_bytes("\n", true), 0, "the \\r came in the read before");
        let mut out = Output::default();
        out.text(b"y\r");
        out.text(b"\ny\r\n");
        assert_eq!(out.printed, 4);
    }
}

//! What a verb says while it waits: nothing for the first second, then what it waits for, on
//! stderr (stdout is the verb's answer). On a terminal one line is updated in place; otherwise
//! (a log, a pipe) each new step is one line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How long a wait stays silent.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// One wait's progress.
pub struct Progress {
    started: Instant,
    tty: bool,
    said: Option<String>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// A wait that starts now.
    pub fn new() -> Self {
        Self { started: Instant::now(), tty: std::io::stderr().is_terminal(), said: None }
    }

    /// Says `what` is waited for, once the wait has lasted a second and when it changes.
    pub fn waiting(&mut self, what: &str) {
        if self.started.elapsed() < QUIET_FOR || self.said.as_deref() == Some(what) {
            return;
        }
        let mut err = std::io::stderr().lock();
        let seconds = self.started.elapsed().as_secs();
        let _ = if self.tty { write!(err, "\r\x1b[K{what}… ({seconds} s)") } else { writeln!(err, "{what}…") };
        let _ = err.flush();
        self.said = Some(what.to_owned());
    }
}

impl Drop for Progress {
    /// A line updated in place is cleared, so the answer that follows starts a clean line.
    fn drop(&mut self) {
        if self.tty && self.said.is_some() {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}

/// Awaits `future`, saying `what` it waits for once that has lasted a second.
pub async fn saying<F: std::future::Future>(what: &str, future: F) -> F::Output {
    let mut progress = Progress::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tokio::pin!(future);
    loop {
        tokio::select! {
            out = &mut future => return out,
            _ = tick.tick() => progress.waiting(what),
        }
    }
}

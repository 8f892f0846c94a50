//! One worker child: spawned in its own process group, its stderr kept as a bounded tail, stopped
//! gracefully (close stdin, wait, SIGTERM to the group, SIGKILL, reap).

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How much of a worker's stderr is kept for error messages.
pub const TAIL_BYTES: usize = 16 * 1024;

/// The last lines a process wrote to stderr, at most [`TAIL_BYTES`].
#[derive(Clone, Default)]
pub struct StderrTail {
    lines: Arc<Mutex<(VecDeque<String>, usize)>>,
}

impl StderrTail {
    fn push(&self, line: String) {
        let mut guard = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let (lines, bytes) = &mut *guard;
        *bytes += line.len() + 1;
        lines.push_back(line);
        while *bytes > TAIL_BYTES {
            match lines.pop_front() {
                Some(old) => *bytes -= old.len() + 1,
                None => break,
            }
        }
    }

    /// The last `n` lines, joined.
    pub fn last(&self, n: usize) -> String {
        let guard = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let lines = &guard.0;
        let skip = lines.len().saturating_sub(n);
        lines.iter().skip(skip).cloned().collect::<Vec<_>>().join("\n")
    }
}

/// A running worker process.
pub struct WorkerProcess {
    child: Child,
    /// Its process group (the child's pid).
    pub pgid: Option<i32>,
    /// Its stderr tail.
    pub tail: StderrTail,
    /// Cancelled once its stderr reached its end (everything it wrote is in the tail).
    stderr_closed: tokio_util::sync::CancellationToken,
}

/// Spawns `program args` in a new process group with piped stdio; stderr lines go to the log
/// (prefixed with `provider`) and to the tail.
pub fn spawn(
    provider: &str,
    program: &std::path::Path,
    args: &[String],
    env: &[(String, String)],
) -> std::io::Result<(WorkerProcess, ChildStdin, ChildStdout)> {
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so stopping it stops whatever it started (a CLI, a shell) too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("the worker has no stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("the worker has no stdout"))?;
    let tail = StderrTail::default();
    let stderr_closed = tokio_util::sync::CancellationToken::new();
    if let Some(stderr) = child.stderr.take() {
        let tail = tail.clone();
        let provider = provider.to_owned();
        let closed = stderr_closed.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "ahpd::worker", "{provider}: {line}");
                tail.push(line);
            }
            closed.cancel();
        });
    } else {
        stderr_closed.cancel();
    }
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    Ok((WorkerProcess { child, pgid, tail, stderr_closed }, stdin, stdout))
}

impl WorkerProcess {
    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Waits, at most `within`, until everything the process wrote to stderr is in the tail (a
    /// process that just exited may have said why a moment before; something it started may
    /// still hold stderr open, hence the bound).
    pub async fn stderr_read(&self, within: Duration) {
        let _ = tokio::time::timeout(within, self.stderr_closed.cancelled()).await;
    }

    /// Sends a signal to the whole group; a group that is gone already is fine.
    pub fn signal_group(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            match killpg(Pid::from_raw(pgid), signal) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => {
                    tracing::warn!(pgid, ?signal, error = %e, "could not signal a worker's process group")
                }
            }
        }
    }

    /// After stdin was closed: waits `grace`, then SIGTERM to the group, waits again, then
    /// SIGKILL, and reaps. Whatever is left in the group afterwards is killed too.
    pub async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                self.signal_group(Signal::SIGTERM);
                match tokio::time::timeout(grace, self.child.wait()).await {
                    Ok(status) => status.ok(),
                    Err(_) => {
                        self.signal_group(Signal::SIGKILL);
                        self.child.wait().await.ok()
                    }
                }
            }
        };
        // A grandchild that outlived its parent still holds the group: sweep it.
        self.signal_group(Signal::SIGKILL);
        status
    }
}

/// Says how a process ended, in words.
pub fn describe_exit(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "ended (its exit status could not be read)".to_owned(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => {
                let name =
                    Signal::try_from(sig).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("signal {sig}"));
                format!("was killed by signal {sig} ({name})")
            }
            (None, None) => "ended".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_a_process_says_on_stderr_until_its_end_is_in_the_tail_once_read() {
        // The shell exits at once; something it started says the last words a moment later,
        // holding stderr open until then.
        let args = ["-c".to_owned(), "(sleep 0.2; echo boom >&2) & exit 3".to_owned()];
        let (mut process, _stdin, _stdout) =
            spawn("test", std::path::Path::new("/bin/sh"), &args, &[]).expect("spawn sh");
        let status = process.wait().await.expect("exit");
        assert_eq!(status.code(), Some(3));
        process.stderr_read(Duration::from_secs(10)).await;
        assert_eq!(process.tail.last(8), "boom");
    }
}

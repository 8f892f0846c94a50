//! A child process in its own process group: spawned with piped stdio, its stderr kept as a
//! bounded tail, reaped by a task that says how it ended, and stopped as a group.

use std::collections::VecDeque;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How much of a process's stderr is kept.
pub const TAIL_BYTES: usize = 16 * 1024;

/// How much of that tail goes into a message a person reads.
const TAIL_SHOWN: usize = 2 * 1024;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The last bytes a process wrote to stderr.
#[derive(Clone, Default)]
pub struct Tail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

impl Tail {
    fn push(&self, chunk: &[u8]) {
        let mut bytes = lock(&self.bytes);
        bytes.extend(chunk);
        let over = bytes.len().saturating_sub(TAIL_BYTES);
        bytes.drain(..over);
    }

    /// True when the process said nothing but blanks.
    pub fn is_blank(&self) -> bool {
        lock(&self.bytes).iter().all(u8::is_ascii_whitespace)
    }

    /// The tail as text, at most `limit` bytes of it, trimmed.
    pub fn text(&self, limit: usize) -> String {
        let bytes = lock(&self.bytes);
        let skip = bytes.len().saturating_sub(limit);
        let kept: Vec<u8> = bytes.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&kept).trim().to_owned()
    }
}

/// Why a process could not be started, in words a person can act on.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SpawnError(pub String);

/// What to run.
pub struct Spawn<'a> {
    /// The program.
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Variables over the worker's own.
    pub env: Vec<(String, String)>,
    /// Where it starts.
    pub cwd: &'a Path,
    /// Keep stdin piped (an agent) or give it nothing (a terminal command).
    pub stdin: bool,
    /// Send stderr into stdout's pipe instead of the tail (a terminal's output is both).
    pub merge_stderr: bool,
}

/// A running (or finished) child process and its group.
pub struct Process {
    pgid: Pid,
    exited: watch::Receiver<Option<ExitStatus>>,
    stderr_done: watch::Receiver<bool>,
    tail: Tail,
}

/// The pipes of a freshly spawned process.
pub struct Pipes {
    /// Its stdin, when piped.
    pub stdin: Option<ChildStdin>,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr, when it was asked to be merged into the output (read by the caller).
    pub stderr: Option<tokio::process::ChildStderr>,
}

impl Process {
    /// Starts `spawn` in a process group of its own. The tasks that read its stderr and reap it
    /// run on `tracker` and stop at `cancel`.
    pub fn spawn(
        spawn: Spawn<'_>,
        tracker: &TaskTracker,
        cancel: &CancellationToken,
    ) -> Result<(Self, Pipes), SpawnError> {
        if !spawn.cwd.is_dir() {
            return Err(SpawnError(format!(
                "{} could not be started in {}, which does not exist",
                spawn.program,
                spawn.cwd.display()
            )));
        }
        let mut command = Command::new(spawn.program);
        command
            .args(spawn.args)
            .envs(spawn.env)
            .current_dir(spawn.cwd)
            .stdin(if spawn.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SpawnError(format!(
                "{} was not found; install it, or put its directory on the PATH the daemon runs with",
                spawn.program
            )),
            std::io::ErrorKind::PermissionDenied => {
                SpawnError(format!("{} could not be started: it is not executable", spawn.program))
            }
            _ => SpawnError(format!("{} could not be started: {e}", spawn.program)),
        })?;
        let pid = child.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(0);
        let pgid = Pid::from_raw(pid);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| SpawnError("no stdout pipe".into()))?;
        let stderr = child.stderr.take().ok_or_else(|| SpawnError("no stderr pipe".into()))?;

        let tail = Tail::default();
        let (done_tx, stderr_done) = watch::channel(false);
        let (stderr_for_caller, stderr_to_tail) =
            if spawn.merge_stderr { (Some(stderr), None) } else { (None, Some(stderr)) };
        match stderr_to_tail {
            Some(mut stderr) => {
                let (tail, cancel) = (tail.clone(), cancel.clone());
                tracker.spawn(async move {
                    let mut buf = [0u8; 4096];
                    loop {
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            read = stderr.read(&mut buf) => match read {
                                Ok(0) | Err(_) => break,
                                Ok(n) => tail.push(&buf[..n]),
                            },
                        }
                    }
                    let _ = done_tx.send(true);
                });
            }
            None => {
                let _ = done_tx.send(true);
            }
        }

        let (exit_tx, exited) = watch::channel(None);
        tracker.spawn(async move {
            // The group outlives a leader that exits; whatever it left behind goes with it.
            let status = child.wait().await.ok();
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = exit_tx.send(status);
        });
        Ok((Self { pgid, exited, stderr_done, tail }, Pipes { stdin, stdout, stderr: stderr_for_caller }))
    }

    /// The stderr tail.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// How it ended, once it has.
    pub fn status(&self) -> Option<ExitStatus> {
        *self.exited.borrow()
    }

    /// Waits until it has ended.
    pub async fn wait(&self) -> Option<ExitStatus> {
        let mut exited = self.exited.clone();
        let ended = exited.wait_for(Option::is_some).await.ok().and_then(|s| *s);
        ended
    }

    /// Waits at most `within` for the process to end and its stderr to be read to the end, so
    /// a message about its death says all it said. Answers how it ended, if it has.
    pub async fn settle(&self, within: Duration) -> Option<ExitStatus> {
        let mut done = self.stderr_done.clone();
        let _ = tokio::time::timeout(within, async {
            let _ = self.wait().await;
            let _ = done.wait_for(|d| *d).await;
        })
        .await;
        self.status()
    }

    /// Sends `signal` to the whole group.
    pub fn signal(&self, signal: Signal) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, signal);
        }
    }

    /// The graceful stop, after the caller closed stdin: wait `grace`, SIGTERM the group, wait
    /// two seconds, SIGKILL it, and reap.
    pub async fn stop(&self, grace: Duration) {
        if tokio::time::timeout(grace, self.wait()).await.is_ok() {
            return;
        }
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(Duration::from_secs(2), self.wait()).await.is_ok() {
            return;
        }
        self.signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.wait()).await;
    }

    /// `sentence`, then the tail of the process's stderr, for a message a person reads.
    pub fn with_tail(&self, sentence: String) -> String {
        let tail = self.tail.text(TAIL_SHOWN);
        if tail.is_empty() {
            format!("{sentence}. It said nothing on stderr.")
        } else {
            format!("{sentence}. Its stderr ended with:\n{tail}")
        }
    }
}

/// An exit status in words.
pub fn describe_status(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "is still running".to_owned(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => format!("was ended by {}", signal_name(sig)),
            (None, None) => "ended".to_owned(),
        },
    }
}

/// `SIGKILL` for 9, or the number when it has no name.
pub fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("signal {signal}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let tail = Tail::default();
        tail.push(&vec![b'a'; TAIL_BYTES]);
        tail.push(b"the end\n");
        assert_eq!(lock(&tail.bytes).len(), TAIL_BYTES);
        assert!(tail.text(20).ends_with("the end"));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_sentence() {
        let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
        let spawn = Spawn {
            program: "/no/such/agent",
            args: &[],
            env: Vec::new(),
            cwd: Path::new("/"),
            stdin: true,
            merge_stderr: false,
        };
        let Err(error) = Process::spawn(spawn, &tracker, &cancel) else { panic!("spawned") };
        assert!(error.0.contains("was not found"), "{error}");
    }

    #[tokio::test]
    async fn a_dead_process_says_how_it_died_and_what_it_said() {
        let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
        let args = vec!["-c".to_owned(), "echo dying >&2; exit 7".to_owned()];
        let spawn = Spawn {
            program: "sh",
            args: &args,
            env: Vec::new(),
            cwd: Path::new("/"),
            stdin: true,
            merge_stderr: false,
        };
        let (process, _pipes) = Process::spawn(spawn, &tracker, &cancel).expect("spawn");
        process.settle(Duration::from_secs(10)).await;
        let said = process.with_tail(describe_status(process.status()));
        assert!(said.contains("exited with code 7"), "{said}");
        assert!(said.contains("dying"), "{said}");
    }
}

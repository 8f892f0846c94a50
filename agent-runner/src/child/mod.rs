//! One child process in a process group of its own, with everything about its life that does not
//! depend on who starts it: its stderr kept as a bounded tail (and logged, when asked), a task that
//! reaps it and says how it ended, the graceful stop (close stdin, wait, SIGTERM to the group,
//! wait, SIGKILL, reap), and its group killed at once when the guard is dropped.
//!
//! Nothing outlives a dead parent: on Linux every child is started with `PR_SET_PDEATHSIG`
//! (SIGTERM when the thread that started it ends, which for a tokio worker thread is when the
//! process ends); every live group is in this process's register ([`groups`]), so a worker whose
//! parent died ends them all before it exits; and what a child reports it started
//! ([`Child::reported`]) is ended when that child dies.
//!
//! The daemon's supervisor and every backend start their processes here; what each says to its
//! process (the worker protocol, stream-json, ACP, pi's RPC) is theirs.

/// What keeps the `pi` CLI from calling home (its update check, telemetry, network fetches),
/// whether the pi backend runs it or an ACP adapter (pi-acp) does: one list for both.
pub const PI_QUIET: [(&str, &str); 3] = [("PI_OFFLINE", "1"), ("PI_TELEMETRY", "0"), ("PI_SKIP_VERSION_CHECK", "1")];

pub mod groups;
mod tail;
mod unguarded;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use groups::ProcessGroup;
pub use tail::{Tail, LAST_WORDS_BYTES, TAIL_BYTES};
pub use unguarded::{detached, run_to_end, run_within};

/// How long a killed group is waited for before its leader is given up on (a process stuck in
/// the kernel cannot be reaped until it leaves it).
const REAP_WITHIN: Duration = Duration::from_secs(5);

/// The longest stderr line logged whole; a longer one is logged in pieces.
const LOG_LINE_BYTES: usize = 4096;

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_removed: Vec<OsString>,
    cwd: Option<PathBuf>,
    stdin: bool,
    stderr_to_caller: bool,
    log_stderr: Option<(String, tracing::Level)>,
    end_group_with_leader: bool,
    private_files: bool,
}

impl ChildCommand {
    /// `program` (a path, or a name looked up on the PATH) with piped stdin and stdout and its
    /// stderr kept in the tail.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            env_removed: Vec::new(),
            cwd: None,
            stdin: true,
            stderr_to_caller: false,
            log_stderr: None,
            end_group_with_leader: false,
            private_files: false,
        }
    }

    /// Its arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Variables set over this process's own environment.
    pub fn envs<I, K, V>(mut self, env: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.env.extend(env.into_iter().map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())));
        self
    }

    /// Variables of this process's own environment it does not inherit (ones that would point it
    /// somewhere else, such as `GIT_DIR` for git).
    pub fn env_remove<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: AsRef<OsStr>,
    {
        self.env_removed.extend(keys.into_iter().map(|k| k.as_ref().to_owned()));
        self
    }

    /// Where it runs; a folder that does not exist is a [`SpawnError::NoSuchDirectory`].
    pub fn cwd(mut self, cwd: impl AsRef<Path>) -> Self {
        self.cwd = Some(cwd.as_ref().to_owned());
        self
    }

    /// Gives it no stdin (a command run for an agent, not an agent).
    pub fn stdin_null(mut self) -> Self {
        self.stdin = false;
        self
    }

    /// Hands its stderr to the caller (in [`Pipes::stderr`]) instead of keeping it in the tail.
    pub fn stderr_to_caller(mut self) -> Self {
        self.stderr_to_caller = true;
        self
    }

    /// Logs each line it writes to stderr at `level`, prefixed with `label`.
    pub fn log_stderr(mut self, label: impl Into<String>, level: tracing::Level) -> Self {
        self.log_stderr = Some((label.into(), level));
        self
    }

    /// Kills what is left of its group as soon as the process itself exits (a shell's background
    /// jobs, a helper an agent left behind), rather than when it is stopped or dropped.
    pub fn end_group_with_leader(mut self) -> Self {
        self.end_group_with_leader = true;
        self
    }

    /// Makes what it creates its owner's alone (umask 077: files 0600, folders 0700), for a
    /// process that writes into ahpd's private data folder (git checking a worktree out there).
    pub fn private_files(mut self) -> Self {
        self.private_files = true;
        self
    }

    /// Runs it through `confined.wrap` (a sandbox's or a container's launcher) with
    /// `confined.env` set over its own: the program and its arguments follow the wrapper's argv.
    /// Nothing changes for a session that is not confined.
    pub fn confined(mut self, confined: Option<&protocol::Confined>) -> Self {
        let Some(confined) = confined else { return self };
        let Some((launcher, rest)) = confined.wrap.split_first() else { return self };
        let program = std::mem::replace(&mut self.program, launcher.into());
        let mut args: Vec<OsString> = rest.iter().map(OsString::from).collect();
        args.push(program);
        args.append(&mut self.args);
        self.args = args;
        self.env.extend(confined.env.iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    fn shown(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }

    /// Starts it in a new process group. Its reaper and stderr reader run on the current tokio
    /// runtime and end with the process (or when the guard is dropped).
    pub fn spawn(self) -> Result<(Child, Pipes), SpawnError> {
        let program = self.shown();
        if let Some(cwd) = self.cwd.as_ref().filter(|cwd| !cwd.is_dir()) {
            return Err(SpawnError::NoSuchDirectory { program, cwd: cwd.display().to_string() });
        }
        let mut command = tokio::process::Command::new(&self.program);
        for key in &self.env_removed {
            command.env_remove(key);
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if self.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so stopping it stops whatever it started (a CLI, a shell) too.
            .process_group(0);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        dies_with_this_process(&mut command);
        if self.private_files {
            creates_private_files(&mut command);
        }
        #[allow(clippy::disallowed_methods)] // the guard: every other child of the workspace starts here
        let mut child = command.spawn().map_err(|e| SpawnError::from_io(&program, &e))?;
        let pid = child.id().and_then(|id| i32::try_from(id).ok()).filter(|id| *id > 0);
        let Some(pid) = pid else {
            return Err(SpawnError::Other { program, why: "it has no process id".into() });
        };
        let pgid = Pid::from_raw(pid);
        let stdin = child.stdin.take();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            // Piped above, so never; but a process nobody can talk to must not run on.
            let _ = killpg(pgid, Signal::SIGKILL);
            return Err(SpawnError::Other { program, why: "no stdout or stderr pipe".into() });
        };
        groups::register(ProcessGroup { pgid: pid, leader_start: groups::leader_start(pid).unwrap_or_default() });

        let dropped = CancellationToken::new();
        let swept = Arc::new(AtomicBool::new(false));
        let tail = Tail::default();
        let (stderr_done_tx, stderr_done) = watch::channel(false);
        let stderr_for_caller = if self.stderr_to_caller {
            let _ = stderr_done_tx.send(true);
            Some(stderr)
        } else {
            tokio::spawn(read_stderr(stderr, tail.clone(), self.log_stderr, stderr_done_tx, dropped.clone()));
            None
        };
        let (exit_tx, exit) = watch::channel(Exit::Running);
        let (sweep_on_exit, reaper_swept) = (self.end_group_with_leader, swept.clone());
        tokio::spawn(async move {
            let status = child.wait().await.ok();
            // It is dead: nothing is left to stop what it said it started.
            groups::end_reported(pid);
            if sweep_on_exit {
                sweep(pgid, &reaper_swept);
            }
            exit_tx.send_replace(Exit::Ended(status));
        });
        tracing::debug!(pid, program, "started a child process in its own group");
        let pipes = Pipes { stdin, stdout, stderr: stderr_for_caller, program: program.clone() };
        Ok((Child { program, pgid, exit, stderr_done, tail, swept, dropped }, pipes))
    }
}

/// The pipes of a freshly started process.
pub struct Pipes {
    /// Its stdin, unless it was given none.
    pub stdin: Option<ChildStdin>,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr, when the caller asked for it ([`ChildCommand::stderr_to_caller`]).
    pub stderr: Option<ChildStderr>,
    program: String,
}

impl Pipes {
    /// Takes its stdin, which a process started without [`ChildCommand::stdin_null`] has.
    pub fn take_stdin(&mut self) -> Result<ChildStdin, SpawnError> {
        self.stdin
            .take()
            .ok_or_else(|| SpawnError::Other { program: self.program.clone(), why: "no stdin pipe".into() })
    }
}

/// Why a process could not be started, in words a person can act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpawnError {
    /// The program is not there.
    #[error("{program} was not found; install it, or put its directory on the PATH the daemon runs with")]
    NotFound {
        /// The program.
        program: String,
    },
    /// The folder it should run in is not there.
    #[error("{program} could not be started in {cwd}, which does not exist")]
    NoSuchDirectory {
        /// The program.
        program: String,
        /// The missing folder.
        cwd: String,
    },
    /// The program may not be run.
    #[error("{program} could not be started: it is not executable")]
    NotExecutable {
        /// The program.
        program: String,
    },
    /// Anything else the system said.
    #[error("{program} could not be started: {why}")]
    Other {
        /// The program.
        program: String,
        /// What the system said.
        why: String,
    },
}

impl SpawnError {
    fn from_io(program: &str, error: &std::io::Error) -> Self {
        let program = program.to_owned();
        match error.kind() {
            std::io::ErrorKind::NotFound => SpawnError::NotFound { program },
            std::io::ErrorKind::PermissionDenied => SpawnError::NotExecutable { program },
            _ => SpawnError::Other { program, why: error.to_string() },
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Exit {
    Running,
    /// It was reaped; `None` when its status could not be read.
    Ended(Option<ExitStatus>),
}

/// A running (or finished) child process and its process group. Dropping it kills the group.
pub struct Child {
    program: String,
    pgid: Pid,
    exit: watch::Receiver<Exit>,
    stderr_done: watch::Receiver<bool>,
    tail: Tail,
    /// Set once the group was killed after its leader ended: its id may be given to another
    /// process from then on, so it is never signalled again.
    swept: Arc<AtomicBool>,
    /// Stops the stderr reader when the guard goes.
    dropped: CancellationToken,
}

impl Child {
    /// The program, as it was named.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Its pid, which is also its process group's id.
    pub fn pid(&self) -> i32 {
        self.pgid.as_raw()
    }

    /// Its stderr tail.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// True once it was reaped.
    pub fn has_exited(&self) -> bool {
        matches!(*self.exit.borrow(), Exit::Ended(_))
    }

    /// How it ended, once it has (and its status could be read).
    pub fn status(&self) -> Option<ExitStatus> {
        match *self.exit.borrow() {
            Exit::Ended(status) => status,
            Exit::Running => None,
        }
    }

    /// Waits until it has ended.
    pub async fn wait(&self) -> Option<ExitStatus> {
        let mut exit = self.exit.clone();
        let ended = exit.wait_for(|e| matches!(e, Exit::Ended(_))).await.ok().map(|e| *e);
        match ended {
            Some(Exit::Ended(status)) => status,
            _ => None,
        }
    }

    /// Waits at most `within` for it to end; `None` when it has not (or its status is unknown).
    pub async fn wait_within(&self, within: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(within, self.wait()).await.ok().flatten()
    }

    /// Waits, at most `within`, until everything it wrote to stderr is in the tail (a process
    /// that just exited may have said why a moment before; something it started may still hold
    /// stderr open, hence the bound).
    pub async fn stderr_read(&self, within: Duration) {
        let mut done = self.stderr_done.clone();
        let _ = tokio::time::timeout(within, done.wait_for(|d| *d)).await;
    }

    /// Waits at most `within` for it to end and its stderr to be read to the end, so a message
    /// about its death says all it said. Answers how it ended, if it has.
    pub async fn settle(&self, within: Duration) -> Option<ExitStatus> {
        let _ = tokio::time::timeout(within, async {
            self.wait().await;
            self.stderr_read(within).await;
        })
        .await;
        self.status()
    }

    /// Notes what this child said its own tree runs in now (a worker's `process/groups`): those
    /// groups are in the register, and they are ended (after checking they are still those
    /// groups) when this child dies or its guard is dropped.
    pub fn reported(&self, groups: Vec<ProcessGroup>) {
        groups::report(self.pid(), groups);
    }

    /// Sends `signal` to its whole group; a group that is gone already is fine.
    pub fn signal(&self, signal: Signal) {
        if self.swept.load(Ordering::Acquire) {
            return;
        }
        match killpg(self.pgid, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid = self.pid(), ?signal, error = %e, "could not signal a process group"),
        }
    }

    /// The graceful stop, once the caller closed its stdin: waits `grace` for it to exit, then
    /// SIGTERM to the group, waits `grace` again, then SIGKILL, and reaps it. Whatever is left
    /// in its group afterwards is killed too. Answers how it ended.
    pub async fn stop(&self, grace: Duration) -> Option<ExitStatus> {
        if tokio::time::timeout(grace, self.wait()).await.is_err() {
            self.signal(Signal::SIGTERM);
            if tokio::time::timeout(grace, self.wait()).await.is_err() {
                self.signal(Signal::SIGKILL);
                let _ = tokio::time::timeout(REAP_WITHIN, self.wait()).await;
            }
        }
        self.sweep_if_ended();
        self.status()
    }

    /// Kills the group at once and reaps the process (one in no state to be asked to stop).
    pub async fn kill(&self) -> Option<ExitStatus> {
        self.signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(REAP_WITHIN, self.wait()).await;
        self.sweep_if_ended();
        self.status()
    }

    /// Kills what is left of the group once its leader was reaped (a grandchild that outlived its
    /// parent still holds the group).
    fn sweep_if_ended(&self) {
        if self.has_exited() {
            sweep(self.pgid, &self.swept);
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.dropped.cancel();
        // Synchronously, so nothing of the group outlives whoever held the guard, even when the
        // runtime is going away with it.
        self.signal(Signal::SIGKILL);
        groups::unregister(self.pid());
    }
}

/// SIGKILL to a group whose leader was reaped, once: from then on its id is not ours.
fn sweep(pgid: Pid, swept: &AtomicBool) {
    if !swept.swap(true, Ordering::AcqRel) {
        let _ = killpg(pgid, Signal::SIGKILL);
        groups::unregister(pgid.as_raw());
    }
}

/// On Linux, asks the kernel to send the child SIGTERM when the thread starting it ends, and
/// refuses to start it when this process died while it was being forked.
#[cfg(target_os = "linux")]
fn dies_with_this_process(command: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    let refuse = |errno: nix::errno::Errno| std::io::Error::from_raw_os_error(errno as i32);
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls may be made: it makes two plain system calls (prctl, getppid) and allocates nothing
    // (an io::Error from a raw errno holds no heap memory).
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(refuse)?;
            if nix::unistd::getppid() != parent {
                return Err(refuse(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sets the child's umask to 077 before it runs.
fn creates_private_files(command: &mut tokio::process::Command) {
    use nix::sys::stat::{umask, Mode};
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls may be made: umask is one plain system call that cannot fail, and nothing allocates.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            umask(Mode::from_bits_truncate(0o077));
            Ok(())
        });
    }
}

/// Elsewhere a worker watches its parent's pid instead (`agent_runner::parent`).
#[cfg(not(target_os = "linux"))]
fn dies_with_this_process(_command: &mut tokio::process::Command) {}

/// How a process ended, in words: "exited with code 3", "was killed by signal 9 (SIGKILL)".
pub fn describe_exit(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "ended (its exit status could not be read)".to_owned(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal} ({})", signal_name(signal)),
            (None, None) => "ended".to_owned(),
        },
    }
}

/// `SIGKILL` for 9, or `signal 99` for a number with no name.
pub fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("signal {signal}"))
}

async fn read_stderr(
    mut stderr: ChildStderr,
    tail: Tail,
    log: Option<(String, tracing::Level)>,
    done: watch::Sender<bool>,
    dropped: CancellationToken,
) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    loop {
        let n = tokio::select! {
            _ = dropped.cancelled() => break,
            read = stderr.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
        };
        tail.push(&buf[..n]);
        if let Some((label, level)) = &log {
            for &byte in &buf[..n] {
                if byte == b'\n' || line.len() >= LOG_LINE_BYTES {
                    log_line(label, *level, &line);
                    line.clear();
                }
                if byte != b'\n' {
                    line.push(byte);
                }
            }
        }
    }
    if let Some((label, level)) = &log {
        log_line(label, *level, &line);
    }
    let _ = done.send(true);
}

fn log_line(label: &str, level: tracing::Level, line: &[u8]) {
    let line = strip_ansi_escapes::strip_str(String::from_utf8_lossy(line));
    let line = line.trim_end();
    if line.trim().is_empty() {
        return;
    }
    if level == tracing::Level::INFO {
        tracing::info!(target: "child_stderr", "{label}: {line}");
    } else {
        tracing::debug!(target: "child_stderr", "{label}: {line}");
    }
}

#[cfg(test)]
mod tests;

//! A program on a pseudo-terminal (the `pty-process` crate), in a session of its own — and so a
//! process group of its own, led by the program — with the guard that ends it: dropping a
//! [`PtyProcess`] kills its group and everything else of its session at once (a shell's jobs run
//! in groups of their own inside the session).
//!
//! Nothing of it outlives the daemon: when the daemon dies, the pty's last handle closes, and the
//! kernel hangs the terminal up, which ends its shell (SIGHUP to the session's leader and its
//! foreground group; a shell passes it to its jobs). Its group is in the register of
//! `agent_runner::child::groups` beside every other child's, so the daemon's record names it and
//! a daemon that starts after a killed one ends it if it still runs.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agent_runner::child::groups;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use pty_process::{OwnedReadPty, OwnedWritePty, Size};

/// Why a program could not be started on a pty.
#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    /// No pseudo-terminal could be had.
    #[error("no pseudo-terminal could be opened: {0}")]
    Open(String),
    /// The program did not start.
    #[error("{program} could not be started in {cwd}: {why}")]
    Spawn {
        /// The program.
        program: String,
        /// Where.
        cwd: String,
        /// What the system said.
        why: String,
    },
}

/// A started program: its guard and the two halves of its pty.
pub struct Started {
    /// The guard.
    pub process: PtyProcess,
    /// What it prints.
    pub reader: OwnedReadPty,
    /// What it reads, and its size.
    pub writer: OwnedWritePty,
}

/// Starts `program` with `args` and `env` over the daemon's variables in `cwd` on a fresh pty of
/// `cols` × `rows`.
pub fn spawn(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
    cols: u16,
    rows: u16,
) -> Result<Started, PtyError> {
    let (pty, pts) = pty_process::open().map_err(|e| PtyError::Open(e.to_string()))?;
    pty.resize(Size::new(rows, cols)).map_err(|e| PtyError::Open(e.to_string()))?;
    let failed =
        |why: String| PtyError::Spawn { program: program.display().to_string(), cwd: cwd.display().to_string(), why };
    #[allow(clippy::disallowed_methods)] // the terminals' guard: a session and group of its own, adopted below
    let child = pty_process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env("TERM", "xterm-256color")
        .envs(env.iter().map(|(k, v)| (k, v)))
        // The daemon's own secrets are not the shell's.
        .env_remove("AHPD_TOKEN")
        .spawn(pts)
        .map_err(|e| failed(e.to_string()))?;
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()).filter(|id| *id > 0) else {
        return Err(failed("it has no process id".to_owned()));
    };
    let (reader, writer) = pty.into_split();
    groups::adopt(pid);
    tracing::debug!(pid, program = %program.display(), "started a program on a pty in its own session");
    let process = PtyProcess { child, pid, reaped: Arc::new(AtomicBool::new(false)) };
    Ok(Started { process, reader, writer })
}

/// A program on a pty: the leader of its own session and process group. Dropping it kills them.
pub struct PtyProcess {
    child: tokio::process::Child,
    pid: i32,
    reaped: Arc<AtomicBool>,
}

impl PtyProcess {
    /// Its pid, which is its session's and its group's id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A handle that ends it from elsewhere (until it was reaped).
    pub fn killer(&self) -> Killer {
        Killer { pid: self.pid, reaped: self.reaped.clone() }
    }

    /// Waits until it has exited, then ends what is left of its session. Answers its exit code
    /// (128 + the signal for one a signal ended, as a shell says it).
    pub async fn wait(&mut self) -> Option<i64> {
        let status = self.child.wait().await.ok();
        // What it left running still holds the terminal open; it goes with it.
        end_session(self.pid);
        self.reaped.store(true, Ordering::Release);
        groups::release(self.pid);
        status.map(exit_code)
    }
}

impl Drop for PtyProcess {
    fn drop(&mut self) {
        // Synchronously, so nothing of it outlives whoever held the guard.
        self.killer().kill();
        groups::release(self.pid);
    }
}

/// Ends a [`PtyProcess`] from outside the task that owns it.
#[derive(Clone)]
pub struct Killer {
    pid: i32,
    reaped: Arc<AtomicBool>,
}

impl Killer {
    /// Kills its group and session now, unless it was reaped already (its id may be another's
    /// from then on).
    pub fn kill(&self) {
        if !self.reaped.load(Ordering::Acquire) {
            end_session(self.pid);
        }
    }
}

/// An exit status as a shell reports it.
pub fn exit_code(status: ExitStatus) -> i64 {
    match (status.code(), status.signal()) {
        (Some(code), _) => i64::from(code),
        (None, Some(signal)) => 128 + i64::from(signal),
        (None, None) => 1,
    }
}

/// SIGKILL to the group `leader` leads and to every process of its session.
fn end_session(leader: i32) {
    let _ = killpg(Pid::from_raw(leader), Signal::SIGKILL);
    for pid in session_members(leader) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The processes whose session `leader` leads (from /proc; elsewhere none are found, and the
/// group alone is killed).
fn session_members(leader: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != leader && session_of(*pid) == Some(leader))
        .collect()
}

/// A process's session id, from `/proc/<pid>/stat` (the fourth field after the command's name).
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test's own session may be one made outside this pid namespace (its id reads as 0 in a
    // container), so the program started here is what is looked at.
    #[tokio::test]
    async fn a_program_on_a_pty_leads_its_own_session_and_goes_with_its_guard() {
        let cwd = std::env::temp_dir();
        let args = ["-c".to_owned(), "sleep 30 & sleep 30".to_owned()];
        let started = spawn(Path::new("/bin/sh"), &args, &[], &cwd, 80, 24).expect("a shell on a pty");
        let leader = started.process.pid();
        assert_eq!(session_of(leader), Some(leader));
        drop(started);
        // SIGKILL lands at once, but the state the kernel shows follows a moment later.
        let mut tries = 0;
        while !session_members(leader).into_iter().chain([leader]).all(is_gone) && tries < 500 {
            tries += 1;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(is_gone(leader), "the shell outlived its guard");
        assert!(session_members(leader).into_iter().all(is_gone), "its job outlived its guard");
    }

    /// Gone, or killed and not yet reaped (a zombie).
    fn is_gone(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
            .unwrap_or(true)
    }

    #[test]
    fn a_signal_exit_reads_as_a_shell_says_it() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}

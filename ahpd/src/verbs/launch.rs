//! Starting a daemon detached (for `ahpd start` and a restart's successor): this program run again
//! in its own session with stdin closed and its output appended to `daemon.log`, then a bounded
//! wait for its announcement there.
//!
//! The daemon rotates `daemon.log` itself while it runs (`crate::logging`), maybe before it has
//! announced itself; its stdout stays the file it was started with, so the wait reads that file
//! through the handle it shares, wherever the file has been moved to since.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::control::server::DETACHED_ENV;
use crate::paths::Paths;

/// How long a daemon may take to announce itself (its workers' first handshakes included).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How the daemon is run.
pub struct Launch {
    /// The program (this one).
    pub exe: PathBuf,
    /// Its arguments.
    pub argv: Vec<OsString>,
    /// Its working folder; this process's own when `None`.
    pub cwd: Option<PathBuf>,
    /// Its whole environment; this process's own when `None`.
    pub env: Option<Vec<(String, String)>>,
}

/// A daemon that announced itself.
pub struct Announced {
    /// Its pid.
    pub pid: u32,
    /// Its URL.
    pub url: String,
    /// The lines after the first (agents, sessions, config, token), without the pid line.
    pub facts: Vec<String>,
}

impl Announced {
    /// The facts as a person reads them: the page's address with the token, which the detached
    /// daemon left out of its log (found as the client verbs find it).
    pub async fn facts_for_a_person(&self, paths: &Paths) -> Vec<String> {
        let record = crate::control::Record::read(&paths.record()).ok().flatten();
        let args = crate::cli::ClientArgs::default();
        let token = super::remote::token(&args, paths, record.as_ref()).await.ok().flatten();
        self.facts
            .iter()
            .map(|fact| match (fact.strip_prefix("web: "), &token) {
                (Some(_), Some(token)) => format!("web: {}", crate::web::page_url(&self.url, Some(token))),
                _ => fact.clone(),
            })
            .collect()
    }
}

/// Why a daemon did not come up.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The log could not be opened.
    #[error("could not open {0}: {1}")]
    Log(String, std::io::Error),
    /// The program could not be run.
    #[error("could not run {0}: {1}")]
    Spawn(String, std::io::Error),
    /// It exited before it announced itself.
    #[error("it exited ({status}) before it announced itself; its log said:\n{said}")]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// The end of what it wrote.
        said: String,
    },
    /// It did not announce itself in time, and was stopped.
    #[error("it did not announce itself within {seconds} s and was stopped; its log said:\n{said}")]
    Silent {
        /// The bound.
        seconds: u64,
        /// The end of what it wrote.
        said: String,
    },
}

impl LaunchError {
    /// The exit code a verb answers with: a daemon that refused its options says 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Exited { status, .. } if status.code() == Some(2) => super::EXIT_USAGE,
            _ => super::EXIT_CONFLICT,
        }
    }
}

/// Starts the daemon and waits for its announcement.
pub async fn launch(paths: &Paths, launch: &Launch) -> Result<Announced, LaunchError> {
    let log_path = paths.log();
    let shown = log_path.display().to_string();
    crate::fsutil::create_private_dir(&paths.data_dir).map_err(|e| LaunchError::Log(shown.clone(), e))?;
    let log = std::fs::OpenOptions::new()
        .read(true)
        .create(true)
        .append(true)
        .mode(crate::fsutil::FILE_MODE)
        .open(&log_path)
        .map_err(|e| LaunchError::Log(shown.clone(), e))?;
    let offset = log.metadata().map(|m| m.len()).unwrap_or(0);
    let out_log = log.try_clone().map_err(|e| LaunchError::Log(shown.clone(), e))?;
    let err_log = log.try_clone().map_err(|e| LaunchError::Log(shown.clone(), e))?;
    let mut command = Command::new(&launch.exe);
    command.args(&launch.argv).stdin(Stdio::null()).stdout(out_log).stderr(err_log);
    if let Some(cwd) = &launch.cwd {
        command.current_dir(cwd);
    }
    if let Some(env) = &launch.env {
        command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    command.env(DETACHED_ENV, "1").env_remove(crate::daemon::CHECK_LINE_ENV);
    let mut child = agent_runner::child::detached(&mut command)
        .map_err(|e| LaunchError::Spawn(launch.exe.display().to_string(), e))?;
    wait_for_announcement(&mut child, &log, offset).await
}

async fn wait_for_announcement(child: &mut Child, log: &File, offset: u64) -> Result<Announced, LaunchError> {
    let pid = child.id();
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    let mut progress = super::progress::Progress::new();
    loop {
        progress.waiting(&format!("waiting for ahpd (pid {pid}) to start its agents and announce itself"));
        let said = read_from(log, offset);
        if let Some(announced) = announcement(&said, pid) {
            // Not waited for: the daemon outlives this process and is adopted when it exits.
            return Ok(announced);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let said = read_from(log, offset);
            return Err(LaunchError::Exited { status, said: tail(&said) });
        }
        if tokio::time::Instant::now() >= deadline {
            stop(child).await;
            return Err(LaunchError::Silent { seconds: READY_WITHIN.as_secs(), said: tail(&read_from(log, offset)) });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops a daemon that never announced itself: SIGTERM, a while to stop its workers, SIGKILL.
async fn stop(child: &mut Child) {
    let _ = crate::control::process::terminate(child.id());
    if !super::wait_for_exit(child.id(), Duration::from_secs(20)).await {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// What was written to `log` past `offset` (read at an offset: the handle's own position is shared
/// with the daemon's stdout).
fn read_from(log: &File, offset: u64) -> String {
    let mut text = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = offset;
    while let Ok(n) = log.read_at(&mut buf, at) {
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The last lines of what a daemon wrote, for an error a person reads.
fn tail(said: &str) -> String {
    let lines: Vec<&str> = said.lines().collect();
    let from = lines.len().saturating_sub(20);
    let tail = lines[from..].join("\n");
    if tail.trim().is_empty() {
        "(nothing)".into()
    } else {
        tail
    }
}

/// A log line (`<timestamp> <LEVEL> …`), as opposed to a line of the announcement.
fn is_log_line(line: &str) -> bool {
    line.starts_with(|c: char| c.is_ascii_digit())
}

/// Finds the announcement of daemon `pid` in `said`: the block from its `ahpd on ws://…` line to
/// its `pid <pid>` line. Log lines written meanwhile (stderr shares the file) are skipped.
pub fn announcement(said: &str, pid: u32) -> Option<Announced> {
    let lines: Vec<&str> = said.lines().collect();
    let pid_line = format!("pid {pid}");
    let end = lines.iter().position(|l| l.trim_end() == pid_line)?;
    let start = lines[..end].iter().rposition(|l| l.starts_with("ahpd on ws://"))?;
    let url = lines[start].strip_prefix("ahpd on ")?.trim().to_owned();
    let facts = lines[start + 1..end].iter().filter(|l| !is_log_line(l)).map(|l| (*l).to_owned()).collect();
    Some(Announced { pid, url, facts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announcement_is_found_between_log_lines() {
        let said = "2025-01-01T00:00:00Z  INFO worker echo is ready (Echo)\n\
                    ahpd on ws://127.0.0.1:41234\n\
                    agents: echo (configured)\n\
                    2025-01-01T00:00:01Z  WARN something else\n\
                    sessions in /d/sessions.db\n\
                    config: none (defaults)\n\
                    no token: loopback only\n\
                    pid 77\n";
        let found = announcement(said, 77).expect("found");
        assert_eq!(found.url, "ws://127.0.0.1:41234");
        assert_eq!(
            found.facts,
            vec![
                "agents: echo (configured)",
                "sessions in /d/sessions.db",
                "config: none (defaults)",
                "no token: loopback only"
            ]
        );
        assert!(announcement(said, 78).is_none(), "another daemon's block is not ours");
        assert!(announcement("ahpd on ws://x:1\nagents: none\n", 77).is_none(), "not complete yet");
    }
}

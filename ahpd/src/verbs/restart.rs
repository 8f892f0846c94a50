//! `ahpd restart [--force]`: ask the daemon whether it may be restarted and with what line, check
//! that this binary and today's config files can start with that line, stop the daemon
//! gracefully, start its successor with the same line (same folder, same environment), and wait
//! for its announcement. Every refusal before the stop leaves the old daemon running. A daemon a
//! service manager runs is restarted by that manager (or the person is told its command).

use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use super::launch::{self, Launch};
use super::{ask, fail, find, forget_stale, say, wait_for_exit, Found, EXIT_CONFLICT, EXIT_WITHIN};
use crate::control::{Line, Request, Status};
use crate::daemon::CHECK_LINE_ENV;
use crate::paths::Paths;
use crate::service::{self, Manager};

/// How long the check may take.
const CHECK_WITHIN: Duration = Duration::from_secs(10);

/// How long a restarted service may take to answer once the old daemon is gone.
const SUCCESSOR_WITHIN: Duration = Duration::from_secs(30);

/// Runs `ahpd restart`.
pub async fn run(paths: &Paths, force: bool) -> ExitCode {
    let manager = match find(paths).await {
        Found::Running(status) => super::service::manager_of(&status),
        Found::None => return fail(EXIT_CONFLICT, "None running."),
        Found::Stale { why } => {
            forget_stale(paths, &why);
            return fail(EXIT_CONFLICT, "None running.");
        }
        Found::Silent { record, why } => {
            return fail(
                EXIT_CONFLICT,
                &format!(
                    "ahpd pid {} ({}) does not answer ({why}), so it cannot be restarted; ahpd stop will end it.",
                    record.pid, record.url
                ),
            )
        }
    };
    let line = match ask(paths, &Request::PrepareRestart { force }).await {
        Ok(reply) if reply.ok => match reply.line {
            Some(line) => line,
            None => return fail(EXIT_CONFLICT, "It answered without the line it was started with."),
        },
        Ok(reply) => return fail(EXIT_CONFLICT, reply.error.as_deref().unwrap_or("It refused to restart.")),
        Err(e) => return fail(EXIT_CONFLICT, &e.to_string()),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return fail(EXIT_CONFLICT, &format!("could not find this program's own path: {e}")),
    };
    let checked = super::progress::saying(
        "checking that this ahpd and today's config files can start with the daemon's line",
        check(&exe, &line),
    )
    .await;
    if let Err(why) = checked {
        return fail(EXIT_CONFLICT, &format!("Its line cannot start now, so it was not stopped: {why}"));
    }
    // Until the successor answers: an `ahpd --stdio` arriving meanwhile waits for it.
    let _restarting = crate::control::restarting::mark(paths);
    if let Some(manager) = manager {
        return by_manager(paths, manager, line.pid).await;
    }
    // Refused if a turn started since the preparation (unless forced).
    match ask(paths, &Request::Stop { unless_busy: !force }).await {
        Ok(reply) if reply.ok => {}
        Ok(reply) => return fail(EXIT_CONFLICT, reply.error.as_deref().unwrap_or("It refused to stop.")),
        Err(e) => return fail(EXIT_CONFLICT, &format!("{e}; it was not stopped.")),
    }
    if !wait_for_exit(line.pid, EXIT_WITHIN).await {
        return fail(
            EXIT_CONFLICT,
            &format!("pid {} is still stopping after {} s; no successor was started.", line.pid, EXIT_WITHIN.as_secs()),
        );
    }
    crate::control::record::remove_if_ours(&paths.record(), line.pid);
    let launch = Launch {
        exe,
        argv: line.argv.iter().map(OsString::from).collect(),
        cwd: Some(line.cwd.clone()),
        env: Some(line.env.clone()),
    };
    match launch::launch(paths, &launch).await {
        Ok(started) => {
            say(&format!("ahpd on {} (pid {}), restarted from pid {}", started.url, started.pid, line.pid));
            for fact in &started.facts_for_a_person(paths).await {
                say(fact);
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_CONFLICT, &format!("Could not restart it: {e}")),
    }
}

/// Asks the service manager that runs the daemon to restart it, and waits for its successor.
async fn by_manager(paths: &Paths, manager: Manager, old: u32) -> ExitCode {
    let command = manager.restart_command();
    if let Err(why) = service::run(&command) {
        return fail(
            EXIT_CONFLICT,
            &format!(
                "This daemon runs under {}, which did not restart it: `{}` said: {why}\nRestart it with: {}",
                manager.name(),
                service::shown(&command),
                service::shown(&command)
            ),
        );
    }
    let what = format!("waiting for {} to restart ahpd (pid {old})", manager.name());
    match super::progress::saying(&what, successor(paths, old)).await {
        Some(status) => {
            say(&format!(
                "ahpd on {} (pid {}), restarted by {} from pid {old}",
                status.url,
                status.pid,
                manager.name()
            ));
            ExitCode::SUCCESS
        }
        None => fail(
            EXIT_CONFLICT,
            &format!("{} was asked to restart it, but no new ahpd answered; see ahpd logs", manager.name()),
        ),
    }
}

/// The daemon that answers for this data folder once `old` is gone.
async fn successor(paths: &Paths, old: u32) -> Option<Status> {
    let deadline = tokio::time::Instant::now() + EXIT_WITHIN + SUCCESSOR_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if let Found::Running(status) = find(paths).await {
            if status.pid != old && !status.url.is_empty() {
                return Some(status);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Runs this binary with the daemon's line, folder and environment, only to read its options and
/// config; answers why it could not start.
async fn check(exe: &Path, line: &Line) -> Result<(), String> {
    let mut command = std::process::Command::new(exe);
    command
        .args(&line.argv)
        .current_dir(&line.cwd)
        .env_clear()
        .envs(line.env.iter().map(|(k, v)| (k, v)))
        .env(CHECK_LINE_ENV, "1")
        // A check is not the daemon: it stays in the group it is run in, which ends it whole.
        .env_remove(crate::control::server::DETACHED_ENV)
        .stdin(Stdio::null());
    let checked = tokio::task::spawn_blocking(move || agent_runner::child::run_within(command, CHECK_WITHIN))
        .await
        .map_err(|e| format!("could not run {}: {e}", exe.display()))?;
    let output = checked
        .map_err(|e| format!("could not run {}: {e}", exe.display()))?
        .ok_or_else(|| format!("{} did not finish its check within {} s", exe.display(), CHECK_WITHIN.as_secs()))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(first_paragraph(&said).unwrap_or_else(|| format!("{} exited ({})", exe.display(), output.status)))
}

/// The first paragraph of what a person was told (log lines left out).
fn first_paragraph(said: &str) -> Option<String> {
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| !l.starts_with(|c: char| c.is_ascii_digit()))
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .collect();
    (!lines.is_empty()).then(|| lines.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_the_first_paragraph_without_log_lines() {
        let said = "2025-01-01T00:00:00Z  WARN x: colour is not a setting ahpd knows; ignored\n\
                    /c/config.json: port must be an integer between 0 and 65535\n";
        assert_eq!(
            first_paragraph(said).as_deref(),
            Some("/c/config.json: port must be an integer between 0 and 65535")
        );
        let clap = "error: unexpected argument '--colour' found\n\n  tip: …\n\nUsage: ahpd [OPTIONS]\n";
        assert_eq!(first_paragraph(clap).as_deref(), Some("error: unexpected argument '--colour' found"));
        assert_eq!(first_paragraph(""), None);
    }
}

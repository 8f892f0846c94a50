//! `ahpd status [--json]`: where the running daemon listens, its pid and uptime, its sessions,
//! agents (and whether each worker runs) and running turns.

use std::process::ExitCode;

use super::{fail, find, forget_stale, say, Found, EXIT_CONFLICT};
use crate::control::Status;
use crate::paths::Paths;

/// Runs `ahpd status`.
pub async fn run(paths: &Paths, json: bool) -> ExitCode {
    match find(paths).await {
        Found::Running(status) => {
            if json {
                match serde_json::to_string_pretty(&status) {
                    Ok(text) => say(&text),
                    Err(e) => return fail(EXIT_CONFLICT, &e.to_string()),
                }
            } else {
                for line in describe(&status) {
                    say(&line);
                }
            }
            ExitCode::SUCCESS
        }
        Found::None => fail(EXIT_CONFLICT, "None running."),
        Found::Stale { why } => {
            forget_stale(paths, &why);
            fail(EXIT_CONFLICT, "None running.")
        }
        Found::Silent { record, why } => fail(
            EXIT_CONFLICT,
            &format!("ahpd pid {} ({}) is running but does not answer: {why}", record.pid, record.url),
        ),
    }
}

/// The lines a person reads.
pub fn describe(status: &Status) -> Vec<String> {
    let url = if status.url.is_empty() { "(starting)" } else { status.url.as_str() };
    let mut lines = vec![format!(
        "ahpd on {url} (pid {}), up {}, since {}",
        status.pid,
        uptime(status.uptime_seconds),
        status.started_at
    )];
    lines.push(match (&status.service, &status.log) {
        (Some(manager), Some(log)) => format!("run by {manager} (ahpd service); log: {}", log.display()),
        (None, Some(log)) if status.detached => format!("started by ahpd start; log: {}", log.display()),
        _ => format!("runs in the foreground, started in {}", status.cwd.display()),
    });
    lines.push(format!(
        "sessions: {}, {} loaded in memory (in {})",
        status.host.sessions,
        status.host.loaded_sessions,
        status.store.display()
    ));
    let agents: Vec<String> = status
        .host
        .agents
        .iter()
        .map(|a| format!("{} ({})", a.provider, if a.running { "running" } else { "not running" }))
        .collect();
    lines.push(format!("agents: {}", if agents.is_empty() { "none".to_owned() } else { agents.join(", ") }));
    let turns = &status.host.running_turns;
    lines.push(if turns.is_empty() {
        "turns running: none".to_owned()
    } else {
        let chats: Vec<&str> = turns.iter().map(|t| t.chat.as_str()).collect();
        format!("turns running: {} ({})", turns.len(), chats.join(", "))
    });
    lines
}

/// "5 s", "3 min 2 s", "2 h 5 min", "3 d 4 h".
pub fn uptime(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_naturally() {
        assert_eq!(uptime(5), "5 s");
        assert_eq!(uptime(182), "3 min 2 s");
        assert_eq!(uptime(2 * 3600 + 5 * 60 + 9), "2 h 5 min");
        assert_eq!(uptime(3 * 86_400 + 4 * 3600), "3 d 4 h");
    }
}

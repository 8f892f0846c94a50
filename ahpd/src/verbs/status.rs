//! `ahpd status [--json]`: where the running daemon listens, its pid and uptime, its sessions,
//! agents (and whether each worker runs), running turns, backend sessions open and the processes
//! under the daemon (workers and what they run) with their resident memory.

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
    if let Some(sentence) = &status.host.store_cannot_write {
        lines.push(sentence.clone());
    }
    lines.extend(store_lines(status));
    lines.extend(agent_merge_lines(status));
    lines.extend(box_lines(status));
    lines.push(match status.host.max_backend_processes {
        0 => format!("backend sessions open: {}", status.host.backend_sessions),
        cap => format!("backend sessions open: {} of at most {cap}", status.host.backend_sessions),
    });
    lines.push(processes_line(&status.host.processes));
    let agents: Vec<String> = status
        .host
        .agents
        .iter()
        .map(|a| format!("{} ({})", a.provider, if a.running { "running" } else { "not running" }))
        .collect();
    lines.push(format!("agents: {}", if agents.is_empty() { "none".to_owned() } else { agents.join(", ") }));
    lines.extend(status.host.remotes.iter().map(remote_line));
    let turns = &status.host.running_turns;
    lines.push(if turns.is_empty() {
        "turns running: none".to_owned()
    } else {
        let chats: Vec<&str> = turns.iter().map(|t| t.chat.as_str()).collect();
        format!("turns running: {} ({})", turns.len(), chats.join(", "))
    });
    lines
}

/// What became of a damaged store at start, and the newest backup.
fn store_lines(status: &Status) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(recovery) = &status.store_recovered {
        lines.push(format!("store recovered at {}: {}", recovery.at, recovery.describe()));
    }
    lines.push(match status.store_backups.first() {
        Some(newest) => format!("store backups: {} kept, the newest {}", status.store_backups.len(), newest.display()),
        None => "store backups: none yet".to_owned(),
    });
    lines
}

/// One remote host: `remote devbox (ssh -T devbox ahpd --stdio): connected; agents echo@devbox,
/// notes@devbox; 3 sessions`.
pub fn remote_line(remote: &serde_json::Value) -> String {
    let text = |key: &str| remote[key].as_str().unwrap_or_default().to_owned();
    let agents: Vec<&str> = remote["agents"].as_array().into_iter().flatten().filter_map(|a| a.as_str()).collect();
    let agents = if agents.is_empty() { "none known yet".to_owned() } else { agents.join(", ") };
    format!(
        "remote {} ({}): {}; agents {agents}; {} sessions",
        text("name"),
        text("reach"),
        text("state"),
        remote["sessions"].as_u64().unwrap_or(0)
    )
}

/// Each confined session's box: `box: ahp-session:/… sandbox (bubblewrap) in /w/wt, reaches
/// 127.0.0.1:4000; computers: computer://c1 on img (unix:///…)`.
fn box_lines(status: &Status) -> Vec<String> {
    status
        .boxes
        .iter()
        .map(|b| {
            let text = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
            let list = |k: &str| {
                b[k].as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", "))
                    .unwrap_or_default()
            };
            let mut line = format!("box: {}", text("session"));
            if text("level") == "container" {
                line.push_str(&container_line(b));
            } else if !text("level").is_empty() {
                line.push_str(&format!(
                    " {} ({}) in {}, reaches {}",
                    text("level"),
                    text("engine"),
                    text("worktree"),
                    list("reaches")
                ));
            }
            if !list("computers").is_empty() {
                line.push_str(&format!("; computers: {}", list("computers")));
            }
            line
        })
        .collect()
}

/// A container session's box after its session: ` container ab12cd34ef56 on img (engine
/// unix:///…) in /w/wt; 41 MiB, 0.3 s of CPU; limits 1.5 CPUs, 256 MiB`.
fn container_line(b: &serde_json::Value) -> String {
    let text = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
    let id: String = text("container").chars().take(12).collect();
    let image = if text("image").is_empty() { "an image still being made".to_owned() } else { text("image") };
    let mut line = format!(" container {id} on {image} (engine {}) in {}", text("engine"), text("worktree"));
    if let (Some(memory), Some(cpu)) = (b["memoryBytes"].as_u64(), b["cpuNanoseconds"].as_u64()) {
        line.push_str(&format!("; {:.0} MiB, {:.1} s of CPU", memory as f64 / 1048576.0, cpu as f64 / 1e9));
    }
    let limits: Vec<String> = [
        b["cpuLimit"].as_f64().map(|c| format!("{c} CPUs")),
        b["memoryLimitBytes"].as_u64().map(|m| format!("{:.0} MiB", m as f64 / 1048576.0)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !limits.is_empty() {
        line.push_str(&format!("; limits {}", limits.join(", ")));
    }
    line
}

/// The folders Agent Merge is on for: `agent merge: /w/repo on feature (watches checks, reviews;
/// merges never; backingOff until 2026-…: Server Error), session ahp-session:/…`.
fn agent_merge_lines(status: &Status) -> Vec<String> {
    status
        .agent_merge
        .iter()
        .map(|f| {
            let branch = f.branch.as_deref().unwrap_or("(no branch)");
            let watches = if f.watches.is_empty() { "nothing".to_owned() } else { f.watches.join(", ") };
            let next = f.retry_at.as_deref().map(|at| format!(" until {at}")).unwrap_or_default();
            let why = f.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            format!(
                "agent merge: {} on {branch} (watches {watches}; merges {}; {}{next}{why}), session {}",
                f.folder.display(),
                f.merges,
                f.monitoring,
                f.session
            )
        })
        .collect()
}

/// The processes under the daemon, each with its resident memory: `processes under the daemon:
/// 2, 212 MiB resident (ahpd 1201 31 MiB, claude 1230 181 MiB)`.
pub fn processes_line(processes: &[crate::procs::ProcessStatus]) -> String {
    if processes.is_empty() {
        return "processes under the daemon: none".to_owned();
    }
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let total: u64 = processes.iter().filter_map(|p| p.rss_bytes).sum();
    let each: Vec<String> = processes
        .iter()
        .map(|p| match p.rss_bytes {
            Some(bytes) => format!("{} {} {:.0} MiB", p.command, p.pid, mib(bytes)),
            None => format!("{} {}", p.command, p.pid),
        })
        .collect();
    format!("processes under the daemon: {}, {:.0} MiB resident ({})", processes.len(), mib(total), each.join(", "))
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
    fn processes_are_listed_with_their_memory() {
        let p = |pid, rss| crate::procs::ProcessStatus { pid, parent: 1, command: "claude".into(), rss_bytes: rss };
        assert_eq!(processes_line(&[]), "processes under the daemon: none");
        assert_eq!(
            processes_line(&[p(7, Some(3 << 20)), p(8, None)]),
            "processes under the daemon: 2, 3 MiB resident (claude 7 3 MiB, claude 8)"
        );
    }

    #[test]
    fn uptime_reads_naturally() {
        assert_eq!(uptime(5), "5 s");
        assert_eq!(uptime(182), "3 min 2 s");
        assert_eq!(uptime(2 * 3600 + 5 * 60 + 9), "2 h 5 min");
        assert_eq!(uptime(3 * 86_400 + 4 * 3600), "3 d 4 h");
    }
}

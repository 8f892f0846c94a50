//! The processes the daemon runs, read from `/proc` for `ahpd status`: its workers and what each
//! of them runs (a Claude or pi process per open chat), with the memory each holds resident.
//! Elsewhere than Linux there is no `/proc` to read, and the list is empty.

use serde::{Deserialize, Serialize};

/// One process under the daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid (the daemon for a worker, a worker for what that worker runs).
    pub parent: u32,
    /// Its command's name, as the kernel keeps it (`comm`).
    pub command: String,
    /// Its resident memory in bytes (`VmRSS`), when `/proc` says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

/// Every process whose ancestor is `root`, parents before their children.
pub fn descendants_of(root: u32) -> Vec<ProcessStatus> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let all: Vec<(u32, u32, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (parent, command) = parse_stat(&stat)?;
            Some((pid, parent, command))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, _, command) in all.iter().filter(|(_, p, _)| *p == parent) {
            frontier.push(*pid);
            found.push(ProcessStatus { pid: *pid, parent, command: command.clone(), rss_bytes: rss_of(*pid) });
        }
    }
    found
}

/// The parent pid and command name from a `/proc/<pid>/stat` line (the command, in parentheses,
/// may hold spaces and parentheses itself: the last `)` ends it).
fn parse_stat(stat: &str) -> Option<(u32, String)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let command = head.split_once('(')?.1.to_owned();
    let parent = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((parent, command))
}

/// `VmRSS` of `pid` in bytes.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_names_its_parent_and_command() {
        assert_eq!(parse_stat("42 (node (x) y) S 7 42 42 0"), Some((7, "node (x) y".to_owned())));
    }

    #[tokio::test]
    async fn a_child_of_this_process_is_found_with_its_memory() {
        let (child, _pipes) = agent_runner::child::ChildCommand::new("sleep").args(["30"]).spawn().expect("sleep runs");
        let found = descendants_of(std::process::id());
        let pid = u32::try_from(child.pid()).expect("a pid");
        drop(child);
        let me = found.iter().find(|p| p.pid == pid).expect("the child is listed");
        assert_eq!(me.command, "sleep");
        assert!(me.rss_bytes.is_some_and(|b| b > 0));
    }
}

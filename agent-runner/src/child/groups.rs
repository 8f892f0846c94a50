//! This process's register of the process groups its tree runs in: the groups of the children it
//! started (in until they are killed), and the groups each child said it started in turn. A
//! worker reports the register to its parent (`process/groups`), the daemon writes it into its
//! record, and a process whose parent died ends every group in it before it exits.
//!
//! A group named by someone else (a child's report, a dead daemon's record) is only killed after
//! checking it is still that group: process ids are reused, and a group is taken to be the same
//! when its leader is the same process (same start) or, the leader gone, when processes of the
//! group still run (an id is never given out while a group holds it).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
pub use protocol::ProcessGroup;
use tokio::sync::watch;

#[derive(Debug, Default, Clone, PartialEq)]
struct Register {
    /// The groups of the children this process started, by pgid.
    own: BTreeMap<i32, ProcessGroup>,
    /// What each child (by its pgid) said its own tree runs in.
    reported: BTreeMap<i32, Vec<ProcessGroup>>,
}

static REGISTER: LazyLock<watch::Sender<Register>> = LazyLock::new(|| watch::Sender::new(Register::default()));

pub(super) fn register(group: ProcessGroup) {
    REGISTER.send_modify(|r| {
        r.own.insert(group.pgid, group);
    });
}

/// Puts in the register the group of a child this process started otherwise than through
/// [`super::ChildCommand`] (a program on a pseudo-terminal leads a session of its own, which a pipe
/// child does not), so it is recorded and ended like the others; [`release`] takes it out once it
/// was killed or reaped.
pub fn adopt(pgid: i32) {
    register(ProcessGroup { pgid, leader_start: leader_start(pgid).unwrap_or_default() });
}

/// Takes an adopted group out of the register.
pub fn release(pgid: i32) {
    unregister(pgid);
}

/// Takes a child's group out of the register (it was killed), and ends what it reported.
pub(super) fn unregister(pgid: i32) {
    REGISTER.send_if_modified(|r| r.own.remove(&pgid).is_some());
    end_reported(pgid);
}

/// Ends what the child leading `pgid` reported (it died: nothing is left to stop them).
pub(super) fn end_reported(pgid: i32) {
    let mut reported = Vec::new();
    REGISTER.send_if_modified(|r| {
        reported = r.reported.remove(&pgid).unwrap_or_default();
        !reported.is_empty()
    });
    for group in &reported {
        if end_if_ours(group) == GroupEnd::Ended {
            tracing::debug!(pgid = group.pgid, "ended a process group a dead child had started");
        }
    }
}

/// Notes what the child leading `pgid` said its tree runs in now (replacing what it said before).
pub(super) fn report(pgid: i32, groups: Vec<ProcessGroup>) {
    REGISTER.send_if_modified(|r| {
        if !r.own.contains_key(&pgid) {
            // Its guard is gone already: what it started was ended with it.
            return false;
        }
        let changed = r.reported.get(&pgid) != Some(&groups);
        r.reported.insert(pgid, groups);
        changed
    });
}

/// Every group of this process's tree: its children's, and what they reported.
pub fn recorded() -> Vec<ProcessGroup> {
    let register = REGISTER.borrow();
    let mut all: Vec<ProcessGroup> = register.own.values().cloned().collect();
    all.extend(register.reported.values().flatten().cloned());
    all.sort();
    all.dedup();
    all
}

/// Says when the register changes (a child started or ended, a child reported).
pub struct Changes(watch::Receiver<Register>);

impl Changes {
    /// Waits for the next change.
    pub async fn changed(&mut self) {
        // The sender is a static: it is never dropped.
        let _ = self.0.changed().await;
    }
}

/// Follows the register's changes from now on.
pub fn changes() -> Changes {
    Changes(REGISTER.subscribe())
}

/// Ends, at once and synchronously, every group of this process's tree: for a process whose
/// parent is gone, just before it exits.
pub fn end_all() {
    let register = REGISTER.borrow().clone();
    for group in register.own.values() {
        let _ = killpg(Pid::from_raw(group.pgid), Signal::SIGKILL);
    }
    for group in register.reported.values().flatten() {
        end_if_ours(group);
    }
}

/// What [`end_if_ours`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupEnd {
    /// It was still that group: every process in it was sent SIGKILL.
    Ended,
    /// No process of it runs any more.
    Gone,
    /// Its id now belongs to another process (or to this process's own group): left alone.
    NotOurs,
}

/// Kills `group` if it is still the group that was named (see the module's note on reused ids).
pub fn end_if_ours(group: &ProcessGroup) -> GroupEnd {
    if group.pgid <= 1 || Pid::from_raw(group.pgid) == nix::unistd::getpgrp() {
        return GroupEnd::NotOurs;
    }
    let pgid = Pid::from_raw(group.pgid);
    match leader_start(group.pgid) {
        Some(start) if !group.leader_start.is_empty() && start == group.leader_start => kill(pgid),
        Some(_) => GroupEnd::NotOurs,
        // The leader is gone; while any process of the group runs, its id is still the group's.
        None => match killpg(pgid, None) {
            Ok(()) => kill(pgid),
            Err(Errno::ESRCH) => GroupEnd::Gone,
            Err(_) => GroupEnd::NotOurs,
        },
    }
}

fn kill(pgid: Pid) -> GroupEnd {
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) => GroupEnd::Ended,
        Err(Errno::ESRCH) => GroupEnd::Gone,
        Err(_) => GroupEnd::NotOurs,
    }
}

/// When process `pid` started, as a string only compared with another; `None` when no such
/// process exists. On Linux the boot's id and the start in clock ticks since boot (from /proc);
/// elsewhere what `ps` says.
pub fn leader_start(pid: i32) -> Option<String> {
    if std::path::Path::new("/proc/self/stat").exists() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold anything; the fields after it start
        // with the state (field 3), so the start time (field 22) is the 20th.
        let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.to_owned();
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        Some(format!("{}:{start}", boot.trim()))
    } else {
        let mut ps = std::process::Command::new("ps");
        ps.args(["-o", "lstart=", "-p", &pid.to_string()]).stdin(std::process::Stdio::null());
        let out = super::run_to_end(ps).ok()?;
        let start = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !start.is_empty()).then_some(start)
    }
}

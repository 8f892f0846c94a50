//! What the bench reads of a process from `/proc`: CPU time (its own and its reaped children's) and
//! resident memory (`VmRSS`, `VmHWM`).

use std::collections::HashMap;

/// Clock ticks per second, as `/proc/<pid>/stat` counts them: Linux's `USER_HZ`, 100 on every
/// architecture (so a figure is good to 10 ms a process).
const TICKS_PER_SECOND: f64 = 100.0;

/// The fields of `/proc/<pid>/stat` after the command (which may hold spaces), from the state on.
fn stat_fields(pid: i32) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // The state (a letter) reads as 0; the numbers keep their places.
    rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect()
}

/// CPU a process spent so far, in ms: (its own user + system, its waited-for children's).
pub fn cpu_ms(pid: i32) -> (f64, f64) {
    let fields = stat_fields(pid);
    let field = |i: usize| fields.get(i).copied().unwrap_or(0) as f64;
    let ms = 1000.0 / TICKS_PER_SECOND;
    // utime, stime, cutime, cstime are fields 14–17 of stat: 11–14 counted from the state.
    ((field(11) + field(12)) * ms, (field(13) + field(14)) * ms)
}

/// The CPU of `root`'s descendants, pid by pid, and what `root` reaped of its children so far.
#[derive(Debug, Default, Clone)]
pub struct TreeCpu {
    alive: HashMap<i32, f64>,
    reaped_ms: f64,
}

impl TreeCpu {
    /// Reads it now.
    pub fn of(root: i32) -> Self {
        let alive = tests::daemon::descendants(root).into_iter().map(|pid| (pid, cpu_ms(pid).0)).collect();
        Self { alive, reaped_ms: cpu_ms(root).1 }
    }

    /// The CPU the tree spent between `self` and `later` (a process gone in between counts with
    /// what its parent reaped when it is the root's child; a grandchild that ended is lost).
    pub fn spent_until(&self, later: &TreeCpu) -> f64 {
        let live: f64 = later.alive.iter().map(|(pid, ms)| ms - self.alive.get(pid).copied().unwrap_or(0.0)).sum();
        live + (later.reaped_ms - self.reaped_ms)
    }
}

/// A process's resident memory now and at its peak, in KiB (`VmRSS`, `VmHWM`).
pub fn rss_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// KiB as MiB, for printing.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

//! `scripts/load`: 20 clients on 50 streaming sessions for 5 minutes (by default), connecting and
//! disconnecting at random, on loopback only. Prints what it counted and the daemon's memory before,
//! during and after; exits non-zero when a folded state differed from its snapshot or the memory did
//! not return near its level before the load.
//! Options: --seconds N --clients N --sessions N --pace-ms N --words N --seed N --idle-unload-ms N
//! (sessions nobody watches leave memory after this; 0 keeps them).

use std::time::Duration;

use tests::load::{run, LoadPlan};

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

fn plan() -> LoadPlan {
    let d = LoadPlan::default();
    let size = |name: &str, default: usize| arg(name).and_then(|v| usize::try_from(v).ok()).unwrap_or(default);
    LoadPlan {
        clients: size("--clients", d.clients),
        sessions: size("--sessions", d.sessions),
        duration: arg("--seconds").map(Duration::from_secs).unwrap_or(d.duration),
        pace_ms: arg("--pace-ms").unwrap_or(d.pace_ms),
        words: size("--words", d.words),
        seed: arg("--seed").unwrap_or(d.seed),
        idle_unload_ms: arg("--idle-unload-ms").unwrap_or(d.idle_unload_ms),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let plan = plan();
    match run(&plan).await {
        Ok(report) => {
            for line in report.lines(&plan) {
                println!("{line}");
            }
            if report.memory_returned() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("load: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! The verbs that manage a daemon from another process: `ahpd start|stop|status|restart|config|user`,
//! `ahpd agents|logs|service|store|completions`, and the terminal client on the official `ahp` crate:
//! `ahpd sessions|changes|send|watch|connect`. They find the running daemon through its record and
//! control socket (`crate::control`).
//!
//! Exit codes: 0 done; 1 a state conflict (none running, one running, a turn running, a line that
//! cannot start); 2 bad usage or a configuration that cannot start.

pub mod agents;
pub mod automations;
pub mod bridge;
pub mod changes;
pub mod config;
pub mod connect;
pub mod follow;
pub mod launch;
pub mod logs;
pub mod progress;
pub mod remote;
pub mod restart;
pub mod send;
pub mod service;
pub mod sessions;
pub mod start;
pub mod status;
pub mod stop;
pub mod store;
pub mod user;
pub mod watch;

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::Verb;
use crate::control::client::{self, AskError};
use crate::control::{process, record, Record, Reply, Request, Status};
use crate::paths::Paths;

/// Exit code for a state conflict.
pub const EXIT_CONFLICT: u8 = 1;

/// Exit code for bad usage.
pub const EXIT_USAGE: u8 = crate::daemon::EXIT_USAGE;

/// How long a status request may take.
const ASK_WITHIN: Duration = Duration::from_secs(10);

/// How long a stopping daemon may take to exit (it gives its own tasks 15 s).
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// Runs a verb other than `worker`.
pub fn run(verb: Verb) -> ExitCode {
    if let Verb::Config(args) = &verb {
        return config::run(args);
    }
    if let Verb::User(args) = &verb {
        return user::run(args);
    }
    if let Verb::Completions { shell } = verb {
        let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
        // Made whole first: a reader that goes away (`| head`) is not an error.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, "ahpd", &mut script);
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), &script);
        return ExitCode::SUCCESS;
    }
    if let Verb::Agents(args) = &verb {
        return agents::run(args);
    }
    if let Verb::Plugin { action: crate::cli::PluginAction::List(args) } = &verb {
        return agents::plugins(args);
    }
    if let Verb::Logs { lines, follow } = verb {
        return logs::run(lines, follow);
    }
    let paths = match Paths::platform() {
        Ok(paths) => paths,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(EXIT_CONFLICT, &format!("could not start the async runtime: {e}")),
    };
    runtime.block_on(async {
        match verb {
            Verb::Start(args) => start::run(&paths, &args.daemon).await,
            Verb::Stop => stop::run(&paths).await,
            Verb::Status { json } => status::run(&paths, json).await,
            Verb::Restart { force } => restart::run(&paths, force).await,
            Verb::Service(args) => service::run(&paths, &args.action).await,
            Verb::Store(args) => store::run(&paths, &args).await,
            Verb::Sessions(args) => sessions::run(&args).await,
            Verb::Automations(args) => automations::run(&args).await,
            Verb::Changes(args) => changes::run(&args).await,
            Verb::Send(args) => send::run(&args).await,
            Verb::Watch(args) => watch::run(&args).await,
            Verb::Connect(args) => connect::run(&args).await,
            Verb::Config(_)
            | Verb::User(_)
            | Verb::Agents(_)
            | Verb::Plugin { .. }
            | Verb::Completions { .. }
            | Verb::Logs { .. }
            | Verb::Worker { .. }
            | Verb::BoxRun(_)
            | Verb::BoxExec(_) => ExitCode::from(EXIT_USAGE),
        }
    })
}

/// Prints a line to stdout; a reader that went away (`ahpd status | head -1`) is not an error.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Prints `why` to stderr and answers `code`.
pub fn fail(code: u8, why: &str) -> ExitCode {
    eprintln!("{why}");
    ExitCode::from(code)
}

/// What the record and the socket say about a daemon for this data folder.
pub enum Found {
    /// No record, and nothing answers.
    None,
    /// A daemon answers.
    Running(Status),
    /// A record names a daemon that is gone (or a record that cannot be read).
    Stale {
        /// Why it is stale, as a sentence.
        why: String,
    },
    /// The recorded ahpd process is alive but does not answer on its control socket.
    Silent {
        /// The record.
        record: Record,
        /// What went wrong when it was asked.
        why: String,
    },
}

/// Finds the daemon for `paths`. A live ahpd that does not answer may be stopping: it is given a
/// while to exit before it counts as silent.
pub async fn find(paths: &Paths) -> Found {
    let record = match Record::read(&paths.record()) {
        Ok(record) => record,
        Err(e) => return Found::Stale { why: e.to_string() },
    };
    let Some(record) = record else {
        // A daemon writes its record once its port is bound; one that is starting answers anyway.
        return match ask_status(paths).await {
            Ok(status) => Found::Running(status),
            Err(_) => Found::None,
        };
    };
    if !process::alive(record.pid) {
        return Found::Stale { why: format!("pid {} ({}) is not running", record.pid, record.url) };
    }
    if !process::looks_like_ahpd(record.pid) {
        return Found::Stale { why: format!("pid {} is no longer an ahpd", record.pid) };
    }
    match ask_status(paths).await {
        Ok(status) => Found::Running(status),
        Err(why) => {
            if wait_for_exit(record.pid, Duration::from_secs(10)).await {
                Found::Stale { why: format!("pid {} ({}) has exited", record.pid, record.url) }
            } else {
                Found::Silent { record, why }
            }
        }
    }
}

/// Removes a stale record and says so.
pub fn forget_stale(paths: &Paths, why: &str) {
    let ended = crate::control::tree::end_leftovers(paths);
    record::remove(&paths.record());
    eprintln!("Removed a stale record: {why}.");
    if ended > 0 {
        eprintln!("Ended {ended} process group(s) it left running.");
    }
}

async fn ask_status(paths: &Paths) -> Result<Status, String> {
    match client::ask(&paths.socket(), &Request::Status, ASK_WITHIN).await {
        Ok(Reply { status: Some(status), .. }) => Ok(status),
        Ok(reply) => Err(reply.error.unwrap_or_else(|| "it answered without a status".into())),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends `request` to the running daemon.
pub async fn ask(paths: &Paths, request: &Request) -> Result<Reply, AskError> {
    client::ask(&paths.socket(), request, ASK_WITHIN).await
}

/// Waits until `pid` has exited, at most `within`, saying so after a second; answers whether it
/// did.
pub async fn wait_for_exit(pid: u32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut progress = progress::Progress::new();
    while process::alive(pid) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        progress.waiting(&format!("waiting for ahpd (pid {pid}) to stop its workers and exit"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// A SIGTERM to a daemon that does not answer on its socket, then a wait for it to exit.
pub async fn terminate_and_wait(record: &Record) -> Result<(), String> {
    if !process::looks_like_ahpd(record.pid) {
        return Err(format!("pid {} is not an ahpd; not signalling it", record.pid));
    }
    process::terminate(record.pid).map_err(|e| format!("could not signal pid {}: {e}", record.pid))?;
    if wait_for_exit(record.pid, EXIT_WITHIN).await {
        Ok(())
    } else {
        Err(format!("pid {} is still stopping after {} s", record.pid, EXIT_WITHIN.as_secs()))
    }
}

//! `ahpd start`: check the options and config, refuse when a daemon already runs (after removing a
//! stale record), start one detached, wait for its announcement, and print where it is.

use std::ffi::OsString;
use std::process::ExitCode;

use super::launch::{self, Launch};
use super::{fail, find, forget_stale, say, Found, EXIT_CONFLICT, EXIT_USAGE};
use crate::cli::DaemonArgs;
use crate::control::server::DETACHED_ENV;
use crate::paths::Paths;

/// Runs `ahpd start`.
pub async fn run(paths: &Paths, args: &DaemonArgs) -> ExitCode {
    if args.stdio {
        return fail(EXIT_USAGE, "--stdio cannot be detached: it serves the process that started it.");
    }
    let plan = match crate::daemon::plan(args) {
        Ok(plan) => plan,
        Err(why) => return fail(EXIT_USAGE, &why),
    };
    for warning in &plan.config.warnings {
        eprintln!("warning: {warning}");
    }
    match find(paths).await {
        Found::None => {}
        Found::Stale { why } => forget_stale(paths, &why),
        Found::Running(status) if status.url.is_empty() => {
            return fail(EXIT_CONFLICT, &format!("ahpd is starting (pid {}).", status.pid));
        }
        Found::Running(status) => {
            return fail(EXIT_CONFLICT, &format!("ahpd already runs on {} (pid {}).", status.url, status.pid));
        }
        Found::Silent { record, why } => {
            return fail(
                EXIT_CONFLICT,
                &format!(
                    "ahpd pid {} ({}) is running but does not answer ({why}); ahpd stop will end it.",
                    record.pid, record.url
                ),
            );
        }
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return fail(EXIT_CONFLICT, &format!("could not find this program's own path: {e}")),
    };
    let launch = Launch { exe, argv: daemon_argv(), cwd: None, env: None };
    match launch::launch(paths, &launch).await {
        Ok(started) => {
            say(&format!("ahpd on {} (pid {})", started.url, started.pid));
            for line in &started.facts_for_a_person(paths).await {
                say(line);
            }
            say(&format!("log: {}", paths.log().display()));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code(), &format!("ahpd did not start: {e}")),
    }
}

/// The arguments after `start`, exactly as given: the daemon's own line.
fn daemon_argv() -> Vec<OsString> {
    let mut args = std::env::args_os().skip(1);
    for arg in args.by_ref() {
        if arg == "start" {
            break;
        }
    }
    args.collect()
}

/// In a daemon started by `ahpd start`: leaves the terminal's session, so hanging up the terminal
/// or its job control never reaches the daemon. (Done here rather than before exec, which would
/// need `unsafe`; the daemon is not a group leader yet, so `setsid` succeeds.)
pub fn leave_the_terminal() {
    if std::env::var(DETACHED_ENV).is_ok_and(|v| v == "1") {
        if let Err(e) = nix::unistd::setsid() {
            eprintln!("could not start a new session: {e}");
        }
    }
}

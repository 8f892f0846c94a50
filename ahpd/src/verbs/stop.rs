//! `ahpd stop`: a graceful stop over the control socket (SIGTERM to the recorded pid when the
//! socket does not answer), then a wait until the daemon has exited.

use std::process::ExitCode;

use super::{ask, fail, find, forget_stale, say, terminate_and_wait, wait_for_exit, Found, EXIT_CONFLICT, EXIT_WITHIN};
use crate::control::{record, Record, Request};
use crate::paths::Paths;

/// Runs `ahpd stop`.
pub async fn run(paths: &Paths) -> ExitCode {
    let (pid, url) = match find(paths).await {
        Found::None => return fail(EXIT_CONFLICT, "None running."),
        Found::Stale { why } => {
            forget_stale(paths, &why);
            return fail(EXIT_CONFLICT, "None running.");
        }
        Found::Silent { record, why } => {
            eprintln!("pid {} does not answer on its control socket ({why}); sending it SIGTERM.", record.pid);
            return match terminate_and_wait(&record).await {
                Ok(()) => stopped(paths, record.pid, &record.url),
                Err(why) => fail(EXIT_CONFLICT, &why),
            };
        }
        Found::Running(status) => (status.pid, status.url),
    };
    match ask(paths, &Request::Stop { unless_busy: false }).await {
        Ok(reply) if reply.ok => {}
        Ok(reply) => return fail(EXIT_CONFLICT, reply.error.as_deref().unwrap_or("It refused to stop.")),
        Err(e) => {
            eprintln!("{e}; sending it SIGTERM.");
            let record = Record::read(&paths.record()).ok().flatten().filter(|r| r.pid == pid);
            let Some(record) = record else {
                return fail(EXIT_CONFLICT, &format!("pid {pid} has no record to check it by; not signalling it."));
            };
            if let Err(why) = terminate_and_wait(&record).await {
                return fail(EXIT_CONFLICT, &why);
            }
        }
    }
    if !wait_for_exit(pid, EXIT_WITHIN).await {
        return fail(EXIT_CONFLICT, &format!("pid {pid} is still stopping after {} s.", EXIT_WITHIN.as_secs()));
    }
    stopped(paths, pid, &url)
}

fn stopped(paths: &Paths, pid: u32, url: &str) -> ExitCode {
    // A daemon that exited cleanly removed its record; one ended by a signal it could not handle
    // left it.
    record::remove_if_ours(&paths.record(), pid);
    say(&format!("Stopped {url} (pid {pid})."));
    ExitCode::SUCCESS
}

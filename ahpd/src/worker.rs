//! `ahpd worker <kind>`: this binary serving one built-in backend over its own stdio.

use std::process::ExitCode;

/// Runs the worker for `kind`, or says which kinds exist.
pub fn run(kind: &str) -> ExitCode {
    match crate::backends::factory(kind) {
        Some(factory) => agent_runner::run_stdio_worker(factory),
        None => {
            eprintln!("ahpd worker: no backend of kind {kind}; this build has {}", crate::backends::worker_kinds());
            ExitCode::from(crate::daemon::EXIT_USAGE)
        }
    }
}

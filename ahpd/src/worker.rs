//! `ahpd worker <kind>`: this binary serving one built-in backend over its own stdio.

use std::process::ExitCode;

/// Runs the worker for `kind`, or says which kinds exist.
pub fn run(kind: &str) -> ExitCode {
    let factory = match kind {
        "acp" => Some(agent_acp::factory()),
        "claude" => Some(agent_claude::factory()),
        "pi" => Some(agent_pi::factory()),
        other => agent_runner::builtin_factory(other),
    };
    match factory {
        Some(factory) => agent_runner::run_stdio_worker(factory),
        None => {
            eprintln!(
                "ahpd worker: no backend of kind {kind}; this build has {}",
                crate::agents::BUILT_IN_KINDS.join(", ")
            );
            ExitCode::from(crate::daemon::EXIT_USAGE)
        }
    }
}

//! The `ahpd` binary: parses the command line and runs the daemon or a verb.

use std::process::ExitCode;

use clap::Parser;

use ahpd::cli::{Cli, Verb};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.verb {
        None => {
            ahpd::verbs::start::leave_the_terminal();
            ahpd::daemon::run_foreground(cli.daemon, ahpd::verbs::bridge::run)
        }
        Some(Verb::Worker { kind }) => ahpd::worker::run(&kind),
        Some(Verb::BoxRun(plan)) => ahpd::confine::relay::run(plan),
        Some(Verb::BoxExec(plan)) => ahpd::confine::exec::run(plan),
        Some(verb) => ahpd::verbs::run(verb),
    }
}

//! The `claude` worker as a program of its own: what `ahpd worker claude` runs, for a config entry
//! of kind `command` (and the end-to-end tests) until the daemon links this crate itself.

fn main() -> std::process::ExitCode {
    agent_runner::run_stdio_worker(agent_claude::factory())
}

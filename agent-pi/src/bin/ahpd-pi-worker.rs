//! The pi backend as a stand-alone worker over stdin/stdout: what `ahpd worker pi` serves, runnable
//! on its own for a config entry of kind `command` and for the tests that need a worker process.

fn main() -> std::process::ExitCode {
    agent_runner::run_stdio_worker(agent_pi::factory())
}

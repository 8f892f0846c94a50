//! `ahpd-acp-worker`: the `acp` backend as a stand-alone worker program, for a config entry of
//! kind `command` (`{"kind": "command", "command": ".../ahpd-acp-worker", "options": {...}}`)
//! until `ahpd worker acp` runs it built in. Its stdout is worker-protocol frames only.

fn main() -> std::process::ExitCode {
    agent_runner::run_stdio_worker(agent_acp::factory())
}

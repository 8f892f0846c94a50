//! One running `claude` process: its stdin as a line writer, its stdout as parsed lines, and the
//! host side of its control channel.
//!
//! How it lives is `agent_runner::child`'s: its own process group, so stopping it (close stdin,
//! wait, SIGTERM to the group, SIGKILL, reap) also stops whatever it started (shells, MCP servers).

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use agent_runner::child::{describe_exit, Child, ChildCommand, SpawnError};
use agent_runner::lines::{LineWriter, Waiting};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// The longest stdout line read (a tool result can be large).
const MAX_LINE_BYTES: usize = 64 << 20;
/// How long a stop waits after closing stdin, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What the CLI printed, apart from answers to our own control requests.
#[derive(Debug, Clone, PartialEq)]
pub enum CliEvent {
    /// One JSON line.
    Line(Value),
    /// A line that is not JSON; reading stopped there.
    Garbage(String),
    /// Its stdout closed.
    Ended,
}

/// Why a control request got no success.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// The CLI answered with an error.
    #[error("{0}")]
    Refused(String),
    /// The CLI went away first.
    #[error("Claude Code exited before it answered")]
    Gone,
    /// No answer in time.
    #[error("Claude Code did not answer in time")]
    Timeout,
}

/// Our control requests waiting for the CLI's answers.
type Pending = Waiting<Result<Value, ControlError>>;

/// A running CLI. Cheap to share; [`Cli::stop`] ends it.
pub struct Cli {
    stdin: LineWriter,
    pending: Arc<Pending>,
    child: Child,
}

impl Cli {
    /// Starts the CLI; its output arrives on the returned channel, ending with [`CliEvent::Ended`]
    /// (or a [`CliEvent::Garbage`]).
    pub fn spawn(command: ChildCommand) -> Result<(Arc<Cli>, mpsc::UnboundedReceiver<CliEvent>), SpawnError> {
        let (child, mut pipes) = command.log_stderr("claude", tracing::Level::DEBUG).spawn()?;
        let stdin = LineWriter::start(pipes.take_stdin()?);
        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let cli = Arc::new(Cli { stdin, pending: Arc::new(Waiting::new("ahpd_")), child });
        // It ends on its own when the process's stdout closes, which `stop` and dropping the
        // guard guarantee.
        tokio::spawn(read_lines(pipes.stdout, cli.pending.clone(), event_tx));
        tracing::debug!(pid = cli.child.pid(), command = cli.command(), "started claude");
        Ok((cli, event_rx))
    }

    /// The program's name, for messages.
    pub fn command(&self) -> &str {
        self.child.program()
    }

    /// Writes one JSON line to the CLI's stdin; false once stdin is closed.
    pub fn send(&self, line: &Value) -> bool {
        self.stdin.send(line)
    }

    /// Sends a control request and waits (at most `within`) for its answer.
    pub async fn control(&self, request: Value, within: Duration) -> Result<Value, ControlError> {
        let id = self.pending.next_id();
        let answer = self.pending.wait_for(&id);
        if !self.send(&json!({"type": "control_request", "request_id": id, "request": request})) {
            self.pending.forget(&id);
            return Err(ControlError::Gone);
        }
        match tokio::time::timeout(within, answer).await {
            Ok(Ok(answer)) => answer,
            // Its output ended: nobody will answer.
            Ok(Err(_)) => Err(ControlError::Gone),
            Err(_) => {
                self.pending.forget(&id);
                Err(ControlError::Timeout)
            }
        }
    }

    /// Answers a control request the CLI sent.
    pub fn respond(&self, request_id: &str, answer: Result<Value, String>) -> bool {
        let response = match answer {
            Ok(response) => json!({"subtype": "success", "request_id": request_id, "response": response}),
            Err(error) => json!({"subtype": "error", "request_id": request_id, "error": error}),
        };
        self.send(&json!({"type": "control_response", "response": response}))
    }

    /// `why` it ended (or could not be asked), with its last words on stderr.
    pub fn last_words(&self, why: impl Into<String>) -> String {
        self.child.tail().last_words(why)
    }

    /// Waits at most `within` for the process to exit on its own, and says how it ended.
    pub async fn wait_exit(&self, within: Duration) -> Option<ExitStatus> {
        self.child.wait_within(within).await
    }

    /// Stops the process gracefully: close stdin, wait, SIGTERM to its group, wait, SIGKILL, reap.
    pub async fn stop(&self) {
        self.stdin.close();
        self.child.stop(STOP_GRACE).await;
    }

    /// Kills the process group at once (a CLI that printed garbage is in no state to be asked).
    pub async fn kill(&self) {
        self.stdin.close();
        self.child.kill().await;
    }
}

/// Says how the CLI ended, for a person: `None` is one that closed its output and lives on.
pub fn describe_end(command: &str, status: Option<ExitStatus>) -> String {
    match status {
        Some(_) => format!("{command} {}", describe_exit(status)),
        None => format!("{command} closed its output"),
    }
}

async fn read_lines(
    stdout: tokio::process::ChildStdout,
    pending: Arc<Pending>,
    events: mpsc::UnboundedSender<CliEvent>,
) {
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE_BYTES));
    let last = loop {
        let line = match lines.next().await {
            None | Some(Err(LinesCodecError::Io(_))) => break CliEvent::Ended,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                break CliEvent::Garbage(format!("a line longer than {MAX_LINE_BYTES} bytes"))
            }
            Some(Ok(line)) => line,
        };
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(trimmed) {
            Ok(v @ Value::Object(_)) => v,
            _ => break CliEvent::Garbage(trimmed.chars().take(200).collect()),
        };
        if value["type"] == "control_response" {
            answer_pending(&pending, &value["response"]);
            continue;
        }
        if events.send(CliEvent::Line(value)).is_err() {
            break CliEvent::Ended;
        }
    };
    // Nobody will answer the requests still waiting.
    pending.fail_all();
    let _ = events.send(last);
}

fn answer_pending(pending: &Pending, response: &Value) {
    let Some(id) = response["request_id"].as_str() else { return };
    let answer = if response["subtype"] == "success" {
        Ok(response.get("response").cloned().unwrap_or(Value::Null))
    } else {
        Err(ControlError::Refused(response["error"].as_str().unwrap_or("Claude Code refused").to_owned()))
    };
    if !pending.answer(id, answer) {
        tracing::debug!(id, "a control response to nothing we asked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ChildCommand {
        ChildCommand::new("sh").args(["-c", script]).cwd(std::env::temp_dir())
    }

    #[tokio::test]
    async fn a_missing_program_says_how_to_fix_it() {
        let err = Cli::spawn(ChildCommand::new("no-such-claude-here")).err().expect("an error");
        assert_eq!(
            err.to_string(),
            "no-such-claude-here was not found; install it, or put its directory on the PATH the daemon runs with"
        );
    }

    #[tokio::test]
    async fn routes_control_answers_and_passes_the_rest_on() {
        // Echo each control request back as a success, after one line of its own.
        let script = r#"echo '{"type":"system","subtype":"init"}'; read line; id=$(echo "$line" | sed 's/.*"request_id":"\([^"]*\)".*/\1/'); echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{\"ok\":true}}}"; echo oops >&2; echo not-json"#;
        let (cli, mut events) = Cli::spawn(sh(script)).expect("spawn");
        let first = events.recv().await.expect("a line");
        assert_eq!(first, CliEvent::Line(json!({"type": "system", "subtype": "init"})));
        let answer = cli.control(json!({"subtype": "interrupt"}), Duration::from_secs(10)).await;
        assert_eq!(answer, Ok(json!({"ok": true})));
        assert_eq!(events.recv().await, Some(CliEvent::Garbage("not-json".into())));
        let status = cli.wait_exit(Duration::from_secs(10)).await;
        assert_eq!(describe_end("sh", status), "sh exited with code 0");
        assert_eq!(cli.last_words("it ended"), "it ended. Its last words on stderr: oops");
    }

    #[tokio::test]
    async fn stop_ends_a_process_that_ignores_stdin() {
        let (cli, _events) = Cli::spawn(sh("sleep 30")).expect("spawn");
        cli.stop().await;
        assert!(cli.wait_exit(Duration::from_millis(10)).await.is_some());
    }
}

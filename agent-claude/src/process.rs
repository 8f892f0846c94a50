//! One running `claude` process: its stdin as a line writer, its stdout as parsed lines, and the
//! host side of its control channel.
//!
//! How it lives is `agent_runner::child`'s: its own process group, so stopping it (close stdin,
//! wait, SIGTERM to the group, SIGKILL, reap) also stops whatever it started (shells, MCP servers).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::child::{describe_exit, Child, ChildCommand, SpawnError};
use agent_runner::lock;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// How much of the CLI's stderr tail goes into the errors a person sees.
const STDERR_SHOWN: usize = 8 * 1024;
/// The longest stdout line read (a tool result can be large).
const MAX_LINE_BYTES: usize = 64 << 20;
/// How long a stop waits after closing stdin, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program (a path or a name on the PATH).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables over the worker's own environment.
    pub env: BTreeMap<String, String>,
    /// Where it runs.
    pub cwd: PathBuf,
}

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

type Pending = Mutex<HashMap<String, oneshot::Sender<Result<Value, ControlError>>>>;

/// A running CLI. Cheap to share; [`Cli::stop`] ends it.
pub struct Cli {
    command: String,
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
    pending: Arc<Pending>,
    next_request: AtomicU64,
    child: Child,
}

impl Cli {
    /// Starts the CLI; its output arrives on the returned channel, ending with [`CliEvent::Ended`]
    /// (or a [`CliEvent::Garbage`]).
    pub fn spawn(launch: &Launch) -> Result<(Arc<Cli>, mpsc::UnboundedReceiver<CliEvent>), SpawnError> {
        let (child, pipes) = ChildCommand::new(&launch.command)
            .args(&launch.args)
            .envs(&launch.env)
            .cwd(&launch.cwd)
            .log_stderr("claude", tracing::Level::DEBUG)
            .spawn()?;
        let stdin = pipes
            .stdin
            .ok_or_else(|| SpawnError::Other { program: launch.command.clone(), why: "no stdin pipe".into() })?;
        let (line_tx, line_rx) = mpsc::unbounded_channel();
        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let cli = Arc::new(Cli {
            command: launch.command.clone(),
            writer: Mutex::new(Some(line_tx)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            next_request: AtomicU64::new(1),
            child,
        });
        // These two tasks end on their own when the process's pipes close, which `stop` and
        // dropping the guard guarantee.
        tokio::spawn(write_lines(stdin, line_rx));
        tokio::spawn(read_lines(pipes.stdout, cli.pending.clone(), event_tx));
        tracing::debug!(pid = cli.child.pid(), command = %launch.command, args = ?launch.args, "started claude");
        Ok((cli, event_rx))
    }

    /// The program's name, for messages.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Writes one JSON line to the CLI's stdin; false once stdin is closed.
    pub fn send(&self, line: &Value) -> bool {
        match lock(&self.writer).as_ref() {
            Some(writer) => writer.send(format!("{line}\n")).is_ok(),
            None => false,
        }
    }

    /// Sends a control request and waits (at most `within`) for its answer.
    pub async fn control(&self, request: Value, within: Duration) -> Result<Value, ControlError> {
        let id = format!("ahpd_{}", self.next_request.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        if !self.send(&json!({"type": "control_request", "request_id": id, "request": request})) {
            lock(&self.pending).remove(&id);
            return Err(ControlError::Gone);
        }
        match tokio::time::timeout(within, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(ControlError::Gone),
            Err(_) => {
                lock(&self.pending).remove(&id);
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

    /// The last few KiB of what the CLI wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.child.tail().text_within(STDERR_SHOWN)
    }

    /// Waits at most `within` for the process to exit on its own, and says how it ended.
    pub async fn wait_exit(&self, within: Duration) -> Option<ExitStatus> {
        self.child.wait_within(within).await
    }

    /// Stops the process gracefully: close stdin, wait, SIGTERM to its group, wait, SIGKILL, reap.
    pub async fn stop(&self) {
        lock(&self.writer).take();
        self.child.stop(STOP_GRACE).await;
    }

    /// Kills the process group at once (a CLI that printed garbage is in no state to be asked).
    pub async fn kill(&self) {
        lock(&self.writer).take();
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

async fn write_lines(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = lines.recv().await {
        if stdin.write_all(line.as_bytes()).await.is_err() {
            return;
        }
        while let Ok(more) = lines.try_recv() {
            if stdin.write_all(more.as_bytes()).await.is_err() {
                return;
            }
        }
        if stdin.flush().await.is_err() {
            return;
        }
    }
    // Every sender is gone: dropping stdin closes it, which asks the CLI to exit.
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
    let waiting: Vec<_> = lock(&pending).drain().collect();
    for (_, tx) in waiting {
        let _ = tx.send(Err(ControlError::Gone));
    }
    let _ = events.send(last);
}

fn answer_pending(pending: &Pending, response: &Value) {
    let Some(id) = response["request_id"].as_str() else { return };
    let Some(tx) = lock(pending).remove(id) else {
        tracing::debug!(id, "a control response to nothing we asked");
        return;
    };
    let answer = if response["subtype"] == "success" {
        Ok(response.get("response").cloned().unwrap_or(Value::Null))
    } else {
        Err(ControlError::Refused(response["error"].as_str().unwrap_or("Claude Code refused").to_owned()))
    };
    let _ = tx.send(answer);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch {
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::new(),
            cwd: std::env::temp_dir(),
        }
    }

    #[tokio::test]
    async fn a_missing_program_says_how_to_fix_it() {
        let launch = Launch { command: "no-such-claude-here".into(), ..sh("") };
        let err = Cli::spawn(&launch).err().expect("an error");
        assert_eq!(
            err.to_string(),
            "no-such-claude-here was not found; install it, or put its directory on the PATH the daemon runs with"
        );
    }

    #[tokio::test]
    async fn routes_control_answers_and_passes_the_rest_on() {
        // Echo each control request back as a success, after one line of its own.
        let script = r#"echo '{"type":"system","subtype":"init"}'; read line; id=$(echo "$line" | sed 's/.*"request_id":"\([^"]*\)".*/\1/'); echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{\"ok\":true}}}"; echo oops >&2; echo not-json"#;
        let (cli, mut events) = Cli::spawn(&sh(script)).expect("spawn");
        let first = events.recv().await.expect("a line");
        assert_eq!(first, CliEvent::Line(json!({"type": "system", "subtype": "init"})));
        let answer = cli.control(json!({"subtype": "interrupt"}), Duration::from_secs(10)).await;
        assert_eq!(answer, Ok(json!({"ok": true})));
        assert_eq!(events.recv().await, Some(CliEvent::Garbage("not-json".into())));
        let status = cli.wait_exit(Duration::from_secs(10)).await;
        assert_eq!(describe_end("sh", status), "sh exited with code 0");
        assert_eq!(cli.stderr_tail(), "oops");
    }

    #[tokio::test]
    async fn stop_ends_a_process_that_ignores_stdin() {
        let (cli, _events) = Cli::spawn(&sh("sleep 30")).expect("spawn");
        cli.stop().await;
        assert!(cli.wait_exit(Duration::from_millis(10)).await.is_some());
    }
}

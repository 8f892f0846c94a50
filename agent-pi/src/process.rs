//! One `pi --mode rpc` child: commands written as JSON lines, answers matched by `id`, every record
//! forwarded in order. How it lives (its own process group, its stderr tail, the graceful stop:
//! close stdin, wait, SIGTERM to the group, SIGKILL, reap) is `agent_runner::child`'s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::child::{Child, ChildCommand, SpawnError, Tail};
use agent_runner::lines::{LineWriter, Waiting};
use agent_runner::lock;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::event::PiRecord;

/// How long a stop waits after closing stdin, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What went wrong talking to pi.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PiError {
    /// pi could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// pi exited or closed its output; the tail of its stderr says why.
    #[error("pi stopped: {0}")]
    Gone(String),
    /// pi answered `success: false`.
    #[error("{0}")]
    Refused(String),
    /// pi did not answer in time.
    #[error("pi did not answer {command} within {seconds} s{tail}")]
    Timeout {
        /// The command.
        command: String,
        /// How long we waited.
        seconds: u64,
        /// pi's stderr tail, prefixed with ": " when there is one.
        tail: String,
    },
}

/// An answer pi gave.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `data`, when there was any.
    pub data: Option<Value>,
}

/// What the reader hands on: every record in the order pi wrote it, then why pi went away.
#[derive(Debug)]
pub enum Output {
    /// A record (answers included, after they resolved their waiter).
    Record(Box<PiRecord>),
    /// pi's output ended; the sentence says how, with its stderr tail.
    Ended(String),
}

/// Our commands waiting for pi's answers.
type Waiters = Waiting<Result<Answer, PiError>>;

/// A running pi. Cheap to share; [`PiProcess::stop`] ends it.
pub struct PiProcess {
    stdin: LineWriter,
    waiters: Arc<Waiters>,
    child: Child,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl PiProcess {
    /// Starts pi; its records arrive on the returned channel in the order pi wrote them.
    pub fn spawn(command: &ChildCommand) -> Result<(Arc<Self>, mpsc::UnboundedReceiver<Output>), PiError> {
        let (child, mut pipes) = command.clone().log_stderr("pi", tracing::Level::DEBUG).spawn()?;
        let stdin = LineWriter::start(pipes.take_stdin()?);
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let waiters: Arc<Waiters> = Arc::new(Waiting::new("ahpd-"));
        let reader = tokio::spawn(read_records(pipes.stdout, waiters.clone(), child.tail().clone(), out_tx));
        let process = Arc::new(Self { stdin, waiters, child, reader: Mutex::new(Some(reader)) });
        Ok((process, out_rx))
    }

    /// The last lines pi wrote on stderr.
    pub fn stderr_tail(&self) -> String {
        self.child.tail().text()
    }

    /// Writes one command without waiting for anything (an `extension_ui_response`, an abort).
    pub fn send(&self, command: Value) {
        self.stdin.send(&command);
    }

    /// A fresh command id.
    pub fn next_id(&self) -> String {
        self.waiters.next_id()
    }

    /// Sends a command with a fresh id and waits for its answer; `success: false` is
    /// [`PiError::Refused`] with pi's sentence.
    pub async fn request(&self, mut command: Value) -> Result<Answer, PiError> {
        let id = self.next_id();
        let rx = self.waiters.wait_for(&id);
        command["id"] = Value::String(id);
        self.send(command);
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(PiError::Gone(self.gone_sentence())),
        }
    }

    /// [`PiProcess::request`] with a time limit.
    pub async fn request_within(&self, command: Value, within: Duration) -> Result<Answer, PiError> {
        let name = command.get("type").and_then(Value::as_str).unwrap_or("a command").to_owned();
        match tokio::time::timeout(within, self.request(command)).await {
            Ok(answer) => answer,
            Err(_) => {
                let tail = self.stderr_tail();
                let tail = if tail.is_empty() { String::new() } else { format!(": {tail}") };
                Err(PiError::Timeout { command: name, seconds: within.as_secs(), tail })
            }
        }
    }

    /// Answers an extension's dialog.
    pub fn answer_ui(&self, id: &str, answer: UiAnswer) {
        let mut response = json!({ "type": "extension_ui_response", "id": id });
        match answer {
            UiAnswer::Value(value) => response["value"] = Value::String(value),
            UiAnswer::Cancelled => response["cancelled"] = Value::Bool(true),
        }
        self.send(response);
    }

    fn gone_sentence(&self) -> String {
        self.child.tail().last_words("its output closed")
    }

    /// Stops pi: closes stdin, waits, SIGTERM to its group, SIGKILL, reaps. Idempotent.
    pub async fn stop(&self) {
        // Closing stdin is pi's orderly shutdown.
        self.stdin.close();
        self.child.stop(STOP_GRACE).await;
        let reader = lock(&self.reader).take();
        if let Some(reader) = reader {
            reader.abort();
            let _ = reader.await;
        }
    }
}

/// How an extension dialog is answered.
#[derive(Debug, Clone)]
pub enum UiAnswer {
    /// A value (for `input`, `select`, `editor`).
    Value(String),
    /// Dismissed.
    Cancelled,
}

/// Reads pi's stdout: strict JSONL split on LF only (strings may hold U+2028).
async fn read_records(
    stdout: impl AsyncRead + Unpin,
    waiters: Arc<Waiters>,
    tail: Tail,
    out: mpsc::UnboundedSender<Output>,
) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => break "its output closed".to_owned(),
            Ok(_) => {}
            Err(e) => break format!("reading its output failed: {e}"),
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            continue;
        }
        let record: PiRecord = match serde_json::from_str(text) {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, "pi wrote a line that is not a record");
                continue;
            }
        };
        if let PiRecord::Response { id: Some(id), success, data, error, .. } = &record {
            let answer = if *success {
                Ok(Answer { data: data.clone() })
            } else {
                Err(PiError::Refused(error.clone().unwrap_or_else(|| "pi refused".to_owned())))
            };
            waiters.answer(id, answer);
        }
        if out.send(Output::Record(Box::new(record))).is_err() {
            break "nobody reads it any more".to_owned();
        }
    };
    // Every waiter fails now rather than waiting for an answer nobody will give.
    waiters.fail_all();
    let _ = out.send(Output::Ended(tail.last_words(why)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_matched_by_id_and_records_keep_their_order() {
        // A stand-in for pi: answers every line with a response carrying its id, after an event.
        let script = r#"while IFS= read -r line; do id=$(printf '%s' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); printf '{"type":"agent_start"}\n{"type":"response","id":"%s","command":"get_state","success":true,"data":{"ok":1}}\n' "$id"; done"#;
        let launch = ChildCommand::new("sh").args(["-c", script]).cwd(std::env::temp_dir());
        let (pi, mut out) = PiProcess::spawn(&launch).expect("spawns");
        let answer = pi.request_within(json!({"type": "get_state"}), Duration::from_secs(10)).await.expect("answers");
        assert_eq!(answer.data, Some(json!({"ok": 1})));
        assert!(matches!(out.recv().await, Some(Output::Record(r)) if matches!(*r, PiRecord::AgentStart)));
        assert!(matches!(out.recv().await, Some(Output::Record(r)) if matches!(*r, PiRecord::Response { .. })));
        pi.stop().await;
        loop {
            match out.recv().await {
                Some(Output::Ended(_)) | None => break,
                Some(Output::Record(_)) => {}
            }
        }
    }
}

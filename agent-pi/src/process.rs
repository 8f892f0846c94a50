//! One `pi --mode rpc` child: commands written as JSON lines, answers matched by `id`, every record
//! forwarded in order. How it lives (its own process group, its stderr tail, the graceful stop:
//! close stdin, wait, SIGTERM to the group, SIGKILL, reap) is `agent_runner::child`'s.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::child::{Child, ChildCommand, SpawnError, Tail};
use agent_runner::lock;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, oneshot};
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

/// How to start pi.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program (`pi`, or a path).
    pub program: String,
    /// Its arguments after the program.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables set over the worker's own environment.
    pub env: Vec<(String, String)>,
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

type Waiters = Mutex<HashMap<String, oneshot::Sender<Result<Answer, PiError>>>>;

/// A running pi. Cheap to share; [`PiProcess::stop`] ends it.
pub struct PiProcess {
    lines: Mutex<Option<mpsc::UnboundedSender<String>>>,
    waiters: Arc<Waiters>,
    next_id: AtomicU64,
    child: Child,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl PiProcess {
    /// Starts pi; its records arrive on the returned channel in the order pi wrote them.
    pub fn spawn(launch: &Launch) -> Result<(Arc<Self>, mpsc::UnboundedReceiver<Output>), PiError> {
        let (child, pipes) = ChildCommand::new(&launch.program)
            .args(&launch.args)
            .cwd(&launch.cwd)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .log_stderr("pi", tracing::Level::DEBUG)
            .spawn()?;
        let stdin = pipes
            .stdin
            .ok_or_else(|| SpawnError::Other { program: launch.program.clone(), why: "no stdin pipe".into() })?;
        let (lines_tx, lines_rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let waiters: Arc<Waiters> = Arc::new(Mutex::new(HashMap::new()));
        let tasks = vec![
            tokio::spawn(write_lines(stdin, lines_rx)),
            tokio::spawn(read_records(pipes.stdout, waiters.clone(), child.tail().clone(), out_tx)),
        ];
        let process = Arc::new(Self {
            lines: Mutex::new(Some(lines_tx)),
            waiters,
            next_id: AtomicU64::new(1),
            child,
            tasks: Mutex::new(tasks),
        });
        Ok((process, out_rx))
    }

    /// The last lines pi wrote on stderr.
    pub fn stderr_tail(&self) -> String {
        self.child.tail().text()
    }

    /// Writes one command without waiting for anything (an `extension_ui_response`, an abort).
    pub fn send(&self, command: Value) {
        let sender = lock(&self.lines).clone();
        if let Some(sender) = sender {
            let _ = sender.send(command.to_string());
        }
    }

    /// A fresh command id.
    pub fn next_id(&self) -> String {
        format!("ahpd-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a command with a fresh id and waits for its answer; `success: false` is
    /// [`PiError::Refused`] with pi's sentence.
    pub async fn request(&self, mut command: Value) -> Result<Answer, PiError> {
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id.clone(), tx);
        command["id"] = Value::String(id.clone());
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
        let tail = self.stderr_tail();
        if tail.is_empty() {
            "its output closed".to_owned()
        } else {
            format!("its output closed; it said: {tail}")
        }
    }

    /// Stops pi: closes stdin, waits, SIGTERM to its group, SIGKILL, reaps. Idempotent.
    pub async fn stop(&self) {
        lock(&self.lines).take();
        self.child.stop(STOP_GRACE).await;
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        for task in tasks {
            task.abort();
            let _ = task.await;
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

async fn write_lines(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = lines.recv().await {
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.write_all(b"\n").await.is_err() {
            break;
        }
        if stdin.flush().await.is_err() {
            break;
        }
    }
    // Dropping stdin closes it: pi's orderly shutdown.
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
            let waiter = lock(&waiters).remove(id);
            if let Some(waiter) = waiter {
                let answer = if *success {
                    Ok(Answer { data: data.clone() })
                } else {
                    Err(PiError::Refused(error.clone().unwrap_or_else(|| "pi refused".to_owned())))
                };
                let _ = waiter.send(answer);
            }
        }
        if out.send(Output::Record(Box::new(record))).is_err() {
            break "nobody reads it any more".to_owned();
        }
    };
    // Every waiter fails now rather than waiting for an answer nobody will give.
    lock(&waiters).clear();
    let said = tail.text();
    let sentence = if said.is_empty() { why } else { format!("{why}; it said: {said}") };
    let _ = out.send(Output::Ended(sentence));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_matched_by_id_and_records_keep_their_order() {
        // A stand-in for pi: answers every line with a response carrying its id, after an event.
        let script = r#"while IFS= read -r line; do id=$(printf '%s' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); printf '{"type":"agent_start"}\n{"type":"response","id":"%s","command":"get_state","success":true,"data":{"ok":1}}\n' "$id"; done"#;
        let launch = Launch {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: Vec::new(),
        };
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

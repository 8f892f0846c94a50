//! JSON-RPC 2.0 with an ACP agent: one message per line over its stdin and stdout, requests in
//! both directions.
//!
//! Written here rather than taken from the worker protocol's peer because an ACP agent is
//! someone else's program: its ids may be strings, and a line on its stdout that is not JSON-RPC
//! (a stray log line) is logged and skipped rather than ending the conversation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use protocol::RpcError;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use agent_runner::lock;

/// The longest line taken from an agent.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// Why a request got no result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The agent answered with an error.
    #[error("{}", .0.message)]
    Rpc(RpcError),
    /// The agent's output ended before it answered.
    #[error("the agent's output ended before it answered")]
    Closed,
}

/// Something the agent sent that is not an answer to us.
#[derive(Debug)]
pub enum FromAgent {
    /// A notification (`session/update`).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Value,
    },
    /// A request (`session/request_permission`, `fs/*`, `terminal/*`); answer with
    /// [`Conn::respond`] and this id.
    Request {
        /// The agent's id, as it sent it.
        id: Value,
        /// The method.
        method: String,
        /// Its params.
        params: Value,
    },
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>;

struct Inner {
    out: Mutex<Option<mpsc::UnboundedSender<String>>>,
    pending: Pending,
    next_id: AtomicU64,
    ended: watch::Receiver<bool>,
    stop_reading: CancellationToken,
}

/// The sending half of a connection to one agent; cheap to clone.
#[derive(Clone)]
pub struct Conn {
    inner: Arc<Inner>,
}

impl Conn {
    /// Starts reading `stdout` and writing `stdin` on `tracker`. What the agent sends that is not
    /// an answer is handed to `on_message`, in the order the agent wrote it and before any answer
    /// written after it is delivered, so a turn never ends ahead of the updates that preceded its
    /// answer. `on_message` must not block.
    pub fn start<R, W, F>(stdout: R, stdin: W, tracker: &TaskTracker, on_message: F) -> Conn
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
        F: Fn(&Conn, FromAgent) + Send + Sync + 'static,
    {
        let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
        let (ended_tx, ended) = watch::channel(false);
        let stop_reading = CancellationToken::new();
        let inner = Arc::new(Inner {
            out: Mutex::new(Some(out_tx)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            ended,
            stop_reading: stop_reading.clone(),
        });
        tracker.spawn(write_lines(stdin, out_rx, stop_reading.clone()));
        let conn = Conn { inner };
        let reader = conn.clone();
        tracker.spawn(async move {
            read_lines(stdout, &reader, &on_message, stop_reading).await;
            // Every request still waiting fails now: nobody is left to answer it.
            let waiting: Vec<_> = lock(&reader.inner.pending).drain().collect();
            drop(waiting);
            let _ = ended_tx.send(true);
        });
        conn
    }

    /// Sends a request and waits for its answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id, tx);
        if *self.inner.ended.borrow()
            || !self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        {
            lock(&self.inner.pending).remove(&id);
            return Err(CallError::Closed);
        }
        match rx.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(CallError::Rpc(error)),
            Err(_) => Err(CallError::Closed),
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers one of the agent's requests.
    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        self.send(message);
    }

    fn send(&self, message: Value) -> bool {
        let mut line = message.to_string();
        line.push('\n');
        match &*lock(&self.inner.out) {
            Some(out) => out.send(line).is_ok(),
            None => false,
        }
    }

    /// Closes the agent's stdin once what was sent is written: ACP's way of asking it to exit.
    pub fn close_stdin(&self) {
        lock(&self.inner.out).take();
    }

    /// Stops reading the agent's output, failing every request still waiting; for an agent that
    /// died while something it left behind holds its stdout open.
    pub fn end(&self) {
        self.inner.stop_reading.cancel();
    }

    /// True once the agent's output ended.
    pub fn is_ended(&self) -> bool {
        *self.inner.ended.borrow()
    }

    /// Waits until the agent's output ends.
    pub async fn ended(&self) {
        let mut ended = self.inner.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut stdin: W,
    mut lines: mpsc::UnboundedReceiver<String>,
    stop: CancellationToken,
) {
    loop {
        let line = tokio::select! {
            _ = stop.cancelled() => break,
            line = lines.recv() => match line {
                Some(line) => line,
                None => break,
            },
        };
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

async fn read_lines<R, F>(stdout: R, conn: &Conn, on_message: &F, stop: CancellationToken)
where
    R: AsyncRead + Unpin,
    F: Fn(&Conn, FromAgent),
{
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE));
    loop {
        let line = tokio::select! {
            _ = stop.cancelled() => return,
            line = lines.next() => line,
        };
        let line = match line {
            Some(Ok(line)) => line,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "an ACP agent's output could not be read");
                return;
            }
            None => return,
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(message)) => take(message, conn, on_message),
            _ => {
                tracing::warn!(line = %excerpt(&line), "an ACP agent wrote a line that is not JSON-RPC; skipped")
            }
        }
    }
}

fn take<F: Fn(&Conn, FromAgent)>(mut message: serde_json::Map<String, Value>, conn: &Conn, on_message: &F) {
    let id = message.remove("id").filter(|id| !id.is_null());
    let params = message.remove("params").unwrap_or(Value::Null);
    if let Some(Value::String(method)) = message.remove("method") {
        on_message(
            conn,
            match id {
                Some(id) => FromAgent::Request { id, method, params },
                None => FromAgent::Notification { method, params },
            },
        );
        return;
    }
    let Some(id) = id.as_ref().and_then(our_id) else {
        let shown = excerpt(&Value::Object(message).to_string());
        tracing::warn!(message = %shown, "an ACP agent answered no request of ours");
        return;
    };
    let Some(waiting) = lock(&conn.inner.pending).remove(&id) else {
        tracing::debug!(id, "an ACP agent answered a request nobody waits for any more");
        return;
    };
    let answer = match message.remove("error") {
        Some(error) => Err(serde_json::from_value::<RpcError>(error.clone())
            .unwrap_or_else(|_| RpcError::new(protocol::codes::INTERNAL_ERROR, error.to_string()))),
        None => Ok(message.remove("result").unwrap_or(Value::Null)),
    };
    let _ = waiting.send(answer);
}

/// Our ids are numbers; an agent that echoes one as a string is forgiven.
fn our_id(id: &Value) -> Option<u64> {
    match id {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn excerpt(line: &str) -> String {
    if line.chars().count() > 200 {
        line.chars().take(200).collect::<String>() + "..."
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    #[tokio::test]
    async fn requests_both_ways_and_noise_skipped() {
        let tracker = TaskTracker::new();
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(ours);
        let (seen_tx, mut incoming) = mpsc::unbounded_channel();
        let conn = Conn::start(read, write, &tracker, move |_: &Conn, message| {
            let _ = seen_tx.send(message);
        });
        let (their_read, mut their_write) = tokio::io::split(theirs);
        let mut their_lines = BufReader::new(their_read).lines();

        let asking = tokio::spawn({
            let conn = conn.clone();
            async move { conn.request("initialize", json!({"protocolVersion": 1})).await }
        });
        let sent: Value =
            serde_json::from_str(&their_lines.next_line().await.expect("read").expect("a line")).expect("json");
        assert_eq!(sent["method"], "initialize");
        let answer = format!(
            "not json at all\n{{\"jsonrpc\":\"2.0\",\"id\":\"req-1\",\"method\":\"fs/read_text_file\",\"params\":{{}}}}\n{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"ok\":true}}}}\n",
            sent["id"]
        );
        their_write.write_all(answer.as_bytes()).await.expect("write");
        assert_eq!(asking.await.expect("join").expect("answered"), json!({"ok": true}));
        let Some(FromAgent::Request { id, method, .. }) = incoming.recv().await else { panic!("a request") };
        assert_eq!((id.clone(), method.as_str()), (json!("req-1"), "fs/read_text_file"));
        conn.respond(id, Ok(json!({"content": "x"})));
        let back: Value =
            serde_json::from_str(&their_lines.next_line().await.expect("read").expect("a line")).expect("json");
        assert_eq!(back["id"], "req-1");

        drop(their_write);
        drop(their_lines);
        conn.ended().await;
        assert!(matches!(conn.request("x", Value::Null).await, Err(CallError::Closed)));
    }
}

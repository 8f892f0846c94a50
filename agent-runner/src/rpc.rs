//! A bidirectional JSON-RPC peer over a pair of byte streams, one message per line.
//!
//! Both ends of the worker protocol use it ([`Peer::start`]): a worker over its stdin/stdout, the
//! parent over the worker's pipes. Requests go out with [`Peer::request`]; what the other side
//! sends arrives on the [`Incoming`] channel; responses are matched to requests by id. When the
//! reading side ends (EOF, an IO error, or a line that is not the protocol) every request still
//! waiting fails at once and [`Peer::ended`] says why.
//!
//! The ACP backend speaks JSON-RPC with someone else's program through the same peer
//! ([`Peer::start_foreign`]): there a request's id may be a string, a line that is not JSON-RPC (a
//! stray log line) is logged and skipped rather than ending the conversation, and what arrives is
//! handed to a callback in the order it was written, before any answer written after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use futures_util::StreamExt;
use protocol::{codes, Frame, FrameError, RpcError, MAX_FRAME_BYTES};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// Why a request did not get a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// The other side answered with an error.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The connection ended before the answer came.
    #[error("the connection ended before an answer came")]
    Closed,
    /// The answer did not have the shape the method returns.
    #[error("the answer could not be read: {0}")]
    Decode(String),
}

/// Why the reading side of a peer stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerEnd {
    /// The other side closed its stream.
    Eof,
    /// The other side wrote something that is not the protocol; the excerpt shows what.
    Violation(String),
    /// Reading failed.
    Io(String),
}

impl std::fmt::Display for PeerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerEnd::Eof => f.write_str("its output closed"),
            PeerEnd::Violation(what) => {
                write!(f, "it wrote something that is not the protocol: {what}")
            }
            PeerEnd::Io(e) => write!(f, "reading its output failed: {e}"),
        }
    }
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>;

struct Shared {
    out: mpsc::UnboundedSender<String>,
    close_output: tokio_util::sync::CancellationToken,
    stop_reading: tokio_util::sync::CancellationToken,
    pending: Pending,
    next_id: AtomicU64,
    ended: watch::Receiver<Option<PeerEnd>>,
}

/// How the other side's lines are read.
#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    /// The worker protocol: every line a frame (`protocol::Frame`), or the peer ends.
    Worker,
    /// Someone else's JSON-RPC: ids of any kind, and lines that are not JSON-RPC skipped.
    Foreign,
}

/// Where what the other side sends goes.
type Deliver = Box<dyn Fn(Incoming) + Send + Sync>;

/// The sending half of a connection; cheap to clone.
#[derive(Clone)]
pub struct Peer {
    shared: Arc<Shared>,
}

/// Something the other side sent that is not an answer to us.
#[derive(Debug)]
pub enum Incoming {
    /// A request; answer it through [`Responder`].
    Request(Request),
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
}

/// A request from the other side, with what is needed to answer it once.
#[derive(Debug)]
pub struct Request {
    /// The method.
    pub method: String,
    /// Its params (`null` when absent).
    pub params: Value,
    /// How to answer.
    pub responder: Responder,
}

/// Answers one request. Dropping it unanswered answers with an internal error, so the other side
/// never waits for an answer nobody will give.
#[derive(Debug)]
pub struct Responder {
    /// The other side's id, as it sent it.
    id: Value,
    out: Option<mpsc::UnboundedSender<String>>,
}

impl Responder {
    /// The request's id, as the other side sent it.
    pub fn id(&self) -> &Value {
        &self.id
    }

    /// Answers with a result or an error.
    pub fn respond(mut self, result: Result<Value, RpcError>) {
        if let Some(out) = self.out.take() {
            let _ = out.send(answer_line(&self.id, result));
        }
    }

    /// Answers with a serializable result.
    pub fn ok<T: Serialize>(self, value: T) {
        let result = serde_json::to_value(value)
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, format!("could not encode the result: {e}")));
        self.respond(result);
    }

    /// Answers with an error.
    pub fn err(self, error: RpcError) {
        self.respond(Err(error));
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(out) = self.out.take() {
            let error = RpcError::new(codes::INTERNAL_ERROR, "the request was dropped without an answer");
            let _ = out.send(answer_line(&self.id, Err(error)));
        }
    }
}

/// The line answering request `id` (whatever kind of id the other side chose).
fn answer_line(id: &Value, result: Result<Value, RpcError>) -> String {
    let message = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    };
    let mut line = message.to_string();
    line.push('\n');
    line
}

/// A started peer: the sending half, what arrives, and a way to learn when reading stopped.
pub struct PeerIo {
    /// Send requests and notifications.
    pub peer: Peer,
    /// Requests and notifications from the other side, in the order they came.
    pub incoming: mpsc::UnboundedReceiver<Incoming>,
}

impl Peer {
    /// Starts speaking the worker protocol: reading `reader` and writing `writer` on the current
    /// tokio runtime.
    pub fn start<R, W>(reader: R, writer: W) -> PeerIo
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (in_tx, in_rx) = mpsc::unbounded_channel::<Incoming>();
        let deliver: Deliver = Box::new(move |message| {
            let _ = in_tx.send(message);
        });
        let peer = Self::start_reading(reader, writer, Dialect::Worker, deliver);
        PeerIo { peer, incoming: in_rx }
    }

    /// Starts speaking JSON-RPC with someone else's program (an ACP agent). What it sends that is
    /// not an answer is handed to `on_message` in the order it was written, and before any answer
    /// written after it is delivered, so a turn never ends ahead of the updates that preceded its
    /// answer. `on_message` must not block.
    pub fn start_foreign<R, W, F>(reader: R, writer: W, on_message: F) -> Peer
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
        F: Fn(Incoming) + Send + Sync + 'static,
    {
        Self::start_reading(reader, writer, Dialect::Foreign, Box::new(on_message))
    }

    fn start_reading<R, W>(reader: R, writer: W, dialect: Dialect, deliver: Deliver) -> Peer
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
        let (ended_tx, ended_rx) = watch::channel(None);
        let close_output = tokio_util::sync::CancellationToken::new();
        let shared = Arc::new(Shared {
            out: out_tx.clone(),
            close_output: close_output.clone(),
            stop_reading: tokio_util::sync::CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ended: ended_rx,
        });
        tokio::spawn(write_lines(writer, out_rx, close_output));
        tokio::spawn(read_loop(reader, shared.clone(), out_tx, deliver, dialect, ended_tx));
        Peer { shared }
    }

    /// Sends a request and waits for its answer.
    pub async fn request<P: Serialize, R: DeserializeOwned>(&self, method: &str, params: P) -> Result<R, PeerError> {
        let value = self.request_value(method, params).await?;
        serde_json::from_value(value).map_err(|e| PeerError::Decode(e.to_string()))
    }

    /// Sends a request and waits for its raw answer.
    pub async fn request_value<P: Serialize>(&self, method: &str, params: P) -> Result<Value, PeerError> {
        let params = serde_json::to_value(params).map_err(|e| PeerError::Decode(e.to_string()))?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        // A request sent after reading stopped would wait for ever: check after registering, so
        // the reader's final sweep and this check cannot both miss it.
        if self.shared.ended.borrow().is_some() {
            lock(&self.shared.pending).remove(&id);
            return Err(PeerError::Closed);
        }
        let frame = Frame::Request { id, method: method.to_owned(), params };
        if self.shared.out.send(frame.encode()).is_err() {
            lock(&self.shared.pending).remove(&id);
            return Err(PeerError::Closed);
        }
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(PeerError::Rpc(error)),
            Err(_) => Err(PeerError::Closed),
        }
    }

    /// Sends a notification.
    pub fn notify<P: Serialize>(&self, method: &str, params: P) {
        match serde_json::to_value(params) {
            Ok(params) => {
                let _ = self.shared.out.send(Frame::Notification { method: method.to_owned(), params }.encode());
            }
            Err(e) => tracing::error!(method, error = %e, "could not encode a notification"),
        }
    }

    /// Waits until the reading side stops, and says why.
    pub async fn ended(&self) -> PeerEnd {
        let mut rx = self.shared.ended.clone();
        loop {
            if let Some(end) = rx.borrow().clone() {
                return end;
            }
            if rx.changed().await.is_err() {
                return PeerEnd::Eof;
            }
        }
    }

    /// Closes the writing side (the other end reads EOF) once what is queued has been written.
    pub fn close_output(&self) {
        self.shared.close_output.cancel();
    }

    /// True once the reading side stopped.
    pub fn is_ended(&self) -> bool {
        self.shared.ended.borrow().is_some()
    }

    /// Stops reading, failing every request still waiting: for a program that died while
    /// something it left behind holds its output open.
    pub fn end(&self) {
        self.shared.stop_reading.cancel();
    }
}

/// Writes each line `rx` gives (its newline included) to `writer`, until every sender is gone or
/// `close` is cancelled (what is queued by then is written first), then shuts the writer: one
/// process's stdin, or one side of the worker protocol.
///
/// Lines that are already waiting go out together, copied into one buffer and written with one
/// write and one flush: streaming emits many small lines, and a write per line would be a system
/// call per delta on an unbuffered pipe.
pub async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<String>,
    close: tokio_util::sync::CancellationToken,
) {
    let mut batch: Vec<u8> = Vec::new();
    loop {
        let line = tokio::select! {
            biased;
            line = rx.recv() => match line {
                Some(line) => line,
                None => break,
            },
            _ = close.cancelled() => break,
        };
        batch.clear();
        batch.extend_from_slice(line.as_bytes());
        while batch.len() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(more) => batch.extend_from_slice(more.as_bytes()),
                Err(_) => break,
            }
        }
        if writer.write_all(&batch).await.is_err() || writer.flush().await.is_err() {
            return;
        }
        // One large message (a file's contents) does not keep its buffer for ever.
        if batch.capacity() > 4 * BATCH_BYTES {
            batch = Vec::new();
        }
    }
    let _ = writer.shutdown().await;
}

/// How many bytes of waiting lines one write gathers before it goes out (a pipe holds 64 KiB).
const BATCH_BYTES: usize = 64 * 1024;

async fn read_loop<R: AsyncRead + Unpin>(
    reader: R,
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<String>,
    deliver: Deliver,
    dialect: Dialect,
    ended: watch::Sender<Option<PeerEnd>>,
) {
    let mut lines = FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_FRAME_BYTES));
    let end = loop {
        let line = tokio::select! {
            _ = shared.stop_reading.cancelled() => break PeerEnd::Eof,
            line = lines.next() => line,
        };
        let line = match line {
            None => break PeerEnd::Eof,
            Some(Ok(line)) => line,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                break PeerEnd::Violation(format!("a line longer than {MAX_FRAME_BYTES} bytes"))
            }
            Some(Err(LinesCodecError::Io(e))) => break PeerEnd::Io(e.to_string()),
        };
        if line.trim().is_empty() {
            continue;
        }
        let message = match dialect {
            Dialect::Worker => Frame::decode(&line).map(Message::from).map_err(|e| describe_violation(&line, &e)),
            Dialect::Foreign => Message::foreign(&line),
        };
        match message {
            Ok(Message::Incoming { id: Some(id), method, params }) => {
                let responder = Responder { id, out: Some(out.clone()) };
                deliver(Incoming::Request(Request { method, params, responder }));
            }
            Ok(Message::Incoming { id: None, method, params }) => deliver(Incoming::Notification { method, params }),
            Ok(Message::Answer { id, result }) => answer(&shared, id, result),
            Err(violation) if dialect == Dialect::Worker => break PeerEnd::Violation(violation),
            Err(skipped) => {
                tracing::warn!(line = %skipped, "a line that is not JSON-RPC, or answers nothing we asked; skipped")
            }
        }
    };
    let _ = ended.send(Some(end));
    // Every request still waiting fails now: nobody is left to answer it.
    lock(&shared.pending).clear();
}

/// One line, read.
enum Message {
    /// A request (with an id) or a notification.
    Incoming { id: Option<Value>, method: String, params: Value },
    /// An answer to one of our requests.
    Answer { id: u64, result: Result<Value, RpcError> },
}

impl From<Frame> for Message {
    fn from(frame: Frame) -> Self {
        match frame {
            Frame::Request { id, method, params } => Message::Incoming { id: Some(Value::from(id)), method, params },
            Frame::Notification { method, params } => Message::Incoming { id: None, method, params },
            Frame::Response { id, result } => Message::Answer { id, result: Ok(result) },
            Frame::Error { id, error } => Message::Answer { id, result: Err(error) },
        }
    }
}

impl Message {
    /// Reads a line of someone else's JSON-RPC; what cannot be read comes back as an excerpt.
    fn foreign(line: &str) -> Result<Message, String> {
        let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(line) else {
            return Err(excerpt(line));
        };
        let id = message.remove("id").filter(|id| !id.is_null());
        let params = message.remove("params").unwrap_or(Value::Null);
        if let Some(Value::String(method)) = message.remove("method") {
            return Ok(Message::Incoming { id, method, params });
        }
        // Our ids are numbers; a program that echoes one as a string is forgiven.
        let ours = id.as_ref().and_then(|id| match id {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        });
        let Some(id) = ours else { return Err(excerpt(line)) };
        let result = match message.remove("error") {
            Some(error) => Err(serde_json::from_value::<RpcError>(error.clone())
                .unwrap_or_else(|_| RpcError::new(codes::INTERNAL_ERROR, error.to_string()))),
            None => Ok(message.remove("result").unwrap_or(Value::Null)),
        };
        Ok(Message::Answer { id, result })
    }
}

fn excerpt(line: &str) -> String {
    let shown: String = line.chars().take(200).collect();
    if line.chars().count() > 200 {
        shown + "…"
    } else {
        shown
    }
}

fn answer(shared: &Shared, id: u64, result: Result<Value, RpcError>) {
    match lock(&shared.pending).remove(&id) {
        Some(tx) => {
            let _ = tx.send(result);
        }
        None => tracing::debug!(id, "an answer to no request we are waiting on"),
    }
}

fn describe_violation(line: &str, error: &FrameError) -> String {
    let excerpt: String = line.chars().take(120).collect();
    let more = if line.chars().count() > 120 { "…" } else { "" };
    format!("{error}: {excerpt:?}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two peers speaking the worker protocol to each other.
    fn pair() -> (PeerIo, PeerIo) {
        let (a, b) = tokio::io::duplex(1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        (Peer::start(ar, aw), Peer::start(br, bw))
    }

    #[tokio::test]
    async fn requests_cross_in_both_directions() {
        let (left, mut right) = pair();
        tokio::spawn(async move {
            while let Some(Incoming::Request(req)) = right.incoming.recv().await {
                let n = req.params.as_i64().unwrap_or(0);
                req.responder.ok(n * 2);
            }
        });
        let doubled: i64 = left.peer.request("double", 21).await.expect("answer");
        assert_eq!(doubled, 42);
    }

    #[tokio::test]
    async fn a_dropped_request_is_answered_with_an_error() {
        let (left, mut right) = pair();
        tokio::spawn(async move {
            while let Some(incoming) = right.incoming.recv().await {
                drop(incoming);
            }
        });
        let err = left.peer.request_value("ignored", ()).await.expect_err("an error");
        assert!(matches!(err, PeerError::Rpc(e) if e.code == codes::INTERNAL_ERROR));
    }

    #[tokio::test]
    async fn garbage_ends_the_peer_and_fails_waiting_requests() {
        let (a, b) = tokio::io::duplex(1024);
        let (ar, aw) = tokio::io::split(a);
        let (_br, mut bw) = tokio::io::split(b);
        let left = Peer::start(ar, aw);
        let waiting = {
            let peer = left.peer.clone();
            tokio::spawn(async move { peer.request_value("x", ()).await })
        };
        bw.write_all(b"hello there\n").await.expect("write");
        let end = left.peer.ended().await;
        assert!(matches!(end, PeerEnd::Violation(ref s) if s.contains("hello there")), "{end:?}");
        assert!(waiting.await.expect("join").is_err());
    }

    #[tokio::test]
    async fn a_foreign_peer_takes_string_ids_and_skips_noise() {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(ours);
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let peer = Peer::start_foreign(read, write, move |message| {
            let _ = seen_tx.send(message);
        });
        let (their_read, mut their_write) = tokio::io::split(theirs);
        let mut their_lines = BufReader::new(their_read).lines();

        let asking = tokio::spawn({
            let peer = peer.clone();
            async move { peer.request_value("initialize", json!({"protocolVersion": 1})).await }
        });
        let sent: Value =
            serde_json::from_str(&their_lines.next_line().await.expect("read").expect("a line")).expect("json");
        assert_eq!(sent["method"], "initialize");
        let answer = format!(
            "not json at all\n{{\"jsonrpc\":\"2.0\",\"id\":\"req-1\",\"method\":\"fs/read_text_file\",\"params\":{{}}}}\n{{\"jsonrpc\":\"2.0\",\"id\":\"{}\",\"result\":{{\"ok\":true}}}}\n",
            sent["id"]
        );
        their_write.write_all(answer.as_bytes()).await.expect("write");
        assert_eq!(asking.await.expect("join").expect("answered"), json!({"ok": true}));
        let Some(Incoming::Request(request)) = seen.recv().await else { panic!("a request") };
        assert_eq!((request.responder.id(), request.method.as_str()), (&json!("req-1"), "fs/read_text_file"));
        request.responder.ok(json!({"content": "x"}));
        let back: Value =
            serde_json::from_str(&their_lines.next_line().await.expect("read").expect("a line")).expect("json");
        assert_eq!(back["id"], "req-1");

        drop(their_write);
        drop(their_lines);
        assert_eq!(peer.ended().await, PeerEnd::Eof);
        assert!(matches!(peer.request_value("x", Value::Null).await, Err(PeerError::Closed)));
    }
}

//! A child's stdin as JSON lines, and the requests waiting for the answers it writes back: what the
//! backends whose programs speak a line protocol of their own (Claude's stream-json control
//! channel, pi's RPC) share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::Value;
use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// A process's stdin as JSON lines, written in order (and batched) by a task of its own. Closing it
/// lets what was sent be written, then closes stdin: the process reads its end.
pub struct LineWriter {
    sender: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

impl LineWriter {
    /// Starts writing to `stdin` on the current tokio runtime.
    pub fn start<W: AsyncWrite + Unpin + Send + 'static>(stdin: W) -> Self {
        let (sender, lines) = mpsc::unbounded_channel();
        // The task ends when the writer is closed (or dropped), or the process stops reading.
        tokio::spawn(crate::rpc::write_lines(stdin, lines, CancellationToken::new()));
        Self { sender: Mutex::new(Some(sender)) }
    }

    /// Writes `message` as one line; false once closed.
    pub fn send(&self, message: &Value) -> bool {
        match lock(&self.sender).as_ref() {
            Some(sender) => sender.send(format!("{message}\n")).is_ok(),
            None => false,
        }
    }

    /// Closes stdin once what was sent is written.
    pub fn close(&self) {
        lock(&self.sender).take();
    }
}

/// Requests waiting for their answers, by the ids this side gave them (`<prefix><n>`).
pub struct Waiting<T> {
    prefix: &'static str,
    next: AtomicU64,
    waiting: Mutex<HashMap<String, oneshot::Sender<T>>>,
}

impl<T> Waiting<T> {
    /// No request waits yet; ids will read `<prefix>1`, `<prefix>2`, …
    pub fn new(prefix: &'static str) -> Self {
        Self { prefix, next: AtomicU64::new(1), waiting: Mutex::new(HashMap::new()) }
    }

    /// A fresh id.
    pub fn next_id(&self) -> String {
        format!("{}{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Waits for the answer to `id` (register before sending the request).
    pub fn wait_for(&self, id: &str) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(id.to_owned(), tx);
        rx
    }

    /// Hands `answer` to whoever waits for `id`; false when nobody does.
    pub fn answer(&self, id: &str, answer: T) -> bool {
        match lock(&self.waiting).remove(id) {
            Some(tx) => {
                let _ = tx.send(answer);
                true
            }
            None => false,
        }
    }

    /// Stops waiting for `id` (the request could not be sent, or its time ran out).
    pub fn forget(&self, id: &str) {
        lock(&self.waiting).remove(id);
    }

    /// Every request still waiting hears that no answer will come (its receiver closes).
    pub fn fail_all(&self) {
        lock(&self.waiting).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_reach_their_waiters_and_the_rest_hear_none_will_come() {
        let waiting: Waiting<u32> = Waiting::new("ahpd-");
        let (one, two) = (waiting.next_id(), waiting.next_id());
        assert_eq!((one.as_str(), two.as_str()), ("ahpd-1", "ahpd-2"));
        let (first, second) = (waiting.wait_for(&one), waiting.wait_for(&two));
        assert!(waiting.answer(&one, 7));
        assert!(!waiting.answer("ahpd-9", 9), "an answer to nothing asked");
        waiting.fail_all();
        assert_eq!(first.await.ok(), Some(7));
        assert!(second.await.is_err());
    }
}

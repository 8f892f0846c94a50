//! Helpers for this crate's unit tests: a [`SessionHost`] whose emitted actions are captured, and
//! the recorded CLI output under `tests/fixtures/`.

use std::sync::{Arc, Mutex};

use agent_runner::rpc::{Incoming, Peer};
use agent_runner::SessionHost;
use ahp_types::actions::StateAction;
use protocol::EmitParams;
use serde_json::Value;

/// What a captured host was told.
#[derive(Clone)]
pub struct Captured {
    sender: Peer,
    actions: Arc<Mutex<Vec<StateAction>>>,
    kept: Arc<Mutex<Vec<(String, u32, String)>>>,
}

impl Captured {
    /// Every action emitted so far, in order (waits for those still on the wire).
    pub async fn actions(&self) -> Vec<StateAction> {
        self.flush().await;
        self.actions.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// What was handed over to keep (`resource/keep`): call, place and bytes, in order.
    pub async fn kept(&self) -> Vec<(String, u32, String)> {
        self.flush().await;
        self.kept.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// A request behind every notification sent before it: once it is answered, they all arrived.
    async fn flush(&self) {
        let _ = self.sender.request_value("flush", ()).await;
    }
}

/// A session host over an in-memory pipe whose other end records what it is told.
pub fn capture_host() -> (SessionHost, Captured) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (our_read, our_write) = tokio::io::split(ours);
    let (their_read, their_write) = tokio::io::split(theirs);
    let sender = Peer::start(our_read, our_write);
    let receiver = Peer::start(their_read, their_write);
    let actions = Arc::new(Mutex::new(Vec::new()));
    let into_actions = actions.clone();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let into_kept = kept.clone();
    let mut incoming = receiver.incoming;
    tokio::spawn(async move {
        let _keep = receiver.peer;
        while let Some(message) = incoming.recv().await {
            match message {
                Incoming::Notification { method, params } if method == protocol::methods::worker::EMIT => {
                    if let Ok(emit) = serde_json::from_value::<EmitParams>(params) {
                        if let Ok(mut a) = into_actions.lock() {
                            a.push(emit.action);
                        }
                    }
                }
                Incoming::Notification { method, params } if method == protocol::methods::worker::RESOURCE_KEEP => {
                    if let Ok(keep) = serde_json::from_value::<protocol::KeepResourceParams>(params) {
                        if let Ok(mut k) = into_kept.lock() {
                            k.push((keep.call_id, keep.index, keep.data));
                        }
                    }
                }
                Incoming::Notification { .. } => {}
                Incoming::Request(request) => request.responder.ok(Value::Null),
            }
        }
    });
    let host = SessionHost::new(sender.peer.clone(), "ahp-session:/s".into(), "ahp-chat:/c".into());
    (host, Captured { sender: sender.peer, actions, kept })
}

/// The lines of a recorded CLI output under `tests/fixtures/`.
pub fn recorded(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap_or(Value::Null)).collect()
}

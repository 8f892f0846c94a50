//! A host with no worker process and no listener, for the fuzz targets (`fuzz/`), the property
//! tests and the in-process host tests (`ahpd/tests/frames.rs`, `ahpd/tests/host.rs`) that drive
//! [`Host::handle_frame`] directly: its store is in a folder the caller gives, it offers this
//! host's own tools, and its only backend, when asked for, is the echo agent served inside this
//! process.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::host::core::{ConnId, Frame};
use crate::host::requests::ConnState;
use crate::host::{Host, HostConfig};
use crate::supervisor::{Launch, Supervisor, WorkerSpec};

/// A host and what stops it.
pub struct BareHost {
    /// The host.
    pub host: Host,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// One connection to a bare host: its state and what the host sent it.
pub struct BareConn {
    /// Its state, for [`Host::handle_frame`].
    pub state: ConnState,
    /// Frames the host queued for it.
    pub outbox: mpsc::Receiver<Frame>,
}

impl BareHost {
    /// Starts a host whose store lives in `dir`. With `echo`, the provider `echo` (pace 0) runs in
    /// this process and this waits for its handshake; without, the host has no backend at all.
    /// Call inside a tokio runtime.
    pub async fn start(dir: &Path, echo: bool, config: HostConfig) -> anyhow::Result<Self> {
        Self::start_with(dir, if echo { &["echo"] } else { &[] }, config).await
    }

    /// Starts a host whose store lives in `dir`, with one provider of each built-in `kinds`
    /// (`echo` at pace 0, `notes`) running in this process, named after its kind; waits until each
    /// is ready. Call inside a tokio runtime.
    pub async fn start_with(dir: &Path, kinds: &[&str], config: HostConfig) -> anyhow::Result<Self> {
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let specs = kinds.iter().map(|kind| in_process_spec(dir, kind)).collect();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let supervisor = Supervisor::new(specs, events_tx, cancel.child_token(), tracker.clone());
        let store = crate::store::Store::open(&dir.join("sessions.db"))?;
        let worktrees = crate::worktrees::Worktrees::new(crate::worktrees::Settings {
            root: dir.join("worktrees"),
            worktree_by_default: false,
            worktree_providers: Vec::new(),
        });
        let features =
            crate::host::facade::Features { tools: crate::tools::HostTools::new(), workspaces: worktrees.clone() };
        let host = Host::new(config, store, supervisor.clone(), features, cancel.clone(), tracker.clone());
        worktrees.start(&host);
        host.run_events(events_rx);
        supervisor.start_all();
        supervisor.first_starts(Duration::from_secs(10)).await;
        for kind in kinds {
            // The root state lists the agent once its handshake and schema were handled.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while host.lock().agent(kind).and_then(|a| a.schema.as_ref()).is_none() {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "the in-process {kind} agent never became ready"
                );
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Ok(Self { host, cancel, tracker })
    }

    /// Opens a connection with the given limits and queue size.
    pub fn connect(&self, capacity: usize) -> BareConn {
        let (tx, outbox) = mpsc::channel(capacity.max(1));
        let kick = self.cancel.child_token();
        let id: ConnId = self.host.connect(tx, kick, crate::users::Principal::Root);
        BareConn { state: ConnState::new(id, self.host.config().limits.clone()), outbox }
    }

    /// Closes a connection.
    pub fn disconnect(&self, conn: BareConn) {
        self.host.disconnect(conn.state.id);
    }

    /// Creates `ahp-session:/<id>` on echo when it does not exist (its default chat is
    /// `ahp-chat:/<id>`), so frames have a live session and chat to act on.
    pub async fn ensure_session(&self, id: &str) -> anyhow::Result<()> {
        let uri = format!("ahp-session:/{id}");
        if self.host.lock().session(&uri).is_some() {
            return Ok(());
        }
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"bare-setup"}}"#;
        let create = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"createSession","params":{{"channel":"{uri}","provider":"echo"}}}}"#
        );
        let answers = self.feed(&[init.to_owned(), create]).await?;
        match answers.iter().find(|a| a["id"] == 2) {
            Some(answer) if answer.get("error").is_none() => Ok(()),
            other => anyhow::bail!("could not create {uri}: {other:?}"),
        }
    }

    /// Sends each text as one frame on a fresh connection, lets the host's tasks run a little, and
    /// answers what the host sent back. Every message it sent must be a JSON-RPC 2.0 object: one
    /// that is not is an error naming it.
    pub async fn feed(&self, frames: &[String]) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut conn = self.connect(4096);
        for text in frames {
            self.host.handle_frame(&mut conn.state, text);
            if conn.state.close_after_flush {
                break;
            }
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        let mut answers = Vec::new();
        while let Ok(frame) = conn.outbox.try_recv() {
            let value: serde_json::Value = serde_json::from_str(frame.as_str())
                .map_err(|e| anyhow::anyhow!("the host sent something that is not JSON ({e}): {}", frame.as_str()))?;
            anyhow::ensure!(
                value.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0"),
                "the host sent something that is not JSON-RPC 2.0: {value}"
            );
            answers.push(value);
        }
        self.disconnect(conn);
        Ok(answers)
    }

    /// Stops every task the host started, the in-process agent's among them.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.tracker.wait()).await;
    }
}

fn in_process_spec(dir: &Path, kind: &str) -> WorkerSpec {
    let mut options = serde_json::Map::new();
    if kind == "echo" {
        options.insert("paceMs".into(), serde_json::Value::from(0));
    }
    WorkerSpec {
        provider: kind.into(),
        kind: kind.into(),
        launch: Launch::InProcess { kind: kind.into() },
        options,
        data_dir: dir.join("workers").join(kind),
        handshake_timeout: Duration::from_secs(10),
        policy: protocol::Policy::default(),
    }
}

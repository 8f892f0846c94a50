//! A host with no worker process and no listener, for the fuzz targets (`fuzz/`), the property
//! tests and the in-process host tests (`ahpd/tests/frames.rs`, `ahpd/tests/host.rs`, and the
//! rule scenarios of `ahpd/tests/rules/` on the `World` of `ahpd/tests/world/`) that drive
//! [`Host::handle_frame`] directly: its store is in a folder the caller gives, it offers this
//! host's own tools, and its backends are the built-in agents (echo, notes) served inside this
//! process over the worker protocol.

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
    worktrees: std::sync::Arc<crate::worktrees::Worktrees>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// One connection to a bare host: its state and what the host sent it.
pub struct BareConn {
    /// Its state, for [`Host::handle_frame`].
    pub state: ConnState,
    /// Frames the host queued for it.
    pub outbox: mpsc::Receiver<Frame>,
    /// Cancelled when the host closes the connection (a person cut off, another connection taking
    /// its client id, a queue it did not read), as the listener's socket task would see it.
    pub kicked: CancellationToken,
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
        let agents: Vec<BareAgent> = kinds.iter().map(|kind| BareAgent::new(kind)).collect();
        Self::start_agents(dir, &agents, config).await
    }

    /// Starts a host whose store lives in `dir`, with the given built-in agents running in this
    /// process; waits until each is ready. Call inside a tokio runtime.
    pub async fn start_agents(dir: &Path, agents: &[BareAgent], config: HostConfig) -> anyhow::Result<Self> {
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let specs = agents.iter().map(|agent| in_process_spec(dir, agent)).collect();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let supervisor = Supervisor::new(specs, events_tx, cancel.child_token(), tracker.clone());
        let store = crate::store::Store::open(&dir.join("sessions.db"))?;
        let worktrees = crate::worktrees::Worktrees::new(crate::worktrees::Settings {
            root: dir.join("worktrees"),
            worktree_by_default: false,
            worktree_providers: Vec::new(),
            boxes: Vec::new(),
            box_by_default: None,
        })?;
        let features =
            crate::host::facade::Features { tools: crate::tools::HostTools::new(), workspaces: worktrees.clone() };
        let host = Host::new(config, store, supervisor.clone(), features, cancel.clone(), tracker.clone());
        worktrees.start(&host);
        host.run_events(events_rx);
        supervisor.start_all();
        supervisor.first_starts(Duration::from_secs(10)).await;
        for agent in agents {
            // The root state lists the agent once its handshake and schema were handled.
            let provider = agent.provider.as_str();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while host.lock().agent(provider).and_then(|a| a.schema.as_ref()).is_none() {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "the in-process {provider} agent never became ready"
                );
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // Wakeups that fell due while no host ran begin now, as the daemon's do once it is up.
        host.run_wakeups();
        Ok(Self { host, worktrees, cancel, tracker })
    }

    /// True while a feature of the host has work out of the runtime's sight: the worktrees'
    /// git runs as a child process, which a paused clock does not wait for.
    pub fn busy(&self) -> bool {
        self.worktrees.busy()
    }

    /// Waits until no feature has such work.
    pub async fn until_features_idle(&self) {
        self.worktrees.idle().await;
    }

    /// Opens a connection with the given queue size, as root (the deployment's own token).
    pub fn connect(&self, capacity: usize) -> BareConn {
        self.connect_as(capacity, crate::users::Principal::Root)
    }

    /// Opens a connection with the given queue size for `principal`, as the listener does once
    /// the token a client presented named a person in the users directory (or nobody).
    pub fn connect_as(&self, capacity: usize, principal: crate::users::Principal) -> BareConn {
        let (tx, outbox) = mpsc::channel(capacity.max(1));
        let kicked = self.cancel.child_token();
        let id: ConnId = self.host.connect(tx, kicked.clone(), principal.clone());
        // The connection's own state carries its principal too, as the listener's socket task sets it.
        let mut state = ConnState::new(id, self.host.config().limits.clone());
        state.principal = principal;
        BareConn { state, outbox, kicked }
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

/// One built-in agent of a bare host: the provider clients name, its kind, and its options.
#[derive(Debug, Clone)]
pub struct BareAgent {
    /// The provider id clients name in `createSession`.
    pub provider: String,
    /// The built-in kind that serves it (`echo`, `notes`).
    pub kind: String,
    /// Its config entry's options.
    pub options: serde_json::Map<String, serde_json::Value>,
}

impl BareAgent {
    /// The provider `kind`, named after its kind (echo unpaced).
    pub fn new(kind: &str) -> Self {
        let mut options = serde_json::Map::new();
        if kind == "echo" {
            options.insert("paceMs".into(), serde_json::Value::from(0));
        }
        Self { provider: kind.into(), kind: kind.into(), options }
    }

    /// The provider `provider`, served by the built-in `kind` with `options`.
    pub fn named(provider: &str, kind: &str, options: serde_json::Value) -> Self {
        let options = match options {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        Self { provider: provider.into(), kind: kind.into(), options }
    }
}

fn in_process_spec(dir: &Path, agent: &BareAgent) -> WorkerSpec {
    WorkerSpec {
        provider: agent.provider.clone(),
        kind: agent.kind.clone(),
        launch: Launch::InProcess { kind: agent.kind.clone() },
        options: agent.options.clone(),
        data_dir: dir.join("workers").join(&agent.provider),
        handshake_timeout: Duration::from_secs(10),
        policy: protocol::Policy::default(),
    }
}

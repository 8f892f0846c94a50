//! The `container` level: a session that runs in a disposable container on a container engine
//! (`engine.rs`: Docker or Podman through the Docker Engine API, local or remote). Its container
//! is made when its box is opened (as the session is made, or again after a restart), labelled
//! with the session, its worktree and git metadata bind-mounted at the same paths (so paths and
//! `git` agree inside and out), the `ahpd` binary read-only beside them; it is removed when the
//! session goes, when the daemon stops, or by the sweep at the next start after a `kill -9`.
//!
//! Every process of the session starts through the launcher `ahpd box-exec` (`exec.rs`), which
//! asks the session's gate (a socket the daemon serves here) for the container and runs the
//! program in it with its stdio attached. The gate gives each launcher a mark and, when the
//! launcher lets go of it, ends in the container what it left (`sweep.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_runner::sync::lock;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::engine::{ContainerEngine, Make, LABEL_KIND, LABEL_SESSION};
use super::exec::Gate;
use super::sweep;
use super::{Engine, Opened};

/// What the `container` level is made from, from the config.
#[derive(Debug, Clone, Default)]
pub struct ContainerSettings {
    /// The image a session runs when its repository has no `.devcontainer` (`containerImage`,
    /// else the computer plugin's `options.image`).
    pub image: Option<String>,
    /// Folders outside the worktree a session may write, mounted at their own paths (the
    /// agent's own state: `sandboxWritable`).
    pub writable: Vec<PathBuf>,
    /// Folders mounted read-only at their own paths (`containerMounts`: where the agents' CLIs
    /// are installed).
    pub read_only: Vec<PathBuf>,
    /// The CPUs its container may use (`containerCpus`, else the computer plugin's).
    pub cpus: Option<f64>,
    /// The memory its container may use, in bytes (`containerMemory`, else the computer
    /// plugin's).
    pub memory: Option<i64>,
}

impl ContainerSettings {
    /// From the config: `containerImage`, `containerCpus` and `containerMemory` (each else the
    /// computer plugin's `options.image`, `options.cpus`, `options.memory`), `containerMounts`,
    /// and the sandbox's writable folders.
    pub fn of(config: &crate::config::Config, sandbox: &super::SandboxSettings) -> Self {
        let plugin = config.get("plugins")["computer"]["options"].clone();
        let own_or_plugins = |key: &str, plugins: &str| {
            Some(config.get(key)).filter(|v| !v.is_null()).unwrap_or_else(|| plugin[plugins].clone())
        };
        let image = own_or_plugins("containerImage", "image").as_str().map(str::to_owned);
        let memory = own_or_plugins("containerMemory", "memory");
        Self {
            image,
            writable: sandbox.writable.clone(),
            read_only: config.strings("containerMounts").iter().map(PathBuf::from).collect(),
            cpus: own_or_plugins("containerCpus", "cpus").as_f64(),
            memory: memory.as_str().and_then(super::computer::parse_memory).or_else(|| memory.as_i64()),
        }
    }
}

/// The `container` level on one engine.
pub struct Container {
    engine: Result<ContainerEngine, String>,
    /// Whether the engine answered when the daemon started.
    answered: Result<(), String>,
    settings: ContainerSettings,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Container {
    /// The level on `engine`, which answered (or not) when the daemon started.
    pub fn new(
        engine: Result<ContainerEngine, String>,
        answered: Result<(), String>,
        settings: ContainerSettings,
        tracker: TaskTracker,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self { engine, answered, settings, tracker, cancel })
    }

    fn url(&self) -> String {
        self.engine.as_ref().map(|e| e.url().to_owned()).unwrap_or_default()
    }
}

impl Engine for Container {
    fn level(&self) -> &'static str {
        "container"
    }

    fn name(&self) -> String {
        format!("container engine at {}", self.url())
    }

    fn reaches(&self) -> String {
        format!(
            "A worktree of its own, and everything the agent runs inside a disposable container on the engine at {}: it sees the container's files and its worktree, not the rest of this machine's files; it shares the engine machine's network. It may run without asking.",
            self.url()
        )
    }

    fn ready(&self) -> Result<(), String> {
        self.engine.as_ref().map(|_| ())?;
        self.answered.clone()
    }

    fn open(&self, session: &str, worktree: &Path, _ask: Option<super::net::AskToReach>) -> Result<Opened, String> {
        let engine = self.engine.clone()?;
        let ahpd = std::env::current_exe().map_err(|e| format!("ahpd cannot find its own program: {e}"))?;
        let dir = tempfile::Builder::new()
            .prefix("ahpd-container-")
            .tempdir()
            .map_err(|e| format!("the container's gate could not be made: {e}"))?;
        let gate = dir.path().join("gate.sock");
        let listener = UnixListener::bind(&gate).map_err(|e| format!("the container's gate could not be made: {e}"))?;
        let name = format!("ahpd-session-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let described = Arc::new(Mutex::new(json!({
            "level": "container",
            "engine": engine.url(),
            "session": session,
            "worktree": worktree.display().to_string(),
            "container": name,
            "reaches": ["the engine machine's network"],
            "cpuLimit": self.settings.cpus,
            "memoryLimitBytes": self.settings.memory,
        })));
        let cancel = self.cancel.child_token();
        let (made_tx, made) = watch::channel(None);
        let make = self.make(session, worktree, &ahpd, name);
        let keeping = Keeping {
            engine: engine.clone(),
            make,
            worktree: worktree.to_owned(),
            default_image: self.settings.image.clone(),
            described: described.clone(),
            made: made_tx,
        };
        self.tracker.spawn(keeping.run(cancel.clone()));
        let sweeps = Sweeps { engine: engine.clone(), tracker: self.tracker.clone() };
        self.tracker.spawn(serve_gate(listener, made, sweeps, cancel.clone()));
        let confined = protocol::Confined {
            level: "container".into(),
            wrap: vec![
                ahpd.display().to_string(),
                "box-exec".into(),
                "--engine".into(),
                engine.url().to_owned(),
                "--gate".into(),
                gate.display().to_string(),
                "--".into(),
            ],
            // The agents' CLIs skip their own permission prompts as root only when told they are boxed.
            env: [("IS_SANDBOX".to_owned(), "1".to_owned())].into(),
            // The image's own shell: the machine's (bash, zsh) may not be in it.
            shell: Some("sh".into()),
        };
        Ok(Opened { confined, described, keep: Box::new(Kept { _gate: dir, _ends: cancel.drop_guard() }) })
    }
}

impl Container {
    /// What the session's container is made with: its worktree and git metadata writable at
    /// their own paths, the hooks and config of the repository read-only over them, the agent's
    /// own state writable, `ahpd` and the configured folders read-only.
    fn make(&self, session: &str, worktree: &Path, ahpd: &Path, name: String) -> Make {
        let at = |p: &Path, mode: &str| format!("{}:{}{mode}", p.display(), p.display());
        let (git_dirs, git_read_only) = super::sandbox::git_dirs(worktree);
        super::make_state_folders(&self.settings.writable);
        let mut binds = vec![at(worktree, "")];
        binds.extend(git_dirs.iter().map(|d| at(d, "")));
        binds.extend(git_read_only.iter().filter(|p| p.exists()).map(|p| at(p, ":ro")));
        binds.extend(self.settings.writable.iter().filter(|p| p.exists()).map(|p| at(p, "")));
        binds.extend(self.settings.read_only.iter().filter(|p| p.exists()).map(|p| at(p, ":ro")));
        binds.push(at(ahpd, ":ro"));
        let labels = [(LABEL_KIND.to_owned(), "session".to_owned()), (LABEL_SESSION.to_owned(), session.to_owned())];
        Make {
            name,
            labels: labels.into(),
            binds,
            cmd: vec!["sleep".into(), "infinity".into()],
            cpus: self.settings.cpus,
            memory: self.settings.memory,
            // Its model API and the daemon's `/ahp-mcp` on the engine machine's loopback.
            network: Some("host".into()),
            ..Make::default()
        }
    }
}

/// What keeps a session's container: dropped with the session's box, it ends the container's
/// keeping (which removes it) and the gate.
struct Kept {
    _gate: tempfile::TempDir,
    _ends: tokio_util::sync::DropGuard,
}

/// The task that makes a session's container, says so on its gate, and removes it at the end.
struct Keeping {
    engine: ContainerEngine,
    /// The container, but its image.
    make: Make,
    /// The session's worktree, whose dev container names the image.
    worktree: PathBuf,
    /// The image when it names none.
    default_image: Option<String>,
    described: Arc<Mutex<Value>>,
    made: watch::Sender<Option<Made>>,
}

/// The session's container once it is made (its id), or why it could not be.
type Made = Result<String, String>;

impl Keeping {
    async fn run(mut self, cancel: CancellationToken) {
        let session = self.make.labels.get(LABEL_SESSION).cloned().unwrap_or_default();
        let image = tokio::select! {
            () = cancel.cancelled() => return,
            image = image(&self.engine, &self.worktree, self.default_image.as_deref()) => image,
        };
        let made = match image {
            Ok(image) => {
                self.make.image = image;
                // Not cut short: a container the engine made is removed below, whenever the
                // session went.
                self.engine.make(&self.make).await
            }
            Err(why) => Err(why),
        };
        let said = match &made {
            Ok(id) => {
                tracing::info!(session, container = id, engine = self.engine.url(), "made the session's container");
                let mut described = lock(&self.described);
                described["container"] = Value::from(id.as_str());
                described["image"] = Value::from(self.make.image.as_str());
                Ok(id.clone())
            }
            Err(why) => {
                tracing::warn!(session, "the session's container could not be made: {why}");
                Err(format!("This session's container could not be made, so nothing of it runs: {why}"))
            }
        };
        self.made.send_replace(Some(said));
        cancel.cancelled().await;
        if let Ok(id) = made {
            match self.engine.remove(&id).await {
                Ok(()) => tracing::info!(session, container = id, "removed the session's container"),
                Err(e) => tracing::warn!(session, container = id, "the session's container could not be removed: {e}"),
            }
        }
    }
}

/// The session's image (`devcontainer.rs`), pulled when the engine does not hold it.
async fn image(engine: &ContainerEngine, worktree: &Path, default: Option<&str>) -> Result<String, String> {
    let image = super::devcontainer::image(engine, worktree, default).await?;
    if !engine.has_image(&image).await {
        engine.pull(&image).await?;
    }
    Ok(image)
}

/// What ends, in a session's container, what a launcher left there.
#[derive(Clone)]
struct Sweeps {
    engine: ContainerEngine,
    tracker: TaskTracker,
}

impl Sweeps {
    /// Ends in container `id` what carries `mark`.
    async fn sweep(&self, id: &str, mark: &str) {
        match self.engine.exec(id, sweep::argv(mark), 4096).await {
            Ok((said, 0)) => tracing::debug!(container = id, "a launcher's leftovers: {}", said.trim()),
            Ok((said, code)) => tracing::warn!(container = id, code, "a launcher's leftovers were not ended: {said}"),
            Err(e) => tracing::warn!(container = id, "a launcher's leftovers were not ended: {e}"),
        }
    }
}

/// Answers every `ahpd box-exec` that asks the gate, once the container is made (or not), each
/// with a mark of its own; when a launcher lets go of its connection, what it left is swept.
async fn serve_gate(
    listener: UnixListener,
    made: watch::Receiver<Option<Made>>,
    sweeps: Sweeps,
    cancel: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("a container's gate failed: {e}");
                    return;
                }
            },
        };
        let admitting = admit(stream, made.clone(), sweeps.clone(), cancel.clone());
        sweeps.tracker.spawn(admitting);
    }
}

/// Answers one launcher; holds its connection until it ends, then sweeps what it left (unless
/// the session's box is going, and its container with it).
async fn admit(
    mut stream: tokio::net::UnixStream,
    mut made: watch::Receiver<Option<Made>>,
    sweeps: Sweeps,
    cancel: CancellationToken,
) {
    let said = tokio::select! {
        () = cancel.cancelled() => return,
        said = made.wait_for(Option::is_some) => match said.as_deref() {
            Ok(Some(made)) => made.clone(),
            _ => return,
        },
    };
    let gate = match said {
        Ok(id) => Gate::Container { id, mark: sweep::new_mark() },
        Err(why) => Gate::Refused(why),
    };
    let Ok(mut line) = serde_json::to_vec(&gate) else { return };
    line.push(b'\n');
    if stream.write_all(&line).await.is_err() {
        return;
    }
    let Gate::Container { id, mark } = gate else { return };
    tokio::select! {
        () = cancel.cancelled() => return,
        () = until_let_go(&mut stream) => {}
    }
    sweeps.sweep(&id, &mark).await;
}

/// Until the other end of `stream` closes it (a launcher never writes on it).
async fn until_let_go(stream: &mut tokio::net::UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Adds to each container session's box, as `ahpd status` shows it, what its container uses now
/// (`memoryBytes`, `cpuNanoseconds`), asked of its engine (one stats read each, at most a
/// second; left out when the engine does not say).
pub async fn add_usage(boxes: &mut [Value]) {
    for described in boxes.iter_mut().filter(|b| b["level"] == "container") {
        let (Some(url), Some(id)) = (described["engine"].as_str(), described["container"].as_str()) else { continue };
        let Ok(engine) = ContainerEngine::connect(url, "") else { continue };
        let read = tokio::time::timeout(std::time::Duration::from_secs(1), engine.usage(id)).await;
        if let Ok(Some((memory, cpu))) = read {
            described["memoryBytes"] = Value::from(memory);
            described["cpuNanoseconds"] = Value::from(cpu);
        }
    }
}

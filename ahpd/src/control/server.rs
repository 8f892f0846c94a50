//! The daemon's side of the control socket: claims `ahpd.sock` (refusing to start beside a daemon
//! that already serves this data folder), answers `status`, stops on `stop`, and answers restart
//! preparation with the line a successor is started with.
//!
//! The socket comes from the `interprocess` crate (the design card's choice): its listener removes
//! the socket file when it is dropped, and the same code would serve a named pipe on Windows.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use interprocess::local_socket::tokio::prelude::*;
use interprocess::local_socket::{GenericFilePath, ListenerOptions};
use interprocess::os::unix::local_socket::ListenerOptionsExt;
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{client, Line, Record, Reply, Request, Status};
use crate::config::Config;
use crate::host::Host;
use crate::paths::Paths;

/// Set to `1` by `ahpd start` in the environment of the daemon it starts.
pub const DETACHED_ENV: &str = "AHPD_DETACHED";

/// Set by the unit `ahpd service install` writes to the manager that runs the daemon (`systemd`,
/// `launchd`): its log goes to the file, and `ahpd restart` asks that manager.
pub const SERVICE_ENV: &str = "AHPD_SERVICE";

/// The longest request line read.
const MAX_REQUEST: usize = 64 * 1024;

/// How long a connection may stay quiet before it is closed.
const IDLE: Duration = Duration::from_secs(30);

/// What the daemon knows about itself that the host does not.
pub struct Facts {
    paths: Paths,
    started: Instant,
    started_at: String,
    argv: Vec<String>,
    cwd: PathBuf,
    detached: bool,
    service: Option<String>,
    log: Option<PathBuf>,
    config_files: Vec<PathBuf>,
    config: serde_json::Map<String, serde_json::Value>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    offered: Vec<super::Offered>,
    url: OnceLock<String>,
    recovered: Option<crate::store::recovery::Recovery>,
}

impl Facts {
    /// This process's facts, with the configuration it runs with and the file its token is
    /// kept in.
    pub fn new(
        paths: &Paths,
        config: &Config,
        token: Option<String>,
        token_file: Option<&std::path::Path>,
        offered: Vec<super::Offered>,
    ) -> Self {
        Self {
            paths: paths.clone(),
            started: Instant::now(),
            started_at: crate::host::now_iso(),
            argv: std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            detached: std::env::var(DETACHED_ENV).is_ok_and(|v| v == "1"),
            service: std::env::var(SERVICE_ENV).ok().filter(|v| !v.is_empty()),
            log: match crate::logging::destination(&paths.log()) {
                crate::logging::Destination::File(path) => Some(path),
                crate::logging::Destination::Stderr => None,
            },
            config_files: config.files.clone(),
            config: config.shown().into_iter().map(|(k, v, _)| (k, v)).collect(),
            token,
            token_file: token_file.map(std::path::Path::to_owned),
            offered,
            url: OnceLock::new(),
            recovered: None,
        }
    }

    /// These facts, with what was recovered at start from a damaged store.
    pub fn with_recovery(mut self, recovered: Option<crate::store::recovery::Recovery>) -> Self {
        self.recovered = recovered;
        self
    }

    /// Notes where clients connect and writes the record; the guard removes it again.
    pub fn listening(&self, url: &str) -> std::io::Result<super::record::RecordGuard> {
        let _ = self.url.set(url.to_owned());
        super::record::RecordGuard::write(&self.paths.record(), &self.record())
    }

    /// Writes the record again (its process groups changed), unless it is gone or names another
    /// daemon.
    pub fn rewrite_record(&self) -> std::io::Result<()> {
        let path = self.paths.record();
        match Record::read(&path) {
            Ok(Some(record)) if record.pid == std::process::id() => self.record().write(&path),
            _ => Ok(()),
        }
    }

    fn url(&self) -> String {
        self.url.get().cloned().unwrap_or_default()
    }

    fn record(&self) -> Record {
        Record {
            pid: std::process::id(),
            url: self.url(),
            started_at: self.started_at.clone(),
            argv: crate::config::redact_argv(&self.argv),
            cwd: self.cwd.clone(),
            detached: self.detached,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            socket: self.paths.socket(),
            token_file: self.token_file.clone(),
            groups: agent_runner::child::groups::recorded(),
        }
    }

    fn status(&self, host: &Host) -> Status {
        let boxes = boxes(host);
        Status {
            pid: std::process::id(),
            url: self.url(),
            started_at: self.started_at.clone(),
            uptime_seconds: self.started.elapsed().as_secs(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            detached: self.detached,
            argv: crate::config::redact_argv(&self.argv),
            cwd: self.cwd.clone(),
            store: self.paths.store(),
            service: self.service.clone(),
            log: self.log.clone(),
            config_files: self.config_files.clone(),
            host: host.status(),
            offered: self.offered.clone(),
            config: self.config.clone(),
            store_recovered: self.recovered.clone(),
            store_backups: crate::store::backup::list(&crate::store::backup::folder(&self.paths.data_dir)),
            agent_merge: {
                let feature = host.agent_merge();
                crate::agentmerge::status(&host.lock(), feature.as_deref())
            },
            boxes,
        }
    }

    /// The line a successor starts with: the real arguments (a token given on the command line
    /// included), answered only on the owner's control socket and never written down.
    fn line(&self) -> Line {
        Line {
            pid: std::process::id(),
            url: self.url(),
            argv: self.argv.clone(),
            cwd: self.cwd.clone(),
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        }
    }
}

/// Each confined session's box, as `ahpd status` shows it (taken before anything else locks the
/// host for the status).
fn boxes(host: &Host) -> Vec<serde_json::Value> {
    let core = host.lock();
    let mut boxes: Vec<serde_json::Value> = core
        .session_states()
        .filter_map(|(session, _)| {
            let mut described = core.box_of(session)?;
            described["session"] = serde_json::Value::from(session.as_str());
            Some(described)
        })
        .collect();
    boxes.sort_by_key(|b| b["session"].as_str().map(str::to_owned));
    boxes
}

/// Why the control socket could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another daemon serves this data folder.
    #[error("another ahpd already runs with {data} ({who}); stop it first (ahpd stop), or give this one its own data folder (XDG_DATA_HOME)")]
    Taken {
        /// The data folder.
        data: String,
        /// Which one, as far as it says.
        who: String,
    },
    /// The socket could not be made.
    #[error("could not listen on {0}: {1}")]
    Io(String, std::io::Error),
}

/// Binds the control socket, after making sure no other daemon serves it. A socket file left by
/// a daemon that died is removed.
pub async fn claim(paths: &Paths) -> Result<LocalSocketListener, ClaimError> {
    let socket = paths.socket();
    let shown = socket.display().to_string();
    if socket.symlink_metadata().is_ok() {
        if client::listening(&socket).await {
            let who = match client::ask(&socket, &Request::Status, Duration::from_secs(2)).await {
                Ok(Reply { status: Some(s), .. }) => format!("pid {}, {}", s.pid, s.url),
                _ => format!("it answers on {shown}"),
            };
            return Err(ClaimError::Taken { data: paths.data_dir.display().to_string(), who });
        }
        tracing::info!("removing {shown}, left by a daemon that is gone");
        std::fs::remove_file(&socket).map_err(|e| ClaimError::Io(shown.clone(), e))?;
    }
    let name = socket.as_path().to_fs_name::<GenericFilePath>().map_err(|e| ClaimError::Io(shown.clone(), e))?;
    ListenerOptions::new()
        .name(name)
        .mode(0o600)
        .reclaim_name(true)
        .create_tokio()
        .map_err(|e| ClaimError::Io(shown, e))
}

/// Serves the control socket until the daemon stops; a `stop` request cancels `cancel`.
pub fn serve(
    listener: LocalSocketListener,
    host: Host,
    facts: Arc<Facts>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let connections = tracker.clone();
    tracker.spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = cancel.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok(stream) => {
                    let (host, facts, cancel) = (host.clone(), facts.clone(), cancel.clone());
                    connections.spawn(async move { connection(stream, host, facts, cancel).await });
                }
                Err(e) => {
                    tracing::warn!("control socket: {e}");
                    // Do not spin on an error that repeats (out of file descriptors, say).
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
            }
        }
        // Dropping the listener removes the socket file.
        drop(listener);
    });
}

async fn connection(stream: LocalSocketStream, host: Host, facts: Arc<Facts>, cancel: CancellationToken) {
    // `&Stream` reads and writes; no split needed.
    let mut lines = FramedRead::new(&stream, LinesCodec::new_with_max_length(MAX_REQUEST));
    let mut out = FramedWrite::new(&stream, LinesCodec::new());
    loop {
        let line = tokio::select! {
            _ = cancel.cancelled() => break,
            line = tokio::time::timeout(IDLE, lines.next()) => line,
        };
        let Ok(Some(Ok(line))) = line else { break };
        let (reply, stop) = answer(&line, &host, &facts).await;
        let text = serde_json::to_string(&reply).unwrap_or_else(|_| r#"{"ok":false}"#.to_owned());
        if let Err(e) = out.send(text).await {
            tracing::debug!("control socket: could not answer: {e}");
            break;
        }
        if stop {
            // Answered first, so the verb knows it was heard before the socket goes away.
            cancel.cancel();
            break;
        }
    }
}

/// The reply to one request line, and whether the daemon stops now.
async fn answer(line: &str, host: &Host, facts: &Facts) -> (Reply, bool) {
    let request = match serde_json::from_str::<Request>(line) {
        Ok(request) => request,
        Err(e) => return (Reply::refused(format!("not a control request: {e}")), false),
    };
    match request {
        Request::Status => {
            let mut status = facts.status(host);
            // The containers' memory and CPU, asked of their engine once the host is let go.
            crate::confine::container::add_usage(&mut status.boxes).await;
            (Reply { ok: true, status: Some(status), ..Reply::default() }, false)
        }
        Request::Stop { unless_busy } => {
            if unless_busy {
                if let Some(why) = busy(host) {
                    return (Reply::refused(why), false);
                }
            }
            tracing::info!("stop asked for on the control socket");
            (Reply::done(), true)
        }
        Request::Token => (Reply { ok: true, token: facts.token.clone(), ..Reply::default() }, false),
        Request::PrepareRestart { force } => {
            if !facts.detached && facts.service.is_none() {
                let why = format!(
                    "This daemon runs in the foreground, not from ahpd start; restart it where it runs (pid {}, started in {}).",
                    std::process::id(),
                    facts.cwd.display()
                );
                return (Reply::refused(why), false);
            }
            if !force {
                if let Some(why) = busy(host) {
                    return (Reply::refused(why), false);
                }
            }
            (Reply { ok: true, line: Some(facts.line()), ..Reply::default() }, false)
        }
        Request::StoreCheck => (store_check(facts.paths.store()).await, false),
        Request::StoreBackup { to } => (store_backup(facts, to).await, false),
    }
}

/// The store checked as `ahpd store check` checks it, on a blocking thread with a connection of
/// its own (beside the host's, never under its lock).
async fn store_check(store: PathBuf) -> Reply {
    use crate::store::recovery;
    let checked = tokio::task::spawn_blocking(move || {
        let problems = recovery::check(&store, recovery::Depth::Full).map_err(|e| e.to_string())?;
        let counts = if problems.is_empty() { recovery::counts(&store).ok() } else { None };
        Ok::<_, String>(super::Checked { problems, counts })
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match checked {
        Ok(checked) => Reply { ok: true, checked: Some(checked), ..Reply::default() },
        Err(why) => Reply::refused(why),
    }
}

/// A backup taken now, as `ahpd store backup` takes one, on a blocking thread.
async fn store_backup(facts: &Facts, to: Option<PathBuf>) -> Reply {
    let store = facts.paths.store();
    let folder = crate::store::backup::folder(&facts.paths.data_dir);
    let keep = facts.config.get("storeBackups").and_then(serde_json::Value::as_u64).unwrap_or(1);
    let keep = usize::try_from(keep).unwrap_or(1);
    let taken =
        tokio::task::spawn_blocking(move || crate::store::backup::take_now(&store, &folder, keep, to.as_deref()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
    match taken {
        Ok(file) => Reply { ok: true, backup: Some(file), ..Reply::default() },
        Err(why) => Reply::refused(why),
    }
}

/// The refusal while a turn runs.
fn busy(host: &Host) -> Option<String> {
    let running = host.status().running_turns;
    if running.is_empty() {
        return None;
    }
    let chats: Vec<&str> = running.iter().map(|t| t.chat.as_str()).collect();
    Some(format!("A turn is running in {}; pass --force to restart anyway.", chats.join(", ")))
}

//! How the verbs (`ahpd status|stop|restart|start`) reach a running daemon: a record file
//! (`daemon.json`, written once the port is bound, removed on a clean exit) and a local control
//! socket (`ahpd.sock`) that takes one JSON request per line and answers one JSON reply per line.
//!
//! **Invariant:** both live in the data folder, readable by the owner alone; the record never
//! carries the connection token (the socket answers it to its owner's client verbs).

pub mod client;
pub mod process;
pub mod record;
pub mod restarting;
pub mod server;
pub mod tree;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::host::status::HostStatus;

pub use record::Record;

/// A request on the control socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Where it runs and what it is doing.
    Status,
    /// Stop gracefully (every worker stopped). With `unlessBusy`, refused while a turn runs: the
    /// last step of a restart that was not forced.
    Stop {
        /// Refuse while a turn runs.
        #[serde(default, rename = "unlessBusy")]
        unless_busy: bool,
    },
    /// Restart preparation: may this daemon be restarted now, and with what line? Changes nothing.
    PrepareRestart {
        /// Restart even while a turn runs.
        #[serde(default)]
        force: bool,
    },
    /// The connection token a client presents, for the client verbs of the person who runs the
    /// daemon (the socket is theirs alone, as the token's file is); never written down.
    Token,
    /// `ahpd store check` of the store this daemon runs on: checked by the daemon, the one
    /// process that may open it while it runs (`store/mod.rs`).
    StoreCheck,
    /// `ahpd store backup` while this daemon runs: taken by the daemon into `to`, or into its
    /// backups folder keeping the newest `storeBackups`.
    StoreBackup {
        /// The file to write (one that does not exist yet).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<PathBuf>,
    },
}

/// The answer to a request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    /// It was done (or answered).
    pub ok: bool,
    /// Why not, as a sentence for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer to `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// The answer to `prepareRestart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<Line>,
    /// The answer to `token`: the token, when the daemon has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The answer to `storeCheck`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<Checked>,
    /// The answer to `storeBackup`: the backup's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
}

/// What a check of the store found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    /// What is wrong; empty when it is sound.
    pub problems: Vec<String>,
    /// Sessions, chats and turns it holds (counted when it is sound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<(i64, i64, i64)>,
}

impl Reply {
    /// Done.
    pub fn done() -> Self {
        Self { ok: true, ..Self::default() }
    }

    /// Refused, with the reason.
    pub fn refused(why: impl Into<String>) -> Self {
        Self { ok: false, error: Some(why.into()), ..Self::default() }
    }
}

/// A running daemon, as `ahpd status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Its process id.
    pub pid: u32,
    /// Where clients connect (no token); empty while it is still starting.
    pub url: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Seconds since it started.
    pub uptime_seconds: u64,
    /// Its version.
    pub version: String,
    /// Started by `ahpd start` (so `ahpd restart` can start it again).
    pub detached: bool,
    /// The arguments it was started with (after the program name), a credential as `<set>`.
    pub argv: Vec<String>,
    /// The folder it was started in.
    pub cwd: PathBuf,
    /// Its session store.
    pub store: PathBuf,
    /// The service manager that runs it (`systemd`, `launchd`), when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Its log file, when it writes one (detached, or run by a service manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    /// The config files it read.
    pub config_files: Vec<PathBuf>,
    /// Sessions, agents, running turns.
    #[serde(flatten)]
    pub host: HostStatus,
    /// The agents it offers: each one's kind, program and why it is there (`ahpd agents`).
    #[serde(default)]
    pub offered: Vec<Offered>,
    /// The configuration it runs with, credentials shown as `<set>`.
    pub config: serde_json::Map<String, serde_json::Value>,
    /// What it recovered at start from a damaged store, when it found one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_recovered: Option<crate::store::recovery::Recovery>,
    /// The store's backups, newest first.
    #[serde(default)]
    pub store_backups: Vec<PathBuf>,
    /// The folders Agent Merge is on for.
    #[serde(default)]
    pub agent_merge: Vec<crate::agentmerge::FolderStatus>,
    /// Each confined session's box (`sandbox`, with what it reaches) and the computers it made.
    #[serde(default)]
    pub boxes: Vec<serde_json::Value>,
}

/// One agent a daemon offers, as its backend table and config made it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Offered {
    /// The provider id clients name.
    pub provider: String,
    /// Its backend kind.
    pub kind: String,
    /// The program it runs, when it runs one (an agent CLI, or a worker program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Why it is offered ("configured", "found … on the PATH", "built in").
    pub why: String,
}

/// What a successor is started with: the old daemon's own line, folder and environment, so a
/// restart from another terminal starts the same daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    /// The old daemon's pid.
    pub pid: u32,
    /// Its URL.
    pub url: String,
    /// Its arguments (after the program name).
    pub argv: Vec<String>,
    /// Its working folder.
    pub cwd: PathBuf,
    /// Its environment.
    pub env: Vec<(String, String)>,
}

//! The record of the running daemon (`daemon.json` in the data folder): written atomically once
//! its port is bound, removed by the daemon when it exits cleanly, and found stale by the verbs
//! when it names a process that is gone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a running daemon writes about itself. The URL carries no token.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Its process id.
    pub pid: u32,
    /// Where clients connect, without a token.
    pub url: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Its arguments after the program name, a credential's value shown as `<set>`.
    pub argv: Vec<String>,
    /// The folder it was started in.
    pub cwd: PathBuf,
    /// Started by `ahpd start`.
    pub detached: bool,
    /// Its version.
    pub version: String,
    /// Its control socket.
    pub socket: PathBuf,
    /// The file its connection token is kept in (never the token), when it keeps one in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The process groups of its tree (its workers', and what they started), kept current while it
    /// runs, so that what a daemon killed with SIGKILL left running can be ended after it.
    #[serde(default)]
    pub groups: Vec<agent_runner::child::ProcessGroup>,
}

/// A record that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file exists and cannot be read.
    #[error("could not read {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
    /// The file is not a record.
    #[error("{0} is not a daemon record: {1}")]
    Garbled(PathBuf, serde_json::Error),
}

impl Record {
    /// Reads the record at `path`; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>, RecordError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RecordError::Unreadable(path.to_owned(), e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| RecordError::Garbled(path.to_owned(), e))
    }

    /// Writes it to `path` atomically, readable by the owner alone.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_private(path, &bytes)
    }
}

/// Removes the record at `path` if it still names `pid` (a successor's record is left alone).
pub fn remove_if_ours(path: &Path, pid: u32) {
    match Record::read(path) {
        Ok(Some(record)) if record.pid == pid => remove(path),
        Ok(_) => {}
        Err(e) => tracing::warn!("{e}"),
    }
}

/// Removes the record at `path`, whoever it names.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("could not remove {}: {e}", path.display());
        }
    }
}

/// Removes the daemon's record when dropped (on every way out of `serve`).
pub struct RecordGuard {
    path: PathBuf,
    pid: u32,
}

impl RecordGuard {
    /// Writes `record` to `path` and removes it again when the guard is dropped.
    pub fn write(path: &Path, record: &Record) -> std::io::Result<Self> {
        record.write(path)?;
        Ok(Self { path: path.to_owned(), pid: record.pid })
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        remove_if_ours(&self.path, self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32) -> Record {
        Record {
            pid,
            url: "ws://127.0.0.1:9187".into(),
            started_at: "2025-01-01T00:00:00.000Z".into(),
            argv: vec!["--port".into(), "0".into()],
            cwd: PathBuf::from("/"),
            detached: true,
            version: "0.1.0".into(),
            socket: PathBuf::from("/tmp/ahpd.sock"),
            token_file: None,
            groups: Vec::new(),
        }
    }

    #[test]
    fn written_read_back_and_removed_by_its_guard_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("daemon.json");
        assert!(Record::read(&path).expect("reads").is_none());
        let guard = RecordGuard::write(&path, &sample(7)).expect("writes");
        let back = Record::read(&path).expect("reads").expect("is there");
        assert_eq!(back.pid, 7);
        assert_eq!(back.argv, vec!["--port", "0"]);
        // A successor's record is not the guard's to remove.
        sample(8).write(&path).expect("writes");
        drop(guard);
        assert_eq!(Record::read(&path).expect("reads").map(|r| r.pid), Some(8));
        let guard = RecordGuard::write(&path, &sample(9)).expect("writes");
        drop(guard);
        assert!(Record::read(&path).expect("reads").is_none());
    }

    #[test]
    fn a_garbled_record_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("daemon.json");
        std::fs::write(&path, "{half").expect("write");
        let err = Record::read(&path).expect_err("garbled");
        assert!(err.to_string().contains("is not a daemon record"), "{err}");
    }
}

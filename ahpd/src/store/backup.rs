//! Online backups of the store: a consistent copy taken while the daemon runs, from a connection
//! of its own (never the host's, which writes under the host's lock), kept in `backups/` in the
//! data folder, the newest few kept (`storeBackups`, `storeBackupIntervalMs`).
//!
//! Why `VACUUM INTO` rather than the online backup API: it reads the store through its b-trees,
//! so a damaged store fails to back up (and says so) instead of being copied page for page, damage
//! and all, over a good backup; and its copy is compact. In WAL mode its read transaction never
//! blocks the daemon's writes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OpenFlags};
use tokio_util::sync::CancellationToken;

/// What a backup's file is named: `sessions-<UTC time>.db`.
const PREFIX: &str = "sessions-";
const SUFFIX: &str = ".db";

/// Why a backup was not taken.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// SQLite could not read the store or write the copy (a damaged store fails here).
    #[error("could not back up {store} to {to}: {source}")]
    Sql {
        /// The store.
        store: PathBuf,
        /// The backup being written.
        to: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A file could not be made, synced or moved.
    #[error("could not write the backup {to}: {source}")]
    Io {
        /// The backup being written.
        to: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

/// How often backups are taken and how many are kept.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Backups kept (0: none taken).
    pub keep: usize,
    /// How old the newest may grow before the next is taken (while the store changed).
    pub every: Duration,
}

/// The folder backups are kept in.
pub fn folder(data_dir: &Path) -> PathBuf {
    data_dir.join("backups")
}

/// Opens the store for reading alone: a backup never writes to it. Inside the daemon it shares the
/// host's lock and WAL index (`super::connect`).
fn read_only(store: &Path) -> rusqlite::Result<Connection> {
    super::connect(store, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
}

/// Copies the store at `store` into `to` (which must not exist) through `conn`, a connection to
/// it: written beside `to` first, synced, then renamed, so `to` is whole or absent. `make_room`
/// runs once the copy is whole, just before it takes its name (the old backups go then, and not
/// before a copy that failed).
fn copy(conn: &Connection, store: &Path, to: &Path, make_room: impl FnOnce()) -> Result<(), BackupError> {
    let io = |source| BackupError::Io { to: to.to_owned(), source };
    let dir = to.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    crate::fsutil::create_private_dir(dir).map_err(io)?;
    let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    // Made 0600 and empty first: VACUUM INTO writes into an empty file and keeps its mode.
    crate::fsutil::create_private_file(&temp).map_err(io)?;
    let written = conn
        .execute("VACUUM INTO ?1", [temp.to_string_lossy()])
        .map(drop)
        .map_err(|source| BackupError::Sql { store: store.to_owned(), to: to.to_owned(), source });
    let kept = written.and_then(|()| {
        std::fs::File::open(&temp).and_then(|f| f.sync_all()).map_err(io)?;
        make_room();
        std::fs::rename(&temp, to).map_err(io)
    });
    if kept.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    kept?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Backs the store at `store` up into the file `to` (which must not exist).
pub fn take(store: &Path, to: &Path) -> Result<(), BackupError> {
    let conn =
        read_only(store).map_err(|source| BackupError::Sql { store: store.to_owned(), to: to.to_owned(), source })?;
    copy(&conn, store, to, || {})
}

/// `ahpd store backup`: the store at `store`, checked first (a damaged one is not backed up), into
/// `to` (a file that must not exist) or into `folder` keeping the newest `keep`. Answers the
/// backup's file, or why there is none, as a sentence. The verb runs it when no daemon runs, the
/// daemon when one does (no other process may open its store then).
pub fn take_now(store: &Path, folder: &Path, keep: usize, to: Option<&Path>) -> Result<PathBuf, String> {
    use super::recovery;
    match recovery::check(store, recovery::Depth::Quick) {
        Ok(problems) if problems.is_empty() => {}
        Ok(problems) => {
            return Err(format!(
                "{} is damaged ({}); it was not backed up. A start of the daemon recovers what can be read.",
                store.display(),
                problems.join("; ")
            ))
        }
        Err(e) => return Err(e.to_string()),
    }
    match to {
        Some(to) if to.symlink_metadata().is_ok() => Err(format!("{} exists already; name a new file.", to.display())),
        Some(to) => take(store, to).map(|()| to.to_owned()).map_err(|e| e.to_string()),
        None => take_into(store, folder, keep).map_err(|e| e.to_string()),
    }
}

/// A new backup's name in `folder`, by the time now.
pub fn next_name(folder: &Path) -> PathBuf {
    let now = jiff::Timestamp::now();
    let stamp = format!("{}{:03}Z", now.strftime("%Y%m%dT%H%M%S."), now.subsec_millisecond());
    folder.join(format!("{PREFIX}{stamp}{SUFFIX}"))
}

/// The backups in `folder`, newest first.
pub fn list(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX))
        })
        .collect();
    // The names carry their UTC time, so they sort as they were taken.
    found.sort();
    found.reverse();
    found
}

/// Removes all but the newest `keep` backups in `folder`; answers those removed.
pub fn prune(folder: &Path, keep: usize) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for old in list(folder).into_iter().skip(keep) {
        match std::fs::remove_file(&old) {
            Ok(()) => removed.push(old),
            Err(e) => tracing::warn!("could not remove the old backup {}: {e}", old.display()),
        }
    }
    removed
}

/// When a file was last written.
fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// How long until the next backup is due: now when there is none, or when the newest is `every`
/// old and the store was written since it was taken; else when it will be.
fn due_in(store: &Path, folder: &Path, every: Duration) -> Duration {
    let Some(newest) = list(folder).first().and_then(|b| modified(b)) else { return Duration::ZERO };
    let log = super::recovery::beside(store, "-wal");
    let written = [modified(store), modified(&log)].into_iter().flatten().max();
    if written.is_none_or(|w| w <= newest) {
        // Nothing new to keep: look again in a while.
        return every;
    }
    let age = SystemTime::now().duration_since(newest).unwrap_or_default();
    every.saturating_sub(age)
}

/// Takes a backup into `folder` now and keeps the newest `keep`; answers its file.
pub fn take_into(store: &Path, folder: &Path, keep: usize) -> Result<PathBuf, BackupError> {
    let to = next_name(folder);
    let conn =
        read_only(store).map_err(|source| BackupError::Sql { store: store.to_owned(), to: to.clone(), source })?;
    copy(&conn, store, &to, || drop(prune(folder, keep.max(1) - 1)))?;
    Ok(to)
}

/// Takes backups of the store on `schedule` until `cancel`, each on a blocking thread with its own
/// connection (a stop interrupts one being taken). A failed one is logged and tried again after
/// an interval.
pub async fn keep_backing_up(store: PathBuf, folder: PathBuf, schedule: Schedule, cancel: CancellationToken) {
    if schedule.keep == 0 || schedule.every.is_zero() {
        return;
    }
    loop {
        let wait = due_in(&store, &folder, schedule.every);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if due_in(&store, &folder, schedule.every) > Duration::ZERO {
            continue;
        }
        let wait_an_interval = if !holds_sessions(&store) {
            // A store with no session yet has nothing a backup would keep.
            true
        } else {
            match backup_once(&store, &folder, schedule.keep, &cancel).await {
                Some(Ok(to)) => {
                    tracing::info!("the session store was backed up to {}", to.display());
                    false
                }
                Some(Err(e)) => {
                    tracing::warn!("{e}; tried again in {} ms", schedule.every.as_millis());
                    true
                }
                None => return,
            }
        };
        if wait_an_interval {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(schedule.every) => {}
            }
        }
    }
}

/// True unless the store is known to hold no session (one that cannot be read is backed up, to
/// say why not).
fn holds_sessions(store: &Path) -> bool {
    read_only(store)
        .and_then(|conn| conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0)))
        .map_or(true, |n| n > 0)
}

/// One backup on a blocking thread; `None` when the daemon stopped meanwhile.
async fn backup_once(
    store: &Path,
    folder: &Path,
    keep: usize,
    cancel: &CancellationToken,
) -> Option<Result<PathBuf, BackupError>> {
    let to = next_name(folder);
    let conn = match read_only(store) {
        Ok(conn) => conn,
        Err(source) => return Some(Err(BackupError::Sql { store: store.to_owned(), to, source })),
    };
    let interrupt = conn.get_interrupt_handle();
    let (store_path, folder_path, target) = (store.to_owned(), folder.to_owned(), to.clone());
    let mut work = tokio::task::spawn_blocking(move || {
        copy(&conn, &store_path, &target, || drop(prune(&folder_path, keep.max(1) - 1)))?;
        Ok(target)
    });
    tokio::select! {
        done = &mut work => Some(done.unwrap_or_else(|e| Err(BackupError::Io { to, source: std::io::Error::other(e) }))),
        _ = cancel.cancelled() => {
            interrupt.interrupt();
            let _ = work.await;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_are_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = dir.path().join("sessions.db");
        drop(crate::store::Store::open(&store).expect("store"));
        let folder = folder(dir.path());
        let mut taken = Vec::new();
        for _ in 0..4 {
            taken.push(take_into(&store, &folder, 2).expect("backup"));
            // Names are by the millisecond: the next one must not share it.
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(list(&folder), vec![taken[3].clone(), taken[2].clone()]);
        let conn = Connection::open(&taken[3]).expect("open backup");
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version");
        assert_eq!(version, crate::store::SCHEMA_VERSION);
    }
}

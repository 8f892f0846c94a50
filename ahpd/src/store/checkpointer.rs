//! Moves the store's write-ahead log into its database file on a thread of its own, so the fsyncs
//! that takes never stall the host, which writes the store under its lock.
//!
//! SQLite's own automatic checkpoint runs inside whichever commit crosses 1 000 pages of log: under
//! a streaming load that was a commit made under the host's lock every 1.5 s, stalling every chat
//! for the 10–15 ms of the database file's fsync (docs/benchmarks.md, "The store's checkpoint").
//! A `PASSIVE` checkpoint from a second connection copies what it can without blocking the writer.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

/// How often the log is moved into the database file while anything was written. The log grows
/// by at most what the host writes in that time (a few hundred KiB under a heavy stream).
const EVERY: Duration = Duration::from_secs(1);

/// The thread that checkpoints; stopped and joined when dropped.
pub struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the store at `path` from a connection of its own.
    pub fn start(path: &Path) -> std::io::Result<Self> {
        let conn = super::connect(path, rusqlite::OpenFlags::default()).map_err(std::io::Error::other)?;
        let (stop, stopped) = mpsc::channel();
        let thread =
            std::thread::Builder::new().name("store checkpointer".into()).spawn(move || run(&conn, &stopped))?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>) {
    loop {
        match stopped.recv_timeout(EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        // With nothing new in the log this returns without touching the disk.
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        });
        match result {
            Ok((_, log, copied)) => tracing::trace!(log, copied, "store checkpoint"),
            Err(e) => tracing::debug!("the store's checkpoint failed (it is tried again): {e}"),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

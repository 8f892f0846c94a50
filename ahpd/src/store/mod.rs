//! The session store: SQLite in WAL mode, one file, written in transactions.
//!
//! Why SQLite: every write that must survive a crash (a completed turn, a session's record, an
//! artifact, a wakeup) is one transaction, and WAL makes a committed transaction survive `kill -9`
//! of the daemon at any moment; listing sessions is an indexed query, so 10 000 stored sessions
//! cost start-up nothing and `listSessions` one page. The host writes durable events
//! synchronously under its lock (they are rare); the streaming deltas of a running turn are
//! checkpointed in the background and, after a crash, the interrupted turn is ended as failed.
//!
//! A write that fails for want of room, a read-only file or an I/O error leaves the store in
//! trouble (`health.rs`) until a probe finds it writable: the host asks before it tells anyone a
//! thing is kept.
//!
//! Why SQLite's `unix-excl` VFS ([`connect`]): it keeps the WAL's index in this process's heap,
//! shared by every connection the daemon opens (the host's, the checkpointer's, a backup's),
//! instead of in a `-shm` file mapped into memory. A write to a page of that mapping is a page
//! fault the kernel answers with SIGBUS when the file can no longer be written (ext4 refuses
//! `chattr +i` files and a file system it remounted read-only after an error): the daemon died
//! where it now says the store cannot write. The price: while the daemon runs, its store is its
//! own: the process holds an exclusive lock on it, so another process opening it is told "database
//! is locked"; `ahpd store check` and `ahpd store backup` ask the running daemon instead
//! (docs/security.md, "The store under faults").
//!
//! A store whose file was deleted or replaced while the daemon ran (its connection still reads
//! the file it opened) is written again at its path from what that connection holds
//! ([`Store::put_back`]), before anything more is told kept.
//!
//! **Invariant:** the store holds records, never live objects; what it returns is plain data the
//! host turns into channel state.

mod agentmerge;
mod automations;
pub mod backup;
mod checkpointer;
pub mod health;
mod offers;
pub mod records;
pub mod recovery;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

pub use self::agentmerge::{AgentMergeOptions, AgentMergeRecord};
pub use self::automations::{AutomationRecord, AutomationRunRecord, GitHubSeen};
use self::health::Trouble;
pub use self::offers::AgentOffersRecord;

pub use self::records::{ChatRecord, KeptTerminalRecord, SessionRecord, TurnRecord, WakeupRecord, WorktreeRecord};

/// The schema version this build writes. Older files are migrated forward on open.
pub const SCHEMA_VERSION: i64 = 7;

/// The VFS every connection of the daemon to its store goes through (the module's head says why).
const VFS: &str = "unix-excl";

/// How long a connection waits for a lock another holds (a daemon still closing its store while
/// its successor opens it).
const BUSY: Duration = Duration::from_secs(5);

/// Opens a connection to the store file at `path` as the daemon's connections are opened: the
/// `unix-excl` VFS, waiting [`BUSY`] for a lock. Every connection the daemon makes to its store
/// comes from here, so they share one lock and one WAL index.
pub fn connect(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags_and_vfs(path, flags, VFS)?;
    conn.busy_timeout(BUSY)?;
    Ok(conn)
}

/// Which file a path names now: (device, inode).
type FileId = (u64, u64);

fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("the session store at {path} failed: {source}")]
    Sql {
        /// The store's file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A record could not be read or written as JSON.
    #[error("a record in the session store could not be read: {0}")]
    Record(#[from] serde_json::Error),
    /// The file was written by a newer ahpd.
    #[error("{path} was written by a newer ahpd (store version {found}; this one reads up to {SCHEMA_VERSION})")]
    TooNew {
        /// The store's file.
        path: PathBuf,
        /// The version found.
        found: i64,
    },
    /// A file beside the store could not be made, moved or synced.
    #[error("the session store at {path} could not be written again: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

/// The files a store's connection opened: what its path named then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Opened {
    db: Option<FileId>,
    log: Option<FileId>,
}

/// What [`Store::put_back`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutBack {
    /// A file found at the store's path that was not the store's own, moved here (with its
    /// `-wal`), never overwritten.
    pub replaced: Option<PathBuf>,
}

/// The store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Told whenever the `wakeups` table changes, so the timer that reads it looks again.
    wakeups_changed: std::sync::Arc<tokio::sync::Notify>,
    /// Moves the log into the database file off the writer's path; `None` if it could not start,
    /// and SQLite's automatic checkpoint is left on instead.
    _checkpointer: Option<checkpointer::Checkpointer>,
    /// What the last failed write met, until a probe finds the store writable again.
    trouble: std::cell::Cell<Option<Trouble>>,
    /// The files the connection opened, to notice them deleted or replaced.
    opened: Opened,
}

/// A page of session summaries, newest first.
pub struct Page {
    /// `SessionSummary` JSON values.
    pub items: Vec<serde_json::Value>,
    /// The key of the last row, when more rows follow.
    pub next: Option<(String, String)>,
}

/// Everything stored about one session.
pub struct LoadedSession {
    /// Its record.
    pub record: SessionRecord,
    /// Its chats in order, each with its turns.
    pub chats: Vec<(ChatRecord, Vec<TurnRecord>)>,
    /// Its annotations channel state (JSON), if any was written.
    pub annotations: Option<serde_json::Value>,
}

impl Store {
    /// Opens (creating or migrating) the store at `path`, and ends as failed every turn that was
    /// running when the daemon last stopped.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let conn =
            connect(path, OpenFlags::default()).map_err(|source| StoreError::Sql { path: path.to_owned(), source })?;
        let mut store = Self {
            conn,
            path: path.to_owned(),
            wakeups_changed: Default::default(),
            _checkpointer: None,
            trouble: Default::default(),
            opened: Opened::default(),
        };
        store.configure()?;
        store.migrate()?;
        store.checkpoint_elsewhere()?;
        store.opened = store.files_now();
        Ok(store)
    }

    /// What the store's path and its log's name now.
    fn files_now(&self) -> Opened {
        Opened { db: file_id(&self.path), log: file_id(&recovery::beside(&self.path, "-wal")) }
    }

    /// True when the store's file or its log is no longer at its path (deleted, or another file
    /// put there) while the connection still writes the one it opened.
    pub fn moved(&self) -> bool {
        let now = self.files_now();
        now.db != self.opened.db || (self.opened.log.is_some() && now.log != self.opened.log)
    }

    /// Writes the store again at its path when its file (or its log) was deleted or replaced
    /// while the daemon ran: the connection still reads the file it opened, so a copy of all of it
    /// (`VACUUM INTO`, as a backup) takes the path, and the daemon goes on with that. A file found
    /// at the path that is not the store's is moved aside, never overwritten. Answers `None` when
    /// nothing moved, or inside a transaction (its commit asks again). On failure the store is in
    /// trouble, as a failed write leaves it, and the old connection still holds everything.
    pub fn put_back(&mut self) -> Result<Option<PutBack>, StoreError> {
        if !self.moved() || !self.conn.is_autocommit() {
            return Ok(None);
        }
        let path = self.path.clone();
        let temp = self.copy_beside()?;
        let put = self.put_in_place(&temp);
        let fresh = put.and_then(|replaced| {
            let fresh = connect(&path, OpenFlags::default())
                .map_err(|source| StoreError::Sql { path: path.clone(), source })
                .and_then(|conn| Self::configure_conn(&conn, &path).map(|()| conn));
            fresh.map(|conn| (conn, replaced))
        });
        let (conn, replaced) = match fresh {
            Ok(fresh) => fresh,
            Err(e) => {
                for name in [temp.clone(), path.clone()] {
                    // The copy, wherever it got to; what was at the path before is aside.
                    if file_id(&name).is_some() && file_id(&name) != self.opened.db {
                        let _ = std::fs::remove_file(&name);
                    }
                }
                self.note_trouble(&e);
                return Err(e);
            }
        };
        // The old connection must neither checkpoint nor delete a log by name as it closes: the
        // log at the path is the fresh file's now.
        let _ = self.conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true);
        self._checkpointer = None;
        let old = std::mem::replace(&mut self.conn, conn);
        if let Err((_, e)) = old.close() {
            tracing::warn!("the store's old connection closed with: {e}");
        }
        self.checkpoint_elsewhere()?;
        self.opened = self.files_now();
        self.trouble.set(None);
        Ok(Some(PutBack { replaced }))
    }

    /// A whole copy of what the connection holds, made 0600 beside the store's path (its folder
    /// made again when it is gone).
    fn copy_beside(&self) -> Result<PathBuf, StoreError> {
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = dir.join(format!(".{name}.put-back.{}", std::process::id()));
        let made = crate::fsutil::create_private_dir(dir)
            .and_then(|()| match std::fs::remove_file(&temp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            })
            .and_then(|()| crate::fsutil::create_private_file(&temp));
        if let Err(source) = made {
            return Err(self.io_trouble(dir, source));
        }
        let copied = self.sql(self.conn.execute("VACUUM INTO ?1", [temp.to_string_lossy()]));
        let synced = copied.and_then(|_| {
            std::fs::File::open(&temp).and_then(|f| f.sync_all()).map_err(|source| self.io_trouble(&temp, source))
        });
        if let Err(e) = synced {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(temp)
    }

    /// Puts the copy `temp` at the store's path: a foreign file found there is moved aside first
    /// (answered), and no log is left at the path for the fresh file to mistake for its own.
    fn put_in_place(&self, temp: &Path) -> Result<Option<PathBuf>, StoreError> {
        let path = &self.path;
        let replaced = match file_id(path) {
            Some(id) if Some(id) != self.opened.db => {
                let aside = recovery::aside_name(path, "replaced");
                recovery::move_store(path, &aside).map_err(|e| match e {
                    recovery::RecoveryError::Io { path, source, .. } => self.io_trouble(&path, source),
                    recovery::RecoveryError::Store(e) => e,
                })?;
                Some(aside)
            }
            _ => None,
        };
        for suffix in ["-wal", "-shm"] {
            let log = recovery::beside(path, suffix);
            match std::fs::remove_file(&log) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(self.io_trouble(&log, e)),
                _ => {}
            }
        }
        std::fs::rename(temp, path).map_err(|source| self.io_trouble(path, source))?;
        if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
            let _ = dir.sync_all();
        }
        Ok(replaced)
    }

    /// A failed file operation on the store's behalf: the store is in the trouble it says.
    fn io_trouble(&self, path: &Path, source: std::io::Error) -> StoreError {
        self.trouble.set(Some(Trouble::of_io(&source)));
        StoreError::Io { path: path.to_owned(), source }
    }

    fn note_trouble(&self, error: &StoreError) {
        if let StoreError::Sql { source, .. } = error {
            if let Some(trouble) = Trouble::of(source) {
                self.trouble.set(Some(trouble));
            }
        } else if self.trouble.get().is_none() {
            self.trouble.set(Some(Trouble::Io));
        }
    }

    fn sql<T>(&self, result: rusqlite::Result<T>) -> Result<T, StoreError> {
        result.map_err(|source| {
            if let Some(trouble) = Trouble::of(&source) {
                self.trouble.set(Some(trouble));
            }
            StoreError::Sql { path: self.path.clone(), source }
        })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What keeps the store from writing, since a write failed and until a probe succeeds.
    pub fn trouble(&self) -> Option<Trouble> {
        self.trouble.get()
    }

    /// The sentence a person reads while the store cannot write.
    pub fn cannot_write(&self) -> Option<String> {
        self.trouble().map(|t| t.sentence(&self.path))
    }

    /// Tries a write that needs room, as a turn's does, committed then undone: on success the
    /// trouble is over. A write rolled back before its commit would not reach the disk, so the
    /// probe commits (a table made, filled with 64 KiB and dropped, in one transaction).
    pub fn probe(&self) -> Result<(), StoreError> {
        let result = self.conn.execute_batch(
            "SAVEPOINT probe;
             CREATE TABLE IF NOT EXISTS ahpd_probe (room BLOB);
             INSERT INTO ahpd_probe VALUES (zeroblob(65536));
             DROP TABLE ahpd_probe;",
        );
        match result {
            Ok(()) => self.close_savepoint("probe")?,
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK TO probe; RELEASE probe");
                return self.sql(Err(e));
            }
        }
        self.trouble.set(None);
        Ok(())
    }

    /// Releases a savepoint; when that is the commit and it fails (a full disk meets the log at
    /// commit), what it held is rolled back, so no transaction stays open to swallow later writes.
    fn close_savepoint(&self, name: &str) -> Result<(), StoreError> {
        let released = self.conn.execute_batch(&format!("RELEASE {name}"));
        if released.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.sql(released)
    }

    fn configure(&self) -> Result<(), StoreError> {
        let configured = Self::configure_conn(&self.conn, &self.path);
        if let Err(e) = &configured {
            self.note_trouble(e);
        }
        configured
    }

    fn configure_conn(conn: &Connection, path: &Path) -> Result<(), StoreError> {
        let sql = |source| StoreError::Sql { path: path.to_owned(), source };
        // WAL: a committed transaction survives the process dying at any moment; NORMAL skips the
        // fsync per commit, which only a power cut (not a crash) could make matter.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
        // Tests only: a store that can hold no more than this many pages meets SQLite's own
        // SQLITE_FULL, as on a full disk, for any user.
        if let Some(pages) = std::env::var("AHPD_TEST_STORE_MAX_PAGES").ok().and_then(|p| p.parse::<i64>().ok()) {
            tracing::warn!("AHPD_TEST_STORE_MAX_PAGES: this store holds at most {pages} pages");
            conn.pragma_update(None, "max_page_count", pages).map_err(sql)?;
        }
        Ok(())
    }

    /// Hands the log's checkpoints to a thread of their own: a commit made under the host's lock
    /// must not be the one that pays for the database file's fsync.
    fn checkpoint_elsewhere(&mut self) -> Result<(), StoreError> {
        match checkpointer::Checkpointer::start(&self.path) {
            Ok(checkpointer) => {
                self.sql(self.conn.pragma_update(None, "wal_autocheckpoint", 0))?;
                self._checkpointer = Some(checkpointer);
            }
            Err(e) => tracing::warn!("the store checkpoints as it commits ({e})"),
        }
        Ok(())
    }

    /// True when the store's room is under a test's control (`AHPD_TEST_STORE_MAX_PAGES`).
    pub fn room_for_tests() -> bool {
        std::env::var_os("AHPD_TEST_STORE_MAX_PAGES").is_some()
    }

    /// Tests only ([`Store::room_for_tests`]): fills the room the page limit leaves with rows of
    /// zeros, as another program's files fill a disk, or (`full` false) drops them again. Written
    /// through the daemon's own connection (no other process may open the store while it runs),
    /// and never counted as the store's trouble: the store finds that out by itself.
    pub fn fill_for_test(&self, full: bool) -> rusqlite::Result<()> {
        if !full {
            return self.conn.execute_batch("DROP TABLE IF EXISTS ahpd_test_balloon");
        }
        self.conn.execute_batch("CREATE TABLE IF NOT EXISTS ahpd_test_balloon (b BLOB)")?;
        for size in [65_536, 4096, 512] {
            loop {
                match self.conn.execute("INSERT INTO ahpd_test_balloon VALUES (zeroblob(?1))", [size]) {
                    Ok(_) => {}
                    Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The file's schema version.
    pub fn version(&self) -> Result<i64, StoreError> {
        self.sql(self.conn.query_row("PRAGMA user_version", [], |r| r.get(0)))
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let found = self.version()?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew { path: self.path.clone(), found });
        }
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        if found < 1 {
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS sessions (
                    uri TEXT PRIMARY KEY,
                    provider TEXT NOT NULL,
                    created_at TEXT NOT NULL,
                    modified_at TEXT NOT NULL,
                    summary TEXT NOT NULL,
                    record TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS sessions_newest ON sessions(modified_at DESC, uri ASC);
                CREATE TABLE IF NOT EXISTS chats (
                    uri TEXT PRIMARY KEY,
                    session TEXT NOT NULL REFERENCES sessions(uri) ON DELETE CASCADE,
                    position INTEGER NOT NULL,
                    record TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS chats_of_session ON chats(session, position);
                CREATE TABLE IF NOT EXISTS turns (
                    chat TEXT NOT NULL REFERENCES chats(uri) ON DELETE CASCADE,
                    position INTEGER NOT NULL,
                    turn_id TEXT NOT NULL,
                    record TEXT NOT NULL,
                    PRIMARY KEY (chat, position)
                );
                CREATE TABLE IF NOT EXISTS running (
                    chat TEXT PRIMARY KEY REFERENCES chats(uri) ON DELETE CASCADE,
                    record TEXT NOT NULL
                );
                CREATE TABLE IF NOT EXISTS annotations (
                    session TEXT PRIMARY KEY REFERENCES sessions(uri) ON DELETE CASCADE,
                    record TEXT NOT NULL
                );
                CREATE TABLE IF NOT EXISTS wakeups (
                    chat TEXT PRIMARY KEY REFERENCES chats(uri) ON DELETE CASCADE,
                    due_at TEXT NOT NULL,
                    record TEXT NOT NULL
                );
                PRAGMA user_version = 1;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 2 {
            // The worktrees ahpd cut for sessions and chats (the worktrees feature's own).
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS worktrees (
                    owner TEXT PRIMARY KEY,
                    session TEXT NOT NULL,
                    record TEXT NOT NULL
                );
                PRAGMA user_version = 2;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 3 {
            // Version 3: what terminals printed, kept for their chats (a `!` command's, a backend's
            // kept output).
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS terminal_outputs (
                    uri TEXT PRIMARY KEY,
                    chat TEXT NOT NULL REFERENCES chats(uri) ON DELETE CASCADE,
                    record TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS terminal_outputs_of_chat ON terminal_outputs(chat);
                PRAGMA user_version = 3;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 4 {
            // Version 4: what each agent last offered (`offers.rs`), shown at once after a restart.
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS agent_offers (
                    provider TEXT PRIMARY KEY,
                    record TEXT NOT NULL
                );
                PRAGMA user_version = 4;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 5 {
            // Version 5: Agent Merge's settings per session folder (`agentmerge.rs`), kept across
            // restarts; a session's rows go with it.
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS agent_merge (
                    session TEXT NOT NULL REFERENCES sessions(uri) ON DELETE CASCADE,
                    folder TEXT NOT NULL,
                    record TEXT NOT NULL,
                    PRIMARY KEY (session, folder)
                );
                PRAGMA user_version = 5;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 6 {
            // Version 6: automations and their runs (`automations.rs`); a run is unique per
            // automation by the request and by the occurrence it was made for.
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS automations (
                    uri TEXT PRIMARY KEY,
                    record TEXT NOT NULL
                );
                CREATE TABLE IF NOT EXISTS automation_runs (
                    uri TEXT PRIMARY KEY,
                    automation TEXT NOT NULL,
                    created_ms INTEGER NOT NULL,
                    request_id TEXT,
                    occurrence TEXT,
                    record TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS automation_runs_newest ON automation_runs(automation, created_ms DESC);
                CREATE UNIQUE INDEX IF NOT EXISTS automation_runs_request ON automation_runs(automation, request_id);
                CREATE UNIQUE INDEX IF NOT EXISTS automation_runs_occurrence ON automation_runs(automation, occurrence);
                PRAGMA user_version = 6;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        if found < 7 {
            // Version 7: what each GitHub trigger of an automation has seen (`automations.rs`),
            // so a restart neither misses an event nor fires one twice.
            let result = tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS automation_github_seen (
                    automation TEXT NOT NULL,
                    trigger TEXT NOT NULL,
                    record TEXT NOT NULL,
                    PRIMARY KEY (automation, trigger)
                );
                PRAGMA user_version = 7;",
            );
            result.map_err(|source| StoreError::Sql { path: path.clone(), source })?;
        }
        tx.commit().map_err(|source| StoreError::Sql { path, source })?;
        Ok(())
    }

    /// How many sessions are stored.
    pub fn count(&self) -> Result<i64, StoreError> {
        self.sql(self.conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0)))
    }

    /// True when the session is stored.
    pub fn has_session(&self, uri: &str) -> Result<bool, StoreError> {
        let found: Option<i64> =
            self.sql(self.conn.query_row("SELECT 1 FROM sessions WHERE uri = ?1", [uri], |r| r.get(0)).optional())?;
        Ok(found.is_some())
    }

    /// The ids every stored chat's backend keeps its conversation under: a backend listing its
    /// own sessions lists these too, and they are not foreign.
    pub fn conversation_ids(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        let mut statement =
            self.sql(self.conn.prepare("SELECT json_extract(record, '$.conversationId') FROM chats"))?;
        let ids = self.sql(statement.query_map([], |r| r.get::<_, Option<String>>(0)))?;
        let mut found = std::collections::HashSet::new();
        for id in ids {
            if let Some(id) = self.sql(id)? {
                found.insert(id);
            }
        }
        Ok(found)
    }

    /// The session a chat belongs to, when the chat is stored.
    pub fn session_of_chat(&self, chat: &str) -> Result<Option<String>, StoreError> {
        self.sql(self.conn.query_row("SELECT session FROM chats WHERE uri = ?1", [chat], |r| r.get(0)).optional())
    }

    /// Writes a session's record and summary (insert or replace).
    pub fn save_session(&self, record: &SessionRecord, summary: &serde_json::Value) -> Result<(), StoreError> {
        let modified = summary.get("modifiedAt").and_then(|v| v.as_str()).unwrap_or(&record.created_at).to_owned();
        let sql = "INSERT INTO sessions (uri, provider, created_at, modified_at, summary, record)
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                   ON CONFLICT(uri) DO UPDATE SET modified_at = ?4, summary = ?5, record = ?6";
        self.sql(self.conn.execute(
            sql,
            params![
                record.uri,
                record.provider,
                record.created_at,
                modified,
                serde_json::to_string(summary)?,
                serde_json::to_string(record)?
            ],
        ))?;
        Ok(())
    }

    /// Writes a chat's record (insert or replace).
    pub fn save_chat(&self, record: &ChatRecord) -> Result<(), StoreError> {
        let sql = "INSERT INTO chats (uri, session, position, record) VALUES (?1, ?2, ?3, ?4)
                   ON CONFLICT(uri) DO UPDATE SET position = ?3, record = ?4";
        self.sql(
            self.conn
                .execute(sql, params![record.uri, record.session, record.position, serde_json::to_string(record)?]),
        )?;
        Ok(())
    }

    /// Records a turn that ended, and forgets its checkpoint, atomically (a savepoint, so it also
    /// nests inside a larger transaction).
    pub fn save_turn(&self, chat: &str, position: i64, turn: &TurnRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(turn)?;
        self.sql(self.conn.execute_batch("SAVEPOINT save_turn"))?;
        let result = self
            .conn
            .execute(
                "INSERT OR REPLACE INTO turns (chat, position, turn_id, record) VALUES (?1, ?2, ?3, ?4)",
                params![chat, position, turn.turn.id, json],
            )
            .and_then(|_| self.conn.execute("DELETE FROM running WHERE chat = ?1", [chat]));
        match result {
            Ok(_) => self.close_savepoint("save_turn"),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK TO save_turn; RELEASE save_turn");
                self.sql(Err(e))
            }
        }
    }

    /// Forgets a chat's turns from `position` on (a truncation).
    pub fn drop_turns_from(&self, chat: &str, position: i64) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM turns WHERE chat = ?1 AND position >= ?2", params![chat, position]))?;
        Ok(())
    }

    /// Where a chat's turn `turn_id` is stored, when it is (a resumed turn was stored once
    /// already, when it failed).
    pub fn turn_position(&self, chat: &str, turn_id: &str) -> Result<Option<i64>, StoreError> {
        self.sql(
            self.conn
                .query_row(
                    "SELECT position FROM turns WHERE chat = ?1 AND turn_id = ?2 ORDER BY position DESC LIMIT 1",
                    params![chat, turn_id],
                    |r| r.get(0),
                )
                .optional(),
        )
    }

    /// Keeps the running turn's state so far, to end it as failed after a crash.
    pub fn checkpoint_running(&self, chat: &str, active: &serde_json::Value) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO running (chat, record) VALUES (?1, ?2)",
            params![chat, serde_json::to_string(active)?],
        ))?;
        Ok(())
    }

    /// Keeps a session's annotations channel state.
    pub fn save_annotations(&self, session: &str, state: &serde_json::Value) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO annotations (session, record) VALUES (?1, ?2)",
            params![session, serde_json::to_string(state)?],
        ))?;
        Ok(())
    }

    /// Forgets a session and everything under it.
    pub fn delete_session(&self, uri: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM sessions WHERE uri = ?1", [uri]))?;
        Ok(())
    }

    /// Forgets a chat and its turns.
    pub fn delete_chat(&self, uri: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM chats WHERE uri = ?1", [uri]))?;
        Ok(())
    }

    /// One page of session summaries, newest first, after the row `after` (modifiedAt, uri).
    pub fn page(&self, after: Option<(&str, &str)>, limit: usize) -> Result<Page, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows: Vec<(String, String, String)> = Vec::new();
        let map = |r: &rusqlite::Row<'_>| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?));
        match after {
            None => {
                let mut stmt = self.sql(self.conn.prepare_cached(
                    "SELECT modified_at, uri, summary FROM sessions ORDER BY modified_at DESC, uri ASC LIMIT ?1",
                ))?;
                let found =
                    self.sql(stmt.query_map([limit + 1], map).and_then(|r| r.collect::<Result<Vec<_>, _>>()))?;
                rows.extend(found);
            }
            Some((modified, uri)) => {
                let mut stmt = self.sql(self.conn.prepare_cached(
                    "SELECT modified_at, uri, summary FROM sessions
                     WHERE modified_at < ?1 OR (modified_at = ?1 AND uri > ?2)
                     ORDER BY modified_at DESC, uri ASC LIMIT ?3",
                ))?;
                let found = self.sql(
                    stmt.query_map(params![modified, uri, limit + 1], map)
                        .and_then(|r| r.collect::<Result<Vec<_>, _>>()),
                )?;
                rows.extend(found);
            }
        }
        let more = rows.len() as i64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next = if more { rows.last().map(|(m, u, _)| (m.clone(), u.clone())) } else { None };
        let items = rows.into_iter().map(|(_, _, s)| serde_json::from_str(&s)).collect::<Result<Vec<_>, _>>()?;
        Ok(Page { items, next })
    }

    /// Reads one session whole: record, chats, turns, annotations.
    pub fn load_session(&self, uri: &str) -> Result<Option<LoadedSession>, StoreError> {
        let record: Option<String> = self
            .sql(self.conn.query_row("SELECT record FROM sessions WHERE uri = ?1", [uri], |r| r.get(0)).optional())?;
        let Some(record) = record else { return Ok(None) };
        let record: SessionRecord = serde_json::from_str(&record)?;
        let mut chats = Vec::new();
        let chat_rows: Vec<String> = {
            let mut stmt =
                self.sql(self.conn.prepare_cached("SELECT record FROM chats WHERE session = ?1 ORDER BY position"))?;
            self.sql(stmt.query_map([uri], |r| r.get(0)).and_then(|r| r.collect()))?
        };
        for row in chat_rows {
            let chat: ChatRecord = serde_json::from_str(&row)?;
            let turns: Vec<String> = {
                let mut stmt =
                    self.sql(self.conn.prepare_cached("SELECT record FROM turns WHERE chat = ?1 ORDER BY position"))?;
                self.sql(stmt.query_map([&chat.uri], |r| r.get(0)).and_then(|r| r.collect()))?
            };
            let turns = turns.iter().map(|t| serde_json::from_str(t)).collect::<Result<Vec<TurnRecord>, _>>()?;
            chats.push((chat, turns));
        }
        let annotations: Option<String> = self.sql(
            self.conn.query_row("SELECT record FROM annotations WHERE session = ?1", [uri], |r| r.get(0)).optional(),
        )?;
        let annotations = annotations.map(|a| serde_json::from_str(&a)).transpose()?;
        Ok(Some(LoadedSession { record, chats, annotations }))
    }

    /// Every checkpoint of a turn that was running when the daemon stopped: (chat, ActiveTurn).
    pub fn interrupted(&self) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare("SELECT chat, record FROM running"))?;
        let rows: Vec<(String, String)> =
            self.sql(stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).and_then(|r| r.collect()))?;
        rows.into_iter().map(|(c, r)| Ok((c, serde_json::from_str(&r)?))).collect()
    }

    /// The number of turns stored for a chat (the next turn's position).
    pub fn turn_count(&self, chat: &str) -> Result<i64, StoreError> {
        self.sql(self.conn.query_row("SELECT COUNT(*) FROM turns WHERE chat = ?1", [chat], |r| r.get(0)))
    }

    /// Keeps a chat's wakeup, replacing the one it had; answers the one replaced.
    pub fn save_wakeup(&self, record: &WakeupRecord) -> Result<Option<WakeupRecord>, StoreError> {
        let before = self.wakeup(&record.chat)?;
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO wakeups (chat, due_at, record) VALUES (?1, ?2, ?3)",
            params![record.chat, crate::clock::iso(record.due_at_ms), serde_json::to_string(record)?],
        ))?;
        self.wakeups_changed.notify_one();
        Ok(before)
    }

    /// A chat's wakeup, when it has one.
    pub fn wakeup(&self, chat: &str) -> Result<Option<WakeupRecord>, StoreError> {
        let row: Option<String> = self
            .sql(self.conn.query_row("SELECT record FROM wakeups WHERE chat = ?1", [chat], |r| r.get(0)).optional())?;
        Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    /// Forgets a chat's wakeup; answers the one it had.
    pub fn delete_wakeup(&self, chat: &str) -> Result<Option<WakeupRecord>, StoreError> {
        let before = self.wakeup(chat)?;
        self.sql(self.conn.execute("DELETE FROM wakeups WHERE chat = ?1", [chat]))?;
        self.wakeups_changed.notify_one();
        Ok(before)
    }

    /// Keeps what a terminal printed, replacing what was kept under its URI.
    pub fn keep_terminal(&self, record: &KeptTerminalRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO terminal_outputs (uri, chat, record) VALUES (?1, ?2, ?3)",
            params![record.uri, record.chat, serde_json::to_string(record)?],
        ))?;
        Ok(())
    }

    /// What a terminal printed, when it was kept.
    pub fn kept_terminal(&self, uri: &str) -> Result<Option<KeptTerminalRecord>, StoreError> {
        let row: Option<String> = self.sql(
            self.conn.query_row("SELECT record FROM terminal_outputs WHERE uri = ?1", [uri], |r| r.get(0)).optional(),
        )?;
        Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    /// What is told whenever a wakeup is kept or forgotten.
    pub fn wakeup_changes(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.wakeups_changed.clone()
    }

    /// Every stored wakeup, soonest first.
    pub fn wakeups(&self) -> Result<Vec<WakeupRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached("SELECT record FROM wakeups ORDER BY due_at, chat"))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }

    /// Keeps a worktree's record (insert or replace).
    pub fn save_worktree(&self, record: &WorktreeRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO worktrees (owner, session, record) VALUES (?1, ?2, ?3)",
            params![record.owner, record.session, serde_json::to_string(record)?],
        ))?;
        Ok(())
    }

    /// Forgets a worktree's record.
    pub fn delete_worktree(&self, owner: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM worktrees WHERE owner = ?1", [owner]))?;
        Ok(())
    }

    /// Every worktree's record.
    pub fn worktrees(&self) -> Result<Vec<WorktreeRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached("SELECT record FROM worktrees ORDER BY owner"))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }

    /// Opens a savepoint: the writes until [`Store::release`] land together or, after
    /// [`Store::roll_back`], not at all. Savepoints nest inside a transaction.
    pub fn savepoint(&self, name: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute_batch(&format!("SAVEPOINT {name}")))
    }

    /// Keeps what was written since the savepoint.
    pub fn release(&self, name: &str) -> Result<(), StoreError> {
        self.close_savepoint(name)
    }

    /// Undoes what was written since the savepoint, and closes it.
    pub fn roll_back(&self, name: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute_batch(&format!("ROLLBACK TO {name}; RELEASE {name}")))
    }

    /// Runs `f` in one transaction (for bulk writes such as a benchmark's seeding).
    pub fn in_transaction<T>(&mut self, f: impl FnOnce(&Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.sql(self.conn.execute_batch("BEGIN"))?;
        match f(self) {
            Ok(v) => {
                self.sql(self.conn.execute_batch("COMMIT"))?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_a_chat() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("store.sqlite")).expect("store");
        let session = SessionRecord {
            uri: "ahp-session:/s".into(),
            provider: "echo".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            title: String::new(),
            flags: 0,
            working_directory: None,
            config: Default::default(),
            default_chat: None,
            owner: None,
            parent: None,
            depth: 0,
            meta: None,
            changes: None,
            origin: None,
        };
        store.save_session(&session, &serde_json::json!({})).expect("session");
        for chat in ["ahp-chat:/a", "ahp-chat:/b"] {
            let record = ChatRecord {
                uri: chat.into(),
                session: "ahp-session:/s".into(),
                position: 0,
                title: String::new(),
                conversation_id: chat.into(),
                started_in_backend: false,
                origin: None,
                queued: Vec::new(),
                steering: None,
                draft: None,
                flags: 0,
                modified_at: None,
                harness: None,
                working_directory: None,
                changes: None,
                cut: None,
                resumable: false,
            };
            store.save_chat(&record).expect("chat");
        }
        (dir, store)
    }

    fn big_turn(id: &str) -> TurnRecord {
        let turn = serde_json::json!({
            "id": id, "message": { "text": "x".repeat(200_000), "origin": { "kind": "user" } },
            "responseParts": [], "state": "complete"
        });
        TurnRecord { turn: serde_json::from_value(turn).expect("turn"), transcript_id: None, sender: None }
    }

    #[test]
    fn a_store_out_of_room_says_so_keeps_no_transaction_open_and_a_probe_finds_room_again() {
        let (_dir, store) = store_with_a_chat();
        assert_eq!(store.trouble(), None);
        let pages: i64 = store.conn.query_row("PRAGMA page_count", [], |r| r.get(0)).expect("pages");
        store.conn.pragma_update(None, "max_page_count", pages + 2).expect("limit");
        // A turn inside the host's unit (a savepoint) meets SQLITE_FULL.
        store.savepoint("turn_end").expect("savepoint");
        let failed = store.save_turn("ahp-chat:/a", 0, &big_turn("t0"));
        assert!(failed.is_err());
        store.roll_back("turn_end").expect("roll back");
        assert_eq!(store.trouble(), Some(Trouble::Full));
        assert!(store.conn.is_autocommit(), "no transaction stays open to swallow later writes");
        let sentence = store.cannot_write().expect("a sentence");
        assert!(sentence.starts_with("ahpd cannot write its session store: the disk is full ("), "{sentence}");
        assert!(store.probe().is_err(), "still no room");
        assert_eq!(store.trouble(), Some(Trouble::Full));
        store.conn.pragma_update(None, "max_page_count", 1_000_000).expect("room");
        store.probe().expect("room again");
        assert_eq!(store.trouble(), None);
        store.save_turn("ahp-chat:/a", 0, &big_turn("t0")).expect("kept now");
        assert_eq!(store.turn_count("ahp-chat:/a").expect("count"), 1);
        let tables: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'ahpd_probe'", [], |r| r.get(0))
            .expect("tables");
        assert_eq!(tables, 0, "the probe leaves nothing behind");
    }

    fn wakeup(chat: &str, due_at_ms: u64) -> WakeupRecord {
        WakeupRecord {
            chat: chat.into(),
            session: "ahp-session:/s".into(),
            prompt: "again".into(),
            due_at_ms,
            scheduled_at: "2026-01-01T00:00:00.000Z".into(),
            sender: None,
        }
    }

    #[test]
    fn a_chat_holds_one_wakeup_and_they_list_soonest_first() {
        let (_dir, store) = store_with_a_chat();
        assert_eq!(store.save_wakeup(&wakeup("ahp-chat:/a", 5_000)).expect("save"), None);
        let replaced = store.save_wakeup(&wakeup("ahp-chat:/a", 9_000)).expect("save");
        assert_eq!(replaced.map(|w| w.due_at_ms), Some(5_000));
        store.save_wakeup(&wakeup("ahp-chat:/b", 7_000)).expect("save");
        let due: Vec<(String, u64)> =
            store.wakeups().expect("list").into_iter().map(|w| (w.chat, w.due_at_ms)).collect();
        assert_eq!(due, vec![("ahp-chat:/b".into(), 7_000), ("ahp-chat:/a".into(), 9_000)]);
        assert!(store.delete_wakeup("ahp-chat:/a").expect("delete").is_some());
        assert!(store.delete_wakeup("ahp-chat:/a").expect("delete").is_none());
        store.delete_chat("ahp-chat:/b").expect("chat gone");
        assert!(store.wakeups().expect("list").is_empty(), "a chat's wakeup goes with it");
    }

    #[test]
    fn a_rolled_back_savepoint_keeps_the_wakeup() {
        let (_dir, store) = store_with_a_chat();
        store.save_wakeup(&wakeup("ahp-chat:/a", 5_000)).expect("save");
        store.savepoint("fire").expect("savepoint");
        store.delete_wakeup("ahp-chat:/a").expect("delete");
        store.roll_back("fire").expect("roll back");
        assert!(store.wakeup("ahp-chat:/a").expect("read").is_some());
        store.savepoint("fire").expect("savepoint");
        store.delete_wakeup("ahp-chat:/a").expect("delete");
        store.release("fire").expect("release");
        assert!(store.wakeup("ahp-chat:/a").expect("read").is_none());
    }
}

#[cfg(test)]
mod checkpoint_tests {
    use super::*;

    /// The host writes under its lock, so its connection must never be the one that checkpoints:
    /// the log reaches the database file through the checkpointer's thread alone.
    #[test]
    fn the_log_reaches_the_database_file_without_the_writer_checkpointing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store.sqlite");
        let mut store = Store::open(&path).expect("store");
        let automatic: i64 = store.conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)).expect("pragma");
        assert_eq!(automatic, 0, "the writer's connection checkpoints on its own");
        let before = std::fs::metadata(&path).expect("file").len();
        store
            .in_transaction(|s| {
                for i in 0..200 {
                    let uri = format!("ahp-session:/{i}");
                    let summary = serde_json::json!({ "resource": uri, "padding": "x".repeat(2_000) });
                    s.sql(s.conn.execute(
                        "INSERT INTO sessions (uri, provider, created_at, modified_at, summary, record) VALUES (?1, 'echo', '', '', ?2, '{}')",
                        params![uri, summary.to_string()],
                    ))?;
                }
                Ok(())
            })
            .expect("writes");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::metadata(&path).expect("file").len() <= before {
            assert!(std::time::Instant::now() < deadline, "nothing reached the database file within 30 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(store);
        let reopened = Store::open(&path).expect("reopened");
        let count: i64 = reopened.conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0)).expect("count");
        assert_eq!(count, 200);
    }

    /// A store deleted under its connection, or replaced by another file, is written again at its
    /// path with all it held; the other file is kept aside.
    #[test]
    fn a_store_deleted_or_replaced_under_its_connection_is_put_back_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store.sqlite");
        let mut store = Store::open(&path).expect("store");
        let add = |s: &Store, uri: &str| {
            s.sql(s.conn.execute(
                "INSERT INTO sessions (uri, provider, created_at, modified_at, summary, record) VALUES (?1, 'echo', '', '', '{}', '{}')",
                [uri],
            ))
            .expect("insert");
        };
        add(&store, "ahp-session:/a");
        assert!(!store.moved());
        for suffix in ["", "-wal"] {
            std::fs::remove_file(format!("{}{suffix}", path.display())).expect("rm");
        }
        assert!(store.moved(), "the deletion is seen");
        add(&store, "ahp-session:/b");
        assert_eq!(store.put_back().expect("put back"), Some(PutBack { replaced: None }));
        assert!(!store.moved());
        add(&store, "ahp-session:/c");

        let other = dir.path().join("other");
        std::fs::write(&other, b"someone else's file").expect("write");
        std::fs::rename(&other, &path).expect("put in its place");
        let put = store.put_back().expect("put back").expect("it moved");
        let aside = put.replaced.expect("the other file is kept aside");
        assert_eq!(std::fs::read(&aside).expect("aside"), b"someone else's file");
        drop(store);
        let reopened = Store::open(&path).expect("reopened");
        assert_eq!(reopened.count().expect("count"), 3, "every session, at the path");
    }
}

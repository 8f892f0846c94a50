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
//! **Invariant:** the store holds records, never live objects; what it returns is plain data the
//! host turns into channel state.

mod agentmerge;
pub mod backup;
mod checkpointer;
pub mod health;
mod offers;
pub mod records;
pub mod recovery;

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

pub use self::agentmerge::{AgentMergeOptions, AgentMergeRecord};
use self::health::Trouble;
pub use self::offers::AgentOffersRecord;

pub use self::records::{ChatRecord, KeptTerminalRecord, SessionRecord, TurnRecord, WakeupRecord, WorktreeRecord};

/// The schema version this build writes. Older files are migrated forward on open.
pub const SCHEMA_VERSION: i64 = 5;

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
        let conn = Connection::open(path).map_err(|source| StoreError::Sql { path: path.to_owned(), source })?;
        let mut store = Self {
            conn,
            path: path.to_owned(),
            wakeups_changed: Default::default(),
            _checkpointer: None,
            trouble: Default::default(),
        };
        store.configure()?;
        store.migrate()?;
        store.checkpoint_elsewhere()?;
        Ok(store)
    }

    fn sql<T>(&self, result: rusqlite::Result<T>) -> Result<T, StoreError> {
        result.map_err(|source| {
            if let Some(trouble) = Trouble::of(&source) {
                self.trouble.set(Some(trouble));
            }
            StoreError::Sql { path: self.path.clone(), source }
        })
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
        // WAL: a committed transaction survives the process dying at any moment; NORMAL skips the
        // fsync per commit, which only a power cut (not a crash) could make matter.
        self.sql(self.conn.pragma_update(None, "journal_mode", "WAL"))?;
        self.sql(self.conn.pragma_update(None, "synchronous", "NORMAL"))?;
        self.sql(self.conn.pragma_update(None, "foreign_keys", "ON"))?;
        self.sql(self.conn.busy_timeout(std::time::Duration::from_secs(5)))?;
        // Tests only: a store that can hold no more than this many pages meets SQLite's own
        // SQLITE_FULL, as on a full disk, for any user.
        if let Some(pages) = std::env::var("AHPD_TEST_STORE_MAX_PAGES").ok().and_then(|p| p.parse::<i64>().ok()) {
            tracing::warn!("AHPD_TEST_STORE_MAX_PAGES: this store holds at most {pages} pages");
            self.sql(self.conn.pragma_update(None, "max_page_count", pages))?;
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
}

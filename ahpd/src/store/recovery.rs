//! Finding a damaged store and getting back what it still holds: the integrity check run at every
//! start (and by `ahpd store check`), and the recovery that moves a damaged file aside and copies
//! what SQLite can still read into a fresh store.
//!
//! Why row by row: the online backup API copies pages as they are, so its copy of a damaged file
//! is just as damaged; `VACUUM INTO` reads every table through its b-tree and gives up at the first
//! unreadable page, keeping nothing. Walking each table by rowid (`WHERE rowid > ? LIMIT 1`) seeks
//! past an unreadable leaf page to the next readable one, so only the rows on the damaged pages
//! are lost (`a_walk_by_rowid_keeps_what_vacuum_into_loses` below shows the difference). The CLI's
//! `.recover` goes further (it scans free pages too) but is not in the library rusqlite bundles.
//!
//! **Invariant:** the damaged file is never written: it is checked through a read-only
//! connection and read from a copy, then kept aside whole, with its `-wal` and `-shm`.

use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::{Deserialize, Serialize};

use super::records::{ChatRecord, KeptTerminalRecord, SessionRecord, TurnRecord, WakeupRecord, WorktreeRecord};
use super::{Store, StoreError, SCHEMA_VERSION};

/// How thorough a check is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// At every start: SQLite's `quick_check` (every page read, the b-trees' shape checked) and
    /// the schema; costs one read of the file.
    Quick,
    /// `ahpd store check`: SQLite's `integrity_check` (indexes against their tables too), the
    /// schema, and every record read as the record it is.
    Full,
}

/// What a check found wrong; empty when the store is sound.
pub type Problems = Vec<String>;

/// One table the store keeps: its columns (rowid aside), the schema version that made it, and how
/// its `record` column is read.
struct Table {
    name: &'static str,
    columns: &'static [&'static str],
    since: i64,
    readable: fn(&str) -> bool,
}

fn reads_as<T: serde::de::DeserializeOwned>(json: &str) -> bool {
    serde_json::from_str::<T>(json).is_ok()
}

/// Every table, parents before the rows that refer to them (the fresh store checks foreign keys).
const TABLES: &[Table] = &[
    Table {
        name: "sessions",
        columns: &["uri", "provider", "created_at", "modified_at", "summary", "record"],
        since: 1,
        readable: reads_as::<SessionRecord>,
    },
    Table {
        name: "chats",
        columns: &["uri", "session", "position", "record"],
        since: 1,
        readable: reads_as::<ChatRecord>,
    },
    Table {
        name: "turns",
        columns: &["chat", "position", "turn_id", "record"],
        since: 1,
        readable: reads_as::<TurnRecord>,
    },
    Table { name: "running", columns: &["chat", "record"], since: 1, readable: reads_as::<serde_json::Value> },
    Table { name: "annotations", columns: &["session", "record"], since: 1, readable: reads_as::<serde_json::Value> },
    Table { name: "wakeups", columns: &["chat", "due_at", "record"], since: 1, readable: reads_as::<WakeupRecord> },
    Table {
        name: "worktrees",
        columns: &["owner", "session", "record"],
        since: 2,
        readable: reads_as::<WorktreeRecord>,
    },
    Table {
        name: "terminal_outputs",
        columns: &["uri", "chat", "record"],
        since: 3,
        readable: reads_as::<KeptTerminalRecord>,
    },
    Table {
        name: "agent_offers",
        columns: &["provider", "record"],
        since: 4,
        readable: reads_as::<super::AgentOffersRecord>,
    },
    Table {
        name: "agent_merge",
        columns: &["session", "folder", "record"],
        since: 5,
        readable: reads_as::<super::AgentMergeRecord>,
    },
    Table { name: "automations", columns: &["uri", "record"], since: 6, readable: reads_as::<super::AutomationRecord> },
    Table {
        name: "automation_runs",
        columns: &["uri", "automation", "created_ms", "request_id", "occurrence", "record"],
        since: 6,
        readable: reads_as::<super::AutomationRunRecord>,
    },
];

/// The most problems a check lists (SQLite's own list stops there too).
const MOST_LISTED: usize = 20;

/// True when SQLite's error means the file is damaged (rather than unreachable, busy or full).
pub fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(error.sqlite_error_code(), Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase))
}

/// Checks the store at `path` without writing to it. Answers what is wrong (nothing: sound); an
/// error is a file that could not be checked at all (missing, unreadable, busy), not damage.
pub fn check(path: &Path, depth: Depth) -> Result<Problems, StoreError> {
    let sql = |source| StoreError::Sql { path: path.to_owned(), source };
    let conn = super::connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(sql)?;
    let damage = |e: rusqlite::Error| if is_damage(&e) { Ok(vec![e.to_string()]) } else { Err(sql(e)) };
    let pragma = match depth {
        Depth::Quick => format!("PRAGMA quick_check({MOST_LISTED})"),
        Depth::Full => format!("PRAGMA integrity_check({MOST_LISTED})"),
    };
    let said: Vec<String> = match conn.prepare(&pragma).and_then(|mut s| s.query_map([], |r| r.get(0))?.collect()) {
        Ok(said) => said,
        Err(e) => return damage(e),
    };
    // SQLite heads its list with "*** in database main ***" and may break a problem over lines.
    let mut problems: Problems = said
        .iter()
        .flat_map(|said| said.lines())
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "ok" && !line.starts_with("*** in database"))
        .map(str::to_owned)
        .collect();
    if !problems.is_empty() {
        return Ok(problems);
    }
    match schema_problems(&conn) {
        Ok(found) => problems.extend(found),
        Err(e) => return damage(e),
    }
    if depth == Depth::Full && problems.is_empty() {
        for table in TABLES {
            match unreadable_records(&conn, table) {
                Ok(found) => problems.extend(found),
                Err(e) if is_missing_table(&e) => {}
                Err(e) => return damage(e),
            }
        }
        problems.truncate(MOST_LISTED);
    }
    Ok(problems)
}

/// The tables the file's version promises that it lacks, or a version newer than this build's.
fn schema_problems(conn: &Connection) -> rusqlite::Result<Problems> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Ok(vec![format!(
            "it was written by a newer ahpd (store version {version}; this one reads up to {SCHEMA_VERSION})"
        )]);
    }
    let mut problems = Vec::new();
    for table in TABLES.iter().filter(|t| t.since <= version) {
        let found: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table.name],
            |r| r.get(0),
        )?;
        if found == 0 {
            problems.push(format!("the table {} is missing (store version {version} has it)", table.name));
        }
    }
    Ok(problems)
}

fn is_missing_table(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(ErrorCode::Unknown) && error.to_string().contains("no such table")
}

/// The rows of `table` whose record does not read as its record.
fn unreadable_records(conn: &Connection, table: &Table) -> rusqlite::Result<Problems> {
    let mut statement = conn.prepare(&format!("SELECT rowid, record FROM {}", table.name))?;
    let mut rows = statement.query([])?;
    let mut problems = Vec::new();
    while let Some(row) = rows.next()? {
        let rowid: i64 = row.get(0)?;
        let readable = match row.get_ref(1)? {
            rusqlite::types::ValueRef::Text(text) => std::str::from_utf8(text).is_ok_and(table.readable),
            _ => false,
        };
        if !readable && problems.len() < MOST_LISTED {
            problems.push(format!("row {rowid} of {} holds a record that does not read", table.name));
        }
    }
    Ok(problems)
}

/// What a recovery did, for the person (stderr at start, `ahpd status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    /// When it ran (RFC 3339).
    pub at: String,
    /// What the check found wrong (the first problems).
    pub found: Problems,
    /// Where the damaged file is kept (its `-wal` and `-shm`, when it had them, beside it).
    pub damaged_file: PathBuf,
    /// Sessions that came back.
    pub sessions: i64,
    /// Chats that came back.
    pub chats: i64,
    /// Turns that came back.
    pub turns: i64,
    /// Places SQLite could not read (a damaged page, a row), each skipped with what it held.
    pub unreadable: u64,
    /// Rows read but left out: a record that does not read, or whose session or chat was lost.
    pub dropped: u64,
}

impl Recovery {
    /// The sentences a person reads.
    pub fn describe(&self) -> String {
        let mut said = format!(
            "The session store was damaged ({}). It is kept aside as {} and was not used; what could be read \
             came back into a fresh store: {} sessions, {} chats, {} turns.",
            self.found.first().map_or("unreadable", String::as_str),
            self.damaged_file.display(),
            self.sessions,
            self.chats,
            self.turns,
        );
        if self.unreadable > 0 || self.dropped > 0 {
            said.push_str(&format!(
                " Lost: {} unreadable places in the file, {} records that did not read or whose session or chat was lost.",
                self.unreadable, self.dropped
            ));
        }
        said
    }
}

/// Why a recovery could not finish (the damaged file is then where it was, or aside, as said).
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// A file could not be copied, moved or made.
    #[error("could not {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The fresh store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RecoveryError + 'a {
    move |source| RecoveryError::Io { what, path: path.to_owned(), source }
}

/// The file SQLite keeps beside `db` under `suffix` (`-wal`, `-shm`).
pub fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A name beside `path` that is not taken: `<name>.<what>-<UTC time>`, with `-2`, `-3`… after it
/// when one was made in the same second.
pub fn aside_name(path: &Path, what: &str) -> PathBuf {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "sessions.db".into());
    let base = path.with_file_name(format!("{name}.{what}-{stamp}"));
    let mut candidate = base.clone();
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() || beside(&candidate, "-wal").symlink_metadata().is_ok() {
        n += 1;
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
    }
    candidate
}

/// Moves the store at `path` (with its `-wal` and `-shm`) to `to`. The log files go first: a
/// store left at `path` without them (a crash between the moves) is checked again at the next
/// start.
pub fn move_store(path: &Path, to: &Path) -> Result<(), RecoveryError> {
    for suffix in ["-wal", "-shm"] {
        let from = beside(path, suffix);
        if from.symlink_metadata().is_ok() {
            std::fs::rename(&from, beside(to, suffix)).map_err(io("move aside", &from))?;
        }
    }
    std::fs::rename(path, to).map_err(io("move aside", path))
}

/// Recovers the damaged store at `path`: what can be read goes into a fresh store that takes its
/// place, and the damaged file is kept aside. `found` is what the check said.
pub fn recover(path: &Path, found: Problems) -> Result<Recovery, RecoveryError> {
    let at = crate::clock::iso(u64::try_from(jiff::Timestamp::now().as_millisecond()).unwrap_or(0));
    let work = with_prefix(path, "recovering");
    let fresh = with_prefix(path, "recovered");
    remove_store_files(&work);
    remove_store_files(&fresh);
    // Read from a copy: opening the file itself would let SQLite write its log into it.
    std::fs::copy(path, &work).map_err(io("copy", path))?;
    let log = beside(path, "-wal");
    if log.exists() {
        std::fs::copy(&log, beside(&work, "-wal")).map_err(io("copy", &log))?;
    }
    let copied = copy_readable(&work, &fresh);
    remove_store_files(&work);
    let (unreadable, dropped) = match copied {
        Ok(counts) => counts,
        Err(e) => {
            remove_store_files(&fresh);
            return Err(e);
        }
    };
    let (sessions, chats, turns) = counts(&fresh)?;
    let damaged_file = aside_name(path, "damaged");
    move_store(path, &damaged_file)?;
    move_store(&fresh, path)?;
    if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
        let _ = dir.sync_all();
    }
    Ok(Recovery { at, found, damaged_file, sessions, chats, turns, unreadable, dropped })
}

/// `.<name>.<what>` beside `path`.
fn with_prefix(path: &Path, what: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{what}"))
}

fn remove_store_files(path: &Path) {
    for file in [path.to_owned(), beside(path, "-wal"), beside(path, "-shm")] {
        let _ = std::fs::remove_file(file);
    }
}

/// Sessions, chats and turns in the store at `path`.
pub fn counts(path: &Path) -> Result<(i64, i64, i64), StoreError> {
    let sql = |source| StoreError::Sql { path: path.to_owned(), source };
    let conn = super::connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(sql)?;
    let count = |table: &str| conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get::<_, i64>(0));
    Ok((count("sessions").map_err(sql)?, count("chats").map_err(sql)?, count("turns").map_err(sql)?))
}

/// Copies every readable row of the store at `from` into a new store at `to`; answers the places
/// that could not be read and the rows left out.
fn copy_readable(from: &Path, to: &Path) -> Result<(u64, u64), RecoveryError> {
    let source = Connection::open(from).map_err(|source| StoreError::Sql { path: from.to_owned(), source })?;
    crate::fsutil::create_private_file(to).map_err(io("create", to))?;
    let mut fresh = Store::open(to)?;
    let mut unreadable = 0;
    let mut dropped = 0;
    fresh.in_transaction(|store| {
        for table in TABLES {
            let (skipped, left_out) = copy_table(&source, &store.conn, table);
            unreadable += skipped;
            dropped += left_out;
        }
        let sql = |source| StoreError::Sql { path: to.to_owned(), source };
        renumber_turns(&store.conn).map_err(sql)?;
        dropped += drop_orphan_worktrees(&store.conn).map_err(sql)?;
        mend_default_chats(&store.conn).map_err(sql)?;
        Ok(())
    })?;
    Ok((unreadable, dropped))
}

/// Copies one table row by row; answers (places skipped, rows left out).
fn copy_table(source: &Connection, target: &Connection, table: &Table) -> (u64, u64) {
    let columns = table.columns.join(", ");
    let read = format!("SELECT rowid, {columns} FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT 1", table.name);
    let marks = vec!["?"; table.columns.len()].join(", ");
    let write = format!("INSERT INTO {} ({columns}) VALUES ({marks})", table.name);
    let record_at = table.columns.iter().position(|c| *c == "record");
    let (mut skipped, mut left_out) = (0, 0);
    let mut after = i64::MIN;
    loop {
        match row_after(source, &read, after) {
            Ok(None) => break,
            Ok(Some((rowid, values))) => {
                after = rowid;
                let readable = record_at.is_none_or(|at| match &values[at] {
                    Value::Text(json) => (table.readable)(json),
                    _ => false,
                });
                let kept = readable
                    && target
                        .prepare_cached(&write)
                        .and_then(|mut s| s.execute(rusqlite::params_from_iter(values.iter())))
                        .is_ok();
                if !kept {
                    left_out += 1;
                }
            }
            Err(e) if is_missing_table(&e) => break,
            Err(_) => {
                skipped += 1;
                match readable_past(source, &read, after) {
                    Some(next) => after = next,
                    None => break,
                }
            }
        }
    }
    (skipped, left_out)
}

/// The first row after rowid `after` (its rowid and values).
fn row_after(conn: &Connection, sql: &str, after: i64) -> rusqlite::Result<Option<(i64, Vec<Value>)>> {
    let mut statement = conn.prepare_cached(sql)?;
    let width = statement.column_count();
    let mut rows = statement.query([after])?;
    let Some(row) = rows.next()? else { return Ok(None) };
    let rowid: i64 = row.get(0)?;
    if rowid <= after {
        // A b-tree out of order: damage, read as such.
        return Err(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT), None));
    }
    let values = (1..width).map(|i| row.get::<_, Value>(i)).collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some((rowid, values)))
}

/// The smallest rowid past `after` from which the table reads again (the unreadable rows lie on
/// one page, a run of rowids): steps doubling until a read succeeds, then halves back. `None`:
/// nothing past `after` reads.
fn readable_past(conn: &Connection, sql: &str, after: i64) -> Option<i64> {
    let reads = |from: i64| row_after(conn, sql, from).is_ok();
    // The store's rowids are SQLite's own, from 1: a walk that failed before reading any row
    // probes from 0, where doubling steps reach every rowid.
    let base = after.max(0);
    if base > after && reads(base) {
        return Some(base);
    }
    let mut step: i64 = 1;
    let mut good = loop {
        let probe = base.checked_add(step)?;
        if reads(probe) {
            break probe;
        }
        step = step.checked_mul(2)?;
    };
    let mut bad = base + step / 2;
    while good - bad > 1 {
        let middle = bad + (good - bad) / 2;
        if reads(middle) {
            good = middle;
        } else {
            bad = middle;
        }
    }
    Some(good)
}

/// A chat whose middle turns were lost keeps its turns in order, numbered from 0 again: the next
/// turn's place is the count of turns, which must not land on a kept one.
fn renumber_turns(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TEMP TABLE renumbered (turn INTEGER PRIMARY KEY, position INTEGER NOT NULL);
         INSERT INTO renumbered SELECT rowid, ROW_NUMBER() OVER (PARTITION BY chat ORDER BY position) - 1 FROM turns;
         UPDATE turns SET position = -1 - (SELECT position FROM renumbered WHERE turn = turns.rowid);
         UPDATE turns SET position = -1 - position;
         DROP TABLE renumbered;",
    )
}

/// A worktree's record whose session was lost goes with it.
fn drop_orphan_worktrees(conn: &Connection) -> rusqlite::Result<u64> {
    let gone = conn.execute("DELETE FROM worktrees WHERE session NOT IN (SELECT uri FROM sessions)", [])?;
    Ok(u64::try_from(gone).unwrap_or(0))
}

/// A session whose default chat was lost gets its first kept chat as its default (or none).
fn mend_default_chats(conn: &Connection) -> rusqlite::Result<()> {
    let sessions: Vec<(String, String)> = conn
        .prepare("SELECT uri, record FROM sessions")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (uri, json) in sessions {
        let Ok(mut record) = serde_json::from_str::<SessionRecord>(&json) else { continue };
        let kept = |chat: &str| -> rusqlite::Result<bool> {
            conn.query_row("SELECT COUNT(*) FROM chats WHERE uri = ?1 AND session = ?2", [chat, &uri], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n > 0)
        };
        let lost = match &record.default_chat {
            Some(chat) => !kept(chat)?,
            None => false,
        };
        if !lost {
            continue;
        }
        record.default_chat = conn
            .query_row("SELECT uri FROM chats WHERE session = ?1 ORDER BY position LIMIT 1", [&uri], |r| r.get(0))
            .ok();
        let Ok(json) = serde_json::to_string(&record) else { continue };
        conn.execute("UPDATE sessions SET record = ?1 WHERE uri = ?2", [&json, &uri])?;
    }
    Ok(())
}

/// Opens the store at `path` for the daemon: checked first; when damaged, recovered into a fresh
/// one (answered, to tell the person) and the damaged file kept aside.
pub fn open_checked(path: &Path) -> Result<(Store, Option<Recovery>), RecoveryError> {
    let problems = check(path, Depth::Quick)?;
    let recovery = if problems.is_empty() { None } else { Some(recover(path, problems)?) };
    Ok((Store::open(path)?, recovery))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::{ChatRecord, SessionRecord, TurnRecord};

    /// A store of `sessions` sessions, one chat each, `turns` turns a chat of ~1 KiB each.
    fn store_with(path: &Path, sessions: usize, turns: usize) {
        let mut store = Store::open(path).expect("store");
        store
            .in_transaction(|s| {
                for i in 0..sessions {
                    let (session, chat) = (format!("ahp-session:/s{i}"), format!("ahp-chat:/c{i}"));
                    let record: SessionRecord = serde_json::from_value(serde_json::json!({
                        "uri": session, "provider": "echo", "createdAt": "2026-01-01T00:00:00.000Z",
                        "defaultChat": chat,
                    }))
                    .expect("session record");
                    s.save_session(&record, &serde_json::json!({ "resource": session }))?;
                    let chat_record: ChatRecord = serde_json::from_value(serde_json::json!({
                        "uri": chat, "session": session, "position": 0, "conversationId": chat,
                    }))
                    .expect("chat record");
                    s.save_chat(&chat_record)?;
                    for t in 0..turns {
                        let turn: TurnRecord = serde_json::from_value(serde_json::json!({ "turn": {
                            "id": format!("t{i}-{t}"),
                            "message": { "text": "x".repeat(1000), "origin": { "kind": "user" } },
                            "responseParts": [],
                            "state": "complete",
                        }}))
                        .expect("turn record");
                        s.save_turn(&chat, i64::try_from(t).expect("small"), &turn)?;
                    }
                }
                Ok(())
            })
            .expect("written");
    }

    /// The pages directly under `table`'s root (its leaves, in a small store), in key order.
    pub fn leaves_of(path: &Path, table: &str) -> (usize, Vec<u32>) {
        let conn = Connection::open(path).expect("open");
        let root: u32 = conn
            .query_row("SELECT rootpage FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0))
            .expect("root page");
        let size: usize = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).expect("page size");
        drop(conn);
        let bytes = std::fs::read(path).expect("read");
        let page = &bytes[(root as usize - 1) * size..root as usize * size];
        assert_eq!(page[0], 0x05, "{table}'s root is an interior page");
        let cells = usize::from(u16::from_be_bytes([page[3], page[4]]));
        let word = |at: usize| u32::from_be_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]);
        let mut children: Vec<u32> =
            (0..cells).map(|c| word(usize::from(u16::from_be_bytes([page[12 + 2 * c], page[13 + 2 * c]])))).collect();
        children.push(word(8));
        (size, children)
    }

    /// Overwrites page `page` of the file with garbage.
    pub fn damage(path: &Path, size: usize, page: u32) {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(path).expect("open");
        file.seek(SeekFrom::Start((u64::from(page) - 1) * size as u64)).expect("seek");
        file.write_all(&vec![0x5a; size]).expect("write");
    }

    #[test]
    fn a_walk_by_rowid_keeps_what_vacuum_into_loses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.db");
        store_with(&path, 4, 10);
        assert!(check(&path, Depth::Full).expect("checked").is_empty(), "a new store is sound");
        let (size, leaves) = leaves_of(&path, "turns");
        assert!(leaves.len() > 4, "the turns span several pages");
        damage(&path, size, leaves[leaves.len() / 2]);
        let found = check(&path, Depth::Quick).expect("checked");
        assert!(!found.is_empty(), "the quick check finds the damage");

        let vacuumed = dir.path().join("vacuumed.db");
        let conn = Connection::open(&path).expect("open");
        assert!(conn.execute("VACUUM INTO ?1", [vacuumed.to_string_lossy()]).is_err(), "VACUUM INTO gives up");
        drop(conn);

        let recovery = recover(&path, found).expect("recovered");
        assert_eq!((recovery.sessions, recovery.chats), (4, 4));
        assert!(recovery.turns > 20 && recovery.turns < 40, "only one page of turns lost: {recovery:?}");
        assert!(recovery.unreadable > 0);
        assert!(recovery.damaged_file.is_file(), "the damaged file is kept");
        assert!(check(&path, Depth::Full).expect("checked").is_empty(), "the fresh store is sound");
        let store = Store::open(&path).expect("reopened");
        for i in 0..4 {
            let chat = format!("ahp-chat:/c{i}");
            let loaded = store.load_session(&format!("ahp-session:/s{i}")).expect("loads").expect("kept");
            let turns = &loaded.chats[0].1;
            let count = store.turn_count(&chat).expect("count");
            assert_eq!(count, i64::try_from(turns.len()).expect("small"));
            // Kept in order, numbered from 0 again: the next turn goes after them.
            let ids: Vec<usize> =
                turns.iter().map(|t| t.turn.id.rsplit('-').next().and_then(|n| n.parse().ok()).expect("id")).collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            let positions: Vec<i64> = store
                .conn
                .prepare("SELECT position FROM turns WHERE chat = ?1 ORDER BY position")
                .and_then(|mut s| s.query_map([&chat], |r| r.get(0))?.collect())
                .expect("positions");
            assert_eq!(positions, (0..count).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_lost_session_takes_its_chats_and_turns_with_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.db");
        // Session rows padded to ~1 KiB so the sessions span pages.
        store_with(&path, 30, 1);
        let conn = Connection::open(&path).expect("open");
        conn.execute("UPDATE sessions SET summary = json_object('pad', ?1)", ["p".repeat(1000)]).expect("pad");
        conn.execute_batch("VACUUM").expect("vacuum");
        drop(conn);
        let (size, leaves) = leaves_of(&path, "sessions");
        damage(&path, size, leaves[0]);
        let found = check(&path, Depth::Quick).expect("checked");
        assert!(!found.is_empty());
        let recovery = recover(&path, found).expect("recovered");
        assert!(recovery.sessions > 0 && recovery.sessions < 30, "{recovery:?}");
        assert_eq!(recovery.chats, recovery.sessions, "a lost session's chat is not kept");
        assert_eq!(recovery.turns, recovery.sessions);
        assert!(recovery.dropped >= 2 * (30 - u64::try_from(recovery.sessions).expect("count")));
        let store = Store::open(&path).expect("reopened");
        assert_eq!(store.count().expect("count"), recovery.sessions);
    }

    /// After `kill -9` the last commits may still be in the log alone: they come back too, and the
    /// log is kept aside with the damaged file.
    #[test]
    fn what_only_the_log_held_comes_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let live = dir.path().join("live.db");
        store_with(&live, 4, 10);
        let (size, leaves) = leaves_of(&live, "turns");
        // A writer that never checkpoints, caught mid-life: its files copied as a crash leaves them.
        let writer = Connection::open(&live).expect("open");
        writer.pragma_update(None, "wal_autocheckpoint", 0).expect("no checkpoint");
        writer
            .execute(
                "UPDATE sessions SET summary = json_object('title', 'only in the log') WHERE uri = 'ahp-session:/s3'",
                [],
            )
            .expect("write");
        let path = dir.path().join("sessions.db");
        std::fs::copy(&live, &path).expect("copy");
        std::fs::copy(beside(&live, "-wal"), beside(&path, "-wal")).expect("copy log");
        drop(writer);
        damage(&path, size, leaves[1]);
        let found = check(&path, Depth::Quick).expect("checked");
        assert!(!found.is_empty());
        let recovery = recover(&path, found).expect("recovered");
        assert!(beside(&recovery.damaged_file, "-wal").is_file(), "the log is kept with the damaged file");
        let conn = Connection::open(&path).expect("open");
        let summary: String = conn
            .query_row("SELECT summary FROM sessions WHERE uri = 'ahp-session:/s3'", [], |r| r.get(0))
            .expect("session kept");
        assert!(summary.contains("only in the log"), "{summary}");
    }

    #[test]
    fn a_file_that_is_not_a_store_is_damage_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.db");
        std::fs::write(&path, vec![0x42; 8192]).expect("write");
        assert!(!check(&path, Depth::Quick).expect("checked").is_empty());
        let recovery = recover(&path, vec!["not a database".into()]).expect("recovered");
        assert_eq!((recovery.sessions, recovery.turns), (0, 0));
        assert!(check(&path, Depth::Full).expect("checked").is_empty());
        assert!(check(&dir.path().join("absent.db"), Depth::Quick).is_err(), "a missing file is not damage");
    }
}

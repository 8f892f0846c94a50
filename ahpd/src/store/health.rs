//! Whether the session store can write: the trouble a failed write met (a full disk, a read-only
//! file, an I/O error) and the sentence a person reads about it, the probe that finds the store
//! writable again, and the host's records it could not keep meanwhile, written again once it can.
//!
//! The store notes the trouble itself (every SQLite error passes [`Trouble::of`]); the host asks
//! it before it tells anyone a thing is kept, and notes in [`Unkept`] what it holds in memory that
//! the store does not have.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rusqlite::ErrorCode;

/// Why the store cannot write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// No room left (`SQLITE_FULL`: the disk, or the store's page limit).
    Full,
    /// The file or its folder is read-only.
    ReadOnly,
    /// The disk failed a read or a write.
    Io,
}

impl Trouble {
    /// The trouble an SQLite error says, when it says one (a constraint or a bad query does not).
    pub fn of(error: &rusqlite::Error) -> Option<Self> {
        let rusqlite::Error::SqliteFailure(failure, _) = error else { return None };
        match failure.code {
            ErrorCode::DiskFull => Some(Self::Full),
            ErrorCode::ReadOnly => Some(Self::ReadOnly),
            ErrorCode::SystemIoFailure => Some(Self::Io),
            _ => None,
        }
    }

    /// The trouble a failed file operation says (making, moving or syncing a file of the store).
    pub fn of_io(error: &std::io::Error) -> Self {
        match error.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => Self::Full,
            Some(libc::EROFS | libc::EPERM | libc::EACCES) => Self::ReadOnly,
            _ => Self::Io,
        }
    }

    /// The sentence a person reads: what happened, where, and what to do.
    pub fn sentence(self, store: &Path) -> String {
        let (what, remedy) = match self {
            Self::Full => ("the disk is full", "Free some space"),
            Self::ReadOnly => ("the file cannot be written (read-only)", "Make it writable again"),
            Self::Io => ("the disk reports an I/O error", "Check the disk"),
        };
        format!(
            "ahpd cannot write its session store: {what} ({}). {remedy}; nothing after this point was kept.",
            store.display()
        )
    }
}

/// A record the host holds in memory and the store could not keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A session's record and summary.
    Session(String),
    /// A chat's record.
    Chat(String),
    /// A chat's turns from this position on.
    Turns(String, usize),
    /// A session's annotations (the channel's URI).
    Annotations(String),
}

/// The records the store could not keep, to write again from memory once it can.
#[derive(Debug, Default)]
pub struct Unkept {
    sessions: BTreeSet<String>,
    chats: BTreeSet<String>,
    /// A chat's first turn position the store may not hold as memory does.
    turns: BTreeMap<String, usize>,
    annotations: BTreeSet<String>,
}

impl Unkept {
    /// Notes a record the store did not keep.
    pub fn note(&mut self, record: Record) {
        match record {
            Record::Session(uri) => {
                self.sessions.insert(uri);
            }
            Record::Chat(uri) => {
                self.chats.insert(uri);
            }
            Record::Turns(chat, from) => {
                let at = self.turns.entry(chat).or_insert(from);
                *at = (*at).min(from);
            }
            Record::Annotations(uri) => {
                self.annotations.insert(uri);
            }
        }
    }

    /// The first of a chat's turns the store may not hold as memory does, if any: a turn after it
    /// must not be written alone, or the stored positions would have a gap.
    pub fn turns_from(&self, chat: &str) -> Option<usize> {
        self.turns.get(chat).copied()
    }

    /// A chat's turns were written from where they were missing on.
    pub fn turns_kept(&mut self, chat: &str) {
        self.turns.remove(chat);
    }

    /// True when memory and the store agree.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.chats.is_empty() && self.turns.is_empty() && self.annotations.is_empty()
    }

    /// Forgets a session and its chats (deleted, or left memory written).
    pub fn forget(&mut self, uri: &str) {
        self.sessions.remove(uri);
        self.chats.remove(uri);
        self.turns.remove(uri);
        self.annotations.remove(uri);
    }

    /// Takes every record to write again, each after the rows its foreign keys name: sessions,
    /// then their chats, then the chats' turns, then annotations. (A session's summary is made
    /// from memory, not from the rows, so it needs no chat written before it.)
    pub fn take(&mut self) -> Vec<Record> {
        let mut records: Vec<Record> = std::mem::take(&mut self.sessions).into_iter().map(Record::Session).collect();
        records.extend(std::mem::take(&mut self.chats).into_iter().map(Record::Chat));
        records.extend(std::mem::take(&mut self.turns).into_iter().map(|(chat, from)| Record::Turns(chat, from)));
        records.extend(std::mem::take(&mut self.annotations).into_iter().map(Record::Annotations));
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn the_troubles_are_read_from_sqlite_codes() {
        assert_eq!(Trouble::of(&failure(rusqlite::ffi::SQLITE_FULL)), Some(Trouble::Full));
        assert_eq!(Trouble::of(&failure(rusqlite::ffi::SQLITE_READONLY)), Some(Trouble::ReadOnly));
        assert_eq!(Trouble::of(&failure(rusqlite::ffi::SQLITE_IOERR_WRITE)), Some(Trouble::Io));
        assert_eq!(Trouble::of(&failure(rusqlite::ffi::SQLITE_CONSTRAINT)), None);
        assert_eq!(Trouble::of(&rusqlite::Error::QueryReturnedNoRows), None);
    }

    #[test]
    fn a_write_to_a_store_opened_read_only_is_read_only_trouble() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.db");
        rusqlite::Connection::open(&path).and_then(|c| c.execute_batch("CREATE TABLE t (x)")).expect("made");
        let read_only =
            rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("opened");
        let error = read_only.execute("INSERT INTO t VALUES (1)", []).expect_err("read-only");
        assert_eq!(Trouble::of(&error), Some(Trouble::ReadOnly));
    }

    #[test]
    fn the_sentence_says_what_where_and_what_to_do() {
        let path = Path::new("/data/ahpd/sessions.db");
        assert_eq!(
            Trouble::Full.sentence(path),
            "ahpd cannot write its session store: the disk is full (/data/ahpd/sessions.db). Free some space; nothing after this point was kept."
        );
        assert!(Trouble::ReadOnly.sentence(path).contains("read-only"));
        assert!(Trouble::Io.sentence(path).contains("I/O error"));
    }

    #[test]
    fn unkept_turns_remember_the_first_position_and_come_out_after_their_parents() {
        let mut unkept = Unkept::default();
        unkept.note(Record::Turns("c".into(), 5));
        unkept.note(Record::Turns("c".into(), 3));
        unkept.note(Record::Turns("c".into(), 7));
        unkept.note(Record::Session("s".into()));
        unkept.note(Record::Chat("c".into()));
        assert!(!unkept.is_empty());
        unkept.note(Record::Annotations("s/annotations".into()));
        assert_eq!(
            unkept.take(),
            vec![
                Record::Session("s".into()),
                Record::Chat("c".into()),
                Record::Turns("c".into(), 3),
                Record::Annotations("s/annotations".into())
            ]
        );
        assert!(unkept.is_empty());
    }
}

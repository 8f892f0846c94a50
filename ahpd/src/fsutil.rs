//! Files written so that a crash at any moment leaves the old version or the new one, never half,
//! and kept private: what ahpd keeps (sessions, the record, the socket, logs, the token) is its
//! owner's alone, in a folder only they can enter.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of a private folder.
pub const DIR_MODE: u32 = 0o700;

/// The mode of a private file.
pub const FILE_MODE: u32 = 0o600;

/// Writes `bytes` to `path` atomically (temp file in the same folder, fsync, rename), readable by
/// the owner alone. A missing folder is made private.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = folder_of(path);
    create_private_dir(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    {
        let mut file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(FILE_MODE).open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The folder a file is in; a bare name (`users.json`, whose parent is "") is in the current one.
fn folder_of(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."))
}

/// Makes `dir` when it is missing: its parents as usual, the folder itself 0700.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Makes `file` (empty) readable by the owner alone when it does not exist yet, so whatever opens
/// it later (SQLite, which gives its WAL and shared-memory files the database's mode) keeps that.
pub fn create_private_file(file: &Path) -> std::io::Result<()> {
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(FILE_MODE).open(file) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// What [`make_private`] changed, as sentences for the log.
pub type Tightened = Vec<String>;

/// Makes `dir` private: created 0700 when missing; when it exists and others may enter it, set to
/// 0700; every file directly in it that others may read set to 0600. Answers what it changed.
pub fn make_private(dir: &Path) -> std::io::Result<Tightened> {
    create_private_dir(dir)?;
    let mut said = Vec::new();
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
        said.push(format!(
            "tightened {} from {mode:o} to {DIR_MODE:o}: it holds your sessions and the daemon's token",
            dir.display()
        ));
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_file() && mode & 0o077 != 0 {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode & 0o700))?;
            files.push(entry.path());
        }
    }
    if !files.is_empty() {
        files.sort();
        let names: Vec<String> =
            files.iter().filter_map(|f| f.file_name()).map(|n| n.to_string_lossy().into()).collect();
        said.push(format!("tightened {} to the owner alone: {}", dir.display(), names.join(", ")));
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
    }

    #[test]
    fn a_missing_folder_is_made_private_and_a_looser_one_is_tightened_with_its_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("share").join("ahpd");
        assert!(make_private(&data).expect("made").is_empty(), "a new folder needs no tightening");
        assert_eq!(mode(&data), 0o700);
        write_private(&data.join("token"), b"x").expect("written");
        assert_eq!(mode(&data.join("token")), 0o600);
        create_private_file(&data.join("store")).expect("made");
        assert_eq!(mode(&data.join("store")), 0o600);
        assert_eq!(folder_of(Path::new("users.json")), Path::new("."), "a bare name is in the current folder");

        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("loosen");
        std::fs::write(data.join("old.log"), b"x").expect("write");
        std::fs::set_permissions(data.join("old.log"), std::fs::Permissions::from_mode(0o644)).expect("loosen");
        let said = make_private(&data).expect("tightened");
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("from 755 to 700"), "{said:?}");
        assert!(said[1].ends_with(": old.log"), "{said:?}");
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("old.log")), 0o600);
        assert!(make_private(&data).expect("again").is_empty(), "nothing left to tighten");
    }
}

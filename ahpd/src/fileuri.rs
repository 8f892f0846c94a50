//! `file:` URIs and the paths they name, the type a file's name says, and whether a path lies
//! inside a set of folders (through symlinks, so what is read is what a folder holds, not where a
//! link points).

use std::path::{Component, Path, PathBuf};

/// A `file://` URI for a path.
pub fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The MIME type a file's name says, `application/octet-stream` when it says none this host
/// knows (its bytes decide then).
pub fn type_of_path(path: &Path) -> &'static str {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "json" => "application/json",
        "md" | "markdown" => "text/markdown",
        "html" | "htm" => "text/html",
        "csv" => "text/csv",
        "svg" => "image/svg+xml",
        "txt" | "log" | "rs" | "py" | "js" | "ts" | "toml" | "yaml" | "yml" | "c" | "h" | "go" | "java" | "sh"
        | "css" | "xml" => "text/plain",
        _ => "application/octet-stream",
    }
}

/// A path from a `file:` URI, percent-decoded; `None` for another scheme or a relative path.
pub fn path_of_file_uri(uri: &str) -> Option<PathBuf> {
    let (scheme, rest) = uri.split_once(':')?;
    if !scheme.eq_ignore_ascii_case("file") {
        return None;
    }
    let path = match rest.strip_prefix("//") {
        // After the authority (empty, or `localhost`) comes the path.
        Some(after) => &after[after.find('/')?..],
        None => rest,
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    let path = PathBuf::from(String::from_utf8(out).ok()?);
    path.is_absolute().then_some(path)
}

/// `..` and `.` taken out without touching the disk (for a path that does not exist).
pub fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Where a path is, against a set of folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Inside one of them: the real path (symlinks resolved).
    Inside(PathBuf),
    /// It would be inside one, but nothing is there.
    Missing,
    /// Outside every one of them (or it resolves there).
    Outside,
}

/// Where `path` is against `folders`. Blocking (it asks the disk).
pub fn place(path: &Path, folders: &[PathBuf]) -> Placed {
    let roots: Vec<PathBuf> = folders.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect();
    match std::fs::canonicalize(path) {
        Ok(real) if roots.iter().any(|r| real.starts_with(r)) => Placed::Inside(real),
        Ok(_) => Placed::Outside,
        Err(_) => {
            let normal = lexically_normal(path);
            if roots.iter().chain(folders.iter()).any(|r| normal.starts_with(r)) {
                Placed::Missing
            } else {
                Placed::Outside
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_become_paths() {
        assert_eq!(path_of_file_uri("file:///w/a%20b.txt"), Some(PathBuf::from("/w/a b.txt")));
        assert_eq!(path_of_file_uri("file://localhost/w/x"), Some(PathBuf::from("/w/x")));
        assert_eq!(path_of_file_uri("FILE:///w/x#L3"), Some(PathBuf::from("/w/x")));
        assert_eq!(path_of_file_uri("file:relative"), None);
        assert_eq!(path_of_file_uri("virtual://c/x"), None);
        assert_eq!(lexically_normal(Path::new("/w/x/../../etc/passwd")), PathBuf::from("/etc/passwd"));
    }

    #[test]
    fn a_path_is_placed_against_folders_through_links() {
        let dir = tempfile::tempdir().expect("temp dir");
        let inside = dir.path().join("in.txt");
        std::fs::write(&inside, "x").expect("file");
        let folders = vec![dir.path().to_path_buf()];
        assert!(matches!(place(&inside, &folders), Placed::Inside(_)));
        assert_eq!(place(&dir.path().join("none.txt"), &folders), Placed::Missing);
        assert_eq!(place(Path::new("/etc/hostname"), &folders), Placed::Outside);
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).expect("link");
        assert_eq!(place(&dir.path().join("link"), &folders), Placed::Outside, "a link out is outside");
    }
}

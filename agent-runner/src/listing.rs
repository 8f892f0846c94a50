//! Listing a backend's own conversations from its files (`agent/list`), for the backends that keep
//! one JSONL file per conversation in a folder per working directory (Claude's `projects/`, pi's
//! `sessions/`): the files, a title from a first prompt, and what was read before, kept so that
//! listing again reads only the files that changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use protocol::Listed;

/// What a file looked like when it was last read: listing again reads only the files that changed
/// since (a person with thousands of conversations lists them in a stat each).
#[derive(Debug, Clone, PartialEq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
}

/// The rows of the files listed before, by file, with the stamp each was read at.
#[derive(Default)]
pub struct Summaries {
    rows: HashMap<PathBuf, (Stamp, Option<Listed>)>,
    /// Files read (not taken from what was read before).
    reads: usize,
}

impl Summaries {
    /// The row of every `*.jsonl` one folder below `root` that `summarize` makes one of, newest
    /// first, reading again only the files that changed.
    pub fn list(&mut self, root: &Path, summarize: impl Fn(&Path) -> Option<Listed>) -> Vec<Listed> {
        let files = session_files(root);
        let mut kept = HashMap::with_capacity(files.len());
        for file in files {
            let Ok(meta) = std::fs::metadata(&file) else { continue };
            let stamp = Stamp { modified: meta.modified().ok(), len: meta.len() };
            let row = match self.rows.remove(&file) {
                Some((known, row)) if known == stamp => row,
                _ => {
                    self.reads += 1;
                    summarize(&file)
                }
            };
            kept.insert(file, (stamp, row));
        }
        self.rows = kept;
        let mut rows: Vec<Listed> = self.rows.values().filter_map(|(_, row)| row.clone()).collect();
        rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at).then_with(|| a.id.cmp(&b.id)));
        rows
    }

    /// How many files were read (not taken from what was read before), for tests.
    pub fn reads(&self) -> usize {
        self.reads
    }
}

/// Every `*.jsonl` file one folder below `root`.
pub fn session_files(root: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(root) else { return Vec::new() };
    let mut files = Vec::new();
    for dir in dirs.flatten() {
        let Ok(entries) = std::fs::read_dir(dir.path()) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "jsonl") && path.is_file() {
                files.push(path);
            }
        }
    }
    files
}

/// A conversation's title from its first prompt: the first line with words, cut at 80 characters.
pub fn title_from(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let cut: String = line.chars().take(80).collect();
    if cut.chars().count() < line.chars().count() {
        format!("{cut}…")
    } else {
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_line_with_words_cut_short() {
        assert_eq!(title_from("\n  fix the bug  \nmore"), "fix the bug");
        let long = "x".repeat(90);
        assert_eq!(title_from(&long), format!("{}…", "x".repeat(80)));
    }
}

//! Where pi's session files live, as pi itself keeps them: `<agent folder>/sessions/<encoded
//! folder>/<timestamp>_<session id>.jsonl`, with the agent folder `PI_CODING_AGENT_DIR` (else
//! `~/.pi/agent`). A conversation started here is written there, so `pi --continue` in the same
//! folder goes on with it; one `pi` started is listed, found by id and read back from there. A
//! conversation's id is the session id its file name ends with (pi names its files so).
//!
//! Older ahpd kept each conversation in its own data folder (`sessions/<conversation id>.jsonl`):
//! such a file is still found by id and read back, and moved into pi's folder the next time its
//! conversation runs ([`Catalogue::keep_in`]).

use std::path::{Path, PathBuf};

use agent_runner::listing::{title_from, Summaries};
use agent_runner::AgentError;
use protocol::{At, Listed};
use serde_json::Value;

use crate::options::file_stem;

/// pi's session folders, and the worker's own folder of older ahpd's session files.
#[derive(Debug, Clone)]
pub struct Catalogue {
    /// `<agent folder>/sessions`.
    sessions: PathBuf,
    /// `<data folder>/sessions`, where ahpd kept them before.
    legacy: PathBuf,
}

/// pi's folder name for a working directory (its `getDefaultSessionDir`): the leading separator
/// dropped, every other separator and `:` as `-`, and `--` either side.
pub fn encode_dir(cwd: &Path) -> String {
    let text = cwd.to_string_lossy();
    let trimmed = text.strip_prefix(['/', '\\']).unwrap_or(&text);
    let body: String = trimmed.chars().map(|c| if matches!(c, '/' | '\\' | ':') { '-' } else { c }).collect();
    format!("--{body}--")
}

/// The id a session file is named for: what follows the first `_` of its name (pi's
/// `<timestamp>_<id>.jsonl`), or the whole name of an older ahpd file.
fn id_of(file: &Path) -> Option<String> {
    let stem = file.file_stem()?.to_str()?;
    Some(stem.split_once('_').map_or(stem, |(_, id)| id).to_owned())
}

/// pi's file-name timestamp for now: ISO 8601 with `:` and `.` as `-`.
fn file_timestamp() -> String {
    format!("{:.3}", jiff::Timestamp::now()).replace([':', '.'], "-")
}

fn file_uri(path: &str) -> String {
    format!("file://{path}")
}

impl Catalogue {
    /// The catalogue under pi's agent folder `agent_dir`, and the worker's data folder `data_dir`.
    pub fn new(agent_dir: &Path, data_dir: &Path) -> Self {
        Self { sessions: agent_dir.join("sessions"), legacy: data_dir.join("sessions") }
    }

    /// The folder pi keeps the sessions run in `cwd` in (the real path, as pi's own `cwd` is).
    pub fn dir_for(&self, cwd: &Path) -> PathBuf {
        let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        self.sessions.join(encode_dir(&real))
    }

    /// The file a new conversation `id` run in `cwd` is written to.
    pub fn new_file(&self, cwd: &Path, id: &str) -> PathBuf {
        self.dir_for(cwd).join(format!("{}_{}.jsonl", file_timestamp(), file_stem(id)))
    }

    /// The file older ahpd kept conversation `id` in.
    pub fn legacy_file(&self, id: &str) -> PathBuf {
        self.legacy.join(format!("{}.jsonl", file_stem(id)))
    }

    /// The file of conversation `id`: in pi's folder for `at`'s working directory first, then in
    /// any of pi's folders, then where older ahpd kept it.
    pub fn locate(&self, id: &str, at: &At) -> Option<PathBuf> {
        let stem = file_stem(id);
        let named = |dir: &Path| -> Option<PathBuf> {
            std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
                p.extension().is_some_and(|e| e == "jsonl") && id_of(p).as_deref() == Some(stem.as_str()) && p.is_file()
            })
        };
        if let Some(found) = at.working_directory.as_ref().and_then(|wd| named(&self.dir_for(Path::new(wd)))) {
            return Some(found);
        }
        let in_pi =
            std::fs::read_dir(&self.sessions).ok().and_then(|dirs| dirs.flatten().find_map(|d| named(&d.path())));
        in_pi.or_else(|| Some(self.legacy_file(id)).filter(|p| p.is_file()))
    }

    /// Keeps conversation file `file` where pi looks for the sessions of `cwd`, moving it there
    /// when it is elsewhere (an older ahpd's, or one whose chat the host moved to another
    /// folder), so `pi --continue` in that folder finds it. Answers where it is now.
    pub fn keep_in(&self, file: &Path, cwd: &Path) -> Result<PathBuf, AgentError> {
        let dir = self.dir_for(cwd);
        if !file.exists() || file.parent() == Some(dir.as_path()) {
            return Ok(file.to_path_buf());
        }
        let failed = |e: std::io::Error| AgentError::Failed(format!("{}: {e}", file.display()));
        let id = id_of(file).unwrap_or_default();
        let name = if file.starts_with(&self.legacy) {
            format!("{}_{id}.jsonl", file_timestamp())
        } else {
            file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| format!("{id}.jsonl"))
        };
        std::fs::create_dir_all(&dir).map_err(failed)?;
        let target = dir.join(name);
        if std::fs::rename(file, &target).is_err() {
            // Another file system: a whole copy first, so a crash leaves one of the two whole.
            let text = std::fs::read_to_string(file).map_err(failed)?;
            crate::cut::write_atomically(&target, &text)?;
            std::fs::remove_file(file).map_err(failed)?;
        }
        tracing::info!(from = %file.display(), to = %target.display(), "moved a pi session file where pi keeps it");
        Ok(target)
    }

    /// Every conversation in pi's folders that holds a prompt, newest first, reading again only
    /// the files `summaries` has not read as they are now.
    pub fn list(&self, summaries: &mut Summaries) -> Vec<Listed> {
        summaries.list(&self.sessions, summarize)
    }

    /// The row [`Catalogue::list`] gives conversation `id`.
    pub fn find(&self, id: &str, at: &At) -> Option<Listed> {
        self.locate(id, at).and_then(|f| summarize(&f))
    }
}

/// A session file's row: its id, its name (pi's `/name`) or first prompt as the title, when it
/// began and last changed, and the folder it runs in. None for a file with no prompt.
fn summarize(file: &Path) -> Option<Listed> {
    let id = id_of(file)?;
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return None; // not a name this worker can find again by id
    }
    let text = std::fs::read_to_string(file).ok()?;
    let entries: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let header = entries.first().filter(|h| h["type"] == "session")?;
    let first_prompt = entries.iter().find_map(|e| {
        let message = &e["message"];
        (e["type"] == "message" && message["role"] == "user")
            .then(|| crate::event::content_text(&message["content"]))
            .filter(|t| !t.trim().is_empty())
    })?;
    let name = entries
        .iter()
        .rev()
        .find(|e| e["type"] == "session_info")
        .and_then(|e| e["name"].as_str())
        .map(str::trim)
        .filter(|n| !n.is_empty());
    let title = name.map_or_else(|| title_from(&first_prompt), str::to_owned);
    let modified =
        std::fs::metadata(file).and_then(|m| m.modified()).ok().and_then(|t| jiff::Timestamp::try_from(t).ok());
    let created_at = header["timestamp"].as_str().map(str::to_owned).or_else(|| modified.map(|t| t.to_string()))?;
    let modified_at = entries
        .iter()
        .rev()
        .find_map(|e| e["timestamp"].as_str().filter(|_| e["type"] != "session"))
        .map_or_else(|| created_at.clone(), str::to_owned);
    let cwd = header["cwd"].as_str();
    Some(Listed { id, title, created_at, modified_at, working_directories: cwd.map(file_uri).into_iter().collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = r#"{"type":"session","version":3,"id":"01a22a4b-dfaa","timestamp":"2026-11-30T02:32:25.258Z","cwd":"/w"}
{"type":"message","id":"u1","parentId":null,"timestamp":"2026-11-30T02:32:26.000Z","message":{"role":"user","content":[{"type":"text","text":"remember MANGO"}]}}
{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-11-30T02:32:27.000Z","message":{"role":"assistant","content":[{"type":"text","text":"ok"}]}}
"#;

    #[test]
    fn a_folder_is_named_as_pi_names_it() {
        assert_eq!(encode_dir(Path::new("/home/me/project")), "--home-me-project--");
        assert_eq!(encode_dir(Path::new("/a:b/c")), "--a-b-c--");
    }

    #[test]
    fn pis_own_files_are_listed_found_and_an_older_ahpd_file_found_and_moved() {
        let home = tempfile::tempdir().expect("a folder");
        let (agent, data, work) = (home.path().join("agent"), home.path().join("data"), home.path().join("work"));
        std::fs::create_dir_all(&work).expect("made");
        let catalogue = Catalogue::new(&agent, &data);
        let own = catalogue.new_file(&work, "01a22a4b-dfaa");
        assert!(own.starts_with(agent.join("sessions")), "{}", own.display());
        std::fs::create_dir_all(own.parent().expect("a folder")).expect("made");
        std::fs::write(&own, RECORD).expect("written");
        // A file with no prompt is no conversation to list.
        std::fs::write(
            own.with_file_name("2026-01-01T00-00-00-000Z_empty.jsonl"),
            "{\"type\":\"session\",\"id\":\"e\"}\n",
        )
        .expect("written");

        let rows = catalogue.list(&mut Summaries::default());
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].id, "01a22a4b-dfaa");
        assert_eq!(rows[0].title, "remember MANGO");
        assert_eq!(rows[0].created_at, "2026-11-30T02:32:25.258Z");
        assert_eq!(rows[0].modified_at, "2026-11-30T02:32:27.000Z");
        assert_eq!(rows[0].working_directories, ["file:///w"]);
        let at = At { working_directory: Some(work.display().to_string()) };
        assert_eq!(catalogue.locate("01a22a4b-dfaa", &at), Some(own.clone()));
        assert_eq!(catalogue.locate("01a22a4b-dfaa", &At::default()), Some(own.clone()));
        assert!(catalogue.find("01a22a4b-dfaa", &At::default()).is_some());
        assert_eq!(catalogue.locate("01a22a4b", &At::default()), None, "an id is named whole");

        let legacy = catalogue.legacy_file("old-one");
        std::fs::create_dir_all(legacy.parent().expect("a folder")).expect("made");
        std::fs::write(&legacy, RECORD).expect("written");
        assert_eq!(catalogue.locate("old-one", &at), Some(legacy.clone()), "older ahpd's file is found");
        let moved = catalogue.keep_in(&legacy, &work).expect("moved");
        assert!(!legacy.exists());
        assert_eq!(moved.parent(), own.parent(), "where pi keeps the folder's sessions");
        assert_eq!(std::fs::read_to_string(&moved).expect("read"), RECORD, "nothing lost");
        assert_eq!(catalogue.locate("old-one", &at), Some(moved.clone()));
        assert_eq!(catalogue.keep_in(&moved, &work).expect("kept"), moved, "already there");
    }
}

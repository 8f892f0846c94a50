//! pi's session files as the worker writes them. A conversation that begins as a cut of another
//! (`Start.cut`: edit and resend, or a fork) is a new session file holding the source's entries
//! through the one the first dropped prompt follows, under a header of its own that names the
//! source as its parent; pi continues that file as it continues any, so the cut is on record the
//! moment the file is written. A truncation's source is the conversation itself; a fork's is
//! another chat's, which goes on untouched. And the header's `cwd` is where pi runs the file's
//! tools, so it is made to say the folder the host names.

use std::path::{Path, PathBuf};

use agent_runner::AgentError;
use protocol::Cut;
use serde_json::Value;

/// The lines of a copy of `record` (a pi session file) that leaves out the prompts `dropped`
/// (entry ids, oldest first) and everything after them: the header, with `id` and
/// `parentSession` of the copy, then every entry up to the one the first dropped prompt follows.
/// None when the record has no header.
pub fn cut_record(record: &str, dropped: &[&str], id: &str, parent: &str) -> Option<String> {
    let entries: Vec<Value> = record.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let (header, rest) = entries.split_first()?;
    if header["type"] != "session" {
        return None;
    }
    let first_dropped = rest.iter().position(|e| e["id"].as_str().is_some_and(|id| dropped.contains(&id)));
    let kept = match first_dropped {
        None => rest,
        Some(at) => {
            // The file is one branch (it only ever grows, or is copied like this): what the
            // dropped prompt follows is the entries before it.
            let follows = rest[at]["parentId"].as_str();
            let end = follows.and_then(|p| rest[..at].iter().rposition(|e| e["id"].as_str() == Some(p)));
            end.map_or(&rest[..0], |end| &rest[..=end])
        }
    };
    let mut header = header.clone();
    header["id"] = Value::String(id.to_owned());
    header["parentSession"] = Value::String(parent.to_owned());
    let mut out = String::new();
    for entry in std::iter::once(&header).chain(kept) {
        out.push_str(&entry.to_string());
        out.push('\n');
    }
    Some(out)
}

/// Writes the cut of `source_file` to `file`; it runs where the source ran until [`run_in`] says
/// otherwise.
pub fn write_cut(source_file: &Path, file: &Path, cut: &Cut, id: &str) -> Result<(), AgentError> {
    let record = std::fs::read_to_string(source_file).map_err(|_| {
        AgentError::Refused(format!(
            "pi has no record of conversation {} to go on from an earlier turn of it",
            cut.source
        ))
    })?;
    let dropped: Vec<&str> = cut.dropped.iter().filter_map(|t| t.transcript_id.as_deref()).collect();
    let copy = cut_record(&record, &dropped, id, &source_file.display().to_string()).ok_or_else(|| {
        AgentError::Refused(format!("pi's record of conversation {} is not a session file", cut.source))
    })?;
    write_atomically(file, &copy)
}

/// Writes `text` to `file` atomically: a crash leaves the old file or the new one.
pub(crate) fn write_atomically(file: &Path, text: &str) -> Result<(), AgentError> {
    let dir = file.parent().ok_or_else(|| AgentError::Failed(format!("{} has no folder", file.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
    let mut temp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
    std::io::Write::write_all(&mut temp, text.as_bytes())
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| AgentError::Failed(format!("{}: {e}", file.display())))?;
    temp.persist(file).map_err(|e| AgentError::Failed(format!("{}: {e}", file.display())))?;
    Ok(())
}

/// The folder the session file `file`'s header says its conversation runs in, when the file
/// and that folder exist: where pi runs its tools when it continues the file.
pub fn recorded_folder(file: &Path) -> Option<PathBuf> {
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(std::fs::File::open(file).ok()?), &mut first).ok()?;
    let header: Value = serde_json::from_str(&first).ok()?;
    let cwd = PathBuf::from(header.get("cwd")?.as_str()?);
    (header["type"] == "session" && cwd.is_dir()).then_some(cwd)
}

/// Makes the session file `file` say its conversation runs in `folder`: pi runs a session file's
/// tools in the folder its header names (not its own), and will not start one whose folder is
/// gone, so a chat the host moved (`set_workspace`, `isolate_session`) goes on where it was moved.
/// Nothing changes when the file is not written yet (pi writes the folder it runs in) or says so.
pub fn run_in(file: &Path, folder: &Path) -> Result<(), AgentError> {
    let Ok(record) = std::fs::read_to_string(file) else { return Ok(()) };
    let (first, rest) = record.split_once('\n').unwrap_or((&record, ""));
    let Ok(mut header) = serde_json::from_str::<Value>(first) else { return Ok(()) };
    let wanted = folder.display().to_string();
    if header["type"] != "session" || header["cwd"].as_str() == Some(wanted.as_str()) {
        return Ok(());
    }
    header["cwd"] = Value::String(wanted);
    write_atomically(file, &format!("{header}\n{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = r#"{"type":"session","version":3,"id":"old","cwd":"/w"}
{"type":"model_change","id":"m0","parentId":null}
{"type":"message","id":"u1","parentId":"m0","message":{"role":"user"}}
{"type":"message","id":"a1","parentId":"u1","message":{"role":"assistant"}}
{"type":"message","id":"u2","parentId":"a1","message":{"role":"user"}}
{"type":"message","id":"a2","parentId":"u2","message":{"role":"assistant"}}
"#;

    fn ids(copy: &str) -> Vec<String> {
        copy.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("json")["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn the_folder_a_record_was_made_in_is_its_headers_when_that_folder_exists() {
        let dir = tempfile::tempdir().expect("a folder");
        let file = dir.path().join("s.jsonl");
        let header = serde_json::json!({"type": "session", "id": "s", "cwd": dir.path()});
        std::fs::write(&file, format!("{header}\n{{\"type\":\"message\"}}\n")).expect("written");
        assert_eq!(recorded_folder(&file), Some(dir.path().to_path_buf()));
        std::fs::write(&file, "{\"type\":\"session\",\"cwd\":\"/no/such/folder\"}\n").expect("written");
        assert_eq!(recorded_folder(&file), None);
        assert_eq!(recorded_folder(&dir.path().join("none.jsonl")), None);
    }

    #[test]
    fn a_record_is_made_to_run_in_the_folder_given_and_keeps_its_entries() {
        let dir = tempfile::tempdir().expect("a folder");
        let file = dir.path().join("s.jsonl");
        run_in(&file, dir.path()).expect("nothing to do before pi writes it");
        assert!(!file.exists());
        std::fs::write(&file, RECORD).expect("written");
        run_in(&file, dir.path()).expect("moved");
        assert_eq!(recorded_folder(&file), Some(dir.path().to_path_buf()));
        let moved = std::fs::read_to_string(&file).expect("read");
        assert_eq!(moved.lines().skip(1).collect::<Vec<_>>(), RECORD.lines().skip(1).collect::<Vec<_>>());
        assert!(moved.lines().next().is_some_and(|h| h.contains("\"id\":\"old\"")), "{moved}");
    }

    #[test]
    fn a_cut_keeps_what_the_first_dropped_prompt_follows_under_a_new_header() {
        let copy = cut_record(RECORD, &["u2"], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&copy), ["new", "m0", "u1", "a1"]);
        assert!(copy.lines().next().is_some_and(|h| h.contains("\"parentSession\":\"/s/old.jsonl\"")));
        let whole = cut_record(RECORD, &[], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&whole), ["new", "m0", "u1", "a1", "u2", "a2"]);
        let none = cut_record(RECORD, &["u1", "u2"], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&none), ["new", "m0"]);
        assert!(copy.lines().next().is_some_and(|h| h.contains("\"cwd\":\"/w\"")), "where the source ran");
        assert!(cut_record("{\"type\":\"message\"}\n", &[], "new", "p").is_none());
    }
}

//! A conversation that begins as a cut of another (`Start.cut`: edit and resend, or a fork): a
//! new session file holding the source's entries through the one the first dropped prompt
//! follows, under a header of its own that names the source as its parent. pi continues that file
//! as it continues any, so the cut is on record the moment the file is written.

use std::path::Path;

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

/// Writes the cut of `source_file` to `file` (atomically: a crash leaves the old or the new).
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
    let dir = file.parent().ok_or_else(|| AgentError::Failed(format!("{} has no folder", file.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
    let mut temp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| AgentError::Failed(format!("{}: {e}", dir.display())))?;
    std::io::Write::write_all(&mut temp, copy.as_bytes())
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| AgentError::Failed(format!("{}: {e}", file.display())))?;
    temp.persist(file).map_err(|e| AgentError::Failed(format!("{}: {e}", file.display())))?;
    Ok(())
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
    fn a_cut_keeps_what_the_first_dropped_prompt_follows_under_a_new_header() {
        let copy = cut_record(RECORD, &["u2"], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&copy), ["new", "m0", "u1", "a1"]);
        assert!(copy.lines().next().is_some_and(|h| h.contains("\"parentSession\":\"/s/old.jsonl\"")));
        let whole = cut_record(RECORD, &[], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&whole), ["new", "m0", "u1", "a1", "u2", "a2"]);
        let none = cut_record(RECORD, &["u1", "u2"], "new", "/s/old.jsonl").expect("a copy");
        assert_eq!(ids(&none), ["new", "m0"]);
        assert!(cut_record("{\"type\":\"message\"}\n", &[], "new", "p").is_none());
    }
}

//! Snapshots of normalised folds: a long value a rule holds (a whole chat as a client folded it)
//! is compared with a file under `ahpd/tests/snapshots/`, after what differs from run to run
//! (times, generated ids, the temporary folder) is replaced by a placeholder. Run with
//! `AHPD_UPDATE_SNAPSHOTS=1` to write the files anew, then read the diff before committing it.
//!
//! Hand-written rather than `insta`: the files are plain pretty JSON a reviewer reads in a diff,
//! rewriting needs no extra tool (`cargo insta`), and the normalisation is the host's own
//! (its timestamps and ids), which a generic redaction would have to be taught anyway.

use std::path::PathBuf;

use serde_json::Value;

/// The variable that rewrites snapshots instead of comparing them.
pub const UPDATE: &str = "AHPD_UPDATE_SNAPSHOTS";

/// Compares `value`, normalised, with `ahpd/tests/snapshots/<name>.json` (or writes it under
/// [`UPDATE`], or when the file does not exist yet outside CI).
pub fn assert_snapshot(name: &str, value: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.json"));
    let ours = serde_json::to_string_pretty(&normalise(value)).expect("JSON") + "\n";
    let update = std::env::var_os(UPDATE).is_some();
    match std::fs::read_to_string(&path) {
        Ok(theirs) if !update => {
            assert!(
                theirs == ours,
                "{name} differs from {} (rerun with {UPDATE}=1 to accept it):\n--- stored\n{theirs}\n--- now\n{ours}",
                path.display()
            );
        }
        Err(_) if std::env::var_os("CI").is_some() && !update => {
            panic!("{} is missing: write it with {UPDATE}=1 and commit it", path.display());
        }
        _ => {
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("the snapshots folder");
            std::fs::write(&path, ours).expect("the snapshot is written");
        }
    }
}

/// Replaces what differs from run to run: RFC 3339 times, UUIDs, millisecond times in fields
/// named `…At`/`…Time`, how long a turn took (`duration`, wall time), and temporary folders; and sorts each object's keys, whose order says
/// nothing in JSON (the host keeps some maps, a config schema's properties, in hash order).
pub fn normalise(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().filter(|(_, v)| !v.is_null()).collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let timed = (k.ends_with("At") || k.ends_with("Time")) && (v.is_number() || v.is_string());
                        let took = k == "duration" && v.is_number();
                        let value = if timed {
                            Value::String("<time>".into())
                        } else if took {
                            Value::String("<ms>".into())
                        } else {
                            normalise(v)
                        };
                        (k.clone(), value)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(normalise).collect()),
        Value::String(s) => Value::String(normalise_text(s)),
        other => other.clone(),
    }
}

fn normalise_text(text: &str) -> String {
    if is_timestamp(text) {
        return "<time>".into();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(len) = uuid_at(rest) {
            out.push_str("<uuid>");
            rest = &rest[len..];
        } else if let Some(len) = temp_dir_at(rest) {
            out.push_str("<dir>");
            rest = &rest[len..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The length of a UUID at the start of `text`.
fn uuid_at(text: &str) -> Option<usize> {
    let candidate = text.get(..36)?;
    uuid::Uuid::parse_str(candidate).ok().map(|_| 36)
}

/// The length of a temporary folder's path at the start of `text` (`/tmp/.tmpXXXXXX`).
fn temp_dir_at(text: &str) -> Option<usize> {
    let tmp = std::env::temp_dir();
    let prefix = format!("{}/.tmp", tmp.display().to_string().trim_end_matches('/'));
    if !text.starts_with(&prefix) {
        return None;
    }
    let tail = &text[prefix.len()..];
    let name = tail.chars().take_while(|c| c.is_ascii_alphanumeric()).count();
    Some(prefix.len() + name)
}

/// True when `text` is an RFC 3339 timestamp.
fn is_timestamp(text: &str) -> bool {
    text.len() >= 20 && text.as_bytes().get(4) == Some(&b'-') && text.parse::<jiff::Timestamp>().is_ok()
}

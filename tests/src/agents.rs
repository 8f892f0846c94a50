//! Named agent entries for the daemons the tests start, where each test once spelled out
//! `{"kind": "echo", …}`: one constructor per entry a test asks for, each saying what it is for,
//! and [`config`] that puts entries under `agents` in the order given (the order the host lists
//! its agents in).

use std::path::Path;

use serde_json::{json, Map, Value};

/// Echo at its own default pace.
pub fn echo() -> Value {
    json!({ "kind": "echo" })
}

/// Echo pausing `ms` between words (0: unpaced, a reply at once).
pub fn echo_paced(ms: u64) -> Value {
    json!({ "kind": "echo", "options": { "paceMs": ms } })
}

/// Echo pausing `ms` between chunks of `words` words (each chunk one delta).
pub fn echo_chunked(ms: u64, words: u64) -> Value {
    json!({ "kind": "echo", "options": { "paceMs": ms, "chunkWords": words } })
}

/// Echo with `options` as given (a benchmark's pace and chunking).
pub fn echo_with(options: Value) -> Value {
    json!({ "kind": "echo", "options": options })
}

/// The entry served inside the daemon's own process over the in-memory worker pipe
/// (`inProcess: true`) rather than as a worker process.
pub fn in_process(mut entry: Value) -> Value {
    entry["inProcess"] = Value::Bool(true);
    entry
}

/// Notes, keeping its notes in the worker's data folder.
pub fn notes() -> Value {
    json!({ "kind": "notes" })
}

/// Notes that says its session's tools endpoint when asked (`endpoint`), for the tests that drive
/// the endpoint with a real MCP client.
pub fn notes_revealing_endpoint() -> Value {
    json!({ "kind": "notes", "options": { "revealEndpoint": true } })
}

/// Notes keeping its notes in `dir`.
pub fn notes_in(dir: impl AsRef<Path>) -> Value {
    json!({ "kind": "notes", "options": { "dir": dir.as_ref() } })
}

/// `{"agents": {provider: entry, …}}`, in the order given.
pub fn config<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let agents: Map<String, Value> =
        entries.into_iter().map(|(provider, entry)| (provider.to_owned(), entry)).collect();
    json!({ "agents": agents })
}

/// Echo alone, at its own default pace.
pub fn echo_only() -> Value {
    config([("echo", echo())])
}

/// The tools tests' pair: notes revealing its endpoint, then echo unpaced.
pub fn notes_and_echo() -> Value {
    config([("notes", notes_revealing_endpoint()), ("echo", echo_paced(0))])
}

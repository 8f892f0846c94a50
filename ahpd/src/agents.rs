//! Which backends a daemon runs: the config's `agents` map turned into worker specs, or, with no
//! `agents` key, echo plus each known agent CLI found on the PATH.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ahp_types::common::JsonObject;
use serde_json::Value;

use crate::supervisor::{Launch, WorkerSpec};

/// Backend kinds this build can run as workers.
pub const BUILT_IN_KINDS: &[&str] = &["echo", "notes", "acp", "claude", "pi"];

/// Kinds that run in the daemon's own process when an entry asks (`inProcess`).
pub const IN_PROCESS_KINDS: &[&str] = &["echo", "notes"];

/// CLIs that, when found on the PATH, become agents without any configuration: (program,
/// provider, kind). Only kinds this build can run are listed.
const DETECTED: &[(&str, &str, &str)] = &[("claude", "claude", "claude"), ("pi", "pi", "pi")];

/// One agent the daemon will run, and what to say about it.
pub struct Planned {
    /// Its worker.
    pub spec: WorkerSpec,
    /// Why it is there ("configured", "found on the PATH at …", "built in").
    pub why: String,
}

/// The workers for a config. `exe` is this binary (built-in workers re-execute it).
pub fn plan(agents: &Value, exe: &Path, data_dir: &Path, handshake: Duration) -> Vec<Planned> {
    match agents.as_object() {
        Some(map) => {
            map.iter().map(|(provider, entry)| configured(provider, entry, exe, data_dir, handshake)).collect()
        }
        None => defaults(exe, data_dir, handshake),
    }
}

fn defaults(exe: &Path, data_dir: &Path, handshake: Duration) -> Vec<Planned> {
    let mut planned = vec![Planned {
        spec: builtin("echo", "echo", exe, data_dir, handshake, JsonObject::new()),
        why: "built in".into(),
    }];
    for (program, provider, kind) in DETECTED {
        if let Some(path) = find_on_path(program) {
            let mut options = JsonObject::new();
            options.insert("command".into(), Value::from(path.display().to_string()));
            planned.push(Planned {
                spec: builtin(provider, kind, exe, data_dir, handshake, options),
                why: format!("found {} on the PATH", path.display()),
            });
        }
    }
    planned
}

fn builtin(
    provider: &str,
    kind: &str,
    exe: &Path,
    data_dir: &Path,
    handshake: Duration,
    options: JsonObject,
) -> WorkerSpec {
    WorkerSpec {
        provider: provider.to_owned(),
        kind: kind.to_owned(),
        launch: Launch::Exec {
            program: exe.to_owned(),
            args: vec!["worker".into(), kind.to_owned()],
            env: BTreeMap::new(),
        },
        options,
        data_dir: data_dir.join("workers").join(provider),
        handshake_timeout: handshake,
    }
}

fn configured(provider: &str, entry: &Value, exe: &Path, data_dir: &Path, handshake: Duration) -> Planned {
    let kind = entry.get("kind").and_then(Value::as_str).unwrap_or("echo").to_owned();
    let mut options = entry.get("options").and_then(Value::as_object).cloned().unwrap_or_default();
    let env: BTreeMap<String, String> = entry
        .get("env")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned()))).collect())
        .unwrap_or_default();
    if let Some(name) = entry.get("displayName") {
        options.insert("displayName".into(), name.clone());
    }
    let args: Vec<String> = entry
        .get("args")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let command = entry.get("command").and_then(Value::as_str).map(str::to_owned);
    let in_process =
        entry.get("inProcess").and_then(Value::as_bool).unwrap_or(false) && IN_PROCESS_KINDS.contains(&kind.as_str());
    // An ACP entry may name its preset beside its kind: `{ "kind": "acp", "preset": "gemini" }`.
    if let Some(preset) = entry.get("preset") {
        options.entry("preset").or_insert(preset.clone());
    }
    let launch = if kind == "command" {
        Launch::Exec { program: PathBuf::from(command.unwrap_or_default()), args, env }
    } else if in_process {
        Launch::InProcess { kind: kind.clone() }
    } else {
        // A backend kind: the worker is this binary; `command`/`args` name the agent CLI it runs.
        if let Some(command) = command {
            options.entry("command").or_insert(Value::from(command));
        }
        if !args.is_empty() {
            options.entry("args").or_insert(Value::from(args));
        }
        Launch::Exec { program: exe.to_owned(), args: vec!["worker".into(), kind.clone()], env }
    };
    let spec = WorkerSpec {
        provider: provider.to_owned(),
        kind,
        launch,
        options,
        data_dir: data_dir.join("workers").join(provider),
        handshake_timeout: handshake,
    };
    Planned { spec, why: "configured".into() }
}

/// The first executable called `program` on the PATH.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

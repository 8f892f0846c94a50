//! Which backends a daemon runs: the config's `agents` map turned into worker specs, or, with no
//! `agents` key, echo plus every agent the backend table knows whose program is on the PATH. Also
//! why each known agent was not offered, for `ahpd agents`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ahp_types::common::JsonObject;
use serde_json::Value;

use crate::backends::{self, KnownAgent, BACKENDS, COMMAND_KIND};
use crate::supervisor::{Launch, WorkerSpec};

/// One agent the daemon will run, and what to say about it.
pub struct Planned {
    /// Its worker.
    pub spec: WorkerSpec,
    /// Why it is there ("configured", "found … on the PATH", "built in").
    pub why: String,
    /// The program it runs (the agent CLI, or a worker program), when it runs one.
    pub program: Option<String>,
}

/// A known agent that is not offered, and why.
pub struct Passed {
    /// The name it would be offered under.
    pub name: String,
    /// Its backend kind.
    pub kind: &'static str,
    /// The program it needs.
    pub program: &'static str,
    /// Why not, as a sentence.
    pub why: String,
}

/// What a config offers, and the known agents it does not.
pub struct Survey {
    /// The agents, in the config's order (or echo, then the table's order).
    pub offered: Vec<Planned>,
    /// The known agents left out.
    pub passed: Vec<Passed>,
}

/// The workers for a config. `exe` is this binary (built-in workers re-execute it).
pub fn plan(agents: &Value, exe: &Path, data_dir: &Path, handshake: Duration) -> Vec<Planned> {
    survey(agents, exe, data_dir, handshake).offered
}

/// The workers for a config, and the known agents it leaves out.
pub fn survey(agents: &Value, exe: &Path, data_dir: &Path, handshake: Duration) -> Survey {
    let builder = Builder { exe, data_dir, handshake };
    match agents.as_object() {
        Some(map) => {
            let offered: Vec<Planned> =
                map.iter().map(|(provider, entry)| builder.configured(provider, entry)).collect();
            let passed = known_agents()
                .filter(|(kind, known)| !offered.iter().any(|p| runs(p, kind, known)))
                .map(|(kind, known)| {
                    let why = match find_on_path(known.program) {
                        Some(path) => format!(
                            "{} is on the PATH, but the config's agents names the agents to offer; add \"{}\": {}",
                            path.display(),
                            known.name,
                            entry_for(kind, &known)
                        ),
                        None => {
                            format!("{} is not on the PATH (and the config's agents does not name it)", known.program)
                        }
                    };
                    Passed { name: known.name.to_owned(), kind, program: known.program, why }
                })
                .collect();
            Survey { offered, passed }
        }
        None => builder.defaults(),
    }
}

/// Every agent the backend table knows, with its kind, in the table's order.
fn known_agents() -> impl Iterator<Item = (&'static str, KnownAgent)> {
    BACKENDS.iter().flat_map(|b| (b.known)().into_iter().map(move |k| (b.kind, k)))
}

/// Whether a planned agent runs `known`: the same kind, and the same preset when it names one.
fn runs(planned: &Planned, kind: &str, known: &KnownAgent) -> bool {
    planned.spec.kind == kind
        && known.options.get("preset").is_none_or(|preset| planned.spec.options.get("preset") == Some(preset))
}

/// The smallest `agents` entry that offers `known`.
fn entry_for(kind: &str, known: &KnownAgent) -> Value {
    let mut entry = known.options.clone();
    entry.insert("kind".into(), Value::from(kind));
    Value::Object(entry)
}

struct Builder<'a> {
    exe: &'a Path,
    data_dir: &'a Path,
    handshake: Duration,
}

impl Builder<'_> {
    fn defaults(&self) -> Survey {
        let mut offered = vec![Planned {
            spec: self.builtin("echo", "echo", JsonObject::new()),
            why: "built in".into(),
            program: None,
        }];
        let mut passed = Vec::new();
        let node = std::cell::OnceCell::new();
        for (kind, known) in known_agents() {
            let path = match runnable(&known, &node) {
                Ok(path) => path,
                Err(why) => {
                    passed.push(Passed { name: known.name.to_owned(), kind, program: known.program, why });
                    continue;
                }
            };
            let mut options = known.options.clone();
            if known.takes_command {
                options.insert("command".into(), Value::from(path.display().to_string()));
            }
            // The first agent found keeps a name; a second of another kind says its kind after it.
            let taken = |name: &str| offered.iter().any(|p| p.spec.provider == name);
            let provider = if taken(known.name) { format!("{}-{kind}", known.name) } else { known.name.to_owned() };
            offered.push(Planned {
                spec: self.builtin(&provider, kind, options),
                why: format!("found {} on the PATH", path.display()),
                program: Some(path.display().to_string()),
            });
        }
        Survey { offered, passed }
    }

    fn builtin(&self, provider: &str, kind: &str, options: JsonObject) -> WorkerSpec {
        WorkerSpec {
            provider: provider.to_owned(),
            kind: kind.to_owned(),
            launch: Launch::Exec {
                program: self.exe.to_owned(),
                args: vec!["worker".into(), kind.to_owned()],
                env: BTreeMap::new(),
            },
            options,
            data_dir: self.data_dir.join("workers").join(provider),
            handshake_timeout: self.handshake,
            policy: protocol::Policy::default(),
        }
    }

    fn configured(&self, provider: &str, entry: &Value) -> Planned {
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
        let in_process = entry.get("inProcess").and_then(Value::as_bool).unwrap_or(false)
            && backends::backend(&kind).is_some_and(|b| b.in_process);
        // An entry may name its preset beside its kind: `{ "kind": "acp", "preset": "gemini" }`.
        if let Some(preset) = entry.get("preset") {
            options.entry("preset").or_insert(preset.clone());
        }
        let launch = if kind == COMMAND_KIND {
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
            Launch::Exec { program: self.exe.to_owned(), args: vec!["worker".into(), kind.clone()], env }
        };
        let spec = WorkerSpec {
            provider: provider.to_owned(),
            kind,
            launch,
            options,
            data_dir: self.data_dir.join("workers").join(provider),
            handshake_timeout: self.handshake,
            policy: protocol::Policy::default(),
        };
        let program = program_of(&spec);
        Planned { spec, why: "configured".into(), program }
    }
}

/// The program a configured agent runs: its command, else the program its preset or its kind
/// runs by default; `None` for an agent served by this binary alone (echo, notes).
fn program_of(spec: &WorkerSpec) -> Option<String> {
    if let Launch::Exec { program, .. } = &spec.launch {
        if spec.kind == COMMAND_KIND {
            return Some(program.display().to_string());
        }
    }
    if let Some(command) = spec.options.get("command").and_then(Value::as_str) {
        return Some(command.to_owned());
    }
    let known = backends::backend(&spec.kind).map(|b| (b.known)()).unwrap_or_default();
    let preset = spec.options.get("preset");
    known.iter().find(|k| preset.is_none_or(|p| k.options.get("preset") == Some(p))).map(|k| k.program.to_owned())
}

/// Where `known`'s program is, when it and every program it runs are on the PATH and each runs
/// on the Node.js there (asked of `node` once, when a program's package names the Node it needs);
/// else why not, as a sentence.
fn runnable(known: &KnownAgent, node: &std::cell::OnceCell<Option<semver::Version>>) -> Result<PathBuf, String> {
    let programs = crate::programs::programs_of(known.program, known.also_runs)?;
    for (name, path) in &programs {
        let Some(needed) = crate::programs::node_needed(path) else { continue };
        let node = node.get_or_init(crate::programs::node_on_path).as_ref();
        if let Some(why) = crate::programs::node_falls_short(name, &needed, node) {
            return Err(why);
        }
    }
    programs.into_iter().next().map(|(_, path)| path).ok_or_else(|| format!("{} is not on the PATH", known.program))
}

/// The first executable called `program` on the PATH (or `program` itself when it is a path).
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| executable(candidate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configured(agents: Value) -> Survey {
        survey(&agents, Path::new("/bin/ahpd"), Path::new("/data"), Duration::from_secs(1))
    }

    #[test]
    fn a_configured_agent_says_the_program_it_runs() {
        let survey = configured(json!({
            "echo": { "kind": "echo" },
            "gem": { "kind": "acp", "preset": "gemini" },
            "own": { "kind": "acp", "options": { "command": "/opt/x-acp" } },
            "cc": { "kind": "claude" },
            "mine": { "kind": "command", "command": "/usr/bin/my-worker" },
        }));
        let program =
            |name: &str| survey.offered.iter().find(|p| p.spec.provider == name).and_then(|p| p.program.clone());
        assert_eq!(program("echo"), None);
        assert_eq!(program("gem").as_deref(), Some("gemini"));
        assert_eq!(program("own").as_deref(), Some("/opt/x-acp"));
        assert_eq!(program("cc").as_deref(), Some("claude"));
        assert_eq!(program("mine").as_deref(), Some("/usr/bin/my-worker"));
        // The presets it names are offered; the ones it does not are passed over, saying why.
        assert!(!survey.passed.iter().any(|p| p.name == "gemini" || (p.name == "claude" && p.kind == "claude")));
        let goose = survey.passed.iter().find(|p| p.name == "goose").expect("goose is passed over");
        assert_eq!(goose.kind, "acp");
        assert!(goose.why.contains("goose"), "{}", goose.why);
    }
}

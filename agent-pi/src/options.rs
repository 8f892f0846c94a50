//! The pi worker's options (the config entry's `options`), the folders it keeps under its data
//! folder, and pi's agent folder (where the session files are).
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `command` | the pi program | `$AHPD_PI_BIN`, else `pi` on `PATH` |
//! | `args` | more arguments for every pi (`["--thinking", "low"]`) | none |
//! | `env` | variables over the worker's own (provider keys) | none |
//! | `agentDir` | pi's `PI_CODING_AGENT_DIR` (models.json, settings.json, auth.json) | the person's own: `PI_CODING_AGENT_DIR` from `env` or the worker's environment, else pi's default (`~/.pi/agent`) |
//! | `model` | `provider/model` a conversation starts with when its start names none | pi's own default |
//! | `readyTimeoutMs` | how long pi may take to answer its first `get_state` | 60000 |

use std::path::{Path, PathBuf};
use std::time::Duration;

use ahp_types::common::JsonObject;
use protocol::InitializeParams;
use serde_json::Value;

/// The embedded bridge extension, written to the data folder at startup.
pub const BRIDGE_SOURCE: &str = include_str!("bridge.ts");

/// The options a pi worker runs with.
#[derive(Debug, Clone)]
pub struct PiOptions {
    /// The pi program.
    pub command: String,
    /// More arguments for every pi.
    pub args: Vec<String>,
    /// Variables over the worker's own.
    pub env: Vec<(String, String)>,
    /// pi's agent folder, when the `agentDir` option names one; otherwise pi finds the person's
    /// own (`PI_CODING_AGENT_DIR` as its environment says, else `~/.pi/agent`).
    pub agent_dir: Option<PathBuf>,
    /// The model a conversation starts with when its start names none.
    pub model: Option<String>,
    /// How long pi may take to start.
    pub ready_timeout: Duration,
    /// The worker's own folder.
    pub data_dir: PathBuf,
}

impl PiOptions {
    /// Reads the options of the handshake.
    pub fn from_init(init: &InitializeParams) -> Self {
        let options = &init.options;
        let data_dir = init
            .data_dir
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join(format!("ahpd-pi-{}", init.provider)));
        let command = string(options, "command")
            .or_else(|| std::env::var("AHPD_PI_BIN").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "pi".to_owned());
        let args = options
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        let env = options
            .get("env")
            .and_then(Value::as_object)
            .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let agent_dir = string(options, "agentDir").map(PathBuf::from);
        let ready_timeout =
            Duration::from_millis(options.get("readyTimeoutMs").and_then(Value::as_u64).unwrap_or(60_000));
        Self { command, args, env, agent_dir, model: string(options, "model"), ready_timeout, data_dir }
    }

    /// Where the bridge extension is written.
    pub fn bridge_path(&self) -> PathBuf {
        self.data_dir.join("bridge").join("ahpd-bridge.ts")
    }

    /// The bridge a confined session's pi loads: in pi's own agent folder, which its box lets it
    /// read and write (its session files are there), where the worker's data folder is hidden
    /// from it. Written afresh for each session, so what a box left there is not run.
    pub fn boxed_bridge(&self) -> Result<PathBuf, agent_runner::AgentError> {
        let bridge = self.pi_agent_dir().join("ahpd").join("ahpd-bridge.ts");
        crate::cut::write_atomically(&bridge, BRIDGE_SOURCE)?;
        Ok(bridge)
    }

    /// pi's agent folder as pi finds it: the `agentDir` option, else `PI_CODING_AGENT_DIR` as the
    /// `env` option or the worker's environment says (`~` is the home folder, as pi reads it),
    /// else `~/.pi/agent`.
    pub fn pi_agent_dir(&self) -> PathBuf {
        if let Some(dir) = &self.agent_dir {
            return dir.clone();
        }
        let home = || std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        let named = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == AGENT_DIR_VAR)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(AGENT_DIR_VAR).ok())
            .filter(|v| !v.is_empty());
        match named {
            Some(dir) if dir == "~" => home(),
            Some(dir) => dir.strip_prefix("~/").map_or_else(|| PathBuf::from(&dir), |rest| home().join(rest)),
            None => home().join(".pi").join("agent"),
        }
    }

    /// Where the conversations' session files are: pi's own folders (and older ahpd's).
    pub fn catalogue(&self) -> crate::catalogue::Catalogue {
        crate::catalogue::Catalogue::new(&self.pi_agent_dir(), &self.data_dir)
    }

    /// The folder a conversation without a working directory runs in.
    pub fn scratch_dir(&self, conversation_id: &str) -> PathBuf {
        self.data_dir.join("scratch").join(file_stem(conversation_id))
    }

    /// Writes the bridge extension and makes the folders pi needs.
    pub fn prepare(&self) -> std::io::Result<()> {
        let bridge = self.bridge_path();
        if let Some(parent) = bridge.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&bridge, BRIDGE_SOURCE)?;
        if let Some(dir) = &self.agent_dir {
            std::fs::create_dir_all(dir)?;
        }
        Ok(())
    }

    /// The variables every pi gets over the worker's own environment. What the person set reaches
    /// pi unchanged (the entry's `env`, which is the worker's environment, and the `env` option):
    /// `PI_CODING_AGENT_DIR` is set only by the `agentDir` option, and the quiet defaults (no calls
    /// home) only where nothing set them.
    pub fn pi_env(&self) -> Vec<(String, String)> {
        self.pi_env_over(|name| std::env::var_os(name).is_some())
    }

    fn pi_env_over(&self, worker_has: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let set = |name: &str| worker_has(name) || self.env.iter().any(|(k, _)| k == name);
        let mut env: Vec<(String, String)> = agent_runner::child::PI_QUIET
            .iter()
            .filter(|(name, _)| !set(name))
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        env.extend(self.env.iter().cloned());
        if let Some(dir) = &self.agent_dir {
            env.push((AGENT_DIR_VAR.to_owned(), path_string(dir)));
        }
        env
    }
}

/// The variable pi reads its agent folder from.
pub const AGENT_DIR_VAR: &str = "PI_CODING_AGENT_DIR";

impl PiOptions {}

fn string(options: &JsonObject, key: &str) -> Option<String> {
    options.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// A path as pi's command line takes it.
pub fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A conversation id as a file name: safe characters kept, every other byte as `_XX`.
pub fn file_stem(id: &str) -> String {
    let mut stem = String::with_capacity(id.len());
    for (i, byte) in id.bytes().enumerate() {
        let safe = byte.is_ascii_alphanumeric() || byte == b'-' || (byte == b'.' && i > 0);
        if safe {
            stem.push(char::from(byte));
        } else {
            stem.push_str(&format!("_{byte:02x}"));
        }
    }
    if stem.is_empty() {
        stem.push_str("_empty");
    }
    stem
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: serde_json::Value) -> PiOptions {
        let init = InitializeParams {
            protocol_version: protocol::WORKER_PROTOCOL_VERSION,
            provider: "pi".into(),
            kind: "pi".into(),
            options: json.as_object().cloned().unwrap_or_default(),
            data_dir: Some("/data".into()),
            host: protocol::PeerInfo { name: "test".into(), version: "0".into() },
        };
        PiOptions::from_init(&init)
    }

    fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_persons_own_agent_folder_is_left_to_pi_unless_agent_dir_says_otherwise() {
        let own = options(serde_json::json!({}));
        assert_eq!(own.agent_dir, None);
        let env = own.pi_env_over(|_| false);
        assert_eq!(var(&env, AGENT_DIR_VAR), None, "pi finds PI_CODING_AGENT_DIR or ~/.pi/agent itself");
        assert_eq!(var(&env, "PI_OFFLINE"), Some("1"));
        // What the person set in the entry's env (the worker's environment) is not overridden.
        let env = own.pi_env_over(|name| name == "PI_OFFLINE");
        assert_eq!(var(&env, "PI_OFFLINE"), None);

        let option = options(serde_json::json!({"agentDir": "/pi", "env": {"PI_CODING_AGENT_DIR": "/other"}}));
        let env = option.pi_env_over(|_| true);
        assert_eq!(var(&env, AGENT_DIR_VAR), Some("/pi"), "agentDir wins");
    }

    #[test]
    fn pis_own_folder_is_found_as_pi_finds_it() {
        assert_eq!(options(serde_json::json!({"agentDir": "/pi"})).pi_agent_dir(), PathBuf::from("/pi"));
        let named = options(serde_json::json!({"env": {"PI_CODING_AGENT_DIR": "/named"}}));
        assert_eq!(named.pi_agent_dir(), PathBuf::from("/named"), "the entry's env over the worker's");
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let tilde = options(serde_json::json!({"env": {"PI_CODING_AGENT_DIR": "~/pi"}}));
        assert_eq!(tilde.pi_agent_dir(), home.join("pi"), "`~` is the home folder, as pi reads it");
    }

    #[test]
    fn conversation_ids_become_safe_distinct_file_names() {
        assert_eq!(file_stem("abc-123"), "abc-123");
        assert_eq!(file_stem("../x"), "_2e._2fx");
        assert_ne!(file_stem("a/b"), file_stem("a_b"));
        assert_eq!(file_stem(""), "_empty");
    }
}

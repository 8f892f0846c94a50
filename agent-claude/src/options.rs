//! The config entry's `options` for a `claude` agent: which command to run, with which extra
//! arguments and environment, and where Claude keeps its own files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ahp_types::common::JsonObject;
use serde_json::Value;

/// `options` of a `claude` entry, as written in the config:
///
/// ```json
/// {"command": "/opt/cc/node_modules/.bin/claude", "args": ["--setting-sources=user"],
///  "env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8787"}}
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeOptions {
    /// The CLI to run: a path, or a name looked up on the PATH. Default `claude`.
    pub command: String,
    /// Extra arguments, after the ones the worker always passes.
    pub args: Vec<String>,
    /// Variables set for the CLI over the worker's own environment.
    pub env: BTreeMap<String, String>,
    /// What a person reads for this agent. Default `Claude Code`.
    pub display_name: String,
}

impl Default for ClaudeOptions {
    fn default() -> Self {
        Self { command: "claude".into(), args: Vec::new(), env: BTreeMap::new(), display_name: "Claude Code".into() }
    }
}

impl ClaudeOptions {
    /// Reads the options leniently: a key of the wrong type is logged and left at its default.
    pub fn from_json(options: &JsonObject) -> Self {
        let mut out = Self::default();
        match options.get("command") {
            Some(Value::String(command)) if !command.is_empty() => out.command = command.clone(),
            Some(other) => tracing::warn!(value = %other, "options.command is not a string; using `claude`"),
            None => {}
        }
        match options.get("args") {
            Some(Value::Array(args)) => out.args = args.iter().filter_map(|a| a.as_str().map(str::to_owned)).collect(),
            Some(other) => tracing::warn!(value = %other, "options.args is not a list of strings; ignored"),
            None => {}
        }
        match options.get("env") {
            Some(Value::Object(env)) => {
                out.env = env.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned()))).collect();
            }
            Some(other) => tracing::warn!(value = %other, "options.env is not an object of strings; ignored"),
            None => {}
        }
        if let Some(Value::String(name)) = options.get("displayName") {
            out.display_name = name.clone();
        }
        out
    }

    /// A variable as the CLI will see it: the option's value over the worker's own.
    pub fn env_var(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned().or_else(|| std::env::var(name).ok()).filter(|v| !v.is_empty())
    }

    /// Where the CLI keeps its files: `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`.
    pub fn config_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = self.env_var("CLAUDE_CONFIG_DIR") {
            return Some(PathBuf::from(dir));
        }
        self.env_var("HOME").map(|home| PathBuf::from(home).join(".claude"))
    }

    /// The folder of Claude's session transcripts, one subfolder per working directory.
    pub fn projects_dir(&self) -> Option<PathBuf> {
        self.config_dir().map(|d| d.join("projects"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_command_args_and_env() {
        let options = json!({"command": "/x/claude", "args": ["--a", 3, "--b"], "env": {"HOME": "/h", "N": 1}});
        let parsed = ClaudeOptions::from_json(options.as_object().expect("object"));
        assert_eq!(parsed.command, "/x/claude");
        assert_eq!(parsed.args, vec!["--a", "--b"]);
        assert_eq!(parsed.env.get("HOME").map(String::as_str), Some("/h"));
        assert!(!parsed.env.contains_key("N"));
        assert_eq!(parsed.projects_dir(), Some(PathBuf::from("/h/.claude/projects")));
    }

    #[test]
    fn claude_config_dir_wins_over_home() {
        let options = json!({"env": {"HOME": "/h", "CLAUDE_CONFIG_DIR": "/c"}});
        let parsed = ClaudeOptions::from_json(options.as_object().expect("object"));
        assert_eq!(parsed.config_dir(), Some(PathBuf::from("/c")));
    }
}

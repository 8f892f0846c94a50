//! The options of an `acp` agents entry, and the presets that spell the command lines of the ACP
//! agents people use, so `{ "kind": "acp", "preset": "gemini" }` is a whole entry.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ahp_types::common::JsonObject;
use serde::Deserialize;

/// One known ACP agent: its command line, its name, and the variables that keep it quiet.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// The name a config entry gives.
    pub name: &'static str,
    /// The program.
    pub command: &'static str,
    /// Its arguments.
    pub args: &'static [&'static str],
    /// Variables set for it (under the entry's own `env`).
    pub env: &'static [(&'static str, &'static str)],
    /// What a person reads.
    pub display_name: &'static str,
    /// The mode (`permissionMode`) a new session is put in when the person chose none, for an
    /// agent whose own starting mode lets a model decide in the person's place and that has no
    /// flag or variable to start it elsewhere.
    pub starting_mode: Option<&'static str>,
    /// Other programs the agent runs, found on the same PATH (pi-acp runs pi).
    pub also_runs: &'static [&'static str],
    /// The agent ends its prompt when the person says no to a call, without telling its model
    /// (ending it `end_turn`): ahpd tells it, and the turn goes on.
    pub stops_after_a_no: bool,
}

/// The ACP agents known by name. None of them may run a command ahpd's person was not asked
/// about unless the person chose such a mode for the session: where an agent's own default lets
/// something else decide (a model's verdict, an allowlist, "allow everything"), its preset starts
/// it where it asks (docs/agents.md says what each one does).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "gemini",
        command: "gemini",
        args: &["--acp"],
        // A folder Gemini CLI does not trust gets no MCP servers (so no host tools) and no mode
        // but `default` and `plan`; ahpd runs it in the folders a person opened sessions in, the
        // headless use its own message says to trust by this variable. Without NO_RELAUNCH it
        // starts a second node process of its own, which ignores SIGTERM and SIGINT and takes a
        // second longer to answer `initialize`.
        env: &[("GEMINI_CLI_TRUST_WORKSPACE", "true"), ("GEMINI_CLI_NO_RELAUNCH", "true")],
        display_name: "Gemini CLI",
        starting_mode: None,
        also_runs: &[],
        stops_after_a_no: false,
    },
    // Codex sends usage events to OpenAI besides the model API unless told not to (`-c` overrides
    // its config.toml), and its `approvals_reviewer` may hand the questions it would ask to a
    // model of its own (`auto_review`): they stay the person's.
    Preset {
        name: "codex",
        command: "codex-acp",
        args: &["-c", "analytics.enabled=false", "-c", "approvals_reviewer=user"],
        env: &[],
        display_name: "Codex",
        starting_mode: None,
        also_runs: &[],
        stops_after_a_no: false,
    },
    // goose runs every tool without asking unless told otherwise (its `auto` mode), and its
    // `smart_approve` lets a model judge the risk; `approve` asks before each tool.
    Preset {
        name: "goose",
        command: "goose",
        args: &["acp"],
        env: &[("GOOSE_DISABLE_KEYRING", "1"), ("GOOSE_MODE", "approve")],
        display_name: "goose",
        starting_mode: None,
        also_runs: &[],
        stops_after_a_no: false,
    },
    Preset {
        name: "opencode",
        command: "opencode",
        args: &["acp"],
        // No self-update, no hourly models.dev refresh (the list it ships with stays), no
        // language-server downloads, and no npm install of its plugin packages in a fresh home (it
        // fetches `@opencode-ai/plugin` and its dependencies from the registry at its first start
        // otherwise), in a worker ahpd starts per session. opencode allows every
        // command by default: its shell tool asks (laid over the person's own `permission`).
        env: &[
            ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
            ("OPENCODE_PERMISSION", ASK_BEFORE_A_COMMAND),
            NPM_OFFLINE,
        ],
        display_name: "opencode",
        starting_mode: None,
        also_runs: &[],
        // Its "no" stops the prompt unless its config says `experimental.continue_loop_on_deny`.
        stops_after_a_no: true,
    },
    Preset {
        name: "qwen",
        command: "qwen",
        // Qwen Code starts in its `auto` mode, where a model (its safety classifier) allows a
        // command before any person is asked: it starts in `default`, where it asks, whatever its
        // settings say; the person may pick `auto` for a session.
        args: &["--acp", "--approval-mode", "default"],
        // Qwen Code otherwise relaunches itself in a third node process (its launcher is a second)
        // and takes a second longer to answer `initialize`; and it sends usage statistics to an
        // Alibaba Cloud endpoint unless told not to.
        env: &[("QWEN_CODE_NO_RELAUNCH", "true"), ("QWEN_USAGE_STATISTICS_ENABLED", "false")],
        display_name: "Qwen Code",
        starting_mode: None,
        also_runs: &[],
        // Its only "no" stops the prompt there (`stopAfterPermissionCancel`).
        stops_after_a_no: true,
    },
    // claude-agent-acp starts a session in `auto` ("Claude handles permission decisions", a model
    // classifier) unless the person's settings name a `defaultMode`, and takes no flag for it.
    Preset {
        name: "claude",
        command: "claude-agent-acp",
        args: &[],
        env: &[],
        display_name: "Claude (ACP)",
        starting_mode: Some("default"),
        also_runs: &[],
        stops_after_a_no: false,
    },
    // pi-acp hands its own environment to the pi it runs: the variables that keep pi from calling
    // home, as the `pi` backend sets them (agent-pi/src/options.rs). pi-acp itself runs `npm view`
    // for an update notice at every new session: npm is kept offline.
    Preset {
        name: "pi",
        command: "pi-acp",
        args: &[],
        env: &PI_ACP_QUIET,
        display_name: "pi",
        starting_mode: None,
        also_runs: &["pi"],
        stops_after_a_no: false,
    },
    Preset {
        name: "copilot",
        command: "copilot",
        args: &["--acp"],
        env: &[("COPILOT_AUTO_UPDATE", "false")],
        display_name: "GitHub Copilot",
        starting_mode: None,
        also_runs: &[],
        // Its "no" ends the prompt ("Info: Operation cancelled by user"), waiting for the person.
        stops_after_a_no: true,
    },
    Preset {
        name: "cursor",
        command: "cursor-agent",
        args: &["acp"],
        env: &[],
        display_name: "Cursor",
        starting_mode: None,
        also_runs: &[],
        stops_after_a_no: false,
    },
    Preset {
        name: "kilo",
        command: "kilo",
        args: &["acp"],
        // opencode's quieting under Kilo's names, and its PostHog telemetry off. Kilo runs the
        // commands of its allowlist (`touch`, `cp`, `mv`, `git status`, ...) without asking: its
        // shell tool asks for every command.
        env: &[
            ("KILO_DISABLE_AUTOUPDATE", "1"),
            ("KILO_DISABLE_MODELS_FETCH", "1"),
            ("KILO_DISABLE_LSP_DOWNLOAD", "1"),
            ("KILO_TELEMETRY_LEVEL", "off"),
            ("KILO_PERMISSION", ASK_BEFORE_A_COMMAND),
        ],
        display_name: "Kilo",
        starting_mode: None,
        also_runs: &[],
        // As opencode's, its "no" stops the prompt.
        stops_after_a_no: true,
    },
    Preset {
        name: "amp",
        command: "amp-acp",
        args: &[],
        env: &[],
        display_name: "Amp",
        starting_mode: None,
        also_runs: &[],
        stops_after_a_no: false,
    },
];

/// npm answers from its cache only and never asks the registry: for the npm an agent runs on its
/// own (opencode's plugin install, pi-acp's `npm view`). An entry's `env` may set it to `false`.
const NPM_OFFLINE: (&str, &str) = ("NPM_CONFIG_OFFLINE", "true");

/// pi's quieting variables, and npm's for pi-acp's own `npm view`.
const PI_ACP_QUIET: [(&str, &str); 4] = {
    let pi = agent_runner::child::PI_QUIET;
    [pi[0], pi[1], pi[2], NPM_OFFLINE]
};

/// opencode's (and Kilo's) permission rule that asks before every shell command, merged over the
/// person's own `permission` config by `OPENCODE_PERMISSION` / `KILO_PERMISSION`.
const ASK_BEFORE_A_COMMAND: &str = r#"{"bash":"ask"}"#;

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The sign-in method to use after `initialize`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authenticate {
    /// One of the `authMethods` the agent offers.
    pub method_id: String,
}

/// The options as a config entry writes them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Written {
    preset: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    display_name: Option<String>,
    description: Option<String>,
    authenticate: Option<Authenticate>,
    host_tools: Option<bool>,
    start_timeout_ms: Option<u64>,
    starting_mode: Option<String>,
}

/// What one `acp` worker runs, resolved from its options and preset.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpOptions {
    /// The program (a name on the PATH, or a path).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables over the worker's own.
    pub env: BTreeMap<String, String>,
    /// Where the agent process starts; the session's folder when absent.
    pub cwd: Option<PathBuf>,
    /// What a person reads.
    pub display_name: String,
    /// One line about it.
    pub description: Option<String>,
    /// The sign-in method, when one is configured.
    pub authenticate: Option<Authenticate>,
    /// Hand the agent the session's `/ahp-mcp` endpoint (default true).
    pub host_tools: bool,
    /// How long each step of opening a conversation (initialize, authenticate, session/new or
    /// session/load) may take before the agent is given up on.
    pub start_timeout: Duration,
    /// The mode a new session is put in when the person chose none (the preset's, or the entry's
    /// `startingMode`; an empty one leaves the agent where it starts).
    pub starting_mode: Option<String>,
    /// The agent ends its prompt on a person's "no" without telling its model (its preset says).
    pub stops_after_a_no: bool,
}

/// The default for [`AcpOptions::start_timeout`]: an adapter that starts a CLI of its own
/// (claude-agent-acp) takes seconds on a small machine.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an entry's options do not say which ACP agent to run, in words a person can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    /// The options do not have the shape an `acp` entry takes.
    #[error("acp options: {0}")]
    Unreadable(String),
    /// The preset named is not one this build knows.
    #[error("acp options: there is no preset \"{name}\"; the presets are {known}")]
    NoSuchPreset {
        /// The name given.
        name: String,
        /// The presets there are, joined.
        known: String,
    },
    /// `command` is there and empty.
    #[error("acp options: command is empty")]
    EmptyCommand,
    /// Neither a command nor a preset.
    #[error("acp options: give a command (the ACP agent to run) or a preset such as \"gemini\"")]
    NoCommand,
}

impl AcpOptions {
    /// Reads an entry's options: a preset, a command, or a preset with some of it overridden.
    /// A preset's variables yield to the worker's own (the entry's `env` reaches the agent as the
    /// person wrote it).
    pub fn from_options(options: &JsonObject) -> Result<Self, OptionsError> {
        Self::from_options_over(options, |name| std::env::var_os(name).is_some())
    }

    fn from_options_over(options: &JsonObject, worker_has: impl Fn(&str) -> bool) -> Result<Self, OptionsError> {
        let written: Written = serde_json::from_value(serde_json::Value::Object(options.clone()))
            .map_err(|e| OptionsError::Unreadable(e.to_string()))?;
        let preset = match &written.preset {
            Some(name) => Some(preset(name).ok_or_else(|| {
                let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
                OptionsError::NoSuchPreset { name: name.clone(), known: known.join(", ") }
            })?),
            None => None,
        };
        let command = match (&written.command, preset) {
            (Some(command), _) if !command.trim().is_empty() => command.clone(),
            (Some(_), _) => return Err(OptionsError::EmptyCommand),
            (None, Some(p)) => p.command.to_owned(),
            (None, None) => return Err(OptionsError::NoCommand),
        };
        let args = match (&written.args, preset) {
            (Some(args), _) => args.clone(),
            // A command of one's own does not take the preset's arguments along with it.
            (None, Some(p)) if written.command.is_none() => p.args.iter().map(|a| (*a).to_owned()).collect(),
            _ => Vec::new(),
        };
        let mut env: BTreeMap<String, String> = preset
            .map(|p| {
                p.env.iter().filter(|(k, _)| !worker_has(k)).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
            })
            .unwrap_or_default();
        env.extend(written.env);
        let display_name = written
            .display_name
            .or_else(|| preset.map(|p| p.display_name.to_owned()))
            .unwrap_or_else(|| "ACP".to_owned());
        Ok(Self {
            command,
            args,
            env,
            cwd: written.cwd,
            display_name,
            description: written.description,
            authenticate: written.authenticate,
            host_tools: written.host_tools.unwrap_or(true),
            start_timeout: written.start_timeout_ms.map(Duration::from_millis).unwrap_or(DEFAULT_START_TIMEOUT),
            starting_mode: written
                .starting_mode
                .or_else(|| preset.and_then(|p| p.starting_mode).map(str::to_owned))
                .filter(|mode| !mode.is_empty()),
            stops_after_a_no: preset.is_some_and(|p| p.stops_after_a_no),
        })
    }

    /// The command line as a person recognises it, for messages.
    pub fn command_line(&self) -> String {
        let name = std::path::Path::new(&self.command)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.command.clone());
        let mut line = std::iter::once(name).chain(self.args.iter().cloned()).collect::<Vec<_>>().join(" ");
        if line.chars().count() > 120 {
            line = line.chars().take(117).collect::<String>() + "...";
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(value: serde_json::Value) -> Result<AcpOptions, OptionsError> {
        let serde_json::Value::Object(map) = value else { panic!("an object") };
        AcpOptions::from_options(&map)
    }

    #[test]
    fn a_preset_is_a_whole_entry() {
        let gemini = options(json!({"preset": "gemini"})).expect("gemini");
        assert_eq!(gemini.command, "gemini");
        assert_eq!(gemini.args, vec!["--acp"]);
        assert_eq!(gemini.display_name, "Gemini CLI");
        assert!(gemini.host_tools);
        assert_eq!(gemini.env.get("GEMINI_CLI_NO_RELAUNCH").map(String::as_str), Some("true"));
        let qwen = options(json!({"preset": "qwen"})).expect("qwen");
        assert_eq!((qwen.command.as_str(), qwen.args[0].as_str()), ("qwen", "--acp"));
        assert_eq!(qwen.env.get("QWEN_USAGE_STATISTICS_ENABLED").map(String::as_str), Some("false"));
        let goose = options(json!({"preset": "goose", "env": {"X": "1"}})).expect("goose");
        assert_eq!(goose.env.get("GOOSE_DISABLE_KEYRING").map(String::as_str), Some("1"));
        assert_eq!(goose.env.get("X").map(String::as_str), Some("1"));
        // The person's own setting of a preset's variable (the entry's env) reaches goose unchanged.
        let written = json!({"preset": "goose"});
        let theirs =
            AcpOptions::from_options_over(written.as_object().expect("an object"), |n| n == "GOOSE_DISABLE_KEYRING")
                .expect("goose");
        assert_eq!(theirs.env.get("GOOSE_DISABLE_KEYRING"), None);
        // opencode's own fetches are off: no update, no models refresh, no language-server download.
        let opencode = options(json!({"preset": "opencode"})).expect("opencode");
        for quiet in ["OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_LSP_DOWNLOAD"] {
            assert_eq!(opencode.env.get(quiet).map(String::as_str), Some("1"), "{quiet}");
        }
        let kilo = options(json!({"preset": "kilo"})).expect("kilo");
        assert_eq!(kilo.env.get("KILO_DISABLE_MODELS_FETCH").map(String::as_str), Some("1"));
        assert_eq!(kilo.env.get("KILO_TELEMETRY_LEVEL").map(String::as_str), Some("off"));
        assert_eq!(kilo.env.get("KILO_PERMISSION").map(String::as_str), Some(r#"{"bash":"ask"}"#));
        for name in ["gemini", "codex", "goose", "opencode", "qwen", "claude", "pi", "copilot", "cursor", "kilo", "amp"]
        {
            assert!(preset(name).is_some(), "{name}");
        }
    }

    #[test]
    fn no_preset_starts_where_something_else_decides_for_the_person() {
        // Qwen Code's own start is `auto`, where its classifier answers: the preset asks it for `default`.
        let qwen = options(json!({"preset": "qwen"})).expect("qwen");
        assert!(qwen.args.windows(2).any(|w| w == ["--approval-mode", "default"]), "{:?}", qwen.args);
        // Codex's questions stay the person's, not its reviewer model's.
        let codex = options(json!({"preset": "codex"})).expect("codex");
        assert!(codex.args.windows(2).any(|w| w == ["-c", "approvals_reviewer=user"]), "{:?}", codex.args);
        // opencode and Kilo ask before every command; goose before every tool.
        let opencode = options(json!({"preset": "opencode"})).expect("opencode");
        assert_eq!(opencode.env.get("OPENCODE_PERMISSION").map(String::as_str), Some(r#"{"bash":"ask"}"#));
        let goose = options(json!({"preset": "goose"})).expect("goose");
        assert_eq!(goose.env.get("GOOSE_MODE").map(String::as_str), Some("approve"));
        // claude-agent-acp takes no flag: a new session is put in `default` unless the person chose.
        // Qwen Code's, Copilot's, opencode's and Kilo's "no" stops their prompt: ahpd tells them so
        // the turn goes on; codex's plain "no" goes on by itself.
        assert!(qwen.stops_after_a_no && options(json!({"preset": "copilot"})).expect("copilot").stops_after_a_no);
        assert!(opencode.stops_after_a_no && options(json!({"preset": "kilo"})).expect("kilo").stops_after_a_no);
        assert!(!codex.stops_after_a_no);
        let claude = options(json!({"preset": "claude"})).expect("claude");
        assert_eq!(claude.starting_mode.as_deref(), Some("default"));
        let own = options(json!({"preset": "claude", "startingMode": "acceptEdits"})).expect("own");
        assert_eq!(own.starting_mode.as_deref(), Some("acceptEdits"));
        let agents_own = options(json!({"preset": "claude", "startingMode": ""})).expect("the agent's own");
        assert_eq!(agents_own.starting_mode, None);
        assert_eq!(options(json!({"command": "x"})).expect("x").starting_mode, None);
    }

    #[test]
    fn a_command_overrides_the_preset_and_drops_its_args() {
        let o = options(json!({"preset": "claude", "command": "/opt/x/claude-agent-acp"})).expect("ok");
        assert_eq!(o.command, "/opt/x/claude-agent-acp");
        assert!(o.args.is_empty());
        assert_eq!(o.display_name, "Claude (ACP)");
    }

    #[test]
    fn mistakes_are_sentences() {
        assert!(options(json!({})).expect_err("no command").to_string().contains("give a command"));
        assert!(options(json!({"preset": "nope"})).expect_err("no preset").to_string().contains("gemini"));
        assert!(options(json!({"command": "x", "comand": "y"})).is_err());
        let auth = options(json!({"command": "x", "authenticate": {"methodId": "api-key"}})).expect("auth");
        assert_eq!(auth.authenticate, Some(Authenticate { method_id: "api-key".into() }));
    }
}

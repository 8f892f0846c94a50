//! The daemon's configuration: every key it knows with its default and whether it applies live,
//! read from JSON files (the platform config dir, `AHPD_CONFIG`, `--config-file`) with flags on
//! top. A bad value on a known key stops startup with `<file>: <key> must be …`; an unknown key is
//! a warning; an `mcpServers` entry that is neither shape is one warning and is left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// When a change to a key takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// While the daemon runs (a root config push, or the next session opened).
    Live,
    /// After `ahpd restart`.
    Restart,
}

/// One key the daemon knows.
pub struct KeySpec {
    /// The key as written in the file.
    pub name: &'static str,
    /// Its default, as JSON (`null` when it has none).
    pub default: fn() -> Value,
    /// When a change applies.
    pub applies: Applies,
    /// What it does, for `docs/config.md` and `ahpd config`.
    pub about: &'static str,
    /// Checks a value; the error completes "`<key>` must be …".
    pub check: fn(&Value) -> Result<(), &'static str>,
    /// Its value is a credential, shown as `<set>`.
    pub secret: bool,
}

fn boolean(v: &Value) -> Result<(), &'static str> {
    v.is_boolean().then_some(()).ok_or("true or false")
}
fn string(v: &Value) -> Result<(), &'static str> {
    v.as_str().filter(|s| !s.is_empty()).map(|_| ()).ok_or("a non-empty string")
}
fn port(v: &Value) -> Result<(), &'static str> {
    v.as_u64().filter(|p| *p <= 65535).map(|_| ()).ok_or("an integer between 0 and 65535")
}
fn millis(v: &Value) -> Result<(), &'static str> {
    v.as_u64().map(|_| ()).ok_or("an integer number of milliseconds, 0 or more")
}
fn cpus(v: &Value) -> Result<(), &'static str> {
    v.as_f64().filter(|c| *c > 0.0 && *c <= 1024.0).map(|_| ()).ok_or("a number of CPUs above 0 (1.5: one and a half)")
}
fn memory(v: &Value) -> Result<(), &'static str> {
    let amount = v.as_str().and_then(crate::confine::computer::parse_memory).or_else(|| v.as_i64());
    amount.filter(|m| *m > 0).map(|_| ()).ok_or("an amount of memory: \"512m\", \"2g\", or bytes")
}
fn strings(v: &Value) -> Result<(), &'static str> {
    v.as_array().filter(|a| a.iter().all(Value::is_string)).map(|_| ()).ok_or("a list of strings")
}
fn object(v: &Value) -> Result<(), &'static str> {
    v.is_object().then_some(()).ok_or("an object")
}
fn remotes(v: &Value) -> Result<(), &'static str> {
    crate::remotes::spec::parse(v).map(|_| ()).map_err(|_| crate::remotes::spec::MUST_BE)
}
fn on_off(v: &Value) -> Result<(), &'static str> {
    matches!(v.as_str(), Some("on" | "off")).then_some(()).ok_or("\"on\" or \"off\"")
}
fn isolation(v: &Value) -> Result<(), &'static str> {
    matches!(v.as_str(), Some("folder" | "worktree" | "sandbox" | "container"))
        .then_some(())
        .ok_or("\"folder\", \"worktree\", \"sandbox\" or \"container\"")
}
fn scope(v: &Value) -> Result<(), &'static str> {
    matches!(v.as_str(), Some("tree" | "session")).then_some(()).ok_or("\"tree\" or \"session\"")
}
fn ring(v: &Value) -> Result<(), &'static str> {
    v.as_u64().filter(|n| (1000..=1_000_000).contains(n)).map(|_| ()).ok_or("an integer between 1000 and 1000000")
}
fn frame(v: &Value) -> Result<(), &'static str> {
    v.as_u64()
        .filter(|n| (65_536..=64 * 1024 * 1024).contains(n))
        .map(|_| ())
        .ok_or("an integer between 65536 and 67108864")
}
fn attachment_bytes(v: &Value) -> Result<(), &'static str> {
    within(v, 1024, 1024 * 1024 * 1024).then_some(()).ok_or("an integer between 1024 and 1073741824")
}
fn kept_bytes(v: &Value) -> Result<(), &'static str> {
    within(v, 0, 1024 * 1024 * 1024).then_some(()).ok_or("an integer between 0 and 1073741824")
}
fn within(v: &Value, low: u64, high: u64) -> bool {
    v.as_u64().is_some_and(|n| (low..=high).contains(&n))
}
fn depth(v: &Value) -> Result<(), &'static str> {
    within(v, 16, 128).then_some(()).ok_or("an integer between 16 and 128")
}
fn merge_method(v: &Value) -> Result<(), &'static str> {
    matches!(v.as_str(), Some("merge" | "squash" | "rebase")).then_some(()).ok_or("\"merge\", \"squash\" or \"rebase\"")
}

fn poll_ms(v: &Value) -> Result<(), &'static str> {
    within(v, 10, 86_400_000).then_some(()).ok_or("an integer number of milliseconds between 10 and 86400000")
}

/// `agentMergeToken`: where a token is read, never the token itself.
fn token_source(v: &Value) -> Result<(), &'static str> {
    let named = |field: &str| v.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty());
    let one_field = v.as_object().is_some_and(|m| m.len() == 1);
    (one_field && (named("env") || named("file"))).then_some(()).ok_or("{\"env\": \"NAME\"} or {\"file\": \"PATH\"}")
}

/// `deltaWindowMs` when unset: see docs/config.md and docs/benchmarks.md for why.
pub const DEFAULT_DELTA_WINDOW_MS: u64 = 50;

fn process_cap(v: &Value) -> Result<(), &'static str> {
    within(v, 0, 100_000).then_some(()).ok_or("an integer between 0 and 100000")
}
fn delta_window(v: &Value) -> Result<(), &'static str> {
    within(v, 0, 1000).then_some(()).ok_or("an integer between 0 and 1000")
}
fn count(v: &Value) -> Result<(), &'static str> {
    within(v, 1, 1_000_000).then_some(()).ok_or("an integer between 1 and 1000000")
}
fn queue(v: &Value) -> Result<(), &'static str> {
    within(v, 64, 1_000_000).then_some(()).ok_or("an integer between 64 and 1000000")
}
fn log_bytes(v: &Value) -> Result<(), &'static str> {
    within(v, 1024, 1 << 30).then_some(()).ok_or("an integer between 1024 and 1073741824")
}
fn log_files(v: &Value) -> Result<(), &'static str> {
    within(v, 1, 100).then_some(()).ok_or("an integer between 1 and 100")
}
fn backups_kept(v: &Value) -> Result<(), &'static str> {
    within(v, 0, 100).then_some(()).ok_or("an integer between 0 and 100")
}
fn backup_interval(v: &Value) -> Result<(), &'static str> {
    within(v, 100, 1 << 40).then_some(()).ok_or("an integer number of milliseconds, 100 or more")
}
fn scrollback(v: &Value) -> Result<(), &'static str> {
    within(v, 4096, 1 << 30).then_some(()).ok_or("an integer between 4096 and 1073741824")
}
fn agents(v: &Value) -> Result<(), &'static str> {
    let Some(map) = v.as_object() else {
        return Err("an object of agent entries");
    };
    for entry in map.values() {
        let kind = entry.get("kind").and_then(Value::as_str).unwrap_or_default();
        if !crate::backends::entry_kinds().contains(&kind) {
            return Err(AGENT_KINDS_EXPECTED);
        }
        if kind == crate::backends::COMMAND_KIND && entry.get("command").and_then(Value::as_str).is_none() {
            return Err("an object of agent entries; a command entry needs a command");
        }
    }
    Ok(())
}

/// What a bad `kind` is told; a test checks it names every kind of the backend table.
const AGENT_KINDS_EXPECTED: &str =
    "an object of agent entries, each with a kind of echo, notes, claude, pi, acp or command";

/// Every key, in the order `docs/config.md` lists them.
pub const KEYS: &[KeySpec] = &[
    KeySpec { name: "port", default: || Value::from(9187), applies: Applies::Restart, about: "The port to listen on; 0 picks a free one.", check: port, secret: false },
    KeySpec { name: "host", default: || Value::from("127.0.0.1"), applies: Applies::Restart, about: "The address to listen on. A non-loopback address needs a token choice.", check: string, secret: false },
    KeySpec { name: "connectionToken", default: || Value::Null, applies: Applies::Restart, about: "The token a client must present (?tkn= or Authorization: Bearer).", check: string, secret: true },
    KeySpec { name: "connectionTokenFile", default: || Value::Null, applies: Applies::Restart, about: "A file holding the token; created with a random one if missing.", check: string, secret: false },
    KeySpec { name: "withoutConnectionToken", default: || Value::from(false), applies: Applies::Restart, about: "Accept connections with no token even on a non-loopback address.", check: boolean, secret: false },
    KeySpec { name: "allowedOrigins", default: || Value::Array(vec![]), applies: Applies::Restart, about: "Browser origins allowed to connect (exact, e.g. https://example.com). Every other web page is refused.", check: strings, secret: false },
    KeySpec { name: "allowedHosts", default: || Value::Array(vec![]), applies: Applies::Restart, about: "Host names a request may name besides loopback and the bound address.", check: strings, secret: false },
    KeySpec { name: "agents", default: || Value::Null, applies: Applies::Restart, about: "The backends, by provider id: { kind, command?, args?, env?, displayName?, options? }. Absent: echo plus each known agent (claude, pi, every ACP preset) whose program is on the PATH.", check: agents, secret: false },
    KeySpec { name: "advancedTools", default: || Value::from(false), applies: Applies::Live, about: "Offer the tools that declare advancedPermission to every session's model.", check: boolean, secret: false },
    KeySpec { name: "sessionTools", default: || Value::from(true), applies: Applies::Live, about: "Whether the eleven session tools are offered at all.", check: boolean, secret: false },
    KeySpec { name: "sessionToolsProviders", default: || Value::Array(vec![]), applies: Applies::Live, about: "Offer the session tools to these providers' sessions alone; empty offers them to every provider.", check: strings, secret: false },
    KeySpec { name: "mcpServers", default: || Value::Null, applies: Applies::Live, about: "The MCP servers every session is offered, read again for each session opened.", check: object, secret: false },
    KeySpec { name: "managedSettings", default: || Value::Null, applies: Applies::Restart, about: "The operator's managed settings, handed to every backend's schema and to every session it starts (Claude Code takes them as --settings: its permissions.allow/deny, …).", check: object, secret: false },
    KeySpec { name: "autoApprovePolicyRestricted", default: || Value::from(false), applies: Applies::Restart, about: "The operator's policy restricts elevated auto-approval: no backend offers a mode that approves everything (Claude Code's bypassPermissions), before a session exists or in one.", check: boolean, secret: false },
    KeySpec { name: "clientToolTimeoutMs", default: || Value::from(600_000), applies: Applies::Restart, about: "How long a tool call a client runs may wait for that client; 0 waits for ever.", check: millis, secret: false },
    KeySpec { name: "clientToolCallDisconnectTimeoutMs", default: || Value::from(30_000), applies: Applies::Restart, about: "How long a client whose connections all closed keeps its place and the calls it owes; 0 releases it at once.", check: millis, secret: false },
    KeySpec { name: "agentOrchestrationLimits", default: || Value::from("on"), applies: Applies::Live, about: "\"off\" turns the session tools' spawn depth and per-tree counts off.", check: on_off, secret: false },
    KeySpec { name: "agentOrchestrationLimitsScope", default: || Value::from("tree"), applies: Applies::Live, about: "Count the limits per session tree (\"tree\") or per session (\"session\").", check: scope, secret: false },
    KeySpec { name: "isolation", default: || Value::from("folder"), applies: Applies::Restart, about: "Where a session works when it names no isolation: \"folder\" (the folder itself), \"worktree\" (a Git worktree of its own, cut from the folder), \"sandbox\" (a worktree, and everything the agent runs confined to it by bubblewrap), or \"container\" (a worktree, and everything the agent runs inside a disposable container on the container engine; docs/security.md). A box's level this machine cannot make is not offered, and a session left asking for one runs nothing.", check: isolation, secret: false },
    KeySpec { name: "computersMax", default: || Value::from(4), applies: Applies::Restart, about: "The most disposable computers (the computer plugin's request_disposable_computer) this host has at once.", check: millis, secret: false },
    KeySpec { name: "sandboxAllowHosts", default: || Value::Array(vec![]), applies: Applies::Restart, about: "Hosts a sandboxed session may reach besides its model API (every agent entry's *_BASE_URL) and this daemon: \"host\", \"host:port\" or a URL. Anything else is refused by the daemon's proxy.", check: strings, secret: false },
    KeySpec { name: "sandboxWritable", default: || Value::from(vec![Value::from("~/.claude"), Value::from("~/.pi/agent")]), applies: Applies::Restart, about: "Folders outside its worktree a sandboxed or container session may write: the agents' own state (Claude Code keeps its conversations in ~/.claude, pi in ~/.pi/agent; an ACP agent's own folder, such as ~/.gemini, is added here).", check: strings, secret: false },
    KeySpec { name: "containerImage", default: || Value::Null, applies: Applies::Restart, about: "The image a container session runs when its repository has no .devcontainer/devcontainer.json; default the computer plugin's plugins.computer.options.image. Pulled when the engine does not hold it.", check: string, secret: false },
    KeySpec { name: "containerCpus", default: || Value::Null, applies: Applies::Restart, about: "The CPUs a container session's container may use (1.5: one and a half); default the computer plugin's plugins.computer.options.cpus, else no limit.", check: cpus, secret: false },
    KeySpec { name: "containerMemory", default: || Value::Null, applies: Applies::Restart, about: "The memory a container session's container may use (\"512m\", \"2g\", or bytes); default the computer plugin's plugins.computer.options.memory, else no limit.", check: memory, secret: false },
    KeySpec { name: "containerMounts", default: || Value::Array(vec![]), applies: Applies::Restart, about: "Folders of this machine mounted read-only, at their own paths, into every container session's container: where the agents' CLIs are installed, when the image has none.", check: strings, secret: false },
    KeySpec { name: "isolationProviders", default: || Value::Array(vec![]), applies: Applies::Restart, about: "Providers whose sessions work in a worktree of their own when they name no isolation.", check: strings, secret: false },
    KeySpec { name: "worktreesRoot", default: || Value::Null, applies: Applies::Restart, about: "The folder ahpd makes worktrees in (<root>/<repository>/<branch>); default a worktrees folder in the data folder.", check: string, secret: false },
    KeySpec { name: "agentMergeToken", default: || Value::Null, applies: Applies::Restart, about: "Where Agent Merge reads the GitHub token it acts with: {\"env\": NAME} (an environment variable of the daemon) or {\"file\": PATH} (a file holding it), read when it is needed. Absent: the gh CLI's stored token (gh auth token).", check: token_source, secret: true },
    KeySpec { name: "agentMergeApiUrl", default: || Value::Null, applies: Applies::Restart, about: "The GitHub REST API Agent Merge asks (its GraphQL is <url>/graphql). Absent: https://api.github.com for a github.com remote, https://<host>/api/v3 for a GitHub Enterprise one.", check: string, secret: false },
    KeySpec { name: "agentMergePollMs", default: || Value::from(60_000), applies: Applies::Restart, about: "How long an Agent Merge watch waits between looks at its pull request (each look is conditional: an unchanged answer costs no rate limit).", check: poll_ms, secret: false },
    KeySpec { name: "agentMergeMethod", default: || Value::from("squash"), applies: Applies::Restart, about: "How Agent Merge merges a pull request that is ready: \"merge\", \"squash\" or \"rebase\".", check: merge_method, secret: false },
    KeySpec { name: "agentMergeAllowedAuthors", default: || Value::Array(vec![]), applies: Applies::Restart, about: "GitHub logins whose review comments Agent Merge acts on besides the repository's owners, members and collaborators (a bot with or without [bot]); everybody else's are left alone.", check: strings, secret: false },
    KeySpec { name: "automationGitHubPollMs", default: || Value::from(60_000), applies: Applies::Restart, about: "How long the automations' GitHub triggers wait between looks at their repositories (each look is conditional: an unchanged listing costs no rate limit). They ask GitHub with the token and API Agent Merge uses (agentMergeToken, agentMergeApiUrl).", check: poll_ms, secret: false },
    KeySpec { name: "remotes", default: || Value::Null, applies: Applies::Restart, about: "Other ahpd hosts whose agents and sessions this one serves as its own (docs/remotes.md): remotes.<name> is {\"command\": [\"ssh\", \"devbox\", \"ahpd\", \"--stdio\"]} or {\"url\": \"ws://…\", \"tokenFile\": path}; their agents are named <agent>@<name>.", check: remotes, secret: false },
    KeySpec { name: "plugins", default: || Value::Null, applies: Applies::Restart, about: "Per-plugin settings: plugins.<name>.hostTools (default true) says whether that plugin's sessions take the host's own tools; plugins.computer ({\"enabled\", \"options\": {\"engine\", \"image\", \"cpus\", \"memory\"}}) configures the computer plugin (ahpd plugin list says what would load).", check: object, secret: false },
    KeySpec { name: "replayBufferSize", default: || Value::from(4096), applies: Applies::Restart, about: "Actions kept for reconnecting clients; older gaps get snapshots.", check: ring, secret: false },
    KeySpec { name: "maxFrameBytes", default: || Value::from(4 * 1024 * 1024), applies: Applies::Restart, about: "The largest message a client may send; a larger one is answered with an error and not read.", check: frame, secret: false },
    KeySpec { name: "attachmentLimitBytes", default: || Value::from(5 * 1024 * 1024), applies: Applies::Restart, about: "The largest attachment a message may carry once read (a file, a pasted image, a resource a client serves); a larger one is refused naming this limit. A backend may take less.", check: attachment_bytes, secret: false },
    KeySpec { name: "toolResultResourceLimitBytes", default: || Value::from(protocol::kept::DEFAULT_KEPT_LIMIT_BYTES), applies: Applies::Restart, about: "The largest content a tool result carries inline (an image, audio, an embedded resource) that ahpd keeps in the session's folder for clients to read back (resourceRead); a larger one is left out of the chat with a sentence saying so. 0 keeps none.", check: kept_bytes, secret: false },
    KeySpec { name: "maxJsonDepth", default: || Value::from(64), applies: Applies::Restart, about: "The deepest nesting of objects and arrays a client's message may have; a deeper one is answered with an error and not read.", check: depth, secret: false },
    KeySpec { name: "maxConnections", default: || Value::from(256), applies: Applies::Restart, about: "WebSocket connections open at once; the one past it is refused (HTTP 503) and the others go on.", check: count, secret: false },
    KeySpec { name: "maxSubscriptionsPerConnection", default: || Value::from(1024), applies: Applies::Restart, about: "Channels one connection may watch at once; a subscribe past it is refused.", check: count, secret: false },
    KeySpec { name: "maxPendingRequestsPerConnection", default: || Value::from(64), applies: Applies::Restart, about: "Requests of one connection that may wait for their answers at once; one more is refused.", check: count, secret: false },
    KeySpec { name: "maxSessionsPerMinute", default: || Value::from(60), applies: Applies::Restart, about: "Sessions one connection may create in any minute; createSession past it is refused with when it frees.", check: count, secret: false },
    KeySpec { name: "outboundQueueFrames", default: || Value::from(16_384), applies: Applies::Restart, about: "Messages queued for one connection that is not reading; past it the connection is dropped (it can reconnect and resume).", check: queue, secret: false },
    KeySpec { name: "deltaWindowMs", default: || Value::from(DEFAULT_DELTA_WINDOW_MS), applies: Applies::Live, about: "How long a backend's streamed text to one part is held and merged into one action before clients see it (fewer, larger deltas; the same text). 0 sends every delta as it comes.", check: delta_window, secret: false },
    KeySpec { name: "maxBackendProcesses", default: || Value::from(0), applies: Applies::Restart, about: "Backend sessions (a Claude or pi process each) open at once; at the cap the chat used longest ago has its backend session closed first, and resumes on its next message. 0 sets no cap.", check: process_cap, secret: false },
    KeySpec { name: "sessionIdleUnloadMs", default: || Value::from(600_000), applies: Applies::Restart, about: "How long a session nobody watches and nothing runs in stays in memory; then it is unloaded (its backend sessions closed) and loads again from the store on its next use. 0 keeps every session loaded.", check: millis, secret: false },
    KeySpec { name: "workerHandshakeTimeoutMs", default: || Value::from(10_000), applies: Applies::Restart, about: "How long a worker may take to answer its handshake before it is restarted.", check: millis, secret: false },
    KeySpec { name: "logMaxBytes", default: || Value::from(10 * 1024 * 1024), applies: Applies::Restart, about: "The size past which daemon.log is moved aside while the daemon runs (a daemon started by ahpd start or a service).", check: log_bytes, secret: false },
    KeySpec { name: "logFiles", default: || Value::from(5), applies: Applies::Restart, about: "How many moved-aside logs (daemon.log.1, …) are kept.", check: log_files, secret: false },
    KeySpec { name: "maxTerminalsPerSession", default: || Value::from(8), applies: Applies::Restart, about: "Terminals one session may have running at once (its own and its ! commands'); one more is refused.", check: count, secret: false },
    KeySpec { name: "maxTerminalsPerConnection", default: || Value::from(8), applies: Applies::Restart, about: "Terminals one client (by its clientId, across its connections) may have running at once; createTerminal past it is refused.", check: count, secret: false },
    KeySpec { name: "terminalScrollbackBytes", default: || Value::from(1 << 20), applies: Applies::Restart, about: "Bytes of output a terminal keeps (and a kept output holds); past it the older half is let go.", check: scrollback, secret: false },
    KeySpec { name: "shellCommandTimeoutMs", default: || Value::from(3_600_000), applies: Applies::Restart, about: "How long a `!` command may run before it is stopped; 0 lets it run for ever.", check: millis, secret: false },
    KeySpec { name: "defaultShell", default: || Value::Null, applies: Applies::Restart, about: "The shell a terminal and a ! command run; absent: $SHELL, else /bin/sh.", check: string, secret: false },
    KeySpec { name: "storeBackups", default: || Value::from(3), applies: Applies::Restart, about: "How many backups of the session store are kept in backups/ in the data folder (the newest); 0 takes none.", check: backups_kept, secret: false },
    KeySpec { name: "storeBackupIntervalMs", default: || Value::from(3_600_000), applies: Applies::Restart, about: "How old the newest backup of the session store may grow before the next is taken, while the store changed (checked at start and as it runs).", check: backup_interval, secret: false },
    KeySpec { name: "users", default: || Value::Null, applies: Applies::Restart, about: "A users directory (JSON file): people, roles and hashed tokens.", check: string, secret: false },
];

/// The spec of a key.
pub fn key(name: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.name == name)
}

/// Where a key's value came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Its default.
    Default,
    /// A config file.
    File(PathBuf),
    /// A command-line flag.
    Flag,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Flag => f.write_str("command line"),
        }
    }
}

/// The configuration in force.
#[derive(Debug, Clone)]
pub struct Config {
    values: Map<String, Value>,
    sources: BTreeMap<String, Source>,
    /// The files that were read.
    pub files: Vec<PathBuf>,
    /// Warnings to log (unknown keys, bad MCP entries).
    pub warnings: Vec<String>,
}

/// A configuration that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file that must exist could not be read.
    #[error("{0}: {1}")]
    Unreadable(PathBuf, String),
    /// A file is not JSON.
    #[error("{0}: not JSON: {1}")]
    NotJson(PathBuf, String),
    /// A known key has a bad value.
    #[error("{origin}: {key} must be {expected}")]
    BadValue { origin: Source, key: String, expected: &'static str },
}

impl Config {
    /// Reads the files: `--config-file` alone when given, else the platform file then
    /// `AHPD_CONFIG`.
    pub fn load(config_dir: &Path, config_file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config =
            Config { values: Map::new(), sources: BTreeMap::new(), files: Vec::new(), warnings: Vec::new() };
        match config_file {
            Some(file) => config.read_file(file, true)?,
            None => {
                config.read_file(&config_dir.join("config.json"), false)?;
                if let Some(env) = std::env::var_os("AHPD_CONFIG") {
                    config.read_file(Path::new(&env), true)?;
                }
            }
        }
        Ok(config)
    }

    fn read_file(&mut self, path: &Path, must_exist: bool) -> Result<(), ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => return Ok(()),
            Err(e) => return Err(ConfigError::Unreadable(path.to_owned(), e.to_string())),
        };
        let value: Value =
            serde_json::from_str(&text).map_err(|e| ConfigError::NotJson(path.to_owned(), e.to_string()))?;
        let Value::Object(map) = value else {
            return Err(ConfigError::NotJson(path.to_owned(), "the file must hold one JSON object".into()));
        };
        self.files.push(path.to_owned());
        for (name, value) in map {
            self.set(&name, value, Source::File(path.to_owned()))?;
        }
        Ok(())
    }

    /// Sets a key from a flag (flags beat files).
    pub fn set_flag(&mut self, name: &str, value: Value) -> Result<(), ConfigError> {
        self.set(name, value, Source::Flag)
    }

    fn set(&mut self, name: &str, mut value: Value, source: Source) -> Result<(), ConfigError> {
        let Some(spec) = key(name) else {
            self.warnings.push(format!("{source}: {name} is not a setting ahpd knows; ignored"));
            return Ok(());
        };
        (spec.check)(&value).map_err(|expected| ConfigError::BadValue {
            origin: source.clone(),
            key: name.to_owned(),
            expected,
        })?;
        if name == "mcpServers" {
            value = self.checked_mcp_servers(&source, value);
        }
        self.values.insert(name.to_owned(), value);
        self.sources.insert(name.to_owned(), source);
        Ok(())
    }

    /// Keeps the `mcpServers` entries that are one of the two shapes; each other one is a warning.
    fn checked_mcp_servers(&mut self, source: &Source, value: Value) -> Value {
        let Value::Object(entries) = value else {
            return Value::Null;
        };
        let mut kept = Map::new();
        for (name, entry) in entries {
            match serde_json::from_value::<protocol::McpServer>(entry.clone()) {
                Ok(protocol::McpServer::Stdio { command, .. }) if command.is_empty() => self
                    .warnings
                    .push(format!("{source}: mcpServers.{name} is a stdio server with no command; ignored")),
                Ok(protocol::McpServer::Http { url, .. }) if url.is_empty() => {
                    self.warnings.push(format!("{source}: mcpServers.{name} is an http server with no url; ignored"))
                }
                Ok(_) => {
                    kept.insert(name, entry);
                }
                Err(e) => self
                    .warnings
                    .push(format!("{source}: mcpServers.{name} is neither a stdio nor an http server ({e}); ignored")),
            }
        }
        Value::Object(kept)
    }

    /// A key's value, or its default.
    pub fn get(&self, name: &str) -> Value {
        self.values.get(name).cloned().or_else(|| key(name).map(|k| (k.default)())).unwrap_or(Value::Null)
    }

    /// Where a key's value came from.
    pub fn source(&self, name: &str) -> Source {
        self.sources.get(name).cloned().unwrap_or(Source::Default)
    }

    /// True when the key was set in a file or by a flag.
    pub fn is_set(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// A string key.
    pub fn string(&self, name: &str) -> Option<String> {
        self.get(name).as_str().map(str::to_owned)
    }

    /// An unsigned integer key.
    pub fn u64(&self, name: &str) -> u64 {
        self.get(name).as_u64().unwrap_or(0)
    }

    /// A boolean key.
    pub fn bool(&self, name: &str) -> bool {
        self.get(name).as_bool().unwrap_or(false)
    }

    /// The operator's policy (`managedSettings`, `autoApprovePolicyRestricted`), handed to every
    /// backend's `agent/schema` and to every start under the same names (seed 004).
    pub fn policy(&self) -> protocol::Policy {
        protocol::Policy {
            managed_settings: Some(self.get("managedSettings")).filter(Value::is_object),
            auto_approve_policy_restricted: self.bool("autoApprovePolicyRestricted").then_some(true),
        }
    }

    /// A list-of-strings key.
    pub fn strings(&self, name: &str) -> Vec<String> {
        self.get(name)
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// A key's value as it may be shown (credentials as `<set>`).
    pub fn shown_value(&self, name: &str) -> Value {
        match key(name) {
            Some(spec) => redact(spec, self.get(name)),
            None => Value::Null,
        }
    }

    /// Every key with its value (credentials as `<set>`) and source, for `ahpd config`.
    pub fn shown(&self) -> Vec<(String, Value, Source)> {
        KEYS.iter()
            .map(|spec| {
                let value = self.get(spec.name);
                (spec.name.to_owned(), redact(spec, value), self.source(spec.name))
            })
            .collect()
    }
}

/// A command line with the value of every credential's flag (`--connection-token`) shown as
/// `<set>`, for the record and `ahpd status`.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let flags: Vec<String> = KEYS.iter().filter(|k| k.secret).map(|k| flag_of(k.name)).collect();
    let mut shown = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for arg in argv {
        if std::mem::take(&mut hide_next) {
            shown.push("<set>".to_owned());
        } else if flags.contains(arg) {
            hide_next = true;
            shown.push(arg.clone());
        } else if let Some(flag) = flags.iter().find(|f| arg.starts_with(&format!("{f}="))) {
            shown.push(format!("{flag}=<set>"));
        } else {
            shown.push(arg.clone());
        }
    }
    shown
}

/// The flag that sets a key: `connectionToken` → `--connection-token`.
fn flag_of(key: &str) -> String {
    let mut flag = String::from("--");
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            flag.push('-');
        }
        flag.push(c.to_ascii_lowercase());
    }
    flag
}

/// Hides credentials: a secret key's value, and every value under `env` or `headers`.
fn redact(spec: &KeySpec, value: Value) -> Value {
    if spec.secret && !value.is_null() {
        return Value::from("<set>");
    }
    redact_nested(value)
}

fn redact_nested(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if (k == "env" || k == "headers") && v.is_object() {
                        Value::Object(
                            v.as_object()
                                .map(|m| m.keys().map(|k| (k.clone(), Value::from("<set>"))).collect())
                                .unwrap_or_default(),
                        )
                    } else {
                        redact_nested(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    fn temp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ahpd-config-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn defaults_without_files() {
        let dir = temp();
        let config = Config::load(&dir, None).expect("loads");
        assert_eq!(config.u64("port"), 9187);
        assert_eq!(config.u64("clientToolTimeoutMs"), 600_000);
        assert_eq!(config.u64("clientToolCallDisconnectTimeoutMs"), 30_000);
        assert!(config.bool("sessionTools"));
        assert_eq!(config.source("port"), Source::Default);
    }

    #[test]
    fn a_bad_value_names_the_file_and_the_key() {
        let dir = temp();
        let file = write(&dir, "c.json", r#"{"port": "high"}"#);
        let err = Config::load(&dir, Some(&file)).expect_err("refused");
        assert_eq!(err.to_string(), format!("{}: port must be an integer between 0 and 65535", file.display()));
    }

    #[test]
    fn a_containers_limits_are_read_as_a_person_writes_them() {
        let dir = temp();
        let file = write(&dir, "ok.json", r#"{"containerCpus": 1.5, "containerMemory": "2g"}"#);
        assert!(Config::load(&dir, Some(&file)).is_ok());
        for (text, said) in [
            (
                r#"{"containerMemory": "lots"}"#,
                "containerMemory must be an amount of memory: \"512m\", \"2g\", or bytes",
            ),
            (r#"{"containerCpus": 0}"#, "containerCpus must be a number of CPUs above 0 (1.5: one and a half)"),
        ] {
            let file = write(&dir, "bad.json", text);
            let err = Config::load(&dir, Some(&file)).expect_err("refused");
            assert_eq!(err.to_string(), format!("{}: {said}", file.display()));
        }
    }

    #[test]
    fn unknown_keys_and_bad_mcp_entries_are_warnings() {
        let dir = temp();
        let file = write(
            &dir,
            "c.json",
            r#"{"colour": 1, "mcpServers": {"ok": {"type": "http", "url": "http://x"}, "bad": {"type": "ftp"}, "nourl": {"type": "http", "url": ""}}}"#,
        );
        let config = Config::load(&dir, Some(&file)).expect("loads");
        assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
        let servers = config.get("mcpServers");
        assert!(servers.get("ok").is_some());
        assert!(servers.get("bad").is_none());
    }

    #[test]
    fn a_bad_agent_kind_is_told_every_kind_of_the_backend_table() {
        for kind in crate::backends::entry_kinds() {
            assert!(AGENT_KINDS_EXPECTED.contains(kind), "{kind} is missing from {AGENT_KINDS_EXPECTED:?}");
        }
        let dir = temp();
        let file = write(&dir, "c.json", r#"{"agents": {"x": {"kind": "nothing"}}}"#);
        let err = Config::load(&dir, Some(&file)).expect_err("refused");
        assert!(err.to_string().ends_with(AGENT_KINDS_EXPECTED), "{err}");
    }

    #[test]
    fn a_credential_on_the_command_line_is_shown_as_set() {
        let argv: Vec<String> =
            ["--port", "0", "--connection-token", "s3cret", "--connection-token=again", "--connection-token-file", "f"]
                .map(str::to_owned)
                .into();
        assert_eq!(
            redact_argv(&argv),
            ["--port", "0", "--connection-token", "<set>", "--connection-token=<set>", "--connection-token-file", "f"]
        );
    }

    #[test]
    fn credentials_are_shown_as_set() {
        let dir = temp();
        let file = write(
            &dir,
            "c.json",
            r#"{"connectionToken": "abc", "mcpServers": {"s": {"type": "http", "url": "http://x", "headers": {"Authorization": "Bearer x"}}}}"#,
        );
        let config = Config::load(&dir, Some(&file)).expect("loads");
        let shown = config.shown();
        let token = shown.iter().find(|(k, _, _)| k == "connectionToken").expect("token");
        assert_eq!(token.1, "<set>");
        let servers = shown.iter().find(|(k, _, _)| k == "mcpServers").expect("servers");
        assert_eq!(servers.1["s"]["headers"]["Authorization"], "<set>");
    }
}

//! What the host is configured with: the settings it reads while it runs ([`HostConfig`]), the
//! daemon keys that apply live ([`LiveSettings`]) and what terminals may hold
//! ([`TerminalSettings`]), with their defaults. Plain values, below everything that acts on them.

use std::path::PathBuf;
use std::time::Duration;

/// The largest attachment a message may carry, once read, unless `attachmentLimitBytes` says.
pub const DEFAULT_ATTACHMENT_LIMIT_BYTES: u64 = 5 << 20;

/// Settings the host reads while it runs.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Envelopes kept for reconnecting clients.
    pub replay_capacity: usize,
    /// Frames queued for one connection before it counts as not reading.
    pub outbound_capacity: usize,
    /// What one connection may ask of the host.
    pub limits: super::limits::Limits,
    /// How long a client's tool may wait for its client (handed to backends).
    pub client_tool_timeout_ms: u64,
    /// How long a client whose connections all closed keeps its place and its calls.
    pub client_disconnect_grace_ms: u64,
    /// The folder a session runs in when the client names none.
    pub default_directory: Option<PathBuf>,
    /// How long a request may wait for a worker that is starting.
    pub worker_wait: Duration,
    /// The host's name and version for `initialize`.
    pub server_version: String,
    /// The daemon keys that apply while it runs, as it started.
    pub settings: LiveSettings,
    /// The clock (manual in tests).
    pub clock: crate::clock::Clock,
    /// Where settings pushed through root config that apply after a restart are written.
    pub config_file: Option<PathBuf>,
    /// The daemon's keys as root config (absent: the root state carries no config).
    pub root_config: Option<ahp_types::state::RootConfigState>,
    /// How long a session nobody uses stays in memory (absent: for ever).
    pub idle_unload: Option<Duration>,
    /// The users directory, when one is configured.
    pub users: Option<crate::users::Users>,
    /// The deployment's own connection token (root), when it has one.
    pub root_token: Option<String>,
    /// The providers whose sessions are not offered this host's own tools, nor handed its
    /// `/ahp-mcp` endpoint (`plugins.<name>.hostTools: false`).
    pub host_tools_withheld: std::collections::BTreeSet<String>,
    /// What terminals may hold and where they run.
    pub terminals: TerminalSettings,
    /// The largest attachment a message may carry, once read (`attachmentLimitBytes`).
    pub attachment_limit: u64,
    /// Backend sessions open at once before the one used longest ago is closed
    /// (`maxBackendProcesses`); 0 sets no cap.
    pub max_backend_processes: usize,
    /// The operator's policy, handed to every start (seed 004).
    pub policy: protocol::Policy,
}

/// The daemon keys that apply live (a root config push changes them while the daemon runs).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSettings {
    /// Offer tools that declare advanced permission.
    pub advanced_tools: bool,
    /// Offer the session tools at all.
    pub session_tools: bool,
    /// Offer them to these providers' sessions alone (empty: every provider).
    pub session_tools_providers: Vec<String>,
    /// The deployment's MCP servers, read again for each session opened.
    pub mcp_servers: Option<std::collections::BTreeMap<String, protocol::McpServer>>,
    /// The session tools' spawn depth and counts apply.
    pub orchestration_limits: bool,
    /// Count the limits per session rather than per session tree.
    pub limits_per_session: bool,
    /// How long a backend's streamed text is held to be merged (`deltaWindowMs`); 0 holds none.
    pub delta_window_ms: u64,
}

impl Default for LiveSettings {
    fn default() -> Self {
        Self {
            advanced_tools: false,
            session_tools: true,
            session_tools_providers: Vec::new(),
            mcp_servers: None,
            orchestration_limits: true,
            limits_per_session: false,
            delta_window_ms: 0,
        }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            replay_capacity: 4096,
            outbound_capacity: 16_384,
            limits: super::limits::Limits::default(),
            client_tool_timeout_ms: 600_000,
            client_disconnect_grace_ms: 30_000,
            default_directory: None,
            worker_wait: Duration::from_secs(15),
            settings: LiveSettings::default(),
            clock: crate::clock::Clock::system(),
            config_file: None,
            root_config: None,
            idle_unload: None,
            users: None,
            root_token: None,
            host_tools_withheld: Default::default(),
            terminals: TerminalSettings::default(),
            attachment_limit: DEFAULT_ATTACHMENT_LIMIT_BYTES,
            max_backend_processes: 0,
            policy: protocol::Policy::default(),
            server_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// What terminals may hold and where they run (the `terminal*` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalSettings {
    /// Terminals one session may have running at once (its own and its `!` commands').
    pub per_session: usize,
    /// Terminals one client (by its `clientId`) may have running at once.
    pub per_client: usize,
    /// Bytes of output a terminal keeps; older output is let go.
    pub scrollback_bytes: usize,
    /// The shell a terminal runs, when the config names one (`defaultShell`); else `$SHELL`.
    pub default_shell: Option<PathBuf>,
    /// How long a `!` command may run before it is stopped (`shellCommandTimeoutMs`); 0 for ever.
    pub command_timeout_ms: u64,
}

impl TerminalSettings {
    /// How long a `!` command may run, if it has a deadline.
    pub fn command_deadline(&self) -> Option<std::time::Duration> {
        (self.command_timeout_ms > 0).then(|| std::time::Duration::from_millis(self.command_timeout_ms))
    }
}

impl Default for TerminalSettings {
    fn default() -> Self {
        Self {
            per_session: 8,
            per_client: 8,
            scrollback_bytes: 1 << 20,
            default_shell: None,
            command_timeout_ms: 3_600_000,
        }
    }
}

//! The foreground daemon: configuration, workers, the host, the listener, the announcement, and an
//! orderly stop on SIGTERM/SIGINT that leaves no process behind.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents;
use crate::cli::DaemonArgs;
use crate::config::{Config, ConfigError};
use crate::control::{self, server::Facts};
use crate::host::{Host, HostConfig};
use crate::paths::Paths;
use crate::server::{self, DoorPolicy};
use crate::supervisor::Supervisor;

/// Exit code for bad usage or a configuration that cannot start.
pub const EXIT_USAGE: u8 = 2;

/// Where the token came from, for the announcement (never the token itself).
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// No token; any local connection is accepted.
    None { loopback: bool },
    /// `--connection-token` or `connectionToken`.
    Given,
    /// Read from a file.
    Read(PathBuf),
    /// Written to a file that did not exist.
    Written(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::None { loopback: true } => f.write_str("no token: loopback only"),
            TokenSource::None { loopback: false } => f.write_str("no token: any connection is accepted"),
            TokenSource::Given => f.write_str("token: from the command line or config"),
            TokenSource::Read(p) => write!(f, "token: read from {}", p.display()),
            TokenSource::Written(p) => write!(f, "token: written to {}", p.display()),
        }
    }
}

/// Applies the daemon's flags over the files.
pub fn apply_flags(config: &mut Config, args: &DaemonArgs) -> Result<(), ConfigError> {
    if let Some(port) = args.port {
        config.set_flag("port", Value::from(port))?;
    }
    if let Some(host) = &args.host {
        config.set_flag("host", Value::from(host.clone()))?;
    }
    if let Some(token) = &args.connection_token {
        config.set_flag("connectionToken", Value::from(token.clone()))?;
    }
    if let Some(file) = &args.connection_token_file {
        config.set_flag("connectionTokenFile", Value::from(file.display().to_string()))?;
    }
    if args.without_connection_token {
        config.set_flag("withoutConnectionToken", Value::from(true))?;
    }
    if args.advanced_tools {
        config.set_flag("advancedTools", Value::from(true))?;
    }
    if args.no_session_tools {
        config.set_flag("sessionTools", Value::from(false))?;
    } else if args.session_tools {
        config.set_flag("sessionTools", Value::from(true))?;
    }
    if !args.session_tools_providers.is_empty() {
        config.set_flag("sessionToolsProviders", Value::from(args.session_tools_providers.clone()))?;
    }
    if let Some(file) = &args.users {
        let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        config.set_flag("users", Value::from(file.display().to_string()))?;
    }
    if let Some(ms) = args.client_tool_timeout_ms {
        config.set_flag("clientToolTimeoutMs", Value::from(ms))?;
    }
    Ok(())
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Works out the token from the config, refusing the combinations that make no sense.
pub fn resolve_token(config: &Config, base: &Path) -> Result<(Option<String>, TokenSource), String> {
    let host = config.string("host").unwrap_or_else(|| "127.0.0.1".into());
    let without = config.bool("withoutConnectionToken");
    let given = config.string("connectionToken");
    let file = config.string("connectionTokenFile").map(|f| base.join(f));
    match (given, file, without) {
        (Some(_), _, true) | (_, Some(_), true) => Err("--without-connection-token contradicts the token you also passed.".into()),
        (Some(_), Some(_), _) => Err("Pass --connection-token or --connection-token-file, not both.".into()),
        (Some(token), None, false) => Ok((Some(token), TokenSource::Given)),
        (None, Some(file), false) => read_or_write_token(&file),
        (None, None, true) => Ok((None, TokenSource::None { loopback: false })),
        (None, None, false) if is_loopback(&host) => Ok((None, TokenSource::None { loopback: true })),
        // People present their own tokens; nobody signed in may do nothing but sign in.
        (None, None, false) if config.string("users").is_some() => Ok((None, TokenSource::None { loopback: false })),
        (None, None, false) => Err(format!(
            "Binding {host} exposes this host beyond this machine.\nPass --connection-token, --connection-token-file, or --without-connection-token."
        )),
    }
}

fn read_or_write_token(file: &Path) -> Result<(Option<String>, TokenSource), String> {
    match std::fs::read_to_string(file) {
        Ok(text) => {
            let token = text.trim().to_owned();
            if token.is_empty() {
                return Err(format!("{} is empty.", file.display()));
            }
            Ok((Some(token), TokenSource::Read(file.to_owned())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = uuid::Uuid::new_v4().simple().to_string();
            crate::fsutil::write_private(file, token.as_bytes())
                .map_err(|e| format!("could not write {}: {e}", file.display()))?;
            Ok((Some(token), TokenSource::Written(file.to_owned())))
        }
        Err(e) => Err(format!("could not read {}: {e}", file.display())),
    }
}

/// Everything the daemon needs, worked out before anything starts.
pub struct Plan {
    /// Its folders.
    pub paths: Paths,
    /// The configuration in force.
    pub config: Config,
    /// The token, if any.
    pub token: Option<String>,
    /// Where it came from.
    pub token_source: TokenSource,
    /// Serve stdio rather than a port.
    pub stdio: bool,
    /// `--config-file`, when given.
    pub config_file: Option<PathBuf>,
    /// The users directory, when one is configured (read and checked before anything starts).
    pub users: Option<crate::users::Users>,
}

/// Reads the configuration and flags; a problem is a sentence and exit code 2.
pub fn plan(args: &DaemonArgs) -> Result<Plan, String> {
    let paths = Paths::platform().map_err(|e| e.to_string())?;
    let mut config = Config::load(&paths.config_dir, args.config_file.as_deref()).map_err(|e| e.to_string())?;
    apply_flags(&mut config, args).map_err(|e| e.to_string())?;
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let (token, token_source) =
        if args.stdio { (None, TokenSource::None { loopback: true }) } else { resolve_token(&config, &base)? };
    let users = match config.string("users") {
        None => None,
        Some(file) => {
            let users = crate::users::Users::load(&base.join(file)).map_err(|e| e.to_string())?;
            Some(users)
        }
    };
    Ok(Plan { paths, config, token, token_source, stdio: args.stdio, config_file: args.config_file.clone(), users })
}

/// Sets up logging to stderr (`AHPD_LOG` filters, default info).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AHPD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // No colour codes in a detached daemon's log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT.
pub fn run_foreground(args: DaemonArgs) -> ExitCode {
    init_logging();
    let plan = match plan(&args) {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    for warning in &plan.config.warnings {
        tracing::warn!("{warning}");
    }
    if std::env::var_os(crate::verbs::restart::CHECK_LINE_ENV).is_some() {
        // `ahpd restart` asks whether this binary can start with this line and today's config.
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(plan));
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ahpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Serves until a stop signal; then drains and stops every worker.
pub async fn serve(plan: Plan) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let config = &plan.config;
    std::fs::create_dir_all(&plan.paths.data_dir)
        .with_context(|| format!("could not create {}", plan.paths.data_dir.display()))?;
    // Claimed before the store is opened: one daemon per data folder.
    let control = if plan.stdio { None } else { Some(control::server::claim(&plan.paths).await?) };
    if control.is_some() {
        // Before any session resumes: what a predecessor killed with SIGKILL left running goes.
        control::tree::end_leftovers(&plan.paths);
    }
    let exe = std::env::current_exe().context("could not find this program's own path to start its workers")?;
    let handshake = Duration::from_millis(config.u64("workerHandshakeTimeoutMs").max(100));
    let planned = agents::plan(&config.get("agents"), &exe, &plan.paths.data_dir, handshake);
    let agent_lines: Vec<String> = planned.iter().map(|p| format!("{} ({})", p.spec.provider, p.why)).collect();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let supervisor = Supervisor::new(
        planned.into_iter().map(|p| p.spec).collect(),
        events_tx,
        cancel.child_token(),
        tracker.clone(),
    );
    let limits = limits(config);
    let max_frame = limits.max_frame_bytes;
    let host_config = HostConfig {
        replay_capacity: usize::try_from(config.u64("replayBufferSize")).unwrap_or(4096),
        outbound_capacity: usize::try_from(config.u64("outboundQueueFrames")).unwrap_or(16_384),
        limits,
        client_tool_timeout_ms: config.u64("clientToolTimeoutMs"),
        client_disconnect_grace_ms: config.u64("clientToolCallDisconnectTimeoutMs"),
        idle_unload: Some(config.u64("sessionIdleUnloadMs")).filter(|ms| *ms > 0).map(Duration::from_millis),
        default_directory: std::env::current_dir().ok(),
        settings: live_settings(config),
        config_file: Some(args_config_file(&plan)),
        root_config: Some(crate::host::rootconfig::root_config(config)),
        clock: crate::clock::Clock::from_env(),
        users: plan.users.clone(),
        root_token: plan.token.clone(),
        host_tools_withheld: crate::host::rootconfig::host_tools_withheld(config),
        ..HostConfig::default()
    };
    let store = crate::store::Store::open(&plan.paths.store()).context("could not open the session store")?;
    let tools = crate::tools::HostTools::new();
    let host = Host::new(host_config, store, supervisor.clone(), tools, cancel.clone(), tracker.clone());
    host.run_events(events_rx);
    let facts = Arc::new(Facts::new(&plan.paths, config));
    if let Some(listener) = control {
        control::server::serve(listener, host.clone(), facts.clone(), cancel.clone(), tracker.clone());
    }
    let mut record = None;
    supervisor.start_all();
    supervisor.first_starts(handshake + Duration::from_secs(2)).await;
    host.recover_interrupted();
    host.run_checkpoints();
    host.run_unloads();
    host.watch_users();

    let signals = tracker.spawn(stop_on_signal(cancel.clone())?);
    if plan.stdio {
        host.run_wakeups();
        eprintln!("ahpd over stdio");
        announce_facts(&plan, &agent_lines, |line| eprintln!("{line}"));
        server::stdio::serve(host.clone(), hard_frame_bytes(max_frame)).await;
        cancel.cancel();
    } else {
        let bind_host = config.string("host").unwrap_or_else(|| "127.0.0.1".into());
        let port = u16::try_from(config.u64("port")).unwrap_or(9187);
        let listener = bind(&bind_host, port).await?;
        let local = listener.local_addr().context("could not read the bound address")?;
        let door = DoorPolicy {
            token: plan.token.clone(),
            bound: local.ip(),
            allowed_hosts: config.strings("allowedHosts"),
            allowed_origins: config.strings("allowedOrigins"),
            hard_frame_bytes: hard_frame_bytes(max_frame),
        };
        host.lock().endpoints_mut().set_base(format!("http://{}", display_addr(&bind_host, local)));
        // Wakeups that fell due while the daemon was down begin before anyone is told it is up.
        host.run_wakeups();
        let url = format!("ws://{}", display_addr(&bind_host, local));
        // Written before the announcement, so whoever reads the announcement finds the record.
        record = Some(facts.listening(&url).context("could not write the daemon record")?);
        tracker.spawn(control::tree::keep_recorded(facts.clone(), cancel.clone()));
        println!("ahpd on {url}");
        // On a terminal the page's address carries the token, so one click opens it (the page
        // takes it out of the address). A detached daemon's output is its log, which must not
        // hold the token: `ahpd start` and `restart` add it to what they print.
        let detached = std::env::var(control::server::DETACHED_ENV).is_ok_and(|v| v == "1");
        let shown = if detached { None } else { plan.token.as_deref() };
        println!("web: {}", crate::web::page_url(&url, shown));
        announce_facts(&plan, &agent_lines, |line| println!("{line}"));
        let app = server::router(host.clone(), door);
        let shutdown = cancel.clone();
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .context("the listener failed")?;
    }
    tracing::info!("stopping: closing connections and stopping every worker");
    signals.abort();
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(15), tracker.wait()).await.is_err() {
        tracing::warn!("some tasks did not stop within 15 s");
    }
    drop(record);
    Ok(())
}

/// The limits each connection is held to, from their keys.
pub fn limits(config: &Config) -> crate::host::limits::Limits {
    let size = |key: &str| usize::try_from(config.u64(key)).unwrap_or(usize::MAX);
    crate::host::limits::Limits {
        max_frame_bytes: size("maxFrameBytes"),
        max_json_depth: size("maxJsonDepth"),
        max_subscriptions: size("maxSubscriptionsPerConnection"),
        max_pending_requests: size("maxPendingRequestsPerConnection"),
        max_sessions_per_minute: size("maxSessionsPerMinute"),
    }
}

/// The size past which a message is not even answered: the transport drops the connection (a
/// WebSocket frame) or skips the line (stdio) rather than hold it in memory.
fn hard_frame_bytes(max_frame: usize) -> usize {
    max_frame.saturating_mul(4).max(16 << 20)
}

/// The file pushed settings are kept in: `--config-file` when given, else the platform one.
fn args_config_file(plan: &Plan) -> PathBuf {
    plan.config_file.clone().unwrap_or_else(|| plan.paths.config_dir.join("config.json"))
}

/// The keys that apply live, as the configuration says at start-up.
pub fn live_settings(config: &Config) -> crate::host::LiveSettings {
    let mcp_servers =
        config.get("mcpServers").as_object().filter(|m| !m.is_empty()).map(|m| {
            m.iter().filter_map(|(k, v)| Some((k.clone(), serde_json::from_value(v.clone()).ok()?))).collect()
        });
    crate::host::LiveSettings {
        advanced_tools: config.bool("advancedTools"),
        session_tools: config.bool("sessionTools"),
        session_tools_providers: config.strings("sessionToolsProviders"),
        mcp_servers,
        orchestration_limits: config.string("agentOrchestrationLimits").as_deref() != Some("off"),
        limits_per_session: config.string("agentOrchestrationLimitsScope").as_deref() == Some("session"),
    }
}

fn display_addr(host: &str, local: SocketAddr) -> String {
    if host.parse::<IpAddr>().is_ok() {
        local.to_string()
    } else {
        format!("{host}:{}", local.port())
    }
}

fn announce_facts(plan: &Plan, agents: &[String], say: impl Fn(&str)) {
    say(&format!("agents: {}", if agents.is_empty() { "none".to_owned() } else { agents.join(", ") }));
    say(&format!("sessions in {}", plan.paths.store().display()));
    let files: Vec<String> = plan.config.files.iter().map(|f| f.display().to_string()).collect();
    say(&format!("config: {}", if files.is_empty() { "none (defaults)".to_owned() } else { files.join(", ") }));
    say(&plan.token_source.to_string());
    say(&format!("pid {}", std::process::id()));
}

async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&target).await.with_context(|| format!("could not listen on {target}"))
}

/// Installs the stop-signal handlers now (before the announcement, so a SIGTERM that follows it
/// is always a clean stop) and answers the task that waits for one.
fn stop_on_signal(cancel: CancellationToken) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("could not listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("could not listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
            _ = cancel.cancelled() => return,
        }
        cancel.cancel();
    })
}

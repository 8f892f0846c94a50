//! The foreground daemon: configuration, workers, the host, the listener, the announcement, and an
//! orderly stop on SIGTERM/SIGINT that leaves no process behind.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
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
use crate::logging;
use crate::paths::Paths;
use crate::server::{self, DoorPolicy};
use crate::supervisor::Supervisor;

/// Exit code for bad usage or a configuration that cannot start.
pub const EXIT_USAGE: u8 = 2;

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

/// Everything the daemon needs, worked out before anything starts.
pub struct Plan {
    /// Its folders.
    pub paths: Paths,
    /// The configuration in force.
    pub config: Config,
    /// The token, if any.
    pub token: Option<String>,
    /// Where it came from.
    pub token_source: crate::token::Source,
    /// Serve stdio rather than a port.
    pub stdio: bool,
    /// `--config-file`, when given.
    pub config_file: Option<PathBuf>,
    /// The users directory, when one is configured (read and checked before anything starts).
    pub users: Option<crate::users::Users>,
    /// The log filter (`AHPD_LOG`, else `RUST_LOG`, else `info`), checked.
    pub log_filter: String,
    /// The flags it was started with (a SIGHUP reads the files again under the same flags).
    pub args: DaemonArgs,
}

/// Reads the configuration and flags; a problem is a sentence and exit code 2.
pub fn plan(args: &DaemonArgs) -> Result<Plan, String> {
    let paths = Paths::platform().map_err(|e| e.to_string())?;
    let mut config = Config::load(&paths.config_dir, args.config_file.as_deref()).map_err(|e| e.to_string())?;
    apply_flags(&mut config, args).map_err(|e| e.to_string())?;
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let (token, token_source) = if args.stdio {
        (None, crate::token::Source::Stdio)
    } else {
        let resolved = crate::token::resolve(&config, &base, &paths)?;
        config.warnings.extend(resolved.warnings);
        (resolved.token, resolved.source)
    };
    let users = match config.string("users") {
        None => None,
        Some(file) => {
            let users = crate::users::Users::load(&base.join(file)).map_err(|e| e.to_string())?;
            Some(users)
        }
    };
    let log_filter = logging::filter_from_env()?;
    Ok(Plan {
        paths,
        config,
        token,
        token_source,
        stdio: args.stdio,
        config_file: args.config_file.clone(),
        users,
        log_filter,
        args: args.clone(),
    })
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT.
/// Set (to anything) in the environment of a daemon run only to check its line: it reads its
/// options and config, then exits 0, or says why not and exits 2. `ahpd restart` sets it; a
/// launched daemon never inherits it.
pub const CHECK_LINE_ENV: &str = "AHPD_CHECK_LINE";

/// Runs the daemon in the foreground. `bridge` is asked first under `--stdio`: where a daemon
/// already serves this data folder it relays stdio to it (`verbs::bridge`) and answers how that
/// ended; `None` serves in process.
pub fn run_foreground(args: DaemonArgs, bridge: fn(&Plan) -> Option<ExitCode>) -> ExitCode {
    let plan = match plan(&args) {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if std::env::var_os(CHECK_LINE_ENV).is_some() {
        // `ahpd restart` asks whether this binary can start with this line and today's config.
        for warning in &plan.config.warnings {
            eprintln!("warning: {warning}");
        }
        return ExitCode::SUCCESS;
    }
    if plan.stdio {
        // A daemon already serving this data folder is the host: stdio becomes its client.
        if let Some(ended) = bridge(&plan) {
            return ended;
        }
    }
    // Before the log, which may be a file in it.
    let tightened = match crate::fsutil::make_private(&plan.paths.data_dir) {
        Ok(tightened) => tightened,
        Err(e) => {
            eprintln!("ahpd: could not make {} private: {e}", plan.paths.data_dir.display());
            return ExitCode::FAILURE;
        }
    };
    let destination = logging::destination(&plan.paths.log());
    if let Err(why) = logging::init(&plan.log_filter, &destination, logging::Rotation::from_config(&plan.config)) {
        eprintln!("ahpd: {why}");
        return ExitCode::FAILURE;
    }
    for warning in &plan.config.warnings {
        tracing::warn!("{warning}");
    }
    for line in &tightened {
        tracing::info!("{line}");
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
    crate::fsutil::create_private_dir(&plan.paths.data_dir)
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
    let offered: Vec<control::Offered> = planned
        .iter()
        .map(|p| control::Offered {
            provider: p.spec.provider.clone(),
            kind: p.spec.kind.clone(),
            program: p.program.clone(),
            why: p.why.clone(),
        })
        .collect();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let supervisor = Supervisor::new(
        // Every backend is handed the operator's policy (seed 004).
        planned.into_iter().map(|p| crate::supervisor::WorkerSpec { policy: config.policy(), ..p.spec }).collect(),
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
        terminals: terminal_settings(config),
        attachment_limit: config.u64("attachmentLimitBytes"),
        max_backend_processes: usize::try_from(config.u64("maxBackendProcesses")).unwrap_or(0),
        policy: config.policy(),
        ..HostConfig::default()
    };
    // Made 0600 first: SQLite gives its WAL file the database's own mode.
    crate::fsutil::create_private_file(&plan.paths.store()).context("could not create the session store")?;
    let (store, recovered) = open_store(&plan)?;
    // The boxes a session may be confined in (`isolation` "sandbox", "container"), offered where
    // they work. What a past run of this daemon left on the container engine (a kill -9: session
    // containers, computers) is swept first.
    let sandbox_settings = crate::confine::SandboxSettings::of(config, &plan.paths.data_dir);
    let sandbox = crate::confine::Sandbox::new(sandbox_settings.clone(), tracker.clone(), cancel.child_token());
    let computer_settings = crate::confine::computer::ComputerSettings::of(config);
    let owner = plan.paths.data_dir.display().to_string();
    let (engine, answered) = crate::confine::engine::at_start(&computer_settings.engine, &owner).await;
    let container = crate::confine::container::Container::new(
        engine,
        answered,
        crate::confine::container::ContainerSettings::of(config, &sandbox_settings),
        tracker.clone(),
        cancel.child_token(),
    );
    let confine = crate::confine::Confine::new(vec![sandbox.clone(), container], tracker.clone());
    // The computer plugin: its tools reach it once it is registered.
    let computers = Arc::new(crate::confine::computer::Computers::new(computer_settings, &owner));
    crate::tools::computer::serve(computers);
    let mut isolation = worktree_settings(config, &plan.paths.data_dir);
    isolation.boxes = confine.offered();
    let worktrees = crate::worktrees::Worktrees::new(isolation)
        .context("could not make a private scratch folder for the worktrees' snapshots")?;
    let features =
        crate::host::facade::Features { tools: crate::tools::HostTools::new(), workspaces: worktrees.clone() };
    let host = Host::new(host_config, store, supervisor.clone(), features, cancel.clone(), tracker.clone());
    // Content a tool result carries inline, kept in each session's folder (before any worker talks).
    host.serve_resources(crate::kept::Kept::new(&plan.paths.data_dir, config.u64("toolResultResourceLimitBytes")));
    worktrees.start(&host);
    host.run_events(events_rx);
    host.serve_terminals(crate::terminals::Terminals::new(&host));
    confine.asking(host.downgrade());
    host.serve_boxes(confine);
    let agent_merge = crate::agentmerge::AgentMerge::new(crate::agentmerge::Settings::of(config));
    host.serve_agent_merge(agent_merge.clone());
    let facts = Arc::new(
        Facts::new(&plan.paths, config, plan.token.clone(), plan.token_source.file(), offered)
            .with_recovery(recovered.clone()),
    );
    tracker.spawn(crate::store::backup::keep_backing_up(
        plan.paths.store(),
        crate::store::backup::folder(&plan.paths.data_dir),
        backup_schedule(config),
        cancel.clone(),
    ));
    if let Some(listener) = control {
        control::server::serve(listener, host.clone(), facts.clone(), cancel.clone(), tracker.clone());
    }
    let mut record = None;
    supervisor.start_all();
    supervisor.first_starts(handshake + Duration::from_secs(2)).await;
    host.recover_interrupted();
    host.run_checkpoints();
    host.watch_store();
    host.run_unloads();
    host.run_delta_flushes();
    host.watch_users();
    // The folders Agent Merge is on for are watched again, once the agents are up (a repair turn
    // needs its chat's agent).
    agent_merge.resume(&host);
    // Automations: their catalogue and runs served, a run a crash cut ended, the schedules looked
    // at (what fell due while the daemon was down under each trigger's misfire policy).
    crate::automations::Automations::start(&host, crate::automations::github_watch::Settings::of(config));
    // Other ahpd hosts whose agents and sessions this one serves (`remotes/`, docs/remotes.md).
    let remotes = crate::remotes::spec::parse(&config.get("remotes")).unwrap_or_default();
    if !remotes.is_empty() {
        let remotes = crate::remotes::Remotes::new(remotes);
        host.serve_remotes(remotes.clone());
        remotes.start(&host);
    }

    let signals = tracker.spawn(stop_on_signal(cancel.clone())?);
    tracker.spawn(reread_on_hangup(
        host.clone(),
        plan.paths.clone(),
        plan.args.clone(),
        config.clone(),
        cancel.clone(),
    )?);
    if plan.stdio {
        host.run_wakeups();
        eprintln!("ahpd over stdio, in process (no daemon runs on {})", plan.paths.data_dir.display());
        announce_facts(&plan, &agent_lines, recovered.as_ref(), |line| eprintln!("{line}"));
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
            max_connections: usize::try_from(config.u64("maxConnections")).unwrap_or(usize::MAX),
        };
        host.lock().endpoints_mut().set_base(format!("http://{}", display_addr(&bind_host, local)));
        // A sandboxed session reaches the daemon's /ahp-mcp through its box's relay.
        sandbox.listening(local.port());
        // Wakeups that fell due while the daemon was down begin before anyone is told it is up.
        host.run_wakeups();
        let url = format!("ws://{}", display_addr(&bind_host, local));
        // Written before the announcement, so whoever reads the announcement finds the record.
        record = Some(facts.listening(&url).context("could not write the daemon record")?);
        tracing::info!("listening on {url}");
        tracker.spawn(control::tree::keep_recorded(facts.clone(), cancel.clone()));
        println!("ahpd on {url}");
        // On a terminal the page's address carries the token, so one click opens it (the page
        // takes it out of the address). The output of a detached or service-run daemon is a log
        // (its own, or the manager's journal), which must not hold the token: `ahpd start` and
        // `restart` add it to what they print.
        let to_a_log = matches!(logging::destination(&plan.paths.log()), logging::Destination::File(_));
        let shown = if to_a_log { None } else { plan.token.as_deref() };
        println!("web: {}", crate::web::page_url(&url, shown));
        announce_facts(&plan, &agent_lines, recovered.as_ref(), |line| println!("{line}"));
        let app = server::router(host.clone(), door, cancel.child_token());
        let shutdown = cancel.clone();
        axum::serve(listener.tap_io(without_nagle), app.into_make_service_with_connect_info::<SocketAddr>())
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

/// Opens the session store, checked first: a damaged one is moved aside and what it still holds
/// recovered into a fresh one, which the person is told of on stderr (and `ahpd status` says).
fn open_store(plan: &Plan) -> anyhow::Result<(crate::store::Store, Option<crate::store::recovery::Recovery>)> {
    let path = plan.paths.store();
    let (store, recovered) = crate::store::recovery::open_checked(&path).context("could not open the session store")?;
    if let Some(recovery) = &recovered {
        let backups = crate::store::backup::list(&crate::store::backup::folder(&plan.paths.data_dir));
        let mut said = recovery.describe();
        if let Some(newest) = backups.first() {
            said.push_str(&format!(
                " The newest backup is {}: `ahpd stop` then `ahpd store restore {}` goes back to it.",
                newest.display(),
                newest.display()
            ));
        }
        tracing::warn!("{said}");
    }
    Ok((store, recovered))
}

/// When the store is backed up, from `storeBackups` and `storeBackupIntervalMs`.
pub fn backup_schedule(config: &Config) -> crate::store::backup::Schedule {
    crate::store::backup::Schedule {
        keep: usize::try_from(config.u64("storeBackups")).unwrap_or(0),
        every: Duration::from_millis(config.u64("storeBackupIntervalMs")),
    }
}

/// How sessions are isolated, from `isolation`, `isolationProviders` and `worktreesRoot` (a
/// relative root is taken from the daemon's working folder).
pub fn worktree_settings(config: &Config, data_dir: &std::path::Path) -> crate::worktrees::Settings {
    let root = match config.string("worktreesRoot") {
        Some(root) => std::env::current_dir().map(|cwd| cwd.join(&root)).unwrap_or_else(|_| root.into()),
        None => data_dir.join("worktrees"),
    };
    crate::worktrees::Settings {
        root,
        worktree_by_default: config.string("isolation").as_deref() == Some("worktree"),
        worktree_providers: config.strings("isolationProviders"),
        boxes: Vec::new(),
        box_by_default: config.string("isolation").filter(|i| crate::confine::LEVELS.contains(&i.as_str())),
    }
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

/// What terminals may hold and where they run, from their keys.
pub fn terminal_settings(config: &Config) -> crate::host::config::TerminalSettings {
    let size = |key: &str| usize::try_from(config.u64(key)).unwrap_or(usize::MAX);
    crate::host::config::TerminalSettings {
        per_session: size("maxTerminalsPerSession"),
        per_client: size("maxTerminalsPerConnection"),
        scrollback_bytes: size("terminalScrollbackBytes"),
        default_shell: config.string("defaultShell").map(PathBuf::from),
        command_timeout_ms: config.u64("shellCommandTimeoutMs"),
    }
}

/// The size past which a message is not even answered: the transport drops the connection (a
/// WebSocket frame) or skips the line (stdio) rather than hold it in memory.
pub fn hard_frame_bytes(max_frame: usize) -> usize {
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
        delta_window_ms: config.u64("deltaWindowMs"),
    }
}

fn display_addr(host: &str, local: SocketAddr) -> String {
    if host.parse::<IpAddr>().is_ok() {
        local.to_string()
    } else {
        format!("{host}:{}", local.port())
    }
}

fn announce_facts(
    plan: &Plan,
    agents: &[String],
    recovered: Option<&crate::store::recovery::Recovery>,
    say: impl Fn(&str),
) {
    say(&format!("agents: {}", if agents.is_empty() { "none".to_owned() } else { agents.join(", ") }));
    say(&format!("sessions in {}", plan.paths.store().display()));
    if let Some(recovery) = recovered {
        say(&format!("store recovered: {}", recovery.describe()));
    }
    let files: Vec<String> = plan.config.files.iter().map(|f| f.display().to_string()).collect();
    say(&format!("config: {}", if files.is_empty() { "none (defaults)".to_owned() } else { files.join(", ") }));
    say(&plan.token_source.to_string());
    say(&format!("pid {}", std::process::id()));
}

/// Streamed deltas are small frames written one after another. With Nagle's algorithm a frame
/// written while the one before is unacknowledged waits for the client's delayed ACK, up to 40 ms
/// on Linux: that was the p99 of a realistic load (docs/benchmarks.md, "Nagle").
fn without_nagle(stream: &mut tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY on a connection: {e}");
    }
}

async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&target).await.with_context(|| format!("could not listen on {target}"))
}

/// Installs the SIGHUP handler now; each SIGHUP reads the config files again (under the same
/// flags) and applies the keys that apply live and changed, as a root config push would. A key
/// that applies after a restart is logged and the root state says a restart is needed; a file that
/// does not read leaves everything as it was.
fn reread_on_hangup(
    host: Host,
    paths: Paths,
    args: DaemonArgs,
    mut current: Config,
    cancel: CancellationToken,
) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("could not listen for SIGHUP")?;
    Ok(async move {
        loop {
            tokio::select! {
                _ = hangup.recv() => {}
                _ = cancel.cancelled() => return,
            }
            let mut next = match Config::load(&paths.config_dir, args.config_file.as_deref()) {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!("SIGHUP: the config was not read again, nothing changed: {e}");
                    continue;
                }
            };
            if let Err(e) = apply_flags(&mut next, &args) {
                tracing::warn!("SIGHUP: nothing changed: {e}");
                continue;
            }
            for warning in &next.warnings {
                tracing::warn!("SIGHUP: {warning}");
            }
            let (live, shown) = changes(&current, &next);
            if shown.is_empty() {
                tracing::info!("SIGHUP: the config was read again; nothing changed");
            }
            host.config_reread(live, shown);
            current = next;
        }
    })
}

/// What changed between two readings of the config: the live keys with their new values, and
/// what the root state shows of them (and `restartNeeded` when a restart key changed).
fn changes(before: &Config, after: &Config) -> (Vec<(String, Value)>, serde_json::Map<String, Value>) {
    let mut live = Vec::new();
    let mut shown = serde_json::Map::new();
    for spec in crate::config::KEYS {
        if before.get(spec.name) == after.get(spec.name) {
            continue;
        }
        match spec.applies {
            crate::config::Applies::Live => {
                tracing::info!("SIGHUP: {} now applies as {}", spec.name, after.shown_value(spec.name));
                live.push((spec.name.to_owned(), after.get(spec.name)));
                shown.insert(spec.name.to_owned(), after.shown_value(spec.name));
            }
            crate::config::Applies::Restart => {
                tracing::info!("SIGHUP: {} changed; it applies after ahpd restart", spec.name);
                shown.insert(crate::host::rootconfig::RESTART_NEEDED.to_owned(), Value::Bool(true));
            }
        }
    }
    (live, shown)
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

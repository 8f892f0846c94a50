//! Runs the real `ahpd` binary as a child process in its own folders, reads its announcement, and
//! stops or kills it.
//!
//! A daemon started with no token choice makes its own connection token (kept in its data folder):
//! the harness reads it and the test clients ([`with_token`]) present it to that daemon unless the
//! URL names a token of its own. A test that chooses a token, or asks for none, presents what it
//! chose.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use agent_runner::lock;
use anyhow::{anyhow, bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The `ahpd` binary the tests run: `$AHPD_BIN`, else `target/debug/ahpd` of this workspace.
pub fn ahpd_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AHPD_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target"));
    let bin = target.join("debug").join("ahpd");
    assert!(
        bin.exists(),
        "{} does not exist: run scripts/test (or `cargo build -p ahpd`) before the end-to-end tests",
        bin.display()
    );
    bin
}

/// The tokens of the daemons the harness started with a token of their own making, by
/// `host:port`.
static TOKENS: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// `ws://host:port/...` → `host:port`.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

fn remember_token(url: &str, token: &str) {
    lock(&TOKENS).insert(authority(url).to_owned(), token.to_owned());
}

/// `url` with the connection token of the daemon there, when the harness started it with a token of
/// its own making and the URL names no token.
pub fn with_token(url: &str) -> String {
    if url.contains("tkn=") || url.contains("token=") {
        return url.to_owned();
    }
    let Some(token) = lock(&TOKENS).get(authority(url)).cloned() else {
        return url.to_owned();
    };
    let host = authority(url);
    let path = url.find(host).map_or("", |at| &url[at + host.len()..]);
    if url.contains('?') {
        format!("{url}&tkn={token}")
    } else if path.is_empty() {
        format!("{url}/?tkn={token}")
    } else {
        format!("{url}?tkn={token}")
    }
}

/// The token the daemon whose folders are under `home` keeps (the file its record names, else
/// the one it makes in its data folder).
pub fn kept_token(home: &Path) -> Option<String> {
    let data = home.join("data").join("ahpd");
    let record: Option<serde_json::Value> =
        std::fs::read(data.join("daemon.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let file = record
        .and_then(|r| r["tokenFile"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| data.join("connection-token"));
    std::fs::read_to_string(file).ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

/// How to start a daemon.
#[derive(Clone, Default)]
pub struct DaemonOptions {
    /// `config.json` contents (written to the daemon's own config folder).
    pub config: Option<serde_json::Value>,
    /// Extra command-line arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The binary to run, when not this workspace's (an installed one).
    pub bin: Option<PathBuf>,
}

impl DaemonOptions {
    /// A daemon with this config.
    pub fn with_config(config: serde_json::Value) -> Self {
        Self { config: Some(config), ..Self::default() }
    }

    /// The config file to write: the test's, with `deltaWindowMs` 0 unless the test sets it, and
    /// on the manual clock one holding just that. Tests that count streamed pieces or frames
    /// (and, on the manual clock, wait for streamed text mid-turn, where a window ends only when
    /// the test moves the clock) see every delta as the backend said it; a daemon started with no
    /// config runs with the default window, and tests/coalescing.rs turns it on and moves the clock.
    fn config_to_write(&self) -> Option<serde_json::Value> {
        let manual = self.env.iter().any(|(k, v)| k == "AHPD_TEST_CLOCK" && v == "manual");
        let mut config = self.config.clone();
        if manual {
            config.get_or_insert_with(|| serde_json::json!({}));
        }
        if let Some(serde_json::Value::Object(keys)) = config.as_mut() {
            keys.entry("deltaWindowMs").or_insert(serde_json::json!(0));
        }
        config
    }

    /// The test chose the daemon's token (or none): the harness presents nothing for it.
    fn chooses_a_token(&self) -> bool {
        let flags = ["--connection-token", "--connection-token-file", "--without-connection-token"];
        let keys = ["connectionToken", "connectionTokenFile", "withoutConnectionToken"];
        self.args.iter().any(|a| flags.iter().any(|f| a == f || a.starts_with(&format!("{f}="))))
            || self.config.as_ref().is_some_and(|c| keys.iter().any(|k| c.get(k).is_some()))
    }

    /// These options on the manual clock, unloading sessions idle for `ms` of it.
    pub fn unloading_idle_after(mut self, ms: u64) -> Self {
        let config = self.config.get_or_insert_with(|| serde_json::json!({}));
        config["sessionIdleUnloadMs"] = serde_json::json!(ms);
        self.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
        self
    }
}

/// A running daemon.
pub struct Daemon {
    child: Child,
    /// Its `ws://` URL (without a token).
    pub url: String,
    /// The folder its XDG config and data folders live in.
    pub home: PathBuf,
    /// The connection token it made (none when the test chose its token, or none).
    pub token: Option<String>,
    _dir: Option<tempfile::TempDir>,
    /// Everything it wrote to stdout after the first line.
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// Everything it wrote to stderr.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Its `ahpd worker <kind>` process (the first, when it runs several).
    pub fn worker(&self) -> Option<i32> {
        children_of(self.pid()).into_iter().find(|pid| cmdline(*pid).contains("worker"))
    }

    /// Starts a daemon with echo only, on a free port, in a fresh folder.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(DaemonOptions::default()).await
    }

    /// Starts a daemon in a fresh folder.
    pub async fn start_with(options: DaemonOptions) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ahpd-test-").tempdir().context("temp dir")?;
        let home = dir.path().to_owned();
        let mut daemon = Self::start_in(&home, options).await?;
        daemon._dir = Some(dir);
        Ok(daemon)
    }

    /// Starts a daemon whose folders are under `home` (kept: a second daemon can start there).
    pub async fn start_in(home: &Path, options: DaemonOptions) -> anyhow::Result<Self> {
        let config_dir = home.join("config").join("ahpd");
        std::fs::create_dir_all(&config_dir)?;
        if let Some(config) = options.config_to_write() {
            std::fs::write(config_dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
        }
        let mut command = Command::new(options.bin.clone().unwrap_or_else(ahpd_bin));
        if !options.args.iter().any(|a| a == "--port") {
            command.args(["--port", "0"]);
        }
        command
            .args(&options.args)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("HOME", home)
            .env_remove("AHPD_CONFIG")
            .env_remove("AHPD_SERVICE")
            .env("AHPD_LOG", std::env::var("AHPD_LOG").unwrap_or_else(|_| "info".into()))
            .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("spawning ahpd")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let err_lines = Arc::new(Mutex::new(Vec::new()));
        let stderr_read = {
            let err_lines = err_lines.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if std::env::var_os("AHPD_TEST_ECHO_LOG").is_some() {
                        eprintln!("[ahpd] {line}");
                    }
                    lock(&err_lines).push(line);
                }
            })
        };
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let first = match first {
            Ok(Ok(Some(line))) => line,
            other => {
                // A daemon that exited said why on stderr: wait for it and for its stderr's end
                // (bounded: a daemon still running says nothing more), so the why is read.
                let status =
                    tokio::time::timeout(Duration::from_secs(10), child.wait()).await.ok().and_then(Result::ok);
                let _ = tokio::time::timeout(Duration::from_secs(10), stderr_read).await;
                let log = lock(&err_lines).join("\n");
                bail!("ahpd did not announce itself ({other:?}, exit {status:?}); its stderr:\n{log}");
            }
        };
        let url =
            first.strip_prefix("ahpd on ").ok_or_else(|| anyhow!("unexpected first line: {first}"))?.trim().to_owned();
        let out_lines = Arc::new(Mutex::new(Vec::new()));
        {
            let out_lines = out_lines.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    lock(&out_lines).push(line);
                }
            });
        }
        let token = if options.chooses_a_token() { None } else { kept_token(home) };
        if let Some(token) = &token {
            remember_token(&url, token);
        }
        Ok(Self { child, url, home: home.to_owned(), token, _dir: None, stdout: out_lines, stderr: err_lines })
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0)
    }

    /// `ahpd status --json`, asked of it through its control socket.
    pub async fn status(&self) -> anyhow::Result<serde_json::Value> {
        let run = run_ahpd(&self.home, &["status", "--json"]).await?;
        if run.code != 0 {
            bail!("ahpd status exited {}: {}", run.code, run.stderr);
        }
        serde_json::from_str(&run.stdout).with_context(|| format!("ahpd status --json said {}", run.stdout))
    }

    /// How many sessions it holds in memory now (from `ahpd status`).
    pub async fn loaded_sessions(&self) -> anyhow::Result<u64> {
        let status = self.status().await?;
        status["loadedSessions"].as_u64().ok_or_else(|| anyhow!("no loadedSessions in {status}"))
    }

    /// Waits until `ahpd status` counts `want` clients in their disconnect grace period (a closed
    /// connection the host has seen), asking again after each answer.
    pub async fn until_clients_away(&self, want: u64) -> anyhow::Result<()> {
        let mut seen = None;
        for _ in 0..1000 {
            let status = self.status().await?;
            let away = status["clientsAway"].as_u64().ok_or_else(|| anyhow!("no clientsAway in {status}"))?;
            if away >= want {
                return Ok(());
            }
            seen = Some(away);
        }
        bail!("never {want} clients away (last {seen:?})")
    }

    /// Moves its manual clock `step_ms` at a time (through `clock`, a connection to it) until it
    /// holds `want` sessions in memory; more than `want` left after a hundred steps, or fewer than
    /// `want` at any reading, is an error.
    pub async fn advance_until_loaded(&self, clock: &crate::TestClient, step_ms: u64, want: u64) -> anyhow::Result<()> {
        let mut seen = Vec::new();
        for _ in 0..100 {
            let loaded = self.loaded_sessions().await?;
            if loaded <= want {
                anyhow::ensure!(loaded == want, "{loaded} sessions loaded, expected {want}");
                return Ok(());
            }
            seen.push(loaded);
            crate::clock::advance(clock, step_ms).await?;
        }
        bail!("never down to {want} loaded sessions: {seen:?}")
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        lock(&self.stderr).join("\n")
    }

    /// Waits until its stderr has a line containing `needle`.
    pub async fn wait_for_log(&self, needle: &str, within: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(line) = lock(&self.stderr).iter().find(|l| l.contains(needle)) {
                return Ok(line.clone());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the daemon's log never said {needle:?}; it said:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until what it printed after its first line has a line containing `needle` (the rest
    /// of its announcement is read after the first line is answered).
    pub async fn wait_for_said(&self, needle: &str, within: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(line) = lock(&self.stdout).iter().find(|l| l.contains(needle)) {
                return Ok(line.clone());
            }
            if tokio::time::Instant::now() > deadline {
                let said = lock(&self.stdout).join("\n");
                bail!("the daemon never said {needle:?}; it said:\n{said}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends SIGTERM and waits for it to exit.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGTERM)?;
        Ok(tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await??)
    }

    /// Kills it with SIGKILL (no chance to tidy up) and reaps it.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGKILL)?;
        self.child.wait().await?;
        Ok(())
    }
}

/// Runs `ahpd <args>` with its folders under `home` and waits for it (a generous bound as a
/// safety net).
pub async fn run_ahpd(home: &Path, args: &[&str]) -> anyhow::Result<VerbRun> {
    run_ahpd_with(home, args, &[]).await
}

/// [`run_ahpd`] with more variables in its environment.
pub async fn run_ahpd_with(home: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<VerbRun> {
    let mut command = Command::new(ahpd_bin());
    command
        .args(args)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("HOME", home)
        .env_remove("AHPD_CONFIG")
        .env_remove("AHPD_DETACHED")
        .env_remove("AHPD_SERVICE")
        .envs(env.iter().copied())
        .current_dir(home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .with_context(|| format!("ahpd {args:?} did not finish"))?
        .with_context(|| format!("running ahpd {args:?}"))?;
    let run = VerbRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    // A daemon `start` or `restart` announced: its clients present the token it keeps.
    for line in run.stdout.lines().filter_map(|l| l.strip_prefix("ahpd on ")) {
        if let (Some(url), Some(token)) = (line.split_whitespace().next(), kept_token(home)) {
            remember_token(url, &token);
        }
    }
    Ok(run)
}

/// Every process whose parent is `pid` (from /proc).
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|child| parent_of(*child) == Some(pid))
        .collect()
}

/// Every process below `pid`: its children, theirs, and so on (from /proc).
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let children = children_of(parent);
        next.extend(&children);
        found.extend(children);
    }
    found
}

/// A process's command line, its arguments joined with spaces (from /proc); empty once it is gone.
pub fn cmdline(pid: i32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&bytes).split('\0').filter(|a| !a.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Polls /proc until none of `pids` is alive, with a generous failure bound, and prints how long
/// that took after `since` (a measurement to read, not a limit asserted). Answers those still alive.
pub async fn until_all_gone(pids: &[i32], since: &str) -> Vec<i32> {
    let started = std::time::Instant::now();
    let alive_of = || pids.iter().copied().filter(|p| alive(*p)).collect::<Vec<_>>();
    let mut left = alive_of();
    while !left.is_empty() && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = alive_of();
    }
    eprintln!("{} of {} processes gone {:?} after {since}", pids.len() - left.len(), pids.len(), started.elapsed());
    left
}

/// A process's parent (from /proc).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// True while a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// What one run of an `ahpd` verb did.
#[derive(Debug)]
pub struct VerbRun {
    /// Its exit code (-1 when a signal ended it).
    pub code: i32,
    /// What it printed.
    pub stdout: String,
    /// What it printed to stderr.
    pub stderr: String,
}

/// A user's home for the verbs: its own XDG config and data folders (the same layout
/// [`Daemon::start_in`] uses), where `ahpd start|stop|status|restart|config` run as a person would
/// run them. Dropping it stops a daemon its record still names, so a failing test leaves no
/// process behind.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// A fresh home.
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ahpd-home-").tempdir().context("temp dir")?;
        std::fs::create_dir_all(dir.path().join("config").join("ahpd"))?;
        Ok(Self { dir })
    }

    /// Its folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Its `config.json`.
    pub fn config_file(&self) -> PathBuf {
        self.path().join("config").join("ahpd").join("config.json")
    }

    /// Writes `config.json`.
    pub fn write_config(&self, config: &serde_json::Value) -> anyhow::Result<()> {
        std::fs::write(self.config_file(), serde_json::to_vec_pretty(config)?)?;
        Ok(())
    }

    /// The daemon's data folder.
    pub fn data_dir(&self) -> PathBuf {
        self.path().join("data").join("ahpd")
    }

    /// The daemon record, when there is one.
    pub fn record(&self) -> Option<serde_json::Value> {
        let bytes = std::fs::read(self.data_dir().join("daemon.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Runs `ahpd <args>` here and waits for it (a generous bound as a safety net).
    pub async fn ahpd(&self, args: &[&str]) -> anyhow::Result<VerbRun> {
        run_ahpd(self.path(), args).await
    }

    /// Runs `ahpd <args>` and insists on exit code `code`.
    pub async fn expect(&self, code: i32, args: &[&str]) -> anyhow::Result<VerbRun> {
        self.expect_with(code, args, &[]).await
    }

    /// [`Home::expect`] with more variables in its environment.
    pub async fn expect_with(&self, code: i32, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<VerbRun> {
        let run = run_ahpd_with(self.path(), args, env).await?;
        if run.code != code {
            bail!(
                "ahpd {} exited {} (expected {code});\nstdout:\n{}\nstderr:\n{}\nlog:\n{}",
                args.join(" "),
                run.code,
                run.stdout,
                run.stderr,
                self.log()
            );
        }
        Ok(run)
    }

    /// The detached daemons' log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let Some(pid) = self.record().and_then(|r| r["pid"].as_i64()).and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        if !alive(pid) {
            return;
        }
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive(pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A port nothing listens on right now (for a daemon that must keep its port across a restart).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until `pid` has exited (a safety-net bound, not a measurement).
pub async fn until_exited(pid: i32) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        if tokio::time::Instant::now() > deadline {
            bail!("pid {pid} is still alive");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

//! A good citizen on a developer's laptop, through the real binary: a connection token by default
//! (made once, kept 0600, kept across a restart), secrets kept out of the record, `status`,
//! `config` and the log, private files, a limit on connections, SIGHUP, logs that rotate while the
//! daemon runs, the service unit, the agents it finds, completions, and progress while a verb waits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use ahp_types::state::{SnapshotState, TurnState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::daemon::{kept_token, run_ahpd};
use tests::raw::upgrade_as_given;
use tests::{Daemon, DaemonOptions, Home, TestClient};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
}

#[tokio::test]
async fn with_no_token_choice_a_token_is_made_kept_private_and_kept_across_a_restart() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-citizen-").tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    let token = daemon.token.clone().expect("the daemon made a token");
    let file = home.path().join("data/ahpd/connection-token");
    assert_eq!(std::fs::read_to_string(&file)?.trim(), token);
    assert_eq!(mode(&file), 0o600, "the token file is the owner's alone");

    assert_eq!(upgrade_as_given(&daemon.url, &[]).await.err(), Some(401), "no token, no connection");
    assert_eq!(upgrade_as_given(&format!("{}/?tkn=wrong", daemon.url), &[]).await.err(), Some(401));
    let mut client = TestClient::connect(&format!("{}/?tkn={token}", daemon.url), "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    assert_eq!(client.turn(&chat, "hello").await?.state, TurnState::Complete);
    daemon.wait_for_said("token: made and kept in", tests::PATIENCE).await?;
    assert!(!daemon.log().contains(&token), "the token is never logged");
    drop(client);
    daemon.terminate().await?;

    let again = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    assert_eq!(again.token.as_deref(), Some(token.as_str()), "a restart keeps the same token");
    assert_eq!(kept_token(home.path()).as_deref(), Some(token.as_str()));
    assert_eq!(upgrade_as_given(&again.url, &[]).await.err(), Some(401));
    assert!(upgrade_as_given(&again.url, &[("authorization", &format!("Bearer {token}"))]).await.is_ok());
    again.wait_for_said(&format!("token: kept in {}", file.display()), tests::PATIENCE).await?;
    Ok(())
}

#[tokio::test]
async fn without_a_token_the_daemon_says_the_risk() -> anyhow::Result<()> {
    let options = DaemonOptions { args: vec!["--without-connection-token".into()], ..Default::default() };
    let daemon = Daemon::start_with(options).await?;
    assert!(upgrade_as_given(&daemon.url, &[]).await.is_ok(), "no token asked");
    let warning = daemon.wait_for_log("no connection token", tests::PATIENCE).await?;
    assert!(warning.contains("every account on this machine"), "{warning}");
    assert!(!daemon.home.join("data/ahpd/connection-token").exists(), "none was made");
    let run = run_ahpd(&daemon.home, &["status", "--json"]).await?;
    assert_eq!(run.code, 0, "{run:?}");
    Ok(())
}

#[tokio::test]
async fn a_token_on_the_command_line_is_in_no_record_status_config_or_log() -> anyhow::Result<()> {
    const SECRET: &str = "s3cret-on-the-line";
    let home = tests::Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    let started = home.expect(0, &["start", "--port", "0", "--connection-token", SECRET]).await?;
    assert!(started.stderr.contains("--connection-token-file"), "a warning suggests a file: {}", started.stderr);
    let url = started.stdout.lines().next().and_then(|l| l.split_whitespace().nth(2)).unwrap_or_default().to_owned();
    let mut client = TestClient::connect(&format!("{url}/?tkn={SECRET}"), "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "hello").await?;

    let record = std::fs::read_to_string(home.data_dir().join("daemon.json"))?;
    assert!(!record.contains(SECRET), "{record}");
    assert!(record.contains("<set>"), "the record says a token was given: {record}");
    let status = home.expect(0, &["status", "--json"]).await?.stdout;
    assert!(!status.contains(SECRET), "{status}");
    let text = home.expect(0, &["status"]).await?.stdout;
    assert!(!text.contains(SECRET), "{text}");
    let config = home.expect(0, &["config", "--connection-token", SECRET]).await?;
    assert!(!config.stdout.contains(SECRET) && !config.stderr.contains(SECRET), "{config:?}");
    let config = home.expect(0, &["config", "--json", "--connection-token", SECRET]).await?;
    assert!(!config.stdout.contains(SECRET), "{}", config.stdout);
    let log = home.log();
    assert!(log.contains("--connection-token-file"), "the daemon warns in its log too:\n{log}");
    assert!(!log.contains(SECRET), "{log}");
    drop(client);
    home.expect(0, &["stop"]).await?;
    assert!(!home.log().contains(SECRET));
    Ok(())
}

#[tokio::test]
async fn a_fresh_start_keeps_every_file_private() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let url = started.stdout.lines().next().and_then(|l| l.split_whitespace().nth(2)).unwrap_or_default().to_owned();
    let mut client = TestClient::connect(&url, "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "something to keep").await?;

    let data = home.data_dir();
    assert_eq!(mode(&data), 0o700, "the data folder");
    for name in ["sessions.db", "sessions.db-wal", "daemon.json", "ahpd.sock", "daemon.log", "connection-token"] {
        assert!(data.join(name).exists(), "{name} exists");
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
    // The log's index lives in the daemon's memory, never in a mapped `-shm` file (store/mod.rs).
    assert!(!data.join("sessions.db-shm").exists(), "no -shm file");
    drop(client);
    home.expect(0, &["stop"]).await?;
    Ok(())
}

#[tokio::test]
async fn a_looser_data_folder_is_tightened_at_start_and_says_so() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-citizen-").tempdir()?;
    let data = home.path().join("data/ahpd");
    std::fs::create_dir_all(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(data.join("sessions.db"), b"")?;
    std::fs::set_permissions(data.join("sessions.db"), std::fs::Permissions::from_mode(0o644))?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    let said = daemon.wait_for_log("tightened", tests::PATIENCE).await?;
    assert!(said.contains("from 755 to 700"), "{said}");
    daemon.wait_for_log("sessions.db", tests::PATIENCE).await?;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("sessions.db")), 0o600);
    Ok(())
}

fn hang_up(pid: i32) -> anyhow::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)?;
    Ok(())
}

/// Waits until `file` holds a line with `needle` (a safety-net bound, not a measurement).
async fn until_in(file: &Path, needle: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + tests::PATIENCE;
    while !std::fs::read_to_string(file).unwrap_or_default().contains(needle) {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{} never said {needle:?}", file.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn root_values(client: &TestClient) -> serde_json::Map<String, Value> {
    match client.mirror.states.get(ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(r)) => r.config.as_ref().map(|c| c.values.clone()).unwrap_or_default(),
        _ => Default::default(),
    }
}

#[tokio::test]
async fn sighup_reads_the_config_again_and_applies_a_changed_live_key() -> anyhow::Result<()> {
    let agents = json!({ "notes": tests::agents::notes() });
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "agents": agents }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    assert_eq!(root_values(&a)["advancedTools"], false);

    let file = daemon.home.join("config/ahpd/config.json");
    let changed = json!({ "agents": agents, "advancedTools": true, "replayBufferSize": 2000 });
    std::fs::write(&file, serde_json::to_vec_pretty(&changed)?)?;
    hang_up(daemon.pid())?;
    a.until("the changed key on the root state", |m| {
        matches!(m.states.get(ROOT_RESOURCE_URI), Some(SnapshotState::Root(r)) if r.config.as_ref().is_some_and(|c| {
            c.values.get("advancedTools") == Some(&json!(true)) && c.values.get("restartNeeded") == Some(&json!(true))
        }))
    })
    .await?;
    a.check_against_snapshot(ROOT_RESOURCE_URI).await?;
    daemon.wait_for_log("SIGHUP: advancedTools now applies as true", tests::PATIENCE).await?;
    daemon.wait_for_log("SIGHUP: replayBufferSize changed; it applies after ahpd restart", tests::PATIENCE).await?;

    std::fs::write(&file, "{ not json")?;
    hang_up(daemon.pid())?;
    daemon.wait_for_log("SIGHUP: the config was not read again, nothing changed", tests::PATIENCE).await?;
    assert_eq!(root_values(&a)["advancedTools"], true, "a file that does not read changes nothing");
    Ok(())
}

/// The daemon `ahpd start` announced: (url, pid).
fn announced(stdout: &str) -> (String, i32) {
    let first = stdout.lines().next().unwrap_or_default();
    let url = first.split_whitespace().nth(2).unwrap_or_default().to_owned();
    let pid = first.split("(pid ").nth(1).and_then(|p| p.split(')').next()).and_then(|p| p.parse().ok());
    (url, pid.unwrap_or(0))
}

#[tokio::test]
async fn the_log_rotates_while_the_daemon_runs_keeps_so_many_files_and_ahpd_logs_follows_it() -> anyhow::Result<()> {
    let home = Home::new()?;
    let config = |n: usize| {
        json!({ "agents": { "echo": tests::agents::echo() }, "logMaxBytes": 1024, "logFiles": 2,
                                    "sessionToolsProviders": [format!("p{n}")] })
    };
    home.write_config(&config(0))?;
    let (_url, pid) = announced(&home.expect(0, &["start", "--port", "0"]).await?.stdout);
    let log = home.data_dir().join("daemon.log");
    // Each SIGHUP logs the provider it now names: a line that is the log's newest when it appears.
    for n in 1..=40 {
        home.write_config(&config(n))?;
        hang_up(pid)?;
        until_in(&log, &format!("[\"p{n}\"]")).await?;
    }
    let old = |n: usize| home.data_dir().join(format!("daemon.log.{n}"));
    assert!(old(1).exists() && old(2).exists(), "two moved-aside logs are kept");
    assert!(!old(3).exists(), "and no more");
    for file in [log.clone(), old(1), old(2)] {
        let size = std::fs::metadata(&file)?.len();
        assert!(size < 2048, "{} is {size} bytes", file.display());
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }

    let last = home.expect(0, &["logs", "-n", "3"]).await?.stdout;
    let text = std::fs::read_to_string(&log)?;
    let tail: Vec<&str> = text.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
    assert_eq!(last.lines().collect::<Vec<_>>(), tail);

    let mut follow = tokio::process::Command::new(tests::daemon::ahpd_bin())
        .args(["logs", "-f", "-n", "1"])
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(follow.stdout.take().expect("stdout")));
    // Its first line is the log's last: from then on it follows.
    let first = tokio::time::timeout(tests::PATIENCE, lines.next_line()).await??.unwrap_or_default();
    assert!(first.contains("[\"p40\"]"), "{first}");
    // Enough lines to move the log aside under the follower; each one is followed.
    for n in 41..=54 {
        home.write_config(&config(n))?;
        hang_up(pid)?;
        let needle = format!("[\"p{n}\"]");
        loop {
            let line = tokio::time::timeout(tests::PATIENCE, lines.next_line()).await??;
            let line = line.ok_or_else(|| anyhow::anyhow!("ahpd logs -f ended before {needle}"))?;
            assert!(!line.contains(&format!("[\"p{}\"]", n + 1)), "nothing out of order");
            if line.contains(&needle) {
                break;
            }
        }
    }
    follow.kill().await?;
    home.expect(0, &["stop"]).await?;
    Ok(())
}

#[tokio::test]
async fn the_log_filter_comes_from_ahpd_log_or_rust_log_and_a_bad_one_stops_the_start() -> anyhow::Result<()> {
    let home = Home::new()?;
    for (var, value) in [("AHPD_LOG", "ahpd=loud"), ("RUST_LOG", "=[")] {
        let out = tokio::process::Command::new(tests::daemon::ahpd_bin())
            .args(["start", "--port", "0"])
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env_remove("AHPD_LOG")
            .env(var, value)
            .output()
            .await?;
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.starts_with(&format!("{var}={value} is not a log filter (")), "{said}");
    }
    assert!(home.record().is_none() && home.log().is_empty(), "nothing started");

    let options = DaemonOptions {
        env: vec![("AHPD_LOG".into(), String::new()), ("RUST_LOG".into(), "debug".into())],
        ..Default::default()
    };
    let daemon = Daemon::start_with(options).await?;
    daemon.wait_for_log("DEBUG", tests::PATIENCE).await?;
    Ok(())
}

#[tokio::test]
async fn the_connection_past_the_limit_is_refused_and_the_others_go_on() -> anyhow::Result<()> {
    let config = json!({ "agents": { "echo": tests::agents::echo() }, "maxConnections": 2 });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let b = TestClient::connect(&daemon.url, "b").await?;
    assert_eq!(tests::raw::upgrade(&daemon.url, &[]).await.err(), Some(503), "the third is refused");
    let (_s, chat) = a.create_session("echo", None).await?;
    assert_eq!(a.turn(&chat, "still here").await?.state, TurnState::Complete);
    b.request("ping", json!({})).await?;

    // A connection that closes gives its place back.
    drop(b);
    let deadline = tokio::time::Instant::now() + tests::PATIENCE;
    while tests::raw::upgrade(&daemon.url, &[]).await.is_err() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.turn(&chat, "and still").await?.state, TurnState::Complete);
    Ok(())
}

/// A folder holding a fake `gemini` (the Gemini preset's program): it says a version, and
/// otherwise is the project's scripted ACP agent.
fn fake_gemini() -> anyhow::Result<tempfile::TempDir> {
    let bin = tempfile::Builder::new().prefix("ahpd-fake-bin-").tempdir()?;
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '0.42.0 (fake gemini)'; exit 0; fi\nexec python3 {} \"$@\"\n",
        fake.display()
    );
    let program = bin.path().join("gemini");
    std::fs::write(&program, script)?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
    Ok(bin)
}

#[tokio::test]
async fn an_acp_agent_on_the_path_is_offered_with_no_config_and_ahpd_agents_lists_it() -> anyhow::Result<()> {
    let bin = fake_gemini()?;
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let options = DaemonOptions { env: vec![("PATH".into(), path.clone())], ..Default::default() };
    let daemon = Daemon::start_with(options).await?;
    let mut client = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = client.create_session("gemini", None).await?;
    let turn = client.turn(&chat, "say hello from the path").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert_eq!(tests::turn_text(&turn), "hello from the path");
    let status = daemon.status().await?;
    let gemini = status["offered"].as_array().and_then(|a| a.iter().find(|o| o["provider"] == "gemini")).cloned();
    assert_eq!(gemini.as_ref().map(|g| g["kind"].clone()), Some(json!("acp")), "{status}");
    let why = format!("found {}/gemini on the PATH", bin.path().display());
    assert_eq!(gemini.as_ref().map(|g| g["why"].clone()), Some(json!(why)), "{status}");

    let listed = tokio::process::Command::new(tests::daemon::ahpd_bin())
        .args(["agents", "--json"])
        .env("XDG_CONFIG_HOME", daemon.home.join("config"))
        .env("XDG_DATA_HOME", daemon.home.join("data"))
        .env("PATH", &path)
        .output()
        .await?;
    let listed: Value = serde_json::from_slice(&listed.stdout)?;
    let offered = listed["offered"].as_array().cloned().unwrap_or_default();
    let gemini = offered.iter().find(|a| a["provider"] == "gemini").expect("gemini is listed");
    assert_eq!(gemini["kind"], "acp");
    assert_eq!(gemini["program"], bin.path().join("gemini").display().to_string());
    assert_eq!(gemini["version"], "0.42.0 (fake gemini)");
    let passed = listed["notOffered"].as_array().cloned().unwrap_or_default();
    let goose = passed.iter().find(|a| a["name"] == "goose").expect("a known agent not offered");
    assert_eq!(goose["why"], "goose is not on the PATH");

    let text = tokio::process::Command::new(tests::daemon::ahpd_bin())
        .args(["agents"])
        .env("XDG_CONFIG_HOME", daemon.home.join("config"))
        .env("XDG_DATA_HOME", daemon.home.join("data"))
        .env("PATH", &path)
        .output()
        .await?;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.lines().any(|l| l.trim_start().starts_with("gemini") && l.contains("0.42.0 (fake gemini)")), "{text}");
    assert!(text.contains("Not offered:"), "{text}");
    Ok(())
}

/// An npm-like `node_modules` in `root`: `package` with `manifest` as its `package.json`, its
/// program `bin` linked from `node_modules/.bin` to a script in it saying `script`.
fn npm_installed(root: &Path, package: &str, bin: &str, manifest: Value, script: &str) -> anyhow::Result<()> {
    let folder = root.join("node_modules").join(package);
    std::fs::create_dir_all(folder.join("dist"))?;
    std::fs::write(folder.join("package.json"), manifest.to_string())?;
    let program = folder.join("dist/cli.js");
    std::fs::write(&program, format!("#!/bin/sh\n{script}\n"))?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
    let bins = root.join("node_modules/.bin");
    std::fs::create_dir_all(&bins)?;
    std::os::unix::fs::symlink(&program, bins.join(bin))?;
    Ok(())
}

#[tokio::test]
async fn ahpd_agents_says_a_version_from_the_package_and_does_not_offer_pi_on_a_node_too_old() -> anyhow::Result<()> {
    let root = tempfile::Builder::new().prefix("ahpd-fake-npm-").tempdir()?;
    // codex-acp refuses `--version`; pi-acp runs the pi beside it, which needs a newer Node than
    // the one on the PATH.
    let refuses = "echo \"error: unexpected argument '--version' found\" >&2; exit 2";
    let codex = json!({"name": "@zed-industries/codex-acp", "version": "0.16.0"});
    npm_installed(root.path(), "@zed-industries/codex-acp", "codex-acp", codex, refuses)?;
    let pi_acp = json!({"name": "pi-acp", "version": "0.0.34", "engines": {"node": ">=20"}});
    npm_installed(root.path(), "pi-acp", "pi-acp", pi_acp, refuses)?;
    let pi = json!({"name": "@earendil-works/pi-coding-agent", "version": "1.6.0", "engines": {"node": ">=22.19.0"}});
    npm_installed(root.path(), "@earendil-works/pi-coding-agent", "pi", pi, "echo 1.6.0")?;
    npm_installed(root.path(), "node", "node", json!({"name": "node", "version": "20.11.1"}), "echo v20.11.1")?;
    let bins = root.path().join("node_modules/.bin");
    let path = format!("{}:{}", bins.display(), std::env::var("PATH").unwrap_or_default());
    let home = Home::new()?;

    let listed = tests::daemon::run_ahpd_with(home.path(), &["agents", "--json"], &[("PATH", &path)]).await?;
    let listed: Value = serde_json::from_str(&listed.stdout)?;
    let offered = listed["offered"].as_array().cloned().unwrap_or_default();
    let codex = offered.iter().find(|a| a["provider"] == "codex").expect("codex is offered");
    assert_eq!(codex["version"], "@zed-industries/codex-acp 0.16.0", "{codex}");
    assert!(!offered.iter().any(|a| a["provider"] == "pi"), "pi is not offered: {listed}");
    let passed = listed["notOffered"].as_array().cloned().unwrap_or_default();
    let pi_acp = passed.iter().find(|a| a["name"] == "pi" && a["kind"] == "acp").expect("the pi preset");
    assert_eq!(pi_acp["why"], "pi needs Node ≥ 22.19; this is 20.11.1");
    let pi_rpc = passed.iter().find(|a| a["name"] == "pi" && a["kind"] == "pi").expect("the pi backend");
    assert_eq!(pi_rpc["why"], "pi needs Node ≥ 22.19; this is 20.11.1");

    let text = tests::daemon::run_ahpd_with(home.path(), &["agents"], &[("PATH", &path)]).await?.stdout;
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("codex") && l.ends_with("@zed-industries/codex-acp 0.16.0")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("pi ") && l.ends_with("pi needs Node ≥ 22.19; this is 20.11.1")),
        "{text}"
    );
    Ok(())
}

/// A stand-in for `systemctl` that does what the user manager would for `ahpd.service`: it notes
/// each call, starts the daemon (told it is systemd's) on `enable --now`, restarts it on `restart`
/// (or refuses, as a session without a user manager does, when `FAKE_REFUSE` is set), stops it on
/// `disable --now`.
fn fake_systemctl(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let script = r#"#!/bin/sh
echo "$*" >> "$FAKE_CALLS"
if [ -n "$FAKE_REFUSE" ]; then echo "Failed to connect to bus: No medium found" >&2; exit 1; fi
case "$*" in
  *"enable --now"*) AHPD_SERVICE=systemd exec "$AHPD" start --port 0 > /dev/null ;;
  *" restart "*) "$AHPD" stop > /dev/null; AHPD_SERVICE=systemd exec "$AHPD" start --port 0 > /dev/null ;;
  *"disable --now"*) exec "$AHPD" stop > /dev/null ;;
  *is-active*) echo active ;;
esac
"#;
    let path = dir.join("systemctl");
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

#[tokio::test]
async fn service_install_writes_a_unit_running_this_binary_with_the_path_and_restart_goes_through_the_manager(
) -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    let bin = tempfile::Builder::new().prefix("ahpd-fake-manager-").tempdir()?;
    let systemctl = fake_systemctl(bin.path())?;
    let calls = bin.path().join("calls");
    let ahpd = tests::daemon::ahpd_bin().canonicalize()?;
    let captured = format!("/opt/agents/bin:{}", std::env::var("PATH").unwrap_or_default());
    let (systemctl, calls_path, ahpd_path) =
        (systemctl.display().to_string(), calls.display().to_string(), ahpd.display().to_string());
    let env = [
        ("PATH", captured.as_str()),
        ("AHPD_SYSTEMCTL", systemctl.as_str()),
        ("FAKE_CALLS", calls_path.as_str()),
        ("AHPD", ahpd_path.as_str()),
    ];

    let wrote = home.expect_with(0, &["service", "install", "--no-start", "--port", "9999"], &env).await?;
    let unit_file = home.path().join("config/systemd/user/ahpd.service");
    let unit = std::fs::read_to_string(&unit_file)?;
    assert!(unit.contains(&format!("ExecStart=\"{}\" \"--port\" \"9999\"\n", ahpd.display())), "{unit}");
    assert!(unit.contains(&format!("Environment=\"PATH={captured}\"\n")), "the PATH of the install: {unit}");
    assert!(unit.contains("Environment=\"AHPD_SERVICE=systemd\"\n"), "{unit}");
    assert!(unit.contains("Restart=on-failure\n"), "{unit}");
    assert!(wrote.stdout.contains("systemctl --user enable --now ahpd.service"), "{}", wrote.stdout);
    assert!(!calls.exists(), "--no-start asked the manager nothing");

    let installed = home.expect_with(0, &["service", "install"], &env).await?;
    assert!(installed.stdout.contains("run by systemd"), "{installed:?}");
    let first = home.record().and_then(|r| r["pid"].as_i64()).expect("the service's daemon runs");
    let status = home.expect_with(0, &["service", "status"], &env).await?;
    assert!(status.stdout.contains("systemd says: active"), "{}", status.stdout);

    let refused = home.expect_with(1, &["restart"], &[env[0], env[1], env[2], env[3], ("FAKE_REFUSE", "1")]).await?;
    assert!(
        refused.stderr.contains("Restart it with: ") && refused.stderr.contains("--user restart ahpd.service"),
        "{}",
        refused.stderr
    );
    assert_eq!(home.record().and_then(|r| r["pid"].as_i64()), Some(first), "the daemon runs on");

    let restarted = home.expect_with(0, &["restart"], &env).await?;
    assert!(restarted.stdout.contains(&format!("restarted by systemd from pid {first}")), "{restarted:?}");
    let said = std::fs::read_to_string(&calls)?;
    assert!(said.lines().any(|l| l == "--user restart ahpd.service"), "{said}");

    home.expect_with(0, &["service", "uninstall"], &env).await?;
    assert!(!unit_file.exists(), "the unit is removed");
    assert!(home.record().is_none(), "and the daemon it ran stopped");
    let said = std::fs::read_to_string(&calls)?;
    assert!(said.contains("--user daemon-reload\n--user enable --now ahpd.service"), "{said}");
    assert!(said.contains("--user disable --now ahpd.service"), "{said}");
    Ok(())
}

#[tokio::test]
async fn a_verb_that_waits_more_than_a_second_says_what_it_waits_for() -> anyhow::Result<()> {
    let home = Home::new()?;
    // A worker that never answers its handshake holds the announcement back for 1.5 s.
    home.write_config(&json!({
        "agents": { "echo": tests::agents::echo(), "mute": { "kind": "command", "command": "/bin/sleep", "args": ["60"] } },
        "workerHandshakeTimeoutMs": 1500,
    }))?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let (_url, pid) = announced(&started.stdout);
    assert!(
        started.stderr.contains(&format!("waiting for ahpd (pid {pid}) to start its agents and announce itself…")),
        "one line per step when stderr is not a terminal: {}",
        started.stderr
    );
    assert!(!started.stdout.contains("waiting"), "the answer on stdout is the answer alone");
    home.expect(0, &["stop"]).await?;
    Ok(())
}

#[tokio::test]
async fn completions_for_bash_zsh_and_fish_name_every_verb() -> anyhow::Result<()> {
    let home = Home::new()?;
    for shell in ["bash", "zsh", "fish"] {
        let script = home.expect(0, &["completions", shell]).await?.stdout;
        for verb in ["start", "stop", "status", "restart", "config", "user", "service", "agents", "logs"] {
            assert!(script.contains(verb), "{shell} completes {verb}");
        }
    }
    let bash = home.expect(0, &["completions", "bash"]).await?.stdout;
    let file = home.path().join("ahpd.bash");
    std::fs::write(&file, bash)?;
    let checked = tokio::process::Command::new("bash").arg("-n").arg(&file).status().await?;
    assert!(checked.success(), "the bash script parses");
    home.expect(2, &["completions", "tcsh-of-old"]).await?;
    Ok(())
}

/// `cargo install --path ahpd` into a folder of its own. The debug profile keeps the suite quick
/// (it reuses the workspace's build); `--release`, the README's line, differs only in the profile.
#[tokio::test]
async fn cargo_install_gives_a_binary_that_starts_and_serves_echo() -> anyhow::Result<()> {
    let root = tempfile::Builder::new().prefix("ahpd-install-").tempdir()?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let installed = tokio::process::Command::new(cargo)
        .args(["install", "--path", "ahpd", "--debug", "--locked", "--offline", "--root"])
        .arg(root.path())
        .current_dir(&workspace)
        .output()
        .await?;
    assert!(installed.status.success(), "{}", String::from_utf8_lossy(&installed.stderr));
    let bin = root.path().join("bin/ahpd");
    assert!(bin.exists());

    let options = DaemonOptions { bin: Some(bin.clone()), ..Default::default() };
    let daemon = Daemon::start_with(options).await?;
    let mut client = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    assert_eq!(client.turn(&chat, "installed").await?.state, TurnState::Complete);
    let workers = tests::daemon::children_of(daemon.pid());
    let exe = |pid: i32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    assert!(workers.iter().any(|w| exe(*w) == Some(bin.clone())), "its workers are the installed binary too");
    Ok(())
}

#[tokio::test]
async fn ahpd_config_names_the_folders_the_daemon_uses() -> anyhow::Result<()> {
    let home = Home::new()?;
    let (config, data) = (home.path().join("config/ahpd"), home.data_dir());
    let text = home.expect(0, &["config"]).await?.stdout;
    assert!(text.contains(&format!("folders: config {}, data {}", config.display(), data.display())), "{text}");
    let shown: Value = serde_json::from_str(&home.expect(0, &["config", "--json"]).await?.stdout)?;
    assert_eq!(shown["folders"], json!({ "config": config, "data": data }));
    let help = home.expect(0, &["--help"]).await?.stdout;
    assert!(help.contains("~/.config/ahpd on Linux") && help.contains("Support/ahpd on macOS"), "{help}");
    Ok(())
}

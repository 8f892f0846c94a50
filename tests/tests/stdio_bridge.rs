//! `ahpd --stdio` with a daemon already running on its data folder is a bridge: a plain client of
//! that daemon's WebSocket, relaying a line a frame. Through the official client over its stdio: a
//! session made and a turn streamed, seen by a WebSocket client of the same daemon; the bridge
//! killed mid-turn while the daemon goes on and finishes the turn; a line too long answered as in
//! process; the daemon's stop, or its refusal of a token, ending the bridge with a sentence; a
//! daemon still starting waited for; with no daemon (or a record left by a dead one), the
//! in-process host as before; and through a real `ssh` to a private sshd whose key is a forced
//! command.

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, TurnState};
use serde_json::{json, Value};
use tests::sshd::Sshd;
use tests::stdio::StdioChild;
use tests::{strip_nulls, turn_text, Daemon, DaemonOptions, TestClient};

/// A bridge to `daemon`, past the line that says so.
async fn bridge_to(daemon: &Daemon) -> anyhow::Result<StdioChild> {
    let bridge = StdioChild::ahpd(&daemon.home)?;
    let said = bridge.until_said("ahpd over stdio").await?;
    assert_eq!(said, format!("ahpd over stdio, bridged to the daemon at {} (pid {})", daemon.url, daemon.pid()));
    Ok(bridge)
}

#[tokio::test]
async fn a_bridge_is_a_client_of_the_running_daemon() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut bridge = bridge_to(&daemon).await?;
    let mut over = TestClient::connect_over(bridge.transport()?, "over-stdio").await?;
    let (session, chat) = over.create_session("echo", None).await?;
    let turn = over.turn(&chat, "hello over the bridge").await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(turn_text(&turn), "hello over the bridge");
    // Streamed: the reply grew by deltas, not only as the finished turn.
    let deltas =
        over.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_))).count();
    assert!(deltas > 0, "the reply was streamed");

    // The daemon's own WebSocket client sees the same session and the same chat.
    let mut direct = TestClient::connect(&daemon.url, "direct").await?;
    let listed = direct.listed_sessions(None).await?;
    assert!(listed.iter().any(|s| s["resource"] == session.as_str()), "{listed:?}");
    direct.subscribe(&chat).await?;
    let theirs = strip_nulls(serde_json::to_value(direct.mirror.chat(&chat))?);
    let ours = strip_nulls(serde_json::to_value(over.mirror.chat(&chat))?);
    assert_eq!(ours, theirs, "the chat folded over stdio is the daemon's");
    over.check_against_snapshot(&chat).await?;

    // Stdin closed: the bridge ends cleanly; the daemon runs on.
    drop(over);
    assert!(bridge.exited().await?.success(), "{}", bridge.said());
    assert!(tests::daemon::alive(daemon.pid()));
    Ok(())
}

#[tokio::test]
async fn the_daemon_and_its_turn_outlive_a_bridge_killed_mid_turn() -> anyhow::Result<()> {
    // A reply of 120 words, 100 ms apart: twelve seconds of streaming.
    let config = json!({ "agents": { "echo": tests::agents::echo_paced(100) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut bridge = bridge_to(&daemon).await?;
    let mut over = TestClient::connect_over(bridge.transport()?, "over-stdio").await?;
    let (_session, chat) = over.create_session("echo", None).await?;
    let words: String = (0..120).map(|i| format!("word{i} ")).collect::<String>().trim_end().to_owned();
    let turn_id = over.send(&chat, &words).await?;
    let c = chat.clone();
    over.until("the reply to start streaming", move |m| {
        m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| {
            t.response_parts.iter().any(|p| matches!(p, ResponsePart::Markdown(md) if !md.content.is_empty()))
        })
    })
    .await?;
    let finished_over_stdio = over.mirror.chat(&chat).is_some_and(|s| s.turns.iter().any(|t| t.id == turn_id));
    assert!(!finished_over_stdio, "killed mid-turn");

    bridge.kill9().await?;
    assert!(tests::daemon::alive(daemon.pid()), "the daemon outlives its bridge");
    let status = daemon.status().await?;
    let running = status["runningTurns"].as_array().cloned().unwrap_or_default();
    assert!(running.iter().any(|t| t["turn"] == turn_id.as_str()), "the turn runs on: {running:?}");
    let mut direct = TestClient::connect(&daemon.url, "direct").await?;
    direct.subscribe(&chat).await?;
    let turn = direct.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(turn_text(&turn), words, "the whole reply, past the bridge's death");
    direct.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_line_too_long_is_answered_by_the_bridge_and_the_next_is_relayed() -> anyhow::Result<()> {
    // The daemon's limit, not the one the bridge's own config says (the daemon's line names its
    // config file; the bridge reads the default one): 5 MiB, so its line limit is 20 MiB.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("daemon.json");
    std::fs::write(&config, serde_json::to_vec(&json!({ "maxFrameBytes": 5 << 20 }))?)?;
    let options =
        DaemonOptions { args: vec!["--config-file".into(), config.display().to_string()], ..DaemonOptions::default() };
    let daemon = Daemon::start_with(options).await?;
    let mut bridge = bridge_to(&daemon).await?;
    let mut lines = bridge.transport()?;
    // Over 20 MiB: never held whole, by the bridge or the daemon.
    let huge = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(21 << 20));
    lines.write_line(&huge).await?;
    lines.write_line(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{"channel":"ahp-root://"}}"#).await?;
    let refused: Value = serde_json::from_str(&lines.read_line().await?.unwrap_or_default())?;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(refused["error"]["data"]["limit"], "maxFrameBytes", "{refused}");
    assert_eq!(refused["error"]["data"]["value"], 5 << 20, "the daemon's limit: {refused}");
    let pong: Value = serde_json::from_str(&lines.read_line().await?.unwrap_or_default())?;
    assert_eq!(pong["id"], 2, "the next line reached the daemon: {pong}");
    assert_eq!(pong.get("result"), Some(&Value::Null), "{pong}");
    lines.close_stdin();
    assert!(bridge.exited().await?.success(), "{}", bridge.said());
    Ok(())
}

#[tokio::test]
async fn the_daemon_stopping_ends_the_bridge_with_a_sentence() -> anyhow::Result<()> {
    let mut daemon = Daemon::start().await?;
    let mut bridge = bridge_to(&daemon).await?;
    let _over = TestClient::connect_over(bridge.transport()?, "over-stdio").await?;
    let (url, pid) = (daemon.url.clone(), daemon.pid());
    daemon.terminate().await?;
    let status = bridge.exited().await?;
    assert_eq!(status.code(), Some(1), "{}", bridge.said());
    bridge.until_said(&format!("ahpd --stdio: the daemon at {url} (pid {pid}) ended the connection")).await?;
    Ok(())
}

#[tokio::test]
async fn a_token_the_daemon_refuses_ends_the_bridge_with_its_refusal() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    // $AHPD_TOKEN comes first, as for the client verbs.
    let mut bridge = StdioChild::ahpd_with(&daemon.home, &[("AHPD_TOKEN", "not-the-token")])?;
    assert_eq!(bridge.exited().await?.code(), Some(1), "{}", bridge.said());
    let said = bridge.until_said("ahpd --stdio:").await?;
    assert_eq!(
        said,
        format!(
            "ahpd --stdio: the daemon at {} refused the connection (401 Unauthorized): Refused: wrong connection token.",
            daemon.url
        )
    );
    let mut lines = bridge.transport()?;
    assert_eq!(lines.read_line().await?, None, "nothing on stdout");
    Ok(())
}

#[tokio::test]
async fn with_no_daemon_running_stdio_serves_in_process() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    let mut child = StdioChild::ahpd(home.path())?;
    let over = TestClient::connect_over(child.transport()?, "in-process").await?;
    let init = over.init.as_ref().ok_or_else(|| anyhow::anyhow!("no handshake"))?;
    assert_eq!(init.protocol_version, "1.0.0");
    let said = child.until_said("ahpd over stdio").await?;
    assert!(said.starts_with("ahpd over stdio, in process"), "{said}");
    assert!(home.record().is_none(), "no daemon record: the host is this process");
    drop(over);
    assert!(child.exited().await?.success(), "{}", child.said());
    Ok(())
}

#[tokio::test]
async fn a_record_left_by_a_daemon_killed_with_sigkill_is_no_daemon_to_bridge_to() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    daemon.kill9().await?;
    assert!(home.record().is_some(), "its record is left behind");
    let mut child = StdioChild::ahpd(home.path())?;
    let over = TestClient::connect_over(child.transport()?, "in-process").await?;
    let said = child.until_said("ahpd over stdio").await?;
    assert!(said.starts_with("ahpd over stdio, in process"), "{said}");
    drop(over);
    assert!(child.exited().await?.success(), "{}", child.said());
    Ok(())
}

#[tokio::test]
async fn a_daemon_still_starting_is_waited_for_not_served_beside() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    // A worker that never answers its handshake holds the daemon's record back for 3 s, while its
    // control socket answers from the first moment.
    home.write_config(&json!({
        "agents": { "echo": tests::agents::echo(), "mute": { "kind": "command", "command": "/bin/sleep", "args": ["60"] } },
        "workerHandshakeTimeoutMs": 3000,
    }))?;
    let at = home.path().to_owned();
    let starting = tokio::spawn(async move { Daemon::start_in(&at, DaemonOptions::default()).await });
    let socket = home.data_dir().join("ahpd.sock");
    let deadline = tokio::time::Instant::now() + tests::PATIENCE;
    while !socket.exists() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the daemon never claimed its socket");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut child = StdioChild::ahpd(home.path())?;
    child.until_said("a daemon is starting on").await?;
    let daemon = starting.await??;
    let said = child.until_said("ahpd over stdio").await?;
    assert_eq!(said, format!("ahpd over stdio, bridged to the daemon at {} (pid {})", daemon.url, daemon.pid()));
    let over = TestClient::connect_over(child.transport()?, "over-stdio").await?;
    assert!(over.init.is_some());
    drop(over);
    assert!(child.exited().await?.success(), "{}", child.said());
    Ok(())
}

/// Between the old daemon's exit and its successor's start under `ahpd restart`, nothing answers
/// on the data folder; the mark the restart leaves there (`restarting`) has an `ahpd --stdio` that
/// comes then (a remote host's link reconnecting) wait for the successor rather than serve the same
/// store in process beside it.
#[tokio::test]
async fn a_bridge_arriving_while_ahpd_restart_replaces_the_daemon_waits_for_its_successor() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    std::fs::create_dir_all(home.data_dir())?;
    std::fs::write(home.data_dir().join("restarting"), b"4242\n")?;
    let mut child = StdioChild::ahpd(home.path())?;
    child.until_said("ahpd restart is replacing the daemon on").await?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
    let said = child.until_said("ahpd over stdio").await?;
    assert_eq!(said, format!("ahpd over stdio, bridged to the daemon at {} (pid {})", daemon.url, daemon.pid()));
    assert!(!child.said().contains("in process"), "{}", child.said());
    let over = TestClient::connect_over(child.transport()?, "over-stdio").await?;
    assert!(over.init.is_some());
    drop(over);
    assert!(child.exited().await?.success(), "{}", child.said());
    Ok(())
}

#[tokio::test]
async fn through_ssh_a_forced_command_reaches_the_daemon_of_that_home() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let Ok(sshd) = Sshd::start(&daemon.home).await? else {
        return Ok(());
    };
    let mut argv = sshd.ssh_argv();
    argv.extend(["ahpd".to_owned(), "--stdio".to_owned()]);
    let mut ssh = StdioChild::argv(&argv)?;
    let over = TestClient::connect_over(ssh.transport()?, "over-ssh").await;
    let mut over = over.map_err(|e| anyhow::anyhow!("{e}\nssh said:\n{}\nsshd said:\n{}", ssh.said(), sshd.said()))?;
    // ssh hands on the far end's stderr: the bridge says whose daemon answered.
    let said = ssh.until_said("ahpd over stdio").await?;
    assert_eq!(said, format!("ahpd over stdio, bridged to the daemon at {} (pid {})", daemon.url, daemon.pid()));
    let (session, chat) = over.create_session("echo", None).await?;
    assert_eq!(turn_text(&over.turn(&chat, "hello over ssh").await?), "hello over ssh");
    let direct = TestClient::connect(&daemon.url, "direct").await?;
    let listed = direct.listed_sessions(None).await?;
    assert!(listed.iter().any(|s| s["resource"] == session.as_str()), "{listed:?}");
    assert!(sshd.said().contains("Accepted publickey for root from 127.0.0.1"), "{}", sshd.said());
    drop(over);
    assert!(ssh.exited().await?.success(), "{}", ssh.said());
    Ok(())
}

//! The verbs that manage a daemon, through the real binary in its own XDG folders: `ahpd start`
//! (twice; after a `kill -9`), `ahpd stop`, `ahpd status [--json]`, `ahpd config [--json]`, and
//! `ahpd restart [--force]` with a changed restart-only key, with a turn running, with a config
//! that cannot start, and for a daemon in the foreground. Every daemon started here is stopped.

use ahp_types::commands::ReconnectResult;
use ahp_types::state::{SnapshotState, TurnState};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::daemon::{alive, children_of, free_port, until_exited};
use tests::{turn_text, Daemon, DaemonOptions, Home, TestClient};

fn echo_only() -> Value {
    tests::agents::echo_only()
}

/// An echo that takes 200 ms a word: a long message keeps its turn running.
fn slow_echo() -> Value {
    json!({ "agents": { "echo": tests::agents::echo_paced(200) } })
}

fn long_message() -> String {
    (0..400).map(|i| format!("word{i} ")).collect()
}

/// `ahpd on ws://… (pid N)…` → (url, pid).
fn announced(stdout: &str) -> anyhow::Result<(String, i32)> {
    let first = stdout.lines().next().unwrap_or_default();
    let rest = first.strip_prefix("ahpd on ").ok_or_else(|| anyhow::anyhow!("not an announcement: {stdout}"))?;
    let (url, pid) = rest.split_once(" (pid ").ok_or_else(|| anyhow::anyhow!("no pid: {first}"))?;
    let pid = pid.split(')').next().unwrap_or_default().parse()?;
    Ok((url.to_owned(), pid))
}

async fn status_json(home: &Home) -> anyhow::Result<Value> {
    let run = home.expect(0, &["status", "--json"]).await?;
    Ok(serde_json::from_str(&run.stdout)?)
}

/// Stops the daemon and checks it and every worker it ran are gone, with its record and socket.
async fn stop_and_check(home: &Home, url: &str, pid: i32) -> anyhow::Result<()> {
    let workers = children_of(pid);
    let run = home.expect(0, &["stop"]).await?;
    assert_eq!(run.stdout.trim(), format!("Stopped {url} (pid {pid})."));
    assert!(!alive(pid), "the daemon has exited when stop returns");
    for worker in workers {
        until_exited(worker).await?;
    }
    assert!(home.record().is_none(), "a clean exit removes the record");
    assert!(!home.data_dir().join("ahpd.sock").exists(), "and the socket");
    Ok(())
}

#[tokio::test]
async fn start_twice_the_second_says_one_runs_and_stop_with_none_running_says_so() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&echo_only())?;
    let first = home.expect(0, &["start", "--port", "0"]).await?;
    let (url, pid) = announced(&first.stdout)?;
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    assert!(first.stdout.contains("agents: echo (configured)"), "{}", first.stdout);
    assert!(first.stdout.contains("daemon.log"), "says where its log is: {}", first.stdout);

    let record = home.record().expect("a record");
    assert_eq!(record["pid"], pid);
    assert_eq!(record["url"], url.as_str());
    assert_eq!(record["detached"], true);
    assert_eq!(record["argv"], json!(["--port", "0"]));
    assert!(record["startedAt"].is_string() && record["version"].is_string() && record["socket"].is_string());
    assert!(!url.contains("tkn"), "no token in the record");

    let second = home.expect(1, &["start", "--port", "0"]).await?;
    assert!(second.stderr.contains(&format!("already runs on {url} (pid {pid})")), "{}", second.stderr);
    assert!(alive(pid), "the first one still runs");

    stop_and_check(&home, &url, pid).await?;
    let again = home.expect(1, &["stop"]).await?;
    assert_eq!(again.stderr.trim(), "None running.");
    let status = home.expect(1, &["status"]).await?;
    assert_eq!(status.stderr.trim(), "None running.");
    home.expect(1, &["restart"]).await?;
    Ok(())
}

#[tokio::test]
async fn a_stale_record_after_kill_9_is_recovered_by_the_next_start() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&echo_only())?;
    let first = home.expect(0, &["start", "--port", "0"]).await?;
    let (url, pid) = announced(&first.stdout)?;
    let mut client = TestClient::connect(&url, "client-a").await?;
    let (session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "before the crash").await?;
    let workers = children_of(pid);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)?;
    until_exited(pid).await?;
    for worker in workers {
        until_exited(worker).await?;
    }
    assert_eq!(home.record().map(|r| r["pid"].clone()), Some(json!(pid)), "kill -9 leaves the record");

    let next = home.expect(0, &["start", "--port", "0"]).await?;
    assert!(next.stderr.contains(&format!("Removed a stale record: pid {pid}")), "{}", next.stderr);
    let (url2, pid2) = announced(&next.stdout)?;
    assert_ne!(pid2, pid);
    assert_eq!(home.record().map(|r| r["pid"].clone()), Some(json!(pid2)));

    let mut back = TestClient::connect(&url2, "client-a").await?;
    back.subscribe(&session).await?;
    back.subscribe(&chat).await?;
    let turns = back.mirror.chat(&chat).map(|c| c.turns.len());
    assert_eq!(turns, Some(1), "the session came back from the store");
    stop_and_check(&home, &url2, pid2).await
}

#[tokio::test]
async fn status_shows_sessions_agents_and_running_turns() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&json!({ "agents": {
        "echo": tests::agents::echo(),
        "slow": tests::agents::echo_paced(200),
        "broken": { "kind": "command", "command": "/nonexistent/agent" },
    } }))?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let (url, pid) = announced(&started.stdout)?;
    let mut client = TestClient::connect(&url, "client-a").await?;
    let (_s1, chat1) = client.create_session("echo", None).await?;
    client.turn(&chat1, "one").await?;
    let (_s2, chat2) = client.create_session("slow", None).await?;

    let status = status_json(&home).await?;
    assert_eq!(status["pid"], pid);
    assert_eq!(status["url"], url.as_str());
    assert_eq!(status["detached"], true);
    assert!(status["uptimeSeconds"].is_u64() && status["startedAt"].is_string());
    assert_eq!(status["sessions"], 2);
    assert_eq!(status["runningTurns"], json!([]));
    let agents = status["agents"].as_array().cloned().unwrap_or_default();
    let running = |name: &str| agents.iter().find(|a| a["provider"] == name).map(|a| a["running"].clone());
    assert_eq!(running("echo"), Some(json!(true)));
    assert_eq!(running("slow"), Some(json!(true)));
    assert_eq!(running("broken"), Some(json!(false)), "a worker that cannot start is shown as not running");

    let text = home.expect(0, &["status"]).await?.stdout;
    assert!(text.starts_with(&format!("ahpd on {url} (pid {pid}), up ")), "{text}");
    assert!(text.contains("sessions: 2"), "{text}");
    assert!(text.contains("echo (running)") && text.contains("broken (not running)"), "{text}");
    assert!(text.contains("turns running: none"), "{text}");

    let turn = client.send(&chat2, &long_message()).await?;
    let c = chat2.clone();
    client.until("the slow turn to run", move |m| m.chat(&c).is_some_and(|s| s.active_turn.is_some())).await?;
    let status = status_json(&home).await?;
    assert_eq!(status["runningTurns"][0]["chat"], chat2.as_str());
    assert_eq!(status["runningTurns"][0]["turn"], turn.as_str());
    let text = home.expect(0, &["status"]).await?.stdout;
    assert!(text.contains(&format!("turns running: 1 ({chat2})")), "{text}");
    stop_and_check(&home, &url, pid).await
}

#[tokio::test]
async fn config_shows_every_key_its_source_and_credentials_as_set() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&json!({
        "connectionToken": "s3cret-token",
        "replayBufferSize": 2000,
        "mcpServers": { "docs": { "type": "http", "url": "http://127.0.0.1:1/mcp", "headers": { "Authorization": "Bearer hidden-value" } } },
    }))?;
    let file = home.config_file().display().to_string();
    let text = home.expect(0, &["config"]).await?.stdout;
    assert!(!text.contains("s3cret-token") && !text.contains("hidden-value"), "no credential shown:\n{text}");
    assert!(text.starts_with(&format!("files read: {file}")), "{text}");
    let token = text.lines().find(|l| l.starts_with("connectionToken ")).unwrap_or_default();
    assert!(token.contains("<set>") && token.contains(&file), "{token}");
    let port = text.lines().find(|l| l.starts_with("port ")).unwrap_or_default();
    assert!(port.contains("9187") && port.contains("default"), "{port}");
    for key in ["clientToolTimeoutMs", "clientToolCallDisconnectTimeoutMs", "advancedTools", "sessionTools", "plugins"]
    {
        assert!(text.lines().any(|l| l.starts_with(key)), "{key} is listed:\n{text}");
    }

    let shown: Value = serde_json::from_str(&home.expect(0, &["config", "--json", "--port", "4321"]).await?.stdout)?;
    assert_eq!(shown["files"], json!([file]));
    assert_eq!(shown["config"]["connectionToken"], "<set>");
    assert_eq!(shown["sources"]["connectionToken"], file.as_str());
    assert_eq!(shown["config"]["mcpServers"]["docs"]["headers"]["Authorization"], "<set>");
    assert_eq!(shown["config"]["replayBufferSize"], 2000);
    assert_eq!(shown["config"]["port"], 4321);
    assert_eq!(shown["sources"]["port"], "command line");
    assert_eq!(shown["config"]["clientToolTimeoutMs"], 600_000);
    assert_eq!(shown["sources"]["clientToolTimeoutMs"], "default");
    assert_eq!(shown["applies"]["replayBufferSize"], "restart");

    home.write_config(&json!({ "port": "high" }))?;
    let bad = home.expect(2, &["config"]).await?;
    assert_eq!(bad.stderr.trim(), format!("{file}: port must be an integer between 0 and 65535"));
    assert!(home.record().is_none(), "no daemon was needed");
    Ok(())
}

#[tokio::test]
async fn restart_applies_a_restart_only_key_and_a_client_gets_every_session_back() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&echo_only())?;
    let port = free_port()?.to_string();
    let started = home.expect(0, &["start", "--port", &port]).await?;
    let (url, pid) = announced(&started.stdout)?;
    assert!(url.ends_with(&format!(":{port}")));
    assert_eq!(status_json(&home).await?["config"]["clientToolTimeoutMs"], 600_000);

    let mut client = TestClient::connect(&url, "client-a").await?;
    let mut chats = Vec::new();
    for n in 0..3 {
        let (session, chat) = client.create_session("echo", None).await?;
        for t in 0..2 {
            let turn = client.turn(&chat, &format!("session {n} turn {t}")).await?;
            assert_eq!(turn.state, TurnState::Complete);
        }
        chats.push((session, chat));
    }
    let before: Vec<Vec<(String, String)>> = chats
        .iter()
        .map(|(_, chat)| {
            let turns = client.mirror.chat(chat).map(|c| c.turns.clone()).unwrap_or_default();
            turns.iter().map(|t| (t.id.clone(), turn_text(t))).collect()
        })
        .collect();
    let last_seen = client.envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0);

    let mut changed = echo_only();
    changed["clientToolTimeoutMs"] = json!(1234);
    changed["replayBufferSize"] = json!(2000);
    home.write_config(&changed)?;
    let workers = children_of(pid);
    let run = home.expect(0, &["restart"]).await?;
    let first = run.stdout.lines().next().unwrap_or_default().to_owned();
    let (url2, pid2) = announced(&run.stdout)?;
    assert_eq!(url2, url, "the same port");
    assert!(first.ends_with(&format!(", restarted from pid {pid}")), "{first}");
    assert!(!alive(pid), "the old daemon is gone");
    assert!(!home.data_dir().join("restarting").exists(), "the restart's mark goes with it");
    for worker in workers {
        until_exited(worker).await?;
    }
    let status = status_json(&home).await?;
    assert_eq!(status["pid"], pid2);
    assert_eq!(status["detached"], true, "the successor can be restarted in its turn");
    assert_eq!(status["config"]["clientToolTimeoutMs"], 1234, "the successor runs with the new value");
    assert_eq!(status["config"]["replayBufferSize"], 2000);
    assert_eq!(status["sessions"], 3);

    // The client's connection closed with the old daemon; it reconnects and gets snapshots.
    let mut again = TestClient::connect_raw(&url, "client-a").await?;
    let mut subs = vec![ROOT_RESOURCE_URI.to_owned()];
    subs.extend(chats.iter().flat_map(|(s, c)| [s.clone(), c.clone()]));
    let result = again.client.reconnect("client-a".into(), i64::try_from(last_seen)?, subs).await?;
    let ReconnectResult::Snapshot(snapshots) = result else { anyhow::bail!("a new process replays nothing") };
    for snapshot in snapshots.snapshots {
        again.mirror.seed(snapshot);
    }
    for ((session, chat), turns) in chats.iter().zip(&before) {
        assert!(again.mirror.session(session).is_some(), "{session} is back");
        let after: Vec<(String, String)> = match again.mirror.states.get(chat) {
            Some(SnapshotState::Chat(c)) => c.turns.iter().map(|t| (t.id.clone(), turn_text(t))).collect(),
            _ => anyhow::bail!("{chat} did not come back"),
        };
        assert_eq!(&after, turns, "every turn of {chat} is there");
    }
    let list = again.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3));
    let (_, chat) = &chats[0];
    let turn = again.turn(chat, "after the restart").await?;
    assert_eq!(turn_text(&turn), "after the restart", "the next message works");
    stop_and_check(&home, &url, pid2).await
}

#[tokio::test]
async fn restart_refuses_while_a_turn_runs_unless_forced() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&slow_echo())?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let (url, pid) = announced(&started.stdout)?;
    let mut client = TestClient::connect(&url, "client-a").await?;
    let (session, chat) = client.create_session("echo", None).await?;
    client.turn(&chat, "a short one first").await?;
    let turn = client.send(&chat, &long_message()).await?;
    let c = chat.clone();
    client.until("the long turn to run", move |m| m.chat(&c).is_some_and(|s| s.active_turn.is_some())).await?;

    let refused = home.expect(1, &["restart"]).await?;
    assert_eq!(refused.stderr.trim(), format!("A turn is running in {chat}; pass --force to restart anyway."));
    assert_eq!(status_json(&home).await?["pid"], pid, "still the same daemon");
    client.pump()?;
    assert!(client.mirror.chat(&chat).is_some_and(|s| s.active_turn.is_some()), "and the turn still runs");

    let forced = home.expect(0, &["restart", "--force"]).await?;
    let (url2, pid2) = announced(&forced.stdout)?;
    assert!(forced.stdout.contains(&format!("restarted from pid {pid}")), "{}", forced.stdout);
    assert!(!alive(pid));

    let mut again = TestClient::connect(&url2, "client-a").await?;
    again.subscribe(&session).await?;
    again.subscribe(&chat).await?;
    let state = again.mirror.chat(&chat).cloned().ok_or_else(|| anyhow::anyhow!("no chat"))?;
    assert!(state.active_turn.is_none(), "no turn runs in the successor");
    assert_eq!(state.turns.first().map(|t| t.state), Some(TurnState::Complete));
    let cut = state.turns.iter().find(|t| t.id == turn).ok_or_else(|| anyhow::anyhow!("the cut turn is kept"))?;
    assert_ne!(cut.state, TurnState::Complete, "the turn the restart cut short did not complete");
    let next = again.turn(&chat, "and on we go").await?;
    assert_eq!(next.state, TurnState::Complete);
    stop_and_check(&home, &url2, pid2).await
}

#[tokio::test]
async fn restart_refuses_a_config_that_cannot_start_and_the_old_daemon_keeps_serving() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&echo_only())?;
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let (url, pid) = announced(&started.stdout)?;
    let file = home.config_file().display().to_string();

    let mut bad = echo_only();
    bad["replayBufferSize"] = json!(5);
    home.write_config(&bad)?;
    let refused = home.expect(1, &["restart"]).await?;
    assert_eq!(
        refused.stderr.trim(),
        format!(
            "Its line cannot start now, so it was not stopped: {file}: replayBufferSize must be an integer between 1000 and 1000000"
        )
    );
    std::fs::write(home.config_file(), "{ not json")?;
    let refused = home.expect(1, &["restart", "--force"]).await?;
    assert!(
        refused.stderr.contains("so it was not stopped") && refused.stderr.contains("not JSON"),
        "{}",
        refused.stderr
    );

    assert_eq!(status_json(&home).await?["pid"], pid, "the old daemon keeps running");
    let mut client = TestClient::connect(&url, "client-a").await?;
    let (_session, chat) = client.create_session("echo", None).await?;
    assert_eq!(turn_text(&client.turn(&chat, "still here").await?), "still here", "and answering");
    home.write_config(&echo_only())?;
    stop_and_check(&home, &url, pid).await
}

#[tokio::test]
async fn a_foreground_daemon_answers_status_and_stop_but_is_not_restarted() -> anyhow::Result<()> {
    let home = Home::new()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(echo_only())).await?;
    let status = status_json(&home).await?;
    assert_eq!(status["pid"], daemon.pid());
    assert_eq!(status["url"], daemon.url.as_str());
    assert_eq!(status["detached"], false);
    let refused = home.expect(1, &["restart"]).await?;
    assert!(
        refused.stderr.starts_with("This daemon runs in the foreground, not from ahpd start; restart it where it runs"),
        "{}",
        refused.stderr
    );
    let twice = home.expect(1, &["start", "--port", "0"]).await?;
    assert!(twice.stderr.contains("already runs on"), "{}", twice.stderr);
    let url = daemon.url.clone();
    stop_and_check(&home, &url, daemon.pid()).await?;
    let exit = daemon.terminate().await;
    assert!(exit.is_err() || exit.is_ok_and(|s| s.success()), "it had exited cleanly");
    Ok(())
}

#[tokio::test]
async fn start_refuses_stdio_and_a_bad_config_before_anything_starts() -> anyhow::Result<()> {
    let home = Home::new()?;
    let stdio = home.expect(2, &["start", "--stdio"]).await?;
    assert_eq!(stdio.stderr.trim(), "--stdio cannot be detached: it serves the process that started it.");
    home.write_config(&json!({ "clientToolTimeoutMs": -1 }))?;
    let bad = home.expect(2, &["start", "--port", "0"]).await?;
    assert!(bad.stderr.contains("clientToolTimeoutMs must be"), "{}", bad.stderr);
    home.expect(2, &["start", "--port", "high"]).await?;
    assert!(home.record().is_none(), "nothing started");
    assert!(home.log().is_empty(), "nothing was even run detached");
    Ok(())
}

#[tokio::test]
async fn every_verb_has_help() -> anyhow::Result<()> {
    let home = Home::new()?;
    for verb in ["start", "stop", "status", "restart", "config"] {
        let help = home.expect(0, &[verb, "--help"]).await?;
        assert!(help.stdout.contains(&format!("Usage: ahpd {verb}")), "{verb}: {}", help.stdout);
        assert!(help.stdout.contains("Exit codes:"), "{verb}: {}", help.stdout);
    }
    let top = home.expect(0, &["--help"]).await?.stdout;
    for verb in ["start", "stop", "status", "restart", "config"] {
        assert!(top.lines().any(|l| l.trim_start().starts_with(verb)), "{verb} is listed:\n{top}");
    }
    home.expect(2, &["status", "--colour"]).await?;
    Ok(())
}

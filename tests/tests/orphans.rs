//! Nothing outlives a dead parent: `kill -9` of the daemon in the middle of replies (the real
//! `claude` CLI streaming slowly from the mock, an ACP adapter, the echo worker) leaves no process
//! of its tree; `kill -9` of `ahpd worker claude` mid-reply ends its `claude`, fails the turn with a
//! clear error, and the next message resumes the conversation; and a daemon started after one was
//! killed ends what that one left running.
//!
//! The processes are found and checked by pid in /proc; how long they took to go is printed, and
//! only a generous failure bound is asserted.

use std::path::PathBuf;

use ahp_types::state::{ResponsePart, TurnState};
use serde_json::json;
use tests::daemon::{alive, children_of, cmdline, descendants, run_ahpd, until_all_gone};
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::{Daemon, DaemonOptions, TestClient};

fn workers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers")
}

/// Waits until the running turn of `chat` has said some words.
async fn until_streaming(client: &mut TestClient, chat: &str) -> anyhow::Result<()> {
    let c = chat.to_owned();
    client
        .until("the answer to start streaming", move |m| {
            m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| {
                t.response_parts.iter().any(|p| matches!(p, ResponsePart::Markdown(md) if !md.content.is_empty()))
            })
        })
        .await
}

/// The processes below `pid`, each with its command line, for a failure message.
fn described(pids: &[i32]) -> String {
    pids.iter()
        .map(|p| format!("{p} {}", cmdline(*p).chars().take(160).collect::<String>()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `ahpd worker <kind>` process under `daemon`.
fn worker(daemon: &Daemon, kind: &str) -> Option<i32> {
    children_of(daemon.pid()).into_iter().find(|pid| cmdline(*pid).ends_with(&format!("worker {kind}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_daemon_mid_reply_leaves_no_process_of_its_tree() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let adapter_home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let config = json!({ "agents": {
        "claude": claude_entry(&mock),
        "claude-acp": acp_adapter_entry(&claude_agent_acp(), &mock, adapter_home.path()),
        "echo": tests::agents::echo_paced(200) } });
    let mut daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut chats = Vec::new();
    for provider in ["claude", "claude-acp", "echo"] {
        chats.push(a.create_session(provider, None).await?.1);
    }
    // Replies that run for half a minute: each is still streaming when the daemon dies.
    let words: String = (0..150).map(|i| format!("word{i} ")).collect();
    for (chat, text) in chats.iter().zip(["SLOW LONG tell me a long story", "SLOW LONG tell me another", &words]) {
        a.send(chat, text).await?;
    }
    for chat in &chats {
        until_streaming(&mut a, chat).await?;
    }
    let tree = descendants(daemon.pid());
    eprintln!("the daemon's tree mid-reply:\n{}", described(&tree));
    for kind in ["claude", "acp", "echo"] {
        let worker = worker(&daemon, kind).ok_or_else(|| anyhow::anyhow!("no {kind} worker in the tree"))?;
        if kind != "echo" {
            anyhow::ensure!(!descendants(worker).is_empty(), "the {kind} worker runs its agent mid-reply");
        }
    }

    daemon.kill9().await?;
    let left = until_all_gone(&tree, "the daemon was killed").await;
    assert!(left.is_empty(), "still running after the daemon's death:\n{}", described(&left));
    // They did not run on to the end of their replies: both slow streams lost their client.
    assert!(mock.until_replies_cut_off(2, tests::PATIENCE).await >= 2, "both slow replies were cut off");
    Ok(())
}

#[tokio::test]
async fn killing_the_claude_worker_mid_reply_ends_its_claude_and_the_next_message_resumes() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let config = json!({ "agents": { "claude": claude_entry(&mock) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "remember the word PINEAPPLE").await?.state, TurnState::Complete);
    let turn_id = a.send(&chat, "SLOW LONG tell me a long story").await?;
    until_streaming(&mut a, &chat).await?;
    let worker = worker(&daemon, "claude").ok_or_else(|| anyhow::anyhow!("no claude worker"))?;
    let below = descendants(worker);
    eprintln!("below the claude worker mid-reply:\n{}", described(&below));
    anyhow::ensure!(!below.is_empty(), "the chat's claude runs mid-reply");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let left = until_all_gone(&below, "the worker was killed").await;
    assert!(left.is_empty(), "still running after its worker's death:\n{}", described(&left));
    assert!(mock.until_replies_cut_off(1, tests::PATIENCE).await >= 1, "the slow reply was cut off");

    let failed = a.finished(&chat, &turn_id).await?;
    assert_eq!(failed.state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = failed.response_parts.last() else { anyhow::bail!("no error part") };
    assert!(error.error.message.contains("killed by signal 9"), "{}", error.error.message);
    let next = a.turn(&chat, "what was the word?").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("remember the word PINEAPPLE"), "the conversation was resumed: {seen}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

/// Starts a daemon in `home` whose one worker ignores the signal of its parent's death and lingers
/// once its stdin closes, checks the record names its group, kills the daemon with SIGKILL, and
/// answers the worker's pid once it outlived the daemon.
async fn killed_with_a_leftover(home: &std::path::Path) -> anyhow::Result<i32> {
    let stubborn = json!({ "agents": { "stubborn": {
        "kind": "command", "command": workers_dir().join("stubborn.sh") } } });
    let mut first = Daemon::start_in(home, DaemonOptions::with_config(stubborn)).await?;
    let worker = children_of(first.pid())
        .into_iter()
        .find(|pid| cmdline(*pid).contains("stubborn.sh"))
        .ok_or_else(|| anyhow::anyhow!("no stubborn worker"))?;
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(home.join("data/ahpd/daemon.json"))?)?;
    let recorded: Vec<i64> =
        record["groups"].as_array().into_iter().flatten().filter_map(|g| g["pgid"].as_i64()).collect();
    assert!(recorded.contains(&i64::from(worker)), "the record names the worker's group: {record}");

    first.kill9().await?;
    // It ignores the parent-death signal and lingers once its stdin closed: a real leftover.
    let started = std::time::Instant::now();
    while !cmdline(worker).starts_with("sleep") {
        anyhow::ensure!(alive(worker), "the stubborn worker died with its parent");
        anyhow::ensure!(started.elapsed() < std::time::Duration::from_secs(30), "it never lingered");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok(worker)
}

#[tokio::test]
async fn a_daemon_started_after_one_was_killed_ends_what_that_one_left_running() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-orphans-").tempdir()?;
    let worker = killed_with_a_leftover(home.path()).await?;
    let echo = tests::agents::echo_only();
    let second = Daemon::start_in(home.path(), DaemonOptions::with_config(echo)).await?;
    let left = until_all_gone(&[worker], "the new daemon announced itself").await;
    assert!(left.is_empty(), "the predecessor's leftover still runs:\n{}", described(&left));
    let said = second.wait_for_log("left running by a daemon that died", tests::PATIENCE).await?;
    assert!(said.contains(&format!("process group {worker}")), "{said}");
    Ok(())
}

#[tokio::test]
async fn a_verb_that_clears_a_killed_daemons_record_ends_what_it_left_running() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-orphans-").tempdir()?;
    let worker = killed_with_a_leftover(home.path()).await?;
    let status = run_ahpd(home.path(), &["status"]).await?;
    assert!(status.stderr.contains("Removed a stale record"), "{}", status.stderr);
    assert!(status.stderr.contains("Ended 1 process group(s) it left running."), "{}", status.stderr);
    let left = until_all_gone(&[worker], "ahpd status cleared the record").await;
    assert!(left.is_empty(), "the killed daemon's leftover still runs:\n{}", described(&left));
    Ok(())
}

//! Backend processes on a budget (`maxBackendProcesses`): with the cap at 2 and three chats used
//! in turn, the host never holds more than 2 backend sessions open (echo: counted by `ahpd
//! status`; the real Claude Code CLI on the mock model: its processes counted under the worker),
//! the chat used longest ago is closed first, and every chat still answers with its history.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use ahp_types::state::TurnState;
use serde_json::json;
use tests::daemon::children_of;
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

#[tokio::test]
async fn three_echo_chats_under_a_cap_of_two_keep_two_backend_sessions_open() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "maxBackendProcesses": 2 }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut chats = Vec::new();
    for _ in 0..3 {
        chats.push(a.create_session("echo", None).await?.1);
    }
    for round in 0..3 {
        for (i, chat) in chats.iter().enumerate() {
            let text = format!("round {round} chat {i}");
            let turn = a.turn(chat, &text).await?;
            assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
            assert_eq!(turn_text(&turn), text);
            let status = daemon.status().await?;
            let open = status["backendSessions"].as_u64();
            assert!(open.is_some_and(|n| n <= 2), "at most 2 backend sessions open: {status}");
            assert_eq!(status["maxBackendProcesses"], 2);
            // The chat holds every turn it had.
            assert_eq!(a.mirror.chat(chat).map(|c| c.turns.len()), Some(round + 1));
            a.check_against_snapshot(chat).await?;
        }
    }
    let said = tests::daemon::run_ahpd(&daemon.home, &["status"]).await?;
    assert!(said.stdout.contains("backend sessions open: 2 of at most 2"), "{}", said.stdout);
    Ok(())
}

/// The worker's Claude processes of chats, alive: those that begin or resume a conversation
/// (`--session-id=`, `--resume=`). The worker's probe of what the CLI offers is not a chat's, and
/// may still run beside them on a loaded machine; a process that ended and is not reaped yet (a
/// zombie) holds nothing.
fn chats_processes(worker: i32) -> Vec<i32> {
    let of_a_chat = |p: &i32| {
        let line = tests::daemon::cmdline(*p);
        line.contains("--session-id=") || line.contains("--resume=")
    };
    children_of(worker).into_iter().filter(|p| tests::daemon::alive(*p)).filter(of_a_chat).collect()
}

#[tokio::test]
async fn three_claude_chats_under_a_cap_of_two_run_two_processes_and_resume_with_their_history() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let config = json!({ "maxBackendProcesses": 2, "agents": { "claude": claude_entry(&mock) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut chats = Vec::new();
    for _ in 0..3 {
        chats.push(a.create_session("claude", None).await?.1);
    }
    let words = ["PINEAPPLE", "HARBOUR", "LANTERN"];
    // Each chat's first turn starts its Claude process; from the third on the worker is known,
    // and a watcher counts its processes for the rest of the test.
    let mut most = None::<(Arc<AtomicUsize>, Arc<AtomicBool>)>;
    let over = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for (i, chat) in chats.iter().enumerate() {
        let turn = a.turn(chat, &format!("remember the word {}", words[i])).await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
        let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no claude worker"))?;
        let running = chats_processes(worker).len();
        assert!(running <= 2, "at most 2 claude processes after chat {i}'s first turn: {running}");
        if most.is_none() {
            let (seen, stop) = (Arc::new(AtomicUsize::new(running)), Arc::new(AtomicBool::new(false)));
            let (seen2, stop2, over2) = (seen.clone(), stop.clone(), over.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_millis(2));
                while !stop2.load(Ordering::Relaxed) {
                    every.tick().await;
                    let alive = chats_processes(worker);
                    if seen2.fetch_max(alive.len(), Ordering::Relaxed) < alive.len() && alive.len() > 2 {
                        // What they were, for the failure's message.
                        let named = alive.iter().map(|p| format!("{p}: {}", tests::daemon::cmdline(*p)));
                        *over2.lock().expect("not poisoned") = named.collect();
                    }
                }
            });
            most = Some((seen, stop));
        }
    }
    for (i, chat) in chats.iter().enumerate() {
        let turn = a.turn(chat, "what was the word?").await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
        // The model's request after the resume holds the chat's earlier turn, and only its own.
        let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
        assert!(seen.contains(&format!("remember the word {}", words[i])), "chat {i} resumed with its history: {seen}");
        for (j, other) in words.iter().enumerate() {
            assert!(j == i || !seen.contains(other), "chat {i} holds no other chat's words: {seen}");
        }
        a.check_against_snapshot(chat).await?;
    }
    let (seen, stop) = most.ok_or_else(|| anyhow::anyhow!("never watched"))?;
    stop.store(true, Ordering::Relaxed);
    let most = seen.load(Ordering::Relaxed);
    assert!(
        most <= 2,
        "at most 2 claude processes alive at any time: {most}: {:#?}",
        over.lock().expect("not poisoned")
    );

    // `ahpd status` lists them under their worker, each with its resident memory.
    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no claude worker"))?;
    let status = daemon.status().await?;
    let listed: Vec<serde_json::Value> = status["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["parent"].as_i64() == Some(i64::from(worker)))
        .cloned()
        .collect();
    assert!((1..=2).contains(&listed.len()), "the worker's processes in ahpd status: {listed:?}");
    assert!(listed.iter().all(|p| p["rssBytes"].as_u64().is_some_and(|b| b > 0)), "{listed:?}");
    let said = tests::daemon::run_ahpd(&daemon.home, &["status"]).await?;
    assert!(said.stdout.contains("MiB resident"), "{}", said.stdout);
    Ok(())
}

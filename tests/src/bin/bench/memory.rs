//! `bench memory`: the daemon's resident memory idle, over 1 000 stored sessions, and with 50
//! sessions of 200 turns each loaded; and what each kind of backend process holds once it has
//! answered a turn (echo, the real Claude Code CLI and pi on the mock model APIs, an ACP agent).
//! Each figure beside the idle daemon's from the same run.

use std::path::Path;

use serde_json::{json, Value};

use crate::procfs::{mib, rss_kib};
use crate::store::seed_store;
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_entry, pi_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::mocks::openai::MockOpenAi;
use tests::raw::RawSocket;
use tests::{Daemon, DaemonOptions, TestClient};

/// The daemon's memory once it has answered a first request (`status`), in KiB.
async fn settled_rss(daemon: &Daemon) -> anyhow::Result<(u64, u64)> {
    daemon.status().await?;
    Ok(rss_kib(daemon.pid()))
}

fn row(name: &str, (rss, hwm): (u64, u64), idle: u64) {
    println!("{name:<44} {:>9.1} {:>9.1}   {:.2}x idle", mib(rss), mib(hwm), rss as f64 / idle as f64);
}

/// A daemon over `home` with no config of the test's: the defaults a person gets.
async fn start_plain(home: &Path) -> anyhow::Result<Daemon> {
    Daemon::start_in(home, DaemonOptions::default()).await
}

pub async fn memory_bench() -> anyhow::Result<()> {
    println!("{:<44} {:>9} {:>9}", "daemon", "RSS MiB", "peak MiB");
    let home = tempfile::Builder::new().prefix("ahpd-bench-idle-").tempdir()?;
    let mut daemon = start_plain(home.path()).await?;
    let idle = settled_rss(&daemon).await?;
    row("idle (empty store)", idle, idle.0);
    daemon.terminate().await?;

    let home = tempfile::Builder::new().prefix("ahpd-bench-1000-").tempdir()?;
    seed_store(home.path(), 1000, 1)?;
    let mut daemon = start_plain(home.path()).await?;
    let client = TestClient::connect(&daemon.url, "bench").await?;
    client.request("listSessions", json!({ "channel": "ahp-root://", "limit": 50 })).await?;
    row("1 000 stored sessions, first page listed", settled_rss(&daemon).await?, idle.0);
    client.client.shutdown().await;
    daemon.terminate().await?;

    let home = tempfile::Builder::new().prefix("ahpd-bench-loaded-").tempdir()?;
    seed_store(home.path(), 50, 200)?;
    let mut daemon = start_plain(home.path()).await?;
    let mut ws = RawSocket::connect(&daemon.url).await?;
    ws.call(1, "initialize", json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "bench" }))
        .await?;
    for i in 0..50u64 {
        let chat = format!("ahp-chat:/seeded-{i:05}");
        let answer = ws.call(10 + i, "subscribe", json!({ "channel": chat })).await?;
        anyhow::ensure!(answer.get("result").is_some(), "subscribing to {chat}: {answer}");
    }
    anyhow::ensure!(daemon.loaded_sessions().await? >= 50, "50 sessions loaded");
    row("50 sessions x 200 turns loaded", settled_rss(&daemon).await?, idle.0);
    drop(ws);
    daemon.terminate().await?;

    println!();
    backends_bench(idle.0).await
}

/// One chat on each kind of backend, a turn answered, then every process under the daemon.
async fn backends_bench(idle: u64) -> anyhow::Result<()> {
    let anthropic = MockAnthropic::start().await?;
    let openai = MockOpenAi::start().await?;
    let pi_dir = tempfile::Builder::new().prefix("ahpd-bench-pi-").tempdir()?;
    let acp_home = tempfile::Builder::new().prefix("ahpd-bench-acp-").tempdir()?;
    let fake_acp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let cases: Vec<(&str, Value, &str)> = vec![
        ("echo", tests::agents::echo(), "hello there"),
        ("claude", claude_entry(&anthropic), "hello there"),
        ("pi", pi_entry(&openai, pi_dir.path())?, "hello there"),
        (
            "acp (scripted agent, python)",
            json!({ "kind": "acp", "options": { "command": "python3", "args": [fake_acp.display().to_string()] } }),
            "say hello there",
        ),
        ("acp (claude-agent-acp)", acp_adapter_entry(&claude_agent_acp(), &anthropic, acp_home.path()), "hello there"),
    ];
    println!("{:<44} {:>9} {:>9}", "one chat, one turn answered: process", "RSS MiB", "peak MiB");
    for (name, entry, text) in cases {
        match backend_case(name, entry, text, idle).await {
            Ok(()) => {}
            Err(e) => println!("{name:<44} could not be measured: {e:#}"),
        }
    }
    Ok(())
}

/// A process's program and first argument, without their folders (`node cli.js`, `ahpd worker`).
fn program(pid: i32) -> String {
    let cmdline = tests::daemon::cmdline(pid);
    let base = |word: &str| word.rsplit('/').next().unwrap_or(word).to_owned();
    let words: Vec<String> = cmdline.split(' ').take(3).map(base).collect();
    words.join(" ").chars().take(40).collect()
}

async fn backend_case(name: &str, entry: Value, text: &str, idle: u64) -> anyhow::Result<()> {
    let config = json!({ "agents": { "bench": entry } });
    let mut daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "bench").await?;
    let (_session, chat) = client.create_session("bench", None).await?;
    let turn = client.turn(&chat, text).await?;
    anyhow::ensure!(turn.state == ahp_types::state::TurnState::Complete, "the turn did not complete: {turn:?}");
    println!("{name}");
    row("  ahpd", rss_kib(daemon.pid()), idle);
    let mut total = 0;
    for pid in tests::daemon::descendants(daemon.pid()) {
        let (rss, hwm) = rss_kib(pid);
        total += rss;
        row(&format!("  {}", program(pid)), (rss, hwm), idle);
    }
    println!("  {:<42} {:>9.1}", "every process under the daemon", mib(total));
    client.client.shutdown().await;
    daemon.terminate().await?;
    Ok(())
}

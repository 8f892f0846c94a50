//! The `pi` ACP preset run for real: `pi-acp` (installed by `scripts/deps/pi-acp.sh`, with the pi 1.x
//! it needs and the Node that runs them) found on the PATH by the preset, its pi's own folder
//! (`PI_CODING_AGENT_DIR`) pointing it at the scripted mock of the OpenAI chat completions API
//! (tests/src/mocks/openai.rs), driven through the real daemon and the official client and checked
//! against the host's snapshots.
//!
//! pi asks nothing before it runs a tool; a pi extension does (`ctx.ui.select`), which pi-acp turns
//! into `session/request_permission`: the permission test installs pi's own example
//! `permission-gate.ts`. pi has no MCP client and pi-acp declares no MCP transport, so the host's
//! tools cannot reach it. Each test skips, saying why, when pi-acp is not installed.

use std::path::PathBuf;

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{SnapshotState, ToolCallState, TurnState};
use serde_json::json;
use tests::installed::{path_with, pi_acp, pi_acp_entry};
use tests::mocks::openai::MockOpenAi;
use tests::turns::{active_text, asked_options, tool_calls};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// A mock, pi's own folder and home, and the daemon options that run the `pi` preset against them.
struct World {
    mock: MockOpenAi,
    agent_dir: tempfile::TempDir,
    home: tempfile::TempDir,
    bin: PathBuf,
}

impl World {
    /// `None` (the reason printed) when pi-acp is not installed.
    async fn start() -> anyhow::Result<Option<Self>> {
        let bin = match pi_acp() {
            Ok(bin) => bin,
            Err(why) => {
                eprintln!("skipped: {why}");
                return Ok(None);
            }
        };
        let mock = MockOpenAi::start().await?;
        let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-acp-agent-").tempdir()?;
        let home = tempfile::Builder::new().prefix("ahpd-pi-acp-home-").tempdir()?;
        Ok(Some(Self { mock, agent_dir, home, bin }))
    }

    fn options(&self) -> anyhow::Result<DaemonOptions> {
        let entry = pi_acp_entry(&self.mock, self.agent_dir.path(), self.home.path())?;
        let mut options = DaemonOptions::with_config(json!({ "agents": { "pi": entry } }));
        options.env.push(("PATH".into(), path_with(&self.bin)));
        Ok(options)
    }

    /// Installs pi's own example extension that asks before a destructive shell command.
    fn with_permission_gate(&self) -> anyhow::Result<()> {
        let bin_folder = self.bin.parent().unwrap_or(std::path::Path::new("."));
        let example = bin_folder.join("../@earendil-works/pi-coding-agent/examples/extensions/permission-gate.ts");
        let extensions = self.agent_dir.path().join("extensions");
        std::fs::create_dir_all(&extensions)?;
        std::fs::copy(&example, extensions.join("permission-gate.ts"))
            .map_err(|e| anyhow::anyhow!("{}: {e}", example.display()))?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_opens_a_session_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-pi-acp-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("pi", folder.path()).await?;

    // The agent's offers (pi's models, from its own folder) reach the root state.
    a.until("pi-acp's offers", |m| match m.states.get(ahp_types::ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(root)) => root.agents.iter().any(|x| x.provider == "pi" && !x.models.is_empty()),
        _ => false,
    })
    .await?;

    // The preset's variables reached the pi that pi-acp runs (pi stays offline).
    // (pi names its process `pi`.)
    let below = tests::daemon::descendants(daemon.pid());
    let pi = below.iter().copied().find(|pid| tests::daemon::cmdline(*pid) == "pi");
    let pi = pi.unwrap_or_else(|| {
        panic!("pi runs under pi-acp: {:?}", below.iter().map(|p| tests::daemon::cmdline(*p)).collect::<Vec<_>>())
    });
    let environ = std::fs::read(format!("/proc/{pi}/environ"))?;
    let environ: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
    for quiet in ["PI_OFFLINE=1", "PI_TELEMETRY=0", "PI_SKIP_VERSION_CHECK=1"] {
        assert!(environ.contains(&quiet.as_bytes()), "{quiet} reached pi");
    }

    let one = a.turn(&chat, "hello pi").await?;
    assert_eq!(one.state, TurnState::Complete, "{one:#?}");
    // (The first prompt opens with the host's instructions, so the mock's echo starts with them.)
    assert!(turn_text(&one).starts_with("mock reply to: "), "{one:#?}");
    let first = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(first.contains("hello pi"), "{first}");
    let two = a.turn(&chat, "[[slow]] go on").await?;
    assert_eq!(turn_text(&two), (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "), "{two:#?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 2, "the answer streamed in pieces");

    // A tool pi runs itself, shown as a call in the chat.
    let ran = a.turn(&chat, "[[bash echo $((6 * 7))]]").await?;
    assert_eq!(ran.state, TurnState::Complete, "{ran:#?}");
    assert_eq!(turn_text(&ran), "tool said: 42", "{ran:#?}");
    assert!(
        matches!(tool_calls(&ran.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:#?}",
        tool_calls(&ran.response_parts)
    );
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_asks_the_client_through_a_pi_extension_and_is_cancelled() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    world.with_permission_gate()?;
    let folder = tempfile::Builder::new().prefix("ahpd-pi-acp-folder-").tempdir()?;
    for doomed in ["gone", "kept"] {
        std::fs::create_dir(folder.path().join(doomed))?;
    }
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("pi", folder.path()).await?;

    // Asked in the client and allowed: the command runs in the session's folder.
    let allowed = a.send(&chat, "[[bash rm -rf gone]]").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    // The extension's own choices, as pi-acp offers them.
    let labels: Vec<String> = asked_options(&a.mirror, &chat).into_iter().map(|(label, _)| label).collect();
    assert_eq!(labels, ["Yes", "No"]);
    a.check_against_snapshot(&chat).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &allowed).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert!(!folder.path().join("gone").exists(), "the allowed command ran: {turn:#?}");

    // Denied: it does not run, and pi tells the model why.
    let denied = a.send(&chat, "[[bash rm -rf kept]]").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &denied).await?;
    assert!(folder.path().join("kept").exists(), "the denied command did not run: {turn:#?}");
    assert!(turn_text(&turn).contains("Blocked by user"), "{turn:#?}");

    // A cancel while the answer is held mid-stream, and the next message is answered.
    let held = a.send(&chat, "[[hold]] wait here").await?;
    let c = chat.clone();
    a.until("the held answer to stream", move |m| active_text(m, &c).starts_with("holding")).await?;
    let stop = ChatTurnCancelledAction { turn_id: held.clone(), duration: 0, meta: None };
    a.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
    let stopped = a.finished(&chat, &held).await?;
    assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:#?}");
    let next = a.turn(&chat, "still there").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:#?}");
    assert_eq!(turn_text(&next), "mock reply to: still there", "{next:#?}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

/// Whether the last request the mock got carries `words`.
fn last_request_remembers(mock: &MockOpenAi, words: &str) -> bool {
    mock.requests().last().is_some_and(|r| r.all_text().contains(words))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_loads_its_conversation_after_a_worker_kill_and_a_daemon_restart() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-pi-acp-folder-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-pi-acp-restart-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), world.options()?).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in("pi", folder.path()).await?;
    let turn = a.turn(&chat, "remember the word zebra").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");

    // kill -9 of the worker (and the pi-acp and pi it runs) mid-turn: the daemon fails that turn,
    // and the next message loads the conversation into a new worker.
    let held = a.send(&chat, "[[hold]] wait here").await?;
    let c = chat.clone();
    a.until("the held answer to stream", move |m| active_text(m, &c).starts_with("holding")).await?;
    let worker = first.worker().expect("the acp worker runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let killed = a.finished(&chat, &held).await?;
    assert_eq!(killed.state, TurnState::Error, "{killed:#?}");
    let after_kill = a.turn(&chat, "what was the word").await?;
    assert_eq!(after_kill.state, TurnState::Complete, "{after_kill:#?}");
    assert_eq!(turn_text(&after_kill), "mock reply to: what was the word");
    assert!(last_request_remembers(&world.mock, "remember the word zebra"), "{:#?}", world.mock.requests().last());
    a.check_against_snapshot(&chat).await?;
    drop(a);
    first.terminate().await?;

    // After a daemon restart, the same.
    let second = Daemon::start_in(daemon_home.path(), world.options()?).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(3), "the store kept the turns");
    let next = b.turn(&chat, "and now").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:#?}");
    assert_eq!(turn_text(&next), "mock reply to: and now", "the replayed history is not shown again: {next:#?}");
    let seen = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(
        seen.contains("remember the word zebra") && seen.contains("what was the word"),
        "the model was sent the history: {seen}"
    );
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

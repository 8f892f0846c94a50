//! The `copilot` ACP preset run for real: GitHub Copilot CLI (installed by
//! `scripts/deps/copilot.sh`) found on the PATH by the preset, in its bring-your-own-key mode
//! (`COPILOT_PROVIDER_BASE_URL`, no GitHub sign-in) talking to the scripted mock of the OpenAI chat
//! completions API (tests/src/mocks/openai.rs), driven through the real daemon and the official
//! client and checked against the host's snapshots.
//!
//! Copilot opens each prompt with a `<current_datetime>` line of its own, so the mock's echo ends
//! with the person's words rather than being them. Each test skips, saying why, when Copilot CLI is
//! not installed.

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{ConfirmationOptionKind, ToolCallState, TurnState};
use serde_json::json;
use tests::installed::{copilot_bin, copilot_entry, path_with};
use tests::mocks::openai::MockOpenAi;
use tests::turns::{active_text, asked_options, tool_calls, turn_allowing};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// A mock, Copilot's own home and the daemon options that run the `copilot` preset against the mock.
struct World {
    mock: MockOpenAi,
    home: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl World {
    /// `None` (the reason printed) when Copilot CLI is not installed.
    async fn start() -> anyhow::Result<Option<Self>> {
        let bin = match copilot_bin() {
            Ok(bin) => bin,
            Err(why) => {
                eprintln!("skipped: {why}");
                return Ok(None);
            }
        };
        let mock = MockOpenAi::start().await?;
        let home = tempfile::Builder::new().prefix("ahpd-copilot-home-").tempdir()?;
        Ok(Some(Self { mock, home, bin }))
    }

    fn options(&self) -> anyhow::Result<DaemonOptions> {
        let entry = copilot_entry(&self.mock, self.home.path());
        let mut options = DaemonOptions::with_config(json!({ "agents": { "copilot": entry } }));
        options.env.push(("PATH".into(), path_with(&self.bin)));
        Ok(options)
    }
}

/// A shell command the model asks Copilot to run, which Copilot asks about first.
fn shell(command: &str) -> String {
    let args = json!({ "command": command, "description": "Make a file" });
    format!("[[call bash {args}]]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_opens_a_session_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-copilot-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("copilot", folder.path()).await?;

    let one = a.turn(&chat, "hello copilot").await?;
    assert_eq!(one.state, TurnState::Complete, "{one:#?}");
    // (The first prompt opens with the host's instructions, and the mock echoes only its start.)
    assert!(turn_text(&one).starts_with("mock reply to: "), "{one:#?}");
    let first = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(first.contains("hello copilot"), "{first}");
    // The agent's offers reach the session: in its bring-your-own-key mode Copilot names no models
    // (the one it was given is all there is), but its modes and its allow-all switch. (The
    // new-session form learns them from the daemon's own probe of the agent, which a loaded
    // machine may not have finished yet.)
    let s = session.clone();
    a.until("copilot's modes in the session", move |m| {
        let values = m.session(&s).and_then(|st| st.config.as_ref()).map(|c| c.values.clone()).unwrap_or_default();
        values.get("permissionMode").and_then(|v| v.as_str()).is_some_and(|v| v.ends_with("session-modes#agent"))
            && values.contains_key("acp.allow_all")
    })
    .await?;

    let two = a.turn(&chat, "[[slow]] go on").await?;
    assert_eq!(turn_text(&two), (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "), "{two:#?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 2, "the answer streamed in pieces");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_calls_a_host_tool_through_ahp_mcp() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-copilot-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("copilot", folder.path()).await?;
    let session_id = session.trim_start_matches("ahp-session:/").to_owned();

    let listed = turn_allowing(&mut a, &chat, "[[call ahp-list_sessions {}]]").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:#?}");
    assert!(
        matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:#?}",
        tool_calls(&listed.response_parts)
    );
    let requests = world.mock.requests();
    let answered = requests.last().map(|r| r.all_text()).unwrap_or_default();
    assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
    assert!(turn_text(&listed).starts_with("tool said:"), "{listed:#?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_asks_the_client_before_a_command_and_is_cancelled() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-copilot-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("copilot", folder.path()).await?;

    // A command asked about in the client and allowed: it runs in the session's folder.
    let allowed = a.send(&chat, &shell("touch allowed.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let options = asked_options(&a.mirror, &chat);
    assert!(matches!(options.first(), Some((_, ConfirmationOptionKind::Approve))), "approvals first: {options:?}");
    assert!(options.iter().any(|(_, kind)| *kind == ConfirmationOptionKind::Deny), "and a refusal: {options:?}");
    a.check_against_snapshot(&chat).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &allowed).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert!(folder.path().join("allowed.txt").exists(), "the allowed command ran: {turn:#?}");

    // One denied: it does not run.
    let denied = a.send(&chat, &shell("touch denied.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &denied).await?;
    assert!(!folder.path().join("denied.txt").exists(), "the denied command did not run: {turn:#?}");

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
    assert!(turn_text(&next).ends_with("still there"), "{next:#?}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

/// Whether the last request the mock got carries `words` among the person's messages.
fn last_request_remembers(mock: &MockOpenAi, words: &str) -> bool {
    mock.requests().last().is_some_and(|r| r.all_text().contains(words))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_loads_its_conversation_after_a_worker_kill_and_a_daemon_restart() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-copilot-folder-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-copilot-restart-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), world.options()?).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in("copilot", folder.path()).await?;
    let turn = a.turn(&chat, "remember the word zebra").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");

    // kill -9 of the worker (and the copilot it runs) mid-turn: the daemon fails that turn, and
    // the next message loads the conversation into a new worker.
    let held = a.send(&chat, "[[hold]] wait here").await?;
    let c = chat.clone();
    a.until("the held answer to stream", move |m| active_text(m, &c).starts_with("holding")).await?;
    let worker = first.worker().expect("the acp worker runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let killed = a.finished(&chat, &held).await?;
    assert_eq!(killed.state, TurnState::Error, "{killed:#?}");
    let after_kill = a.turn(&chat, "what was the word").await?;
    assert_eq!(after_kill.state, TurnState::Complete, "{after_kill:#?}");
    assert!(turn_text(&after_kill).ends_with("what was the word"), "{after_kill:#?}");
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
    let text = turn_text(&next);
    assert!(
        text.starts_with("mock reply to: ") && text.ends_with("and now"),
        "the replayed history is not shown again: {next:#?}"
    );
    let seen = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(
        seen.contains("remember the word zebra") && seen.contains("what was the word"),
        "the model was sent the history: {seen}"
    );
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

//! The `codex` ACP preset run for real: Zed's `codex-acp` (installed by `scripts/deps/codex.sh`)
//! found on the PATH by the preset, its Codex talking to the scripted mock of the OpenAI Responses
//! API (tests/src/mocks/responses.rs) through a `config.toml` in its own `CODEX_HOME`, driven
//! through the real daemon and the official client and checked against the host's snapshots.
//!
//! Each test skips, saying why, when codex-acp is not installed.

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{ConfirmationOptionKind, SnapshotState, ToolCallState, TurnState};
use serde_json::json;
use tests::installed::{codex_acp, codex_entry, path_with};
use tests::mocks::responses::MockResponses;
use tests::turns::{active_text, asked_options, reasoning, tool_calls, turn_allowing};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// A mock, Codex's own home and the daemon options that run the `codex` preset against the mock.
struct World {
    mock: MockResponses,
    codex_home: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl World {
    /// `None` (the reason printed) when codex-acp is not installed.
    async fn start() -> anyhow::Result<Option<Self>> {
        let bin = match codex_acp() {
            Ok(bin) => bin,
            Err(why) => {
                eprintln!("skipped: {why}");
                return Ok(None);
            }
        };
        let mock = MockResponses::start().await?;
        let codex_home = tempfile::Builder::new().prefix("ahpd-codex-home-").tempdir()?;
        Ok(Some(Self { mock, codex_home, bin }))
    }

    fn options(&self) -> anyhow::Result<DaemonOptions> {
        let entry = codex_entry(&self.mock, self.codex_home.path())?;
        let mut options = DaemonOptions::with_config(json!({ "agents": { "codex": entry } }));
        options.env.push(("PATH".into(), path_with(&self.bin)));
        Ok(options)
    }
}

/// A shell command the model asks to run outside Codex's sandbox, which Codex asks about first.
fn escalated(command: &str) -> String {
    let args = json!({ "cmd": command, "sandbox_permissions": "require_escalated",
                       "justification": "Do you want to make this file?" });
    format!("[[call exec_command {args}]]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_opens_a_session_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-codex-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("codex", folder.path()).await?;

    // The agent's offers, learned from the session it opened, reach the root state.
    a.until("codex's offers", |m| match m.states.get(ahp_types::ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(root)) => root.agents.iter().any(|x| x.provider == "codex" && !x.models.is_empty()),
        _ => false,
    })
    .await?;

    // The preset's command line reached the program (analytics off).
    let tree = tests::daemon::descendants(daemon.pid());
    assert!(
        tree.iter().any(|pid| tests::daemon::cmdline(*pid).contains("analytics.enabled=false")),
        "{:?}",
        tree.iter().map(|pid| tests::daemon::cmdline(*pid)).collect::<Vec<_>>()
    );

    // A streamed turn, a reasoning summary first.
    let one = a.turn(&chat, "[[think]] hello codex").await?;
    assert_eq!(one.state, TurnState::Complete, "{one:#?}");
    assert_eq!(turn_text(&one), "thought done", "{one:#?}");
    assert!(reasoning(&one).contains("Let me think"), "{one:#?}");
    let two = a.turn(&chat, "[[slow]] go on").await?;
    assert_eq!(turn_text(&two), (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "), "{two:#?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 2, "the answer streamed in pieces");

    // The model was sent the person's words (the first after the host's instructions; Codex's own
    // context is a message of its own, which the mock leaves out).
    let asked = world.mock.requests();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    let said = asked[1].user_texts();
    assert!(
        matches!(&said[..], [one, two] if one.ends_with("[[think]] hello codex") && two == "[[slow]] go on"),
        "{said:#?}"
    );
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_a_host_tool_through_ahp_mcp() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-codex-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("codex", folder.path()).await?;
    let session_id = session.trim_start_matches("ahp-session:/").to_owned();

    let listed = turn_allowing(&mut a, &chat, "[[call mcp__ahp__list_sessions {}]]").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:#?}");
    assert!(
        matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:#?}",
        tool_calls(&listed.response_parts)
    );
    let requests = world.mock.requests();
    assert!(
        requests[0].tool_names().iter().any(|n| n == "mcp__ahp__list_sessions"),
        "the host's tools are offered to the model: {:?}",
        requests[0].tool_names()
    );
    let answered = requests.last().map(|r| r.all_text()).unwrap_or_default();
    assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
    assert!(turn_text(&listed).starts_with("tool said:"), "{listed:#?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_asks_the_client_before_a_command_and_is_cancelled() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-codex-folder-").tempdir()?;
    let daemon = Daemon::start_with(world.options()?).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("codex", folder.path()).await?;

    // A command asked about in the client and allowed: it runs in the session's folder.
    let allowed = a.send(&chat, &escalated("touch allowed.txt")).await?;
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
    let denied = a.send(&chat, &escalated("touch denied.txt")).await?;
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
    assert_eq!(turn_text(&next), "mock reply to: still there", "{next:#?}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

/// Whether the last request the mock got carries `words` among the person's messages.
fn last_request_remembers(mock: &MockResponses, words: &str) -> bool {
    mock.requests().last().is_some_and(|r| r.user_texts().iter().any(|t| t.contains(words)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_loads_its_conversation_after_a_worker_kill_and_a_daemon_restart() -> anyhow::Result<()> {
    let Some(world) = World::start().await? else { return Ok(()) };
    let folder = tempfile::Builder::new().prefix("ahpd-codex-folder-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-codex-restart-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), world.options()?).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in("codex", folder.path()).await?;
    let turn = a.turn(&chat, "remember the word zebra").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");

    // kill -9 of the worker (and the codex-acp it runs) mid-turn: the daemon fails that turn, and
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
    let seen = world.mock.requests().last().map(|r| r.user_texts()).unwrap_or_default();
    assert!(
        matches!(&seen[..], [one, .., two, three] if one.ends_with("remember the word zebra")
            && two == "what was the word" && three == "and now"),
        "the model was sent the history: {seen:#?}"
    );
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

//! The `qwen` ACP preset against the real Qwen Code (`qwen --acp`, installed by
//! `scripts/deps/qwen.sh`) on the scripted mock OpenAI Chat Completions API (Qwen Code's ACP mode
//! signs in with an OpenAI-compatible key alone), through the real daemon and the official client,
//! every action folded through the official reducers and checked against the host's snapshots: the
//! handshake and what the agent offers, a streamed turn, a host tool called through `/ahp-mcp`,
//! permissions asked and answered in the client, a cancel, and the conversation loaded again
//! (`session/load`) after a restart and after a `kill -9` of the worker, judged by what the mock
//! model is sent.
//!
//! The config entry is the preset as a person writes it (`{ "kind": "acp", "preset": "qwen" }`)
//! with the mock's `OPENAI_BASE_URL`, key and model, a `HOME` of its own, and the installed CLI on
//! its `PATH`. Each test skips, saying why, when the CLI is not installed.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnResumeAction, SessionConfigChangedAction, StateAction};
use ahp_types::state::{ResponsePart, SnapshotState, ToolCallState, TurnState};
use serde_json::json;
use tests::installed::{qwen_bin, qwen_entry};
use tests::mocks::openai::MockOpenAi;
use tests::turns::{active_text, reasoning, stop, tool_calls, turn_allowing};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// The provider id the tests give the preset.
const QWEN: &str = "qwen";

/// The installed CLI, or `None` after saying why the test is skipped.
fn installed() -> Option<PathBuf> {
    match qwen_bin() {
        Ok(bin) => Some(bin),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A daemon config whose `qwen` agent is the preset against `mock`, with `home` as the CLI's.
fn options(bin: &Path, mock: &MockOpenAi, home: &Path) -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { QWEN: qwen_entry(bin, mock, home) } }))
}

/// The requests of the conversation itself: Qwen Code also runs a memory extraction of its own
/// after a turn, a request whose system prompt is not its own.
fn turn_requests(mock: &MockOpenAi) -> Vec<tests::mocks::openai::Recorded> {
    let own = |r: &tests::mocks::openai::Recorded| {
        r.messages().first().and_then(|m| m["content"].as_str()).is_some_and(|s| s.starts_with("You are Qwen Code"))
    };
    mock.requests().into_iter().filter(own).collect()
}

/// What the model was sent in the conversation's last request, every message's text.
fn last_seen(mock: &MockOpenAi) -> String {
    turn_requests(mock).last().map(|r| r.all_text()).unwrap_or_default()
}

/// The names of the tools a request offers.
fn tool_names(request: &tests::mocks::openai::Recorded) -> Vec<String> {
    let tools = request.body["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect()
}

/// Waits until the agent's offer (its models, modes and commands) reached the root.
async fn until_offered(client: &mut TestClient) -> anyhow::Result<()> {
    client
        .until("the agent's offer", |m| match m.states.get(ahp_types::ROOT_RESOURCE_URI) {
            Some(SnapshotState::Root(root)) => root.agents.iter().any(|x| x.provider == QWEN && !x.models.is_empty()),
            _ => false,
        })
        .await
}

/// The session's permission mode as the client folded it.
fn mode(client: &TestClient, session: &str) -> Option<serde_json::Value> {
    let config = client.mirror.session(session).and_then(|s| s.config.as_ref());
    config.and_then(|c| c.values.get("permissionMode").cloned())
}

/// Picks the permission mode `mode_id` for the session from the client; answers once it is taken.
async fn pick_mode(client: &mut TestClient, session: &str, mode_id: &str) -> anyhow::Result<()> {
    // The modes are the agent's offer, which the host takes from the worker's probe.
    until_offered(client).await?;
    let pick = [("permissionMode".to_owned(), json!(mode_id))].into_iter().collect();
    let action = StateAction::SessionConfigChanged(SessionConfigChangedAction { config: pick, replace: None });
    let seq = client.dispatch(session, action).await?;
    let echo = client.echo_of(seq).await?;
    assert_eq!(echo.rejection_reason, None, "the mode change was taken: {echo:?}");
    assert_eq!(mode(client, session), Some(json!(mode_id)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_opens_offers_streams_a_turn_and_is_cancelled() -> anyhow::Result<()> {
    let Some(bin) = installed() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-qwen-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-qwen-folder-").tempdir()?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in(QWEN, folder.path()).await?;

    // The handshake: the agent's model reaches the root, its modes the session's config (it starts
    // in `auto`, where a model classifier answers instead of the person), its commands the session.
    until_offered(&mut a).await?;
    let root = a.mirror.root().cloned().expect("the root");
    let agent = root.agents.iter().find(|x| x.provider == QWEN).expect("the qwen agent");
    assert!(agent.models.iter().any(|m| m.name == tests::mocks::openai::MODEL_ID), "{:?}", agent.models);
    assert_eq!(mode(&a, &session), Some(json!("auto")), "the agent's starting mode");
    let s = session.clone();
    a.until("the agent's commands", move |m| {
        let commands = m.session(&s).and_then(|st| st.meta.as_ref()).and_then(|meta| meta.get("commands"));
        commands.is_some_and(|c| c.to_string().contains("\"compress\""))
    })
    .await?;
    pick_mode(&mut a, &session, "default").await?;

    // A streamed turn, thinking first.
    let one = a.turn(&chat, "[[think]] hello there").await?;
    assert_eq!(one.state, TurnState::Complete, "{one:?}");
    assert_eq!(turn_text(&one), "thought done", "{one:?}");
    assert_eq!(reasoning(&one).trim(), "Let me think about this.", "{one:?}");
    let slow = a.turn(&chat, "[[slow]] count").await?;
    assert_eq!(turn_text(&slow), (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "), "{slow:?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 10, "the answer streamed in pieces");
    a.check_against_snapshot(&chat).await?;

    // A cancel while the answer streams, and the next turn runs.
    let held = a.send(&chat, "[[hold]] wait for it").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| !active_text(m, &c).is_empty()).await?;
    a.dispatch(&chat, stop(&held)).await?;
    let stopped = a.finished(&chat, &held).await?;
    assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:?}");
    let next = a.turn(&chat, "[[think]] still here").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    assert_eq!(turn_text(&next), "thought done", "{next:?}");
    let seen = last_seen(&mock);
    assert!(seen.contains("[[think]] still here"), "the model was sent the next message: {seen}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_calls_a_host_tool_and_asks_the_client_before_it_runs_a_command() -> anyhow::Result<()> {
    let Some(bin) = installed() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-qwen-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-qwen-folder-").tempdir()?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in(QWEN, folder.path()).await?;
    pick_mode(&mut a, &session, "default").await?;
    let session_id = session.trim_start_matches("ahp-session:/").to_owned();

    // The model calls a host tool through the session's /ahp-mcp endpoint by its name (Qwen Code
    // keeps MCP tools' schemas behind its tool_search, naming them to the model) and gets its answer.
    let listed = turn_allowing(&mut a, &chat, "[[call mcp__ahp__list_sessions {}]]").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:?}");
    assert!(
        matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:?}",
        tool_calls(&listed.response_parts)
    );
    assert!(turn_text(&listed).starts_with("tool said:"), "{listed:?}");
    let requests = turn_requests(&mock);
    let offered = tool_names(&requests[0]);
    assert!(
        offered.iter().any(|n| n == "tool_search") && !offered.iter().any(|n| n.starts_with("mcp__ahp__")),
        "the host tools' schemas wait behind tool_search: {offered:?}"
    );
    assert!(requests[0].all_text().contains("mcp__ahp__list_sessions"), "named to the model from the first request");
    let answered = last_seen(&mock);
    assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
    a.check_against_snapshot(&chat).await?;

    // A command the agent asks the client about, allowed once (it runs in the session's folder) and denied once.
    let touch =
        |file: &str| format!(r#"[[call run_shell_command {{"command": "touch {file}", "is_background": false}}]]"#);
    tests::turns::one_allowed_one_denied(&mut a, &session, &chat, folder.path(), touch).await?;
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_loads_its_conversation_after_an_ahpd_restart() -> anyhow::Result<()> {
    let Some(bin) = installed() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-qwen-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-qwen-folder-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-qwen-restart-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), options(&bin, &mock, home.path())).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in(QWEN, folder.path()).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);
    drop(a);
    first.terminate().await?;

    // After the restart the agent loads its conversation (`session/load`): the model sees the
    // earlier turn, and the history the agent replays is not shown again.
    let second = Daemon::start_in(daemon_home.path(), options(&bin, &mock, home.path())).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let next = b.turn(&chat, "what do you remember?").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA") && seen.contains("what do you remember?"), "the earlier turn: {seen}");
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(2), "no replayed turn was added");
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qwen_turn_whose_worker_was_killed_is_resumed_in_the_loaded_conversation() -> anyhow::Result<()> {
    let Some(bin) = installed() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-qwen-home-").tempdir()?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session(QWEN, None).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

    // `kill -9` of the worker once the turn streams: it ends failed, saying it can be resumed.
    let turn_id = a.send(&chat, "[[hold]] tell me a story").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| !active_text(m, &c).is_empty()).await?;
    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let failed = a.finished(&chat, &turn_id).await?;
    assert_eq!(failed.state, TurnState::Error, "{failed:?}");
    assert!(
        matches!(failed.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true)),
        "the error says it can be resumed: {:?}",
        failed.response_parts.last()
    );

    // A new worker loads the conversation and the turn is prompted again in it (its words hold
    // again: let them go at once; the stream the kill cut may take a release too).
    mock.release();
    mock.release();
    let before = turn_requests(&mock).len();
    a.dispatch(&chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: turn_id.clone() })).await?;
    let (c, t) = (chat.clone(), turn_id.clone());
    a.until("the resumed turn to complete", move |m| {
        m.chat(&c).is_some_and(|s| {
            s.active_turn.is_none() && s.turns.last().is_some_and(|x| x.id == t && x.state == TurnState::Complete)
        })
    })
    .await?;
    assert!(turn_requests(&mock).len() > before, "the model was asked again");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "in the loaded conversation: {seen}");
    assert!(seen.contains("cut off before you finished it") && seen.contains("tell me a story"), "{seen}");
    let done = a.mirror.chat(&chat).and_then(|c| c.turns.last().cloned()).expect("the turn");
    assert!(turn_text(&done).contains("released"), "the resumed answer is the turn's: {done:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

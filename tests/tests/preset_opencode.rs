//! The `opencode` ACP preset run for real: `opencode acp` (npm `opencode-ai`, installed by
//! `scripts/deps/opencode.sh`) through the daemon and the official client, its model an
//! OpenAI-compatible provider pointed at the scripted Chat Completions mock. Each test: the
//! handshake and the agent's offers, a streamed turn, a host tool called through `/ahp-mcp`, a
//! permission asked and answered in the client, a cancel, and the conversation loaded again after
//! `kill -9` of the worker and after a daemon restart, judged by what the mock model is sent.
//! Every chat folded through the official reducers equals the host's snapshot.
//!
//! Without the program installed (`$AHPD_OPENCODE_BIN`, else the test cache) each test says it
//! skipped and passes.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{ResponsePart, RootState, ToolCallCancellationReason, ToolCallState, TurnState};
use serde_json::{json, Value};
use tests::installed::{opencode_bin, opencode_entry};
use tests::mocks::openai::MockOpenAi;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

const PRESET: &str = "opencode";

/// The installed program, or why the test skips.
fn program() -> Option<PathBuf> {
    let found = opencode_bin();
    if found.is_none() {
        eprintln!("skipped: opencode is not installed (run scripts/deps/opencode.sh, or set AHPD_OPENCODE_BIN)");
    }
    found
}

/// A daemon whose only agent is the preset running `bin` against `mock`, its own files in `home`.
fn options(bin: &Path, mock: &MockOpenAi, home: &Path, config: Value) -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { PRESET: opencode_entry(PRESET, bin, mock, home, config) } }))
}

fn temp(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

fn tool_calls(parts: &[ResponsePart]) -> Vec<&ToolCallState> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

/// The text of the last turn the model was asked for (not a title).
fn last_seen(mock: &MockOpenAi) -> String {
    mock.turn_requests().last().map(|r| r.all_text()).unwrap_or_default()
}

/// The model ids the root state lists for the preset.
fn models(root: Option<&RootState>) -> Vec<String> {
    let agent = root.and_then(|r| r.agents.iter().find(|a| a.provider == PRESET));
    agent.map(|a| a.models.iter().map(|m| m.id.clone()).collect()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_opens_with_its_offers_and_streams_a_turn() -> anyhow::Result<()> {
    let Some(bin) = program() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = temp("ahpd-opencode-home-")?;
    let folder = temp("ahpd-opencode-folder-")?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path(), json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in(PRESET, folder.path()).await?;

    // The agent's offers: its models (the configured one among them), modes and commands.
    a.until("the agent's models", |m| models(m.root()).iter().any(|id| id == "mock/mock-model")).await?;
    let resolved = a
        .request("resolveSessionConfig", json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": PRESET }))
        .await?;
    let modes = &resolved["schema"]["properties"]["permissionMode"]["enum"];
    assert_eq!(modes, &json!(["build", "plan"]), "opencode's agents are the modes: {resolved}");
    let commands = resolved["_meta"]["commands"].as_array().cloned().unwrap_or_default();
    assert!(commands.iter().any(|c| c["name"] == "review"), "and its commands: {resolved}");

    // Twenty words, one a piece.
    let turn = a.turn(&chat, "hello opencode [[slow]]").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let words: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    assert_eq!(turn_text(&turn), words.join(" "), "{turn:?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 2, "the answer streamed in pieces");
    let seen = last_seen(&mock);
    assert!(seen.contains("hello opencode"), "the prompt reached the model: {seen}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_calls_a_host_tool_through_ahp_mcp() -> anyhow::Result<()> {
    let Some(bin) = program() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = temp("ahpd-opencode-home-")?;
    let folder = temp("ahpd-opencode-folder-")?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path(), json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in(PRESET, folder.path()).await?;
    let session_id = session.trim_start_matches("ahp-session:/").to_owned();

    let listed = a.turn(&chat, "[[call ahp_list_sessions {}]]").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:?}");
    assert!(
        matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:?}",
        tool_calls(&listed.response_parts)
    );
    let requests = mock.turn_requests();
    let offered: Vec<String> = requests[0]
        .body
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|t| t.pointer("/function/name")?.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    assert!(offered.iter().any(|n| n == "ahp_list_sessions"), "the host's tools offered: {offered:?}");
    let answered = last_seen(&mock);
    assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
    assert!(turn_text(&listed).starts_with("tool said:"), "{listed:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_asks_the_client_before_a_command() -> anyhow::Result<()> {
    let Some(bin) = program() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = temp("ahpd-opencode-home-")?;
    let folder = temp("ahpd-opencode-folder-")?;
    // The person's own rule: ask before any command.
    let ask = json!({ "permission": { "bash": "ask" } });
    let daemon = Daemon::start_with(options(&bin, &mock, home.path(), ask)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in(PRESET, folder.path()).await?;
    let bash = |file: &str| {
        let args = json!({ "command": format!("touch {file}"), "description": "Make a file" });
        format!("[[call bash {args}]]")
    };

    // Allowed: the command runs in the session's folder.
    let allowed = a.send(&chat, &bash("allowed.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let asked = a.mirror.chat(&chat).and_then(|c| c.active_turn.clone()).expect("a running turn");
    match tool_calls(&asked.response_parts)[..] {
        [ToolCallState::PendingConfirmation(p)] => {
            let options = p.options.clone().unwrap_or_default();
            assert!(options.len() >= 2, "the agent's own options: {p:?}");
            assert_eq!(options[0].kind, ahp_types::state::ConfirmationOptionKind::Approve, "approvals first: {p:?}");
        }
        ref other => panic!("one call waits for the person: {other:?}"),
    }
    a.check_against_snapshot(&session).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &allowed).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(
        matches!(tool_calls(&turn.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:?}",
        tool_calls(&turn.response_parts)
    );
    assert!(folder.path().join("allowed.txt").exists(), "the allowed command ran");

    // Denied: it does not.
    let denied = a.send(&chat, &bash("denied.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &denied).await?;
    assert!(!folder.path().join("denied.txt").exists(), "the denied command did not run");
    assert!(
        matches!(tool_calls(&turn.response_parts)[..], [ToolCallState::Cancelled(c)] if c.reason == ToolCallCancellationReason::Denied),
        "{:?}",
        tool_calls(&turn.response_parts)
    );
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_is_cancelled_mid_turn_and_answers_the_next() -> anyhow::Result<()> {
    let Some(bin) = program() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = temp("ahpd-opencode-home-")?;
    let folder = temp("ahpd-opencode-folder-")?;
    let daemon = Daemon::start_with(options(&bin, &mock, home.path(), json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session_in(PRESET, folder.path()).await?;

    let long = a.send(&chat, "[[hold]] wait for me").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| {
        m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty())
    })
    .await?;
    let stop = ChatTurnCancelledAction { turn_id: long.clone(), duration: 0, meta: None };
    a.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
    let stopped = a.finished(&chat, &long).await?;
    assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:?}");

    let next = a.turn(&chat, "still there?").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    assert_eq!(turn_text(&next), "mock reply to: still there?", "{next:?}");
    assert_eq!(mock.holding(), 0, "the held answer's connection was closed by the cancel");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_loads_its_conversation_after_a_kill_9_of_the_worker_and_a_restart() -> anyhow::Result<()> {
    let Some(bin) = program() else { return Ok(()) };
    let mock = MockOpenAi::start().await?;
    let home = temp("ahpd-opencode-home-")?;
    let folder = temp("ahpd-opencode-folder-")?;
    let daemon_home = temp("ahpd-opencode-daemon-")?;
    let mut first = Daemon::start_in(daemon_home.path(), options(&bin, &mock, home.path(), json!({}))).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in(PRESET, folder.path()).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

    // kill -9 of the worker: the next message starts it again, and the agent loads the
    // conversation (`session/load`) from its own store: the model hears the first turn.
    let worker = first.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let after_kill = a.turn(&chat, "remember BRAVO").await?;
    assert_eq!(after_kill.state, TurnState::Complete, "{after_kill:?}");
    assert_eq!(turn_text(&after_kill), "mock reply to: remember BRAVO", "{after_kill:?}");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "the first turn reached the model again: {seen}");
    let roles: Vec<String> = mock
        .turn_requests()
        .last()
        .map(|r| r.messages())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m["role"].as_str().map(str::to_owned))
        .collect();
    assert!(roles.iter().any(|r| r == "assistant"), "with its answer: {roles:?}");
    a.check_against_snapshot(&chat).await?;
    drop(a);
    first.terminate().await?;

    // After a daemon restart the same: both earlier turns reach the model, and the history the
    // agent replays is not shown again.
    let second = Daemon::start_in(daemon_home.path(), options(&bin, &mock, home.path(), json!({}))).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(2), "the store kept both turns");
    let next = b.turn(&chat, "what came before?").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    assert_eq!(turn_text(&next), "mock reply to: what came before?", "{next:?}");
    let seen = last_seen(&mock);
    assert!(
        seen.contains("remember ALPHA") && seen.contains("remember BRAVO"),
        "the history reached the model: {seen}"
    );
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(3), "{:?}", b.mirror.chat(&chat));
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

//! The conversation a client edits, end to end through the official AHP client over a real
//! daemon: a chat truncated and sent a new message, a chat forked at a turn, a turn resumed after
//! its worker was killed, a confirmation that outlives a `kill -9` of the daemon, and the bad
//! input each of them refuses. Claude, pi and claude-agent-acp (an ACP agent that declares
//! `loadSession`) run the real programs against the scripted Anthropic and OpenAI mocks, whose
//! logged requests are the evidence of what the model saw.

use ahp_types::actions::{ChatTruncatedAction, ChatTurnResumeAction, StateAction};
use ahp_types::state::{MessageAttachment, MessageEmbeddedResourceAttachment, ResponsePart, TurnState};
use base64::Engine;
use serde_json::json;
use tests::daemon::children_of;
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::{Daemon, DaemonOptions, TestClient};

/// Claude's question tool.
const ASK: &str = "AskUserQuestion";

fn claude_options(mock: &MockAnthropic) -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(mock) } }))
}

/// What the model was sent in its last request, `role: text` per line.
fn last_seen(mock: &MockAnthropic) -> String {
    mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default()
}

/// Runs three turns saying ALPHA, BRAVO and CHARLIE; answers their ids.
async fn three_turns(a: &mut TestClient, chat: &str) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for word in ["ALPHA", "BRAVO", "CHARLIE"] {
        let turn = a.turn(chat, &format!("remember {word}")).await?;
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
        ids.push(turn.id);
    }
    Ok(ids)
}

#[tokio::test]
async fn claude_truncated_after_the_first_turn_goes_on_from_it() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = Daemon::start_with(claude_options(&mock)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude", None).await?;
    let ids = three_turns(&mut a, &chat).await?;

    let truncate = ChatTruncatedAction { turn_id: Some(ids[0].clone()) };
    a.dispatch(&chat, StateAction::ChatTruncated(truncate)).await?;
    let c = chat.clone();
    a.until("the chat to keep one turn", move |m| m.chat(&c).is_some_and(|s| s.turns.len() == 1)).await?;

    let turn = a.turn(&chat, "what do you remember?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "turn 1 was kept: {seen}");
    assert!(!seen.contains("BRAVO") && !seen.contains("CHARLIE"), "turns 2 and 3 were dropped: {seen}");
    assert!(seen.contains("what do you remember?"), "{seen}");

    // And it goes on from there: the next request holds turn 1, the new one and the next.
    assert_eq!(a.turn(&chat, "and now?").await?.state, TurnState::Complete);
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA") && seen.contains("what do you remember?"), "{seen}");
    assert!(!seen.contains("BRAVO"), "{seen}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pi_truncated_after_the_first_turn_goes_on_from_it() -> anyhow::Result<()> {
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    let entry = tests::installed::pi_entry(&mock, agent_dir.path())?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "pi": entry } }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    let ids = three_turns(&mut a, &chat).await?;

    let truncate = ChatTruncatedAction { turn_id: Some(ids[0].clone()) };
    let seq = a.dispatch(&chat, StateAction::ChatTruncated(truncate)).await?;
    assert_eq!(a.refusal(seq).await?, "(accepted)");
    let turn = a.turn(&chat, "what do you remember?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(seen.contains("remember ALPHA"), "turn 1 was kept: {seen}");
    assert!(!seen.contains("BRAVO") && !seen.contains("CHARLIE"), "turns 2 and 3 were dropped: {seen}");
    assert!(seen.contains("what do you remember?"), "{seen}");

    assert_eq!(a.turn(&chat, "and now?").await?.state, TurnState::Complete);
    let seen = mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(
        seen.contains("remember ALPHA") && seen.contains("what do you remember?") && !seen.contains("BRAVO"),
        "{seen}"
    );
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

/// Three turns in `chat`, a fork of it at turn two, then each spoken to in turn: the backend's
/// next request (`last_seen`, the text of its last request) holds the fork's own history, or the
/// original's, and never the other's. Answers the fork.
async fn fork_at_turn_two_and_go_on(
    a: &mut TestClient,
    session: &str,
    chat: &str,
    last_seen: impl Fn() -> String,
) -> anyhow::Result<String> {
    let ids = three_turns(a, chat).await?;

    let fork = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    a.request(
        "createChat",
        json!({ "channel": session, "chat": fork, "source": { "kind": "fork", "chat": chat, "turnId": ids[1] } }),
    )
    .await
    .map_err(|e| anyhow::anyhow!("createChat: {e}"))?;
    a.subscribe(&fork).await?;
    let copied: Vec<String> =
        a.mirror.chat(&fork).map(|c| c.turns.iter().map(|t| t.id.clone()).collect()).unwrap_or_default();
    assert_eq!(copied, ids[..2].to_vec(), "the fork holds turns 1 and 2");

    assert_eq!(a.turn(&fork, "fork speaking").await?.state, TurnState::Complete);
    let seen = last_seen();
    assert!(seen.contains("remember ALPHA") && seen.contains("remember BRAVO"), "turns 1-2: {seen}");
    assert!(!seen.contains("CHARLIE"), "not turn 3: {seen}");

    assert_eq!(a.turn(chat, "original speaking").await?.state, TurnState::Complete);
    let seen = last_seen();
    assert!(seen.contains("remember ALPHA") && seen.contains("remember CHARLIE"), "all three: {seen}");
    assert!(!seen.contains("fork speaking"), "nothing of the fork: {seen}");

    assert_eq!(a.turn(&fork, "fork again").await?.state, TurnState::Complete);
    let seen = last_seen();
    assert!(
        seen.contains("fork speaking") && !seen.contains("CHARLIE") && !seen.contains("original speaking"),
        "{seen}"
    );
    a.check_against_snapshot(&fork).await?;
    a.check_against_snapshot(chat).await?;
    a.check_against_snapshot(session).await?;
    Ok(fork)
}

#[tokio::test]
async fn claude_forked_at_turn_two_of_three_goes_on_independently() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = Daemon::start_with(claude_options(&mock)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    fork_at_turn_two_and_go_on(&mut a, &session, &chat, || last_seen(&mock)).await?;
    Ok(())
}

/// A daemon whose `claude-acp` agent is the real claude-agent-acp (which declares `loadSession`)
/// against `mock`, with `home` as its own `HOME`.
fn claude_acp_options(mock: &MockAnthropic, home: &std::path::Path) -> DaemonOptions {
    DaemonOptions::with_config(
        json!({ "agents": { "claude-acp": acp_adapter_entry(&claude_agent_acp(), mock, home) } }),
    )
}

#[tokio::test]
async fn an_acp_chat_forked_at_turn_two_of_three_goes_on_independently_and_after_a_kill_9() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-acp-fork-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), claude_acp_options(&mock, home.path())).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("claude-acp", None).await?;
    let fork = fork_at_turn_two_and_go_on(&mut a, &session, &chat, || last_seen(&mock)).await?;
    drop(a);
    first.kill9().await?;

    // After a kill -9 of the daemon each is loaded (`session/load`) from the agent's own record.
    let second = Daemon::start_in(daemon_home.path(), claude_acp_options(&mock, home.path())).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&fork).await?;
    b.subscribe(&chat).await?;
    // Forked again at once, before its agent runs again: the store kept that it loads sessions.
    let first_turn = b.mirror.chat(&chat).and_then(|c| c.turns.first()).map(|t| t.id.clone()).expect("turn 1");
    let early = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    let source = json!({ "kind": "fork", "chat": chat, "turnId": first_turn });
    b.request("createChat", json!({ "channel": session, "chat": early, "source": source }))
        .await
        .map_err(|e| anyhow::anyhow!("a fork before the chat's next message: {e}"))?;
    b.subscribe(&early).await?;
    assert_eq!(b.turn(&early, "early fork speaking").await?.state, TurnState::Complete);
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA") && !seen.contains("BRAVO"), "turn 1 alone: {seen}");
    assert_eq!(b.turn(&fork, "fork after restart").await?.state, TurnState::Complete);
    let seen = last_seen(&mock);
    assert!(seen.contains("remember BRAVO") && seen.contains("fork again"), "the fork's own history: {seen}");
    assert!(!seen.contains("CHARLIE") && !seen.contains("original speaking"), "{seen}");
    assert_eq!(b.turn(&chat, "original after restart").await?.state, TurnState::Complete);
    let seen = last_seen(&mock);
    assert!(seen.contains("remember CHARLIE") && seen.contains("original speaking"), "the original's: {seen}");
    assert!(!seen.contains("fork speaking") && !seen.contains("fork again"), "nothing of the fork: {seen}");
    b.check_against_snapshot(&fork).await?;
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

/// The text of every message the pi mock was sent in its last request.
fn pi_last_seen(mock: &tests::mocks::openai::MockOpenAi) -> String {
    mock.requests().last().map(|r| r.all_text()).unwrap_or_default()
}

#[tokio::test]
async fn pi_forked_at_turn_two_of_three_goes_on_independently_and_after_a_kill_9() -> anyhow::Result<()> {
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    let home = tempfile::Builder::new().prefix("ahpd-pi-fork-").tempdir()?;
    let options = || -> anyhow::Result<DaemonOptions> {
        let entry = tests::installed::pi_entry(&mock, agent_dir.path())?;
        Ok(DaemonOptions::with_config(json!({ "agents": { "pi": entry } })))
    };
    let mut first = Daemon::start_in(home.path(), options()?).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("pi", None).await?;
    let fork = fork_at_turn_two_and_go_on(&mut a, &session, &chat, || pi_last_seen(&mock)).await?;
    drop(a);
    first.kill9().await?;

    // After a kill -9 of the daemon each goes on from its own record.
    let second = Daemon::start_in(home.path(), options()?).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&fork).await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&fork).map(|c| c.turns.len()), Some(4), "the fork's turns came back");
    assert_eq!(b.turn(&fork, "fork after restart").await?.state, TurnState::Complete);
    let seen = pi_last_seen(&mock);
    assert!(seen.contains("remember BRAVO") && seen.contains("fork again"), "the fork's own history: {seen}");
    assert!(!seen.contains("CHARLIE") && !seen.contains("original speaking"), "{seen}");
    assert_eq!(b.turn(&chat, "original after restart").await?.state, TurnState::Complete);
    let seen = pi_last_seen(&mock);
    assert!(seen.contains("remember CHARLIE") && seen.contains("original speaking"), "the original's: {seen}");
    assert!(!seen.contains("fork speaking") && !seen.contains("fork again"), "nothing of the fork: {seen}");
    b.check_against_snapshot(&fork).await?;
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

/// Once the running turn `turn_id` has said something, `kill -9` of the chat's worker: the turn
/// ends failed, saying it can be resumed.
async fn kill_the_worker_once_it_streams(
    a: &mut TestClient,
    daemon: &Daemon,
    chat: &str,
    turn_id: &str,
) -> anyhow::Result<()> {
    let c = chat.to_owned();
    a.until("the answer to start streaming", move |m| {
        m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty())
    })
    .await?;
    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let failed = a.finished(chat, turn_id).await?;
    assert_eq!(failed.state, TurnState::Error, "{failed:?}");
    assert!(
        matches!(failed.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true)),
        "the error says it can be resumed: {:?}",
        failed.response_parts.last()
    );
    Ok(())
}

/// Resumes `turn_id` (`chat/turnResume`) and waits until it completes as the chat's last turn.
async fn resume_until_complete(a: &mut TestClient, chat: &str, turn_id: &str) -> anyhow::Result<()> {
    a.dispatch(chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: turn_id.to_owned() })).await?;
    let (c, t) = (chat.to_owned(), turn_id.to_owned());
    a.until("the resumed turn to complete", move |m| {
        m.chat(&c).is_some_and(|s| {
            s.active_turn.is_none() && s.turns.last().is_some_and(|x| x.id == t && x.state == TurnState::Complete)
        })
    })
    .await
}

#[tokio::test]
async fn a_claude_turn_whose_worker_was_killed_is_resumed_and_completes() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = Daemon::start_with(claude_options(&mock)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

    // The turn carries an attachment, which its resumed request carries again.
    let mut message = tests::user_message("SLOW tell me a story");
    message.attachments = Some(vec![MessageAttachment::EmbeddedResource(MessageEmbeddedResourceAttachment {
        label: "plot.txt".into(),
        range: None,
        display_kind: None,
        meta: None,
        data: base64::engine::general_purpose::STANDARD.encode("the plot: ATTACHED-ZULU"),
        content_type: "text/plain".into(),
        selection: None,
    })]);
    let (turn_id, _) = a.send_message(&chat, message).await?;
    kill_the_worker_once_it_streams(&mut a, &daemon, &chat, &turn_id).await?;

    let before = mock.turn_requests().len();
    resume_until_complete(&mut a, &chat, &turn_id).await?;
    assert!(mock.turn_requests().len() > before, "the model was asked again");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "in the resumed conversation: {seen}");
    assert!(seen.contains("tell me a story"), "the turn's request goes on: {seen}");
    let request = mock.turn_requests().last().cloned().ok_or_else(|| anyhow::anyhow!("no request"))?;
    let resumed = request
        .messages()
        .into_iter()
        .rev()
        .find(|m| m["role"] == "user" && m.to_string().contains("cut off before you finished"))
        .ok_or_else(|| anyhow::anyhow!("no resumed request in {seen}"))?;
    assert!(resumed.to_string().contains("ATTACHED-ZULU"), "the resumed request carries the attachment: {resumed}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn an_acp_turn_whose_worker_was_killed_is_resumed_and_completes() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let daemon = Daemon::start_with(claude_acp_options(&mock, home.path())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude-acp", None).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

    let turn_id = a.send(&chat, "SLOW tell me a story").await?;
    kill_the_worker_once_it_streams(&mut a, &daemon, &chat, &turn_id).await?;

    // A new worker loads the conversation (`session/load`) and the turn goes on in it.
    let before = mock.turn_requests().len();
    resume_until_complete(&mut a, &chat, &turn_id).await?;
    assert!(mock.turn_requests().len() > before, "the model was asked again");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "in the loaded conversation: {seen}");
    assert!(seen.contains("cut off before you finished it") && seen.contains("tell me a story"), "{seen}");
    let done = a.mirror.chat(&chat).and_then(|c| c.turns.last().cloned()).expect("the turn");
    assert!(tests::turn_text(&done).contains("tell me a story"), "the resumed answer is the turn's: {done:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_pi_turn_whose_worker_was_killed_is_resumed_and_completes() -> anyhow::Result<()> {
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    let entry = tests::installed::pi_entry(&mock, agent_dir.path())?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "pi": entry } }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);

    let turn_id = a.send(&chat, "[[hold]] tell me a story").await?;
    kill_the_worker_once_it_streams(&mut a, &daemon, &chat, &turn_id).await?;

    // The resumed request holds again (it carries the turn's words): let it go at once. The
    // stream the kill cut may not have seen its connection close yet and take one release.
    mock.release();
    mock.release();
    let before = mock.requests().len();
    resume_until_complete(&mut a, &chat, &turn_id).await?;
    assert!(mock.requests().len() > before, "the model was asked again");
    let seen = pi_last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "in the resumed conversation: {seen}");
    assert!(seen.contains("cut off before you finished it") && seen.contains("tell me a story"), "{seen}");
    let done = a.mirror.chat(&chat).and_then(|c| c.turns.last().cloned()).expect("the turn");
    assert!(tests::turn_text(&done).contains("released"), "the resumed answer is the turn's: {done:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn bad_edits_are_refused_and_leave_the_chat_as_it_was() -> anyhow::Result<()> {
    let options = DaemonOptions::with_config(json!({ "agents": { "echo": tests::agents::echo_chunked(20, 1) } }));
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    let done = a.turn(&chat, "one two").await?;
    assert_eq!(done.state, TurnState::Complete);
    let before = a.mirror.chat(&chat).cloned();

    let truncate = ChatTruncatedAction { turn_id: Some("no-such-turn".into()) };
    let seq = a.dispatch(&chat, StateAction::ChatTruncated(truncate)).await?;
    let why = a.refusal(seq).await?;
    assert!(why.contains("no turn no-such-turn"), "{why}");

    let seq = a.dispatch(&chat, StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id: done.id.clone() })).await?;
    let why = a.refusal(seq).await?;
    assert!(why.contains("did not fail in a way that can be resumed"), "a completed turn: {why}");
    assert_eq!(a.mirror.chat(&chat).cloned(), before, "the chat is unchanged");

    // A running turn: not forked, not truncated.
    let running = a.send(&chat, "a b c d e f g h i j k l m n o p q r s t u v w x y z").await?;
    let fork = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    let params =
        json!({ "channel": session, "chat": fork, "source": { "kind": "fork", "chat": chat, "turnId": running } });
    match a.request("createChat", params).await {
        Err(ahp::ClientError::Rpc(e)) => assert!(e.message.contains("still running"), "{}", e.message),
        other => anyhow::bail!("forking a running turn was not refused: {other:?}"),
    }
    let truncate = ChatTruncatedAction { turn_id: Some(done.id.clone()) };
    let seq = a.dispatch(&chat, StateAction::ChatTruncated(truncate)).await?;
    let why = a.refusal(seq).await?;
    assert!(why.contains("is running"), "{why}");
    let turn = a.finished(&chat, &running).await?;
    assert_eq!(turn.state, TurnState::Complete, "the running turn went on: {turn:?}");
    let ids: Vec<String> =
        a.mirror.chat(&chat).map(|c| c.turns.iter().map(|t| t.id.clone()).collect()).unwrap_or_default();
    assert_eq!(ids, vec![done.id.clone(), running], "nothing was dropped");
    let chats = a.mirror.session(&session).map(|s| s.chats.len()).unwrap_or_default();
    assert_eq!(chats, 1, "no fork was opened");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_confirmation_pending_at_kill_9_of_the_daemon_is_pending_after_restart_and_approving_it_completes(
) -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-parked-").tempdir()?;
    let mut first = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);
    let target = home.path().join("parked.txt");
    let args = json!({ "file_path": target, "content": "hi" });
    let turn_id = a.send(&chat, &format!("make a file TOOL:Write ARGS:{args}")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let asked = a.mirror.chat(&chat).and_then(|c| c.active_turn.clone()).expect("the turn runs");
    drop(a);
    first.kill9().await?;

    let second = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let restored = b.mirror.chat(&chat).and_then(|c| c.active_turn.clone());
    assert_eq!(restored.as_ref().map(|t| &t.id), Some(&turn_id), "the turn is still running");
    assert_eq!(restored.map(|t| t.response_parts), Some(asked.response_parts), "holding the same question");
    assert_eq!(tests::client::waiting_calls(b.mirror.chat(&chat).expect("chat")), waiting, "still waiting");

    b.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = b.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(target.exists(), "the approved write happened after the restart");
    let seen = last_seen(&mock);
    assert!(seen.contains("remember ALPHA"), "in the resumed conversation: {seen}");
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_pi_confirmation_pending_at_kill_9_of_the_daemon_is_pending_after_restart_and_approving_it_completes(
) -> anyhow::Result<()> {
    let mock = tests::mocks::openai::MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    let home = tempfile::Builder::new().prefix("ahpd-pi-parked-").tempdir()?;
    let options = || -> anyhow::Result<DaemonOptions> {
        let entry = tests::installed::pi_entry(&mock, agent_dir.path())?;
        Ok(DaemonOptions::with_config(json!({ "agents": { "pi": entry } })))
    };
    let mut first = Daemon::start_in(home.path(), options()?).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("pi", Some(json!({"ask": "writes"}))).await?;
    assert_eq!(a.turn(&chat, "remember ALPHA").await?.state, TurnState::Complete);
    let target = home.path().join("parked.txt");
    let turn_id = a.send(&chat, &format!("make a file [[bash echo hi > {}]]", target.display())).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let asked = a.mirror.chat(&chat).and_then(|c| c.active_turn.clone()).expect("the turn runs");
    drop(a);
    first.kill9().await?;

    let second = Daemon::start_in(home.path(), options()?).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let restored = b.mirror.chat(&chat).and_then(|c| c.active_turn.clone());
    assert_eq!(restored.as_ref().map(|t| &t.id), Some(&turn_id), "the turn is still running");
    assert_eq!(restored.map(|t| t.response_parts), Some(asked.response_parts), "holding the same question");
    assert_eq!(tests::client::waiting_calls(b.mirror.chat(&chat).expect("chat")), waiting, "still waiting");

    let before = mock.requests().len();
    // The resumed pi asks the same again and is answered with what was decided: the turn would
    // wait for ever if it were asked of a person a second time.
    b.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = b.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(target.exists(), "the approved command ran after the restart");
    let seen = mock.requests()[before..].iter().map(|r| r.all_text()).collect::<Vec<_>>().join("\n");
    assert!(seen.contains("remember ALPHA"), "in the resumed conversation: {seen}");
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

/// A config whose `scripted` agent is the scripted ACP agent, keeping its sessions in `state`
/// so `session/load` works in a new process.
fn scripted_acp(state: &std::path::Path) -> DaemonOptions {
    let fake = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let args = json!([fake.display().to_string(), "--state-dir", state.display().to_string()]);
    DaemonOptions::with_config(json!({ "agents": {
        "scripted": { "kind": "acp", "displayName": "Scripted ACP", "options": { "command": "python3", "args": args } },
    }}))
}

#[tokio::test]
async fn an_idle_acp_session_whose_agent_loads_sessions_leaves_memory_and_its_next_message_resumes(
) -> anyhow::Result<()> {
    let state = tempfile::Builder::new().prefix("ahpd-acp-state-").tempdir()?;
    let daemon = Daemon::start_with(scripted_acp(state.path()).unloading_idle_after(60_000)).await?;
    let clock = TestClient::connect(&daemon.url, "clock").await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("scripted", None).await?;
    assert_eq!(tests::turn_text(&a.turn(&chat, "say first words").await?), "first words");

    // A second chat in the session is an ACP session of its own.
    let second = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    a.request("createChat", json!({ "channel": session, "chat": second }))
        .await
        .map_err(|e| anyhow::anyhow!("createChat: {e}"))?;
    a.subscribe(&second).await?;
    assert_eq!(
        tests::turn_text(&a.turn(&second, "history").await?),
        "0 prompts before this",
        "a conversation of its own"
    );

    // Steering is refused up front: ACP cannot take a message mid-prompt.
    let steer = ahp_types::actions::ChatPendingMessageSetAction {
        kind: ahp_types::state::PendingMessageKind::Steering,
        id: "s1".into(),
        message: tests::client::user_message("and also"),
    };
    let seq = a.dispatch(&chat, StateAction::ChatPendingMessageSet(steer)).await?;
    let why = a.refusal(seq).await?;
    assert!(why.contains("cannot take a message while it works"), "{why}");

    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no acp worker"))?;
    let agents = children_of(worker);
    assert_eq!(agents.len(), 2, "one agent process per chat");
    a.client.shutdown().await;
    daemon.advance_until_loaded(&clock, 60_000, 0).await?;
    let left = tests::daemon::until_all_gone(&agents, "the unload").await;
    assert!(left.is_empty(), "the agents of the unloaded session ended: {left:?}");

    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(1), "the turn came back from the store");
    let turn = b.turn(&chat, "history").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(
        tests::turn_text(&turn),
        "1 prompts before this",
        "the agent loaded the conversation, which holds the first prompt"
    );
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn an_acp_agent_that_cannot_load_a_session_refuses_a_fork_and_loses_a_killed_turn() -> anyhow::Result<()> {
    let fake = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "agents": {
        "scripted": { "kind": "acp", "options": { "command": "python3", "args": [fake.display().to_string(), "--no-load"] } },
    }})))
    .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("scripted", None).await?;
    let first = a.turn(&chat, "say first words").await?;
    assert_eq!(first.state, TurnState::Complete, "{first:?}");

    let fork = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    let asked = a
        .request(
            "createChat",
            json!({ "channel": session, "chat": fork, "source": { "kind": "fork", "chat": chat, "turnId": first.id } }),
        )
        .await;
    let why = asked.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("The scripted agent cannot fork a chat"), "refused in words: {why}");

    let hanging = a.send(&chat, "say working; hang").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| {
        m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty())
    })
    .await?;
    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no worker"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let lost = a.finished(&chat, &hanging).await?;
    assert!(
        matches!(lost.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable.is_none()),
        "not offered to resume: {:?}",
        lost.response_parts.last()
    );
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

/// The chat a subagent of `chat`'s tool call works in, once the session lists it.
fn subagent_chat(m: &tests::Mirror, session: &str, chat: &str) -> Option<String> {
    m.session(session)?.chats.iter().find_map(|c| match &c.origin {
        Some(ahp_types::state::ChatOrigin::Tool { chat: parent, .. }) if parent == chat => Some(c.resource.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn a_claude_task_subagent_is_a_chat_that_streams_is_read_back_after_a_restart_and_stops() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-subagent-").tempdir()?;
    let mut first = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "hello").await?.state, TurnState::Complete);
    let offered = mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    let task = ["Agent", "Task"].into_iter().find(|t| offered.iter().any(|o| o == t)).expect("a Task tool");

    let args = json!({ "description": "Say the words", "prompt": "SLOW REPLY:the subagent's words",
                       "subagent_type": "general-purpose", "run_in_background": false });
    let turn_id = a.send(&chat, &format!("delegate TOOL:{task} ARGS:{args}")).await?;
    let (s, c) = (session.clone(), chat.clone());
    a.until("the subagent's chat", move |m| subagent_chat(m, &s, &c).is_some()).await?;
    let sub = subagent_chat(&a.mirror, &session, &chat).expect("listed");
    a.subscribe(&sub).await?;
    let listed = a.mirror.chat(&chat).and_then(|c| c.background_work.clone()).unwrap_or_default();
    assert!(
        listed.iter().any(|w| matches!(w, ahp_types::state::BackgroundWork::Subagent(s) if s.chat == sub)),
        "the parent chat lists it as background work while it runs: {listed:?}"
    );
    let main = a.finished(&chat, &turn_id).await?;
    assert_eq!(main.state, TurnState::Complete, "{main:?}");
    let result = main.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => match &tc.tool_call {
            ahp_types::state::ToolCallState::Completed(c) => serde_json::to_string(&c.content).ok(),
            _ => None,
        },
        _ => None,
    });
    assert!(result.is_some_and(|r| r.contains("the subagent's words")), "the Task's result came back: {main:?}");
    let done = a.mirror.chat(&sub).and_then(|c| c.turns.last().cloned()).expect("the subagent's turn ended");
    assert_eq!(done.state, TurnState::Complete, "{done:?}");
    assert_eq!(tests::turn_text(&done), "the subagent's words");
    let streamed = a.envelopes.iter().any(|e| e.channel == sub && matches!(e.action, StateAction::ChatResponsePart(_)));
    assert!(streamed, "its parts reached the client as it worked");
    let state = a.mirror.chat(&sub).cloned().expect("the subagent's chat");
    assert!(matches!(&state.origin, Some(ahp_types::state::ChatOrigin::Tool { .. })), "{:?}", state.origin);
    a.check_against_snapshot(&sub).await?;
    a.check_against_snapshot(&session).await?;
    drop(a);
    first.terminate().await?;

    // Read back after a restart.
    let second = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    b.subscribe(&sub).await?;
    let again = b.mirror.chat(&sub).cloned().expect("the subagent's chat came back");
    assert_eq!(again.turns.last().map(tests::turn_text), Some("the subagent's words".to_owned()));
    assert_eq!(again.origin, state.origin);

    // A long subagent, stopped from its own chat: it ends cancelled, and the parent's turn goes on.
    let args = json!({ "description": "Talk at length", "prompt": "SLOW LONG REPLY:on and on",
                       "subagent_type": "general-purpose", "run_in_background": false });
    let turn_id = b.send(&chat, &format!("delegate TOOL:{task} ARGS:{args}")).await?;
    let (s, c, old) = (session.clone(), chat.clone(), sub.clone());
    b.until("the second subagent's chat", move |m| {
        m.session(&s).is_some_and(|st| {
            st.chats.iter().any(|x| {
                x.resource != old
                    && matches!(&x.origin, Some(ahp_types::state::ChatOrigin::Tool { chat: p, .. }) if *p == c)
            })
        })
    })
    .await?;
    let long = b
        .mirror
        .session(&session)
        .and_then(|st| {
            st.chats
                .iter()
                .find(|x| x.resource != sub && x.origin.is_some() && x.resource != chat)
                .map(|x| x.resource.clone())
        })
        .expect("listed");
    b.subscribe(&long).await?;
    let l = long.clone();
    b.until("the long subagent to work", move |m| m.chat(&l).and_then(|c| c.active_turn.as_ref()).is_some()).await?;
    let running = b.mirror.chat(&long).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.clone()).expect("running");
    let stop = ahp_types::actions::ChatTurnCancelledAction { turn_id: running.clone(), duration: 0, meta: None };
    b.dispatch(&long, StateAction::ChatTurnCancelled(stop)).await?;
    let stopped = b.finished(&long, &running).await?;
    assert_eq!(stopped.state, TurnState::Cancelled);
    let main = b.finished(&chat, &turn_id).await?;
    assert_eq!(main.state, TurnState::Complete, "the parent's turn went on: {main:?}");
    let stopped_call = main.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call,
            ahp_types::state::ToolCallState::Completed(c) if !c.success && serde_json::to_string(&c.content).is_ok_and(|t| t.contains("interrupted"))))
    });
    assert!(stopped_call, "Claude Code stopped the subagent, and its Task call says so: {main:?}");
    b.check_against_snapshot(&long).await?;
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_claude_agent_acp_subagent_is_a_chat_that_streams_asks_and_is_read_back_after_a_kill_9() -> anyhow::Result<()>
{
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    // The adapter starts in `auto`, whose classifier cannot judge the mock's Agent call.
    std::fs::create_dir_all(home.path().join(".claude"))?;
    let settings = json!({ "permissions": { "defaultMode": "default" } });
    std::fs::write(home.path().join(".claude/settings.json"), settings.to_string())?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-acp-subagent-").tempdir()?;
    let mut first = Daemon::start_in(daemon_home.path(), claude_acp_options(&mock, home.path())).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("claude-acp", None).await?;
    assert_eq!(a.turn(&chat, "hello").await?.state, TurnState::Complete);
    let offered = mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    let task = ["Agent", "Task"].into_iter().find(|t| offered.iter().any(|o| o == t)).expect("a Task tool");

    // The adapter says the subagent's work on the parent session, each update naming the Agent
    // call in `_meta.claudeCode.parentToolUseId`; the worker makes a chat of it.
    let bash = json!({ "command": "echo from-the-subagent", "description": "Say where it is from" });
    let args = json!({ "description": "Run a command", "prompt": format!("SLOW TOOL:Bash ARGS:{bash}"),
                       "subagent_type": "general-purpose", "run_in_background": false });
    let turn_id = a.send(&chat, &format!("delegate TOOL:{task} ARGS:{args}")).await?;
    let (s, c) = (session.clone(), chat.clone());
    a.until("the subagent's chat", move |m| subagent_chat(m, &s, &c).is_some()).await?;
    let sub = subagent_chat(&a.mirror, &session, &chat).expect("listed");
    a.subscribe(&sub).await?;
    let listed = a.mirror.chat(&chat).and_then(|c| c.background_work.clone()).unwrap_or_default();
    assert!(
        listed.iter().any(|w| matches!(w, ahp_types::state::BackgroundWork::Subagent(s) if s.chat == sub)),
        "the parent chat lists it as background work while it runs: {listed:?}"
    );
    let main = a.finished(&chat, &turn_id).await?;
    assert_eq!(main.state, TurnState::Complete, "{main:?}");
    let done = a.mirror.chat(&sub).and_then(|c| c.turns.last().cloned()).expect("the subagent's turn ended");
    assert_eq!(done.state, TurnState::Complete, "{done:?}");
    assert_eq!(done.message.text, format!("SLOW TOOL:Bash ARGS:{bash}"), "its prompt opens its turn");
    let said = tests::turn_text(&done);
    assert!(said.starts_with("I will call Bash.") && said.contains("from-the-subagent"), "{said}");
    let ran = done.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call,
            ahp_types::state::ToolCallState::Completed(c) if c.tool_name == "Bash" && c.success))
    });
    assert!(ran, "its own call is in its own chat: {done:?}");
    let parents_calls: Vec<String> = main
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
            _ => None,
        })
        .map(|call| call["toolName"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(parents_calls, vec![task], "the parent holds only the Agent call: {main:?}");
    let streamed = a.envelopes.iter().any(|e| e.channel == sub && matches!(e.action, StateAction::ChatResponsePart(_)));
    assert!(streamed, "its parts reached the client as it worked");
    let state = a.mirror.chat(&sub).cloned().expect("the subagent's chat");
    assert!(
        matches!(&state.origin, Some(ahp_types::state::ChatOrigin::Tool { chat: p, .. }) if *p == chat),
        "{:?}",
        state.origin
    );
    let work = a.mirror.chat(&chat).and_then(|c| c.background_work.clone()).unwrap_or_default();
    assert!(work.is_empty(), "no longer the parent's background work once it ended: {work:?}");
    a.check_against_snapshot(&sub).await?;
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;

    // A subagent's command that asks: the question waits on the subagent's chat, and the answer
    // given there reaches the agent through the parent's session.
    let touch = json!({ "command": "touch made-by-the-subagent.txt", "description": "Make a file" });
    let args = json!({ "description": "Make a file", "prompt": format!("TOOL:Bash ARGS:{touch}"),
                       "subagent_type": "general-purpose", "run_in_background": false });
    let turn_id = a.send(&chat, &format!("delegate TOOL:{task} ARGS:{args}")).await?;
    let (s, c, old) = (session.clone(), chat.clone(), sub.clone());
    a.until("the second subagent's chat", move |m| {
        m.session(&s).is_some_and(|st| {
            st.chats.iter().any(|x| {
                x.resource != old
                    && matches!(&x.origin, Some(ahp_types::state::ChatOrigin::Tool { chat: p, .. }) if *p == c)
            })
        })
    })
    .await?;
    let asking = a
        .mirror
        .session(&session)
        .and_then(|st| st.chats.iter().find(|x| x.resource != sub && x.origin.is_some()).map(|x| x.resource.clone()))
        .expect("listed");
    a.subscribe(&asking).await?;
    let waiting = a.until_waiting_calls(&asking, 1).await?;
    assert!(
        a.mirror.chat(&chat).map(tests::client::waiting_calls).unwrap_or_default().is_empty(),
        "the question is the subagent's, not its parent's"
    );
    a.confirm(&asking, &waiting[0].0, &waiting[0].1, true).await?;
    let main = a.finished(&chat, &turn_id).await?;
    assert_eq!(main.state, TurnState::Complete, "{main:?}");
    let done = a.mirror.chat(&asking).and_then(|c| c.turns.last().cloned()).expect("its turn ended");
    let ran = done.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call,
            ahp_types::state::ToolCallState::Completed(c) if c.tool_name == "Bash" && c.success))
    });
    assert!(ran, "the allowed command ran: {done:?}");
    a.check_against_snapshot(&asking).await?;
    drop(a);
    first.kill9().await?;

    // Read back after a kill -9 of the daemon.
    let second = Daemon::start_in(daemon_home.path(), claude_acp_options(&mock, home.path())).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&sub).await?;
    let again = b.mirror.chat(&sub).cloned().expect("the subagent's chat came back");
    assert_eq!(again.origin, state.origin);
    assert_eq!(again.turns, state.turns, "read back as it was");
    Ok(())
}

#[tokio::test]
async fn a_wakeup_nobody_watches_is_not_offered_the_question_tool_and_is_told_it_cannot_ask() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let mut options = claude_options(&mock);
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    let daemon = Daemon::start_with(options).await?;
    let clock = TestClient::connect(&daemon.url, "clock").await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    let args = json!({ "delaySeconds": 60, "prompt": "wake up and report" });
    let turn = a.turn(&chat, &format!("later TOOL:mcp__host__schedule_wakeup ARGS:{args}")).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(!last_seen(&mock).contains("Nobody is watching"), "a watched turn is not told so");
    let offered = mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    assert!(offered.iter().any(|t| t == ASK), "a watched turn may ask: {offered:?}");
    // Nobody watches from here. A connection's messages are handled in order, so once a request
    // sent after the unsubscribes is answered the daemon has taken them (a closed socket alone
    // may still be unread when the clock moves).
    for channel in [&session, &chat] {
        a.client.unsubscribe(channel.to_string()).await.map_err(|e| anyhow::anyhow!("unsubscribe: {e}"))?;
    }
    a.request("listSessions", json!({ "channel": "ahp-root://" }))
        .await
        .map_err(|e| anyhow::anyhow!("listSessions: {e}"))?;
    a.client.shutdown().await;

    let watched = mock.turn_requests().len();
    tests::clock::advance(&clock, 60_000).await?;
    let woke = mock
        .wait_for(tests::PATIENCE, |r| {
            r.is_turn() && r.last_user_text().contains("wake up and report") && !r.last_user_text().contains("TOOL:")
        })
        .await
        .expect("the wakeup's turn asked the model");
    let seen = woke.transcript_text();
    assert!(seen.contains("Nobody is watching this run, so nobody can answer a question"), "{seen}");
    // Not offered the tool at all (seed 003): every request of the unattended turn lacks it.
    let offered = woke.tool_names();
    assert!(!offered.is_empty() && !offered.iter().any(|t| t == ASK), "{offered:?}");
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let c = chat.clone();
    let ended =
        move |m: &tests::client::Mirror| m.chat(&c).is_some_and(|s| s.turns.len() == 2 && s.active_turn.is_none());
    b.until("the wakeup's turn to end", ended).await?;
    let woken = mock.turn_requests().split_off(watched);
    assert!(!woken.is_empty());
    for request in woken {
        assert!(!request.tool_names().iter().any(|t| t == ASK), "{:?}", request.tool_names());
    }

    // Watched again, the next turn may ask again.
    let turn = b.turn(&chat, "and now?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let offered = mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    assert!(offered.iter().any(|t| t == ASK), "a watched turn may ask again: {offered:?}");
    Ok(())
}

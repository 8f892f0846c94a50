//! Agents out of process, through the official client: the notes agent's tools and questions, the
//! host-owned queue and steering, seed 004's silent rules, a worker killed mid-turn, workers that
//! misbehave, a clean stop, and a worker written in Python.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ahp_types::actions::StateAction;
use ahp_types::state::{
    MessageKind, PendingMessageKind, ResponsePart, SessionInputRequest, SessionLifecycle, ToolCallState, TurnState,
};
use serde_json::json;
use tests::client::waiting_calls;
use tests::daemon::{alive, children_of};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn workers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers")
}

fn notes_daemon() -> DaemonOptions {
    DaemonOptions::with_config(
        json!({ "agents": { "notes": tests::agents::notes(), "echo": tests::agents::echo_paced(0) } }),
    )
}

fn tool_calls(turn: &ahp_types::state::Turn) -> Vec<&ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

fn input_needed(client: &TestClient, session: &str) -> Vec<SessionInputRequest> {
    client.mirror.session(session).and_then(|s| s.input_needed.clone()).unwrap_or_default()
}

/// The worker process of `provider` among the daemon's children.
fn worker_pid(daemon: &Daemon, provider: &str) -> Option<i32> {
    children_of(daemon.pid()).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|b| *b == 0).any(|kv| kv == format!("AHPD_WORKER_PROVIDER={provider}").as_bytes()))
            .unwrap_or(false)
    })
}

#[tokio::test]
async fn a_tool_call_allowed_and_one_denied() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;

    let turn_id = a.send(&chat, "write alpha hello world").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let state = a.mirror.chat(&chat).expect("chat").clone();
    assert!(state.active_turn.is_some() && state.turns.is_empty(), "the running turn is activeTurn, not in turns");
    assert!(
        matches!(input_needed(&a, &session).as_slice(), [SessionInputRequest::ToolConfirmation(_)]),
        "the host raised the question"
    );
    a.check_against_snapshot(&session).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    let calls = tool_calls(&turn);
    assert_eq!(calls.len(), 1, "chat/toolCallStart made exactly one part");
    assert!(matches!(calls[0], ToolCallState::Completed(c) if c.success));
    assert!(turn_text(&turn).contains("Wrote alpha."));
    assert!(input_needed(&a, &session).is_empty(), "taken down once answered");

    let turn_id = a.send(&chat, "write beta nope").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert!(matches!(tool_calls(&turn)[0], ToolCallState::Cancelled(_)), "a denied call is cancelled");
    assert!(turn_text(&turn).contains("Not written: beta."));

    let turn = a.turn(&chat, "read alpha").await?;
    assert!(turn_text(&turn).contains("hello world"), "the allowed write happened: {}", turn_text(&turn));
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_host_tool_declared_destructive_waits_for_a_person_and_a_denial_lets_the_turn_go_on() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (victim, _) = a.create_session("echo", None).await?;
    // Even where notes asks before nothing of its own, the host's destructive tool waits.
    let (_session, chat) = a.create_session("notes", Some(json!({"ask": "never"}))).await?;
    let call = format!("call delete_session {}; write kept yes", json!({ "session": victim }));
    let turn_id = a.send(&chat, &call).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "a denial lets the turn go on: {turn:?}");
    let calls = tool_calls(&turn);
    assert!(matches!(calls[..], [ToolCallState::Cancelled(_), ToolCallState::Completed(_)]), "{calls:?}");
    let text = turn_text(&turn);
    assert!(text.contains("Not run: delete_session.") && text.contains("Wrote kept."), "{text}");
    a.subscribe(&victim).await?;
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn questions_answered_declined_and_two_at_once_in_either_order() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;

    let turn_id = a.send(&chat, "ask What is your name?").await?;
    let questions = a.until_questions(&chat, 1).await?;
    assert!(matches!(input_needed(&a, &session).as_slice(), [SessionInputRequest::ChatInput(_)]));
    a.answer(&chat, &questions[0], Some("Ann")).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert!(turn_text(&turn).contains("You answered: Ann"), "{}", turn_text(&turn));

    let turn_id = a.send(&chat, "ask Shall we?").await?;
    let questions = a.until_questions(&chat, 1).await?;
    a.answer(&chat, &questions[0], None).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert!(turn_text(&turn).contains("You declined."));

    // Two tools in parallel ask twice before either is answered: both are held, by id.
    let turn_id = a.send(&chat, "write one 1; write two 2").await?;
    let waiting = a.until_waiting_calls(&chat, 2).await?;
    assert_eq!(input_needed(&a, &session).len(), 2);
    a.confirm(&chat, &waiting[1].0, &waiting[1].1, true).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    let calls = tool_calls(&turn);
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| matches!(c, ToolCallState::Completed(x) if x.success)),
        "answered in the other order, both ran"
    );

    // Two questions at once, answered last first.
    let turn_id = a.send(&chat, "ask first?; ask second?").await?;
    let questions = a.until_questions(&chat, 2).await?;
    a.answer(&chat, &questions[1], Some("B")).await?;
    a.answer(&chat, &questions[0], Some("A")).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    let text = turn_text(&turn);
    assert!(text.contains("You answered: A") && text.contains("You answered: B"), "{text}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_refused_confirmation_or_answer_changes_nothing() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let turn_id = a.send(&chat, "write gamma x").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let seq = a.confirm(&chat, &turn_id, "no-such-call", true).await?;
    let answered = a.answer(&chat, "no-such-question", Some("x")).await?;
    a.until("both refusals", |_| true).await?;
    let refusals = |c: &TestClient| {
        c.envelopes
            .iter()
            .filter(|e| e.rejection_reason.is_some())
            .map(|e| e.origin.as_ref().map(|o| o.client_seq))
            .collect::<Vec<_>>()
    };
    while refusals(&a).len() < 2 {
        a.next_event(tests::PATIENCE).await?;
    }
    assert_eq!(refusals(&a), vec![Some(seq), Some(answered)]);
    assert_eq!(a.mirror.chat(&chat).map(waiting_calls).map(|w| w.len()), Some(1), "still waiting");
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    a.finished(&chat, &turn_id).await?;
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_queued_message_starts_after_the_turn_before_it() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let first = a.send(&chat, "write held 1").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.pending(&chat, PendingMessageKind::Queued, "q1", "list").await?;
    let c = chat.clone();
    a.until("the message to be queued", move |m| {
        m.chat(&c).and_then(|s| s.queued_messages.as_ref()).is_some_and(|q| q.len() == 1)
    })
    .await?;
    assert_eq!(a.mirror.chat(&chat).map(|s| s.turns.len()), Some(0), "it waits behind the running turn");
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    a.finished(&chat, &first).await?;
    let c = chat.clone();
    a.until("the queued turn to run and end", move |m| {
        m.chat(&c).is_some_and(|s| s.turns.len() == 2 && s.active_turn.is_none())
    })
    .await?;
    let state = a.mirror.chat(&chat).expect("chat").clone();
    assert_eq!(state.turns[1].message.text, "list");
    assert!(state.queued_messages.is_none(), "the queue emptied");
    assert!(tool_calls(&state.turns[1]).iter().all(|c| matches!(c, ToolCallState::Completed(_))));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_message_that_meets_a_turn_the_host_started_is_queued_behind_it() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let first = a.send(&chat, "write held 1").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    // A turn a client started refuses another, as ever.
    let (_, seq) = a.send_message(&chat, tests::user_message("too soon")).await?;
    let refused = a.refusal(seq).await?;
    assert_eq!(refused, format!("Turn {first} is running in this chat; send a steering or queued message instead"));

    // The host starts the queued message as the first turn ends; it parks on a question.
    a.pending(&chat, PendingMessageKind::Queued, "q1", "ask still there?").await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    a.finished(&chat, &first).await?;
    a.until_questions(&chat, 1).await?;
    let hosts = a.mirror.chat(&chat).and_then(|s| s.active_turn.as_ref()).map(|t| t.id.clone()).expect("running");

    // A client's turn that meets it is queued behind it, under the id it gave, and runs next.
    let (mine, seq) = a.send_message(&chat, tests::user_message("list")).await?;
    let queued = a.refusal(seq).await?;
    assert_eq!(
        queued,
        format!("Turn {hosts} began in this chat before your message came (the host started it); your message is queued behind it as {mine}")
    );
    let c = chat.clone();
    let id = mine.clone();
    a.until("the message to be queued", move |m| {
        m.chat(&c).and_then(|s| s.queued_messages.as_ref()).is_some_and(|q| q.len() == 1 && q[0].id == id)
    })
    .await?;
    let questions = a.until_questions(&chat, 1).await?;
    a.answer(&chat, &questions[0], Some("yes")).await?;
    let c = chat.clone();
    a.until("the queued message to run and end", move |m| {
        m.chat(&c).is_some_and(|s| s.turns.len() == 3 && s.active_turn.is_none())
    })
    .await?;
    let state = a.mirror.chat(&chat).expect("chat").clone();
    let texts: Vec<&str> = state.turns.iter().map(|t| t.message.text.as_str()).collect();
    assert_eq!(texts, ["write held 1", "ask still there?", "list"]);
    assert!(state.turns.iter().all(|t| t.state == TurnState::Complete), "{:?}", state.turns);
    assert!(state.queued_messages.as_ref().is_none_or(Vec::is_empty), "the queue emptied");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_steering_message_is_taken_mid_turn() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let turn_id = a.send(&chat, "write steady 1").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.pending(&chat, PendingMessageKind::Steering, "s1", "also mind the tests").await?;
    let c = chat.clone();
    a.until("the steering message to be taken", move |m| {
        m.chat(&c).is_some_and(|s| {
            s.steering_message.is_none()
                && s.active_turn.as_ref().is_some_and(|t| {
                    t.response_parts.iter().any(
                    |p| matches!(p, ResponsePart::Markdown(md) if md.content.contains("Steered: also mind the tests")),
                )
                })
        })
    })
    .await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert!(turn_text(&turn).contains("Steered: also mind the tests"));
    assert_eq!(a.mirror.chat(&chat).map(|s| s.turns.len()), Some(1), "taken into the turn, not run as another");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_stop_ends_the_turn_and_drops_what_was_queued_behind_it() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;
    let turn_id = a.send(&chat, "write stopped 1").await?;
    a.until_waiting_calls(&chat, 1).await?;
    a.pending(&chat, PendingMessageKind::Queued, "q1", "list").await?;
    let c = chat.clone();
    a.until("queued", move |m| m.chat(&c).is_some_and(|s| s.queued_messages.is_some())).await?;
    a.dispatch(
        &chat,
        StateAction::ChatTurnCancelled(ahp_types::actions::ChatTurnCancelledAction {
            turn_id: turn_id.clone(),
            duration: 5,
            meta: None,
        }),
    )
    .await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Cancelled);
    assert!(matches!(tool_calls(&turn)[0], ToolCallState::Cancelled(_)), "the parked call ended with its turn");
    // Nothing starts behind a stop, and the backend has settled its question: the next turn runs.
    let state = a.mirror.chat(&chat).expect("chat").clone();
    assert!(state.queued_messages.is_none() && state.active_turn.is_none());
    // The session's list follows on its own channel, in an envelope after the turn's end: wait for it.
    let s = session.clone();
    a.until("the session to need no input", move |m| {
        m.session(&s).is_some_and(|s| s.input_needed.as_ref().is_none_or(|l| l.is_empty()))
    })
    .await?;
    assert!(input_needed(&a, &session).is_empty());
    let next = a.turn(&chat, "list").await?;
    assert_eq!(next.state, TurnState::Complete);
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn the_rules_that_fail_silently_hold_through_the_reducers() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let turn_id = a.send(&chat, "list; fail; error; later good night").await?;
    let turn = a.finished(&chat, &turn_id).await?;
    // One ending: an error ends the turn (and only that).
    assert_eq!(turn.state, TurnState::Error);
    assert!(matches!(turn.response_parts.last(), Some(ResponsePart::Error(_))), "chat/error appends its part last");
    assert!(turn.duration.is_some_and(|d| d >= 0), "a real duration");
    let calls = tool_calls(&turn);
    assert_eq!(calls.len(), 2, "each tool call is one part");
    // A call that needs no answer says confirmed: not-needed and runs; a failed tool is completed.
    let completed: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            ToolCallState::Completed(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(completed.len(), 2, "{calls:?}");
    assert!(completed.iter().any(|c| c.success && c.content.is_some()), "the result is one object with its content");
    assert!(
        completed.iter().any(|c| !c.success && c.error.is_some()),
        "a failed tool is completed with success: false"
    );
    // A turn the agent starts itself is said before its first part: it is in the history whole.
    let c = chat.clone();
    a.until("the agent's own turn", move |m| m.chat(&c).is_some_and(|s| s.turns.len() == 2)).await?;
    let own = a.mirror.chat(&chat).expect("chat").turns[1].clone();
    assert_eq!(own.message.origin.kind, MessageKind::Agent);
    assert_eq!(turn_text(&own), "Later, as you asked: good night");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn killing_a_worker_mid_turn_fails_only_its_turn_and_the_next_message_works() -> anyhow::Result<()> {
    let config = json!({ "agents": {
        "echo1": tests::agents::echo_paced(60),
        "echo2": tests::agents::echo_paced(60) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (s1, c1) = a.create_session("echo1", None).await?;
    let (_s2, c2) = a.create_session("echo2", None).await?;
    let words: String = (0..30).map(|i| format!("word{i} ")).collect();
    let t1 = a.send(&c1, &words).await?;
    let t2 = a.send(&c2, &words).await?;
    let (x1, x2) = (c1.clone(), c2.clone());
    a.until("both turns to stream", move |m| {
        let streaming =
            |c: &str| m.chat(c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| !t.response_parts.is_empty());
        streaming(&x1) && streaming(&x2)
    })
    .await?;
    let victim = worker_pid(&daemon, "echo1").expect("echo1's worker");
    let killed_at = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL)?;
    let failed = a.finished(&c1, &t1).await?;
    eprintln!("the killed worker's turn ended {:?} after the kill", killed_at.elapsed());
    assert_eq!(failed.state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = failed.response_parts.last() else { anyhow::bail!("no error part") };
    assert!(error.error.message.contains("killed by signal 9"), "{}", error.error.message);
    let survived = a.finished(&c2, &t2).await?;
    assert_eq!(survived.state, TurnState::Complete, "the other backend's turn ran on untouched");
    assert_eq!(turn_text(&survived), words);
    // The worker comes back; the next message to the same session works.
    let next = a.turn(&c1, "back again").await?;
    assert_eq!(next.state, TurnState::Complete);
    assert_eq!(turn_text(&next), "back again");
    assert_ne!(worker_pid(&daemon, "echo1"), Some(victim));
    a.check_against_snapshot(&c1).await?;
    a.check_against_snapshot(&s1).await?;
    Ok(())
}

#[tokio::test]
async fn a_workers_last_words_reach_every_client_as_plain_text() -> anyhow::Result<()> {
    let config = json!({ "agents": {
        "py": { "kind": "command", "command": "python3", "args": [workers_dir().join("echo.py")] } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("py", None).await?;
    // It writes a line in colour to stderr and exits mid-turn: the turn's error quotes its last
    // words, which carried the colour codes into every client.
    let failed = a.turn(&chat, "die").await?;
    assert_eq!(failed.state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = failed.response_parts.last() else { anyhow::bail!("no error part") };
    let said = &error.error.message;
    assert!(said.contains("exited with code 1. Its last words on stderr: "), "{said}");
    assert!(said.contains(" ERROR going down"), "{said}");
    assert!(!said.contains('\u{1b}'), "no escape codes reach a client: {said:?}");
    Ok(())
}

#[tokio::test]
async fn a_session_made_on_a_stopped_worker_fails_after_a_minute_saying_why() -> anyhow::Result<()> {
    let mut options = DaemonOptions::with_config(json!({ "agents": { "echo": tests::agents::echo() } }));
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let worker = worker_pid(&daemon, "echo").expect("echo's worker");
    let pid = nix::unistd::Pid::from_raw(worker);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)?;

    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    a.request("createSession", json!({ "channel": session, "provider": "echo" })).await?;
    a.subscribe(&session).await?;
    let lifecycle = |a: &TestClient| a.mirror.session(&session).map(|s| s.lifecycle.clone());
    assert_eq!(lifecycle(&a), Some(SessionLifecycle::Creating));
    // A minute on the host's clock: the worker still does not answer, and the session fails,
    // saying why, where it sat in `creating` with no word for as long as the worker was stopped.
    tests::clock::advance(&a, 59_999).await?;
    a.request("ping", json!({ "channel": "ahp-root://" })).await?;
    a.pump()?;
    assert_eq!(lifecycle(&a), Some(SessionLifecycle::Creating), "within the minute it is still being made");
    tests::clock::advance(&a, 1).await?;
    let s = session.clone();
    a.until("the session to fail", move |m| m.session(&s).is_some_and(|st| st.lifecycle == SessionLifecycle::Failed))
        .await?;
    let error = a.mirror.session(&session).and_then(|s| s.creation_error.clone()).expect("a creation error");
    assert_eq!(
        error.message,
        "The echo agent did not start this chat within 60 s: its worker does not answer (stopped or hung). Delete this session and make it again once the agent answers."
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT)?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn misbehaving_workers_are_reported_and_backed_off_while_the_daemon_serves_on() -> anyhow::Result<()> {
    let dir = workers_dir();
    let config = json!({
        "workerHandshakeTimeoutMs": 500,
        "agents": {
            "echo": tests::agents::echo(),
            "silent": { "kind": "command", "command": dir.join("silent.sh") },
            "garbage": { "kind": "command", "command": dir.join("garbage.sh") },
            "crash": { "kind": "command", "command": dir.join("crash.sh") } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    daemon.wait_for_log("worker silent did not answer its handshake within 500 ms", tests::PATIENCE).await?;
    let garbage = daemon.wait_for_log("worker garbage", tests::PATIENCE).await?;
    assert!(garbage.contains("not the protocol") && garbage.contains("hello, I am not JSON-RPC"), "{garbage}");
    let crash = daemon.wait_for_log("worker crash", tests::PATIENCE).await?;
    assert!(crash.contains("exited with code 3") && crash.contains("boom"), "{crash}");
    // It backs off: the delays between attempts grow.
    daemon.wait_for_log("starting it again in 0.5 s", tests::PATIENCE).await?;
    daemon.wait_for_log("starting it again in 1.0 s", tests::PATIENCE).await?;
    daemon.wait_for_log("starting it again in 2.0 s", tests::PATIENCE).await?;
    // The daemon serves on.
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_s, chat) = a.create_session("echo", None).await?;
    assert_eq!(turn_text(&a.turn(&chat, "still here").await?), "still here");
    let refused = a.request("createSession", json!({ "channel": "ahp-session:/c1", "provider": "crash" })).await;
    assert!(
        matches!(&refused, Err(ahp::ClientError::Rpc(e)) if e.code == -32002 && e.message.contains("crash")),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test]
async fn sigterm_stops_every_worker_and_leaves_no_process_behind() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let pid_file = home.path().join("sleeper.pid");
    let config = json!({ "agents": {
        "echo": tests::agents::echo(),
        "py": { "kind": "command", "command": "python3", "args": [workers_dir().join("echo.py")],
                "options": { "spawnSleeper": pid_file } } } });
    let mut daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let deadline = Instant::now() + tests::PATIENCE;
    while !pid_file.exists() {
        anyhow::ensure!(Instant::now() < deadline, "the worker never started its grandchild");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sleeper: i32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    let workers = children_of(daemon.pid());
    assert!(workers.len() >= 2, "two workers run: {workers:?}");
    assert!(alive(sleeper));
    let status = daemon.terminate().await?;
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean stop");
    for pid in workers.iter().chain([&sleeper]) {
        assert!(!alive(*pid), "process {pid} was left behind");
    }
    Ok(())
}

#[tokio::test]
async fn a_worker_written_in_python_serves_a_session() -> anyhow::Result<()> {
    let config = json!({ "agents": { "py": { "kind": "command", "command": "python3",
        "args": [workers_dir().join("echo.py")], "options": { "reply": "py says " } } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("py", None).await?;
    let turn = a.turn(&chat, "hello from the test").await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(turn_text(&turn), "py says hello from the test");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn worker_protocol_doc_names_every_method() -> anyhow::Result<()> {
    let doc = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/workers.md"))?;
    for method in [
        "initialize",
        "shutdown",
        "agent/schema",
        "agent/completions",
        "agent/probe",
        "agent/directories",
        "agent/list",
        "agent/find",
        "agent/transcript",
        "agent/inheritedChatConfig",
        "session/create",
        "session/sendMessage",
        "session/changeModel",
        "session/changeAgent",
        "session/abort",
        "session/steer",
        "session/withdrawSteering",
        "session/setDraft",
        "session/confirm",
        "session/answer",
        "session/setConfig",
        "session/settings",
        "session/setTools",
        "session/close",
        "emit",
        "turn/recorded",
        "agent/probeChanged",
        "tool/run",
        "resource/keep",
        "process/groups",
    ] {
        assert!(doc.contains(&format!("`{method}`")), "docs/workers.md does not document {method}");
    }
    Ok(())
}

/// A worker killed while nothing runs, and a message sent at once, before the daemon has seen the
/// worker go: the message starts the worker again and is answered, not failed with the dead
/// worker's pipe.
#[tokio::test]
async fn a_message_sent_at_once_after_an_idle_worker_is_killed_is_answered() -> anyhow::Result<()> {
    let config = json!({ "agents": { "echo1": tests::agents::echo() } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_s1, c1) = a.create_session("echo1", None).await?;
    assert_eq!(turn_text(&a.turn(&c1, "first").await?), "first");
    for round in 0..2 {
        let victim = worker_pid(&daemon, "echo1").expect("echo1's worker");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL)?;
        let next = a.turn(&c1, &format!("again {round}")).await?;
        assert_eq!(next.state, TurnState::Complete, "round {round}: {next:?}");
        assert_eq!(turn_text(&next), format!("again {round}"));
    }
    a.check_against_snapshot(&c1).await?;
    Ok(())
}

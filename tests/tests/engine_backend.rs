//! A fourth backend written on `agent_runner`'s session engine in the tests (`src/bin/shout.rs`,
//! well under 300 lines), run by the real `ahpd` as a `command` agent and driven through the
//! official client: its turns, a question answered, one parked and settled by a stop, and a host
//! tool that declares itself destructive waiting for a person while any other runs as asked.

use ahp_types::state::{ToolCallState, TurnState};
use serde_json::json;
use tests::turns::{deny_a_destructive_call, stop, tool_calls};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// A daemon whose `shout` agent is the engine's test backend, beside `echo`.
async fn shout_daemon() -> anyhow::Result<Daemon> {
    let config = json!({ "agents": {
        "shout": { "kind": "command", "command": env!("CARGO_BIN_EXE_shout") },
        "echo": { "kind": "echo" },
    } });
    Daemon::start_with(DaemonOptions::with_config(config)).await
}

#[tokio::test]
async fn a_backend_on_the_engine_says_a_turn_asks_a_question_and_a_stop_settles_what_it_parked() -> anyhow::Result<()> {
    let daemon = shout_daemon().await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("shout", None).await?;

    let turn = a.turn(&chat, "say hello there").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(turn_text(&turn), "HELLO THERE");

    let turn_id = a.send(&chat, "ask who are you?; say done").await?;
    let questions = a.until_questions(&chat, 1).await?;
    a.answer(&chat, &questions[0], Some("Ann")).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn_text(&turn), "YOU SAID: ANN.DONE", "{turn:?}");

    // A question nobody answers, and a stop: the engine settles it, and the chat goes on.
    let turn_id = a.send(&chat, "ask anyone there?").await?;
    a.until_questions(&chat, 1).await?;
    let s = session.clone();
    a.until("the session to need input", move |m| {
        m.session(&s).and_then(|st| st.input_needed.as_ref()).is_some_and(|n| n.len() == 1)
    })
    .await?;
    a.dispatch(&chat, stop(&turn_id)).await?;
    let stopped = a.finished(&chat, &turn_id).await?;
    assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:?}");
    let s = session.clone();
    a.until("nothing to be left waiting", move |m| {
        m.session(&s).is_some_and(|st| st.input_needed.as_ref().is_none_or(Vec::is_empty))
    })
    .await?;
    let next = a.turn(&chat, "say still here").await?;
    assert_eq!(turn_text(&next), "STILL HERE");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_host_tool_declared_destructive_waits_for_a_person_and_a_denial_lets_the_turn_go_on() -> anyhow::Result<()> {
    let daemon = shout_daemon().await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (victim, _) = a.create_session("echo", None).await?;
    let (_session, chat) = a.create_session("shout", None).await?;

    // Any other host tool runs as the model asked.
    let listed = a.turn(&chat, "call list_sessions {}").await?;
    assert!(matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success), "{listed:?}");

    let call = format!("call delete_session {}; say carried on", json!({ "session": victim }));
    let turn = deny_a_destructive_call(&mut a, &chat, &call, &victim).await?;
    assert_eq!(turn_text(&turn), "NOT RUN: delete_session.CARRIED ON", "{turn:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

//! The edges the real CLI will not show on demand, against a scripted fake `claude`
//! (`tests/fake/claude`): a crash mid-turn, a line that is not JSON, a control request the worker
//! does not know, a CLI that is not installed, turns handed while one runs, and an unattended
//! turn that cannot ask.

mod common;

use std::time::Duration;

use agent_runner::testing::TestParent;
use ahp_types::state::TurnState;
use common::*;
use serde_json::json;

async fn parent_with(command: &std::path::Path) -> TestParent {
    let (tools, _) = tool_handler();
    let parent = TestParent::in_process(agent_claude::factory(), tools);
    parent.initialize("claude", "claude", options(command, json!({})), None).await.expect("the handshake");
    parent
}

fn error_message(ran: &Ran) -> String {
    ran.turn
        .response_parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::Error(e) => Some(e.error.message.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_crash_mid_turn_ends_it_with_the_stderr_tail_and_the_next_message_resumes() {
    let dir = temp_dir("fake-crash");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-crash";
    let start = chat_start(chat, dir.path());
    let id = start.conversation_id.clone();
    parent.create(start).await.expect("create");

    let crashed = run_turn(&mut parent, chat, "t1", "please CRASH").await;
    assert_eq!(crashed.turn.state, TurnState::Error);
    let message = error_message(&crashed);
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(message.contains("fake: something broke"), "{message}");
    assert_eq!(markdown(&crashed.turn), "partial", "what streamed before the crash stays");

    // A fresh process on the same session id, resuming it (the CLI had the prompt).
    let next = run_turn(&mut parent, chat, "t2", "ARGS").await;
    assert_eq!(next.turn.state, TurnState::Complete);
    assert!(next.text().contains(&format!("--resume={id}")), "{}", next.text());
}

#[tokio::test]
async fn a_line_that_is_not_json_ends_the_turn_and_the_next_message_starts_afresh() {
    let dir = temp_dir("fake-garbage");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-garbage";
    parent.create(chat_start(chat, dir.path())).await.expect("create");

    let broken = run_turn(&mut parent, chat, "t1", "GARBAGE please").await;
    assert_eq!(broken.turn.state, TurnState::Error);
    let message = error_message(&broken);
    assert!(message.contains("not JSON") && message.contains("this is not json"), "{message}");

    let next = run_turn(&mut parent, chat, "t2", "hello again").await;
    assert_eq!(next.turn.state, TurnState::Complete);
    assert_eq!(next.text(), "fake says: hello again");
}

#[tokio::test]
async fn a_control_request_the_worker_does_not_know_is_answered_with_an_error() {
    let dir = temp_dir("fake-unknown");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-unknown";
    parent.create(chat_start(chat, dir.path())).await.expect("create");

    let ran = run_turn(&mut parent, chat, "t1", "UNKNOWN").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert_eq!(ran.text(), "got error: ahpd does not answer frobnicate");
}

#[tokio::test]
async fn a_missing_cli_says_how_to_install_it() {
    let dir = temp_dir("fake-missing");
    let mut parent = parent_with(std::path::Path::new("claude-is-not-installed-here")).await;
    let chat = "ahp-chat:/fake-missing";
    parent.create(chat_start(chat, dir.path())).await.expect("create");

    let ran = run_turn(&mut parent, chat, "t1", "hello").await;
    assert_eq!(ran.turn.state, TurnState::Error);
    assert_eq!(
        error_message(&ran),
        "claude-is-not-installed-here was not found; install it, or put its directory on the PATH the daemon runs with"
    );
}

#[tokio::test]
async fn one_process_serves_the_turns_and_each_records_its_prompt() {
    let dir = temp_dir("fake-one-process");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-one-process";
    parent.create(chat_start(chat, dir.path())).await.expect("create");

    let first = run_turn(&mut parent, chat, "t1", "PID").await;
    let second = run_turn(&mut parent, chat, "t2", "PID").await;
    assert!(first.text().starts_with("pid: "), "{}", first.text());
    assert_eq!(first.text(), second.text(), "the process stays open between turns");
    // The fake prints no lifecycle lines: the prompt's uuid is recorded when its output comes.
    assert_eq!(first.recorded.len(), 1, "{:?}", first.recorded);
    assert_eq!(first.recorded[0].0, "t1");
    assert_ne!(first.recorded[0].1, second.recorded[0].1);

    // Closing the chat stops its process (and reaps it).
    let pid = first.text().trim_start_matches("pid: ").to_owned();
    parent.peer().request_value(protocol::methods::parent::CLOSE, json!({"chat": chat})).await.expect("close");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the CLI {pid} outlived its chat");
}

#[tokio::test]
async fn turns_handed_while_one_runs_queue_behind_it() {
    use agent_runner::testing::{user_message, Said};
    use ahp_types::actions::StateAction;
    let dir = temp_dir("fake-queue");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-queue";
    parent.create(chat_start(chat, dir.path())).await.expect("create");

    // Both prompts are handed before the first turn can have ended (the CLI is not even started).
    for (turn, text) in [("t1", "first"), ("t2", "second")] {
        let params = protocol::SendMessageParams {
            chat: chat.into(),
            turn_id: turn.into(),
            message: user_message(text),
            instructions: None,
            unattended: false,
            attachments: Vec::new(),
        };
        parent.peer().request_value(protocol::methods::parent::SEND_MESSAGE, params).await.expect("handed over");
    }
    let mut order: Vec<(String, &'static str)> = Vec::new();
    while order.iter().filter(|(_, k)| *k == "end").count() < 2 {
        let Some(said) = parent.next(TURN).await else { panic!("the turns did not end: {order:?}") };
        let Said::Action { action, .. } = said else { continue };
        match action {
            StateAction::ChatResponsePart(p) => order.push((p.turn_id, "part")),
            StateAction::ChatTurnComplete(c) => order.push((c.turn_id, "end")),
            StateAction::ChatError(e) => panic!("a turn failed: {e:?}"),
            _ => {}
        }
    }
    let turns: Vec<&str> = order.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(turns, vec!["t1", "t1", "t2", "t2"], "{order:?}");
}

#[tokio::test]
async fn a_resume_of_a_conversation_claude_never_wrote_down_starts_it() {
    let dir = temp_dir("fake-unrecorded");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-unrecorded";
    let mut start = chat_start(chat, dir.path());
    start.resume = true;
    let id = start.conversation_id.clone();
    parent.create(start).await.expect("create");

    let ran = run_turn(&mut parent, chat, "t1", "ARGS").await;
    assert!(ran.text().contains(&format!("--session-id={id}")), "{}", ran.text());
}

#[tokio::test]
async fn probe_reads_the_models_from_the_cli() {
    let parent = parent_with(&fake_bin()).await;
    let probe: protocol::ProbeResult = tokio::time::timeout(
        Duration::from_secs(60),
        parent.peer().request(protocol::methods::parent::PROBE, json!({})),
    )
    .await
    .expect("in time")
    .expect("a probe");
    assert_eq!(probe.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), vec!["Fake"]);
}

/// Hands `text` as turn `turn_id`, unattended (nobody watches it), and collects it.
async fn run_unattended(parent: &mut TestParent, chat: &str, turn_id: &str, text: &str) -> Ran {
    parent.send_as(chat, turn_id, text, true).await.expect("handed over");
    finish_turn(parent, chat).await
}

#[tokio::test]
async fn an_unattended_turn_runs_on_a_process_without_the_question_tool() {
    let dir = temp_dir("fake-unattended");
    let mut parent = parent_with(&fake_bin()).await;
    let chat = "ahp-chat:/fake-unattended";
    parent.create(chat_start(chat, dir.path())).await.expect("create");
    let withheld = "--disallowedTools=AskUserQuestion";

    let watched = run_turn(&mut parent, chat, "t1", "ARGS").await;
    assert!(!watched.text().contains(withheld), "{}", watched.text());
    let alone = run_unattended(&mut parent, chat, "t2", "ARGS").await;
    assert!(alone.text().contains(withheld), "a process of its own, without the tool: {}", alone.text());
    // A CLI that asks anyway is told at once that nobody can answer; no question is parked.
    let asked = run_unattended(&mut parent, chat, "t3", "ASK").await;
    assert_eq!(asked.turn.state, TurnState::Complete);
    assert!(asked.text().starts_with("asked: deny: Nobody is watching this run"), "{}", asked.text());
    assert!(
        !asked.actions.iter().any(|a| matches!(a, ahp_types::actions::StateAction::ChatInputRequested(_))),
        "{:?}",
        asked.actions
    );
    let again = run_turn(&mut parent, chat, "t4", "ARGS").await;
    assert!(!again.text().contains(withheld), "watched again, it may ask: {}", again.text());
}

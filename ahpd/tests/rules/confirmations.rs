//! Confirmations and questions (seeds 003, 004): parked in a map keyed by id, so several raised at
//! once are each answered, in either order; the host checks a confirmation and an answer against
//! the chat's state before it hands either on, refusing a stale one in its own words; the
//! session's `inputNeeded` raises an entry for each and takes it down once answered; a stop
//! settles everything parked.

use ahp_types::state::TurnState;
use serde_json::json;

use crate::world::{calls_of, open_questions, results_of, text_of, waiting_calls, Client, Echo, World};

async fn notes_with(config: serde_json::Value) -> (World, Client, String) {
    let mut world = World::builder().agent("notes").start().await;
    let alice = world.connect("alice").await;
    let session = world.create_session_with(&alice, "notes", json!({ "config": config })).await.expect("a session");
    (world, alice, session.uri)
}

async fn notes() -> (World, Client, String) {
    notes_with(json!({})).await
}

fn kinds(world: &World, who: &Client, session: &str) -> Vec<String> {
    world.input_needed(who, session).iter().map(|r| r["kind"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_write_waits_to_be_allowed_and_runs_once_it_is() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan ship it").await;
    let waiting = waiting_calls(world.chat(&alice));
    assert_eq!(waiting.len(), 1, "the write waits for a person");
    world.confirm(&alice, &waiting[0], true);
    world.until_idle().await;
    let turn = world.last_turn(&alice);
    assert_eq!(results_of(turn), [(true, String::new())]);
    assert!(text_of(turn).contains("Wrote plan."), "{}", text_of(turn));
}

#[tokio::test(start_paused = true)]
async fn a_denied_write_does_not_run_and_the_turn_says_so() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan ship it").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a waiting call");
    world.confirm(&alice, &call, false);
    world.until_idle().await;
    let turn = world.last_turn(&alice);
    assert!(text_of(turn).contains("Not written: plan."), "{}", text_of(turn));
    assert_eq!(turn.state, TurnState::Complete);
    world.turn(&alice, "read plan").await;
    assert_eq!(results_of(world.last_turn(&alice)), [(false, "There is no note called plan.".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn two_calls_asking_at_once_are_each_answered_in_either_order() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write a one; write b two").await;
    let waiting = waiting_calls(world.chat(&alice));
    assert_eq!(waiting.len(), 2, "both ask before either is answered");
    world.confirm(&alice, &waiting[1], true);
    world.until_idle().await;
    assert_eq!(waiting_calls(world.chat(&alice)), [waiting[0].clone()], "the first still waits, not lost");
    world.confirm(&alice, &waiting[0], false);
    world.until_idle().await;
    let said = text_of(world.last_turn(&alice));
    assert!(said.contains("Wrote b.") && said.contains("Not written: a."), "{said}");
}

#[tokio::test(start_paused = true)]
async fn two_questions_at_once_are_each_answered_in_either_order() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask colour; ask size").await;
    let questions = open_questions(world.chat(&alice));
    assert_eq!(questions.len(), 2);
    world.answer(&alice, &questions[1], Some("large"));
    world.until_idle().await;
    assert_eq!(open_questions(world.chat(&alice)), [questions[0].clone()]);
    world.answer(&alice, &questions[0], Some("blue"));
    world.until_idle().await;
    let said = text_of(world.last_turn(&alice));
    assert!(said.contains("You answered: blue") && said.contains("You answered: large"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_declined_question_is_said_as_declined() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask anything").await;
    let question = open_questions(world.chat(&alice)).pop().expect("a question");
    world.answer(&alice, &question, None);
    world.until_idle().await;
    assert!(text_of(world.last_turn(&alice)).contains("You declined."));
}

#[tokio::test(start_paused = true)]
async fn confirming_a_call_that_is_not_waiting_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan x; ask hold").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a waiting call");
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    let seq = world.confirm(&alice, &call, true);
    assert_eq!(world.refusal(&alice, seq).await, format!("Tool call {call} is not waiting to be allowed"));
}

#[tokio::test(start_paused = true)]
async fn confirming_a_call_the_running_turn_does_not_hold_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask hold").await;
    let seq = world.confirm(&alice, "nope:tool9", true);
    assert_eq!(world.refusal(&alice, seq).await, "There is no tool call nope:tool9 in the running turn");
}

#[tokio::test(start_paused = true)]
async fn a_confirmation_that_comes_after_its_turn_ended_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan x").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a waiting call");
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    let chat = world.current(&alice);
    let turn = world.last_turn(&alice).id.clone();
    let stale = json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call, "approved": false });
    let seq = world.dispatch(&alice, &chat, stale);
    assert_eq!(world.refusal(&alice, seq).await, format!("There is no tool call {call} in the running turn"));
    assert_eq!(results_of(world.last_turn(&alice)), [(true, String::new())], "what ran stays as it ran");
}

#[tokio::test(start_paused = true)]
async fn answering_a_question_twice_refuses_the_second_answer() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask one; ask hold").await;
    let questions = open_questions(world.chat(&alice));
    world.answer(&alice, &questions[0], Some("yes"));
    world.until_idle().await;
    let seq = world.answer(&alice, &questions[0], Some("no"));
    assert_eq!(
        world.refusal(&alice, seq).await,
        format!("There is no open question {} in the running turn", questions[0])
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_to_a_question_nobody_asked_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask hold").await;
    let seq = world.answer(&alice, "q-nobody", Some("hi"));
    assert_eq!(world.refusal(&alice, seq).await, "There is no open question q-nobody in the running turn");
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_the_turn_ended_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask once").await;
    let question = open_questions(world.chat(&alice)).pop().expect("a question");
    world.answer(&alice, &question, Some("first"));
    world.until_idle().await;
    let seq = world.answer(&alice, &question, Some("late"));
    assert_eq!(world.refusal(&alice, seq).await, format!("There is no open question {question} in the running turn"));
    assert!(text_of(world.last_turn(&alice)).contains("You answered: first"));
}

#[tokio::test(start_paused = true)]
async fn a_draft_of_an_answer_is_said_while_the_question_is_open_and_refused_after() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask one; ask hold").await;
    let questions = open_questions(world.chat(&alice));
    let chat = world.current(&alice);
    let draft = |id: &str| {
        json!({
            "type": "chat/inputAnswerChanged",
            "requestId": id,
            "questionId": "answer",
            "answer": { "state": "draft", "value": { "kind": "text", "value": "thinking" } },
        })
    };
    let seq = world.dispatch(&alice, &chat, draft(&questions[0]));
    assert_eq!(world.echo_of(&alice, seq).await, Echo::Accepted);
    world.until_idle().await;
    world.answer(&alice, &questions[0], Some("done"));
    world.until_idle().await;
    let seq = world.dispatch(&alice, &chat, draft(&questions[0]));
    assert_eq!(
        world.refusal(&alice, seq).await,
        format!("There is no open question {} in the running turn", questions[0])
    );
}

#[tokio::test(start_paused = true)]
async fn the_session_raises_an_input_entry_for_each_waiting_call_and_question_and_takes_each_down() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "write plan x; ask colour").await;
    let mut raised = kinds(&world, &alice, &session);
    raised.sort();
    assert_eq!(raised, ["chatInput", "toolConfirmation"]);
    let call = waiting_calls(world.chat(&alice)).pop().expect("a call");
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    assert_eq!(kinds(&world, &alice, &session), ["chatInput"], "the answered one is taken down");
    let question = open_questions(world.chat(&alice)).pop().expect("a question");
    world.answer(&alice, &question, Some("red"));
    world.until_idle().await;
    assert!(kinds(&world, &alice, &session).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stop_settles_every_parked_call_and_question() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "write a x; write b y; ask colour").await;
    assert_eq!(world.input_needed(&alice, &session).len(), 3);
    world.stop(&alice);
    world.until_idle().await;
    assert!(world.input_needed(&alice, &session).is_empty(), "no entry outlives the stop");
    assert_eq!(world.last_turn(&alice).state, TurnState::Cancelled);
    // The backend holds nothing parked either: the next turn runs at once.
    world.turn(&alice, "list").await;
    assert_eq!(world.last_turn(&alice).state, TurnState::Complete);
}

#[tokio::test(start_paused = true)]
async fn with_ask_set_to_never_a_write_runs_without_asking() {
    let (mut world, alice, _session) = notes_with(json!({ "ask": "never" })).await;
    world.turn(&alice, "write plan quietly").await;
    assert_eq!(world.last_turn(&alice).state, TurnState::Complete);
    assert!(text_of(world.last_turn(&alice)).contains("Wrote plan."));
}

#[tokio::test(start_paused = true)]
async fn with_ask_set_to_always_even_a_read_waits_to_be_allowed() {
    let (mut world, alice, _session) = notes_with(json!({ "ask": "always" })).await;
    world.turn(&alice, "read plan").await;
    assert_eq!(waiting_calls(world.chat(&alice)).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_confirmation_is_said_to_every_client_of_the_chat_as_the_client_sent_it() {
    let (mut world, alice, session) = notes().await;
    let bob = world.connect("bob").await;
    let chat = world.current(&alice);
    world.subscribe(&bob, &session).await.expect("bob watches the session");
    world.subscribe(&bob, &chat).await.expect("bob watches the chat");
    world.turn(&alice, "write plan x").await;
    assert_eq!(waiting_calls(world.chat(&bob)).len(), 1, "bob sees the question too");
    let call = waiting_calls(world.chat(&alice)).pop().expect("a call");
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    let confirmed: Vec<_> = world
        .envelopes(&bob, &chat)
        .into_iter()
        .filter(|e| matches!(e.action, ahp_types::actions::StateAction::ChatToolCallConfirmed(_)))
        .collect();
    assert_eq!(confirmed.len(), 1);
    assert_eq!(confirmed[0].origin.as_ref().map(|o| o.client_id.as_str()), Some("alice"));
    assert!(waiting_calls(world.chat(&bob)).is_empty());
}

#[tokio::test(start_paused = true)]
async fn bob_may_answer_the_question_alice_is_shown() {
    let (mut world, alice, session) = notes().await;
    let bob = world.connect("bob").await;
    let chat = world.current(&alice);
    world.open_session(&bob, &crate::world::Session { uri: session, chat }).await;
    world.turn(&alice, "ask who").await;
    let question = open_questions(world.chat(&bob)).pop().expect("bob sees the question");
    world.answer(&bob, &question, Some("bob"));
    world.until_idle().await;
    assert!(text_of(world.last_turn(&alice)).contains("You answered: bob"));
}

#[tokio::test(start_paused = true)]
async fn a_result_confirmation_for_a_call_with_no_result_waiting_is_refused() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan x").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a call");
    let chat = world.current(&alice);
    let turn = world.running(&alice).map(|t| t.id.clone()).expect("a turn");
    let action =
        json!({ "type": "chat/toolCallResultConfirmed", "turnId": turn, "toolCallId": call, "approved": true });
    let seq = world.dispatch(&alice, &chat, action);
    assert_eq!(world.refusal(&alice, seq).await, format!("Tool call {call} has no result waiting to be confirmed"));
}

#[tokio::test(start_paused = true)]
async fn the_choice_a_person_picked_is_kept_on_the_call() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan x").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a call");
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    let calls = calls_of(&world.last_turn(&alice).response_parts);
    let done = serde_json::to_value(calls[0]).expect("JSON");
    assert_eq!(done["selectedOption"]["id"], "allow", "{done}");
    assert_eq!(done["confirmed"], "user-action", "{done}");
}

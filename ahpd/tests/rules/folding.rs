//! Folding (seed 004 "Checking one"): what every client folds through the official reducers
//! (`ahp::reducers`) is the host's own snapshot — the world checks that after every step — and a
//! long fold is held against a stored, normalised snapshot (`ahpd/tests/snapshots/`), so a change
//! to what a client is shown is a diff a reviewer reads. A client that arrives late, or after a
//! restart, folds the same chat as one that watched it happen.

use serde_json::{json, Value};

use crate::world::snapshot::assert_snapshot;
use crate::world::{open_questions, waiting_calls, Client, Session, World};

async fn notes() -> (World, Client, Session) {
    let mut world = World::builder().agent("notes").agent("echo").start().await;
    let alice = world.connect("alice").await;
    let session = world.create_session(&alice, "notes").await;
    (world, alice, session)
}

fn value_of(state: &impl serde::Serialize) -> Value {
    serde_json::to_value(state).expect("JSON")
}

/// The chat `who` folded, as JSON.
fn chat_fold(world: &World, who: &Client) -> Value {
    value_of(world.chat(who))
}

#[tokio::test(start_paused = true)]
async fn an_echo_turn_folds_to_its_stored_snapshot() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "hello there").await;
    assert_snapshot("echo_turn_chat", &chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_write_asked_and_allowed_folds_to_its_stored_snapshot() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "write plan ship it").await;
    let call = waiting_calls(world.chat(&alice)).pop().expect("a waiting call");
    assert_snapshot("write_waiting_chat", &chat_fold(&world, &alice));
    world.confirm(&alice, &call, true);
    world.until_idle().await;
    assert_snapshot("write_allowed_chat", &chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_failed_turn_folds_to_its_stored_snapshot() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "fail\nerror").await;
    assert_snapshot("failed_turn_chat", &chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_stopped_turn_with_its_question_settled_folds_to_its_stored_snapshot() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "read plan\nask colour").await;
    world.stop(&alice);
    world.until_idle().await;
    assert_snapshot("stopped_turn_chat", &chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_session_waiting_on_a_write_and_a_question_folds_to_its_stored_snapshot() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "write plan x; ask colour").await;
    let folded = value_of(world.session(&alice, &session.uri));
    let waiting = json!({ "status": folded["status"], "inputNeeded": folded["inputNeeded"] });
    assert_snapshot("session_input_needed", &waiting);
}

#[tokio::test(start_paused = true)]
async fn the_root_folds_its_agents_to_the_stored_snapshot() {
    let (world, alice, _session) = notes().await;
    let root = value_of(world.root(&alice));
    assert_snapshot("root_agents", &json!({ "agents": root["agents"] }));
}

#[tokio::test(start_paused = true)]
async fn a_queue_and_a_steering_message_fold_to_the_stored_snapshot() {
    let (mut world, alice, _session) = notes().await;
    world.turn(&alice, "ask hold").await;
    world.queue(&alice, "list");
    world.queue(&alice, "where");
    world.steer(&alice, "look left");
    world.until_idle().await;
    assert_snapshot("queue_and_steering_chat", &chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_joins_mid_turn_folds_what_one_there_from_the_start_folds() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "read plan; ask colour").await;
    let bob = world.connect("bob").await;
    world.open_session(&bob, &session).await;
    let question = open_questions(world.chat(&bob)).pop().expect("bob sees the open question");
    world.answer(&bob, &question, Some("red"));
    world.until_idle().await;
    assert_eq!(chat_fold(&world, &bob), chat_fold(&world, &alice));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_arrives_after_many_turns_folds_the_same_chat() {
    let (mut world, alice, session) = notes().await;
    for text in ["list", "fail", "error", "read nothing", "later look again"] {
        world.turn(&alice, text).await;
    }
    let bob = world.connect("bob").await;
    world.open_session(&bob, &session).await;
    assert_eq!(chat_fold(&world, &bob), chat_fold(&world, &alice));
    assert_eq!(value_of(world.session(&bob, &session.uri)), value_of(world.session(&alice, &session.uri)));
}

#[tokio::test(start_paused = true)]
async fn a_chat_reads_back_after_a_restart_as_it_was_folded() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "list").await;
    world.turn(&alice, "fail").await;
    let before: Vec<Value> = world.turns(&alice).iter().map(value_of).collect();
    world.restart().await;
    let bob = world.connect("bob").await;
    world.open_session(&bob, &session).await;
    let after: Vec<Value> = world.turns(&bob).iter().map(value_of).collect();
    assert_eq!(after, before);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_watching_a_chat_stops_folding_it() {
    let (mut world, alice, session) = notes().await;
    let bob = world.connect("bob").await;
    world.open_session(&bob, &session).await;
    world.unsubscribe(&bob, &session.chat);
    world.clear_frames(&bob);
    world.turn(&alice, "list").await;
    assert!(world.envelopes(&bob, &session.chat).is_empty(), "nothing of the chat reaches bob");
    assert!(!world.watches(&bob, &session.chat));
}

#[tokio::test(start_paused = true)]
async fn every_envelope_of_a_channel_carries_a_server_sequence_number_above_the_one_before() {
    let (mut world, alice, session) = notes().await;
    world.turn(&alice, "list; read plan").await;
    let seqs: Vec<u64> = world.envelopes(&alice, &session.chat).iter().map(|e| e.server_seq).collect();
    assert!(seqs.len() > 3 && seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
}

//! Queueing and steering: the chat's pending messages are the host's (seed 004): the host says
//! them, starts the head of the queue as a turn of its own when the chat is free, hands steering
//! to the running turn, and a stop drops what waits behind the turn it stops.

use crate::world::{open_questions, text_of, turn_started, World};
use serde_json::json;

/// A notes world where alice's chat runs a turn held open by a question ("ask hold"); answers
/// the world, alice, and the question's id.
async fn held_turn() -> (World, crate::world::Client, String) {
    let mut world = World::builder().agent("notes").start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "notes").await;
    let turn = world.turn(&alice, "ask hold").await;
    let question = format!("{turn}:question0");
    assert_eq!(open_questions(world.chat(&alice)), vec![question.clone()], "the turn waits on its question");
    (world, alice, question)
}

fn texts(world: &World, who: &crate::world::Client) -> Vec<String> {
    world.turns(who).iter().map(|t| t.message.text.clone()).collect()
}

fn queued_ids(world: &World, who: &crate::world::Client) -> Vec<String> {
    world.chat(who).queued_messages.iter().flatten().map(|m| m.id.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_turn_sent_to_an_idle_chat_runs_and_completes() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "hello there").await;
    assert_eq!(text_of(world.last_turn(&alice)), "hello there");
    assert!(world.running(&alice).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_message_queued_while_a_turn_runs_waits_and_starts_when_it_ends() {
    let (mut world, alice, question) = held_turn().await;
    let queued = world.queue(&alice, "list");
    world.until_idle().await;
    assert_eq!(queued_ids(&world, &alice), vec![queued.clone()], "it waits in the chat's queue");
    assert_eq!(world.turns(&alice).len(), 0, "nothing ran in its place");

    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "list"]);
    assert!(queued_ids(&world, &alice).is_empty(), "the queue is empty once its message ran");
}

#[tokio::test(start_paused = true)]
async fn a_message_queued_in_an_idle_chat_starts_at_once() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.queue(&alice, "right away");
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["right away"]);
    assert!(queued_ids(&world, &alice).is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_host_starts_a_queued_message_as_its_own_turn_naming_the_message() {
    let (mut world, alice, question) = held_turn().await;
    let queued = world.queue(&alice, "list");
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    let chat = world.current(&alice);
    let started: Vec<_> = world
        .envelopes(&alice, &chat)
        .into_iter()
        .filter(|e| matches!(e.action, ahp_types::actions::StateAction::ChatTurnStarted(_)))
        .collect();
    let last = started.last().expect("the queued message's turn");
    let ahp_types::actions::StateAction::ChatTurnStarted(start) = &last.action else { unreachable!() };
    assert_eq!(start.queued_message_id.as_deref(), Some(queued.as_str()), "it names the message it takes up");
    assert!(last.origin.is_none(), "said as the host's own action, with no client's origin");
}

#[tokio::test(start_paused = true)]
async fn queued_messages_start_one_at_a_time_in_the_order_they_were_queued() {
    let (mut world, alice, question) = held_turn().await;
    world.queue(&alice, "list");
    world.queue(&alice, "where");
    world.queue(&alice, "tools");
    world.until_idle().await;
    assert_eq!(world.chat(&alice).queued_messages.as_ref().map(Vec::len), Some(3));
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "list", "where", "tools"]);
}

#[tokio::test(start_paused = true)]
async fn a_queued_message_removed_before_its_turn_never_runs() {
    let (mut world, alice, question) = held_turn().await;
    let first = world.queue(&alice, "list");
    world.queue(&alice, "where");
    let chat = world.current(&alice);
    world.dispatch(&alice, &chat, json!({ "type": "chat/pendingMessageRemoved", "kind": "queued", "id": first }));
    world.until_idle().await;
    assert_eq!(world.chat(&alice).queued_messages.as_ref().map(Vec::len), Some(1));
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "where"]);
}

#[tokio::test(start_paused = true)]
async fn removing_a_pending_message_that_is_not_there_is_refused_naming_it() {
    let (mut world, alice, _question) = held_turn().await;
    let chat = world.current(&alice);
    let seq =
        world.dispatch(&alice, &chat, json!({ "type": "chat/pendingMessageRemoved", "kind": "queued", "id": "nope" }));
    assert_eq!(world.refusal(&alice, seq).await, "There is no pending message nope");
    let seq = world.dispatch(
        &alice,
        &chat,
        json!({ "type": "chat/pendingMessageRemoved", "kind": "steering", "id": "nope" }),
    );
    assert_eq!(world.refusal(&alice, seq).await, "There is no pending message nope");
}

#[tokio::test(start_paused = true)]
async fn queued_messages_reordered_by_a_client_start_in_the_new_order() {
    let (mut world, alice, question) = held_turn().await;
    let a = world.queue(&alice, "list");
    let b = world.queue(&alice, "where");
    let chat = world.current(&alice);
    world.dispatch(&alice, &chat, json!({ "type": "chat/queuedMessagesReordered", "order": [b, a] }));
    world.until_idle().await;
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "where", "list"]);
}

#[tokio::test(start_paused = true)]
async fn a_second_turn_sent_while_a_clients_turn_runs_is_refused_in_the_hosts_words() {
    let (mut world, alice, question) = held_turn().await;
    let running = world.running(&alice).map(|t| t.id.clone()).expect("a turn runs");
    let chat = world.current(&alice);
    let turn = world.next_turn();
    let seq = world.dispatch(&alice, &chat, turn_started(&turn, "list"));
    assert_eq!(
        world.refusal(&alice, seq).await,
        format!("Turn {running} is running in this chat; send a steering or queued message instead")
    );
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold"], "the refused turn never ran");
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_meets_a_turn_the_host_started_is_queued_behind_it_and_runs_next() {
    let (mut world, alice, question) = held_turn().await;
    // The host takes up the queued "ask again": a turn no client started.
    world.queue(&alice, "ask again");
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    let hosts = world.running(&alice).map(|t| t.id.clone()).expect("the host's turn runs");
    let chat = world.current(&alice);
    let mine = world.next_turn();
    let seq = world.dispatch(&alice, &chat, turn_started(&mine, "list"));
    assert_eq!(
        world.refusal(&alice, seq).await,
        format!(
            "Turn {hosts} began in this chat before your message came (the host started it); your message is queued behind it as {mine}"
        )
    );
    assert_eq!(queued_ids(&world, &alice), vec![mine.clone()], "its message waits under the turn's own id");
    let again = open_questions(world.chat(&alice)).pop().expect("the host's turn asks");
    world.answer(&alice, &again, Some("done"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "ask again", "list"]);
}

#[tokio::test(start_paused = true)]
async fn a_steering_message_reaches_the_running_turn_and_leaves_the_chat() {
    let (mut world, alice, question) = held_turn().await;
    world.steer(&alice, "look left");
    world.until_idle().await;
    assert!(world.chat(&alice).steering_message.is_none(), "the backend took it");
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    let said = text_of(world.last_turn(&alice));
    assert!(said.contains("Steered: look left"), "{said}");
    assert_eq!(texts(&world, &alice), ["ask hold"], "steering is no turn of its own");
}

#[tokio::test(start_paused = true)]
async fn a_steering_message_in_an_idle_chat_runs_as_the_next_turn() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.steer(&alice, "nobody to steer");
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["nobody to steer"]);
    assert!(world.chat(&alice).steering_message.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stop_drops_the_queue_and_the_steering_message_behind_the_turn_it_stops() {
    let mut world = World::builder().slow().start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "slow").await;
    world.turn(&alice, "never finishes").await;
    world.queue(&alice, "queued one");
    world.queue(&alice, "queued two");
    world.until_idle().await;
    world.stop(&alice);
    world.until_idle().await;
    assert!(queued_ids(&world, &alice).is_empty(), "the queue went with the stop");
    assert!(world.chat(&alice).steering_message.is_none());
    assert_eq!(texts(&world, &alice), ["never finishes"], "nothing queued ran after the stop");
    assert!(world.running(&alice).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_message_queued_behind_a_failed_turn_still_runs() {
    let mut world = World::builder().agent("notes").start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "notes").await;
    world.send(&alice, "ask hold; error");
    world.until_idle().await;
    world.queue(&alice, "list");
    let question = open_questions(world.chat(&alice)).pop().expect("a question");
    world.answer(&alice, &question, Some("fine"));
    world.until_idle().await;
    let states: Vec<_> = world.turns(&alice).iter().map(|t| t.state).collect();
    use ahp_types::state::TurnState;
    assert_eq!(states, [TurnState::Error, TurnState::Complete]);
    assert_eq!(texts(&world, &alice), ["ask hold; error", "list"]);
}

#[tokio::test(start_paused = true)]
async fn a_pending_message_must_come_from_a_user() {
    let (mut world, alice, _question) = held_turn().await;
    let chat = world.current(&alice);
    let action = json!({
        "type": "chat/pendingMessageSet",
        "kind": "queued",
        "id": "q-agent",
        "message": { "text": "pretend", "origin": { "kind": "agent" } },
    });
    let seq = world.dispatch(&alice, &chat, action);
    assert_eq!(world.refusal(&alice, seq).await, "A client may only send messages whose origin is \"user\"");
    assert!(queued_ids(&world, &alice).is_empty());
}

#[tokio::test(start_paused = true)]
async fn every_client_of_the_chat_folds_the_same_queue() {
    let (mut world, alice, _question) = held_turn().await;
    let bob = world.connect("bob").await;
    let chat = world.current(&alice);
    let session = chat.replace("ahp-chat:", "ahp-session:");
    world.subscribe(&bob, &session).await.expect("bob watches the session");
    world.subscribe(&bob, &chat).await.expect("bob watches the chat");
    let queued = world.queue(&alice, "list");
    world.until_idle().await;
    assert_eq!(queued_ids(&world, &bob), [queued]);
}

#[tokio::test(start_paused = true)]
async fn a_message_another_client_queued_may_be_removed_by_any_client_of_the_chat() {
    let (mut world, alice, _question) = held_turn().await;
    let bob = world.connect("bob").await;
    let chat = world.current(&alice);
    let session = chat.replace("ahp-chat:", "ahp-session:");
    world.subscribe(&bob, &session).await.expect("bob watches the session");
    world.subscribe(&bob, &chat).await.expect("bob watches the chat");
    let queued = world.queue(&alice, "list");
    world.until_idle().await;
    let seq =
        world.dispatch(&bob, &chat, json!({ "type": "chat/pendingMessageRemoved", "kind": "queued", "id": queued }));
    assert_eq!(world.echo_of(&bob, seq).await, crate::world::Echo::Accepted);
    world.until_idle().await;
    assert!(queued_ids(&world, &alice).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_queued_message_replaced_under_the_same_id_runs_with_its_new_text() {
    let (mut world, alice, question) = held_turn().await;
    let chat = world.current(&alice);
    for text in ["list", "where"] {
        let action = json!({
            "type": "chat/pendingMessageSet",
            "kind": "queued",
            "id": "q-same",
            "message": { "text": text, "origin": { "kind": "user" } },
        });
        world.dispatch(&alice, &chat, action);
    }
    world.until_idle().await;
    assert_eq!(queued_ids(&world, &alice), ["q-same"], "one message, replaced");
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    assert_eq!(texts(&world, &alice), ["ask hold", "where"]);
}

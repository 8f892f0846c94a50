//! One door for a message (`host/deliver.rs`): a client's turn, a session tool's message, a
//! `createChat`'s first message and a wakeup meet the same rules — a busy chat queues the new
//! message behind what runs and what already waits there, in the order they came, and a message
//! is the turn of the person it was sent for.

use std::time::Duration;

use serde_json::{json, Value};

use crate::world::{open_questions, results_of, Client, World};

/// Notes (asking nothing) and echo; `who` has made a notes session.
async fn notes(world: &mut World, who: &Client) -> crate::world::Session {
    world.create_session_with(who, "notes", json!({ "config": { "ask": "never" } })).await.expect("a session")
}

fn queued_texts(world: &World, who: &Client) -> Vec<String> {
    world.chat(who).queued_messages.iter().flatten().map(|m| m.message.text.clone()).collect()
}

fn texts(world: &World, who: &Client) -> Vec<String> {
    world.turns(who).iter().map(|t| t.message.text.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_that_falls_due_in_a_busy_chat_waits_behind_the_messages_already_queued() {
    let mut world = World::builder().agent("notes").agent("echo").start().await;
    let alice = world.connect("alice").await;
    notes(&mut world, &alice).await;
    let wake = json!({ "delaySeconds": 60, "prompt": "list" });
    world.turn(&alice, &format!("call schedule_wakeup {wake}")).await;
    world.turn(&alice, "ask hold").await;
    world.queue(&alice, "ask first");
    world.advance(Duration::from_secs(60)).await;
    assert_eq!(queued_texts(&world, &alice), ["ask first", "list"], "the wakeup's prompt came second");

    let held = open_questions(world.chat(&alice)).pop().expect("the held question");
    world.answer(&alice, &held, Some("go"));
    world.until_idle().await;
    let first = open_questions(world.chat(&alice)).pop().expect("the queued message's turn asks");
    world.answer(&alice, &first, Some("go"));
    world.until_idle().await;
    let ran = texts(&world, &alice);
    assert_eq!(ran[ran.len() - 3..], ["ask hold", "ask first", "list"], "in the order they came");
}

#[tokio::test(start_paused = true)]
async fn a_session_tools_message_to_a_chat_a_client_turn_runs_in_is_queued_not_refused() {
    let mut world = World::builder().agent("notes").agent("echo").start().await;
    let alice = world.connect("alice").await;
    let held = notes(&mut world, &alice).await;
    world.turn(&alice, "ask hold").await;

    let bob = world.connect("bob").await;
    notes(&mut world, &bob).await;
    let send = json!({ "session": held.uri, "message": "list" });
    world.turn(&bob, &format!("call send_message {send}")).await;
    let said = results_of(world.last_turn(&bob));
    assert!(said.len() == 1 && said[0].0 && said[0].1.starts_with("Message queued ("), "{said:?}");
    assert_eq!(queued_texts(&world, &alice), ["list"], "it waits behind alice's turn");
}

#[tokio::test(start_paused = true)]
async fn a_chats_first_message_given_to_create_chat_is_the_turn_of_the_person_who_made_it() {
    let mut world = World::builder().agent("notes").agent("echo").users(&[("mo", "member")]).start().await;
    let mo = world.connect_as("mo", "mo").await;
    let session = notes(&mut world, &mo).await;
    let chat = "ahp-chat:/second";
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Made" });
    let message: Value = json!({ "text": format!("call create_session {spawn}"), "origin": { "kind": "user" } });
    world.ok(&mo, "createChat", json!({ "channel": session.uri, "chat": chat, "initialMessage": message })).await;
    world.subscribe(&mo, chat).await.expect("the chat may be watched");
    world.focus(&mo, chat);
    world.until_idle().await;
    let said = results_of(world.last_turn(&mo));
    assert!(said.len() == 1 && said[0].0, "mo may write, so the turn made the session: {said:?}");
}

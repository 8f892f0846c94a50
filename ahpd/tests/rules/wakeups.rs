//! Wakeups (seed 000, `schedule_wakeup`): a new turn in the calling chat `delaySeconds` (60 s to
//! 30 days) from now, beginning with `prompt`; a chat holds one, a new call replaces it and
//! `stop: true` cancels it; when due the host begins the turn, or queues the prompt behind a turn
//! that is running; it fires once, survives a restart, and its turn acts as the person whose turn
//! asked for it. Due times are on the manual clock, moved by the scenario.

use std::time::Duration;

use ahp_types::state::MessageKind;
use serde_json::{json, Value};

use crate::world::{open_questions, results_of, Client, World};

async fn notes() -> (World, Client) {
    let mut world = World::builder().agent("notes").agent("echo").start().await;
    let alice = world.connect("alice").await;
    world.create_session_with(&alice, "notes", json!({ "config": { "ask": "never" } })).await.expect("a session");
    (world, alice)
}

/// Runs `schedule_wakeup` with `input` in a turn of `who`'s chat; answers (success, text).
async fn schedule(world: &mut World, who: &Client, input: Value) -> (bool, String) {
    world.turn(who, &format!("call schedule_wakeup {input}")).await;
    results_of(world.last_turn(who)).pop().expect("the call's result")
}

/// The finished turns of `who`'s chat a wakeup began.
fn woken(world: &World, who: &Client) -> Vec<ahp_types::state::Turn> {
    world
        .turns(who)
        .iter()
        .filter(|t| t.message.meta.as_ref().is_some_and(|m| m.contains_key("ahpd.wakeup")))
        .cloned()
        .collect()
}

const BOUNDS: &str = "Invalid schedule_wakeup input: delaySeconds must be a number from 60 to 2592000 (30 days).";

#[tokio::test(start_paused = true)]
async fn a_wakeup_is_scheduled_saying_when_it_is_due() {
    let (mut world, alice) = notes().await;
    let (ok, said) = schedule(&mut world, &alice, json!({ "delaySeconds": 600, "prompt": "list" })).await;
    assert!(ok, "{said}");
    assert!(said.starts_with("Wakeup scheduled: this chat begins a new turn at "), "{said}");
    assert!(said.ends_with("(600 seconds from now) with your prompt."), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_delay_under_a_minute_or_over_thirty_days_is_refused() {
    let (mut world, alice) = notes().await;
    for delay in [59, 2_592_001] {
        let refused = schedule(&mut world, &alice, json!({ "delaySeconds": delay, "prompt": "list" })).await;
        assert_eq!(refused, (false, BOUNDS.to_owned()), "{delay}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_needs_a_prompt() {
    let (mut world, alice) = notes().await;
    let refused = schedule(&mut world, &alice, json!({ "delaySeconds": 60 })).await;
    assert_eq!(refused, (false, "Invalid schedule_wakeup input: prompt must be a non-empty string.".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn stop_must_be_a_boolean() {
    let (mut world, alice) = notes().await;
    let refused = schedule(&mut world, &alice, json!({ "stop": "yes" })).await;
    assert_eq!(refused, (false, "Invalid schedule_wakeup input: stop must be a boolean.".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_chat_holds_one_wakeup_and_a_new_one_replaces_it() {
    let (mut world, alice) = notes().await;
    let (_, first) = schedule(&mut world, &alice, json!({ "delaySeconds": 600, "prompt": "list" })).await;
    let due = first.split(" at ").nth(1).and_then(|r| r.split(' ').next()).expect("a due time").to_owned();
    let (_, second) = schedule(&mut world, &alice, json!({ "delaySeconds": 120, "prompt": "where" })).await;
    assert!(second.ends_with(&format!("It replaces the wakeup that was due at {due}.")), "{second}");
    world.advance(Duration::from_secs(600)).await;
    let texts: Vec<String> = woken(&world, &alice).iter().map(|t| t.message.text.clone()).collect();
    assert_eq!(texts, ["where"], "only the newer one began a turn");
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_the_chats_wakeup_and_says_when_none_is_held() {
    let (mut world, alice) = notes().await;
    schedule(&mut world, &alice, json!({ "delaySeconds": 60, "prompt": "list" })).await;
    let (_, cancelled) = schedule(&mut world, &alice, json!({ "stop": true })).await;
    assert!(cancelled.starts_with("Wakeup cancelled; it was due at "), "{cancelled}");
    let (_, none) = schedule(&mut world, &alice, json!({ "stop": true })).await;
    assert_eq!(none, "This chat has no wakeup to cancel.");
    world.advance(Duration::from_secs(120)).await;
    assert!(woken(&world, &alice).is_empty(), "a cancelled wakeup begins nothing");
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_begins_its_turn_when_due_and_not_a_moment_before() {
    let (mut world, alice) = notes().await;
    schedule(&mut world, &alice, json!({ "delaySeconds": 90, "prompt": "list" })).await;
    world.advance(Duration::from_millis(89_999)).await;
    assert!(woken(&world, &alice).is_empty(), "not yet");
    world.advance(Duration::from_millis(1)).await;
    let turns = woken(&world, &alice);
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].message.text, "list");
}

#[tokio::test(start_paused = true)]
async fn a_wakeups_turn_is_marked_as_the_agents_and_says_when_it_was_due() {
    let (mut world, alice) = notes().await;
    schedule(&mut world, &alice, json!({ "delaySeconds": 60, "prompt": "list" })).await;
    world.advance(Duration::from_secs(60)).await;
    let turn = woken(&world, &alice).pop().expect("the wakeup's turn");
    assert_eq!(turn.message.origin.kind, MessageKind::Agent);
    let meta = turn.message.meta.as_ref().and_then(|m| m.get("ahpd.wakeup")).cloned().expect("the wakeup's meta");
    assert!(meta["dueAt"].is_string() && meta["scheduledAt"].is_string(), "{meta}");
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_fires_once() {
    let (mut world, alice) = notes().await;
    schedule(&mut world, &alice, json!({ "delaySeconds": 60, "prompt": "list" })).await;
    world.advance(Duration::from_secs(60)).await;
    world.advance(Duration::from_secs(3600)).await;
    assert_eq!(woken(&world, &alice).len(), 1);
    let (_, none) = schedule(&mut world, &alice, json!({ "stop": true })).await;
    assert_eq!(none, "This chat has no wakeup to cancel.", "it is gone once it fired");
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_due_while_a_turn_runs_is_queued_behind_it() {
    let (mut world, alice) = notes().await;
    schedule(&mut world, &alice, json!({ "delaySeconds": 60, "prompt": "list" })).await;
    world.turn(&alice, "ask hold").await;
    world.advance(Duration::from_secs(60)).await;
    let queued: Vec<String> =
        world.chat(&alice).queued_messages.iter().flatten().map(|m| m.message.text.clone()).collect();
    assert_eq!(queued, ["list"], "queued behind the running turn");
    let question = open_questions(world.chat(&alice)).pop().expect("the held question");
    world.answer(&alice, &question, Some("go"));
    world.until_idle().await;
    let texts: Vec<String> = world.turns(&alice).iter().map(|t| t.message.text.clone()).collect();
    assert_eq!(texts.last().map(String::as_str), Some("list"), "{texts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_survives_a_restart_and_fires_once_when_due() {
    let (mut world, alice) = notes().await;
    let chat = world.current(&alice);
    let session = chat.replace("ahp-chat:", "ahp-session:");
    schedule(&mut world, &alice, json!({ "delaySeconds": 600, "prompt": "list" })).await;
    world.restart().await;
    let bob = world.connect("bob").await;
    world.advance(Duration::from_secs(600)).await;
    world.open_session(&bob, &crate::world::Session { uri: session, chat }).await;
    world.until_idle().await;
    assert_eq!(woken(&world, &bob).len(), 1, "the wakeup's turn after a restart");
}

#[tokio::test(start_paused = true)]
async fn a_wakeup_that_fell_due_while_the_host_was_down_fires_when_it_starts() {
    let (mut world, alice) = notes().await;
    let chat = world.current(&alice);
    let session = chat.replace("ahp-chat:", "ahp-session:");
    schedule(&mut world, &alice, json!({ "delaySeconds": 60, "prompt": "list" })).await;
    world.stop_host().await;
    world.advance_stopped(Duration::from_secs(3600));
    world.start_host().await;
    let bob = world.connect("bob").await;
    world.open_session(&bob, &crate::world::Session { uri: session, chat }).await;
    world.until_idle().await;
    assert_eq!(woken(&world, &bob).len(), 1, "once, when the host started");
}

#[tokio::test(start_paused = true)]
async fn a_wakeups_turn_acts_as_the_person_whose_turn_asked_for_it_and_never_as_more() {
    let mut world =
        World::builder().agent("notes").agent("echo").users(&[("ada", "admin"), ("mo", "member")]).start().await;
    let mo = world.connect_as("mo", "mo").await;
    world.create_session_with(&mo, "notes", json!({ "config": { "ask": "never" } })).await.expect("a session");
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Woken" });
    let wake = json!({ "delaySeconds": 60, "prompt": format!("call create_session {spawn}") });
    schedule(&mut world, &mo, wake).await;
    world.set_users(&[("ada", "admin"), ("mo", "guest")]);
    world.advance(Duration::from_secs(60)).await;
    let turn = woken(&world, &mo).pop().expect("the wakeup's turn");
    assert_eq!(results_of(&turn), [(false, "mo may not session:write here".to_owned())]);
}

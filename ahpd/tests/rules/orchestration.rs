//! The session tools' limits (seed 000 "Limits"), in the reference host's numbers and words: a
//! spawn depth of 3, and 50 sessions, 50 chats and 100 messages per session tree in a sliding hour
//! (or per session), each refusal saying the seconds until the oldest action leaves the window; a
//! call refused for another reason costs nothing, and what a client starts itself is unbounded.

use std::time::Duration;

use serde_json::{json, Value};

use crate::world::{results_of, session_in, Client, Session, World};

const DEPTH_REFUSAL: &str = "Refusing to create a session: recursion limit reached (max spawn depth 3). This session was itself created 3 level(s) deep.";

/// The refusal for a budget spent: `act` (`create more sessions`, …), `max` of `max` used, counted
/// per `noun` (`session tree`, `session`), free again in `seconds`.
fn budget_refusal(act: &str, max: usize, noun: &str, seconds: u64) -> String {
    format!(
        "Refusing to {act}: this {noun} already used {max} of {max} allowed in the last 60 minutes. The limit applies to each {noun} separately and frees up as older actions leave that window. Retry after {seconds} seconds, or turn off agent orchestration limits in settings."
    )
}

/// `count` `call` commands of `tool`, one per line.
fn calls(count: usize, tool: &str, input: impl Fn(usize) -> Value) -> String {
    (0..count).map(|i| format!("call {tool} {}", input(i))).collect::<Vec<_>>().join("\n")
}

fn spawn(i: usize) -> Value {
    json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": format!("child {i}") })
}

fn chat(i: usize) -> Value {
    json!({ "prompt": "hi", "title": format!("chat {i}") })
}

/// A world of notes (asking nothing) and echo, with `change` made to its configuration; alice has
/// made a notes session, the top of a tree.
async fn tree(change: impl FnOnce(&mut ahpd::host::HostConfig)) -> (World, Client, Session) {
    let mut world = World::builder().agent("notes").agent("echo").config(change).start().await;
    let alice = world.connect("alice").await;
    let session = notes_session(&mut world, &alice).await;
    (world, alice, session)
}

async fn notes_session(world: &mut World, who: &Client) -> Session {
    world.create_session_with(who, "notes", json!({ "config": { "ask": "never" } })).await.expect("a session")
}

/// Runs `commands` as one turn of `who`'s chat; answers its calls' (successes, refusals).
async fn run(world: &mut World, who: &Client, commands: &str) -> (Vec<String>, Vec<String>) {
    world.turn(who, commands).await;
    let (ok, refused): (Vec<_>, Vec<_>) = results_of(world.last_turn(who)).into_iter().partition(|(ok, _)| *ok);
    (ok.into_iter().map(|(_, t)| t).collect(), refused.into_iter().map(|(_, t)| t).collect())
}

/// Makes a notes session one link below `who`'s chat, and watches it.
async fn deeper(world: &mut World, who: &Client) -> Session {
    let spawn = json!({ "relationship": "independent", "prompt": "list", "title": "deeper" });
    let (made, refused) = run(world, who, &format!("call create_session {spawn}")).await;
    assert_eq!((made.len(), refused), (1, Vec::<String>::new()));
    world.watch_session(who, &session_in(&made[0])).await
}

#[tokio::test(start_paused = true)]
async fn a_chain_of_sessions_stops_three_links_down_in_the_reference_hosts_words() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    for _ in 1..=3 {
        deeper(&mut world, &alice).await;
    }
    let spawn = json!({ "relationship": "independent", "prompt": "list", "title": "too deep" });
    let (_, refused) = run(&mut world, &alice, &format!("call create_session {spawn}")).await;
    assert_eq!(refused, [DEPTH_REFUSAL]);
}

#[tokio::test(start_paused = true)]
async fn three_links_down_a_session_may_still_open_a_chat_of_its_own() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    for _ in 1..=3 {
        deeper(&mut world, &alice).await;
    }
    let (made, refused) = run(&mut world, &alice, &calls(1, "create_chat", chat)).await;
    assert_eq!((made.len(), refused), (1, Vec::<String>::new()));
}

#[tokio::test(start_paused = true)]
async fn with_the_limits_off_a_chain_goes_deeper_than_three() {
    let (mut world, alice, _top) = tree(|c| c.settings.orchestration_limits = false).await;
    for _ in 1..=4 {
        deeper(&mut world, &alice).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_fifty_first_session_a_tree_makes_in_an_hour_is_refused_with_the_seconds_to_wait() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    let (made, refused) = run(&mut world, &alice, &calls(51, "create_session", spawn)).await;
    assert_eq!(made.len(), 50);
    assert!(made.iter().all(|t| t.starts_with("New session created (agent-host-session://echo/")), "{made:?}");
    assert_eq!(refused, [budget_refusal("create more sessions", 50, "session tree", 3600)]);
}

#[tokio::test(start_paused = true)]
async fn the_fifty_first_chat_a_tree_makes_in_an_hour_is_refused_by_either_tool() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    let mixed = (0..51)
        .map(|i| {
            let tool = if i % 2 == 0 { "create_chat" } else { "create_session" };
            format!("call {tool} {}", chat(i))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let (made, refused) = run(&mut world, &alice, &mixed).await;
    assert_eq!(made.len(), 50);
    assert_eq!(refused, [budget_refusal("create more chats", 50, "session tree", 3600)]);
}

#[tokio::test(start_paused = true)]
async fn the_hundred_and_first_message_a_tree_sends_in_an_hour_is_refused() {
    let (mut world, alice, top) = tree(|_| {}).await;
    let target = world.create_session(&alice, "echo").await;
    world.focus(&alice, &top.chat);
    let message = |i: usize| json!({ "session": target.uri, "message": format!("message {i}") });
    let (sent, refused) = run(&mut world, &alice, &calls(101, "send_message", message)).await;
    assert_eq!(sent.len(), 100);
    assert!(sent.iter().all(|t| t.starts_with("Message sent (") || t.starts_with("Message queued (")), "{sent:?}");
    assert_eq!(refused, [budget_refusal("send more messages", 100, "session tree", 3600)]);
}

#[tokio::test(start_paused = true)]
async fn a_session_the_tree_made_spends_the_trees_budget() {
    let (mut world, alice, top) = tree(|_| {}).await;
    let child = deeper(&mut world, &alice).await;
    world.focus(&alice, &top.chat);
    let (made, _) = run(&mut world, &alice, &calls(50, "create_session", spawn)).await;
    assert_eq!(made.len(), 49, "the child was the first of the fifty");
    world.focus(&alice, &child.chat);
    let (_, refused) = run(&mut world, &alice, &calls(1, "create_session", spawn)).await;
    assert_eq!(refused, [budget_refusal("create more sessions", 50, "session tree", 3600)]);
}

#[tokio::test(start_paused = true)]
async fn another_tree_has_a_budget_of_its_own() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    run(&mut world, &alice, &calls(51, "create_session", spawn)).await;
    notes_session(&mut world, &alice).await;
    let (made, refused) = run(&mut world, &alice, &calls(1, "create_session", spawn)).await;
    assert_eq!((made.len(), refused), (1, Vec::<String>::new()));
}

#[tokio::test(start_paused = true)]
async fn counted_per_session_the_refusal_says_the_session_and_a_child_counts_its_own() {
    let (mut world, alice, top) = tree(|c| c.settings.limits_per_session = true).await;
    let child = deeper(&mut world, &alice).await;
    world.focus(&alice, &top.chat);
    let (made, refused) = run(&mut world, &alice, &calls(50, "create_session", spawn)).await;
    assert_eq!(made.len(), 49);
    assert_eq!(refused, [budget_refusal("create more sessions", 50, "session", 3600)]);
    world.focus(&alice, &child.chat);
    let (made, refused) = run(&mut world, &alice, &calls(1, "create_session", spawn)).await;
    assert_eq!((made.len(), refused), (1, Vec::<String>::new()), "the child's count is its own");
}

#[tokio::test(start_paused = true)]
async fn with_the_limits_off_nothing_is_counted() {
    let (mut world, alice, _top) = tree(|c| c.settings.orchestration_limits = false).await;
    let (made, refused) = run(&mut world, &alice, &calls(51, "create_chat", chat)).await;
    assert_eq!((made.len(), refused), (51, Vec::<String>::new()));
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_frees_up_as_its_oldest_action_leaves_the_hour() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    run(&mut world, &alice, &calls(50, "create_chat", chat)).await;
    world.advance(Duration::from_secs(3599)).await;
    let (_, refused) = run(&mut world, &alice, &calls(1, "create_chat", chat)).await;
    assert_eq!(refused, [budget_refusal("create more chats", 50, "session tree", 1)]);
    world.advance(Duration::from_secs(1)).await;
    let (made, refused) = run(&mut world, &alice, &calls(1, "create_chat", chat)).await;
    assert_eq!((made.len(), refused), (1, Vec::<String>::new()));
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_for_another_reason_costs_nothing() {
    let (mut world, alice, _top) = tree(|_| {}).await;
    let unknown = |_| json!({ "relationship": "independent", "agent": "nobody", "prompt": "hi", "title": "never" });
    let (_, refused) = run(&mut world, &alice, &calls(3, "create_session", unknown)).await;
    assert_eq!(refused.len(), 3);
    let (made, refused) = run(&mut world, &alice, &calls(50, "create_session", spawn)).await;
    assert_eq!((made.len(), refused), (50, Vec::<String>::new()), "the three refused calls were not counted");
}

#[tokio::test(start_paused = true)]
async fn what_a_client_starts_itself_is_not_counted() {
    let (mut world, alice, top) = tree(|_| {}).await;
    run(&mut world, &alice, &calls(51, "create_session", spawn)).await;
    // The tree is spent, and its person may still make sessions and send turns by hand.
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "hello").await;
    assert_eq!(crate::world::text_of(world.last_turn(&alice)), "hello");
    world.focus(&alice, &top.chat);
    world.turn(&alice, "list").await;
    assert_eq!(world.last_turn(&alice).state, ahp_types::state::TurnState::Complete);
}

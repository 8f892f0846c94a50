//! Turn endings and the rules that fail silently (seed 004): one action ends a turn, the ending
//! carries its duration, `chat/error` is the ending of a failed turn, a stop is said before the
//! backend is asked to abort and only when it names the running turn, the running turn is
//! `activeTurn` and not in `turns`, and a client's turn is refused in the host's words when it
//! could not be a turn.

use ahp_types::actions::StateAction;
use ahp_types::state::{ToolCallState, TurnState};
use serde_json::json;

use crate::world::{calls_of, open_questions, results_of, text_of, turn_started, Client, Echo, World};

/// The ending actions (`chat/turnComplete`, `chat/turnCancelled`, `chat/error`) `who` folded for
/// `turn` in its chat, in order.
fn endings(world: &World, who: &Client, turn: &str) -> Vec<StateAction> {
    let chat = world.current(who);
    world
        .envelopes(who, &chat)
        .into_iter()
        .filter(|e| e.rejection_reason.is_none())
        .map(|e| e.action)
        .filter(|a| match a {
            StateAction::ChatTurnComplete(x) => x.turn_id == turn,
            StateAction::ChatTurnCancelled(x) => x.turn_id == turn,
            StateAction::ChatError(x) => x.turn_id == turn,
            _ => false,
        })
        .collect()
}

fn kind(action: &StateAction) -> String {
    serde_json::to_value(action).expect("JSON")["type"].as_str().unwrap_or_default().to_owned()
}

async fn notes() -> (World, Client) {
    let mut world = World::builder().agent("notes").start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "notes").await;
    (world, alice)
}

async fn slow() -> (World, Client) {
    let mut world = World::builder().slow().start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "slow").await;
    (world, alice)
}

#[tokio::test(start_paused = true)]
async fn a_completed_turn_is_ended_by_one_turn_complete() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let turn = world.turn(&alice, "once").await;
    let ends: Vec<String> = endings(&world, &alice, &turn).iter().map(kind).collect();
    assert_eq!(ends, ["chat/turnComplete"]);
    assert_eq!(world.last_turn(&alice).state, TurnState::Complete);
}

#[tokio::test(start_paused = true)]
async fn a_failed_turn_is_ended_by_chat_error_alone_which_carries_the_error() {
    let (mut world, alice) = notes().await;
    let turn = world.turn(&alice, "error").await;
    let ends = endings(&world, &alice, &turn);
    assert_eq!(ends.iter().map(kind).collect::<Vec<_>>(), ["chat/error"], "no turnComplete beside it");
    let StateAction::ChatError(error) = &ends[0] else { unreachable!() };
    assert_eq!(error.part.error.error_type, "notesError");
    assert_eq!(error.part.error.message, "You asked this turn to fail.");
    assert_eq!(world.last_turn(&alice).state, TurnState::Error, "in the history as a failure, not a success");
}

#[tokio::test(start_paused = true)]
async fn every_kind_of_ending_carries_a_duration() {
    let (mut world, alice) = notes().await;
    let complete = world.turn(&alice, "list").await;
    let failed = world.turn(&alice, "error").await;
    let stopped = world.turn(&alice, "ask hold").await;
    world.stop(&alice);
    world.until_idle().await;
    let chat = world.current(&alice);
    for turn in [complete, failed, stopped] {
        let ends: Vec<_> = world
            .frames(&alice)
            .iter()
            .filter(|f| f["method"] == "action" && f["params"]["channel"] == chat.as_str())
            .map(|f| f["params"]["action"].clone())
            .filter(|a| {
                a["turnId"] == turn.as_str()
                    && matches!(a["type"].as_str(), Some("chat/turnComplete" | "chat/turnCancelled" | "chat/error"))
            })
            .collect();
        assert_eq!(ends.len(), 1, "{turn}: {ends:?}");
        assert!(ends[0]["duration"].as_i64().is_some_and(|d| d >= 0), "{turn}'s ending has a duration: {}", ends[0]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stopped_turn_is_ended_once_by_the_clients_stop_and_the_backends_cancel_is_not_said() {
    let (mut world, alice) = slow().await;
    let turn = world.turn(&alice, "never finishes").await;
    let seq = world.stop(&alice);
    assert_eq!(world.echo_of(&alice, seq).await, Echo::Accepted, "the stop is said as the client sent it");
    world.until_idle().await;
    let ends = endings(&world, &alice, &turn);
    assert_eq!(ends.iter().map(kind).collect::<Vec<_>>(), ["chat/turnCancelled"], "one ending: the client's");
    assert_eq!(world.last_turn(&alice).state, TurnState::Cancelled);
    assert!(world.running(&alice).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stopped_turn_leaves_the_chat_ready_for_the_next_turn() {
    let mut world = World::builder().slow().agent("echo").start().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "slow").await;
    world.turn(&alice, "never finishes").await;
    world.stop(&alice);
    world.until_idle().await;
    let next = world.send(&alice, "again");
    world.until_idle().await;
    assert_eq!(world.running(&alice).map(|t| t.id.clone()), Some(next), "the next turn runs");
}

#[tokio::test(start_paused = true)]
async fn a_stop_naming_another_turn_is_said_and_the_running_turn_goes_on() {
    let (mut world, alice) = slow().await;
    let running = world.turn(&alice, "never finishes").await;
    let seq = world.stop_turn(&alice, "not-this-one");
    assert_eq!(world.echo_of(&alice, seq).await, Echo::Accepted);
    world.until_idle().await;
    assert_eq!(world.running(&alice).map(|t| t.id.clone()), Some(running), "no backend was asked to abort");
    assert!(endings(&world, &alice, "not-this-one").len() == 1, "said to every client as the client's own action");
}

#[tokio::test(start_paused = true)]
async fn a_stop_in_a_chat_with_no_turn_running_is_said_and_changes_nothing() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "done already").await;
    let before = world.turns(&alice).to_vec();
    let seq = world.stop_turn(&alice, "t-none");
    assert_eq!(world.echo_of(&alice, seq).await, Echo::Accepted);
    world.until_idle().await;
    assert_eq!(world.turns(&alice), before.as_slice());
}

#[tokio::test(start_paused = true)]
async fn a_stop_of_a_turn_that_already_finished_does_not_undo_it() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let turn = world.turn(&alice, "finished").await;
    world.stop_turn(&alice, &turn);
    world.until_idle().await;
    assert_eq!(world.last_turn(&alice).state, TurnState::Complete);
}

#[tokio::test(start_paused = true)]
async fn the_running_turn_is_the_active_turn_and_not_in_the_history() {
    let (mut world, alice) = slow().await;
    let turn = world.turn(&alice, "never finishes").await;
    assert_eq!(world.running(&alice).map(|t| t.id.clone()), Some(turn.clone()));
    assert!(world.turns(&alice).is_empty(), "not in turns while it runs");
    world.stop(&alice);
    world.until_idle().await;
    assert_eq!(world.turns(&alice).iter().map(|t| t.id.clone()).collect::<Vec<_>>(), [turn]);
}

#[tokio::test(start_paused = true)]
async fn a_turn_id_the_chat_already_holds_is_refused() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let turn = world.turn(&alice, "first").await;
    let chat = world.current(&alice);
    let seq = world.dispatch(&alice, &chat, turn_started(&turn, "again"));
    assert_eq!(world.refusal(&alice, seq).await, format!("This chat has a turn {turn} already"));
    assert_eq!(world.turns(&alice).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_turn_without_an_id_is_refused() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let chat = world.current(&alice);
    let seq = world.dispatch(&alice, &chat, turn_started("  ", "no id"));
    assert_eq!(world.refusal(&alice, seq).await, "A turn needs an id");
}

#[tokio::test(start_paused = true)]
async fn a_turn_whose_start_is_not_an_rfc_3339_time_is_refused() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let chat = world.current(&alice);
    let mut action = turn_started("t-bad", "when");
    action["startedAt"] = json!("yesterday");
    let seq = world.dispatch(&alice, &chat, action);
    assert_eq!(world.refusal(&alice, seq).await, "startedAt must be an RFC 3339 timestamp, not \"yesterday\"");
    assert!(world.turns(&alice).is_empty() && world.running(&alice).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_turn_whose_message_is_not_the_users_is_refused() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let chat = world.current(&alice);
    let mut action = turn_started("t-agent", "pretend");
    action["message"]["origin"]["kind"] = json!("agent");
    let seq = world.dispatch(&alice, &chat, action);
    assert_eq!(world.refusal(&alice, seq).await, "A client may only send messages whose origin is \"user\"");
}

#[tokio::test(start_paused = true)]
async fn a_clients_turn_is_said_first_with_its_origin_and_the_agents_actions_have_none() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    let turn = world.turn(&alice, "who said this").await;
    let chat = world.current(&alice);
    let envelopes: Vec<_> = world
        .envelopes(&alice, &chat)
        .into_iter()
        .filter(|e| serde_json::to_value(&e.action).expect("JSON")["turnId"] == turn.as_str())
        .collect();
    let first = envelopes.first().expect("the turn's actions");
    assert!(matches!(first.action, StateAction::ChatTurnStarted(_)), "the start comes first: {first:?}");
    let origin = first.origin.as_ref().expect("with the client's origin");
    assert_eq!((origin.client_id.as_str(), origin.client_seq), ("alice", 1));
    assert!(envelopes[1..].iter().all(|e| e.origin.is_none()), "the agent's actions are the host's own");
}

#[tokio::test(start_paused = true)]
async fn a_turn_the_agent_starts_of_its_own_accord_is_said_before_its_parts() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "later look again").await;
    let turns = world.turns(&alice);
    assert_eq!(turns.len(), 2, "the agent's own turn is in every client's history");
    assert_eq!(text_of(&turns[1]), "Later, as you asked: look again");
    assert_eq!(turns[1].message.origin.kind, ahp_types::state::MessageKind::Agent);
}

#[tokio::test(start_paused = true)]
async fn the_turn_after_a_failed_turn_runs() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "error").await;
    world.turn(&alice, "list").await;
    let states: Vec<_> = world.turns(&alice).iter().map(|t| t.state).collect();
    assert_eq!(states, [TurnState::Error, TurnState::Complete]);
}

#[tokio::test(start_paused = true)]
async fn a_finished_turn_carries_the_usage_its_agent_said() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "three small words").await;
    let usage = world.last_turn(&alice).usage.clone().expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (Some(3), Some(3)));
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_fails_is_completed_with_success_false_and_its_error() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "fail").await;
    assert_eq!(results_of(world.last_turn(&alice)), [(false, "This tool always fails.".to_owned())]);
    assert_eq!(world.last_turn(&alice).state, TurnState::Complete, "a failed tool is not a failed turn");
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_that_does_not_ask_says_its_confirmation_was_not_needed() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "list").await;
    let chat = world.current(&alice);
    let ready: Vec<_> = world
        .frames(&alice)
        .iter()
        .filter(|f| f["params"]["channel"] == chat.as_str() && f["params"]["action"]["type"] == "chat/toolCallReady")
        .map(|f| f["params"]["action"].clone())
        .collect();
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert_eq!(ready[0]["confirmed"], "not-needed", "a call that ran is not drawn as a question: {}", ready[0]);
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_is_one_part_of_its_turn() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "list").await;
    let calls = calls_of(&world.last_turn(&alice).response_parts);
    assert_eq!(calls.len(), 1, "toolCallStart made the part; nothing made it twice");
    assert!(matches!(calls[0], ToolCallState::Completed(_)));
}

#[tokio::test(start_paused = true)]
async fn a_stopped_turn_keeps_what_finished_before_the_stop_and_settles_its_question() {
    let (mut world, alice) = notes().await;
    world.turn(&alice, "fail\nask hold").await;
    assert_eq!(open_questions(world.chat(&alice)).len(), 1);
    world.stop(&alice);
    world.until_idle().await;
    let turn = world.last_turn(&alice);
    assert_eq!(turn.state, TurnState::Cancelled);
    assert_eq!(results_of(turn), [(false, "This tool always fails.".to_owned())], "what finished is kept");
    let session = world.current(&alice).replace("ahp-chat:", "ahp-session:");
    assert!(world.input_needed(&alice, &session).is_empty(), "nothing waits for an answer after the stop");
}

#[tokio::test(start_paused = true)]
async fn a_message_that_is_only_spaces_is_answered_as_having_nothing_to_say() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    world.create_session(&alice, "echo").await;
    world.turn(&alice, "   ").await;
    assert_eq!(text_of(world.last_turn(&alice)), "(nothing to say)");
}

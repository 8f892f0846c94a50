//! A client's tools (seed 000 "A client's tools"): announced when the client becomes active,
//! offered to the model as `<clientId>__<name>` and drawn under the name the client announced, run
//! by that client and completed by nobody else; a call its client never answers is failed after
//! `clientToolTimeoutMs`, and a client whose connections all close keeps its place and its calls
//! for `clientToolCallDisconnectTimeoutMs`, after which each call it owes is failed in VS Code's
//! words. Every wait is on the manual clock, moved by the scenario.

use std::time::Duration;

use ahp_types::state::{ToolCallState, TurnState};
use serde_json::Value;

use crate::world::{calls_of, results_of, text_of, Client, Echo, Session, World};

/// A notes world whose client tool calls wait `timeout_ms` and whose clients keep their place for
/// `grace_ms`; `driver` has made a notes session, which `c1` watches and where it provides
/// `openFile`.
struct Desk {
    world: World,
    driver: Client,
    c1: Client,
    session: Session,
}

async fn desk(timeout_ms: u64, grace_ms: u64) -> Desk {
    let mut world = World::builder()
        .agent("notes")
        .config(|c| {
            c.client_tool_timeout_ms = timeout_ms;
            c.client_disconnect_grace_ms = grace_ms;
        })
        .start()
        .await;
    let driver = world.connect("driver").await;
    let session = world.create_session(&driver, "notes").await;
    let c1 = world.connect("c1").await;
    world.open_session(&c1, &session).await;
    world.activate(&c1, &session.uri, &["openFile"]);
    world.until_idle().await;
    Desk { world, driver, c1, session }
}

/// The call waiting for `client` in the session `who` folds, as (turn id, tool call id).
fn waiting_for(world: &World, who: &Client, session: &str, client: &str) -> Option<(String, String)> {
    world.input_needed(who, session).into_iter().find_map(|r| {
        (r["kind"] == "toolClientExecution" && r["clientId"] == client).then(|| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (text(&r["turnId"]), text(&r["toolCall"]["toolCallId"]))
        })
    })
}

/// `driver` asks its model to call `c1__openFile`; answers (turn id, tool call id).
async fn call_open_file(desk: &mut Desk) -> (String, String) {
    desk.world.turn(&desk.driver, r#"call c1__openFile {"path": "a.txt"}"#).await;
    waiting_for(&desk.world, &desk.driver, &desk.session.uri, "c1").expect("a call waits for c1")
}

/// The one completed call of the last turn `who` folded.
fn completed_call(world: &World, who: &Client) -> ahp_types::state::ToolCallCompletedState {
    let calls = calls_of(&world.last_turn(who).response_parts);
    match calls.as_slice() {
        [ToolCallState::Completed(done)] => done.clone(),
        other => panic!("one completed call expected: {other:?}"),
    }
}

fn active_clients(world: &World, who: &Client, session: &str) -> Vec<String> {
    world.session(who, session).active_clients.iter().map(|c| c.client_id.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_clients_tool_is_offered_to_the_model_under_its_client_id() {
    let Desk { mut world, driver, .. } = desk(600_000, 30_000).await;
    world.turn(&driver, "tools").await;
    let said = text_of(world.last_turn(&driver));
    assert!(said.contains("c1__openFile"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_tool_whose_name_a_model_cannot_call_is_not_offered() {
    let Desk { mut world, driver, c1, session } = desk(600_000, 30_000).await;
    world.activate(&c1, &session.uri, &["open file", "save"]);
    world.until_idle().await;
    world.turn(&driver, "tools").await;
    let said = text_of(world.last_turn(&driver));
    assert!(said.contains("c1__save") && !said.contains("open file"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_call_of_a_clients_tool_is_drawn_under_the_name_its_client_announced() {
    let mut desk = desk(600_000, 30_000).await;
    call_open_file(&mut desk).await;
    let turn = desk.world.running(&desk.driver).expect("the turn waits for the call");
    let call = serde_json::to_value(calls_of(&turn.response_parts)[0]).expect("JSON");
    assert_eq!(call["toolName"], "openFile", "{call}");
    assert_eq!(call["contributor"]["clientId"], "c1", "{call}");
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_its_client_is_on_the_sessions_input_needed_until_it_is_completed() {
    let mut desk = desk(600_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, session } = desk;
    world.complete_call(&c1, &turn, &call, "opened");
    world.until_idle().await;
    assert_eq!(waiting_for(&world, &driver, &session.uri, "c1"), None, "taken down once completed");
}

#[tokio::test(start_paused = true)]
async fn only_the_client_that_provides_a_tool_may_complete_it() {
    let mut desk = desk(600_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, .. } = desk;
    let seq = world.complete_call(&driver, &turn, &call, "not mine to run");
    assert_eq!(
        world.refusal(&driver, seq).await,
        format!("Only c1, the client that runs tool call {call}, may complete it")
    );
    assert!(world.running(&driver).is_some(), "the call still waits for c1");
}

#[tokio::test(start_paused = true)]
async fn the_owner_completes_its_call_and_the_turn_goes_on_with_the_result() {
    let mut desk = desk(600_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, .. } = desk;
    let seq = world.complete_call(&c1, &turn, &call, "hello file");
    assert_eq!(world.echo_of(&c1, seq).await, Echo::Accepted);
    world.until_idle().await;
    let finished = world.last_turn(&driver);
    assert_eq!(finished.state, TurnState::Complete);
    assert!(text_of(finished).contains("openFile said: hello file"), "{}", text_of(finished));
    assert_eq!(results_of(finished), [(true, "hello file".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_call_fails_after_the_timeout_and_the_turn_goes_on() {
    let mut desk = desk(60_000, 30_000).await;
    call_open_file(&mut desk).await;
    let Desk { mut world, driver, .. } = desk;
    world.advance(Duration::from_millis(60_000)).await;
    let done = completed_call(&world, &driver);
    assert!(!done.success);
    assert_eq!(done.past_tense_message.as_text(), "openFile failed");
    let said = text_of(world.last_turn(&driver));
    assert!(said.contains("openFile got no answer from c1 in 60 s"), "{said}");
    assert_eq!(world.last_turn(&driver).state, TurnState::Complete, "the turn goes on");
}

#[tokio::test(start_paused = true)]
async fn a_call_is_not_failed_a_moment_before_its_timeout() {
    let mut desk = desk(60_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, .. } = desk;
    world.advance(Duration::from_millis(59_999)).await;
    assert!(world.running(&driver).is_some(), "it still waits");
    world.complete_call(&c1, &turn, &call, "just in time");
    world.until_idle().await;
    assert_eq!(results_of(world.last_turn(&driver)), [(true, "just in time".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn with_no_timeout_a_call_waits_for_ever() {
    let mut desk = desk(0, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, .. } = desk;
    world.advance(Duration::from_secs(10 * 3600)).await;
    assert!(world.running(&driver).is_some(), "ten hours later it still waits");
    world.complete_call(&c1, &turn, &call, "late but here");
    world.until_idle().await;
    assert!(text_of(world.last_turn(&driver)).contains("late but here"));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_reconnects_inside_the_grace_completes_its_call() {
    let mut desk = desk(600_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, session } = desk;
    world.disconnect(&c1);
    world.advance(Duration::from_secs(20)).await;
    let back = world.connect("c1").await;
    world.open_session(&back, &session).await;
    world.advance(Duration::from_secs(20)).await; // past the first 30 s: it came back in time
    assert_eq!(active_clients(&world, &driver, &session.uri), ["c1"], "it never left");
    world.complete_call(&back, &turn, &call, "still here");
    world.until_idle().await;
    assert_eq!(results_of(world.last_turn(&driver)), [(true, "still here".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_client_away_past_the_grace_has_its_calls_failed_in_vscodes_words() {
    let mut desk = desk(600_000, 30_000).await;
    call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, session } = desk;
    world.disconnect(&c1);
    world.advance(Duration::from_millis(29_999)).await;
    assert!(world.running(&driver).is_some(), "inside the grace the call still waits");
    world.advance(Duration::from_millis(1)).await;
    let done = completed_call(&world, &driver);
    assert!(!done.success);
    assert_eq!(done.past_tense_message.as_text(), "openFile failed");
    assert_eq!(done.error, Some(serde_json::json!("Client c1 disconnected before completing openFile")));
    assert_eq!(world.last_turn(&driver).state, TurnState::Complete, "the backend was handed the failure");
    assert!(active_clients(&world, &driver, &session.uri).is_empty(), "c1 left the session");
}

#[tokio::test(start_paused = true)]
async fn where_another_client_provides_the_same_tool_the_model_is_told_it_may_try_again() {
    let mut desk = desk(600_000, 30_000).await;
    let c2 = desk.world.connect("c2").await;
    desk.world.open_session(&c2, &desk.session.clone()).await;
    desk.world.activate(&c2, &desk.session.uri.clone(), &["openFile"]);
    desk.world.until_idle().await;
    call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, .. } = desk;
    world.disconnect(&c1);
    world.advance(Duration::from_secs(30)).await;
    let done = completed_call(&world, &driver);
    let content = serde_json::to_string(&done.content).expect("JSON");
    assert!(
        content.contains("c2__openFile provides the same tool in this session; you may try the call again with it."),
        "{content}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_unsubscribes_from_the_session_has_its_calls_failed_at_once() {
    let mut desk = desk(600_000, 30_000).await;
    call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, session } = desk;
    world.unsubscribe(&c1, &session.uri);
    world.until_idle().await;
    let done = completed_call(&world, &driver);
    assert_eq!(done.error, Some(serde_json::json!("Client c1 disconnected before completing openFile")));
    assert!(active_clients(&world, &driver, &session.uri).is_empty());
}

#[tokio::test(start_paused = true)]
async fn with_no_grace_a_client_that_disconnects_is_released_at_once() {
    let mut desk = desk(600_000, 0).await;
    call_open_file(&mut desk).await;
    let Desk { mut world, driver, c1, session } = desk;
    world.disconnect(&c1);
    world.until_idle().await;
    let done = completed_call(&world, &driver);
    assert_eq!(done.error, Some(serde_json::json!("Client c1 disconnected before completing openFile")));
    assert!(active_clients(&world, &driver, &session.uri).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_takes_its_tools_away() {
    let Desk { mut world, driver, c1, session } = desk(600_000, 30_000).await;
    world.unsubscribe(&c1, &session.uri);
    world.until_idle().await;
    world.turn(&driver, "tools").await;
    let said = text_of(world.last_turn(&driver));
    assert!(!said.contains("c1__openFile"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_call_of_a_tool_no_client_provides_fails_naming_it() {
    let Desk { mut world, driver, .. } = desk(600_000, 30_000).await;
    world.turn(&driver, "call c9__openFile {}").await;
    assert_eq!(
        results_of(world.last_turn(&driver)),
        [(false, "No tool named c9__openFile is offered in this session.".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_completion_for_a_call_that_is_not_waiting_is_refused() {
    let mut desk = desk(600_000, 30_000).await;
    let (turn, call) = call_open_file(&mut desk).await;
    let Desk { mut world, c1, .. } = desk;
    world.complete_call(&c1, &turn, &call, "once");
    world.until_idle().await;
    let seq = world.complete_call(&c1, &turn, &call, "twice");
    let reason = world.refusal(&c1, seq).await;
    assert_eq!(reason, format!("Tool call {call} is not running in the running turn"));
}

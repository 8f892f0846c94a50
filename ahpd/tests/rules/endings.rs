//! A turn's durable ending (seed 003, "Token usage is banked, not estimated"): the turn, its
//! chat's record and its session's bank are written in one store savepoint before the ending is
//! said to anyone, so the process stopped at any point leaves a kept turn with its usage banked,
//! or neither: never a turn whose usage the session's bank does not hold.

use std::path::Path;

use ahp_types::state::{ResponsePart, Turn, TurnState};

use crate::world::{Client, World};

/// What a session's bank holds, as `(input tokens, output tokens, turns)`.
fn bank(world: &World, who: &Client, session: &str) -> (i64, i64, i64) {
    let usage = world.session(who, session).meta.as_ref().and_then(|m| m.get("usage")).cloned();
    let n = |key: &str| usage.as_ref().and_then(|u| u[key].as_i64()).unwrap_or(0);
    (n("inputTokens"), n("outputTokens"), n("turns"))
}

/// What `turns` reported, summed as the bank sums it.
fn reported(turns: &[Turn]) -> (i64, i64, i64) {
    let with: Vec<_> = turns.iter().filter_map(|t| t.usage.as_ref()).collect();
    let sum = |of: fn(&ahp_types::state::UsageInfo) -> Option<i64>| with.iter().filter_map(|u| of(u)).sum::<i64>();
    (sum(|u| u.input_tokens), sum(|u| u.output_tokens), i64::try_from(with.len()).unwrap_or(0))
}

/// The store takes no write of a session's row from now on (a trigger added from outside): what
/// a process killed after a turn's own rows were written, before its session's, leaves behind.
fn refuse_session_rows(dir: &Path) {
    let store = rusqlite::Connection::open(dir.join("sessions.db")).expect("the store opens");
    store
        .execute_batch(
            "CREATE TRIGGER held_insert BEFORE INSERT ON sessions BEGIN SELECT RAISE(ABORT, 'held by the test'); END;
             CREATE TRIGGER held_update BEFORE UPDATE ON sessions BEGIN SELECT RAISE(ABORT, 'held by the test'); END;",
        )
        .expect("the triggers are made");
}

/// Takes [`refuse_session_rows`] back.
fn take_session_rows_again(dir: &Path) {
    let store = rusqlite::Connection::open(dir.join("sessions.db")).expect("the store opens");
    store.execute_batch("DROP TRIGGER held_insert; DROP TRIGGER held_update;").expect("the triggers go");
}

/// The sentence of a turn's error part.
fn error_of(turn: &Turn) -> Option<&str> {
    turn.response_parts.iter().find_map(|part| match part {
        ResponsePart::Error(e) => Some(e.error.message.as_str()),
        _ => None,
    })
}

#[tokio::test(start_paused = true)]
async fn a_turn_is_never_kept_without_its_usage_banked() {
    let mut world = World::echo().await;
    let alice = world.connect("alice").await;
    let session = world.create_session(&alice, "echo").await;
    world.turn(&alice, "one two three").await;
    assert_eq!(bank(&world, &alice, &session.uri), reported(world.turns(&alice)), "the first turn is banked");
    assert_eq!(bank(&world, &alice, &session.uri).2, 1);

    // The session's row cannot be written while the second turn ends: its usage cannot be banked
    // in the store, so the turn is not kept either, and is not told complete.
    refuse_session_rows(world.dir());
    world.turn(&alice, "four five").await;
    let second = world.last_turn(&alice);
    assert_eq!(second.state, TurnState::Error, "not told complete: {second:?}");
    assert_eq!(error_of(second), Some(ahpd::host::persist::NOT_KEPT));

    // Stopped here, as a kill would stop it, and started again on what the store holds.
    world.stop_host().await;
    take_session_rows_again(world.dir());
    world.start_host().await;
    let bob = world.connect("bob").await;
    world.open_session(&bob, &session).await;
    let kept = world.turns(&bob);
    assert!(
        kept.iter().all(|t| t.state != TurnState::Complete || t.message.text != "four five"),
        "the turn whose usage the store could not bank is not kept as complete: {kept:?}"
    );
    assert_eq!(bank(&world, &bob, &session.uri), reported(kept), "every kept turn's usage is in the bank");
}

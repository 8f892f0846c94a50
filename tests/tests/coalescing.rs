//! Coalesced deltas through the official client: the echo worker streams a word per delta; with
//! `deltaWindowMs` on (pushed live), the host merges them, and every client's folded chat still
//! equals the host's snapshot and holds, turn by turn, the same text as the uncoalesced run.
//! Windows end on the daemon's manual clock, moved by the test.

use ahp_types::actions::{RootConfigChangedAction, StateAction};
use ahp_types::state::TurnState;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::json;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn push(config: serde_json::Value) -> StateAction {
    StateAction::RootConfigChanged(RootConfigChangedAction {
        config: serde_json::from_value(config).expect("object"),
        replace: None,
    })
}

/// Messages of many words, so each turn streams many small deltas.
fn messages() -> Vec<String> {
    (0..3).map(|t| (0..120).map(|w| format!("t{t}w{w}")).collect::<Vec<_>>().join(" ")).collect()
}

/// How many `chat/delta` envelopes `client` received on `chat`.
fn deltas_on(client: &TestClient, chat: &str) -> usize {
    client.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_))).count()
}

/// Runs every message as a turn in a new chat, watched by `a` and `b`, checking both against the
/// host's snapshots; the second turn moves the clock while it streams (windows end mid-turn), the
/// third is joined by a client mid-turn (its snapshot holds what was held back). Answers each
/// turn's text and how many deltas `a` received.
async fn run(daemon: &Daemon, a: &mut TestClient, b: &mut TestClient) -> anyhow::Result<(Vec<String>, usize)> {
    let (session, chat) = a.create_session("echo", None).await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let mut texts = Vec::new();
    for (i, message) in messages().iter().enumerate() {
        let turn_id = a.send(&chat, message).await?;
        if i == 1 {
            for _ in 0..20 {
                tests::clock::advance(a, 10).await?;
            }
        }
        if i == 2 {
            let mut late = TestClient::connect(&daemon.url, &format!("late-{chat}")).await?;
            late.subscribe(&chat).await?;
            let turn = late.finished(&chat, &turn_id).await?;
            assert_eq!(&turn_text(&turn), message, "a client that joined mid-turn folds the whole text");
            late.check_against_snapshot(&chat).await?;
        }
        let turn = a.finished(&chat, &turn_id).await?;
        assert_eq!(turn.state, TurnState::Complete);
        let seen_by_b = b.finished(&chat, &turn_id).await?;
        assert_eq!(turn_text(&seen_by_b), turn_text(&turn), "both clients fold the same text");
        a.check_against_snapshot(&chat).await?;
        b.check_against_snapshot(&chat).await?;
        texts.push(turn_text(&turn));
    }
    Ok((texts, deltas_on(a, &chat)))
}

#[tokio::test]
async fn coalesced_deltas_fold_to_the_snapshot_and_the_same_text_as_uncoalesced() -> anyhow::Result<()> {
    let config = json!({
        "deltaWindowMs": 0,
        "agents": { "echo": tests::agents::echo_chunked(0, 1) },
    });
    let mut options = DaemonOptions::with_config(config);
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;

    let (plain, plain_deltas) = run(&daemon, &mut a, &mut b).await?;
    assert_eq!(plain, messages(), "echo says every word back");

    let seq = a.dispatch(ROOT_RESOURCE_URI, push(json!({ "deltaWindowMs": 50 }))).await?;
    assert_eq!(a.echo_of(seq).await?.rejection_reason, None, "deltaWindowMs applies live");
    let (merged, merged_deltas) = run(&daemon, &mut a, &mut b).await?;
    assert_eq!(merged, plain, "the same text, turn by turn");
    assert!(
        merged_deltas < plain_deltas / 4,
        "the deltas were merged ({merged_deltas} coalesced against {plain_deltas})"
    );

    let seq = a.dispatch(ROOT_RESOURCE_URI, push(json!({ "deltaWindowMs": 5000 }))).await?;
    let refused = a.echo_of(seq).await?.rejection_reason;
    assert_eq!(refused.as_deref(), Some("deltaWindowMs must be an integer between 0 and 1000"));
    Ok(())
}

#[tokio::test]
async fn the_default_window_on_wall_time_folds_to_the_snapshot_and_the_whole_text() -> anyhow::Result<()> {
    // No config: the default window, echo streaming a word every 20 ms, windows ending on wall time.
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    for t in 0..2 {
        let message = (0..30).map(|w| format!("t{t}w{w}")).collect::<Vec<_>>().join(" ");
        let turn = a.turn(&chat, &message).await?;
        assert_eq!(turn_text(&turn), message);
        assert_eq!(turn_text(&b.finished(&chat, &turn.id).await?), message);
        a.check_against_snapshot(&chat).await?;
        b.check_against_snapshot(&chat).await?;
    }
    Ok(())
}

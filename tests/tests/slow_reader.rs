//! A client that stops reading is cut off rather than buffered without bound; the clients beside
//! it on the same chat keep streaming; and the cut client reconnects and resumes, its folded state
//! equal to the host's snapshot. Nothing follows the first frame it lost: what it got before the cut
//! is the start of what the chat said, with no hole.

use ahp_types::actions::ActionEnvelope;
use ahp_types::commands::ReconnectResult;
use ahp_types::state::{Snapshot, TurnState};
use serde_json::{json, Value};
use tests::raw::RawSocket;
use tests::{turn_text, Daemon, DaemonOptions, Mirror, TestClient};

const ROOT: &str = "ahp-root://";

/// Turns of this many words stream this many deltas each.
const WORDS: usize = 3000;

/// The most turns the test streams while waiting for the slow reader to be cut (a safety net).
const MOST_TURNS: usize = 60;

fn config() -> Value {
    json!({
        "agents": { "echo": tests::agents::echo_chunked(1, 1) },
        "outboundQueueFrames": 1024,
        "replayBufferSize": 1000,
    })
}

/// Folds one raw message into the mirror when it is an action; answers its channel and sequence
/// number.
fn fold_raw(mirror: &mut Mirror, message: &Value) -> anyhow::Result<Option<(String, u64)>> {
    if message["method"] != "action" {
        return Ok(None);
    }
    let env: ActionEnvelope = serde_json::from_value(message["params"].clone())?;
    mirror.fold(&env);
    Ok(Some((env.channel, env.server_seq)))
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_others_stream_on_and_it_resumes() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(config())).await?;
    let mut fast = TestClient::connect(&daemon.url, "fast").await?;
    let (session, chat) = fast.create_session("echo", None).await?;

    // The slow client: a tiny receive window, subscribed to the same chat, and then it stops
    // reading.
    let mut slow = RawSocket::connect_small_window(&daemon.url, 4096).await?;
    let init = slow
        .call(1, "initialize", json!({ "channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "slow" }))
        .await?;
    anyhow::ensure!(init["result"]["protocolVersion"] == "1.0.0", "{init}");
    let sub = slow.call(2, "subscribe", json!({ "channel": chat })).await?;
    let snapshot: Snapshot = serde_json::from_value(sub["result"]["snapshot"].clone())?;
    let subscribed_at = u64::try_from(snapshot.from_seq)?;
    let mut slow_mirror = Mirror::default();
    slow_mirror.seed(snapshot);

    let text: String = (0..WORDS).map(|i| format!("w{i} ")).collect();
    let mut turns = 0;
    while !daemon.log().contains("a client stopped reading") {
        anyhow::ensure!(turns < MOST_TURNS, "{MOST_TURNS} turns streamed and the slow reader was never cut off");
        let turn = fast.turn(&chat, &text).await?;
        assert_eq!(turn.state, TurnState::Complete, "the reading client's turns go on");
        assert_eq!(turn_text(&turn), text, "every delta reached the reading client");
        turns += 1;
    }
    println!("the slow reader was cut after {turns} turns");
    // The one that reads was never cut: one more turn, and its fold equals the host's snapshot.
    let turn = fast.turn(&chat, "after the cut").await?;
    assert_eq!(turn_text(&turn), "after the cut");
    fast.check_against_snapshot(&chat).await?;
    fast.check_against_snapshot(&session).await?;

    // The slow client reads what reached it before the cut, then finds the connection closed.
    let mut last_seen = 0;
    let mut on_chat = Vec::new();
    while let Some(message) = slow.next_or_end().await? {
        if let Some((channel, seq)) = fold_raw(&mut slow_mirror, &message)? {
            last_seen = seq;
            if channel == chat {
                on_chat.push(seq);
            }
        }
    }
    let streamed: Vec<u64> = fast
        .envelopes
        .iter()
        .filter(|e| e.channel == chat && e.server_seq > subscribed_at)
        .map(|e| e.server_seq)
        .collect();
    let received = on_chat.len();
    assert!(received < streamed.len(), "cut off: it got {received} of the {} actions on the chat", streamed.len());
    // Nothing followed the first frame it lost: what it got is the start of what the chat said.
    assert_eq!(on_chat, streamed[..received], "the slow reader's actions have no hole");

    // It reconnects under its client id and resumes from what it saw.
    let mut back = TestClient::connect_raw(&daemon.url, "slow").await?;
    back.mirror = slow_mirror;
    let result = back.client.reconnect("slow".into(), i64::try_from(last_seen)?, vec![chat.clone()]).await?;
    match result {
        ReconnectResult::Replay(replay) => {
            for env in &replay.actions {
                back.mirror.fold(env);
            }
        }
        ReconnectResult::Snapshot(snapshots) => {
            for snapshot in snapshots.snapshots {
                back.mirror.seed(snapshot);
            }
        }
    }
    back.check_against_snapshot(&chat).await?;
    let turns_now = back.mirror.chat(&chat).map(|c| c.turns.len());
    assert_eq!(turns_now, Some(turns + 1), "it holds every turn, those it missed among them");

    // And it streams again like any other client.
    let id = fast.send(&chat, "welcome back").await?;
    let seen = back.finished(&chat, &id).await?;
    assert_eq!(turn_text(&seen), "welcome back");
    back.check_against_snapshot(&chat).await?;
    Ok(())
}

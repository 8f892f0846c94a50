//! Token usage is banked, not estimated (seed 003): a session's `_meta.usage` is the sum of what
//! its backends reported for its ended turns, kept in the store, and still there after
//! `ahpd restart`. Through the official client, with the real `claude` CLI on the mock Anthropic
//! API (which reports what each request used).

use ahp_types::commands::ReconnectResult;
use ahp_types::state::{SessionState, Turn, TurnState};
use serde_json::{json, Value};
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::{Home, TestClient};

/// `ahpd on ws://… (pid N)…` → the url.
fn announced(stdout: &str) -> anyhow::Result<String> {
    let first = stdout.lines().next().unwrap_or_default();
    let rest = first.strip_prefix("ahpd on ").ok_or_else(|| anyhow::anyhow!("not an announcement: {stdout}"))?;
    Ok(rest.split(" (pid ").next().unwrap_or_default().to_owned())
}

fn bank(session: Option<&SessionState>) -> Value {
    session.and_then(|s| s.meta.as_ref()).and_then(|m| m.get("usage")).cloned().unwrap_or(Value::Null)
}

/// What the turns reported, summed: the bank must hold exactly this.
fn reported(turns: &[Turn]) -> (i64, i64, i64) {
    let with: Vec<_> = turns.iter().filter_map(|t| t.usage.as_ref()).collect();
    (
        with.iter().filter_map(|u| u.input_tokens).sum(),
        with.iter().filter_map(|u| u.output_tokens).sum(),
        i64::try_from(with.len()).unwrap_or(0),
    )
}

fn tokens(bank: &Value) -> (i64, i64, i64) {
    let n = |k: &str| bank[k].as_i64().unwrap_or(-1);
    (n("inputTokens"), n("outputTokens"), n("turns"))
}

#[tokio::test]
async fn a_sessions_usage_is_what_its_turns_reported_summed_and_kept_across_a_restart() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = Home::new()?;
    home.write_config(&json!({ "agents": { "claude": claude_entry(&mock) } }))?;
    let port = tests::daemon::free_port()?.to_string();
    let url = announced(&home.expect(0, &["start", "--port", &port]).await?.stdout)?;

    let mut a = TestClient::connect(&url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    assert_eq!(bank(a.mirror.session(&session)), Value::Null, "nothing used, nothing banked");
    for text in ["first", "second"] {
        let turn = a.turn(&chat, text).await?;
        assert_eq!(turn.state, TurnState::Complete);
        assert!(turn.usage.as_ref().and_then(|u| u.output_tokens).is_some_and(|n| n > 0), "{turn:?}");
    }
    let s = session.clone();
    a.until("two turns banked", move |m| tokens(&bank(m.session(&s))).2 == 2).await?;
    let turns = a.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    let before = bank(a.mirror.session(&session));
    assert_eq!(tokens(&before), reported(&turns), "the bank is the sum of what was reported: {before}");
    a.check_against_snapshot(&session).await?;
    let last_seen = a.envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0);

    home.expect(0, &["restart"]).await?;
    let mut again = TestClient::connect_raw(&url, "a").await?;
    let subs = vec![ahp_types::ROOT_RESOURCE_URI.to_owned(), session.clone(), chat.clone()];
    let ReconnectResult::Snapshot(snapshots) =
        again.client.reconnect("a".into(), i64::try_from(last_seen)?, subs).await?
    else {
        anyhow::bail!("a new process replays nothing");
    };
    for snapshot in snapshots.snapshots {
        again.mirror.seed(snapshot);
    }
    assert_eq!(bank(again.mirror.session(&session)), before, "the bank came back from the store");

    let turn = again.turn(&chat, "third").await?;
    assert_eq!(turn.state, TurnState::Complete);
    let s = session.clone();
    again.until("the third turn banked", move |m| tokens(&bank(m.session(&s))).2 == 3).await?;
    let turns = again.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(tokens(&bank(again.mirror.session(&session))), reported(&turns), "and it goes on summing");
    again.check_against_snapshot(&session).await?;
    home.expect(0, &["stop"]).await?;
    Ok(())
}

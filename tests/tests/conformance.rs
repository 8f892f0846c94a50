//! The daemon's core through the official AHP 1.0.0 client over a real WebSocket: sessions, turns
//! folded through the official reducers and compared with the host's snapshots, echoes, a second
//! client, reconnects by replay and by snapshot, and the catalogue upkeep the reducers leave to the
//! host.

use ahp::SubscriptionEvent;
use ahp_types::commands::ReconnectResult;
use ahp_types::state::TurnState;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::json;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn echo_config(pace_ms: u64, chunk_words: u64) -> serde_json::Value {
    json!({ "agents": { "echo": tests::agents::echo_chunked(pace_ms, chunk_words) } })
}

#[tokio::test]
async fn echo_turns_fold_to_the_hosts_snapshot() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let init = a.init.clone().expect("initialized");
    assert_eq!(init.protocol_version, "1.0.0");
    let (session, chat) = a.create_session("echo", Some(json!({ "voice": "shouty" }))).await?;
    for text in ["hello there", "second turn with more words"] {
        let turn = a.turn(&chat, text).await?;
        assert_eq!(turn.state, TurnState::Complete);
        assert_eq!(turn_text(&turn), text.to_uppercase());
        assert!(turn.duration.is_some(), "a real duration");
        a.check_against_snapshot(&chat).await?;
        a.check_against_snapshot(&session).await?;
        a.check_against_snapshot(ROOT_RESOURCE_URI).await?;
    }
    // Streamed in several deltas, each into a part created before it.
    let deltas = a
        .envelopes
        .iter()
        .filter(|e| e.channel == chat && matches!(e.action, ahp_types::actions::StateAction::ChatDelta(_)))
        .count();
    assert!(deltas >= 3, "the answer streamed in several deltas ({deltas})");
    Ok(())
}

#[tokio::test]
async fn a_second_client_sees_the_same_envelopes_and_the_originator_its_echo_once() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    let mut b = TestClient::connect(&daemon.url, "client-b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let turn_id = a.send(&chat, "one two three").await?;
    a.finished(&chat, &turn_id).await?;
    b.finished(&chat, &turn_id).await?;
    let on_chat = |c: &TestClient| -> Vec<(u64, String)> {
        c.envelopes
            .iter()
            .filter(|e| e.channel == chat)
            .map(|e| (e.server_seq, serde_json::to_string(&e.action).unwrap_or_default()))
            .collect()
    };
    let (ea, eb) = (on_chat(&a), on_chat(&b));
    let first_b = eb.first().map(|x| x.0).unwrap_or(0);
    let ea_tail: Vec<_> = ea.into_iter().filter(|x| x.0 >= first_b).collect();
    assert_eq!(ea_tail, eb, "both clients receive the same envelopes in the same order");
    let echoes: Vec<_> =
        a.envelopes.iter().filter(|e| e.origin.as_ref().is_some_and(|o| o.client_id == "client-a")).collect();
    assert_eq!(echoes.len(), 1, "the originator sees its action echoed exactly once");
    assert_eq!(echoes[0].origin.as_ref().map(|o| o.client_seq), Some(1));
    assert!(matches!(echoes[0].action, ahp_types::actions::StateAction::ChatTurnStarted(_)));
    let b_echo = b.envelopes.iter().find(|e| e.server_seq == echoes[0].server_seq).expect("b got it too");
    assert_eq!(b_echo.origin, echoes[0].origin, "other clients see the origin too");
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn root_notifications_keep_list_views_current() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    a.turn(&chat, "name this session please").await?;
    a.check_against_snapshot(ROOT_RESOURCE_URI).await?;
    a.pump()?;
    assert!(a
        .notifications
        .iter()
        .any(|n| matches!(n, SubscriptionEvent::SessionAdded(p) if p.summary.resource == session)));
    assert!(a
        .notifications
        .iter()
        .any(|n| matches!(n, SubscriptionEvent::SessionSummaryChanged(p) if p.session == session && p.changes.title.as_deref() == Some("name this session please"))));
    let session_state = a.mirror.session(&session).expect("session").clone();
    assert_eq!(session_state.title, "name this session please", "the first message names the session");
    assert_eq!(session_state.chats[0].title, "name this session please", "and its chat in the catalogue");
    let list = a.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    assert_eq!(list["items"][0]["resource"], session.as_str());
    assert_eq!(list["items"][0]["title"], "name this session please");
    a.request("disposeSession", json!({ "channel": session })).await?;
    a.until("the count to drop", |m| matches!(m.states.get(ROOT_RESOURCE_URI), Some(ahp_types::state::SnapshotState::Root(r)) if r.active_sessions == Some(0)))
        .await?;
    a.pump()?;
    assert!(a.notifications.iter().any(|n| matches!(n, SubscriptionEvent::SessionRemoved(p) if p.session == session)));
    Ok(())
}

#[tokio::test]
async fn list_sessions_pages_newest_first() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let mut made = Vec::new();
    for i in 0..5 {
        let (session, chat) = a.create_session("echo", None).await?;
        a.turn(&chat, &format!("session {i}")).await?;
        made.push(session);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({ "channel": ROOT_RESOURCE_URI, "limit": 2 });
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page = a.request("listSessions", params).await?;
        for item in page["items"].as_array().expect("items") {
            seen.push(item["resource"].as_str().expect("uri").to_owned());
        }
        match page.get("nextCursor").and_then(|c| c.as_str()) {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    made.reverse();
    assert_eq!(seen, made, "newest first, each once, across pages");
    let bad = a.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI, "cursor": "nope" })).await;
    assert!(matches!(bad, Err(ahp::ClientError::Rpc(e)) if e.code == -32602));
    Ok(())
}

#[tokio::test]
async fn reconnect_replays_what_was_missed_and_the_fold_equals_a_snapshot() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    a.turn(&chat, "before the drop").await?;
    a.check_against_snapshot(&chat).await?;
    let last_seen = a.envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0);
    let mirror = std::mem::take(&mut a.mirror);
    a.client.shutdown().await;

    let mut b = TestClient::connect(&daemon.url, "client-b").await?;
    b.subscribe(&chat).await?;
    b.turn(&chat, "while a was away").await?;

    let mut a2 = TestClient::connect_raw(&daemon.url, "client-a").await?;
    a2.mirror = mirror;
    let subs = vec![ROOT_RESOURCE_URI.to_owned(), session.clone(), chat.clone(), "ahp-session:/gone".to_owned()];
    let result = a2.client.reconnect("client-a".into(), i64::try_from(last_seen)?, subs).await?;
    let ReconnectResult::Replay(replay) = result else { anyhow::bail!("expected a replay, got a snapshot") };
    assert_eq!(replay.missing, vec!["ahp-session:/gone".to_owned()]);
    assert!(replay.actions.iter().all(|e| e.server_seq > last_seen));
    assert!(replay.actions.windows(2).all(|w| w[0].server_seq < w[1].server_seq), "in order");
    for env in &replay.actions {
        a2.mirror.fold(env);
    }
    let turns = a2.mirror.chat(&chat).map(|c| c.turns.len());
    assert_eq!(turns, Some(2), "the replay carries the turn that ran while it was away");
    a2.check_against_snapshot(&chat).await?;
    a2.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn reconnect_from_an_unknown_client_gets_snapshots() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (_session, chat) = a.create_session("echo", None).await?;
    a.turn(&chat, "hello").await?;
    let stranger = TestClient::connect_raw(&daemon.url, "never-seen").await?;
    let result = stranger.client.reconnect("never-seen".into(), 1, vec![chat.clone()]).await?;
    let ReconnectResult::Snapshot(snap) = result else { anyhow::bail!("expected snapshots") };
    assert_eq!(snap.snapshots.len(), 1);
    assert_eq!(snap.snapshots[0].resource, chat);
    Ok(())
}

#[tokio::test]
async fn reconnect_past_the_replay_ring_gets_snapshots() -> anyhow::Result<()> {
    let mut config = echo_config(0, 1);
    config["replayBufferSize"] = json!(1000);
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (_session, chat) = a.create_session("echo", None).await?;
    a.turn(&chat, "first").await?;
    let last_seen = a.envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0);
    let long: String = (0..1200).map(|i| format!("w{i} ")).collect();
    a.turn(&chat, &long).await?;
    a.client.shutdown().await;
    let a2 = TestClient::connect_raw(&daemon.url, "client-a").await?;
    let result = a2.client.reconnect("client-a".into(), i64::try_from(last_seen)?, vec![chat.clone()]).await?;
    assert!(
        matches!(result, ReconnectResult::Snapshot(_)),
        "1200 actions later, seq {last_seen} is gone from a ring of 1000"
    );
    Ok(())
}

#[tokio::test]
async fn fetch_turns_pages_older_turns_into_a_limited_snapshot() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let (_session, chat) = a.create_session("echo", None).await?;
    for i in 0..3 {
        a.turn(&chat, &format!("turn {i}")).await?;
    }
    let b = TestClient::connect(&daemon.url, "client-b").await?;
    let (result, _sub) = b
        .client
        .subscribe_with_options(chat.clone(), None, Some(ahp_types::commands::SubscribeView { turns: Some(1) }))
        .await?;
    let Some(ahp_types::state::Snapshot { state: ahp_types::state::SnapshotState::Chat(mut state), .. }) =
        result.snapshot
    else {
        anyhow::bail!("no chat snapshot")
    };
    assert_eq!(state.turns.len(), 1);
    let cursor = state.turns_next_cursor.clone().expect("older turns remain");
    let mut events = b.client.events();
    b.request("fetchTurns", json!({ "channel": chat, "cursor": cursor })).await?;
    let loaded = loop {
        let event = tokio::time::timeout(tests::PATIENCE, events.recv()).await?.expect("event");
        if let SubscriptionEvent::Action(env) = event.event {
            if let ahp_types::actions::StateAction::ChatTurnsLoaded(_) = env.action {
                break env;
            }
        }
    };
    ahp::reducers::apply_action_to_chat(&mut state, &loaded.action);
    assert_eq!(state.turns.len(), 3, "the page prepends the two older turns");
    assert!(state.turns_next_cursor.is_none());
    Ok(())
}

#[tokio::test]
async fn config_is_resolved_and_checked_against_the_agents_schema() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut a = TestClient::connect(&daemon.url, "client-a").await?;
    let resolved =
        a.request("resolveSessionConfig", json!({ "channel": ROOT_RESOURCE_URI, "provider": "echo" })).await?;
    assert_eq!(resolved["values"]["voice"], "plain");
    assert!(resolved["schema"]["properties"]["voice"]["enum"].as_array().is_some_and(|e| e.len() == 4));
    let refused = a
        .request(
            "createSession",
            json!({ "channel": "ahp-session:/x1", "provider": "echo", "config": { "voice": "loud" } }),
        )
        .await;
    assert!(
        matches!(&refused, Err(ahp::ClientError::Rpc(e)) if e.message == "Session configuration 'voice' does not offer 'loud'."),
        "{refused:?}"
    );
    let unknown = a.request("createSession", json!({ "channel": "ahp-session:/x2", "provider": "nobody" })).await;
    assert!(
        matches!(&unknown, Err(ahp::ClientError::Rpc(e)) if e.code == -32002 && e.message.contains("echo")),
        "{unknown:?}"
    );
    let (session, chat) = a.create_session("echo", None).await?;
    let again = a.request("createSession", json!({ "channel": session, "provider": "echo" })).await;
    assert!(matches!(&again, Err(ahp::ClientError::Rpc(e)) if e.code == -32003));
    // A client changes the voice: every client is told, and the next turn speaks in it.
    a.dispatch(
        &session,
        ahp_types::actions::StateAction::SessionConfigChanged(ahp_types::actions::SessionConfigChangedAction {
            config: serde_json::from_value(json!({ "voice": "backwards" }))?,
            replace: None,
        }),
    )
    .await?;
    let turn = a.turn(&chat, "abc").await?;
    assert_eq!(turn_text(&turn), "cba");
    a.check_against_snapshot(&session).await?;
    Ok(())
}

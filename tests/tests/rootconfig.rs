//! The daemon's keys as root config: a client pushes a live key and every session's tool offer
//! follows at once; a key that applies after a restart is written to the config file and the root
//! state says a restart is needed; a bad value is refused with the key's own sentence.

use ahp_types::actions::{RootConfigChangedAction, StateAction};
use ahp_types::state::SnapshotState;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::json;
use tests::{Daemon, DaemonOptions, TestClient};

fn push(config: serde_json::Value) -> StateAction {
    StateAction::RootConfigChanged(RootConfigChangedAction {
        config: serde_json::from_value(config).expect("object"),
        replace: None,
    })
}

fn root_values(client: &TestClient) -> serde_json::Map<String, serde_json::Value> {
    match client.mirror.states.get(ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(r)) => r.config.as_ref().map(|c| c.values.clone()).unwrap_or_default(),
        _ => Default::default(),
    }
}

#[tokio::test]
async fn a_live_key_applies_at_once_and_a_restart_key_is_kept_for_the_restart() -> anyhow::Result<()> {
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "notes": tests::agents::notes() } })))
            .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    assert_eq!(root_values(&a)["sessionTools"], true, "the daemon's keys are on the root state");
    let (session, _chat) = a.create_session("notes", None).await?;
    let tools = |c: &TestClient| -> Vec<String> {
        c.mirror
            .session(&session)
            .and_then(|s| s.server_tools.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    assert!(tools(&a).contains(&"list_agents".to_owned()));

    a.dispatch(ROOT_RESOURCE_URI, push(json!({ "sessionTools": false }))).await?;
    let s = session.clone();
    a.until("the session tools to go", move |m| {
        m.session(&s).and_then(|x| x.server_tools.as_ref()).is_some_and(|t| !t.iter().any(|x| x.name == "list_agents"))
    })
    .await?;
    a.check_against_snapshot(&session).await?;

    a.dispatch(ROOT_RESOURCE_URI, push(json!({ "clientToolTimeoutMs": 5000 }))).await?;
    a.until("a restart to be needed", |m| {
        matches!(m.states.get(ROOT_RESOURCE_URI), Some(SnapshotState::Root(r))
            if r.config.as_ref().is_some_and(|c| c.values.get("restartNeeded") == Some(&json!(true))))
    })
    .await?;
    let file = daemon.home.join("config/ahpd/config.json");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
    assert_eq!(written["clientToolTimeoutMs"], 5000, "kept in the config file for the restart");
    assert!(written["agents"].is_object(), "the file's other keys are kept");
    a.check_against_snapshot(ROOT_RESOURCE_URI).await?;

    let seq = a.dispatch(ROOT_RESOURCE_URI, push(json!({ "port": "high" }))).await?;
    let seq2 = a.dispatch(ROOT_RESOURCE_URI, push(json!({ "colour": "red" }))).await?;
    let refused = |c: &TestClient, seq: i64| {
        c.envelopes
            .iter()
            .find(|e| e.origin.as_ref().is_some_and(|o| o.client_seq == seq))
            .and_then(|e| e.rejection_reason.clone())
    };
    while refused(&a, seq).is_none() || refused(&a, seq2).is_none() {
        a.next_event(tests::PATIENCE).await?;
    }
    assert_eq!(refused(&a, seq).as_deref(), Some("port must be an integer between 0 and 65535"));
    assert_eq!(refused(&a, seq2).as_deref(), Some("colour is not a setting ahpd knows"));
    Ok(())
}

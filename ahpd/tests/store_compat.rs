//! The store reads files older versions wrote: a version-1 file, built from the checked-in SQL an
//! ahpd 0.1.0 store holds, opens, lists, loads whole, and has its interrupted turn at hand; a
//! version-4 file (`fixtures/store-v4.sql`) gains the tables added since and keeps what it held.

use ahpd::store::{Store, SCHEMA_VERSION};

fn version_one_store(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("sessions.db");
    let conn = rusqlite::Connection::open(&path).expect("create");
    conn.execute_batch(include_str!("fixtures/store-v1.sql")).expect("the fixture loads");
    drop(conn);
    path
}

#[test]
fn a_version_one_store_opens_and_reads_whole() {
    let dir = tempfile::tempdir().expect("temp");
    let path = version_one_store(dir.path());
    let store = Store::open(&path).expect("a version-1 store opens");
    assert_eq!(store.version().expect("version"), SCHEMA_VERSION);
    assert_eq!(store.count().expect("count"), 1);

    let page = store.page(None, 10).expect("page");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0]["title"], "An old session");

    let loaded = store.load_session("ahp-session:/old-1").expect("load").expect("present");
    assert_eq!(loaded.record.config["voice"], "whisper");
    assert_eq!(loaded.record.depth, 0, "a field version 1 did not write takes its default");
    assert_eq!(loaded.chats.len(), 2);
    let (first, turns) = &loaded.chats[0];
    assert!(first.started_in_backend);
    assert!(!first.resumable, "a chat version 1 kept says nothing of resuming: its backend says so when it next runs");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1].transcript_id.as_deref(), Some("abc"));
    assert!(loaded.chats[1].0.queued.is_empty());

    let interrupted = store.interrupted().expect("interrupted");
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0].0, "ahp-chat:/old-1");
}

#[test]
fn a_store_from_a_newer_ahpd_is_refused_with_a_sentence() {
    let dir = tempfile::tempdir().expect("temp");
    let path = version_one_store(dir.path());
    rusqlite::Connection::open(&path).expect("open").execute_batch("PRAGMA user_version = 99;").expect("bump");
    let err = Store::open(&path).err().expect("refused");
    assert!(err.to_string().contains("written by a newer ahpd"), "{err}");
}

#[test]
fn an_older_store_gains_a_table_for_what_agents_offer_and_keeps_one_per_provider() {
    let dir = tempfile::tempdir().expect("temp");
    let path = version_one_store(dir.path());
    let store = Store::open(&path).expect("a version-1 store opens");
    assert!(store.agent_offers().expect("offers").is_empty(), "an old file remembers no offers");
    let offer = |model: &str| ahpd::store::AgentOffersRecord {
        provider: "scripted".into(),
        probe: protocol::ProbeResult {
            models: vec![serde_json::from_value(
                serde_json::json!({"id": model, "provider": "scripted", "name": model}),
            )
            .expect("a model")],
            ..Default::default()
        },
        schema: None,
        said_at: "2026-01-01T00:00:00.000Z".into(),
    };
    store.save_agent_offers(&offer("fast")).expect("kept");
    store.save_agent_offers(&offer("smart")).expect("replaced");
    drop(store);
    let again = Store::open(&path).expect("opens again");
    assert_eq!(again.agent_offers().expect("offers"), vec![offer("smart")], "the last offer, after a reopen");
}

#[test]
fn a_version_four_store_gains_agent_merges_table_and_keeps_a_folders_settings() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("sessions.db");
    let conn = rusqlite::Connection::open(&path).expect("create");
    conn.execute_batch(include_str!("fixtures/store-v4.sql")).expect("the fixture loads");
    drop(conn);
    let store = Store::open(&path).expect("a version-4 store opens");
    assert_eq!(store.version().expect("version"), SCHEMA_VERSION);
    assert_eq!(store.agent_offers().expect("offers").len(), 1, "what version 4 kept is still there");
    assert!(store.agent_merges().expect("agent merges").is_empty(), "a version-4 file configured no folder");
    let record = ahpd::store::AgentMergeRecord {
        session: "ahp-session:/old-1".into(),
        folder: "/work/repo".into(),
        chat: None,
        enabled: true,
        options: ahpd::store::AgentMergeOptions { merge_pull_request: Some("always".into()), ..Default::default() },
        target: Some("feature".into()),
        enabled_by: None,
        changed_at: "2026-12-01T09:00:00.000Z".into(),
        asked: Vec::new(),
    };
    store.save_agent_merge(&record).expect("kept");
    drop(store);
    let again = Store::open(&path).expect("opens again");
    assert_eq!(again.agent_merge("ahp-session:/old-1", "/work/repo").expect("read"), Some(record));
    again.delete_session("ahp-session:/old-1").expect("deleted");
    assert!(again.agent_merges().expect("agent merges").is_empty(), "a session's settings go with it");
}

#[test]
fn a_version_four_store_gains_the_automation_tables_keeps_a_run_once_per_request_and_what_github_triggers_saw() {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("sessions.db");
    let conn = rusqlite::Connection::open(&path).expect("create");
    conn.execute_batch(include_str!("fixtures/store-v4.sql")).expect("the fixture loads");
    drop(conn);
    let store = Store::open(&path).expect("an older store opens");
    assert_eq!(store.version().expect("version"), SCHEMA_VERSION);
    assert!(store.automations().expect("automations").is_empty(), "an older file kept no automation");
    let run: ahpd::store::AutomationRunRecord = serde_json::from_value(serde_json::json!({
        "state": {
            "resource": "ahp-automation-run:/r1",
            "automation": "ahp-automation:/a",
            "origin": { "kind": "manual" },
            "lifecycle": { "status": "running", "createdAt": "2026-12-01T09:00:00.000Z", "startedAt": "2026-12-01T09:00:01.000Z" },
            "sessions": []
        },
        "requestId": "req-1",
        "createdMs": 1
    }))
    .expect("a run record");
    store.save_automation_run(&run).expect("kept");
    drop(store);
    let again = Store::open(&path).expect("opens again");
    let found = again.automation_run_for("ahp-automation:/a", Some("req-1"), None).expect("read");
    assert_eq!(found, Some(run.clone()), "found again by its request id");
    assert_eq!(again.unfinished_automation_runs().expect("unfinished"), vec![run]);

    // Version 7: what a GitHub trigger saw is kept per automation and trigger, and goes with it.
    let seen = ahpd::store::GitHubSeen { watching: "w".into(), newest: 7, noted: true, ..Default::default() };
    again.save_github_seen("ahp-automation:/a", "prs", &seen).expect("kept");
    drop(again);
    let third = Store::open(&path).expect("opens a third time");
    assert_eq!(third.github_seen("ahp-automation:/a", "prs").expect("read"), Some(seen.clone()));
    assert_eq!(third.github_seen("ahp-automation:/a", "issues").expect("read"), None);
    third.forget_github_seen("ahp-automation:/a").expect("forgotten");
    assert_eq!(third.github_seen("ahp-automation:/a", "prs").expect("read"), None);
    third.save_github_seen("ahp-automation:/a", "prs", &seen).expect("kept");
    third.delete_automation("ahp-automation:/a").expect("deleted");
    assert_eq!(third.github_seen("ahp-automation:/a", "prs").expect("read"), None, "it went with its automation");
}

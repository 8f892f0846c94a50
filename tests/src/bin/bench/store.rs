//! `bench store`: start-up and the first `listSessions` page over many stored sessions; and the
//! seeding of a store the memory bench starts daemons on.

use std::time::Instant;

use serde_json::json;

use tests::{Daemon, DaemonOptions, TestClient};

/// A seeded turn's answer: a paragraph, about what a short model reply holds.
const ANSWER: &str = "The folder holds a Rust workspace: a daemon, its workers, the protocol types and the \
tests. Each crate has its own Cargo.toml; the workspace's lists them. The daemon serves AHP over a WebSocket \
and keeps its sessions in SQLite.";

/// Seeds `count` sessions, each with `turns` completed turns, into the store under `home`.
pub fn seed_store(home: &std::path::Path, count: usize, turns: usize) -> anyhow::Result<()> {
    use ahpd::store::{ChatRecord, SessionRecord, Store, TurnRecord};
    let mut store = Store::open(&home.join("data/ahpd/sessions.db"))?;
    store.in_transaction(|store| {
        for i in 0..count {
            let uri = format!("ahp-session:/seeded-{i:05}");
            let chat = format!("ahp-chat:/seeded-{i:05}");
            let at = format!("2026-01-01T00:{:02}:{:02}.{:03}Z", (i / 60000) % 60, (i / 1000) % 60, i % 1000);
            let record = SessionRecord {
                uri: uri.clone(),
                provider: "echo".into(),
                created_at: at.clone(),
                title: format!("seeded {i}"),
                flags: 0,
                working_directory: None,
                config: Default::default(),
                default_chat: Some(chat.clone()),
                owner: None,
                parent: None,
                depth: 0,
                meta: None,
                changes: None,
                origin: None,
            };
            let summary = json!({ "provider": "echo", "title": record.title, "status": 1, "resource": uri,
                "createdAt": at, "modifiedAt": at, "defaultChat": chat });
            store.save_session(&record, &summary)?;
            store.save_chat(&ChatRecord {
                uri: chat.clone(),
                session: uri.clone(),
                position: 0,
                title: record.title.clone(),
                conversation_id: format!("seeded-{i:05}"),
                started_in_backend: true,
                origin: None,
                queued: Vec::new(),
                steering: None,
                draft: None,
                flags: 0,
                modified_at: Some(at.clone()),
                harness: None,
                working_directory: None,
                changes: None,
                cut: None,
                resumable: false,
            })?;
            for t in 0..turns {
                let turn = serde_json::from_value(json!({ "id": format!("t{i}-{t}"), "startedAt": at, "duration": 5,
                    "message": { "text": format!("question {t}: what is in this folder?"), "origin": { "kind": "user" } },
                    "responseParts": [{ "kind": "markdown", "id": "p", "content": ANSWER }], "state": "complete" }))?;
                store.save_turn(&chat, t as i64, &TurnRecord { turn, transcript_id: None, sender: None })?;
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Start-up (spawn to announcement) and the first page of `listSessions`, over a store of `count`.
async fn store_case(count: usize) -> anyhow::Result<(f64, f64)> {
    let home = tempfile::Builder::new().prefix("ahpd-bench-store-").tempdir()?;
    seed_store(home.path(), count, 1)?;
    let mut startups = Vec::new();
    let mut pages = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut daemon = Daemon::start_in(home.path(), DaemonOptions::default()).await?;
        startups.push(started.elapsed().as_secs_f64() * 1000.0);
        let client = TestClient::connect(&daemon.url, "bench").await?;
        let asked = Instant::now();
        let page = client.request("listSessions", json!({ "channel": "ahp-root://", "limit": 50 })).await?;
        pages.push(asked.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(page["items"].as_array().map(Vec::len) == Some(count.min(50)), "a full first page");
        client.client.shutdown().await;
        daemon.terminate().await?;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(&mut startups), median(&mut pages)))
}

pub async fn store_bench() -> anyhow::Result<()> {
    let small = store_case(10).await?;
    let large = store_case(10_000).await?;
    println!("{:<28} {:>14} {:>22}", "stored sessions", "start-up ms", "listSessions page ms");
    println!("{:<28} {:>14.1} {:>22.2}", "10", small.0, small.1);
    println!("{:<28} {:>14.1} {:>22.2}", "10 000", large.0, large.1);
    println!("10 000 vs 10: start-up {:.2}x, first page {:.2}x", large.0 / small.0, large.1 / small.1);
    Ok(())
}

//! The store under faults a person can cause: a data folder made immutable while the daemon runs
//! (`chattr -R +i`) degrades it with the I/O-error notice instead of killing it with SIGBUS, and
//! nothing told complete is lost; a store deleted while the daemon runs (`rm sessions.db*`) is
//! written again at once from what the daemon holds, and every turn told complete is there after
//! `kill -9` and a restart; writes missed while the store could not write (a session made during
//! the spell among them) go back in an order their foreign keys accept.

use serde_json::json;
use tests::skip::or_skip;
use tests::store::{
    assert_failed_not_completed, completed_turns, data_of, io_sentence, store_of, told_notice, until_notice, Immutable,
};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// The echo agent, one word every 40 ms: a turn of 80 words runs for about three seconds, through
/// several of the store's checkpoints (one a second) and running-turn saves (two a second).
fn echo() -> DaemonOptions {
    DaemonOptions::with_config(
        json!({ "agents": { "echo": { "kind": "echo", "options": { "paceMs": 40, "chunkWords": 1 } } } }),
    )
}

/// A message the echo agent takes about three seconds to answer.
fn long_message() -> String {
    (0..80).map(|i| format!("w{i} ")).collect()
}

/// A home on a disk file system (the tempdir's; tmpfs takes `chattr +i` without failing a mapped
/// page, so it would prove nothing here).
fn home() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("ahpd-faults-").tempdir()?)
}

/// After `kill -9` and a restart on `home`: the chat's completed turns, as a fresh client reads them.
async fn completed_after_restart(home: &std::path::Path, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut daemon = Daemon::start_in(home, echo()).await?;
    let mut after = TestClient::connect(&daemon.url, "after").await?;
    after.subscribe(chat).await?;
    after.check_against_snapshot(chat).await?;
    let completed = completed_turns(&after, chat);
    // Gone before the caller starts the next one in the same folder (a daemon merely dropped is
    // killed, but may still answer on its socket a moment: "another ahpd already runs").
    drop(after);
    daemon.kill9().await?;
    Ok(completed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immutable_data_folder_degrades_the_daemon_and_loses_nothing_told_complete() -> anyhow::Result<()> {
    let home = home()?;
    let sentence = io_sentence(&store_of(home.path()));
    let mut daemon = Daemon::start_in(home.path(), echo()).await?;
    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let mut watcher = TestClient::connect(&daemon.url, "watcher").await?;
    let (_session, chat) = writer.create_session("echo", None).await?;
    watcher.subscribe(&chat).await?;
    let mut completed = Vec::new();
    for n in 0..2 {
        let turn = writer.turn(&chat, &format!("before{n}")).await?;
        completed.push((turn.id.clone(), turn_text(&turn)));
    }

    // The data folder cannot be written while a turn runs, as the store checkpoints and saves the
    // turn's progress: the turn fails saying so, every client is told, and the daemon lives on (it
    // died with SIGBUS writing its mapped `-shm`).
    let failed = writer.send(&chat, &long_message()).await?;
    let (c, t) = (chat.clone(), failed.clone());
    writer
        .until("the long turn to stream", move |m| {
            m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|a| a.id == t && !a.response_parts.is_empty())
        })
        .await?;
    let Some(locked) = or_skip(Immutable::make(&data_of(home.path()))) else { return Ok(()) };
    for client in [&mut writer, &mut watcher] {
        let turn = client.finished(&chat, &failed).await?;
        assert_failed_not_completed(client, &turn, &sentence);
        told_notice(client, &sentence).await?;
    }
    let status = daemon.status().await?;
    assert_eq!(status["storeCannotWrite"], json!(sentence), "the daemon answers, and says it: {status}");

    // Writable again: the daemon finds it by itself and the next turn completes.
    locked.undo();
    until_notice(&mut watcher, "").await?;
    let turn = writer.turn(&chat, "after").await?;
    completed.push((turn.id.clone(), turn_text(&turn)));
    writer.check_against_snapshot(&chat).await?;

    daemon.kill9().await?;
    assert_eq!(completed_after_restart(home.path(), &chat).await?, completed, "every turn told complete, in order");
    Ok(())
}

/// Removes the store's files, as `rm sessions.db*` does.
fn remove_store(home: &std::path::Path) -> anyhow::Result<()> {
    let store = store_of(home);
    for suffix in ["", "-wal", "-shm"] {
        let file = std::path::PathBuf::from(format!("{}{suffix}", store.display()));
        if file.exists() {
            std::fs::remove_file(&file)?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_deleted_while_the_daemon_runs_is_written_again_at_once_and_keeps_every_turn() -> anyhow::Result<()> {
    let home = home()?;
    let store = store_of(home.path());
    let mut daemon = Daemon::start_in(home.path(), echo()).await?;
    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let (session, chat) = writer.create_session("echo", None).await?;
    let mut completed = Vec::new();
    for n in 0..3 {
        let turn = writer.turn(&chat, &format!("before{n}")).await?;
        completed.push((turn.id.clone(), turn_text(&turn)));
    }

    // Deleted while nothing is written: the daemon notices within its health tick, and the store
    // is at its path again, written from what the daemon holds.
    remove_store(home.path())?;
    let said = daemon.wait_for_log("was deleted or replaced while ahpd ran", tests::PATIENCE).await?;
    assert!(said.contains(&store.display().to_string()), "{said}");
    assert!(store.is_file(), "the store is back at {}", store.display());
    let turn = writer.turn(&chat, "between").await?;
    completed.push((turn.id.clone(), turn_text(&turn)));

    // Deleted again, and a turn at once: the write that lands in the deleted file puts the store
    // back before the turn is told complete.
    remove_store(home.path())?;
    let turn = writer.turn(&chat, "after").await?;
    completed.push((turn.id.clone(), turn_text(&turn)));
    assert!(store.is_file(), "the store is back at {}", store.display());
    let status = daemon.status().await?;
    assert!(status.get("storeCannotWrite").is_none(), "nothing is wrong now: {status}");

    daemon.kill9().await?;
    assert_eq!(completed_after_restart(home.path(), &chat).await?, completed, "every turn told complete, in order");
    let daemon = Daemon::start_in(home.path(), echo()).await?;
    let client = TestClient::connect(&daemon.url, "lister").await?;
    let listed = client.listed_sessions(None).await?;
    assert_eq!(listed.len(), 1, "the session is listed: {listed:?}");
    assert_eq!(listed[0]["resource"], json!(session));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_while_the_store_could_not_write_is_kept_once_it_can() -> anyhow::Result<()> {
    let home = home()?;
    let mut daemon = Daemon::start_in(home.path(), echo()).await?;
    let mut client = TestClient::connect(&daemon.url, "maker").await?;
    let (_first, first_chat) = client.create_session("echo", None).await?;
    let kept = client.turn(&first_chat, "kept").await?;

    // The store stops taking writes just before a session is made: its session row and its
    // chat's row are both missed, and written again once the store can, the session first (the
    // chat's row names it; written first it failed "FOREIGN KEY constraint failed", and was lost).
    let Some(locked) = or_skip(Immutable::make(&data_of(home.path()))) else { return Ok(()) };
    let (session, chat) = client.create_session("echo", None).await?;
    told_notice(&mut client, &io_sentence(&store_of(home.path()))).await?;
    locked.undo();
    until_notice(&mut client, "").await?;
    let log = daemon.log();
    let replay = log.split("takes writes again").nth(1).unwrap_or_default();
    assert!(!replay.contains("failed"), "the missed writes went back in order:\n{log}");

    daemon.kill9().await?;
    let daemon = Daemon::start_in(home.path(), echo()).await?;
    let mut after = TestClient::connect(&daemon.url, "after").await?;
    let listed: Vec<_> = after.listed_sessions(None).await?.iter().map(|s| s["resource"].clone()).collect();
    assert!(listed.contains(&json!(session)), "the session made during the spell is kept: {listed:?}");
    after.subscribe(&chat).await?;
    let turn = after.turn(&chat, "its chat works").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete);
    after.subscribe(&first_chat).await?;
    assert_eq!(completed_turns(&after, &first_chat), vec![(kept.id.clone(), turn_text(&kept))]);
    Ok(())
}

//! A damaged store and backups, through the real daemon: pages of a stopped daemon's store
//! overwritten, the next start keeps the damaged file aside, recovers what reads (saying so on
//! stderr and in `ahpd status`), and every recovered chat opens and takes new turns; `ahpd store
//! check` tells a damaged file from a sound one; `ahpd store backup` and `restore` round-trip, and
//! the daemon keeps its newest backups as it runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tests::daemon::run_ahpd;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// An echo agent that answers at once.
fn quick_echo() -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { "echo": tests::agents::echo_chunked(0, 64) } }))
}

/// The resources `listSessions` answers, every page.
async fn listed(client: &TestClient) -> anyhow::Result<Vec<String>> {
    let items = client.listed_sessions(None).await?;
    Ok(items.iter().map(|item| item["resource"].as_str().unwrap_or_default().to_owned()).collect())
}

/// The pages right under `table`'s root page in the store at `path` (its leaves, in a store this
/// small), and the page size; none when the table fits its root page.
fn leaves_of(path: &Path, table: &str) -> anyhow::Result<(usize, Vec<u32>)> {
    let conn = rusqlite::Connection::open(path)?;
    let root: u32 = conn.query_row("SELECT rootpage FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0))?;
    let size: usize = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    drop(conn);
    let bytes = std::fs::read(path)?;
    let start = (root as usize - 1) * size;
    let page = &bytes[start..start + size];
    if page[0] != 0x05 {
        return Ok((size, Vec::new()));
    }
    let cells = usize::from(u16::from_be_bytes([page[3], page[4]]));
    let word = |at: usize| u32::from_be_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]);
    let mut children: Vec<u32> =
        (0..cells).map(|c| word(usize::from(u16::from_be_bytes([page[12 + 2 * c], page[13 + 2 * c]])))).collect();
    children.push(word(8));
    Ok((size, children))
}

/// Overwrites page `page` of the file at `path` with garbage.
fn overwrite_page(path: &Path, size: usize, page: u32) -> anyhow::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.seek(SeekFrom::Start((u64::from(page) - 1) * size as u64))?;
    file.write_all(&vec![0x5a; size])?;
    file.sync_all()?;
    Ok(())
}

/// The files in `dir` whose names start with `prefix`.
fn files_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)));
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_is_kept_aside_and_what_reads_comes_back() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-damaged-").tempdir()?;
    let data = home.path().join("data").join("ahpd");
    let store = data.join("sessions.db");
    // Per chat, the turns every client saw complete: (turn id, text).
    let mut kept: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let mut sessions = Vec::new();
    {
        let mut daemon = Daemon::start_in(home.path(), quick_echo()).await?;
        let mut client = TestClient::connect(&daemon.url, "before").await?;
        for s in 0..16 {
            let (session, chat) = client.create_session("echo", None).await?;
            sessions.push(session);
            for t in 0..3 {
                let text = format!("session {s} turn {t} {}", "words ".repeat(250));
                let turn = client.turn(&chat, &text).await?;
                kept.entry(chat.clone()).or_default().push((turn.id.clone(), turn_text(&turn)));
            }
        }
        daemon.terminate().await?;
    }
    let sound = run_ahpd(home.path(), &["store", "check"]).await?;
    assert_eq!(sound.code, 0, "a sound store checks: {sound:?}");
    assert!(sound.stdout.contains("is sound: 16 sessions, 16 chats, 48 turns"), "{}", sound.stdout);

    // One page of sessions overwritten near the start of its table (early sessions lost), one of
    // turns near the end (some turns of late sessions lost, their sessions kept).
    let (size, session_pages) = leaves_of(&store, "sessions")?;
    let (_, turn_pages) = leaves_of(&store, "turns")?;
    assert!(session_pages.len() > 1 && turn_pages.len() > 2, "the tables span pages: {session_pages:?} {turn_pages:?}");
    overwrite_page(&store, size, session_pages[1])?;
    overwrite_page(&store, size, turn_pages[turn_pages.len() - 2])?;
    let original = std::fs::read(&store)?;

    let damaged = run_ahpd(home.path(), &["store", "check"]).await?;
    assert_eq!(damaged.code, 1, "a damaged store fails its check: {damaged:?}");
    assert!(damaged.stdout.contains("is damaged"), "{}", damaged.stdout);

    let daemon = Daemon::start_in(home.path(), quick_echo()).await?;
    let said = daemon.wait_for_log("The session store was damaged", tests::PATIENCE).await?;
    let announced = daemon.wait_for_said("store recovered:", tests::PATIENCE).await?;
    assert!(announced.contains("came back into a fresh store"), "the announcement says it: {announced}");
    let mut aside = files_named(&data, "sessions.db.damaged-");
    aside.retain(|p| !p.to_string_lossy().ends_with("-wal") && !p.to_string_lossy().ends_with("-shm"));
    assert_eq!(aside.len(), 1, "the damaged file is kept aside once: {aside:?}");
    assert!(said.contains(&aside[0].display().to_string()), "stderr names where it is: {said}");
    assert_eq!(std::fs::read(&aside[0])?, original, "the damaged file is kept as it was");

    let status = daemon.status().await?;
    let recovered = &status["storeRecovered"];
    assert_eq!(recovered["damagedFile"].as_str(), Some(aside[0].display().to_string().as_str()), "{status}");
    let text = run_ahpd(home.path(), &["status"]).await?;
    eprintln!("stderr at start: {said}\nahpd status:\n{}", text.stdout);
    assert!(text.stdout.contains("store recovered at"), "{}", text.stdout);

    let mut client = TestClient::connect(&daemon.url, "after").await?;
    let back = listed(&client).await?;
    let sessions_back = recovered["sessions"].as_u64().unwrap_or(0);
    assert_eq!(back.len() as u64, sessions_back, "status counts the sessions that list");
    assert!(sessions_back > 0 && sessions_back < 16, "some sessions came back, not all: {recovered}");
    assert!(said.contains(&format!("{sessions_back} sessions")), "stderr counts them: {said}");
    let mut turns_back = 0;
    let mut a_chat = None;
    for session in &back {
        assert!(sessions.contains(session), "only sessions that were made come back");
        client.subscribe(session).await?;
        let chats: Vec<String> =
            client.mirror.session(session).expect("session opens").chats.iter().map(|c| c.resource.clone()).collect();
        assert_eq!(chats.len(), 1, "{session} keeps its chat");
        for chat in chats {
            client.subscribe(&chat).await?;
            let state = client.mirror.chat(&chat).expect("the chat opens").clone();
            let before = &kept[&chat];
            let mut was = before.iter();
            for turn in &state.turns {
                let found = was.find(|(id, _)| *id == turn.id);
                let (_, text) = found.unwrap_or_else(|| panic!("{chat}: turn {} out of order or never made", turn.id));
                assert_eq!(&turn_text(turn), text, "{chat}: turn {} kept whole", turn.id);
            }
            turns_back += state.turns.len() as u64;
            a_chat = Some(chat);
        }
    }
    assert_eq!(turns_back, recovered["turns"].as_u64().unwrap_or(0), "status counts the turns that open");
    let total: u64 = back.len() as u64 * 3;
    assert!(turns_back < total, "the overwritten page of turns is lost: {turns_back} of {total}");
    assert!(said.contains(&format!("{turns_back} turns")), "stderr counts them: {said}");

    // The fresh store takes writes; the live store checks sound and the damaged one does not.
    let chat = a_chat.expect("a chat came back");
    let turn = client.turn(&chat, "after the recovery").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete);
    assert_eq!(run_ahpd(home.path(), &["store", "check"]).await?.code, 0);
    let aside_text = aside[0].display().to_string();
    assert_eq!(run_ahpd(home.path(), &["store", "check", &aside_text]).await?.code, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_what_it_held_and_the_daemon_keeps_its_newest() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-backup-").tempdir()?;
    let backups = home.path().join("data").join("ahpd").join("backups");
    let mut config = quick_echo().config.unwrap_or_default();
    config["storeBackups"] = json!(2);
    config["storeBackupIntervalMs"] = json!(200);
    let options = DaemonOptions::with_config(config);
    let mut daemon = Daemon::start_in(home.path(), options.clone()).await?;
    let mut client = TestClient::connect(&daemon.url, "backup").await?;
    let (kept_session, kept_chat) = client.create_session("echo", None).await?;
    let mut texts = Vec::new();
    for t in 0..2 {
        texts.push(turn_text(&client.turn(&kept_chat, &format!("kept turn {t}")).await?));
    }

    let backup = run_ahpd(home.path(), &["store", "backup"]).await?;
    assert_eq!(backup.code, 0, "{backup:?}");
    let taken = backup.stdout.trim().to_owned();
    assert!(taken.starts_with(&backups.display().to_string()), "a backup goes into backups/: {taken}");
    // One kept apart from the daemon's, which makes newer ones and lets the older go.
    let file = home.path().join("kept.db").display().to_string();
    let backup = run_ahpd(home.path(), &["store", "backup", "--to", &file]).await?;
    assert_eq!(backup.code, 0, "{backup:?}");
    assert_eq!(backup.stdout.trim(), file);
    let checked = run_ahpd(home.path(), &["store", "check", &file]).await?;
    assert!(checked.stdout.contains("is sound: 1 sessions, 1 chats, 2 turns"), "{checked:?}");
    let (after_session, _) = client.create_session("echo", None).await?;

    // The daemon backs up as it runs and keeps the newest two, one holding both sessions.
    let mut newest_holds_both = false;
    for _ in 0..1000 {
        let found = files_named(&backups, "sessions-");
        assert!(found.len() <= 2, "no more than storeBackups are kept: {found:?}");
        if let Some(newest) = found.last() {
            let checked = run_ahpd(home.path(), &["store", "check", "--json", &newest.display().to_string()]).await?;
            let answer: Value = serde_json::from_str(&checked.stdout).unwrap_or_default();
            if answer["sessions"] == json!(2) {
                newest_holds_both = true;
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(newest_holds_both, "a backup taken as the daemon ran holds the second session");

    let refused = run_ahpd(home.path(), &["store", "restore", &file]).await?;
    assert_eq!(refused.code, 1, "restore is refused while the daemon runs: {refused:?}");
    assert!(refused.stderr.contains("stop it first"), "{}", refused.stderr);
    drop(client);
    daemon.terminate().await?;

    let listing = run_ahpd(home.path(), &["store", "restore"]).await?;
    assert_eq!(listing.code, 2, "restore with no file lists the backups: {listing:?}");
    assert!(listing.stdout.contains("sessions-"), "{}", listing.stdout);
    let restored = run_ahpd(home.path(), &["store", "restore", &file]).await?;
    assert_eq!(restored.code, 0, "{restored:?}");
    assert!(restored.stdout.contains("Restored") && restored.stdout.contains("1 sessions"), "{}", restored.stdout);
    assert!(restored.stdout.contains("sessions.db.replaced-"), "the replaced store is kept: {}", restored.stdout);

    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut client = TestClient::connect(&daemon.url, "restored").await?;
    let back = listed(&client).await?;
    assert_eq!(back, vec![kept_session.clone()], "the backup's sessions, and not {after_session}");
    client.subscribe(&kept_session).await?;
    client.subscribe(&kept_chat).await?;
    let turns: Vec<String> =
        client.mirror.chat(&kept_chat).expect("the chat opens").turns.iter().map(turn_text).collect();
    assert_eq!(turns, texts, "its turns come back whole");
    let turn = client.turn(&kept_chat, "after the restore").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete);
    Ok(())
}

#[tokio::test]
async fn the_store_verbs_say_how_to_use_them() -> anyhow::Result<()> {
    let home = tests::Home::new()?;
    for verb in ["check", "backup", "restore"] {
        let help = home.expect(0, &["store", verb, "--help"]).await?;
        assert!(help.stdout.contains(&format!("Usage: ahpd store {verb}")), "{verb}: {}", help.stdout);
        assert!(help.stdout.contains("Exit codes:"), "{verb}: {}", help.stdout);
    }
    assert!(home.expect(0, &["--help"]).await?.stdout.lines().any(|l| l.trim_start().starts_with("store")));
    let missing = home.expect(2, &["store", "check", "/nonexistent/sessions.db"]).await?;
    assert!(missing.stderr.contains("There is no store at /nonexistent/sessions.db"), "{}", missing.stderr);
    let none = home.expect(1, &["store", "backup"]).await?;
    assert!(none.stderr.contains("There is no session store"), "{}", none.stderr);
    home.expect(2, &["store", "restore", "no-such-backup.db"]).await?;
    home.expect(2, &["store", "mend"]).await?;
    Ok(())
}

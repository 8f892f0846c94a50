//! A full disk: nothing is told "done" that is not kept. With the store out of room a turn ends as
//! failed with the sentence that says so and no client is told it completed; new turns are
//! refused with the same words; every client sees the notice on the root state and `ahpd status`
//! says it; once room comes back the daemon writes again by itself and the next turn completes;
//! after `kill -9` and a restart every turn reported complete is there, counted (a restart while
//! the store is still full too). The web window shows the notice while it lasts.
//!
//! The store's own page limit (`AHPD_TEST_STORE_MAX_PAGES`, SQLite's `max_page_count`) gives its
//! SQLITE_FULL for any user, with filler rows the daemon writes on a test's word taking the room
//! left (as another program's files fill a disk; no other process may open the store while the
//! daemon runs); a tmpfs of 3 MB filled by a file is the second, real check, run where the test may
//! mount one (as root).

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::state::{PendingMessageKind, ResponsePart, TurnState};
use serde_json::json;
use tests::client::now_iso;
use tests::store::{assert_failed_not_completed, fill_store, full_sentence, store_of, told_notice, until_notice};
use tests::{turn_text, user_message, Daemon, DaemonOptions, TestClient};

/// The store's page limit in the page-limit tests: 8 MiB of 4 KiB pages.
const MAX_PAGES: u32 = 2048;

fn echo(env: Vec<(String, String)>) -> DaemonOptions {
    let mut options = DaemonOptions::with_config(json!({ "agents": { "echo": tests::agents::echo_paced(0) } }));
    options.env = env;
    options
}

/// A message of about 100 KB, told apart by `n`.
fn big(n: usize) -> String {
    format!("turn {n} ") + &"lorem ipsum dolor sit amet ".repeat(4000)
}

/// A client's new turn with `text`: its id, and the host's answer to it (its refusal reason, or
/// "(accepted)").
async fn start_turn(client: &mut TestClient, chat: &str, text: &str) -> anyhow::Result<(String, String)> {
    let turn_id = uuid::Uuid::new_v4().to_string();
    let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn_id.clone(),
        started_at: now_iso(),
        message: user_message(text),
        queued_message_id: None,
        meta: None,
    });
    let seq = client.dispatch(chat, action).await?;
    Ok((turn_id, client.refusal(seq).await?))
}

/// A client's new turn, answered by its refusal reason.
async fn refusal_of_a_new_turn(client: &mut TestClient, chat: &str) -> anyhow::Result<String> {
    Ok(start_turn(client, chat, "one more").await?.1)
}

/// The turns a chat holds after a restart, against the ones reported complete.
async fn assert_kept_after_restart(
    home: &Path,
    options: DaemonOptions,
    chat: &str,
    completed: &[(String, String)],
    failed: Option<&str>,
    sentence: &str,
) -> anyhow::Result<()> {
    let daemon = Daemon::start_in(home, options).await?;
    let mut after = TestClient::connect(&daemon.url, "after").await?;
    after.subscribe(chat).await?;
    let state = after.mirror.chat(chat).expect("the chat opens after the restart").clone();
    let complete: Vec<(String, String)> =
        state.turns.iter().filter(|t| t.state == TurnState::Complete).map(|t| (t.id.clone(), turn_text(t))).collect();
    assert_eq!(complete.len(), completed.len(), "every turn reported complete is there, and only those");
    assert_eq!(complete, completed, "each whole, in order");
    // The failed turn was kept too once room came back, saying why it failed.
    if let Some(failed) = failed {
        let kept_failed =
            state.turns.iter().find(|t| t.id == failed).expect("the failed turn was written once room came back");
        let Some(ResponsePart::Error(e)) = kept_failed.response_parts.last() else { panic!("no error part") };
        assert_eq!(e.error.message, sentence);
    }
    eprintln!("after kill -9 and a restart: {} turns complete, as reported, and any failed one", complete.len());
    after.check_against_snapshot(chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_out_of_room_fails_the_turn_refuses_new_ones_and_writes_again_by_itself() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-full-").tempdir()?;
    let store = store_of(home.path());
    let sentence = full_sentence(&store);
    let options = echo(vec![("AHPD_TEST_STORE_MAX_PAGES".into(), MAX_PAGES.to_string())]);
    let mut daemon = Daemon::start_in(home.path(), options.clone()).await?;
    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let mut watcher = TestClient::connect(&daemon.url, "watcher").await?;
    let (session, chat) = writer.create_session("echo", None).await?;
    watcher.subscribe(&chat).await?;
    until_notice(&mut watcher, "").await?;

    let mut completed = Vec::new();
    for n in 0..2 {
        let turn = writer.turn(&chat, &big(n)).await?;
        assert_eq!(turn.state, TurnState::Complete);
        completed.push((turn.id.clone(), turn_text(&turn)));
    }

    // The disk fills: the next turn cannot be kept, and ends as failed, saying so.
    fill_store(&writer, true).await?;
    let failed = writer.send(&chat, &big(2)).await?;
    for client in [&mut writer, &mut watcher] {
        let turn = client.finished(&chat, &failed).await?;
        assert_failed_not_completed(client, &turn, &sentence);
        until_notice(client, &sentence).await?;
    }
    let status = daemon.status().await?;
    assert_eq!(status["storeCannotWrite"], json!(sentence), "ahpd status says it: {status}");
    let said = tests::daemon::run_ahpd(home.path(), &["status"]).await?;
    assert!(said.stdout.contains(&sentence), "ahpd status says it:\n{}", said.stdout);

    // New turns are refused with the same words while it stays full: a message queued for one,
    // a new session, and `ahpd send`'s, too.
    assert_eq!(refusal_of_a_new_turn(&mut writer, &chat).await?, sentence);
    let queued = writer.pending(&chat, PendingMessageKind::Queued, "q1", "for later").await?;
    assert_eq!(writer.refusal(queued).await?, sentence);
    let session_refused = writer.create_session("echo", None).await.expect_err("no new session while full");
    assert!(session_refused.to_string().contains(&sentence), "{session_refused}");
    let sent = tests::daemon::run_ahpd(home.path(), &["send", "--session", &session, "more"]).await?;
    assert_eq!(sent.code, 1, "ahpd send fails: {}", sent.stderr);
    assert!(sent.stderr.contains(&sentence), "ahpd send says why: {}", sent.stderr);

    // Room comes back: the daemon finds it by itself, and every client is told.
    fill_store(&writer, false).await?;
    until_notice(&mut watcher, "").await?;
    until_notice(&mut writer, "").await?;
    let status = daemon.status().await?;
    assert!(status.get("storeCannotWrite").is_none(), "ahpd status no longer says it: {status}");
    let turn = writer.turn(&chat, &big(3)).await?;
    assert_eq!(turn.state, TurnState::Complete, "the next turn completes");
    completed.push((turn.id.clone(), turn_text(&turn)));
    writer.check_against_snapshot(&chat).await?;

    daemon.kill9().await?;
    assert_kept_after_restart(home.path(), options, &chat, &completed, Some(&failed), &sentence).await
}

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// A tmpfs of `size` at a fresh folder, or why there can be none here.
    fn mount(size: &str) -> Result<Self, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("the test does not run as root, so it cannot mount a tmpfs".into());
        }
        let dir = tempfile::Builder::new().prefix("ahpd-tmpfs-").tempdir().map_err(|e| e.to_string())?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount could not run: {e}"))?;
        if !mounted.status.success() {
            return Err(format!("mount failed: {}", String::from_utf8_lossy(&mounted.stderr).trim()));
        }
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Fills what room is left with a file; answers it, to remove when room should come back.
    fn fill(&self) -> anyhow::Result<PathBuf> {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler)?;
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.write_all(&chunk[..512]);
        let _ = file.sync_all();
        Ok(filler)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tmpfs_fails_the_turn_and_the_daemon_writes_again_when_room_returns() -> anyhow::Result<()> {
    let disk = match Tmpfs::mount("3m") {
        Ok(disk) => disk,
        Err(why) => {
            tests::skip::skipping(&why);
            return Ok(());
        }
    };
    let home = disk.path().to_owned();
    let store = store_of(&home);
    let sentence = full_sentence(&store);
    let options = echo(Vec::new());
    let mut daemon = Daemon::start_in(&home, options.clone()).await?;
    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let mut watcher = TestClient::connect(&daemon.url, "watcher").await?;
    let (_session, chat) = writer.create_session("echo", None).await?;
    watcher.subscribe(&chat).await?;
    let mut completed = Vec::new();
    let turn = writer.turn(&chat, &big(0)).await?;
    assert_eq!(turn.state, TurnState::Complete);
    completed.push((turn.id.clone(), turn_text(&turn)));

    // The disk fills. Turns go on while the store's log has room it took before; then the full
    // disk is met. Either a turn's ending meets it (the turn fails, saying so), or another write
    // meets it first (the last turn's progress saved as it ran, while its ending still found room
    // in the log): the store's trouble is then known before the next turn, which is refused with
    // the same words. Which one comes first is the kernel's and SQLite's timing, not ahpd's: the
    // test waited for a refused turn to end, and failed 1 run in 10.
    let filler = disk.fill()?;
    let mut failed = None;
    let mut refused = false;
    for n in 1..40 {
        let (id, answer) = start_turn(&mut writer, &chat, &big(n)).await?;
        if answer != "(accepted)" {
            assert_eq!(answer, sentence, "a turn refused while the disk is full says why");
            refused = true;
            break;
        }
        let turn = writer.finished(&chat, &id).await?;
        if turn.state == TurnState::Complete {
            completed.push((turn.id.clone(), turn_text(&turn)));
            continue;
        }
        assert_failed_not_completed(&writer, &turn, &sentence);
        failed = Some(id);
        break;
    }
    assert!(failed.is_some() || refused, "the full disk was met within 40 turns");
    if let Some(failed) = &failed {
        let turn = watcher.finished(&chat, failed).await?;
        assert_failed_not_completed(&watcher, &turn, &sentence);
    }
    // Every client was told. (Whether a new turn is refused now depends on the room SQLite finds
    // in its log: the page-limit test checks the refusal and `ahpd status` where that is fixed.)
    told_notice(&mut watcher, &sentence).await?;
    told_notice(&mut writer, &sentence).await?;
    eprintln!(
        "{} turns completed on the full disk before one could not be kept ({})",
        completed.len() - 1,
        if refused { "the next was refused" } else { "it failed" }
    );

    std::fs::remove_file(filler)?;
    until_notice(&mut watcher, "").await?;
    until_notice(&mut writer, "").await?;
    let turn = writer.turn(&chat, "after room came back").await?;
    assert_eq!(turn.state, TurnState::Complete, "the next turn completes");
    completed.push((turn.id.clone(), turn_text(&turn)));

    daemon.kill9().await?;
    assert_kept_after_restart(&home, options, &chat, &completed, failed.as_deref(), &sentence).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_notice_while_the_store_cannot_write_and_clears_it_after() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-full-page-").tempdir()?;
    let store = store_of(home.path());
    let sentence = full_sentence(&store);
    let options = echo(vec![("AHPD_TEST_STORE_MAX_PAGES".into(), MAX_PAGES.to_string())]);
    let daemon = Daemon::start_in(home.path(), options).await?;
    let web = daemon.wait_for_said("web: ", std::time::Duration::from_secs(30)).await?;
    let web = web.trim_start_matches("web: ").to_owned();
    let mut browser = tests::browser::Browser::launch().await?;
    browser.open(&web, 1280, 600).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    let notice = "document.querySelector('#store-notice')";
    assert_eq!(browser.eval(&format!("{notice}.hidden")).await?, json!(true), "no notice while the store writes");

    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let (_session, chat) = writer.create_session("echo", None).await?;
    fill_store(&writer, true).await?;
    let failed = writer.send(&chat, &big(0)).await?;
    writer.finished(&chat, &failed).await?;
    let shown = browser.wait_for(&format!("!{notice}.hidden && {notice}.textContent")).await?;
    assert_eq!(shown, json!(sentence), "the page says what the root state says");
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&shots)?;
    browser.screenshot(&shots.join("store-cannot-write.png")).await?;

    fill_store(&writer, false).await?;
    browser.wait_for(&format!("{notice}.hidden")).await?;
    browser.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_while_the_store_is_full_keeps_every_turn_reported_complete() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-full-kill-").tempdir()?;
    let store = store_of(home.path());
    let sentence = full_sentence(&store);
    let options = echo(vec![("AHPD_TEST_STORE_MAX_PAGES".into(), MAX_PAGES.to_string())]);
    let mut daemon = Daemon::start_in(home.path(), options.clone()).await?;
    let mut writer = TestClient::connect(&daemon.url, "writer").await?;
    let (_session, chat) = writer.create_session("echo", None).await?;
    let mut completed = Vec::new();
    for n in 0..3 {
        let turn = writer.turn(&chat, &big(n)).await?;
        completed.push((turn.id.clone(), turn_text(&turn)));
    }
    fill_store(&writer, true).await?;
    let failed = writer.send(&chat, &big(3)).await?;
    let turn = writer.finished(&chat, &failed).await?;
    assert_failed_not_completed(&writer, &turn, &sentence);
    daemon.kill9().await?;

    // Still full: it starts, and holds every turn reported complete; the failed one was never
    // told kept, and is not there.
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut after = TestClient::connect(&daemon.url, "after").await?;
    after.subscribe(&chat).await?;
    let state = after.mirror.chat(&chat).expect("the chat opens").clone();
    let kept: Vec<(String, String)> = state.turns.iter().map(|t| (t.id.clone(), turn_text(t))).collect();
    assert_eq!(kept, completed, "the {} turns reported complete, and nothing else", completed.len());
    let turn = after.turn(&chat, &big(4)).await?;
    assert_failed_not_completed(&after, &turn, &sentence);

    fill_store(&after, false).await?;
    until_notice(&mut after, "").await?;
    let turn = after.turn(&chat, "room again").await?;
    assert_eq!(turn.state, TurnState::Complete);
    after.check_against_snapshot(&chat).await?;
    Ok(())
}

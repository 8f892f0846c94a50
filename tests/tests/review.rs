//! The review loop in the web window (issue 28), in a real browser against a real daemon on a real
//! Git repository, checked with git, the official client and a real MCP client: two attempts at
//! one file each show their diff in the Changes view (the second's in the first's place); merging the first lands it in the base,
//! merging the second is refused naming the conflicting file and the base stays clean; a comment
//! written on a diff line is what the agent's own `listComments` answers through `/ahp-mcp`, and
//! its reply shows under the comment in the page (and the view follows live, per turn and two
//! turns compared, and again after `ahpd restart`); a 5 000-line diff opens with no long task;
//! long unchanged runs fold and open;
//! `ahpd changes` does the same from a terminal (`--diff`, `--comment`, `--comments`); and the
//! page's diff module is checked under Node against a dynamic-programming LCS.
//! Screenshots go to target/window-shots/.

use std::path::{Path, PathBuf};

use ahp_types::state::{SessionLifecycle, SnapshotState};
use anyhow::{anyhow, ensure, Context};
use serde_json::{json, Value};
use tests::browser::{announced_page, js_str, Browser};
use tests::daemon::free_port;
use tests::git::git;
use tests::mcp::call_tools;
use tests::mcp::endpoint;
use tests::{Daemon, DaemonOptions, Home, TestClient};

/// A repository on `main` with one commit holding `files`.
fn repo(files: &[(&str, String)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("ahpd-review-").tempdir().expect("temp dir");
    let path = dir.path().join("project");
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    git(&path, &["init", "-q", "-b", "main"]);
    for (name, text) in files {
        std::fs::write(path.join(name), text).expect("write");
        git(&path, &["add", name]);
    }
    git(&path, &["commit", "-q", "-m", "first"]);
    (dir, path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{}: {e}>", path.display()))
}

/// The notes agent (it says its tools endpoint when asked), worktrees under `root`.
fn options(root: &Path) -> DaemonOptions {
    DaemonOptions::with_config(json!({
        "agents": { "notes": tests::agents::notes_revealing_endpoint() },
        "worktreesRoot": root,
    }))
}

/// A notes session in a worktree of its own cut from `folder`, writing without asking; answers
/// (session, chat, its worktree).
async fn isolated(c: &mut TestClient, folder: &Path) -> anyhow::Result<(String, String, PathBuf)> {
    notes_session(c, folder, json!({ "ask": "never", "isolation": "worktree" })).await
}

/// A notes session in `folder` with `config`; answers (session, chat, the folder it works in).
async fn notes_session(c: &mut TestClient, folder: &Path, config: Value) -> anyhow::Result<(String, String, PathBuf)> {
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    let params = json!({
        "channel": session, "provider": "notes",
        "workingDirectories": [format!("file://{}", folder.display())],
        "config": config,
    });
    c.request("createSession", params).await.map_err(|e| anyhow!("createSession: {e}"))?;
    c.subscribe(&session).await?;
    let s = session.clone();
    c.until("the session to be ready", move |m| {
        m.session(&s).is_some_and(|st| st.lifecycle == SessionLifecycle::Ready && st.default_chat.is_some())
    })
    .await?;
    let state = c.mirror.session(&session).ok_or_else(|| anyhow!("no session"))?;
    let chat = state.default_chat.clone().ok_or_else(|| anyhow!("no chat"))?;
    let dir = state.working_directories.clone().unwrap_or_default().first().cloned().unwrap_or_default();
    c.subscribe(&chat).await?;
    Ok((session, chat, PathBuf::from(dir.trim_start_matches("file://"))))
}

async fn page(daemon: &Daemon, width: u32, height: u32) -> anyhow::Result<Browser> {
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(daemon).await?, width, height).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    Ok(browser)
}

fn view(session: &str) -> String {
    format!(".changes-pane[data-session=\"{session}\"]")
}

/// The texts of the diff's rows of one kind (`add`, `del`, `same`) in a session's view.
async fn rows(browser: &mut Browser, session: &str, kind: &str) -> anyhow::Result<Vec<String>> {
    let js = format!(
        "[...document.querySelectorAll({})].map((e) => e.textContent)",
        js_str(&format!("{} .dl.{kind} .code", view(session)))
    );
    Ok(serde_json::from_value(browser.eval(&js).await?)?)
}

/// The host's words in the page's refusal (before the line naming the files).
fn refused_words(shown: &str) -> String {
    shown.split("The file it names").next().unwrap_or(shown).to_owned()
}

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Opens a session's Changes view from the session list, and waits for its file to show.
async fn open_from_list(browser: &mut Browser, session: &str, path: &str) -> anyhow::Result<()> {
    let button = format!("li.session[data-session=\"{session}\"] button[data-action=changes]");
    browser.click(&button).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({}) && document.querySelector({})?.dataset.drawn",
            js_str(&format!("{} .files li.file[data-path=\"{path}\"]", view(session))),
            js_str(&format!("{} .diff-body", view(session)))
        ))
        .await?;
    Ok(())
}

/// Checks a session's Changes view: `a.txt`'s line `one` replaced by `text`, the file modified, and
/// what each operation does said beside it.
async fn show_the_diff(browser: &mut Browser, session: &str, text: &str) -> anyhow::Result<()> {
    assert_eq!(rows(browser, session, "del").await?, ["one"], "the line taken out");
    assert_eq!(rows(browser, session, "add").await?, [text], "the line put in");
    let status = browser
        .eval(&format!("document.querySelector({})?.dataset.status", js_str(&format!("{} li.file", view(session)))))
        .await?;
    assert_eq!(status, json!("modified"));
    let about = browser
        .eval(&format!("document.querySelector({}).textContent", js_str(&format!("{} .ops-about", view(session)))))
        .await?;
    let about = about.as_str().unwrap_or_default();
    ensure!(about.contains("Merge into main") && about.contains("Discard these changes"), "what each does: {about}");
    Ok(())
}

#[tokio::test]
async fn two_attempts_show_their_diffs_the_first_merges_and_the_second_is_refused_naming_the_file() -> anyhow::Result<()>
{
    let (_dir, base) = repo(&[("a.txt", "one\n".into())]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (first, first_chat, w1) = isolated(&mut c, &base).await?;
    let (second, second_chat, w2) = isolated(&mut c, &base).await?;
    c.turn(&first_chat, "edit a.txt from the first").await?;
    c.turn(&second_chat, "edit a.txt from the second").await?;
    assert_eq!(read(&w1.join("a.txt")), "from the first\n");
    assert_eq!(read(&w2.join("a.txt")), "from the second\n");

    let mut browser = page(&daemon, 1400, 860).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({}) && document.querySelector({})",
            js_str(&format!("li.session[data-session=\"{first}\"] button[data-action=changes]")),
            js_str(&format!("li.session[data-session=\"{second}\"] button[data-action=changes]"))
        ))
        .await?;
    // The first attempt's view: its diff, what each operation does, its branch; then its merge.
    open_from_list(&mut browser, &first, "a.txt").await?;
    show_the_diff(&mut browser, &first, "from the first").await?;
    // The branch and its base, as the host names them.
    let scope = browser
        .eval(&format!(
            "document.querySelector({}).selectedOptions[0].textContent",
            js_str(&format!("{} select.scope", view(&first)))
        ))
        .await?;
    ensure!(scope.as_str().is_some_and(|s| s.starts_with("ahpd/") && s.ends_with("(against main)")), "{scope}");
    let shots = shots()?;
    browser.screenshot(&shots.join("review-first-diff.png")).await?;

    browser.click(&format!("{} button[data-operation=merge]", view(&first))).await?;
    let landed = browser
        .wait_for(&format!("document.querySelector({})?.textContent", js_str(&format!("{} .op-done", view(&first)))))
        .await?;
    let landed = landed.as_str().unwrap_or_default().to_owned();
    ensure!(landed.starts_with("Merged ") && landed.contains(&format!("into main in {}", base.display())), "{landed}");
    assert_eq!(read(&base.join("a.txt")), "from the first\n", "the first merge lands in the base checkout");
    assert_eq!(git(&base, &["status", "--porcelain"]), "", "the base is clean");
    let head = git(&base, &["rev-parse", "HEAD"]);

    // The second's view takes the first's place (the window has one Changes view).
    open_from_list(&mut browser, &second, "a.txt").await?;
    let views = browser.eval("[...document.querySelectorAll('.changes-pane')].map((v) => v.dataset.session)").await?;
    assert_eq!(views, json!([second]), "one Changes view, the second's");
    show_the_diff(&mut browser, &second, "from the second").await?;

    browser.click(&format!("{} button[data-operation=merge]", view(&second))).await?;
    let refused = browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent",
            js_str(&format!("{} .op-refused", view(&second)))
        ))
        .await?;
    let refused = refused.as_str().unwrap_or_default().to_owned();
    ensure!(refused.contains("would conflict in a.txt") && refused.contains("nothing was changed"), "{refused}");
    let named = browser
        .eval(&format!(
            "[...document.querySelectorAll({})].map((e) => e.textContent)",
            js_str(&format!("{} .op-files code", view(&second)))
        ))
        .await?;
    assert_eq!(named, json!(["a.txt"]), "the page names the conflicting file");
    let marked = browser
        .eval(&format!(
            "document.querySelector({}) !== null",
            js_str(&format!("{} li.file.conflict[data-path=\"a.txt\"]", view(&second)))
        ))
        .await?;
    assert_eq!(marked, json!(true), "and marks it in the list");
    assert_eq!(read(&base.join("a.txt")), "from the first\n", "the base is as the first merge left it");
    assert_eq!(git(&base, &["rev-parse", "HEAD"]), head, "the refused merge moved nothing");
    assert_eq!(git(&base, &["status", "--porcelain"]), "", "the base stays clean");
    assert_eq!(read(&w2.join("a.txt")), "from the second\n", "the second attempt is kept");
    browser.screenshot(&shots.join("review-refused-merge.png")).await?;
    // The refusal the page shows is on the changeset for every client (VS Code's view of it).
    let uri = browser.eval(&format!("document.querySelector({}).dataset.changes", js_str(&view(&second)))).await?;
    let uri = uri.as_str().unwrap_or_default().to_owned();
    c.subscribe(&uri).await?;
    let merge = c
        .mirror
        .changeset(&uri)
        .and_then(|s| s.operations.clone())
        .unwrap_or_default()
        .into_iter()
        .find(|o| o.id == "merge")
        .context("the merge operation")?;
    assert_eq!(merge.status, ahp_types::state::ChangesetOperationStatus::Error);
    ensure!(merge.error.is_some_and(|e| e.message == refused_words(&refused)), "the same words");
    c.check_against_snapshot(&uri).await?;

    // Discard asks first, in the host's words; keeping leaves everything as it was.
    browser.click(&format!("{} button[data-operation=discard]", view(&second))).await?;
    let asked = browser.wait_for("document.querySelector('dialog.ask[open] p')?.textContent").await?;
    ensure!(asked.as_str().is_some_and(|q| q.contains("cannot be undone")), "{asked}");
    browser.click("dialog.ask[open] button:not([data-action])").await?;
    assert_eq!(read(&w2.join("a.txt")), "from the second\n", "nothing discarded");
    let observed = browser.observations().await?;
    ensure!(observed["errors"].as_array().is_some_and(Vec::is_empty), "page errors: {}", observed["errors"]);
    browser.close().await
}

#[tokio::test]
async fn a_comment_written_in_the_page_is_what_the_agents_list_comments_answers_and_its_reply_shows_under_it(
) -> anyhow::Result<()> {
    let (_dir, base) = repo(&[("a.txt", "one\ntwo\nthree\n".into())]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat, worktree) = isolated(&mut c, &base).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    c.turn(&chat, "edit a.txt from the agent").await?;
    let title = ahp_types::actions::SessionTitleChangedAction { title: "Say it better".into() };
    c.dispatch(&session, ahp_types::actions::StateAction::SessionTitleChanged(title)).await?;
    let channel = format!("{session}/annotations");
    c.subscribe(&channel).await?;

    let mut browser = page(&daemon, 1400, 860).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    // From the chat: its "+N −M in K files" line opens the view.
    browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(&session))).await?;
    browser.click(&format!(".pane[data-session=\"{session}\"] .pane-meta button[data-action=changes]")).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})?.dataset.drawn",
            js_str(&format!("{} .diff-body", view(&session)))
        ))
        .await?;
    browser.click(&format!("{} .dl[data-line=\"1\"] .ln.new", view(&session))).await?;
    browser.type_into(&format!("{} .comment-box textarea", view(&session)), "say which one").await?;
    browser.click(&format!("{} button[data-action=comment]", view(&session))).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent === 'say which one'",
            js_str(&format!("{} .thread .entry.user .what", view(&session)))
        ))
        .await?;

    // The agent's own tool sees it, anchored where it was written.
    let said = call_tools(&url, &token, &[("listComments", json!({}))]).await?;
    let listed: Value = serde_json::from_str(said[0]["text"].as_str().unwrap_or("{}")).context("listComments")?;
    let comments = listed["comments"].as_array().cloned().unwrap_or_default();
    ensure!(comments.len() == 1, "{listed}");
    let comment = &comments[0];
    assert_eq!(comment["text"], "say which one");
    assert_eq!(comment["author"], "user");
    assert_eq!(comment["kind"], "user");
    assert_eq!(comment["resourceUri"], json!(format!("file://{}", worktree.join("a.txt").display())));
    assert_eq!(comment["range"]["startLineNumber"], 1);
    assert_eq!(comment["range"]["endLineNumber"], 1);
    let id = comment["id"].as_str().unwrap_or_default().to_owned();

    let replied =
        call_tools(&url, &token, &[("replyToComment", json!({ "commentId": id, "text": "the first one, now" }))])
            .await?;
    assert_eq!(replied[0]["isError"], false, "{replied:?}");
    browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent === 'the first one, now'",
            js_str(&format!("{} .thread[data-comment=\"{id}\"] .entry.agent .what", view(&session)))
        ))
        .await?;
    browser.screenshot(&shots()?.join("review-comment-and-reply.png")).await?;
    // Side by side, the thread stays under its line.
    let body = js_str(&format!("{} .diff-body", view(&session)));
    for mode in ["split", "unified"] {
        browser.click(&format!("{} button[data-mode={mode}]", view(&session))).await?;
        browser
            .wait_for(&format!(
                "document.querySelector({body}).classList.contains('{mode}') && document.querySelector({body}).dataset.drawn && document.querySelector({body}).querySelector('[data-line=\"1\"] + .thread[data-comment=\"{id}\"]')"
            ))
            .await?;
    }

    // Sending them starts a turn that asks the agent to address them; the comment is sent.
    browser.click(&format!("{} button[data-action=send-comments]", view(&session))).await?;
    let c2 = chat.clone();
    c.until("the turn asking to address the comments", move |m| {
        let asks = |text: &str| text.contains("- a.txt line 1: say which one") && text.contains("listComments");
        m.chat(&c2).is_some_and(|s| {
            s.turns.iter().any(|t| asks(&t.message.text))
                || s.active_turn.as_ref().is_some_and(|t| asks(&t.message.text))
        })
    })
    .await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})?.dataset.state === 'submitted'",
            js_str(&format!("{} .thread[data-comment=\"{id}\"]", view(&session)))
        ))
        .await?;

    // Resolving it in the page is what the agent's tool then says.
    browser.click(&format!("{} .thread[data-comment=\"{id}\"] button[data-action=resolve]", view(&session))).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})?.dataset.state === 'resolved'",
            js_str(&format!("{} .thread[data-comment=\"{id}\"]", view(&session)))
        ))
        .await?;
    let after =
        call_tools(&url, &token, &[("listComments", json!({})), ("listComments", json!({ "includeResolved": true }))])
            .await?;
    let open: Value = serde_json::from_str(after[0]["text"].as_str().unwrap_or("{}"))?;
    let all: Value = serde_json::from_str(after[1]["text"].as_str().unwrap_or("{}"))?;
    assert_eq!(open["comments"], json!([]), "a resolved comment is not listed");
    assert_eq!(all["comments"][0]["resolved"], true, "{all}");
    assert_eq!(all["comments"][0]["replies"][0]["author"], "agent");

    // Live: what the agent writes next shows in the open view without asking.
    let c3 = chat.clone();
    c.until("the chat to be idle", move |m| m.chat(&c3).is_some_and(|s| s.active_turn.is_none())).await?;
    c.turn(&chat, "edit b.txt written later").await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})",
            js_str(&format!("{} li.file[data-path=\"b.txt\"]", view(&session)))
        ))
        .await?;

    // The page has every turn ended too (it may lag the test's own client), and the view, open
    // since before the last one, lists it among its scopes without being opened again.
    let turns = c.mirror.chat(&chat).map(|s| s.turns.len()).unwrap_or_default();
    browser.wait_for(&format!("window.ahpd.chats.get({})?.turns?.length === {turns}", js_str(&chat))).await?;
    browser
        .wait_for(&format!(
            "[...document.querySelectorAll({})].some((o) => o.textContent === 'Turn {turns}: edit b.txt written later')",
            js_str(&format!("{} select.scope option", view(&session)))
        ))
        .await?;
    // One turn's changes, from the turn in the chat: the second turn wrote a.txt alone.
    let turn_link = format!(".pane[data-session=\"{session}\"] .turn:nth-of-type(2) button[data-action=turn-changes]");
    browser.click(&turn_link).await?;
    let files_of_view = format!(
        "[...document.querySelectorAll({})].map((e) => e.dataset.path).join(' ')",
        js_str(&format!("{} li.file", view(&session)))
    );
    browser
        .wait_for(&format!(
            "document.querySelector({}).dataset.changes.includes('/turn/') && {files_of_view} === 'a.txt'",
            js_str(&view(&session))
        ))
        .await?;
    // Two turns compared: after the second against after the last, b.txt alone differs.
    browser
        .eval(&format!(
            "(() => {{ const v = document.querySelector({}); const s = v.querySelector('select.scope'); s.value = [...s.options].find((o) => o.textContent.startsWith('Compare')).value; s.dispatchEvent(new Event('change')); const a = v.querySelector('select[data-role=compare-from]'); a.value = a.options[1].value; a.dispatchEvent(new Event('change')); return true; }})()",
            js_str(&view(&session))
        ))
        .await?;
    let compared = browser
        .wait_for(&format!(
            "document.querySelector({}).dataset.changes.includes('/compare/') && {files_of_view} === 'b.txt'",
            js_str(&view(&session))
        ))
        .await;
    if let Err(e) = compared {
        let shown = browser
            .eval(&format!(
                "(() => {{ const v = document.querySelector({}); return JSON.stringify({{ changes: v.dataset.changes, files: {files_of_view}, listed: v.querySelector('ul.files, .files')?.textContent, from: v.querySelector('select[data-role=compare-from]').value, to: v.querySelector('select[data-role=compare-to]').value, turns: window.ahpd.chats.get({})?.turns?.map((t) => t.id) }}); }})()",
                js_str(&view(&session)),
                js_str(&chat)
            ))
            .await;
        anyhow::bail!("{e}: the view shows {shown:?}");
    }
    browser.screenshot(&shots()?.join("review-compare-turns.png")).await?;

    // What the page wrote is what any client folds from the channel (VS Code's view of it).
    c.check_against_snapshot(&channel).await?;
    let Some(SnapshotState::Annotations(state)) = c.mirror.states.get(&channel) else {
        anyhow::bail!("no annotations")
    };
    assert_eq!(state.annotations.len(), 1);
    let observed = browser.observations().await?;
    ensure!(observed["errors"].as_array().is_some_and(Vec::is_empty), "page errors: {}", observed["errors"]);
    browser.close().await
}

#[tokio::test]
async fn a_five_thousand_line_diff_opens_with_no_long_main_thread_task() -> anyhow::Result<()> {
    let original: String = (0..5000).map(|i| format!("line {i} of the original text\n")).collect();
    let (_dir, base) = repo(&[("big.txt", original)]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat, worktree) = isolated(&mut c, &base).await?;
    // Every fifth line changed: one hunk of 6 000 rows, its patch past the host's cap, so the
    // page compares the file's two sides itself.
    let changed: String = (0..5000)
        .map(
            |i| if i % 5 == 0 { format!("line {i} was changed\n") } else { format!("line {i} of the original text\n") },
        )
        .collect();
    std::fs::write(worktree.join("big.txt"), changed)?;
    c.turn(&chat, "edit note.txt a small one").await?;

    let mut browser = page(&daemon, 1400, 860).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    let profile = std::env::var_os("AHPD_WINDOW_PROFILE").is_some();
    if profile {
        browser.call("profileStart", json!({})).await?;
    }
    browser.eval("(() => { window.__t0 = performance.now(); return true; })()").await?;
    browser.eval(&format!("window.ahpd.openChanges({}).then(() => true)", js_str(&session))).await?;
    browser.click(&format!("{} li.file[data-path=\"big.txt\"]", view(&session))).await?;
    let body = js_str(&format!("{} .diff-body", view(&session)));
    browser
        .wait_for(&format!(
            "document.querySelector({body})?.dataset.drawn && document.querySelector({}).dataset.file === 'big.txt'",
            js_str(&format!("{} .diff-view", view(&session)))
        ))
        .await?;
    let unified = browser
        .eval(&format!(
            "({{ rows: document.querySelectorAll({}).length, adds: document.querySelectorAll({}).length, longTasks: window.__longTasks.filter((t) => t.start >= window.__t0), ms: Math.round(performance.now() - window.__t0) }})",
            js_str(&format!("{} .diff-body .dl", view(&session))),
            js_str(&format!("{} .diff-body .dl.add", view(&session)))
        ))
        .await?;
    eprintln!("a 5 000-line diff, unified: {unified}");
    if profile {
        eprintln!("where the page's time went: {:#}", browser.call("profileStop", json!({})).await?);
    }
    assert_eq!(unified["adds"], 1000, "every changed line is shown: {unified}");
    assert_eq!(unified["rows"], 6000, "one hunk of 6 000 rows: {unified}");
    // The last line is there, and scrolled to it shows.
    let last = browser
        .eval(&format!(
            "(() => {{ const b = document.querySelector({body}); b.scrollTop = b.scrollHeight; return b.querySelector('.dl[data-line=\"5000\"] .code')?.textContent; }})()"
        ))
        .await?;
    assert_eq!(last, json!("line 4999 of the original text"));
    browser.eval("(() => { window.__t1 = performance.now(); return true; })()").await?;
    browser.click(&format!("{} button[data-mode=split]", view(&session))).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({body}).classList.contains('split') && document.querySelector({body}).dataset.drawn"
        ))
        .await?;
    let split = browser
        .eval(&format!(
            "({{ rows: document.querySelectorAll({}).length, longTasks: window.__longTasks.filter((t) => t.start >= window.__t1) }})",
            js_str(&format!("{} .diff-body .sl", view(&session)))
        ))
        .await?;
    eprintln!("a 5 000-line diff, side by side: {split}");
    assert_eq!(split["rows"], 5000, "each changed line beside what it became: {split}");
    browser.screenshot(&shots()?.join("review-long-diff.png")).await?;
    for figures in [&unified, &split] {
        let worst = figures["longTasks"].as_array().into_iter().flatten().filter_map(|t| t["ms"].as_u64()).max();
        assert!(worst.unwrap_or(0) <= 200, "a main-thread task took {worst:?} ms: {figures}");
    }
    browser.close().await
}

#[tokio::test]
async fn the_changes_verb_shows_the_diff_writes_a_comment_the_agent_lists_and_shows_its_reply() -> anyhow::Result<()> {
    let (_dir, base) = repo(&[("a.txt", "one\n".into())]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat, worktree) = isolated(&mut c, &base).await?;
    let (url, token) = endpoint(&mut c, &chat).await?;
    c.turn(&chat, "edit a.txt from the agent").await?;
    let ahpd = |args: Vec<&str>| {
        let home = daemon.home.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move { tests::daemon::run_ahpd(&home, &args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    let diff = ahpd(vec!["changes", &session, "--diff"]).await?;
    ensure!(diff.code == 0, "{}", diff.stderr);
    ensure!(
        diff.stdout.contains("+1 -1  a.txt")
            && diff.stdout.contains("--- a.txt")
            && diff.stdout.contains("\n-one\n+from the agent"),
        "{}",
        diff.stdout
    );

    let wrote = ahpd(vec!["changes", &session, "--comment", "a.txt:1", "name it better"]).await?;
    ensure!(
        wrote.code == 0 && wrote.stdout.starts_with("Commented on a.txt line 1 "),
        "{} {}",
        wrote.stdout,
        wrote.stderr
    );
    let said = call_tools(&url, &token, &[("listComments", json!({}))]).await?;
    let listed: Value = serde_json::from_str(said[0]["text"].as_str().unwrap_or("{}"))?;
    let comment = listed["comments"][0].clone();
    assert_eq!(comment["text"], "name it better", "{listed}");
    assert_eq!(comment["resourceUri"], json!(format!("file://{}", worktree.join("a.txt").display())));
    assert_eq!(comment["range"]["startLineNumber"], 1);
    let id = comment["id"].as_str().unwrap_or_default().to_owned();
    call_tools(&url, &token, &[("replyToComment", json!({ "commentId": id, "text": "renamed" }))]).await?;

    let shown = ahpd(vec!["changes", &session, "--comments"]).await?;
    ensure!(shown.code == 0, "{}", shown.stderr);
    let expected =
        format!("{}:1 [accepted] ({id})\n  you: name it better\n  agent: renamed\n", worktree.join("a.txt").display());
    assert_eq!(shown.stdout, expected);

    for (place, why) in [("a.txt:0", "FILE:LINE"), ("nope.txt:1", "nope.txt is not a file of this changeset")] {
        let refused = ahpd(vec!["changes", &session, "--comment", place, "x"]).await?;
        ensure!(refused.code == 1 && refused.stderr.contains(why), "{place}: {} {}", refused.stdout, refused.stderr);
    }
    let channel = format!("{session}/annotations");
    c.subscribe(&channel).await?;
    c.check_against_snapshot(&channel).await?;
    Ok(())
}

#[tokio::test]
async fn long_unchanged_runs_are_folded_and_open_with_the_files_lines() -> anyhow::Result<()> {
    let original: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let (_dir, base) = repo(&[("list.txt", original)]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat, worktree) = isolated(&mut c, &base).await?;
    let changed: String = (1..=20)
        .map(|i| match i {
            2 => "line two, renamed\n".to_owned(),
            18 => "line eighteen, renamed\n".to_owned(),
            i => format!("line {i}\n"),
        })
        .collect();
    std::fs::write(worktree.join("list.txt"), changed)?;
    c.turn(&chat, "where").await?;

    // A narrow window: the view fits it.
    let mut browser = page(&daemon, 800, 900).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.openChanges({}).then(() => true)", js_str(&session))).await?;
    let body = js_str(&format!("{} .diff-body", view(&session)));
    browser.wait_for(&format!("document.querySelector({body})?.dataset.drawn")).await?;
    browser.screenshot(&shots()?.join("review-narrow.png")).await?;
    let right = browser
        .eval(&format!(
            "Math.round(Math.max(...[...document.querySelectorAll({})].map((b) => b.getBoundingClientRect().right)))",
            js_str(&format!("{} .ops button", view(&session)))
        ))
        .await?;
    ensure!(right.as_i64().is_some_and(|r| r <= 800), "every operation is inside the window: {right}");
    // Git's two hunks, and the nine lines between them folded.
    let gap = browser.eval(&format!("document.querySelector({body}).querySelector('.gap')?.textContent")).await?;
    assert_eq!(gap, json!("⋯ 9 unchanged lines"));
    let marked =
        browser.eval(&format!("document.querySelector({body}).querySelector('.dl.add mark')?.textContent")).await?;
    assert_eq!(marked, json!("two, renamed"), "the changed words are marked");
    // Marked reviewed in the page, as the host keeps it for every client.
    browser.click(&format!("{} li.file input[data-action=reviewed]", view(&session))).await?;
    let uri = browser.eval(&format!("document.querySelector({}).dataset.changes", js_str(&view(&session)))).await?;
    let uri = uri.as_str().unwrap_or_default().to_owned();
    c.subscribe(&uri).await?;
    let u = uri.clone();
    c.until("the file to be reviewed", move |m| {
        m.changeset(&u).is_some_and(|s| s.files.iter().all(|f| f.reviewed == Some(true)))
    })
    .await?;
    browser.click(&format!("{} .diff-body .gap", view(&session))).await?;
    browser.wait_for(&format!("!document.querySelector({body}).querySelector('.gap')")).await?;
    let numbers = browser
        .eval(&format!(
            "[...document.querySelector({body}).querySelectorAll('.dl')].map((r) => Number(r.dataset.line ?? 0)).filter((n) => n)"
        ))
        .await?;
    let expected: Vec<u64> = (1..=20).collect();
    assert_eq!(numbers, json!(expected), "every line of the file, in order, once opened");
    browser.close().await
}

#[tokio::test]
async fn the_pages_diff_module_rebuilds_both_sides_minimally_and_parses_patches() -> anyhow::Result<()> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser").join("diff_check.mjs");
    let out = tokio::process::Command::new("node").arg(&script).output().await.context("running node")?;
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "{said} {}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_str(said.trim()).context("one line of JSON")?;
    assert_eq!(answer["ok"], true, "{answer}");
    Ok(())
}

#[tokio::test]
async fn after_ahpd_restart_the_changes_view_comes_back_live_with_its_comments() -> anyhow::Result<()> {
    let (_dir, base) = repo(&[("a.txt", "one\n".into())]);
    let root = tempfile::tempdir()?;
    let home = Home::new()?;
    home.write_config(&json!({ "agents": { "notes": tests::agents::notes() }, "worktreesRoot": root.path() }))?;
    let port = free_port()?;
    home.expect(0, &["start", "--port", &port.to_string(), "--without-connection-token"]).await?;
    let url = format!("ws://127.0.0.1:{port}");
    let mut c = TestClient::connect(&url, "driver").await?;
    let (session, chat, _) = isolated(&mut c, &base).await?;
    c.turn(&chat, "edit a.txt before the restart").await?;

    let mut browser = Browser::launch().await?;
    browser.open(&format!("http://127.0.0.1:{port}/"), 1280, 800).await?;
    browser.wait_for("document.body.dataset.connection === 'online'").await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.openChanges({}).then(() => true)", js_str(&session))).await?;
    let body = js_str(&format!("{} .diff-body", view(&session)));
    browser.wait_for(&format!("document.querySelector({body})?.dataset.drawn")).await?;
    browser.click(&format!("{} .dl[data-line=\"1\"] .ln.new", view(&session))).await?;
    browser.type_into(&format!("{} .comment-box textarea", view(&session)), "kept across").await?;
    browser.click(&format!("{} button[data-action=comment]", view(&session))).await?;
    let thread = js_str(&format!("{} .thread .entry.user .what", view(&session)));
    browser.wait_for(&format!("document.querySelector({thread})?.textContent === 'kept across'")).await?;
    browser
        .eval("(() => { window.__sameDocument = true; window.__states = []; new MutationObserver(() => window.__states.push(document.body.dataset.connection)).observe(document.body, { attributes: true }); return true; })()")
        .await?;
    drop(c);

    home.expect(0, &["restart"]).await?;
    browser.wait_for("window.__states.includes('offline') && document.body.dataset.connection === 'online'").await?;
    assert_eq!(browser.eval("window.__sameDocument === true").await?, json!(true), "no reload");
    let mut c = TestClient::connect(&url, "driver again").await?;
    c.subscribe(&chat).await?;
    c.turn(&chat, "edit b.txt after the restart").await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})",
            js_str(&format!("{} li.file[data-path=\"b.txt\"]", view(&session)))
        ))
        .await?;
    assert_eq!(
        browser.eval(&format!("document.querySelector({thread})?.textContent")).await?,
        json!("kept across"),
        "the comment is still shown"
    );
    let observed = browser.observations().await?;
    ensure!(observed["errors"].as_array().is_some_and(Vec::is_empty), "page errors: {}", observed["errors"]);
    browser.close().await?;
    home.expect(0, &["stop"]).await.map(|_| ())
}

#[tokio::test]
async fn a_session_in_the_folder_itself_commits_its_uncommitted_changes_from_the_page() -> anyhow::Result<()> {
    let (_dir, base) = repo(&[("a.txt", "one\n".into())]);
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat, _) = notes_session(&mut c, &base, json!({ "ask": "never" })).await?;
    c.turn(&chat, "edit a.txt in the folder").await?;
    assert_eq!(git(&base, &["status", "--porcelain"]), " M a.txt\n");

    let mut browser = page(&daemon, 1280, 800).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.openChanges({}).then(() => true)", js_str(&session))).await?;
    browser
        .wait_for(&format!(
            "document.querySelector({})?.dataset.drawn",
            js_str(&format!("{} .diff-body", view(&session)))
        ))
        .await?;
    let scope = browser
        .eval(&format!(
            "document.querySelector({}).selectedOptions[0].textContent",
            js_str(&format!("{} select.scope", view(&session)))
        ))
        .await?;
    assert_eq!(scope, json!("Uncommitted changes"));
    assert_eq!(rows(&mut browser, &session, "add").await?, ["in the folder"]);
    browser.click(&format!("{} button[data-operation=commit]", view(&session))).await?;
    let done = browser
        .wait_for(&format!("document.querySelector({})?.textContent", js_str(&format!("{} .op-done", view(&session)))))
        .await?;
    ensure!(done.as_str().is_some_and(|d| d.starts_with("Committed the changes on main in ")), "{done}");
    assert_eq!(git(&base, &["status", "--porcelain"]), "", "committed");
    assert_eq!(git(&base, &["show", "HEAD:a.txt"]), "in the folder\n");
    browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent === 'No changes.'",
            js_str(&format!("{} .files .none", view(&session)))
        ))
        .await?;
    browser.close().await
}

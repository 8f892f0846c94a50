//! A person's day in the web window (issue 42), in a real browser against a real daemon, every
//! control found by the words it shows: the chat follows new output (after ten turns the newest
//! reply is inside the visible log) unless the person scrolled up, when a "New messages" marker
//! appears and the view stays put until it is clicked; Terminal opens a terminal in the session's
//! folder with one click; at 1280×800 (and 1400×860, 800×900) three chats and a Changes view fit
//! the window, nothing outside it sideways, the Changes view of another session replacing the
//! first; counts say "1 file"; a new session is named for its agent and folder until its first
//! message names it, which it does before the agent answers; New session keeps the last choices.
//! The attempts' headers and Compare after a merge are in window_attempts.rs. Screenshots go to
//! target/window-shots/.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tests::browser::{announced_page, js_str, online, pane, screen_js, shown_terminal, Browser};
use tests::git::git;
use tests::{Daemon, DaemonOptions, TestClient};

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Opens `session`'s chat from the session list (a click on its title) and waits until the chat
/// can take a message.
async fn open_from_list(browser: &mut Browser, session: &str, chat: &str) -> anyhow::Result<()> {
    let item = format!(".sessions li.session[data-session=\"{session}\"]");
    browser.wait_for(&format!("document.querySelector({})", js_str(&item))).await?;
    browser.click(&format!("{item} .title")).await?;
    composer_ready(browser, chat).await
}

async fn composer_ready(browser: &mut Browser, chat: &str) -> anyhow::Result<()> {
    browser
        .wait_for(&format!(
            "window.ahpd.chats.has({}) && document.querySelector({}) && !document.querySelector({}).disabled",
            js_str(chat),
            js_str(&pane(chat)),
            js_str(&format!("{} textarea", pane(chat)))
        ))
        .await
        .map(|_| ())
}

/// Writes `text` in the chat's message field and clicks Send.
async fn say(browser: &mut Browser, chat: &str, text: &str) -> anyhow::Result<()> {
    browser.fill_text(&pane(chat), "Message", text).await?;
    browser.click_text(&pane(chat), "Send").await
}

/// Waits until the page drew `n` finished turns in `chat`.
async fn turns_drawn(browser: &mut Browser, chat: &str, n: usize) -> anyhow::Result<()> {
    browser
        .wait_for(&format!(
            "document.querySelectorAll({}).length >= {n}",
            js_str(&format!("{} .turn:not(.active)", pane(chat)))
        ))
        .await
        .map(|_| ())
}

/// Where the newest reply of `chat` lies against its log's visible box, and how far the log is
/// scrolled.
fn newest_js(chat: &str) -> String {
    format!(
        "(() => {{ const p = document.querySelector({}); const log = p.querySelector('.log'); const turns = p.querySelectorAll('.turn'); const last = turns[turns.length - 1].querySelector('.part.md') ?? turns[turns.length - 1]; const r = last.getBoundingClientRect(); const l = log.getBoundingClientRect(); return {{ inside: r.top >= l.top - 0.5 && r.bottom <= l.bottom + 0.5, reply: {{ top: r.top, bottom: r.bottom }}, log: {{ top: l.top, bottom: l.bottom }}, scrollTop: log.scrollTop, scrollHeight: log.scrollHeight, clientHeight: log.clientHeight, turns: turns.length, marker: [...p.querySelectorAll('button')].filter((b) => b.offsetParent && b.textContent.trim() === 'New messages').length }}; }})()",
        js_str(&pane(chat))
    )
}

/// Waits until the newest of `turns` replies of `chat` is inside its visible log; on a timeout,
/// says where it was.
async fn newest_in_sight(browser: &mut Browser, chat: &str, turns: usize) -> anyhow::Result<Value> {
    let js = newest_js(chat);
    match browser.wait_for(&format!("(({js}).turns === {turns} && ({js}).inside) && ({js})")).await {
        Ok(found) => Ok(found),
        Err(e) => {
            anyhow::bail!("the newest of {turns} replies never came into sight: {} ({e})", browser.eval(&js).await?)
        }
    }
}

fn words(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{tag}{i}")).collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn the_chat_follows_new_output_unless_the_person_scrolled_up_and_then_a_marker_says_new_messages(
) -> anyhow::Result<()> {
    let config = json!({ "agents": { "echo": { "kind": "echo", "options": { "paceMs": 2 } } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "other").await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;

    // A chat with a history of ten turns of every length, opened: its newest reply is in sight.
    let (old_session, old_chat) = client.create_session("echo", None).await?;
    for i in 1..=10 {
        client.turn(&old_chat, &format!("earlier {i}: {}", words(12 + 25 * (i % 4) * (i % 4), "e"))).await?;
    }
    open_from_list(&mut browser, &old_session, &old_chat).await?;
    turns_drawn(&mut browser, &old_chat, 10).await?;
    newest_in_sight(&mut browser, &old_chat, 10).await?;
    // And it follows what comes next.
    say(&mut browser, &old_chat, &format!("turn 11: {}", words(80, "w"))).await?;
    turns_drawn(&mut browser, &old_chat, 11).await?;
    newest_in_sight(&mut browser, &old_chat, 11).await?;
    browser.click_text(&pane(&old_chat), "Close").await?;

    // Ten turns sent from the page, each longer than a few lines: the log is many screens tall,
    // and after each the newest reply is in sight.
    let (session, chat) = client.create_session("echo", None).await?;
    open_from_list(&mut browser, &session, &chat).await?;
    for i in 1..=10 {
        say(&mut browser, &chat, &format!("turn {i}: {}", words(80, "w"))).await?;
        turns_drawn(&mut browser, &chat, i).await?;
        newest_in_sight(&mut browser, &chat, i).await?;
    }
    let newest = browser.eval(&newest_js(&chat)).await?;
    assert!(
        newest["scrollHeight"].as_f64().unwrap_or(0.0) > 3.0 * newest["clientHeight"].as_f64().unwrap_or(0.0),
        "the log is several screens tall: {newest}"
    );
    assert_eq!(newest["marker"], json!(0), "no marker while it follows: {newest}");
    let dir = shots()?;
    browser.screenshot(&dir.join("day-follows-1280x800.png")).await?;

    // The person scrolls up with the wheel to read an earlier turn; a reply arrives (another
    // client's turn): the view stays where the person put it, and the marker says so.
    browser.wheel(&format!("{} .log", pane(&chat)), -1500.0).await?;
    let scrolled = browser
        .wait_for(&format!(
            "(({0}).scrollTop < ({0}).scrollHeight - ({0}).clientHeight - 400) && ({0})",
            newest_js(&chat)
        ))
        .await?;
    client.turn(&chat, &format!("from elsewhere: {}", words(80, "x"))).await?;
    turns_drawn(&mut browser, &chat, 11).await?;
    let after = browser.wait_for(&format!("(({0}).marker === 1) && ({0})", newest_js(&chat))).await?;
    assert_eq!(after["scrollTop"], scrolled["scrollTop"], "the view was not yanked: {scrolled} then {after}");
    assert_eq!(after["inside"], json!(false), "the new reply is below, out of sight: {after}");
    browser.screenshot(&dir.join("day-new-messages-1280x800.png")).await?;

    // A click on the marker goes down to the newest reply, and the chat follows again.
    browser.click_text(&pane(&chat), "New messages").await?;
    let down = newest_in_sight(&mut browser, &chat, 11).await?;
    assert_eq!(down["marker"], json!(0), "{down}");
    client.turn(&chat, &format!("and again: {}", words(80, "y"))).await?;
    turns_drawn(&mut browser, &chat, 12).await?;
    let followed = newest_in_sight(&mut browser, &chat, 12).await?;
    assert_eq!(followed["marker"], json!(0), "{followed}");
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    assert_eq!(seen["violations"], json!([]), "the page keeps its own policy: {seen}");
    browser.close().await
}

#[tokio::test]
async fn terminal_with_one_click_runs_echo_in_the_sessions_folder() -> anyhow::Result<()> {
    let folder = tempfile::Builder::new().prefix("ahpd-day-terminal-").tempdir()?;
    let folder_path = folder.path().canonicalize()?;
    let options = DaemonOptions {
        config: Some(json!({ "agents": { "echo": { "kind": "echo" } } })),
        env: vec![("SHELL".into(), "/bin/bash".into())],
        ..DaemonOptions::default()
    };
    let daemon = Daemon::start_with(options).await?;
    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    let (session, chat) = client.create_session_in("echo", &folder_path).await?;
    // A `!` command's terminal (exited) is the session's too: not the one a click opens.
    client.turn(&chat, "!echo earlier").await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    open_from_list(&mut browser, &session, &chat).await?;
    let listed = "(window.ahpd.root?.terminals ?? []).length";
    let before = browser.eval(listed).await?.as_u64().unwrap_or(0);

    browser.click_text(&pane(&chat), "Terminal").await?;
    let uri = shown_terminal(&mut browser, &chat).await?;
    browser.wait_for(&format!("document.activeElement?.closest('.xterm') && ({}).length > 0", screen_js(&uri))).await?;
    browser.call("keyboard", json!({ "text": "echo one-click-$((6*7)); pwd\r" })).await?;
    let screen = browser.wait_for(&format!("({0}).includes('one-click-42') && ({0})", screen_js(&uri))).await?;
    let screen = screen.as_str().unwrap_or_default();
    assert!(screen.contains(&folder_path.display().to_string()), "it runs in the session's folder: {screen}");
    browser.wait_for(&format!("{listed} === {}", before + 1)).await?;
    let status = browser
        .eval(&format!("document.querySelector({})?.textContent", js_str(&format!("{} .term-status", pane(&chat)))))
        .await?;
    assert!(!status.as_str().unwrap_or_default().contains("Pick one"), "no empty panel: {status}");
    browser.screenshot(&shots()?.join("day-terminal-1280x800.png")).await?;

    // Hidden and opened again: the same terminal, not another.
    browser.click_text(&pane(&chat), "Hide the terminal").await?;
    browser.click_text(&pane(&chat), "Terminal").await?;
    assert_eq!(shown_terminal(&mut browser, &chat).await?, uri);
    browser.wait_for(&format!("({}).includes('one-click-42')", screen_js(&uri))).await?;
    assert_eq!(browser.eval(listed).await?, json!(before + 1), "one terminal made, by the one click");
    client.subscribe(&uri).await?;
    let u = uri.clone();
    client
        .until("the page's echo", move |m| {
            m.terminal(&u).is_some_and(|t| tests::client::terminal_output(t).contains("one-click-42"))
        })
        .await?;
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    browser.close().await
}

/// A repository on `main` with one commit: `a.txt` holding `one`.
fn repo(dir: &Path) -> PathBuf {
    let path = dir.join("project");
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    git(&path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("a.txt"), "one\n").expect("write");
    git(&path, &["add", "a.txt"]);
    git(&path, &["commit", "-q", "-m", "first"]);
    path
}

/// A notes session in a worktree of its own cut from `repo` that wrote `a.txt`; answers (session, chat).
async fn worktree_session(client: &mut TestClient, repo: &Path, text: &str) -> anyhow::Result<(String, String)> {
    let folders = [format!("file://{}", repo.display())];
    let (session, chat) = client
        .open_session(json!({ "provider": "notes", "workingDirectories": folders, "config": { "ask": "never", "isolation": "worktree" } }))
        .await?;
    client.turn(&chat, &format!("edit a.txt {text}")).await?;
    Ok((session, chat))
}

/// Every pane's box, and anything of the page that lies outside the window sideways.
const SIDEWAYS_JS: &str = r#"(() => {
  const out = [];
  const panes = [...document.querySelectorAll('.panes > .pane')];
  for (const p of panes) {
    const r = p.getBoundingClientRect();
    if (r.left < -0.5 || r.right > innerWidth + 0.5) out.push(`${p.className} ${p.dataset.session} at ${Math.round(r.left)}..${Math.round(r.right)}`);
    for (const b of p.querySelectorAll('.pane-head button, .pane-head select, .composer button, .ops button, .changes-tools button')) {
      const br = b.getBoundingClientRect();
      if (br.width && (br.left < r.left - 0.5 || br.right > r.right + 0.5)) out.push(`"${b.textContent}" outside its pane`);
    }
  }
  const scroller = document.scrollingElement;
  const area = document.querySelector('.panes');
  return {
    out, panes: panes.length, changes: document.querySelectorAll('.changes-pane').length,
    pageWidth: scroller.scrollWidth, innerWidth,
    areaOverflow: area.scrollWidth - area.clientWidth,
    boxes: panes.map((p) => { const r = p.getBoundingClientRect(); return [p.classList.contains('changes-pane') ? 'changes' : 'chat', Math.round(r.left), Math.round(r.right), Math.round(r.top), Math.round(r.bottom)]; }),
  };
})()"#;

#[tokio::test]
async fn three_chats_and_a_changes_view_fit_the_window_and_another_sessions_changes_replace_it() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("ahpd-day-layout-").tempdir()?;
    let repo = repo(dir.path());
    let config = json!({ "agents": { "notes": { "kind": "notes" } }, "worktreesRoot": dir.path().join("worktrees") });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let mut sessions = Vec::new();
    for name in ["first", "second", "third"] {
        sessions.push(worktree_session(&mut client, &repo, &format!("from the {name}")).await?);
    }
    let mut browser = Browser::launch().await?;
    let dir = shots()?;
    for (width, height) in [(1280u32, 800u32), (1400, 860), (800, 900)] {
        browser.open(&announced_page(&daemon).await?, width, height).await?;
        online(&mut browser).await?;
        for (session, chat) in &sessions {
            open_from_list(&mut browser, session, chat).await?;
        }
        // What the first changed, from its chat's header, in its words.
        let (first, first_chat) = &sessions[0];
        browser.click_text(&pane(first_chat), "+1 −1 in 1 file").await?;
        let view = format!(".changes-pane[data-session=\"{first}\"]");
        browser
            .wait_for(&format!("document.querySelector({})?.dataset.drawn", js_str(&format!("{view} .diff-body"))))
            .await?;
        browser.screenshot(&dir.join(format!("day-layout-{width}x{height}.png"))).await?;
        let found = browser.eval(SIDEWAYS_JS).await?;
        eprintln!("{width}x{height}: {found}");
        assert_eq!(found["out"], json!([]), "at {width}x{height}: {found}");
        assert_eq!((found["panes"].as_u64(), found["changes"].as_u64()), (Some(4), Some(1)), "{found}");
        assert!(found["pageWidth"].as_u64() <= found["innerWidth"].as_u64(), "no sideways scroll: {found}");
        assert!(found["areaOverflow"].as_i64() <= Some(0), "nothing hidden sideways: {found}");

        // Another session's changes, from the list: they take the view's place.
        let (second, _) = &sessions[1];
        browser.click_text(&format!(".sessions li.session[data-session=\"{second}\"]"), "+1 −1").await?;
        let view = format!(".changes-pane[data-session=\"{second}\"]");
        browser
            .wait_for(&format!("document.querySelector({})?.dataset.drawn", js_str(&format!("{view} .diff-body"))))
            .await?;
        let found = browser.eval(SIDEWAYS_JS).await?;
        assert_eq!(found["changes"], json!(1), "one Changes view, replaced: {found}");
        assert_eq!(found["out"], json!([]), "at {width}x{height}: {found}");
        assert!(found["pageWidth"].as_u64() <= found["innerWidth"].as_u64(), "no sideways scroll: {found}");
        let shown = browser
            .eval(&format!("document.querySelector({})?.textContent", js_str(&format!("{view} .dl.add .code"))))
            .await?;
        assert_eq!(shown, json!("from the second"), "{found}");
        browser.screenshot(&dir.join(format!("day-layout-replaced-{width}x{height}.png"))).await?;
    }
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    browser.close().await
}

/// The title the page shows for `session`: its chat's header and its item in the list.
fn titles_js(session: &str) -> String {
    format!(
        "(() => {{ const p = document.querySelector({0}); const li = document.querySelector({1}); return {{ pane: p?.querySelector('.pane-title')?.textContent ?? null, list: li?.querySelector('.title')?.textContent ?? null }}; }})()",
        js_str(&format!(".pane[data-session=\"{session}\"]")),
        js_str(&format!(".sessions li.session[data-session=\"{session}\"]"))
    )
}

/// Opens New session and waits until its agent's settings are drawn.
async fn new_session_dialog(browser: &mut Browser) -> anyhow::Result<()> {
    browser.click_text("header", "New session").await?;
    browser.wait_for("document.querySelector('dialog.new-session[open] .schema')?.children.length").await.map(|_| ())
}

/// What New session shows chosen: its agent, folder and when the agent asks.
const CHOSEN_JS: &str = "(() => { const d = document.querySelector('dialog.new-session[open]'); const ask = d.querySelector('select[name=ask]'); return { agent: d.querySelector('select[name=agent]').value, folder: d.querySelector('input[name=folder]').value, ask: ask.options[ask.selectedIndex].textContent }; })()";

#[tokio::test]
async fn a_new_session_is_named_before_its_first_reply_and_new_session_keeps_the_last_choices() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("ahpd-day-new-").tempdir()?;
    let folder = dir.path().join("holiday-plans");
    std::fs::create_dir_all(&folder)?;
    let folder = folder.canonicalize()?;
    let config = json!({ "agents": { "echo": { "kind": "echo" }, "notes": { "kind": "notes" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    let page = announced_page(&daemon).await?;
    browser.open(&page, 1280, 800).await?;
    online(&mut browser).await?;
    let shots = shots()?;

    // New session, as a person fills it: the notes agent, a folder, asking before every call.
    new_session_dialog(&mut browser).await?;
    browser.choose_text("dialog.new-session", "Agent", "Notes").await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=ask]')").await?;
    browser.fill_text("dialog.new-session", "Folder", &folder.display().to_string()).await?;
    browser.choose_text("dialog.new-session", "Ask before", "Every call").await?;
    browser.click_text("dialog.new-session", "Start").await?;
    let session =
        browser.wait_for("!document.querySelector('dialog.new-session') && window.ahpd.panes[0]?.session").await?;
    let session = session.as_str().unwrap_or_default().to_owned();
    let chat = browser.wait_for("window.ahpd.panes[0]?.chat").await?.as_str().unwrap_or_default().to_owned();
    composer_ready(&mut browser, &chat).await?;

    // Before any message it is named for its agent and folder, not "New session".
    let before = browser.wait_for(&format!("(({0}).list !== null) && ({0})", titles_js(&session))).await?;
    assert_eq!(before["pane"], json!("New Notes session in holiday-plans"), "{before}");
    assert_eq!(before["list"], before["pane"], "{before}");
    browser.screenshot(&shots.join("day-new-session-named-1280x800.png")).await?;

    // Its first message names it at once, while the agent still waits to be allowed to answer.
    say(&mut browser, &chat, "edit plan.txt Lisbon in May\nwith the details after").await?;
    browser.wait_for(&format!("window.ahpd.waitingFor({})", js_str(&session))).await?;
    let asked = browser.eval(&titles_js(&session)).await?;
    assert_eq!(asked["pane"], json!("edit plan.txt Lisbon in May"), "{asked}");
    assert_eq!(asked["list"], asked["pane"], "{asked}");
    assert!(!std::fs::read_dir(&folder)?.any(|_| true), "nothing answered yet: the agent waits");
    browser.screenshot(&shots.join("day-new-session-titled-1280x800.png")).await?;

    // New session again, after a reload: the same agent, folder and "Every call".
    browser.goto(&page).await?;
    online(&mut browser).await?;
    new_session_dialog(&mut browser).await?;
    let chosen = browser.wait_for(&format!("(({CHOSEN_JS}).agent === 'notes') && ({CHOSEN_JS})")).await?;
    assert_eq!(
        chosen,
        json!({ "agent": "notes", "folder": folder.display().to_string(), "ask": "Every call" }),
        "the last choices, kept"
    );
    browser.screenshot(&shots.join("day-new-session-kept-1280x800.png")).await?;
    // Another agent has its own settings; coming back to notes finds its choice again.
    browser.choose_text("dialog.new-session", "Agent", "Echo").await?;
    browser.wait_for("!document.querySelector('dialog.new-session select[name=ask]')").await?;
    browser.choose_text("dialog.new-session", "Agent", "Notes").await?;
    let back = browser
        .wait_for(&format!("document.querySelector('dialog.new-session select[name=ask]') && ({CHOSEN_JS})"))
        .await?;
    assert_eq!(back["ask"], json!("Every call"), "{back}");
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    browser.close().await
}

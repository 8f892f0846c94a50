//! The web window's details a person trips over, in a real browser (headless Chromium) against a
//! real daemon: the real `claude` CLI's long permission options wrap inside the chat and the
//! session list at 1280×800 and 800×900 (every button's box checked), Deny is reached with the
//! keyboard and the turn goes on without the command; a terminal opened in the page runs what is
//! typed into it, in colour, at the page's size (and follows it when it grows), another client's
//! terminal is picked from the host's list and typed into, a `!` command's is shown from its turn;
//! the open chats and their terminal come back after a reload; the tab's title and icon count the sessions that need you; `?` lists the shortcuts;
//! a worktree session's folder and branch are in its chat's header. Screenshots go to
//! target/window-shots/.

use std::path::PathBuf;

use ahp_types::state::{ResponsePart, ToolCallState, TurnState};
use serde_json::json;
use tests::browser::{announced_page, js_str, online, pane, screen_js, shown_terminal, Browser};
use tests::client::terminal_output;
use tests::git::git;
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// Opens `session`'s chat in the page and waits until its state is drawn.
async fn open_in_page(browser: &mut Browser, session: &str, chat: &str) -> anyhow::Result<()> {
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(session))).await?;
    browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(session))).await?;
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

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Every confirmation button's box against the boxes it must sit inside: in the chat, the pane's
/// visible log (and the pane); in the list, its item (and the list). Answers the problems found
/// and the buttons' labels.
const BOXES_JS: &str = r#"(() => {
  const inside = (b, r) => b.left >= r.left - 0.5 && b.right <= r.right + 0.5 && b.top >= r.top - 0.5 && b.bottom <= r.bottom + 0.5;
  const view = { left: 0, top: 0, right: innerWidth, bottom: innerHeight };
  const bad = [];
  const labels = { chat: [], list: [] };
  const card = document.querySelector('.pane .part.tool.pending-confirmation');
  card?.scrollIntoView({ block: 'end', inline: 'nearest' });
  const pane = card?.closest('.pane');
  const log = card?.closest('.log');
  for (const b of card ? card.querySelectorAll('.confirm-actions button') : []) {
    const r = b.getBoundingClientRect();
    labels.chat.push(b.textContent);
    if (!inside(r, log.getBoundingClientRect())) bad.push(`chat: "${b.textContent}" ${JSON.stringify(r)} outside the log ${JSON.stringify(log.getBoundingClientRect())}`);
    if (!inside(r, pane.getBoundingClientRect())) bad.push(`chat: "${b.textContent}" outside the pane`);
    if (!inside(r, view)) bad.push(`chat: "${b.textContent}" outside the window`);
    if (b.tabIndex < 0 || b.disabled) bad.push(`chat: "${b.textContent}" not reachable by keyboard`);
  }
  const item = document.querySelector('.sessions li.session .inline-confirm')?.closest('li');
  const list = document.querySelector('.sessions');
  for (const b of item ? item.querySelectorAll('.inline-actions button') : []) {
    const r = b.getBoundingClientRect();
    labels.list.push(b.textContent);
    if (!inside(r, item.getBoundingClientRect())) bad.push(`list: "${b.textContent}" ${JSON.stringify(r)} outside its item ${JSON.stringify(item.getBoundingClientRect())}`);
    if (r.left < list.getBoundingClientRect().left || r.right > list.getBoundingClientRect().right) bad.push(`list: "${b.textContent}" outside the list`);
    if (!inside(r, view)) bad.push(`list: "${b.textContent}" outside the window`);
    if (b.tabIndex < 0 || b.disabled) bad.push(`list: "${b.textContent}" not reachable by keyboard`);
  }
  return { bad, labels };
})()"#;

#[tokio::test]
async fn the_claude_clis_long_permission_options_stay_in_sight_and_deny_from_the_page_goes_on_without_the_command(
) -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let project = tempfile::Builder::new().prefix("ahpd-window-project-").tempdir()?;
    let elsewhere =
        tempfile::Builder::new().prefix("ahpd-a-folder-with-a-rather-long-name-outside-the-project-").tempdir()?;
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(&mock) } }))).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat) = client.create_session_in("claude", project.path()).await?;
    let target = elsewhere.path().join("denied.txt");
    let args =
        json!({ "command": format!("touch {}", target.display()), "description": "Make a file outside the project" });
    let turn_id = client.send(&chat, &format!("make it TOOL:Bash ARGS:{args}")).await?;
    client.until_waiting_calls(&chat, 1).await?;

    let mut browser = Browser::launch().await?;
    let dir = shots()?;
    let page = announced_page(&daemon).await?;
    for (width, height) in [(1280u32, 800u32), (800, 900)] {
        browser.open(&page, width, height).await?;
        online(&mut browser).await?;
        open_in_page(&mut browser, &session, &chat).await?;
        browser
            .wait_for(&format!(
                "document.querySelectorAll({}).length >= 3 && document.querySelectorAll('.sessions .inline-actions button').length >= 3",
                js_str(&format!("{} .part.tool.pending-confirmation .confirm-actions button", pane(&chat)))
            ))
            .await?;
        let found = browser.eval(BOXES_JS).await?;
        browser.screenshot(&dir.join(format!("confirm-{width}x{height}.png"))).await?;
        eprintln!("{width}x{height}: {found}");
        assert_eq!(found["bad"], json!([]), "at {width}x{height}: {found}");
        let labels: Vec<String> = found["labels"]["chat"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            labels,
            found["labels"]["list"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        );
        assert!(labels.iter().any(|l| l.starts_with("Always allow")), "the CLI's own long options: {labels:?}");
        assert!(labels.iter().any(|l| l.len() > 40), "an option long enough to wrap: {labels:?}");
        assert_eq!(labels.last().map(String::as_str), Some("Deny"), "{labels:?}");
        // In the list too, Tab goes from the first option through the others to Deny.
        let first = ".sessions .inline-actions button";
        browser.eval(&format!("(document.querySelector({}).focus(), true)", js_str(first))).await?;
        for _ in 1..labels.len() {
            browser.press("Tab").await?;
        }
        let focused = browser
            .eval("document.activeElement?.closest('.inline-actions') && document.activeElement.textContent")
            .await?;
        assert_eq!(focused, json!("Deny"), "Tab reaches the list's Deny at {width}x{height}");
    }

    // At 800×900, with the keyboard: Tab from the first option through the others to Deny, Enter.
    let buttons = format!("{} .part.tool.pending-confirmation .confirm-actions button", pane(&chat));
    let count = browser.eval(&format!("document.querySelectorAll({}).length", js_str(&buttons))).await?;
    let count = count.as_u64().unwrap_or(0);
    browser.eval(&format!("(document.querySelector({}).focus(), true)", js_str(&buttons))).await?;
    for _ in 1..count {
        browser.press("Tab").await?;
    }
    let focused = browser.eval("document.activeElement?.textContent").await?;
    assert_eq!(focused, json!("Deny"), "Tab reaches Deny");
    browser.press("Enter").await?;

    let turn = client.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "the turn went on: {turn:?}");
    let calls: Vec<&ToolCallState> = turn
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect();
    assert!(matches!(calls[..], [ToolCallState::Cancelled(_)]), "denied: {calls:?}");
    assert!(turn_text(&turn).contains("The person denied this tool call."), "{}", turn_text(&turn));
    assert!(!target.exists(), "the command did not run");
    browser
        .wait_for(&format!(
            "document.querySelector({})?.textContent === 'denied'",
            js_str(&format!("{} .part.tool .tool-status", pane(&chat)))
        ))
        .await?;
    client.check_against_snapshot(&chat).await?;
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    browser.close().await
}

#[tokio::test]
async fn a_terminal_opened_in_the_page_runs_what_is_typed_in_colour_at_the_pages_size_and_comes_back_after_a_reload(
) -> anyhow::Result<()> {
    let folder = tempfile::Builder::new().prefix("ahpd-window-terminal-").tempdir()?;
    std::fs::write(folder.path().join("marker-file.txt"), "x")?;
    let options = DaemonOptions {
        config: Some(tests::agents::echo_only()),
        env: vec![("SHELL".into(), "/bin/bash".into())],
        ..DaemonOptions::default()
    };
    let daemon = Daemon::start_with(options).await?;
    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    let (session, chat) = client.create_session_in("echo", folder.path()).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    open_in_page(&mut browser, &session, &chat).await?;
    let p = pane(&chat);
    // The chat's header names the folder.
    let folder_shown =
        browser.eval(&format!("document.querySelector({})?.textContent", js_str(&format!("{p} .pane-folder")))).await?;
    assert_eq!(folder_shown, json!(folder.path().display().to_string()));

    // One click opens a terminal in the session's folder.
    browser.click(&format!("{p} button[data-action=terminal]")).await?;
    let uri = shown_terminal(&mut browser, &chat).await?;
    browser.wait_for(&format!("document.activeElement?.closest('.xterm') && ({}).length > 0", screen_js(&uri))).await?;
    // Typed as a person types, key by key, into the terminal.
    browser
        .call("keyboard", json!({ "text": "ls; printf '\\033[31mred-%s\\033[0m\\n' $((6*7)); echo cols=$COLUMNS\r" }))
        .await?;
    browser.wait_for(&format!("({}).includes('red-42')", screen_js(&uri))).await?;
    let screen = browser.eval(&screen_js(&uri)).await?;
    let screen = screen.as_str().unwrap_or_default().to_owned();
    assert!(screen.contains("marker-file.txt"), "it runs in the session's folder: {screen}");
    // Drawn on the next frame after the buffer has it.
    let red = browser
        .wait_for(&format!(
            "[...document.querySelectorAll({})].some((s) => s.textContent.includes('red-42') && getComputedStyle(s).color !== getComputedStyle(s.parentElement).color)",
            js_str(&format!("{p} .xterm-rows span"))
        ))
        .await?;
    assert_eq!(red, json!(true), "the output keeps its colour");
    // A 24-bit colour too (xterm.js sets it as a style attribute, which goes through the CSSOM).
    browser.call("keyboard", json!({ "text": "printf '\\033[38;2;0;200;0mgreen-%s\\033[0m\\n' true\r" })).await?;
    browser.wait_for(&format!("({}).includes('green-true')", screen_js(&uri))).await?;
    let green = browser
        .wait_for(&format!(
            "[...document.querySelectorAll({})].some((s) => s.textContent.includes('green-true') && getComputedStyle(s).color === 'rgb(0, 200, 0)')",
            js_str(&format!("{p} .xterm-rows span"))
        ))
        .await?;
    assert_eq!(green, json!(true), "a 24-bit colour is drawn");
    // The host's terminal has the page's size.
    let cols = browser
        .eval(&format!("[...window.ahpd.terminalViews].find((v) => v.uri === {}).term.cols", js_str(&uri)))
        .await?;
    browser.wait_for(&format!("({}).includes('cols={cols}')", screen_js(&uri))).await?;
    client.subscribe(&uri).await?;
    let state = client.mirror.terminal(&uri).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert!(terminal_output(&state).contains("red-42"), "{state:?}");
    assert_eq!(state.cols, cols.as_i64(), "the page's size reached the host");
    let dir = shots()?;
    browser.screenshot(&dir.join("terminal-1280x800.png")).await?;

    // The person makes the terminal taller: the host's terminal gets the rows.
    let view = format!("[...window.ahpd.terminalViews].find((v) => v.uri === {})", js_str(&uri));
    let rows_before = browser.eval(&format!("{view}.term.rows")).await?;
    browser
        .eval(&format!("(document.querySelector({}).style.height = '400px', true)", js_str(&format!("{p} .term-host"))))
        .await?;
    let rows = browser.wait_for(&format!("{view}.term.rows > {rows_before} && {view}.term.rows")).await?;
    let u = uri.clone();
    let want = rows.as_i64();
    client.until("the page's rows", move |m| m.terminal(&u).is_some_and(|t| t.rows == want)).await?;

    // A terminal another client opened, picked from the list the host keeps, takes what is typed.
    let theirs = format!("ahp-terminal:/{}", uuid::Uuid::new_v4());
    let claim = json!({ "kind": "client", "clientId": client.client_id });
    let cwd = format!("file://{}", folder.path().display());
    client
        .request("createTerminal", json!({ "channel": theirs, "claim": claim, "cwd": cwd, "name": "theirs" }))
        .await
        .map_err(|e| anyhow::anyhow!("createTerminal: {e}"))?;
    let picker = format!("{p} select.term-pick");
    browser
        .wait_for(&format!("document.querySelector({}).querySelector('option[value=\"{theirs}\"]')", js_str(&picker)))
        .await?;
    browser.call("select", json!({ "selector": picker, "value": theirs })).await?;
    assert_eq!(shown_terminal(&mut browser, &chat).await?, theirs);
    browser.wait_for("document.activeElement?.closest('.xterm')").await?;
    browser.call("keyboard", json!({ "text": "echo typed-in-the-$((1+1))nd-page\r" })).await?;
    client.subscribe(&theirs).await?;
    let t = theirs.clone();
    client
        .until("what the page typed", move |m| {
            m.terminal(&t).is_some_and(|s| terminal_output(s).contains("typed-in-the-2nd-page"))
        })
        .await?;
    browser.wait_for(&format!("({}).includes('typed-in-the-2nd-page')", screen_js(&theirs))).await?;
    browser.call("select", json!({ "selector": picker, "value": uri })).await?;
    assert_eq!(shown_terminal(&mut browser, &chat).await?, uri);
    // Shift+Escape leaves the terminal for the chat's message field.
    browser.wait_for("document.activeElement?.closest('.xterm')").await?;
    browser.call("press", json!({ "key": "Escape", "modifiers": ["Shift"] })).await?;
    browser.wait_for("document.activeElement?.closest('.composer')").await?;

    // A reload brings back the open chat and its terminal.
    browser.eval("(location.reload(), true)").await?;
    online(&mut browser).await?;
    browser.wait_for(&format!("document.querySelector({})", js_str(&p))).await?;
    let again = shown_terminal(&mut browser, &chat).await?;
    assert_eq!(again, uri, "the same terminal");
    browser.wait_for(&format!("({}).includes('red-42')", screen_js(&uri))).await?;

    // A `!` command's terminal, from its turn in the chat.
    browser.type_into(&format!("{p} .composer textarea"), "!echo bang-$((40+2))").await?;
    browser.press("Enter").await?;
    let show = format!("{p} .turn:not(.active) button[data-action=show-terminal]");
    browser.click(&show).await?;
    let command = shown_terminal(&mut browser, &chat).await?;
    assert_ne!(command, uri, "the command's own terminal");
    browser.wait_for(&format!("({}).includes('bang-42')", screen_js(&command))).await?;
    browser.screenshot(&dir.join("terminal-command-1280x800.png")).await?;
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    assert_eq!(seen["violations"], json!([]), "the page keeps its own policy: {seen}");
    assert_eq!(seen["foreign"], json!([]), "nothing asked of anywhere else: {seen}");

    // A new tab at 800×900 opens where the person left off, the terminal inside its chat.
    browser.open(&announced_page(&daemon).await?, 800, 900).await?;
    online(&mut browser).await?;
    assert_eq!(shown_terminal(&mut browser, &chat).await?, command);
    browser.wait_for(&format!("({}).includes('bang-42')", screen_js(&command))).await?;
    let inside = browser
        .eval(&format!(
            "(() => {{ const t = document.querySelector({}).getBoundingClientRect(); const p = document.querySelector({}).getBoundingClientRect(); return t.left >= p.left && t.right <= p.right && t.right <= innerWidth && t.bottom <= innerHeight; }})()",
            js_str(&format!("{p} .term-screen .xterm-screen")),
            js_str(&p)
        ))
        .await?;
    assert_eq!(inside, json!(true), "the terminal fits its chat at 800×900");
    browser.screenshot(&dir.join("terminal-800x900.png")).await?;
    browser.close().await
}

#[tokio::test]
async fn reloads_keep_the_open_chats_the_tab_counts_who_needs_you_and_question_mark_lists_the_keys(
) -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let config = json!({ "agents": {
        "echo": tests::agents::echo(),
        "notes": tests::agents::notes_in(notes.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let (first, first_chat) = client.create_session("echo", None).await?;
    let (second, second_chat) = client.create_session("echo", None).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    open_in_page(&mut browser, &first, &first_chat).await?;
    open_in_page(&mut browser, &second, &second_chat).await?;
    browser.click(".filter[data-filter=idle]").await?;
    assert_eq!(browser.eval("document.title").await?, json!("ahpd"));

    browser.eval("(location.reload(), true)").await?;
    online(&mut browser).await?;
    browser
        .wait_for(&format!(
            "[...document.querySelectorAll('.pane')].map((p) => p.dataset.session).join(' ') === {}",
            js_str(&format!("{second} {first}"))
        ))
        .await?;
    browser.wait_for("document.querySelector('.filter.on')?.dataset.filter === 'idle'").await?;

    // The tab is hidden (as when the person is in another tab), and the person allowed
    // notifications. Headless Chromium's shell answers "denied" to every notification permission,
    // so its Notification is stood in for by one that records what the page shows.
    browser
        .eval("(() => { Object.defineProperty(document, 'hidden', { get: () => true, configurable: true }); window.__notes = []; window.Notification = class { static permission = 'granted'; constructor(title, options) { window.__notes.push(title); this.options = options; } close() {} }; return true; })()")
        .await?;

    // A session that waits for a confirmation: the title and the icon say so, and a notification.
    let (_, waiting_chat) = client.create_session("notes", None).await?;
    client.send(&waiting_chat, "write plan.md the plan").await?;
    client.until_waiting_calls(&waiting_chat, 1).await?;
    let title = browser.wait_for("document.title.startsWith('(1)') && document.title").await?;
    assert_eq!(title, json!("(1) ahpd — a session needs you"));
    let icon = browser.eval("({ href: document.querySelector('link[rel=icon]').href.slice(0, 22), waiting: document.querySelector('link[rel=icon]').dataset.waiting })").await?;
    assert_eq!(icon, json!({ "href": "data:image/png;base64,", "waiting": "1" }));
    let notes = browser.wait_for("window.__notes.length > 0 && window.__notes").await?;
    assert_eq!(
        notes,
        json!(["write plan.md the plan needs you"]),
        "one notification, for the session that started waiting"
    );
    browser.eval("(delete document.hidden, true)").await?;
    let dir = shots()?;
    browser.screenshot(&dir.join("attention-1280x800.png")).await?;

    // `?` lists the shortcuts; Escape closes the list.
    browser.eval("(document.activeElement?.blur(), true)").await?;
    browser.press("?").await?;
    let keys = browser.wait_for("document.querySelector('dialog.keys[open]')?.textContent").await?;
    let keys = keys.as_str().unwrap_or_default();
    assert!(keys.contains("Search the sessions") && keys.contains("terminal"), "{keys}");
    browser.screenshot(&dir.join("keys-1280x800.png")).await?;
    browser.press("Escape").await?;
    browser.wait_for("!document.querySelector('dialog.keys')").await?;
    // `]` moves to the next open chat's message field.
    browser.press("]").await?;
    browser.wait_for("document.activeElement?.tagName === 'TEXTAREA'").await?;
    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    assert_eq!(seen["violations"], json!([]), "the page keeps its own policy: {seen}");
    browser.close().await
}

#[tokio::test]
async fn a_worktree_sessions_chat_names_its_folder_and_branch() -> anyhow::Result<()> {
    let repo = tempfile::Builder::new().prefix("ahpd-window-repo-").tempdir()?;
    git(repo.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(repo.path().join("a.txt"), "a\n")?;
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let daemon = Daemon::start_with(DaemonOptions::with_config(tests::agents::echo_only())).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let folders = [format!("file://{}", repo.path().display())];
    let (session, chat) = client
        .open_session(json!({ "provider": "echo", "workingDirectories": folders, "config": { "isolation": "worktree", "branch": "try/the-header" } }))
        .await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 800, 900).await?;
    online(&mut browser).await?;
    open_in_page(&mut browser, &session, &chat).await?;
    let p = pane(&chat);
    let branch = browser
        .wait_for(&format!("document.querySelector({})?.textContent", js_str(&format!("{p} .pane-branch"))))
        .await?;
    assert_eq!(branch, json!("try/the-header ← main"));
    let folder =
        browser.eval(&format!("document.querySelector({})?.textContent", js_str(&format!("{p} .pane-folder")))).await?;
    let folder = folder.as_str().unwrap_or_default();
    assert!(
        folder.contains("try-the-header") && !folder.starts_with(&repo.path().display().to_string()),
        "the worktree: {folder}"
    );
    browser.screenshot(&shots()?.join("branch-800x900.png")).await?;
    browser.close().await
}

#[tokio::test]
async fn a_chat_its_agent_moves_into_a_worktree_shows_the_new_branch_without_a_reload() -> anyhow::Result<()> {
    let repo = tempfile::Builder::new().prefix("ahpd-window-repo-").tempdir()?;
    git(repo.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(repo.path().join("a.txt"), "a\n")?;
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "notes": tests::agents::notes() } })))
            .await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let folders = [format!("file://{}", repo.path().display())];
    let (session, chat) = client
        .open_session(json!({ "provider": "notes", "workingDirectories": folders, "config": { "ask": "never" } }))
        .await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    open_in_page(&mut browser, &session, &chat).await?;
    let p = pane(&chat);
    let branch_now = format!("document.querySelector({})?.textContent ?? ''", js_str(&format!("{p} .pane-branch")));
    assert_eq!(browser.eval(&branch_now).await?, json!(""), "no branch in the checkout's own folder");

    // The agent moves its chat into a worktree of its own (`chat/changesetsChanged`): the open
    // pane names the new branch as it is told, with no reload.
    let turn = client.turn(&chat, "call isolate_session {}").await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Complete, "{turn:#?}");
    let branch = browser.wait_for(&format!("(({branch_now}).endsWith('← main')) && ({branch_now})")).await?;
    let branch = branch.as_str().unwrap_or_default();
    assert!(branch.len() > "← main".len(), "a branch name before the base: {branch}");
    client.check_against_snapshot(&chat).await?;
    browser.close().await
}

//! The web window in a real browser (headless Chromium under puppeteer-core) against a real
//! daemon, checked with the official client: a session started in the page streams its reply and
//! the page shows the chat's text; a second client's message appears live; the notes agent's
//! confirmation and question are answered in the page; after `ahpd restart` the page comes back
//! by itself; a reply full of markup runs nothing; a wrong token gets the refusal page; twenty
//! chats streaming at full pace leave no long task, and a 2000-word reply is not redrawn whole per
//! delta. Screenshots go to target/window-shots/.

use std::path::PathBuf;

use serde_json::{json, Value};
use tests::browser::{announced_page, js_str, online, pane, Browser};
use tests::daemon::free_port;
use tests::{turn_text, Daemon, DaemonOptions, Home, TestClient};

const TOKEN: &str = "window-test-token";

/// Starts a session on `agent` through the page's dialog; answers its chat.
async fn new_session_in_page(browser: &mut Browser, agent: &str) -> anyhow::Result<String> {
    let before = browser.eval("document.querySelectorAll('.pane').length").await?;
    browser.click("button[data-action=new]").await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=agent]')").await?;
    browser
        .eval(&format!(
            "(() => {{ const s = document.querySelector('dialog.new-session select[name=agent]'); s.value = {}; s.dispatchEvent(new Event('change')); return s.value; }})()",
            js_str(agent)
        ))
        .await?;
    browser.click("dialog.new-session button[data-action=create]").await?;
    let chat = browser
        .wait_for(&format!(
            "document.querySelectorAll('.pane').length > {before} && document.querySelector('.pane').dataset.chat"
        ))
        .await?;
    let chat = chat.as_str().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("no chat: {chat}"))?;
    // Its composer opens once the chat's state is in.
    browser
        .wait_for(&format!(
            "window.ahpd.chats.has({}) && !document.querySelector('{} textarea').disabled",
            js_str(&chat),
            pane(&chat).replace('\'', "\\'")
        ))
        .await?;
    Ok(chat)
}

/// Puts `text` in the chat's composer and presses Enter there (typing long texts key by key would
/// only slow the test).
async fn send_in_page(browser: &mut Browser, chat: &str, text: &str) -> anyhow::Result<()> {
    let field = format!("{} textarea", pane(chat));
    browser
        .eval(&format!(
            "(() => {{ const t = document.querySelector({}); t.value = {}; t.focus(); return true; }})()",
            js_str(&field),
            js_str(text)
        ))
        .await?;
    browser.press("Enter").await
}

/// Waits until the page folded `n` finished turns in `chat` and drew them.
async fn turns_in_page(browser: &mut Browser, chat: &str, n: usize) -> anyhow::Result<()> {
    let drawn = format!("{} .turn:not(.active)", pane(chat));
    browser
        .wait_for(&format!(
            "(window.ahpd.chats.get({})?.turns.length ?? 0) >= {n} && document.querySelectorAll({}).length >= {n}",
            js_str(chat),
            js_str(&drawn)
        ))
        .await
        .map(|_| ())
}

/// The text the page shows for turn `i`'s reply (its markdown parts).
async fn shown_reply(browser: &mut Browser, chat: &str, i: usize) -> anyhow::Result<String> {
    let js = format!(
        "[...document.querySelectorAll('{} .turn')[{i}].querySelectorAll('.part.md')].map((p) => p.textContent).join('')",
        pane(chat).replace('\'', "\\'")
    );
    Ok(browser.eval(&js).await?.as_str().unwrap_or_default().to_owned())
}

/// The reply of turn `i` in a fresh snapshot taken with the official client.
async fn snapshot_reply(client: &mut TestClient, chat: &str, i: usize) -> anyhow::Result<String> {
    client.subscribe(chat).await?;
    let state = client.mirror.chat(chat).ok_or_else(|| anyhow::anyhow!("no chat"))?;
    Ok(state.turns.get(i).map(turn_text).unwrap_or_default())
}

fn shots() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[tokio::test]
async fn the_page_starts_a_session_streams_the_reply_and_shows_another_clients_message_live() -> anyhow::Result<()> {
    let options = DaemonOptions {
        config: Some(json!({ "agents": { "echo": tests::agents::echo_paced(50) } })),
        args: vec!["--connection-token".into(), TOKEN.into()],
        ..DaemonOptions::default()
    };
    let daemon = Daemon::start_with(options).await?;
    let http = daemon.url.replace("ws://", "http://");
    let web = announced_page(&daemon).await?;
    assert_eq!(web, format!("{http}/?tkn={TOKEN}"), "the announcement names the page with its token");

    let mut browser = Browser::launch().await?;
    assert_eq!(browser.open(&web, 1280, 800).await?, 200);
    online(&mut browser).await?;
    assert_eq!(browser.eval("location.href").await?, json!(format!("{http}/")), "the token left the address bar");
    assert_eq!(browser.eval("sessionStorage.getItem('ahpd.token')").await?, json!(TOKEN), "and stays in the tab");
    let policy = browser
        .eval("fetch('/', { headers: { Accept: 'text/html' } }).then((r) => r.headers.get('content-security-policy'))")
        .await?;
    let policy = policy.as_str().unwrap_or_default();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{policy}");

    let chat = new_session_in_page(&mut browser, "echo").await?;
    // Every length the reply had on screen, to see it grow.
    browser
        .eval(&format!(
            "(() => {{ window.__growth = []; const log = document.querySelector('{} .log'); new MutationObserver(() => {{ const md = log.querySelector('.part.md'); const n = md ? md.textContent.length : 0; if (n && window.__growth[window.__growth.length - 1] !== n) window.__growth.push(n); }}).observe(log, {{ subtree: true, childList: true, characterData: true }}); return true; }})()",
            pane(&chat).replace('\'', "\\'")
        ))
        .await?;
    let message = (0..40).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
    send_in_page(&mut browser, &chat, &message).await?;
    turns_in_page(&mut browser, &chat, 1).await?;
    let growth = browser.eval("window.__growth").await?;
    let steps = growth.as_array().map_or(0, Vec::len);
    assert!(steps >= 2, "the reply was seen streaming, not all at once: {growth}");

    let shown = shown_reply(&mut browser, &chat, 0).await?;
    let mut client = TestClient::connect(&format!("{}/?tkn={TOKEN}", daemon.url), "checker").await?;
    assert_eq!(shown, snapshot_reply(&mut client, &chat, 0).await?, "the page shows the chat's text");
    assert_eq!(shown, message);

    // Another client's message appears in the page as it happens.
    let turn = client.turn(&chat, "from the other client").await?;
    turns_in_page(&mut browser, &chat, 2).await?;
    let said = browser
        .eval(&format!(
            "document.querySelectorAll('{} .turn')[1].querySelector('.msg').textContent",
            pane(&chat).replace('\'', "\\'")
        ))
        .await?;
    assert_eq!(said, json!("from the other client"));
    assert_eq!(shown_reply(&mut browser, &chat, 1).await?, turn_text(&turn));
    client.check_against_snapshot(&chat).await?;

    let seen = browser.observations().await?;
    assert_eq!(seen["errors"], json!([]), "no uncaught error: {seen}");
    assert_eq!(seen["foreign"], json!([]), "nothing asked of anywhere else: {seen}");
    assert_eq!(seen["violations"], json!([]), "the page keeps its own policy: {seen}");
    browser.close().await
}

#[tokio::test]
async fn the_notes_agents_confirmation_and_question_are_answered_in_the_page() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let config = json!({ "agents": { "notes": tests::agents::notes_in(notes.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    let chat = new_session_in_page(&mut browser, "notes").await?;

    send_in_page(&mut browser, &chat, "write hello.txt hi from the page").await?;
    // The session list says who waits for whom, and the pane offers the tool's own options.
    browser
        .wait_for("document.querySelector('.session.waiting .state')?.textContent === 'needs you: confirmation'")
        .await?;
    browser.click(&format!("{} .part.tool.pending-confirmation button[data-option=allow]", pane(&chat))).await?;
    turns_in_page(&mut browser, &chat, 1).await?;
    assert_eq!(std::fs::read_to_string(notes.path().join("hello.txt"))?, "hi from the page");

    send_in_page(&mut browser, &chat, "ask what colour?").await?;
    let field = format!("{} .part.inputRequest input[data-question]", pane(&chat));
    browser.type_into(&field, "green").await?;
    browser.press("Enter").await?;
    turns_in_page(&mut browser, &chat, 2).await?;

    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    client.subscribe(&chat).await?;
    let state = client.mirror.chat(&chat).ok_or_else(|| anyhow::anyhow!("no chat"))?.clone();
    assert_eq!(state.turns.len(), 2);
    for turn in &state.turns {
        assert_eq!(turn.state, ahp_types::state::TurnState::Complete, "{turn:?}");
    }
    let tool = serde_json::to_value(&state.turns[0].response_parts)?;
    assert!(tool.to_string().contains("\"status\":\"completed\""), "the write ran once allowed: {tool}");
    let answered = serde_json::to_value(&state.turns[1].response_parts)?.to_string();
    assert!(answered.contains("green"), "the answer reached the agent: {answered}");
    browser.close().await
}

#[tokio::test]
async fn after_ahpd_restart_the_page_reconnects_and_resumes_without_a_reload() -> anyhow::Result<()> {
    let home = Home::new()?;
    home.write_config(&tests::agents::echo_only())?;
    let port = free_port()?;
    let started = home.expect(0, &["start", "--port", &port.to_string(), "--without-connection-token"]).await?;
    let page = started.stdout.lines().find_map(|l| l.strip_prefix("web: ")).map(str::to_owned);
    assert_eq!(page, Some(format!("http://127.0.0.1:{port}/")), "{}", started.stdout);
    let page = page.unwrap_or_default();

    let mut browser = Browser::launch().await?;
    browser.open(&page, 1280, 800).await?;
    online(&mut browser).await?;
    let chat = new_session_in_page(&mut browser, "echo").await?;
    send_in_page(&mut browser, &chat, "before the restart").await?;
    turns_in_page(&mut browser, &chat, 1).await?;
    browser
        .eval("(() => { window.__sameDocument = true; window.__states = []; new MutationObserver(() => window.__states.push(document.body.dataset.connection)).observe(document.body, { attributes: true }); return true; })()")
        .await?;

    home.expect(0, &["restart"]).await?;
    browser.wait_for("window.__states.includes('offline') && document.body.dataset.connection === 'online'").await?;
    assert_eq!(browser.eval("window.__sameDocument === true").await?, json!(true), "no reload");
    let session = browser.eval(&format!("document.querySelector('{}').dataset.session", pane(&chat))).await?;
    let session = session.as_str().unwrap_or_default().to_owned();
    browser.wait_for(&format!("document.querySelector('.session[data-session=\"{session}\"]')")).await?;
    assert_eq!(shown_reply(&mut browser, &chat, 0).await?, "before the restart", "the chat is still there");

    // And it works as before.
    send_in_page(&mut browser, &chat, "after the restart").await?;
    turns_in_page(&mut browser, &chat, 2).await?;
    let mut client = TestClient::connect(&format!("ws://127.0.0.1:{port}"), "checker").await?;
    assert_eq!(shown_reply(&mut browser, &chat, 1).await?, snapshot_reply(&mut client, &chat, 1).await?);
    assert_eq!(shown_reply(&mut browser, &chat, 1).await?, "after the restart");
    browser.close().await?;
    home.expect(0, &["stop"]).await.map(|_| ())
}

#[tokio::test]
async fn a_reply_full_of_markup_runs_and_loads_nothing() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    let chat = new_session_in_page(&mut browser, "echo").await?;
    let payload = "<img src=x onerror=\"window.pwned='img'\"> <script>window.pwned='script'</script> \
                   [click me](javascript:window.pwned='link') <iframe src=\"/frame\"></iframe> \
                   ![pic](/picture.png) **bold** [ok](https://example.invalid/)";
    send_in_page(&mut browser, &chat, payload).await?;
    turns_in_page(&mut browser, &chat, 1).await?;
    let log = format!("document.querySelector('{} .log')", pane(&chat).replace('\'', "\\'"));
    browser.click(&format!("{} .md-inert-link", pane(&chat))).await?;
    let found = browser
        .eval(&format!(
            "({{ pwned: window.pwned ?? null, img: {log}.querySelectorAll('img').length, script: {log}.querySelectorAll('script').length, iframe: {log}.querySelectorAll('iframe').length, js: document.querySelectorAll('a[href^=\"javascript\"]').length, links: [...{log}.querySelectorAll('a')].map((a) => a.href), strong: {log}.querySelectorAll('.part.md strong').length, text: {log}.querySelector('.part.md').textContent }})"
        ))
        .await?;
    assert_eq!(found["pwned"], Value::Null, "nothing ran: {found}");
    assert_eq!(
        (found["img"].as_u64(), found["script"].as_u64(), found["iframe"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{found}"
    );
    assert_eq!(found["js"], json!(0), "no javascript: link: {found}");
    assert_eq!(found["links"], json!(["https://example.invalid/"]), "only a web address is a link: {found}");
    assert_eq!(found["strong"], json!(1), "markdown still renders: {found}");
    assert!(
        found["text"].as_str().unwrap_or_default().contains("<script>window.pwned='script'</script>"),
        "markup shows as text: {found}"
    );
    let seen = browser.observations().await?;
    assert_eq!(seen["dialogs"], json!([]), "{seen}");
    let requests: Vec<String> = serde_json::from_value(seen["requests"].clone())?;
    for asked in ["/x", "/frame", "/picture.png", "example.invalid"] {
        assert!(!requests.iter().any(|r| r.contains(asked)), "{asked} was requested: {requests:?}");
    }
    browser.close().await
}

#[tokio::test]
async fn a_wrong_token_gets_the_refusal_page_not_a_broken_app() -> anyhow::Result<()> {
    let options = DaemonOptions { args: vec!["--connection-token".into(), TOKEN.into()], ..DaemonOptions::default() };
    let daemon = Daemon::start_with(options).await?;
    let http = daemon.url.replace("ws://", "http://");
    let mut browser = Browser::launch().await?;
    assert_eq!(browser.open(&format!("{http}/?tkn=wrong"), 1280, 800).await?, 401);
    let page = browser.eval("({ refusal: document.querySelector('#refusal h1')?.textContent, why: document.querySelector('#refusal .why')?.textContent, app: typeof window.ahpd })").await?;
    assert_eq!(page["refusal"], json!("This daemon did not let you in"), "{page}");
    assert_eq!(page["why"], json!("Refused: wrong connection token."), "{page}");
    assert_eq!(page["app"], json!("undefined"), "no app runs: {page}");

    // A tab whose kept token went stale (the daemon's token changed) says the same, in the page.
    assert_eq!(browser.open(&format!("{http}/?tkn={TOKEN}"), 1280, 800).await?, 200);
    online(&mut browser).await?;
    browser.eval("sessionStorage.setItem('ahpd.token', 'stale')").await?;
    browser.goto(&format!("{http}/")).await?;
    let why = browser.wait_for("document.querySelector('#refusal .why')?.textContent").await?;
    assert_eq!(why, json!("Refused: wrong connection token."));

    // No token at all, on a daemon that wants one.
    browser.eval("sessionStorage.clear()").await?;
    assert_eq!(browser.goto(&format!("{http}/")).await?, 200);
    let why = browser.wait_for("document.querySelector('#refusal .why')?.textContent").await?;
    assert!(why.as_str().unwrap_or_default().contains("needs its connection token"), "{why}");
    browser.close().await
}

#[tokio::test]
async fn twenty_chats_stream_at_full_pace_with_no_long_task_and_a_long_reply_grows_by_its_deltas() -> anyhow::Result<()>
{
    let config = json!({ "agents": { "echo": tests::agents::echo_paced(0) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let mut chats = Vec::new();
    for _ in 0..20 {
        chats.push(client.create_session("echo", None).await?);
    }
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    browser.wait_for("window.ahpd.sessions.size === 20").await?;
    for (session, chat) in &chats {
        browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(session))).await?;
        browser.wait_for(&format!("window.ahpd.chats.has({})", js_str(chat))).await?;
    }
    let (_, long_chat) = chats[0].clone();
    // Every node added to the long reply, by the length of its text.
    browser
        .eval(&format!(
            "(() => {{ window.__added = 0; window.__records = 0; const log = document.querySelector('{} .log'); new MutationObserver((records) => {{ for (const r of records) {{ if (!r.target.closest?.('.parts')) continue; window.__records++; for (const n of r.addedNodes) window.__added += (n.textContent ?? '').length; }} }}).observe(log, {{ subtree: true, childList: true, characterData: true }}); window.__t0 = performance.now(); return true; }})()",
            pane(&long_chat).replace('\'', "\\'")
        ))
        .await?;
    let profile = std::env::var_os("AHPD_WINDOW_PROFILE").is_some();
    if profile {
        browser.call("profileStart", json!({})).await?;
    }
    let long: String = (0..2000).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let short: String = (0..300).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    for (i, (_, chat)) in chats.iter().enumerate() {
        client.send(chat, if i == 0 { &long } else { &short }).await?;
    }
    for (_, chat) in &chats {
        turns_in_page(&mut browser, chat, 1).await?;
    }
    let figures = browser
        .eval("({ longTasks: window.__longTasks.filter((t) => t.start >= window.__t0), added: window.__added, records: window.__records, ms: Math.round(performance.now() - window.__t0) })")
        .await?;
    eprintln!("twenty chats streaming: {figures}");
    if profile {
        eprintln!("where the page's time went: {:#}", browser.call("profileStop", json!({})).await?);
    }
    let long_tasks = figures["longTasks"].as_array().cloned().unwrap_or_default();
    let worst = long_tasks.iter().filter_map(|t| t["ms"].as_u64()).max().unwrap_or(0);
    assert!(worst <= 100, "a main-thread task took {worst} ms: {figures}");
    let shown = shown_reply(&mut browser, &long_chat, 0).await?;
    assert_eq!(shown, long, "the long reply is whole");
    let added = figures["added"].as_u64().unwrap_or(u64::MAX);
    let length = u64::try_from(long.len()).unwrap_or(0);
    assert!(added < 3 * length, "the long reply was drawn again and again: {added} characters added for {length}");
    for (_, chat) in &chats {
        client.check_against_snapshot(chat).await?;
    }
    browser.close().await
}

#[tokio::test]
async fn screenshots_with_twenty_sessions_and_a_long_streaming_reply() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let config = json!({ "agents": {
        "echo": tests::agents::echo_paced(0),
        "slow": tests::agents::echo_paced(40),
        "notes": tests::agents::notes_in(notes.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let topics = [
        "Refactor the store's compaction",
        "Why does the ACP worker restart?",
        "Write the changelog for 0.2",
        "Review PR 214: terminal channels",
        "Port the echo agent to pi",
        "Fix flaky reconnect test",
        "Explain the replay ring",
        "Draft the security page",
        "Benchmark fan-out at 64 clients",
        "Rename worker options",
        "Summarise yesterday's incidents",
        "Add a --json flag to status",
        "Check licence headers",
        "Tidy the CSS of the window",
        "Plan the worktree module",
        "Triage issue 31",
        "Update the README's quick start",
    ];
    let rich = "## Plan\n\nThe store keeps **every completed turn**; a crash loses nothing.\n\n- read the `sessions.db` schema\n- write a migration\n- run `scripts/test`\n\n```rust\nfn main() {\n    println!(\"hello\");\n}\n```\n\n| step | state |\n| --- | --- |\n| design | done |\n| build | running |\n";
    let mut first = None;
    for (i, topic) in topics.iter().enumerate() {
        let (_, chat) = client.create_session("echo", None).await?;
        client.turn(&chat, topic).await?;
        if i == topics.len() - 1 {
            client.turn(&chat, rich).await?;
            first = Some(chat);
        }
    }
    let (waiting, waiting_chat) = client.create_session("notes", None).await?;
    client.send(&waiting_chat, "write plan.md the plan").await?;
    client.until_waiting_calls(&waiting_chat, 1).await?;
    let (_, failed_chat) = client.create_session("notes", None).await?;
    client.turn(&failed_chat, "error").await?;
    let (streaming, streaming_chat) = client.create_session("slow", None).await?;
    let long_markdown = format!("{}\n\n{}", rich, (0..600).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" "));
    client.send(&streaming_chat, &long_markdown).await?;
    let mut browser = Browser::launch().await?;
    let dir = shots()?;
    for (width, height) in [(1280u32, 800u32), (800, 900)] {
        browser.open(&announced_page(&daemon).await?, width, height).await?;
        online(&mut browser).await?;
        browser.wait_for("window.ahpd.sessions.size === 20").await?;
        if let Some(chat) = &first {
            let session = chat.replace("ahp-chat:", "ahp-session:");
            browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(&session))).await?;
        }
        for session in [&waiting, &streaming] {
            browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(session))).await?;
        }
        browser
            .wait_for(&format!(
                "window.ahpd.chats.get({})?.activeTurn?.responseParts[0]?.content.length > 400",
                js_str(&streaming_chat)
            ))
            .await?;
        let path = dir.join(format!("window-{width}x{height}.png"));
        browser.screenshot(&path).await?;
        assert!(std::fs::metadata(&path)?.len() > 10_000, "{} was written", path.display());
    }
    browser.close().await
}

#[tokio::test]
async fn queue_steer_and_stop_a_running_turn_from_the_page() -> anyhow::Result<()> {
    let config = json!({ "agents": { "echo": tests::agents::echo_paced(40) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    let chat = new_session_in_page(&mut browser, "echo").await?;
    let p = pane(&chat);
    let quoted = p.replace('\'', "\\'");
    let words = |n: usize| (0..n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let running = format!("window.ahpd.chats.get({})?.activeTurn?.responseParts.length > 0", js_str(&chat));
    send_in_page(&mut browser, &chat, &words(60)).await?;
    browser.wait_for(&running).await?;

    // While it runs, Enter queues and Steer hands a message to the running turn.
    send_in_page(&mut browser, &chat, "queued one").await?;
    browser
        .wait_for(&format!(
            "document.querySelector('{quoted} .pending-item.queued')?.textContent.includes('queued one')"
        ))
        .await?;
    browser.type_into(&format!("{p} textarea"), "steer me").await?;
    browser.click(&format!("{p} button[data-action=steer]")).await?;
    // The turn ends, and the queued message starts as the next.
    turns_in_page(&mut browser, &chat, 2).await?;
    browser.wait_for(&format!("!document.querySelector('{quoted} .pending-item')")).await?;

    // Stop cancels a running turn.
    send_in_page(&mut browser, &chat, &words(400)).await?;
    browser.wait_for(&running).await?;
    browser.click(&format!("{p} button[data-action=stop]")).await?;
    turns_in_page(&mut browser, &chat, 3).await?;

    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    client.subscribe(&chat).await?;
    let turns = client.mirror.chat(&chat).context_chat()?.turns.clone();
    assert!(turn_text(&turns[0]).contains("(steered: steer me)"), "{}", turn_text(&turns[0]));
    assert_eq!(turns[1].message.text, "queued one");
    assert_eq!(turns[1].state, ahp_types::state::TurnState::Complete);
    assert_eq!(turns[2].state, ahp_types::state::TurnState::Cancelled);
    // Markdown draws a blank line as a paragraph break: the words are the same.
    let words_of = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (i, turn) in turns.iter().enumerate() {
        assert_eq!(words_of(&shown_reply(&mut browser, &chat, i).await?), words_of(&turn_text(turn)), "turn {i}");
    }
    browser.close().await
}

#[tokio::test]
async fn a_session_started_with_its_settings_is_renamed_archived_found_and_deleted_in_the_page() -> anyhow::Result<()> {
    let notes = tempfile::tempdir()?;
    let folder = tempfile::tempdir()?;
    let config = json!({ "agents": { "echo": tests::agents::echo(), "notes": tests::agents::notes_in(notes.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;

    // New session on notes, in a folder, with "ask before" set to never from the agent's schema.
    browser.click("button[data-action=new]").await?;
    browser
        .eval("(() => { const s = document.querySelector('dialog.new-session select[name=agent]'); s.value = 'notes'; s.dispatchEvent(new Event('change')); return true; })()")
        .await?;
    browser.wait_for("document.querySelector('dialog.new-session select[name=ask]')").await?;
    browser
        .eval(&format!(
            "(() => {{ const s = document.querySelector('dialog.new-session select[name=ask]'); s.value = JSON.stringify('never'); s.dispatchEvent(new Event('change')); document.querySelector('dialog.new-session input[name=folder]').value = {}; return true; }})()",
            js_str(&folder.path().display().to_string())
        ))
        .await?;
    browser
        .wait_for("document.querySelector('dialog.new-session select[name=ask]').value === JSON.stringify('never')")
        .await?;
    browser.click("dialog.new-session button[data-action=create]").await?;
    let chat = browser.wait_for("document.querySelector('.pane')?.dataset.chat").await?;
    let chat = chat.as_str().unwrap_or_default().to_owned();
    browser
        .wait_for(&format!(
            "window.ahpd.chats.has({}) && !document.querySelector('.pane textarea').disabled",
            js_str(&chat)
        ))
        .await?;
    let session = chat.replace("ahp-chat:", "ahp-session:");
    send_in_page(&mut browser, &chat, "write unasked.txt no question").await?;
    turns_in_page(&mut browser, &chat, 1).await?;
    assert_eq!(std::fs::read_to_string(notes.path().join("unasked.txt"))?, "no question", "ask: never was taken");
    let mut client = TestClient::connect(&daemon.url, "checker").await?;
    client.subscribe(&session).await?;
    let state = client.mirror.session(&session).context_session()?;
    let folder_uri = state.working_directories.clone().unwrap_or_default();
    assert!(folder_uri.first().is_some_and(|u| u.ends_with(&folder.path().display().to_string())), "{folder_uri:?}");

    // Rename.
    let p = pane(&chat);
    browser.click(&format!("{p} button[data-action=rename]")).await?;
    browser.type_into(&format!("{p} .pane-title input.rename"), "Renamed in the page").await?;
    browser.press("Enter").await?;
    client.until("the new title", |m| m.session(&session).is_some_and(|s| s.title == "Renamed in the page")).await?;
    browser.wait_for(&format!("document.querySelector('.session[data-session=\"{session}\"] .title')?.textContent === 'Renamed in the page'")).await?;

    // Search finds it by its title and hides the rest.
    let (other, _) = client.create_session("echo", None).await?;
    browser.wait_for(&format!("document.querySelector('.session[data-session=\"{other}\"]')")).await?;
    browser.type_into(".side input[type=search]", "renamed").await?;
    browser.wait_for(&format!("!document.querySelector('.session[data-session=\"{other}\"]') && document.querySelector('.session[data-session=\"{session}\"]')")).await?;
    browser.eval("(() => { const s = document.querySelector('.side input[type=search]'); s.value = ''; s.dispatchEvent(new Event('input')); return true; })()").await?;

    // Archive: it leaves "All" for "Archived".
    browser.click(&format!("{p} button[data-action=archive]")).await?;
    client.until("archived", |m| m.session(&session).is_some_and(|s| s.status & 64 != 0)).await?;
    browser.wait_for(&format!("!document.querySelector('.session[data-session=\"{session}\"]')")).await?;
    browser.click(".filter[data-filter=archived]").await?;
    browser.wait_for(&format!("document.querySelector('.session[data-session=\"{session}\"]')")).await?;

    // Delete, after saying yes.
    browser.click(&format!("{p} button[data-action=delete]")).await?;
    browser.click("dialog.ask button[data-action=confirm]").await?;
    browser
        .wait_for(&format!(
            "!document.querySelector('{}') && !document.querySelector('.session[data-session=\"{session}\"]')",
            p.replace('\'', "\\'")
        ))
        .await?;
    let listed = client.request("listSessions", json!({ "channel": "ahp-root://" })).await?;
    assert!(!listed.to_string().contains(&session), "deleted: {listed}");
    browser.close().await
}

trait Found<T> {
    fn context_chat(self) -> anyhow::Result<T>;
    fn context_session(self) -> anyhow::Result<T>;
}

impl<T> Found<T> for Option<T> {
    fn context_chat(self) -> anyhow::Result<T> {
        self.ok_or_else(|| anyhow::anyhow!("the client holds no such chat"))
    }
    fn context_session(self) -> anyhow::Result<T> {
        self.ok_or_else(|| anyhow::anyhow!("the client holds no such session"))
    }
}

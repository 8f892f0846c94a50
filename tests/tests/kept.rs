//! Content a tool returns inline, kept by the host (seed 004's `storeToolResultResource`): a
//! picture an agent's tool returned is kept in the session's folder and named in the call's result
//! by a `session-db-resource:` reference, which `resourceRead` through the official client answers
//! byte for byte for the session it was kept for (and refuses for another session, or a reference
//! nothing was kept under), after a `kill -9` of the daemon and a restart too; a picture over
//! `toolResultResourceLimitBytes` is left out with a sentence. Through the scripted ACP agent's
//! `image` block and the real `claude` CLI calling a real MCP server's screenshot tool.

use std::path::Path;

use ahp_types::commands::{ContentEncoding, ResourceReadParams};
use ahp_types::state::{ToolCallState, ToolResultContent, Turn, TurnState};
use base64::Engine;
use serde_json::{json, Value};
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::pictures::{disc, noise};
use tests::turns::tool_calls;
use tests::{Daemon, DaemonOptions, TestClient};

/// The bound the daemons here keep content under: the disc fits, the noise does not.
const BOUND: u64 = 8 * 1024;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The result contents of each completed call of a turn, in order.
fn results_of(turn: &Turn) -> Vec<Vec<ToolResultContent>> {
    tool_calls(&turn.response_parts)
        .into_iter()
        .filter_map(|call| match call {
            ToolCallState::Completed(done) => Some(done.content.clone().unwrap_or_default()),
            _ => None,
        })
        .collect()
}

/// The reference a result names kept content by.
fn reference(content: &[ToolResultContent]) -> Option<(String, Option<i64>, Option<String>)> {
    content.iter().find_map(|c| match c {
        ToolResultContent::Resource(r) => Some((r.uri.clone(), r.size_hint, r.content_type.clone())),
        _ => None,
    })
}

fn texts(content: &[ToolResultContent]) -> Vec<String> {
    content
        .iter()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

/// `resourceRead` through the official client (which names the root channel), its bytes decoded.
async fn read(client: &TestClient, uri: &str) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    let params = ResourceReadParams { channel: String::new(), meta: None, uri: uri.into(), encoding: None };
    let answer = client.client.resource_read(params).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(answer.encoding == ContentEncoding::Base64, "binary comes as base64: {:?}", answer.encoding);
    Ok((base64::engine::general_purpose::STANDARD.decode(answer.data)?, answer.content_type))
}

/// `resourceRead` naming `channel` (a session or a chat, as the web window names the session it
/// shows), its bytes decoded; or the sentence it was refused with.
async fn read_through(client: &TestClient, channel: &str, uri: &str) -> Result<Vec<u8>, String> {
    let answer = client.request("resourceRead", json!({ "channel": channel, "uri": uri })).await;
    let answer = answer.map_err(|e| e.to_string())?;
    let data = answer["data"].as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| e.to_string())
}

fn scripted() -> Value {
    let fake = repo().join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string();
    json!({ "kind": "acp", "displayName": "Scripted ACP", "options": { "command": "python3", "args": [fake] } })
}

#[tokio::test]
async fn an_acp_agents_picture_is_kept_read_back_byte_for_byte_and_kept_after_a_kill_9() -> anyhow::Result<()> {
    let folder = tempfile::Builder::new().prefix("ahpd-kept-").tempdir()?;
    let (shot, big) = (disc(96, 64), noise(64, 64, 7));
    std::fs::write(folder.path().join("shot.png"), &shot)?;
    std::fs::write(folder.path().join("big.png"), &big)?;
    let config = json!({ "agents": { "scripted": scripted() }, "toolResultResourceLimitBytes": BOUND });
    let home = tempfile::Builder::new().prefix("ahpd-kept-home-").tempdir()?;
    let mut first = Daemon::start_in(home.path(), DaemonOptions::with_config(config.clone())).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session_in("scripted", folder.path()).await?;
    let turn = a.turn(&chat, "image shot.png; image big.png; say done").await?;
    assert_eq!(turn.state, TurnState::Complete);
    let results = results_of(&turn);
    assert_eq!(results.len(), 2, "{results:?}");

    // The picture: its text, then the reference it is kept under, read back byte for byte.
    assert_eq!(texts(&results[0]), ["took shot.png"]);
    let (uri, size, kind) = reference(&results[0]).expect("the picture is named by a reference");
    assert!(uri.starts_with("session-db-resource:/"), "{uri}");
    assert_eq!((size, kind.as_deref()), (Some(shot.len() as i64), Some("image/png")));
    assert_eq!(read(&a, &uri).await?, (shot.clone(), Some("image/png".into())));
    assert_eq!(read_through(&a, &session, &uri).await, Ok(shot.clone()), "through its session too");
    assert_eq!(read_through(&a, &chat, &uri).await, Ok(shot.clone()), "and its chat");

    // Over the bound: left out, with a sentence in its place.
    assert_eq!(reference(&results[1]), None, "{:?}", results[1]);
    let over = format!(
        "An image of {} was left out: over toolResultResourceLimitBytes (8 KiB).",
        protocol::kept::size_words(big.len() as u64)
    );
    assert_eq!(texts(&results[1]), ["took big.png".to_owned(), over]);

    // Another session's reference, and one nothing was kept under, are refused in a sentence.
    let (other, _) = a.create_session_in("scripted", folder.path()).await?;
    let why = read_through(&a, &other, &uri).await.expect_err("another session's");
    assert!(why.contains(&format!("{uri} was kept for another session, not {other}")), "{why}");
    let unknown = format!("{}9", uri);
    let why = read(&a, &unknown).await.expect_err("nothing kept there").to_string();
    assert!(why.contains(&format!("ahpd keeps no content at {unknown}")), "{why}");
    a.check_against_snapshot(&chat).await?;
    drop(a);

    // kill -9, and a new daemon on the same folders: the call names the same reference, and it
    // reads back the same bytes.
    first.kill9().await?;
    let second = Daemon::start_in(home.path(), DaemonOptions::with_config(config)).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let again = b.mirror.chat(&chat).and_then(|c| c.turns.first().cloned()).expect("the turn was kept");
    assert_eq!(reference(&results_of(&again)[0]).map(|r| r.0), Some(uri.clone()));
    assert_eq!(read(&b, &uri).await?.0, shot);

    // Deleting the session lets its kept content go.
    b.request("disposeSession", json!({ "channel": session })).await?;
    let why = read(&b, &uri).await.expect_err("gone").to_string();
    assert!(why.contains("There is no session"), "{why}");
    Ok(())
}

#[tokio::test]
async fn a_screenshot_an_mcp_tool_returns_through_the_real_claude_cli_is_kept_shown_and_read_back_after_a_kill_9(
) -> anyhow::Result<()> {
    use tests::browser::{announced_page, js_str, online, pane, Browser};
    let mock = MockAnthropic::start().await?;
    let folder = tempfile::Builder::new().prefix("ahpd-kept-claude-").tempdir()?;
    let home = tempfile::Builder::new().prefix("ahpd-kept-claude-home-").tempdir()?;
    let (shot, big) = (disc(480, 320), noise(64, 64, 11));
    std::fs::write(folder.path().join("shot.png"), &shot)?;
    std::fs::write(folder.path().join("big.png"), &big)?;
    let script = repo().join("tests/mcp/server.py");
    let probe = json!({ "type": "stdio", "command": tests::mcp::python(), "args": [script] });
    let mut claude = claude_entry(&mock);
    // The server's tools would hide behind the CLI's tool search otherwise.
    claude["env"]["ENABLE_TOOL_SEARCH"] = json!("false");
    let config = json!({
        "agents": { "claude": claude },
        "mcpServers": { "probe": probe },
        "toolResultResourceLimitBytes": BOUND,
    });
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(config.clone())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("claude", folder.path()).await?;
    let turn = screenshot(&mut a, &chat, &folder.path().join("shot.png")).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let results = results_of(&turn);
    let (uri, size, kind) = results.iter().find_map(|r| reference(r)).unwrap_or_else(|| {
        panic!("the screenshot is named by a reference: {}", serde_json::to_string(&turn).unwrap_or_default())
    });
    assert_eq!((size, kind.as_deref()), (Some(shot.len() as i64), Some("image/png")));
    assert_eq!(read(&a, &uri).await?.0, shot, "byte for byte");
    assert_eq!(read_through(&a, &session, &uri).await, Ok(shot.clone()));

    let turn = screenshot(&mut a, &chat, &folder.path().join("big.png")).await?;
    let shown: Vec<String> = results_of(&turn).iter().flat_map(|r| texts(r)).collect();
    let over = format!(
        "An image of {} was left out: over toolResultResourceLimitBytes (8 KiB).",
        protocol::kept::size_words(big.len() as u64)
    );
    assert!(shown.contains(&over), "{shown:?}");
    assert!(results_of(&turn).iter().all(|r| reference(r).is_none()));
    a.check_against_snapshot(&chat).await?;

    // The page draws the screenshot in the call's result: its own bytes, decoded.
    let mut browser = Browser::launch().await?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(&session))).await?;
    let inline = format!("{} .kept-image img", pane(&chat));
    let drawn = browser.wait_for(&drawn_js(&inline)).await?;
    browser
        .eval(&format!("document.querySelector({}).scrollIntoView({{ block: 'center' }}) || true", js_str(&inline)))
        .await?;
    browser.screenshot(&shots()?.join("kept-claude.png")).await?;
    assert_eq!((drawn["natural"].clone(), drawn["rgb"].clone()), (json!([480, 320]), json!([30, 60, 220])), "{drawn}");
    browser.close().await?;
    drop(a);

    // kill -9, and a daemon started again on the same folders names the same reference.
    daemon.kill9().await?;
    let again = Daemon::start_in(home.path(), DaemonOptions::with_config(config)).await?;
    let mut b = TestClient::connect(&again.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let first = b.mirror.chat(&chat).and_then(|c| c.turns.first().cloned()).expect("the turn was kept");
    assert_eq!(results_of(&first).iter().find_map(|r| reference(r)).map(|r| r.0), Some(uri.clone()));
    assert_eq!(read(&b, &uri).await?.0, shot, "the same bytes after the restart");
    Ok(())
}

/// A turn in which the model calls the probe server's screenshot of `picture`, which the person
/// allows when the CLI asks.
async fn screenshot(client: &mut TestClient, chat: &str, picture: &Path) -> anyhow::Result<Turn> {
    let args = json!({ "path": picture.display().to_string() });
    let turn_id = client.send(chat, &format!("look TOOL:mcp__probe__screenshot ARGS:{args}")).await?;
    let waiting = client.until_waiting_calls(chat, 1).await?;
    client.confirm(chat, &waiting[0].0, &waiting[0].1, true).await?;
    client.finished(chat, &turn_id).await
}

fn shots() -> anyhow::Result<std::path::PathBuf> {
    let dir = repo().join("target").join("window-shots");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The pixel at the middle of the picture drawn in `selector`, read from the page's own decoded
/// image (a canvas of it): `[r, g, b]`, and its natural size.
fn drawn_js(selector: &str) -> String {
    format!(
        r#"(() => {{
  const img = document.querySelector({});
  if (!img || !img.complete || !img.naturalWidth) return null;
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const p = g.getImageData(c.width / 2, c.height / 2, 1, 1).data;
  const r = img.getBoundingClientRect();
  return {{ rgb: [p[0], p[1], p[2]], natural: [img.naturalWidth, img.naturalHeight], shown: [Math.round(r.width), Math.round(r.height)] }};
}})()"#,
        tests::browser::js_str(selector)
    )
}

#[tokio::test]
async fn the_window_shows_a_kept_picture_inline_enlarges_it_on_a_click_and_offers_a_file_as_a_download(
) -> anyhow::Result<()> {
    use tests::browser::{announced_page, js_str, online, pane, Browser};
    let folder = tempfile::Builder::new().prefix("ahpd-kept-window-").tempdir()?;
    let (shot, big) = (disc(480, 320), noise(64, 64, 5));
    anyhow::ensure!((shot.len() as u64) < BOUND, "the disc fits the bound: {} bytes", shot.len());
    let report = b"%PDF-1.4 a report the tool exported\n".to_vec();
    std::fs::write(folder.path().join("shot.png"), &shot)?;
    std::fs::write(folder.path().join("big.png"), &big)?;
    std::fs::write(folder.path().join("report.pdf"), &report)?;
    let config = json!({ "agents": { "scripted": scripted() }, "toolResultResourceLimitBytes": BOUND });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat) = client.create_session_in("scripted", folder.path()).await?;
    let script = "image shot.png; image big.png; resource report.pdf application/pdf; say all three";
    assert_eq!(client.turn(&chat, script).await?.state, TurnState::Complete);

    let mut browser = Browser::launch().await?;
    let dir = shots()?;
    browser.open(&announced_page(&daemon).await?, 1280, 800).await?;
    online(&mut browser).await?;
    browser.wait_for(&format!("window.ahpd.sessions.has({})", js_str(&session))).await?;
    browser.eval(&format!("window.ahpd.open({}).then(() => true)", js_str(&session))).await?;
    let inline = format!("{} .kept-image img", pane(&chat));
    let drawn = browser.wait_for(&drawn_js(&inline)).await?;
    browser
        .eval(&format!("document.querySelector({}).scrollIntoView({{ block: 'center' }}) || true", js_str(&inline)))
        .await?;
    browser.screenshot(&dir.join("kept-inline.png")).await?;
    eprintln!("inline: {drawn}");
    assert_eq!(drawn["natural"], json!([480, 320]), "the picture's own bytes, decoded: {drawn}");
    assert_eq!(drawn["rgb"], json!([30, 60, 220]), "its blue disc in the middle: {drawn}");
    // The picture over the bound is a sentence, not an image.
    let over = format!(
        "An image of {} was left out: over toolResultResourceLimitBytes (8 KiB).",
        protocol::kept::size_words(big.len() as u64)
    );
    // (Its call's Output opened, as a person opens it.)
    let opened = format!(
        "[...document.querySelectorAll({})].forEach((d) => {{ d.open = true; }}) || document.querySelector({}).innerText",
        js_str(&format!("{} details.tool-body", pane(&chat))),
        js_str(&pane(&chat))
    );
    let said = browser.eval(&opened).await?;
    assert!(said.as_str().is_some_and(|t| t.contains(&over)), "{said}");
    browser.screenshot(&dir.join("kept-left-out.png")).await?;
    assert_eq!(browser.eval(&format!("document.querySelectorAll({}).length", js_str(&inline))).await?, json!(1));

    // A click enlarges it over the page; Close closes it.
    browser.click(&format!("{} .kept-image", pane(&chat))).await?;
    let large = browser.wait_for(&drawn_js("dialog.kept-large[open] img")).await?;
    browser.screenshot(&dir.join("kept-enlarged.png")).await?;
    eprintln!("enlarged: {large}");
    let (small_w, large_w) = (drawn["shown"][0].as_i64().unwrap_or(0), large["shown"][0].as_i64().unwrap_or(0));
    assert!(large_w > small_w * 2, "larger than inline: {drawn} then {large}");
    browser.click_text("dialog.kept-large", "Close").await?;
    browser.wait_for("!document.querySelector('dialog.kept-large')").await?;

    // The file is offered as a download of its own bytes, under a name with its type's extension.
    browser
        .eval(
            r#"(() => {
  window.__made = [];
  const make = URL.createObjectURL;
  URL.createObjectURL = (blob) => { const url = make.call(URL, blob); window.__made.push([url, blob]); return url; };
  window.__saved = [];
  HTMLAnchorElement.prototype.click = function () { window.__saved.push([this.href, this.download]); };
  return true;
})()"#,
        )
        .await?;
    browser.click_text(&pane(&chat), "Download").await?;
    let saved = browser
        .wait_for(
            r#"(async () => {
  const [href, name] = window.__saved[0] ?? [];
  if (!href) return null;
  const blob = window.__made.find(([url]) => url === href)?.[1];
  const bytes = new Uint8Array(await blob.arrayBuffer());
  return { name, type: blob.type, text: new TextDecoder().decode(bytes) };
})()"#,
        )
        .await?;
    browser.screenshot(&dir.join("kept-download.png")).await?;
    assert_eq!(saved["type"], "application/pdf", "{saved}");
    assert_eq!(saved["text"].as_str(), std::str::from_utf8(&report).ok(), "{saved}");
    assert!(saved["name"].as_str().is_some_and(|n| n.ends_with("-0.pdf")), "{saved}");
    browser.close().await?;
    Ok(())
}

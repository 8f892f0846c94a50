//! A message's attachments reach the model on every backend, in the form that backend takes, and
//! what cannot reach it is refused in the action's `rejectionReason` with the chat left as it was.
//!
//! Through the official client and the real programs on the mock model APIs: the real `claude`
//! CLI (images and PDFs as content blocks of their own, the rest as text), the real pi (images in
//! its prompt, the rest as text), and the real claude-agent-acp over ACP (the blocks its
//! `promptCapabilities` declare). The mocks' logged requests are the evidence of what the model
//! saw. A file is read from the session's folder, a selection cut to its lines.

use std::path::Path;

use ahp_types::state::{
    Message, MessageAttachment, MessageEmbeddedResourceAttachment, MessageResourceAttachment, TextPosition, TextRange,
    TextSelection, TurnState,
};
use base64::Engine;
use serde_json::{json, Value};
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::mocks::openai::MockOpenAi;
use tests::{user_message, Daemon, DaemonOptions, TestClient};

/// The limit the daemons here run with, small enough to pass with a file.
const LIMIT: u64 = 4096;
/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const NOTES: &str = "The secret word is PAPAYA.\nalpha line\nbeta line\ngamma line\n";

/// A session folder holding `notes.txt` and a file over the limit.
fn folder() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("ahpd-attach-").tempdir()?;
    std::fs::write(dir.path().join("notes.txt"), NOTES)?;
    std::fs::write(dir.path().join("big.txt"), "x".repeat(usize::try_from(LIMIT)? + 1000))?;
    Ok(dir)
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The file, as a client names it.
fn file(dir: &Path, name: &str) -> MessageAttachment {
    MessageAttachment::Resource(MessageResourceAttachment {
        label: name.into(),
        range: None,
        display_kind: Some("document".into()),
        meta: None,
        uri: file_uri(&dir.join(name)),
        size_hint: None,
        content_type: None,
        nonce: None,
        selection: None,
    })
}

/// Lines 2–3 of `notes.txt`, as an editor's selection.
fn selection(dir: &Path) -> MessageAttachment {
    let MessageAttachment::Resource(mut resource) = file(dir, "notes.txt") else { unreachable!() };
    resource.label = "notes.txt:2-3".into();
    resource.display_kind = Some("selection".into());
    resource.selection = Some(TextSelection {
        range: TextRange { start: TextPosition { line: 1, character: 0 }, end: TextPosition { line: 2, character: 9 } },
    });
    MessageAttachment::Resource(resource)
}

fn embedded(label: &str, content_type: &str, data: String) -> MessageAttachment {
    MessageAttachment::EmbeddedResource(MessageEmbeddedResourceAttachment {
        label: label.into(),
        range: None,
        display_kind: None,
        meta: None,
        data,
        content_type: content_type.into(),
        selection: None,
    })
}

fn with(text: &str, attachments: Vec<MessageAttachment>) -> Message {
    let mut message = user_message(text);
    message.attachments = Some(attachments);
    message
}

/// Creates a session on `provider` in `dir` and subscribes to it and its default chat.
async fn session_in(client: &mut TestClient, provider: &str, dir: &Path) -> anyhow::Result<(String, String)> {
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    let params = json!({ "channel": session, "provider": provider, "workingDirectories": [file_uri(dir)] });
    client.request("createSession", params).await.map_err(|e| anyhow::anyhow!("createSession: {e}"))?;
    client.subscribe(&session).await?;
    let s = session.clone();
    client
        .until("the session to be ready", move |m| {
            m.session(&s).is_some_and(|st| {
                st.lifecycle == ahp_types::state::SessionLifecycle::Ready && st.default_chat.is_some()
            })
        })
        .await?;
    let chat = client.mirror.session(&session).and_then(|s| s.default_chat.clone()).unwrap_or_default();
    client.subscribe(&chat).await?;
    Ok((session, chat))
}

/// Sends `message` and insists it is refused with words holding `says`; the chat is as it was.
async fn refused(client: &mut TestClient, chat: &str, message: Message, says: &str) -> anyhow::Result<()> {
    let before = client.mirror.chat(chat).cloned();
    let (_, seq) = client.send_message(chat, message).await?;
    let echo = client.echo_of(seq).await?;
    let reason = echo.rejection_reason.unwrap_or_default();
    assert!(reason.contains(says), "refused with {reason:?}, expected {says:?}");
    client.check_against_snapshot(chat).await?;
    let after = client.mirror.chat(chat).cloned();
    assert_eq!(
        before.map(|c| (c.turns.len(), c.active_turn.is_some())),
        after.map(|c| (c.turns.len(), c.active_turn.is_some())),
        "the chat is unchanged"
    );
    Ok(())
}

/// The texts of the content blocks of the last user message of an Anthropic request.
fn last_user_blocks(request: &tests::mocks::anthropic::RecordedRequest) -> Vec<Value> {
    let messages = request.messages();
    let last = messages.iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or(Value::Null);
    match &last["content"] {
        Value::Array(blocks) => blocks.clone(),
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

fn texts(blocks: &[Value]) -> Vec<String> {
    blocks.iter().filter_map(|b| b["text"].as_str().map(str::to_owned)).collect()
}

/// Asserts the file and the selection are in `seen` (what the model was sent), each with its label
/// and where it is from, and the selection cut to its lines.
fn saw_file_and_selection(seen: &str, dir: &Path) {
    let uri = file_uri(&dir.join("notes.txt"));
    assert!(seen.contains("The secret word is PAPAYA."), "the file's content reached the model:\n{seen}");
    assert!(seen.contains(&format!("label=\"notes.txt\" location=\"{uri}\"")), "with its label and location:\n{seen}");
    assert!(
        seen.contains(&format!("label=\"notes.txt:2-3\" location=\"{uri}, lines 2-3\" kind=\"selection\">\nalpha line\nbeta line\n</attachment>")),
        "the selection, cut to its lines:\n{seen}"
    );
}

#[tokio::test]
async fn claude_is_handed_a_file_a_selection_and_an_image_and_refuses_what_it_cannot_take() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let dir = folder()?;
    let config = json!({ "attachmentLimitBytes": LIMIT, "agents": { "claude": claude_entry(&mock) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "claude", dir.path()).await?;

    let image = embedded("dot.png", "image/png", PNG.into());
    let message = with("what do these say?", vec![file(dir.path(), "notes.txt"), selection(dir.path()), image]);
    let (turn_id, _) = a.send_message(&chat, message).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");

    let requests = mock.turn_requests();
    let blocks = last_user_blocks(requests.last().ok_or_else(|| anyhow::anyhow!("no request"))?);
    saw_file_and_selection(&texts(&blocks).join("\n"), dir.path());
    let images: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "image").collect();
    assert_eq!(images.len(), 1, "the image reached the model as an image block: {blocks:?}");
    assert_eq!(images[0]["source"]["type"], "base64");
    assert_eq!(images[0]["source"]["media_type"], "image/png");
    assert!(images[0]["source"]["data"].as_str().is_some_and(|d| !d.is_empty()));
    // The words follow the attachments (the CLI notes where it saved the image after them).
    let said = texts(&blocks);
    let words = said.iter().position(|t| t.trim() == "what do these say?");
    let content = said.iter().position(|t| t.contains("PAPAYA"));
    assert!(words.is_some() && content < words, "the words follow the attachments: {said:?}");

    // What cannot reach the model is refused, naming why, and the chat is left as it was.
    let zip =
        embedded("archive.zip", "application/zip", base64::engine::general_purpose::STANDARD.encode(b"PK\x03\x04"));
    refused(
        &mut a,
        &chat,
        with("unpack this", vec![zip]),
        "The claude agent cannot take application/zip attachments (\"archive.zip\")",
    )
    .await?;
    refused(&mut a, &chat, with("read this", vec![file(dir.path(), "big.txt")]), &format!("Attachment \"big.txt\" is {} bytes; the largest attachment the claude agent is handed is {LIMIT} bytes (attachmentLimitBytes)", LIMIT + 1000)).await?;
    let pasted =
        embedded("pasted.txt", "text/plain", base64::engine::general_purpose::STANDARD.encode("y".repeat(5000)));
    refused(&mut a, &chat, with("and this", vec![pasted]), "(attachmentLimitBytes)").await?;
    refused(&mut a, &chat, with("and this", vec![file(dir.path(), "missing.txt")]), "There is no file at").await?;
    let before = mock.turn_requests().len();
    let next = a.turn(&chat, "still here?").await?;
    assert_eq!(next.state, TurnState::Complete);
    assert_eq!(mock.turn_requests().len(), before + 1, "nothing refused reached the model");
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn pi_is_handed_a_file_and_a_selection_as_text_and_refuses_a_pdf() -> anyhow::Result<()> {
    let mock = MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    std::fs::write(agent_dir.path().join("models.json"), mock.pi_models_json("mock").to_string())?;
    let settings = json!({ "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true });
    std::fs::write(agent_dir.path().join("settings.json"), settings.to_string())?;
    let config = json!({ "attachmentLimitBytes": LIMIT, "agents": { "pi": { "kind": "pi", "options": {
        "command": tests::installed::pi_bin().display().to_string(), "agentDir": agent_dir.path().display().to_string() } } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let dir = folder()?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "pi", dir.path()).await?;

    let message = with("what do these say?", vec![file(dir.path(), "notes.txt"), selection(dir.path())]);
    let (turn_id, _) = a.send_message(&chat, message).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let requests = mock.requests();
    let seen =
        requests.iter().rev().find(|r| r.path.contains("chat/completions")).map(|r| r.all_text()).unwrap_or_default();
    saw_file_and_selection(&seen, dir.path());
    assert!(seen.trim_end().ends_with("what do these say?"), "the words come last:\n{seen}");

    let pdf = embedded("report.pdf", "application/pdf", base64::engine::general_purpose::STANDARD.encode(b"%PDF-1.4"));
    refused(
        &mut a,
        &chat,
        with("summarise", vec![pdf]),
        "The pi agent cannot take application/pdf attachments (\"report.pdf\"); it takes text and image/png",
    )
    .await?;
    refused(&mut a, &chat, with("read", vec![file(dir.path(), "big.txt")]), "(attachmentLimitBytes)").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_is_handed_a_file_and_a_selection_as_its_prompt_takes_them() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let mut entry = acp_adapter_entry(&claude_agent_acp(), &mock, home.path());
    entry["displayName"] = json!("Claude (ACP)");
    let config = json!({ "attachmentLimitBytes": LIMIT, "agents": { "claude-acp": entry } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let dir = folder()?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = session_in(&mut a, "claude-acp", dir.path()).await?;

    let message = with("REPLY:seen", vec![file(dir.path(), "notes.txt"), selection(dir.path())]);
    let (turn_id, _) = a.send_message(&chat, message).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
    // The adapter takes embedded resources: each arrives with its URI (a selection's with its lines).
    let uri = file_uri(&dir.path().join("notes.txt"));
    assert!(seen.contains("The secret word is PAPAYA."), "the file reached the model:\n{seen}");
    assert!(seen.contains(&uri), "with where it is from:\n{seen}");
    assert!(seen.contains("alpha line\nbeta line"), "the selection reached the model:\n{seen}");
    assert!(seen.contains(&format!("{uri}#L2-L3")), "with its lines:\n{seen}");

    let zip =
        embedded("archive.zip", "application/zip", base64::engine::general_purpose::STANDARD.encode(b"PK\x03\x04"));
    refused(&mut a, &chat, with("unpack", vec![zip]), "The claude-acp agent cannot take application/zip attachments")
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_resource_the_client_serves_is_read_through_it_and_reaches_claude() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let config = json!({ "agents": { "claude": claude_entry(&mock) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut c1 = TestClient::connect(&daemon.url, "c1").await?;
    c1.client.set_resource_request_handlers(tests::plugins::team_plugin());
    let (session, chat) = c1.create_session("claude", None).await?;

    // Not a file of the session's folder: the host asks the client that sent it (`resourceRead`).
    let uri = "virtual://c1/team/rules/always.mdc";
    let resource = MessageAttachment::Resource(MessageResourceAttachment {
        label: "always.mdc".into(),
        range: None,
        display_kind: Some("document".into()),
        meta: None,
        uri: uri.into(),
        size_hint: None,
        content_type: Some("text/markdown".into()),
        nonce: None,
        selection: None,
    });
    let (turn_id, _) = c1.send_message(&chat, with("what does the rule say?", vec![resource])).await?;
    assert_eq!(c1.finished(&chat, &turn_id).await?.state, TurnState::Complete);
    let requests = mock.turn_requests();
    let seen = texts(&last_user_blocks(requests.last().ok_or_else(|| anyhow::anyhow!("no request"))?)).join("\n");
    assert!(seen.contains(tests::plugins::ALWAYS_RULE), "the client's resource reached the model:\n{seen}");
    assert!(seen.contains(&format!("label=\"always.mdc\" location=\"{uri}\"")), "with where it is from:\n{seen}");

    // One the client cannot serve ends the turn in error saying so; nothing reaches the model.
    let before = mock.turn_requests().len();
    let MessageAttachment::Resource(mut missing) = file(Path::new("/nowhere"), "x") else { unreachable!() };
    missing.uri = "virtual://c1/team/rules/gone.mdc".into();
    let (turn_id, _) = c1.send_message(&chat, with("and this?", vec![MessageAttachment::Resource(missing)])).await?;
    let failed = c1.finished(&chat, &turn_id).await?;
    assert_eq!(failed.state, TurnState::Error, "{failed:?}");
    let said = format!("{failed:?}");
    assert!(said.contains("could not read virtual://c1/team/rules/gone.mdc"), "{said}");
    assert_eq!(mock.turn_requests().len(), before, "nothing reached the model");
    c1.check_against_snapshot(&session).await?;
    c1.check_against_snapshot(&chat).await?;
    Ok(())
}

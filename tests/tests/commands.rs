//! The commands a backend reports reach each session's state (`_meta.commands`), `completions`
//! answers `/` with them and `@` with the files in the session's folder, and a command sent as a
//! message runs (`/compact`). Through the official client, with the real `claude` CLI and the real
//! pi on the mock model APIs, and the real claude-agent-acp over ACP.

use std::path::Path;

use ahp_types::state::{MessageAttachment, ResponsePart, SessionState, TurnState};
use serde_json::{json, Value};
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_entry};
use tests::mocks::anthropic::MockAnthropic;
use tests::mocks::openai::MockOpenAi;
use tests::{Daemon, DaemonOptions, TestClient};

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The command names on a session's state.
fn commands(session: Option<&SessionState>) -> Vec<String> {
    session
        .and_then(|s| s.meta.as_ref())
        .and_then(|m| m.get("commands"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Asks `completions` for `text` with the cursor at its end.
async fn complete(client: &TestClient, chat: &str, text: &str) -> anyhow::Result<Vec<Value>> {
    let offset = text.encode_utf16().count();
    let answer = client
        .request("completions", json!({ "channel": chat, "kind": "userMessage", "text": text, "offset": offset }))
        .await
        .map_err(|e| anyhow::anyhow!("completions: {e}"))?;
    let items: Vec<ahp_types::commands::CompletionItem> = serde_json::from_value(answer["items"].clone())?;
    assert_eq!(items.len(), answer["items"].as_array().map_or(0, Vec::len), "every item reads as AHP's");
    Ok(answer["items"].as_array().cloned().unwrap_or_default())
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

fn notifications(parts: &[ResponsePart]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::SystemNotification(n) => Some(format!("{:?}", n.content)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn claudes_commands_are_offered_completed_and_compact_runs() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon =
        Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(&mock) } }))).await?;
    let dir = tempfile::Builder::new().prefix("ahpd-commands-").tempdir()?;
    std::fs::create_dir_all(dir.path().join("src"))?;
    std::fs::write(dir.path().join("src/notes.txt"), "PAPAYA\n")?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    assert!(
        a.init
            .as_ref()
            .and_then(|i| i.completion_trigger_characters.clone())
            .is_some_and(|t| t.contains(&"/".to_owned()) && t.contains(&"@".to_owned())),
        "the host says which characters ask for completions"
    );
    // The CLI's commands come from the probe, which runs as the worker starts: a session opened
    // before it answered is told of them once it does.
    let (session, chat) = session_in(&mut a, "claude", dir.path()).await?;
    let s = session.clone();
    a.until("the CLI's commands", move |m| commands(m.session(&s)).contains(&"compact".to_owned())).await?;

    let items = complete(&a, &chat, "/comp").await?;
    let inserted: Vec<&str> = items.iter().filter_map(|i| i["insertText"].as_str()).collect();
    assert_eq!(inserted.first().copied(), Some("/compact "), "{items:?}");
    assert_eq!((items[0]["rangeStart"].as_i64(), items[0]["rangeEnd"].as_i64()), (Some(0), Some(5)));
    assert!(complete(&a, &chat, "say /comp").await?.is_empty(), "a slash inside a message is text");

    let items = complete(&a, &chat, "look at @note").await?;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["insertText"], "@src/notes.txt ");
    let attachment: MessageAttachment = serde_json::from_value(items[0]["attachment"].clone())?;
    let MessageAttachment::Resource(resource) = attachment else { anyhow::bail!("a resource: {items:?}") };
    assert_eq!(resource.uri, file_uri(&dir.path().join("src/notes.txt")));

    // A file completion accepted is an attachment the model is handed.
    let mut message = tests::user_message("what does @src/notes.txt say?");
    message.attachments = Some(vec![MessageAttachment::Resource(resource)]);
    let (turn_id, _) = a.send_message(&chat, message).await?;
    assert_eq!(a.finished(&chat, &turn_id).await?.state, TurnState::Complete);
    assert!(mock.turn_requests().last().is_some_and(|r| r.transcript_text().contains("PAPAYA")));

    // `/compact` runs: the CLI asks the model for a summary and says the conversation was compacted.
    let before = mock.requests().len();
    let compacted = a.turn(&chat, "/compact").await?;
    assert_eq!(compacted.state, TurnState::Complete, "{compacted:?}");
    let asked: Vec<String> =
        mock.requests()[before..].iter().filter(|r| r.is_messages()).map(|r| r.transcript_text()).collect();
    assert!(asked.iter().any(|t| t.contains("PAPAYA")), "the summary request carried the conversation: {asked:?}");
    assert!(!notifications(&compacted.response_parts).is_empty(), "the turn says it compacted: {compacted:?}");
    let after = a.turn(&chat, "and now?").await?;
    assert_eq!(after.state, TurnState::Complete);
    a.check_against_snapshot(&session).await?;
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pis_commands_are_offered_and_compact_runs() -> anyhow::Result<()> {
    let mock = MockOpenAi::start().await?;
    let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    std::fs::write(agent_dir.path().join("models.json"), mock.pi_models_json("mock").to_string())?;
    let settings = json!({ "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true });
    std::fs::write(agent_dir.path().join("settings.json"), settings.to_string())?;
    let config = json!({ "agents": { "pi": { "kind": "pi", "options": {
        "command": tests::installed::pi_bin().display().to_string(), "agentDir": agent_dir.path().display().to_string() } } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let dir = tempfile::Builder::new().prefix("ahpd-commands-").tempdir()?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "pi", dir.path()).await?;
    let s = session.clone();
    a.until("pi's commands", move |m| commands(m.session(&s)).contains(&"compact".to_owned())).await?;
    let items = complete(&a, &chat, "/").await?;
    assert!(items.iter().any(|i| i["insertText"] == "/compact "), "{items:?}");

    let first = a.turn(&chat, "remember MANGO").await?;
    assert_eq!(first.state, TurnState::Complete);
    let before = mock.requests().len();
    let compacted = a.turn(&chat, "/compact keep it short").await?;
    assert_eq!(compacted.state, TurnState::Complete, "{compacted:?}");
    let asked: Vec<String> = mock.requests()[before..].iter().map(|r| r.all_text()).collect();
    // (pi keeps the recent turns as they are and summarises what is older: here, nothing yet.)
    assert!(
        asked.iter().any(|t| t.contains("<conversation>") && t.contains("Additional focus: keep it short")),
        "pi asked the model for a summary, with the command's instructions: {asked:?}"
    );
    assert!(notifications(&compacted.response_parts).iter().any(|n| n.contains("Compacted")), "{compacted:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agents_commands_reach_the_session() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let config = json!({ "agents": { "claude-acp": acp_adapter_entry(&claude_agent_acp(), &mock, home.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let dir = tempfile::Builder::new().prefix("ahpd-commands-").tempdir()?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = session_in(&mut a, "claude-acp", dir.path()).await?;
    // The adapter names its commands (`available_commands_update`) once its session is open.
    let s = session.clone();
    a.until("the agent's commands", move |m| !commands(m.session(&s)).is_empty()).await?;
    let named = commands(a.mirror.session(&session));
    let first = &named[0];
    let items = complete(&a, &chat, &format!("/{}", &first[..1])).await?;
    assert!(items.iter().any(|i| i["insertText"] == format!("/{first} ")), "{items:?}");
    a.check_against_snapshot(&session).await?;
    Ok(())
}

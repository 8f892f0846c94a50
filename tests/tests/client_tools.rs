//! Client tools through the official client: a client announces a tool when it becomes active, the
//! model calls it (the notes agent's `call`, an MCP client on `/ahp-mcp`, or a scripted ACP agent
//! calling it as an MCP tool on the server it was handed), only that client may
//! complete it, and the parent bounds it — the timeout and the disconnect grace run on a manual
//! clock the test moves, never by waiting.

use ahp_types::actions::{ChatToolCallCompleteAction, SessionActiveClientSetAction, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ResponsePart, SessionActiveClient, SessionInputRequest, ToolCallResult, ToolCallState, ToolDefinition,
    ToolResultContent, ToolResultTextContent, TurnState,
};
use serde_json::json;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn daemon_options(timeout_ms: u64) -> DaemonOptions {
    DaemonOptions {
        config: Some(json!({
            "clientToolTimeoutMs": timeout_ms,
            "clientToolCallDisconnectTimeoutMs": 30000,
            "agents": { "notes": tests::agents::notes_revealing_endpoint() } })),
        env: vec![("AHPD_TEST_CLOCK".into(), "manual".into())],
        ..Default::default()
    }
}

fn open_file_tool() -> ToolDefinition {
    ToolDefinition {
        name: "openFile".into(),
        title: None,
        description: Some("Open a file in the editor".into()),
        input_schema: Some(json!({ "type": "object", "properties": { "path": { "type": "string" } } })),
        output_schema: None,
        annotations: None,
        meta: None,
    }
}

async fn activate(client: &TestClient, session: &str) -> anyhow::Result<()> {
    let active = SessionActiveClient {
        client_id: client.client_id.clone(),
        display_name: Some(format!("{} editor", client.client_id)),
        tools: vec![open_file_tool()],
        customizations: None,
    };
    client
        .dispatch(session, StateAction::SessionActiveClientSet(SessionActiveClientSetAction { active_client: active }))
        .await?;
    Ok(())
}

/// A daemon (client tool calls bounded by `timeout_ms`) with a notes session whose `openFile`
/// client `c1` provides: the daemon, `c1`, the session and its chat.
async fn c1_provides(timeout_ms: u64) -> anyhow::Result<(Daemon, TestClient, String, String)> {
    let daemon = Daemon::start_with(daemon_options(timeout_ms)).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    let (session, chat) = editor.create_session("notes", None).await?;
    activate(&editor, &session).await?;
    Ok((daemon, editor, session, chat))
}

/// Waits until the session reports a call waiting for `client`; answers (turn id, tool call id).
async fn waiting_for(observer: &mut TestClient, session: &str, client: &str) -> anyhow::Result<(String, String)> {
    let (s, c) = (session.to_owned(), client.to_owned());
    observer
        .until("a call waiting for the client", move |m| {
            m.session(&s).and_then(|x| x.input_needed.as_ref()).is_some_and(|list| {
                list.iter().any(|r| matches!(r, SessionInputRequest::ToolClientExecution(e) if e.client_id == c))
            })
        })
        .await?;
    let list = observer.mirror.session(session).and_then(|x| x.input_needed.clone()).unwrap_or_default();
    list.into_iter()
        .find_map(|r| match r {
            SessionInputRequest::ToolClientExecution(e) if e.client_id == client => {
                Some((e.turn_id, e.tool_call.tool_call_id))
            }
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no call waiting"))
}

fn complete(turn_id: &str, tool_call_id: &str, text: &str) -> StateAction {
    StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn_id.into(),
        tool_call_id: tool_call_id.into(),
        meta: None,
        result: ToolCallResult {
            success: true,
            past_tense_message: StringOrMarkdown::Plain("Opened it".into()),
            content: Some(vec![ToolResultContent::Text(ToolResultTextContent { text: text.into() })]),
            structured_content: None,
            error: None,
        },
        requires_result_confirmation: None,
    })
}

fn the_call(turn: &ahp_types::state::Turn) -> Option<&ToolCallState> {
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
        _ => None,
    })
}

#[tokio::test]
async fn the_owner_completes_its_tool_and_the_turn_finishes_with_the_result() -> anyhow::Result<()> {
    let (daemon, mut editor, session, chat) = c1_provides(600_000).await?;
    let mut other = TestClient::connect(&daemon.url, "c2").await?;
    other.subscribe(&session).await?;
    other.subscribe(&chat).await?;

    let turn_id = editor.send(&chat, r#"call c1__openFile {"path": "a.txt"}"#).await?;
    let (call_turn, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    assert_eq!(call_turn, turn_id);
    let state = editor.mirror.chat(&chat).expect("chat").clone();
    let part = state.active_turn.as_ref().and_then(|t| {
        t.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
            _ => None,
        })
    });
    assert!(
        matches!(&part, Some(ToolCallState::Running(r)) if r.tool_name == "openFile"),
        "drawn under the client's own name: {part:?}"
    );

    // Another client may not complete it.
    let seq = other.dispatch(&chat, complete(&turn_id, &call_id, "from the wrong client")).await?;
    other.until("the refusal", |_| true).await?;
    while !other.envelopes.iter().any(|e| e.origin.as_ref().is_some_and(|o| o.client_id == "c2" && o.client_seq == seq))
    {
        other.next_event(tests::PATIENCE).await?;
    }
    let refusal = other
        .envelopes
        .iter()
        .find(|e| e.origin.as_ref().is_some_and(|o| o.client_id == "c2" && o.client_seq == seq))
        .cloned();
    assert!(
        refusal.and_then(|e| e.rejection_reason).is_some_and(|r| r.contains("Only c1")),
        "another client's completion is refused"
    );

    editor.dispatch(&chat, complete(&turn_id, &call_id, "hello file")).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(matches!(the_call(&turn), Some(ToolCallState::Completed(c)) if c.success), "{:?}", the_call(&turn));
    assert!(turn_text(&turn).contains("openFile said: hello file"), "{}", turn_text(&turn));
    assert!(editor.mirror.session(&session).and_then(|s| s.input_needed.clone()).is_none(), "the call is off the list");
    editor.check_against_snapshot(&chat).await?;
    editor.check_against_snapshot(&session).await?;
    other.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn an_unanswered_call_fails_after_the_timeout_and_the_turn_goes_on() -> anyhow::Result<()> {
    let (_daemon, mut editor, session, chat) = c1_provides(60_000).await?;
    let turn_id = editor.send(&chat, r#"call c1__openFile {"path": "b.txt"}"#).await?;
    waiting_for(&mut editor, &session, "c1").await?;
    tests::clock::advance(&editor, 61_000).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "the turn goes on");
    let Some(ToolCallState::Completed(call)) = the_call(&turn) else {
        anyhow::bail!("not completed: {:?}", the_call(&turn))
    };
    assert!(!call.success);
    assert_eq!(call.past_tense_message.as_text(), "openFile failed");
    assert!(turn_text(&turn).contains("openFile got no answer from c1 in 60 s"), "{}", turn_text(&turn));
    editor.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn with_no_timeout_a_call_waits_for_ever() -> anyhow::Result<()> {
    let (_daemon, mut editor, session, chat) = c1_provides(0).await?;
    let turn_id = editor.send(&chat, r#"call c1__openFile {}"#).await?;
    let (_, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    tests::clock::advance(&editor, 10 * 3_600_000).await?;
    editor.request("ping", json!({ "channel": "ahp-root://" })).await?;
    editor.pump()?;
    assert!(editor.mirror.chat(&chat).and_then(|c| c.active_turn.as_ref()).is_some(), "ten hours later it still waits");
    editor.dispatch(&chat, complete(&turn_id, &call_id, "late but here")).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert!(turn_text(&turn).contains("late but here"));
    Ok(())
}

#[tokio::test]
async fn a_client_that_reconnects_inside_the_grace_completes_its_call() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(daemon_options(600_000)).await?;
    let mut driver = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat) = driver.create_session("notes", None).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    editor.subscribe(&session).await?;
    activate(&editor, &session).await?;
    let s = session.clone();
    driver
        .until("c1 to be active", move |m| {
            m.session(&s).is_some_and(|x| x.active_clients.iter().any(|c| c.client_id == "c1"))
        })
        .await?;
    let turn_id = driver.send(&chat, r#"call c1__openFile {}"#).await?;
    let (_, call_id) = waiting_for(&mut driver, &session, "c1").await?;
    editor.client.shutdown().await;
    tests::clock::advance(&driver, 20_000).await?;

    let mut back = TestClient::connect(&daemon.url, "c1").await?;
    back.subscribe(&session).await?;
    back.subscribe(&chat).await?;
    tests::clock::advance(&driver, 20_000).await?; // past the first 30 s: the client came back in time
    back.dispatch(&chat, complete(&turn_id, &call_id, "still here")).await?;
    let turn = driver.finished(&chat, &turn_id).await?;
    assert!(matches!(the_call(&turn), Some(ToolCallState::Completed(c)) if c.success));
    assert!(turn_text(&turn).contains("still here"));
    assert!(
        driver.mirror.session(&session).is_some_and(|s| s.active_clients.iter().any(|c| c.client_id == "c1")),
        "it never left"
    );
    Ok(())
}

#[tokio::test]
async fn a_client_that_stays_away_has_its_calls_failed_in_vscodes_words() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(daemon_options(600_000)).await?;
    let mut driver = TestClient::connect(&daemon.url, "driver").await?;
    let (session, chat) = driver.create_session("notes", None).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    editor.subscribe(&session).await?;
    activate(&editor, &session).await?;
    let mut spare = TestClient::connect(&daemon.url, "c2").await?;
    spare.subscribe(&session).await?;
    activate(&spare, &session).await?;
    let s = session.clone();
    driver.until("both active", move |m| m.session(&s).is_some_and(|x| x.active_clients.len() == 2)).await?;
    let turn_id = driver.send(&chat, r#"call c1__openFile {}"#).await?;
    waiting_for(&mut driver, &session, "c1").await?;
    editor.client.shutdown().await;
    // The grace period starts when the host has seen the connection close: move the clock after.
    daemon.until_clients_away(1).await?;
    tests::clock::advance(&driver, 31_000).await?;
    let turn = driver.finished(&chat, &turn_id).await?;
    let Some(ToolCallState::Completed(call)) = the_call(&turn) else { anyhow::bail!("{:?}", the_call(&turn)) };
    assert!(!call.success);
    assert_eq!(call.past_tense_message.as_text(), "openFile failed");
    assert_eq!(call.error, Some(json!("Client c1 disconnected before completing openFile")));
    let hint = call.content.as_ref().map(|c| format!("{c:?}")).unwrap_or_default();
    assert!(hint.contains("c2__openFile"), "another client provides the same tool, so the model may retry: {hint}");
    assert_eq!(turn.state, TurnState::Complete, "the backend got the failure and went on");
    let s = session.clone();
    driver
        .until("c1 to leave", move |m| {
            m.session(&s).is_some_and(|x| !x.active_clients.iter().any(|c| c.client_id == "c1"))
        })
        .await?;
    driver.check_against_snapshot(&session).await?;
    driver.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_clients_tool_called_through_the_sessions_mcp_endpoint() -> anyhow::Result<()> {
    let (_daemon, mut editor, session, chat) = c1_provides(600_000).await?;
    let said = turn_text(&editor.turn(&chat, "endpoint").await?);
    let words: Vec<&str> = said.split_whitespace().collect();
    let (url, token) = (words[1].to_owned(), words[2].to_owned());
    let listed = tests::mcp::list_tools(&url, &token).await?;
    assert!(listed["tools"].as_array().is_some_and(|t| t.iter().any(|x| x["name"] == "c1__openFile")), "{listed}");

    // A turn is running (held by a question); the agent calls the client's tool over MCP.
    let turn_id = editor.send(&chat, "ask Which file?").await?;
    editor.until_questions(&chat, 1).await?;
    let caller =
        tokio::spawn(
            async move { tests::mcp::call_tool(&url, &token, "c1__openFile", &json!({ "path": "c.txt" })).await },
        );
    let (call_turn, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    assert_eq!(call_turn, turn_id);
    editor.dispatch(&chat, complete(&turn_id, &call_id, "opened over mcp")).await?;
    let answered = caller.await??;
    assert_eq!(answered["isError"], false, "{answered}");
    assert_eq!(answered["text"], "opened over mcp");
    editor.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn an_acp_agent_calls_a_clients_tool_through_the_sessions_mcp_endpoint() -> anyhow::Result<()> {
    let fake = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let options = DaemonOptions {
        config: Some(json!({
            "clientToolTimeoutMs": 600_000,
            "agents": { "scripted": { "kind": "acp", "options": { "command": "python3", "args": [fake.display().to_string()] } } } })),
        env: vec![("AHPD_TEST_CLOCK".into(), "manual".into())],
        ..Default::default()
    };
    let daemon = Daemon::start_with(options).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    let (session, chat) = editor.create_session("scripted", None).await?;
    activate(&editor, &session).await?;
    // The ACP agent was handed the session's endpoint as the MCP server `ahp`; its model calls the
    // client's tool there, as any ACP agent calls an MCP tool.
    let turn_id = editor.send(&chat, r#"mcpcall ahp c1__openFile {"path": "d.txt"}"#).await?;
    let (call_turn, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    assert_eq!(call_turn, turn_id);
    editor.dispatch(&chat, complete(&turn_id, &call_id, "opened for the acp agent")).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(turn_text(&turn).contains("result: opened for the acp agent"), "{}", turn_text(&turn));
    editor.check_against_snapshot(&chat).await?;
    Ok(())
}

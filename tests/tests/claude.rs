//! The Claude Code backend end to end: the real `ahpd`, driven by the official AHP client, running
//! the `claude` worker, which runs the real Claude Code CLI (installed by `scripts/test`) against
//! the project's scripted Anthropic mock on 127.0.0.1.
//!
//! The agent is a config entry of kind `claude`: the daemon runs `ahpd worker claude`. Claude's own
//! conversations (ones the CLI wrote down outside the daemon) are listed, read back and resumed too.

use ahp_types::actions::{
    ChatToolCallCompleteAction, ChatTurnCancelledAction, ChatTurnStartedAction, SessionActiveClientSetAction,
    StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ModelSelection, ResponsePart, SessionActiveClient, SessionInputRequest, SnapshotState, ToolCallContributor,
    ToolCallResult, ToolCallState, ToolDefinition, ToolResultContent, ToolResultTextContent, TurnState,
};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::client::{now_iso, user_message};
use tests::daemon::children_of;
use tests::installed::{claude_by_hand, claude_entry};
use tests::mocks::anthropic::{MockAnthropic, RecordedRequest, HELLO, THINKING};
use tests::plugins::{publish_plugins, team_plugin, ALWAYS_RULE};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// Options for a daemon whose `claude` agent talks to `mock`.
fn claude_options(mock: &MockAnthropic) -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { "claude": claude_entry(mock) } }))
}

/// A daemon whose `claude` agent talks to `mock`. Its `HOME` is its own fresh folder.
async fn claude_daemon(mock: &MockAnthropic) -> anyhow::Result<Daemon> {
    Daemon::start_with(claude_options(mock)).await
}

fn tool_calls(turn: &ahp_types::state::Turn) -> Vec<&ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

/// The opening of the instruction the artifact tools carry (offered to every session): words of
/// the session's instructions that no tool description holds.
const ARTIFACT_INSTRUCTION: &str = "Record notable artifacts and references with `add_artifact_or_reference`";

/// The texts of the tool results in the last user message of `request`: what the model got back.
fn tool_results(request: &RecordedRequest) -> Vec<String> {
    let messages = request.messages();
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else { return Vec::new() };
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
            _ => String::new(),
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_text_turn_and_a_thinking_turn() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;

    let turn = a.turn(&chat, "say hello there").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert_eq!(turn_text(&turn), format!("{HELLO}say hello there"));
    let deltas =
        a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_))).count();
    assert!(deltas >= 2, "the answer streamed in pieces");

    let turn = a.turn(&chat, "THINK first").await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(
        matches!(&turn.response_parts[0], ResponsePart::Reasoning(r) if r.content == THINKING),
        "{:?}",
        turn.response_parts
    );
    assert_eq!(turn_text(&turn), format!("{HELLO}THINK first"));
    assert_eq!(mock.turn_requests().len(), 2);
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn a_tool_use_allowed_and_one_denied_from_the_client() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    // The session has no folder of its own: the CLI runs where the worker does, the daemon's home.
    let write = |name: &str| {
        let args = json!({"file_path": daemon.home.join(name), "content": "hi"});
        format!("make a file TOOL:Write ARGS:{args}")
    };

    let turn_id = a.send(&chat, &write("allowed.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    assert!(waiting[0].1.starts_with("toolu_"), "the CLI's own tool-use id: {}", waiting[0].1);
    a.check_against_snapshot(&session).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(matches!(tool_calls(&turn)[..], [ToolCallState::Completed(c)] if c.success), "{:?}", tool_calls(&turn));
    assert!(daemon.home.join("allowed.txt").exists(), "the allowed write happened");

    let turn_id = a.send(&chat, &write("denied.txt")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(matches!(tool_calls(&turn)[..], [ToolCallState::Cancelled(_)]), "{:?}", tool_calls(&turn));
    assert!(!daemon.home.join("denied.txt").exists(), "the denied write did not happen");
    assert!(turn_text(&turn).contains("The person denied this tool call."), "{}", turn_text(&turn));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_host_tool_declared_destructive_waits_for_a_person_and_a_denial_lets_the_turn_go_on() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let config = json!({ "agents": { "claude": claude_entry(&mock), "echo": { "kind": "echo" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (victim, _) = a.create_session("echo", None).await?;
    let (_session, chat) = a.create_session("claude", None).await?;

    let call = format!("TOOL:mcp__host__delete_session ARGS:{}", json!({ "session": victim }));
    let turn = tests::turns::deny_a_destructive_call(&mut a, &chat, &call, &victim).await?;
    assert!(turn_text(&turn).contains("The person denied this tool call."), "{}", turn_text(&turn));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn an_interrupt_mid_stream() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude", None).await?;

    let turn_id = a.send(&chat, "SLOW tell me a long story").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| {
        m.chat(&c).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| {
            t.response_parts.iter().any(|p| matches!(p, ResponsePart::Markdown(md) if !md.content.is_empty()))
        })
    })
    .await?;
    let stop = ChatTurnCancelledAction { turn_id: turn_id.clone(), duration: 5, meta: None };
    a.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Cancelled);
    assert_ne!(turn_text(&turn), format!("{HELLO}SLOW tell me a long story"), "it stopped mid-stream");

    let next = a.turn(&chat, "and now?").await?;
    assert_eq!(next.state, TurnState::Complete);
    assert_eq!(turn_text(&next), format!("{HELLO}and now?"));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn the_models_come_from_the_cli_and_a_model_change_reaches_the_api() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    a.until("the CLI's models", |m| match m.states.get(ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(root)) => {
            root.agents.iter().any(|agent| agent.provider == "claude" && agent.models.iter().any(|m| m.id == "haiku"))
        }
        _ => false,
    })
    .await?;
    let (_session, chat) = a.create_session("claude", None).await?;

    let turn = a.turn(&chat, "hi").await?;
    assert_eq!(turn.state, TurnState::Complete);
    let turn_id = uuid::Uuid::new_v4().to_string();
    let mut message = user_message("again");
    message.model = Some(ModelSelection { id: "claude-sonnet-4-5".into(), config: None });
    let started = ChatTurnStartedAction {
        turn_id: turn_id.clone(),
        started_at: now_iso(),
        message,
        queued_message_id: None,
        meta: None,
    };
    a.dispatch(&chat, StateAction::ChatTurnStarted(started)).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let models: Vec<Option<String>> = mock.turn_requests().iter().map(|r| r.model().map(str::to_owned)).collect();
    assert_eq!(models.last().cloned().flatten().as_deref(), Some("claude-sonnet-4-5"), "{models:?}");
    assert_ne!(models.first().cloned().flatten().as_deref(), Some("claude-sonnet-4-5"));
    Ok(())
}

#[tokio::test]
async fn a_session_resumed_after_an_ahpd_restart_sends_the_earlier_messages() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-claude-restart-").tempdir()?;
    let mut first = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    let turn = a.turn(&chat, "remember the word PINEAPPLE").await?;
    assert_eq!(turn.state, TurnState::Complete);
    drop(a);
    first.terminate().await?;

    let second = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let earlier = b.mirror.chat(&chat).map(|c| c.turns.len()).unwrap_or_default();
    assert_eq!(earlier, 1, "the store kept the first turn");
    let turn = b.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let request = mock.turn_requests().last().cloned().expect("the model was asked");
    let seen = request.transcript_text();
    assert!(seen.contains("remember the word PINEAPPLE"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains(&format!("{HELLO}remember the word PINEAPPLE")), "and the earlier answer: {seen}");
    Ok(())
}

#[tokio::test]
async fn an_idle_session_leaves_memory_its_claude_process_ends_and_the_next_message_resumes() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = Daemon::start_with(claude_options(&mock).unloading_idle_after(60_000)).await?;
    let clock = TestClient::connect(&daemon.url, "clock").await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "remember the word PINEAPPLE").await?.state, TurnState::Complete);
    let worker = daemon.worker().ok_or_else(|| anyhow::anyhow!("no claude worker"))?;
    assert!(!children_of(worker).is_empty(), "the chat's claude process runs between turns");
    a.client.shutdown().await;

    // Nobody watches it and nothing runs: it leaves memory, and the chat's CLI process ends.
    daemon.advance_until_loaded(&clock, 60_000, 0).await?;
    let mut left = children_of(worker);
    for _ in 0..200 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = children_of(worker);
    }
    assert!(left.is_empty(), "the claude process of an unloaded chat ended: {left:?}");

    // Opened again, it holds its turn; the next message resumes Claude's conversation.
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(1), "the turn came back from the store");
    let turn = b.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("remember the word PINEAPPLE"), "the earlier prompt was sent again: {seen}");
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn the_model_lists_the_daemons_sessions_and_reads_the_sessions_instructions() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    let turn = a.turn(&chat, "which sessions? TOOL:mcp__host__list_sessions ARGS:{}").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let calls = tool_calls(&turn);
    assert!(
        matches!(calls[..], [ToolCallState::Completed(c)] if c.success && c.tool_name == "list_sessions" && c.tool_call_id.starts_with("toolu_")),
        "{calls:?}"
    );
    let requests = mock.turn_requests();
    let after = requests.last().expect("the model was asked again with the result");
    let results = tool_results(after);
    let [listed] = &results[..] else { anyhow::bail!("one tool result: {results:?}") };
    let listed: Value = serde_json::from_str(listed)?;
    let rows = listed["sessions"].as_array().cloned().unwrap_or_default();
    // The host titled the session after its first message before the model was asked.
    let title = a.mirror.session(&session).map(|s| s.title.clone()).unwrap_or_default();
    assert!(title.starts_with("which sessions?"), "{title}");
    assert!(
        rows.iter().any(|r| r["session"] == session.as_str() && r["title"] == title.as_str()),
        "the real answer, naming this very session: {listed}"
    );
    assert!(turn_text(&turn).contains("Tool result received: {\"sessions\""), "{}", turn_text(&turn));

    // The session's instructions (those of the tools it is offered) reach Claude's system prompt.
    assert!(
        requests.iter().all(|r| r.system_text().contains(ARTIFACT_INSTRUCTION)),
        "every turn request carries the instructions: {}",
        requests[0].system_text()
    );
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn the_model_calls_a_clients_tool_and_gets_what_the_client_answered() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    let (session, chat) = editor.create_session("claude", None).await?;
    let open_file = ToolDefinition {
        name: "openFile".into(),
        title: None,
        description: Some("Open a file in the editor".into()),
        input_schema: Some(json!({ "type": "object", "properties": { "path": { "type": "string" } } })),
        output_schema: None,
        annotations: None,
        meta: None,
    };
    let active = SessionActiveClient {
        client_id: "c1".into(),
        display_name: Some("c1 editor".into()),
        tools: vec![open_file],
        customizations: None,
    };
    editor
        .dispatch(&session, StateAction::SessionActiveClientSet(SessionActiveClientSetAction { active_client: active }))
        .await?;

    // Claude sees the client's tool on the `client` server, named after its client.
    let turn_id = editor.send(&chat, r#"open it TOOL:mcp__client__c1__openFile ARGS:{"path": "a.txt"}"#).await?;
    let s = session.clone();
    editor
        .until("the call to wait for c1", move |m| {
            m.session(&s).and_then(|x| x.input_needed.as_ref()).is_some_and(|list| {
                list.iter().any(|r| matches!(r, SessionInputRequest::ToolClientExecution(e) if e.client_id == "c1"))
            })
        })
        .await?;
    let waiting = editor.mirror.session(&session).and_then(|x| x.input_needed.clone()).unwrap_or_default();
    let Some(SessionInputRequest::ToolClientExecution(call)) = waiting.into_iter().next() else {
        anyhow::bail!("no call waiting")
    };
    assert_eq!(call.turn_id, turn_id);
    let call_id = call.tool_call.tool_call_id.clone();
    assert!(call_id.starts_with("toolu_"), "the CLI's own tool-use id: {call_id}");
    editor.check_against_snapshot(&session).await?;

    let done = ChatToolCallCompleteAction {
        turn_id: turn_id.clone(),
        tool_call_id: call_id.clone(),
        meta: None,
        result: ToolCallResult {
            success: true,
            past_tense_message: StringOrMarkdown::Plain("Opened a.txt".into()),
            content: Some(vec![ToolResultContent::Text(ToolResultTextContent {
                text: "a.txt is open at line 1".into(),
            })]),
            structured_content: None,
            error: None,
        },
        requires_result_confirmation: None,
    };
    editor.dispatch(&chat, StateAction::ChatToolCallComplete(done)).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let calls = tool_calls(&turn);
    let [ToolCallState::Completed(c)] = &calls[..] else { anyhow::bail!("{calls:?}") };
    assert!(c.success && c.tool_name == "openFile" && c.tool_call_id == call_id, "{c:?}");
    assert!(matches!(&c.contributor, Some(ToolCallContributor::Client(x)) if x.client_id == "c1"), "{c:?}");

    let request = mock.turn_requests().last().cloned().expect("the model was asked again");
    assert!(request.tool_names().contains(&"mcp__client__c1__openFile".to_owned()), "{:?}", request.tool_names());
    assert_eq!(tool_results(&request), vec!["a.txt is open at line 1".to_owned()], "the model got the client's answer");
    assert!(turn_text(&turn).contains("Tool result received: a.txt is open at line 1"), "{}", turn_text(&turn));
    editor.check_against_snapshot(&chat).await?;
    editor.check_against_snapshot(&session).await?;
    Ok(())
}

/// The text blocks of the last user message of `request`, joined.
fn last_user_text(request: &RecordedRequest) -> String {
    let messages = request.messages();
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else { return String::new() };
    match &last["content"] {
        Value::String(s) => s.clone(),
        blocks => {
            blocks.as_array().into_iter().flatten().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n")
        }
    }
}

#[tokio::test]
async fn a_clients_always_applied_rules_join_claudes_system_prompt_after_the_tools() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = claude_daemon(&mock).await?;
    let mut c1 = TestClient::connect(&daemon.url, "c1").await?;
    c1.client.set_resource_request_handlers(team_plugin());
    let (session, chat) = c1.create_session("claude", None).await?;
    assert_eq!(c1.turn(&chat, "hello").await?.state, TurnState::Complete);
    assert!(!mock.turn_requests()[0].system_text().contains("RULE-ALWAYS"));

    // The client publishes its plugin: the host copies it, and shows the copy with its rules.
    publish_plugins(
        &c1,
        &session,
        json!([{ "type": "plugin", "id": "team", "uri": "virtual://c1/team", "name": "Team rules" }]),
    )
    .await?;
    let s = session.clone();
    c1.until("the plugin copied with its rules", move |m| {
        m.session(&s).and_then(|x| x.customizations.as_ref()).is_some_and(|list| !list.is_empty())
    })
    .await?;
    let shown = serde_json::to_value(c1.mirror.session(&session).and_then(|x| x.customizations.clone()))?;
    assert_eq!(shown[0]["clientId"], "c1", "{shown}");
    let rules: Vec<(String, bool, bool)> = shown[0]["children"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["name"].as_str().unwrap_or_default().to_owned(), r["alwaysApply"] == true, r["enabled"] == true))
        .collect();
    assert_eq!(
        rules,
        [("always".into(), true, true), ("long".into(), true, false), ("scoped".into(), false, false)],
        "{shown}"
    );

    // The next turn starts Claude again. The CLI keeps the system prompt a conversation began
    // with, so the words it lacks open the prompt: the tools' instructions, then the rule; the
    // other rules and the frontmatter stay out, and the conversation goes on.
    let asked = mock.turn_requests().len();
    assert_eq!(c1.turn(&chat, "and now?").await?.state, TurnState::Complete);
    let request = mock.turn_requests().get(asked).cloned().expect("the model was asked");
    let said = last_user_text(&request);
    let Some(rule) = said.find(ALWAYS_RULE) else { anyhow::bail!("the rule was said: {said}") };
    assert!(said.find(ARTIFACT_INSTRUCTION).is_some_and(|tools| tools < rule), "{said}");
    assert!(said.find("and now?").is_some_and(|prompt| rule < prompt), "{said}");
    for absent in ["RULE-SCOPED", "RULE-LONG", "house style"] {
        assert!(!request.body.to_string().contains(absent), "{absent} stays out: {said}");
    }
    assert!(request.transcript_text().contains("hello"), "the conversation was resumed");

    // A chat that starts after the copy carries the rule in its system prompt, after the tools'.
    let (second, second_chat) = c1.create_session("claude", None).await?;
    publish_plugins(
        &c1,
        &second,
        json!([{ "type": "plugin", "id": "team", "uri": "virtual://c1/team", "name": "Team rules" }]),
    )
    .await?;
    let s = second.clone();
    c1.until("the plugin copied into the second session", move |m| {
        m.session(&s).and_then(|x| x.customizations.as_ref()).is_some_and(|list| !list.is_empty())
    })
    .await?;
    let asked = mock.turn_requests().len();
    assert_eq!(c1.turn(&second_chat, "fresh").await?.state, TurnState::Complete);
    let system = mock.turn_requests().get(asked).map(|r| r.system_text()).unwrap_or_default();
    let rule = system.find(ALWAYS_RULE).expect("the rule joined the system prompt");
    assert!(system.find(ARTIFACT_INSTRUCTION).is_some_and(|tools| tools < rule), "{system}");

    // The client takes its plugin back: the copy goes, and the rule is not said again.
    publish_plugins(&c1, &session, json!([])).await?;
    let s = session.clone();
    c1.until("the copy removed", move |m| {
        m.session(&s).and_then(|x| x.customizations.as_ref()).is_some_and(|list| list.is_empty())
    })
    .await?;
    let asked = mock.turn_requests().len();
    assert_eq!(c1.turn(&chat, "and without?").await?.state, TurnState::Complete);
    let said = mock.turn_requests().get(asked).map(last_user_text).unwrap_or_default();
    assert!(!said.contains("RULE-ALWAYS"), "{said}");
    c1.check_against_snapshot(&session).await?;
    c1.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_conversation_claude_kept_on_its_own_is_listed_read_back_and_resumed() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-claude-catalogue-").tempdir()?;
    let folder = home.path().join("project");
    std::fs::create_dir_all(&folder)?;
    let id = claude_by_hand(&mock, home.path(), &folder, "remember the word MANGO").await?;

    let daemon = Daemon::start_in(home.path(), claude_options(&mock)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    // A session of the daemon's own, with a turn, so Claude's files hold two conversations.
    let (own_session, own_chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&own_chat, "hello").await?.state, TurnState::Complete);

    let items = a.listed_sessions(Some(1)).await?;
    let resources: Vec<&str> = items.iter().filter_map(|i| i["resource"].as_str()).collect();
    let foreign = format!("ahp-session:/{id}");
    assert!(resources.contains(&foreign.as_str()), "Claude's own conversation is listed: {items:?}");
    assert!(resources.contains(&own_session.as_str()), "{items:?}");
    assert_eq!(resources.len(), 2, "the daemon's own conversation is not listed twice: {items:?}");
    let row = items.iter().find(|i| i["resource"] == foreign.as_str()).expect("listed");
    assert_eq!(row["provider"], "claude");

    // Opening it reads its turn back; nothing runs.
    a.subscribe(&foreign).await?;
    let chat = a.mirror.session(&foreign).and_then(|s| s.default_chat.clone()).expect("a default chat");
    a.subscribe(&chat).await?;
    let turns = a.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns.len(), 1, "the conversation's turn was read back: {turns:?}");
    assert!(turns[0].message.text.contains("remember the word MANGO"), "{:?}", turns[0].message);
    let asked = mock.turn_requests().len();

    // Saying something resumes Claude's conversation: the model sees the earlier exchange.
    let turn = a.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let requests = mock.turn_requests();
    assert!(requests.len() > asked, "the model was asked");
    let seen = requests.last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("remember the word MANGO"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains(&format!("{HELLO}remember the word MANGO")), "and the earlier answer: {seen}");

    // It is the daemon's now: listed once, and it stays after a restart.
    let again = a.listed_sessions(Some(1)).await?;
    assert_eq!(again.iter().filter(|i| i["resource"] == foreign.as_str()).count(), 1, "{again:?}");
    assert_eq!(again.len(), 2, "{again:?}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&foreign).await?;
    Ok(())
}

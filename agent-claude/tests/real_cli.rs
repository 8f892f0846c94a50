//! The `claude` worker against the real Claude Code CLI (installed by `scripts/test`) and the
//! project's scripted Anthropic mock on 127.0.0.1, driven the way the daemon drives a worker
//! (`TestParent`), with every emitted action folded through the official AHP reducer.
//!
//! Each test has its own mock, `HOME` and working folder. What the model does is said by the
//! prompt (see `tests::mocks::anthropic`).

mod common;

use std::collections::HashMap;

use agent_runner::testing::TestParent;
use ahp_types::actions::{ChatToolCallConfirmedAction, StateAction};
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputResponseKind, ChatInputSelectedAnswerValue,
    ModelSelection, ResponsePart, ToolCallConfirmationReason, ToolCallContributor, ToolCallState, TurnState,
};
use common::*;
use protocol::methods::parent;
use protocol::{AnswerParams, ConfirmParams, Start};
use serde_json::{json, Value};
use tests::mocks::anthropic::{MockAnthropic, HELLO, THINKING};

/// One test's world: a mock model, a `HOME`, a working folder and a worker under a test parent.
struct Real {
    parent: TestParent,
    mock: MockAnthropic,
    home: TempDir,
    work: TempDir,
    calls: ToolCalls,
}

impl Real {
    async fn new(label: &str) -> Self {
        let mock = MockAnthropic::start().await.expect("the mock model");
        let home = temp_dir(&format!("{label}-home"));
        let work = temp_dir(&format!("{label}-work"));
        let (parent, calls) = worker(&mock, &home).await;
        Self { parent, mock, home, work, calls }
    }

    fn start(&self, chat: &str) -> Start {
        chat_start(chat, self.work.path())
    }
}

/// A fresh worker (as after a restart) pointed at `mock`, with `home` as its `HOME`.
async fn worker(mock: &MockAnthropic, home: &TempDir) -> (TestParent, ToolCalls) {
    let mut env: serde_json::Map<String, Value> =
        mock.cli_env().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    env.insert("HOME".into(), json!(home.path()));
    let (tools, calls) = tool_handler();
    let parent = TestParent::in_process(agent_claude::factory(), tools);
    parent
        .initialize("claude", "claude", options(&claude_bin(), Value::Object(env)), None)
        .await
        .expect("the handshake");
    (parent, calls)
}

fn deltas(actions: &[StateAction]) -> usize {
    actions.iter().filter(|a| matches!(a, StateAction::ChatDelta(_))).count()
}

fn pending_confirmation(
    state: &ahp_types::state::ChatState,
) -> Option<ahp_types::state::ToolCallPendingConfirmationState> {
    active_calls(state).into_iter().find_map(|c| match c {
        ToolCallState::PendingConfirmation(p) => Some(p),
        _ => None,
    })
}

#[tokio::test]
async fn a_streamed_text_turn_carries_the_instructions_and_records_its_prompt() {
    let mut w = Real::new("text").await;
    let chat = "ahp-chat:/text";
    let mut start = w.start(chat);
    start.instructions = vec!["Always answer like a pirate.".into()];
    w.parent.create(start).await.expect("create");

    let ran = run_turn(&mut w.parent, chat, "t1", "say hello there").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert_eq!(ran.text(), format!("{HELLO}say hello there"));
    assert!(deltas(&ran.actions) >= 2, "the answer streamed in pieces: {:?}", ran.actions);
    assert!(ran.turn.usage.as_ref().and_then(|u| u.output_tokens).is_some_and(|n| n > 0), "{:?}", ran.turn.usage);
    let ends = ran
        .actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                StateAction::ChatTurnComplete(_) | StateAction::ChatError(_) | StateAction::ChatTurnCancelled(_)
            )
        })
        .count();
    assert_eq!(ends, 1, "exactly one ending");
    assert_eq!(ran.recorded.len(), 1, "{:?}", ran.recorded);
    assert_eq!(ran.recorded[0].0, "t1");

    let sent = w.mock.turn_requests();
    let request = sent.last().expect("the model was asked");
    assert!(request.system_text().contains("Always answer like a pirate."), "instructions reach the system prompt");
    assert_eq!(request.last_user_text(), "say hello there");
}

#[tokio::test]
async fn a_thinking_turn_streams_reasoning_before_the_answer() {
    let mut w = Real::new("think").await;
    let chat = "ahp-chat:/think";
    w.parent.create(w.start(chat)).await.expect("create");

    let ran = run_turn(&mut w.parent, chat, "t1", "THINK about it").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    let ResponsePart::Reasoning(reasoning) = &ran.turn.response_parts[0] else {
        panic!("thinking comes first as a reasoning part: {:?}", ran.turn.response_parts)
    };
    assert_eq!(reasoning.content, THINKING);
    assert!(ran.actions.iter().any(|a| matches!(a, StateAction::ChatReasoning(_))), "thinking streamed into its part");
    assert_eq!(ran.text(), format!("{HELLO}THINK about it"));

    // A model API that refuses ends the turn in an error with its words; the next turn runs.
    let failed = run_turn(&mut w.parent, chat, "t2", "ERROR please").await;
    assert_eq!(failed.turn.state, TurnState::Error);
    let message = failed.turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::Error(e) => Some(e.error.message.clone()),
        _ => None,
    });
    assert!(message.as_deref().is_some_and(|m| m.contains("400")), "{message:?}");
    let next = run_turn(&mut w.parent, chat, "t3", "fine now?").await;
    assert_eq!(next.turn.state, TurnState::Complete, "{:?}", next.turn.response_parts);
}

/// The person answers the call waiting in the running turn, as a client and then the host would.
async fn decide(
    w: &mut Real,
    chat: &str,
    turn: &str,
    approved: bool,
) -> ahp_types::state::ToolCallPendingConfirmationState {
    wait_for(&mut w.parent, chat, |s| pending_confirmation(s).is_some()).await;
    let pending = w.parent.chat(chat).and_then(|s| pending_confirmation(&s)).expect("a call waits");
    let option = if approved { "allow" } else { "deny" };
    let confirmed = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: turn.into(),
        tool_call_id: pending.tool_call_id.clone(),
        meta: None,
        approved,
        confirmed: approved.then_some(ToolCallConfirmationReason::UserAction),
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: Some(option.into()),
    });
    w.parent.apply_client_action(chat, &confirmed);
    let handled = w
        .parent
        .confirm(ConfirmParams {
            chat: chat.into(),
            turn_id: turn.into(),
            tool_call_id: pending.tool_call_id.clone(),
            approved,
            option_id: Some(option.into()),
            decision_source: Some("user-action".into()),
            edited_tool_input: None,
        })
        .await
        .expect("confirm");
    assert_eq!(handled["handled"], true);
    pending
}

#[tokio::test]
async fn a_tool_the_person_allows_runs_one_they_deny_does_not_and_accept_edits_asks_nothing() {
    let mut w = Real::new("tools").await;
    let chat = "ahp-chat:/tools";
    w.parent.create(w.start(chat)).await.expect("create");
    let write = |name: &str| {
        let args = json!({"file_path": w.work.path().join(name), "content": "hi"});
        format!("make a file TOOL:Write ARGS:{args}")
    };

    // Allowed.
    let (allowed, denied, quiet) = (write("allowed.txt"), write("denied.txt"), write("quiet.txt"));
    w.parent.send(chat, "t1", &allowed).await.expect("send");
    let pending = decide(&mut w, chat, "t1", true).await;
    assert!(pending.tool_call_id.starts_with("toolu_"), "the CLI's own tool-use id: {}", pending.tool_call_id);
    assert_eq!(pending.tool_name, "Write");
    let meta = pending.meta.clone().expect("the permission fields");
    assert_eq!(meta["permissionKind"], "write");
    assert!(meta["permissionPath"].as_str().is_some_and(|p| p.ends_with("allowed.txt")), "{meta:?}");
    let options: Vec<String> = pending.options.clone().unwrap_or_default().into_iter().map(|o| o.id).collect();
    assert_eq!(options.first().map(String::as_str), Some("allow"));
    assert_eq!(options.last().map(String::as_str), Some("deny"));
    let ran = finish_turn(&mut w.parent, chat).await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(w.work.path().join("allowed.txt").exists(), "the allowed write happened");
    assert!(
        matches!(&tool_calls(&ran.turn)[..], [ToolCallState::Completed(c)] if c.success),
        "{:?}",
        tool_calls(&ran.turn)
    );

    // Denied.
    w.parent.send(chat, "t2", &denied).await.expect("send");
    decide(&mut w, chat, "t2", false).await;
    let ran = finish_turn(&mut w.parent, chat).await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(!w.work.path().join("denied.txt").exists(), "the denied write did not happen");
    assert!(matches!(&tool_calls(&ran.turn)[..], [ToolCallState::Cancelled(_)]), "{:?}", tool_calls(&ran.turn));
    assert!(ran.text().contains("The person denied this tool call."), "the model was told: {}", ran.text());

    // A permission mode as session config: edits no longer ask.
    let set: protocol::SetConfigResult = w
        .parent
        .peer()
        .request(parent::SET_CONFIG, json!({"chat": chat, "key": "permissionMode", "value": "acceptEdits"}))
        .await
        .expect("setConfig");
    assert!(set.accepted, "{set:?}");
    let ran = run_turn(&mut w.parent, chat, "t3", &quiet).await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(w.work.path().join("quiet.txt").exists());
    let ready = ran.actions.iter().find_map(|a| match a {
        StateAction::ChatToolCallReady(r) => Some(r.clone()),
        _ => None,
    });
    assert_eq!(ready.and_then(|r| r.confirmed), Some(ToolCallConfirmationReason::NotNeeded));
}

#[tokio::test]
async fn an_interrupt_mid_stream_cancels_the_turn_and_the_next_turn_runs() {
    let mut w = Real::new("interrupt").await;
    let chat = "ahp-chat:/interrupt";
    w.parent.create(w.start(chat)).await.expect("create");

    w.parent.send(chat, "t1", "SLOW tell me a long story").await.expect("send");
    wait_for(&mut w.parent, chat, |s| {
        s.active_turn.as_ref().is_some_and(|t| {
            t.response_parts.iter().any(|p| matches!(p, ResponsePart::Markdown(m) if !m.content.is_empty()))
        })
    })
    .await;
    // A steering message the CLI holds for after the turn is dropped with it.
    let steer = json!({"chat": chat, "turnId": "t1", "id": "s1", "message": agent_runner::testing::user_message("a steer that is dropped")});
    let taken = w.parent.peer().request_value(parent::STEER, steer).await.expect("steer");
    assert_eq!(taken["taken"], true);
    w.parent.abort(chat, Some("t1")).await.expect("abort");
    let stopped = finish_turn(&mut w.parent, chat).await;
    assert_eq!(stopped.turn.state, TurnState::Cancelled);
    let full = format!("{HELLO}SLOW tell me a long story");
    assert_ne!(stopped.text(), full, "it stopped mid-stream");

    // The same process takes the next turn once the stopped one drained.
    let next = run_turn(&mut w.parent, chat, "t2", "and now?").await;
    assert_eq!(next.turn.state, TurnState::Complete);
    assert_eq!(next.text(), format!("{HELLO}and now?"));
    let prompts: Vec<String> = w.mock.turn_requests().iter().map(|r| r.last_user_text()).collect();
    assert!(!prompts.iter().any(|p| p.contains("a steer that is dropped")), "{prompts:?}");
}

#[tokio::test]
async fn a_model_change_reaches_the_model_api() {
    let mut w = Real::new("model").await;
    let chat = "ahp-chat:/model";
    w.parent.create(w.start(chat)).await.expect("create");

    run_turn(&mut w.parent, chat, "t1", "hi").await;
    let before = w.mock.turn_requests().last().and_then(|r| r.model().map(str::to_owned));
    assert_ne!(before.as_deref(), Some("claude-sonnet-4-5"));
    let model = ModelSelection { id: "claude-sonnet-4-5".into(), config: None };
    w.parent
        .peer()
        .request_value(parent::CHANGE_MODEL, json!({"chat": chat, "model": model}))
        .await
        .expect("changeModel");
    let ran = run_turn(&mut w.parent, chat, "t2", "again").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    let after = w.mock.turn_requests().last().and_then(|r| r.model().map(str::to_owned));
    assert_eq!(after.as_deref(), Some("claude-sonnet-4-5"));
}

#[tokio::test]
async fn host_and_client_tools_reach_the_model_through_the_in_process_servers() {
    let mut w = Real::new("mcp").await;
    let chat = "ahp-chat:/mcp";
    let mut start = w.start(chat);
    start.tools = vec![tool_spec("list_sessions", None, Some("List sessions"))];
    w.parent.create(start).await.expect("create");

    let ran = run_turn(&mut w.parent, chat, "t1", "which sessions? TOOL:mcp__host__list_sessions ARGS:{}").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(
        ran.text().contains("Tool result received: SESSIONS: alpha, beta"),
        "the model got the host's answer: {}",
        ran.text()
    );
    let offered = w.mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    assert!(offered.contains(&"mcp__host__list_sessions".to_owned()), "{offered:?}");
    let call = w.calls.lock().expect("calls").first().cloned().expect("the host was asked to run it");
    assert_eq!((call.name.as_str(), call.turn_id.as_str()), ("list_sessions", "t1"));
    assert!(call.tool_call_id.starts_with("toolu_"), "the CLI's tool-use id: {}", call.tool_call_id);
    let [ToolCallState::Completed(done)] = &tool_calls(&ran.turn)[..] else { panic!("{:?}", tool_calls(&ran.turn)) };
    assert_eq!(
        (done.tool_call_id.as_str(), done.tool_name.as_str(), done.success),
        (call.tool_call_id.as_str(), "list_sessions", true)
    );

    // A client joins with a tool of its own: the next turn offers it (on a process that resumed
    // the conversation, since the CLI lists an in-process server's tools once).
    let tools = vec![
        tool_spec("list_sessions", None, Some("List sessions")),
        tool_spec("c1__openFile", Some("c1"), Some("openFile")),
    ];
    w.parent.peer().request_value(parent::SET_TOOLS, json!({"chat": chat, "tools": tools})).await.expect("setTools");
    let ran =
        run_turn(&mut w.parent, chat, "t2", r#"open it TOOL:mcp__client__c1__openFile ARGS:{"path": "a.txt"}"#).await;
    let request = w.mock.turn_requests().last().cloned().expect("asked");
    assert!(request.tool_names().contains(&"mcp__client__c1__openFile".to_owned()), "{:?}", request.tool_names());
    assert!(request.transcript_text().contains("SESSIONS: alpha, beta"), "the resumed process carried the first turn");
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(ran.text().contains("Tool result received: opened it"), "{}", ran.text());
    let call = w.calls.lock().expect("calls").last().cloned().expect("the client's tool was run");
    assert_eq!(call.name, "c1__openFile");
    assert_eq!(call.input, json!({"path": "a.txt"}));
    let [ToolCallState::Completed(done)] = &tool_calls(&ran.turn)[..] else { panic!("{:?}", tool_calls(&ran.turn)) };
    assert_eq!(done.tool_name, "openFile");
    assert!(matches!(&done.contributor, Some(ToolCallContributor::Client(c)) if c.client_id == "c1"));
}

#[tokio::test]
async fn a_question_from_the_model_is_a_chat_input_request() {
    let mut w = Real::new("ask").await;
    let chat = "ahp-chat:/ask";
    w.parent.create(w.start(chat)).await.expect("create");
    let args = json!({"questions": [{"question": "Which colour?", "header": "Colour", "multiSelect": false,
                                     "options": [{"label": "Blue", "description": "calm"}, {"label": "Red", "description": "bold"}]}]});
    w.parent.send(chat, "t1", &format!("ask me TOOL:AskUserQuestion ARGS:{args}")).await.expect("send");
    wait_for(&mut w.parent, chat, |s| {
        s.active_turn
            .as_ref()
            .is_some_and(|t| t.response_parts.iter().any(|p| matches!(p, ResponsePart::InputRequest(_))))
    })
    .await;
    let state = w.parent.chat(chat).expect("chat");
    let request = state
        .active_turn
        .as_ref()
        .and_then(|t| {
            t.response_parts.iter().find_map(|p| match p {
                ResponsePart::InputRequest(r) => Some(r.request.clone()),
                _ => None,
            })
        })
        .expect("an input request");
    assert!(active_calls(&state).is_empty(), "a question is not drawn as a tool call");
    let mut answers = HashMap::new();
    answers.insert(
        "q0".to_owned(),
        ChatInputAnswer::Submitted(ChatInputAnswered {
            value: ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                value: "Red".into(),
                freeform_values: None,
            }),
        }),
    );
    let handled = w
        .parent
        .answer(AnswerParams {
            chat: chat.into(),
            turn_id: "t1".into(),
            request_id: request.id.clone(),
            response: ChatInputResponseKind::Accept,
            answers,
        })
        .await
        .expect("answer");
    assert_eq!(handled["handled"], true);
    let ran = finish_turn(&mut w.parent, chat).await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(ran.text().contains(r#""Which colour?"="Red""#), "the model got the answer: {}", ran.text());
}

#[tokio::test]
async fn steering_reaches_the_running_turn_at_its_tool_call() {
    let mut w = Real::new("steer").await;
    let chat = "ahp-chat:/steer";
    w.parent.create(w.start(chat)).await.expect("create");
    let args = json!({"command": "echo steer-test", "description": "Print a word"});
    w.parent.send(chat, "t1", &format!("SLOW run TOOL:Bash ARGS:{args}")).await.expect("send");
    wait_for(&mut w.parent, chat, |s| !active_calls(s).is_empty()).await;
    let steer = json!({"chat": chat, "turnId": "t1", "id": "s1", "message": agent_runner::testing::user_message("change of plan")});
    let taken = w.parent.peer().request_value(parent::STEER, steer).await.expect("steer");
    assert_eq!(taken["taken"], true);
    let ran = finish_turn(&mut w.parent, chat).await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    assert!(
        ran.text().contains("change of plan"),
        "the model read the steering message in the same turn: {}",
        ran.text()
    );
    let shown = ran.turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::SystemNotification(n) if serde_json::to_value(&n.content).is_ok_and(|c| c == "change of plan"))
    });
    assert!(shown, "the steering message is shown where it came in: {:?}", ran.turn.response_parts);
    let ends = ran.actions.iter().filter(|a| matches!(a, StateAction::ChatTurnComplete(_))).count();
    assert_eq!(ends, 1);
}

#[tokio::test]
async fn a_resumed_session_sends_the_earlier_messages_and_claudes_files_read_back() {
    let w = Real::new("resume").await;
    let chat = "ahp-chat:/resume";
    let start = w.start(chat);
    let id = start.conversation_id.clone();
    let (mut first, _) = worker(&w.mock, &w.home).await;
    first.create(start.clone()).await.expect("create");
    let ran = run_turn(&mut first, chat, "t1", "remember the word PINEAPPLE").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    let recorded = ran.recorded.first().map(|(_, uuid)| uuid.clone()).expect("the prompt was recorded");
    first.peer().request_value(parent::CLOSE, json!({"chat": chat})).await.expect("close");
    drop(first);

    // A new worker, as after a restart: the catalogue reads Claude's own files...
    let (mut second, _) = worker(&w.mock, &w.home).await;
    let listed: protocol::ListResult = second.peer().request(parent::LIST, json!({})).await.expect("list");
    let row = listed.sessions.iter().find(|s| s.id == id).expect("the session is listed");
    assert_eq!(row.title, "remember the word PINEAPPLE");
    let at = json!({"workingDirectory": w.work.path()});
    let found: protocol::FindResult =
        second.peer().request(parent::FIND, json!({"id": id, "at": at})).await.expect("find");
    assert_eq!(found.session.map(|s| s.id), Some(id.clone()));
    let read: protocol::TranscriptResult =
        second.peer().request(parent::TRANSCRIPT, json!({"id": id, "at": at})).await.expect("transcript");
    let turns = read.turns.expect("a record");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].id, recorded, "read back under the uuid the live turn recorded");
    assert_eq!(turns[0].message.text, "remember the word PINEAPPLE");
    assert_eq!(markdown(&turns[0]), format!("{HELLO}remember the word PINEAPPLE"));

    // ...and saying something to it resumes it with the earlier messages.
    let mut resumed = start;
    resumed.resume = true;
    second.create(resumed).await.expect("create resumed");
    let ran = run_turn(&mut second, chat, "t2", "what was the word?").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    let request = w.mock.turn_requests().last().cloned().expect("asked");
    let seen = request.transcript_text();
    assert!(seen.contains("remember the word PINEAPPLE"), "the earlier prompt was sent: {seen}");
    assert!(seen.contains(&format!("{HELLO}remember the word PINEAPPLE")), "and the earlier answer: {seen}");
    assert_eq!(request.headers.get("x-claude-code-session-id"), Some(&id));
}

#[tokio::test]
async fn probe_lists_the_clis_models() {
    let w = Real::new("probe").await;
    let probe: protocol::ProbeResult = w.parent.peer().request(parent::PROBE, json!({})).await.expect("probe");
    let ids: Vec<&str> = probe.models.iter().map(|m| m.id.as_str()).collect();
    assert!(ids.contains(&"default") && ids.contains(&"haiku"), "{ids:?}");
    assert!(probe.commands.iter().any(|c| c.name == "compact"), "{:?}", probe.commands);
}

#[tokio::test]
async fn the_deployments_mcp_servers_are_handed_over_but_not_a_stdio_one_started_elsewhere() {
    use protocol::McpServer;
    let w = Real::new("servers").await;
    let chat = "ahp-chat:/servers";
    let mut start = w.start(chat);
    let server = |cwd: &std::path::Path| McpServer::Stdio {
        command: "python3".into(),
        args: vec![fake_bin().with_file_name("mcp_server.py").display().to_string()],
        cwd: Some(cwd.display().to_string()),
        env: Default::default(),
    };
    let elsewhere = temp_dir("servers-elsewhere");
    start.mcp_servers = Some(
        [("files".to_owned(), server(w.work.path())), ("faraway".to_owned(), server(elsewhere.path()))]
            .into_iter()
            .collect(),
    );
    let mut parent = w.parent;
    parent.create(start).await.expect("create");

    let ran = run_turn(&mut parent, chat, "t1", "hello").await;
    assert_eq!(ran.turn.state, TurnState::Complete);
    // The CLI connected the server in the session's folder and offers its tool (possibly behind
    // its tool search); the one set to start elsewhere never reached it.
    let body = w.mock.turn_requests().last().map(|r| r.body.to_string()).unwrap_or_default();
    assert!(body.contains("mcp__files__echo"), "the files server's tool is known to the model");
    assert!(!body.contains("faraway"), "the server started elsewhere was left out");
}

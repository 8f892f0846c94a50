//! The pi worker against the real pi (0.73.1, installed by `scripts/deps/pi.sh`) and the project's
//! mock OpenAI API, driven through `TestParent` the way the daemon drives a worker, with every
//! action folded through the official AHP reducer.
//!
//! pi is found at `$AHPD_PI_BIN`, else `$AHPD_TEST_CACHE/pi/node_modules/.bin/pi`, else
//! `<checkout>/.cache/pi/node_modules/.bin/pi`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::now_iso;
use agent_runner::testing::{start, user_message, Said, TestParent, ToolHandler};
use ahp_types::actions::{ChatToolCallConfirmedAction, ChatTurnStartedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ChatState, ResponsePart, ToolCallState, ToolDefinition, ToolResultContent, Turn, TurnState};
use protocol::methods::parent;
use protocol::{ConfirmParams, SendMessageParams, SteerParams, ToolOutcome, ToolRunParams, ToolSpec};
use serde_json::{json, Value};
use tests::mocks::openai::{MockOpenAi, Recorded};

/// A safety net around each wait; the waits themselves are on what the worker says.
const WITHIN: Duration = Duration::from_secs(90);

fn pi_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AHPD_PI_BIN") {
        return PathBuf::from(bin);
    }
    let cache = std::env::var_os("AHPD_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".cache"));
    let bin = cache.join("pi").join("node_modules").join(".bin").join("pi");
    assert!(
        bin.exists(),
        "pi is not installed at {}: run scripts/test (or scripts/deps/pi.sh) to install @mariozechner/pi-coding-agent@0.73.1",
        bin.display()
    );
    bin
}

/// The mock, a data folder with pi's config pointing at it, and a folder to work in.
struct World {
    mock: MockOpenAi,
    data: tempfile::TempDir,
    work: PathBuf,
}

impl World {
    async fn new(name: &str) -> Self {
        let mock = MockOpenAi::start().await.expect("the mock starts");
        let data = tempfile::Builder::new().prefix(&format!("ahpd-pi-test-{name}-")).tempdir().expect("a temp folder");
        let agent = data.path().join("agent");
        std::fs::create_dir_all(&agent).expect("agent folder");
        std::fs::write(agent.join("models.json"), mock.pi_models_json("mock").to_string()).expect("models.json");
        let settings = json!({
            "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true,
            "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 50, "provider": {"maxRetries": 0}}
        });
        std::fs::write(agent.join("settings.json"), settings.to_string()).expect("settings.json");
        let work = data.path().join("work");
        std::fs::create_dir_all(&work).expect("work folder");
        Self { mock, data, work }
    }

    fn options(&self) -> JsonObject {
        let mut options = JsonObject::new();
        options.insert("command".into(), Value::String(pi_bin().to_string_lossy().into_owned()));
        options.insert("agentDir".into(), Value::String(self.data.path().join("agent").to_string_lossy().into_owned()));
        options
    }

    fn data_dir(&self) -> Option<String> {
        Some(self.data.path().to_string_lossy().into_owned())
    }

    async fn parent(&self, tools: ToolHandler) -> TestParent {
        let parent = TestParent::in_process(agent_pi::factory(), tools);
        parent.initialize("pi", "pi", self.options(), self.data_dir()).await.expect("the handshake");
        parent
    }

    fn start(&self, chat: &str) -> protocol::Start {
        let mut s = start("ahp-session:/pi", chat);
        s.working_directory = Some(self.work.to_string_lossy().into_owned());
        s
    }
}

fn no_tools() -> ToolHandler {
    Arc::new(|call| ToolOutcome::failed(format!("no tool {}", call.name)))
}

/// Says a turn's start as the host does and hands the prompt over with the host's instructions.
async fn send(parent: &TestParent, chat: &str, turn_id: &str, text: &str, instructions: Option<&str>) {
    let message = user_message(text);
    parent.apply_client_action(
        chat,
        &StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.into(),
            started_at: now_iso(),
            message: message.clone(),
            queued_message_id: None,
            meta: None,
        }),
    );
    let params = SendMessageParams {
        chat: chat.into(),
        turn_id: turn_id.into(),
        message,
        instructions: instructions.map(str::to_owned),
        unattended: false,
        attachments: Vec::new(),
    };
    parent.peer().request_value(parent::SEND_MESSAGE, params).await.expect("the prompt is handed over");
}

/// Waits for the turn to end; answers it and the transcript ids the worker recorded on the way.
async fn finish(parent: &mut TestParent, chat: &str) -> (Turn, Vec<(String, String)>) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    let mut recorded = Vec::new();
    loop {
        if let Some(state) = parent.chat(chat) {
            if state.active_turn.is_none() {
                if let Some(turn) = state.turns.last() {
                    return (turn.clone(), recorded);
                }
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match parent.next(left).await {
            Some(Said::Action { outcome: Some(ahp::reducers::ReduceOutcome::Invalid(e)), action, .. }) => {
                panic!("an action the reducer found invalid: {e:?} {action:?}")
            }
            Some(Said::TurnRecorded { turn_id, transcript_id, .. }) => recorded.push((turn_id, transcript_id)),
            Some(_) => {}
            None => panic!("the turn did not end within {WITHIN:?}: {:#?}", parent.chat(chat)),
        }
    }
}

async fn until(parent: &mut TestParent, chat: &str, what: &str, predicate: impl Fn(&ChatState) -> bool) -> ChatState {
    parent.until(chat, WITHIN, predicate).await.unwrap_or_else(|e| panic!("{what}: {e}: {:#?}", parent.chat(chat)))
}

fn markdown(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

fn reasoning(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Reasoning(r) => Some(r.content.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_calls(turn: &Turn) -> Vec<ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(t) => Some(t.tool_call.clone()),
            _ => None,
        })
        .collect()
}

fn active_markdown(state: &ChatState) -> String {
    state
        .active_turn
        .as_ref()
        .map(|t| {
            t.response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::Markdown(m) => Some(m.content.as_str()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn completed_text(call: &ToolCallState) -> Option<(bool, String)> {
    let ToolCallState::Completed(done) = call else { return None };
    let text = done
        .content
        .iter()
        .flatten()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    Some((done.success, text))
}

fn last_request(mock: &MockOpenAi) -> Recorded {
    mock.requests().last().cloned().expect("the model was asked")
}

#[tokio::test]
async fn a_streamed_turn_thinks_runs_a_tool_and_fails_on_a_model_error() {
    let world = World::new("stream").await;
    let mut parent = world.parent(no_tools()).await;
    let chat = "ahp-chat:/stream";
    parent.create(world.start(chat)).await.expect("pi starts");

    send(&parent, chat, "t1", "[[think]] about it", None).await;
    let (turn, recorded) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(reasoning(&turn), "Let me think about this. ");
    assert_eq!(markdown(&turn), "thought done");
    assert!(turn.usage.as_ref().and_then(|u| u.output_tokens).is_some(), "usage was said");
    assert_eq!(recorded.len(), 1, "the turn is recorded under its prompt's entry");
    assert_eq!(recorded[0].0, "t1");

    send(&parent, chat, "t2", "please [[bash echo hi]]", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    let calls = tool_calls(&turn);
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(completed_text(&calls[0]), Some((true, "hi\n".to_owned())));
    assert_eq!(markdown(&turn), "tool said: hi");

    send(&parent, chat, "t3", "[[error]] please", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = turn.response_parts.last() else { panic!("an error part: {turn:#?}") };
    assert!(error.error.message.contains("mock: scripted error"), "{}", error.error.message);

    // A transient failure ends one run, pi retries it, and the turn goes on to its answer.
    let before = world.mock.requests().len();
    send(&parent, chat, "t4", "[[error500]] now", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert_eq!(markdown(&turn), "mock reply to: [[error500]] now");
    assert_eq!(world.mock.requests().len() - before, 2, "one failed request, one retry");

    send(&parent, chat, "t5", "/compact keep it short", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let compacted = turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::SystemNotification(n) if matches!(&n.content, ahp_types::common::StringOrMarkdown::Plain(s) if s.starts_with("Compacted")))
    });
    assert!(compacted, "{turn:#?}");
}

#[tokio::test]
async fn models_come_from_pi_and_a_conversation_changes_them() {
    let world = World::new("models").await;
    let mut parent = world.parent(no_tools()).await;
    let probed = parent.peer().request_value(parent::PROBE, json!({})).await.expect("probe");
    let ids: Vec<&str> = probed["models"].as_array().expect("models").iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, vec!["mock/mock-model"]);
    assert!(probed["commands"].as_array().expect("commands").iter().any(|c| c["name"] == "compact"));

    let chat = "ahp-chat:/models";
    let mut s = world.start(chat);
    s.model = Some(ahp_types::state::ModelSelection { id: "mock/mock-model".into(), config: None });
    parent.create(s).await.expect("pi starts on the model");
    let refused = parent
        .peer()
        .request_value(parent::CHANGE_MODEL, json!({"chat": chat, "model": {"id": "nope/none"}}))
        .await
        .expect_err("an unknown model is refused");
    assert!(refused.to_string().contains("nope/none"), "{refused}");
    parent
        .peer()
        .request_value(parent::CHANGE_MODEL, json!({"chat": chat, "model": {"id": "mock/mock-model"}}))
        .await
        .expect("a known model is taken");
    send(&parent, chat, "t1", "hello", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.usage.as_ref().and_then(|u| u.model.clone()).as_deref(), Some("mock/mock-model"));
}

#[tokio::test]
async fn a_tool_waits_for_a_person_who_denies_then_allows_it() {
    let world = World::new("deny").await;
    let mut parent = world.parent(no_tools()).await;
    let chat = "ahp-chat:/deny";
    let mut s = world.start(chat);
    s.settings.insert("ask".into(), json!("writes"));
    parent.create(s).await.expect("pi starts");

    for (turn_id, approved) in [("t1", false), ("t2", true)] {
        send(&parent, chat, turn_id, "[[bash echo hi]]", None).await;
        let state = until(&mut parent, chat, "the call waits", |c| {
            c.active_turn.as_ref().is_some_and(|t| {
                t.response_parts.iter().any(|p| matches!(p, ResponsePart::ToolCall(t) if matches!(t.tool_call, ToolCallState::PendingConfirmation(_))))
            })
        })
        .await;
        let call_id = state
            .active_turn
            .iter()
            .flat_map(|t| t.response_parts.iter())
            .find_map(|p| match p {
                ResponsePart::ToolCall(t) => match &t.tool_call {
                    ToolCallState::PendingConfirmation(p) => Some(p.tool_call_id.clone()),
                    _ => None,
                },
                _ => None,
            })
            .expect("a waiting call");
        parent.apply_client_action(
            chat,
            &StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
                turn_id: turn_id.into(),
                tool_call_id: call_id.clone(),
                meta: None,
                approved,
                confirmed: approved.then_some(ahp_types::state::ToolCallConfirmationReason::UserAction),
                reason: None,
                reason_message: None,
                user_suggestion: None,
                edited_tool_input: None,
                selected_option_id: Some(if approved { "allow" } else { "deny" }.into()),
            }),
        );
        let handled = parent
            .confirm(ConfirmParams {
                chat: chat.into(),
                turn_id: turn_id.into(),
                tool_call_id: call_id,
                approved,
                option_id: None,
                decision_source: None,
                edited_tool_input: None,
            })
            .await
            .expect("confirm");
        assert_eq!(handled["handled"], true);
        let (turn, _) = finish(&mut parent, chat).await;
        assert_eq!(turn.state, TurnState::Complete);
        let calls = tool_calls(&turn);
        if approved {
            assert_eq!(completed_text(&calls[0]), Some((true, "hi\n".to_owned())));
            assert_eq!(markdown(&turn), "tool said: hi");
        } else {
            assert!(matches!(calls[0], ToolCallState::Cancelled(_)), "{:?}", calls[0]);
            assert_eq!(markdown(&turn), "tool said: The user denied this tool call.");
        }
    }
}

#[tokio::test]
async fn an_abort_stops_the_turn_and_the_next_one_runs() {
    let world = World::new("abort").await;
    let mut parent = world.parent(no_tools()).await;
    let chat = "ahp-chat:/abort";
    parent.create(world.start(chat)).await.expect("pi starts");

    send(&parent, chat, "t1", "[[hold]] and wait", None).await;
    until(&mut parent, chat, "the reply streams", |c| active_markdown(c).starts_with("holding")).await;
    parent.abort(chat, Some("t1")).await.expect("abort");
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Cancelled);

    send(&parent, chat, "t2", "hello again", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(markdown(&turn), "mock reply to: hello again");

    // A prompt an extension's command handles starts no run; the turn still ends.
    send(&parent, chat, "t3", r#"/ahpd {"op":"nothing"}"#, None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(turn.response_parts.is_empty());
}

#[tokio::test]
async fn a_steering_message_reaches_the_running_turn() {
    let world = World::new("steer").await;
    let mut parent = world.parent(no_tools()).await;
    let chat = "ahp-chat:/steer";
    parent.create(world.start(chat)).await.expect("pi starts");

    send(&parent, chat, "t1", "[[hold]] go", None).await;
    until(&mut parent, chat, "the reply streams", |c| active_markdown(c).starts_with("holding")).await;
    let steer = SteerParams {
        chat: chat.into(),
        turn_id: "t1".into(),
        id: "s1".into(),
        message: user_message("steered: say bye"),
        attachments: Vec::new(),
    };
    let taken = parent.peer().request_value(parent::STEER, steer).await.expect("steer");
    assert_eq!(taken["taken"], true);
    world.mock.release();
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    let said_where_taken = turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::SystemNotification(n) if matches!(&n.content, ahp_types::common::StringOrMarkdown::Plain(s) if s == "steered: say bye"))
    });
    assert!(said_where_taken, "{:#?}", turn.response_parts);
    assert!(markdown(&turn).ends_with("mock reply to: steered: say bye"), "{}", markdown(&turn));
    let asked = last_request(&world.mock);
    assert!(asked.all_text().contains("steered: say bye"));
}

#[tokio::test]
async fn the_model_calls_a_host_tool_that_the_parent_runs() {
    let world = World::new("hosttool").await;
    let calls: Arc<Mutex<Vec<ToolRunParams>>> = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let handler: ToolHandler = Arc::new(move |call: ToolRunParams| {
        let q = call.input["q"].as_str().unwrap_or_default().to_owned();
        seen.lock().expect("lock").push(call);
        ToolOutcome::ok(format!("found: {q}"))
    });
    let mut parent = world.parent(handler).await;
    let chat = "ahp-chat:/hosttool";
    let mut s = world.start(chat);
    let lookup = ToolSpec {
        definition: ToolDefinition {
            name: "lookup".into(),
            title: Some("Look up".into()),
            description: Some("Looks a word up".into()),
            input_schema: Some(json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})),
            output_schema: None,
            annotations: None,
            meta: None,
        },
        owner: None,
        display_name: None,
        defer_loading: false,
        effects: None,
    };
    s.tools = vec![lookup.clone()];
    parent.create(s).await.expect("pi starts");

    send(&parent, chat, "t1", r#"[[call lookup {"q": "zebra"}]]"#, None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    let calls_said = tool_calls(&turn);
    assert_eq!(completed_text(&calls_said[0]), Some((true, "found: zebra".to_owned())));
    assert_eq!(markdown(&turn), "tool said: found: zebra");
    let ran = calls.lock().expect("lock").clone();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].name, "lookup");
    assert_eq!(ran[0].turn_id, "t1");
    // The model was offered the tool under its own name.
    let offered = last_request(&world.mock).body["tools"].to_string();
    assert!(offered.contains("lookup"), "{offered}");

    // A client joins with a tool of its own; the host's tool is withdrawn.
    let mut ping = lookup.clone();
    ping.definition.name = "c1__ping".into();
    ping.definition.title = None;
    ping.owner = Some("c1".into());
    ping.display_name = Some("ping".into());
    parent
        .peer()
        .request_value(parent::SET_TOOLS, json!({"chat": chat, "tools": [ping]}))
        .await
        .expect("the tools change");
    send(&parent, chat, "t2", r#"[[call c1__ping {"q": "pong"}]]"#, None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    let ToolCallState::Completed(done) = &tool_calls(&turn)[0] else { panic!("completed: {turn:#?}") };
    assert_eq!(done.tool_name, "ping", "a client's tool is drawn under its own name");
    assert!(matches!(&done.contributor, Some(ahp_types::state::ToolCallContributor::Client(c)) if c.client_id == "c1"));
    assert!(done.success, "{done:#?}");
    assert_eq!(calls.lock().expect("lock").last().map(|c| c.name.clone()).as_deref(), Some("c1__ping"));
    let offered = last_request(&world.mock).body["tools"].to_string();
    assert!(offered.contains("c1__ping") && !offered.contains("lookup"), "{offered}");
}

#[tokio::test]
async fn hidden_instructions_reach_the_model_and_no_client() {
    let world = World::new("hidden").await;
    let mut parent = world.parent(no_tools()).await;
    let chat = "ahp-chat:/hidden";
    let mut s = world.start(chat);
    s.instructions = vec!["START-RULES-7: be brief.".into()];
    parent.create(s).await.expect("pi starts");

    send(&parent, chat, "t1", "what now", Some("HIDDEN-WORDS-42: answer in one word.")).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    let asked = last_request(&world.mock);
    let messages = asked.messages();
    let hidden_as_user = messages.iter().any(|m| m["role"] == "user" && m.to_string().contains("HIDDEN-WORDS-42"));
    assert!(hidden_as_user, "the model got the turn's instructions: {messages:#?}");
    let system = messages.first().map(|m| m.to_string()).unwrap_or_default();
    assert!(system.contains("START-RULES-7"), "the start's instructions are in the system prompt");

    // The next turn does not carry the last turn's instructions.
    send(&parent, chat, "t2", "and then", None).await;
    finish(&mut parent, chat).await;
    let carried = last_request(&world.mock)
        .messages()
        .iter()
        .any(|m| m["role"] == "user" && m.to_string().contains("HIDDEN-WORDS-42"));
    assert!(!carried, "the instructions were for their own turn");

    // The mock echoes what it was sent, so the model's own words may quote them; nothing else does.
    let mut state = parent.chat(chat).expect("the chat");
    for turn in &mut state.turns {
        turn.response_parts.retain(|p| !matches!(p, ResponsePart::Markdown(_)));
    }
    assert_eq!(state.turns[0].message.text, "what now");
    let state = serde_json::to_string(&state).expect("encodes");
    assert!(!state.contains("HIDDEN-WORDS-42"), "no client sees the hidden instructions: {state}");
    assert!(!state.contains("START-RULES-7"));
}

#[tokio::test]
async fn a_session_resumes_in_a_fresh_worker_process() {
    let world = World::new("resume").await;
    let chat = "ahp-chat:/resume";
    let worker = || {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ahpd-pi-worker"));
        command.process_group(0);
        TestParent::spawn(command, no_tools()).expect("the worker starts")
    };

    let first_entry = {
        let mut parent = worker();
        parent.initialize("pi", "pi", world.options(), world.data_dir()).await.expect("handshake");
        parent.create(world.start(chat)).await.expect("pi starts");
        send(&parent, chat, "t1", "remember the word zebra", None).await;
        let (turn, recorded) = finish(&mut parent, chat).await;
        assert_eq!(turn.state, TurnState::Complete);
        parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");
        recorded[0].1.clone()
    };

    let mut parent = worker();
    parent.initialize("pi", "pi", world.options(), world.data_dir()).await.expect("handshake");
    let conversation = world.start(chat).conversation_id;
    let transcript = parent
        .peer()
        .request_value(parent::TRANSCRIPT, json!({"id": conversation, "at": {}}))
        .await
        .expect("the transcript");
    let turns: Vec<Turn> = serde_json::from_value(transcript["turns"].clone()).expect("turns");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].id, first_entry, "read back under the id the live turn was recorded as");
    assert_eq!(markdown(&turns[0]), "mock reply to: remember the word zebra");

    let mut s = world.start(chat);
    s.resume = true;
    parent.create(s).await.expect("pi resumes");
    send(&parent, chat, "t2", "what was the word", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    let asked = last_request(&world.mock).all_text();
    assert!(asked.contains("remember the word zebra"), "the model sees the earlier messages: {asked}");
    parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");
}

#[tokio::test]
async fn a_conversation_moved_to_another_folder_runs_its_tools_there() {
    let world = World::new("moved").await;
    let chat = "ahp-chat:/moved";
    let mut parent = world.parent(no_tools()).await;
    parent.create(world.start(chat)).await.expect("pi starts");
    send(&parent, chat, "t1", "[[bash pwd]]", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert!(markdown(&turn).contains(&format!("tool said: {}", world.work.display())), "{}", markdown(&turn));
    parent.peer().request_value(parent::CLOSE, json!({"chat": chat})).await.expect("close");

    // pi runs a session file's tools where its header says, not in its own folder: the worker
    // makes the header name the folder the conversation goes on in.
    let elsewhere = world.data.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("a second folder");
    let mut s = world.start(chat);
    s.resume = true;
    s.working_directory = Some(elsewhere.to_string_lossy().into_owned());
    parent.create(s).await.expect("pi resumes");
    send(&parent, chat, "t2", "[[bash pwd]]", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert!(markdown(&turn).contains(&format!("tool said: {}", elsewhere.display())), "{}", markdown(&turn));
    let asked = last_request(&world.mock).all_text();
    assert!(asked.contains(&world.work.display().to_string()), "the same conversation, resumed: {asked}");
    parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");
    // Its file went with it, where `pi --continue` in the new folder looks.
    assert_eq!(pi_files(&world, &elsewhere).len(), 1);
    assert!(pi_files(&world, &world.work).is_empty());
}

/// Runs the real `pi` as a person would in a terminal, in `folder`, with the world's agent
/// folder: `pi -p <args…>` (waited for without blocking the mock). Answers what it printed.
async fn pi_by_hand(world: &World, folder: &Path, args: &[&str]) -> String {
    let mut pi = std::process::Command::new(pi_bin());
    pi.arg("-p")
        .args(args)
        .current_dir(folder)
        .env("PI_CODING_AGENT_DIR", world.data.path().join("agent"))
        .env("PI_OFFLINE", "1")
        .env("PI_TELEMETRY", "0")
        .env("PI_SKIP_VERSION_CHECK", "1")
        .stdin(std::process::Stdio::null());
    let output = tokio::task::spawn_blocking(move || agent_runner::child::run_to_end(pi))
        .await
        .expect("pi was waited for")
        .expect("pi runs");
    assert!(output.status.success(), "pi failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The session files pi keeps for `folder` under the world's agent folder.
fn pi_files(world: &World, folder: &Path) -> Vec<PathBuf> {
    let catalogue = agent_pi::catalogue::Catalogue::new(&world.data.path().join("agent"), world.data.path());
    let dir = catalogue.dir_for(folder);
    std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

#[tokio::test]
async fn a_conversation_is_kept_where_pi_keeps_it_and_pi_continues_it() {
    let world = World::new("kept").await;
    let chat = "ahp-chat:/01a22a4b-0000-7000-8000-00000000c0de";
    let mut parent = world.parent(no_tools()).await;
    parent.create(world.start(chat)).await.expect("pi starts");
    send(&parent, chat, "t1", "remember the word plum", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");

    let files = pi_files(&world, &world.work);
    let [file] = &files[..] else { panic!("one session file where pi keeps the folder's: {files:?}") };
    assert!(file.to_string_lossy().ends_with("_01a22a4b-0000-7000-8000-00000000c0de.jsonl"), "{}", file.display());
    assert!(!world.data.path().join("sessions").exists(), "nothing in the worker's own folder");

    // pi in a terminal, in the same folder, goes on with it.
    let printed = pi_by_hand(&world, &world.work, &["--continue", "what was the word"]).await;
    assert!(printed.contains("mock reply to: what was the word"), "{printed}");
    assert!(last_request(&world.mock).all_text().contains("remember the word plum"), "the earlier turn was sent");
    let record = std::fs::read_to_string(file).expect("pi's file");
    assert!(record.contains("mock reply to: what was the word"), "pi wrote its answer to the same file: {record}");
}

#[tokio::test]
async fn a_conversation_pi_made_is_listed_read_back_and_resumed() {
    let world = World::new("own").await;
    pi_by_hand(&world, &world.work, &["remember the word kiwi"]).await;
    let mut parent = world.parent(no_tools()).await;

    let listed = parent.peer().request_value(parent::LIST, json!({})).await.expect("the list");
    let rows = listed["sessions"].as_array().cloned().unwrap_or_default();
    let [row] = &rows[..] else { panic!("pi's conversation is listed: {listed}") };
    assert_eq!(row["title"], "remember the word kiwi");
    let real = std::fs::canonicalize(&world.work).expect("the folder");
    assert_eq!(row["workingDirectories"], json!([format!("file://{}", real.display())]));
    let id = row["id"].as_str().expect("an id").to_owned();
    let found = parent.peer().request_value(parent::FIND, json!({"id": id, "at": {}})).await.expect("found");
    assert_eq!(found["session"]["id"], id.as_str());

    let transcript = parent
        .peer()
        .request_value(parent::TRANSCRIPT, json!({"id": id, "at": {"workingDirectory": world.work}}))
        .await
        .expect("the transcript");
    let turns: Vec<Turn> = serde_json::from_value(transcript["turns"].clone()).expect("turns");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].message.text, "remember the word kiwi");
    assert_eq!(markdown(&turns[0]), "mock reply to: remember the word kiwi");

    let chat = format!("ahp-chat:/{id}");
    let mut s = world.start(&chat);
    s.resume = true;
    parent.create(s).await.expect("pi resumes");
    send(&parent, &chat, "t2", "what was the word", None).await;
    let (turn, _) = finish(&mut parent, &chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(last_request(&world.mock).all_text().contains("remember the word kiwi"), "the earlier turn was sent");
    parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");
    assert_eq!(pi_files(&world, &world.work).len(), 1, "the same file went on");
}

#[tokio::test]
async fn a_conversation_an_older_ahpd_kept_is_read_back_and_moved_where_pi_keeps_it() {
    let world = World::new("older").await;
    let chat = "ahp-chat:/older";
    // What ahpd wrote before: `<data folder>/sessions/<conversation id>.jsonl`.
    let header =
        json!({"type": "session", "version": 3, "id": "x", "timestamp": "2026-11-30T02:32:25.258Z", "cwd": world.work});
    let prompt = json!({"type": "message", "id": "u1", "parentId": null, "timestamp": "2026-11-30T02:32:26.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "remember the word fig"}], "timestamp": 1_796_005_946_000_i64}});
    let answer = json!({"type": "message", "id": "a1", "parentId": "u1", "timestamp": "2026-11-30T02:32:27.000Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "noted"}], "api": "openai-completions",
                    "provider": "mock", "model": "mock-model", "stopReason": "stop", "timestamp": 1_796_005_947_000_i64,
                    "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                              "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}}});
    let older = world.data.path().join("sessions").join("older.jsonl");
    std::fs::create_dir_all(older.parent().expect("a folder")).expect("made");
    std::fs::write(&older, format!("{header}\n{prompt}\n{answer}\n")).expect("written");

    let mut parent = world.parent(no_tools()).await;
    let transcript =
        parent.peer().request_value(parent::TRANSCRIPT, json!({"id": "older", "at": {}})).await.expect("read");
    let turns: Vec<Turn> = serde_json::from_value(transcript["turns"].clone()).expect("turns");
    assert_eq!(turns.len(), 1, "{transcript}");

    let mut s = world.start(chat);
    s.resume = true;
    parent.create(s).await.expect("pi resumes");
    send(&parent, chat, "t2", "what was the word", None).await;
    let (turn, _) = finish(&mut parent, chat).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(last_request(&world.mock).all_text().contains("remember the word fig"), "the earlier turn was sent");
    parent.peer().request_value(parent::SHUTDOWN, json!({})).await.expect("shutdown");
    assert!(!older.exists(), "moved");
    let files = pi_files(&world, &world.work);
    let [file] = &files[..] else { panic!("where pi keeps the folder's sessions: {files:?}") };
    assert!(std::fs::read_to_string(file).expect("read").contains("remember the word fig"), "nothing lost");
}

//! The `acp` worker against a scripted ACP agent (`tests/fixtures/fake_acp_agent.py`), driven the
//! way the daemon drives it (`TestParent`), every action folded through the official reducers:
//! the mapping of a turn, and the edges a real agent rarely shows on demand.

mod common;

use std::collections::BTreeMap;

use agent_runner::testing::TestParent;
use ahp_types::actions::{ChatToolCallConfirmedAction, StateAction};
use ahp_types::state::{ConfirmationOptionKind, ToolCallState, TurnState};
use common::*;
use protocol::methods::parent as methods;
use protocol::{ConfirmParams, McpServer, ToolsEndpoint};
use serde_json::{json, Value};

/// Says a person's answer the way the host does: the client's action first, then the worker.
async fn confirm(parent: &TestParent, chat: &str, turn_id: &str, call_id: &str, approved: bool, option: Option<&str>) {
    let action = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: turn_id.into(),
        tool_call_id: call_id.into(),
        meta: None,
        approved,
        confirmed: None,
        reason: None,
        edited_tool_input: None,
        user_suggestion: None,
        reason_message: None,
        selected_option_id: option.map(str::to_owned),
    });
    parent.apply_client_action(chat, &action);
    let handled = parent
        .confirm(ConfirmParams {
            chat: chat.into(),
            turn_id: turn_id.into(),
            tool_call_id: call_id.into(),
            approved,
            option_id: option.map(str::to_owned),
            decision_source: Some("user-action".into()),
            edited_tool_input: None,
        })
        .await
        .expect("confirm answered");
    assert_eq!(handled, json!({"handled": true}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_prose_thinking_tool_calls_a_plan_and_usage() {
    let dir = scratch("stream");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    let created = parent.create(start_in("stream", &dir)).await.expect("create");
    assert!(created.conversation_id.expect("the agent's own id").starts_with("fake-"));
    let models: Vec<String> = created.models.expect("models").into_iter().map(|m| m.id).collect();
    assert_eq!(models, vec!["fast", "smart"]);

    let script =
        "think let me see; say hello there world; tool grep; failtool lint; plan read | write; say done; usage";
    let turn = turn(&mut parent, "ahp-chat:/stream", "t1", script).await;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(markdown(&turn.response_parts), "hello there worlddone");
    assert_eq!(reasoning(&turn.response_parts), "let me see ");
    let calls = calls(&turn.response_parts);
    assert_eq!(calls.len(), 3, "{calls:?}");
    let ToolCallState::Completed(grep) = &calls[0] else { panic!("grep completed: {:?}", calls[0]) };
    assert!(grep.success);
    assert_eq!(grep.display_name, "Run grep");
    let ToolCallState::Completed(lint) = &calls[1] else { panic!("lint completed: {:?}", calls[1]) };
    assert!(!lint.success);
    assert_eq!(lint.error, Some(json!("lint broke")));
    let ToolCallState::Completed(plan) = &calls[2] else { panic!("plan completed: {:?}", calls[2]) };
    assert_eq!(plan.tool_name, "plan");
    let plan_text = serde_json::to_string(&plan.content).expect("json");
    assert!(plan_text.contains("- [ ] read (in progress)") && plan_text.contains("- [ ] write"), "{plan_text}");
    let usage = turn.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.cache_read_tokens), (Some(11), Some(7), Some(3)));
    assert_eq!(usage.model.as_deref(), Some("fast"));
    let meta = usage.meta.expect("usage meta");
    assert_eq!(meta["ahpd.context"], json!({"used": 1234, "size": 200000}));
    assert_eq!(meta["ahpd.cost"]["currency"], "USD");
    assert_eq!(
        parent.peer().request_value(methods::CLOSE, json!({"chat": "ahp-chat:/stream"})).await.expect("close"),
        Value::Null
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_open_the_first_prompt_only() {
    let dir = scratch("instructions");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    let mut start = start_in("instr", &dir);
    start.instructions = vec!["Use the host's tools.".into(), "Be brief.".into()];
    parent.create(start).await.expect("create");
    let first = turn(&mut parent, "ahp-chat:/instr", "t1", "prompt").await;
    let blocks: Value = serde_json::from_str(&markdown(&first.response_parts)).expect("the prompt as JSON");
    assert_eq!(blocks[0], json!({"type": "text", "text": "Use the host's tools.\n\nBe brief."}));
    assert_eq!(blocks[1], json!({"type": "text", "text": "prompt"}));
    let second = turn(&mut parent, "ahp-chat:/instr", "t2", "prompt").await;
    let blocks: Value = serde_json::from_str(&markdown(&second.response_parts)).expect("the prompt as JSON");
    assert_eq!(blocks, json!([{"type": "text", "text": "prompt"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_answers_initialize_is_a_clear_error_and_is_stopped() {
    let dir = scratch("noinit");
    let mut options = fake_options(&["--no-initialize"]);
    options.insert("startTimeoutMs".into(), json!(5000));
    let parent = parent("silent", options, &dir).await;
    let error = parent.create(start_in("noinit", &dir)).await.expect_err("no session");
    let text = error.to_string();
    assert!(text.contains("silent: fake_acp_agent.py") || text.contains("silent: python3"), "{text}");
    assert!(text.contains("did not answer initialize within 5 s, so it was stopped"), "{text}");
    assert!(text.contains("never answering initialize, on purpose"), "the stderr tail: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_agent_says_what_to_install() {
    let dir = scratch("missing");
    let mut options = object(json!({"command": "/nowhere/gemini", "args": ["--acp"]}));
    options.insert("displayName".into(), json!("Gemini"));
    let parent = parent("gemini", options, &dir).await;
    let text = parent.create(start_in("missing", &dir)).await.expect_err("no session").to_string();
    assert!(text.contains("/nowhere/gemini was not found; install it"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_prompt_fails_the_turn_with_its_stderr_and_the_next_message_reloads() {
    let dir = scratch("crash");
    let state = scratch("crash-state");
    let state_dir = state.display().to_string();
    let mut parent = parent("fake", fake_options(&["--state-dir", &state_dir]), &dir).await;
    parent.create(start_in("crash", &dir)).await.expect("create");
    let one = turn(&mut parent, "ahp-chat:/crash", "t1", "say remember this").await;
    assert_eq!(one.state, TurnState::Complete);

    let crashed = turn(&mut parent, "ahp-chat:/crash", "t2", "say about to go; crash").await;
    assert_eq!(crashed.state, TurnState::Error);
    assert_eq!(markdown(&crashed.response_parts), "about to go");
    let (kind, message) = error_message(&crashed.response_parts).expect("an error part");
    assert_eq!(kind, "agentExited");
    assert!(message.contains("exited with code 3 in the middle of the turn"), "{message}");
    assert!(message.contains("crashing on purpose in the middle of a prompt"), "the stderr tail: {message}");

    // Started again and reloaded (session/load): the agent remembers the first turn, and the
    // history it replays is not shown as a turn.
    let three = turn(&mut parent, "ahp-chat:/crash", "t3", "history; last").await;
    assert_eq!(three.state, TurnState::Complete);
    assert_eq!(markdown(&three.response_parts), "1 prompts before thisremember this");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permissions_at_once_are_answered_in_either_order() {
    let dir = scratch("ask2");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("ask2", &dir)).await.expect("create");
    let chat = "ahp-chat:/ask2";
    parent.send(chat, "t1", "ask2 a.txt b.txt").await.expect("send");
    let state = parent.until(chat, PATIENCE, |c| pending_confirmations(c).len() == 2).await.expect("two questions");
    let asking = pending_confirmations(&state);
    for call in &asking {
        let options = call.options.clone().expect("the agent's own options");
        let kinds: Vec<_> = options.iter().map(|o| (o.id.as_str(), o.kind.clone())).collect();
        assert_eq!(
            kinds,
            vec![
                ("allow-once", ConfirmationOptionKind::Approve),
                ("allow-always", ConfirmationOptionKind::Approve),
                ("reject-once", ConfirmationOptionKind::Deny),
            ],
            "approvals first"
        );
        assert_eq!(call.meta.as_ref().and_then(|m| m.get("permissionKind")), Some(&json!("write")));
    }
    let id_of = |name: &str| {
        asking
            .iter()
            .find(|c| c.display_name == format!("Edit {name}"))
            .map(|c| c.tool_call_id.clone())
            .expect("a call")
    };
    // The second question first, denied; then the first, allowed with the option picked.
    confirm(&parent, chat, "t1", &id_of("b.txt"), false, None).await;
    confirm(&parent, chat, "t1", &id_of("a.txt"), true, Some("allow-always")).await;
    let done = parent.until_idle(chat, PATIENCE).await.expect("the turn ends");
    assert_eq!(done.state, TurnState::Complete);
    assert_eq!(markdown(&done.response_parts), "a.txt: allowed (allow-always); b.txt: rejected (reject-once)");
    let calls = calls(&done.response_parts);
    assert!(calls.iter().any(|c| matches!(c, ToolCallState::Completed(s) if s.success)), "{calls:?}");
    assert!(calls.iter().any(|c| matches!(c, ToolCallState::Cancelled(_))), "the denied call: {calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_answers_the_open_question_cancelled_then_cancels_the_turn() {
    let dir = scratch("cancel-ask");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("cask", &dir)).await.expect("create");
    let chat = "ahp-chat:/cask";
    parent.send(chat, "t1", "ask x.txt; say never said").await.expect("send");
    parent.until(chat, PATIENCE, |c| pending_confirmations(c).len() == 1).await.expect("a question");
    parent.abort(chat, Some("t1")).await.expect("abort");
    let stopped = parent.until_idle(chat, PATIENCE).await.expect("the turn ends");
    assert_eq!(stopped.state, TurnState::Cancelled);
    assert!(!markdown(&stopped.response_parts).contains("never said"));
    let next = turn(&mut parent, chat, "t2", "last").await;
    assert_eq!(markdown(&next.response_parts), "x.txt: cancelled", "what the agent was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_ends_it_cancelled_and_the_chat_goes_on() {
    let dir = scratch("cancel");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("cancel", &dir)).await.expect("create");
    let chat = "ahp-chat:/cancel";
    parent.send(chat, "t1", "say working on it; hang").await.expect("send");
    parent.until(chat, PATIENCE, |c| active_markdown(c) == "working on it").await.expect("it streams");
    parent.abort(chat, Some("t1")).await.expect("abort");
    let stopped = parent.until_idle(chat, PATIENCE).await.expect("the turn ends");
    assert_eq!(stopped.state, TurnState::Cancelled);
    let next = turn(&mut parent, chat, "t2", "say still here").await;
    assert_eq!((next.state, markdown(&next.response_parts).as_str()), (TurnState::Complete, "still here"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_read_and_written_inside_the_session_folders_only() {
    let dir = scratch("fs");
    let outside = scratch("fs-outside").join("outside.txt");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("fs", &dir)).await.expect("create");
    let script = format!(
        "write notes/inside.txt hello; read notes/inside.txt; write {} nope; write ../escape.txt nope; read /etc/hostname",
        outside.display()
    );
    let done = turn(&mut parent, "ahp-chat:/fs", "t1", &script).await;
    assert_eq!(done.state, TurnState::Complete);
    let said = markdown(&done.response_parts);
    assert!(said.contains("wrote notes/inside.txt"), "{said}");
    assert!(said.contains("read notes/inside.txt: hello"), "{said}");
    assert_eq!(said.matches("write refused:").count(), 2, "{said}");
    assert!(said.contains("outside this session's folders"), "{said}");
    assert!(said.contains("read refused:"), "{said}");
    assert_eq!(std::fs::read_to_string(dir.join("notes/inside.txt")).expect("written"), "hello");
    assert!(!outside.exists());
    assert!(!dir.parent().expect("a parent").join("escape.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_run_real_processes_in_the_session_folder() {
    let dir = scratch("term");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("term", &dir)).await.expect("create");
    let done =
        turn(&mut parent, "ahp-chat:/term", "t1", "run echo $((6 * 7)) && pwd; runargs echo a b; killterm").await;
    assert_eq!(done.state, TurnState::Complete);
    let said = markdown(&done.response_parts);
    assert!(said.contains(&format!("exit 0: 42\n{}", dir.display())), "{said}");
    assert!(said.contains("exit 0: a b"), "{said}");
    assert!(said.contains("signal SIGKILL:"), "{said}");
    // The call that ran the command shows what it printed.
    let shown = serde_json::to_string(&calls(&done.response_parts)).expect("json");
    assert!(shown.contains("42"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_are_handed_over_and_the_host_tools_only_over_http() {
    let dir = scratch("mcp");
    let mut servers = BTreeMap::new();
    servers.insert(
        "files".to_owned(),
        McpServer::Stdio { command: "srv".into(), args: vec!["/srv".into()], cwd: None, env: BTreeMap::new() },
    );
    servers.insert(
        "issues".to_owned(),
        McpServer::Http { url: "http://127.0.0.1:9/mcp".into(), headers: BTreeMap::new() },
    );
    let endpoint = ToolsEndpoint { url: "http://127.0.0.1:9/ahp-mcp/abc".into(), token: "sekrit".into() };

    let mut with_http = parent("fake", fake_options(&[]), &dir).await;
    let mut start = start_in("mcp1", &dir);
    start.mcp_servers = Some(servers.clone());
    start.tools_endpoint = Some(endpoint.clone());
    with_http.create(start).await.expect("create");
    let said = markdown(&turn(&mut with_http, "ahp-chat:/mcp1", "t1", "mcp").await.response_parts);
    let handed: Value = serde_json::from_str(&said).expect("json");
    let names: Vec<&str> = handed.as_array().expect("a list").iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, vec!["files", "issues", "ahp"]);
    assert_eq!(handed[2]["headers"], json!([{"name": "Authorization", "value": "Bearer sekrit"}]));

    // An agent that takes no server over HTTP, and ignores what it is handed: it still works.
    let mut without_http = parent("fake", fake_options(&["--no-http"]), &dir).await;
    let mut start = start_in("mcp2", &dir);
    start.mcp_servers = Some(servers);
    start.tools_endpoint = Some(endpoint);
    without_http.create(start).await.expect("create");
    let done = turn(&mut without_http, "ahp-chat:/mcp2", "t1", "mcp; say fine").await;
    assert_eq!(done.state, TurnState::Complete);
    let said = markdown(&done.response_parts);
    assert!(said.starts_with("[{\"args\": [\"/srv\"], \"command\": \"srv\""), "{said}");
    assert!(!said.contains("ahp-mcp") && !said.contains("issues"), "{said}");
    assert!(said.ends_with("fine"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_reasons_end_the_turn_as_acp_says() {
    let dir = scratch("stops");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    parent.create(start_in("stops", &dir)).await.expect("create");
    for (n, (reason, kind)) in
        [("max_tokens", "maxTokens"), ("max_turn_requests", "maxTurnRequests"), ("refusal", "refusal")]
            .into_iter()
            .enumerate()
    {
        let done = turn(&mut parent, "ahp-chat:/stops", &format!("t{n}"), &format!("say partial; stop {reason}")).await;
        assert_eq!(done.state, TurnState::Error, "{reason}");
        assert_eq!(error_message(&done.response_parts).expect("an error").0, kind);
    }
    let failed = turn(&mut parent, "ahp-chat:/stops", "t9", "error").await;
    let (kind, message) = error_message(&failed.response_parts).expect("an error");
    assert_eq!(kind, "agentError");
    assert!(message.contains("the script asked for an error"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_options_and_models_are_config_values_set_through_the_agent() {
    let dir = scratch("config");
    let mut parent = parent("fake", fake_options(&[]), &dir).await;
    let mut start = start_in("cfg", &dir);
    start.settings.insert("acp.verbosity".into(), json!("chatty"));
    parent.create(start).await.expect("create");
    let chat = json!("ahp-chat:/cfg");
    let settings = parent.peer().request_value(methods::SETTINGS, json!({"chat": chat})).await.expect("settings");
    assert_eq!(settings["values"], json!({"permissionMode": "default", "acp.verbosity": "chatty"}));

    let set = |key: &str, value: Value| json!({"chat": chat, "key": key, "value": value});
    let peer = parent.peer().clone();
    assert_eq!(
        peer.request_value(methods::SET_CONFIG, set("permissionMode", json!("yolo"))).await.expect("set"),
        json!({"accepted": true})
    );
    let refused = peer.request_value(methods::SET_CONFIG, set("permissionMode", json!("reckless"))).await.expect("set");
    assert_eq!(refused["refusal"], "Session configuration 'permissionMode' does not offer 'reckless'.");
    let refused = peer.request_value(methods::SET_CONFIG, set("voice", json!("x"))).await.expect("set");
    assert_eq!(refused["refusal"], "Session configuration 'voice' is not writable.");
    peer.request_value(methods::CHANGE_MODEL, json!({"chat": chat, "model": {"id": "smart"}})).await.expect("model");
    let refused = peer.request_value(methods::CHANGE_MODEL, json!({"chat": chat, "model": {"id": "huge"}})).await;
    assert!(refused
        .expect_err("not offered")
        .to_string()
        .contains("does not offer model \"huge\"; it offers fast, smart"));

    // The agent moving its own mode is said on the session channel.
    let done = turn(&mut parent, "ahp-chat:/cfg", "t1", "mode default; say ok").await;
    assert_eq!(done.usage, None);
    let settings = peer.request_value(methods::SETTINGS, json!({"chat": chat})).await.expect("settings");
    assert_eq!(settings["values"]["permissionMode"], "default");

    // The probe and the schema carry what the agent offered.
    let probe = peer.request_value(methods::PROBE, json!({})).await.expect("probe");
    let commands: Vec<&str> =
        probe["commands"].as_array().expect("commands").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(commands, vec!["review", "explain"]);
    assert_eq!(probe["models"][1]["id"], "smart");
    let schema = peer.request_value(methods::SCHEMA, json!({"policy": {}})).await.expect("schema");
    assert_eq!(schema["schema"]["properties"]["permissionMode"]["enum"], json!(["default", "yolo"]));
    assert_eq!(schema["schema"]["properties"]["acp.verbosity"]["enum"], json!(["terse", "chatty"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_uses_an_offered_method_or_names_the_ones_offered() {
    let dir = scratch("auth");
    let flags = ["--auth-methods", "api-key,oauth"];
    let unsigned = parent("fake", fake_options(&flags), &dir).await;
    let text = unsigned.create(start_in("a1", &dir)).await.expect_err("refused").to_string();
    assert!(text.contains("wants to be signed in before it answers, and offers api-key, oauth"), "{text}");

    let mut wrong = fake_options(&flags);
    wrong.insert("authenticate".into(), json!({"methodId": "password"}));
    let text = parent("fake", wrong, &dir).await.create(start_in("a2", &dir)).await.expect_err("refused").to_string();
    assert!(text.contains("fake offers api-key, oauth, not password"), "{text}");

    let mut right = fake_options(&flags);
    right.insert("authenticate".into(), json!({"methodId": "api-key"}));
    let mut signed = parent("fake", right, &dir).await;
    signed.create(start_in("a3", &dir)).await.expect("signed in");
    let done = turn(&mut signed, "ahp-chat:/a3", "t1", "say in").await;
    assert_eq!(done.state, TurnState::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_conversation_hears_the_instructions_it_never_heard_and_only_those() {
    let dir = scratch("resume-instructions");
    let state = scratch("resume-instructions-state");
    let flags = ["--state-dir", state.to_str().expect("utf8")];
    let start_with = |instructions: &[&str], resume: Option<&str>| {
        let mut start = start_in("ri", &dir);
        start.instructions = instructions.iter().map(|s| (*s).to_owned()).collect();
        if let Some(id) = resume {
            start.resume = true;
            start.conversation_id = id.to_owned();
        }
        start
    };
    let blocks_of = |turn: &ahp_types::state::Turn| -> Value {
        serde_json::from_str(&markdown(&turn.response_parts)).expect("the prompt as JSON")
    };

    let mut first = parent("fake", fake_options(&flags), &dir).await;
    let id = first.create(start_with(&["Be brief."], None)).await.expect("create").conversation_id.expect("an id");
    let opened = turn(&mut first, "ahp-chat:/ri", "t1", "prompt").await;
    assert_eq!(blocks_of(&opened)[0], json!({"type": "text", "text": "Be brief."}));
    first.peer().request_value(methods::SHUTDOWN, json!({})).await.expect("shutdown");

    // The replayed history holds the words: they are not said again.
    let mut second = parent("fake", fake_options(&flags), &dir).await;
    second.create(start_with(&["Be brief."], Some(&id))).await.expect("resume");
    let again = turn(&mut second, "ahp-chat:/ri", "t2", "prompt").await;
    assert_eq!(blocks_of(&again), json!([{"type": "text", "text": "prompt"}]));
    second.peer().request_value(methods::SHUTDOWN, json!({})).await.expect("shutdown");

    // A rule joined them since: the words open the next prompt.
    let mut third = parent("fake", fake_options(&flags), &dir).await;
    third.create(start_with(&["Be brief.", "Use tabs."], Some(&id))).await.expect("resume");
    let told = turn(&mut third, "ahp-chat:/ri", "t3", "prompt").await;
    assert_eq!(
        blocks_of(&told),
        json!([{"type": "text", "text": "Be brief.\n\nUse tabs."}, {"type": "text", "text": "prompt"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_worker_resumes_with_session_load_or_says_why_not() {
    let dir = scratch("resume");
    let state = scratch("resume-state");
    let flags = ["--state-dir", state.to_str().expect("utf8")];
    let mut first = parent("fake", fake_options(&flags), &dir).await;
    let id = first.create(start_in("r1", &dir)).await.expect("create").conversation_id.expect("an id");
    turn(&mut first, "ahp-chat:/r1", "t1", "say the password is swordfish").await;
    first.peer().request_value(methods::SHUTDOWN, json!({})).await.expect("shutdown");

    let mut second = parent("fake", fake_options(&flags), &dir).await;
    let mut start = start_in("r1", &dir);
    start.resume = true;
    start.conversation_id = id.clone();
    let resumed = second.create(start).await.expect("resume");
    assert_eq!(resumed.conversation_id.as_deref(), Some(id.as_str()));
    let done = turn(&mut second, "ahp-chat:/r1", "t2", "history; last").await;
    assert_eq!(markdown(&done.response_parts), "1 prompts before thisthe password is swordfish");

    let cannot = parent("fake", fake_options(&["--no-load"]), &dir).await;
    let mut start = start_in("r2", &dir);
    start.resume = true;
    start.conversation_id = "fake-old".into();
    let text = cannot.create(start).await.expect_err("no load").to_string();
    assert!(text.contains("fake: this ACP server cannot load a session, so \"fake-old\" cannot be resumed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_stdout_lines_are_skipped_and_an_agent_deaf_to_eof_is_still_stopped() {
    let dir = scratch("noise");
    let mut parent = parent("fake", fake_options(&["--stdout-noise", "--ignore-eof"]), &dir).await;
    parent.create(start_in("noise", &dir)).await.expect("create");
    let done = turn(&mut parent, "ahp-chat:/noise", "t1", "say fine").await;
    assert_eq!(markdown(&done.response_parts), "fine");
    parent.peer().request_value(methods::CLOSE, json!({"chat": "ahp-chat:/noise"})).await.expect("closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_load_is_started_anew_after_a_crash_and_says_so() {
    let dir = scratch("anew");
    let mut parent = parent("fake", fake_options(&["--no-load"]), &dir).await;
    let mut start = start_in("anew", &dir);
    start.instructions = vec!["Be brief.".into()];
    parent.create(start).await.expect("create");
    let crashed = turn(&mut parent, "ahp-chat:/anew", "t1", "crash").await;
    assert_eq!(crashed.state, TurnState::Error);
    let next = turn(&mut parent, "ahp-chat:/anew", "t2", "prompt").await;
    assert_eq!(next.state, TurnState::Complete);
    let notice = serde_json::to_string(&next.response_parts).expect("json");
    assert!(notice.contains("cannot load its conversation, so a new one began"), "{notice}");
    let blocks: Value = serde_json::from_str(&markdown(&next.response_parts)).expect("the prompt as JSON");
    assert_eq!(blocks[0]["text"], "Be brief.", "the new conversation opens with the instructions again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_an_agent_lists_are_read_page_by_page_found_and_read_back() {
    let dir = scratch("list");
    let state = scratch("list-state");
    let state_dir = state.display().to_string();
    let mut parent = parent("fake", fake_options(&["--state-dir", &state_dir, "--list"]), &dir).await;
    parent.create(start_in("list", &dir)).await.expect("create");
    assert_eq!(turn(&mut parent, "ahp-chat:/list", "t1", "say first words").await.state, TurnState::Complete);
    assert_eq!(turn(&mut parent, "ahp-chat:/list", "t2", "say second words").await.state, TurnState::Complete);
    parent.create(start_in("other", &dir)).await.expect("create");
    assert_eq!(turn(&mut parent, "ahp-chat:/other", "t1", "say other words").await.state, TurnState::Complete);

    // Two pages of one session each: both are listed.
    let listed: protocol::ListResult = parent.peer().request(methods::LIST, json!({})).await.expect("listed");
    let mut titles: Vec<&str> = listed.sessions.iter().map(|s| s.title.as_str()).collect();
    titles.sort_unstable();
    assert_eq!(titles, ["say first words", "say other words"]);
    let row = listed.sessions.iter().find(|s| s.title == "say first words").expect("listed").clone();
    assert_eq!(row.working_directories, vec![format!("file://{}", dir.display())]);
    let found: protocol::FindResult =
        parent.peer().request(methods::FIND, json!({ "id": row.id })).await.expect("found");
    assert_eq!(found.session, Some(row.clone()));

    // Read back from what session/load replays, in the folder the listing names.
    let read: protocol::TranscriptResult =
        parent.peer().request(methods::TRANSCRIPT, json!({ "id": row.id })).await.expect("read back");
    let turns = read.turns.expect("its turns");
    let said: Vec<(&str, String)> =
        turns.iter().map(|t| (t.message.text.as_str(), markdown(&t.response_parts))).collect();
    assert_eq!(said, [("say first words", "first words".to_owned()), ("say second words", "second words".to_owned())]);
    assert!(turns.iter().all(|t| t.state == TurnState::Complete));

    // An agent that does not list its sessions lists none.
    let quiet_dir = scratch("list-quiet");
    let quiet = common::parent("quiet", fake_options(&["--state-dir", &state_dir]), &quiet_dir).await;
    let none: protocol::ListResult = quiet.peer().request(methods::LIST, json!({})).await.expect("listed");
    assert!(none.sessions.is_empty(), "{none:?}");
}

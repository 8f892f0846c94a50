//! The mapper replays transcripts recorded from pi 0.73.1 (`tests/fixtures/transcript-*.jsonl`,
//! from the research folder) and what it says is folded through the official AHP chat reducer.

use std::collections::HashMap;

use agent_runner::rpc::{Incoming, Peer};
use agent_runner::testing::{empty_chat, user_message};
use agent_runner::{now_iso, SessionHost};
use ahp::reducers::{apply_action_to_chat, ReduceOutcome};
use ahp_types::actions::{ChatToolCallConfirmedAction, ChatTurnStartedAction, StateAction};
use ahp_types::state::{ChatState, ResponsePart, ToolCallState, Turn, TurnState};
use protocol::EmitParams;
use serde_json::Value;

use super::*;

const CHAT: &str = "ahp-chat:/replay";

/// A worker-side host whose emits are read back, in order, on the other end of a pipe.
struct Folding {
    host: SessionHost,
    incoming: tokio::sync::mpsc::UnboundedReceiver<Incoming>,
    _parent: Peer,
}

fn folding() -> Folding {
    let (ours, theirs) = tokio::io::duplex(1 << 22);
    let (read, write) = tokio::io::split(ours);
    let worker = Peer::start(read, write);
    let (read, write) = tokio::io::split(theirs);
    let parent = Peer::start(read, write);
    let host = SessionHost::new(worker.peer, "ahp-session:/replay".into(), CHAT.into());
    Folding { host, incoming: parent.incoming, _parent: parent.peer }
}

impl Folding {
    /// Says a turn's start the way the host does, in the same stream as the mapper's actions.
    fn start_turn(&self, turn_id: &str, text: &str) -> TurnMapper {
        self.host.emit_chat(StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.to_owned(),
            started_at: now_iso(),
            message: user_message(text),
            queued_message_id: None,
            meta: None,
        }));
        TurnMapper::new(TurnWriter::new(self.host.clone(), turn_id))
    }

    /// Every action said so far, folded; fails on an action the reducer finds invalid.
    async fn fold(&mut self) -> (ChatState, Vec<StateAction>) {
        self.host.turn_recorded("end-of-replay", "end-of-replay");
        let mut chat = empty_chat(CHAT);
        let mut actions = Vec::new();
        while let Some(message) = self.incoming.recv().await {
            let Incoming::Notification { method, params } = message else { continue };
            if method != "emit" {
                break;
            }
            let emit: EmitParams = serde_json::from_value(params).expect("an emit");
            if let ReduceOutcome::Invalid(e) = apply_action_to_chat(&mut chat, &emit.action) {
                panic!("the reducer found an action invalid: {e:?} {:?}", emit.action);
            }
            actions.push(emit.action);
        }
        (chat, actions)
    }
}

fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().map(|l| serde_json::from_str(l).expect("a transcript line")).collect()
}

/// Follow-ups pi writes in the same tick as `agent_end`: they arrive before a barrier's answer.
fn same_tick(record: &PiRecord) -> bool {
    matches!(record, PiRecord::AutoRetryStart { .. } | PiRecord::AutoRetryEnd { .. } | PiRecord::CompactionStart { .. })
}

/// Replays a transcript as the worker's driver would: a prompt opens a turn (commands and prompts
/// sent while one runs do not), an abort asks the stop, a barrier is answered before the next
/// record that is not a same-tick follow-up, and a confirm dialog is a gate a person answers.
async fn replay(name: &str) -> (ChatState, Vec<StateAction>) {
    let mut folding = folding();
    let tools = ToolCatalog::new();
    let mut active: Option<TurnMapper> = None;
    let mut barrier = false;
    let mut prompts: HashMap<String, String> = HashMap::new();
    let mut asked: HashMap<String, String> = HashMap::new();
    let mut last_tool_call = String::new();
    let mut turns = 0;
    for line in fixture(name) {
        let Some(obj) = line.get("obj") else { continue };
        let outgoing = line["dir"] == "out";
        let record: Option<PiRecord> = if outgoing { serde_json::from_value(obj.clone()).ok() } else { None };
        if barrier && !record.as_ref().is_some_and(same_tick) {
            barrier = false;
            if let Some(mapper) = active.as_mut() {
                if mapper.on_barrier() == Step::Ended {
                    active = None;
                }
            }
        }
        if !outgoing {
            let text = obj["message"].as_str().unwrap_or_default();
            match obj["type"].as_str() {
                Some("prompt") if active.is_none() && !text.starts_with('/') => {
                    turns += 1;
                    let turn_id = format!("t{turns}");
                    prompts.insert(obj["id"].as_str().unwrap_or_default().to_owned(), turn_id.clone());
                    active = Some(folding.start_turn(&turn_id, text));
                }
                Some("abort") => {
                    if let Some(mapper) = active.as_mut() {
                        mapper.request_abort();
                    }
                }
                Some("extension_ui_response") => {
                    let approved = obj["confirmed"].as_bool().unwrap_or(false);
                    let call = asked.remove(obj["id"].as_str().unwrap_or_default()).expect("a dialog we saw");
                    if let Some(mapper) = active.as_mut() {
                        folding.host.emit_chat(StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
                            turn_id: mapper.turn_id().to_owned(),
                            tool_call_id: call.clone(),
                            meta: None,
                            approved,
                            confirmed: approved.then_some(ahp_types::state::ToolCallConfirmationReason::UserAction),
                            reason: None,
                            reason_message: None,
                            user_suggestion: None,
                            edited_tool_input: None,
                            selected_option_id: None,
                        }));
                        if !approved {
                            mapper.denied(&call);
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        let Some(record) = record else { continue };
        let Some(mapper) = active.as_mut() else { continue };
        let step = match &record {
            PiRecord::Response { id: Some(id), success: false, error, .. }
                if prompts.get(id).map(String::as_str) == Some(mapper.turn_id()) =>
            {
                mapper.finish(TurnEnd::Error(agent_runner::error_info("sendFailed", error.clone().unwrap_or_default())))
            }
            PiRecord::ExtensionUiRequest { id, method, .. } if method == "confirm" => {
                asked.insert(id.clone(), last_tool_call.clone());
                let question = Question { title: "Run bash?".into(), options: None, meta: None };
                mapper.gate(&last_tool_call, "bash", &serde_json::json!({"command": "echo hi"}), Some(question));
                Step::Continue
            }
            PiRecord::ToolExecutionStart { tool_call_id, .. } => {
                last_tool_call = tool_call_id.clone();
                mapper.on_record(&record, &tools)
            }
            _ => mapper.on_record(&record, &tools),
        };
        match step {
            Step::Barrier => barrier = true,
            Step::Ended => active = None,
            Step::Continue => {}
        }
    }
    if barrier {
        if let Some(mapper) = active.as_mut() {
            if mapper.on_barrier() == Step::Ended {
                active = None;
            }
        }
    }
    assert!(active.is_none(), "a turn of {name} never ended");
    folding.fold().await
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

fn notifications(turn: &Turn) -> Vec<String> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::SystemNotification(n) => Some(match &n.content {
                ahp_types::common::StringOrMarkdown::Plain(s) => s.clone(),
                other => format!("{other:?}"),
            }),
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

fn endings(actions: &[StateAction]) -> HashMap<String, usize> {
    let mut count = HashMap::new();
    for action in actions {
        let turn = match action {
            StateAction::ChatTurnComplete(a) => &a.turn_id,
            StateAction::ChatTurnCancelled(a) => &a.turn_id,
            StateAction::ChatError(a) => &a.turn_id,
            _ => continue,
        };
        *count.entry(turn.clone()).or_insert(0) += 1;
    }
    count
}

fn assert_each_turn_ends_once(chat: &ChatState, actions: &[StateAction]) {
    assert!(chat.active_turn.is_none());
    let endings = endings(actions);
    for turn in &chat.turns {
        assert_eq!(endings.get(&turn.id), Some(&1), "turn {} ends once", turn.id);
    }
}

#[tokio::test]
async fn the_basic_transcript_folds_into_the_turns_a_person_saw() {
    let (chat, actions) = replay("transcript-basic.jsonl").await;
    assert_each_turn_ends_once(&chat, &actions);
    let turns = &chat.turns;
    assert_eq!(turns.len(), 9, "{:#?}", turns.iter().map(|t| (&t.message.text, &t.state)).collect::<Vec<_>>());

    assert_eq!(turns[0].state, TurnState::Complete);
    assert_eq!(markdown(&turns[0]), "mock reply to: hello there");
    assert!(turns[0].usage.as_ref().and_then(|u| u.input_tokens).is_some());

    assert_eq!(turns[1].state, TurnState::Complete);
    let calls = tool_calls(&turns[1]);
    assert_eq!(calls.len(), 1);
    let ToolCallState::Completed(done) = &calls[0] else { panic!("the call completed: {:?}", calls[0]) };
    assert!(done.success);
    assert_eq!(done.tool_name, "bash");
    let output: Vec<_> = done.content.iter().flatten().collect();
    assert!(matches!(output.first(), Some(ToolResultContent::Text(t)) if t.text == "hi\n"));
    assert_eq!(markdown(&turns[1]), "tool said: hi");

    assert_eq!(reasoning(&turns[2]), "Let me think about this. ");
    assert_eq!(markdown(&turns[2]), "thought done");

    // The hidden instructions reach the model (its reply quotes them) but are no part of the turn.
    assert!(markdown(&turns[3]).starts_with("mock reply to: what now"));
    assert!(turns[3].response_parts.iter().all(|p| !matches!(p, ResponsePart::SystemNotification(_))));

    // Steering and follow-up arrive inside the running turn, where pi took them.
    assert_eq!(turns[4].state, TurnState::Complete);
    assert_eq!(notifications(&turns[4]), vec!["steered: stop counting", "follow-up: then say bye"]);

    assert_eq!(turns[5].state, TurnState::Cancelled);
    assert!(markdown(&turns[5]).starts_with("w0"));

    assert_eq!(turns[6].state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = turns[6].response_parts.last() else { panic!("an error part") };
    assert_eq!(error.error.message, "400 mock: scripted error");

    assert_eq!(reasoning(&turns[7]), "Let me think about this. ");
    assert!(matches!(tool_calls(&turns[8]).first(), Some(ToolCallState::Completed(c)) if c.success));
}

#[tokio::test]
async fn the_extras_transcript_asks_and_retries_into_one_ending() {
    let (chat, actions) = replay("transcript-extras.jsonl").await;
    assert_each_turn_ends_once(&chat, &actions);
    let turns = &chat.turns;
    assert_eq!(turns.len(), 3);

    // Allowed: the call asked, then ran and completed.
    let asked = actions.iter().any(|a| matches!(a, StateAction::ChatToolCallReady(r) if r.confirmed.is_none()));
    assert!(asked, "the call waited for a person");
    assert!(matches!(tool_calls(&turns[0]).first(), Some(ToolCallState::Completed(c)) if c.success));

    // Denied: the client's denial cancelled the call and nothing completed it afterwards.
    assert!(matches!(tool_calls(&turns[1]).first(), Some(ToolCallState::Cancelled(_))));
    assert_eq!(markdown(&turns[1]), "tool said: Denied by host");

    // Three runs (two automatic retries) are one turn with one ending: the final error.
    assert_eq!(turns[2].state, TurnState::Error);
    let Some(ResponsePart::Error(error)) = turns[2].response_parts.last() else { panic!("an error part") };
    assert_eq!(error.error.message, "500 mock: scripted error");
}

#[tokio::test]
async fn a_retry_that_succeeds_and_an_unstreamed_block_still_read_right() {
    let mut folding = folding();
    let tools = ToolCatalog::new();
    let mut mapper = folding.start_turn("t1", "hello");
    let records = [
        r#"{"type":"agent_start"}"#,
        r#"{"type":"message_start","message":{"role":"assistant","content":[]}}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"503 overloaded"}}"#,
        r#"{"type":"agent_end","messages":[{"role":"assistant","content":[],"stopReason":"error","errorMessage":"503 overloaded"}]}"#,
    ];
    for record in records {
        let record: PiRecord = serde_json::from_str(record).expect("a record");
        let step = mapper.on_record(&record, &tools);
        assert_ne!(step, Step::Ended);
    }
    let retry: PiRecord = serde_json::from_str(
        r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":2,"delayMs":1,"errorMessage":"503"}"#,
    )
    .expect("a record");
    assert_eq!(mapper.on_record(&retry, &tools), Step::Continue);
    assert_eq!(mapper.on_barrier(), Step::Continue, "a retry keeps the turn open");
    let records = [
        r#"{"type":"agent_start"}"#,
        r#"{"type":"message_start","message":{"role":"assistant","content":[]}}"#,
        r#"{"type":"message_update","assistantMessageEvent":{"type":"text_end","contentIndex":0,"content":"whole at once"}}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"whole at once"}],"stopReason":"stop"}}"#,
        r#"{"type":"auto_retry_end","success":true,"attempt":1}"#,
        r#"{"type":"agent_end","messages":[{"role":"assistant","stopReason":"stop"}]}"#,
    ];
    for record in records {
        let record: PiRecord = serde_json::from_str(record).expect("a record");
        mapper.on_record(&record, &tools);
    }
    assert_eq!(mapper.on_barrier(), Step::Ended);
    let (chat, _) = folding.fold().await;
    assert_eq!(chat.turns[0].state, TurnState::Complete);
    assert_eq!(markdown(&chat.turns[0]), "whole at once");
}

#[tokio::test]
async fn a_clients_tool_is_drawn_under_its_own_name_and_owner() {
    let mut folding = folding();
    let mut tools = ToolCatalog::new();
    tools.insert("c1__ping".into(), HostTool { display_name: "ping".into(), owner: Some("c1".into()), asks: false });
    let mut mapper = folding.start_turn("t1", "ping it");
    let records = [
        r#"{"type":"agent_start"}"#,
        r#"{"type":"message_start","message":{"role":"assistant","content":[]}}"#,
        r#"{"type":"message_update","assistantMessageEvent":{"type":"toolcall_start","contentIndex":0,"partial":{"content":[{"type":"toolCall","id":"call_9","name":"c1__ping","arguments":{}}]}}}"#,
        r#"{"type":"message_update","assistantMessageEvent":{"type":"toolcall_delta","contentIndex":0,"delta":"{}"}}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"toolUse"}}"#,
        r#"{"type":"tool_execution_start","toolCallId":"call_9","toolName":"c1__ping","args":{}}"#,
        r#"{"type":"tool_execution_end","toolCallId":"call_9","toolName":"c1__ping","result":{"content":[{"type":"text","text":"pong"}]},"isError":false}"#,
        r#"{"type":"agent_end","messages":[]}"#,
    ];
    for record in records {
        let record: PiRecord = serde_json::from_str(record).expect("a record");
        mapper.on_record(&record, &tools);
    }
    assert_eq!(mapper.on_barrier(), Step::Ended);
    let (chat, actions) = folding.fold().await;
    let start = actions.iter().find_map(|a| match a {
        StateAction::ChatToolCallStart(s) => Some(s.clone()),
        _ => None,
    });
    let start = start.expect("the call started");
    assert_eq!(start.tool_name, "ping");
    assert!(
        matches!(start.contributor, Some(ahp_types::state::ToolCallContributor::Client(ref c)) if c.client_id == "c1")
    );
    let ToolCallState::Completed(done) = &tool_calls(&chat.turns[0])[0] else { panic!("completed") };
    assert_eq!(done.past_tense_message, ahp_types::common::StringOrMarkdown::Plain("Called ping".into()));
}

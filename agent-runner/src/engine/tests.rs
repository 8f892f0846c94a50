//! The engine's contract, through a scripted backend served in process to a [`TestParent`]: the
//! turns run one after another, parked items live in a map and are settled by abort and close, a
//! turn stopped while it was prepared is never sent, and a lost turn's decisions are carried out
//! once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{ChatInputRequest, ResponsePart, TurnState};
use async_trait::async_trait;
use protocol::methods::parent;
use protocol::{
    AgentDescriptor, AgentFeatures, ChatRef, ConfirmParams, Decision, Policy, ResumeTurnParams, SchemaResult,
    SendMessageParams, Start, ToolOutcome,
};
use serde_json::json;
use tokio::sync::Notify;

use super::calls::Calls;
use super::{Asking, Backend, Engine, Kind, Mapper, Settled, State};
use crate::agent::{Agent, AgentError, Session};
use crate::host::SessionHost;
use crate::sync::lock;
use crate::testing::{start, user_message, TestParent};
use crate::turn::{error_info, Question, TurnEnd, TurnWriter};

const CHAT: &str = "ahp-chat:/c";
const PATIENCE: Duration = Duration::from_secs(10);

/// What the scripted runtime was told, in order.
#[derive(Default)]
struct Log {
    sent: Vec<String>,
    settled: Vec<(String, Settled)>,
    interrupted: u32,
    stopped: u32,
}

/// A runtime that does what its prompt says: `say X`, `park ID` (a confirmation; the turn ends
/// once nothing is parked), `ask ID` (a question), `decide TOOL` (a lost turn's decision), `end`,
/// `fail`. A prompt beginning `gated` waits for the test before it goes out.
struct Script {
    log: Arc<Mutex<Log>>,
    gate: Arc<Notify>,
}

struct ScriptTurn {
    writer: TurnWriter,
    calls: Calls<()>,
}

impl Mapper for ScriptTurn {
    fn writer(&mut self) -> &mut TurnWriter {
        &mut self.writer
    }

    fn answered(&mut self, call: &str, approved: bool) {
        self.calls.answered(call, approved);
    }
}

#[async_trait]
impl Backend for Script {
    type State = ();
    type Turn = ScriptTurn;
    type Reply = String;

    fn open(&self, _own: &mut (), writer: TurnWriter, _params: &SendMessageParams) -> ScriptTurn {
        ScriptTurn { writer, calls: Calls::default() }
    }

    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ahp_types::state::ErrorInfo> {
        // A resumed turn's words follow what it is told about being cut off.
        let text = params.message.text.rsplit("\n\n").next().unwrap_or_default().to_owned();
        if text.starts_with("gated") {
            self.gate.notified().await;
        }
        let mut state = engine.lock();
        if !state.mark_sent(&params.turn_id) {
            return Ok(());
        }
        lock(&self.log).sent.push(text.clone());
        for command in text.split(';').map(str::trim) {
            let (verb, rest) = command.split_once(' ').unwrap_or((command, ""));
            let Some(turn) = state.sent() else { return Ok(()) };
            match verb {
                "say" => turn.writer.text(rest),
                "park" => {
                    turn.calls.start(&mut turn.writer, rest, "tool", "Tool", None, ());
                    let question = Question { title: format!("Allow {rest}?"), ..Question::default() };
                    turn.calls.asks(&mut turn.writer, rest, "Running tool", None, question);
                    state.park(rest, Kind::Confirmation, rest.to_owned());
                }
                "ask" => {
                    turn.writer.input_requested(ChatInputRequest {
                        id: rest.to_owned(),
                        message: Some("Which?".into()),
                        url: None,
                        questions: None,
                        answers: None,
                    });
                    state.park(rest, Kind::Question, rest.to_owned());
                }
                "decide" => {
                    let found = state.take_decision(Asking::Tool { tool: rest, input: &json!({"n": 1}) });
                    let again = state.take_decision(Asking::Tool { tool: rest, input: &json!({"n": 1}) });
                    let said = format!("{found:?} then {again:?}");
                    if let Some(turn) = state.sent() {
                        turn.writer.text(&said);
                    }
                }
                "end" => engine.end_turn(&mut state, TurnEnd::Complete),
                "fail" => return Err(error_info("scriptFailed", "The script failed.")),
                _ => {}
            }
        }
        Ok(())
    }

    fn interrupt(&self, engine: &Engine<Self>, state: &mut State<Self>) {
        lock(&self.log).interrupted += 1;
        // This runtime is done with a stopped turn at once.
        engine.end_turn(state, TurnEnd::Cancelled);
    }

    fn settle(&self, engine: &Engine<Self>, state: &mut State<Self>, reply: String, settled: Settled) {
        lock(&self.log).settled.push((reply.clone(), settled.clone()));
        if let Some(turn) = state.sent() {
            turn.writer.text(&format!("{reply}: {settled:?}. "));
        }
        if settled != Settled::Withdrawn && state.parked_count() == 0 {
            engine.end_turn(state, TurnEnd::Complete);
        }
    }

    async fn stop(&self, _engine: &Engine<Self>, _running: bool) {
        lock(&self.log).stopped += 1;
    }
}

struct ScriptAgent {
    log: Arc<Mutex<Log>>,
    gate: Arc<Notify>,
}

struct ScriptSession(Arc<Engine<Script>>);

#[async_trait]
impl Agent for ScriptAgent {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: "script".into(),
            display_name: "Script".into(),
            description: None,
            capabilities: None,
            features: AgentFeatures::default(),
        }
    }

    fn schema(&self, _policy: &Policy) -> SchemaResult {
        crate::echo::echo_schema()
    }

    async fn create(&self, _start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let backend = Script { log: self.log.clone(), gate: self.gate.clone() };
        Ok(Arc::new(ScriptSession(Engine::start(host, backend, ()))))
    }
}

#[async_trait]
impl Session for ScriptSession {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        self.0.send_message(params)
    }

    async fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        self.0.resume_turn(params)
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.0.abort();
        Ok(())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.0.confirm(params))
    }

    async fn answer(&self, params: protocol::AnswerParams) -> Result<bool, AgentError> {
        Ok(self.0.answer(params))
    }

    async fn close(&self) {
        self.0.close().await;
    }
}

async fn parent() -> (TestParent, Arc<Mutex<Log>>, Arc<Notify>) {
    let (log, gate) = (Arc::new(Mutex::new(Log::default())), Arc::new(Notify::new()));
    let agent = Arc::new(ScriptAgent { log: log.clone(), gate: gate.clone() });
    let factory: crate::AgentFactory = Box::new(move |_init, _ctx| Ok(agent as Arc<dyn Agent>));
    let parent = TestParent::in_process(factory, Arc::new(|_| ToolOutcome::failed("no tools")));
    parent.initialize("script", "script", JsonObject::new(), None).await.expect("handshake");
    parent.create(start("ahp-session:/s", CHAT)).await.expect("create");
    (parent, log, gate)
}

/// Hands a turn without folding its start, as the host does for one it queues behind another.
async fn hand(parent: &TestParent, turn_id: &str, text: &str) {
    let params = SendMessageParams {
        chat: CHAT.into(),
        turn_id: turn_id.into(),
        message: user_message(text),
        instructions: None,
        unattended: false,
        attachments: Vec::new(),
    };
    parent.peer().request_value(parent::SEND_MESSAGE, params).await.expect("send");
}

/// Waits until the worker says `turn_id` completed.
async fn until_complete(parent: &mut TestParent, turn_id: &str) {
    loop {
        match parent.next(PATIENCE).await {
            Some(crate::testing::Said::Action {
                action: ahp_types::actions::StateAction::ChatTurnComplete(done),
                ..
            }) if done.turn_id == turn_id => return,
            Some(_) => {}
            None => panic!("{turn_id} did not complete"),
        }
    }
}

fn confirm(turn_id: &str, call: &str, approved: bool) -> ConfirmParams {
    ConfirmParams {
        chat: CHAT.into(),
        turn_id: turn_id.into(),
        tool_call_id: call.into(),
        approved,
        option_id: None,
        decision_source: None,
        edited_tool_input: None,
    }
}

fn text(turn: &ahp_types::state::Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect()
}

fn waiting(chat: &ahp_types::state::ChatState) -> usize {
    let Some(turn) = &chat.active_turn else { return 0 };
    turn.response_parts
        .iter()
        .filter(|p| match p {
            ResponsePart::ToolCall(call) => {
                matches!(call.tool_call, ahp_types::state::ToolCallState::PendingConfirmation(_))
            }
            ResponsePart::InputRequest(request) => request.response.is_none(),
            _ => false,
        })
        .count()
}

#[tokio::test]
async fn turns_run_one_after_another_in_the_order_handed() {
    let (mut parent, log, _gate) = parent().await;
    parent.send(CHAT, "t1", "park a").await.expect("send");
    hand(&parent, "t2", "say two; end").await;
    parent.until(CHAT, PATIENCE, |c| waiting(c) == 1).await.expect("t1 asks");
    assert_eq!(lock(&log).sent, vec!["park a"], "t2 waits behind t1");
    assert_eq!(parent.confirm(confirm("t1", "a", true)).await.expect("confirm"), json!({"handled": true}));
    until_complete(&mut parent, "t2").await;
    assert_eq!(parent.chat(CHAT).map(|c| c.turns[0].state), Some(TurnState::Complete));
    assert_eq!(lock(&log).sent, vec!["park a", "say two; end"]);
}

#[tokio::test]
async fn two_confirmations_park_side_by_side_and_are_answered_in_either_order() {
    let (mut parent, log, _gate) = parent().await;
    parent.send(CHAT, "t1", "park a; park b").await.expect("send");
    parent.until(CHAT, PATIENCE, |c| waiting(c) == 2).await.expect("two ask");
    assert_eq!(parent.confirm(confirm("t1", "b", false)).await.expect("confirm"), json!({"handled": true}));
    assert_eq!(
        parent.confirm(confirm("t1", "b", true)).await.expect("again"),
        json!({"handled": false}),
        "answered once"
    );
    assert_eq!(parent.confirm(confirm("t1", "a", true)).await.expect("confirm"), json!({"handled": true}));
    let turn = parent.until_idle(CHAT, PATIENCE).await.expect("the turn ends");
    assert_eq!(turn.state, TurnState::Complete);
    let settled: Vec<(String, bool)> = lock(&log)
        .settled
        .iter()
        .map(|(id, s)| (id.clone(), matches!(s, Settled::Confirmed { approved: true, .. })))
        .collect();
    assert_eq!(settled, vec![("b".to_owned(), false), ("a".to_owned(), true)]);
}

#[tokio::test]
async fn abort_drops_the_turns_handed_behind_settles_what_is_parked_and_interrupts() {
    let (mut parent, log, _gate) = parent().await;
    parent.send(CHAT, "t1", "park a; ask q").await.expect("send");
    hand(&parent, "t2", "say never").await;
    parent.until(CHAT, PATIENCE, |c| waiting(c) == 2).await.expect("both wait");
    parent.abort(CHAT, Some("t1")).await.expect("abort");
    let turn = parent.until_idle(CHAT, PATIENCE).await.expect("stopped");
    assert_eq!(turn.state, TurnState::Cancelled);
    {
        let log = lock(&log);
        assert_eq!(log.interrupted, 1);
        let mut settled: Vec<&(String, Settled)> = log.settled.iter().collect();
        settled.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(settled, vec![&("a".to_owned(), Settled::Withdrawn), &("q".to_owned(), Settled::Withdrawn)]);
    }
    parent.send(CHAT, "t3", "say three; end").await.expect("send");
    let three = parent.until(CHAT, PATIENCE, |c| c.turns.len() == 2 && c.active_turn.is_none()).await.expect("t3");
    assert_eq!(text(&three.turns[1]), "three");
    assert_eq!(lock(&log).sent, vec!["park a; ask q", "say three; end"], "t2 was dropped with the stop");
}

#[tokio::test]
async fn a_turn_stopped_while_it_was_prepared_is_never_sent() {
    let (mut parent, log, gate) = parent().await;
    parent.send(CHAT, "t1", "gated; say late; end").await.expect("send");
    parent.abort(CHAT, Some("t1")).await.expect("abort");
    let turn = parent.until_idle(CHAT, PATIENCE).await.expect("cancelled");
    assert_eq!(turn.state, TurnState::Cancelled);
    parent.send(CHAT, "t2", "say next; end").await.expect("send");
    gate.notify_one();
    let two = parent.until(CHAT, PATIENCE, |c| c.turns.len() == 2 && c.active_turn.is_none()).await.expect("t2");
    assert_eq!(text(&two.turns[1]), "next");
    let log = lock(&log);
    assert_eq!(log.sent, vec!["say next; end"], "the stopped turn never went out");
    assert_eq!(log.interrupted, 0, "nothing was sent to interrupt");
}

#[tokio::test]
async fn close_settles_everything_ends_the_turn_cancelled_and_stops_the_runtime() {
    let (mut parent, log, _gate) = parent().await;
    parent.send(CHAT, "t1", "park a; park b").await.expect("send");
    parent.until(CHAT, PATIENCE, |c| waiting(c) == 2).await.expect("both wait");
    parent.peer().request_value(parent::CLOSE, ChatRef { chat: CHAT.into() }).await.expect("close");
    let turn = parent.until_idle(CHAT, PATIENCE).await.expect("ended");
    assert_eq!(turn.state, TurnState::Cancelled);
    let log = lock(&log);
    assert_eq!(log.settled.len(), 2);
    assert!(log.settled.iter().all(|(_, s)| *s == Settled::Withdrawn));
    assert_eq!(log.stopped, 1);
}

#[tokio::test]
async fn a_turn_that_fails_to_begin_ends_with_its_error_and_the_next_runs() {
    let (mut parent, _log, _gate) = parent().await;
    parent.send(CHAT, "t1", "say before; fail").await.expect("send");
    parent.send(CHAT, "t2", "say after; end").await.expect("send");
    let both = parent.until(CHAT, PATIENCE, |c| c.turns.len() == 2 && c.active_turn.is_none()).await.expect("both");
    assert_eq!(both.turns[0].state, TurnState::Error);
    assert_eq!(text(&both.turns[1]), "after");
}

#[tokio::test]
async fn a_lost_turns_decision_is_carried_out_once() {
    let (mut parent, _log, _gate) = parent().await;
    let decision = Decision::Confirmation {
        tool_call_id: "old".into(),
        tool_name: "write".into(),
        tool_input: Some(json!({"n": 1}).to_string()),
        approved: true,
        option_id: Some("allow".into()),
    };
    let params = ResumeTurnParams {
        chat: CHAT.into(),
        turn_id: "t1".into(),
        message: user_message("decide write; end"),
        decisions: vec![decision],
        attachments: Vec::new(),
    };
    // The host moved the lost turn back to running before it hands it (folded here as a start).
    let started = ahp_types::actions::StateAction::ChatTurnStarted(ahp_types::actions::ChatTurnStartedAction {
        turn_id: "t1".into(),
        started_at: crate::turn::now_iso(),
        message: user_message("decide write; end"),
        queued_message_id: None,
        meta: None,
    });
    parent.apply_client_action(CHAT, &started);
    parent.peer().request_value(parent::RESUME_TURN, params).await.expect("resume");
    let turn = parent.until_idle(CHAT, PATIENCE).await.expect("t1 resumed");
    assert_eq!(turn.state, TurnState::Complete);
    let said = text(&turn);
    assert!(
        said.contains("Some(Confirmed { approved: true, option_id: Some(\"allow\"), edited_input: None }) then None"),
        "{said}"
    );
}

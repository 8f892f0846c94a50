//! `shout`: seed 004's smallest agent as a worker written on `agent_runner`'s session engine, the
//! fourth backend beside Claude, ACP and pi, which the end-to-end tests run as a `command` agent
//! (`tests/tests/engine_backend.rs`). Everything a conversation keeps (the queue, what is parked
//! for a person, abort and close, the policy of what waits) is the engine's; this file is the
//! launcher (there is no runtime: the turn is the script) and the script's mapping.
//!
//! A message is commands separated by `;`, run in order: `say WORDS` (said in capitals), `call
//! TOOL {json}` (a tool the session was offered; one that declares itself destructive waits for
//! a person), `ask QUESTION` (a question that is not about a tool), `hold` (until stopped).

use std::sync::Arc;

use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use agent_runner::engine::{Backend, Engine, Kind, Mapper, Settled, State};
use agent_runner::{run_stdio_worker, tool_result, Agent, AgentError, Question, Session, SessionHost};
use agent_runner::{TurnEnd, TurnWriter};
use ahp_types::state::{ChatInputAnswer, ChatInputAnswerValue, ChatInputRequest, ErrorInfo, SessionConfigSchema};
use async_trait::async_trait;
use protocol::{AgentDescriptor, AgentFeatures, AnswerParams, ConfirmParams, Policy, SchemaResult};
use protocol::{SendMessageParams, Start, ToolSpec};
use serde_json::Value;
use tokio::sync::oneshot;

struct Shout;

struct Said(TurnWriter);

impl Mapper for Said {
    fn writer(&mut self) -> &mut TurnWriter {
        &mut self.0
    }
}

#[async_trait]
impl Backend for Shout {
    /// The tools the session was offered.
    type State = Vec<ToolSpec>;
    type Turn = Said;
    /// How a person's answer reaches the command that waits for it.
    type Reply = oneshot::Sender<Settled>;

    fn open(&self, _tools: &mut Vec<ToolSpec>, writer: TurnWriter, _params: &SendMessageParams) -> Said {
        Said(writer)
    }

    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo> {
        let stop = {
            let mut state = engine.lock();
            if !state.mark_sent(&params.turn_id) {
                return Ok(());
            }
            state.stop_token().unwrap_or_default()
        };
        let turn = Turn { engine, id: params.turn_id.clone(), unattended: params.unattended };
        for (n, command) in params.message.text.split(';').map(str::trim).enumerate() {
            let (verb, rest) = command.split_once(' ').unwrap_or((command, ""));
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = turn.run(n, verb, rest) => {}
            }
        }
        engine.end_turn(&mut engine.lock(), TurnEnd::Complete);
        Ok(())
    }

    /// The script sees its stop token: there is no runtime to tell, and nothing to drain.
    fn interrupt(&self, engine: &Engine<Self>, state: &mut State<Self>) {
        engine.end_turn(state, TurnEnd::Cancelled);
    }

    fn settle(&self, _engine: &Engine<Self>, _state: &mut State<Self>, reply: Self::Reply, settled: Settled) {
        let _ = reply.send(settled);
    }

    async fn stop(&self, _engine: &Engine<Self>, _running: bool) {}
}

/// One turn's script.
struct Turn<'a> {
    engine: &'a Engine<Shout>,
    id: String,
    unattended: bool,
}

impl Turn<'_> {
    /// Says something in the turn while it runs; what it answers is parked for a person.
    fn say(&self, said: impl FnOnce(&mut TurnWriter) -> Option<(String, Kind)>) -> oneshot::Receiver<Settled> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.engine.lock();
        let Some(turn) = state.sent().filter(|t| t.0.turn_id() == self.id) else { return rx };
        if let Some((id, kind)) = said(&mut turn.0) {
            state.park(id, kind, tx);
        }
        rx
    }

    fn text(&self, text: &str) {
        self.say(|w| {
            w.end_part();
            w.text(text);
            None
        });
    }

    fn verdict(&self, asked: Asked<'_>) -> Verdict {
        policy::decide(asked, Context::new(Mode::Runtime, self.unattended))
    }

    async fn run(&self, n: usize, verb: &str, rest: &str) {
        match verb {
            "say" => self.text(&rest.to_uppercase()),
            "call" => self.call(&format!("{}:call{n}", self.id), rest).await,
            "ask" => self.ask(&format!("{}:ask{n}", self.id), rest).await,
            "hold" => std::future::pending::<()>().await,
            _ => self.text(&format!("SHOUT DOES NOT KNOW {verb:?}.")),
        }
    }

    async fn call(&self, id: &str, rest: &str) {
        let (name, input) = rest.split_once(' ').unwrap_or((rest, "{}"));
        let input: Value = serde_json::from_str(input).unwrap_or_default();
        let effects = policy::offered(&self.engine.lock().own, name).and_then(|t| t.effects.clone());
        let asks = self.verdict(Asked::Offered(effects.as_ref())) == Verdict::Confirm;
        let answered = self.say(|w| {
            w.tool_start(id, name, name, None);
            let (invocation, shown) = (format!("Calling {name}"), Some(input.to_string()));
            if !asks {
                w.tool_running(id, &invocation, shown);
                return None;
            }
            w.tool_asks(id, &invocation, shown, Question { title: format!("Allow {name}?"), ..Question::default() });
            Some((id.to_owned(), Kind::Confirmation))
        });
        if asks && !matches!(answered.await, Ok(Settled::Confirmed { approved: true, .. })) {
            return self.text(&format!("NOT RUN: {name}."));
        }
        let (success, text) = match self.engine.host().run_tool(&self.id, id, name, input).await {
            Ok(o) => (o.success, if o.text.is_empty() { o.error.unwrap_or_default() } else { o.text }),
            Err(e) => (false, e.to_string()),
        };
        self.say(|w| {
            w.tool_complete(id, tool_result(success, format!("Called {name}"), Some(text), None));
            None
        });
    }

    async fn ask(&self, id: &str, question: &str) {
        if self.verdict(Asked::Question) == Verdict::DecideYourself {
            return self.text(&policy::NOBODY_TO_ASK.to_uppercase());
        }
        let answered = self.say(|w| {
            let message = Some(question.to_owned());
            w.input_requested(ChatInputRequest {
                id: id.to_owned(),
                message,
                url: None,
                questions: None,
                answers: None,
            });
            Some((id.to_owned(), Kind::Question))
        });
        let said = match answered.await {
            Ok(Settled::Answered { answers, .. }) => answers.into_values().find_map(|a| match a {
                ChatInputAnswer::Submitted(a) | ChatInputAnswer::Draft(a) => match a.value {
                    ChatInputAnswerValue::Text(text) => Some(text.value),
                    _ => None,
                },
                ChatInputAnswer::Skipped(_) => None,
            }),
            _ => None,
        };
        self.text(&format!("YOU SAID: {}.", said.unwrap_or_default().to_uppercase()));
    }
}

struct ShoutAgent;

#[async_trait]
impl Agent for ShoutAgent {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: "shout".into(),
            display_name: "Shout".into(),
            description: Some("Says your words back in capitals, on the session engine".into()),
            capabilities: None,
            features: AgentFeatures::default(),
        }
    }

    fn schema(&self, _policy: &Policy) -> SchemaResult {
        let schema = SessionConfigSchema { r#type: "object".into(), properties: Default::default(), required: None };
        SchemaResult { schema, defaults: Default::default() }
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        Ok(Arc::new(ShoutSession(Engine::start(host, Shout, start.tools))))
    }
}

struct ShoutSession(Arc<Engine<Shout>>);

#[async_trait]
impl Session for ShoutSession {
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        self.0.send_message(params)
    }

    async fn abort(&self, _turn_id: Option<String>) -> Result<(), AgentError> {
        self.0.abort();
        Ok(())
    }

    async fn confirm(&self, params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(self.0.confirm(params))
    }

    async fn answer(&self, params: AnswerParams) -> Result<bool, AgentError> {
        Ok(self.0.answer(params))
    }

    async fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        self.0.lock().own = tools;
        Ok(())
    }

    async fn close(&self) {
        self.0.close().await;
    }
}

fn main() -> std::process::ExitCode {
    run_stdio_worker(Box::new(|_init, _context| Ok(Arc::new(ShoutAgent) as Arc<dyn Agent>)))
}

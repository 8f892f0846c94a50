//! The session engine: what every backend's conversation does alike, written once.
//!
//! A backend is a launcher (it starts or finds its runtime and hands it a prompt), a mapper of its
//! runtime's events (through a [`TurnWriter`] it owns, and the call bookkeeping of [`calls`]), and
//! an interrupt. Everything else a [`crate::Session`] has to keep is here:
//!
//! - **the queue of handed turns**: `sendMessage` and `resumeTurn` (with what a person answered
//!   meanwhile, carried out once when the runtime asks the same again: [`State::take_decision`]),
//!   run one after another, as seed 004 has a send handed while another runs wait its turn;
//! - **the running turn's lifecycle**: *preparing* (the runtime is being readied), *sent*, then one
//!   ending through the turn's `TurnWriter`. A turn stopped while it was being prepared is never
//!   sent ([`State::mark_sent`] is the one check before a prompt goes out). A stopped turn is said
//!   cancelled at once and stays as the running turn, draining, until its runtime says it is done
//!   with it, so the next turn never reaches a runtime still busy with the last;
//! - **what waits for a person**: confirmations and questions parked in one map keyed by id (seed
//!   004: never one slot), each answered to the runtime the backend's way ([`Backend::settle`]);
//!   `abort` and `close` settle every one of them;
//! - **abort** (drops every turn handed behind the running one, settles what is parked, says the
//!   turn cancelled, asks the backend to interrupt its runtime) and **close** (settles everything,
//!   ends the turn cancelled, stops the runtime, waits for the session's tasks);
//! - **the policy of what waits for a person** ([`policy`]), decided in one pure function.
//!
//! One lock guards the engine's state and the backend's own ([`State::own`]), so a backend decides
//! about its process and the running turn in one step; nothing awaits while holding it. Backend
//! methods called under the lock ([`Backend::open`], [`Backend::interrupt`], [`Backend::settle`])
//! must not take it again: they spawn what needs a round trip ([`Engine::spawn`]).

pub mod calls;
pub mod policy;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ahp_types::state::{ChatInputAnswer, ChatInputResponseKind, ErrorInfo};
use async_trait::async_trait;
use protocol::{AnswerParams, ConfirmParams, Decision, ResumeTurnParams, SendMessageParams};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::AgentError;
use crate::host::SessionHost;
use crate::sync::lock;
use crate::turn::{resumed_request, TurnEnd, TurnWriter};

/// How long `close` waits for the session's tasks once its runtime stopped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The running turn as a backend maps it: its own mapper, owning the turn's [`TurnWriter`].
pub trait Mapper: Send + 'static {
    /// The writer the turn is said through.
    fn writer(&mut self) -> &mut TurnWriter;

    /// Ends the turn: what the backend says before the ending (its subagents, its plan, what the
    /// turn used), then exactly one ending. Says nothing once the turn is ended.
    fn end(&mut self, end: TurnEnd) {
        self.writer().end(end);
    }

    /// A person answered the confirmation of call `call` (see [`calls::Calls::answered`]).
    fn answered(&mut self, _call: &str, _approved: bool) {}
}

/// What a parked item waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tool call waiting to be allowed (`session/confirm`).
    Confirmation,
    /// A question that is not about a tool (`session/answer`).
    Question,
}

/// How a parked confirmation or question was settled, for its backend to say to the runtime.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// A person allowed or denied the call.
    Confirmed {
        /// Allowed.
        approved: bool,
        /// The option the person picked among the runtime's own.
        option_id: Option<String>,
        /// The input as the person edited it (JSON text).
        edited_input: Option<String>,
    },
    /// A person answered the question.
    Answered {
        /// Accept, decline or cancel.
        response: ChatInputResponseKind,
        /// The answers by question id.
        answers: HashMap<String, ChatInputAnswer>,
    },
    /// Nobody will answer: the turn was stopped, or the session closed.
    Withdrawn,
}

/// What the runtime asks, to find a person's answer to the same question kept from a lost turn.
#[derive(Debug, Clone, Copy)]
pub enum Asking<'a> {
    /// Whether a call of `tool` with `input` may run.
    Tool {
        /// The tool's name as the runtime names it.
        tool: &'a str,
        /// The call's input.
        input: &'a Value,
    },
    /// A question that is not about a tool.
    Question,
}

/// The phase of the running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Handed, the runtime is being readied; its prompt has not gone out.
    Preparing,
    /// Its prompt went out; the runtime's events are this turn's.
    Sent,
    /// Stopped: said cancelled already; the runtime is finishing it (nothing more is said).
    Stopped,
}

/// A backend of the engine: its runtime's launcher, the mapper of its events, and its interrupt.
#[async_trait]
pub trait Backend: Send + Sync + Sized + 'static {
    /// What the backend keeps besides the engine's state, under the same lock.
    type State: Send + 'static;
    /// The running turn, as the backend maps it.
    type Turn: Mapper;
    /// How one parked confirmation or question is answered to the runtime.
    type Reply: Send + 'static;

    /// The mapper of a turn leaving the queue, saying it through `writer`. Under the lock.
    fn open(&self, own: &mut Self::State, writer: TurnWriter, params: &SendMessageParams) -> Self::Turn;

    /// Readies the runtime and hands it the running turn's prompt, on the engine's driver, one
    /// turn at a time. The prompt goes out only if [`State::mark_sent`] says so, under the same
    /// lock. An error ends the turn with it (unless the turn was stopped meanwhile). A backend
    /// whose turn is one request may run the whole turn here and end it ([`Engine::end_turn`]).
    async fn begin(&self, engine: &Engine<Self>, params: SendMessageParams) -> Result<(), ErrorInfo>;

    /// Asks the runtime to stop the turn it was sent; the turn is said cancelled already. Under
    /// the lock: a round trip is spawned. A backend whose runtime will not finish the turn (its
    /// process is gone) ends it here ([`Engine::end_turn`]).
    fn interrupt(&self, engine: &Engine<Self>, state: &mut State<Self>);

    /// Says to the runtime how one parked confirmation or question was settled. Under the lock.
    fn settle(&self, engine: &Engine<Self>, state: &mut State<Self>, reply: Self::Reply, settled: Settled);

    /// Stops the runtime: the session closes (`running`: a turn had been sent to it).
    async fn stop(&self, engine: &Engine<Self>, running: bool);
}

/// A turn handed and not begun yet.
struct Handed {
    params: SendMessageParams,
    /// A lost turn going on (`resumeTurn`), with what a person answered meanwhile.
    resumed: Option<Vec<Decision>>,
}

/// The running turn.
struct Running<T> {
    id: String,
    mapper: T,
    phase: Phase,
    unattended: bool,
    /// Cancelled when the turn is stopped or the session closes.
    stop: CancellationToken,
}

struct Parked<R> {
    kind: Kind,
    reply: R,
}

/// The engine's state and the backend's own, under one lock.
pub struct State<B: Backend> {
    /// The backend's own state.
    pub own: B::State,
    queue: VecDeque<Handed>,
    turn: Option<Running<B::Turn>>,
    /// Confirmations (by tool call id) and questions (by request id) waiting for a person.
    parked: HashMap<String, Parked<B::Reply>>,
    /// What a person answered to a lost turn's questions, while that turn goes on.
    decisions: Vec<Decision>,
    closed: bool,
    wake: Arc<Notify>,
}

impl<B: Backend> State<B> {
    /// The running turn's mapper, whatever its phase.
    pub fn turn(&mut self) -> Option<&mut B::Turn> {
        self.turn.as_mut().map(|t| &mut t.mapper)
    }

    /// The running turn's mapper once its prompt went out and until it is stopped: the turn the
    /// runtime's events are said in.
    pub fn sent(&mut self) -> Option<&mut B::Turn> {
        self.turn.as_mut().filter(|t| t.phase == Phase::Sent).map(|t| &mut t.mapper)
    }

    /// The backend's own state and the running turn's mapper, whatever its phase, together.
    pub fn own_and_turn(&mut self) -> (&mut B::State, Option<&mut B::Turn>) {
        (&mut self.own, self.turn.as_mut().map(|t| &mut t.mapper))
    }

    /// The running turn's id.
    pub fn turn_id(&self) -> Option<&str> {
        self.turn.as_ref().map(|t| t.id.as_str())
    }

    /// The running turn's phase.
    pub fn phase(&self) -> Option<Phase> {
        self.turn.as_ref().map(|t| t.phase)
    }

    /// Nobody watches the running turn (seed 003): nobody can answer a question.
    pub fn unattended(&self) -> bool {
        self.turn.as_ref().is_some_and(|t| t.unattended)
    }

    /// Cancelled when the running turn is stopped or the session closes.
    pub fn stop_token(&self) -> Option<CancellationToken> {
        self.turn.as_ref().map(|t| t.stop.clone())
    }

    /// The session is closing or closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The one check before the running turn's prompt goes out: true (and the turn is sent from
    /// here) while it is still being prepared; false when it was stopped meanwhile, which is
    /// never sent (it was said cancelled already, and is dropped here).
    pub fn mark_sent(&mut self, turn_id: &str) -> bool {
        match self.turn.as_mut().filter(|t| t.id == turn_id) {
            Some(turn) if turn.phase == Phase::Preparing => {
                turn.phase = Phase::Sent;
                true
            }
            Some(turn) if turn.phase == Phase::Stopped => {
                self.turn = None;
                self.wake.notify_one();
                false
            }
            _ => false,
        }
    }

    /// Parks a confirmation or a question until a person answers it; answers one parked under
    /// the same id before, which nobody can answer any more.
    pub fn park(&mut self, id: impl Into<String>, kind: Kind, reply: B::Reply) -> Option<B::Reply> {
        self.parked.insert(id.into(), Parked { kind, reply }).map(|p| p.reply)
    }

    /// Forgets the parked items the runtime will not hear an answer to any more (it withdrew the
    /// request, or it is gone): those `keep` says no to.
    pub fn forget_parked(&mut self, keep: impl Fn(&B::Reply) -> bool) {
        self.parked.retain(|_, p| keep(&p.reply));
    }

    /// How many confirmations and questions wait for a person.
    pub fn parked_count(&self) -> usize {
        self.parked.len()
    }

    /// True when something waits for a person under `id`.
    pub fn is_parked(&self, id: &str) -> bool {
        self.parked.contains_key(id)
    }

    /// The answer a person gave to the same question in a lost turn that goes on here (a
    /// question, or a call of the same tool with the same input), taken out so it is carried
    /// out once.
    pub fn take_decision(&mut self, asking: Asking<'_>) -> Option<Settled> {
        let at = self.decisions.iter().position(|d| match (d, asking) {
            (Decision::Answer { .. }, Asking::Question) => true,
            (Decision::Confirmation { tool_name, tool_input, .. }, Asking::Tool { tool, input }) => {
                tool_name == tool
                    && tool_input
                        .as_deref()
                        .and_then(|text| serde_json::from_str::<Value>(text).ok())
                        .is_none_or(|asked| asked == *input)
            }
            _ => false,
        })?;
        Some(match self.decisions.remove(at) {
            Decision::Confirmation { approved, option_id, .. } => {
                Settled::Confirmed { approved, option_id, edited_input: None }
            }
            Decision::Answer { response, answers, .. } => Settled::Answered { response, answers },
        })
    }

    fn take_parked(&mut self, id: &str, kind: Kind) -> Option<B::Reply> {
        if self.parked.get(id)?.kind != kind {
            return None;
        }
        self.parked.remove(id).map(|p| p.reply)
    }
}

/// One conversation's engine; see the module docs. Built with [`Engine::start`], held in an `Arc`.
pub struct Engine<B: Backend> {
    host: SessionHost,
    backend: B,
    state: Mutex<State<B>>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    tasks: TaskTracker,
    me: Weak<Engine<B>>,
}

impl<B: Backend> Engine<B> {
    /// The engine of one conversation, its driver running: turns handed from now on are begun
    /// one after another.
    pub fn start(host: SessionHost, backend: B, own: B::State) -> Arc<Self> {
        Self::start_on(host, backend, own, TaskTracker::new(), CancellationToken::new())
    }

    /// [`Engine::start`] on `tasks`, cancelled with `cancel`, which the backend shares (what it
    /// runs beside the engine's own tasks: an ACP agent's terminals).
    pub fn start_on(
        host: SessionHost,
        backend: B,
        own: B::State,
        tasks: TaskTracker,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let engine = Arc::new_cyclic(|me| Engine {
            host,
            backend,
            state: Mutex::new(State {
                own,
                queue: VecDeque::new(),
                turn: None,
                parked: HashMap::new(),
                decisions: Vec::new(),
                closed: false,
                wake: wake.clone(),
            }),
            wake,
            cancel,
            tasks,
            me: me.clone(),
        });
        let driver = engine.clone();
        engine.tasks.spawn(async move { driver.drive().await });
        engine
    }

    /// The handle the conversation says things through.
    pub fn host(&self) -> &SessionHost {
        &self.host
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The engine's state and the backend's own. Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, State<B>> {
        lock(&self.state)
    }

    /// This engine, shared, for a task that outlives the call that spawns it.
    pub fn arc(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }

    /// Cancelled when the session closes.
    pub fn closing(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Runs `task` as one of the session's tasks: dropped when the session closes, waited for by
    /// `close`.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// `session/sendMessage`: the turn runs once the turns before it are done.
    pub fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError> {
        self.hand(Handed { params, resumed: None })
    }

    /// `session/resumeTurn`: the lost turn goes on under its own id, told it was cut off; what a
    /// person answered meanwhile is carried out when the runtime asks the same again.
    pub fn resume_turn(&self, params: ResumeTurnParams) -> Result<(), AgentError> {
        let (params, decisions) = resumed_request(params);
        self.resume(params, decisions)
    }

    /// A lost turn goes on as `params` say (a backend that tells its runtime otherwise than
    /// [`resumed_request`] does), its parts after the ones it holds already.
    pub fn resume(&self, params: SendMessageParams, decisions: Vec<Decision>) -> Result<(), AgentError> {
        self.hand(Handed { params, resumed: Some(decisions) })
    }

    fn hand(&self, handed: Handed) -> Result<(), AgentError> {
        let mut state = self.lock();
        if state.closed {
            return Err(AgentError::Failed("This conversation is closed.".into()));
        }
        state.queue.push_back(handed);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Ends the running turn (unless its ending was said: a stopped turn), and takes it off: the
    /// next handed turn begins. What is still parked for it is settled withdrawn.
    pub fn end_turn(&self, state: &mut State<B>, end: TurnEnd) {
        let Some(mut turn) = state.turn.take() else { return };
        if turn.phase != Phase::Stopped {
            turn.mapper.end(end);
        }
        turn.stop.cancel();
        state.decisions.clear();
        self.settle_all(state);
        self.wake.notify_one();
    }

    /// `session/abort`: every turn handed behind the running one is dropped, everything parked
    /// is settled, the running turn is said cancelled, and its runtime is asked to stop it.
    pub fn abort(&self) {
        let mut state = self.lock();
        state.queue.clear();
        self.settle_all(&mut state);
        let Some(turn) = state.turn.as_mut() else { return };
        let was = turn.phase;
        if was == Phase::Stopped {
            return;
        }
        turn.mapper.end(TurnEnd::Cancelled);
        turn.phase = Phase::Stopped;
        turn.stop.cancel();
        if was == Phase::Sent {
            self.backend.interrupt(self, &mut state);
        }
    }

    /// `session/close`: everything parked is settled, the running turn ends cancelled, the
    /// runtime stops, and the session's tasks are waited for.
    pub async fn close(&self) {
        let running = {
            let mut state = self.lock();
            state.closed = true;
            state.queue.clear();
            let running = state.turn.as_ref().is_some_and(|t| t.phase == Phase::Sent);
            if let Some(mut turn) = state.turn.take() {
                if turn.phase != Phase::Stopped {
                    turn.mapper.end(TurnEnd::Cancelled);
                }
                turn.stop.cancel();
            }
            self.settle_all(&mut state);
            running
        };
        self.cancel.cancel();
        self.backend.stop(self, running).await;
        self.tasks.close();
        if tokio::time::timeout(CLOSE_GRACE, self.tasks.wait()).await.is_err() {
            tracing::warn!(chat = self.host.chat(), "a task of this session did not stop in time");
        }
    }

    /// `session/confirm`: false when no confirmation waits under that id.
    pub fn confirm(&self, params: ConfirmParams) -> bool {
        let mut state = self.lock();
        let Some(reply) = state.take_parked(&params.tool_call_id, Kind::Confirmation) else { return false };
        if let Some(turn) = state.turn() {
            turn.answered(&params.tool_call_id, params.approved);
        }
        let settled = Settled::Confirmed {
            approved: params.approved,
            option_id: params.option_id,
            edited_input: params.edited_tool_input,
        };
        self.backend.settle(self, &mut state, reply, settled);
        true
    }

    /// `session/answer`: false when no question waits under that id.
    pub fn answer(&self, params: AnswerParams) -> bool {
        let mut state = self.lock();
        let Some(reply) = state.take_parked(&params.request_id, Kind::Question) else { return false };
        let settled = Settled::Answered { response: params.response, answers: params.answers };
        self.backend.settle(self, &mut state, reply, settled);
        true
    }

    /// Settles everything parked as withdrawn: a stopped turn that leaves a question standing is
    /// a session reporting input needed for the rest of its life.
    fn settle_all(&self, state: &mut State<B>) {
        let parked: Vec<B::Reply> = state.parked.drain().map(|(_, p)| p.reply).collect();
        for reply in parked {
            self.backend.settle(self, state, reply, Settled::Withdrawn);
        }
    }

    /// Begins the handed turns one at a time, for as long as the session lives.
    async fn drive(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.wake.notified() => {}
            }
            while let Some(params) = self.next_turn() {
                let turn_id = params.turn_id.clone();
                let begun = tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    begun = self.backend.begin(&self, params) => begun,
                };
                if let Err(error) = begun {
                    let mut state = self.lock();
                    if state.turn_id() == Some(turn_id.as_str()) {
                        self.end_turn(&mut state, TurnEnd::Error(error));
                    }
                }
            }
        }
    }

    /// The head of the queue, made the running turn; none while a turn runs.
    fn next_turn(&self) -> Option<SendMessageParams> {
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.closed || state.turn.is_some() {
            return None;
        }
        let Handed { params, resumed } = state.queue.pop_front()?;
        let writer = match resumed {
            Some(_) => TurnWriter::resuming(self.host.clone(), params.turn_id.clone()),
            None => TurnWriter::new(self.host.clone(), params.turn_id.clone()),
        };
        let mapper = self.backend.open(&mut state.own, writer, &params);
        state.decisions = resumed.unwrap_or_default();
        state.turn = Some(Running {
            id: params.turn_id.clone(),
            mapper,
            phase: Phase::Preparing,
            unattended: params.unattended,
            stop: CancellationToken::new(),
        });
        Some(params)
    }
}

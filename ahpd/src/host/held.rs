//! What the host asks a person in a chat's running turn itself, and waits for (what it waits on is
//! kept in `questions.rs`, and goes with the turn):
//!
//! - a question for one of its tools, raised as a `chat/inputRequested` of the running turn
//!   ([`Host::ask_person`]);
//! - the backstop of what waits for a person (seed 003): a host tool whose `effects` say
//!   `destructive`, called on a session's `/ahp-mcp` endpoint by an agent that did not ask first (an
//!   ACP agent in a mode of its own that never asks), is held as a confirmation of the running turn
//!   until a person allows or denies it ([`Host::leave_for`]), decided by the session engine's own
//!   policy (`agent_runner::engine::policy::decide`). A call a person already allowed in the turn
//!   (the agent asked, and its worker held it) runs at once;
//! - a yes or no about the session itself, in its running turn ([`Host::ask_in_session`]): a
//!   sandbox's proxy asks whether the box may reach a host it is not allowed.

use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use ahp_types::actions::{ChatInputCompletedAction, ChatInputRequestedAction, StateAction};
use ahp_types::state::{ChatInputRequest, ChatInputResponseKind, ResponsePart, ToolCallState};
use serde_json::Value;
use tokio::sync::oneshot;

use super::questions::{Answer, Unanswered};
use super::turns::RunningCall;
use super::{Core, Host};

/// Whether a host tool's call on a session's endpoint runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Leave {
    /// It runs: nothing waits for a person, or a person allowed it. `drawn` is the call the host
    /// drew for it in the running turn (turn id, call id), which the host completes with its
    /// outcome; none when the agent draws the call itself.
    Run {
        /// The call the host drew, to complete.
        drawn: Option<(String, String)>,
    },
    /// It does not: what the agent is answered.
    Refused(String),
}

/// A host tool's call an agent made on its own, about to be held.
pub struct Unasked<'a> {
    /// The session whose endpoint it came to.
    pub session: &'a str,
    /// The chat it was made in, as the endpoint found it.
    pub chat: Option<&'a str>,
    /// The agent's id for the call, when its MCP request named one.
    pub tool_call_id: Option<&'a str>,
    /// The tool, as the session offers it.
    pub name: &'a str,
    /// Its input.
    pub input: &'a Value,
}

impl Host {
    /// Waits, when `call` is of a host tool that waits for a person (one whose `effects` say
    /// `destructive`) and no person allowed it in the running turn, until one allows or denies it
    /// there: the agent's own drawing of the call is held when it can be found, else the host
    /// draws one. Answers whether it runs, and the sentence the agent is told when it does not.
    pub async fn leave_for(&self, call: Unasked<'_>) -> Leave {
        let (decision, drawn) = {
            let mut core = self.lock();
            match core.hold(&call) {
                Ok(held) => held,
                Err(leave) => return leave,
            }
        };
        match decision.await {
            Ok(true) => Leave::Run { drawn },
            Ok(false) => Leave::Refused(policy::DENIED.to_owned()),
            Err(_) => Leave::Refused(policy::STOPPED.to_owned()),
        }
    }

    /// Completes a call the host drew for a held call ([`Leave::Run`]) with what the tool did.
    pub fn complete_drawn(
        &self,
        chat: &str,
        (turn_id, tool_call_id): (String, String),
        outcome: &protocol::ToolOutcome,
    ) {
        let past = outcome.past_tense_message.clone().unwrap_or_else(|| outcome.text.clone());
        let error = (!outcome.success).then(|| outcome.text.clone());
        let result = agent_runner::tool_result(outcome.success, past, Some(outcome.text.clone()), error);
        let complete = StateAction::ChatToolCallComplete(ahp_types::actions::ChatToolCallCompleteAction {
            turn_id,
            tool_call_id,
            meta: None,
            result,
            requires_result_confirmation: None,
        });
        self.lock().apply(chat, complete, None, None);
    }
}

/// What [`Core::hold`] answers: the decision to wait for and the call the host drew, or how the
/// call goes on at once.
type Held = Result<(oneshot::Receiver<bool>, Option<(String, String)>), Leave>;

impl Core {
    /// Holds `call` as a confirmation of its chat's running turn, when it waits for a person.
    fn hold(&mut self, call: &Unasked<'_>) -> Held {
        let specs = self.tool_specs(call.session);
        let spec = policy::offered(&specs, call.name);
        let asked = Asked::Offered(spec.and_then(|s| s.effects.as_ref()));
        // Attended or not, a destructive tool waits (the policy's first rule for an offered tool).
        if policy::decide(asked, Context::new(Mode::Runtime, false)) != Verdict::Confirm {
            return Err(Leave::Run { drawn: None });
        }
        // Outside a turn there is nobody to ask: the call acts as nobody, which under a users
        // directory may only read (the tools' grants, `tools/table.rs`).
        let Some((chat, turn_id)) = call.chat.and_then(|chat| Some((chat, self.running_turn(chat)?))) else {
            return Err(Leave::Run { drawn: None });
        };
        if call.tool_call_id.is_some_and(|id| self.questions.was_allowed(chat, id)) {
            return Err(Leave::Run { drawn: None });
        }
        let name = call.name;
        let display = spec.and_then(|s| s.definition.title.clone()).unwrap_or_else(|| name.to_owned());
        let (id, drawn) = match self.agents_drawing(chat, call.tool_call_id) {
            Some(id) => (id, None),
            None => {
                let id = format!("ahp-held-{}", uuid::Uuid::new_v4().simple());
                (id.clone(), Some((turn_id.clone(), id)))
            }
        };
        let shown = RunningCall {
            turn_id: &turn_id,
            tool_call_id: &id,
            tool_name: name,
            display_name: &display,
            contributor: None,
            invocation: format!("Running {display}"),
            input: Some(call.input.to_string()),
        };
        if drawn.is_some() {
            self.apply(chat, shown.start(), None, None);
        }
        let (tx, rx) = oneshot::channel();
        self.questions.held.insert((chat.to_owned(), id.clone()), tx);
        self.apply(
            chat,
            shown.asks(format!("Allow {display}? It declares that it may destroy what it acts on.")),
            None,
            None,
        );
        Ok((rx, drawn))
    }

    /// The agent's own drawing of the call in the running turn, still running, when its MCP
    /// request named it (Claude Code names its `toolUseId`). An agent that names none draws its
    /// call in its own time, maybe after the request: the host draws one of its own instead.
    fn agents_drawing(&self, chat: &str, tool_call_id: Option<&str>) -> Option<String> {
        let id = tool_call_id?;
        let turn = self.ch.chats.get(chat)?.active_turn.as_ref()?;
        let running = turn.response_parts.iter().any(|part| {
            matches!(part, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Running(r) if r.tool_call_id == id))
        });
        running.then(|| id.to_owned())
    }
}

impl Host {
    /// Asks the person watching `session`'s running turn a yes-or-no `message` about something of
    /// the session's own that is not a tool call (its sandbox reaching a host it may not), and
    /// waits for the answer: `Some(true)` for a yes, `Some(false)` for a no; `None` when nobody
    /// could answer (no turn running, an unattended run, the turn ended first).
    pub async fn ask_in_session(&self, session: &str, topic: &str, message: String) -> Option<bool> {
        let chat = {
            let core = self.lock();
            let chats = core.ch.sessions.get(session).map(|s| s.chats.clone()).unwrap_or_default();
            chats
                .into_iter()
                .map(|c| c.resource)
                .find(|chat| core.ch.chats.get(chat).is_some_and(|c| c.active_turn.is_some()) && core.is_attended(chat))
        };
        let chat = chat?;
        let id = format!("{topic}:{}", super::new_id());
        let request = ChatInputRequest { id, message: Some(message), url: None, questions: None, answers: None };
        match self.ask_person(&chat, None, request).await.ok()?.response {
            ChatInputResponseKind::Accept => Some(true),
            ChatInputResponseKind::Decline => Some(false),
            // Cancelled: the question went with its turn, and nobody said no.
            ChatInputResponseKind::Cancel => None,
        }
    }

    /// Asks `request` in the running turn of `chat` (which must be `turn_id` when that is known)
    /// and waits for the answer.
    pub async fn ask_person(
        &self,
        chat: &str,
        turn_id: Option<&str>,
        request: ChatInputRequest,
    ) -> Result<Answer, Unanswered> {
        let host = self;
        let request_id = request.id.clone();
        let answer = {
            let mut core = host.lock();
            let running = core.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.clone());
            match (&running, turn_id) {
                (None, _) => return Err(Unanswered::NoTurn),
                (Some(running), Some(asked)) if running != asked => return Err(Unanswered::NoTurn),
                _ => {}
            }
            let (tx, rx) = oneshot::channel();
            core.questions.waiting.insert((chat.to_owned(), request_id.clone()), tx);
            let action = StateAction::ChatInputRequested(ChatInputRequestedAction { request });
            core.apply(chat, action, None, None);
            rx
        };
        // However the wait ends (an answer, the turn ending, the tool's deadline), the question
        // must not stay open in the turn.
        let guard = Settle { host, chat, request_id: &request_id };
        let answer = answer.await.map_err(|_| Unanswered::Withdrawn);
        drop(guard);
        answer
    }
}

/// Closes a question nobody answered, so the session does not report input needed for it.
struct Settle<'a> {
    host: &'a Host,
    chat: &'a str,
    request_id: &'a str,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        let mut core = self.host.lock();
        core.questions.waiting.remove(&(self.chat.to_owned(), self.request_id.to_owned()));
        let open = core.ch.chats.get(self.chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| {
            t.response_parts.iter().any(|p| {
                matches!(p, ahp_types::state::ResponsePart::InputRequest(r)
                    if r.request.id == self.request_id && r.response.is_none())
            })
        });
        if open {
            let action = StateAction::ChatInputCompleted(ChatInputCompletedAction {
                request_id: self.request_id.to_owned(),
                response: ChatInputResponseKind::Cancel,
                answers: None,
            });
            core.apply(self.chat, action, None, None);
        }
    }
}

//! Questions the host asks a person in a chat's running turn for one of its tools
//! (`viewUnreviewedComments` asks before it shows comments): raised as a `chat/inputRequested` of
//! the running turn, answered by a client's `chat/inputCompleted`, which the host routes here
//! rather than to the backend.
//!
//! **Invariant:** a question is waited on only while its turn runs. When the turn ends the host
//! forgets the chat's questions, and each waiting tool is told the question was withdrawn.

use std::collections::HashMap;

use ahp_types::actions::{ChatInputCompletedAction, ChatInputRequestedAction, StateAction};
use ahp_types::state::{ChatInputAnswer, ChatInputRequest, ChatInputResponseKind};
use tokio::sync::oneshot;

use super::Host;

/// A person's answer to a host question.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Accept, decline or cancel.
    pub response: ChatInputResponseKind,
    /// The answers by question id.
    pub answers: HashMap<String, ChatInputAnswer>,
}

/// Questions host tools are waiting on, by (chat, request id).
#[derive(Default)]
pub struct Questions {
    waiting: HashMap<(String, String), oneshot::Sender<Answer>>,
}

impl Questions {
    /// True when a host tool asked `request_id` in `chat` and waits for the answer.
    pub fn holds(&self, chat: &str, request_id: &str) -> bool {
        self.waiting.contains_key(&(chat.to_owned(), request_id.to_owned()))
    }

    /// Hands a client's answer to the tool that asked.
    pub fn answer(&mut self, chat: &str, completed: &ChatInputCompletedAction) {
        if let Some(waiter) = self.waiting.remove(&(chat.to_owned(), completed.request_id.clone())) {
            let _ = waiter
                .send(Answer { response: completed.response, answers: completed.answers.clone().unwrap_or_default() });
        }
    }

    /// The chat's turn ended: every question asked in it is withdrawn.
    pub fn forget_chat(&mut self, chat: &str) {
        self.waiting.retain(|(c, _), _| c != chat);
    }
}

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Unanswered {
    /// The chat has no running turn to ask in.
    NoTurn,
    /// The turn ended (or the question was dropped) first.
    Withdrawn,
}

impl Host {
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

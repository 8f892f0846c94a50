//! What the host waits on a person for in a chat's running turn itself, rather than through the
//! backend, as it keeps it: the questions its tools asked (`viewUnreviewedComments` asks before it
//! shows comments), answered by a client's `chat/inputCompleted`, which the host routes here rather
//! than to the backend; the calls it holds for a person's leave; and the calls a person allowed in
//! the turn. The asking is `held.rs`.
//!
//! **Invariant:** a question or a held call is waited on only while its turn runs. When the turn
//! ends the host forgets the chat's questions and held calls, and each waiting tool is told.

use std::collections::{HashMap, HashSet};

use ahp_types::actions::ChatInputCompletedAction;
use ahp_types::state::{ChatInputAnswer, ChatInputResponseKind};
use tokio::sync::oneshot;

/// A person's answer to a host question.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Accept, decline or cancel.
    pub response: ChatInputResponseKind,
    /// The answers by question id.
    pub answers: HashMap<String, ChatInputAnswer>,
}

/// Questions host tools are waiting on, by (chat, request id), and the calls held for a person.
#[derive(Default)]
pub struct Questions {
    pub(super) waiting: HashMap<(String, String), oneshot::Sender<Answer>>,
    /// Host tools' calls held for a person's leave, by (chat, tool call id): true to run.
    pub(super) held: HashMap<(String, String), oneshot::Sender<bool>>,
    /// The calls a person allowed in each chat's running turn.
    allowed: HashMap<String, HashSet<String>>,
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

    /// True when the host holds `tool_call_id` in `chat` for a person's leave.
    pub fn holds_call(&self, chat: &str, tool_call_id: &str) -> bool {
        self.held.contains_key(&(chat.to_owned(), tool_call_id.to_owned()))
    }

    /// A person allowed or denied a call in `chat`'s running turn: a call the host holds is
    /// handed the decision, and an allowed one is remembered until the turn ends.
    pub fn decided(&mut self, chat: &str, tool_call_id: &str, approved: bool) {
        if approved {
            self.allowed.entry(chat.to_owned()).or_default().insert(tool_call_id.to_owned());
        }
        if let Some(waiter) = self.held.remove(&(chat.to_owned(), tool_call_id.to_owned())) {
            let _ = waiter.send(approved);
        }
    }

    pub(super) fn was_allowed(&self, chat: &str, tool_call_id: &str) -> bool {
        self.allowed.get(chat).is_some_and(|calls| calls.contains(tool_call_id))
    }

    /// The chat's turn ended: every question asked in it is withdrawn, and every call held in it
    /// is stopped.
    pub fn forget_chat(&mut self, chat: &str) {
        self.waiting.retain(|(c, _), _| c != chat);
        self.held.retain(|(c, _), _| c != chat);
        self.allowed.remove(chat);
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

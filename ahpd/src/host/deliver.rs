//! One door for a message, whoever sends it: a client's `chat/turnStarted` (and so a remote
//! host's relayed turn, which arrives here as a client's), a session tool's message, a client's
//! `createChat` first message, a wakeup, Agent Merge, a workspace move's continuation. The host
//! decides here, once, whether it starts a turn now or waits in the chat's queue, and refuses it
//! in one set of words.
//!
//! The rules, the strictest each door had before they met here:
//! - a subagent's chat takes no message; nothing is taken while the store cannot write (it is
//!   probed first); attachments must reach the model;
//! - a chat where a turn runs, or messages wait (steering or queued), queues the new one behind
//!   them; an idle chat where messages wait starts them first;
//! - a client that sends a turn while another client's turn runs saw it running: it is refused,
//!   and told to steer or queue instead; one that meets a turn the host began has its message
//!   queued behind it, told so in its refusal ([`queued_behind`]);
//! - a message nobody waits on at the moment it is sent (a wakeup's, Agent Merge's) is refused
//!   unless its chat's agent runs now, so its sender keeps it rather than lose it in a turn that
//!   fails to resume.

use ahp_types::actions::{ActionOrigin, ChatPendingMessageSetAction, ChatTurnStartedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{Message, PendingMessageKind};
use serde_json::{json, Value};

use super::core::{Committed, ConnId};
use super::{Core, Host};

/// The `_meta` key of a pending message's revision (1 until it is replaced).
const REVISION: &str = "ahpd.revision";

/// How the sentence that says a client's turn was queued ends, before the turn's id.
const QUEUED_AS: &str = "your message is queued behind it as ";

/// Who sends a message, and so which of the rules above reach it.
#[derive(Debug, Clone)]
pub enum Sender {
    /// A client's `chat/turnStarted`, said as it sent it (its origin echoed), for `person`.
    Client { conn: ConnId, origin: ActionOrigin, person: Option<String> },
    /// The host's own message for `person` (a session tool's, a `createChat`'s first message, a
    /// workspace move's continuation); `None`: nobody is behind it.
    Host { person: Option<String> },
    /// A message the host begins on a clock or a feature's watch (a wakeup's, Agent Merge's):
    /// nobody waits on it now, so it needs its agent running.
    Scheduled { person: Option<String> },
}

impl Sender {
    fn person(&self) -> Option<String> {
        match self {
            Sender::Client { person, .. } | Sender::Host { person } | Sender::Scheduled { person } => person.clone(),
        }
    }
}

/// What became of a delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Its turn began, with this id.
    Started(String),
    /// It waits in the chat's queue, as the pending message with this id.
    Queued(String),
}

impl Host {
    /// Delivers `turn`'s message to `chat` from `sender`: the chat is loaded from the store if it
    /// sleeps, then [`Core::deliver`] decides. `Err` is the refusal's sentence.
    pub fn deliver(
        &self,
        core: &mut Core,
        chat: &str,
        turn: ChatTurnStartedAction,
        sender: Sender,
    ) -> Result<Delivered, String> {
        if !self.ensure_loaded(core, chat) {
            return Err("its chat could not be loaded".into());
        }
        if let Sender::Scheduled { .. } = sender {
            let provider = core.chat(chat).and_then(|m| core.session(&m.session)).map(|s| s.provider.clone());
            let provider = provider.unwrap_or_default();
            // The worker's own state, not what its `Ready` said: at start-up that event may still
            // be on its way to the host when the first scheduled turns begin.
            if self.supervisor().current(&provider).is_none() {
                return Err(format!("the {provider} agent is not running, so the session cannot resume"));
            }
        }
        core.deliver(chat, turn, sender)
    }
}

impl Core {
    /// Delivers `turn`'s message to `chat` (loaded) from `sender`, by the rules above: starts it
    /// as a turn when the chat is free, else queues it behind what runs and waits there.
    pub fn deliver(&mut self, chat: &str, turn: ChatTurnStartedAction, sender: Sender) -> Result<Delivered, String> {
        super::edits::read_write(self.ch.chats.get(chat).ok_or("no such chat")?)?;
        if self.store.trouble().is_some() {
            // Refused only while the store still cannot write: space may have come back.
            self.retry_store();
        }
        if let Some(sentence) = self.store.cannot_write() {
            return Err(sentence);
        }
        self.check_attachments(chat, &turn.message)?;
        if self.running_turn(chat).is_none() && self.is_busy(chat) {
            // What waits in an idle chat goes first.
            self.start_next(chat);
        }
        let Some(running) = self.running_turn(chat) else {
            return self.begin(chat, turn, sender);
        };
        if matches!(sender, Sender::Client { .. }) && self.chats.get(chat).is_some_and(|m| m.client_started) {
            return Err(format!("Turn {running} is running in this chat; send a steering or queued message instead"));
        }
        self.queue(chat, &running, turn, sender)
    }

    /// True when a turn runs in `chat` or messages wait there: a new one queues behind them.
    pub fn is_busy(&self, chat: &str) -> bool {
        self.ch.chats.get(chat).is_some_and(|c| {
            c.active_turn.is_some()
                || c.steering_message.is_some()
                || c.queued_messages.as_ref().is_some_and(|q| !q.is_empty())
        })
    }

    fn begin(&mut self, chat: &str, turn: ChatTurnStartedAction, sender: Sender) -> Result<Delivered, String> {
        let turn_id = turn.turn_id.clone();
        if let Some(person) = sender.person() {
            self.note_sender(chat, &turn_id, person);
        }
        let origin = match sender {
            Sender::Client { conn, origin, .. } => Some((conn, origin)),
            Sender::Host { .. } | Sender::Scheduled { .. } => None,
        };
        if self.start_turn(chat, turn, origin) {
            Ok(Delivered::Started(turn_id))
        } else {
            Err("the chat would not take the turn".into())
        }
    }

    /// Queues the message behind `running` under the turn's id; a client is told so first, in the
    /// refusal of the turn it sent.
    fn queue(
        &mut self,
        chat: &str,
        running: &str,
        turn: ChatTurnStartedAction,
        sender: Sender,
    ) -> Result<Delivered, String> {
        let id = turn.turn_id.clone();
        if let Some(person) = sender.person() {
            self.note_sender(chat, &id, person);
        }
        let action = match sender {
            Sender::Client { conn, origin, .. } => {
                // Said as the client sent it, under the id it gave.
                let queued = pending(id.clone(), turn.message.clone());
                let said = StateAction::ChatTurnStarted(turn);
                self.ch.reject(conn, chat, &said, origin, &queued_behind(running, &id));
                queued
            }
            Sender::Host { .. } | Sender::Scheduled { .. } => queued_message(id.clone(), turn.message).1,
        };
        match self.apply(chat, action, None, None) {
            Committed::Sent { .. } => Ok(Delivered::Queued(id)),
            _ => Err("the chat would not queue its message".into()),
        }
    }
}

/// The host's `message` as the queued pending message `id`, with the action that sets it: one that
/// carries `_meta` (where it came from) carries its revision too, 1 until it is replaced.
pub fn queued_message(id: String, mut message: Message) -> (String, StateAction) {
    if let Some(meta) = message.meta.as_mut() {
        meta.insert(REVISION.into(), json!(1));
    }
    (id.clone(), pending(id, message))
}

fn pending(id: String, message: Message) -> StateAction {
    StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction { kind: PendingMessageKind::Queued, id, message })
}

/// A pending message's revision (1 until it is replaced).
pub fn revision_of(message: &Message) -> u64 {
    message.meta.as_ref().and_then(|m: &JsonObject| m.get(REVISION)).and_then(Value::as_u64).unwrap_or(1)
}

/// The `rejectionReason` of a client's `chat/turnStarted` that met a turn no client started: its
/// message waits behind that turn as the queued message `id` (the turn id the client gave).
pub fn queued_behind(running: &str, id: &str) -> String {
    format!("Turn {running} began in this chat before your message came (the host started it); {QUEUED_AS}{id}")
}

/// True when `reason` says the message of the client's turn `id` was queued, not refused.
pub fn was_queued_behind(reason: &str, id: &str) -> bool {
    reason.strip_suffix(id).is_some_and(|rest| rest.ends_with(QUEUED_AS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_turn_is_told_apart_from_a_refused_one() {
        let said = queued_behind("t-host", "t-mine");
        assert!(said.starts_with("Turn t-host began in this chat"), "{said}");
        assert!(was_queued_behind(&said, "t-mine"));
        assert!(!was_queued_behind(&said, "mine"), "another turn's id");
        assert!(!was_queued_behind(
            "Turn t-host is running in this chat; send a steering or queued message instead",
            "t-mine"
        ));
    }
}

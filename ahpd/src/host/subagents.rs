//! Subagents as chats (seed 003 "Delegating to a subagent", seed 004 `subagents`,
//! `stopWorker`): a tool call of a running turn that starts a worker with a turn loop of its own
//! (Claude's Task) gets a chat of its own in the session, origin `tool`, read-only, listed as the
//! parent chat's background work while its turn runs. The backend streams the worker's turn on
//! that chat as on any; the chat is stored like any, so it is read back after a restart.
//!
//! What a client does on a subagent's chat reaches the backend through the chat that started it:
//! a stop becomes `session/stopWorker` for the tool call, an answer to one of its questions goes
//! to the parent's conversation, which asked it.

use ahp_types::actions::{
    ChatBackgroundWorkRemovedAction, ChatBackgroundWorkSetAction, ChatTurnStartedAction, StateAction,
};
use ahp_types::state::{
    BackgroundSubagentWork, BackgroundWork, ChatInteractivity, ChatOrigin, Message, MessageKind, MessageOrigin,
};
use protocol::SubagentStartedParams;

use super::core::{channel_kind, ChannelKind};
use super::driver::Op;
use super::edits::subagent_of;
use super::{now_iso, Core, Host};

impl Core {
    /// The chats of a session that have backend sessions of their own (not subagents' chats),
    /// in its catalogue's order: what a change to the whole session is handed to.
    pub fn backend_chats_of(&self, session: &str) -> Vec<String> {
        self.chats_of(session)
            .into_iter()
            .filter(|chat| self.ch.chats.get(chat).is_some_and(|s| subagent_of(s).is_none()))
            .collect()
    }

    /// The chat whose backend session serves `chat`: its own, or for a subagent's chat the chat
    /// whose tool call started it.
    fn served_by(&self, chat: &str) -> Option<(String, Option<String>)> {
        let state = self.ch.chats.get(chat)?;
        Some(match subagent_of(state) {
            Some((parent, call)) => (parent.to_owned(), Some(call.to_owned())),
            None => (chat.to_owned(), None),
        })
    }

    /// Hands `op` to the backend that serves `chat` (a subagent's questions are its parent's).
    pub fn to_backend(&mut self, chat: &str, op: Op) {
        let Some((served, _)) = self.served_by(chat) else { return };
        let op = match op {
            Op::Confirm(mut p) => {
                p.chat = served.clone();
                Op::Confirm(p)
            }
            Op::Answer(mut p) => {
                p.chat = served.clone();
                Op::Answer(p)
            }
            other => other,
        };
        if let Some(meta) = self.chats.get(&served) {
            let _ = meta.driver.send(op);
        }
    }

    /// A client stopped `chat`'s running turn: its backend aborts it, or for a subagent's chat the
    /// backend of the chat that started it stops that worker.
    pub fn stop(&mut self, chat: &str, turn_id: String) {
        let Some((served, call)) = self.served_by(chat) else { return };
        let op = match call {
            Some(tool_call_id) => Op::StopWorker { tool_call_id },
            None => Op::Abort { turn_id: Some(turn_id) },
        };
        if let Some(meta) = self.chats.get(&served) {
            let _ = meta.driver.send(op);
        }
    }

    /// A subagent's turn ended: it is no longer its parent chat's background work.
    pub(super) fn subagent_ended(&mut self, chat: &str) {
        let Some((parent, call)) =
            self.ch.chats.get(chat).and_then(subagent_of).map(|(p, c)| (p.to_owned(), c.to_owned()))
        else {
            return;
        };
        let listed = self
            .ch
            .chats
            .get(&parent)
            .and_then(|c| c.background_work.as_ref())
            .is_some_and(|work| work.iter().any(|w| matches!(w, BackgroundWork::Subagent(s) if s.id == call)));
        if listed {
            let action = StateAction::ChatBackgroundWorkRemoved(ChatBackgroundWorkRemovedAction { id: call });
            self.apply(&parent, action, None, None);
        }
    }
}

impl Host {
    /// A backend said a tool call started a worker: its chat opens in the session, its turn
    /// starts there, and the parent chat lists it as background work.
    pub(super) fn subagent_started(&self, incarnation: u64, params: SubagentStartedParams) {
        let mut core = self.lock();
        let Some(parent) = core.chats.get(&params.chat).filter(|m| m.live == Some(incarnation)) else {
            tracing::debug!(chat = %params.chat, "a subagent of a chat this worker no longer holds; dropped");
            return;
        };
        let (session, harness) = (parent.session.clone(), parent.harness.clone());
        let fresh = channel_kind(&params.subagent) == Some(ChannelKind::Chat)
            && !core.ch.chats.contains_key(&params.subagent)
            && !core.store.session_of_chat(&params.subagent).is_ok_and(|s| s.is_some());
        if !fresh {
            tracing::warn!(subagent = %params.subagent, "a subagent's chat must be a new ahp-chat:/ URI; dropped");
            return;
        }
        let now = now_iso();
        let shape = super::catalog::ChatShape {
            origin: Some(ChatOrigin::Tool { chat: params.chat.clone(), tool_call_id: params.tool_call_id.clone() }),
            interactivity: Some(ChatInteractivity::ReadOnly),
            title: params.title.clone(),
            ..Default::default()
        };
        self.add_chat_shaped(&mut core, &session, &params.subagent, &now, harness, shape);
        if let Some(meta) = core.chats.get_mut(&params.subagent) {
            // Its backend is its parent's: what it emits is taken while that one lives, and it has
            // nothing of its own to start or resume.
            meta.live = Some(incarnation);
            meta.started_in_backend = true;
            meta.titled = true;
            meta.turn_clock = Some((params.turn_id.clone(), std::time::Instant::now()));
        }
        core.persist_chat(&params.subagent);
        let message = Message {
            text: params.prompt.clone(),
            origin: MessageOrigin { kind: MessageKind::Tool },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        };
        let start = ChatTurnStartedAction {
            turn_id: params.turn_id.clone(),
            started_at: now.clone(),
            message,
            queued_message_id: None,
            meta: None,
        };
        core.apply(&params.subagent, StateAction::ChatTurnStarted(start), None, None);
        let work = BackgroundWork::Subagent(BackgroundSubagentWork {
            id: params.tool_call_id.clone(),
            label: params.title.clone(),
            started_at: now,
            meta: None,
            chat: params.subagent.clone(),
        });
        core.apply(&params.chat, StateAction::ChatBackgroundWorkSet(ChatBackgroundWorkSetAction { work }), None, None);
        tracing::debug!(chat = %params.chat, subagent = %params.subagent, "a subagent started");
    }
}

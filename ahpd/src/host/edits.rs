//! The conversation a client edits: a chat truncated to an earlier turn (edit and resend), a
//! chat forked from another at a turn, a failed turn resumed, and a turn whose questions were
//! parked when the daemon stopped, restored and answered after the restart.
//!
//! The host's state changes at once, through the write path; the backend learns of it at its
//! next start: a cut of the conversation (`Start.cut`) carried until the backend has it on
//! record, or `session/resumeTurn` for a turn it lost. A backend that cannot do what is asked
//! (its features say so) is refused before anything changes, in words a person can act on.

use ahp_types::state::{ChatOrigin, ChatState, ResponsePart, ToolCallState, ToolInput, Turn, TurnState};
use protocol::{Cut, Decision, TurnPoint};

use super::driver::Op;
use super::errors::AhpError;
use super::{Core, Host, ParkedTurn};

/// A truncation checked and about to be said: the turns it keeps and the ones it drops.
#[derive(Debug, Clone)]
pub struct Truncation {
    /// How many turns stay.
    pub keep: usize,
    /// The last turn kept, when any is.
    pub kept: Option<TurnPoint>,
    /// The turns dropped, oldest first.
    pub dropped: Vec<TurnPoint>,
}

/// What the chat's backend can do, from what its worker said.
#[derive(Debug, Clone, Copy, Default)]
pub struct Abilities {
    /// Goes on from a cut of its own conversation.
    pub truncate: bool,
    /// Forks a conversation at a turn.
    pub fork: bool,
    /// Resumes a turn it lost.
    pub resume_turn: bool,
    /// Takes a steering message mid-turn.
    pub steering: bool,
}

/// The chat a subagent's chat belongs to, and the call that started it.
pub fn subagent_of(state: &ChatState) -> Option<(&str, &str)> {
    match state.origin.as_ref()? {
        ChatOrigin::Tool { chat, tool_call_id } => Some((chat.as_str(), tool_call_id.as_str())),
        _ => None,
    }
}

/// A subagent's chat shows a tool call's work: nobody sends it messages.
pub fn read_write(state: &ChatState) -> Result<(), String> {
    match subagent_of(state) {
        Some(_) => Err(SUBAGENT_READ_ONLY.to_owned()),
        None => Ok(()),
    }
}

/// The sentence a change to a subagent's chat is refused with.
pub const SUBAGENT_READ_ONLY: &str =
    "This chat is a subagent's: it shows the work of a tool call in another chat, and takes no messages or edits";

/// True when the turn's last part is an error that says it can be resumed.
pub fn resumable(turn: &Turn) -> bool {
    turn.state == TurnState::Error
        && matches!(turn.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
}

/// True when the active turn still has a question nobody answered.
fn open_questions(state: &ChatState) -> bool {
    let Some(turn) = &state.active_turn else { return false };
    turn.response_parts.iter().any(|p| match p {
        ResponsePart::ToolCall(tc) => matches!(tc.tool_call, ToolCallState::PendingConfirmation(_)),
        ResponsePart::InputRequest(r) => r.response.is_none(),
        _ => false,
    })
}

/// The call's tool name and input as the turn holds it, for a decision made on it.
pub fn pending_call(state: &ChatState, tool_call_id: &str) -> Option<(String, Option<String>)> {
    let turn = state.active_turn.as_ref()?;
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => match &tc.tool_call {
            ToolCallState::PendingConfirmation(p) if p.tool_call_id == tool_call_id => {
                let input = match &p.tool_input {
                    Some(ToolInput::Inline(text)) => Some(text.clone()),
                    _ => None,
                };
                Some((p.tool_name.clone(), input))
            }
            _ => None,
        },
        _ => None,
    })
}

impl Core {
    /// The provider whose backend runs `chat`.
    pub fn chat_provider(&self, chat: &str) -> Option<String> {
        let meta = self.chats.get(chat)?;
        Some(match &meta.harness {
            Some(h) => h.provider.clone(),
            None => self.sessions.get(&meta.session)?.provider.clone(),
        })
    }

    /// What `chat`'s backend can do.
    pub fn abilities(&self, chat: &str) -> Abilities {
        let Some(descriptor) = self.chat_provider(chat).and_then(|p| self.agent(&p)?.descriptor.clone()) else {
            return Abilities::default();
        };
        let fork = descriptor
            .capabilities
            .as_ref()
            .and_then(|c| c.multiple_chats.as_ref())
            .and_then(|m| m.fork)
            .unwrap_or(false);
        // A conversation its backend said it takes up again once closed (an ACP agent that
        // declared `loadSession`, which it says only once it runs) is forked and has a turn it
        // lost resumed from that record, though the agent does not offer it for all of them.
        let loads = self.chats.get(chat).is_some_and(|m| m.resumable);
        Abilities {
            truncate: descriptor.features.truncate,
            fork: fork || loads,
            resume_turn: descriptor.features.resume_turn || loads,
            steering: descriptor.features.steering,
        }
    }

    /// A turn as the backend knows it.
    fn point(&self, chat: &str, turn_id: &str) -> TurnPoint {
        let transcript_id = self.chats.get(chat).and_then(|m| m.transcripts.get(turn_id).cloned());
        TurnPoint { turn_id: turn_id.to_owned(), transcript_id }
    }

    /// Checks a client's `chat/truncated`: the turn must be one of the chat's, nothing may run,
    /// and a backend that must drop turns it holds must be able to.
    pub fn check_truncation(&self, chat: &str, turn_id: Option<&str>) -> Result<Truncation, String> {
        let state = self.ch.chats.get(chat).ok_or("no such chat")?;
        if subagent_of(state).is_some() {
            return Err(SUBAGENT_READ_ONLY.to_owned());
        }
        if let Some(running) = &state.active_turn {
            return Err(format!("Turn {} is running in this chat; stop it before truncating the chat", running.id));
        }
        let keep = match turn_id {
            None => 0,
            Some(id) => {
                let at = state.turns.iter().position(|t| t.id == id);
                at.ok_or_else(|| format!("This chat has no turn {id}, so nothing was truncated"))? + 1
            }
        };
        let dropped: Vec<TurnPoint> = state.turns[keep..].iter().map(|t| self.point(chat, &t.id)).collect();
        let kept = keep.checked_sub(1).map(|i| self.point(chat, &state.turns[i].id));
        // Keeping nothing starts a new conversation, which every backend can; keeping every turn
        // changes nothing it holds.
        if kept.is_some() && !dropped.is_empty() && !self.abilities(chat).truncate {
            let provider = self.chat_provider(chat).unwrap_or_default();
            return Err(format!(
                "The {provider} agent cannot go on from an earlier turn of its conversation, so this chat cannot be \
                 truncated there; start a new chat, or truncate it to nothing"
            ));
        }
        Ok(Truncation { keep, kept, dropped })
    }

    /// A truncation was said: the store forgets the dropped turns, and the backend's next start
    /// goes on from the kept ones (or begins a new conversation when none is kept).
    pub fn truncated(&mut self, chat: &str, truncation: Truncation) {
        if truncation.dropped.is_empty() {
            return;
        }
        let dropped = self.store.drop_turns_from(chat, i64::try_from(truncation.keep).unwrap_or(i64::MAX));
        self.kept(dropped, crate::store::health::Record::Turns(chat.to_owned(), truncation.keep));
        let Some(meta) = self.chats.get_mut(chat) else { return };
        for dropped in &truncation.dropped {
            meta.transcripts.remove(&dropped.turn_id);
            meta.senders.remove(&dropped.turn_id);
        }
        match truncation.kept {
            None => {
                // Nothing kept: a conversation of its own, begun afresh.
                meta.conversation_id = super::new_id();
                meta.started_in_backend = false;
                meta.cut = None;
            }
            Some(kept) => {
                // A cut already waiting (an earlier truncation, the fork the chat began as) still
                // drops what it dropped: the backend's record holds those turns too.
                let (source, mut dropped) = match meta.cut.take() {
                    Some(before) => (before.source, before.dropped),
                    None => (meta.conversation_id.clone(), Vec::new()),
                };
                let mut all = truncation.dropped;
                all.append(&mut dropped);
                meta.cut = Some(Cut { source, kept, dropped: all });
            }
        }
        self.persist_chat(chat);
        // The backend's session goes, and its next start takes the cut.
        self.restart_between_turns(chat);
    }

    /// Checks a client's `chat/turnResume`: the chat's last turn, failed in a way that can be
    /// resumed, nothing running, and a backend that resumes turns.
    pub fn check_resume(&self, chat: &str, turn_id: &str) -> Result<(), String> {
        let state = self.ch.chats.get(chat).ok_or("no such chat")?;
        if subagent_of(state).is_some() {
            return Err(SUBAGENT_READ_ONLY.to_owned());
        }
        if let Some(running) = &state.active_turn {
            return Err(format!("Turn {} is running in this chat; a turn is resumed only when none runs", running.id));
        }
        let Some(last) = state.turns.last() else {
            return Err(format!("This chat has no turn {turn_id} to resume"));
        };
        if last.id != turn_id {
            let known = state.turns.iter().any(|t| t.id == turn_id);
            return Err(if known {
                format!("Only the chat's last turn can be resumed, and turn {turn_id} is not the last")
            } else {
                format!("This chat has no turn {turn_id} to resume")
            });
        }
        if !resumable(last) {
            return Err(format!(
                "Turn {turn_id} did not fail in a way that can be resumed; send the message again instead"
            ));
        }
        if !self.abilities(chat).resume_turn {
            let provider = self.chat_provider(chat).unwrap_or_default();
            return Err(format!("The {provider} agent cannot resume a turn; send the message again instead"));
        }
        Ok(())
    }

    /// A turn runs again (a client resumed it, or people answered what it had parked): its
    /// backend takes it up in the resumed conversation.
    pub fn resume_turn(&mut self, chat: &str, turn_id: &str, decisions: Vec<Decision>) {
        let Some(message) = self
            .ch
            .chats
            .get(chat)
            .and_then(|c| c.active_turn.as_ref())
            .filter(|t| t.id == turn_id)
            .map(|t| t.message.clone())
        else {
            return;
        };
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.turn_clock = Some((turn_id.to_owned(), std::time::Instant::now()));
            let _ = meta.driver.send(Op::ResumeTurn { turn_id: turn_id.to_owned(), message, decisions });
        }
    }

    /// The turn `turn_id` lost its backend with questions parked (`parked`).
    pub fn is_parked(&self, chat: &str, turn_id: &str) -> bool {
        self.chats.get(chat).and_then(|m| m.parked.as_ref()).is_some_and(|p| p.turn_id == turn_id)
    }

    /// A person answered a question of a parked turn: once every question is answered, the
    /// backend resumes the turn with all the answers at once (seed 003: answered together).
    pub fn parked_answer(&mut self, chat: &str, decision: Decision) {
        let Some(parked) = self.chats.get_mut(chat).and_then(|m| m.parked.as_mut()) else { return };
        parked.decisions.push(decision);
        let waiting = self.ch.chats.get(chat).is_some_and(open_questions);
        if waiting {
            return;
        }
        let Some(parked) = self.chats.get_mut(chat).and_then(|m| m.parked.take()) else { return };
        self.resume_turn(chat, &parked.turn_id, parked.decisions);
    }

    /// The backend has the chat's cut on record now: later starts need not carry it.
    pub fn cut_kept(&mut self, chat: &str) {
        let Some(meta) = self.chats.get_mut(chat) else { return };
        if meta.cut.take().is_some() {
            self.persist_chat(chat);
        }
    }
}

impl Host {
    /// Opens `chat` in `session` as a fork of another chat at one of its ended turns: it holds a
    /// copy of the turns through that one, and its backend begins as a copy of the source's
    /// conversation through it (`Start.cut`), so both go on independently.
    pub(crate) fn fork_chat(
        &self,
        core: &mut Core,
        session: &str,
        chat: &str,
        fork: &ahp_types::commands::ForkChatSource,
    ) -> Result<(), AhpError> {
        let source = fork.chat.as_str();
        if source == chat {
            return Err(AhpError::invalid_params("A chat cannot be forked from itself"));
        }
        self.ensure_loaded(core, source);
        let Some(meta) = core.chats.get(source) else {
            return Err(AhpError::invalid_params(format!("There is no chat {source} to fork")));
        };
        if meta.session != session {
            return Err(AhpError::invalid_params(format!(
                "Chat {source} belongs to another session; a fork stays in its source's session"
            )));
        }
        let Some(state) = core.ch.chats.get(source) else {
            return Err(AhpError::invalid_params(format!("There is no chat {source} to fork")));
        };
        if subagent_of(state).is_some() {
            return Err(AhpError::invalid_params("A subagent's chat cannot be forked; fork the chat that started it"));
        }
        if state.active_turn.as_ref().is_some_and(|t| t.id == fork.turn_id) {
            return Err(AhpError::invalid_params(format!(
                "Turn {} is still running; a chat is forked at a turn that has ended",
                fork.turn_id
            )));
        }
        let Some(at) = state.turns.iter().position(|t| t.id == fork.turn_id) else {
            return Err(AhpError::invalid_params(format!("Chat {source} has no turn {}", fork.turn_id)));
        };
        if !core.abilities(source).fork {
            let provider = core.chat_provider(source).unwrap_or_default();
            return Err(AhpError::invalid_params(format!("The {provider} agent cannot fork a chat")));
        }
        let turns = state.turns[..=at].to_vec();
        let mut dropped: Vec<TurnPoint> = state.turns[at + 1..].iter().map(|t| core.point(source, &t.id)).collect();
        let kept = core.point(source, &fork.turn_id);
        // A cut the source's backend has not recorded yet: its record still holds those turns.
        let origin_conversation = match &meta.cut {
            Some(cut) => {
                dropped.extend(cut.dropped.iter().cloned());
                cut.source.clone()
            }
            None => meta.conversation_id.clone(),
        };
        let transcripts =
            turns.iter().filter_map(|t| Some((t.id.clone(), meta.transcripts.get(&t.id)?.clone()))).collect();
        let shape = super::catalog::ChatShape {
            origin: Some(ChatOrigin::Fork { chat: source.to_owned(), turn_id: fork.turn_id.clone() }),
            interactivity: None,
            title: meta.title.clone(),
            turns,
            transcripts,
            cut: Some(Cut { source: origin_conversation, kept, dropped }),
            ..Default::default()
        };
        let harness = meta.harness.clone();
        self.add_chat_shaped(core, session, chat, &super::now_iso(), harness, shape);
        if let Some(meta) = core.chats.get(chat) {
            let _ = meta.driver.send(Op::Ensure { announce_by: None });
        }
        Ok(())
    }

    /// Restores a turn that was running when the daemon stopped, with questions it had parked:
    /// it is still running afterwards, holding the same questions, and answering them resumes it
    /// in its backend. Answers false when the turn cannot be (its backend resumes no turns, or it
    /// parked nothing), for the caller to end it as interrupted.
    pub(super) fn restore_parked(&self, core: &mut Core, chat: &str, active: &ahp_types::state::ActiveTurn) -> bool {
        let parks = active.response_parts.iter().any(|p| match p {
            ResponsePart::ToolCall(tc) => matches!(tc.tool_call, ToolCallState::PendingConfirmation(_)),
            ResponsePart::InputRequest(r) => r.response.is_none(),
            _ => false,
        });
        if !parks || !self.ensure_loaded(core, chat) || !core.abilities(chat).resume_turn {
            return false;
        }
        let Some(state) = core.ch.chats.get_mut(chat) else { return false };
        if state.active_turn.is_some() {
            return true;
        }
        // A resumed turn was stored when it failed before: it is the running one again.
        if let Some(at) = state.turns.iter().position(|t| t.id == active.id) {
            state.turns.remove(at);
        }
        // Loading puts the turn back as it was checkpointed: what it said, the questions open.
        state.active_turn = Some(active.clone());
        state.status = (state.status & !super::catalog::status::ACTIVITY) | super::catalog::status::INPUT_NEEDED;
        if let Some(meta) = core.chats.get_mut(chat) {
            meta.parked = Some(ParkedTurn { turn_id: active.id.clone(), decisions: Vec::new() });
            meta.turn_clock = Some((active.id.clone(), std::time::Instant::now()));
        }
        core.sync_input_needed(chat);
        core.sync_chat(chat);
        tracing::info!(chat, turn = %active.id, "a turn with questions parked was restored after a restart");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{ErrorInfo, ErrorResponsePart, Message, MessageKind, MessageOrigin};

    fn turn(state: TurnState, last: Option<ResponsePart>) -> Turn {
        Turn {
            id: "t".into(),
            started_at: None,
            duration: None,
            message: Message {
                text: "hi".into(),
                origin: MessageOrigin { kind: MessageKind::User },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            response_parts: last.into_iter().collect(),
            usage: None,
            state,
        }
    }

    fn error(resumable: Option<bool>) -> ResponsePart {
        ResponsePart::Error(ErrorResponsePart {
            error: ErrorInfo { error_type: "x".into(), message: "x".into(), stack: None, meta: None },
            resumable,
        })
    }

    #[test]
    fn only_a_failed_turn_whose_error_says_so_resumes() {
        assert!(resumable(&turn(TurnState::Error, Some(error(Some(true))))));
        assert!(!resumable(&turn(TurnState::Error, Some(error(None)))));
        assert!(!resumable(&turn(TurnState::Complete, Some(error(Some(true))))));
        assert!(!resumable(&turn(TurnState::Error, None)));
    }
}

//! The turn engine: starting turns (a client's, a queued one, the backend's own), taking what
//! backends say about them, ending them when a backend cannot, and starting what waits behind.
//!
//! Seed 004's rules for backend actions live here: a start of a turn the chat holds already is
//! not said again; while a turn runs an action of another turn is dropped; with none running a
//! completion of a turn that already ended is dropped; everything else goes out.

use std::time::Instant;

use ahp_types::actions::{
    ActionOrigin, ChatErrorAction, ChatPendingMessageRemovedAction, ChatTurnStartedAction, SessionMetaChangedAction,
    StateAction,
};
use ahp_types::state::{ErrorInfo, ErrorResponsePart, Message, PendingMessageKind};
use protocol::{EmitChannel, EmitParams};

use super::core::{action_type, Committed, ConnId};
use super::driver::Op;
use super::{millis_since, now_iso, remember, Core, Host};

/// Host-only fields a backend puts on a confirmation for the host to decide from; they are taken
/// off before any client sees the call.
const HOST_ONLY_META: [&str; 7] = [
    "permissionKind",
    "permissionPath",
    "permissionUrl",
    "shellCommand",
    "shellLanguage",
    "requestSandboxBypass",
    "managedApprovalRequired",
];

/// A turn the host starts itself (a queued message, a wakeup, a session tool's message).
pub fn host_turn(message: Message, queued_message_id: Option<String>) -> ChatTurnStartedAction {
    ChatTurnStartedAction { turn_id: super::new_id(), started_at: now_iso(), message, queued_message_id, meta: None }
}

/// What a tool call the host runs itself is said as when it begins: its start, then its ready
/// running without asking (`confirmed: not-needed`).
pub struct RunningCall<'a> {
    /// The turn.
    pub turn_id: &'a str,
    /// The call's id.
    pub tool_call_id: &'a str,
    /// The tool's name, and what a client draws it as.
    pub tool_name: &'a str,
    pub display_name: &'a str,
    /// Who runs it, when a client does.
    pub contributor: Option<ahp_types::state::ToolCallContributor>,
    /// What it is about to do.
    pub invocation: String,
    /// Its input, as text, when it has one to show.
    pub input: Option<String>,
}

impl RunningCall<'_> {
    /// `chat/toolCallStart` and `chat/toolCallReady`, in that order.
    pub fn actions(self) -> [StateAction; 2] {
        [self.start(), self.ready()]
    }

    /// `chat/toolCallStart`.
    pub fn start(&self) -> StateAction {
        StateAction::ChatToolCallStart(ahp_types::actions::ChatToolCallStartAction {
            turn_id: self.turn_id.to_owned(),
            tool_call_id: self.tool_call_id.to_owned(),
            meta: None,
            tool_name: self.tool_name.to_owned(),
            display_name: self.display_name.to_owned(),
            intention: None,
            contributor: self.contributor.clone(),
        })
    }

    /// `chat/toolCallReady` waiting for a person to allow it, asking `title`.
    pub fn asks(self, title: String) -> StateAction {
        self.ready_as(None, Some(title))
    }

    /// `chat/toolCallReady`, running without asking.
    pub fn ready(self) -> StateAction {
        self.ready_as(Some(ahp_types::state::ToolCallConfirmationReason::NotNeeded), None)
    }

    fn ready_as(
        self,
        confirmed: Option<ahp_types::state::ToolCallConfirmationReason>,
        asking: Option<String>,
    ) -> StateAction {
        use ahp_types::common::StringOrMarkdown;
        use ahp_types::state::ToolInput;
        StateAction::ChatToolCallReady(ahp_types::actions::ChatToolCallReadyAction {
            turn_id: self.turn_id.to_owned(),
            tool_call_id: self.tool_call_id.to_owned(),
            meta: None,
            contributor: self.contributor,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(self.invocation),
            tool_input: self.input.map(ToolInput::Inline),
            confirmation_title: asking.map(StringOrMarkdown::Plain),
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed,
            options: None,
        })
    }
}

/// The turn an action belongs to, for actions that name one.
pub fn turn_of(action: &StateAction) -> Option<&str> {
    Some(match action {
        StateAction::ChatTurnStarted(a) => &a.turn_id,
        StateAction::ChatDelta(a) => &a.turn_id,
        StateAction::ChatResponsePart(a) => &a.turn_id,
        StateAction::ChatReasoning(a) => &a.turn_id,
        StateAction::ChatUsage(a) => &a.turn_id,
        StateAction::ChatToolCallStart(a) => &a.turn_id,
        StateAction::ChatToolCallDelta(a) => &a.turn_id,
        StateAction::ChatToolCallReady(a) => &a.turn_id,
        StateAction::ChatToolCallConfirmed(a) => &a.turn_id,
        StateAction::ChatToolCallComplete(a) => &a.turn_id,
        StateAction::ChatToolCallResultConfirmed(a) => &a.turn_id,
        StateAction::ChatToolCallContentChanged(a) => &a.turn_id,
        StateAction::ChatToolCallAuthRequired(a) => &a.turn_id,
        StateAction::ChatToolCallAuthResolved(a) => &a.turn_id,
        StateAction::ChatTurnComplete(a) => &a.turn_id,
        StateAction::ChatTurnCancelled(a) => &a.turn_id,
        StateAction::ChatError(a) => &a.turn_id,
        StateAction::ChatTurnResume(a) => &a.turn_id,
        _ => return None,
    })
}

/// True for the three actions that end a turn.
pub fn is_ending(action: &StateAction) -> bool {
    matches!(action, StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) | StateAction::ChatError(_))
}

/// A chat's first message, cut to a title.
pub fn title_from(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    const MAX: usize = 60;
    if line.chars().count() <= MAX {
        return line.to_owned();
    }
    let cut: String = line.chars().take(MAX - 1).collect();
    format!("{}…", cut.trim_end())
}

/// Session-channel actions a backend may say; the rest of that channel is the host's.
fn backend_may_say_on_session(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::SessionTitleChanged(_)
            | StateAction::SessionActivityChanged(_)
            | StateAction::SessionConfigChanged(_)
            | StateAction::SessionCustomizationsChanged(_)
            | StateAction::SessionCustomizationUpdated(_)
            | StateAction::SessionCustomizationRemoved(_)
            | StateAction::SessionMcpServerStateChanged(_)
            | StateAction::SessionChangesetsChanged(_)
            | StateAction::SessionMetaChanged(_)
    )
}

impl Core {
    /// Says a turn's start and hands it to the backend. `origin` is the client whose action it
    /// is (said exactly as it sent it); a host-started turn (a queued message, a wakeup) has none.
    /// Answers whether the start was said. A message from outside the turn engine comes in
    /// through [`Core::deliver`], which decides whether it starts at all.
    pub(super) fn start_turn(
        &mut self,
        chat: &str,
        start: ChatTurnStartedAction,
        origin: Option<(ConnId, ActionOrigin)>,
    ) -> bool {
        let (turn_id, message) = (start.turn_id.clone(), start.message.clone());
        self.touch(chat);
        let client = origin.as_ref().map(|(_, o)| o.client_id.clone());
        // A queued or steering message's turn is its sender's.
        if let Some(sender) = start.queued_message_id.as_deref().and_then(|q| self.sender_of(chat, q)) {
            self.note_sender(chat, &turn_id, sender);
        }
        let (origin, extra) = match origin {
            Some((conn, origin)) => (Some(origin), Some(conn)),
            None => (None, None),
        };
        if !matches!(self.apply(chat, StateAction::ChatTurnStarted(start), origin, extra), Committed::Sent { .. }) {
            return false;
        }
        let untitled = self.chats.get(chat).is_some_and(|m| !m.titled);
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.turn_clock = Some((turn_id.clone(), Instant::now()));
            meta.client_started = extra.is_some();
            meta.titled = true;
        }
        if untitled {
            let title = title_from(&message.text);
            if !title.is_empty() {
                self.set_chat_title(chat, &title);
            }
        }
        if let Some(command) = self.command_of(&message) {
            // The host's own turn: the backend never hears of it (seed 004).
            self.start_command(chat, &turn_id, command);
            return true;
        }
        // A turn the host began that nobody watches (a wakeup's) has nobody to answer it.
        let unattended = extra.is_none() && !self.is_attended(chat);
        if let Some(meta) = self.chats.get_mut(chat) {
            meta.handing_over = Some(turn_id.clone());
            let _ = meta.driver.send(Op::Send { turn_id: turn_id.clone(), message, unattended, client });
        }
        self.offer_steering(chat);
        true
    }

    /// True while a connection watches `chat` or its session: somebody could answer a question.
    /// A session an automation's run opened is never: its run has nobody to answer, whoever
    /// looks on (seed 003).
    pub fn is_attended(&self, chat: &str) -> bool {
        let session = self.chats.get(chat).map(|m| m.session.clone()).unwrap_or_default();
        let automated = self
            .ch
            .sessions
            .get(&session)
            .is_some_and(|s| matches!(s.origin, Some(ahp_types::state::SessionOrigin::Automation(_))));
        !automated && (self.ch.is_watched(chat) || self.ch.is_watched(&session))
    }
}

impl Host {
    /// Takes an action a backend said.
    pub(super) fn backend_emit(&self, incarnation: u64, params: EmitParams) {
        let mut core = self.lock();
        let live = core.chats.get(&params.chat).and_then(|m| m.live);
        if live != Some(incarnation) {
            tracing::debug!(chat = %params.chat, incarnation, ?live, "dropping an action from a worker that no longer holds this chat");
            return;
        }
        match params.channel {
            EmitChannel::Chat => core.backend_chat_action(&params.chat, params.action),
            EmitChannel::Session => {
                let Some(session) = core.chats.get(&params.chat).map(|m| m.session.clone()) else {
                    return;
                };
                if backend_may_say_on_session(&params.action) {
                    let action = match params.action {
                        StateAction::SessionMetaChanged(said) => {
                            let held = core.ch.sessions.get(&session).and_then(|s| s.meta.as_ref());
                            let meta = super::usage::merge_backend_meta(held, said.meta);
                            StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) })
                        }
                        other => other,
                    };
                    if core.mcp_report_applies(&session, &action) {
                        core.apply(&session, action, None, None);
                    }
                } else {
                    tracing::warn!(
                        session,
                        kind = action_type(&params.action),
                        "a backend said a session action that is the host's; dropped"
                    );
                }
            }
        }
    }
}

impl Core {
    fn backend_chat_action(&mut self, chat: &str, mut action: StateAction) {
        let Some(state) = self.ch.chats.get(chat) else {
            return;
        };
        let active = state.active_turn.as_ref().map(|t| t.id.clone());
        match (turn_of(&action), &active) {
            (Some(turn), Some(running)) if turn != running => {
                tracing::debug!(
                    chat,
                    turn,
                    running,
                    kind = action_type(&action),
                    "an action of another turn while one runs; dropped"
                );
                return;
            }
            (Some(turn), Some(_)) if matches!(action, StateAction::ChatTurnStarted(_)) => {
                tracing::debug!(chat, turn, "a start of the turn the chat holds already; not said again");
                return;
            }
            (Some(turn), None) if is_ending(&action) => {
                tracing::debug!(chat, turn, "an ending of a turn that is over; dropped");
                return;
            }
            (Some(turn), None) if matches!(action, StateAction::ChatTurnStarted(_)) => {
                let ended = self.chats.get(chat).is_some_and(|m| m.ended.iter().any(|t| t == turn));
                if ended {
                    tracing::debug!(chat, turn, "a start of a turn that is over; dropped");
                    return;
                }
            }
            _ => {}
        }
        if let StateAction::ChatToolCallReady(ready) = &mut action {
            if let Some(meta) = ready.meta.as_mut() {
                for key in HOST_ONLY_META {
                    meta.remove(key);
                }
                if meta.is_empty() {
                    ready.meta = None;
                }
            }
        }
        let started = match &action {
            StateAction::ChatTurnStarted(a) => Some(a.turn_id.clone()),
            _ => None,
        };
        if let Some(action) = self.hold_delta(chat, action) {
            self.apply(chat, action, None, None);
        }
        if let Some(turn_id) = started {
            if let Some(meta) = self.chats.get_mut(chat) {
                meta.turn_clock = Some((turn_id, Instant::now()));
                meta.client_started = false;
                meta.titled = true;
            }
        }
        self.offer_steering(chat);
    }

    /// A turn ended: remember it, then start what waits (a steering message the turn did not
    /// take, else the head of the queue).
    pub(super) fn turn_ended(&mut self, chat: &str, ended: String) {
        // A question a host tool asked in the turn is withdrawn with it.
        self.questions.forget_chat(chat);
        self.touch(chat);
        if let Some(meta) = self.chats.get_mut(chat) {
            remember(&mut meta.ended, ended.clone());
            meta.turn_clock = None;
            meta.client_started = false;
            meta.steering_offered = None;
            meta.parked = None;
        }
        self.subagent_ended(chat);
        // A chat whose backend must start again (its rules or its folder changed while the turn
        // ran) does so now, and the tools hear of the ending (a workspace change a session tool
        // asked for is carried out): both before anything queued runs.
        if self.restart_after_turn.remove(chat) {
            if let Some(meta) = self.chats.get(chat) {
                let _ = meta.driver.send(Op::Restart);
            }
        }
        let tools = self.tools.clone();
        tools.turn_ended(self, chat, &ended);
        let event = super::ports::Event::TurnEnded { chat: chat.to_owned(), turn_id: ended };
        self.workspaces.clone().event(self, event);
        self.start_next(chat);
        // After what waits began: a run whose chat goes on is not over yet.
        if let Some(automations) = self.automations.clone() {
            automations.turn_ended(self, chat);
        }
    }

    /// Starts the chat's backend session again so it takes up what changed (its rules, its
    /// session's folder): at once when no turn runs, else once the running turn ends.
    pub fn restart_between_turns(&mut self, chat: &str) {
        if self.running_turn(chat).is_some() {
            self.restart_after_turn.insert(chat.to_owned());
        } else if let Some(meta) = self.chats.get(chat) {
            let _ = meta.driver.send(Op::Restart);
        }
    }

    /// Starts the steering message or the head of the queue, when the chat is free.
    pub fn start_next(&mut self, chat: &str) {
        let Some(state) = self.ch.chats.get(chat) else {
            return;
        };
        if state.active_turn.is_some() {
            return;
        }
        let next =
            state.steering_message.clone().or_else(|| state.queued_messages.as_ref().and_then(|q| q.first().cloned()));
        if let Some(pending) = next {
            let _ = self.start_turn(chat, host_turn(pending.message, Some(pending.id)), None);
        }
    }

    /// Hands the chat's steering message to the running turn, unless it was handed already.
    pub(super) fn offer_steering(&mut self, chat: &str) {
        if self.runs_command(chat) {
            // No backend turn to steer: it runs as the next turn once the command ends.
            return;
        }
        let Some(state) = self.ch.chats.get(chat) else {
            return;
        };
        let (Some(turn), Some(steering)) = (state.active_turn.as_ref(), state.steering_message.as_ref()) else {
            return;
        };
        let Some(meta) = self.chats.get_mut(chat) else {
            return;
        };
        if meta.steering_offered.as_deref() == Some(steering.id.as_str()) {
            return;
        }
        meta.steering_offered = Some(steering.id.clone());
        let op = Op::Steer { turn_id: turn.id.clone(), id: steering.id.clone(), message: steering.message.clone() };
        let _ = meta.driver.send(op);
    }

    /// Ends the running turn `turn_id` in error, when the backend cannot (it died, it refused
    /// the prompt). Does nothing when that turn is not the one running.
    pub(super) fn fail_turn(&mut self, chat: &str, turn_id: &str, error_type: &str, message: String) {
        self.fail_turn_with(chat, turn_id, error_type, message, false);
    }

    /// Ends the running turn `turn_id` in error, saying whether a client may resume it.
    pub(super) fn fail_turn_with(
        &mut self,
        chat: &str,
        turn_id: &str,
        error_type: &str,
        message: String,
        resumable: bool,
    ) {
        let running = self.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == turn_id);
        if !running {
            return;
        }
        let duration = self
            .chats
            .get(chat)
            .and_then(|m| m.turn_clock.as_ref())
            .filter(|(t, _)| t == turn_id)
            .map(|(_, since)| millis_since(*since))
            .unwrap_or(0);
        let action = StateAction::ChatError(ChatErrorAction {
            turn_id: turn_id.to_owned(),
            duration,
            part: ErrorResponsePart {
                error: ErrorInfo { error_type: error_type.to_owned(), message, stack: None, meta: None },
                resumable: resumable.then_some(true),
            },
            meta: None,
        });
        self.apply(chat, action, None, None);
    }
}

impl Host {
    /// The backend's answer to a steering offer.
    pub(super) fn steering_answered(&self, chat: &str, id: &str, taken: bool) {
        let mut core = self.lock();
        let current = core.ch.chats.get(chat).and_then(|c| c.steering_message.as_ref().map(|s| s.id.clone()));
        if current.as_deref() != Some(id) {
            return;
        }
        if taken {
            let action = StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction {
                kind: PendingMessageKind::Steering,
                id: id.to_owned(),
            });
            core.apply(chat, action, None, None);
        } else if let Some(meta) = core.chats.get_mut(chat) {
            // Not yet: hand it again on the turn's next action, or run it next once it ended.
            meta.steering_offered = None;
            core.start_next(chat);
        }
    }

    /// A steering message that cannot be steered in (its attachments could not be read) waits
    /// for the running turn to end and then runs as a turn of its own, which says why it fails;
    /// it is not handed to this turn again.
    pub(super) fn steering_kept_back(&self, chat: &str, id: &str) {
        let mut core = self.lock();
        let current = core.ch.chats.get(chat).and_then(|c| c.steering_message.as_ref().map(|s| s.id.clone()));
        if current.as_deref() == Some(id) {
            core.start_next(chat);
        }
    }

    /// A worker died: every chat it held loses its backend session, and each running turn ends
    /// at once with the reason.
    pub(super) fn worker_exited(&self, provider: &str, incarnation: u64, reason: &str) {
        let mut core = self.lock();
        let chats: Vec<String> =
            core.chats.iter().filter(|(_, m)| m.live == Some(incarnation)).map(|(c, _)| c.clone()).collect();
        for chat in chats {
            if let Some(meta) = core.chats.get_mut(&chat) {
                meta.live = None;
            }
            let running = core.ch.chats.get(&chat).and_then(|c| c.active_turn.as_ref().map(|t| t.id.clone()));
            let handing_over = core.chats.get(&chat).and_then(|m| m.handing_over.clone());
            // A prompt the worker had not taken yet is the driver's to hand to the next worker.
            if let Some(turn_id) = running.filter(|t| Some(t) != handing_over.as_ref()) {
                // A backend that resumes turns takes this one up again when a client asks.
                let subagent = core.ch.chats.get(&chat).and_then(super::edits::subagent_of).is_some();
                let resumable = core.abilities(&chat).resume_turn && !subagent;
                let message = if resumable {
                    format!(
                        "The {provider} worker {reason}. What the turn said so far is kept; resume the turn to go on."
                    )
                } else {
                    format!("The {provider} worker {reason}. The turn was lost; send your message again to continue.")
                };
                core.fail_turn_with(&chat, &turn_id, "workerExited", message, resumable);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_the_first_line_cut_short() {
        assert_eq!(title_from("\n  Fix the build  \nand more"), "Fix the build");
        let long = "a".repeat(100);
        let title = title_from(&long);
        assert_eq!(title.chars().count(), 60);
        assert!(title.ends_with('…'));
    }
}

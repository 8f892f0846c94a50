//! The one write path: [`Core::apply`] is how every change reaches a channel — a client's action,
//! a backend's, the host's own upkeep, a tool's — and the only caller of
//! [`Channels::commit`](super::core::Channels::commit). It commits the action (folded through the
//! official reducer, numbered, kept for replay, said to every subscriber) and then does what the
//! channel's kind needs, so no caller decides that for itself:
//!
//! - a session: its record is written and its root summary told, when changed;
//! - annotations: their state is written;
//! - a terminal: the root's list of terminals follows its title, claim and lifecycle;
//! - a chat: the streamed text held back for it goes out first (`deltas.rs`), a turn's ending is
//!   written before it is committed (told as failed when the store cannot keep it), its record and turns are written as `persist.rs` says, the session's `inputNeeded`
//!   list and its entry for the chat follow the chat's state, and a turn that ended is followed by
//!   what waits behind it (the turn engine, `turns.rs`);
//! - a changeset: nothing more;
//! - the root: nothing more; what only some may read is said to them alone (`apply_for`);
//! - a channel another host runs, mirrored here (`mirrors.rs`): nothing more, that host keeps it.
//!
//! The workspaces feature hears of what may change what it shows: a completed tool call (a file
//! may have been written) and a session archived or brought back.

use ahp_types::actions::{ActionOrigin, StateAction};

use super::core::{channel_kind, ChannelKind, Committed, ConnId};
use super::ports::Event;
use super::Core;

impl Core {
    /// Applies `action` to `channel` and keeps everything that depends on it. `origin` is the
    /// client whose action it is; `extra` is a connection that is told even when it does not
    /// watch the channel (the client that dispatched it).
    pub fn apply(
        &mut self,
        channel: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        extra: Option<ConnId>,
    ) -> Committed {
        // (No hashing on the hot path of a host that mirrors nothing.)
        if !self.mirrored.is_empty() && self.mirrored.contains(channel) {
            // Another host keeps its records and runs its turns (`mirrors.rs`).
            return self.ch.commit(channel, action, origin, extra);
        }
        match channel_kind(channel) {
            Some(ChannelKind::Chat) => self.apply_to_chat(channel, action, origin, extra),
            Some(ChannelKind::Terminal) => {
                let listing = super::terminal_channels::changes_listing(&action);
                let committed = self.ch.commit(channel, action, origin, extra);
                if listing && matches!(committed, Committed::Sent { .. }) {
                    self.terminal_listing_changed(channel);
                }
                committed
            }
            kind => {
                let archived = match &action {
                    StateAction::SessionIsArchivedChanged(a) => Some(a.is_archived),
                    _ => None,
                };
                let committed = self.ch.commit(channel, action, origin, extra);
                if matches!(committed, Committed::Sent { .. }) {
                    match kind {
                        Some(ChannelKind::Session) => {
                            self.persist_session(channel);
                            self.tell_summary(channel);
                            if let Some(archived) = archived {
                                let event = Event::Archived { session: channel.to_owned(), archived };
                                self.workspaces.clone().event(self, event);
                            }
                        }
                        Some(ChannelKind::Annotations) => self.persist_annotations(channel),
                        _ => {}
                    }
                }
                committed
            }
        }
    }

    /// Applies `action` to the root and says it to `readers` alone, what only some may read
    /// (`account.rs`); the root needs nothing more.
    pub fn apply_for(&mut self, action: StateAction, readers: &[ConnId]) {
        self.ch.commit_to(ahp_types::ROOT_RESOURCE_URI, action, readers);
    }

    /// A chat action: written as it needs, the session's view of the chat kept in step, and a
    /// turn that ended followed by what waits behind it.
    fn apply_to_chat(
        &mut self,
        chat: &str,
        action: StateAction,
        origin: Option<ActionOrigin>,
        extra: Option<ConnId>,
    ) -> Committed {
        // Streamed text the backend said before this goes out first (`deltas.rs`).
        self.flush_delta(chat);
        let before = self.running_turn(chat);
        // Durable at once: a turn that starts (or runs again), and one that parks a question a
        // person must still find waiting after a crash.
        let started = matches!(
            &action,
            StateAction::ChatTurnStarted(_) | StateAction::ChatTurnResume(_) | StateAction::ChatInputRequested(_)
        ) || matches!(&action, StateAction::ChatToolCallReady(r) if r.confirmed.is_none());
        let tool_completed = matches!(action, StateAction::ChatToolCallComplete(_));
        let changes_record = super::persist::changes_chat_record(&action);
        // A turn's ending is written before anyone is told of it; one the store cannot keep is
        // told as failed instead (`persist.rs`).
        let (action, ending_written) = self.keep_ending(chat, action, origin.is_some());
        let committed = self.ch.commit(chat, action, origin, extra);
        if !matches!(committed, Committed::Sent { .. }) {
            return committed;
        }
        let ended = before.filter(|b| self.running_turn(chat).as_ref() != Some(b));
        self.persist_after(chat, started, changes_record, ended.is_some(), ending_written);
        self.sync_input_needed(chat);
        self.sync_chat(chat);
        if tool_completed {
            self.workspaces.clone().event(self, Event::ToolCompleted { chat: chat.to_owned() });
        }
        if let Some(ended) = ended {
            self.turn_ended(chat, ended);
        }
        committed
    }

    /// The id of the turn running in `chat`, if one runs.
    pub fn running_turn(&self, chat: &str) -> Option<String> {
        self.ch.chats.get(chat)?.active_turn.as_ref().map(|t| t.id.clone())
    }
}

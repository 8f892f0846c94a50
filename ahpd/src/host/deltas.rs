//! Coalesced deltas: a backend's consecutive `chat/delta` (or `chat/reasoning`) to the same part
//! of a chat are held for `deltaWindowMs` and merged into one action before it is committed, so a
//! model streaming a token at a time costs one commit, one persisted checkpoint and one envelope
//! per subscriber per window rather than per token. What a client folds is the same text.
//!
//! A held delta goes out before anything else reaches its chat ([`Core::apply`] flushes it first),
//! before a client is given the chat's snapshot, and when its window ends on the host's clock
//! (the manual clock in tests), so order and snapshots stay exact. A window of 0 holds nothing.

use std::collections::HashMap;
use std::sync::Arc;

use ahp_types::actions::StateAction;
use tokio::sync::Notify;

use super::{Core, Host};
use crate::clock::Millis;

/// The deltas each chat holds back, and what wakes the task that sends them when due.
#[derive(Debug, Default)]
pub struct Coalescer {
    held: HashMap<String, Held>,
    wake: Arc<Notify>,
}

/// One chat's merged delta and when its window ends.
#[derive(Debug)]
struct Held {
    action: StateAction,
    due: Millis,
}

impl Coalescer {
    /// When the first held delta is due, if any is held.
    fn earliest_due(&self) -> Option<Millis> {
        self.held.values().map(|h| h.due).min()
    }

    /// The chats whose held delta is due at `now`.
    fn due(&self, now: Millis) -> Vec<String> {
        self.held.iter().filter(|(_, h)| h.due <= now).map(|(chat, _)| chat.clone()).collect()
    }
}

/// True for the streamed-text actions that may be merged.
fn is_streamed_text(action: &StateAction) -> bool {
    matches!(action, StateAction::ChatDelta(_) | StateAction::ChatReasoning(_))
}

/// Appends `next` to `held` when both stream text into the same part of the same turn; otherwise
/// hands `next` back. The merged action keeps the first delta's `_meta` (one part is one agent's,
/// so what attributes it does not change within it; an emit stamp stays the earliest).
fn merge(held: &mut StateAction, next: StateAction) -> Option<StateAction> {
    match (held, next) {
        (StateAction::ChatDelta(h), StateAction::ChatDelta(n)) if h.turn_id == n.turn_id && h.part_id == n.part_id => {
            h.content.push_str(&n.content);
            None
        }
        (StateAction::ChatReasoning(h), StateAction::ChatReasoning(n))
            if h.turn_id == n.turn_id && h.part_id == n.part_id =>
        {
            h.content.push_str(&n.content);
            None
        }
        (_, next) => Some(next),
    }
}

impl Core {
    /// Holds a backend's streamed text for the window, merged with what the chat holds already;
    /// answers the action when it must go out now instead (not streamed text, or no window).
    pub(super) fn hold_delta(&mut self, chat: &str, action: StateAction) -> Option<StateAction> {
        let window = self.settings.delta_window_ms;
        if window == 0 || !is_streamed_text(&action) {
            return Some(action);
        }
        let action = match self.deltas.held.get_mut(chat) {
            // Merged: nothing goes out now.
            Some(held) => merge(&mut held.action, action)?,
            None => action,
        };
        // Another part (or the first delta): what was held goes out before it is held.
        self.flush_delta(chat);
        let due = self.clock.now().saturating_add(window);
        self.deltas.held.insert(chat.to_owned(), Held { action, due });
        self.deltas.wake.notify_one();
        None
    }

    /// Commits the delta `chat` holds back, if it holds one.
    pub fn flush_delta(&mut self, chat: &str) {
        if self.deltas.held.is_empty() {
            return;
        }
        if let Some(held) = self.deltas.held.remove(chat) {
            self.apply(chat, held.action, None, None);
        }
    }

    /// Commits every held delta whose window ended.
    fn flush_due_deltas(&mut self) {
        for chat in self.deltas.due(self.clock.now()) {
            self.flush_delta(&chat);
        }
    }
}

impl Host {
    /// Sends held deltas as their windows end on the host's clock, until the daemon stops.
    pub fn run_delta_flushes(&self) {
        let host = self.clone();
        self.spawn("coalesced delta flushes", async move {
            let (clock, wake) = {
                let core = host.lock();
                (core.clock.clone(), core.deltas.wake.clone())
            };
            loop {
                let due = host.lock().deltas.earliest_due();
                match due {
                    None => wake.notified().await,
                    Some(due) => tokio::select! {
                        () = clock.sleep_until(due) => host.lock().flush_due_deltas(),
                        () = wake.notified() => {}
                    },
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{ChatDeltaAction, ChatReasoningAction};

    fn delta(part: &str, text: &str) -> StateAction {
        StateAction::ChatDelta(ChatDeltaAction {
            turn_id: "t".into(),
            part_id: part.into(),
            content: text.into(),
            meta: None,
        })
    }

    fn reasoning(part: &str, text: &str) -> StateAction {
        StateAction::ChatReasoning(ChatReasoningAction {
            turn_id: "t".into(),
            part_id: part.into(),
            content: text.into(),
            meta: None,
        })
    }

    #[test]
    fn deltas_to_one_part_merge_in_order() {
        let mut held = delta("p", "Hel");
        assert!(merge(&mut held, delta("p", "lo")).is_none());
        assert!(merge(&mut held, delta("p", " world")).is_none());
        match held {
            StateAction::ChatDelta(d) => assert_eq!(d.content, "Hello world"),
            other => panic!("{other:?}"),
        }
        let mut thinking = reasoning("r", "a");
        assert!(merge(&mut thinking, reasoning("r", "b")).is_none());
        assert!(matches!(thinking, StateAction::ChatReasoning(ref r) if r.content == "ab"));
    }

    #[test]
    fn another_part_or_kind_is_not_merged() {
        let mut held = delta("p", "a");
        assert!(merge(&mut held, delta("q", "b")).is_some());
        assert!(merge(&mut held, reasoning("p", "b")).is_some());
        let mut thinking = reasoning("p", "a");
        assert!(merge(&mut thinking, delta("p", "b")).is_some());
    }
}

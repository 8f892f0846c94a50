//! Backend processes on a budget (`maxBackendProcesses`): before a chat's backend session starts
//! (a Claude or pi process of its own), the host counts the backend sessions it holds open; at the
//! cap, the chat used longest ago whose conversation resumes has its backend session closed first,
//! as idle unloading closes it, and takes it up again on its next message. A chat that runs a
//! turn, waits on a call or cannot resume is never closed for it: when every open one is such, the
//! new one starts over the cap and the log says so.

use std::collections::{HashMap, HashSet};

use tokio_util::sync::CancellationToken;

use super::driver::Op;
use super::{Core, Host};

/// What the budget keeps: when each chat was last used, and the chats between the budget's
/// check and their start (counted as open), and those being closed for it.
#[derive(Debug, Default)]
pub struct Budget {
    used: HashMap<String, u64>,
    uses: u64,
    starting: HashSet<String>,
    closing: HashSet<String>,
}

/// What a chat about to start its backend session must do first.
pub enum Room {
    /// Start now.
    Go,
    /// Wait until this is cancelled (another chat's backend session closed), then ask again.
    WaitFor(CancellationToken),
}

impl Core {
    /// Notes that `chat` was used now (a turn started or ended in it).
    pub(super) fn touch(&mut self, chat: &str) {
        self.budget.uses += 1;
        let now = self.budget.uses;
        self.budget.used.insert(chat.to_owned(), now);
    }

    /// Backend sessions held open now (or starting).
    pub fn open_backend_sessions(&self) -> usize {
        self.chats.iter().filter(|(chat, meta)| meta.live.is_some() || self.budget.starting.contains(*chat)).count()
    }

    /// Makes room for `chat`'s backend session under the cap.
    pub(super) fn make_room(&mut self, chat: &str, cap: usize) -> Room {
        let mine = self.chats.get(chat).is_some_and(|m| m.live.is_some()) || self.budget.starting.contains(chat);
        if cap == 0 || mine || self.open_backend_sessions() < cap {
            self.budget.starting.insert(chat.to_owned());
            return Room::Go;
        }
        let victim = self
            .chats
            .iter()
            .filter(|(other, meta)| {
                other.as_str() != chat
                    && meta.live.is_some()
                    && !self.budget.closing.contains(*other)
                    && self.backend_kept_by(other).is_none()
            })
            .min_by_key(|(other, _)| self.budget.used.get(*other).copied().unwrap_or(0))
            .map(|(other, _)| other.clone());
        let Some(victim) = victim else {
            if self.budget.closing.is_empty() {
                tracing::info!(
                    chat,
                    cap,
                    "every open backend session is busy; this one starts over maxBackendProcesses"
                );
                self.budget.starting.insert(chat.to_owned());
                return Room::Go;
            }
            // One is closing already: its close makes the room.
            let closing = self.budget.closing.iter().next().cloned().unwrap_or_default();
            return Room::WaitFor(self.closing_token(&closing));
        };
        tracing::debug!(chat, closed = victim, cap, "closing the backend session used longest ago");
        self.budget.closing.insert(victim.clone());
        Room::WaitFor(self.closing_token(&victim))
    }

    /// A token cancelled once `chat`'s backend session closed: the close is asked of its driver.
    fn closing_token(&mut self, chat: &str) -> CancellationToken {
        let done = CancellationToken::new();
        match self.chats.get(chat) {
            Some(meta) if meta.driver.send(Op::Park(done.clone())).is_ok() => {}
            _ => done.cancel(),
        }
        done
    }

    /// `chat` left memory: nothing of it is counted.
    pub(super) fn budget_forget(&mut self, chat: &str) {
        self.budget.used.remove(chat);
        self.budget_settled(chat);
    }

    /// `chat`'s backend session is closed (or its start is settled): it counts no more as
    /// closing or starting.
    pub(super) fn budget_settled(&mut self, chat: &str) {
        self.budget.starting.remove(chat);
        self.budget.closing.remove(chat);
    }
}

impl Host {
    /// Waits, before `chat`'s backend session starts, until it fits under `maxBackendProcesses`.
    pub(super) async fn wait_for_room(&self, chat: &str) {
        let cap = self.config().max_backend_processes;
        // A few rounds at most: a chat that never frees its room must not stop this one.
        for _ in 0..4 {
            let room = self.lock().make_room(chat, cap);
            match room {
                Room::Go => return,
                Room::WaitFor(closed) => {
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), closed.cancelled()).await;
                }
            }
        }
        self.lock().budget.starting.insert(chat.to_owned());
    }

    /// `chat`'s backend session was closed for the budget.
    pub(super) fn parked(&self, chat: &str) {
        let mut core = self.lock();
        if let Some(meta) = core.chats.get_mut(chat) {
            meta.live = None;
        }
        core.budget_settled(chat);
    }
}

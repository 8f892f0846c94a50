//! Unloading sessions nobody uses: a session no connection watches and nothing runs in leaves
//! memory once it has been idle for `sessionIdleUnloadMs` (its chats' backend sessions are closed
//! too). The store holds all of it, so its next use loads it back, as after a restart. A chat whose
//! backend holds its conversation open and cannot resume it once closed (`features.resume` false
//! and the conversation not `resumable`: an ACP agent without `session/load`, a worker that does
//! not say) keeps its session loaded.

use std::collections::HashMap;
use std::time::Duration;

use super::catalog::Farewell;
use super::{Core, Host};
use crate::clock::Millis;
use ahp_types::state::SessionLifecycle;

/// How often the sweep runs at most and at least, whatever the idle time.
const SWEEP_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(30));

impl Core {
    /// What keeps `session` in memory now (a word for the log), or `None` when it may go.
    pub fn kept_loaded_by(&self, session: &str) -> Option<&'static str> {
        let state = self.ch.sessions.get(session)?;
        if !self.unkept.is_empty() {
            // Memory holds what the store could not keep: nothing leaves it until it is written.
            return Some("records the store could not keep yet");
        }
        if state.lifecycle == SessionLifecycle::Creating {
            return Some("its creation");
        }
        if !state.active_clients.is_empty() {
            return Some("an active client");
        }
        let annotations = self.sessions.get(session).map(|m| m.annotations.as_str()).unwrap_or_default();
        if self.ch.is_watched(session) || self.ch.is_watched(annotations) {
            return Some("a subscriber");
        }
        if self.grace.keys().any(|(s, _)| s == session) {
            return Some("a client's grace period");
        }
        if let Some(why) = self.terminal_keeps(session) {
            return Some(why);
        }
        self.chats_of(session).iter().find_map(|chat| self.chat_kept_by(chat))
    }

    fn chat_kept_by(&self, chat: &str) -> Option<&'static str> {
        if self.ch.is_watched(chat) {
            return Some("a subscriber");
        }
        self.backend_kept_by(chat)
    }

    /// What keeps `chat`'s backend session open now (a word for the log), or `None` when it may
    /// be closed and taken up again on the chat's next message (`budget.rs` closes such ones).
    pub(super) fn backend_kept_by(&self, chat: &str) -> Option<&'static str> {
        let state = self.ch.chats.get(chat)?;
        if state.active_turn.is_some() || self.running_dirty.contains(chat) {
            return Some("a running turn");
        }
        if state.steering_message.is_some() || state.queued_messages.as_ref().is_some_and(|q| !q.is_empty()) {
            return Some("a message waiting for its turn");
        }
        let meta = self.chats.get(chat)?;
        if !meta.client_calls.is_empty() || meta.steering_offered.is_some() {
            return Some("a call in flight");
        }
        // A first start still on its way: forgetting it would lose that the backend has the
        // conversation now.
        if meta.live.is_some() && !meta.started_in_backend {
            return Some("its backend starting");
        }
        // Closing a conversation its backend holds open and cannot take up again would lose it:
        // one the agent resumes (all of its conversations, or this one, as an ACP agent that
        // declared `loadSession` says) may go.
        let provider = meta.harness.as_ref().map_or_else(
            || self.sessions.get(&meta.session).map(|s| s.provider.as_str()).unwrap_or_default(),
            |h| h.provider.as_str(),
        );
        let resumes = meta.resumable
            || self.agent(provider).and_then(|a| a.descriptor.as_ref()).is_some_and(|d| d.features.resume);
        if meta.live.is_some() && meta.started_in_backend && !resumes {
            return Some("a backend that cannot resume it");
        }
        // (A workspace change a session tool asked for waits for a turn that runs, and keeps it
        // loaded as such.)
        if self.restart_after_turn.contains(chat) {
            return Some("a change waiting for its turn");
        }
        None
    }

    /// Sessions in memory now.
    pub fn loaded_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// One sweep: each session idle now is noted with the time it was first seen idle; one idle
    /// for `after` is unloaded. Answers how many went.
    fn unload_idle(&mut self, idle_since: &mut HashMap<String, Millis>, after: Duration) -> usize {
        let now = self.clock.now();
        let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        idle_since.retain(|session, _| self.sessions.contains_key(session));
        let loaded: Vec<String> = self.sessions.keys().cloned().collect();
        let mut unloaded = 0;
        for session in loaded {
            if self.kept_loaded_by(&session).is_some() {
                idle_since.remove(&session);
                continue;
            }
            let since = *idle_since.entry(session.clone()).or_insert(now);
            if now.saturating_sub(since) >= after_ms {
                // Nothing is written: the store has it all already.
                self.remove_session_state(&session, Farewell::Unload);
                idle_since.remove(&session);
                unloaded += 1;
            }
        }
        self.retiring.retain(|_, closed| !closed.is_cancelled());
        unloaded
    }
}

impl Host {
    /// Sweeps for idle sessions every half of `sessionIdleUnloadMs` (within 100 ms and 30 s) on
    /// the host's clock, until the daemon stops; does nothing when sessions stay loaded for ever.
    pub fn run_unloads(&self) {
        let Some(after) = self.config().idle_unload else { return };
        let period = (after / 2).clamp(SWEEP_BOUNDS.0, SWEEP_BOUNDS.1);
        let host = self.clone();
        self.spawn("idle session unloads", async move {
            let clock = host.lock().clock.clone();
            let mut idle_since = HashMap::new();
            loop {
                clock.sleep(period).await;
                let (unloaded, left) = {
                    let mut core = host.lock();
                    (core.unload_idle(&mut idle_since, after), core.loaded_sessions())
                };
                if unloaded > 0 {
                    // What the sessions held is free now, but the allocator keeps it unless asked.
                    let returned = crate::memory::release_free_pages();
                    tracing::debug!(unloaded, left, returned, "idle sessions unloaded from memory");
                }
            }
        });
    }
}

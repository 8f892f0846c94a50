//! The session tools' bounds (seed 000 "Limits"): a spawn depth of 3, and 50 sessions, 50 chats and
//! 100 messages per session tree (or per session, with `agentOrchestrationLimitsScope: session`) in
//! a sliding hour, refused in the reference host's words with the seconds until the oldest action
//! leaves the window.
//!
//! The counts live in memory, as the reference host's do, so a restart begins them again. A count
//! is taken only once the thing it counts happened ([`Limits::spend`] after the act, under the same
//! lock as the [`Limits::check`] before it), so a call refused for any other reason costs nothing.

use std::collections::{HashMap, VecDeque};

use super::Refusal;
use crate::clock::Millis;

/// How many create links may sit above a session that makes another.
pub const MAX_SPAWN_DEPTH: u32 = 3;
/// Sessions `create_session` (independent) may make per tree in the window.
pub const MAX_SESSIONS: usize = 50;
/// Chats `create_chat` or `create_session` (currentSession) may make per tree in the window.
pub const MAX_CHATS: usize = 50;
/// Messages `send_message` may send per tree in the window.
pub const MAX_MESSAGES: usize = 100;
/// The sliding window: one hour.
pub const WINDOW_MS: Millis = 60 * 60 * 1000;

/// What a count counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Sessions made by `create_session` with `independent`.
    Sessions,
    /// Chats made by `create_chat`, or by `create_session` with `currentSession`.
    Chats,
    /// Messages sent by `send_message`.
    Messages,
}

impl Budget {
    /// The most the window holds.
    pub fn max(self) -> usize {
        match self {
            Budget::Sessions => MAX_SESSIONS,
            Budget::Chats => MAX_CHATS,
            Budget::Messages => MAX_MESSAGES,
        }
    }

    fn refused_act(self) -> &'static str {
        match self {
            Budget::Sessions => "create more sessions",
            Budget::Chats => "create more chats",
            Budget::Messages => "send more messages",
        }
    }
}

/// What a count is kept per.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A session nothing started, and everything the create tool grew from it.
    Tree,
    /// Each session alone, as the reference host keeps them.
    Session,
}

impl Scope {
    fn noun(self) -> &'static str {
        match self {
            Scope::Tree => "session tree",
            Scope::Session => "session",
        }
    }
}

/// The refusal for a session that is `depth` links down and tried to make another.
pub fn depth_refusal(depth: u32) -> String {
    format!(
        "Refusing to create a session: recursion limit reached (max spawn depth {MAX_SPAWN_DEPTH}). This session was itself created {depth} level(s) deep."
    )
}

/// The counts, in memory.
#[derive(Debug, Default)]
pub struct Limits {
    /// When each counted action happened, oldest first, by (key, budget).
    spent: HashMap<(String, Budget), VecDeque<Millis>>,
    /// The tree each session a tool made belongs to, so a tree keeps its budget even after the
    /// session at its top is deleted.
    roots: HashMap<String, String>,
}

impl Limits {
    /// Refuses when `key` has spent its whole `budget` in the hour before `now`, saying how many
    /// seconds until the oldest of those actions leaves the window.
    pub fn check(&mut self, key: &str, budget: Budget, scope: Scope, now: Millis) -> Result<(), Refusal> {
        let Some(times) = self.window(key, budget, now) else { return Ok(()) };
        if times.len() < budget.max() {
            return Ok(());
        }
        let oldest = times.front().copied().unwrap_or(now);
        let left_ms = (oldest + WINDOW_MS).saturating_sub(now);
        let seconds = left_ms.div_ceil(1000).max(1);
        let (noun, max) = (scope.noun(), budget.max());
        Err(format!(
            "Refusing to {act}: this {noun} already used {used} of {max} allowed in the last 60 minutes. The limit applies to each {noun} separately and frees up as older actions leave that window. Retry after {seconds} seconds, or turn off agent orchestration limits in settings.",
            act = budget.refused_act(),
            used = times.len(),
        ).into())
    }

    /// Counts one action against `key`, once it happened.
    pub fn spend(&mut self, key: &str, budget: Budget, now: Millis) {
        self.spent.entry((key.to_owned(), budget)).or_default().push_back(now);
    }

    /// Gives back the newest action counted against `key` (one counted before it happened, on
    /// another host, that did not happen after all).
    pub fn refund(&mut self, key: &str, budget: Budget) {
        if let Some(times) = self.spent.get_mut(&(key.to_owned(), budget)) {
            times.pop_back();
        }
    }

    /// How many actions `key` spent in the hour before `now`.
    pub fn used(&mut self, key: &str, budget: Budget, now: Millis) -> usize {
        self.window(key, budget, now).map_or(0, |t| t.len())
    }

    /// The actions still inside the window, after dropping the ones that left it.
    fn window(&mut self, key: &str, budget: Budget, now: Millis) -> Option<&VecDeque<Millis>> {
        let times = self.spent.get_mut(&(key.to_owned(), budget))?;
        while times.front().is_some_and(|t| t + WINDOW_MS <= now) {
            times.pop_front();
        }
        Some(times)
    }

    /// Remembers the tree a session a tool made belongs to.
    pub fn note_root(&mut self, session: &str, root: &str) {
        self.roots.insert(session.to_owned(), root.to_owned());
    }

    /// The tree a session belongs to, when a tool made it in this process.
    pub fn known_root(&self, session: &str) -> Option<&str> {
        self.roots.get(session).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_budget_is_refused_with_the_seconds_until_the_oldest_leaves() {
        let mut limits = Limits::default();
        let start = 1_000_000;
        for n in 0..MAX_SESSIONS {
            assert!(limits.check("t", Budget::Sessions, Scope::Tree, start).is_ok(), "{n}");
            limits.spend("t", Budget::Sessions, start + n as u64);
        }
        let refused = limits.check("t", Budget::Sessions, Scope::Tree, start + 1_000).expect_err("full");
        assert_eq!(
            refused,
            "Refusing to create more sessions: this session tree already used 50 of 50 allowed in the last 60 minutes. The limit applies to each session tree separately and frees up as older actions leave that window. Retry after 3599 seconds, or turn off agent orchestration limits in settings."
        );
        assert!(limits.check("other", Budget::Sessions, Scope::Tree, start).is_ok(), "another tree is unaffected");
        assert!(limits.check("t", Budget::Chats, Scope::Tree, start).is_ok(), "another budget is unaffected");
        // The oldest leaves the window an hour after it happened.
        assert!(limits.check("t", Budget::Sessions, Scope::Tree, start + WINDOW_MS - 1).is_err());
        assert!(limits.check("t", Budget::Sessions, Scope::Tree, start + WINDOW_MS).is_ok());
        assert_eq!(limits.used("t", Budget::Sessions, start + WINDOW_MS), MAX_SESSIONS - 1);
    }

    #[test]
    fn the_session_scope_says_the_session_and_messages_say_100() {
        let mut limits = Limits::default();
        for _ in 0..MAX_MESSAGES {
            limits.spend("s", Budget::Messages, 0);
        }
        let refused = limits.check("s", Budget::Messages, Scope::Session, 500).expect_err("full");
        assert!(
            refused.starts_with("Refusing to send more messages: this session already used 100 of 100 allowed in the last 60 minutes. The limit applies to each session separately"),
            "{refused}"
        );
        assert!(refused.contains("Retry after 3600 seconds"), "{refused}");
    }

    #[test]
    fn a_refund_gives_back_the_newest_count() {
        let mut limits = Limits::default();
        limits.spend("t", Budget::Sessions, 1);
        limits.spend("t", Budget::Sessions, 2);
        limits.refund("t", Budget::Sessions);
        limits.refund("other", Budget::Sessions);
        assert_eq!(limits.used("t", Budget::Sessions, 3), 1);
        assert_eq!(limits.used("other", Budget::Sessions, 3), 0);
    }

    #[test]
    fn the_depth_refusal_names_the_refused_sessions_depth() {
        assert_eq!(
            depth_refusal(3),
            "Refusing to create a session: recursion limit reached (max spawn depth 3). This session was itself created 3 level(s) deep."
        );
    }
}

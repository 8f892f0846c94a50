//! What a folder's watch is doing, and the sentences that say why it is not making progress: in
//! `ahpd status`, on the session's `_meta` (the window's header) and, once per stop, in the chat.
//!
//! A token GitHub refuses (`401`) or a repository it does not show the token (`404`) stops the
//! watch asking GitHub until what it depends on changes (the token, the folder's `origin`), or
//! Agent Merge is turned on again: asking again with the same token would only be refused again.
//! A spent rate limit is waited out until GitHub says it resets; anything else backs off.

use crate::clock::{iso, Millis};

use super::github::ApiError;

/// What a watch is doing, as the tool and `ahpd status` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Monitoring {
    /// No open pull request for the branch yet.
    WaitingForPullRequest,
    /// Following this pull request.
    PullRequest(u64),
    /// The last try failed; trying again at `retry_at`.
    BackingOff {
        /// What failed, in GitHub's words or the transport's.
        reason: String,
        /// When it tries next (the host's clock).
        retry_at: Millis,
    },
    /// GitHub's rate limit is spent; asking again once it resets at `retry_at`.
    WaitingForRateLimit {
        /// What GitHub said.
        reason: String,
        /// When the limit resets (the host's clock).
        retry_at: Millis,
    },
    /// GitHub refused the token (`401`): nothing is asked until it changes.
    StoppedForBadCredentials(String),
    /// GitHub shows the token no such repository (`404`): nothing is asked until the token or the
    /// remote changes.
    StoppedForMissingRepository(String),
    /// Stopped after a repair turn whose reply landed in the person's pending review; turning
    /// Agent Merge on again (or a restart) watches again.
    StoppedForPendingReview,
}

impl Monitoring {
    /// The pull request it follows.
    pub fn pull(&self) -> Option<u64> {
        match self {
            Self::PullRequest(number) => Some(*number),
            _ => None,
        }
    }

    /// The word for it.
    pub fn word(&self) -> &'static str {
        match self {
            Self::WaitingForPullRequest => "waitingForPullRequest",
            Self::PullRequest(_) => "monitoringPullRequest",
            Self::BackingOff { .. } => "backingOff",
            Self::WaitingForRateLimit { .. } => "waitingForRateLimit",
            Self::StoppedForBadCredentials(_) => "stoppedForBadCredentials",
            Self::StoppedForMissingRepository(_) => "stoppedForMissingRepository",
            Self::StoppedForPendingReview => "stoppedForPendingReview",
        }
    }

    /// Why it is not following the pull request, in a sentence.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::BackingOff { reason, .. }
            | Self::WaitingForRateLimit { reason, .. }
            | Self::StoppedForBadCredentials(reason)
            | Self::StoppedForMissingRepository(reason) => Some(reason),
            _ => None,
        }
    }

    /// When it asks GitHub next, when it waits for a time (RFC 3339).
    pub fn retry_at(&self) -> Option<String> {
        match self {
            Self::BackingOff { retry_at, .. } | Self::WaitingForRateLimit { retry_at, .. } => Some(iso(*retry_at)),
            _ => None,
        }
    }

    /// True while it asks GitHub nothing until a setting changes.
    pub fn parked(&self) -> bool {
        matches!(self, Self::StoppedForBadCredentials(_) | Self::StoppedForMissingRepository(_))
    }

    /// The stop a refusal calls for: a refused token, a repository GitHub does not show.
    pub fn stop_for(error: &ApiError, repository: &str) -> Option<Self> {
        match error {
            ApiError::Refused { status: 401, message } => Some(Self::StoppedForBadCredentials(format!(
                "GitHub refused the token Agent Merge was lent (401 {message}). It asks GitHub again when the token changes (where agentMergeToken says, or gh auth login) or when Agent Merge is turned on again for this folder."
            ))),
            ApiError::NoRepository { message } => Some(Self::StoppedForMissingRepository(format!(
                "GitHub shows the token no repository {repository} (404 {message}). It asks GitHub again when the token or the folder's origin remote changes, or when Agent Merge is turned on again for this folder."
            ))),
            _ => None,
        }
    }
}

/// How many failed looks in a row the chat is told of (once): the watch is making no progress.
pub const STUCK_AFTER: u32 = 3;

/// The chat's line when the watch stops.
pub fn stopped_line(folder: &str, reason: &str) -> String {
    format!("Agent Merge stopped watching {folder}: {reason}")
}

/// The chat's line when the watch has failed [`STUCK_AFTER`] looks in a row.
pub fn stuck_line(folder: &str, error: &ApiError) -> String {
    format!(
        "Agent Merge is making no progress watching {folder}: {error} ({STUCK_AFTER} tries in a row). It keeps trying, waiting longer each time, up to 15 minutes between tries; ahpd status says when it tries next."
    )
}

/// What a merge refusal's line in the chat adds: what makes Agent Merge try again.
pub const TRIES_AGAIN: &str =
    "Agent Merge tries again when the pull request changes: a push, a review, or its checks running again.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_token_and_a_missing_repository_stop_and_say_why() {
        let refused = ApiError::Refused { status: 401, message: "Bad credentials".into() };
        let stop = Monitoring::stop_for(&refused, "o/r").expect("a stop");
        assert_eq!(stop.word(), "stoppedForBadCredentials");
        assert!(stop.parked());
        assert!(stop
            .reason()
            .is_some_and(|r| r.starts_with("GitHub refused the token Agent Merge was lent (401 Bad credentials).")));
        let gone =
            Monitoring::stop_for(&ApiError::NoRepository { message: "Not Found".into() }, "o/r").expect("a stop");
        assert!(gone
            .reason()
            .is_some_and(|r| r.starts_with("GitHub shows the token no repository o/r (404 Not Found).")));
        let other = ApiError::Refused { status: 404, message: "Not Found".into() };
        assert_eq!(Monitoring::stop_for(&other, "o/r"), None, "a 404 of something else backs off");
        let waiting = Monitoring::WaitingForRateLimit { reason: "spent".into(), retry_at: 1_500 };
        assert_eq!(waiting.retry_at().as_deref(), Some("1970-01-01T00:00:01.500Z"));
        assert!(!waiting.parked());
    }
}

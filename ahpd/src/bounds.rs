//! What bounds a tool call (seed 003 "A tool call is bounded"), decided here for every call the
//! host runs — its own tools and its clients' alike: a deadline applied at dispatch, on the host's
//! clock (so a test moves it instead of waiting), and a cap on a successful result's text, cut
//! with a sentence saying what was left out. A failed result is never cut: the explanation of a
//! failure is the worst thing to truncate.

use std::future::Future;
use std::time::Duration;

use ahp_types::state::{ToolResultContent, ToolResultTextContent};
use protocol::ToolOutcome;

use crate::clock::Clock;

/// How long a call of one of the host's own tools may run before it is stopped.
pub const HOST_TOOL_DEADLINE: Duration = Duration::from_secs(60);
/// The most text a successful result hands the model; more is cut with a sentence saying so.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// Which kind of call a bound is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// One of the host's own tools.
    HostTool,
    /// One of the host's own tools that may wait for a person's answer (a question in the turn):
    /// it waits as long as a client's tool does.
    HostToolAskingPerson,
    /// A tool a client runs.
    ClientTool,
}

/// A call's bounds: when it must have answered by, and how much of a successful answer is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// How long it may run; `None` waits for ever (`clientToolTimeoutMs: 0`).
    pub deadline: Option<Duration>,
    /// The most bytes of text a successful result keeps.
    pub cap: usize,
}

/// The call ran past its deadline (and was given up on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired(pub Duration);

impl Bound {
    /// The bound of a call of `kind`, with clients' tools waiting `client_tool_timeout_ms` (0 for
    /// ever).
    pub fn of(kind: CallKind, client_tool_timeout_ms: u64) -> Self {
        let deadline = match kind {
            CallKind::HostTool => Some(HOST_TOOL_DEADLINE),
            CallKind::HostToolAskingPerson | CallKind::ClientTool => {
                (client_tool_timeout_ms > 0).then(|| Duration::from_millis(client_tool_timeout_ms))
            }
        };
        Self { deadline, cap: OUTPUT_CAP }
    }

    /// Runs `call` against the deadline, on `clock`, counted from now (the dispatch): its answer,
    /// or [`Expired`] once the deadline passed first (`call` is dropped, which stops it).
    pub async fn within<F: Future>(&self, clock: &Clock, call: F) -> Result<F::Output, Expired> {
        let Some(deadline) = self.deadline else { return Ok(call.await) };
        let due = clock.now().saturating_add(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX));
        tokio::select! {
            biased;
            answer = call => Ok(answer),
            () = clock.sleep_until(due) => Err(Expired(deadline)),
        }
    }

    /// A host tool's call run whole: within the deadline (else failed, saying so), its result
    /// capped.
    pub async fn run(&self, clock: &Clock, name: &str, call: impl Future<Output = ToolOutcome>) -> ToolOutcome {
        match self.within(clock, call).await {
            Ok(outcome) => self.cap(outcome),
            Err(Expired(deadline)) => {
                let mut outcome =
                    ToolOutcome::failed(format!("{name} did not finish within {} and was stopped.", seconds(deadline)));
                outcome.past_tense_message = Some(format!("{name} failed"));
                outcome
            }
        }
    }

    /// Caps a successful outcome's text (and each text of its content) at the cap, with a
    /// sentence saying what was cut; a failed one is handed on whole.
    pub fn cap(&self, mut outcome: ToolOutcome) -> ToolOutcome {
        if !outcome.success {
            return outcome;
        }
        outcome.text = cap_text(outcome.text, self.cap);
        for content in &mut outcome.content {
            if let ToolResultContent::Text(ToolResultTextContent { text }) = content {
                *text = cap_text(std::mem::take(text), self.cap);
            }
        }
        outcome
    }
}

/// `text` whole when it fits in `cap` bytes; else its first `cap` bytes (at a character's end)
/// and a sentence saying how much was left out.
pub fn cap_text(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let total = text.len();
    format!("{}\n{}", &text[..end], cut_sentence(end, total, cap))
}

/// The sentence a cut result ends with.
pub fn cut_sentence(shown: usize, total: usize, cap: usize) -> String {
    format!(
        "[Output cut: this result was {total} bytes; the first {shown} are shown and the last {} were left out, past this host's cap of {cap} bytes on a tool's result.]",
        total - shown
    )
}

/// A duration as a person reads it: whole seconds, or milliseconds under one.
pub fn seconds(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) || d.as_secs() >= 10 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_success_is_cut_with_a_sentence_and_a_failure_is_never_cut() {
        let bound = Bound { deadline: None, cap: 10 };
        let cut = bound.cap(ToolOutcome::ok("0123456789abcdef"));
        assert_eq!(
            cut.text,
            "0123456789\n[Output cut: this result was 16 bytes; the first 10 are shown and the last 6 were left out, past this host's cap of 10 bytes on a tool's result.]"
        );
        let failed = bound.cap(ToolOutcome::failed("a very long explanation of the failure"));
        assert_eq!(failed.text, "a very long explanation of the failure");
        assert_eq!(bound.cap(ToolOutcome::ok("short")).text, "short");
    }

    #[test]
    fn a_cut_ends_at_a_whole_character() {
        assert!(cap_text("ééé".to_owned(), 3).starts_with("é\n[Output cut: this result was 6 bytes; the first 2"));
    }

    #[test]
    fn each_kind_has_its_deadline() {
        assert_eq!(Bound::of(CallKind::HostTool, 0).deadline, Some(HOST_TOOL_DEADLINE));
        assert_eq!(Bound::of(CallKind::ClientTool, 5_000).deadline, Some(Duration::from_secs(5)));
        assert_eq!(Bound::of(CallKind::HostToolAskingPerson, 0).deadline, None);
        assert_eq!(Bound::of(CallKind::ClientTool, 0).cap, OUTPUT_CAP);
    }

    #[tokio::test]
    async fn the_deadline_runs_on_the_hosts_clock() {
        let clock = Clock::manual();
        let bound = Bound { deadline: Some(Duration::from_secs(60)), cap: OUTPUT_CAP };
        let waiting = {
            let clock = clock.clone();
            tokio::spawn(async move { bound.within(&clock, std::future::pending::<()>()).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        clock.advance(Duration::from_secs(60));
        assert_eq!(waiting.await.expect("joined"), Err(Expired(Duration::from_secs(60))));
    }
}

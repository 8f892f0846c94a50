//! The daemon's process tree in its record: the groups its workers and what they started run in,
//! kept current in `daemon.json` while it runs, and ended by whoever next finds the record of a
//! daemon that died without stopping them (a successor starting, or a verb clearing the record).

use std::sync::Arc;

use agent_runner::child::groups::{self, GroupEnd};
use tokio_util::sync::CancellationToken;

use super::process;
use super::record::Record;
use super::server::Facts;
use crate::paths::Paths;

/// Rewrites the record each time a process group of this daemon's tree starts or ends, until
/// `cancel`.
pub async fn keep_recorded(facts: Arc<Facts>, cancel: CancellationToken) {
    let mut changes = groups::changes();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = changes.changed() => {}
        }
        if let Err(e) = facts.rewrite_record() {
            tracing::warn!("could not write the daemon record: {e}");
        }
    }
}

/// Ends what the daemon named by the record in `paths` left running, when that daemon is dead:
/// each group it recorded that is still that group (see `agent_runner::child::groups`). Answers
/// how many groups it ended.
pub fn end_leftovers(paths: &Paths) -> usize {
    let record = match Record::read(&paths.record()) {
        Ok(Some(record)) => record,
        Ok(None) => return 0,
        Err(e) => {
            tracing::warn!("{e}");
            return 0;
        }
    };
    let ours = record.pid == std::process::id();
    if !ours && process::alive(record.pid) && process::looks_like_ahpd(record.pid) {
        // It lives: its tree is its own.
        return 0;
    }
    let mut ended = 0;
    for group in &record.groups {
        match groups::end_if_ours(group) {
            GroupEnd::Ended => {
                ended += 1;
                tracing::warn!(
                    "ended process group {} left running by a daemon that died (pid {})",
                    group.pgid,
                    record.pid
                );
            }
            GroupEnd::Gone => {}
            GroupEnd::NotOurs => {
                tracing::debug!(pgid = group.pgid, "a recorded process group's id belongs to another process now")
            }
        }
    }
    ended
}

//! What `ahpd status` shows of Agent Merge: each folder it is on for, its branch, what it follows,
//! when it merges, and what its watch is doing with why it is not making progress (never its
//! token); and the same on the session's `_meta`, for the window's header.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::monitoring::Monitoring;
use super::settings::InForce;
use crate::host::facade;
use crate::host::Core;

/// One folder Agent Merge is on for, as `ahpd status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FolderStatus {
    /// The session it was turned on from.
    pub session: String,
    /// The folder.
    pub folder: PathBuf,
    /// The branch whose pull request it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// When it merges: `always`, `ifUnchanged` or `never`.
    pub merges: String,
    /// What it follows: `checks`, `reviews`, `conflicts`.
    pub watches: Vec<String>,
    /// What its watch is doing.
    pub monitoring: String,
    /// Why it is not following the pull request (a refusal, an outage, a spent rate limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it asks GitHub next, while it waits for a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// Every folder Agent Merge is on for, from the store, with what its watch is doing.
pub fn status(core: &Core, feature: Option<&dyn facade::AgentMerge>) -> Vec<FolderStatus> {
    let records = core.store().agent_merges().unwrap_or_else(|e| {
        tracing::error!("could not read Agent Merge's settings: {e}");
        Vec::new()
    });
    records
        .into_iter()
        .filter(|r| r.enabled)
        .map(|r| {
            let in_force = InForce::of(&r.options);
            let (session, folder) = (r.session, r.folder);
            let watching = feature.and_then(|f| f.watching(&session, &folder)).unwrap_or_else(|| facade::Watching {
                monitoring: "stopped".to_owned(),
                reason: None,
                retry_at: None,
            });
            FolderStatus {
                monitoring: watching.monitoring,
                reason: watching.reason,
                retry_at: watching.retry_at,
                session,
                folder: PathBuf::from(folder),
                branch: r.target,
                watches: in_force.watches().into_iter().map(str::to_owned).collect(),
                merges: in_force.merge_pull_request,
            }
        })
        .collect()
}

/// The key on a session's `_meta` where a client reads its folders' Agent Merge.
pub const META_KEY: &str = "ahpd.agentMerge";

/// Writes what a folder's Agent Merge is (on or off, its branch, what it follows, when it merges,
/// what its watch is doing, and why it is not making progress) onto its session's `_meta`, through
/// the one write path, when the session is in memory and it changed: a client draws it in the
/// session's header.
pub fn publish(core: &mut Core, record: &crate::store::AgentMergeRecord, monitoring: &Monitoring) {
    use ahp_types::actions::{SessionMetaChangedAction, StateAction};
    let Some(state) = core.session_state(&record.session) else { return };
    let in_force = InForce::of(&record.options);
    let shown = if record.enabled {
        let mut shown = serde_json::json!({ "enabled": true, "folder": record.folder, "branch": record.target,
            "watches": in_force.watches(), "merges": in_force.merge_pull_request, "monitoring": monitoring.word(),
            "pullRequest": monitoring.pull() });
        if let Some(reason) = monitoring.reason() {
            shown["reason"] = reason.into();
        }
        // A rate limit resets at one time; a backoff's next try moves with every failure and is
        // left to `ahpd status`, so the header does not change at each.
        if let (Monitoring::WaitingForRateLimit { .. }, Some(at)) = (monitoring, monitoring.retry_at()) {
            shown["retryAt"] = at.into();
        }
        shown
    } else {
        serde_json::json!({ "enabled": false, "folder": record.folder })
    };
    let mut meta = state.meta.clone().unwrap_or_default();
    if meta.get(META_KEY) == Some(&shown) {
        return;
    }
    meta.insert(META_KEY.to_owned(), shown);
    let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) });
    core.apply(&record.session, action, None, None);
}

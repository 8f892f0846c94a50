//! What `ahpd status` shows of Agent Merge: each folder it is on for, its branch, what it follows
//! and when it merges (never its token).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
            FolderStatus {
                monitoring: feature
                    .and_then(|f| f.monitoring(&session, &folder))
                    .unwrap_or_else(|| "stopped".to_owned()),
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
/// what its watch is doing) onto its session's `_meta`, through the one write path, when the
/// session is in memory and it changed: a client draws it in the session's header.
pub fn publish(core: &mut Core, record: &crate::store::AgentMergeRecord, monitoring: &str, pull: Option<u64>) {
    use ahp_types::actions::{SessionMetaChangedAction, StateAction};
    let Some(state) = core.session_state(&record.session) else { return };
    let in_force = InForce::of(&record.options);
    let shown = if record.enabled {
        serde_json::json!({ "enabled": true, "folder": record.folder, "branch": record.target,
            "watches": in_force.watches(), "merges": in_force.merge_pull_request, "monitoring": monitoring,
            "pullRequest": pull })
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

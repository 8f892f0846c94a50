//! Agent Merge's settings, kept per session folder (the `agent_merge` table, store version 5), so
//! a folder it was turned on for is still watched after a restart or `kill -9`. A session's rows
//! go with the session.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// The options a folder's calls named; an absent one takes Agent Merge's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMergeOptions {
    /// Address new review comments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_reviews: Option<bool>,
    /// Fix failing CI checks.
    #[serde(default, rename = "fixCI", skip_serializing_if = "Option::is_none")]
    pub fix_ci: Option<bool>,
    /// Resolve merge conflicts and update a behind branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve_conflicts: Option<bool>,
    /// When to merge: `always`, `ifUnchanged` or `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_pull_request: Option<String>,
}

/// One folder's Agent Merge, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMergeRecord {
    /// The session it was configured from.
    pub session: String,
    /// The folder it watches.
    pub folder: String,
    /// The chat it was configured from, where its repair turns begin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// On or off.
    pub enabled: bool,
    /// What its calls asked for.
    #[serde(default)]
    pub options: AgentMergeOptions,
    /// The branch captured when it was first turned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The person whose turn turned it on (`user:<id>`), whom its repair turns act for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_by: Option<String>,
    /// When it last changed (RFC 3339).
    pub changed_at: String,
    /// What its watch acted on already (a failure, a thread's newest comment, a merge), newest
    /// last, so a restart does not ask again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked: Vec<String>,
}

impl Store {
    /// Keeps a folder's Agent Merge, replacing what was kept for it.
    pub fn save_agent_merge(&self, record: &AgentMergeRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO agent_merge (session, folder, record) VALUES (?1, ?2, ?3)",
            params![record.session, record.folder, serde_json::to_string(record)?],
        ))?;
        Ok(())
    }

    /// A session folder's Agent Merge, when one was ever configured.
    pub fn agent_merge(&self, session: &str, folder: &str) -> Result<Option<AgentMergeRecord>, StoreError> {
        let row: Option<String> = self.sql(
            self.conn
                .query_row(
                    "SELECT record FROM agent_merge WHERE session = ?1 AND folder = ?2",
                    params![session, folder],
                    |r| r.get(0),
                )
                .optional(),
        )?;
        Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    /// Every folder's Agent Merge, by session and folder.
    pub fn agent_merges(&self) -> Result<Vec<AgentMergeRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached("SELECT record FROM agent_merge ORDER BY session, folder"))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }
}

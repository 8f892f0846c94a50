//! The automations' records (store version 6): each definition with what the host owns of it
//! (`automations`), and each run (`automation_runs`), kept before the run's first side effect so a
//! run survives `kill -9` and a restart. A run is found again by the `requestId` it was asked
//! under (`runAutomation` is idempotent by it) and by the schedule occurrence it was made for (at
//! most one run per occurrence); both are unique per automation. What each GitHub trigger has seen
//! (`automation_github_seen`, store version 7) is kept per automation and trigger.

use ahp_types::state::{AutomationDefinition, AutomationRunState};
use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// One automation, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomationRecord {
    /// Its `ahp-automation:` URI.
    pub resource: String,
    /// The definition a client gave it, as validated.
    pub definition: AutomationDefinition,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When its definition last changed (RFC 3339).
    pub modified_at: String,
    /// Scheduled runs counted against its `afterRuns` allowance.
    #[serde(default)]
    pub run_count: i64,
    /// The schedule has been looked at up to here (milliseconds since the epoch): occurrences
    /// after it not yet passed are still to come, and those before it were run or passed over.
    pub evaluated_to: u64,
    /// Who created it (`user:<id>`, `root`), whom its runs act for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The commit each of its `gitBranch` triggers last saw its branch at, by trigger id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub branches: std::collections::BTreeMap<String, String>,
}

/// One run, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomationRunRecord {
    /// Its channel state, as clients see it.
    pub state: AutomationRunState,
    /// The `requestId` a manual run was asked under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The schedule occurrence or event it was made for (`<trigger>@<time>`, `<trigger>#<event>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<String>,
    /// When it was made (milliseconds since the epoch), for ordering.
    pub created_ms: u64,
}

/// What one GitHub trigger of an automation has seen, so each event fires once across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitHubSeen {
    /// The trigger's type, events and config these were seen under; another means look afresh.
    pub watching: String,
    /// The newest pull request or issue number seen: a higher one is newly opened.
    #[serde(default)]
    pub newest: u64,
    /// The issues seen carrying the trigger's label.
    #[serde(default)]
    pub labeled: std::collections::BTreeSet<u64>,
    /// The failed check runs seen (by id), the newest few hundred.
    #[serde(default)]
    pub failed: std::collections::BTreeSet<u64>,
    /// A look succeeded under `watching`: what is above is what was there (before it, nothing is
    /// known, and the first look only notes what it finds).
    #[serde(default)]
    pub noted: bool,
    /// When it last looked (RFC 3339, the host's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub looked_at: Option<String>,
    /// Why the last look failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Store {
    /// Keeps an automation, replacing what was kept for it.
    pub fn save_automation(&self, record: &AutomationRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO automations (uri, record) VALUES (?1, ?2)",
            params![record.resource, serde_json::to_string(record)?],
        ))?;
        Ok(())
    }

    /// Forgets an automation and its runs.
    pub fn delete_automation(&self, uri: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM automation_runs WHERE automation = ?1", [uri]))?;
        self.sql(self.conn.execute("DELETE FROM automation_github_seen WHERE automation = ?1", [uri]))?;
        self.sql(self.conn.execute("DELETE FROM automations WHERE uri = ?1", [uri]))?;
        Ok(())
    }

    /// What a GitHub trigger of an automation has seen, when it has looked.
    pub fn github_seen(&self, automation: &str, trigger: &str) -> Result<Option<GitHubSeen>, StoreError> {
        let text: Option<String> = self.sql(
            self.conn
                .query_row(
                    "SELECT record FROM automation_github_seen WHERE automation = ?1 AND trigger = ?2",
                    params![automation, trigger],
                    |r| r.get(0),
                )
                .optional(),
        )?;
        Ok(text.map(|t| serde_json::from_str(&t)).transpose()?)
    }

    /// Forgets what an automation's GitHub triggers have seen (their next look notes afresh).
    pub fn forget_github_seen(&self, automation: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM automation_github_seen WHERE automation = ?1", [automation]))?;
        Ok(())
    }

    /// Keeps what a GitHub trigger of an automation has seen.
    pub fn save_github_seen(&self, automation: &str, trigger: &str, seen: &GitHubSeen) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO automation_github_seen (automation, trigger, record) VALUES (?1, ?2, ?3)",
            params![automation, trigger, serde_json::to_string(seen)?],
        ))?;
        Ok(())
    }

    /// Every automation, oldest first.
    pub fn automations(&self) -> Result<Vec<AutomationRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached("SELECT record FROM automations ORDER BY rowid"))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }

    /// Keeps a run, replacing what was kept for it.
    pub fn save_automation_run(&self, record: &AutomationRunRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO automation_runs (uri, automation, created_ms, request_id, occurrence, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                record.state.resource,
                record.state.automation,
                i64::try_from(record.created_ms).unwrap_or(i64::MAX),
                record.request_id,
                record.occurrence,
                serde_json::to_string(record)?
            ],
        ))?;
        Ok(())
    }

    /// Forgets a run (it left the history).
    pub fn delete_automation_run(&self, uri: &str) -> Result<(), StoreError> {
        self.sql(self.conn.execute("DELETE FROM automation_runs WHERE uri = ?1", [uri]))?;
        Ok(())
    }

    /// The run an automation made for `request_id` or `occurrence`, when it made one.
    pub fn automation_run_for(
        &self,
        automation: &str,
        request_id: Option<&str>,
        occurrence: Option<&str>,
    ) -> Result<Option<AutomationRunRecord>, StoreError> {
        let row: Option<String> = self.sql(
            self.conn
                .query_row(
                    "SELECT record FROM automation_runs WHERE automation = ?1
                     AND ((?2 IS NOT NULL AND request_id = ?2) OR (?3 IS NOT NULL AND occurrence = ?3))",
                    params![automation, request_id, occurrence],
                    |r| r.get(0),
                )
                .optional(),
        )?;
        Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    /// An automation's runs, newest first: `limit` of them, older than `before` (milliseconds,
    /// then URI) when it is given.
    pub fn automation_runs(
        &self,
        automation: &str,
        before: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<AutomationRunRecord>, StoreError> {
        let (ms, uri) = before.map_or((i64::MAX, ""), |(ms, uri)| (i64::try_from(ms).unwrap_or(i64::MAX), uri));
        let mut stmt = self.sql(self.conn.prepare_cached(
            "SELECT record FROM automation_runs WHERE automation = ?1
             AND (created_ms < ?2 OR (created_ms = ?2 AND uri < ?3) OR ?3 = '')
             ORDER BY created_ms DESC, uri DESC LIMIT ?4",
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<String> =
            self.sql(stmt.query_map(params![automation, ms, uri, limit], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }
}

impl Store {
    /// Every run still `pending` or `running` as kept.
    pub fn unfinished_automation_runs(&self) -> Result<Vec<AutomationRunRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached(
            "SELECT record FROM automation_runs
             WHERE json_extract(record, '$.state.lifecycle.status') IN ('pending', 'running')",
        ))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }
}

impl Store {
    /// One run, when it is kept.
    pub fn automation_run(&self, uri: &str) -> Result<Option<AutomationRunRecord>, StoreError> {
        let row: Option<String> = self.sql(
            self.conn.query_row("SELECT record FROM automation_runs WHERE uri = ?1", [uri], |r| r.get(0)).optional(),
        )?;
        Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    /// Forgets an automation's ended runs past its newest `keep`; answers the runs forgotten.
    pub fn prune_automation_runs(&self, automation: &str, keep: usize) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached(
            "SELECT uri FROM automation_runs WHERE automation = ?1
             AND json_extract(record, '$.state.lifecycle.status') NOT IN ('pending', 'running')
             ORDER BY created_ms DESC, uri DESC LIMIT -1 OFFSET ?2",
        ))?;
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let old: Vec<String> =
            self.sql(stmt.query_map(params![automation, keep], |r| r.get(0)).and_then(|r| r.collect()))?;
        for uri in &old {
            self.delete_automation_run(uri)?;
        }
        Ok(old)
    }
}

//! What each agent last said it offers (its probe and its schema), kept per provider so a
//! restarted daemon shows an agent's models, modes and commands at once, before its worker has
//! asked the agent again (an ACP agent learns them only by opening a session).

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// One agent's last offer, as its worker said it (before the host's own settings join the schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentOffersRecord {
    /// The provider id.
    pub provider: String,
    /// Its last `agent/probe` answer (the account left out: it is asked again each time).
    pub probe: protocol::ProbeResult,
    /// Its last `agent/schema` answer, when it said one after a probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<protocol::SchemaResult>,
    /// When it was said (RFC 3339).
    pub said_at: String,
}

impl Store {
    /// Keeps what `record.provider` offers, replacing what was kept for it.
    pub fn save_agent_offers(&self, record: &AgentOffersRecord) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO agent_offers (provider, record) VALUES (?1, ?2)",
            params![record.provider, serde_json::to_string(record)?],
        ))?;
        Ok(())
    }

    /// What every agent last offered, by provider.
    pub fn agent_offers(&self) -> Result<Vec<AgentOffersRecord>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare_cached("SELECT record FROM agent_offers ORDER BY provider"))?;
        let rows: Vec<String> = self.sql(stmt.query_map([], |r| r.get(0)).and_then(|r| r.collect()))?;
        rows.iter().map(|r| Ok(serde_json::from_str(r)?)).collect()
    }
}

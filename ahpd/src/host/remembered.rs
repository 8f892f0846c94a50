//! What each agent offers, remembered across restarts: an agent's models, commands and schema are
//! read from the store when the host starts (so the first `initialize` after a restart shows them,
//! before the agent is asked again) and written each time its worker's probe answers; so are the
//! capabilities a probe learned beyond its worker's descriptor (an ACP agent's fork).

use protocol::{ProbeResult, SchemaResult};

use super::{AgentEntry, Core};
use crate::store::{AgentOffersRecord, Store};

impl AgentEntry {
    /// The entry of `provider`, with what the store remembers it offered.
    pub fn new(provider: String, store: &Store) -> Self {
        let kept = match store.agent_offers() {
            Ok(all) => all.into_iter().find(|r| r.provider == provider),
            Err(e) => {
                tracing::warn!("{provider}: what it offered last could not be read: {e}");
                None
            }
        };
        let (probe, remembered) = kept.map(|r| (r.probe, r.schema)).unwrap_or_default();
        AgentEntry {
            models: with_provider(&provider, probe.models),
            commands: probe.commands,
            attachments: probe.attachments,
            capabilities: probe.capabilities,
            remembered,
            descriptor: None,
            schema: None,
            provider,
        }
    }
}

impl AgentEntry {
    /// Takes the models its worker's probe said it offers, each named with its provider.
    pub(super) fn offer_models(&mut self, models: Vec<ahp_types::state::SessionModelInfo>) {
        self.models = with_provider(&self.provider, models);
    }
}

impl Core {
    /// Keeps what `provider`'s worker said it offers, for this run and the next; a store that
    /// cannot take it costs only the next start's head start, so it is logged, not raised.
    pub(super) fn remember_offers(&mut self, provider: &str, probe: &ProbeResult, schema: Option<&SchemaResult>) {
        let Some(entry) = self.agents.iter_mut().find(|a| a.provider == provider) else { return };
        if let Some(schema) = schema {
            entry.remembered = Some(schema.clone());
        }
        let record = AgentOffersRecord {
            provider: provider.to_owned(),
            probe: ProbeResult { account: None, ..probe.clone() },
            schema: entry.remembered.clone(),
            said_at: super::now_iso(),
        };
        if let Err(e) = self.store.save_agent_offers(&record) {
            tracing::warn!("{provider}: what it offers could not be kept: {e}");
        }
    }
}

/// The models as the root state lists them: each names its provider.
pub fn with_provider(
    provider: &str,
    models: Vec<ahp_types::state::SessionModelInfo>,
) -> Vec<ahp_types::state::SessionModelInfo> {
    models
        .into_iter()
        .map(|mut m| {
            m.provider = provider.to_owned();
            m
        })
        .collect()
}

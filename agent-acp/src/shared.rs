//! What every session of one `acp` worker shares: the agent's options, what it has been learned
//! to offer (from the startup probe and from its sessions), its listing of the sessions it keeps,
//! and the worker's context, so a session can teach what the agent offers without knowing the
//! agent's identity (`agent.rs`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use agent_runner::{lock, AgentError, WorkerContext};
use ahp_types::state::SessionModelInfo;
use protocol::{AttachmentSupport, Listed, SlashCommand};

use crate::config::Offers;
use crate::options::AcpOptions;

/// What the agent learned from its sessions, for the schema and the probe.
#[derive(Default)]
pub(crate) struct Learned {
    pub(crate) offers: Option<Offers>,
    pub(crate) models: Vec<SessionModelInfo>,
    pub(crate) commands: Vec<SlashCommand>,
    pub(crate) attachments: Option<AttachmentSupport>,
    /// Whether it lists the sessions it keeps (`sessionCapabilities.list`), once it said.
    pub(crate) lists: Option<bool>,
    /// Whether it takes a conversation up again (`loadSession`), once the probe said.
    pub(crate) loads: Option<bool>,
}

/// How long the agent's listing of its sessions is answered again before it is asked anew.
const LISTING_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// What every session of one `acp` worker shares.
pub struct Shared {
    /// The provider id (the config's key).
    pub provider: String,
    /// The resolved options.
    pub options: AcpOptions,
    /// The worker's own folder, for sessions that have none.
    pub data_dir: Option<PathBuf>,
    pub(crate) learned: Mutex<Learned>,
    /// The startup probe's outcome, once it ran (it runs once per worker).
    pub(crate) probed: tokio::sync::OnceCell<Result<(), String>>,
    /// `agent/probe` was answered from what a session taught before the startup probe ended.
    pub(crate) answered_early: std::sync::atomic::AtomicBool,
    /// The agent's last listing of its sessions and when it was asked: every listing starts an
    /// agent process, so one asked within [`LISTING_FRESH`] is answered again (and listings
    /// asked together share one).
    pub(crate) listing: tokio::sync::Mutex<Option<(std::time::Instant, Vec<Listed>)>>,
    /// The kinds of message from the agent this host does not map, each said once at debug.
    pub(crate) unmapped: Mutex<HashSet<String>>,
    pub(crate) context: WorkerContext,
}

impl Shared {
    /// A session opened (or its server changed what it offers): the schema and the models follow.
    pub fn learn_offers(&self, offers: &Offers) {
        let models = offers.models(&self.provider);
        let changed = {
            let mut learned = lock(&self.learned);
            // What is offered, not what is in force: a mode or option offered anew changes the
            // schema as a model changes the models; a session moving between them changes neither.
            let schema_moved = learned.offers.as_ref().map(Offers::properties) != Some(offers.properties());
            let changed = learned.models != models || schema_moved;
            learned.offers = Some(offers.clone());
            learned.models = models;
            changed
        };
        if changed {
            self.context.probe_changed();
        }
    }

    /// The agent said what its prompts take (its `promptCapabilities`).
    pub fn learn_attachments(&self, support: AttachmentSupport) {
        let changed = {
            let mut learned = lock(&self.learned);
            let changed = learned.attachments.as_ref() != Some(&support);
            learned.attachments = Some(support);
            changed
        };
        if changed {
            self.context.probe_changed();
        }
    }

    /// The agent sent something this host does not map (an update kind newer than the schema, one
    /// it shows nothing for, a notification it does not use): the session goes on, and the first
    /// of each kind is said at debug, so none is lost silently and none floods the log.
    pub fn unmapped(&self, kind: &str, why: &str) {
        if lock(&self.unmapped).insert(kind.to_owned()) {
            tracing::debug!(
                provider = self.provider,
                kind,
                why,
                "an ACP message this host does not map (said once per kind)"
            );
        }
    }

    /// Asks the agent what it offers with a short-lived session of its own, once per worker: the
    /// first `agent/probe` waits for it (the parent asks in the background, after the worker is
    /// ready, so nothing waits on it at startup). A failure is logged and kept: a later session
    /// still teaches the worker what the agent offers.
    pub(crate) async fn probe_once(&self) -> Result<(), String> {
        let outcome = self
            .probed
            .get_or_init(|| async {
                let folder = self.own_folder()?;
                let found = crate::probe::probe(&self.provider, &self.options, &folder).await?;
                {
                    let mut learned = lock(&self.learned);
                    learned.lists = Some(found.lists);
                    learned.loads = Some(found.loads);
                }
                self.learn_attachments(found.attachments);
                if let Some(commands) = found.commands {
                    self.learn_commands(commands);
                }
                self.learn_offers(&found.offers);
                if self.answered_early.load(std::sync::atomic::Ordering::SeqCst) {
                    // What a session taught was answered before: the parent asks again for what
                    // only the probe learns (whether the agent loads, and so forks).
                    self.context.probe_changed();
                }
                tracing::info!(provider = self.provider, "asked the ACP agent what it offers");
                Ok(())
            })
            .await;
        if let Err(why) = outcome {
            tracing::warn!("could not ask what the agent offers: {why}");
        }
        outcome.clone()
    }

    /// The folder a short-lived agent process of the worker's runs in (the probe's, a listing's).
    pub(crate) fn own_folder(&self) -> Result<PathBuf, String> {
        let folder = match &self.data_dir {
            Some(dir) => dir.join("probe"),
            None => std::env::temp_dir().join(format!("ahpd-acp-probe-{}", self.provider)),
        };
        std::fs::create_dir_all(&folder)
            .map_err(|e| format!("{}: could not make {}: {e}", self.provider, folder.display()))?;
        Ok(folder)
    }

    /// The sessions the agent keeps, when it lists them: nothing is started for an agent found
    /// not to (by the probe or an earlier listing), and a fresh listing is answered again.
    pub(crate) async fn listed(&self) -> Result<Vec<Listed>, AgentError> {
        if lock(&self.learned).lists == Some(false) {
            return Ok(Vec::new());
        }
        let mut kept = self.listing.lock().await;
        if let Some((at, rows)) = kept.as_ref().filter(|(at, _)| at.elapsed() < LISTING_FRESH) {
            tracing::debug!(provider = self.provider, age_ms = at.elapsed().as_millis(), "the agent's listing again");
            return Ok(rows.clone());
        }
        let folder = self.own_folder().map_err(AgentError::Failed)?;
        let listing =
            crate::catalogue::list(&self.provider, &self.options, &folder).await.map_err(AgentError::Failed)?;
        lock(&self.learned).lists = Some(listing.lists);
        // The probe's own session (an agent that keeps even an empty one) is nobody's.
        let sessions = crate::catalogue::without_folder(listing.sessions, &folder);
        *kept = Some((std::time::Instant::now(), sessions.clone()));
        Ok(sessions)
    }

    /// The agent named the commands behind a slash.
    pub fn learn_commands(&self, commands: Vec<SlashCommand>) {
        let changed = {
            let mut learned = lock(&self.learned);
            let changed = learned.commands != commands;
            learned.commands = commands;
            changed
        };
        if changed {
            self.context.probe_changed();
        }
    }
}

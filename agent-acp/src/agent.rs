//! The `acp` backend's identity: who it is, the schema its sessions share, what it offers (learned
//! from a short-lived session of its own the first time the parent asks, then from the sessions it
//! opens, since ACP names models, modes and commands only once a session is open), the sessions
//! it keeps ([`crate::catalogue`]), and how a session starts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_runner::{Agent, AgentError, Session, SessionHost, WorkerContext};
use ahp_types::state::{SessionConfigSchema, SessionModelInfo, Turn};
use async_trait::async_trait;
use protocol::{
    AgentDescriptor, AgentFeatures, At, AttachmentSupport, Listed, Policy, ProbeResult, SchemaResult, SlashCommand,
    Start,
};

use crate::config::Offers;
use crate::options::AcpOptions;
use crate::session::AcpSession;
use agent_runner::lock;

/// What the agent learned from its sessions, for the schema and the probe.
#[derive(Default)]
struct Learned {
    offers: Option<Offers>,
    models: Vec<SessionModelInfo>,
    commands: Vec<SlashCommand>,
    attachments: Option<AttachmentSupport>,
    /// Whether it lists the sessions it keeps (`sessionCapabilities.list`), once it said.
    lists: Option<bool>,
    /// Whether it takes a conversation up again (`loadSession`), once the probe said.
    loads: Option<bool>,
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
    learned: Mutex<Learned>,
    /// The startup probe's outcome, once it ran (it runs once per worker).
    probed: tokio::sync::OnceCell<Result<(), String>>,
    /// `agent/probe` was answered from what a session taught before the startup probe ended.
    answered_early: std::sync::atomic::AtomicBool,
    /// The agent's last listing of its sessions and when it was asked: every listing starts an
    /// agent process, so one asked within [`LISTING_FRESH`] is answered again (and listings
    /// asked together share one).
    listing: tokio::sync::Mutex<Option<(std::time::Instant, Vec<Listed>)>>,
    /// The kinds of message from the agent this host does not map, each said once at debug.
    unmapped: Mutex<HashSet<String>>,
    context: WorkerContext,
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
    async fn probe_once(&self) -> Result<(), String> {
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
    fn own_folder(&self) -> Result<PathBuf, String> {
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
    async fn listed(&self) -> Result<Vec<Listed>, AgentError> {
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

/// One ACP agent as a backend.
pub struct AcpAgent {
    shared: Arc<Shared>,
}

impl AcpAgent {
    /// The backend for `provider`, running what `options` say.
    pub fn new(provider: String, options: AcpOptions, data_dir: Option<PathBuf>, context: WorkerContext) -> Self {
        Self {
            shared: Arc::new(Shared {
                provider,
                options,
                data_dir,
                learned: Mutex::new(Learned::default()),
                probed: tokio::sync::OnceCell::new(),
                answered_early: std::sync::atomic::AtomicBool::new(false),
                listing: tokio::sync::Mutex::new(None),
                unmapped: Mutex::new(HashSet::new()),
                context,
            }),
        }
    }
}

#[async_trait]
impl Agent for AcpAgent {
    fn descriptor(&self) -> AgentDescriptor {
        let options = &self.shared.options;
        AgentDescriptor {
            provider: self.shared.provider.clone(),
            display_name: options.display_name.clone(),
            description: Some(
                options.description.clone().unwrap_or_else(|| format!("An ACP agent: {}", options.command_line())),
            ),
            // Each chat of a session is an ACP session (and an agent process) of its own. ACP
            // cannot take a message mid-prompt (no steering) nor cut a conversation (no
            // truncation). A fork is done by reading the source back (`fork.rs`), but only on an
            // agent that declared `loadSession`, which is learned after the descriptor is said: the
            // host allows it per chat (`resumable`), and the probe's answer offers it for the agent
            // (`ProbeResult.capabilities`) once the probe knows.
            capabilities: Some(agent_runner::agent::multiple_chats()),
            // The sessions it keeps are listed where it declares `sessionCapabilities.list`, which
            // the probe learns (an agent that does not lists nothing, starting nothing).
            features: AgentFeatures {
                probe: true,
                list: true,
                find: true,
                transcript: true,
                ..AgentFeatures::default()
            },
        }
    }

    /// The controls the agent's sessions offer (without the modes that act without asking, under
    /// a policy that restricts them): none until the probe or a session has opened one,
    /// since ACP names its modes and options on `session/new`; then the last session's, with no
    /// defaults, so a session starts where the agent puts it unless somebody chose otherwise.
    fn schema(&self, policy: &Policy) -> SchemaResult {
        let properties = lock(&self.shared.learned).offers.as_ref().map(Offers::properties).unwrap_or_default();
        let properties = crate::config::under_policy(properties, restricts(policy));
        SchemaResult {
            schema: SessionConfigSchema {
                r#type: "object".into(),
                properties: properties.into_iter().collect(),
                required: None,
            },
            defaults: Default::default(),
        }
    }

    /// What the agent offers: the first answer waits for the startup probe, unless a session has
    /// said it meanwhile (then that is answered at once); when the probe failed and
    /// no session taught anything yet, the answer is the failure, so the parent keeps what it
    /// remembered rather than taking an empty offer for the agent's.
    async fn probe(&self) -> Result<ProbeResult, AgentError> {
        let taught = lock(&self.shared.learned).offers.is_some();
        let outcome = if taught && self.shared.probed.get().is_none() {
            // A session has said what the agent offers while the startup probe still runs: that
            // is answered now, and the probe's own answer follows when it ends.
            self.shared.answered_early.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        } else {
            self.shared.probe_once().await
        };
        let learned = lock(&self.shared.learned);
        if let (Err(why), None) = (outcome, &learned.offers) {
            return Err(AgentError::Failed(why));
        }
        Ok(ProbeResult {
            models: learned.models.clone(),
            commands: learned.commands.clone(),
            account: None,
            attachments: learned.attachments.clone(),
            // An agent that loads its sessions forks a chat (a fork loads its source): offered
            // once the probe knows, where the descriptor, said before it, could not.
            capabilities: learned.loads.map(|loads| {
                if loads {
                    agent_runner::agent::forking_chats()
                } else {
                    agent_runner::agent::multiple_chats()
                }
            }),
        })
    }

    async fn list(&self) -> Result<Vec<Listed>, AgentError> {
        self.shared.listed().await
    }

    async fn find(&self, id: &str, _at: &At) -> Result<Option<Listed>, AgentError> {
        Ok(self.shared.listed().await?.into_iter().find(|row| row.id == id))
    }

    /// Read back from the agent's `session/load` replay, in the folder it ran in (the parent's
    /// record, else the agent's listing).
    async fn transcript(&self, id: &str, at: &At) -> Result<Option<Vec<Turn>>, AgentError> {
        let cwd = match &at.working_directory {
            Some(dir) => PathBuf::from(dir),
            None => {
                let Some(row) = self.find(id, at).await? else { return Ok(None) };
                match row.working_directories.first() {
                    Some(uri) => PathBuf::from(uri.strip_prefix("file://").unwrap_or(uri)),
                    None => return Ok(None),
                }
            }
        };
        let shared = &self.shared;
        let folder = shared.own_folder().map_err(AgentError::Failed)?;
        crate::catalogue::transcript(&shared.provider, &shared.options, &folder, id, cwd)
            .await
            .map_err(AgentError::Failed)
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let session = AcpSession::open(self.shared.clone(), start, host).await?;
        Ok(Arc::new(session))
    }
}

/// Whether `policy` restricts elevated auto-approval.
pub fn restricts(policy: &Policy) -> bool {
    policy.auto_approve_policy_restricted == Some(true)
}

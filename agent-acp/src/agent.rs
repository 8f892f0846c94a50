//! The `acp` backend's identity: who it is, the schema its sessions share, what it offers (learned
//! from a short-lived session of its own the first time the parent asks, then from the sessions it
//! opens, since ACP names models, modes and commands only once a session is open), and how a
//! session starts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_runner::{Agent, AgentError, Session, SessionHost, WorkerContext};
use ahp_types::state::{SessionConfigSchema, SessionModelInfo};
use async_trait::async_trait;
use protocol::{
    AgentDescriptor, AgentFeatures, AttachmentSupport, Policy, ProbeResult, SchemaResult, SlashCommand, Start,
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
}

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
                let folder = match &self.data_dir {
                    Some(dir) => dir.join("probe"),
                    None => std::env::temp_dir().join(format!("ahpd-acp-probe-{}", self.provider)),
                };
                if let Err(e) = std::fs::create_dir_all(&folder) {
                    return Err(format!("{}: could not make {}: {e}", self.provider, folder.display()));
                }
                let found = crate::probe::probe(&self.provider, &self.options, &folder).await?;
                self.learn_attachments(found.attachments);
                if let Some(commands) = found.commands {
                    self.learn_commands(commands);
                }
                self.learn_offers(&found.offers);
                tracing::info!(provider = self.provider, "asked the ACP agent what it offers");
                Ok(())
            })
            .await;
        if let Err(why) = outcome {
            tracing::warn!("could not ask what the agent offers: {why}");
        }
        outcome.clone()
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
            // host allows it per chat (`resumable`), so the descriptor does not offer it.
            capabilities: Some(agent_runner::agent::multiple_chats()),
            features: AgentFeatures { probe: true, ..AgentFeatures::default() },
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

    /// What the agent offers: the first answer waits for the startup probe; when that failed and
    /// no session taught anything yet, the answer is the failure, so the parent keeps what it
    /// remembered rather than taking an empty offer for the agent's.
    async fn probe(&self) -> Result<ProbeResult, AgentError> {
        let outcome = self.shared.probe_once().await;
        let learned = lock(&self.shared.learned);
        if let (Err(why), None) = (outcome, &learned.offers) {
            return Err(AgentError::Failed(why));
        }
        Ok(ProbeResult {
            models: learned.models.clone(),
            commands: learned.commands.clone(),
            account: None,
            attachments: learned.attachments.clone(),
        })
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

//! The `acp` backend's identity: who it is, the schema its sessions share, what it offers (learned
//! from a short-lived session of its own the first time the parent asks, then from the sessions it
//! opens, since ACP names models, modes and commands only once a session is open), the sessions
//! it keeps ([`crate::catalogue`]), and how a session starts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_runner::{Agent, AgentError, Session, SessionHost, WorkerContext};
use ahp_types::state::{SessionConfigSchema, Turn};
use async_trait::async_trait;
use protocol::{AgentDescriptor, AgentFeatures, At, Listed, Policy, ProbeResult, SchemaResult, Start};

use crate::config::Offers;
use crate::options::AcpOptions;
use crate::session::AcpSession;
use crate::shared::{Learned, Shared};
use agent_runner::lock;

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
        let properties = crate::config::under_policy(properties, crate::config::restricts(policy));
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
    // A replay reads back its prose alone: no tool result, so nothing kept to name (`_kept`).
    async fn transcript(
        &self,
        id: &str,
        at: &At,
        _kept: &[protocol::KeptResource],
    ) -> Result<Option<Vec<Turn>>, AgentError> {
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

    /// The agent process and the commands it has the client run (`terminal/create`) start
    /// through the session's box.
    fn confines(&self) -> bool {
        true
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let session = AcpSession::open(self.shared.clone(), start, host).await?;
        Ok(Arc::new(session))
    }
}

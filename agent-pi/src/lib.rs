//! The pi backend: `pi --mode rpc` as a worker (issue 9).
//!
//! Each conversation is one pi child started in the session's folder, with its session file where
//! pi itself keeps them ([`catalogue`]: `<agent folder>/sessions/<encoded folder>/`), so `pi` in a
//! terminal continues it, and pi's own conversations are listed, read back and resumed here. pi's agent folder (`PI_CODING_AGENT_DIR`: models, logins, settings) is the person's own
//! unless the `agentDir` option points elsewhere. A small extension the worker ships ([`options::BRIDGE_SOURCE`],
//! loaded with `-e`) carries the host's hidden per-turn instructions, asks the host before pi runs a
//! tool when the session's `ask` setting says so, offers the host's and clients' tools to the model,
//! and says which session entry a prompt became (the turn's recorded id).
//!
//! **Invariant:** this crate builds on `agent-runner` alone and never depends on `ahpd`.

pub mod catalogue;
pub mod commands;
pub mod cut;
pub mod event;
pub mod mapper;
pub mod models;
pub mod options;
pub mod process;
pub mod session;
pub mod transcript;

use std::sync::Arc;
use std::time::Duration;

use agent_runner::child::ChildCommand;
use agent_runner::sync::lock;
use agent_runner::{Agent, AgentError, AgentFactory, Session, SessionHost};
use ahp_types::state::Turn;
use async_trait::async_trait;
use protocol::{AgentDescriptor, AgentFeatures, At, Listed, Policy, ProbeResult, SchemaResult, SlashCommand, Start};
use serde_json::json;

use crate::options::PiOptions;
use crate::process::PiProcess;
use crate::session::{PiSession, ASK};

/// The worker kind.
pub const KIND: &str = "pi";

/// The factory `ahpd worker pi` serves.
pub fn factory() -> AgentFactory {
    Box::new(|init, _ctx| {
        let options = PiOptions::from_init(init);
        options.prepare().map_err(|e| {
            AgentError::Failed(format!("the pi worker could not prepare {}: {e}", options.data_dir.display()))
        })?;
        Ok(Arc::new(PiAgent { provider: init.provider.clone(), options: Arc::new(options), summaries: Arc::default() })
            as Arc<dyn Agent>)
    })
}

/// The pi agent.
pub struct PiAgent {
    provider: String,
    options: Arc<PiOptions>,
    /// The conversations listed before, so listing again reads only the files that changed.
    summaries: Arc<std::sync::Mutex<agent_runner::listing::Summaries>>,
}

fn schema() -> SchemaResult {
    let ask = agent_runner::schema::choice(
        "Ask before",
        "Which of pi's tool calls wait for a person to allow them",
        "never",
        &ASK,
        &["Never", "Commands and edits", "Every call"],
    );
    agent_runner::schema::schema_of(vec![("ask", ask)])
}

#[async_trait]
impl Agent for PiAgent {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor {
            provider: self.provider.clone(),
            display_name: "pi".into(),
            description: Some("pi, a small coding agent, driven over its RPC mode".into()),
            // Each chat is a pi (and a session file) of its own; a fork begins as a copy of its
            // source's session file through the kept turn (`cut.rs`), run where the source ran.
            capabilities: Some(agent_runner::agent::forking_chats()),
            features: AgentFeatures {
                transcript: true,
                // pi's own conversations (`catalogue.rs`), browsed and opened like Claude's.
                list: true,
                find: true,
                probe: true,
                steering: true,
                resume: true,
                // A cut is a copy of the session file through the kept turn (`cut.rs`).
                truncate: true,
                // pi continues the session file, which holds the lost turn's prompt and what it
                // finished, and is told to carry on with it.
                resume_turn: true,
                // pi's prompt takes images beside its text; every other attachment is said as text.
                attachments: Some(commands::attachment_support()),
                ..Default::default()
            },
        }
    }

    fn schema(&self, _policy: &Policy) -> SchemaResult {
        schema()
    }

    /// Asks a pi started for the purpose (no session) which models and commands it has.
    async fn probe(&self) -> Result<ProbeResult, AgentError> {
        let cwd = self.options.data_dir.join("probe");
        std::fs::create_dir_all(&cwd).map_err(|e| AgentError::Failed(format!("{}: {e}", cwd.display())))?;
        let launch = ChildCommand::new(&self.options.command)
            .args(["--mode", "rpc", "--no-session"])
            .cwd(cwd)
            .envs(self.options.pi_env());
        let (pi, _records) = PiProcess::spawn(&launch).map_err(|e| AgentError::Failed(e.to_string()))?;
        let within = self.options.ready_timeout;
        let models = pi.request_within(json!({"type": "get_available_models"}), within).await;
        let commands = pi.request_within(json!({"type": "get_commands"}), Duration::from_secs(10)).await;
        pi.stop().await;
        let models = models.map_err(|e| AgentError::Failed(format!("pi could not list its models: {e}")))?;
        let models = models
            .data
            .as_ref()
            .and_then(|d| d["models"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| models::model_info(&self.provider, m))
            .collect();
        let mut commands: Vec<SlashCommand> = commands
            .ok()
            .and_then(|a| a.data)
            .and_then(|d| d["commands"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| {
                let name = c["name"].as_str()?.to_owned();
                let description = c["description"].as_str().map(str::to_owned);
                Some(SlashCommand { name, description })
            })
            .collect();
        commands.push(SlashCommand {
            name: "compact".into(),
            description: Some("Summarise the conversation so far".into()),
        });
        Ok(ProbeResult { models, commands, account: None, attachments: None, capabilities: None })
    }

    async fn list(&self) -> Result<Vec<Listed>, AgentError> {
        let (catalogue, summaries) = (self.options.catalogue(), self.summaries.clone());
        let listing = move || catalogue.list(&mut lock(&summaries));
        Ok(tokio::task::spawn_blocking(listing).await.unwrap_or_default())
    }

    async fn find(&self, id: &str, at: &At) -> Result<Option<Listed>, AgentError> {
        let (catalogue, id, at) = (self.options.catalogue(), id.to_owned(), at.clone());
        Ok(tokio::task::spawn_blocking(move || catalogue.find(&id, &at)).await.unwrap_or_default())
    }

    async fn transcript(
        &self,
        id: &str,
        at: &At,
        kept: &[protocol::KeptResource],
    ) -> Result<Option<Vec<Turn>>, AgentError> {
        let Some(file) = self.options.catalogue().locate(id, at) else { return Ok(None) };
        transcript::read_transcript(&file, kept).map_err(|e| AgentError::Failed(e.to_string()))
    }

    /// pi, and so everything its tools run, starts through the session's box.
    fn confines(&self) -> bool {
        true
    }

    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError> {
        let session = PiSession::start(self.options.clone(), start, host).await?;
        Ok(Arc::new(session))
    }
}

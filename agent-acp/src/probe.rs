//! The startup probe: what an ACP agent offers - its modes, config options, models and slash
//! commands - asked of a short-lived session of its own before anybody opens one, since ACP names
//! them only on `session/new`. One agent process, started when the parent first asks
//! `agent/probe` (in the background, after the worker is ready), bounded by the agent's start
//! timeout plus a short wait for its commands, and stopped whatever happens.

use std::path::Path;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionUpdate, AGENT_METHOD_NAMES};
use protocol::{AttachmentSupport, SlashCommand};

use crate::config::Offers;
use crate::handshake::Caps;
use crate::options::AcpOptions;
use crate::visit::Visit;

/// How long after `session/new` answered the probe waits for the agent's commands (agents send
/// `available_commands_update` on their own time; one that names none is not waited for longer).
pub const COMMANDS_GRACE: Duration = Duration::from_secs(10);

/// What the probe found.
#[derive(Debug, Clone)]
pub struct Found {
    /// What `session/new` answered: modes, config options, models.
    pub offers: Offers,
    /// The commands it named within [`COMMANDS_GRACE`], if it named any.
    pub commands: Option<Vec<SlashCommand>>,
    /// What its prompts take beside text.
    pub attachments: AttachmentSupport,
    /// It lists the sessions it keeps (`sessionCapabilities.list`).
    pub lists: bool,
    /// It takes a conversation up again (`loadSession`), so a chat of it forks.
    pub loads: bool,
}

/// The commands of an `available_commands_update`, as the probe and sessions keep them.
pub fn commands_of(update: &acp::AvailableCommandsUpdate) -> Vec<SlashCommand> {
    update
        .available_commands
        .iter()
        .map(|c| SlashCommand { name: c.name.clone(), description: Some(c.description.clone()) })
        .collect()
}

/// Opens a session of the agent in `folder` with no MCP servers, reads what it offers, and stops
/// the agent. The error is a sentence naming the provider.
pub async fn probe(provider: &str, options: &AcpOptions, folder: &Path) -> Result<Found, String> {
    let mut visit = Visit::start(provider, options, folder, "asking what this agent offers")?;
    let deadline = options.start_timeout + COMMANDS_GRACE;
    let asked = async {
        let init = visit.initialize().await?;
        let new = acp::NewSessionRequest::new(folder.to_path_buf());
        let answer = visit.ask_value(AGENT_METHOD_NAMES.session_new, new).await?;
        let commands = tokio::time::timeout(COMMANDS_GRACE, async {
            while let Some(notification) = visit.updates.recv().await {
                if let SessionUpdate::AvailableCommandsUpdate(update) = &notification.update {
                    return Some(commands_of(update));
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let lists = init.agent_capabilities.session_capabilities.list.is_some();
        Ok::<_, String>(Found {
            offers: Offers::from_answer(&answer),
            commands,
            attachments: Caps::from_answer(&init).attachments(),
            lists,
            loads: init.agent_capabilities.load_session,
        })
    };
    let found = match tokio::time::timeout(deadline, asked).await {
        Ok(found) => found,
        Err(_) => Err(format!(
            "{provider}: {} did not say what it offers within {} s, so it was stopped",
            options.command_line(),
            deadline.as_secs_f64()
        )),
    };
    visit.stop().await;
    found
}

//! The startup probe: what an ACP agent offers - its modes, config options, models and slash
//! commands - asked of a short-lived session of its own before anybody opens one, since ACP names
//! them only on `session/new`. One agent process, started when the parent first asks
//! `agent/probe` (in the background, after the worker is ready), bounded by the agent's start
//! timeout plus a short wait for its commands, and stopped whatever happens.

use std::path::Path;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{SessionUpdate, AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES};
use agent_runner::child::ChildCommand;
use agent_runner::rpc::{Incoming, Peer, Request};
use protocol::{codes, AttachmentSupport, RpcError, SlashCommand};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::Offers;
use crate::options::AcpOptions;
use crate::session::{initialize_request, Caps, ACP_VERSION, EXIT_GRACE};

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
    let process_cwd = options.cwd.clone().unwrap_or_else(|| folder.to_path_buf());
    let (process, mut pipes) = ChildCommand::new(&options.command)
        .args(&options.args)
        .envs(&options.env)
        .cwd(&process_cwd)
        .end_group_with_leader()
        .spawn()
        .map_err(|e| format!("{provider}: {e}"))?;
    let stdin = pipes.take_stdin().map_err(|e| format!("{provider}: {e}"))?;
    let (commands_tx, mut commands_rx) = mpsc::unbounded_channel();
    let peer = Peer::start_foreign(pipes.stdout, stdin, move |message| match message {
        Incoming::Notification { method, params } if method == CLIENT_METHOD_NAMES.session_update => {
            if let Ok(acp::SessionNotification { update: SessionUpdate::AvailableCommandsUpdate(update), .. }) =
                acp::SessionNotification::deserialize(&params)
            {
                let _ = commands_tx.send(commands_of(&update));
            }
        }
        Incoming::Notification { .. } => {}
        // The probe's session does nothing: it reads no file and asks nobody.
        Incoming::Request(Request { method, responder, .. }) => responder.respond(Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("ahpd is only asking what this agent offers, and does not answer {method}"),
        ))),
    });
    let deadline = options.start_timeout + COMMANDS_GRACE;
    let asked = async {
        let (offers, attachments) = open(provider, options, &peer, folder).await?;
        let commands = tokio::time::timeout(COMMANDS_GRACE, commands_rx.recv()).await.ok().flatten();
        Ok::<_, String>(Found { offers, commands, attachments })
    };
    let found = match tokio::time::timeout(deadline, asked).await {
        Ok(found) => found,
        Err(_) => Err(format!(
            "{provider}: {} did not say what it offers within {} s, so it was stopped",
            options.command_line(),
            deadline.as_secs_f64()
        )),
    };
    peer.close_output();
    process.stop(EXIT_GRACE).await;
    peer.end();
    found
}

/// `initialize`, an optional `authenticate`, then `session/new`: what it offers and takes.
async fn open(
    provider: &str,
    options: &AcpOptions,
    peer: &Peer,
    folder: &Path,
) -> Result<(Offers, AttachmentSupport), String> {
    let init: acp::InitializeResponse =
        ask(provider, options, peer, AGENT_METHOD_NAMES.initialize, initialize_request())
            .await
            .and_then(|v| read(provider, options, AGENT_METHOD_NAMES.initialize, v))?;
    if init.protocol_version != ACP_VERSION {
        return Err(format!(
            "{provider}: {} speaks ACP version {}, and this host speaks {ACP_VERSION}",
            options.command_line(),
            init.protocol_version
        ));
    }
    let caps = Caps::from_answer(&init);
    if let Some(auth) = &options.authenticate {
        let request = acp::AuthenticateRequest::new(auth.method_id.clone());
        ask(provider, options, peer, AGENT_METHOD_NAMES.authenticate, request).await?;
    }
    let new = acp::NewSessionRequest::new(folder.to_path_buf());
    let answer = ask(provider, options, peer, AGENT_METHOD_NAMES.session_new, new).await?;
    Ok((Offers::from_answer(&answer), caps.attachments()))
}

async fn ask(
    provider: &str,
    options: &AcpOptions,
    peer: &Peer,
    method: &str,
    params: impl serde::Serialize,
) -> Result<Value, String> {
    peer.request_value(method, params)
        .await
        .map_err(|e| format!("{provider}: {} did not answer {method}: {e}", options.command_line()))
}

fn read<R: DeserializeOwned>(provider: &str, options: &AcpOptions, method: &str, answer: Value) -> Result<R, String> {
    serde_json::from_value(answer)
        .map_err(|why| format!("{provider}: {} answered {method} oddly: {why}", options.command_line()))
}

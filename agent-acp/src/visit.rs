//! A short-lived agent process the worker asks something of outside any conversation (what it
//! offers, the sessions it keeps, one of them read back): started in a folder of the worker's,
//! `initialize`d (and `authenticate`d when configured), asked, and stopped whatever happens. It
//! serves nobody: a request from the agent is answered "method not found", and the `session/update`s
//! it sends are handed to whoever asked.

use std::path::Path;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::v1::{AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES};
use agent_runner::child::{Child, ChildCommand};
use agent_runner::rpc::{Incoming, Peer, Request};
use protocol::{codes, RpcError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::handshake::{initialize_request, ACP_VERSION, EXIT_GRACE};
use crate::options::AcpOptions;

/// One short-lived agent process.
pub struct Visit<'a> {
    provider: &'a str,
    options: &'a AcpOptions,
    process: Child,
    peer: Peer,
    /// What the agent said on `session/update`, in order.
    pub updates: mpsc::UnboundedReceiver<acp::SessionNotification>,
}

impl<'a> Visit<'a> {
    /// Starts the agent in `folder` (or the entry's `cwd`). The error is a sentence naming the
    /// provider.
    pub fn start(provider: &'a str, options: &'a AcpOptions, folder: &Path, why: &'static str) -> Result<Self, String> {
        let process_cwd = options.cwd.clone().unwrap_or_else(|| folder.to_path_buf());
        let (process, mut pipes) = ChildCommand::new(&options.command)
            .args(&options.args)
            .envs(&options.env)
            .cwd(&process_cwd)
            .end_group_with_leader()
            .spawn()
            .map_err(|e| format!("{provider}: {e}"))?;
        let stdin = pipes.take_stdin().map_err(|e| format!("{provider}: {e}"))?;
        let (updates_tx, updates) = mpsc::unbounded_channel();
        let peer = Peer::start_foreign(pipes.stdout, stdin, move |message| match message {
            Incoming::Notification { method, params } if method == CLIENT_METHOD_NAMES.session_update => {
                if let Ok(notification) = acp::SessionNotification::deserialize(&params) {
                    let _ = updates_tx.send(notification);
                }
            }
            Incoming::Notification { .. } => {}
            Incoming::Request(Request { method, responder, .. }) => responder.respond(Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("ahpd is only {why}, and does not answer {method}"),
            ))),
        });
        Ok(Self { provider, options, process, peer, updates })
    }

    /// `initialize` (refusing another protocol version), then `authenticate` when configured.
    pub async fn initialize(&self) -> Result<acp::InitializeResponse, String> {
        let init: acp::InitializeResponse = self.ask(AGENT_METHOD_NAMES.initialize, initialize_request()).await?;
        if init.protocol_version != ACP_VERSION {
            return Err(format!(
                "{}: {} speaks ACP version {}, and this host speaks {ACP_VERSION}",
                self.provider,
                self.options.command_line(),
                init.protocol_version
            ));
        }
        if let Some(auth) = &self.options.authenticate {
            let request = acp::AuthenticateRequest::new(auth.method_id.clone());
            self.ask_value(AGENT_METHOD_NAMES.authenticate, request).await?;
        }
        Ok(init)
    }

    /// Asks `method` and reads the answer as `R`; the error is a sentence.
    pub async fn ask<R: DeserializeOwned>(&self, method: &str, params: impl serde::Serialize) -> Result<R, String> {
        let answer = self.ask_value(method, params).await?;
        serde_json::from_value(answer)
            .map_err(|why| format!("{}: {} answered {method} oddly: {why}", self.provider, self.options.command_line()))
    }

    /// Asks `method`; the error is a sentence.
    pub async fn ask_value(&self, method: &str, params: impl serde::Serialize) -> Result<Value, String> {
        self.peer
            .request_value(method, params)
            .await
            .map_err(|e| format!("{}: {} did not answer {method}: {e}", self.provider, self.options.command_line()))
    }

    /// Stops the agent: its stdin closed, then its process group signalled.
    pub async fn stop(self) {
        self.peer.close_output();
        self.process.stop(EXIT_GRACE).await;
        self.peer.end();
    }
}

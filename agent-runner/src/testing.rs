//! A stand-in parent for testing one worker without the daemon (feature `testing`).
//!
//! [`TestParent`] speaks the parent's half of the worker protocol to a worker (a child process or
//! an agent served in process), says each turn's start the way the host does, folds every emitted
//! chat action through the official AHP reducer, and answers `tool/run` with a closure. Backend
//! crates use it for worker-level tests; the end-to-end tests go through `ahpd` itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::reducers::{apply_action_to_chat, ReduceOutcome};
use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{ChatState, Message, MessageKind, MessageOrigin, Turn};
use protocol::methods::{parent, worker};
use protocol::{
    AbortParams, AnswerParams, ConfirmParams, CreateParams, CreateResult, EmitChannel, EmitParams, InitializeParams,
    InitializeResult, PeerInfo, SendMessageParams, Start, ToolOutcome, ToolRunParams, WORKER_PROTOCOL_VERSION,
};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::rpc::{Incoming, Peer, PeerError};
use crate::runtime::{serve, AgentFactory};
use crate::sync::lock;
use crate::turn::now_iso;

/// Answers a `tool/run` the worker asks.
pub type ToolHandler = Arc<dyn Fn(ToolRunParams) -> ToolOutcome + Send + Sync>;

/// One thing the worker said.
#[derive(Debug, Clone)]
pub enum Said {
    /// An action, with how the chat reducer took it.
    Action { chat: String, channel: EmitChannel, action: StateAction, outcome: Option<ReduceOutcome> },
    /// A `turn/recorded`.
    TurnRecorded { chat: String, turn_id: String, transcript_id: String },
}

/// The parent's half of the worker protocol, for tests.
pub struct TestParent {
    peer: Peer,
    said: mpsc::UnboundedReceiver<Said>,
    chats: Arc<Mutex<HashMap<String, ChatState>>>,
    child: Option<crate::child::Child>,
}

/// An empty chat state, as the host creates one.
pub fn empty_chat(uri: &str) -> ChatState {
    ChatState {
        resource: uri.to_owned(),
        title: String::new(),
        status: 1,
        activity: None,
        modified_at: now_iso(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

/// A user message with `text`.
pub fn user_message(text: &str) -> Message {
    Message {
        text: text.to_owned(),
        origin: MessageOrigin { kind: MessageKind::User },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

/// A start for `chat` with defaults a test can adjust.
pub fn start(session: &str, chat: &str) -> Start {
    Start {
        session: session.to_owned(),
        chat: chat.to_owned(),
        conversation_id: chat.rsplit('/').next().unwrap_or(chat).to_owned(),
        resume: false,
        working_directory: None,
        additional_directories: Vec::new(),
        settings: JsonObject::new(),
        model: None,
        tools: Vec::new(),
        tools_endpoint: None,
        mcp_servers: None,
        instructions: Vec::new(),
        client_tool_timeout_ms: 600_000,
        policy: Default::default(),
        cut: None,
        terminal_outputs: false,
        resource_limit_bytes: None,
        confined: None,
    }
}

/// Why a wait on the worker gave up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WaitError {
    /// The worker emitted an action the official reducer refused.
    #[error("an action the reducer found invalid: {0}")]
    Invalid(String),
    /// What was waited for did not come in time.
    #[error("{what} did not come within {within:?}")]
    TimedOut {
        /// What was waited for.
        what: &'static str,
        /// How long.
        within: Duration,
    },
}

impl TestParent {
    /// Serves `factory` in process over a pipe, exactly as a child would be served.
    pub fn in_process(factory: AgentFactory, tools: ToolHandler) -> Self {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (their_read, their_write) = tokio::io::split(theirs);
        tokio::spawn(async move {
            if let Err(e) = serve(factory, their_read, their_write).await {
                tracing::warn!(error = %e, "the in-process worker stopped");
            }
        });
        let (read, write) = tokio::io::split(ours);
        Self::over(read, write, tools, None)
    }

    /// Spawns a worker process (the program, arguments, environment and folder `command` names)
    /// through the child guard, and speaks to it over its stdio.
    pub fn spawn(command: tokio::process::Command, tools: ToolHandler) -> std::io::Result<Self> {
        let command = crate::child::ChildCommand::from(command.as_std()).log_stderr("worker", tracing::Level::DEBUG);
        let (child, mut pipes) = command.spawn().map_err(std::io::Error::other)?;
        let stdin = pipes.take_stdin().map_err(std::io::Error::other)?;
        Ok(Self::over(pipes.stdout, stdin, tools, Some(child)))
    }

    fn over<R, W>(read: R, write: W, tools: ToolHandler, child: Option<crate::child::Child>) -> Self
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let io = Peer::start(read, write);
        let chats: Arc<Mutex<HashMap<String, ChatState>>> = Arc::new(Mutex::new(HashMap::new()));
        let (said_tx, said_rx) = mpsc::unbounded_channel();
        let mut incoming = io.incoming;
        let fold = chats.clone();
        tokio::spawn(async move {
            while let Some(message) = incoming.recv().await {
                match message {
                    Incoming::Notification { method, params } if method == worker::EMIT => {
                        let Ok(emit) = serde_json::from_value::<EmitParams>(params) else {
                            continue;
                        };
                        let outcome = match emit.channel {
                            EmitChannel::Chat => {
                                lock(&fold).get_mut(&emit.chat).map(|c| apply_action_to_chat(c, &emit.action))
                            }
                            EmitChannel::Session => None,
                        };
                        let _ = said_tx.send(Said::Action {
                            chat: emit.chat,
                            channel: emit.channel,
                            action: emit.action,
                            outcome,
                        });
                    }
                    Incoming::Notification { method, params } if method == worker::TURN_RECORDED => {
                        let chat = params["chat"].as_str().unwrap_or_default().to_owned();
                        let turn_id = params["turnId"].as_str().unwrap_or_default().to_owned();
                        let transcript_id = params["transcriptId"].as_str().unwrap_or_default().to_owned();
                        let _ = said_tx.send(Said::TurnRecorded { chat, turn_id, transcript_id });
                    }
                    Incoming::Notification { .. } => {}
                    Incoming::Request(request) if request.method == worker::TOOL_RUN => {
                        match serde_json::from_value::<ToolRunParams>(request.params) {
                            Ok(call) => request.responder.ok(tools(call)),
                            Err(e) => request
                                .responder
                                .err(protocol::RpcError::new(protocol::codes::INVALID_PARAMS, e.to_string())),
                        }
                    }
                    Incoming::Request(request) => {
                        request.responder.ok(Value::Null);
                    }
                }
            }
        });
        Self { peer: io.peer, said: said_rx, chats, child }
    }

    /// The peer, for requests this harness has no helper for.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The worker's pid, when it is a child process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| u32::try_from(c.pid()).ok())
    }

    /// The handshake.
    pub async fn initialize(
        &self,
        provider: &str,
        kind: &str,
        options: JsonObject,
        data_dir: Option<String>,
    ) -> Result<InitializeResult, PeerError> {
        let params = InitializeParams {
            protocol_version: WORKER_PROTOCOL_VERSION,
            provider: provider.to_owned(),
            kind: kind.to_owned(),
            options,
            data_dir,
            host: PeerInfo { name: "test-parent".into(), version: "0".into() },
        };
        self.peer.request(parent::INITIALIZE, params).await
    }

    /// Starts a conversation and begins folding its chat channel.
    pub async fn create(&self, start: Start) -> Result<CreateResult, PeerError> {
        lock(&self.chats).insert(start.chat.clone(), empty_chat(&start.chat));
        self.peer.request(parent::CREATE, CreateParams { start }).await
    }

    /// Says a turn's start (as the host does) and hands the worker its prompt.
    pub async fn send(&self, chat: &str, turn_id: &str, text: &str) -> Result<(), PeerError> {
        self.send_as(chat, turn_id, text, false).await
    }

    /// As [`TestParent::send`], for a turn nobody watches when `unattended`.
    pub async fn send_as(&self, chat: &str, turn_id: &str, text: &str, unattended: bool) -> Result<(), PeerError> {
        let message = user_message(text);
        let started = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.to_owned(),
            started_at: now_iso(),
            message: message.clone(),
            queued_message_id: None,
            meta: None,
        });
        if let Some(state) = lock(&self.chats).get_mut(chat) {
            apply_action_to_chat(state, &started);
        }
        let params = SendMessageParams {
            chat: chat.to_owned(),
            turn_id: turn_id.to_owned(),
            message,
            instructions: None,
            unattended,
            attachments: Vec::new(),
        };
        self.peer.request_value(parent::SEND_MESSAGE, params).await.map(|_| ())
    }

    /// Applies a client's action to the folded chat (a confirmation, an answer) as the host would.
    pub fn apply_client_action(&self, chat: &str, action: &StateAction) -> Option<ReduceOutcome> {
        lock(&self.chats).get_mut(chat).map(|c| apply_action_to_chat(c, action))
    }

    /// Hands a confirmation to the worker.
    pub async fn confirm(&self, params: ConfirmParams) -> Result<Value, PeerError> {
        self.peer.request_value(parent::CONFIRM, params).await
    }

    /// Hands an answer to the worker.
    pub async fn answer(&self, params: AnswerParams) -> Result<Value, PeerError> {
        self.peer.request_value(parent::ANSWER, params).await
    }

    /// Aborts the running turn.
    pub async fn abort(&self, chat: &str, turn_id: Option<&str>) -> Result<Value, PeerError> {
        self.peer
            .request_value(parent::ABORT, AbortParams { chat: chat.to_owned(), turn_id: turn_id.map(str::to_owned) })
            .await
    }

    /// The folded state of a chat.
    pub fn chat(&self, chat: &str) -> Option<ChatState> {
        lock(&self.chats).get(chat).cloned()
    }

    /// The next thing the worker said, waiting at most `within`.
    pub async fn next(&mut self, within: Duration) -> Option<Said> {
        tokio::time::timeout(within, self.said.recv()).await.ok().flatten()
    }

    /// Waits until `chat` has no running turn and answers its last turn (folded), failing after
    /// `within`. Every action on the way is checked to have applied to the chat state.
    pub async fn until_idle(&mut self, chat: &str, within: Duration) -> Result<Turn, WaitError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(state) = self.chat(chat) {
                if state.active_turn.is_none() {
                    if let Some(turn) = state.turns.last() {
                        return Ok(turn.clone());
                    }
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(Said::Action { outcome: Some(ReduceOutcome::Invalid(e)), action, .. }) => {
                    return Err(WaitError::Invalid(format!("{e:?} {action:?}")))
                }
                Some(_) => {}
                None => return Err(WaitError::TimedOut { what: "the turn's end", within }),
            }
        }
    }

    /// Waits until `predicate` holds on the folded chat.
    pub async fn until(
        &mut self,
        chat: &str,
        within: Duration,
        predicate: impl Fn(&ChatState) -> bool,
    ) -> Result<ChatState, WaitError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(state) = self.chat(chat) {
                if predicate(&state) {
                    return Ok(state);
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if self.next(left).await.is_none() {
                return Err(WaitError::TimedOut { what: "the condition", within });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{ResponsePart, TurnState};

    fn no_tools() -> ToolHandler {
        Arc::new(|call| ToolOutcome::failed(format!("no tool {}", call.name)))
    }

    #[tokio::test]
    async fn echo_streams_a_turn_that_folds() {
        let factory = crate::builtin_factory("echo").expect("echo");
        let mut parent = TestParent::in_process(factory, no_tools());
        let mut options = JsonObject::new();
        options.insert("paceMs".into(), Value::from(0));
        let init = parent.initialize("echo", "echo", options, None).await.expect("handshake");
        assert_eq!(init.agent.provider, "echo");
        let mut s = start("ahp-session:/s", "ahp-chat:/c");
        s.settings.insert("voice".into(), Value::from("shouty"));
        parent.create(s).await.expect("create");
        parent.send("ahp-chat:/c", "t1", "hello there world").await.expect("send");
        let turn = parent.until_idle("ahp-chat:/c", Duration::from_secs(5)).await.expect("turn ends");
        assert_eq!(turn.state, TurnState::Complete);
        let text: String = turn
            .response_parts
            .iter()
            .filter_map(|p| match p {
                ResponsePart::Markdown(m) => Some(m.content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "HELLO THERE WORLD");
    }
}

//! One task per chat that hands its operations to the backend's worker, in order.
//!
//! The host decides under its lock what a chat's backend must be told and queues it here; the
//! driver waits for the worker (which may be starting again after a crash), creates the chat's
//! backend session in the current worker (resuming it when the backend had it), and sends each
//! operation, taking the answer back to the host.

use std::time::Duration;

use ahp_types::actions::{SessionCreationFailedAction, SessionReadyAction, StateAction};
use ahp_types::state::{ErrorInfo, Message};
use protocol::methods::parent;
use protocol::{
    AnswerParams, ConfirmParams, CreateParams, CreateResult, Handled, SetConfigResult, SteerResult, ToolSpec,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::Millis;
use crate::supervisor::WorkerHandle;

use super::Host;

/// What an unattended turn (nobody watches it: a wakeup's) is told beside its prompt.
pub const UNATTENDED: &str = "Nobody is watching this run, so nobody can answer a question: do not ask one. Where a \
choice is unclear, make the choice you judge best, say which and why, and carry on.";

/// How long one request to a worker may take before the host gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a new session may stay `creating`, on the host's clock: a worker that does not
/// answer (stopped, hung) fails it with a sentence rather than leave it creating with no word.
pub const CREATE_WITHIN: Duration = REQUEST_TIMEOUT;

/// Something a chat's backend must be told.
#[derive(Debug)]
pub enum Op {
    /// Make sure the backend holds the conversation. `announce_by`, for a session's first start:
    /// say `session/ready` after it, or `session/creationFailed` when it fails or is not done by
    /// then (the host's clock, [`CREATE_WITHIN`] after the session was made).
    Ensure { announce_by: Option<Millis> },
    /// A turn's prompt (the host said its start already); `unattended` when nobody watches it;
    /// `client` sent it, when a client did.
    Send { turn_id: String, message: Message, unattended: bool, client: Option<String> },
    /// A turn the backend lost runs again (the host said so already).
    ResumeTurn { turn_id: String, message: Message, decisions: Vec<protocol::Decision> },
    /// A client stopped a worker (a subagent) a tool call of the running turn started.
    StopWorker { tool_call_id: String },
    /// A client stopped the running turn.
    Abort { turn_id: Option<String> },
    /// A person answered a confirmation.
    Confirm(ConfirmParams),
    /// A person answered a question.
    Answer(AnswerParams),
    /// A steering message for the running turn.
    Steer { turn_id: String, id: String, message: Message },
    /// A client took back a steering message.
    Withdraw { id: String },
    /// The draft changed.
    SetDraft(Option<Message>),
    /// A config key changed.
    SetConfig { key: String, value: Value },
    /// The tools offered changed.
    SetTools(Vec<ToolSpec>),
    /// Close the backend's session for this chat, so the next operation starts it again (resumed)
    /// with what the host holds now — a new working directory.
    Restart,
    /// The chat is going away.
    Close,
    /// The chat's session is unloaded from memory: close the backend's session, then cancel the
    /// token, which the chat's next driver waits on (so its start follows this close).
    Unload(CancellationToken),
    /// Close the backend's session to make room under `maxBackendProcesses`, then cancel the
    /// token, which the chat waiting for the room waits on; the next operation resumes it.
    Park(CancellationToken),
}

/// Starts a chat's driver; operations sent to the answer run in order, once `after` (the last
/// driver of this chat, unloading) is cancelled.
pub fn spawn_driver(
    host: Host,
    chat: String,
    provider: String,
    after: Option<CancellationToken>,
) -> mpsc::UnboundedSender<Op> {
    let (tx, rx) = mpsc::unbounded_channel();
    let driver = Driver { host: host.clone(), chat, provider, live: None };
    host.spawn("chat driver", async move {
        if let Some(previous) = after {
            previous.cancelled().await;
        }
        driver.run(rx).await;
    });
    tx
}

struct Driver {
    host: Host,
    chat: String,
    provider: String,
    live: Option<WorkerHandle>,
}

impl Driver {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Op>) {
        while let Some(op) = rx.recv().await {
            if let Op::Close = op {
                self.close().await;
                return;
            }
            if let Op::Unload(done) = op {
                self.close().await;
                done.cancel();
                return;
            }
            if let Op::Restart = op {
                self.restart().await;
                continue;
            }
            if let Op::Park(done) = op {
                self.restart().await;
                self.host.parked(&self.chat);
                done.cancel();
                continue;
            }
            if let Op::Send { turn_id, .. } = &op {
                // What the turn changes is measured from here, before the backend can touch a file
                // (and a folder let go while its session slept is back before the backend starts).
                let workspaces = self.host.lock().workspaces();
                workspaces.turn_starting(&self.host, &self.chat, turn_id).await;
            }
            let sending = match &op {
                Op::Send { turn_id, .. } => Some(turn_id.clone()),
                _ => None,
            };
            let by = match &op {
                Op::Ensure { announce_by } => *announce_by,
                _ => None,
            };
            match self.ensure_by(by).await {
                Ok(worker) => self.perform(&worker, op).await,
                Err(why) => self.unavailable(op, why),
            }
            if let Some(turn_id) = sending {
                self.host.handed_over(&self.chat, &turn_id);
            }
        }
        self.close().await;
    }

    /// The worker holding this chat's backend session, creating (or resuming) it there first.
    async fn ensure(&mut self) -> Result<WorkerHandle, String> {
        self.ensure_by(None).await
    }

    /// [`Self::ensure`], given up on at `by` on the host's clock when the backend has not started
    /// the chat by then.
    async fn ensure_by(&mut self, by: Option<Millis>) -> Result<WorkerHandle, String> {
        let worker = self
            .host
            .supervisor()
            .worker(&self.provider, self.host.config().worker_wait)
            .await
            .map_err(|e| e.to_string())?;
        if self.live.as_ref().map(|w| w.incarnation) == Some(worker.incarnation) {
            return Ok(worker);
        }
        self.host.wait_for_room(&self.chat).await;
        let start = self.host.start_for(&self.chat, worker.incarnation).ok_or_else(|| "the chat is gone".to_owned())?;
        let clock = self.host.lock().clock().clone();
        let deadline = async {
            match by {
                Some(by) => clock.sleep_until(by).await,
                None => std::future::pending().await,
            }
        };
        let create = worker.peer.request::<_, CreateResult>(parent::CREATE, CreateParams { start });
        // `None`: no answer in time, by the request's own bound or the session's.
        let answer = tokio::select! {
            answer = tokio::time::timeout(REQUEST_TIMEOUT, create) => answer.ok(),
            () = deadline => None,
        };
        match answer {
            Some(Ok(created)) => {
                self.host.created_in_backend(&self.chat, worker.incarnation, created);
                self.live = Some(worker.clone());
                Ok(worker)
            }
            Some(Err(e)) => {
                self.host.lost_backend(&self.chat, worker.incarnation);
                Err(format!("the {} agent could not start this chat: {e}", self.provider))
            }
            None => {
                self.host.lost_backend(&self.chat, worker.incarnation);
                Err(format!(
                    "The {} agent did not start this chat within {} s: its worker does not answer (stopped or hung). Delete this session and make it again once the agent answers.",
                    self.provider,
                    CREATE_WITHIN.as_secs()
                ))
            }
        }
    }

    /// What to do with an operation when no worker can take it.
    fn unavailable(&self, op: Op, why: String) {
        match op {
            Op::Ensure { announce_by: Some(_) } => self.host.creation_finished(&self.chat, Err(why)),
            Op::Send { turn_id, .. } => self.host.send_failed(&self.chat, &turn_id, "sendFailed", why),
            Op::ResumeTurn { turn_id, .. } => self.host.send_failed(&self.chat, &turn_id, "resumeFailed", why),
            Op::Steer { id, .. } => self.host.steering_answered(&self.chat, &id, false),
            other => {
                tracing::warn!(chat = %self.chat, "could not hand {} to the backend: {why}", op_name(&other))
            }
        }
    }

    async fn perform(&mut self, worker: &WorkerHandle, op: Op) {
        let chat = self.chat.clone();
        match op {
            Op::Ensure { announce_by } => {
                if announce_by.is_some() {
                    self.host.creation_finished(&chat, Ok(()));
                }
            }
            Op::Send { turn_id, message, unattended, client } => {
                self.send(worker, turn_id, message, unattended, client).await
            }
            Op::ResumeTurn { turn_id, message, decisions } => {
                if !self.host.is_running(&chat, &turn_id) {
                    return;
                }
                // Read again, as when it was sent: a file gone since is said, not left out.
                let attachments = match self.host.read_attachments(&chat, &message, None).await {
                    Ok(read) => read,
                    Err(why) => return self.host.send_failed(&chat, &turn_id, "attachmentRefused", why),
                };
                let params = protocol::ResumeTurnParams {
                    chat: chat.clone(),
                    turn_id: turn_id.clone(),
                    message,
                    decisions,
                    attachments,
                };
                if let Err(e) = self.call(worker, parent::RESUME_TURN, params).await {
                    let why = format!("The {} agent could not resume the turn: {e}", self.provider);
                    self.host.send_failed(&chat, &turn_id, "resumeFailed", why);
                }
            }
            Op::StopWorker { tool_call_id } => {
                let params = protocol::StopWorkerParams { chat, tool_call_id };
                if let Some(answer) = self.request(worker, parent::STOP_WORKER, params).await {
                    if !serde_json::from_value::<Handled>(answer).is_ok_and(|h| h.handled) {
                        tracing::info!(chat = %self.chat, "the backend had no worker running for that call");
                    }
                }
            }
            Op::Abort { turn_id } => {
                let params = protocol::AbortParams { chat, turn_id };
                self.request(worker, parent::ABORT, params).await;
            }
            Op::Confirm(params) => {
                if let Some(answer) = self.request(worker, parent::CONFIRM, params).await {
                    if !serde_json::from_value::<Handled>(answer).is_ok_and(|h| h.handled) {
                        tracing::warn!(chat = %self.chat, "the backend had no question waiting for that confirmation");
                    }
                }
            }
            Op::Answer(params) => {
                if let Some(answer) = self.request(worker, parent::ANSWER, params).await {
                    if !serde_json::from_value::<Handled>(answer).is_ok_and(|h| h.handled) {
                        tracing::warn!(chat = %self.chat, "the backend was not waiting on that answer");
                    }
                }
            }
            Op::Steer { turn_id, id, message } => {
                let attachments = match self.host.read_attachments(&chat, &message, None).await {
                    Ok(read) => read,
                    Err(why) => {
                        // Not steered in: it runs as the next turn, which fails with the reason.
                        tracing::info!(chat = %self.chat, "a steering message's attachments could not be read: {why}");
                        return self.host.steering_kept_back(&self.chat, &id);
                    }
                };
                let params = protocol::SteerParams { chat, turn_id, id: id.clone(), message, attachments };
                let taken = self
                    .request(worker, parent::STEER, params)
                    .await
                    .and_then(|v| serde_json::from_value::<SteerResult>(v).ok())
                    .is_some_and(|r| r.taken);
                self.host.steering_answered(&self.chat, &id, taken);
            }
            Op::Withdraw { id } => {
                self.request(worker, parent::WITHDRAW_STEERING, protocol::WithdrawSteeringParams { chat, id }).await;
            }
            Op::SetDraft(draft) => {
                self.request(worker, parent::SET_DRAFT, protocol::SetDraftParams { chat, draft }).await;
            }
            Op::SetConfig { key, value } => {
                let params = protocol::SetConfigParams { chat, key: key.clone(), value };
                if let Some(answer) = self.request(worker, parent::SET_CONFIG, params).await {
                    if let Ok(SetConfigResult { accepted: false, refusal }) = serde_json::from_value(answer) {
                        tracing::warn!(chat = %self.chat, key, "the backend did not take a config change: {}", refusal.unwrap_or_default());
                    }
                }
            }
            Op::SetTools(tools) => {
                self.request(worker, parent::SET_TOOLS, protocol::SetToolsParams { chat, tools }).await;
            }
            Op::Close | Op::Restart | Op::Unload(_) | Op::Park(_) => {}
        }
    }

    /// Hands a turn's prompt over: its attachments read, its model and agent first, unless it was
    /// stopped meanwhile.
    async fn send(
        &mut self,
        worker: &WorkerHandle,
        turn_id: String,
        message: Message,
        unattended: bool,
        client: Option<String>,
    ) {
        let chat = self.chat.clone();
        if !self.host.is_running(&chat, &turn_id) {
            // Stopped while the host prepared it: never sent.
            return;
        }
        let attachments = match self.host.read_attachments(&chat, &message, client.as_deref()).await {
            Ok(read) => read,
            Err(why) => return self.host.send_failed(&chat, &turn_id, "attachmentRefused", why),
        };
        if let Some(model) = message.model.clone() {
            let params = protocol::ChangeModelParams { chat: chat.clone(), model: model.clone() };
            if let Err(e) = self.call(worker, parent::CHANGE_MODEL, params).await {
                let why = format!("The {} agent would not take model {}: {e}", self.provider, model.id);
                self.host.send_failed(&chat, &turn_id, "modelSelectionFailed", why);
                return;
            }
        }
        if message.agent.is_some() {
            let params = protocol::ChangeAgentParams { chat: chat.clone(), agent: message.agent.clone() };
            if let Err(e) = self.call(worker, parent::CHANGE_AGENT, params).await {
                tracing::warn!(chat, "the backend would not change agent: {e}");
            }
        }
        if !self.host.is_running(&chat, &turn_id) {
            return;
        }
        // An unattended turn is told up front that nobody can answer it (seed 003).
        let instructions = unattended.then(|| UNATTENDED.to_owned());
        let params = protocol::SendMessageParams {
            chat: chat.clone(),
            turn_id: turn_id.clone(),
            message,
            instructions,
            unattended,
            attachments,
        };
        let mut sent = self.call(worker, parent::SEND_MESSAGE, &params).await;
        if sent.is_err() && worker.peer.is_ended() && self.host.has_said_nothing(&chat, &turn_id) {
            // The worker died before it took the prompt (killed while idle, a moment before the
            // supervisor saw it go): the prompt goes, once, to the worker that replaces it.
            tracing::info!(chat, "the worker ended before it took the prompt; handing it to the next one");
            self.live = None;
            sent = match self.ensure().await {
                Ok(next) => self.call(&next, parent::SEND_MESSAGE, &params).await,
                Err(why) => Err(why),
            };
        }
        if let Err(e) = sent {
            self.host.send_failed(&chat, &turn_id, "sendFailed", e);
        }
    }

    async fn call<P: serde::Serialize>(&self, worker: &WorkerHandle, method: &str, params: P) -> Result<Value, String> {
        match tokio::time::timeout(REQUEST_TIMEOUT, worker.peer.request_value(method, params)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())),
        }
    }

    async fn request<P: serde::Serialize>(&self, worker: &WorkerHandle, method: &str, params: P) -> Option<Value> {
        match self.call(worker, method, params).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(chat = %self.chat, method, "the backend failed: {e}");
                None
            }
        }
    }

    /// Closes the backend's session and forgets it; the next operation creates it again.
    async fn restart(&mut self) {
        let Some(worker) = self.live.clone() else { return };
        self.close().await;
        self.host.lost_backend(&self.chat, worker.incarnation);
    }

    async fn close(&mut self) {
        if let Some(worker) = self.live.take() {
            let params = protocol::ChatRef { chat: self.chat.clone() };
            let _ =
                tokio::time::timeout(Duration::from_secs(5), worker.peer.request_value(parent::CLOSE, params)).await;
        }
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Ensure { .. } => "the chat's start",
        Op::Send { .. } => "a prompt",
        Op::ResumeTurn { .. } => "a resumed turn",
        Op::StopWorker { .. } => "a worker's stop",
        Op::Abort { .. } => "a stop",
        Op::Confirm(_) => "a confirmation",
        Op::Answer(_) => "an answer",
        Op::Steer { .. } => "a steering message",
        Op::Withdraw { .. } => "a withdrawn steering message",
        Op::SetDraft(_) => "a draft",
        Op::SetConfig { .. } => "a config change",
        Op::SetTools(_) => "the tools",
        Op::Restart => "a restart",
        Op::Close => "the close",
        Op::Unload(_) => "the unload",
        Op::Park(_) => "a close for the process budget",
    }
}

impl Host {
    /// The start for a chat's backend session in worker `incarnation`; the chat counts as living
    /// there from now on, so what the worker says during creation is taken.
    pub(super) fn start_for(&self, chat: &str, incarnation: u64) -> Option<protocol::Start> {
        let mut core = self.lock();
        core.budget_settled(chat);
        let meta = core.chats.get_mut(chat)?;
        meta.live = Some(incarnation);
        let (session, conversation_id, resume, cut) =
            (meta.session.clone(), meta.conversation_id.clone(), meta.started_in_backend, meta.cut.clone());
        let own = meta.harness.as_ref().map(|h| h.settings.clone());
        let working_directory = core.chat_folder(chat).map(|p| p.display().to_string());
        let mut settings = own.unwrap_or_else(|| {
            core.ch.sessions.get(&session).and_then(|s| s.config.as_ref().map(|c| c.values.clone())).unwrap_or_default()
        });
        // The host's own settings (isolation, …) are not the backend's.
        settings.retain(|key, _| !core.workspaces.owns_setting(key));
        let session_uri = session.clone();
        let confined = core.open_box(&session_uri);
        Some(protocol::Start {
            session,
            chat: chat.to_owned(),
            conversation_id,
            resume,
            working_directory,
            additional_directories: Vec::new(),
            settings,
            model: None,
            tools: core.tool_specs(&session_uri),
            // The host's own tools as one MCP server, unless its plugin says they are not taken.
            tools_endpoint: if core.takes_host_tools(&session_uri) { core.endpoints.open(&session_uri) } else { None },
            // The deployment's servers, less those a client stopped in this session.
            mcp_servers: core.mcp_servers_for(&session_uri),
            // The tools' instructions, then the clients' rules (seed 000).
            instructions: [core.tool_instructions(&session_uri), core.client_rule_bodies(&session_uri)].concat(),
            client_tool_timeout_ms: self.config().client_tool_timeout_ms,
            policy: self.config().policy.clone(),
            cut,
            // The store keeps what a tool call printed for every chat it holds.
            terminal_outputs: true,
            // Content a part would carry inline, where this host keeps any.
            resource_limit_bytes: core.resources.as_ref().map(|r| r.limit_bytes()),
            confined,
        })
    }

    pub(super) fn created_in_backend(&self, chat: &str, incarnation: u64, created: CreateResult) {
        let mut core = self.lock();
        if let Some(meta) = core.chats.get_mut(chat) {
            meta.live = Some(incarnation);
            meta.started_in_backend = true;
            meta.resumable = created.resumable;
            if let Some(id) = created.conversation_id {
                meta.conversation_id = id;
            }
            if created.cut_kept {
                meta.cut = None;
            }
        }
        core.persist_chat(chat);
    }

    pub(super) fn lost_backend(&self, chat: &str, incarnation: u64) {
        let mut core = self.lock();
        core.budget_settled(chat);
        if let Some(meta) = core.chats.get_mut(chat) {
            if meta.live == Some(incarnation) {
                meta.live = None;
            }
        }
    }

    /// The session's first backend start finished: `session/ready`, or `session/creationFailed`.
    pub(super) fn creation_finished(&self, chat: &str, result: Result<(), String>) {
        let mut core = self.lock();
        let Some(session) = core.chats.get(chat).map(|m| m.session.clone()) else {
            return;
        };
        let action = match result {
            Ok(()) => StateAction::SessionReady(SessionReadyAction {}),
            Err(why) => StateAction::SessionCreationFailed(SessionCreationFailedAction {
                error: ErrorInfo { error_type: "creationFailed".into(), message: why, stack: None, meta: None },
            }),
        };
        core.apply(&session, action, None, None);
    }

    /// True while `turn_id` is the chat's running turn.
    pub(super) fn is_running(&self, chat: &str, turn_id: &str) -> bool {
        self.lock().ch.chats.get(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == turn_id)
    }

    /// The driver is done handing `turn_id`'s prompt over (taken, failed or never sent): a
    /// worker that dies from now on takes the turn with it.
    pub(super) fn handed_over(&self, chat: &str, turn_id: &str) {
        if let Some(meta) = self.lock().chats.get_mut(chat) {
            if meta.handing_over.as_deref() == Some(turn_id) {
                meta.handing_over = None;
            }
        }
    }

    /// True while `turn_id` runs and the backend has said nothing of it yet.
    pub(super) fn has_said_nothing(&self, chat: &str, turn_id: &str) -> bool {
        let core = self.lock();
        let turn = core.ch.chats.get(chat).and_then(|c| c.active_turn.as_ref());
        turn.is_some_and(|t| t.id == turn_id && t.response_parts.is_empty())
    }

    /// The prompt could not be handed over: the turn ends in error with the reason.
    pub(super) fn send_failed(&self, chat: &str, turn_id: &str, error_type: &str, why: String) {
        let mut core = self.lock();
        core.fail_turn(chat, turn_id, error_type, why);
    }
}

//! The worker's frame loop: handshake, then every parent request routed to the agent or one of its
//! sessions, each in its own task so a slow call never holds up an abort. A worker over stdio also
//! reports the process groups it runs (`process/groups`), and ends them all and leaves the moment
//! its parent is gone (see `parent`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::methods::parent;
use protocol::{
    codes, AbortParams, AnswerParams, ChangeAgentParams, ChangeModelParams, ChatRef, CompletionsParams, ConfigValues,
    ConfirmParams, CreateParams, CreateResult, DirectoriesResult, FindParams, FindResult, Handled, InitializeParams,
    InitializeResult, ListResult, ProcessGroupsParams, ResumeTurnParams, RpcError, SchemaParams, SendMessageParams,
    SetConfigParams, SetDraftParams, SetToolsParams, SettingsResult, SteerParams, SteerResult, StopWorkerParams,
    TranscriptParams, TranscriptResult, WithdrawSteeringParams, WORKER_PROTOCOL_VERSION,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::agent::{Agent, AgentError, Session};
use crate::host::SessionHost;
use crate::rpc::{Incoming, Peer, Request};
use crate::sync::lock;

/// What a worker binary hands the runtime: given the handshake, build the agent.
pub type AgentFactory = Box<dyn FnOnce(&InitializeParams, WorkerContext) -> Result<Arc<dyn Agent>, AgentError> + Send>;

/// What an agent may keep from the handshake to talk to the parent outside any session.
#[derive(Clone)]
pub struct WorkerContext {
    peer: Peer,
}

impl WorkerContext {
    /// Tells the parent that what `probe` answers may have changed.
    pub fn probe_changed(&self) {
        self.peer.notify(protocol::methods::worker::PROBE_CHANGED, serde_json::json!({}));
    }
}

type Sessions = Arc<Mutex<HashMap<String, Arc<dyn Session>>>>;

/// How the frame loop ended.
enum Ending {
    /// The parent asked for `shutdown` and then closed stdin: every session is closed.
    ShutDown,
    /// Stdin ended without a `shutdown`: the parent is gone, or gave up on the worker.
    InputClosed,
}

/// Runs a worker over its stdin and stdout until the parent closes stdin, or is gone. Logs go to
/// stderr. Whatever the worker started and did not stop ends with it.
pub fn run_stdio_worker(factory: AgentFactory) -> std::process::ExitCode {
    init_stderr_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "could not start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            served = serve_frames(factory, tokio::io::stdin(), tokio::io::stdout(), true) => match served {
                Ok(Ending::ShutDown) => Ok(()),
                Ok(Ending::InputClosed) => {
                    tracing::warn!("stdin closed without a shutdown: ending every process this worker started");
                    Ok(())
                }
                Err(e) => Err(e),
            },
            why = crate::parent::gone() => {
                tracing::warn!("{why}: ending every process this worker started");
                Ok(())
            }
        }
    });
    // At once, and before the runtime goes: nothing this worker started outlives it, even in the
    // middle of a turn.
    crate::child::groups::end_all();
    // Sessions may have left helper tasks (a streaming turn that ignored its abort): do not wait.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the worker stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stderr only: stdout carries frames and nothing else. Plain text unless stderr is a
/// terminal: a worker's stderr is the daemon's pipe, whose tail reaches clients in a turn's error.
pub fn init_stderr_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AHPD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}

/// Serves the worker protocol on a pair of streams until the reading side ends, then closes every
/// session (the parent of an in-process worker is the process itself: it is never gone).
pub async fn serve<R, W>(factory: AgentFactory, reader: R, writer: W) -> Result<(), AgentError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_frames(factory, reader, writer, false).await.map(|_| ())
}

/// The frame loop. A worker over stdio (`stdio`) reports its process groups, and when its stdin
/// ends without a `shutdown` returns at once rather than settle its sessions: nobody is left to
/// hear how they end, and its processes are ended with it.
async fn serve_frames<R, W>(factory: AgentFactory, reader: R, writer: W, stdio: bool) -> Result<Ending, AgentError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let io = Peer::start(reader, writer);
    let peer = io.peer.clone();
    let mut incoming = io.incoming;
    let agent = handshake(&peer, &mut incoming, factory).await?;
    if stdio {
        tokio::spawn(report_process_groups(peer.clone()));
    }
    let sessions: Sessions = Arc::new(Mutex::new(HashMap::new()));
    let mut shut_down = false;
    while let Some(message) = incoming.recv().await {
        match message {
            Incoming::Request(request) => {
                if request.method == parent::SHUTDOWN {
                    close_all(&sessions).await;
                    agent.shutdown().await;
                    shut_down = true;
                    request.responder.ok(serde_json::json!({}));
                    continue;
                }
                let (agent, sessions, peer) = (agent.clone(), sessions.clone(), peer.clone());
                tokio::spawn(async move { dispatch(agent, sessions, peer, request).await });
            }
            Incoming::Notification { method, .. } => {
                tracing::debug!(method, "ignoring a notification from the parent");
            }
        }
    }
    if stdio && !shut_down {
        return Ok(Ending::InputClosed);
    }
    // The parent closed our stdin: the graceful stop. Settle everything, then leave.
    close_all(&sessions).await;
    agent.shutdown().await;
    Ok(Ending::ShutDown)
}

/// Tells the parent every process group this worker's processes run in, each time that changes,
/// so it can end them if this worker dies without doing so (and a dead daemon's successor can).
async fn report_process_groups(peer: Peer) {
    let mut changes = crate::child::groups::changes();
    let mut said = Vec::new();
    loop {
        let now = crate::child::groups::recorded();
        if now != said {
            peer.notify(protocol::methods::worker::PROCESS_GROUPS, ProcessGroupsParams { groups: now.clone() });
            said = now;
        }
        changes.changed().await;
    }
}

async fn close_all(sessions: &Sessions) {
    let all: Vec<_> = lock(sessions).drain().map(|(_, s)| s).collect();
    for session in all {
        let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
    }
}

async fn handshake(
    peer: &Peer,
    incoming: &mut tokio::sync::mpsc::UnboundedReceiver<Incoming>,
    factory: AgentFactory,
) -> Result<Arc<dyn Agent>, AgentError> {
    loop {
        let Some(message) = incoming.recv().await else {
            return Err(AgentError::Failed("the parent closed stdin before the handshake".into()));
        };
        let request = match message {
            Incoming::Request(r) => r,
            Incoming::Notification { .. } => continue,
        };
        if request.method != parent::INITIALIZE {
            request.responder.err(RpcError::new(codes::INVALID_REQUEST, "initialize must come first"));
            continue;
        }
        let params: InitializeParams = match serde_json::from_value(request.params) {
            Ok(p) => p,
            Err(e) => {
                request.responder.err(RpcError::new(codes::INVALID_PARAMS, format!("initialize: {e}")));
                continue;
            }
        };
        if params.protocol_version != WORKER_PROTOCOL_VERSION {
            let message = format!(
                "this worker speaks worker protocol {WORKER_PROTOCOL_VERSION}, not {}",
                params.protocol_version
            );
            request.responder.err(RpcError::new(codes::INVALID_PARAMS, message.clone()));
            return Err(AgentError::Failed(message));
        }
        let agent = match factory(&params, WorkerContext { peer: peer.clone() }) {
            Ok(agent) => agent,
            Err(e) => {
                request.responder.err(e.to_rpc());
                return Err(e);
            }
        };
        let mut descriptor = agent.descriptor();
        descriptor.provider = params.provider.clone();
        request.responder.ok(InitializeResult { protocol_version: WORKER_PROTOCOL_VERSION, agent: descriptor });
        return Ok(agent);
    }
}

fn params<T: DeserializeOwned>(value: Value) -> Result<T, RpcError> {
    serde_json::from_value(value).map_err(|e| RpcError::new(codes::INVALID_PARAMS, e.to_string()))
}

fn session_for(sessions: &Sessions, chat: &str) -> Result<Arc<dyn Session>, RpcError> {
    lock(sessions).get(chat).cloned().ok_or_else(|| AgentError::UnknownChat(chat.to_owned()).to_rpc())
}

fn to_value<T: serde::Serialize>(value: T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
}

async fn dispatch(agent: Arc<dyn Agent>, sessions: Sessions, peer: Peer, request: Request) {
    let Request { method, params: raw, responder } = request;
    let result = route(&agent, &sessions, &peer, &method, raw).await;
    responder.respond(result);
}

async fn route(
    agent: &Arc<dyn Agent>,
    sessions: &Sessions,
    peer: &Peer,
    method: &str,
    raw: Value,
) -> Result<Value, RpcError> {
    let fail = |e: AgentError| e.to_rpc();
    match method {
        parent::SCHEMA => {
            let p: SchemaParams = params(raw)?;
            to_value(agent.schema(&p.policy))
        }
        parent::COMPLETIONS => {
            let p: CompletionsParams = params(raw)?;
            to_value(agent.completions(p).await.map_err(fail)?)
        }
        parent::PROBE => to_value(agent.probe().await.map_err(fail)?),
        parent::DIRECTORIES => to_value(DirectoriesResult { directories: agent.directories().await.map_err(fail)? }),
        parent::LIST => to_value(ListResult { sessions: agent.list().await.map_err(fail)? }),
        parent::FIND => {
            let p: FindParams = params(raw)?;
            to_value(FindResult { session: agent.find(&p.id, &p.at).await.map_err(fail)? })
        }
        parent::TRANSCRIPT => {
            let p: TranscriptParams = params(raw)?;
            to_value(TranscriptResult { turns: agent.transcript(&p.id, &p.at, &p.kept).await.map_err(fail)? })
        }
        parent::INHERITED_CHAT_CONFIG => {
            let p: ConfigValues = params(raw)?;
            to_value(ConfigValues { config: agent.inherited_chat_config(&p.config) })
        }
        parent::CREATE => {
            let p: CreateParams = params(raw)?;
            let chat = p.start.chat.clone();
            let host = SessionHost::new(peer.clone(), p.start.session.clone(), chat.clone())
                .keeping_resources(p.start.resource_limit_bytes);
            if let Some(confined) = p.start.confined.as_ref().filter(|_| !agent.confines()) {
                return Err(fail(AgentError::Refused(format!(
                    "This agent cannot run in a {} (its worker does not start what it runs through the box); pick another isolation for it.",
                    confined.level
                ))));
            }
            let session = agent.create(p.start, host).await.map_err(fail)?;
            let conversation_id = session.conversation_id();
            let models = session.models();
            let (cut_kept, resumable) = (session.cut_kept(), session.resumable());
            if let Some(old) = lock(sessions).insert(chat, session) {
                // A chat created twice (the parent resumed it): the old one must not linger.
                tokio::spawn(async move { old.close().await });
            }
            to_value(CreateResult { conversation_id, models, cut_kept, resumable })
        }
        parent::SEND_MESSAGE => {
            let p: SendMessageParams = params(raw)?;
            session_for(sessions, &p.chat)?.send_message(p).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::CHANGE_MODEL => {
            let p: ChangeModelParams = params(raw)?;
            session_for(sessions, &p.chat)?.change_model(p.model).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::CHANGE_AGENT => {
            let p: ChangeAgentParams = params(raw)?;
            session_for(sessions, &p.chat)?.change_agent(p.agent).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::ABORT => {
            let p: AbortParams = params(raw)?;
            session_for(sessions, &p.chat)?.abort(p.turn_id).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::STEER => {
            let p: SteerParams = params(raw)?;
            let taken = session_for(sessions, &p.chat)?.steer(p).await.map_err(fail)?;
            to_value(SteerResult { taken })
        }
        parent::WITHDRAW_STEERING => {
            let p: WithdrawSteeringParams = params(raw)?;
            let handled = session_for(sessions, &p.chat)?.withdraw_steering(p.id).await.map_err(fail)?;
            to_value(Handled { handled })
        }
        parent::SET_DRAFT => {
            let p: SetDraftParams = params(raw)?;
            session_for(sessions, &p.chat)?.set_draft(p.draft).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::CONFIRM => {
            let p: ConfirmParams = params(raw)?;
            let handled = session_for(sessions, &p.chat)?.confirm(p).await.map_err(fail)?;
            to_value(Handled { handled })
        }
        parent::ANSWER => {
            let p: AnswerParams = params(raw)?;
            let handled = session_for(sessions, &p.chat)?.answer(p).await.map_err(fail)?;
            to_value(Handled { handled })
        }
        parent::SET_CONFIG => {
            let p: SetConfigParams = params(raw)?;
            to_value(session_for(sessions, &p.chat)?.set_config(p.key, p.value).await.map_err(fail)?)
        }
        parent::SETTINGS => {
            let p: ChatRef = params(raw)?;
            to_value(SettingsResult { values: session_for(sessions, &p.chat)?.settings().await })
        }
        parent::SET_TOOLS => {
            let p: SetToolsParams = params(raw)?;
            session_for(sessions, &p.chat)?.set_tools(p.tools).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::RESUME_TURN => {
            let p: ResumeTurnParams = params(raw)?;
            session_for(sessions, &p.chat)?.resume_turn(p).await.map_err(fail)?;
            Ok(Value::Null)
        }
        parent::STOP_WORKER => {
            let p: StopWorkerParams = params(raw)?;
            let handled = session_for(sessions, &p.chat)?.stop_worker(p.tool_call_id).await.map_err(fail)?;
            to_value(Handled { handled })
        }
        parent::CLOSE => {
            let p: ChatRef = params(raw)?;
            let session = lock(sessions).remove(&p.chat);
            if let Some(session) = session {
                session.close().await;
            }
            Ok(Value::Null)
        }
        parent::INITIALIZE => Err(RpcError::new(codes::INVALID_REQUEST, "the worker is initialized already")),
        other => Err(RpcError::new(codes::METHOD_NOT_FOUND, format!("this worker does not answer {other}"))),
    }
}

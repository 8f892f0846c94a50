//! The worker supervisor: one worker per configured backend, started, handshaken, watched, and
//! started again with backoff when it dies. What a worker says is handed to the host as
//! [`WorkerEvent`]s; the host never touches a process.
//!
//! **Invariant:** nothing here knows what any backend is; a worker is a program that speaks
//! `docs/workers.md`.

pub mod backoff;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use agent_runner::child::{describe_exit, Child, ChildCommand};
use agent_runner::rpc::{Incoming, Peer, PeerEnd, Responder};
use ahp_types::common::JsonObject;
use protocol::methods::{parent, worker};
use protocol::{
    AgentDescriptor, EmitParams, InitializeParams, InitializeResult, KeepResourceParams, PeerInfo, ProbeResult,
    ProcessGroupsParams, SchemaParams, SchemaResult, SubagentStartedParams, ToolRunParams, TurnRecordedParams,
    WORKER_PROTOCOL_VERSION,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How a worker is run.
#[derive(Debug, Clone)]
pub enum Launch {
    /// A child process.
    Exec {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables over the daemon's own.
        env: BTreeMap<String, String>,
    },
    /// A built-in agent served in the daemon's own process over an in-memory pipe: the same
    /// protocol without the process boundary (the benchmark's baseline).
    InProcess {
        /// `echo` or `notes`.
        kind: String,
    },
}

/// One configured backend.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The provider id clients name.
    pub provider: String,
    /// The backend kind.
    pub kind: String,
    /// How to run it.
    pub launch: Launch,
    /// The entry's options, handed over in `initialize`.
    pub options: JsonObject,
    /// A folder the worker may keep its files in.
    pub data_dir: PathBuf,
    /// How long the handshake may take.
    pub handshake_timeout: Duration,
    /// The operator's policy, handed to every `agent/schema` (seed 004).
    pub policy: protocol::Policy,
}

/// A running worker, as the host uses it.
#[derive(Clone)]
pub struct WorkerHandle {
    /// Which start of the worker this is; actions from an older one are dropped.
    pub incarnation: u64,
    /// Requests go here.
    pub peer: Peer,
    /// What the worker said it is.
    pub descriptor: AgentDescriptor,
}

/// Where a backend's worker is in its life.
#[derive(Clone)]
pub enum SlotState {
    /// Being started.
    Starting,
    /// Running and handshaken.
    Running(WorkerHandle),
    /// Dead; starts again at the instant given.
    Waiting {
        /// What happened to it.
        reason: String,
        /// When the next start is.
        until: Instant,
    },
    /// Stopped for good (the daemon is stopping).
    Stopped,
}

/// What the workers say, for the host.
pub enum WorkerEvent {
    /// A worker finished its handshake.
    Ready { provider: String, incarnation: u64, descriptor: AgentDescriptor, schema: SchemaResult },
    /// What the agent offers (models, commands), and its session config schema when it was asked
    /// again (an agent that said its offer changed may name new controls: an ACP agent names its
    /// modes and options only once a session is open).
    Probed { provider: String, probe: ProbeResult, schema: Option<SchemaResult> },
    /// An action for a channel.
    Emit { provider: String, incarnation: u64, params: EmitParams },
    /// A turn's transcript id.
    TurnRecorded { provider: String, incarnation: u64, params: TurnRecordedParams },
    /// A tool call started a worker with a chat of its own.
    SubagentStarted { provider: String, incarnation: u64, params: SubagentStartedParams },
    /// Run a tool and answer.
    ToolRun { provider: String, incarnation: u64, params: ToolRunParams, responder: Responder },
    /// Keep content a part names by the reference the worker derived (`resource/keep`).
    KeepResource { provider: String, incarnation: u64, params: KeepResourceParams },
    /// Keep an output a tool call printed, as an exited terminal of its chat.
    KeepTerminal { provider: String, incarnation: u64, params: protocol::KeepTerminalParams },
    /// A worker died; its running turns must end.
    Exited { provider: String, incarnation: u64, reason: String },
}

struct Slot {
    spec: WorkerSpec,
    state: watch::Sender<SlotState>,
}

/// Every backend's worker.
#[derive(Clone)]
pub struct Supervisor {
    /// In the config's order (the order clients are offered the agents).
    slots: Arc<Vec<Arc<Slot>>>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    next_incarnation: Arc<std::sync::atomic::AtomicU64>,
}

/// Why a worker cannot be used right now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorkerUnavailable {
    /// No backend by that name.
    #[error("this host offers no agent called {0}")]
    Unknown(String),
    /// It died and waits to be started again.
    #[error("the {provider} worker is not running: {reason}; it will be started again in {seconds} s")]
    Waiting { provider: String, reason: String, seconds: u64 },
    /// It did not come up in time.
    #[error("the {0} worker did not start in time")]
    Timeout(String),
    /// The daemon is stopping.
    #[error("the daemon is stopping")]
    Stopped,
}

impl Supervisor {
    /// A supervisor for `specs`; nothing starts until [`Supervisor::start_all`].
    pub fn new(
        specs: Vec<WorkerSpec>,
        events: mpsc::UnboundedSender<WorkerEvent>,
        cancel: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        let slots = specs
            .into_iter()
            .map(|spec| {
                let (state, _) = watch::channel(SlotState::Starting);
                Arc::new(Slot { spec, state })
            })
            .collect();
        Self {
            slots: Arc::new(slots),
            events,
            cancel,
            tracker,
            next_incarnation: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        }
    }

    fn slot(&self, provider: &str) -> Option<&Arc<Slot>> {
        self.slots.iter().find(|s| s.spec.provider == provider)
    }

    /// The providers, in the config's order.
    pub fn providers(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.spec.provider.clone()).collect()
    }

    /// Starts every worker's life loop.
    pub fn start_all(&self) {
        for slot in self.slots.iter() {
            let (this, slot) = (self.clone(), slot.clone());
            let name = format!("worker {}", slot.spec.provider);
            self.tracker.spawn(async move {
                tracing::debug!(task = %name, "started");
                this.life(slot).await;
            });
        }
    }

    /// Waits until every worker finished its first start (handshaken or failed), at most `within`.
    pub async fn first_starts(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        for slot in self.slots.iter() {
            let mut rx = slot.state.subscribe();
            let _ = tokio::time::timeout_at(deadline, rx.wait_for(|s| !matches!(s, SlotState::Starting))).await;
        }
    }

    /// The running worker for `provider`, waiting up to `within` while it starts (or while it
    /// waits out a backoff that ends within that time).
    pub async fn worker(&self, provider: &str, within: Duration) -> Result<WorkerHandle, WorkerUnavailable> {
        let slot = self.slot(provider).ok_or_else(|| WorkerUnavailable::Unknown(provider.to_owned()))?;
        let deadline = Instant::now() + within;
        let mut rx = slot.state.subscribe();
        loop {
            let state = rx.borrow_and_update().clone();
            let waiting = |reason: &str, until: Instant| WorkerUnavailable::Waiting {
                provider: provider.to_owned(),
                reason: reason.to_owned(),
                seconds: until.saturating_duration_since(Instant::now()).as_secs_f64().ceil() as u64,
            };
            match &state {
                // A worker whose pipe has ended is dead, though the supervisor may not have seen
                // it go yet: wait for the one that replaces it.
                SlotState::Running(handle) if !handle.peer.is_ended() => return Ok(handle.clone()),
                SlotState::Running(_) => {}
                SlotState::Stopped => return Err(WorkerUnavailable::Stopped),
                SlotState::Waiting { reason, until } if *until > deadline => return Err(waiting(reason, *until)),
                SlotState::Waiting { .. } | SlotState::Starting => {}
            }
            match tokio::time::timeout_at(deadline.into(), rx.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return Err(WorkerUnavailable::Stopped),
                Err(_) => {
                    return Err(match state {
                        SlotState::Waiting { reason, until } => waiting(&reason, until),
                        _ => WorkerUnavailable::Timeout(provider.to_owned()),
                    })
                }
            }
        }
    }

    /// The running worker's handle, if it runs now.
    pub fn current(&self, provider: &str) -> Option<WorkerHandle> {
        match &*self.slot(provider)?.state.borrow() {
            SlotState::Running(handle) => Some(handle.clone()),
            _ => None,
        }
    }

    async fn life(&self, slot: Arc<Slot>) {
        let provider = slot.spec.provider.clone();
        let mut failures = 0u32;
        loop {
            if self.cancel.is_cancelled() {
                break;
            }
            slot.state.send_replace(SlotState::Starting);
            let incarnation = self.next_incarnation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let started = Instant::now();
            let reason = match self.run_once(&slot, incarnation).await {
                RunEnd::Stopped => break,
                RunEnd::Died(reason) => reason,
            };
            failures = backoff::next_failures(failures, started.elapsed());
            let delay = backoff::delay(failures - 1);
            tracing::error!(
                "worker {provider} {reason}; starting it again in {:.1} s (failure {failures} in a row)",
                delay.as_secs_f64()
            );
            slot.state.send_replace(SlotState::Waiting { reason, until: Instant::now() + delay });
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        slot.state.send_replace(SlotState::Stopped);
    }

    async fn run_once(&self, slot: &Slot, incarnation: u64) -> RunEnd {
        let spec = &slot.spec;
        let (peer, incoming, mut exit) = match launch(spec) {
            Ok(launched) => launched,
            Err(e) => return RunEnd::Died(e),
        };
        let forwarder = self.forward(spec.provider.clone(), incarnation, incoming, exit.process());
        let handshake = tokio::select! {
            _ = self.cancel.cancelled() => {
                exit.stop(&peer).await;
                return RunEnd::Stopped;
            }
            result = handshake(spec, &peer) => result,
        };
        let (descriptor, schema) = match handshake {
            Ok(ok) => ok,
            Err(why) => {
                // A worker that wrote garbage fails its handshake with "the connection ended":
                // say what really happened.
                let why = if peer.is_ended() {
                    format!("stopped before its handshake because {}", peer.ended().await)
                } else {
                    why
                };
                let status = exit.kill().await;
                forwarder.abort();
                return RunEnd::Died(exit.last_words(format!("{why}; it {status}")));
            }
        };
        let handle = WorkerHandle { incarnation, peer: peer.clone(), descriptor: descriptor.clone() };
        slot.state.send_replace(SlotState::Running(handle));
        let _ = self.events.send(WorkerEvent::Ready {
            provider: spec.provider.clone(),
            incarnation,
            descriptor: descriptor.clone(),
            schema,
        });
        if descriptor.features.probe {
            // With the schema: an agent that learns its controls by probing (ACP) says them then,
            // and what the host remembered from an earlier run stands until it does.
            self.probe(spec.provider.clone(), peer.clone(), Some(spec.policy.clone()));
        }
        tracing::info!("worker {} is ready ({})", spec.provider, descriptor.display_name);
        let ended = tokio::select! {
            _ = self.cancel.cancelled() => None,
            end = peer.ended() => Some(end),
        };
        let reason = match ended {
            None => {
                exit.stop(&peer).await;
                forwarder.abort();
                return RunEnd::Stopped;
            }
            Some(end) => {
                let status = if matches!(end, PeerEnd::Eof) {
                    exit.wait(Duration::from_secs(2)).await
                } else {
                    exit.kill().await
                };
                match end {
                    PeerEnd::Eof => exit.last_words(status),
                    other => exit.last_words(format!("stopped because {other}; it {status}")),
                }
            }
        };
        forwarder.abort();
        let _ = self.events.send(WorkerEvent::Exited {
            provider: spec.provider.clone(),
            incarnation,
            reason: reason.clone(),
        });
        RunEnd::Died(reason)
    }

    /// Asks what the agent offers; with a policy it asks its schema again too (under that
    /// policy), so both reach the host in one event.
    fn probe(&self, provider: String, peer: Peer, schema_under: Option<protocol::Policy>) {
        let events = self.events.clone();
        self.tracker.spawn(async move {
            match tokio::time::timeout(
                Duration::from_secs(60),
                peer.request::<_, ProbeResult>(parent::PROBE, serde_json::json!({})),
            )
            .await
            {
                Ok(Ok(probe)) => {
                    let schema = match schema_under {
                        Some(policy) => schema_again(&provider, &peer, policy).await,
                        None => None,
                    };
                    let _ = events.send(WorkerEvent::Probed { provider, probe, schema });
                }
                Ok(Err(e)) => tracing::warn!("worker {provider} could not say what it offers: {e}"),
                Err(_) => {
                    tracing::warn!("worker {provider} did not say what it offers within 60 s")
                }
            }
        });
    }

    /// Hands what a worker sends to the host, tagged with the worker's incarnation.
    fn forward(
        &self,
        provider: String,
        incarnation: u64,
        mut incoming: mpsc::UnboundedReceiver<Incoming>,
        process: Option<Weak<Child>>,
    ) -> tokio::task::JoinHandle<()> {
        let events = self.events.clone();
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(message) = incoming.recv().await {
                let event = match message {
                    Incoming::Notification { method, params } => match method.as_str() {
                        worker::EMIT => match serde_json::from_value(params) {
                            Ok(params) => WorkerEvent::Emit { provider: provider.clone(), incarnation, params },
                            Err(e) => {
                                tracing::warn!("worker {provider} emitted something that is not an action: {e}");
                                continue;
                            }
                        },
                        worker::TURN_RECORDED => match serde_json::from_value(params) {
                            Ok(params) => WorkerEvent::TurnRecorded { provider: provider.clone(), incarnation, params },
                            Err(e) => {
                                tracing::warn!("worker {provider} sent a bad turn/recorded: {e}");
                                continue;
                            }
                        },
                        worker::SUBAGENT_STARTED => match serde_json::from_value(params) {
                            Ok(params) => {
                                WorkerEvent::SubagentStarted { provider: provider.clone(), incarnation, params }
                            }
                            Err(e) => {
                                tracing::warn!("worker {provider} sent a bad subagent/started: {e}");
                                continue;
                            }
                        },
                        worker::PROCESS_GROUPS => {
                            match serde_json::from_value::<ProcessGroupsParams>(params) {
                                Ok(params) => {
                                    if let Some(process) = process.as_ref().and_then(Weak::upgrade) {
                                        process.reported(params.groups);
                                    }
                                }
                                Err(e) => tracing::warn!("worker {provider} sent a bad process/groups: {e}"),
                            }
                            continue;
                        }
                        worker::TERMINAL_KEEP => match serde_json::from_value(params) {
                            Ok(params) => WorkerEvent::KeepTerminal { provider: provider.clone(), incarnation, params },
                            Err(e) => {
                                tracing::warn!("worker {provider} sent a bad terminal/keep: {e}");
                                continue;
                            }
                        },
                        worker::RESOURCE_KEEP => match serde_json::from_value(params) {
                            Ok(params) => WorkerEvent::KeepResource { provider: provider.clone(), incarnation, params },
                            Err(e) => {
                                tracing::warn!("worker {provider} sent a bad resource/keep: {e}");
                                continue;
                            }
                        },
                        worker::PROBE_CHANGED => {
                            if let (Some(handle), Some(slot)) = (this.current(&provider), this.slot(&provider)) {
                                this.probe(provider.clone(), handle.peer, Some(slot.spec.policy.clone()));
                            }
                            continue;
                        }
                        other => {
                            tracing::debug!("worker {provider} sent a notification this host ignores: {other}");
                            continue;
                        }
                    },
                    Incoming::Request(request) => {
                        let agent_runner::rpc::Request { method, params, responder } = request;
                        match method.as_str() {
                            worker::TOOL_RUN => match serde_json::from_value(params) {
                                Ok(params) => {
                                    WorkerEvent::ToolRun { provider: provider.clone(), incarnation, params, responder }
                                }
                                Err(e) => {
                                    responder
                                        .err(protocol::RpcError::new(protocol::codes::INVALID_PARAMS, e.to_string()));
                                    continue;
                                }
                            },
                            other => {
                                responder.err(protocol::RpcError::new(
                                    protocol::codes::METHOD_NOT_FOUND,
                                    format!("the host does not answer {other}"),
                                ));
                                continue;
                            }
                        }
                    }
                };
                if events.send(event).is_err() {
                    break;
                }
            }
        })
    }
}

/// The worker's schema asked again; `None` (and a log line) when it does not answer.
async fn schema_again(provider: &str, peer: &Peer, policy: protocol::Policy) -> Option<SchemaResult> {
    let asked = peer.request::<_, SchemaResult>(parent::SCHEMA, SchemaParams { policy });
    match tokio::time::timeout(Duration::from_secs(60), asked).await {
        Ok(Ok(schema)) => Some(schema),
        Ok(Err(e)) => {
            tracing::warn!("worker {provider} could not say its schema again: {e}");
            None
        }
        Err(_) => {
            tracing::warn!("worker {provider} did not say its schema again within 60 s");
            None
        }
    }
}

/// How long, after a worker exited, its stderr may take to reach its end before the exit is
/// reported with what was read of it.
const STDERR_AFTER_EXIT: Duration = Duration::from_millis(500);

enum RunEnd {
    Stopped,
    Died(String),
}

/// How a launched worker ends: a process, or an in-process task.
enum Exit {
    Process(Arc<Child>),
    Task(tokio::task::JoinHandle<()>),
}

impl Exit {
    /// The worker's process, for what it reports about its own.
    fn process(&self) -> Option<Weak<Child>> {
        match self {
            Exit::Process(p) => Some(Arc::downgrade(p)),
            Exit::Task(_) => None,
        }
    }

    async fn wait(&mut self, within: Duration) -> String {
        match self {
            Exit::Process(p) => {
                let status = match tokio::time::timeout(within, p.wait()).await {
                    Ok(status) => status,
                    // Its output closed but it lingers: it is broken, not running.
                    Err(_) => p.stop(Duration::from_millis(500)).await,
                };
                // Its last words (read by `last_words`) may still be on their way.
                p.stderr_read(STDERR_AFTER_EXIT).await;
                describe_exit(status)
            }
            Exit::Task(task) => {
                let _ = tokio::time::timeout(within, task).await;
                "ended".to_owned()
            }
        }
    }

    async fn kill(&mut self) -> String {
        match self {
            Exit::Process(p) => {
                let status = p.kill().await;
                p.stderr_read(STDERR_AFTER_EXIT).await;
                describe_exit(status)
            }
            Exit::Task(task) => {
                task.abort();
                "was stopped".to_owned()
            }
        }
    }

    /// The graceful stop: `shutdown`, close stdin, wait, SIGTERM, SIGKILL, reap.
    async fn stop(&mut self, peer: &Peer) {
        let _ =
            tokio::time::timeout(Duration::from_secs(3), peer.request_value(parent::SHUTDOWN, serde_json::json!({})))
                .await;
        peer.close_output();
        match self {
            Exit::Process(p) => {
                p.stop(Duration::from_secs(2)).await;
            }
            Exit::Task(task) => {
                if tokio::time::timeout(Duration::from_secs(2), &mut *task).await.is_err() {
                    task.abort();
                }
            }
        }
    }

    /// `why` it ended, with its last words on stderr (`agent_runner`'s one sentence for it).
    fn last_words(&self, why: impl Into<String>) -> String {
        match self {
            Exit::Process(p) => p.tail().last_words(why),
            Exit::Task(_) => why.into(),
        }
    }
}

fn launch(spec: &WorkerSpec) -> Result<(Peer, mpsc::UnboundedReceiver<Incoming>, Exit), String> {
    match &spec.launch {
        Launch::Exec { program, args, env } => {
            let (process, mut pipes) = ChildCommand::new(program)
                .args(args)
                .envs(env)
                // Names the worker in `ps e` and /proc, where several run the same binary.
                .envs([("AHPD_WORKER_PROVIDER", &spec.provider)])
                .log_stderr(&spec.provider, tracing::Level::INFO)
                .spawn()
                .map_err(|e| format!("could not be started: {e}"))?;
            let stdin = pipes.take_stdin().map_err(|e| format!("could not be started: {e}"))?;
            let io = Peer::start(pipes.stdout, stdin);
            Ok((io.peer, io.incoming, Exit::Process(Arc::new(process))))
        }
        Launch::InProcess { kind } => {
            let factory =
                agent_runner::builtin_factory(kind).ok_or_else(|| format!("has no built-in agent of kind {kind}"))?;
            let (ours, theirs) = tokio::io::duplex(1 << 20);
            let (their_read, their_write) = tokio::io::split(theirs);
            let task = tokio::spawn(async move {
                if let Err(e) = agent_runner::serve(factory, their_read, their_write).await {
                    tracing::warn!(error = %e, "an in-process worker stopped");
                }
            });
            let (read, write) = tokio::io::split(ours);
            let io = Peer::start(read, write);
            Ok((io.peer, io.incoming, Exit::Task(task)))
        }
    }
}

async fn handshake(spec: &WorkerSpec, peer: &Peer) -> Result<(AgentDescriptor, SchemaResult), String> {
    let params = InitializeParams {
        protocol_version: WORKER_PROTOCOL_VERSION,
        provider: spec.provider.clone(),
        kind: spec.kind.clone(),
        options: spec.options.clone(),
        data_dir: Some(spec.data_dir.display().to_string()),
        host: PeerInfo { name: "ahpd".into(), version: env!("CARGO_PKG_VERSION").into() },
    };
    let answer =
        tokio::time::timeout(spec.handshake_timeout, peer.request::<_, InitializeResult>(parent::INITIALIZE, params))
            .await;
    let result = match answer {
        Err(_) => return Err(format!("did not answer its handshake within {} ms", spec.handshake_timeout.as_millis())),
        Ok(Err(e)) => return Err(format!("refused its handshake: {e}")),
        Ok(Ok(result)) => result,
    };
    if result.protocol_version != WORKER_PROTOCOL_VERSION {
        return Err(format!(
            "speaks worker protocol {}, and this daemon speaks {WORKER_PROTOCOL_VERSION}",
            result.protocol_version
        ));
    }
    let schema = tokio::time::timeout(
        spec.handshake_timeout,
        peer.request::<_, SchemaResult>(parent::SCHEMA, SchemaParams { policy: spec.policy.clone() }),
    )
    .await
    .map_err(|_| "did not answer agent/schema in time".to_owned())?
    .map_err(|e| format!("could not say its schema: {e}"))?;
    Ok((result.agent, schema))
}

//! The method names of the worker protocol, grouped by who sends them.

/// Sent by the parent; the worker answers.
pub mod parent {
    /// The handshake: versions and the worker's options in, the agent's description out.
    pub const INITIALIZE: &str = "initialize";
    /// Close every session, then answer; the parent closes stdin next.
    pub const SHUTDOWN: &str = "shutdown";
    /// The session config schema (under an operator policy) and its defaults.
    pub const SCHEMA: &str = "agent/schema";
    /// Answers for a key of the agent's own schema.
    pub const COMPLETIONS: &str = "agent/completions";
    /// Models, commands and account, asked once at startup and again on `agent/probeChanged`.
    pub const PROBE: &str = "agent/probe";
    /// The directories the agent works in.
    pub const DIRECTORIES: &str = "agent/directories";
    /// Sessions somebody can browse.
    pub const LIST: &str = "agent/list";
    /// One listed session by id.
    pub const FIND: &str = "agent/find";
    /// One listed session's turns, read without starting anything.
    pub const TRANSCRIPT: &str = "agent/transcript";
    /// The settings a chat made by a session tool inherits from the chat that made it.
    pub const INHERITED_CHAT_CONFIG: &str = "agent/inheritedChatConfig";
    /// Start (or resume) one conversation.
    pub const CREATE: &str = "session/create";
    /// A turn's prompt, after the parent said the turn's start.
    pub const SEND_MESSAGE: &str = "session/sendMessage";
    /// The model for the turns from now on.
    pub const CHANGE_MODEL: &str = "session/changeModel";
    /// The custom agent for the turns from now on.
    pub const CHANGE_AGENT: &str = "session/changeAgent";
    /// Stop the running turn and drop the ones handed behind it.
    pub const ABORT: &str = "session/abort";
    /// A steering message for the running turn.
    pub const STEER: &str = "session/steer";
    /// Take back a steering message the model has not read.
    pub const WITHDRAW_STEERING: &str = "session/withdrawSteering";
    /// The chat's draft changed.
    pub const SET_DRAFT: &str = "session/setDraft";
    /// A person allowed or denied a tool call.
    pub const CONFIRM: &str = "session/confirm";
    /// A person answered (or declined) a question.
    pub const ANSWER: &str = "session/answer";
    /// One config key changed.
    pub const SET_CONFIG: &str = "session/setConfig";
    /// The config values in force.
    pub const SETTINGS: &str = "session/settings";
    /// The tools offered to the model changed (a client joined or left, a config push).
    pub const SET_TOOLS: &str = "session/setTools";
    /// The conversation ends; settle everything parked.
    pub const CLOSE: &str = "session/close";
    /// A turn the backend lost goes on in the resumed conversation.
    pub const RESUME_TURN: &str = "session/resumeTurn";
    /// Stop one worker (a subagent) the running turn started.
    pub const STOP_WORKER: &str = "session/stopWorker";
}

/// Sent by the worker; the parent answers requests and acts on notifications.
pub mod worker {
    /// Notification: an AHP action for the session or chat channel.
    pub const EMIT: &str = "emit";
    /// Notification: the backend's own id for a turn it was handed.
    pub const TURN_RECORDED: &str = "turn/recorded";
    /// Notification: what `agent/probe` answers may have changed.
    pub const PROBE_CHANGED: &str = "agent/probeChanged";
    /// Request: run a host tool or a client's tool; answered when it completes.
    pub const TOOL_RUN: &str = "tool/run";
    /// Notification: keep content a part would carry inline, under the reference
    /// [`crate::kept_resource_uri`] names (seed 004's `storeToolResultResource`).
    pub const RESOURCE_KEEP: &str = "resource/keep";
    /// Notification: every process group the worker's processes run in now (they end with it).
    pub const PROCESS_GROUPS: &str = "process/groups";
    /// Notification: a tool call started a worker (a subagent) that works in a chat of its own.
    pub const SUBAGENT_STARTED: &str = "subagent/started";
    /// Notification: keep what a tool call printed as an exited terminal of the chat, under the
    /// channel [`crate::terminal_output_uri`] names (seed 004's `terminalOutputs.keep`).
    pub const TERMINAL_KEEP: &str = "terminal/keep";
}

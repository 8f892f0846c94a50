//! The contract a backend keeps (seed 004's `Agent` and `Session`), and its one error type.

use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahp_types::state::{AgentSelection, Message, ModelSelection, SessionModelInfo, Turn};
use async_trait::async_trait;
use protocol::{
    codes, AgentDescriptor, AnswerParams, At, CompletionsParams, CompletionsResult, ConfirmParams, Listed, Policy,
    ProbeResult, ResumeTurnParams, RpcError, SchemaResult, SendMessageParams, SetConfigResult, Start, SteerParams,
    ToolSpec,
};
use serde_json::Value;

use crate::host::SessionHost;

/// What went wrong in a backend, mapped to the worker protocol's errors in one place
/// ([`AgentError::to_rpc`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// The backend refused; the sentence is shown to a person as it is.
    #[error("{0}")]
    Refused(String),
    /// An optional part of the contract this backend leaves out.
    #[error("this agent does not answer {0}")]
    NotSupported(&'static str),
    /// The request names a chat this worker holds no session for.
    #[error("no session here for {0}")]
    UnknownChat(String),
    /// The parent could not be reached or did not answer.
    #[error("the host did not answer: {0}")]
    Host(String),
    /// Anything else, in the backend's own words.
    #[error("{0}")]
    Failed(String),
}

impl AgentError {
    /// The JSON-RPC error the worker answers with.
    pub fn to_rpc(&self) -> RpcError {
        let code = match self {
            AgentError::Refused(_) => codes::REFUSED,
            AgentError::NotSupported(_) => codes::NOT_SUPPORTED,
            AgentError::UnknownChat(_) => codes::UNKNOWN_CHAT,
            AgentError::Host(_) | AgentError::Failed(_) => codes::INTERNAL_ERROR,
        };
        RpcError::new(code, self.to_string())
    }
}

/// A backend: says who it is, what a session of its kind can be configured with, which sessions it
/// already has, and how to start one. Optional parts default to the answer seed 004 gives for
/// leaving them out (no list means nothing to browse, no probe means no models yet).
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// Who the agent is and which optional parts it answers.
    fn descriptor(&self) -> AgentDescriptor;

    /// One schema, used before a session exists and by every one that does, with its defaults.
    fn schema(&self, policy: &Policy) -> SchemaResult;

    /// Answers for a key of its own schema.
    async fn completions(&self, _params: CompletionsParams) -> Result<CompletionsResult, AgentError> {
        Ok(CompletionsResult::default())
    }

    /// Models, commands and account.
    async fn probe(&self) -> Result<ProbeResult, AgentError> {
        Ok(ProbeResult::default())
    }

    /// The directories the agent works in.
    async fn directories(&self) -> Result<Vec<String>, AgentError> {
        Ok(Vec::new())
    }

    /// Sessions somebody can browse.
    async fn list(&self) -> Result<Vec<Listed>, AgentError> {
        Ok(Vec::new())
    }

    /// One of those, by id.
    async fn find(&self, _id: &str, _at: &At) -> Result<Option<Listed>, AgentError> {
        Ok(None)
    }

    /// One of those as turns, read without starting anything; `kept` is what the parent kept for
    /// its parts (seed 004's `kept`: [`crate::KeptLookup`] names each by its reference).
    async fn transcript(
        &self,
        _id: &str,
        _at: &At,
        _kept: &[protocol::KeptResource],
    ) -> Result<Option<Vec<Turn>>, AgentError> {
        Ok(None)
    }

    /// The settings a chat made by a session tool takes from the chat that made it.
    fn inherited_chat_config(&self, _config: &JsonObject) -> JsonObject {
        JsonObject::new()
    }

    /// Whether this backend starts what it runs through [`protocol::Start::confined`]'s box. A
    /// backend that does not is refused a confined session (by the runtime, for every backend),
    /// rather than run it on the machine itself while the person is told it is boxed.
    fn confines(&self) -> bool {
        false
    }

    /// Starts (or resumes) one conversation.
    async fn create(&self, start: Start, host: SessionHost) -> Result<Arc<dyn Session>, AgentError>;

    /// The worker is stopping; sessions were closed already.
    async fn shutdown(&self) {}
}

/// One conversation. The host owns the channels and the sequence numbers; the session owns the
/// state they carry and says what changed through its [`SessionHost`]. Methods may be called
/// concurrently (an abort while a message is being handed over), so a session keeps its own locks.
#[async_trait]
pub trait Session: Send + Sync + 'static {
    /// The id the backend keeps this conversation under, when it chose its own.
    fn conversation_id(&self) -> Option<String> {
        None
    }

    /// The models this session offers, when they differ from the probe's (an agent that learns
    /// its models only once a conversation opens, as an ACP server does).
    fn models(&self) -> Option<Vec<SessionModelInfo>> {
        None
    }

    /// The start's cut is on the backend's record already (see `Start::cut`).
    fn cut_kept(&self) -> bool {
        false
    }

    /// This conversation, closed, can be resumed though the agent does not say so for all of its
    /// conversations (an ACP agent that declared `loadSession`).
    fn resumable(&self) -> bool {
        false
    }

    /// A turn's prompt. The host said the turn's start already.
    async fn send_message(&self, params: SendMessageParams) -> Result<(), AgentError>;

    /// A turn this backend lost (its process died, the daemon stopped) goes on under its own id
    /// in the resumed conversation, carrying out what a person answered meanwhile (seed 004
    /// `resumeTurn`). The host moved the turn back to running already.
    async fn resume_turn(&self, _params: ResumeTurnParams) -> Result<(), AgentError> {
        Err(AgentError::NotSupported("session/resumeTurn"))
    }

    /// Stops one worker (a subagent) the running turn started; false when none runs for that
    /// call (seed 004 `stopWorker`).
    async fn stop_worker(&self, _tool_call_id: String) -> Result<bool, AgentError> {
        Ok(false)
    }

    /// The model for the turns from now on.
    async fn change_model(&self, _model: ModelSelection) -> Result<(), AgentError> {
        Ok(())
    }

    /// The custom agent for the turns from now on.
    async fn change_agent(&self, _agent: Option<AgentSelection>) -> Result<(), AgentError> {
        Ok(())
    }

    /// Stops the running turn and drops every turn handed behind it; settles everything parked.
    async fn abort(&self, turn_id: Option<String>) -> Result<(), AgentError>;

    /// A steering message: `Ok(true)` taken, `Ok(false)` not yet (the host hands it again), and a
    /// `false` that arrives after the turn ended hands it back.
    async fn steer(&self, _params: SteerParams) -> Result<bool, AgentError> {
        Ok(false)
    }

    /// Takes back a steering message the model has not read.
    async fn withdraw_steering(&self, _id: String) -> Result<bool, AgentError> {
        Ok(false)
    }

    /// The chat's draft changed.
    async fn set_draft(&self, _draft: Option<Message>) -> Result<(), AgentError> {
        Ok(())
    }

    /// A tool call waiting to be allowed was answered; false when nothing waits on that id.
    async fn confirm(&self, _params: ConfirmParams) -> Result<bool, AgentError> {
        Ok(false)
    }

    /// A question was answered; false when nothing waits on that id.
    async fn answer(&self, _params: AnswerParams) -> Result<bool, AgentError> {
        Ok(false)
    }

    /// One config key changed; a refusal is a sentence the host logs.
    async fn set_config(&self, key: String, _value: Value) -> Result<SetConfigResult, AgentError> {
        Ok(SetConfigResult {
            accepted: false,
            refusal: Some(format!("Session configuration '{key}' is not writable.")),
        })
    }

    /// The config values in force.
    async fn settings(&self) -> JsonObject {
        JsonObject::new()
    }

    /// The tools offered to the model changed.
    async fn set_tools(&self, _tools: Vec<ToolSpec>) -> Result<(), AgentError> {
        Ok(())
    }

    /// The conversation ends: settle everything parked, stop every process.
    async fn close(&self);
}

/// Seed 004's refusal for a key the session does not take.
pub fn not_writable(key: &str) -> SetConfigResult {
    SetConfigResult { accepted: false, refusal: Some(format!("Session configuration '{key}' is not writable.")) }
}

/// Seed 004's refusal for a value the session does not offer.
pub fn not_offered(key: &str, value: &Value) -> SetConfigResult {
    let shown = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    SetConfigResult {
        accepted: false,
        refusal: Some(format!("Session configuration '{key}' does not offer '{shown}'.")),
    }
}

/// A value taken as it was sent.
pub fn accepted() -> SetConfigResult {
    SetConfigResult { accepted: true, refusal: None }
}

/// The capability of a backend that holds any number of chats in a session, none forked.
pub fn multiple_chats() -> ahp_types::state::AgentCapabilities {
    ahp_types::state::AgentCapabilities {
        multiple_chats: Some(ahp_types::state::MultipleChatsCapability { fork: None, side_chat: None }),
        multiple_working_directories: None,
    }
}

/// The capability of a backend that holds any number of chats in a session and forks one at a
/// turn (a `Start.cut` from another conversation).
pub fn forking_chats() -> ahp_types::state::AgentCapabilities {
    ahp_types::state::AgentCapabilities {
        multiple_chats: Some(ahp_types::state::MultipleChatsCapability { fork: Some(true), side_chat: None }),
        multiple_working_directories: None,
    }
}

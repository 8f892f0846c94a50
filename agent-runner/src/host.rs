//! The worker's view of the parent for one conversation: emit actions, record turns, run tools.

use ahp_types::actions::StateAction;
use ahp_types::state::ContentRef;
use ahp_types::Uri;
use protocol::methods::worker;
use protocol::{
    EmitChannel, EmitParams, KeepResourceParams, KeepTerminalParams, SubagentStartedParams, ToolOutcome, ToolRunParams,
    TurnRecordedParams,
};
use serde_json::Value;

use crate::agent::AgentError;
use crate::rpc::Peer;

/// Handed to [`crate::Agent::create`]; cheap to clone into the tasks a session runs.
#[derive(Clone)]
pub struct SessionHost {
    peer: Peer,
    session: Uri,
    chat: Uri,
    /// The largest content the parent keeps (`Start.resourceLimitBytes`); absent: it keeps none.
    resource_limit: Option<u64>,
}

impl SessionHost {
    /// A handle for the conversation `chat` of `session`.
    pub fn new(peer: Peer, session: Uri, chat: Uri) -> Self {
        Self { peer, session, chat, resource_limit: None }
    }

    /// The same handle, for a parent that keeps content of at most `limit` bytes (the start's
    /// `resourceLimitBytes`; absent: it keeps none).
    pub fn keeping_resources(mut self, limit: Option<u64>) -> Self {
        self.resource_limit = limit;
        self
    }

    /// The session channel.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The chat channel.
    pub fn chat(&self) -> &str {
        &self.chat
    }

    /// The same parent, for another chat of the session: a subagent's, which the backend emits
    /// on once it said `subagent/started` for it.
    pub fn for_chat(&self, chat: &str) -> SessionHost {
        Self { chat: chat.to_owned(), ..self.clone() }
    }

    /// Says that a tool call of this chat's running turn started a worker with a chat of its own
    /// (`params.chat` is set to this chat); answers a handle for emitting on the worker's chat.
    pub fn subagent_started(&self, mut params: SubagentStartedParams) -> SessionHost {
        params.chat = self.chat.clone();
        let subagent = params.subagent.clone();
        self.peer.notify(worker::SUBAGENT_STARTED, params);
        self.for_chat(&subagent)
    }

    /// Says an action on the chat channel.
    pub fn emit_chat(&self, action: StateAction) {
        self.emit(EmitChannel::Chat, action);
    }

    /// Says an action on the session channel.
    pub fn emit_session(&self, action: StateAction) {
        self.emit(EmitChannel::Session, action);
    }

    fn emit(&self, channel: EmitChannel, action: StateAction) {
        self.peer.notify(worker::EMIT, EmitParams { chat: self.chat.clone(), channel, action });
    }

    /// Says what the backend wrote a turn down as, when it names turns its own way.
    pub fn turn_recorded(&self, turn_id: &str, transcript_id: &str) {
        self.peer.notify(
            worker::TURN_RECORDED,
            TurnRecordedParams {
                chat: self.chat.clone(),
                turn_id: turn_id.to_owned(),
                transcript_id: transcript_id.to_owned(),
            },
        );
    }

    /// Asks the host to run a tool the model called (a host tool or a client's) and waits for it.
    /// A tool that fails is an outcome with `success: false`, not an error.
    pub async fn run_tool(
        &self,
        turn_id: &str,
        tool_call_id: &str,
        name: &str,
        input: Value,
    ) -> Result<ToolOutcome, AgentError> {
        let params = ToolRunParams {
            chat: self.chat.clone(),
            turn_id: turn_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            name: name.to_owned(),
            input,
        };
        self.peer.request(worker::TOOL_RUN, params).await.map_err(|e| AgentError::Host(e.to_string()))
    }

    /// Hands the host what a tool call printed (a command the agent ran itself), to keep as an
    /// exited terminal of this chat under `key`; answers the terminal's channel, which a call's
    /// result may name at once (seed 004's `terminalOutputs.keep` and `.uri`). Only for a start
    /// whose `terminalOutputs` is true.
    pub fn keep_terminal_output(&self, key: &str, title: &str, output: &str, exit_code: Option<i64>) -> Uri {
        let params = KeepTerminalParams {
            chat: self.chat.clone(),
            key: key.to_owned(),
            title: title.to_owned(),
            output: output.to_owned(),
            exit_code,
        };
        self.peer.notify(worker::TERMINAL_KEEP, params);
        protocol::terminal_output_uri(&self.chat, key)
    }

    /// Hands the parent content a part would carry inline (seed 004's `storeToolResultResource`):
    /// `Ok` with the reference the part names it by at once (the parent keeps it before it takes
    /// the next thing this worker says), or `Err` with the sentence saying why it was left out
    /// (over the parent's bound, or a session whose parent keeps no folder).
    pub fn keep_resource(
        &self,
        call_id: &str,
        index: u32,
        name: &str,
        content_type: &str,
        data_base64: &str,
    ) -> Result<ContentRef, String> {
        let bytes = protocol::kept::base64_decoded_len(data_base64);
        if let Some(sentence) = protocol::kept::left_out(content_type, bytes, self.resource_limit) {
            return Err(sentence);
        }
        let params = KeepResourceParams {
            chat: self.chat.clone(),
            call_id: call_id.to_owned(),
            index,
            name: name.to_owned(),
            content_type: content_type.to_owned(),
            data: data_base64.to_owned(),
        };
        self.peer.notify(worker::RESOURCE_KEEP, params);
        Ok(ContentRef {
            uri: protocol::kept_resource_uri(&self.session, &self.chat, call_id, index),
            size_hint: i64::try_from(bytes).ok(),
            content_type: Some(content_type.to_owned()),
            nonce: None,
        })
    }
}

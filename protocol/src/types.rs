//! Params and results of every worker-protocol method (camelCase on the wire, as AHP's own).

use ahp_types::actions::StateAction;
use ahp_types::common::JsonObject;
use ahp_types::state::{
    AgentCapabilities, AgentSelection, ChatInputAnswer, ChatInputResponseKind, Message, ModelSelection,
    SessionConfigSchema, SessionModelInfo, ToolDefinition, ToolResultContent, Turn,
};
use ahp_types::Uri;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who the parent is, for the worker's logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerInfo {
    /// Program name.
    pub name: String,
    /// Program version.
    pub version: String,
}

/// `initialize` params: the parent's half of the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The worker-protocol version the parent speaks ([`crate::WORKER_PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// The provider id this worker serves under (the `agents` key in the config).
    pub provider: String,
    /// The backend kind (`echo`, `notes`, `claude`, `acp`, `pi`, `command`).
    pub kind: String,
    /// The `options` object of the config entry, as written.
    #[serde(default)]
    pub options: JsonObject,
    /// A folder the worker may keep its own files in (settings, session files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// The parent.
    pub host: PeerInfo,
}

/// What the agent can do beyond the required methods; absent means no.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentFeatures {
    /// Answers `agent/list`.
    pub list: bool,
    /// Answers `agent/find`.
    pub find: bool,
    /// Answers `agent/transcript`.
    pub transcript: bool,
    /// Answers `agent/probe`.
    pub probe: bool,
    /// Answers `agent/directories`.
    pub directories: bool,
    /// Answers `agent/inheritedChatConfig`.
    pub inherited_chat_config: bool,
    /// Takes steering messages (`session/steer`).
    pub steering: bool,
    /// A conversation closed (`session/close`) and started again with `resume` keeps what was
    /// said: the parent may close an idle chat's backend session to free memory.
    pub resume: bool,
    /// The keys of its own schema it answers `agent/completions` for.
    pub completions: Vec<String>,
    /// `"recorded"` to have transcript ids projected back to caller turn ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript_turn_ids: Option<String>,
    /// A conversation goes on from a cut of itself (`Start.cut`): a client may truncate a chat
    /// (edit and resend). A fork is announced by `capabilities.multipleChats.fork`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncate: bool,
    /// Answers `session/resumeTurn`: a turn a crash interrupted goes on in the resumed
    /// conversation (its error says `resumable`), and a question parked when the daemon stopped
    /// is answered after a restart.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resume_turn: bool,
    /// What it takes as attachments beside text; absent: text alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<AttachmentSupport>,
    /// It runs `Start.mcpServers` and says each one's state (`session/mcpServerStateChanged` on
    /// the session channel, the server's name as its id): the parent shows them on the session
    /// and lets a client stop and start them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mcp_status: bool,
}

/// Who the agent is: seed 004's `provider`, `displayName`, `description` and capabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDescriptor {
    /// The provider id (the parent overrides it with the config's key).
    pub provider: String,
    /// What a person reads.
    pub display_name: String,
    /// One line about the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// AHP capabilities (multiple chats, working directories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<AgentCapabilities>,
    /// Optional parts of the contract the worker answers.
    #[serde(default)]
    pub features: AgentFeatures,
}

/// `initialize` result: the worker's half of the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The worker-protocol version the worker speaks.
    pub protocol_version: u32,
    /// The agent this worker runs.
    pub agent: AgentDescriptor,
}

/// The operator's policy, handed to `agent/schema` and to a start under the same names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// Managed settings the operator enforces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_settings: Option<Value>,
    /// A window's policy restricts elevated auto-approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve_policy_restricted: Option<bool>,
}

/// `agent/schema` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaParams {
    /// The policy in force.
    #[serde(default)]
    pub policy: Policy,
}

/// `agent/schema` result: one schema used before a session exists and by every one that does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaResult {
    /// The session config schema.
    pub schema: SessionConfigSchema,
    /// Default values.
    #[serde(default)]
    pub defaults: JsonObject,
}

/// `agent/completions` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionsParams {
    /// The schema key asked about.
    pub property: String,
    /// What a person typed so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The config values chosen so far.
    #[serde(default)]
    pub config: JsonObject,
    /// The folder the session would run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<Uri>,
}

/// One answer for a completions ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionItem {
    /// The value.
    pub value: Value,
    /// What a person reads.
    pub label: String,
    /// More about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `agent/completions` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionsResult {
    /// The answers.
    pub items: Vec<CompletionItem>,
}

/// A command behind a slash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlashCommand {
    /// The command's name, without the slash.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `agent/probe` result: what the agent offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeResult {
    /// Models to pick from, in the order the agent prefers them.
    #[serde(default)]
    pub models: Vec<SessionModelInfo>,
    /// Commands behind a slash.
    #[serde(default)]
    pub commands: Vec<SlashCommand>,
    /// The account the harness bills to, in the shape of VS Code's `vscode.codexAccount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Value>,
    /// What it takes as attachments, when it learned more than its handshake said (an ACP agent
    /// names its prompt capabilities once it is started); absent: as the handshake said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<AttachmentSupport>,
    /// Its AHP capabilities, when it learned more than its descriptor said (an ACP agent that
    /// declares `loadSession` forks a chat); absent: as the descriptor said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<AgentCapabilities>,
}

/// `agent/directories` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoriesResult {
    /// Absolute paths.
    pub directories: Vec<String>,
}

/// A session somebody can browse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    /// The backend's id for it.
    pub id: String,
    /// Its title.
    pub title: String,
    /// ISO-8601.
    pub created_at: String,
    /// ISO-8601.
    pub modified_at: String,
    /// `file://` URIs.
    #[serde(default)]
    pub working_directories: Vec<Uri>,
}

/// `agent/list` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResult {
    /// The sessions.
    pub sessions: Vec<Listed>,
}

/// Where a session ran, when the parent recorded it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct At {
    /// An absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
}

/// `agent/find` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FindParams {
    /// The backend's id.
    pub id: String,
    /// Where it ran.
    #[serde(default)]
    pub at: At,
}

/// `agent/find` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FindResult {
    /// The row `agent/list` gives for it, if the agent has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Listed>,
}

/// `agent/transcript` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptParams {
    /// The backend's id.
    pub id: String,
    /// Where it ran.
    #[serde(default)]
    pub at: At,
    /// What the parent kept for the conversation's parts (`resource/keep`): a transcript read
    /// back names each by the reference it had live, and leaves out what is not here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<crate::KeptResource>,
}

/// `agent/transcript` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptResult {
    /// The turns, oldest first; absent when the agent holds no record of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Turn>>,
}

/// `agent/inheritedChatConfig` params and result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigValues {
    /// Config values by key.
    pub config: JsonObject,
}

/// A tool offered to the model: a host tool or a client's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The definition as the model is offered it (a client's tool is named `<clientId>__<name>`).
    pub definition: ToolDefinition,
    /// The client that runs it; absent for the host's own tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The name the call is drawn under in the chat (a client's tool: the client's own name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The harness may hide it behind tool search.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defer_loading: bool,
    /// What running it does, for a backend's permission policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<ToolEffects>,
}

/// A tool's effects claim (reads, writes, network, destructive).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ToolEffects {
    /// Reads files or state.
    pub reads: bool,
    /// Writes files or state.
    pub writes: bool,
    /// Reaches the network.
    pub network: bool,
    /// Destroys something.
    pub destructive: bool,
}

/// The session's own MCP endpoint under `/ahp-mcp`, for a backend that cannot take tools in process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsEndpoint {
    /// `http://HOST:PORT/ahp-mcp/<id>`.
    pub url: String,
    /// The bearer token for that path alone.
    pub token: String,
}

/// An MCP server the deployment configured, in VS Code's two shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum McpServer {
    /// A program the agent starts.
    Stdio {
        /// The program.
        command: String,
        /// Its argv.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        /// Where it starts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// Variables over the host's own.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        env: std::collections::BTreeMap<String, String>,
    },
    /// An endpoint the agent reaches.
    Http {
        /// The endpoint.
        url: String,
        /// Headers for every request.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        headers: std::collections::BTreeMap<String, String>,
    },
}

/// Everything a backend needs to start one conversation (seed 004's `Start`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    /// The session channel.
    pub session: Uri,
    /// The chat channel; every later `session/*` request names this chat.
    pub chat: Uri,
    /// The id the backend keeps this conversation under: new, or the one to resume.
    pub conversation_id: String,
    /// Continue `conversation_id` rather than start it.
    #[serde(default)]
    pub resume: bool,
    /// The folder the process runs in (a path, not a URI); absent when the session has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// More folders it may reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_directories: Vec<String>,
    /// The config values in force (defaults under the client's).
    #[serde(default)]
    pub settings: JsonObject,
    /// The model the conversation starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSelection>,
    /// Tools offered in process.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// The session's `/ahp-mcp` endpoint; absent where the daemon serves no listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_endpoint: Option<ToolsEndpoint>,
    /// The deployment's MCP servers; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<std::collections::BTreeMap<String, McpServer>>,
    /// Words for the system prompt: the tools' instructions, then the clients' rules.
    #[serde(default)]
    pub instructions: Vec<String>,
    /// How long a client's tool may wait for its client; 0 waits for ever.
    pub client_tool_timeout_ms: u64,
    /// The operator's policy.
    #[serde(default)]
    pub policy: Policy,
    /// The host keeps what a tool call printed as an exited terminal (`terminal/keep`), so a call
    /// may name it by [`crate::terminal_output_uri`] (seed 004's `terminalOutputs`); false where
    /// the host keeps nothing.
    #[serde(default)]
    pub terminal_outputs: bool,
    /// The parent keeps content a part would carry inline (`resource/keep`), each of at most
    /// this many bytes (`toolResultResourceLimitBytes`), so a part may name it by
    /// [`crate::kept_resource_uri`]; absent where it keeps none (no folder for the session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limit_bytes: Option<u64>,
    /// The conversation begins as a cut of one the backend holds: a fork (a copy of `source`
    /// through the kept turn, as the new conversation `conversationId`) or a truncation
    /// (`source` is `conversationId`: it goes on from the kept turn, the rest dropped). Handed on
    /// every start until the backend has the cut on record (`CreateResult.cutKept`, or a
    /// `turn/recorded` after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
    /// The session runs confined (a sandbox, a container): every process the backend runs for
    /// this chat is started through [`Confined::wrap`]. Absent for a session on the machine itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confined: Option<Confined>,
}

/// How a confined session's processes are started (`Start.confined`): the backend puts `wrap`
/// before the program it would have run, and sets `env` over what it would have set. What runs
/// that way cannot reach past the box, so a mode that never asks is safe there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Confined {
    /// The level: `sandbox` or `container`.
    pub level: String,
    /// The argv put before every program run for the chat (ends with `--` where the wrapper needs it).
    pub wrap: Vec<String>,
    /// Variables set for everything run inside.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// The shell `!` commands and terminals run in inside, when it is not the machine's own (a
    /// container's image has its own programs: `sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

/// Where a conversation is cut (`Start.cut`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cut {
    /// The conversation the kept turns are read from.
    pub source: String,
    /// The last turn kept.
    pub kept: TurnPoint,
    /// The turns after it, oldest first: dropped from a truncation, left out of a fork.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<TurnPoint>,
}

/// A turn as the parent and the backend name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnPoint {
    /// The turn's id.
    pub turn_id: String,
    /// What the backend wrote it down as (`turn/recorded`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_id: Option<String>,
}

/// `session/create` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    /// The start.
    pub start: Start,
}

/// `session/create` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateResult {
    /// The id the backend keeps this conversation under, when it chose its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Models this session offers, when they differ from the probe's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<SessionModelInfo>>,
    /// The start's cut is on the backend's record already: later starts need not carry it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_kept: bool,
    /// This conversation, closed, can be resumed though the agent does not say so for all of
    /// its conversations (`features.resume`): an ACP agent that declared `loadSession`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumable: bool,
}

/// Names the conversation a `session/*` request is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatRef {
    /// The chat channel given in the start.
    pub chat: Uri,
}

/// `session/sendMessage` params: the turn was said by the parent already.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageParams {
    /// The chat.
    pub chat: Uri,
    /// The turn's id, as the parent said it.
    pub turn_id: String,
    /// The message (text, origin, attachments).
    pub message: Message,
    /// What the host has to say on this turn, for the runtime's channel beside the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Nobody watches this turn (a wakeup's): nobody can answer a question (seed 003).
    /// `instructions` tell the model to decide instead; a backend may also withhold its asking tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unattended: bool,
    /// The message's attachments as the host read them, in the message's order: what the model
    /// is given beside the text (`message.attachments` is as the client sent them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// `session/resumeTurn` params: a turn the backend lost (its process died, or the daemon
/// stopped) goes on in the resumed conversation, under its own id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeTurnParams {
    /// The chat.
    pub chat: Uri,
    /// The turn, running again in the chat's state.
    pub turn_id: String,
    /// The turn's message, as it was sent.
    pub message: Message,
    /// What a person answered, after the backend lost them, to the questions the turn had
    /// parked: the backend carries each out when its agent asks the same again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<Decision>,
    /// The message's attachments read again (see [`SendMessageParams::attachments`]): the
    /// request goes on with what it was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// A person's answer to a question a lost turn had parked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Decision {
    /// A tool call waiting to be allowed.
    #[serde(rename_all = "camelCase")]
    Confirmation {
        /// The call, as the turn holds it.
        tool_call_id: String,
        /// Its tool's name.
        tool_name: String,
        /// Its input as it was asked (JSON text), when the turn holds it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_input: Option<String>,
        /// Allowed or denied.
        approved: bool,
        /// The option picked among the agent's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        option_id: Option<String>,
    },
    /// A question that is not about a tool.
    #[serde(rename_all = "camelCase")]
    Answer {
        /// The request's id.
        request_id: String,
        /// `accept`, `decline` or `cancel`.
        response: ChatInputResponseKind,
        /// The answers by question id.
        #[serde(default)]
        answers: std::collections::HashMap<String, ChatInputAnswer>,
    },
}

/// `session/stopWorker` params: stop one worker (a subagent) the running turn started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopWorkerParams {
    /// The chat whose turn started it.
    pub chat: Uri,
    /// The tool call that started it.
    pub tool_call_id: String,
}

/// `subagent/started` params: a tool call of a running turn started a worker with a turn loop
/// of its own (Claude's Task subagent). The parent opens `subagent` as a chat of the session
/// (origin `tool`, read-only), says `turnId`'s start in it with `prompt`, and lists it as the
/// parent chat's background work until that turn ends; the backend then emits the worker's
/// turn on `subagent` as on any chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentStartedParams {
    /// The chat whose turn started it.
    pub chat: Uri,
    /// The worker's own chat channel, chosen by the backend (`ahp-chat:/<id>`).
    pub subagent: Uri,
    /// The worker's turn in it.
    pub turn_id: String,
    /// The tool call that started it.
    pub tool_call_id: String,
    /// What a person reads.
    pub title: String,
    /// The kind of worker (`general-purpose`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// Its task, in a line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What it was asked.
    #[serde(default)]
    pub prompt: String,
}

/// `session/changeModel` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeModelParams {
    /// The chat.
    pub chat: Uri,
    /// The model.
    pub model: ModelSelection,
}

/// `session/changeAgent` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeAgentParams {
    /// The chat.
    pub chat: Uri,
    /// The custom agent, or none for the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSelection>,
}

/// `session/abort` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbortParams {
    /// The chat.
    pub chat: Uri,
    /// The turn a client stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// `session/steer` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteerParams {
    /// The chat.
    pub chat: Uri,
    /// The running turn it is meant for.
    pub turn_id: String,
    /// The pending message's id.
    pub id: String,
    /// The message.
    pub message: Message,
    /// Its attachments as the host read them (see [`SendMessageParams::attachments`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// `session/steer` result: taken, or not yet (false; the parent hands it again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteerResult {
    /// The backend took the message.
    pub taken: bool,
}

/// `session/withdrawSteering` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawSteeringParams {
    /// The chat.
    pub chat: Uri,
    /// The pending message's id.
    pub id: String,
}

/// A yes/no answer (`session/withdrawSteering`, `session/confirm`, `session/answer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handled {
    /// True when the backend had something to act on.
    pub handled: bool,
}

/// `session/setDraft` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetDraftParams {
    /// The chat.
    pub chat: Uri,
    /// The draft, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Message>,
}

/// `session/confirm` params: a tool call waiting to be allowed was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmParams {
    /// The chat.
    pub chat: Uri,
    /// The running turn.
    pub turn_id: String,
    /// The call.
    pub tool_call_id: String,
    /// Allowed or denied.
    pub approved: bool,
    /// The option a person picked among the agent's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    /// `user-action` or `setting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_source: Option<String>,
    /// The input as a person edited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_tool_input: Option<String>,
}

/// `session/answer` params: a question that is not about a tool was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerParams {
    /// The chat.
    pub chat: Uri,
    /// The running turn.
    pub turn_id: String,
    /// The request.
    pub request_id: String,
    /// `accept`, `decline` or `cancel`.
    pub response: ChatInputResponseKind,
    /// The answers by question id.
    #[serde(default)]
    pub answers: std::collections::HashMap<String, ChatInputAnswer>,
}

/// `session/setConfig` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigParams {
    /// The chat.
    pub chat: Uri,
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
}

/// `session/setConfig` result: taken as sent, or a sentence saying why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigResult {
    /// The value was taken as it was sent.
    pub accepted: bool,
    /// Why it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// `session/settings` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsResult {
    /// The config values in force.
    pub values: JsonObject,
}

/// `session/setTools` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetToolsParams {
    /// The chat.
    pub chat: Uri,
    /// The whole set, replacing the one before.
    pub tools: Vec<ToolSpec>,
}

/// Which AHP channel an emitted action is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmitChannel {
    /// The chat channel of the conversation.
    Chat,
    /// The session channel the conversation belongs to.
    Session,
}

/// `emit` params: an AHP action the backend says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmitParams {
    /// The conversation.
    pub chat: Uri,
    /// Its chat channel or its session's channel.
    pub channel: EmitChannel,
    /// The action, exactly as AHP 1.0.0 encodes it.
    pub action: StateAction,
}

/// `turn/recorded` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecordedParams {
    /// The conversation.
    pub chat: Uri,
    /// The turn id the parent handed.
    pub turn_id: String,
    /// What the backend wrote that turn down as.
    pub transcript_id: String,
}

/// A process group a process started, named so that another process can later tell it is still
/// that group before it kills it (process ids are reused).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessGroup {
    /// The group's id: the pid of the process that leads it.
    pub pgid: i32,
    /// When that leader started, as the system says it (compared, never parsed); empty when it
    /// could not be read.
    pub leader_start: String,
}

/// `process/groups` params: every group the worker's processes run in now, the ones its own
/// children said they started included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessGroupsParams {
    /// The groups.
    pub groups: Vec<ProcessGroup>,
}

/// `tool/run` params: run a tool the model called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRunParams {
    /// The conversation.
    pub chat: Uri,
    /// The turn the call belongs to.
    pub turn_id: String,
    /// The call's id, as the backend emitted it in `chat/toolCallStart`.
    pub tool_call_id: String,
    /// The tool's name as offered (`list_sessions`, `<clientId>__<name>`).
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub input: Value,
}

/// `tool/run` result: how the call ended. A failure is information for the model, not an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutcome {
    /// The tool did what was asked.
    pub success: bool,
    /// The text for the model (the error's explanation when it failed).
    pub text: String,
    /// Rich content for the call's result, when there is any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolResultContent>,
    /// What a client draws once it is done (`<name> failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub past_tense_message: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolOutcome {
    /// A successful outcome with text for the model.
    pub fn ok(text: impl Into<String>) -> Self {
        Self { success: true, text: text.into(), content: Vec::new(), past_tense_message: None, error: None }
    }

    /// A failed outcome whose text explains the failure.
    pub fn failed(text: impl Into<String>) -> Self {
        let text = text.into();
        Self { success: false, error: Some(text.clone()), text, content: Vec::new(), past_tense_message: None }
    }
}

/// `resource/keep` params: content a part would carry inline, kept under
/// [`crate::kept_resource_uri`]`(session of chat, chat, callId, index)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepResourceParams {
    /// The conversation.
    pub chat: Uri,
    /// The tool call's id (or the message part's own id).
    pub call_id: String,
    /// The content's place among the contents.
    pub index: u32,
    /// A name for it.
    pub name: String,
    /// Its MIME type.
    pub content_type: String,
    /// The bytes, base64.
    pub data: String,
}

/// `terminal/keep` params: what a tool call printed, kept as an exited terminal of the chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepTerminalParams {
    /// The conversation.
    pub chat: Uri,
    /// The backend's key for the output (a tool call's id); with the chat it names the channel.
    pub key: String,
    /// The terminal's title (the command that ran).
    pub title: String,
    /// What it printed.
    pub output: String,
    /// How it ended, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// The terminal channel an output kept for `chat` under `key` is served at: the chat's id and the
/// key, with anything but letters, digits, `-`, `_` and `.` written as `%XX`.
pub fn terminal_output_uri(chat: &str, key: &str) -> String {
    let chat_id = chat.rsplit_once(":/").map_or(chat, |(_, id)| id);
    let mut uri = format!("ahp-terminal:/{chat_id}.");
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

// Attachments: what a backend takes, and a message's attachments as the host hands them over.

/// What a backend takes as attachments beside text ([`AgentFeatures::attachments`], refined by
/// [`ProbeResult::attachments`]). Text it always takes: a text attachment reaches the model as
/// text, with its label and where it is from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentSupport {
    /// MIME types it takes as they are beside text: `image/png`, or a family as `image/*`.
    #[serde(default)]
    pub types: Vec<String>,
    /// The largest attachment it takes, in bytes; absent: the host's own limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

impl AttachmentSupport {
    /// True when `content_type` is one of the types taken as they are.
    pub fn takes(&self, content_type: &str) -> bool {
        let wanted = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        self.types.iter().any(|t| match t.strip_suffix("/*") {
            Some(family) => wanted.split('/').next() == Some(family),
            None => t.eq_ignore_ascii_case(&wanted),
        })
    }
}

/// One attachment of a message, its content read by the host: a file the client named (read from
/// the session's folder or through the client), a pasted one, a selection, a text the client
/// wrote for the model. Exactly one of `text` and `data` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// What a person reads (a file's name).
    pub label: String,
    /// Where it is from (the URI the client named, `file://` for a file); absent for content
    /// that came inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// For a selection: the part of the resource it is (zero-based lines and characters); its
    /// `text` is that part alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<ahp_types::state::TextRange>,
    /// The client's display hint (`image`, `document`, `selection`, `directory`, `symbol`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_kind: Option<String>,
    /// Its MIME type.
    pub content_type: String,
    /// Its content, when it is text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its bytes in base64, when it is not text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_reads_the_minimal_shape_a_foreign_worker_gets() {
        let start: Start = serde_json::from_value(serde_json::json!({
            "session": "ahp-session:/s", "chat": "ahp-chat:/c", "conversationId": "c",
            "clientToolTimeoutMs": 600000
        }))
        .expect("decodes");
        assert!(!start.resume);
        assert!(start.tools.is_empty());
    }

    #[test]
    fn a_kept_output_is_named_by_its_chat_and_key() {
        assert_eq!(terminal_output_uri("ahp-chat:/c1", "toolu_01"), "ahp-terminal:/c1.toolu_01");
        assert_eq!(terminal_output_uri("ahp-chat:/c1", "a/b c"), "ahp-terminal:/c1.a%2Fb%20c");
    }

    #[test]
    fn attachment_types_match_exactly_or_by_family() {
        let support = AttachmentSupport { types: vec!["image/*".into(), "application/pdf".into()], max_bytes: None };
        assert!(support.takes("image/png"));
        assert!(support.takes("Application/PDF; q=1"));
        assert!(!support.takes("application/zip"));
        assert!(!AttachmentSupport::default().takes("image/png"));
    }

    #[test]
    fn a_send_without_attachments_reads_as_before() {
        let send: SendMessageParams = serde_json::from_value(serde_json::json!({
            "chat": "ahp-chat:/c", "turnId": "t", "message": {"text": "hi", "origin": {"kind": "user"}}
        }))
        .expect("decodes");
        assert!(send.attachments.is_empty());
        assert!(!serde_json::to_string(&send).expect("encodes").contains("attachments"));
    }

    #[test]
    fn mcp_servers_use_vscode_shapes() {
        let stdio: McpServer = serde_json::from_value(serde_json::json!({
            "type": "stdio", "command": "srv", "args": ["/x"], "env": {"T": "1"}
        }))
        .expect("stdio");
        assert!(matches!(stdio, McpServer::Stdio { .. }));
        let http: McpServer =
            serde_json::from_value(serde_json::json!({"type": "http", "url": "http://x"})).expect("http");
        assert!(matches!(http, McpServer::Http { .. }));
    }
}

//! The ACP handshake both a conversation and a short-lived visit (the probe, a listing) make:
//! the protocol version, the `initialize` request this client sends, what the agent's answer says
//! it can do, and how long an agent has to exit once its stdin closes.

use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use agent_client_protocol_schema::ProtocolVersion;
use protocol::AttachmentSupport;
use serde_json::Value;

/// The ACP protocol version this client speaks.
pub(crate) const ACP_VERSION: ProtocolVersion = ProtocolVersion::V1;

/// How long an agent whose stdin closed has to exit before it is signalled.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);

/// What the agent said it can do.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caps {
    pub(crate) load_session: bool,
    pub(crate) close_session: bool,
    pub(crate) mcp_http: bool,
    pub(crate) additional_directories: bool,
    pub(crate) image: bool,
    pub(crate) audio: bool,
    pub(crate) embedded_context: bool,
    pub(crate) auth_methods: Vec<String>,
}

impl Caps {
    /// What the agent takes as attachments beside text: the images and audio its prompt
    /// capabilities name (text it always takes, as a text block or an embedded resource).
    pub(crate) fn attachments(&self) -> AttachmentSupport {
        let mut types = Vec::new();
        if self.image {
            types.push("image/*".to_owned());
        }
        if self.audio {
            types.push("audio/*".to_owned());
        }
        AttachmentSupport { types, max_bytes: None }
    }

    pub(crate) fn from_answer(answer: &acp::InitializeResponse) -> Self {
        let caps = &answer.agent_capabilities;
        let prompt = &caps.prompt_capabilities;
        Self {
            load_session: caps.load_session,
            close_session: caps.session_capabilities.close.is_some(),
            mcp_http: caps.mcp_capabilities.http,
            additional_directories: caps.session_capabilities.additional_directories.is_some(),
            image: prompt.image,
            audio: prompt.audio,
            embedded_context: prompt.embedded_context,
            auth_methods: answer.auth_methods.iter().map(|m| m.id().to_string()).collect(),
        }
    }
}

/// The initialize request: protocol v1, files and terminals served, a subagent's own transcript
/// asked for (the Claude ACP adapter's `_meta["subagent-transcript"]`: its text and thinking too,
/// each update naming its Agent call, [`crate::subagents`]), and who this client is.
pub(crate) fn initialize_request() -> acp::InitializeRequest {
    let fs = acp::FileSystemCapabilities::new().read_text_file(true).write_text_file(true);
    let mut meta = acp::Meta::new();
    meta.insert("subagent-transcript".into(), Value::Bool(true));
    acp::InitializeRequest::new(ACP_VERSION)
        .client_capabilities(acp::ClientCapabilities::new().fs(fs).terminal(true).meta(meta))
        .client_info(acp::Implementation::new("ahpd", env!("CARGO_PKG_VERSION")).title("ahpd".to_owned()))
}

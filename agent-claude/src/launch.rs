//! How a chat's `claude` process is launched and spoken to: what is fixed for the chat's life
//! ([`SessionSpec`]), the argv of one process ([`launch_args`]), a prompt as a stream-json `user`
//! line with its attachments ([`user_line`]), and what the CLI's `system/init` says of the
//! deployment's MCP servers ([`mcp_state`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_runner::attachments;
use ahp_types::state::{
    ErrorInfo, McpServerErrorState, McpServerReadyState, McpServerStartingState, McpServerState, McpServerStoppedState,
};
use protocol::{Attachment, AttachmentSupport};
use serde_json::{json, Value};

/// Everything fixed for the life of the chat.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The CLI and its environment.
    pub command: String,
    /// Extra arguments from the options.
    pub extra_args: Vec<String>,
    /// Extra environment from the options.
    pub env: BTreeMap<String, String>,
    /// The conversation's uuid (the CLI's session id).
    pub session_id: String,
    /// Where the CLI runs.
    pub cwd: PathBuf,
    /// More folders it may reach.
    pub additional_directories: Vec<String>,
    /// `--mcp-config`.
    pub mcp_config: Value,
    /// `--append-system-prompt`, when there is anything to say.
    pub append_system_prompt: Option<String>,
    /// The permission modes this session offers (its policy may withhold one).
    pub permission_modes: Vec<&'static str>,
    /// What `--settings` carries: the operator's managed settings (`Start.policy.managedSettings`),
    /// which the CLI enforces on the calls it never asks the host about, and the output style.
    pub cli_settings: Option<Value>,
    /// The host keeps what a command printed as an exited terminal (`Start.terminalOutputs`).
    pub terminal_outputs: bool,
    /// The session runs confined: the CLI is started through the box's launcher (`Start.confined`).
    pub confined: Option<protocol::Confined>,
}

/// Where a conversation that begins as a copy of another is copied from (`Start.cut`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFrom {
    /// The CLI's session id of the source.
    pub source: String,
    /// The last chain entry copied (`--resume-session-at`); the whole record when none.
    pub at: Option<String>,
}

/// How one process of this chat begins its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin<'a> {
    /// A new conversation under the spec's id.
    New,
    /// The conversation the CLI has a record of.
    Resume,
    /// A copy of another conversation (through one entry of it) under the spec's id.
    Fork(&'a ForkFrom),
}

/// How one process of this chat runs, besides how it begins its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch<'a> {
    /// `--model`.
    pub model: Option<&'a str>,
    /// `--permission-mode`.
    pub permission_mode: &'a str,
    /// Somebody watches its turns, so the model may ask them (`AskUserQuestion` is offered).
    pub asking: bool,
}

/// The argv for one process of this chat.
pub fn launch_args(spec: &SessionSpec, begin: Begin<'_>, launch: Launch<'_>) -> Vec<String> {
    let Launch { model, permission_mode, asking } = launch;
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // The `=` form, as the SDKs use it, so a value is never read as a flag.
    match begin {
        Begin::New => args.push(format!("--session-id={}", spec.session_id)),
        Begin::Resume => args.push(format!("--resume={}", spec.session_id)),
        Begin::Fork(from) => {
            args.push(format!("--resume={}", from.source));
            args.push("--fork-session".to_owned());
            args.push(format!("--session-id={}", spec.session_id));
            if let Some(at) = &from.at {
                args.push(format!("--resume-session-at={at}"));
            }
        }
    }
    args.push(format!("--mcp-config={}", spec.mcp_config));
    if let Some(model) = model {
        args.push(format!("--model={model}"));
    }
    if permission_mode != "default" {
        args.push(format!("--permission-mode={permission_mode}"));
    }
    if let Some(prompt) = &spec.append_system_prompt {
        args.push(format!("--append-system-prompt={prompt}"));
    }
    if let Some(settings) = &spec.cli_settings {
        args.push(format!("--settings={settings}"));
    }
    if !asking {
        // Nobody can answer: the model is not offered the tool at all (seed 003).
        args.push(format!("--disallowedTools={}", crate::tools::ASK_USER_QUESTION));
    }
    for dir in &spec.additional_directories {
        args.push(format!("--add-dir={dir}"));
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// An MCP server's state from the status Claude's `system/init` reports for it.
pub fn mcp_state(status: &str) -> McpServerState {
    match status {
        "connected" => McpServerState::Ready(McpServerReadyState {}),
        "pending" => McpServerState::Starting(McpServerStartingState { blocking: None }),
        "disabled" => McpServerState::Stopped(McpServerStoppedState {}),
        other => McpServerState::Error(McpServerErrorState {
            error: ErrorInfo {
                error_type: "mcpServer".into(),
                message: format!("Claude Code reports the server {other}"),
                stack: None,
                meta: None,
            },
        }),
    }
}

/// What Claude takes as attachments beside text: images and PDFs, as content blocks of their own.
pub const ATTACHMENT_TYPES: [&str; 5] = ["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"];

/// What this backend takes as attachments.
pub fn attachment_support() -> AttachmentSupport {
    AttachmentSupport { types: ATTACHMENT_TYPES.iter().map(|t| (*t).to_owned()).collect(), max_bytes: None }
}

/// An attachment as a content block of a user message: an image, a PDF as a document, anything
/// else as text with its label and where it is from.
pub fn attachment_block(attachment: &Attachment) -> Value {
    let Some(data) = attachment.data.as_ref().filter(|_| attachments::is_binary(attachment)) else {
        return json!({"type": "text", "text": attachments::as_text(attachment)});
    };
    let source = json!({"type": "base64", "media_type": attachment.content_type, "data": data});
    if attachment.content_type.starts_with("image/") {
        json!({"type": "image", "source": source})
    } else {
        let mut block = json!({"type": "document", "source": source, "title": attachment.label});
        if let Some(at) = attachments::location(attachment) {
            block["context"] = json!(at);
        }
        block
    }
}

/// A stream-json `user` line: the turn's instructions, its attachments, then the words.
pub fn user_line(
    text: &str,
    attachments: &[Attachment],
    instructions: Option<&str>,
    uuid: &str,
    priority: Option<&str>,
) -> Value {
    let mut content = Vec::new();
    if let Some(instructions) = instructions.filter(|i| !i.trim().is_empty()) {
        content.push(json!({"type": "text", "text": instructions}));
    }
    content.extend(attachments.iter().map(attachment_block));
    content.push(json!({"type": "text", "text": text}));
    let mut line = json!({"type": "user", "message": {"role": "user", "content": content},
                          "parent_tool_use_id": null, "session_id": "", "uuid": uuid});
    if let Some(priority) = priority {
        line["priority"] = json!(priority);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SessionSpec {
        SessionSpec {
            command: "claude".into(),
            extra_args: vec!["--extra".into()],
            env: BTreeMap::new(),
            session_id: "11111111-2222-3333-4444-555555555555".into(),
            cwd: PathBuf::from("/w"),
            additional_directories: vec!["/more".into()],
            mcp_config: json!({"mcpServers": {}}),
            append_system_prompt: Some("Be brief.".into()),
            permission_modes: vec!["default"],
            confined: None,
            cli_settings: None,
            terminal_outputs: false,
        }
    }

    #[test]
    fn the_operators_managed_settings_reach_the_cli_as_settings() {
        let attended = Launch { model: None, permission_mode: "default", asking: true };
        assert!(!launch_args(&spec(), Begin::New, attended).iter().any(|a| a.starts_with("--settings")));
        let managed = SessionSpec { cli_settings: Some(json!({"permissions": {"deny": ["Bash"]}})), ..spec() };
        let args = launch_args(&managed, Begin::New, Launch { model: None, permission_mode: "default", asking: true });
        assert!(args.contains(&r#"--settings={"permissions":{"deny":["Bash"]}}"#.to_owned()), "{args:?}");
    }

    #[test]
    fn a_new_conversation_and_a_resumed_one() {
        let attended = Launch { model: None, permission_mode: "default", asking: true };
        let new = launch_args(&spec(), Begin::New, attended);
        for flag in ["-p", "--verbose", "--include-partial-messages", "stdio"] {
            assert!(new.contains(&flag.to_owned()), "{flag}: {new:?}");
        }
        assert!(new.contains(&"--session-id=11111111-2222-3333-4444-555555555555".to_owned()));
        assert!(new.contains(&"--append-system-prompt=Be brief.".to_owned()));
        assert!(new.contains(&"--add-dir=/more".to_owned()));
        assert_eq!(new.last().map(String::as_str), Some("--extra"), "the options' arguments come last");
        assert!(!new.iter().any(|a| a.starts_with("--model") || a.starts_with("--permission-mode")));
        assert!(!new.iter().any(|a| a.starts_with("--disallowedTools")), "an attended turn may ask: {new:?}");
        let launch = Launch { model: Some("haiku"), permission_mode: "plan", asking: false };
        let resumed = launch_args(&spec(), Begin::Resume, launch);
        assert!(resumed.contains(&"--disallowedTools=AskUserQuestion".to_owned()), "nobody to ask: {resumed:?}");
        assert!(resumed.contains(&"--resume=11111111-2222-3333-4444-555555555555".to_owned()));
        assert!(
            resumed.contains(&"--model=haiku".to_owned()) && resumed.contains(&"--permission-mode=plan".to_owned())
        );
    }

    #[test]
    fn a_copy_resumes_its_source_through_the_kept_entry_under_its_own_id() {
        let from = ForkFrom { source: "aaaaaaaa-0000-0000-0000-000000000000".into(), at: Some("e-9".into()) };
        let args =
            launch_args(&spec(), Begin::Fork(&from), Launch { model: None, permission_mode: "default", asking: true });
        for flag in [
            "--resume=aaaaaaaa-0000-0000-0000-000000000000",
            "--fork-session",
            "--session-id=11111111-2222-3333-4444-555555555555",
            "--resume-session-at=e-9",
        ] {
            assert!(args.contains(&flag.to_owned()), "{flag}: {args:?}");
        }
        let whole = ForkFrom { at: None, ..from };
        let args =
            launch_args(&spec(), Begin::Fork(&whole), Launch { model: None, permission_mode: "default", asking: true });
        assert!(!args.iter().any(|a| a.starts_with("--resume-session-at")), "{args:?}");
    }

    #[test]
    fn the_clis_mcp_statuses_become_server_states() {
        assert!(matches!(mcp_state("connected"), McpServerState::Ready(_)));
        assert!(matches!(mcp_state("pending"), McpServerState::Starting(_)));
        assert!(matches!(mcp_state("disabled"), McpServerState::Stopped(_)));
        let McpServerState::Error(failed) = mcp_state("failed") else { panic!("an error") };
        assert_eq!(failed.error.message, "Claude Code reports the server failed");
    }

    #[test]
    fn a_prompt_carries_our_uuid_and_the_turns_instructions_before_it() {
        let line = user_line("hello", &[], Some("Mind the tests."), "u-1", Some("next"));
        assert_eq!(line["uuid"], "u-1");
        assert_eq!(line["priority"], "next");
        assert_eq!(line["message"]["content"][0]["text"], "Mind the tests.");
        assert_eq!(line["message"]["content"][1]["text"], "hello");
        assert!(user_line("hi", &[], None, "u-2", None).get("priority").is_none());
    }
}

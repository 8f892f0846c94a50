//! The records `pi --mode rpc` writes on stdout (pi 0.73.1), read leniently: unknown record types
//! and fields are ignored so a newer pi (delta-only updates, `agent_settled`) still reads.

use serde::Deserialize;
use serde_json::Value;

/// One line pi wrote.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum PiRecord {
    /// The answer to a command. `id` is absent for an unknown command or a line pi could not parse.
    Response {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        command: String,
        success: bool,
        #[serde(default)]
        data: Option<Value>,
        #[serde(default)]
        error: Option<String>,
    },
    /// A run began (after a prompt, or again for an automatic retry).
    AgentStart,
    /// A run ended; the messages it produced.
    AgentEnd {
        #[serde(default)]
        messages: Vec<PiMessage>,
    },
    /// Newer pi: no more automatic work follows.
    AgentSettled {
        #[serde(default)]
        aborted: Option<bool>,
    },
    /// A message begins (user, assistant, toolResult, custom).
    MessageStart { message: PiMessage },
    /// A message is final.
    MessageEnd { message: PiMessage },
    /// A streaming step of the assistant message.
    MessageUpdate { assistant_message_event: StreamEvent },
    /// A tool begins running.
    ToolExecutionStart {
        tool_call_id: String,
        tool_name: String,
        #[serde(default)]
        args: Value,
    },
    /// What a running tool produced so far (cumulative).
    ToolExecutionUpdate {
        tool_call_id: String,
        #[serde(default)]
        partial_result: Value,
    },
    /// A tool finished.
    ToolExecutionEnd {
        tool_call_id: String,
        tool_name: String,
        #[serde(default)]
        result: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// The steering and follow-up queues, whole.
    QueueUpdate {
        #[serde(default)]
        steering: Vec<String>,
        #[serde(default)]
        follow_up: Vec<String>,
    },
    /// Compaction began: `manual`, `threshold` or `overflow`.
    CompactionStart { reason: String },
    /// Compaction ended; `will_retry` when pi runs the failed request again.
    CompactionEnd {
        reason: String,
        #[serde(default)]
        aborted: bool,
        #[serde(default)]
        will_retry: bool,
        #[serde(default)]
        error_message: Option<String>,
    },
    /// pi will run the failed request again after a delay.
    AutoRetryStart {
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        error_message: Option<String>,
    },
    /// Retrying is over, one way or the other.
    AutoRetryEnd {
        success: bool,
        #[serde(default)]
        final_error: Option<String>,
    },
    /// An extension asks the host something (or tells it, for the fire-and-forget methods).
    ExtensionUiRequest {
        id: String,
        method: String,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        placeholder: Option<String>,
        #[serde(default)]
        status_key: Option<String>,
        #[serde(default)]
        status_text: Option<String>,
    },
    /// An extension failed.
    ExtensionError {
        #[serde(default)]
        extension_path: String,
        #[serde(default)]
        event: String,
        #[serde(default)]
        error: String,
    },
    /// Anything else (turn_start/turn_end, session_info_changed, newer events).
    #[serde(other)]
    Other,
}

/// A message: the fields any role may carry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PiMessage {
    /// `user`, `assistant`, `toolResult`, `custom`, ...
    pub role: String,
    /// A string, or content blocks.
    pub content: Value,
    /// Assistant: `stop`, `length`, `toolUse`, `error`, `aborted` (only final at `message_end`).
    pub stop_reason: Option<String>,
    /// Assistant: what went wrong.
    pub error_message: Option<String>,
    /// Assistant: tokens used.
    pub usage: Option<PiUsage>,
    /// Assistant: the provider.
    pub provider: Option<String>,
    /// Assistant: the model id.
    pub model: Option<String>,
    /// Milliseconds since the epoch.
    pub timestamp: Option<i64>,
    /// Custom: the extension's type.
    pub custom_type: Option<String>,
    /// Tool result: the call.
    pub tool_call_id: Option<String>,
    /// Tool result: the tool.
    pub tool_name: Option<String>,
    /// Tool result: it failed.
    pub is_error: Option<bool>,
}

impl PiMessage {
    /// The message's text: the string, or its text blocks joined.
    pub fn text(&self) -> String {
        content_text(&self.content)
    }
}

/// Tokens an assistant message used.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PiUsage {
    /// Input tokens.
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Tokens read from a cache.
    pub cache_read: i64,
    /// Tokens written to a cache.
    pub cache_write: i64,
}

/// One step of an assistant message's stream (`assistantMessageEvent`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StreamEvent {
    /// `text_delta`, `thinking_delta`, `toolcall_start`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The block within the message.
    pub content_index: Option<u64>,
    /// A delta's text.
    pub delta: Option<String>,
    /// A block's whole text at its `*_end`.
    pub content: Option<String>,
    /// `toolcall_end`: the whole call.
    pub tool_call: Option<Value>,
    /// The message so far (pi 0.73.1; dropped by newer pi).
    pub partial: Option<Value>,
    /// Newer pi's `toolcall_start`: the call's id.
    pub id: Option<String>,
    /// Newer pi's `toolcall_start`: the tool.
    pub tool_name: Option<String>,
}

impl StreamEvent {
    /// The tool call block this event names: (id, name), from the event or the partial message.
    pub fn tool_call_ref(&self) -> (Option<String>, Option<String>) {
        if let Some(call) = &self.tool_call {
            return (str_field(call, "id"), str_field(call, "name"));
        }
        let block = self
            .content_index
            .and_then(|i| self.partial.as_ref()?.get("content")?.get(usize::try_from(i).ok()?).cloned());
        let id = self.id.clone().or_else(|| block.as_ref().and_then(|b| str_field(b, "id")));
        let name = self.tool_name.clone().or_else(|| block.as_ref().and_then(|b| str_field(b, "name")));
        (id, name)
    }
}

fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// The text of a content value: a string, or the `text` blocks of a list joined.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A tool result's content as a client is shown it: its text (as [`content_text`] joins it), then
/// each image pi's tool returned (`{type: "image", data, mimeType}`, a read of a picture, an MCP
/// tool's screenshot) kept by `keeper` under its place among the blocks, or the sentence saying it
/// was left out.
pub fn shown_content(
    content: &Value,
    call_id: &str,
    tool_name: &str,
    keeper: &dyn agent_runner::Keeper,
) -> Vec<ahp_types::state::ToolResultContent> {
    use ahp_types::state::{ToolResultContent, ToolResultTextContent};
    let text = content_text(content);
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    let is_image = |b: &Value| b.get("type").and_then(Value::as_str) == Some("image");
    let mut shown = Vec::new();
    // The text as before, even when empty, unless the result is pictures alone.
    if !text.is_empty() || !blocks.iter().any(is_image) {
        shown.push(ToolResultContent::Text(ToolResultTextContent { text }));
    }
    for (index, block) in blocks.iter().enumerate() {
        if !is_image(block) {
            continue;
        }
        let (Some(data), Some(kind)) =
            (block.get("data").and_then(Value::as_str), block.get("mimeType").and_then(Value::as_str))
        else {
            continue;
        };
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let name = agent_runner::kept::content_name(tool_name, index, kind);
        shown.push(keeper.content(call_id, index, &name, kind, data));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pictures_result_shows_its_text_then_each_picture_by_what_kept_it() {
        let content = serde_json::json!([
            {"type": "text", "text": "Read image file [image/png]"},
            {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
            {"type": "image", "data": "R0lG", "mimeType": "image/gif"},
        ]);
        let content_ref = ahp_types::state::ContentRef {
            uri: "session-db-resource:/s/c/call_1/1".into(),
            size_hint: Some(4),
            content_type: Some("image/png".into()),
            nonce: None,
        };
        let kept = [protocol::KeptResource { call_id: "call_1".into(), index: 1, content_ref }];
        let shown = shown_content(&content, "call_1", "read", &agent_runner::KeptLookup(&kept));
        assert_eq!(
            serde_json::to_value(shown).expect("content"),
            serde_json::json!([
                {"type": "text", "text": "Read image file [image/png]"},
                {"type": "resource", "uri": "session-db-resource:/s/c/call_1/1", "sizeHint": 4, "contentType": "image/png"},
                {"type": "text", "text": "An image was left out: ahpd kept no copy of it."},
            ])
        );
    }

    #[test]
    fn reads_the_records_pi_writes() {
        let line = r#"{"type":"message_update","assistantMessageEvent":{"type":"toolcall_start","contentIndex":0,"partial":{"content":[{"type":"toolCall","id":"call_1","name":"bash","arguments":{}}]}},"message":{}}"#;
        let PiRecord::MessageUpdate { assistant_message_event: e } = serde_json::from_str(line).expect("reads") else {
            panic!("not an update")
        };
        assert_eq!(e.tool_call_ref(), (Some("call_1".into()), Some("bash".into())));
        let line = r#"{"type":"tool_execution_end","toolCallId":"c","toolName":"bash","result":{"content":[{"type":"text","text":"hi\n"}]},"isError":false}"#;
        assert!(matches!(
            serde_json::from_str(line).expect("reads"),
            PiRecord::ToolExecutionEnd { is_error: false, .. }
        ));
        let line = r#"{"type":"something_new","x":1}"#;
        assert!(matches!(serde_json::from_str(line).expect("reads"), PiRecord::Other));
        let line = r#"{"type":"response","command":"no_such_command","success":false,"error":"Unknown command"}"#;
        assert!(matches!(
            serde_json::from_str(line).expect("reads"),
            PiRecord::Response { id: None, success: false, .. }
        ));
    }
}

//! What the worker writes to pi and to its bridge: a prompt or a steer with its attachments, the
//! bridge's `/ahpd` commands, the tools as the bridge registers them, and its answers to a gate.

use agent_runner::attachments;
use agent_runner::engine::policy::{self, Asked, Context, Mode, Verdict};
use protocol::{Attachment, AttachmentSupport, ToolSpec};
use serde_json::{json, Value};

use crate::mapper::{HostTool, ToolCatalog};

/// The bridge's dialog title and status key.
pub const BRIDGE: &str = "ahpd";

/// What pi is told a call a person denied did (its own tools' gate, and the host's tools).
pub const DENIED: &str = "The user denied this tool call.";

/// The images pi's prompt takes beside its text.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What pi takes as attachments: images; the rest is said as text.
pub fn attachment_support() -> AttachmentSupport {
    AttachmentSupport { types: IMAGE_TYPES.iter().map(|t| (*t).to_owned()).collect(), max_bytes: None }
}

/// A prompt (or a steer) as pi's RPC takes it: each text attachment said before the words, with
/// its label and where it is from, and the images beside them.
pub fn prompt_command(kind: &str, text: &str, attachments: &[Attachment]) -> Value {
    let mut said: Vec<String> =
        attachments.iter().filter(|a| !attachments::is_binary(a)).map(attachments::as_text).collect();
    said.push(text.to_owned());
    let mut command = json!({"type": kind, "message": said.join("\n\n")});
    let images: Vec<Value> = attachments
        .iter()
        .filter(|a| attachments::is_binary(a))
        .filter_map(|a| Some(json!({"type": "image", "data": a.data.as_ref()?, "mimeType": a.content_type})))
        .collect();
    if !images.is_empty() {
        command["images"] = Value::Array(images);
    }
    command
}

/// A message for the bridge's `/ahpd` command, as the prompt that carries it.
pub fn bridge_command(message: Value) -> Value {
    json!({ "type": "prompt", "message": format!("/{BRIDGE} {message}") })
}

/// The bridge's answer to a gate: allowed, or why not.
pub fn gate_answer(allowed: Result<(), &str>) -> Value {
    match allowed {
        Ok(()) => json!({"allow": true}),
        Err(reason) => json!({"allow": false, "reason": reason}),
    }
}

/// The bridge's answer to a host tool that did not run.
pub fn not_run(why: &str) -> Value {
    json!({"success": false, "text": why})
}

/// The tools as the bridge registers them with pi.
pub fn bridge_tools(tools: &[ToolSpec]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|spec| {
                let d = &spec.definition;
                json!({
                    "name": d.name,
                    "label": spec.display_name.clone().or_else(|| d.title.clone()).unwrap_or_else(|| d.name.clone()),
                    "description": d.description.clone().unwrap_or_else(|| d.name.clone()),
                    "parameters": d.input_schema.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                })
            })
            .collect(),
    )
}

/// How the mapper draws the host's and clients' tools, each with whether it waits for a person
/// (the engine's policy, from the effects its spec declares).
pub fn catalog_of(tools: &[ToolSpec]) -> ToolCatalog {
    tools
        .iter()
        .map(|spec| {
            let display_name = spec
                .display_name
                .clone()
                .or_else(|| spec.definition.title.clone())
                .unwrap_or_else(|| spec.definition.name.clone());
            let asked = Asked::Offered(spec.effects.as_ref());
            let asks = policy::decide(asked, Context::new(Mode::Runtime, false)) == Verdict::Confirm;
            (spec.definition.name.clone(), HostTool { display_name, owner: spec.owner.clone(), asks })
        })
        .collect()
}

//! The computer plugin's three tools (seed 000), which declare advanced permission: offered only
//! with `advancedTools` on, absent from `serverTools` otherwise. `request_disposable_computer`
//! (writes, network), `release_computer` (destructive) and `run_in_computer` (`sh -lc`, its
//! output bounded, answered `<output>\n\nexit <code>`); `computer://<id>` and
//! `computer://<id>/status` read through `ahp_resource`. What they do is `crate::confine::computer`.

use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};

use super::{declare, Group, Refusal, Tool, ToolCall, ToolInfo, ToolResult};
use crate::confine::computer::{Computers, Request, SCHEME};

const REQUEST: &str = "request_disposable_computer";
const RELEASE: &str = "release_computer";
const RUN: &str = "run_in_computer";

/// The daemon's computers, once it has the plugin. One daemon runs per process, and the tools'
/// catalogue is static, so the plugin registers itself here once at start.
static COMPUTERS: OnceLock<Arc<Computers>> = OnceLock::new();

/// Registers the daemon's computer plugin with its tools.
pub fn serve(computers: Arc<Computers>) {
    let _ = COMPUTERS.set(computers);
}

fn computers() -> Result<&'static Arc<Computers>, Refusal> {
    COMPUTERS.get().ok_or_else(|| "This host has no computer plugin (plugins.computer).".into())
}

/// The three tools, as entries of the tool table. Their inputs are read by the checks below (the
/// sentences of the reference host's computer tools), so each declares its schema by hand.
pub fn tools() -> Vec<Tool> {
    declarations()
        .into_iter()
        .map(|info| {
            let name = info.definition.name.clone();
            declare::<Value>(Group::Computer, &name, "").with(|_| info).reads_its_input(|cx| {
                match cx.info.definition.name.as_str() {
                    REQUEST => Box::pin(request(cx.call)),
                    RELEASE => Box::pin(release(cx.call)),
                    _ => Box::pin(run_in(cx.call)),
                }
            })
        })
        .collect()
}

/// What the three declare.
fn declarations() -> Vec<ToolInfo> {
    let optional = |about: &str| json!({ "type": "string", "description": about });
    let mut request = ToolInfo::new(
        Group::Computer,
        REQUEST,
        "Make a disposable computer (a container) to run commands in, apart from this machine. It is released with this session, or by release_computer.",
        json!({ "type": "object", "properties": {
            "image": optional("The image it runs; this host's default when left out."),
            "cpus": optional("How many CPUs it may use, such as \"2\"."),
            "memory": optional("How much memory it may use, such as \"512m\" or \"2g\"."),
            "name": optional("Its name, used in its computer:// URI; one is made when left out."),
        } }),
    )
    .titled("Request a disposable computer")
    .writes();
    request.effects.network = true;
    let release = ToolInfo::new(
        Group::Computer,
        RELEASE,
        "Release a disposable computer: it and everything in it are gone.",
        json!({ "type": "object", "properties": { "id": { "type": "string", "description": "The computer's name, or its computer:// URI." } }, "required": ["id"] }),
    )
    .titled("Release a computer")
    .destructive();
    let mut run = ToolInfo::new(
        Group::Computer,
        RUN,
        "Run a command in a disposable computer (with sh -lc); answers what it printed and its exit code.",
        json!({ "type": "object", "properties": {
            "id": { "type": "string", "description": "The computer's name, or its computer:// URI." },
            "command": { "type": "string", "description": "The command, run with sh -lc." },
        }, "required": ["id", "command"] }),
    )
    .titled("Run a command in a computer")
    .destructive();
    run.effects.network = true;
    [request, release, run].into_iter().map(advanced).collect()
}

fn advanced(mut tool: ToolInfo) -> ToolInfo {
    tool.advanced_permission = true;
    tool
}

async fn request(call: &ToolCall) -> ToolResult {
    let computers = computers()?;
    let field = |f: &str| optional_str(REQUEST, &call.input, f).map(|v| v.map(str::to_owned));
    let request = Request {
        image: field("image")?,
        cpus: field("cpus")?,
        memory: field("memory")?,
        name: field("name")?,
        session: call.session.clone(),
    };
    computers.request(request).await.map_err(Into::into)
}

async fn release(call: &ToolCall) -> ToolResult {
    let computers = computers()?;
    let id = call.input.get("id").and_then(|v| v.as_str()).unwrap_or_default();
    computers.release(id).await.map_err(Into::into)
}

async fn run_in(call: &ToolCall) -> ToolResult {
    let computers = computers()?;
    let id = required_str(RUN, &call.input, "id")?;
    let command = required_str(RUN, &call.input, "command")?;
    computers.run(id, command).await.map_err(Into::into)
}

/// `ahp_resource` of a `computer://` URI: its status, as JSON text; `None` for another URI.
pub async fn read(uri: &str) -> Option<ToolResult> {
    let rest = uri.strip_prefix(SCHEME)?;
    let Ok(computers) = computers() else { return Some(Err(format!("There is no computer called {rest}.").into())) };
    Some(match computers.status(rest).await {
        Some(status) => Ok(serde_json::to_string_pretty(&status).unwrap_or_default()),
        None => Err(format!("There is no computer called {}.", Computers::name_of(rest)).into()),
    })
}

/// Every computer `session` made goes with it.
pub async fn session_removed(session: &str) {
    if let Some(computers) = COMPUTERS.get() {
        computers.release_session(session).await;
    }
}

/// The computers `session` holds, as `ahpd status` shows them.
pub fn of_session(session: &str) -> Vec<String> {
    COMPUTERS.get().map(|c| c.of_session(session)).unwrap_or_default()
}

/// A required string argument, in the reference host's words.
fn required_str<'a>(tool: &str, input: &'a Value, field: &str) -> Result<&'a str, Refusal> {
    match input.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        _ => Err(format!("Invalid {tool} input: {field} must be a non-empty string.").into()),
    }
}

/// An optional string argument, in the reference host's words.
fn optional_str<'a>(tool: &str, input: &'a Value, field: &str) -> Result<Option<&'a str>, Refusal> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("Invalid {tool} input: {field} must be a string.").into()),
    }
}

//! What a tool call is called and how it reads: the CLI's own tools (`Bash`, `Edit`, ...), the
//! host's tools (`mcp__host__<name>`) and the clients' tools (`mcp__client__<clientId>__<name>`),
//! with the sentences a client draws for them.

use ahp_types::state::{ToolCallClientContributor, ToolCallContributor};
use protocol::ToolSpec;
use serde_json::Value;

/// The in-process MCP server that offers the host's own tools.
pub const HOST_SERVER: &str = "host";
/// The in-process MCP server that offers the clients' tools.
pub const CLIENT_SERVER: &str = "client";
/// The CLI's question tool, drawn as a chat input request rather than a tool call.
pub const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// Who runs a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    /// The CLI itself (`Bash`, `Read`, an MCP server it started, ...).
    Cli,
    /// The host: `tool/run` with this name.
    Host(String),
    /// A client: `tool/run` with this name (`<clientId>__<name>`), run by that client.
    Client { offered: String, client_id: String },
    /// `AskUserQuestion`: a question, not a tool call.
    Question,
}

/// A call's names, as a client draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// `chat/toolCallStart`'s `toolName`.
    pub tool_name: String,
    /// What a person reads.
    pub display_name: String,
    /// Who runs it.
    pub owner: Owner,
}

impl Named {
    /// The contributor a client's tool is drawn with.
    pub fn contributor(&self) -> Option<ToolCallContributor> {
        match &self.owner {
            Owner::Client { client_id, .. } => {
                Some(ToolCallContributor::Client(ToolCallClientContributor { client_id: client_id.clone() }))
            }
            _ => None,
        }
    }

    /// True for a call the host or a client runs (through the in-process MCP servers).
    pub fn runs_outside_the_cli(&self) -> bool {
        matches!(self.owner, Owner::Host(_) | Owner::Client { .. })
    }
}

/// Names a call of `name`, the model's name for the tool.
pub fn name_call(name: &str, tools: &[ToolSpec]) -> Named {
    if name == ASK_USER_QUESTION {
        return Named { tool_name: name.into(), display_name: "Question".into(), owner: Owner::Question };
    }
    if let Some(offered) = name.strip_prefix(&format!("mcp__{HOST_SERVER}__")) {
        let spec = tools.iter().find(|t| t.owner.is_none() && t.definition.name == offered);
        let display = spec
            .and_then(|s| s.display_name.clone().or_else(|| s.definition.title.clone()))
            .unwrap_or_else(|| offered.to_owned());
        return Named { tool_name: offered.to_owned(), display_name: display, owner: Owner::Host(offered.to_owned()) };
    }
    if let Some(offered) = name.strip_prefix(&format!("mcp__{CLIENT_SERVER}__")) {
        let spec = tools.iter().find(|t| t.owner.is_some() && t.definition.name == offered);
        let (client_id, own_name) = match spec {
            Some(s) => {
                let client = s.owner.clone().unwrap_or_default();
                let own = offered.strip_prefix(&format!("{client}__")).unwrap_or(offered).to_owned();
                (client, s.display_name.clone().unwrap_or(own))
            }
            None => match offered.split_once("__") {
                Some((client, own)) => (client.to_owned(), own.to_owned()),
                None => (String::new(), offered.to_owned()),
            },
        };
        return Named {
            tool_name: own_name.clone(),
            display_name: own_name,
            owner: Owner::Client { offered: offered.to_owned(), client_id },
        };
    }
    Named { tool_name: name.to_owned(), display_name: cli_display_name(name), owner: Owner::Cli }
}

fn cli_display_name(name: &str) -> String {
    match name {
        "Bash" => "Terminal".into(),
        "Read" => "Read".into(),
        "Write" => "Write".into(),
        "Edit" | "MultiEdit" => "Edit".into(),
        "NotebookEdit" => "Edit notebook".into(),
        "Glob" => "Find files".into(),
        "Grep" => "Search".into(),
        "WebFetch" => "Fetch".into(),
        "WebSearch" => "Web search".into(),
        "TodoWrite" => "Todo list".into(),
        "Task" | "Agent" => "Subagent".into(),
        other => match other.strip_prefix("mcp__") {
            Some(rest) => rest.replacen("__", ": ", 1),
            None => other.to_owned(),
        },
    }
}

fn field<'a>(input: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| input[*k].as_str()).filter(|s| !s.is_empty())
}

/// What a call is about to do, as a client draws it while it waits or runs.
pub fn invocation_message(named: &Named, input: &Value) -> String {
    let path = field(input, &["file_path", "notebook_path", "path"]);
    match (named.tool_name.as_str(), &named.owner) {
        ("Bash", Owner::Cli) => match field(input, &["command"]) {
            Some(command) => format!("Running `{}`", one_line(command)),
            None => "Running a command".into(),
        },
        ("Read", Owner::Cli) => format!("Reading {}", path.unwrap_or("a file")),
        ("Write", Owner::Cli) => format!("Writing {}", path.unwrap_or("a file")),
        ("Edit" | "MultiEdit" | "NotebookEdit", Owner::Cli) => format!("Editing {}", path.unwrap_or("a file")),
        ("Glob" | "Grep", Owner::Cli) => match field(input, &["pattern"]) {
            Some(pattern) => format!("Searching for {pattern}"),
            None => "Searching".into(),
        },
        ("WebFetch", Owner::Cli) => format!("Fetching {}", field(input, &["url"]).unwrap_or("a page")),
        ("WebSearch", Owner::Cli) => {
            format!("Searching the web for {}", field(input, &["query"]).unwrap_or("something"))
        }
        _ => format!("Using {}", named.display_name),
    }
}

/// A command the CLI ran (its Bash tool) and how it ended, read from its result.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRun {
    /// The command line.
    pub command: String,
    /// What it printed (the CLI's "Exit code N" line taken off).
    pub output: String,
    /// Its exit code: 0 for a result that is not an error, N for one that says "Exit code N".
    pub exit_code: Option<i64>,
}

/// The most of a command's output its result carries for a client that does not open the
/// terminal.
const PREVIEW_BYTES: usize = 4096;

impl CommandRun {
    /// The terminal part a call's result shows it as, the host keeping it at `uri`.
    pub fn terminal(&self, uri: String) -> ahp_types::state::ToolResultContent {
        use ahp_types::state::{TerminalCommandResult, ToolResultContent, ToolResultTerminalContent};
        let mut start = self.output.len().saturating_sub(PREVIEW_BYTES);
        while !self.output.is_char_boundary(start) {
            start += 1;
        }
        ToolResultContent::Terminal(ToolResultTerminalContent {
            resource: uri,
            title: self.command.clone(),
            is_pty: Some(false),
            result: Some(TerminalCommandResult {
                exit_code: self.exit_code,
                preview: Some(self.output[start..].to_owned()),
                truncated: (start > 0).then_some(true),
            }),
        })
    }
}

/// A Bash call that ran to an exit, from its result: not one that was denied or never ran (an
/// error that names no exit code).
pub fn command_run(named: &Named, input: &Value, success: bool, text: &str) -> Option<CommandRun> {
    if (named.tool_name.as_str(), &named.owner) != ("Bash", &Owner::Cli) {
        return None;
    }
    let command = field(input, &["command"])?.to_owned();
    if success {
        return Some(CommandRun { command, output: text.to_owned(), exit_code: Some(0) });
    }
    let rest = text.strip_prefix("Exit code ")?;
    let (code, output) = rest.split_once('\n').unwrap_or((rest, ""));
    let exit_code = code.trim().parse().ok()?;
    Some(CommandRun { command, output: output.to_owned(), exit_code: Some(exit_code) })
}

/// What a call did, as a client draws it once it is done.
pub fn past_tense_message(named: &Named, input: &Value, success: bool) -> String {
    if !success {
        return format!("{} failed", named.display_name);
    }
    let path = field(input, &["file_path", "notebook_path", "path"]);
    match (named.tool_name.as_str(), &named.owner) {
        ("Bash", Owner::Cli) => match field(input, &["command"]) {
            Some(command) => format!("Ran `{}`", one_line(command)),
            None => "Ran a command".into(),
        },
        ("Read", Owner::Cli) => format!("Read {}", path.unwrap_or("a file")),
        ("Write", Owner::Cli) => format!("Wrote {}", path.unwrap_or("a file")),
        ("Edit" | "MultiEdit" | "NotebookEdit", Owner::Cli) => format!("Edited {}", path.unwrap_or("a file")),
        ("Glob" | "Grep", Owner::Cli) => "Searched".into(),
        ("WebFetch", Owner::Cli) => format!("Fetched {}", field(input, &["url"]).unwrap_or("a page")),
        _ => format!("Used {}", named.display_name),
    }
}

fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("");
    let cut: String = first.chars().take(120).collect();
    if cut.len() < s.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The text of a tool result's content (a string, or a list of blocks): its text blocks alone.
pub fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The images of a tool result's content, each kept by `keeper` under its place among the blocks
/// (or the sentence saying it was left out): an MCP tool's screenshot or a picture the Read tool
/// returned, as the CLI writes them (`{type: "image", source: {type: "base64", media_type, data}}`).
/// An image named by a URL only is no content a part carries inline: it is left as it was.
pub fn result_images(
    content: &Value,
    call_id: &str,
    tool_name: &str,
    keeper: &dyn agent_runner::Keeper,
) -> Vec<ahp_types::state::ToolResultContent> {
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b["type"] == "image" && b["source"]["type"] == "base64")
        .filter_map(|(index, block)| {
            let source = &block["source"];
            let (kind, data) = (source["media_type"].as_str()?, source["data"].as_str()?);
            let index = u32::try_from(index).ok()?;
            let name = agent_runner::kept::content_name(tool_name, index, kind);
            Some(keeper.content(call_id, index, &name, kind, data))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::ToolDefinition;
    use serde_json::json;

    fn spec(name: &str, owner: Option<&str>, display: Option<&str>) -> ToolSpec {
        ToolSpec {
            definition: ToolDefinition {
                name: name.into(),
                title: None,
                description: None,
                input_schema: None,
                output_schema: None,
                annotations: None,
                meta: None,
            },
            owner: owner.map(str::to_owned),
            display_name: display.map(str::to_owned),
            defer_loading: false,
            effects: None,
        }
    }

    #[test]
    fn names_host_client_and_cli_tools() {
        let tools = vec![
            spec("list_sessions", None, Some("List sessions")),
            spec("c1__openFile", Some("c1"), Some("openFile")),
        ];
        let host = name_call("mcp__host__list_sessions", &tools);
        assert_eq!((host.tool_name.as_str(), host.display_name.as_str()), ("list_sessions", "List sessions"));
        assert_eq!(host.owner, Owner::Host("list_sessions".into()));
        let client = name_call("mcp__client__c1__openFile", &tools);
        assert_eq!(client.tool_name, "openFile");
        assert_eq!(client.owner, Owner::Client { offered: "c1__openFile".into(), client_id: "c1".into() });
        assert!(client.contributor().is_some());
        let bash = name_call("Bash", &tools);
        assert_eq!(bash.owner, Owner::Cli);
        assert_eq!(invocation_message(&bash, &json!({"command": "ls -la"})), "Running `ls -la`");
        assert_eq!(past_tense_message(&bash, &json!({}), false), "Terminal failed");
        assert_eq!(name_call("AskUserQuestion", &tools).owner, Owner::Question);
        assert_eq!(name_call("mcp__files__read", &tools).display_name, "files: read");
    }

    #[test]
    fn reads_result_text_from_either_shape() {
        assert_eq!(result_text(&json!("plain")), "plain");
        assert_eq!(result_text(&json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])), "a\nb");
    }
}

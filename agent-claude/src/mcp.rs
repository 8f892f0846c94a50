//! The two in-process MCP servers the CLI reaches over its control channel (`mcp_message`):
//! `host` offers the host's own tools and `client` the clients' tools, so the model sees
//! `mcp__host__<name>` and `mcp__client__<clientId>__<name>`. A `tools/call` is handed to the
//! parent with `tool/run`; everything else is answered here.

use protocol::{McpServer, ToolOutcome, ToolSpec};
use serde_json::{json, Map, Value};

use crate::tools::{CLIENT_SERVER, HOST_SERVER};

/// The MCP protocol revision answered when the CLI names none.
const DEFAULT_PROTOCOL: &str = "2025-06-18";

/// What to do with one MCP message.
#[derive(Debug, Clone, PartialEq)]
pub enum McpReply {
    /// Answer this JSON-RPC message now.
    Now(Value),
    /// Run a tool, then answer with [`call_result`].
    Call {
        /// The JSON-RPC id to answer.
        id: Value,
        /// The tool's name as offered to the host (`list_sessions`, `<clientId>__<name>`).
        name: String,
        /// Its arguments.
        arguments: Value,
        /// The CLI's tool-use id (`_meta["claudecode/toolUseId"]`): the AHP tool call id.
        tool_use_id: Option<String>,
    },
}

/// The specs a server offers: the host's own for `host`, the clients' for `client`.
pub fn offered<'a>(server: &str, tools: &'a [ToolSpec]) -> Vec<&'a ToolSpec> {
    tools
        .iter()
        .filter(|t| match server {
            HOST_SERVER => t.owner.is_none(),
            CLIENT_SERVER => t.owner.is_some(),
            _ => false,
        })
        .collect()
}

/// Answers one message the CLI sent to `server`.
pub fn handle(server: &str, message: &Value, tools: &[ToolSpec]) -> McpReply {
    let id = message.get("id").cloned();
    let method = message["method"].as_str().unwrap_or("");
    let Some(id) = id else {
        // A notification (`notifications/initialized`, cancellations): the control channel still
        // wants an answer to the request that carried it.
        return McpReply::Now(json!({"jsonrpc": "2.0", "result": {}}));
    };
    let ok = |result: Value| McpReply::Now(json!({"jsonrpc": "2.0", "id": id.clone(), "result": result}));
    match method {
        "initialize" => {
            let version = message["params"]["protocolVersion"].as_str().unwrap_or(DEFAULT_PROTOCOL);
            ok(json!({"protocolVersion": version, "capabilities": {"tools": {"listChanged": false}},
                      "serverInfo": {"name": server, "version": env!("CARGO_PKG_VERSION")}}))
        }
        "ping" => ok(json!({})),
        "tools/list" => ok(json!({"tools": offered(server, tools).into_iter().map(tool_entry).collect::<Vec<_>>()})),
        "tools/call" => {
            let params = &message["params"];
            McpReply::Call {
                id,
                name: params["name"].as_str().unwrap_or("").to_owned(),
                arguments: params.get("arguments").cloned().unwrap_or_else(|| json!({})),
                tool_use_id: params["_meta"]["claudecode/toolUseId"].as_str().map(str::to_owned),
            }
        }
        "resources/list" => ok(json!({"resources": []})),
        "prompts/list" => ok(json!({"prompts": []})),
        other => McpReply::Now(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("{server} does not answer {other}")}}),
        ),
    }
}

fn tool_entry(spec: &ToolSpec) -> Value {
    let definition = &spec.definition;
    let mut entry = Map::new();
    entry.insert("name".into(), json!(definition.name));
    if let Some(title) = definition.title.as_ref().or(spec.display_name.as_ref()) {
        entry.insert("title".into(), json!(title));
    }
    entry.insert("description".into(), json!(definition.description.clone().unwrap_or_default()));
    let schema = definition
        .input_schema
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    entry.insert("inputSchema".into(), schema);
    if let Some(annotations) = &definition.annotations {
        if let Ok(value) = serde_json::to_value(annotations) {
            entry.insert("annotations".into(), value);
        }
    }
    // Without this the CLI defers MCP tools behind its ToolSearch tool and the model cannot call
    // them directly; a tool the host marks `deferLoading` is left to it.
    if !spec.defer_loading {
        entry.insert("_meta".into(), json!({"anthropic/alwaysLoad": true}));
    }
    Value::Object(entry)
}

/// The answer to a `tools/call` with id `id`, from how the tool ended.
pub fn call_result(id: &Value, outcome: &ToolOutcome) -> Value {
    let mut content: Vec<Value> = Vec::new();
    if !outcome.text.is_empty() || outcome.content.is_empty() {
        content.push(json!({"type": "text", "text": outcome.text}));
    }
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": content, "isError": !outcome.success}})
}

/// The `--mcp-config` the CLI is started with: the two in-process servers, then the
/// deployment's own. A stdio server whose `cwd` is not the session's folder is left out (the CLI
/// starts stdio servers in the session's folder) and logged.
pub fn config(
    servers: Option<&std::collections::BTreeMap<String, McpServer>>,
    working_directory: Option<&str>,
) -> Value {
    let mut all = Map::new();
    for name in [HOST_SERVER, CLIENT_SERVER] {
        all.insert(name.into(), json!({"type": "sdk", "name": name, "alwaysLoad": true}));
    }
    for (name, server) in servers.into_iter().flatten() {
        if all.contains_key(name) {
            tracing::warn!(server = %name, "an MCP server named like an in-process one is left out");
            continue;
        }
        let entry = match server {
            McpServer::Stdio { command, args, cwd, env } => {
                if let Some(cwd) = cwd {
                    if Some(cwd.as_str()) != working_directory {
                        tracing::warn!(server = %name, %cwd, "a stdio MCP server whose cwd is not the session's folder is left out: Claude Code starts stdio servers in the session's folder");
                        continue;
                    }
                }
                json!({"type": "stdio", "command": command, "args": args, "env": env})
            }
            McpServer::Http { url, headers } => json!({"type": "http", "url": url, "headers": headers}),
        };
        all.insert(name.clone(), entry);
    }
    json!({"mcpServers": all})
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::ToolDefinition;
    use std::collections::BTreeMap;

    fn spec(name: &str, owner: Option<&str>) -> ToolSpec {
        ToolSpec {
            definition: ToolDefinition {
                name: name.into(),
                title: None,
                description: Some("d".into()),
                input_schema: None,
                output_schema: None,
                annotations: None,
                meta: None,
            },
            owner: owner.map(str::to_owned),
            display_name: None,
            defer_loading: false,
            effects: None,
        }
    }

    #[test]
    fn each_server_lists_its_own_tools() {
        let tools = vec![spec("list_sessions", None), spec("c1__openFile", Some("c1"))];
        let McpReply::Now(host) = handle("host", &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), &tools)
        else {
            panic!("an answer")
        };
        assert_eq!(host["result"]["tools"][0]["name"], "list_sessions");
        assert_eq!(host["result"]["tools"][0]["_meta"]["anthropic/alwaysLoad"], true);
        assert_eq!(host["result"]["tools"].as_array().map(Vec::len), Some(1));
        let McpReply::Now(client) =
            handle("client", &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), &tools)
        else {
            panic!("an answer")
        };
        assert_eq!(client["result"]["tools"][0]["name"], "c1__openFile");
    }

    #[test]
    fn a_call_names_its_tool_use() {
        let message = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                             "params": {"name": "list_sessions", "arguments": {}, "_meta": {"claudecode/toolUseId": "toolu_1"}}});
        let reply = handle("host", &message, &[]);
        assert_eq!(
            reply,
            McpReply::Call {
                id: json!(3),
                name: "list_sessions".into(),
                arguments: json!({}),
                tool_use_id: Some("toolu_1".into())
            }
        );
        let answer = call_result(&json!(3), &ToolOutcome::failed("nope"));
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(answer["result"]["content"][0]["text"], "nope");
    }

    #[test]
    fn notifications_and_unknown_methods_are_answered() {
        assert_eq!(
            handle("host", &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), &[]),
            McpReply::Now(json!({"jsonrpc": "2.0", "result": {}}))
        );
        let McpReply::Now(unknown) = handle("host", &json!({"jsonrpc": "2.0", "id": 4, "method": "frob"}), &[]) else {
            panic!()
        };
        assert_eq!(unknown["error"]["code"], -32601);
    }

    #[test]
    fn config_keeps_sdk_servers_and_leaves_out_a_stdio_server_elsewhere() {
        let mut servers = BTreeMap::new();
        servers.insert(
            "here".to_owned(),
            McpServer::Stdio { command: "x".into(), args: vec![], cwd: Some("/w".into()), env: BTreeMap::new() },
        );
        servers.insert(
            "there".to_owned(),
            McpServer::Stdio {
                command: "y".into(),
                args: vec![],
                cwd: Some("/elsewhere".into()),
                env: BTreeMap::new(),
            },
        );
        servers.insert(
            "web".to_owned(),
            McpServer::Http { url: "http://127.0.0.1:1/mcp".into(), headers: BTreeMap::new() },
        );
        let config = config(Some(&servers), Some("/w"));
        let mut names: Vec<&String> = config["mcpServers"].as_object().expect("object").keys().collect();
        names.sort();
        assert_eq!(names, vec!["client", "here", "host", "web"]);
        assert_eq!(config["mcpServers"]["host"]["type"], "sdk");
    }
}

#!/usr/bin/env python3
"""A stdio MCP server with one tool, `echo`, in the standard library alone (for the test that a
deployment's MCP servers reach the CLI). Newline-delimited JSON-RPC on stdin/stdout."""
import json
import sys


def reply(id_, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}) + "\n")
    sys.stdout.flush()


for raw in sys.stdin:
    raw = raw.strip()
    if not raw:
        continue
    msg = json.loads(raw)
    method, id_ = msg.get("method"), msg.get("id")
    if id_ is None:
        continue
    if method == "initialize":
        reply(id_, {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "echo-server", "version": "0"}})
    elif method == "tools/list":
        reply(id_, {"tools": [{"name": "echo", "description": "Says the text back",
                               "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]})
    elif method == "tools/call":
        text = msg["params"].get("arguments", {}).get("text", "")
        reply(id_, {"content": [{"type": "text", "text": f"echo: {text}"}]})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no"}}) + "\n")
        sys.stdout.flush()

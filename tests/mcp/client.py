#!/usr/bin/env python3
"""Drives an ahpd tools endpoint with the official Python MCP SDK's streamable-HTTP client.

usage: client.py URL TOKEN list
       client.py URL TOKEN call NAME JSON_ARGUMENTS
       client.py URL TOKEN calls JSON_LIST_OF_[NAME,ARGUMENTS]
Prints one JSON object: {"tools": [...]}, {"isError": bool, "text": "..."}, or {"results": [...]} of
those in order (one session, many calls); a call the server answers with a JSON-RPC error is
{"rpcError": MESSAGE}; on a refusal at the HTTP level prints {"httpError": STATUS} (1.x) or the
refusal's words, {"refused": MESSAGE} (2.x reads the JSON-RPC error in its body), and exits 3.
"list" also says the revision the two sides agreed on ({"protocolVersion": ...}).

Runs with either generation of the SDK: 1.x (whose newest revision is 2025-06-18) opens an
`initialize` session; 2.x takes MCP_MODE (its `Client` mode): "legacy" for the `initialize`
handshake at its newest handshake revision, "auto" to probe `server/discover` first, or a
revision such as "2026-07-28" to send every request on its own with that revision.
"""
import asyncio
import contextlib
import importlib.metadata
import json
import os
import sys

SDK_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])

if SDK_MAJOR >= 2:
    import httpx2 as httpx
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError as McpError
else:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    from mcp.shared.exceptions import McpError


@contextlib.asynccontextmanager
async def connect(url, headers):
    """A connected session (1.x `ClientSession`, 2.x `Client`) and the revision it agreed on."""
    if SDK_MAJOR >= 2:
        async with httpx.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=os.environ.get("MCP_MODE", "auto")) as client:
                yield client, client.protocol_version
    else:
        async with streamablehttp_client(url, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                yield session, init.protocolVersion


async def main() -> int:
    url, token, verb = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with connect(url, headers) as (session, revision):
            if verb == "list":
                tools = await session.list_tools()
                print(json.dumps({
                    "protocolVersion": revision,
                    "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools],
                }))
            elif verb == "call":
                print(json.dumps(await call(session, sys.argv[4], json.loads(sys.argv[5]))))
            elif verb == "calls":
                results = [await call(session, name, arguments) for name, arguments in json.loads(sys.argv[4])]
                print(json.dumps({"results": results}))
            else:
                print(json.dumps({"error": f"unknown verb {verb}"}))
                return 2
    except Exception as e:  # the SDK wraps HTTP refusals in exception groups
        status = find_status(e)
        if status is not None:
            print(json.dumps({"httpError": status}))
            return 3
        refusal = find_refusal(e)
        if refusal is not None:
            print(json.dumps({"refused": refusal}))
            return 3
        raise
    return 0


async def call(session, name, arguments):
    try:
        result = await session.call_tool(name, arguments)
    except McpError as e:
        return {"rpcError": e.error.message}
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    is_error = result.is_error if SDK_MAJOR >= 2 else result.isError
    return {"isError": bool(is_error), "text": text}


def find_refusal(e):
    """2.x reads a JSON-RPC error in a refusal's body and raises it: its message."""
    if isinstance(e, McpError):
        return e.error.message
    for inner in getattr(e, "exceptions", []) or []:
        refusal = find_refusal(inner)
        if refusal is not None:
            return refusal
    return None


def find_status(e):
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code
    for inner in getattr(e, "exceptions", []) or []:
        status = find_status(inner)
        if status is not None:
            return status
    cause = e.__cause__ or e.__context__
    return find_status(cause) if cause is not None and cause is not e else None


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

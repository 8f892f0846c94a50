#!/usr/bin/env python3
"""Drives an ahpd tools endpoint with the official Python MCP SDK's streamable-HTTP client.

usage: client.py URL TOKEN list
       client.py URL TOKEN call NAME JSON_ARGUMENTS
       client.py URL TOKEN calls JSON_LIST_OF_[NAME,ARGUMENTS]
Prints one JSON object: {"tools": [...]}, {"isError": bool, "text": "..."}, or {"results": [...]} of
those in order (one session, many calls); a call the server answers with a JSON-RPC error is
{"rpcError": MESSAGE}; on a refusal at the HTTP level prints {"httpError": STATUS} and exits 3.
"""
import asyncio
import json
import sys

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


async def main() -> int:
    url, token, verb = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with streamablehttp_client(url, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                if verb == "list":
                    tools = await session.list_tools()
                    print(json.dumps({
                        "protocolVersion": init.protocolVersion,
                        "tools": [t.model_dump(mode="json", exclude_none=True) for t in tools.tools],
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
        raise
    return 0


async def call(session, name, arguments):
    try:
        result = await session.call_tool(name, arguments)
    except McpError as e:
        return {"rpcError": e.error.message}
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return {"isError": bool(result.isError), "text": text}


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

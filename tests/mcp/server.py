#!/usr/bin/env python3
"""A stdio MCP server made with the official Python MCP SDK, for the tests that configure a
deployment's `mcpServers`: one tool, `shout`, that answers its words in capitals."""
from mcp.server.fastmcp import FastMCP

server = FastMCP("probe")


@server.tool()
def shout(words: str) -> str:
    """Answers the words in capitals (PROBE-TOOL)."""
    return words.upper()


if __name__ == "__main__":
    server.run("stdio")

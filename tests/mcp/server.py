#!/usr/bin/env python3
"""A stdio MCP server made with the official Python MCP SDK, for the tests that configure a
deployment's `mcpServers`: `shout`, that answers its words in capitals, and `screenshot`, that
answers the picture at a path as an MCP image (as a browser server's screenshot tool does)."""
from mcp.server.fastmcp import FastMCP, Image

server = FastMCP("probe")


@server.tool()
def shout(words: str) -> str:
    """Answers the words in capitals (PROBE-TOOL)."""
    return words.upper()


@server.tool()
def screenshot(path: str) -> Image:
    """Answers the PNG picture at path (PROBE-SCREENSHOT)."""
    return Image(path=path)


if __name__ == "__main__":
    server.run("stdio")

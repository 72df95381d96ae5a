"""A small MCP server for the tests (stdio, FastMCP): a counter per process, and a tool that
kills the process mid-episode. Run as ``python counter_server.py`` (stdio) or
``python counter_server.py http PORT`` (streamable HTTP on 127.0.0.1:PORT/mcp)."""

import os
import sys

from mcp.server.fastmcp import FastMCP

HTTP = sys.argv[1:2] == ["http"]
server = FastMCP(
    "counter", instructions="Keep count with the tools; answer with the final count.",
    host="127.0.0.1", port=int(sys.argv[2]) if HTTP else 8000, log_level="WARNING",
)
count = 0


@server.tool()
def add(amount: int) -> str:
    """Add to the counter and return the new count.

    Args:
        amount: How much to add (may be negative).
    """
    global count
    if amount == 0:
        raise ValueError("amount must not be zero")
    count += amount
    return str(count)


@server.tool()
def read() -> str:
    """The current count."""
    return str(count)


@server.tool()
def crash() -> str:
    """Stop the server process at once (a server dying mid-episode)."""
    os._exit(3)


if __name__ == "__main__":
    server.run("streamable-http" if HTTP else "stdio")

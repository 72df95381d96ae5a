"""A stdio MCP server for the tests (FastMCP) with one tool that reports the environment
variables the server process was started with, as JSON."""

import json
import os

from mcp.server.fastmcp import FastMCP

server = FastMCP("environ", log_level="WARNING")


@server.tool()
def environment() -> str:
    """The names and values of this process's environment variables, as a JSON object."""
    return json.dumps(dict(os.environ), sort_keys=True)


if __name__ == "__main__":
    server.run("stdio")

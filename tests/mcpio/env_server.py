"""A stdio MCP server for the tests (FastMCP) with one tool that reports the environment
variables the server process was started with, as JSON, and one that gives the SHA-256 of its
command-line arguments (so a test sees what it was started with without the values, which may
be secrets, reaching a trajectory). With ``TOOLGYM_TEST_STARTS`` set (a file path), each start
appends a line to that file."""

import hashlib
import json
import os
import sys

from mcp.server.fastmcp import FastMCP

print("env_server: starting (a line on stderr)", file=sys.stderr, flush=True)
server = FastMCP("environ", log_level="WARNING")
if os.environ.get("TOOLGYM_TEST_STARTS"):
    with open(os.environ["TOOLGYM_TEST_STARTS"], "a", encoding="utf-8") as starts:
        starts.write("started\n")


@server.tool()
def environment() -> str:
    """The names and values of this process's environment variables, as a JSON object."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool()
def arguments_digest() -> str:
    """The SHA-256 (hex) of this process's arguments after the script, as a JSON list."""
    return hashlib.sha256(json.dumps(sys.argv[1:]).encode()).hexdigest()


if __name__ == "__main__":
    server.run("stdio")

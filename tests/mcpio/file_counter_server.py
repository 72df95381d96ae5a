"""A stdio MCP server for the tests (FastMCP) that keeps a counter in a file, as servers with a
database or a memory file do: ``python file_counter_server.py PATH``."""

import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP

STATE = Path(sys.argv[1])
server = FastMCP("file-counter", log_level="WARNING")


@server.tool()
def add(amount: int) -> str:
    """Add to the counter kept in the file and return the new count.

    Args:
        amount: How much to add.
    """
    count = int(STATE.read_text()) if STATE.exists() else 0
    count += amount
    STATE.write_text(str(count))
    return str(count)


if __name__ == "__main__":
    server.run("stdio")

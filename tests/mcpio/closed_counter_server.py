"""A small MCP server for the tests (stdio, FastMCP) whose tools declare a closed world
(``openWorldHint: false``): a counter that starts at 0 in each server process."""

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("closed-counter", instructions="Keep count with the tools.", log_level="WARNING")
CLOSED = ToolAnnotations(openWorldHint=False)
count = 0


@server.tool(annotations=CLOSED)
def add(amount: int) -> str:
    """Add to the counter and return the new count.

    Args:
        amount: How much to add.
    """
    global count
    count += amount
    return str(count)


if __name__ == "__main__":
    server.run("stdio")

"""A small MCP server for the tests (stdio, FastMCP): a counter per process, and a tool that
kills the process mid-episode. Run as ``python counter_server.py`` (stdio) or
``python counter_server.py http PORT`` (streamable HTTP on 127.0.0.1:PORT/mcp).

Over HTTP, the variable ``COUNTER_AUTH`` (JSON) makes every request need credentials:
``{"headers": {"authorization": "Basic ...", "x-api-key": "K"}, "query": {"NAME": "VALUE"}}``
(each header with exactly that value, each query parameter with that value; a URL's
``user:password@`` arrives as ``Authorization: Basic BASE64``); a request without them gets 401. Each request's
outcome is appended to the file ``COUNTER_AUTH_LOG`` names (``ok`` or ``refused``), so a
test can see that nothing reached the server without its credentials."""

import json
import os
import sys
from urllib.parse import parse_qs

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


def requires_auth(app, need: dict):
    """``app`` behind the credential checks of ``need`` (see the module's docstring)."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qs(scope.get("query_string", b"").decode())
        ok = all(headers.get(name.lower()) == value for name, value in need.get("headers", {}).items())
        ok = ok and all(query.get(name) == [value] for name, value in need.get("query", {}).items())
        if os.environ.get("COUNTER_AUTH_LOG"):
            with open(os.environ["COUNTER_AUTH_LOG"], "a") as log:
                log.write(("ok" if ok else "refused") + "\n")
        if not ok:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            return await send({"type": "http.response.body", "body": b"credentials required"})
        return await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    if HTTP and os.environ.get("COUNTER_AUTH"):
        import uvicorn

        uvicorn.run(requires_auth(server.streamable_http_app(), json.loads(os.environ["COUNTER_AUTH"])),
                    host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run("streamable-http" if HTTP else "stdio")

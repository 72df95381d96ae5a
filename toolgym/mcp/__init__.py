"""The Model Context Protocol (MCP), both ways, through the official ``mcp`` SDK.

* :mod:`toolgym.mcp.serve`: ``toolgym serve`` makes any environment an MCP server (stdio or
  streamable HTTP); every session gets its own environment, and every episode played through
  it is recorded and graded into a run directory like a ``toolgym run``.
* :mod:`toolgym.mcp.environment`: ``--env mcp:"COMMAND ARGS"`` and ``--env
  mcp+http://HOST:PORT/PATH`` make an outside MCP server's tools an environment.

Both need the ``mcp`` extra (``pip install -e '.[mcp]'`` in the toolgym clone).
"""

"""An outside MCP server's tools as an environment: ``--env mcp:"COMMAND ARGS..."`` (a server
started over stdio) or ``--env mcp+http://HOST:PORT/PATH`` (streamable HTTP).

Every episode opens its own MCP session (a stdio server is started afresh for each episode,
with a minimal environment, :func:`server_environment`; a server that keeps its state
elsewhere, in a file or a database, still carries it from one episode to the next), lists the server's tools and shows the model
their ``inputSchema`` exactly as the server publishes it; arguments are checked against it
before the call is sent, as for any :func:`~toolgym.environments.schema_tool`. A result with
``isError: true`` is an error observation (:class:`~toolgym.environments.ToolError`); a server
that dies, hangs past ``timeout_s`` or answers with a protocol error is a broken tool
(:class:`~toolgym.environments.ToolBug`): that trajectory ends with status ``error`` and the
run goes on. The state is not observable through MCP, so ``final_state`` is empty; grade with
the step graders, ``answer_match`` or a judge.

The MCP client runs on one event loop in a background thread shared by all connections, so
tool calls stay synchronous like those of every other environment.

Credentials never reach a run directory: the spec is recorded as
:func:`toolgym.runio.redact_spec` gives it (``--env`` names the environment in ``run.json``
and in every trajectory). Give them as ``${NAME}`` references (``mcp+http://${MCP_USER}:
${MCP_PASSWORD}@HOST/mcp``, ``?key=${MCP_KEY}``, ``--header "Authorization: Bearer
${MCP_TOKEN}"``): the spec is recorded as written and the references are expanded from the
environment each time a session is opened (:func:`connection_target`), so ``grade``,
``export`` and ``--resume`` connect again. A credential written out is recorded as ``***``;
connecting with such a spec is refused (:class:`~toolgym.environments.EnvironmentUnavailable`)
naming what was withheld, never attempted without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from toolgym.benchmark import Benchmark
from toolgym.environments import Environment, EnvironmentUnavailable, ToolError, schema_tool
from toolgym.records import Example
from toolgym.runio import (
    HEADER_OPTION,
    UnsetVariables,
    expand_references,
    expand_url,
    redact_spec,
    referenced_values,
    url_secrets,
    withheld_credentials,
)

__all__ = ["EPISODE_DIR", "HEADER_OPTION", "INSTALL_HINT", "MCPEnvironment", "MCPServerSpec", "PASS_ENV", "STDIO_PREFIX",
           "HTTP_PREFIXES", "ConnectionTarget", "benchmark_for_spec", "connection_target", "parse_spec", "require_mcp",
           "server_environment"]

STDIO_PREFIX = "mcp:"
HTTP_PREFIXES = ("mcp+http://", "mcp+https://")

CONNECT_TIMEOUT_S = 60.0
"""Seconds to start a server, initialize the session and list its tools."""

EPISODE_DIR = "{episode_dir}"
"""Replaced, in a stdio server's command, by a new empty folder for each session (each
episode), removed when it ends: ``mcp:uvx mcp-server-sqlite --db-path {episode_dir}/db.sqlite``
gives every episode a fresh database. A server that keeps its state in a file or a database of
a fixed path otherwise carries it from one episode to the next, although each episode starts
the server afresh."""

STDERR_SHOWN = 500
"""Characters of a failing stdio server's stderr quoted in the error (its last ones)."""

INSTALL_HINT = "install the extra in the toolgym clone: pip install -e '.[mcp]'"


def require_mcp() -> None:
    """Check that the MCP SDK can be imported.

    Raises:
        ValueError: ``install the extra in the toolgym clone: pip install -e '.[mcp]'`` when it cannot.
    """
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ValueError(INSTALL_HINT) from None


class _NotJsonRpc(logging.Filter):
    """Drops the MCP SDK's traceback for each stdout line of a stdio server that is not
    JSON-RPC; :class:`_Connection` reports the first such line itself, in one sentence."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


logging.getLogger("mcp.client.stdio").addFilter(_NotJsonRpc())


@dataclass(frozen=True)
class MCPServerSpec:
    """Where an MCP server is, as given (``${NAME}`` references not yet expanded).

    Attributes:
        spec: The ``--env`` text it was parsed from.
        command: For stdio: the program and its arguments (split like a POSIX shell).
        url: For streamable HTTP: the endpoint URL (``http://HOST:PORT/PATH``).
        pass_env: For stdio: names of the caller's environment variables the server is
            given besides the minimal environment (:func:`server_environment`).
        headers: For streamable HTTP: ``Name: value`` headers sent with every request
            (``--header`` in the spec).
    """

    spec: str
    command: tuple[str, ...] = ()
    url: str | None = None
    pass_env: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The environment's name: the spec without its credentials
        (:func:`toolgym.runio.redact_spec`), as every run record and message shows it."""
        return redact_spec(self.spec)


@dataclass(frozen=True)
class ConnectionTarget:
    """What a session connects to, with every ``${NAME}`` reference expanded (held in memory
    only, never recorded).

    Attributes:
        url: The endpoint URL (streamable HTTP), else ``None``.
        headers: Header name to value (streamable HTTP).
        command: The program and its arguments (stdio).
        secrets: The values to scrub from every message (the expanded references, the
            credentials written in the spec), longest first.
    """

    url: str | None
    headers: dict[str, str]
    command: tuple[str, ...]
    secrets: tuple[str, ...]

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def _header_secrets(value: str) -> list[str]:
    """The credentials a header value written out holds, for scrubbing: the value, and its words
    after a scheme word (``Bearer abc`` gives ``Bearer abc`` and ``abc``, never ``Bearer``);
    ``${NAME}`` references are no secret (their values are added where they are expanded)."""
    words = [w for w in value.split() if not _REFERENCE.fullmatch(w)]
    found = words[1:] if len(value.split()) > 1 else words
    return [value.strip(), *found] if value.strip() and not _REFERENCE.search(value) else found


def connection_target(server: MCPServerSpec, environ: dict[str, str] | None = None) -> ConnectionTarget:
    """Expand the ``${NAME}`` references of a server spec from the environment, to connect.

    In the URL, a reference in the user, the password or a query value is percent-encoded
    (a password holding ``@`` or ``&`` stays one value); elsewhere (host, path, headers, a
    stdio command's words) it is put in as it is.

    Args:
        server: The parsed spec.
        environ: The variables to read (default: ``os.environ``).

    Raises:
        EnvironmentUnavailable: when the spec holds ``***`` where a run withheld a credential
            (:func:`toolgym.runio.withheld_credentials`), or names a variable that is not set;
            the message says what is missing and how to give it.
    """
    from urllib.parse import unquote

    environ = os.environ if environ is None else environ
    withheld = withheld_credentials(server.spec)
    if withheld:
        raise EnvironmentUnavailable(
            f"{server.name}: {_listed(withheld)} of this MCP server {'was' if len(withheld) == 1 else 'were'} not "
            "recorded (a run never records a credential), so toolgym will not connect without "
            f"{'it' if len(withheld) == 1 else 'them'}. Give the spec with the credentials again (--env SPEC, for "
            "run --resume and export), or write them as ${NAME} references, recorded as written and read from the "
            "environment when connecting: mcp+http://${MCP_USER}:${MCP_PASSWORD}@HOST/PATH, ?key=${MCP_KEY}, "
            "--header 'Authorization: Bearer ${MCP_TOKEN}'"
        )
    try:
        expand_references(" ".join((server.url or "", *server.headers, *server.command)), environ)
    except UnsetVariables as exc:
        raise EnvironmentUnavailable(
            f"{server.name}: the environment variable{'s' if len(exc.names) > 1 else ''} {', '.join(exc.names)} named "
            f"in the spec {'are' if len(exc.names) > 1 else 'is'} not set; set {'them' if len(exc.names) > 1 else 'it'} "
            "before connecting (toolgym reads the value when it opens a session and never records it)"
        ) from None
    secrets: set[str] = set(referenced_values(server.spec, environ))
    url = None
    if server.url is not None:
        url = expand_url(server.url, environ)
        secrets.update(url_secrets(server.url))
        secrets.update(url_secrets(url))
        secrets.update(unquote(s) for s in url_secrets(url))
    headers: dict[str, str] = {}
    for header in server.headers:
        name, _, written = header.partition(":")
        headers[name.strip()] = expand_references(written.strip(), environ)
        secrets.update(_header_secrets(written))
    command = tuple(expand_references(word, environ) for word in server.command)
    for i, word in enumerate(server.command):  # a credential written in a stdio command's URL or header
        secrets.update(url_secrets(word))
        if (i > 0 and server.command[i - 1] == HEADER_OPTION) or word.startswith(HEADER_OPTION + "="):
            secrets.update(_header_secrets(word.partition(":")[2]))
    return ConnectionTarget(url=url, headers=headers, command=command,
                            secrets=tuple(sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)))


PASS_ENV = "--pass-env"
"""The word that names a variable to pass to a stdio server, before the command:
``mcp:--pass-env GITHUB_TOKEN npx -y SERVER`` (repeatable; names only, never values, so the
spec recorded in ``run.json`` holds no secret)."""

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def server_environment(pass_env: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment a stdio MCP server is started with: the MCP SDK's minimal default
    (``mcp.client.stdio.get_default_environment()``: ``HOME``, ``LOGNAME``, ``PATH``,
    ``SHELL``, ``TERM``, ``USER`` on POSIX) plus the variables named in ``pass_env`` that
    are set. The caller's other variables (API keys above all) never reach the server.

    Args:
        pass_env: Variable names (``--pass-env NAME`` in the spec).

    Returns:
        Name to value.
    """
    from mcp.client.stdio import get_default_environment

    env = get_default_environment()
    env.update({name: os.environ[name] for name in pass_env if name in os.environ})
    return env


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP header name (a ``token``, RFC 9110 section 5.1)."""


def parse_spec(spec: str) -> MCPServerSpec:
    """Parse ``mcp:[--pass-env NAME]... COMMAND ARGS...`` or
    ``mcp+http(s)://HOST:PORT/PATH [--header "Name: value"]...``. ``${NAME}`` references are
    kept as written (:func:`connection_target` expands them).

    Raises:
        ValueError: for an empty command, unbalanced quotes, a ``--pass-env`` without a
            variable name (or with ``NAME=VALUE``), a URL without a host, a ``--header``
            without ``Name: value``, or another word after the URL.
    """
    if spec.startswith(HTTP_PREFIXES):
        try:
            words = shlex.split(spec[len("mcp+"):])
        except ValueError as exc:
            raise ValueError(f"{redact_spec(spec)!r}: cannot split the spec: {exc}") from None
        url, rest, headers = (words[0] if words else ""), words[1:], []
        if not urlsplit(url).hostname:
            raise ValueError(f"{redact_spec(spec)!r}: the URL has no host (expected mcp+http://HOST:PORT/PATH)")
        while rest:
            if rest[0] == HEADER_OPTION and len(rest) > 1:
                header, rest = rest[1], rest[2:]
            elif rest[0].startswith(HEADER_OPTION + "="):
                header, rest = rest[0][len(HEADER_OPTION) + 1:], rest[1:]
            else:
                raise ValueError(f"{redact_spec(spec)!r}: expected {HEADER_OPTION} 'Name: value' after the URL, got "
                                 f"{redact_spec(rest[0])!r}")
            name, colon, _ = header.partition(":")
            if not colon or not _HEADER_NAME.fullmatch(name.strip()):
                raise ValueError(f"{redact_spec(spec)!r}: {HEADER_OPTION} takes 'Name: value' (an HTTP header), got "
                                 f"{redact_spec(header) if colon else '***'!r}")
            headers.append(header)
        return MCPServerSpec(spec=spec, url=url, headers=tuple(headers))
    if not spec.startswith(STDIO_PREFIX):
        raise ValueError(f"{redact_spec(spec)!r}: expected mcp:COMMAND ARGS... or mcp+http://HOST:PORT/PATH")
    try:
        argv = tuple(shlex.split(spec[len(STDIO_PREFIX):]))
    except ValueError as exc:
        raise ValueError(f"{redact_spec(spec)!r}: cannot split the command: {exc}") from None
    pass_env: list[str] = []
    while argv and (argv[0] == PASS_ENV or argv[0].startswith(PASS_ENV + "=")):
        if argv[0] == PASS_ENV:
            if len(argv) < 2:
                raise ValueError(f"{redact_spec(spec)!r}: {PASS_ENV} needs a variable name")
            name, argv = argv[1], argv[2:]
        else:
            name, argv = argv[0][len(PASS_ENV) + 1:], argv[1:]
        if not _VARIABLE.fullmatch(name):
            raise ValueError(f"{redact_spec(spec)!r}: {PASS_ENV} {name!r} is not a variable name (give the name, not NAME=VALUE)")
        pass_env.append(name)
    if not argv:
        raise ValueError(f"{redact_spec(spec)!r}: no command after 'mcp:' (expected mcp:COMMAND ARGS...)")
    return MCPServerSpec(spec=spec, command=argv, pass_env=tuple(pass_env))


class _LoopThread:
    """One asyncio event loop in a daemon thread, shared by every MCP connection."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="toolgym-mcp-client", daemon=True).start()
                cls._loop = loop
            return cls._loop


class _Connection:
    """One MCP client session to a server, held open by a task on the shared loop."""

    def __init__(self, server: MCPServerSpec, timeout_s: float) -> None:
        self.server = server
        self.target = connection_target(server)  # EnvironmentUnavailable before any thread or process
        self.timeout_s = timeout_s
        self.loop = _LoopThread.get()
        self.session: Any = None
        self.tools: list[Any] = []
        self.instructions: str | None = None
        self.lost: str | None = None  # why the session ended early
        self.not_json_rpc: str | None = None  # the first stdout line that was not JSON-RPC
        self.errlog: Any = None  # a stdio server's stderr, kept in a temporary file
        self.episode_dir: str | None = None  # the session's own folder, for {episode_dir}
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Future | None = None
        ready: asyncio.Future = asyncio.run_coroutine_threadsafe(self._open(), self.loop)
        try:
            self._closing, self._task = ready.result(CONNECT_TIMEOUT_S)
        except TimeoutError:
            ready.cancel()
            raise RuntimeError(f"{server.name}: no MCP session within {CONNECT_TIMEOUT_S:.0f} s") from None

    async def _open(self) -> tuple[asyncio.Event, asyncio.Task]:
        started: asyncio.Future = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._hold(started, closing))
        await started
        return closing, task

    async def _hold(self, started: asyncio.Future, closing: asyncio.Event) -> None:
        try:  # every failure, a missing SDK included, reaches the caller through `started`
            from mcp import ClientSession, StdioServerParameters, types
            from mcp.client.stdio import stdio_client
            from mcp.client.streamable_http import streamable_http_client

            from toolgym import __version__

            async def on_message(message: Any) -> None:
                if isinstance(message, Exception) and self.not_json_rpc is None:
                    self.not_json_rpc = _bad_line(message)

            async with contextlib.AsyncExitStack() as stack:
                if self.target.url is not None:
                    from mcp.shared._httpx_utils import create_mcp_http_client

                    client = await stack.enter_async_context(create_mcp_http_client(headers=self.target.headers or None))
                    read, write, _ = await stack.enter_async_context(
                        streamable_http_client(self.target.url, http_client=client))
                else:
                    # its stderr goes to a file, quoted only when the server fails (not printed per episode)
                    self.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
                    command = list(self.target.command)
                    if any(EPISODE_DIR in word for word in command):
                        self.episode_dir = tempfile.mkdtemp(prefix="toolgym-mcp-episode-")
                        command = [word.replace(EPISODE_DIR, self.episode_dir) for word in command]
                    params = StdioServerParameters(
                        command=command[0], args=command[1:],
                        env=server_environment(self.server.pass_env),
                    )
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=self.errlog))
                session = await stack.enter_async_context(
                    ClientSession(read, write, client_info=types.Implementation(name="toolgym", version=__version__),
                                  message_handler=on_message)
                )
                init = await session.initialize()
                tools, cursor = [], None
                while True:
                    page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools += page.tools
                    cursor = page.nextCursor
                    if not cursor:
                        break
                self.session, self.tools, self.instructions = session, tools, init.instructions
                started.set_result(None)
                await closing.wait()
        except BaseException as exc:  # noqa: BLE001 -- reported to the caller, never lost
            reason = self.target.scrub(f"{type(exc).__name__}: {_exception_text(exc)}{self._stderr_tail()}")
            if not started.done():
                shown = redact_spec(shlex.join(self.server.command))  # as recorded: references, no values
                if isinstance(exc, ImportError):
                    message = f"{self.server.name}: {INSTALL_HINT}"
                elif self.not_json_rpc is not None:
                    message = (f"{self.server.name}: the command {shown!r} is not an MCP server: it wrote "
                               f"{self.target.scrub(self.not_json_rpc)!r} on stdout, not a JSON-RPC message")
                elif self.target.url is not None and _refused_status(exc) is not None:
                    message = _refused_message(self.server, _refused_status(exc))
                elif self.server.command and not isinstance(_innermost(exc), OSError):
                    message = (f"{self.server.name}: the command {shown!r} ended before the "
                               f"MCP handshake was done ({reason}); is it an MCP server on stdio?")
                else:
                    message = f"{self.server.name}: cannot open an MCP session: {reason}"
                started.set_exception(RuntimeError(message))
            else:
                self.lost = reason
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self.errlog is not None:
                self.errlog.close()
            if self.episode_dir is not None:
                shutil.rmtree(self.episode_dir, ignore_errors=True)

    def _stderr_tail(self) -> str:
        """The end of what a stdio server wrote on stderr (``; stderr: ...``), else ``""``."""
        if self.errlog is None:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(0)
            text = self.errlog.read().strip()
        except (OSError, ValueError):  # closed already
            return ""
        if not text:
            return ""
        return f"; stderr: {text if len(text) <= STDERR_SHOWN else '...' + text[-STDERR_SHOWN:]}"

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Send ``tools/call`` and wait for its result (``CallToolResult``).

        Raises:
            RuntimeError: when the session is gone, the call fails at the protocol level or
                no answer comes within ``timeout_s``.
        """
        if self.lost is not None:
            raise RuntimeError(f"MCP server {self.server.name!r} is gone ({self.lost})")
        pending = asyncio.run_coroutine_threadsafe(
            self.session.call_tool(name, arguments, read_timeout_seconds=timedelta(seconds=self.timeout_s)), self.loop
        )
        try:
            return pending.result(self.timeout_s + 5)
        except TimeoutError:
            pending.cancel()
            raise RuntimeError(f"MCP server {self.server.name!r}: no answer to {name!r} within {self.timeout_s:.0f} s") from None
        except Exception as exc:
            lost = f" ({self.lost})" if self.lost else ""
            text = self.target.scrub(f"{type(exc).__name__}: {_exception_text(exc)}{lost}")
            raise RuntimeError(f"MCP server {self.server.name!r}: {text}") from exc

    def close(self) -> None:
        """End the session (a stdio server is stopped); waits a few seconds at most."""
        if self._closing is None or self._task is None:
            return
        closing, task = self._closing, self._task
        self._closing = None

        async def stop() -> None:
            closing.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(15)


def _bad_line(exc: Exception) -> str:
    """The input of a JSON-RPC parse error (pydantic's ``input_value``), cut to 80 characters."""
    errors = getattr(exc, "errors", None)
    try:
        line = str(errors()[0]["input"]) if callable(errors) else str(exc)
    except Exception:  # noqa: BLE001 -- any other exception: its text
        line = str(exc)
    return line if len(line) <= 80 else line[:77] + "..."


def _innermost(exc: BaseException) -> BaseException:
    """The first exception of an exception group (of nested groups), else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _refused_status(exc: BaseException) -> int | None:
    """401 or 403 when an HTTP response with that status is among ``exc``, the exceptions of
    its (nested) groups and their causes (``httpx.HTTPStatusError``), else ``None``."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        status = getattr(getattr(current, "response", None), "status_code", None)
        if status in (401, 403):
            return status
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def _refused_message(server: MCPServerSpec, status: int) -> str:
    """Why a session could not open when the server answered 401 or 403: the credentials were
    refused, and which parts of the spec carry them (names only, never values).

    Args:
        server: The spec as given (``${NAME}`` references not expanded).
        status: 401 or 403.
    """
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(server.url or "")
    given = []
    if parts.username is not None or parts.password is not None:
        given.append("the URL's user and password (sent as HTTP Basic authentication)")
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if names:
        given.append(f"the value{'s' if len(names) > 1 else ''} of query parameter{'s' if len(names) > 1 else ''} "
                     f"{_listed([repr(n) for n in names])}")
    headers = [h.partition(":")[0].strip() for h in server.headers]
    if headers:
        given.append(f"the header{'s' if len(headers) > 1 else ''} {_listed([repr(h) for h in headers])}")
    variables = list(dict.fromkeys(_REFERENCE.findall(" ".join((server.url or "", *server.headers)))))
    if variables:
        given.append(f"the value{'s' if len(variables) > 1 else ''} of {_listed(variables)} in your environment")
    what = ("unauthorized: the credentials are missing or wrong" if status == 401
            else "forbidden: the credentials are not accepted for this server")
    check = (f"check {_listed(given)}" if given else
             "the spec gives none: add them, e.g. --header 'Authorization: Bearer ${MCP_TOKEN}' after the URL")
    return f"{server.name}: cannot open an MCP session: the server refused the credentials (HTTP {status} {what}); {check}"


def _exception_text(exc: BaseException) -> str:
    """The message of an exception, or of the first one in an exception group."""
    exc = _innermost(exc)
    return str(exc) or type(exc).__name__


def _result_text(result: Any) -> str:
    """The text of a ``CallToolResult``: its text blocks joined by newlines; other blocks as
    JSON; the structured content as JSON when there is no content."""
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else block.model_dump_json(exclude_none=True))
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


class MCPEnvironment(Environment):
    """Base class of the environments made by :func:`benchmark_for_spec`; ``server`` says
    where the MCP server is. The instructions are the server's (its ``initialize`` result),
    else :attr:`default_instructions`.

    Attributes:
        server: Where the server is.
        timeout_s: Seconds a tool call may take before the episode ends with status ``error``.
    """

    server: ClassVar[MCPServerSpec]
    describe_once: ClassVar[bool] = True  # the server's tools and instructions, for every example
    timeout_s: ClassVar[float] = 120.0
    default_instructions: ClassVar[str] = "Complete the user's request with the provided tools."
    _listed: ClassVar[list[Any] | None] = None  # the tools of the first session, for checks

    def __init__(self) -> None:
        super().__init__()
        self._connection: _Connection | None = None

    def reset(self, example: Example) -> None:
        """Open this episode's MCP session (start the stdio server).

        Raises:
            RuntimeError: when the server cannot be started or does not answer.
        """
        self._connection = _Connection(self.server, self.timeout_s)
        self.instructions = self._connection.instructions or self.default_instructions
        type(self)._listed = self._connection.tools

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def replays_deterministically(self) -> bool:
        """True when the server says every tool of this session works on a closed world: its
        annotations set ``openWorldHint`` to false (MCP specification, "Tool annotations":
        an open-world tool "may interact with an open world of external entities", so calling
        it again need not give the same result)."""
        tools = self._connection.tools if self._connection is not None else (type(self)._listed or [])
        return bool(tools) and all(
            getattr(t, "annotations", None) is not None and t.annotations.openWorldHint is False for t in tools
        )

    def tool_functions(self) -> dict[str, Callable]:
        """One :func:`schema_tool` per tool the server lists. Before :meth:`reset` (the
        dataset check) a session is opened once to list them.

        Raises:
            EnvironmentUnavailable: before :meth:`reset`, when the spec's credentials were
                withheld by a run or a variable it names is not set (:func:`connection_target`).
        """
        cls = type(self)
        if self._connection is not None:
            tools = self._connection.tools
        else:
            connection_target(self.server)  # credentials withheld or unset: refused even when listed before
            if cls._listed is None:
                probe = _Connection(self.server, self.timeout_s)
                try:
                    cls._listed = probe.tools
                finally:
                    probe.close()
            tools = cls._listed
        return {t.name: schema_tool(t.name, t.description or "", _object_schema(t.inputSchema), self._caller(t.name)) for t in tools}

    def _caller(self, name: str) -> Callable[..., str]:
        def call(**arguments: Any) -> str:
            if self._connection is None:
                raise RuntimeError("no MCP session: the environment was not reset")
            result = self._connection.call(name, arguments)
            text = _result_text(result)
            if result.isError:
                raise ToolError(text)
            return text

        return call


def _object_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """An ``inputSchema`` as an object schema (the MCP specification requires ``type:
    object``; a server that leaves it out gets it added)."""
    schema = dict(schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def benchmark_for_spec(spec: str) -> Benchmark:
    """The benchmark of an MCP server spec (the ``mcp:`` and ``mcp+http://`` spec forms of the
    environment registry): graders ``steps_exact``, ``step_ratio`` and ``answer_match``, the
    judge ``correctness`` with ``--judge-model``; no built-in dataset (give ``--dataset``).

    Raises:
        ValueError: for a malformed spec (see :func:`parse_spec`), or when the MCP SDK is not
            installed (``install the extra in the toolgym clone: pip install -e '.[mcp]'``).
    """
    server = parse_spec(spec)
    require_mcp()
    name = server.name  # the spec without its credentials: what run.json and every trajectory record
    cls = type("MCPServer", (MCPEnvironment,), {"server": server, "name": name, "__module__": __name__})
    kind = f"streamable HTTP at {redact_spec(server.url or '')}" if server.url else f"stdio: {redact_spec(shlex.join(server.command))}"
    return Benchmark(
        environment=cls, name=name, graders=("steps_exact", "step_ratio", "answer_match"),
        judge_graders=("correctness",), description=f"the tools of an MCP server ({kind})",
    )

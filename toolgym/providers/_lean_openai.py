"""A leaner ``ChatOpenAI`` for OpenAI-compatible servers under high concurrency.

Measured on this project's 2-core machine against a loopback stub (``benchmarks/
jmultiwoz_throughput.py``; numbers in BENCHMARKS.md), the stock client spends about 5 ms of CPU
per request on a 17-message Japanese history with the 9 JMultiWOZ-TC tools, which caps a run
far below what a fast server answers. The costs, and what :class:`LeanChatOpenAI` does instead:

* the OpenAI SDK walks every request parameter against its TypedDict annotations before
  sending (``_utils/_transform.py``): hundreds of recursive calls per request for long
  histories and nested tool schemas;
* the SDK's HTTP client builds request/response objects, and its connection pool scans every
  pooled connection on each request;
* ChatOpenAI turns the response into messages in a worker thread (a thread hop per request).

For a plain ``http://`` base URL and an ordinary chat-completions call (no streaming, no
structured output, no Responses API, no response headers wanted), LeanChatOpenAI posts the same
JSON body itself over keep-alive asyncio connections (an O(1) pool per event loop and host),
retries connection failures, timeouts and 408/409/429/5xx answers like the SDK
(``max_retries``, exponential back-off, ``Retry-After``), and parses the answer with
ChatOpenAI's own ``_create_chat_result``. Any other answer status is sent once more through
the SDK, so errors are the SDK's own (``openai.BadRequestError``, ...). A request that still
times out raises ``TimeoutError``; one that cannot connect raises ``ConnectionError``. Every
other case goes through the SDK unchanged except that its parameters skip the type transform
(they are passed as ``extra_body``, which the SDK merges into the JSON as is) and its HTTP
client uses :class:`LeanAsyncTransport`.

This module is not a provider (its name starts with ``_``, so the registry does not import it
and ``langchain-openai`` stays optional); an OpenAI-compatible provider can build its model as
``LeanChatOpenAI(model=..., base_url=..., api_key=...)``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import weakref
from typing import Any
from urllib.parse import urlsplit

from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr

__all__ = ["LeanAsyncTransport", "LeanChatOpenAI", "httpx_module"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# Arguments of ``create()`` that steer the SDK itself rather than being JSON body fields.
_SDK_OPTIONS = ("model", "stream", "extra_headers", "extra_query", "extra_body", "timeout")


def httpx_module() -> Any:
    """The httpx package the installed OpenAI SDK is built on (``httpx2`` or ``httpx``)."""
    base = importlib.import_module("openai._base_client")
    for name in ("httpx2", "httpx"):
        if hasattr(base, name):
            return getattr(base, name)
    return importlib.import_module("httpx")


_hx = httpx_module()

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _Connections:
    """Idle keep-alive HTTP/1.1 connections, per event loop and ``(host, port)``."""

    def __init__(self, max_idle_per_host: int = 512) -> None:
        self.max_idle_per_host = max_idle_per_host
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], list[Connection]]]
        self._by_loop = weakref.WeakKeyDictionary()

    def _idle(self, key: tuple[str, int]) -> list[Connection]:
        return self._by_loop.setdefault(asyncio.get_running_loop(), {}).setdefault(key, [])

    async def exchange(
        self, key: tuple[str, int], message: bytes, connect_timeout: float | None, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send one request and read its response.

        Raises:
            ConnectionError: when no connection can be made, or it breaks mid-exchange (a
                failure on a reused idle connection is retried once on a new one first).
            TimeoutError: when connecting or reading takes longer than the timeouts.
        """
        idle = self._idle(key)
        for attempt in (0, 1):
            reused = bool(idle)
            if reused:
                reader, writer = idle.pop()
            else:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(*key), connect_timeout)
                except TimeoutError:
                    raise TimeoutError(f"connecting to {key[0]}:{key[1]} timed out") from None
                except OSError as exc:
                    raise ConnectionError(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
            try:
                writer.write(message)
                status, headers, data, keep = await asyncio.wait_for(_read_response(reader), read_timeout)
            except TimeoutError:
                writer.close()
                raise TimeoutError(f"no response from {key[0]}:{key[1]} within {read_timeout} s") from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                writer.close()
                if reused and attempt == 0:
                    continue  # the server closed an idle connection: once more on a new one
                raise ConnectionError(f"connection to {key[0]}:{key[1]} broke: {type(exc).__name__}: {exc}") from exc
            if keep and len(idle) < self.max_idle_per_host:
                idle.append((reader, writer))
            else:
                writer.close()
            return status, headers, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close every idle connection of the running loop."""
        try:
            pools = self._by_loop.pop(asyncio.get_running_loop(), {})
        except RuntimeError:
            return
        for idle in pools.values():
            for _, writer in idle:
                writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head[:-4].split(b"\r\n")
    version, status = status_line.split(b" ", 2)[:2]
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    keep = version == b"HTTP/1.1"
    for line in lines:
        name, _, value = line.partition(b":")
        name, value = name.strip(), value.strip()
        lower = name.lower()
        if lower == b"content-length":
            length = int(value)
        elif lower == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
            continue  # the body is handed over de-chunked
        elif lower == b"connection":
            keep = value.lower() != b"close"
        headers.append((name, value))
    if chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        data = b"".join(parts)
    elif length is not None:
        data = await reader.readexactly(length)
    else:
        data, keep = await reader.read(), False
    return int(status), headers, data, keep


class LeanAsyncTransport(_hx.AsyncBaseTransport):
    """An httpx transport for ``http://`` servers: HTTP/1.1 over asyncio streams with an O(1)
    keep-alive pool per event loop; ``https`` goes to the default transport.

    Read and connect timeouts come from the request's ``timeout`` extension; failures raise
    ``ReadTimeout``/``ConnectTimeout``/``ConnectError``/``RemoteProtocolError``, which the
    OpenAI SDK retries like its own.
    """

    def __init__(self, max_idle_per_host: int = 512) -> None:
        self._connections = _Connections(max_idle_per_host)
        self._fallback: Any = None

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        if url.scheme != "http":
            if self._fallback is None:
                self._fallback = _hx.AsyncHTTPTransport()
            return await self._fallback.handle_async_request(request)
        body = await request.aread()
        head = [f"{request.method} {url.raw_path.decode('ascii')} HTTP/1.1"]
        head.extend(k.decode("latin-1") + ": " + v.decode("latin-1") for k, v in request.headers.raw)
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        timeouts = request.extensions.get("timeout") or {}
        try:
            status, headers, data = await self._connections.exchange(
                (url.host, url.port or 80), message, timeouts.get("connect"), timeouts.get("read")
            )
        except TimeoutError as exc:
            raise _hx.ReadTimeout(str(exc), request=request) from exc
        except ConnectionError as exc:
            kind = _hx.ConnectError if "cannot connect" in str(exc) else _hx.RemoteProtocolError
            raise kind(str(exc), request=request) from exc
        return _hx.Response(status, headers=headers, content=data, request=request)

    async def aclose(self) -> None:
        """Close the idle connections of the running loop (and the fallback transport)."""
        self._connections.close()
        if self._fallback is not None:
            fallback, self._fallback = self._fallback, None
            await fallback.aclose()


def _seconds(timeout: Any) -> float | None | bool:
    """A ChatOpenAI ``timeout`` as one number of seconds, ``None`` (no limit), or ``False``
    when it is a form only the SDK understands."""
    if timeout is None or isinstance(timeout, (int, float)):
        return timeout
    if isinstance(timeout, tuple) and all(isinstance(t, (int, float)) for t in timeout):
        return max(timeout)
    return False


class LeanChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` with a direct request path for ``http://`` servers (see the module
    docstring); the JSON sent and the messages returned are the same as ChatOpenAI's."""

    _connections: _Connections = PrivateAttr(default_factory=_Connections)
    _transport: LeanAsyncTransport | None = PrivateAttr(default=None)

    def __init__(self, **kwargs: Any) -> None:
        transport = None
        if kwargs.get("http_async_client") is None:
            transport = LeanAsyncTransport()
            kwargs["http_async_client"] = _hx.AsyncClient(transport=transport)
        super().__init__(**kwargs)
        self._transport = transport

    async def aclose(self) -> None:
        """Close the idle connections of the running event loop (the runner calls this when
        a run's episodes are done); the model stays usable."""
        self._connections.close()
        if self._transport is not None:
            await self._transport.aclose()

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "messages" not in payload or "response_format" in payload:
            return payload  # Responses API or structured output: the SDK needs the typed params
        body = {k: v for k, v in payload.items() if k not in _SDK_OPTIONS}
        body.update(payload.get("extra_body") or {})
        lean = {k: payload[k] for k in _SDK_OPTIONS if k in payload}
        lean["messages"] = []  # a required argument of create(); replaced by the body's
        lean["extra_body"] = body
        return lean

    def _direct_request(self, payload: dict) -> tuple[tuple[str, int], str, bytes, float | None] | None:
        """``(host and port, path, request bytes, timeout)`` when the direct path applies."""
        timeout = _seconds(self.request_timeout)
        key = self.openai_api_key
        secret = key.get_secret_value() if hasattr(key, "get_secret_value") else key
        if (
            payload.get("stream")
            or "extra_body" not in payload
            or any(k in payload for k in ("extra_headers", "extra_query"))
            or self.include_response_headers
            or getattr(self, "_uses_gateway", False)
            or timeout is False
            or not (secret is None or isinstance(secret, str))
        ):
            return None
        url = urlsplit(str(self.openai_api_base or "https://api.openai.com/v1").rstrip("/") + "/chat/completions")
        if url.scheme != "http" or not url.hostname:
            return None
        body = dict(payload["extra_body"])
        body["model"] = payload["model"]
        if "stream" in payload:
            body["stream"] = payload["stream"]  # false, as the SDK would send it
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {
            "Host": url.netloc, "Content-Type": "application/json", "Accept": "application/json",
            "User-Agent": "toolgym-lean-openai", "Content-Length": str(len(data)),
        }
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        if self.openai_organization:
            headers["OpenAI-Organization"] = self.openai_organization
        headers.update(self.default_headers or {})
        head = f"POST {url.path}{'?' + url.query if url.query else ''} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        return (url.hostname, url.port or 80), url.path, head.encode("latin-1") + data, timeout

    async def _agenerate(self, messages: Any, stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        direct = self._direct_request(payload)
        if direct is None:
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        key, path, message, timeout = direct
        attempts = 1 + (self.max_retries if self.max_retries is not None else 2)
        for attempt in range(attempts):
            wait = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
            try:
                status, headers, data = await self._connections.exchange(key, message, timeout, timeout)
            except (TimeoutError, ConnectionError):
                if attempt + 1 == attempts:
                    raise
                await asyncio.sleep(wait)
                continue
            if status in RETRY_STATUSES and attempt + 1 < attempts:
                after = next((v for k, v in headers if k.lower() == b"retry-after"), b"")
                await asyncio.sleep(float(after) if after.isdigit() and int(after) <= 60 else wait)
                continue
            if status != 200:  # let the SDK raise its own error for this answer
                return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            try:
                response = json.loads(data)
            except ValueError:
                raise ValueError(f"{key[0]}:{key[1]}{path} answered with non-JSON: {data[:200]!r}") from None
            return self._create_chat_result(response)
        raise AssertionError("unreachable")

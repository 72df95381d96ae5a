"""LeanChatOpenAI against a real HTTP server on 127.0.0.1: the same request body and parsed
answer as the stock ChatOpenAI, keep-alive, retries, timeouts and the SDK's errors."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("langchain_openai")

from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI

from tests.jmultiwoz_helpers import TOOLS
from toolgym.providers._lean_openai import LeanChatOpenAI

ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "Search_hotel", "arguments": "{\"city\": \"東京\"}"}}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


class Server:
    """An HTTP/1.1 server in a thread; ``behave(n, body)`` decides each answer:
    ``(status, body bytes, options)`` with options ``chunked``, ``close``, ``delay``, ``drop``."""

    def __init__(self, behave: Callable[[int, dict], tuple[int, bytes, dict]] | None = None) -> None:
        self.behave = behave or (lambda n, body: (200, json.dumps(ANSWER).encode(), {}))
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _shutdown(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))) or b"{}")
                self.requests.append({"path": lines[0].split()[1], "headers": headers, "body": body})
                status, out, options = self.behave(len(self.requests), body)
                if options.get("delay"):
                    await asyncio.sleep(options["delay"])
                if options.get("drop"):
                    break
                head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                if options.get("close"):
                    head += "connection: close\r\n"
                if options.get("chunked"):
                    mid = len(out) // 2
                    payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (out[:mid], out[mid:])) + b"0\r\n\r\n"
                    writer.write((head + "transfer-encoding: chunked\r\n\r\n").encode() + payload)
                else:
                    writer.write((head + f"content-length: {len(out)}\r\n\r\n").encode() + out)
                await writer.drain()
                if options.get("close"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def server():
    servers: list[Server] = []

    def make(behave=None) -> Server:
        servers.append(Server(behave))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


HISTORY = [HumanMessage("東京のホテル"), AIMessage("エリアは？"), HumanMessage("新宿で")]


def ask(model: Any, n: int = 1) -> list[AIMessage]:
    bound = model.bind_tools(TOOLS)

    async def go() -> list[AIMessage]:
        return [await bound.ainvoke(HISTORY) for _ in range(n)]

    return asyncio.run(go())


def test_same_body_and_answer_as_stock_chatopenai(server):
    srv = server()
    common = {"model": "m", "base_url": srv.url, "api_key": "k", "temperature": 0, "max_retries": 0}
    stock = ask(ChatOpenAI(**common))[0]
    lean = ask(LeanChatOpenAI(**common))[0]
    assert srv.requests[0]["body"] == srv.requests[1]["body"]
    assert srv.requests[1]["path"] == "/v1/chat/completions"
    assert srv.requests[1]["headers"]["authorization"] == "Bearer k"
    assert lean.tool_calls == stock.tool_calls == [{"name": "Search_hotel", "args": {"city": "東京"}, "id": "call_1", "type": "tool_call"}]
    assert lean.usage_metadata["total_tokens"] == stock.usage_metadata["total_tokens"] == 15


def test_keep_alive_reuses_one_connection_and_reads_chunked_answers(server):
    srv = server(lambda n, body: (200, json.dumps(ANSWER).encode(), {"chunked": n % 2 == 0}))
    answers = ask(LeanChatOpenAI(model="m", base_url=srv.url, api_key="k"), n=6)
    assert all(a.tool_calls[0]["args"] == {"city": "東京"} for a in answers)
    assert srv.connections == 1


def test_server_closing_connections_and_dropping_an_idle_one(server):
    srv = server(lambda n, body: (200, json.dumps(ANSWER).encode(), {"close": n == 1, "drop": n == 3}))
    answers = ask(LeanChatOpenAI(model="m", base_url=srv.url, api_key="k", max_retries=0), n=3)
    assert len(answers) == 3  # request 3 met a dropped reused connection and was resent once
    assert srv.connections == 3


def test_retries_server_errors_then_succeeds(server):
    srv = server(lambda n, body: (503, b'{"error": {"message": "busy"}}', {}) if n < 3 else (200, json.dumps(ANSWER).encode(), {}))
    answer = ask(LeanChatOpenAI(model="m", base_url=srv.url, api_key="k", max_retries=2))[0]
    assert answer.tool_calls and len(srv.requests) == 3


def test_timeout_raises_timeouterror_after_retries(server):
    srv = server(lambda n, body: (200, json.dumps(ANSWER).encode(), {"delay": 1.0}))
    with pytest.raises(TimeoutError):
        ask(LeanChatOpenAI(model="m", base_url=srv.url, api_key="k", timeout=0.2, max_retries=1))
    assert len(srv.requests) == 2


def test_client_errors_are_the_sdks_own(server):
    srv = server(lambda n, body: (400, b'{"error": {"message": "context too long", "type": "invalid_request_error"}}', {}))
    with pytest.raises(openai.BadRequestError, match="context too long"):
        ask(LeanChatOpenAI(model="m", base_url=srv.url, api_key="k", max_retries=0))


def test_aclose_closes_idle_connections(server):
    srv = server()
    model = LeanChatOpenAI(model="m", base_url=srv.url, api_key="k")

    async def go() -> int:
        await model.ainvoke(HISTORY)
        idle = sum(len(pool) for pool in model._connections._by_loop[asyncio.get_running_loop()].values())
        await model.aclose()
        return idle

    assert asyncio.run(go()) == 1
    assert not any(model._connections._by_loop.values())
    assert ask(model)[0].tool_calls  # still usable


def test_usable_from_several_event_loops(server):
    srv = server()
    model = LeanChatOpenAI(model="m", base_url=srv.url, api_key="k")
    assert ask(model)[0].tool_calls and ask(model)[0].tool_calls  # two asyncio.run loops


def test_streaming_goes_through_the_sdk_with_the_lean_transport(server):
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "こん"}, "finish_reason": None}]},
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "にちは"}, "finish_reason": "stop"}]},
    ]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    srv = server(lambda n, body: (200, sse.encode(), {}))
    model = LeanChatOpenAI(model="m", base_url=srv.url, api_key="k", streaming=True)

    async def go() -> str:
        return "".join([c.content async for c in model.astream(HISTORY)])

    assert asyncio.run(go()) == "こんにちは"
    assert srv.requests[0]["body"]["stream"] is True

"""A stand-in for hosted model APIs on 127.0.0.1: OpenAI chat completions (``/v1/chat/completions``,
``/v1/models``) and the Anthropic messages API (``/v1/messages``), with scriptable faults.

The "model" behind it is deterministic and plays the typewriter environments: the first user
message is the text to type; every tool result ``OK`` counts as a typed letter; it calls
``type_letter`` (typewriter_1) or the letter's own tool (typewriter_26) for the next letter and
answers ``Done.`` when everything is typed. ``mistake(target)`` makes it type a wrong last
letter on chosen targets, so scores vary.

Faults are chosen per request by ``plan(request) -> fault``; the request carries the target,
the turn (assistant messages so far) and the attempt number at that turn (counted by the
server), so a plan can be deterministic and the test can tell afterwards, from ``log``, which
episodes must have failed. Fault names:

* ``ok``; ``http400`` ``http401`` ``http500`` ``http502`` ``http503`` ``http529``;
  ``http429`` (with ``retry-after``: ``retry_after`` seconds);
* ``slow`` (answer correctly after ``slow_s`` seconds: past the client's timeout),
  ``close`` (close the connection without an answer);
* malformed answers (HTTP 200): ``bad_json_args`` (arguments not JSON), ``trailing_text_args``
  (``{...}`` followed by text), ``non_object_args`` (a JSON list), ``unknown_tool``,
  ``fenced_call`` (the call written in a fenced JSON block), ``tagged_call``
  (``<tool_call>`` tags), ``bare_json_call`` (a bare JSON object in the text).

This is test infrastructure, not a mock of toolgym: the real openai/anthropic SDKs talk HTTP
to it.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RETRYABLE = {"http429", "http500", "http502", "http503", "http529", "slow", "close"}
MALFORMED = {
    "bad_json_args", "trailing_text_args", "non_object_args", "unknown_tool",
    "fenced_call", "tagged_call", "bare_json_call",
}


@dataclass(frozen=True)
class Request:
    """What a fault plan sees of one request.

    Attributes:
        api: ``openai`` or ``anthropic``.
        target: The text to type (first user message).
        turn: Assistant messages in the request (0 for the first model call of an episode).
        attempt: 1 for the first request at this (target, turn), 2 for its first retry, ...
        headers: The request's HTTP headers (lowercase names).
        body: The parsed JSON body.
    """

    api: str
    target: str
    turn: int
    attempt: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class LogEntry:
    """One request as the server answered it."""

    api: str
    target: str
    turn: int
    attempt: int
    fault: str


Plan = Callable[[Request], str]


def always_ok(request: Request) -> str:
    """A plan without faults."""
    return "ok"


def sequence(*faults: str) -> Plan:
    """A plan answering the n-th request (server-wide) with ``faults[n]``, then ``ok``."""
    lock = threading.Lock()
    remaining = list(faults)

    def plan(request: Request) -> str:
        with lock:
            return remaining.pop(0) if remaining else "ok"

    return plan


def seeded_mix(rates: dict[str, float], seed: int = 0) -> Plan:
    """A deterministic plan: each (target, turn, attempt) draws a fault from ``rates``
    (probabilities of each fault name; the rest is ``ok``) by hashing, so reruns and resumed
    runs see the same faults."""
    names = sorted(rates)

    def plan(request: Request) -> str:
        key = f"{seed}|{request.target}|{request.turn}|{request.attempt}".encode()
        u = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
        acc = 0.0
        for name in names:
            acc += rates[name]
            if u < acc:
                return name
        return "ok"

    return plan


@dataclass
class _Conversation:
    target: str
    typed: int
    turn: int
    tools: list[str]


def _openai_conversation(body: dict[str, Any]) -> _Conversation:
    messages = body.get("messages", [])
    users = [m for m in messages if m.get("role") == "user"]
    target = _text(users[0].get("content")) if users else ""
    typed = sum(1 for m in messages if m.get("role") == "tool" and _text(m.get("content")) == "OK")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    tools = [t["function"]["name"] for t in body.get("tools", []) if "function" in t]
    return _Conversation(target, typed, turn, tools)


def _anthropic_conversation(body: dict[str, Any]) -> _Conversation:
    messages = body.get("messages", [])
    target, typed = "", 0
    for m in messages:
        content = m.get("content")
        if m.get("role") != "user":
            continue
        if isinstance(content, str):
            target = target or content
            continue
        for block in content:
            if block.get("type") == "text" and not target:
                target = block.get("text", "")
            if block.get("type") == "tool_result" and _text(block.get("content")) == "OK":
                typed += 1
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    tools = [t["name"] for t in body.get("tools", [])]
    return _Conversation(target, typed, turn, tools)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return ""


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 refuses bursts of new connections

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # clients hang up
            super().handle_error(request, client_address)


class FakeModelServer:
    """The HTTP server; use as a context manager (``with FakeModelServer(plan) as server``).

    Args:
        plan: Chooses each request's fault (default: none).
        slow_s: Delay of a ``slow`` answer, in seconds.
        retry_after: Value of the ``retry-after`` header sent with ``http429``.
        mistake: Targets on which the model types a wrong last letter.
        port: Port to listen on (0: a free one).
        delay_s: Seconds every answer is delayed (a slow but healthy server).
        reasoning_field: When set, every OpenAI answer's message carries reasoning under this
            key (``reasoning_content``: vLLM's reasoning parsers and DeepSeek; ``reasoning``:
            OpenRouter and newer vLLM), the text ``thinking about turn N``.

    Attributes:
        log: Every request answered, in arrival order.
        url: ``http://127.0.0.1:PORT``.
    """

    def __init__(
        self,
        plan: Plan = always_ok,
        slow_s: float = 1.0,
        retry_after: str = "0",
        mistake: Callable[[str], bool] = lambda target: False,
        port: int = 0,
        delay_s: float = 0.0,
        reasoning_field: str | None = None,
    ) -> None:
        self.plan = plan
        self.reasoning_field = reasoning_field
        self.delay_s = delay_s
        self.slow_s = slow_s
        self.retry_after = retry_after
        self.mistake = mistake
        self.log: list[LogEntry] = []
        self.requests: list[dict[str, Any]] = []  # bodies, for assertions on sent settings
        self.headers: list[dict[str, str]] = []
        self.protocol_errors: list[str] = []
        self._attempts: Counter = Counter()
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def faults(self) -> Counter:
        """How many requests got each fault."""
        return Counter(e.fault for e in self.log)

    # --- the model ---------------------------------------------------------------------
    def next_action(self, conv: _Conversation) -> tuple[str, dict[str, Any]] | None:
        """The correct next call ``(tool, args)``, or ``None`` when the text is typed."""
        if conv.typed >= len(conv.target):
            return None
        letter = conv.target[conv.typed]
        if conv.typed == len(conv.target) - 1 and self.mistake(conv.target):
            letter = "z" if letter != "z" else "y"
        if "type_letter" in conv.tools:
            return "type_letter", {"letter": letter}
        return letter, {}

    # --- HTTP --------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                if self.path.endswith("/chat/completions"):
                    api, conv = "openai", _openai_conversation(body)
                elif self.path.endswith("/messages"):
                    api, conv = "anthropic", _anthropic_conversation(body)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                problem = _protocol_problem(api, body)
                if problem:  # what the real APIs answer to an inconsistent conversation
                    with server._lock:
                        server.protocol_errors.append(problem)
                    self._send(400, _error(api, 400, problem))
                    return
                with server._lock:
                    key = (api, conv.target, conv.turn)
                    server._attempts[key] += 1
                    attempt = server._attempts[key]
                    server.requests.append(body)
                    server.headers.append(headers)
                request = Request(api, conv.target, conv.turn, attempt, headers, body)
                fault = server.plan(request)
                with server._lock:
                    server.log.append(LogEntry(api, conv.target, conv.turn, attempt, fault))
                try:
                    self._answer(api, fault, conv, body, headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to do

            def _answer(self, api: str, fault: str, conv: _Conversation, body: dict, headers: dict) -> None:
                if fault == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault.startswith("http"):
                    status = int(fault[4:])
                    extra = {"retry-after": server.retry_after} if status == 429 else {}
                    key = headers.get("authorization", headers.get("x-api-key", ""))
                    message = f"fake {status}"
                    if status == 401:  # like a real API, echo (part of) the key it rejected
                        message = f"Incorrect API key provided: {key}"
                    self._send(status, _error(api, status, message), extra)
                    return
                if fault == "slow":
                    time.sleep(server.slow_s)
                    fault = "ok"
                if server.delay_s:
                    time.sleep(server.delay_s)
                action = server.next_action(conv)
                if action is None and fault in MALFORMED and conv.target:
                    # instead of the final answer, a malformed call (never executed) re-typing
                    # the last letter
                    letter = conv.target[-1]
                    action = ("type_letter", {"letter": letter}) if "type_letter" in conv.tools else (letter, {})
                if api == "openai":
                    payload = _openai_answer(body, action, fault)
                    if server.reasoning_field:
                        payload["choices"][0]["message"][server.reasoning_field] = f"thinking about turn {conv_turn(body)}"
                else:
                    payload = _anthropic_answer(body, action, fault)
                self._send(200, payload)

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _protocol_problem(api: str, body: dict[str, Any]) -> str | None:
    """Check tool-call bookkeeping as the real APIs do: every tool result answers a call of the
    assistant message just before it, and every call gets a result."""
    messages = body.get("messages", [])
    if api == "openai":
        pending: set[str] = set()
        for m in messages:
            role = m.get("role")
            if role == "tool":
                if m.get("tool_call_id") not in pending:
                    return f"tool message answers unknown tool_call_id {m.get('tool_call_id')!r}"
                pending.discard(m.get("tool_call_id"))
                continue
            if pending:
                return f"tool calls {sorted(pending)} have no tool message"
            if role == "assistant":
                pending = {c.get("id") for c in m.get("tool_calls") or []}
        return None
    pending = set()
    for m in messages:
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        if m.get("role") == "user":
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if answered - pending:
                return f"tool_result for unknown tool_use ids {sorted(answered - pending)}"
            if pending - answered:
                return f"tool_use ids {sorted(pending - answered)} without tool_result"
            pending = set()
        elif m.get("role") == "assistant":
            for b in blocks:
                if b.get("type") == "tool_use" and not isinstance(b.get("input"), dict):
                    return "tool_use.input: Input should be a valid dictionary"
            pending = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    return None


def _error(api: str, status: int, message: str) -> dict[str, Any]:
    if api == "anthropic":
        kind = {429: "rate_limit_error", 529: "overloaded_error", 401: "authentication_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}}


def _tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


def _malformed_text(fault: str, name: str, args: dict[str, Any]) -> str | None:
    call = json.dumps({"name": name, "arguments": args})
    return {
        "fenced_call": f"I will call the tool:\n```json\n{call}\n```",
        "tagged_call": f"<tool_call>\n{call}\n</tool_call>",
        "bare_json_call": f"Calling now: {call}",
    }.get(fault)


def conv_turn(body: dict[str, Any]) -> int:
    """Assistant messages in an OpenAI request (0 for the first model call)."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def _openai_answer(body: dict[str, Any], action: tuple[str, dict] | None, fault: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if action is None:
        message["content"] = "Done."
    else:
        name, args = action
        arguments = json.dumps(args)
        text = _malformed_text(fault, name, args)
        if text is not None:
            message["content"] = text
        else:
            if fault == "bad_json_args":
                arguments = "{letter: " + json.dumps(args.get("letter", "")) + "," if args else "{,"
            elif fault == "trailing_text_args":
                arguments = arguments + " and that is the call"
            elif fault == "non_object_args":
                arguments = json.dumps(list(args.values()))
            elif fault == "unknown_tool":
                name = "type_leter" if name == "type_letter" else "press_" + name
            message["tool_calls"] = [
                {"id": f"call_{hashlib.md5(json.dumps(body).encode()).hexdigest()[:10]}",
                 "type": "function", "function": {"name": name, "arguments": arguments}}
            ]
            finish = "tool_calls"
    prompt = _tokens(body)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
        "model": body.get("model", "fake-model"),
        "choices": [choice],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7},
    }
    if body.get("logprobs"):  # seven made-up completion tokens, as the usage says
        choice["logprobs"] = {"content": [
            {"token": f"t{i}", "logprob": -0.1 * (i + 1), "bytes": None, "top_logprobs": []} for i in range(7)]}
    if body.get("return_token_ids"):  # vLLM's extension: the prompt's and the completion's token ids
        payload["prompt_token_ids"] = list(range(100, 100 + prompt))
        choice["token_ids"] = list(range(7))
    return payload


def _anthropic_answer(body: dict[str, Any], action: tuple[str, dict] | None, fault: str) -> dict[str, Any]:
    content: list[dict[str, Any]]
    stop = "end_turn"
    if action is None:
        content = [{"type": "text", "text": "Done."}]
    else:
        name, args = action
        text = _malformed_text(fault, name, args)
        if text is not None:
            content = [{"type": "text", "text": text}]
        else:
            tool_input: Any = args
            if fault == "unknown_tool":
                name = "type_leter" if name == "type_letter" else "press_" + name
            elif fault in ("bad_json_args", "trailing_text_args"):
                tool_input = json.dumps(args) + " and more"
            elif fault == "non_object_args":
                tool_input = list(args.values())
            digest = hashlib.md5(json.dumps(body).encode()).hexdigest()[:10]
            content = [{"type": "tool_use", "id": f"toolu_{digest}", "name": name, "input": tool_input}]
            stop = "tool_use"
    return {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model", "fake"),
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": _tokens(body), "output_tokens": 7},
    }


__all__ = [
    "MALFORMED", "RETRYABLE", "FakeModelServer", "LogEntry", "Request", "always_ok", "exhausted",
    "seeded_mix", "sequence",
]


def exhausted(log: list[LogEntry], attempts: int) -> dict[str, str]:
    """Targets whose episode must have failed: some turn got ``attempts`` retryable faults in a
    row and no answer. Returns target → the last fault at that turn."""
    by_key: dict[tuple[str, int], list[str]] = {}
    for e in log:
        by_key.setdefault((e.target, e.turn), []).append(e.fault)
    failed = {}
    for (target, _turn), faults in by_key.items():
        if len(faults) >= attempts and all(f in RETRYABLE for f in faults[:attempts]):
            failed[target] = faults[attempts - 1]
    return failed



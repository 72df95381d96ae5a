"""A stand-in for an OpenAI-compatible ``/v1/completions`` endpoint on 127.0.0.1 that answers
``echo`` + ``logprobs`` requests (the legacy completions format), right or with the defects of
real servers.

Its "model" is deterministic and depends on context: a token is a word with its leading
whitespace; a token's log-probability given the token before it and its position is
:func:`logprob`; after any
prompt the greedy next token is :data:`NEXT` (:data:`AFTER_NEXT` after a prompt ending in it;
the end of the text in mode ``ends``).

Modes (``CompletionsServer.mode``):

* ``right``: every prompt token's log-probability given the one before it, ``null`` for the
  first, then the generated token's entry (as vLLM answers);
* ``shifted``: echoed token *i* gets the log-probability from the distribution at its own
  position (the token repeating itself; that distribution's most probable token, the next
  one, is listed in ``top_logprobs`` 1 nat above it), the first token's value is nulled and the
  generated token's entry is missing: what llama-cpp-python 0.3.36's server answers
  (abetlen/llama-cpp-python#1983 and #1276); generating without echo is right;
* ``first_scored``: right, but the first token gets a number too;
* ``shifted_tops``: right values, but each ``top_logprobs`` is the next position's (its most
  probable token 1 nat above the echoed one);
* ``no_next_entry``: echoed values right, but no entry for the generated token;
* ``no_generated_logprob``: ``logprobs`` is ``null`` when not echoing;
* ``prompt_only``: with echo, only the generated token's entry (as llama.cpp's llama-server
  answers, ggml-org/llama.cpp#27174);
* ``bos_offsets``: right values, but a ``<s>`` entry first and every ``text_offset`` counted
  in a text that starts with it (as vLLM 0.4.2 answered for Llama 2, vllm-project/vllm#5334);
* ``ends``: right, but the model ends the text at once (an empty completion).

This is test infrastructure, not a mock of toolgym: toolgym's scorer talks HTTP to it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NEXT = " nữa"
AFTER_NEXT = " thôi"
MODES = ("right", "shifted", "first_scored", "shifted_tops", "no_next_entry", "no_generated_logprob", "prompt_only",
         "bos_offsets", "ends")


def tokenize(text: str) -> list[str]:
    """Words with their leading whitespace."""
    return re.findall(r"\s*\S+", text)


def logprob(previous: str, token: str, position: int) -> float:
    """The stand-in model's log-probability of ``token`` at ``position`` (0-based) right after
    ``previous``: a function of all three, so a value taken from the wrong position, or a
    prompt built differently, gives a different number."""
    return -round(0.1 * len(token.strip()) + 0.37 * (len(previous.strip()) % 5) + 0.001 * (position % 7) + 0.01, 6)


class CompletionsServer(BaseHTTPRequestHandler):
    """The request handler; class attributes are the server's settings and log."""

    mode = "right"
    requests: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.path != "/v1/completions":
            return self.reply(404, {"error": {"message": "not found"}})
        prompt, mode = body["prompt"], type(self).mode
        prompt_tokens = tokenize(prompt)
        generated = "" if mode == "ends" else AFTER_NEXT if prompt_tokens[-1:] == [NEXT] else NEXT
        n = len(prompt_tokens)
        gen_value = logprob(prompt_tokens[-1] if prompt_tokens else "", generated, n) if generated else None
        if not body.get("echo"):
            lp = None if mode == "no_generated_logprob" or not generated else {
                "tokens": [generated], "token_logprobs": [gen_value], "top_logprobs": [{generated: gen_value}],
                "text_offset": [len(prompt)]}
            return self.reply(200, self.completion(generated, lp, len(prompt_tokens)))
        tokens = list(prompt_tokens)
        if mode == "shifted":
            values: list[float | None] = [None] + [logprob(t, t, i) for i, t in enumerate(tokens) if i]
        else:
            values = [None] + [logprob(p, t, i) for i, (p, t) in enumerate(zip(tokens, tokens[1:], strict=False), 1)]
        if mode == "first_scored":
            values[0] = -3.0
        if generated and mode not in ("shifted", "no_next_entry"):
            tokens.append(generated)
            values.append(gen_value)
        tops = [None if v is None else {t: v} for t, v in zip(tokens, values, strict=True)]
        if mode in ("shifted", "shifted_tops"):  # the distribution one position on: the next token on top
            following = [*tokens[1:], generated or "<end>"]
            tops = [None if v is None else {nxt: v + 1.0, t: v} for t, v, nxt in zip(tokens, values, following, strict=True)]
        if mode == "bos_offsets":
            tokens, values, tops = ["<s>", *tokens], [None, *values], [None, *tops]
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        if mode == "prompt_only":
            tokens, values, tops, offsets = (x[len(prompt_tokens):] for x in (tokens, values, tops, offsets))
        lp = {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
        self.reply(200, self.completion(prompt + generated, lp, len(prompt_tokens)))

    @staticmethod
    def completion(text: str, lp: dict[str, Any] | None, n_prompt: int) -> dict[str, Any]:
        return {"object": "text_completion", "choices": [{"index": 0, "text": text, "logprobs": lp,
                                                          "finish_reason": "length"}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": 1}}

    def reply(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(mode: str = "right") -> Iterator[str]:
    """Run the stand-in on 127.0.0.1 (a free port) in ``mode``; yields its API root
    (``http://127.0.0.1:PORT/v1``) and clears the request log."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
    CompletionsServer.mode, CompletionsServer.requests = mode, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), CompletionsServer)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()

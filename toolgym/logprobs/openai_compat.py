"""Token log-probabilities from an OpenAI-compatible completions endpoint (vLLM, llama.cpp
server, ...) with ``echo`` and ``logprobs``: the server scores the prompt itself and returns
every prompt token's log-probability, its top alternative and its character offset.

Request (POST ``{base_url}/completions``)::

    {"model": M, "prompt": context + continuation, "max_tokens": 1, "temperature": 0,
     "echo": true, "logprobs": 1}

Response fields used (OpenAI legacy completions format): ``choices[0].logprobs.tokens``,
``token_logprobs``, ``top_logprobs`` and ``text_offset``. The continuation's tokens are those
that end after the context's last character and start before the end of the prompt (the one
generated token is ignored).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from toolgym.logprobs import ContinuationScore, NoLogprobs, register_scorer
from toolgym.providers import ModelSettings


class CompletionsScorer:
    """:class:`~toolgym.logprobs.LogprobScorer` over an OpenAI-compatible ``/completions``.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: The served model's name.
        api_key: Sent as a bearer token when given.
        timeout_s: Seconds per HTTP request.
    """

    name = "openai-completions"

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", errors="replace")[:300]
            if exc.code in (400, 404, 405, 422, 501):
                raise NoLogprobs(
                    f"{self.url} refused an echo+logprobs completion (HTTP {exc.code}): {body}"
                ) from None
            raise RuntimeError(f"{self.url}: HTTP {exc.code}: {body}") from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise RuntimeError(f"{self.url}: cannot reach the server: {exc}") from None
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"{self.url}: response is not JSON: {exc.msg}") from None

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """Log-probabilities of ``continuation``'s tokens after ``context``.

        Raises:
            ValueError: for an empty continuation.
            NoLogprobs: when the server refuses ``echo``/``logprobs`` or omits them.
            RuntimeError: for other HTTP failures or a malformed response.
        """
        if not continuation:
            raise ValueError("empty continuation")
        text = context + continuation
        doc = self._post(
            {
                "model": self.model,
                "prompt": text,
                "max_tokens": 1,
                "temperature": 0,
                "echo": True,
                "logprobs": 1,
            }
        )
        try:
            lp = doc["choices"][0]["logprobs"]
            tokens, values, tops, offsets = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]
        except (KeyError, IndexError, TypeError):
            raise NoLogprobs(f"{self.url}: the response has no echoed prompt log-probabilities") from None
        if not all(isinstance(x, list) and len(x) == len(tokens) for x in (values, tops, offsets)):
            raise RuntimeError(f"{self.url}: logprobs.tokens, token_logprobs, top_logprobs and text_offset differ in length")
        start, end = len(context), len(text)
        picked, greedy = [], True
        pieces = []
        for token, value, top, offset in zip(tokens, values, tops, offsets, strict=True):
            if offset >= end or offset + len(token) <= start:
                continue  # context token, or the generated one
            if value is None:
                raise RuntimeError(f"{self.url}: no log-probability for continuation token {token!r}")
            picked.append(float(value))
            pieces.append(token)
            if top:
                greedy = greedy and float(value) >= max(float(v) for v in top.values()) - 1e-6
        if not picked:
            raise RuntimeError(f"{self.url}: no token of the continuation {continuation!r} in the response")
        return ContinuationScore(tuple(picked), greedy, tuple(pieces))

    def probe(self) -> None:
        """Score a two-word text once, so a server without echo+logprobs is found before
        the run starts.

        Raises:
            NoLogprobs: when it does not return prompt log-probabilities.
            ValueError: when the server cannot be reached or answers something else.
        """
        try:
            self.score("Xin", " chào")
        except RuntimeError as exc:
            if isinstance(exc, NoLogprobs):
                raise
            raise ValueError(str(exc)) from None


def compatible_scorer(provider: str, name: str, settings: ModelSettings) -> CompletionsScorer:
    """The scorer of an OpenAI-compatible server at ``settings.extra["base_url"]`` (``--base-url``,
    or the server ``--serve`` started); key as the chat provider reads it
    (``OPENAI_COMPATIBLE_API_KEY`` or ``VLLM_API_KEY``). Probed once before the run.

    Raises:
        ValueError: without a model name or a base URL, or when the server cannot be reached.
        NoLogprobs: when the server refuses echo+logprobs (the run falls back to answer
            extraction through the chat provider).
    """
    from toolgym.providers.hosted import COMPATIBLE_KEY_ENVS  # the provider layer reads the keys

    base_url = settings.extra.get("base_url")
    if not name or not base_url:
        raise ValueError(f"{provider}:MODEL needs the model name and the server's address: --base-url http://HOST:PORT/v1")
    key = next((os.environ[k] for k in COMPATIBLE_KEY_ENVS if os.environ.get(k)), None)
    scorer = CompletionsScorer(base_url, name, key, settings.timeout_s)
    scorer.probe()
    return scorer


@register_scorer("openai-compatible")
def openai_compatible_scorer(name: str, settings: ModelSettings) -> CompletionsScorer:
    """``openai-compatible:MODEL --base-url URL``: see :func:`compatible_scorer`."""
    return compatible_scorer("openai-compatible", name, settings)


@register_scorer("vllm")
def vllm_scorer(name: str, settings: ModelSettings) -> CompletionsScorer:
    """``vllm:MODEL`` at ``--base-url`` or started by ``--serve``: see :func:`compatible_scorer`."""
    return compatible_scorer("vllm", name, settings)


@register_scorer("openai")
def openai_scorer(name: str, settings: ModelSettings) -> CompletionsScorer:
    """``openai:MODEL``: OpenAI's current models return no prompt log-probabilities (their
    completions endpoint no longer echoes them), so this always falls back.

    Raises:
        NoLogprobs: always.
    """
    raise NoLogprobs(
        "OpenAI's models return no prompt log-probabilities; serve the model with vLLM or another "
        "OpenAI-compatible server (--model openai-compatible:NAME --base-url URL) to score by log-likelihood"
    )

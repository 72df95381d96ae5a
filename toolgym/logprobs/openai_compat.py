"""Token log-probabilities from an OpenAI-compatible completions endpoint (vLLM, ...) with
``echo`` and ``logprobs``: the server scores the prompt itself and returns every prompt token's
log-probability, its top alternative and its character offset.

Request (POST ``{base_url}/completions``)::

    {"model": M, "prompt": context + continuation, "max_tokens": 1, "temperature": 0,
     "echo": true, "logprobs": 1}

Response fields used (OpenAI legacy completions format): ``choices[0].logprobs.tokens``,
``token_logprobs``, ``top_logprobs`` and ``text_offset``: one entry per prompt token, the first
with ``null`` (nothing precedes it), then one for the generated token. The continuation's
tokens are those that end after the context's last character and start before the end of the
prompt (the generated token is ignored).

Before a run, :meth:`CompletionsScorer.probe` checks that the echoed values are aligned with
their tokens, with no knowledge of the model: the log-probability the server reports for a
token it generates after a context must equal the one it echoes for that token after the same
context. A server that fails (llama-cpp-python's, whose echoed token *i* carries the
probability from the logits at position *i*) is refused with :class:`~toolgym.logprobs.WrongLogprobs`.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from toolgym.logprobs import ContinuationScore, NoLogprobs, WrongLogprobs, register_scorer
from toolgym.providers import ModelSettings

PROBE_CONTEXTS = (
    "Monday, Tuesday, Wednesday, Thursday,",
    "one, two, three, four, five,",
    "Thủ đô của Việt Nam là",
)
"""Contexts the probe generates one token after, tried in order until one gives a check: the
greedy next token is likely a whole word, tokenized alike when echoed."""

PROBE_TOLERANCE = 0.25
"""Largest |generated − echoed| log-probability (nats) the probe accepts for the same token,
and the most an echoed alternative may beat the greedily generated token. The two come from the
same position of two forward passes of different lengths: equal up to what a different batch
shape changes (0.057 nats seen between two identical generations on llama-cpp-python 0.3.36,
Qwen2.5-Coder-1.5B Q4_K_M on CPU, one of them after a cached prefix), while a shifted echo
reads another position's distribution (off by 10.8 nats on that server)."""

KNOWN_DEFECTS = {
    "shifted": "llama-cpp-python's server does this (abetlen/llama-cpp-python#1983, #1276)",
    "first_scored": "llama-cpp-python's server does this (abetlen/llama-cpp-python#1983, #1276)",
    "no_next_entry": "llama-cpp-python's server does this (abetlen/llama-cpp-python#1983, #1276)",
    "no_prompt_entries": "llama.cpp's llama-server does this (ggml-org/llama.cpp#27174)",
}
"""Defect code → the server known to show it and the upstream issue."""


@dataclass(frozen=True)
class Echo:
    """The ``logprobs`` object of one completion, its four lists checked to be equally long.

    Attributes:
        tokens: Token strings, prompt tokens first (when echoed), then generated ones.
        values: Natural-log probability of each token given the tokens before it, or ``None``.
        tops: The most probable alternatives at each position (token → log-probability), or ``None``.
        offsets: Character offset of each token in the prompt plus generated text.
    """

    tokens: list[str]
    values: list[float | None]
    tops: list[dict[str, float] | None]
    offsets: list[int]


@dataclass(frozen=True)
class Defect:
    """One way a server's log-probabilities fail the probe.

    Attributes:
        code: ``shifted``, ``not_greedy``, ``first_scored``, ``no_next_entry``,
            ``no_prompt_entries``, ``offsets`` or ``no_generated_logprob`` (keys of :data:`KNOWN_DEFECTS` when a
            server is known to show it).
        text: What was seen, for the refusal.
    """

    code: str
    text: str


class _Inconclusive(Exception):
    """This probe context cannot decide (the model ended the text, or the echoed text was
    tokenized differently); the next context is tried."""


def alignment_defects(echo: Echo, prompt_chars: int) -> list[Defect]:
    """The alignment defects of an echoed completion of a prompt ``prompt_chars`` characters
    long, generated with ``max_tokens`` 1: its first entry must have no log-probability
    (nothing precedes the first token), some entries must cover the prompt, and exactly one
    (the generated token) must start at or after its end.

    Returns:
        The defects found; empty for a well-aligned echo.
    """
    prompt_entries = sum(1 for o in echo.offsets if o < prompt_chars)
    if not prompt_entries:
        return [Defect("no_prompt_entries", f"the echo has no entries for the prompt's tokens, only {len(echo.tokens)} "
                                            "for generated ones")]
    defects = []
    if echo.values[0] is not None:
        defects.append(Defect("first_scored", f"the first echoed token {echo.tokens[0]!r} has a log-probability "
                                              f"({echo.values[0]:.4f}) though nothing precedes it"))
    generated = len(echo.tokens) - prompt_entries
    if generated != 1:
        defects.append(Defect("no_next_entry", f"{generated} entries follow the prompt's {prompt_entries}, not one "
                                               "for the generated token"))
    return defects


class CompletionsScorer:
    """:class:`~toolgym.logprobs.LogprobScorer` over an OpenAI-compatible ``/completions``.

    Every call is one self-contained request carrying the whole text: nothing is kept between
    calls, so an option's score does not depend on what was scored before it (on the client's
    side; a server's own prompt cache is its own).

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

    def _complete(self, prompt: str, echo: bool) -> tuple[str, Echo | None]:
        """One greedy token after ``prompt``: its text and the ``logprobs`` object (``None``
        when the server sent none)."""
        doc = self._post(
            {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "echo": echo, "logprobs": 1}
        )
        try:
            choice = doc["choices"][0]
            text, lp = choice.get("text") or "", choice.get("logprobs")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise RuntimeError(f"{self.url}: the response has no choices[0]") from None
        if not isinstance(lp, dict) or not lp.get("tokens"):
            return text, None
        try:
            echo_lp = Echo(list(lp["tokens"]), list(lp["token_logprobs"]), list(lp["top_logprobs"] or []),
                           list(lp["text_offset"]))
        except (KeyError, TypeError):
            raise RuntimeError(f"{self.url}: logprobs lacks tokens, token_logprobs, top_logprobs or text_offset") from None
        if not echo_lp.tops:
            echo_lp = Echo(echo_lp.tokens, echo_lp.values, [None] * len(echo_lp.tokens), echo_lp.offsets)
        if not len(echo_lp.tokens) == len(echo_lp.values) == len(echo_lp.tops) == len(echo_lp.offsets):
            raise RuntimeError(f"{self.url}: logprobs.tokens, token_logprobs, top_logprobs and text_offset differ in length")
        return text, echo_lp

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """Log-probabilities of ``continuation``'s tokens after ``context``.

        Raises:
            ValueError: for an empty continuation.
            NoLogprobs: when the server refuses ``echo``/``logprobs`` or omits them.
            WrongLogprobs: when the echo is misaligned (see :func:`alignment_defects`).
            RuntimeError: for other HTTP failures or a malformed response.
        """
        if not continuation:
            raise ValueError("empty continuation")
        text = context + continuation
        _, echo = self._complete(text, echo=True)
        if echo is None:
            raise NoLogprobs(f"{self.url}: the response has no echoed prompt log-probabilities")
        defects = alignment_defects(echo, len(text))
        if defects:
            raise WrongLogprobs(self.refusal(defects))
        start, end = len(context), len(text)
        picked, greedy = [], True
        pieces = []
        for token, value, top, offset in zip(echo.tokens, echo.values, echo.tops, echo.offsets, strict=True):
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

    def refusal(self, defects: list[Defect]) -> str:
        """The one-line refusal: the server, every defect, and the servers known to show them."""
        known = dict.fromkeys(KNOWN_DEFECTS[d.code] for d in defects if d.code in KNOWN_DEFECTS)
        return (
            f"{self.url}: refused for log-likelihood scoring: "
            + "; ".join(d.text for d in defects)
            + "".join(f"; {k}" for k in known)
            + "; use a server known to be right (vLLM), see docs/loglikelihood-servers.md"
        )

    def _check(self, context: str) -> list[Defect]:
        """The defects one probe context shows (see :meth:`probe`).

        Raises:
            _Inconclusive: when this context cannot decide.
            NoLogprobs: when the server does not echo log-probabilities at all.
        """
        generated, gen = self._complete(context, echo=False)
        if not generated:
            raise _Inconclusive(f"the model ended the text after {context!r}")
        if gen is None or gen.values[0] is None:
            return [Defect("no_generated_logprob", f"no log-probability for the token {generated!r} it generates "
                                                   f"after {context!r}, so its echo cannot be checked")]
        if gen.tokens[0] != generated:
            raise _Inconclusive(f"the generated text {generated!r} is not one whole token")
        expected = float(gen.values[0])
        prompt = context + generated
        _, echo = self._complete(prompt, echo=True)
        if echo is None:
            raise NoLogprobs(f"{self.url}: the response has no echoed prompt log-probabilities")
        defects = alignment_defects(echo, len(prompt))
        if any(d.code == "no_prompt_entries" for d in defects):
            return defects
        misplaced = [(t, o) for t, o in zip(echo.tokens, echo.offsets, strict=True)
                     if o < len(prompt) and t and "\ufffd" not in t and prompt[o:o + len(t)] != t]
        if misplaced:
            token, offset = misplaced[0]
            defects.append(Defect("offsets", f"text_offset puts {token!r} at character {offset}, where the prompt has "
                                             f"{prompt[offset:offset + len(token)]!r}"))
        at = [j for j, (o, t) in enumerate(zip(echo.offsets, echo.tokens, strict=True))
              if o == len(context) and t == generated]
        if not at:
            if defects:
                return defects
            raise _Inconclusive(f"no echoed token {generated!r} starts at character {len(context)} of {prompt!r} "
                                "(tokenized differently when echoed)")
        echoed = echo.values[at[0]]
        if echoed is None or abs(float(echoed) - expected) > PROBE_TOLERANCE:
            shown = "none" if echoed is None else f"{float(echoed):.4f}"
            defects.insert(0, Defect("shifted", f"{generated!r} after {context!r} has log-probability {expected:.4f} "
                                                f"when generated but {shown} when echoed"))
        elif rivals := {k: float(v) for k, v in (echo.tops[at[0]] or {}).items() if k != generated}:
            rival, best = max(rivals.items(), key=lambda kv: kv[1])
            if best > float(echoed) + PROBE_TOLERANCE:  # it was generated greedily: the most probable there
                defects.insert(0, Defect("not_greedy", f"{generated!r}, generated greedily after {context!r}, is echoed "
                                                       f"as less probable ({float(echoed):.4f}) than {rival!r} ({best:.4f})"))
        return defects

    def probe(self) -> None:
        """Check, before a run, that the server's echoed log-probabilities belong to their
        tokens: generate one greedy token after a context (``max_tokens`` 1, ``temperature``
        0, ``logprobs``), then echo the context plus that token and require (1) the echoed
        token's log-probability to equal the generated one, and no echoed alternative at that
        position to be more probable, within :data:`PROBE_TOLERANCE`; (2) the first echoed
        token to have none; (3) one entry to follow the prompt (the generated token's); (4)
        each ``text_offset`` to point at its token in the prompt. Needs no knowledge of the
        model; tries the contexts of :data:`PROBE_CONTEXTS` until one decides.

        Raises:
            WrongLogprobs: naming the defects, the server and the known upstream issues.
            NoLogprobs: when it does not return prompt log-probabilities.
            ValueError: when the server cannot be reached, answers something else, or no
                context decides.
        """
        reasons = []
        try:
            for context in PROBE_CONTEXTS:
                try:
                    defects = self._check(context)
                except _Inconclusive as exc:
                    reasons.append(str(exc))
                    continue
                if defects:
                    raise WrongLogprobs(self.refusal(defects))
                return
        except NoLogprobs:
            raise
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
        raise ValueError(f"{self.url}: cannot check the server's log-probabilities: {'; '.join(reasons)}")


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
    from toolgym.providers.hosted import base_url as expanded_base_url

    base_url = expanded_base_url(settings)
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

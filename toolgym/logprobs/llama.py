"""Token log-probabilities from the bundled llama.cpp runtime (:class:`~toolgym.providers.local.LlamaServer`).

llama.cpp's server has no echo mode (log-probabilities of prompt tokens), so a continuation is
scored by generating it: the context is sent as token ids, a grammar forces exactly the
continuation's token ids (:func:`~toolgym.providers.local.forced_tokens_grammar`), and each
generated token's ``n_probs`` entry, asked with ``post_sampling_probs: false``, carries its
log-probability under the model's own distribution, before the grammar's mask: the
log-probability of that token given everything before it. The greedy check compares each token
with the top entry of that distribution.

Scores do not depend on what was scored before. llama.cpp's numbers move slightly with the shape
of the batches a prompt is evaluated in (a prefix computed in one batch with other tokens is not
bit-identical to the same prefix computed alone), so every context is evaluated in the same
batches whatever the cache holds: blocks of :data:`BLOCK` tokens from its start, then the rest
but its last token, then (in each continuation's request) the last token alone, and the
continuation one token at a time. Only whole blocks are reused from the cache: a five-shot
prefix shared by the questions of one subject is evaluated once, and the options of a question
cost their own tokens plus one. Each response's ``timings.cache_n`` is checked against what
the scorer expects the cache to hold; on any surprise (another user of the runtime) the context
is evaluated again from its start.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgym.logprobs import ContinuationScore, register_scorer
from toolgym.providers import ModelSettings

if TYPE_CHECKING:
    from toolgym.providers.local import LlamaServer

DEFAULT_N_CTX = 8192  # five-shot EXAMS prompts are at most about 1,100 tokens
BLOCK = 256
"""Tokens per evaluation batch of a context, aligned at its start (see the module docstring)."""


class LlamaCppScorer:
    """:class:`~toolgym.logprobs.LogprobScorer` over a :class:`~toolgym.providers.local.LlamaServer`.

    Safe to call from several threads (calls are serialised on the server's lock, so the cache
    state one score relies on is not changed by another).

    Args:
        server: A started runtime for the model.

    Attributes:
        evaluated_tokens: Tokens run through the model so far (prompt and forced continuation).
        reused_tokens: Context tokens taken from the cache instead of being evaluated again.
    """

    name = "llama.cpp"

    def __init__(self, server: LlamaServer) -> None:
        from toolgym.providers.local import forced_tokens_grammar

        self.server = server
        self._forced = forced_tokens_grammar
        self._blocks: list[int] = []  # tokens the cache holds in whole canonical blocks
        self._warm: list[int] | None = None  # the context the cache holds but its last token
        self._context: tuple[str | None, list[int]] = (None, [])  # the last context and its tokens
        self.evaluated_tokens = 0
        self.reused_tokens = 0

    def tokenize(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens, split where the whole text's tokens pass the
        context's (as lm-evaluation-harness does); if tokenising the whole text merges the
        boundary, the continuation is tokenised on its own. A beginning-of-sequence token is
        added only when the model asks for one."""
        tok = self.server.tokenize
        if self._context[0] != context:  # the options of a question share their context
            self._context = (context, tok(context, add_special=True, parse_special=False) if context else [])
        ctx = list(self._context[1])
        whole = tok(context + continuation, add_special=True, parse_special=False)
        if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
            cont = whole[len(ctx) :]
        else:
            cont = tok(continuation, add_special=False, parse_special=False)
        if not ctx:  # the first token needs something to be predicted from
            ctx = [self._start_token()]
        return ctx, cont

    def _start_token(self) -> int:
        ids = self.server.tokenize("", add_special=True, parse_special=False)
        if ids:
            return ids[0]
        return self.server.tokenize("<|endoftext|>", parse_special=True)[0]

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """Log-probabilities of ``continuation``'s tokens after ``context``.

        Raises:
            ValueError: for an empty continuation, a text longer than the context window, or an
                error answered by the runtime.
            RuntimeError: the cache did not hold the context as expected (a runtime change).
        """
        if not continuation:
            raise ValueError("empty continuation")
        server = self.server
        with server.lock:
            ctx, cont = self.tokenize(context, continuation)
            if len(ctx) + len(cont) > server.n_ctx:
                raise ValueError(
                    f"prompt and continuation are {len(ctx) + len(cont)} tokens, over the context window of {server.n_ctx}"
                )
            if self._warm != ctx:
                self._bring_into_cache(ctx)
            result = server.complete({
                "prompt": ctx, "n_predict": len(cont), "grammar": self._forced(cont), "temperature": 0,
                "n_probs": 1, "post_sampling_probs": False, "cache_prompt": True, "samplers": ["temperature"],
            })
            self._expect(result, len(ctx) - 1)
            self.evaluated_tokens += 1 + len(cont)
        entries = (result["choices"][0].get("logprobs") or {}).get("content") or []
        ids = [int(e["id"]) for e in entries]
        if ids != cont:
            raise RuntimeError(f"llama.cpp generated {ids} under a grammar forcing {cont}")
        logprobs = tuple(float(e["logprob"]) for e in entries)
        greedy = all(e["top_logprobs"] and int(e["top_logprobs"][0]["id"]) == int(e["id"]) for e in entries)
        pieces = tuple(self._piece(e) for e in entries)
        if not all(math.isfinite(v) for v in logprobs):
            raise RuntimeError(f"llama.cpp returned a non-finite log-probability: {logprobs}")
        return ContinuationScore(logprobs, greedy, pieces)

    @staticmethod
    def _piece(entry: dict[str, Any]) -> str:
        raw = entry.get("bytes")
        return bytes(raw).decode("utf-8", errors="replace") if raw is not None else str(entry.get("token", ""))

    def _expect(self, result: dict[str, Any], cached: int) -> None:
        got = int((result.get("timings") or {}).get("cache_n", -1))
        if got != cached:
            self._blocks, self._warm = [], None
            raise RuntimeError(f"llama.cpp reused {got} cached tokens, expected {cached}: the score would depend on the cache")

    def _bring_into_cache(self, ctx: list[int]) -> None:
        """Leave ``ctx`` but its last token in the cache, evaluated block by block from its start
        (whole blocks the cache already holds are kept)."""
        self._warm = None
        end = len(ctx) - 1
        keep = 0
        for i in range(0, min(len(self._blocks), end) // BLOCK * BLOCK, BLOCK):
            if self._blocks[i : i + BLOCK] != ctx[i : i + BLOCK]:
                break
            keep = i + BLOCK
        self._blocks = ctx[:keep]
        try:
            if keep < end:
                if keep == 0:  # nothing reusable: clear the cache by evaluating the first block alone
                    start = min(BLOCK, end)
                    self.server.complete({"prompt": ctx[:start], "n_predict": 0, "cache_prompt": False})
                    self.evaluated_tokens += start
                else:  # cut the cache after the kept blocks: one token that differs from ctx's next
                    cut = self.server.complete({"prompt": [*ctx[:keep], 1 if ctx[keep] != 1 else 2], "n_predict": 0,
                                                "cache_prompt": True})
                    self._expect(cut, keep)
                    start = keep
                    self.evaluated_tokens += 1
                for stop in [*range(start + BLOCK, end, BLOCK), end]:
                    if stop <= start:
                        continue
                    result = self.server.complete({"prompt": ctx[:stop], "n_predict": 0, "cache_prompt": True})
                    self._expect(result, start)
                    self.evaluated_tokens += stop - start
                    start = stop
            self.reused_tokens += keep
        except BaseException:
            self._blocks = []
            raise
        self._blocks = ctx[: end // BLOCK * BLOCK]
        self._warm = list(ctx)


@register_scorer("local")
def local_scorer(name: str, settings: ModelSettings) -> LlamaCppScorer:
    """``local``: the bundled model; ``local:PATH``: another GGUF file. Started by
    :func:`toolgym.providers.local.load_server` (shared with the local chat model when the
    settings match); ``settings.extra`` may set ``n_ctx``, ``n_threads`` and ``cache`` as for
    that provider.

    Raises:
        ValueError: when the local provider (the runtime, the weights) is missing.
        FileNotFoundError: ``PATH`` does not exist.
    """
    try:
        from toolgym.providers.local import load_server
    except ImportError as exc:
        raise ValueError(f"the local model provider is not available: {exc}") from None
    server = load_server(
        Path(name).expanduser() if name else None,
        n_ctx=int(settings.extra.get("n_ctx", DEFAULT_N_CTX)),
        n_threads=settings.extra.get("n_threads"),
        cache=settings.extra.get("cache"),
    )
    return LlamaCppScorer(server)

"""Token log-probabilities of a continuation after a prompt: the backends of log-likelihood
scoring (multiple-choice by the most likely option, LAMBADA accuracy and perplexity).

A backend implements :class:`LogprobScorer`: ``score(context, continuation)`` returns the
natural-log probability of every continuation token given everything before it, and whether
the continuation is the model's greedy continuation (every token the arg-max). Backends are
factories registered by :func:`register_scorer` under a ``--model`` provider name (``local``,
``openai``, ``scripted``); :func:`build_scorer` returns ``None`` for a provider that cannot
return prompt log-probabilities (a chat-only API), and callers fall back to answer extraction.
"""

from __future__ import annotations

import importlib
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolgym.providers import ModelSettings, split_spec
from toolgym.registry import Registry

__all__ = [
    "SCORERS",
    "ContinuationScore",
    "LogprobScorer",
    "NoLogprobs",
    "Perplexity",
    "ScriptedScorer",
    "WrongLogprobs",
    "build_scorer",
    "perplexity",
    "register_scorer",
]


class NoLogprobs(RuntimeError):
    """The backend cannot return prompt log-probabilities (a chat-only model or server)."""


class WrongLogprobs(ValueError):
    """The backend returns prompt log-probabilities that fail a consistency check (a server
    whose echoed values are shifted by one token, say): the run is refused rather than scored
    with them, and does not fall back to answer extraction."""


@dataclass(frozen=True)
class ContinuationScore:
    """Log-probabilities of one continuation's tokens.

    Attributes:
        logprobs: Natural-log probability of each continuation token given the prompt and
            the continuation tokens before it (one value per token, in order).
        greedy: True when every continuation token is the most probable token at its
            position, i.e. greedy decoding from the prompt would produce the continuation.
        tokens: The token strings, when the backend reports them (for display only).
    """

    logprobs: tuple[float, ...]
    greedy: bool
    tokens: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        """Sum of the token log-probabilities (log-probability of the whole continuation)."""
        return math.fsum(self.logprobs)

    @property
    def n_tokens(self) -> int:
        """Number of continuation tokens."""
        return len(self.logprobs)


@runtime_checkable
class LogprobScorer(Protocol):
    """A model that reports token log-probabilities of a given continuation.

    Attributes:
        name: Backend name recorded in the run (``"llama.cpp"``, ``"openai-completions"``).
    """

    name: str

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """Log-probabilities of ``continuation``'s tokens after ``context``.

        Args:
            context: The prompt, scored as given (no chat template).
            continuation: The text whose tokens are scored; include its leading space when it
                is a new word.

        Raises:
            ValueError: for an empty continuation or a text longer than the model's context.
            NoLogprobs: when the backend turns out not to return prompt log-probabilities.
        """
        ...


@dataclass(frozen=True)
class Perplexity:
    """Perplexity of a set of target tokens.

    Attributes:
        value: exp(-(sum of token log-probabilities) / n_tokens); NaN when ``n_tokens`` is 0.
        n_tokens: Number of tokens the mean is taken over.
        n_sequences: Number of scored sequences (targets).
    """

    value: float
    n_tokens: int
    n_sequences: int


def perplexity(sequences: Iterable[Sequence[float]]) -> Perplexity:
    """Token-level perplexity exp(-mean log-probability per token) over all ``sequences``.

    Every token weighs the same, so a long target counts more than a short one (the corpus
    perplexity of language modelling; Jelinek et al. 1977, "Perplexity—a measure of the
    difficulty of speech recognition tasks").

    Args:
        sequences: Per-sequence lists of natural-log token probabilities.
    """
    total = 0.0
    n_tokens = n_sequences = 0
    for seq in sequences:
        n_sequences += 1
        n_tokens += len(seq)
        total += math.fsum(seq)
    value = math.exp(-total / n_tokens) if n_tokens else math.nan
    return Perplexity(value, n_tokens, n_sequences)


# --- the scripted scorer: the test double -----------------------------------------------------
@dataclass
class ScriptedScorer:
    """Returns prepared log-probabilities: the test double of :class:`LogprobScorer`.

    Attributes:
        logprobs: Continuation text → its token log-probabilities (any context).
        by_context: Context text → (continuation → log-probabilities); looked up first.
        greedy: Continuations reported as greedy.
        calls: Every ``(context, continuation)`` scored, in order.
    """

    logprobs: dict[str, list[float]] = field(default_factory=dict)
    by_context: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    greedy: set[str] = field(default_factory=set)
    calls: list[tuple[str, str]] = field(default_factory=list)
    name: str = "scripted"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """The prepared log-probabilities of ``continuation``.

        Raises:
            ValueError: for an empty continuation.
            KeyError: when the script has nothing for ``continuation``.
        """
        if not continuation:
            raise ValueError("empty continuation")
        with self._lock:
            self.calls.append((context, continuation))
        table = self.by_context.get(context, {})
        values = table.get(continuation, self.logprobs.get(continuation))
        if values is None:
            raise KeyError(f"scripted scorer has no log-probabilities for {continuation!r}")
        return ContinuationScore(tuple(float(v) for v in values), continuation in self.greedy)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], where: str = "scripted scorer") -> ScriptedScorer:
        """Build from ``{"logprobs": {cont: [..]}, "by_context": {...}, "greedy": [..]}``.

        Raises:
            ValueError: naming ``where`` and the field when the document is malformed.
        """
        try:
            return cls(
                logprobs={str(k): [float(x) for x in v] for k, v in doc.get("logprobs", {}).items()},
                by_context={
                    str(c): {str(k): [float(x) for x in v] for k, v in t.items()}
                    for c, t in doc.get("by_context", {}).items()
                },
                greedy={str(g) for g in doc.get("greedy", [])},
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: invalid log-probability script: {exc}") from None


# --- registry --------------------------------------------------------------------------------
ScorerFactory = Callable[[str, ModelSettings], "LogprobScorer | None"]

def _builtin_scorers() -> None:
    for module in ("llama", "openai_compat"):
        importlib.import_module(f"toolgym.logprobs.{module}")


SCORERS: Registry[ScorerFactory] = Registry("log-probability backend", "toolgym.logprobs", _builtin_scorers)
"""Log-probability backends by ``--model`` prefix, and the ``toolgym.logprobs`` entry points."""


def register_scorer(name: str) -> Callable[[ScorerFactory], ScorerFactory]:
    """Decorator registering a factory ``(model_name, settings) -> LogprobScorer | None``
    under the ``--model`` provider name ``name``; the factory returns ``None`` (or raises
    :class:`NoLogprobs`) when that model has no prompt log-probabilities."""
    return SCORERS.register(name)


def build_scorer(spec: str, settings: ModelSettings | None = None) -> tuple[LogprobScorer | None, str]:
    """The log-probability backend for a ``--model`` spec.

    Args:
        spec: ``PROVIDER[:MODEL]`` as given to ``--model``.
        settings: The run's model settings.

    Returns:
        ``(scorer, note)``: the scorer, or ``None`` with the reason in ``note`` when the
        provider gives no prompt log-probabilities (callers fall back to answer extraction).

    Raises:
        ValueError: when the backend exists but its model cannot be loaded.
    """
    provider, name = split_spec(spec)
    if provider not in SCORERS:
        return None, f"provider {provider!r} returns no prompt log-probabilities (chat-only)"
    try:
        scorer = SCORERS.get(provider)(name, settings or ModelSettings())
    except NoLogprobs as exc:
        return None, str(exc)
    if scorer is None:
        return None, f"model {spec!r} returns no prompt log-probabilities"
    return scorer, f"log-likelihood via {scorer.name}"


@register_scorer("scripted")
def scripted_scorer(name: str, settings: ModelSettings) -> ScriptedScorer | None:
    """``scripted:PATH``: a :class:`ScriptedScorer` when the JSON file has ``logprobs``;
    a file of chat turns (no ``logprobs``) stands for a chat-only model and gives ``None``."""
    if not name:
        raise ValueError("scripted models need a file: --model scripted:PATH")
    try:
        doc = json.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name}: cannot read scripted model: {exc}") from None
    if not isinstance(doc, dict) or "logprobs" not in doc:
        return None
    return ScriptedScorer.from_doc(doc, where=name)

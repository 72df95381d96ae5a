"""Base of the tool-free question-answering environments (Vietnamese exams, XCOPA, LAMBADA).

There are no tools: the prompt is the example's input, the agent answers once. The state is an
answer sheet: a log-likelihood agent writes what it measured (option log-probabilities, the
target's token log-probabilities) with :meth:`AnswerSheet.submit`, and the graders read it
from the trajectory's final state.
"""

from __future__ import annotations

import copy
import random
from typing import Any, ClassVar

from toolgym.data import DatasetError
from toolgym.environments import Environment
from toolgym.records import Example, Score


class AnswerSheet(Environment):
    """A tool-free task whose state is what the agent submitted.

    Class attributes:
        stop_sequences: Where a writing model should stop (the start of a next question).
        chance: Accuracy of uniform guessing, shown in the report (``None``: not applicable).
    """

    stop_sequences: ClassVar[tuple[str, ...]] = ()
    chance: ClassVar[float | None] = None

    def reset(self, example: Example) -> None:
        self.sheet: dict[str, Any] = {}

    def submit(self, **fields: Any) -> None:
        """Record measurements on the answer sheet (JSON-safe values)."""
        self.sheet.update(copy.deepcopy(fields))

    def read_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.sheet)

    @classmethod
    def report(cls, examples: dict[str, Example], scores: list[Score]) -> list[Any]:
        """Task-specific report lines (per-subject accuracy, perplexity); none by default."""
        return []


def int_option(options: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    """An integer environment option, validated.

    Raises:
        DatasetError: when the value is not an integer ≥ ``minimum``.
    """
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DatasetError(f"option {key}={value!r} is not an integer") from None
    if number < minimum:
        raise DatasetError(f"option {key}={number} must be at least {minimum}")
    return number


def sample_indices(n: int, options: dict[str, Any]) -> list[int] | None:
    """Indices of ``--sample N`` items drawn without replacement with ``sample_seed``
    (default 0), in increasing order; ``None`` when no sample is asked for."""
    size = int_option(options, "sample", None, minimum=1)
    if size is None or size >= n:
        return None
    seed = int_option(options, "sample_seed", 0)
    return sorted(random.Random(seed).sample(range(n), size))

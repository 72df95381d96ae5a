"""Base of the tool-free question-answering environments (Vietnamese exams, XCOPA, LAMBADA).

There are no tools: the prompt is the example's input, the agent answers once. The state is an
answer sheet: a log-likelihood agent writes what it measured (option log-probabilities, the
target's token log-probabilities) with :meth:`AnswerSheet.submit`, and the graders read it
from the trajectory's final state.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from toolgym import DatasetError, Environment, Example


class AnswerSheet(Environment):
    """A tool-free task whose state is what the agent submitted (empty for an agent that only
    writes an answer)."""

    def reset(self, example: Example) -> None:
        """Start with a blank sheet.

        Args:
            example: The example of the episode (unused: the prompt is its input).
        """
        self.sheet: dict[str, Any] = {}

    def submit(self, **fields: Any) -> None:
        """Record measurements on the answer sheet.

        Args:
            **fields: JSON-safe values (``scoring``, ``choices``, ``logprobs``, ``greedy``,
                ...), copied so the caller may reuse its objects.
        """
        self.sheet.update(copy.deepcopy(fields))

    def read_state(self) -> dict[str, Any]:
        """A copy of the sheet: the trajectory's ``final_state``, read by the graders."""
        return copy.deepcopy(self.sheet)


def int_option(options: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    """An integer environment option, validated.

    Args:
        options: The run's environment options (``--shots``, ``--sample``, ...).
        key: The option's name.
        default: Returned when the option is not given.
        minimum: The smallest value allowed.

    Returns:
        The option as an integer, or ``default``.

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
    (default 0), in increasing order.

    Args:
        n: How many items there are.
        options: The run's environment options (``sample``, ``sample_seed``).

    Returns:
        The indices, or ``None`` when no sample is asked for or it would hold every item.

    Raises:
        DatasetError: for an invalid ``sample`` or ``sample_seed``.
    """
    size = int_option(options, "sample", None, minimum=1)
    if size is None or size >= n:
        return None
    seed = int_option(options, "sample_seed", 0)
    return sorted(random.Random(seed).sample(range(n), size))

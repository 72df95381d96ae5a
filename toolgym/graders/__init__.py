"""Graders: read a finished trajectory (never a live environment) and return a Score.

A grader is a small frozen dataclass with a ``grade(example, trajectory)`` method, registered
by :func:`register_grader`; it returns ``None`` when it does not apply to an example (for
instance ``final_state`` on an example without an expected state).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from toolgym.records import Example, Score, Trajectory
from toolgym.registry import Registry

__all__ = ["GRADERS", "Grader", "get_grader", "make_score", "register_grader"]


class Grader(Protocol):
    """What every grader provides."""

    name: str

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Score one finished trajectory, or ``None`` when the grader does not apply."""
        ...


GRADERS: Registry[Callable[..., Grader]] = Registry("grader", "toolgym.graders")


def register_grader(name: str) -> Callable[[type], type]:
    """Class decorator registering a grader class under ``name`` (sets ``cls.name``)."""

    def decorator(cls: type) -> type:
        cls.name = name
        return GRADERS.register(name)(cls)

    return decorator


def get_grader(name: str, **settings: Any) -> Grader:
    """Instantiate the grader registered as ``name`` with its settings.

    Raises:
        UnknownNameError: with "did you mean" suggestions.
    """
    return GRADERS.get(name)(**settings)


def make_score(
    grader: Grader,
    trajectory: Trajectory,
    value: float | None,
    explanation: str,
    **details: Any,
) -> Score:
    """Build the :class:`Score` of ``grader`` for ``trajectory``."""
    return Score(
        example_id=trajectory.example_id,
        trial=trajectory.trial,
        grader=grader.name,
        value=value,
        explanation=explanation,
        details=details,
    )

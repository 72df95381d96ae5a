"""Graders: read a finished trajectory (never a live environment) and return a Score.

A grader is a small frozen dataclass with a ``grade(example, trajectory)`` method and a
``measure`` (:class:`~toolgym.records.Measure`: kind, direction, pass rule, aggregation) that
every view reads; it returns ``None`` when it does not apply to an example (for instance
``final_state`` on an example without an expected state). The dataclass fields are its
settings (``judge_model``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from toolgym.records import BINARY, Example, Measure, Score, Trajectory
from toolgym.registry import Registry

__all__ = ["GRADERS", "Grader", "grader_name", "kept_details", "lean_score", "make_score", "measure_of", "register_grader"]


class Grader(Protocol):
    """What every grader provides.

    Attributes:
        name: The name its scores carry.
        measure: What it measures (default: :data:`toolgym.records.BINARY`).
        kept_details: The ``details`` keys its passing scores keep (optional; default none).
            A passing score records its value and explanation; its other details are left
            out (:func:`lean_score`), unless a view or report needs them on every score (a
            decision class counted over all scores, an alignment ``show`` draws). Failing,
            partial and unscored scores keep all their details.
    """

    name: ClassVar[str]
    measure: ClassVar[Measure]

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Score one finished trajectory, or ``None`` when the grader does not apply."""
        ...


_BUILTIN = {
    "final_state": "toolgym.graders.state",
    "collateral_damage": "toolgym.graders.state",
    "turn_state": "toolgym.graders.state",
    "steps_exact": "toolgym.graders.steps",
    "step_ratio": "toolgym.graders.steps",
    "answer_match": "toolgym.graders.answer",
    "correctness": "toolgym.graders.judge",
    "trajectory_match": "toolgym.graders.trajectory",
    "milestone_progress": "toolgym.graders.trajectory",
    "step_precision": "toolgym.graders.trajectory",
    "step_recall": "toolgym.graders.trajectory",
    "milestone_similarity": "toolgym.graders.similarity",
    "next_step": "toolgym.graders.forced",
    "recovery": "toolgym.graders.forced",
}
"""Built-in grader name → the module that registers it (imported when the name is used)."""


def _as_grader(obj: Any, name: str) -> Any:
    if not callable(getattr(obj, "grade", None)):
        raise TypeError(f"grader {name!r}: expected a class or object with a grade(example, trajectory) method, got {obj!r}")
    return obj


GRADERS: Registry[Callable[..., Grader]] = Registry("grader", "toolgym.graders", _BUILTIN, _as_grader)
"""Grader classes by name: toolgym's generic graders, the suites' and the ``toolgym.graders``
entry points."""


def register_grader(name: str) -> Callable[[type], type]:
    """Class decorator registering a grader class under ``name`` (sets ``cls.name``; a class
    without its own ``measure`` is :data:`~toolgym.records.BINARY`)."""

    def decorator(cls: type) -> type:
        cls.name = name
        if "measure" not in vars(cls) and not hasattr(cls, "measure"):
            cls.measure = BINARY
        return GRADERS.register(name)(cls)

    return decorator


def grader_name(grader: Any) -> str:
    """The name a grader's scores carry: its ``name``, else its class name."""
    return str(vars(type(grader)).get("name") or getattr(grader, "name", "") or type(grader).__name__)


def measure_of(grader: Any) -> Measure:
    """A grader's declared :class:`~toolgym.records.Measure` (:data:`BINARY` when it declares
    none)."""
    measure = getattr(grader, "measure", None)
    return measure if isinstance(measure, Measure) else BINARY


def kept_details(grader: Any) -> frozenset[str]:
    """The ``details`` keys a grader's passing scores keep (its ``kept_details``; none when it
    declares none).

    Raises:
        TypeError: when ``kept_details`` is not a collection of strings (a lone string too).
    """
    keys = getattr(grader, "kept_details", ())
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"grader {grader_name(grader)}: kept_details must be a tuple of details keys, got {keys!r}")
    return frozenset(keys)


def lean_score(score: Score, measure: Measure, keep: frozenset[str]) -> Score:
    """``score`` as a run records it: a passing score (``measure.passed`` true) without the
    ``details`` outside ``keep`` (changed in place and returned); any other score as it is.

    A pass says everything its details would (the trajectory and the example hold the calls
    and the gold); a failure, a partial credit or an unscored value keeps its details, which
    explain it.
    """
    details = score.details
    if details and measure.passed(score.value) and any(k not in keep for k in details):
        score.details = {k: v for k, v in details.items() if k in keep}
    return score


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

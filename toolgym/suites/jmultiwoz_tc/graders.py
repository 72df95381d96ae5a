"""The per-turn JMultiWOZ-TC graders: the published equality of a turn's calls, a lenient
diagnostic beside it, and the decision to call or not.

Each grader reads the verdict of the trajectory's calls in the published result form
(:func:`toolgym.suites.jmultiwoz_tc.results.judged`: the line itself for a turn imported from
a result file), judged once per turn and shared by the three graders and the exporter, so a
turn's score and the published rows written by the exporter come from the same judgement. The published rows are percentages over result lines
(error lines out of the denominator, rounded to two decimals; ``evaluate.py`` of
github.com/llm-jp/JMultiWOZ-TC); the exporter computes them from the run
(:func:`toolgym.suites.jmultiwoz_tc.scoring.evaluate`) and writes them to
``score_<model>.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from toolgym import Example, Measure, Score, Trajectory
from toolgym.suites.jmultiwoz_tc.building import built
from toolgym.suites.jmultiwoz_tc.results import judged

__all__ = ["EVALUATE_PY", "JMultiWOZDecision", "JMultiWOZExact", "JMultiWOZLenient"]

EVALUATE_PY = "evaluate.py of github.com/llm-jp/JMultiWOZ-TC"


_EXPLAINED = {(d, e): f"decided {d}, gold {e}" for d in ("call", "no_call", "malformed") for e in ("call", "no_call")}
_SCHEMA_VERSION = Score.model_fields["schema_version"].default


def _score(grader: Any, trajectory: Trajectory, ok: bool, explanation: str, details: dict[str, Any]) -> Score:
    """What :func:`toolgym.make_score` builds, without validating what is valid by
    construction (:func:`~toolgym.suites.jmultiwoz_tc.building.built`: three scores a turn)."""
    return built(Score, {
        "schema_version": _SCHEMA_VERSION, "example_id": trajectory.example_id, "trial": trajectory.trial,
        "grader": grader.name, "value": 1.0 if ok else 0.0, "explanation": explanation, "details": details,
    })


@dataclass(frozen=True)
class JMultiWOZExact:
    """1.0 when the turn's calls equal the gold by the published equality (sets of
    ``(name, arguments as JSON with sorted keys)``, arguments given as a JSON string parsed
    first), else 0.0.

    Its mean over the graded turns is the 全体 row; over the turns whose gold calls a tool, the
    tool call精度 row (both exactly, for a run's own trajectories; an imported file's lines
    with an unknown data_id are in the published rows only).

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes; aggregated by the published formula.
    """

    name: ClassVar[str] = "jmultiwoz_exact"
    measure: ClassVar[Measure] = Measure(
        aggregation="jmultiwoz_tc published rows 全体 and tool call精度: 正解数 / 評価対象数 × 100, "
        "rounded to 2 decimals, over result lines (error lines out of 評価対象数)",
        reference=f"set equality of normalised calls, {EVALUATE_PY}",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Compare the turn's calls with the gold as published.

        Args:
            example (Example): The turn, with the gold as ``expected_calls``.
            trajectory (Trajectory): The finished turn.

        Returns:
            Score: 1.0 or 0.0, without details: the example holds the gold and the trajectory
            the calls (``show`` displays both; the exported ``incorrect_<model>.json`` lists
            every wrong turn with both).
        """
        ok = judged(trajectory, example).exact
        return _score(self, trajectory, ok, "calls equal the gold" if ok else "calls differ from the gold", {})


@dataclass(frozen=True)
class JMultiWOZLenient:
    """1.0 when the turn's well-formed calls equal the gold as multisets under lenient equality
    (strings NFKC-normalised and trimmed, values coerced by the tool schema) and no call is
    malformed; a diagnostic beside the published equality (the ``lenient_multiset(%)`` column
    of ``diagnostics_<model>.json``).

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes; a plain mean.
    """

    name: ClassVar[str] = "jmultiwoz_lenient"
    measure: ClassVar[Measure] = Measure(
        reference=f"toolgym's lenient diagnostic; relaxes the strict call equality of {EVALUATE_PY}",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Compare the turn's calls with the gold leniently.

        Args:
            example (Example): The turn, with the gold as ``expected_calls``.
            trajectory (Trajectory): The finished turn.

        Returns:
            Score: 1.0 or 0.0; a failure with ``details.malformed`` (calls that could not be
            parsed), explained by the malformed calls, a count of calls that differs from the
            gold's (the same calls leniently as a set), or "differs even leniently".
        """
        verdict = judged(trajectory, example)
        ok = verdict.lenient_multiset
        if ok:  # a pass has no malformed call
            return _score(self, trajectory, ok, "leniently equal", {})
        if verdict.reasons:
            explanation = f"{len(verdict.reasons)} malformed call(s)"
        elif verdict.lenient_set:
            explanation = "the same calls leniently, but not as many times as the gold (a call repeated or missing)"
        else:
            explanation = "differs even leniently"
        return _score(self, trajectory, ok, explanation, {"malformed": len(verdict.reasons)})


@dataclass(frozen=True)
class JMultiWOZDecision:
    """1.0 when the decision to call (or not) matches the gold; a turn with a malformed call
    scores 0 whatever the gold (never credited as an abstention).

    Stricter than the published decision rows, which count a malformed call as a call: the
    rows ツール使用判断, ツール不使用判断 and ツール使用・不使用判断 of ``score_<model>.json`` are
    computed by the published formula, not as this grader's mean.

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes; the published rows use the published formula.
    """

    name: ClassVar[str] = "jmultiwoz_decision"
    kept_details: ClassVar[tuple[str, ...]] = ("decision",)  # the decision class, on every score
    measure: ClassVar[Measure] = Measure(
        aggregation="jmultiwoz_tc published rows ツール使用判断, ツール不使用判断 and ツール使用・不使用判断: "
        "正解数 / 評価対象数 × 100, rounded to 2 decimals, a malformed call counted as a call",
        reference=f"tool-use judgement of {EVALUATE_PY}; malformed calls kept apart by toolgym",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Compare the decision to call with the gold's.

        Args:
            example (Example): The turn, with the gold as ``expected_calls``.
            trajectory (Trajectory): The finished turn.

        Returns:
            Score: 1.0 or 0.0, with ``details.decision`` (``call``, ``no_call`` or
            ``malformed``).
        """
        decision = judged(trajectory, example).decision
        expected = "call" if example.expected_calls else "no_call"
        ok = decision == expected
        return _score(self, trajectory, ok, _EXPLAINED[decision, expected], {"decision": decision})

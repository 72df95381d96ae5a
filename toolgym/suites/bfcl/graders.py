"""The BFCL graders: the leaderboard's verdict per entry, and two columns it does not have.

* ``bfcl_accuracy``: the official checker (:func:`toolgym.suites.bfcl.checker.check`; for the
  multi-turn categories the package's own ``multi_turn_checker``,
  :mod:`toolgym.suites.bfcl.multi_turn`); its mean over a category is the leaderboard's
  accuracy of that category. Every failure carries
  its ``error_type`` and, where one argument is at fault, that argument (``details.param``).
* ``bfcl_optimal``: the same, with parallel calls matched optimally instead of greedily
  (:func:`~toolgym.suites.bfcl.checker.check_optimal`); equal to the official verdict on every
  other entry.
* ``bfcl_abstention``: irrelevance entries only; 1 for a clean abstention, 0 for a call or a
  malformed output (which the official checker counts as a correct abstention; gorilla
  issue #1362). ``details.outcome`` says which.

The official column never depends on the other two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from toolgym import Example, Measure, Score, Trajectory, make_score
from toolgym.suites.bfcl.data import entry_of
from toolgym.suites.bfcl.results import (
    ABSTENTION,
    ACCURACY,
    OPTIMAL,
    judgement_of,
    outcome_of,
    result_of,
    verdict_of,
)

__all__ = ["BFCLAbstention", "BFCLAccuracy", "BFCLOptimal"]

CHECKER = ("ast_checker.py and eval_runner.py of github.com/ShishirPatil/gorilla "
           "(berkeley-function-call-leaderboard/bfcl_eval/eval_checker)")


def _multi_turn_score(grader, entry, trajectory: Trajectory) -> Score:
    judged = judgement_of(entry, trajectory)
    view, official = judged.view, judged.official
    detail = {"category": entry.category, "turn_states": judged.turn_states}
    if official["valid"]:
        return make_score(grader, trajectory, 1.0, "passes the leaderboard's multi-turn checks", **detail)
    where = {"turn": view.turn, "step": view.step, "call": view.call, "stepwise_error_type": view.error_type,
             "reason": view.reason}
    return make_score(
        grader, trajectory, 0.0, f"{official.get('error_type')}: {view.reason or official.get('error_message')}",
        error_type=official.get("error_type"), error=official.get("error_message"),
        checker_details=official.get("details"), **where, **detail,
    )


def _score(grader, example: Example, trajectory: Trajectory, optimal: bool) -> Score | None:
    entry = entry_of(example)
    if entry.kind == "multi_turn":
        return None if optimal else _multi_turn_score(grader, entry, trajectory)
    verdict = verdict_of(entry, trajectory, optimal=optimal)
    if verdict.valid:
        return make_score(grader, trajectory, 1.0, "passes the leaderboard's checks", category=entry.category)
    return make_score(
        grader, trajectory, 0.0, f"{verdict.error_type}: {verdict.error}", category=entry.category,
        error_type=verdict.error_type, error=verdict.error, param=verdict.param, cause=verdict.cause,
    )


@dataclass(frozen=True)
class BFCLAccuracy:
    """1.0 when the entry passes the leaderboard's checker, else 0.0 with the leaderboard's
    ``error_type`` (see :mod:`toolgym.suites.bfcl.checker`).

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes; the mean per category is the leaderboard's
            accuracy of that category.
    """

    name: ClassVar[str] = ACCURACY
    measure: ClassVar[Measure] = Measure(reference=f"the official AST and relevance checks, {CHECKER}")

    def grade(self, example: Example, trajectory: Trajectory) -> Score:
        """The official verdict.

        Args:
            example (Example): A BFCL entry.
            trajectory (Trajectory): Its finished episode (or an imported result line).

        Returns:
            Score: 1.0 or 0.0; ``details``: ``category``, and on failure ``error_type``,
            ``error``, ``param`` (the first argument found wrong) and ``cause`` (for a
            parallel mismatch, the closest candidate's ``error_type``). For a multi-turn
            entry, the package's ``multi_turn_checker``'s verdict, ``details``:
            ``category``, ``turn_states`` (per played turn, whether the state equals the
            ground truth's; the run record keeps it for failures only), and on failure its
            ``error_type`` and ``error``,
            ``checker_details`` (its ``differences`` or ``missing_items``) and toolgym's
            stepwise view: ``turn`` (from 1), ``step`` (the model step of that turn at
            fault, from 1, or ``None``), ``call`` (the call at fault over the trajectory,
            from 0), ``stepwise_error_type`` and ``reason``
            (:func:`toolgym.suites.bfcl.multi_turn.stepwise`).
        """
        return _score(self, example, trajectory, optimal=False)


@dataclass(frozen=True)
class BFCLOptimal:
    """:class:`BFCLAccuracy` with parallel calls matched optimally (a perfect matching of
    model calls to expected calls, where the official greedy matching can fail).

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes.
    """

    name: ClassVar[str] = OPTIMAL
    measure: ClassVar[Measure] = Measure(reference=f"toolgym: optimal instead of greedy matching of parallel calls in {CHECKER}")

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """The verdict with optimal matching (see :class:`BFCLAccuracy` for the fields);
        ``None`` for a multi-turn entry, which has no parallel matching."""
        return _score(self, example, trajectory, optimal=True)


@dataclass(frozen=True)
class BFCLAbstention:
    """Irrelevance entries: 1.0 for a clean abstention (no call and nothing that looks like
    one), 0.0 for a call or a malformed output; not scored on other entries.

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes.
    """

    name: ClassVar[str] = ABSTENTION
    kept_details: ClassVar[tuple[str, ...]] = ("outcome",)  # counted by the report
    measure: ClassVar[Measure] = Measure(
        reference="toolgym: irrelevance without crediting malformed output (gorilla issue #1362)")

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """The strict abstention verdict.

        Returns:
            Score | None: ``None`` for entries that are not irrelevance entries; else 1.0 or
            0.0 with ``details.outcome`` (``abstained``, ``called`` or ``malformed``).
        """
        entry = entry_of(example)
        if entry.kind != "irrelevance":
            return None
        outcome = outcome_of(trajectory)
        detail = {"category": entry.category, "outcome": outcome}
        if outcome == "malformed":
            detail["result"] = str(result_of(trajectory))[:500]
        return make_score(self, trajectory, 1.0 if outcome == "abstained" else 0.0, f"outcome: {outcome}", **detail)

"""Readers of teacher-forced runs and injected faults (:mod:`toolgym.forcing`): step accuracy by
``k``, how much of the free-running failure is compounding, and the recovery rate per fault.

* :func:`step_accuracy`: the ``next_step`` accuracy at each step ``k``, mean ± standard error
  clustered by example (:func:`toolgym.stats.clustered_estimate`: the trials of one example
  at one ``k`` are not independent).
* :func:`compounding`: per example, the product of its per-step accuracies (the chance of a
  whole free-running episode if each step failed independently, given a correct history)
  beside the free-running pass rate of the same run; a free-running rate below the product
  means errors compound (a wrong step makes the next ones likelier to go wrong).
* :func:`recovery_rates`: the ``recovery`` pass rate per fault kind.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from toolgym.runio import Run
from toolgym.stats import Estimate, clustered_estimate

__all__ = [
    "ExampleCompounding",
    "StepAccuracy",
    "compounding",
    "free_grader",
    "recovery_rates",
    "step_accuracy",
    "stepwise_tables",
]

FORCED_GRADERS = ("next_step", "recovery")


@dataclass(frozen=True)
class StepAccuracy:
    """``next_step`` at one step ``k``: ``estimate`` (mean ± clustered standard error, ``n``
    scored episodes) over ``examples`` examples."""

    k: int
    estimate: Estimate
    examples: int


def step_accuracy(run: Run) -> list[StepAccuracy]:
    """The ``next_step`` accuracy at each step ``k`` (ascending); empty without such scores."""
    by_k: dict[int, list[tuple[str, float | None]]] = defaultdict(list)
    for s in run.scores:
        if s.grader == "next_step" and isinstance(s.details.get("k"), int):
            by_k[s.details["k"]].append((s.example_id, s.value))
    return [
        StepAccuracy(k, clustered_estimate([v for _, v in rows], [e for e, _ in rows]), len({e for e, _ in rows}))
        for k, rows in sorted(by_k.items())
    ]


def free_grader(run: Run) -> str | None:
    """The pass/fail grader whose pass rate stands for the free-running episodes:
    ``trajectory_match`` when the run has it, else the run's first pass/fail grader that is
    not made for forced episodes."""
    graders = [g for g in run.graders if g not in FORCED_GRADERS]
    if "trajectory_match" in graders:
        return "trajectory_match"
    for g in graders:
        measure = run.record.measures.get(g)
        if measure is not None and measure.pass_fail:
            return g
    return None


@dataclass(frozen=True)
class ExampleCompounding:
    """One example of a teacher-forced run.

    Attributes:
        example_id: The example.
        steps: Steps ``k`` with a scored ``next_step``.
        product: The product over ``k`` of the mean ``next_step`` at ``k`` (over trials).
        mean_accuracy: The mean over ``k`` of the mean ``next_step`` at ``k``.
        free_pass_rate: The share of its free-running episodes that pass ``grader`` (``None``
            when none was scored).
        grader: The free-running grader (:func:`free_grader`).
    """

    example_id: str
    steps: int
    product: float
    free_pass_rate: float | None
    grader: str | None
    mean_accuracy: float = math.nan


def compounding(run: Run, grader: str | None = None) -> list[ExampleCompounding]:
    """Per example (in first-seen order), the product of per-step accuracies beside the
    free-running pass rate of ``grader`` (default :func:`free_grader`)."""
    grader = grader or free_grader(run)
    per: dict[str, dict[int, list[float]]] = {}
    for s in run.scores:
        if s.grader == "next_step" and s.value is not None and isinstance(s.details.get("k"), int):
            per.setdefault(s.example_id, {}).setdefault(s.details["k"], []).append(float(s.value))
    measure = run.record.measures.get(grader) if grader else None
    free: dict[str, list[float]] = defaultdict(list)
    if measure is not None:
        for s in run.scores:
            if s.grader == grader and s.value is not None:
                free[s.example_id].append(float(bool(measure.passed(s.value))))
    rows = []
    for example_id, by_k in per.items():
        accuracies = [sum(v) / len(v) for v in by_k.values()]
        passes = free.get(example_id)
        rows.append(ExampleCompounding(example_id, len(by_k), math.prod(accuracies),
                                       sum(passes) / len(passes) if passes else None, grader,
                                       sum(accuracies) / len(accuracies)))
    return rows


def recovery_rates(run: Run) -> dict[str, Estimate]:
    """Fault kind → the ``recovery`` pass rate (mean ± standard error clustered by example)."""
    by_kind: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    for s in run.scores:
        if s.grader == "recovery":
            by_kind[str(s.details.get("kind"))].append((s.example_id, s.value))
    return {kind: clustered_estimate([v for _, v in rows], [e for e, _ in rows]) for kind, rows in sorted(by_kind.items())}


def _mean_steps(run: Run, kind: str) -> float | None:
    steps = [s.details["steps"] for s in run.scores if s.grader == "recovery" and s.details.get("kind") == kind
             and isinstance(s.details.get("steps"), int)]
    return sum(steps) / len(steps) if steps else None


def stepwise_tables(run: Run, label: str):
    """The ``summary`` tables of a run with ``next_step`` or ``recovery`` scores: accuracy by
    ``k``, the product of per-step accuracies beside the free-running pass rate (by reference
    path length, then per example), and the recovery rate per fault kind. A list of
    ``rich.table.Table`` (empty for a run without them)."""
    from rich.table import Table
    from rich.text import Text

    tables = []
    by_k = step_accuracy(run)
    if by_k:
        t = Table(title=Text(f"{label} · teacher-forced step accuracy (next_step) by k"))
        for name in ("k", "accuracy ± s.e.", "episodes", "examples"):
            t.add_column(name, justify="right")
        for row in by_k:
            t.add_row(str(row.k), row.estimate.format(), str(row.estimate.n), str(row.examples))
        tables.append(t)
        rows = compounding(run)
        grader = rows[0].grader if rows else None
        by_len: dict[int, list[ExampleCompounding]] = defaultdict(list)
        for r in rows:
            by_len[r.steps].append(r)
        t = Table(title=Text(f"{label} · compounding: product of per-step accuracies vs free-running "
                             f"pass rate ({grader or 'no free-running grader'}), by path length"))
        for name in ("steps", "examples", "step accuracy", "product of step accuracies", "free-running pass rate"):
            t.add_column(name, justify="right")
        for n, group in sorted(by_len.items()):
            free = [r.free_pass_rate for r in group if r.free_pass_rate is not None]
            t.add_row(str(n), str(len(group)), f"{sum(r.mean_accuracy for r in group) / len(group):.3f}",
                      f"{sum(r.product for r in group) / len(group):.3f}", f"{sum(free) / len(free):.3f}" if free else "—")
        tables.append(t)
        if len(rows) <= 50:
            t = Table(title=Text(f"{label} · compounding per example"))
            for name, justify in (("example", "left"), ("steps", "right"), ("product", "right"), ("free-running", "right")):
                t.add_column(name, justify=justify)
            for r in rows:
                t.add_row(r.example_id, str(r.steps), f"{r.product:.3f}",
                          f"{r.free_pass_rate:.3f}" if r.free_pass_rate is not None else "—")
            tables.append(t)
    rates = recovery_rates(run)
    if rates:
        t = Table(title=Text(f"{label} · recovery from injected faults"))
        for name in ("fault", "recovery rate ± s.e.", "episodes", "mean steps to recover"):
            t.add_column(name, justify="right")
        for kind, est in rates.items():
            steps = _mean_steps(run, kind)
            t.add_row(kind, est.format(), str(est.n), f"{steps:.2f}" if steps is not None else "—")
        tables.append(t)
    return tables


def _tool_cells(trajectory, start: int) -> list[str]:
    from toolgym.views.rundata import format_call, shorten

    cells = []
    for s in trajectory.tool_steps[start - 1:]:
        mark = " (error)" if s.error else ""
        cells.append(f"{format_call(s.name, s.arguments, 120)} → {shorten(s.output, 120)}{mark}")
    return cells


def fork_table(parent, fork, parent_scores=(), fork_scores=(), label: str = ""):
    """Parent and fork side by side from the fork's step ``K`` (``fork.parent["step"]``): one
    row per tool step (call → result), then the status, the final answer and each grader both
    were scored by. A ``rich.table.Table``.

    Args:
        parent / fork: The two trajectories (``fork.parent`` set).
        parent_scores / fork_scores: Their scores.
    """
    from rich.table import Table
    from rich.text import Text

    from toolgym.views.rundata import format_value, shorten

    k = int(fork.parent["step"])
    t = Table(title=Text(f"{label}fork of {fork.parent['run']} · {fork.parent['example_id']} trial "
                         f"{fork.parent['trial']}, side by side from step {k} (steps before {k} replayed)"))
    t.add_column("step", justify="right")
    t.add_column(f"parent ({parent.model or parent.agent})", overflow="fold")
    t.add_column(f"fork ({fork.model or fork.agent})", overflow="fold")
    left, right = _tool_cells(parent, k), _tool_cells(fork, k)
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        t.add_row(str(k + i), Text(a), Text(b if b != a else "= " + b))
    t.add_row("status", parent.status, fork.status)
    t.add_row("answer", Text(shorten(parent.final_answer or "", 200)), Text(shorten(fork.final_answer or "", 200)))
    a_scores = {s.grader: s for s in parent_scores}
    for s in fork_scores:
        if s.grader in a_scores:
            t.add_row(s.grader, format_value(a_scores[s.grader].value), format_value(s.value))
    if fork.injected:
        t.add_row("injected", "", f"{fork.injected['kind']} at step {fork.injected['step']}")
    return t


def fork_tables(fork_run: Run, parent_run: Run | None = None) -> list:
    """:func:`fork_table` for every trajectory of ``fork_run`` with a ``parent`` (its parent
    read from ``parent_run``, else from the recorded parent directory; a parent that cannot be
    read is said in the table's place as a ``rich.text.Text``)."""
    from rich.text import Text

    from toolgym.api import load_run
    from toolgym.runio import RunDirError, latest_attempts

    out = []
    cache: dict[str, Run | None] = {}
    for traj in latest_attempts(fork_run.trajectories):
        if not traj.parent:
            continue
        where = str(traj.parent.get("run"))
        source = parent_run
        if source is None:
            if where not in cache:
                try:
                    cache[where] = load_run(where, with_examples=False)
                except RunDirError as exc:
                    cache[where] = None
                    out.append(Text(f"parent run {where} cannot be read: {exc}"))
            source = cache[where]
        if source is None:
            continue
        parent = next((t for t in latest_attempts(source.trajectories) if t.example_id == traj.parent["example_id"]
                       and t.trial == traj.parent["trial"]), None)
        if parent is None:
            out.append(Text(f"the parent trajectory {traj.parent['example_id']} trial {traj.parent['trial']} is not in {where}"))
            continue
        p_scores = [s for s in source.scores if (s.example_id, s.trial) == parent.key]
        f_scores = [s for s in fork_run.scores if (s.example_id, s.trial) == traj.key]
        out.append(fork_table(parent, traj, p_scores, f_scores))
    return out

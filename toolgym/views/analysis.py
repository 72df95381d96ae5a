"""Statistics of run directories as plain data: per-grader summaries over repeated trials,
breakdowns by difficulty, judge/checker agreement, and paired comparisons of two runs.

Runs are read by :func:`toolgym.api.load_run`; pass rates, pass@k / pass^k, agreement, flips
and which run is better all follow each grader's :class:`~toolgym.records.Measure`
(:func:`toolgym.views.rundata.measure_for`). Everything is returned as frozen dataclasses;
printing lives in :mod:`toolgym.views.tables` so reports can reuse the numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolgym.api import load_run
from toolgym.records import BINARY, UNSCORED_STATUSES, Example, Measure, Score
from toolgym.runio import Run, RunDirError
from toolgym.stats import (
    Estimate,
    PairedTest,
    clustered_estimate,
    mcnemar,
    paired_bootstrap,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)
from toolgym.views.rundata import measure_for

__all__ = [
    "AGREEMENT_PAIRS",
    "Agreement",
    "Comparison",
    "GraderComparison",
    "GraderStats",
    "GroupStats",
    "RunReport",
    "agreement",
    "breakdown",
    "compare_runs",
    "grader_stats",
    "run_report",
]

AGREEMENT_PAIRS: tuple[tuple[str, str], ...] = (
    ("multiverse_correctness", "answer_match"),
    ("correctness", "answer_match"),
)
"""(judge, deterministic checker) pairs whose agreement is reported when both were run."""


def _as_run(run: Run | str | Path, with_examples: bool = True) -> Run:
    return run if isinstance(run, Run) else load_run(run, with_examples=with_examples)


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraderStats:
    """One grader's summary over a run, trials included.

    Attributes:
        env (str): Environment name.
        grader (str): Grader name.
        measure (Measure): What the grader measures (its pass rule decides the pass rates).
        estimate (Estimate): Mean ± standard error clustered by example (plain with one trial
            each).
        n_examples (int): Examples with at least one scored trial.
        trials (int): Most scored trials of any example (K).
        pass_rate (float | None): Fraction of scored values that pass the measure's rule;
            ``None`` for a grader without a pass rule.
        wilson (tuple[float, float] | None): 95% Wilson interval of the pass rate at the
            effective sample size (the number of scores divided by the design effect, the
            squared ratio of the clustered to the binomial standard error of the passes; Kish,
            1965, "Survey Sampling"); with several trials and no variation to measure the
            design effect by (every score passes, or every one fails), the number of examples:
            trials that agree add no information); ``None`` without a pass rule.
        pass_at_k (dict[int, float]): k → mean over examples with at least k scored trials of
            the unbiased pass@k (Chen et al., 2021); graders with a pass rule only, k = 1..K.
        pass_hat_k (dict[int, float]): k → the same mean of pass^k (Yao et al., 2024).
        examples_at_k (dict[int, int]): k → number of examples that entered the k-th mean.
    """

    env: str
    grader: str
    measure: Measure
    estimate: Estimate
    n_examples: int
    trials: int
    pass_rate: float | None = None
    wilson: tuple[float, float] | None = None
    pass_at_k: dict[int, float] = field(default_factory=dict)
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    examples_at_k: dict[int, int] = field(default_factory=dict)


PER_STEP_GRADERS = ("next_step",)
"""Graders with one score per step of an example, not per trial: no pass@k / pass^k."""


def _scored_by_example(scores: list[Score], grader: str) -> dict[str, list[float]]:
    found: dict[str, list[float]] = defaultdict(list)
    for s in scores:
        if s.grader == grader and s.value is not None and not math.isnan(s.value):
            found[s.example_id].append(float(s.value))
    return dict(found)


def grader_stats(env: str, grader: str, scores: list[Score], measure: Measure, n_errors: int = 0) -> GraderStats:
    """Summarise one grader's scores (see :class:`GraderStats`).

    Args:
        env (str): Environment name, recorded in the result.
        grader (str): Which grader's scores to use (others in ``scores`` are ignored).
        scores (list[Score]): Scores of the run.
        measure (Measure): The grader's measure; its pass rule counts the passes.
        n_errors (int): Error trajectories of the run (outside every denominator).

    Returns:
        GraderStats: The summary.
    """
    mine = [s for s in scores if s.grader == grader]
    est = clustered_estimate([s.value for s in mine], [s.example_id for s in mine], n_errors)
    per_example = _scored_by_example(mine, grader)
    trials = max((len(v) for v in per_example.values()), default=0)
    if not measure.pass_fail or est.n == 0:
        return GraderStats(env, grader, measure, est, len(per_example), trials)
    passes = {e: [float(bool(measure.passed(v))) for v in vs] for e, vs in per_example.items()}
    rate = clustered_estimate([p for ps in passes.values() for p in ps], [e for e, ps in passes.items() for _ in ps])
    n_eff = float(rate.n)
    binomial_var = rate.mean * (1 - rate.mean) / rate.n
    if trials > 1:  # no variation to measure the design effect by: each example's trials count once
        n_eff = float(len(passes))
        if rate.stderr > 0 and binomial_var > 0:
            n_eff = min(float(rate.n), rate.n * binomial_var / rate.stderr**2)
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    n_at_k: dict[int, int] = {}
    for k in range(1, trials + 1 if grader not in PER_STEP_GRADERS else 1):
        eligible = [(len(p), int(sum(p))) for p in passes.values() if len(p) >= k]
        at_k[k] = sum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible)
        hat_k[k] = sum(pass_hat_k(n, c, k) for n, c in eligible) / len(eligible)
        n_at_k[k] = len(eligible)
    return GraderStats(
        env, grader, measure, est, len(per_example), trials, rate.mean,
        wilson_interval(rate.mean * n_eff, n_eff), at_k, hat_k, n_at_k,
    )


@dataclass(frozen=True)
class GroupStats:
    """A grader's estimate on the examples of one difficulty group.

    Attributes:
        group (Any): The group value (number of expected steps, or the difficulty level).
        estimate (Estimate): Mean ± standard error clustered by example.
        n_examples (int): Examples in the group with a scored trial.
    """

    group: Any
    estimate: Estimate
    n_examples: int


def expected_steps(example: Example) -> int:
    """Number of expected tool calls of an example."""
    return len(example.expected_steps)


def breakdown(examples: dict[str, Example], scores: list[Score], grader: str, by: str) -> list[GroupStats]:
    """A grader's mean and clustered standard error per group of examples.

    Args:
        examples (dict[str, Example]): Example id → example.
        scores (list[Score]): Scores of the run.
        grader (str): Which grader.
        by (str): ``"n_steps"`` (number of expected steps) or ``"difficulty"`` (the generators'
            ``metadata["difficulty"]``); examples without a difficulty are left out.

    Returns:
        list[GroupStats]: Groups in ascending order (numbers before strings).

    Raises:
        ValueError: for another ``by``.
    """
    if by not in ("n_steps", "difficulty"):
        raise ValueError(f"unknown breakdown {by!r}; use 'n_steps' or 'difficulty'")
    groups: dict[Any, list[Score]] = defaultdict(list)
    for s in scores:
        example = examples.get(s.example_id)
        if s.grader != grader or example is None:
            continue
        key = expected_steps(example) if by == "n_steps" else example.metadata.get("difficulty")
        if key is not None:
            groups[key].append(s)
    rows = []
    for key in sorted(groups, key=lambda k: (not isinstance(k, (int, float)), k if isinstance(k, (int, float)) else str(k))):
        group = groups[key]
        est = clustered_estimate([s.value for s in group], [s.example_id for s in group])
        rows.append(GroupStats(key, est, len({s.example_id for s in group if s.value is not None})))
    return rows


@dataclass(frozen=True)
class Agreement:
    """How often a judge and a deterministic checker agree on the same trajectories.

    Attributes:
        judge (str): The judge grader.
        checker (str): The checker grader.
        n (int): Trajectories scored by both (an unscored judge reply is left out).
        both_pass (int): Both passed.
        both_fail (int): Both failed.
        judge_only (int): Only the judge passed.
        checker_only (int): Only the checker passed.
        judge_unscored (int): Trajectories the checker scored but the judge left unscored.
    """

    judge: str
    checker: str
    n: int
    both_pass: int
    both_fail: int
    judge_only: int
    checker_only: int
    judge_unscored: int = 0

    @property
    def rate(self) -> float:
        """Fraction of agreeing trajectories (NaN when ``n`` is 0)."""
        return (self.both_pass + self.both_fail) / self.n if self.n else math.nan


def agreement(
    scores: list[Score], judge: str, checker: str, judge_measure: Measure = BINARY, checker_measure: Measure = BINARY
) -> Agreement | None:
    """Agreement of two pass/fail graders over the (example, trial) pairs both scored.

    Args:
        scores (list[Score]): Scores of a run.
        judge (str): The judge grader.
        checker (str): The deterministic checker.
        judge_measure (Measure): The judge's measure (its pass rule says what passes).
        checker_measure (Measure): The checker's measure.

    Returns:
        Agreement | None: The 2×2 table, or ``None`` when either grader has no score or no
        pass rule.
    """
    if not (judge_measure.pass_fail and checker_measure.pass_fail):
        return None
    judged = {(s.example_id, s.trial): s.value for s in scores if s.grader == judge}
    checked = {(s.example_id, s.trial): s.value for s in scores if s.grader == checker and s.value is not None}
    if not judged or not checked:
        return None
    table = {"both_pass": 0, "both_fail": 0, "judge_only": 0, "checker_only": 0}
    unscored = 0
    for key, c in checked.items():
        if key not in judged:
            continue
        j = judged[key]
        if j is None:
            unscored += 1
            continue
        jp, cp = judge_measure.passed(j), checker_measure.passed(c)
        name = "both_pass" if jp and cp else "both_fail" if not (jp or cp) else "judge_only" if jp else "checker_only"
        table[name] += 1
    return Agreement(judge, checker, sum(table.values()), judge_unscored=unscored, **table)


@dataclass(frozen=True)
class RunReport:
    """Everything :mod:`toolgym.views.tables` prints for one run.

    Attributes:
        directory (Path): The run directory.
        env (str): Environment name.
        stats (list[GraderStats]): One summary per grader.
        breakdowns (dict[str, dict[str, list[GroupStats]]]): ``by`` → grader → groups, for
            graders with more than one group; the difficulty breakdown is left out when every
            difficulty equals the number of expected steps, and both when the dataset cannot be
            read.
        agreements (list[Agreement]): Judge/checker agreement of the pairs that were both run.
        status (dict[str, int]): Trajectory status → count.
        problem (str | None): Why the breakdowns are missing, if they are.
    """

    directory: Path
    env: str
    stats: list[GraderStats]
    breakdowns: dict[str, dict[str, list[GroupStats]]]
    agreements: list[Agreement]
    status: dict[str, int]
    problem: str | None = None


def run_report(run: Run | str | Path) -> RunReport:
    """Per-grader statistics, difficulty breakdowns and judge/checker agreement of a run.

    Args:
        run (Run | str | Path): A run read by :func:`toolgym.api.load_run`, or its directory.

    Returns:
        RunReport: The statistics.

    Raises:
        RunDirError: if the run directory cannot be read.
    """
    run = _as_run(run)
    env, scores = run.record.env, run.scores
    graders = run.graders
    measures = {g: measure_for(run, g) for g in graders}
    n_errors = sum(t.status in UNSCORED_STATUSES for t in run.trajectories)
    stats = [grader_stats(env, g, scores, measures[g], n_errors) for g in graders]
    breakdowns: dict[str, dict[str, list[GroupStats]]] = {}
    if run.examples is not None:
        same = all(ex.metadata.get("difficulty") == expected_steps(ex) for ex in run.examples.values())
        for by in ("n_steps",) if same else ("n_steps", "difficulty"):
            per_grader = {g: breakdown(run.examples, scores, g, by) for g in graders}
            per_grader = {g: rows for g, rows in per_grader.items() if len(rows) > 1}
            if per_grader:
                breakdowns[by] = per_grader
    agreements = [
        a
        for j, c in AGREEMENT_PAIRS
        if (a := agreement(scores, j, c, measure_for(run, j), measure_for(run, c))) is not None
    ]
    status: dict[str, int] = defaultdict(int)
    for t in run.trajectories:
        status[t.status] += 1
    problem = f"no breakdowns: {run.problem}" if run.problem else None
    return RunReport(Path(run.directory or "."), env, stats, breakdowns, agreements, dict(status), problem)


# --- two runs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraderComparison:
    """One grader compared between run A and run B on their common examples.

    Attributes:
        grader (str): Grader name.
        measure (Measure): What it measures (run A's measure).
        mean_a (float): Mean of run A over the paired examples (each example's trials averaged).
        mean_b (float): The same for run B.
        test (PairedTest): McNemar on the passes (a binary grader with one score per example in
            both runs) or a paired bootstrap of the means.
        n_paired (int): Examples scored in both runs.
        only_a (int): Examples scored in run A only (left out of the test).
        only_b (int): Examples scored in run B only.
        flipped (list[tuple[str, float, float]]): ``(example_id, a, b)`` (the example's means)
            for every paired example whose share of passing trials differs, in example order;
            empty for a grader without a pass rule.
        better (Literal["A", "B"] | None): The run whose mean is better in the measure's
            direction; for a two-sided (``target``) measure, the run whose examples lie closer
            to the target on average (the mean over paired examples of |value − target|, so
            ratios of 0.5 and 1.5 are not a perfect 1); ``None`` when equal.
    """

    grader: str
    measure: Measure
    mean_a: float
    mean_b: float
    test: PairedTest
    n_paired: int
    only_a: int
    only_b: int
    flipped: list[tuple[str, float, float]]
    better: Literal["A", "B"] | None = None


@dataclass(frozen=True)
class Comparison:
    """Two runs compared grader by grader (differences are B − A).

    Attributes:
        dir_a (Path): Run A's directory.
        dir_b (Path): Run B's directory.
        env_a (str): Run A's environment.
        env_b (str): Run B's environment.
        same_dataset (bool): The dataset sha256 recorded in both run.json files is equal.
        graders (list[GraderComparison]): One row per grader scored in both runs.
        examples_only_a (list[str]): Example ids with trajectories in run A only.
        examples_only_b (list[str]): Example ids with trajectories in run B only.
    """

    dir_a: Path
    dir_b: Path
    env_a: str
    env_b: str
    same_dataset: bool
    graders: list[GraderComparison]
    examples_only_a: list[str]
    examples_only_b: list[str]


def _example_values(scores: list[Score], grader: str, measure: Measure) -> dict[str, tuple[float, float, int]]:
    """Example id → (mean value, share of passing trials, scored trials)."""
    return {
        eid: (sum(v) / len(v), sum(bool(measure.passed(x)) for x in v) / len(v), len(v))
        for eid, v in _scored_by_example(scores, grader).items()
    }


def compare_runs(
    run_a: Run | str | Path, run_b: Run | str | Path, n_boot: int = 10_000, seed: int = 0
) -> Comparison:
    """Compare the scores of two runs on the examples they share.

    For each grader scored in both runs (with run A's measure, :func:`measure_for`): each
    example's trials are averaged; for a binary grader with exactly one score per example in
    both runs the paired test is McNemar's on the passes (exact binomial for fewer than 25
    discordant pairs), otherwise a seeded paired bootstrap over examples. Flips follow the
    pass rule; the better run follows the measure's direction.

    Args:
        run_a (Run | str | Path): Run A, or its directory.
        run_b (Run | str | Path): Run B, or its directory.
        n_boot (int): Bootstrap resamples.
        seed (int): Bootstrap seed (results are reproducible).

    Returns:
        Comparison: The comparison (differences are B − A).

    Raises:
        RunDirError: if a directory cannot be read or the runs share no example.
    """
    a, b = _as_run(run_a, with_examples=False), _as_run(run_b, with_examples=False)
    dir_a, dir_b = Path(a.directory or "A"), Path(b.directory or "B")
    ids_a = {t.example_id for t in a.trajectories}
    ids_b = {t.example_id for t in b.trajectories}
    if not ids_a & ids_b:
        raise RunDirError(f"{dir_a} and {dir_b} share no example; compare runs of the same dataset")
    graders_b = set(b.graders)
    rows = []
    for grader in (g for g in a.graders if g in graders_b):
        measure = measure_for(a, grader)
        ma, mb = _example_values(a.scores, grader, measure), _example_values(b.scores, grader, measure)
        paired = sorted(set(ma) & set(mb))
        if not paired:
            continue
        va = [ma[e][0] for e in paired]
        vb = [mb[e][0] for e in paired]
        mean_a, mean_b = sum(va) / len(va), sum(vb) / len(vb)
        single = all(ma[e][2] == 1 and mb[e][2] == 1 for e in paired)
        if single and measure.kind == "binary" and measure.pass_fail:
            n_b = sum(ma[e][1] > mb[e][1] for e in paired)
            n_c = sum(ma[e][1] < mb[e][1] for e in paired)
            test = mcnemar(n_b, n_c, mean_b - mean_a)
        else:
            test = paired_bootstrap(va, vb, n_boot=n_boot, seed=seed)
        flipped = [(e, ma[e][0], mb[e][0]) for e in paired if measure.pass_fail and ma[e][1] != mb[e][1]]
        if measure.direction == "target":  # per example: over- and undershoots must not cancel in a mean
            far_a = sum(abs(v - measure.target) for v in va) / len(va)
            far_b = sum(abs(v - measure.target) for v in vb) / len(vb)
            better = "B" if far_b < far_a else "A" if far_a < far_b else None
        else:
            better = "B" if measure.better(mean_b, mean_a) else "A" if measure.better(mean_a, mean_b) else None
        rows.append(
            GraderComparison(
                grader, measure, mean_a, mean_b, test, len(paired),
                len(set(ma) - set(mb)), len(set(mb) - set(ma)), flipped, better,
            )
        )
    sha_a, sha_b = a.record.dataset.sha256, b.record.dataset.sha256
    return Comparison(
        dir_a, dir_b, a.record.env, b.record.env, sha_a is not None and sha_a == sha_b,
        rows, sorted(ids_a - ids_b), sorted(ids_b - ids_a),
    )

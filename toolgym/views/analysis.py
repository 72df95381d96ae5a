"""Statistics of run directories as plain data: per-grader summaries over repeated trials,
breakdowns by difficulty, judge/checker agreement, and paired comparisons of two runs.

Everything here reads stored files only (``run.json``, ``trajectories.jsonl``,
``scores.jsonl`` and the dataset named in ``run.json``) and returns frozen dataclasses;
printing lives in :mod:`toolgym.views.tables` so reports can reuse the numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.data import DatasetError, load_examples
from toolgym.environments import get_environment
from toolgym.graders import GRADERS
from toolgym.records import Example, Score, Trajectory
from toolgym.registry import UnknownNameError
from toolgym.runio import RunDirError, read_run, read_scores, read_trajectories
from toolgym.stats import (
    Estimate,
    PairedTest,
    clustered_estimate,
    is_binary,
    mcnemar,
    paired_bootstrap,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)

__all__ = [
    "AGREEMENT_PAIRS",
    "Agreement",
    "Comparison",
    "GraderComparison",
    "GraderStats",
    "GroupStats",
    "RunData",
    "RunReport",
    "agreement",
    "breakdown",
    "compare_runs",
    "grader_stats",
    "load_run",
    "run_report",
]

AGREEMENT_PAIRS: tuple[tuple[str, str], ...] = (
    ("multiverse_correctness", "answer_match"),
    ("correctness", "answer_match"),
    ("multiverse_correctness", "answer_match"),
    ("correctness", "answer_match"),
)
"""(judge, deterministic checker) pairs whose agreement is reported when both were run."""

NOT_PASS_FAIL: frozenset[str] = frozenset({"step_ratio"})
"""Graders whose 0/1 values are ratios, not passes (a grader class may instead declare a
``pass_fail`` class attribute)."""


def is_pass_fail(grader: str, values: list[float]) -> bool:
    """Whether a grader's scores are pass/fail: its class's ``pass_fail`` attribute when it
    declares one, else every value is 0 or 1 and the grader is not a ratio
    (:data:`NOT_PASS_FAIL`)."""
    try:
        declared = getattr(GRADERS.get(grader), "pass_fail", None)
    except UnknownNameError:
        declared = None
    if declared is not None:
        return bool(declared) and is_binary(values)
    return grader not in NOT_PASS_FAIL and bool(values) and is_binary(values)


@dataclass(frozen=True)
class RunData:
    """A run directory read back.

    Attributes:
        examples: Example id → example, from the dataset recorded in run.json; ``None`` when
            that dataset cannot be read any more (``problem`` says why).
    """

    directory: Path
    info: dict[str, Any]
    trajectories: list[Trajectory]
    scores: list[Score]
    examples: dict[str, Example] | None = None
    problem: str | None = None

    @property
    def env(self) -> str:
        return str(self.info.get("env", "?"))

    @property
    def graders(self) -> list[str]:
        """Graders recorded in run.json, then any other grader found in the scores."""
        names = list(self.info.get("graders") or [])
        return names + sorted({s.grader for s in self.scores} - set(names))


def load_run(directory: str | Path, dataset: str | Path | None = None) -> RunData:
    """Read a run directory (and its dataset, for the breakdowns).

    Args:
        directory: The run directory.
        dataset: Dataset path overriding the one in run.json.

    Raises:
        RunDirError: if run.json or a JSONL file is missing or invalid.
    """
    directory = Path(directory)
    info = read_run(directory)
    trajectories = read_trajectories(directory)
    scores = read_scores(directory)
    examples, problem = None, None
    path = dataset or (info.get("dataset") or {}).get("path")
    try:
        env_cls = get_environment(info["env"])
        examples = {ex.id: ex for ex in load_examples(path, env_cls, info.get("env_options"))}
    except (DatasetError, UnknownNameError, KeyError, TypeError, OSError) as exc:
        problem = f"dataset not readable, no breakdowns: {exc}"
    return RunData(directory, info, trajectories, scores, examples, problem)


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraderStats:
    """One grader's summary over a run, trials included.

    Attributes:
        estimate: Mean ± standard error clustered by example (plain with one trial each).
        n_examples: Examples with at least one scored trial.
        trials: Most scored trials of any example (K).
        binary: A pass/fail grader (:func:`is_pass_fail`): the mean is a pass rate.
        wilson: 95% Wilson interval of the pass rate at the effective sample size (the number
            of scores divided by the design effect, the squared ratio of the clustered to the
            binomial standard error; Kish, 1965, "Survey Sampling"); ``None`` for
            non-binary graders.
        pass_at_k / pass_hat_k: k → mean over examples with at least k scored trials of the
            unbiased pass@k (Chen et al., 2021) and of pass^k (Yao et al., 2024); binary graders
            only, k = 1..K.
        examples_at_k: k → number of examples that entered the k-th mean.
    """

    env: str
    grader: str
    estimate: Estimate
    n_examples: int
    trials: int
    binary: bool
    wilson: tuple[float, float] | None = None
    pass_at_k: dict[int, float] = field(default_factory=dict)
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    examples_at_k: dict[int, int] = field(default_factory=dict)


def _scored_by_example(scores: list[Score], grader: str) -> dict[str, list[float]]:
    found: dict[str, list[float]] = defaultdict(list)
    for s in scores:
        if s.grader == grader and s.value is not None and not math.isnan(s.value):
            found[s.example_id].append(float(s.value))
    return dict(found)


def grader_stats(env: str, grader: str, scores: list[Score], n_errors: int = 0) -> GraderStats:
    """Summarise one grader's scores (see :class:`GraderStats`).

    Args:
        env: Environment name, recorded in the result.
        grader: Which grader's scores to use (others in ``scores`` are ignored).
        scores: Scores of the run.
        n_errors: Error trajectories of the run (outside every denominator).
    """
    mine = [s for s in scores if s.grader == grader]
    est = clustered_estimate([s.value for s in mine], [s.example_id for s in mine], n_errors)
    per_example = _scored_by_example(mine, grader)
    values = [v for vs in per_example.values() for v in vs]
    trials = max((len(v) for v in per_example.values()), default=0)
    binary = is_pass_fail(grader, values)
    wilson = None
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    n_at_k: dict[int, int] = {}
    if binary:
        n_eff = float(est.n)
        binomial_var = est.mean * (1 - est.mean) / est.n
        if trials > 1 and est.stderr > 0 and binomial_var > 0:
            n_eff = min(float(est.n), est.n * binomial_var / est.stderr**2)
        wilson = wilson_interval(est.mean * n_eff, n_eff)
        for k in range(1, trials + 1):
            eligible = [(len(v), int(sum(v))) for v in per_example.values() if len(v) >= k]
            at_k[k] = sum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible)
            hat_k[k] = sum(pass_hat_k(n, c, k) for n, c in eligible) / len(eligible)
            n_at_k[k] = len(eligible)
    return GraderStats(env, grader, est, len(per_example), trials, binary, wilson, at_k, hat_k, n_at_k)


@dataclass(frozen=True)
class GroupStats:
    """A grader's estimate on the examples of one difficulty group.

    Attributes:
        group: The group value (number of expected steps, or the difficulty level).
        estimate: Mean ± standard error clustered by example.
        n_examples: Examples in the group with a scored trial.
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
        examples: Example id → example.
        scores: Scores of the run.
        grader: Which grader.
        by: ``"n_steps"`` (number of expected steps) or ``"difficulty"`` (the generators'
            ``metadata["difficulty"]``); examples without a difficulty are left out.

    Returns:
        Groups in ascending order (numbers before strings).

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
        judge / checker: Grader names.
        n: Trajectories scored by both (an unscored judge reply is left out).
        both_pass / both_fail / judge_only / checker_only: The 2×2 table.
        judge_unscored: Trajectories the checker scored but the judge left unscored.
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


def agreement(scores: list[Score], judge: str, checker: str) -> Agreement | None:
    """Agreement of two pass/fail graders over the (example, trial) pairs both scored, or
    ``None`` when either grader has no score."""
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
        jp, cp = j >= 0.5, c >= 0.5
        name = "both_pass" if jp and cp else "both_fail" if not (jp or cp) else "judge_only" if jp else "checker_only"
        table[name] += 1
    return Agreement(judge, checker, sum(table.values()), judge_unscored=unscored, **table)


@dataclass(frozen=True)
class RunReport:
    """Everything :mod:`toolgym.views.tables` prints for one run.

    Attributes:
        breakdowns: ``by`` → grader → groups, for graders with more than one group; the
            difficulty breakdown is left out when every difficulty equals the number of
            expected steps, and both when the dataset cannot be read.
        status: Trajectory status → count.
    """

    directory: Path
    env: str
    stats: list[GraderStats]
    breakdowns: dict[str, dict[str, list[GroupStats]]]
    agreements: list[Agreement]
    status: dict[str, int]
    problem: str | None = None


def run_report(run: RunData | str | Path) -> RunReport:
    """Per-grader statistics, difficulty breakdowns and judge/checker agreement of a run.

    Raises:
        RunDirError: if the run directory cannot be read.
    """
    data = run if isinstance(run, RunData) else load_run(run)
    n_errors = sum(t.status == "error" for t in data.trajectories)
    stats = [grader_stats(data.env, g, data.scores, n_errors) for g in data.graders]
    breakdowns: dict[str, dict[str, list[GroupStats]]] = {}
    if data.examples is not None:
        same = all(ex.metadata.get("difficulty") == expected_steps(ex) for ex in data.examples.values())
        for by in ("n_steps",) if same else ("n_steps", "difficulty"):
            per_grader = {g: breakdown(data.examples, data.scores, g, by) for g in data.graders}
            per_grader = {g: rows for g, rows in per_grader.items() if len(rows) > 1}
            if per_grader:
                breakdowns[by] = per_grader
    agreements = [a for j, c in AGREEMENT_PAIRS if (a := agreement(data.scores, j, c)) is not None]
    status: dict[str, int] = defaultdict(int)
    for t in data.trajectories:
        status[t.status] += 1
    return RunReport(data.directory, data.env, stats, breakdowns, agreements, dict(status), data.problem)


# --- two runs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraderComparison:
    """One grader compared between run A and run B on their common examples.

    Attributes:
        mean_a / mean_b: Means over the paired examples (each example's trials averaged).
        test: McNemar (one 0/1 score per example in both runs) or a paired bootstrap.
        n_paired: Examples scored in both runs.
        only_a / only_b: Examples scored in one run only (left out of the test).
        flipped: ``(example_id, a, b)`` for every paired example whose score differs, in
            example order.
    """

    grader: str
    mean_a: float
    mean_b: float
    test: PairedTest
    n_paired: int
    only_a: int
    only_b: int
    flipped: list[tuple[str, float, float]]


@dataclass(frozen=True)
class Comparison:
    """Two runs compared grader by grader (differences are B − A).

    Attributes:
        same_dataset: The dataset sha256 recorded in both run.json files is equal.
        examples_only_a / examples_only_b: Example ids with trajectories in one run only.
    """

    dir_a: Path
    dir_b: Path
    env_a: str
    env_b: str
    same_dataset: bool
    graders: list[GraderComparison]
    examples_only_a: list[str]
    examples_only_b: list[str]


def _example_means(scores: list[Score], grader: str) -> dict[str, tuple[float, int]]:
    return {eid: (sum(v) / len(v), len(v)) for eid, v in _scored_by_example(scores, grader).items()}


def compare_runs(dir_a: str | Path, dir_b: str | Path, n_boot: int = 10_000, seed: int = 0) -> Comparison:
    """Compare the scores of two runs on the examples they share.

    For each grader scored in both runs: each example's trials are averaged; with exactly
    one 0/1 score per example in both runs the paired test is McNemar's (exact binomial for
    fewer than 25 discordant pairs), otherwise a seeded paired bootstrap over examples.

    Args:
        dir_a / dir_b: Run directories.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed (results are reproducible).

    Raises:
        RunDirError: if a directory cannot be read or the runs share no example.
    """
    a, b = Path(dir_a), Path(dir_b)
    info_a, info_b = read_run(a), read_run(b)
    scores_a, scores_b = read_scores(a), read_scores(b)
    ids_a = {t.example_id for t in read_trajectories(a)}
    ids_b = {t.example_id for t in read_trajectories(b)}
    if not ids_a & ids_b:
        raise RunDirError(f"{a} and {b} share no example; compare runs of the same dataset")
    graders_a = list(dict.fromkeys([*(info_a.get("graders") or []), *(s.grader for s in scores_a)]))
    graders_b = {s.grader for s in scores_b} | set(info_b.get("graders") or [])
    rows = []
    for grader in (g for g in graders_a if g in graders_b):
        ma, mb = _example_means(scores_a, grader), _example_means(scores_b, grader)
        paired = sorted(set(ma) & set(mb))
        if not paired:
            continue
        va = [ma[e][0] for e in paired]
        vb = [mb[e][0] for e in paired]
        mean_a, mean_b = sum(va) / len(va), sum(vb) / len(vb)
        single = all(ma[e][1] == 1 and mb[e][1] == 1 for e in paired)
        if single and is_pass_fail(grader, va + vb):
            n_b = sum(x == 1.0 and y == 0.0 for x, y in zip(va, vb, strict=True))
            n_c = sum(x == 0.0 and y == 1.0 for x, y in zip(va, vb, strict=True))
            test = mcnemar(n_b, n_c, mean_b - mean_a)
        else:
            test = paired_bootstrap(va, vb, n_boot=n_boot, seed=seed)
        flipped = [(e, x, y) for e, x, y in zip(paired, va, vb, strict=True) if x != y]
        rows.append(
            GraderComparison(
                grader, mean_a, mean_b, test, len(paired),
                len(set(ma) - set(mb)), len(set(mb) - set(ma)), flipped,
            )
        )
    sha_a = (info_a.get("dataset") or {}).get("sha256")
    sha_b = (info_b.get("dataset") or {}).get("sha256")
    return Comparison(
        a, b, str(info_a.get("env")), str(info_b.get("env")), sha_a is not None and sha_a == sha_b,
        rows, sorted(ids_a - ids_b), sorted(ids_b - ids_a),
    )

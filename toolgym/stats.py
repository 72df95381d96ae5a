"""Summary statistics: mean with standard error.

Binary scores use the binomial standard error sqrt(p(1-p)/n), as in the LangChain
tool-usage benchmark's charts; continuous scores use the sample standard deviation / sqrt(n).
With repeated trials the standard error is clustered by example (:func:`clustered_estimate`);
pass rates get Wilson intervals, repeated trials pass@k and pass^k, and two runs are compared
with McNemar's test or a paired bootstrap.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from statistics import NormalDist

from toolgym.records import UNSCORED_STATUSES, Score, Trajectory


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error.

    Attributes:
        mean: Mean of the scored values (NaN when ``n`` is 0).
        stderr: Standard error of the mean (NaN when ``n`` is 0, 0 for a single value).
        n: Number of scored values (the denominator).
        n_errors: Trajectories left unscored by a failure (status ``error`` or ``aborted``) and
            so left out of ``n``.
        n_unscored: Scores of ``None`` (for example an unparseable judge reply), left out.
    """

    mean: float
    stderr: float
    n: int
    n_errors: int = 0
    n_unscored: int = 0

    def format(self, digits: int = 3) -> str:
        """``"0.750 ± 0.097"``; ``"0.667 (n=1)"`` when no standard error can be estimated (the
        trials of a single example: one cluster); ``"n/a"`` when nothing was scored."""
        if self.n == 0:
            return "n/a"
        if math.isnan(self.stderr):
            return f"{self.mean:.{digits}f} (n=1)"
        return f"{self.mean:.{digits}f} ± {self.stderr:.{digits}f}"


def is_binary(values: Iterable[float]) -> bool:
    """True when every value is 0 or 1."""
    return all(v in (0.0, 1.0) for v in values)


def estimate(values: Iterable[float | None], n_errors: int = 0) -> Estimate:
    """Mean and standard error of ``values``; ``None`` values count as unscored."""
    values = list(values)
    scored = [float(v) for v in values if v is not None and not math.isnan(v)]
    unscored = len(values) - len(scored)
    n = len(scored)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, n_errors, unscored)
    mean = sum(scored) / n
    if is_binary(scored):
        stderr = math.sqrt(mean * (1 - mean) / n)
    elif n > 1:
        stderr = math.sqrt(sum((v - mean) ** 2 for v in scored) / (n - 1)) / math.sqrt(n)
    else:
        stderr = 0.0
    return Estimate(mean, stderr, n, n_errors, unscored)


# --- repeated trials, intervals and paired tests ------------------------------------------------


def clustered_estimate(
    values: Iterable[float | None], clusters: Iterable[Hashable], n_errors: int = 0
) -> Estimate:
    """Mean with a standard error clustered by ``clusters`` (one cluster per example, each
    holding that example's K trials).

    The clustered (sandwich, CR1) standard error of a mean, as recommended for evals with
    repeated or grouped questions by Miller (2024), "Adding Error Bars to Evals: A Statistical
    Approach to Language Model Evaluations", arXiv:2411.00640::

        SE = sqrt( C/(C-1) * sum_c ( sum_{i in c} (x_i - mean) )^2 ) / n

    with ``C`` clusters and ``n`` scored values. When every cluster holds a single value the
    result is :func:`estimate` (binomial standard error for 0/1 values), so one-trial runs
    keep their usual numbers. A single cluster with several values has no estimable standard
    error (NaN).

    Args:
        values: Scores; ``None``/NaN are unscored and left out.
        clusters: The cluster (example id) of each value, in the same order.
        n_errors: Error trajectories, recorded in the result.

    Raises:
        ValueError: if ``values`` and ``clusters`` differ in length.
    """
    values, clusters = list(values), list(clusters)
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    groups: dict[Hashable, list[float]] = {}
    unscored = 0
    for value, cluster in zip(values, clusters, strict=True):
        if value is None or math.isnan(value):
            unscored += 1
        else:
            groups.setdefault(cluster, []).append(float(value))
    if all(len(g) == 1 for g in groups.values()):
        base = estimate([g[0] for g in groups.values()], n_errors)
        return Estimate(base.mean, base.stderr, base.n, n_errors, unscored)
    n = sum(len(g) for g in groups.values())
    mean = sum(sum(g) for g in groups.values()) / n
    n_clusters = len(groups)
    if n_clusters < 2:
        return Estimate(mean, math.nan, n, n_errors, unscored)
    meat = sum(sum(v - mean for v in g) ** 2 for g in groups.values())
    stderr = math.sqrt(n_clusters / (n_clusters - 1) * meat) / n
    return Estimate(mean, stderr, n, n_errors, unscored)


def wilson_interval(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson, 1927, "Probable inference, the
    law of succession, and statistical inference", JASA 22(158)).

    Args:
        successes: Number of successes (may be fractional when ``n`` is an effective size).
        n: Number of trials (> 0).
        confidence: Coverage, default 0.95 (z = 1.95996).

    Returns:
        ``(low, high)``; for 7/10 at 95%: (0.3968, 0.8922).

    Raises:
        ValueError: if ``n`` <= 0 or ``successes`` is outside [0, n].
    """
    if n <= 0:
        raise ValueError("Wilson interval needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside [0, {n}]")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k for one example: the chance that at least one of k trials
    drawn without replacement from n (c of them successful) succeeds,
    ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021, "Evaluating Large Language Models Trained
    on Code", arXiv:2107.03374, eq. 1).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    _check_counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Estimate of pass^k for one example: the chance that all k trials succeed,
    ``C(c, k) / C(n, k)`` (Yao et al., 2024, "τ-bench: A Benchmark for Tool-Agent-User
    Interaction in Real-World Domains", arXiv:2406.12045, section 5).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"successes c={c} outside [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} outside [1, n={n}]")


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of two runs on the same examples (difference is B − A).

    Attributes:
        method: ``"mcnemar_exact"``, ``"mcnemar_chi2"`` or ``"paired_bootstrap"``.
        diff: Mean of B minus mean of A over the paired examples.
        p_value: Two-sided p-value of "no difference".
        low / high: 95% interval of ``diff`` (bootstrap only; NaN for McNemar).
        b / c: Discordant pairs for McNemar: A pass & B fail (b), A fail & B pass (c).
    """

    method: str
    diff: float
    p_value: float
    low: float = math.nan
    high: float = math.nan
    b: int = 0
    c: int = 0


def mcnemar(b: int, c: int, diff: float = math.nan, exact_below: int = 25) -> PairedTest:
    """McNemar's test on discordant pair counts (McNemar, 1947, Psychometrika 12(2)).

    Exact two-sided binomial test ``min(1, 2 P(X <= min(b, c)))`` with X ~ Bin(b + c, 1/2)
    when ``b + c < exact_below``; otherwise the chi-square statistic with continuity
    correction ``(|b - c| - 1)^2 / (b + c)`` (Edwards, 1948) on one degree of freedom.

    Args:
        b: Pairs where A passed and B failed.
        c: Pairs where A failed and B passed.
        diff: The difference of means to record.
        exact_below: Discordant count under which the exact test is used.
    """
    m = b + c
    if m == 0:
        return PairedTest("mcnemar_exact", diff, 1.0, b=b, c=c)
    if m < exact_below:
        tail = sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2**m
        return PairedTest("mcnemar_exact", diff, min(1.0, 2 * tail), b=b, c=c)
    stat = (abs(b - c) - 1) ** 2 / m
    return PairedTest("mcnemar_chi2", diff, math.erfc(math.sqrt(stat / 2)), b=b, c=c)


def paired_bootstrap(
    a: list[float], b: list[float], n_boot: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> PairedTest:
    """Paired bootstrap of the mean difference B − A over examples (Efron & Tibshirani, 1993,
    "An Introduction to the Bootstrap", ch. 16): resample examples with replacement
    ``n_boot`` times with a seeded generator.

    The interval is the percentile interval; the two-sided p-value is
    ``min(1, 2 min(P*(d <= 0), P*(d >= 0)))`` over the resampled differences.

    Raises:
        ValueError: if the lists differ in length or are empty.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired bootstrap needs equal, non-empty lists (got {len(a)} and {len(b)})")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    observed = sum(diffs) / n
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    low = means[math.floor(alpha * (n_boot - 1))]
    high = means[math.ceil((1 - alpha) * (n_boot - 1))]
    below = sum(d <= 0 for d in means) / n_boot
    above = sum(d >= 0 for d in means) / n_boot
    return PairedTest("paired_bootstrap", observed, min(1.0, 2 * min(below, above)), low, high)


@dataclass(frozen=True)
class SummaryRow:
    """One line of a summary table: a grader's estimate on one environment."""

    env: str
    grader: str
    estimate: Estimate


def summarize(env: str, trajectories: list[Trajectory], scores: list[Score], graders: list[str]) -> list[SummaryRow]:
    """Mean ± standard error per grader; trajectories left unscored (``error`` and ``aborted``,
    :data:`toolgym.records.UNSCORED_STATUSES`) counted apart (``n_errors``).

    With several trials per example the standard error is clustered by example
    (:func:`toolgym.stats.clustered_estimate`); with one trial it is the plain estimate.
    """
    n_errors = sum(t.status in UNSCORED_STATUSES for t in trajectories)
    by_grader: dict[str, list[Score]] = defaultdict(list)
    for s in scores:
        by_grader[s.grader].append(s)
    rows = []
    for g in graders:
        found = by_grader.get(g, [])
        rows.append(
            SummaryRow(env, g, clustered_estimate([s.value for s in found], [s.example_id for s in found], n_errors))
        )
    return rows

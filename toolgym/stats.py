"""Summary statistics: mean with standard error.

Binary scores use the binomial standard error sqrt(p(1-p)/n), as in the LangChain
tool-usage benchmark's charts; continuous scores use the sample standard deviation / sqrt(n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error.

    Attributes:
        mean: Mean of the scored values (NaN when ``n`` is 0).
        stderr: Standard error of the mean (NaN when ``n`` is 0, 0 for a single value).
        n: Number of scored values (the denominator).
        n_errors: Trajectories that ended in ``error`` and were left out of ``n``.
        n_unscored: Scores of ``None`` (for example an unparseable judge reply), left out.
    """

    mean: float
    stderr: float
    n: int
    n_errors: int = 0
    n_unscored: int = 0

    def format(self, digits: int = 3) -> str:
        """``"0.750 ± 0.097"``."""
        if self.n == 0:
            return "n/a"
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

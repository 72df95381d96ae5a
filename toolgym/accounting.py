"""Per-run accounting from stored trajectories: model calls, tokens, latency percentiles, cost,
and episodes that ended in ``error`` by error type.

Everything is recomputed from ``trajectories.jsonl``, so a resumed run accounts for the
episodes of every process that wrote to it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from toolgym.records import Trajectory

__all__ = ["Accounting", "account", "error_type", "percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation between order statistics
    (R. J. Hyndman and Y. Fan, "Sample Quantiles in Statistical Packages", The American
    Statistician 50(4), 1996, definition 7; numpy's default). ``None`` for no values.

    Raises:
        ValueError: if ``q`` is outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    h = (len(ordered) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def error_type(error: str | None) -> str:
    """``"InternalServerError: ..."`` → ``"InternalServerError"`` (the text before the first
    colon; ``"unknown"`` when empty)."""
    if not error:
        return "unknown"
    head = error.split(":", 1)[0].strip()
    return head.split()[0] if head else "unknown"


@dataclass(frozen=True)
class Accounting:
    """Totals of one run.

    Attributes:
        episodes: Trajectories in the run.
        errors: Episodes with status ``error`` (outside every score's denominator).
        error_types: Those episodes counted by error type.
        model_calls: Model turns recorded (successful calls; failed calls leave no step).
        calls_with_usage: Model turns for which the provider reported token counts.
        input_tokens / output_tokens: Sums over the calls that reported them.
        latency_total_s: Sum of model-call latencies (retries and rate-limit waits included).
        latency_p50_s / latency_p95_s: Percentiles of model-call latency, seconds.
        price_in / price_out: USD per million input / output tokens, if given.
        cost_usd: ``input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6`` when a
            price was given (a missing one counts as 0), else ``None``.
    """

    episodes: int
    errors: int
    error_types: dict[str, int] = field(default_factory=dict)
    model_calls: int = 0
    calls_with_usage: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_total_s: float = 0.0
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    cost_usd: float | None = None

    def record(self) -> dict[str, Any]:
        """JSON-safe dict for ``run.json``."""
        return asdict(self)

    def lines(self) -> list[str]:
        """Human-readable summary lines."""
        out = [f"episodes {self.episodes}, errors {self.errors} (not in any denominator)"]
        if self.error_types:
            out[-1] += ": " + ", ".join(f"{k} {v}" for k, v in sorted(self.error_types.items()))
        if self.model_calls:
            out.append(
                f"model calls {self.model_calls}, latency p50 {self.latency_p50_s:.3f} s, "
                f"p95 {self.latency_p95_s:.3f} s, total {self.latency_total_s:.1f} s"
            )
            tokens = f"tokens in {self.input_tokens}, out {self.output_tokens}"
            if self.calls_with_usage < self.model_calls:
                tokens += f" (reported by {self.calls_with_usage} of {self.model_calls} calls)"
            out.append(tokens)
        if self.cost_usd is not None:
            out.append(
                f"cost ${self.cost_usd:.4f} (at ${self.price_in or 0:g} / ${self.price_out or 0:g} "
                "per million input / output tokens)"
            )
        return out


def played_model_steps(trajectory: Trajectory) -> list[Any]:
    """The model turns a trajectory's model really played: all of them, but for an episode
    played from a replayed prefix (teacher forcing: ``prefix_steps`` tool steps; a fork: the
    tool steps before ``parent["step"]``), whose replayed turns called no model."""
    boundary = trajectory.prefix_steps or 0
    if trajectory.parent and isinstance(trajectory.parent.get("step"), int):
        boundary = max(boundary, trajectory.parent["step"] - 1)
    if boundary <= 0:
        return trajectory.model_steps
    played, tools = [], 0
    for step in trajectory.steps:
        if step.kind == "tool":
            tools += 1
        elif step.kind == "model" and tools >= boundary:
            played.append(step)
    return played


def account(
    trajectories: Iterable[Trajectory], price_in: float | None = None, price_out: float | None = None,
    with_model: bool = True,
) -> Accounting:
    """Sum the model calls of ``trajectories``.

    Args:
        price_in: USD per million input tokens.
        price_out: USD per million output tokens.
        with_model: Whether the run's agent drives a model; ``False`` (the ``oracle``, whose
            turns replay the reference) counts no model call whatever steps are recorded.

    Raises:
        ValueError: for a negative price.
    """
    for name, price in (("price_in", price_in), ("price_out", price_out)):
        if price is not None and price < 0:
            raise ValueError(f"{name} must be >= 0, got {price}")
    trajectories = list(trajectories)
    latencies: list[float] = []
    tokens_in = tokens_out = with_usage = 0
    for traj in trajectories if with_model else ():  # an agent without a model (oracle) called none
        for step in played_model_steps(traj):  # replayed turns called no model
            latencies.append(step.latency_s)
            if step.input_tokens is not None or step.output_tokens is not None:
                with_usage += 1
            tokens_in += step.input_tokens or 0
            tokens_out += step.output_tokens or 0
    errors = Counter(error_type(t.error) for t in trajectories if t.status == "error")
    cost = None
    if price_in is not None or price_out is not None:
        cost = tokens_in * (price_in or 0.0) / 1e6 + tokens_out * (price_out or 0.0) / 1e6
    return Accounting(
        episodes=len(trajectories),
        errors=sum(errors.values()),
        error_types=dict(errors),
        model_calls=len(latencies),
        calls_with_usage=with_usage,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        latency_total_s=sum(latencies),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        price_in=price_in,
        price_out=price_out,
        cost_usd=cost,
    )

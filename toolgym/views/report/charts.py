"""Static charts of the report, drawn with matplotlib (no pyplot: no global state, no display).

* :func:`grader_chart`: a grader's mean with standard-error bars, grouped by environment, one bar
  per run (the layout of the LangChain tool-usage benchmark's published charts);
* :func:`success_chart`: success rate against the number of expected steps, one line per run,
  with binomial standard-error bars.

Figures are returned to the caller, which embeds them as SVG (:func:`svg_data_uri`) or writes PNG
files (:func:`save_png`). Text is never parsed as mathtext, so ``$`` in a label stays a ``$``.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure

from toolgym.views.summary import SummaryCell

_RC = {
    "text.parse_math": False,
    "svg.fonttype": "none",  # text stays text: small files, the browser's fonts (CJK included)
    "svg.hashsalt": "toolgym",  # deterministic ids
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


def run_colours(labels: Sequence[str]) -> dict[str, str]:
    """A fixed colour per run label, in the order given (cycling after ten runs)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(dict.fromkeys(labels))}


def grader_chart(grader: str, cells: Sequence[SummaryCell], colours: dict[str, str]) -> Figure:
    """Bar chart of one grader: groups are environments, bars are runs, error bars are ±1
    standard error (:class:`toolgym.stats.Estimate`). Bars with no scored trajectory are left
    out; the y axis spans [0, 1] when every mean lies in it and says which way is better (the
    grader's measure).

    Raises:
        ValueError: if ``cells`` is empty or holds another grader.
    """
    if not cells:
        raise ValueError(f"no results for grader {grader!r}")
    if any(c.grader != grader for c in cells):
        raise ValueError(f"grader_chart({grader!r}) got cells of other graders")
    envs = list(dict.fromkeys(c.env for c in cells))
    runs = list(dict.fromkeys(c.run for c in cells))
    by_key = {(c.env, c.run): c for c in cells}
    width = 0.8 / max(1, len(runs))
    with rc_context(_RC):
        fig = Figure(
            figsize=(max(4.5, 1.6 + len(envs) * (0.6 + 0.45 * len(runs))), 3.4), layout="constrained"
        )
        ax = fig.add_subplot()
        means = []
        for j, run in enumerate(runs):
            xs, ys, errs = [], [], []
            for i, env in enumerate(envs):
                cell = by_key.get((env, run))
                if cell is None or cell.estimate.n == 0:
                    continue
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(cell.estimate.mean)
                errs.append(0.0 if math.isnan(cell.estimate.stderr) else cell.estimate.stderr)
            means.extend(ys)
            ax.bar(
                xs,
                ys,
                width * 0.9,
                yerr=errs,
                capsize=3,
                color=colours.get(run, PALETTE[0]),
                label=run,
                error_kw={"elinewidth": 1, "ecolor": "#333"},
            )
            if len(runs) * len(envs) <= 16:
                for x, y, e in zip(xs, ys, errs, strict=True):
                    ax.text(x, y + e, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(envs)), envs)
        ax.set_xlim(-0.6, len(envs) - 0.4)
        measure = cells[0].measure
        better = f"closest to {measure.target:g}" if measure.direction == "target" else measure.direction
        ax.set_ylabel(f"{grader} (mean ± s.e.; {better} is better)")
        if measure.direction == "target":
            ax.axhline(measure.target, color="#888", linewidth=0.8, linestyle="--")
        ax.set_title(grader)
        if means and all(0.0 <= m <= 1.0 for m in means):
            ax.set_ylim(0, 1.12)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


@dataclass(frozen=True)
class SuccessSeries:
    """Success counts of one run by number of expected steps.

    Attributes:
        label: Run label.
        grader: The pass/fail grader that defines success.
        counts: ``{expected steps: (successes, scored trajectories)}``.
    """

    label: str
    grader: str
    counts: dict[int, tuple[int, int]]


def success_chart(env: str, series: Sequence[SuccessSeries], colours: dict[str, str]) -> Figure:
    """Success rate against the number of expected steps, one line per run, with binomial
    standard-error bars sqrt(p(1-p)/n) per point.

    Raises:
        ValueError: if no series has any point.
    """
    if not any(s.counts for s in series):
        raise ValueError(f"no success counts for environment {env!r}")
    with rc_context(_RC):
        fig = Figure(figsize=(6.4, 3.4), layout="constrained")
        ax = fig.add_subplot()
        for s in series:
            xs = sorted(s.counts)
            ps = [s.counts[x][0] / s.counts[x][1] for x in xs]
            es = [math.sqrt(p * (1 - p) / s.counts[x][1]) for p, x in zip(ps, xs, strict=True)]
            ax.errorbar(
                xs,
                ps,
                yerr=es,
                marker="o",
                markersize=3.5,
                capsize=2.5,
                linewidth=1.2,
                color=colours.get(s.label, PALETTE[0]),
                label=f"{s.label} ({s.grader})",
            )
        ax.set_ylim(-0.05, 1.08)
        ax.set_xlabel("number of expected steps")
        ax.set_ylabel("success rate (± s.e.)")
        ax.set_title(f"{env}: success by number of expected steps")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def svg_text(fig: Figure) -> str:
    """The figure as a standalone SVG document (no date metadata)."""
    buf = io.StringIO()
    with rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def svg_data_uri(fig: Figure) -> str:
    """The figure as a ``data:image/svg+xml;base64,...`` URI for an ``<img>``: self-contained,
    and an SVG shown as an image can run no script and fetch nothing."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg_text(fig).encode("utf-8")).decode("ascii")


def save_png(fig: Figure, path: Path, dpi: int = 200) -> Path:
    """Write the figure as a PNG file (``dpi`` dots per inch) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with rc_context(_RC):
        fig.savefig(path, format="png", dpi=dpi)
    return path


def step_accuracy_chart(env: str, series: Sequence[tuple[str, Sequence[tuple[int, float, float, int]]]],
                        colours: dict[str, str]) -> Figure:
    """Teacher-forced step accuracy against the step ``k``, one line per run, with ±1
    standard-error bars clustered by example (:func:`toolgym.views.stepwise.step_accuracy`).

    Args:
        env: Environment name (the title).
        series: ``(run label, [(k, accuracy, standard error, episodes), ...])`` per run.
        colours: Run label → colour (:func:`run_colours`).

    Raises:
        ValueError: if no series has a point.
    """
    if not any(points for _, points in series):
        raise ValueError(f"no teacher-forced step accuracy to draw for {env}")
    with rc_context(_RC):
        fig = Figure(figsize=(5.6, 3.4), layout="constrained")
        ax = fig.add_subplot()
        for label, points in series:
            if not points:
                continue
            ks = [p[0] for p in points]
            ys = [p[1] for p in points]
            errs = [0.0 if math.isnan(p[2]) else p[2] for p in points]
            ax.errorbar(ks, ys, yerr=errs, marker="o", markersize=3, capsize=3, linewidth=1.2,
                        color=colours.get(label, PALETTE[0]), label=label)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step k (k - 1 reference steps replayed)")
        ax.set_ylabel("next_step accuracy ± s.e. (clustered by example)")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{env}: teacher-forced step accuracy")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig

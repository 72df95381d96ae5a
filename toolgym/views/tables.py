"""Terminal tables for :mod:`toolgym.views.analysis` results (printing only; no statistics here)."""

from __future__ import annotations

import math

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from toolgym.views.analysis import PER_STEP_GRADERS, Comparison, RunReport
from toolgym.views.fit import Col, print_fitted
from toolgym.views.rundata import compares_notes, rule_text

TEST_NAMES = {"mcnemar_exact": "exact", "mcnemar_chi2": "χ²", "paired_bootstrap": "boot"}


def _num(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _ks(trials: int) -> list[int]:
    """k values shown for pass^k: all up to 5, else powers of two and K."""
    if trials <= 5:
        return list(range(1, trials + 1))
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k < trials]
    return [*ks, trials]


def print_run_report(report: RunReport, console: Console | None = None) -> None:
    """Print per grader the mean and, under its measure's pass rule, the pass rate (Wilson
    interval, pass@k, pass^k); the breakdowns by number of expected steps and by difficulty;
    and judge/checker agreement.

    Args:
        report (RunReport): What to print.
        console (Console | None): Where to print (default: standard output).
    """
    console = console or Console()
    trials = max((s.trials for s in report.stats), default=0)
    ks = _ks(trials) if trials > 1 else []
    cols = [Col("grader", "left"), Col("measure", "left", wrap=True), Col("mean ± SE"), Col("pass [95% Wilson]"),
            Col("examples"), Col("trials")]
    rows = []
    for s in report.stats:
        rate = "-"
        if s.pass_rate is not None and s.wilson is not None:
            rate = f"{s.pass_rate:.3f} [{s.wilson[0]:.3f}, {s.wilson[1]:.3f}]"
        # a per-step grader scores each reference step of an example: its count is of steps, not trials
        per_example = f"{s.trials} steps" if s.grader in PER_STEP_GRADERS else str(s.trials)
        rows.append([s.grader, rule_text(s.measure), s.estimate.format(), rate, str(s.n_examples), per_example])
    print_fitted(console, cols, rows, keys=1, title=Text(f"{report.env}: per grader (SE clustered by example)"),
                 box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    binary = [s for s in report.stats if s.pass_rate is not None and s.trials > 1 and s.pass_at_k]
    if ks and binary:
        cols = [Col("grader", "left"), Col(f"pass@{trials}"), *(Col(f"pass^{k}") for k in ks)]
        rows = [
            [s.grader, _num(s.pass_at_k.get(trials, math.nan)), *(_num(s.pass_hat_k.get(k, math.nan)) for k in ks)]
            for s in binary
        ]
        print_fitted(console, cols, rows, keys=1, box=box.SIMPLE_HEAD,
                     title=Text(f"{report.env}: repeated trials (pass@k: any of k succeeds; pass^k: all k)"))
    titles = {"n_steps": "by number of expected steps", "difficulty": "by difficulty level"}
    for by, per_grader in report.breakdowns.items():
        groups = sorted(
            {r.group for rows in per_grader.values() for r in rows},
            key=lambda k: (not isinstance(k, (int, float)), k if isinstance(k, (int, float)) else str(k)),
        )
        cols = [Col(by, "left"), *(Col(grader) for grader in per_grader)]
        rows = []
        for group in groups:
            cells = []
            for grader_rows in per_grader.values():
                found = next((r for r in grader_rows if r.group == group), None)
                if found is None:
                    cells.append("-")
                elif math.isnan(found.estimate.stderr):  # one example: "0.667 (n=1)" says it all
                    cells.append(found.estimate.format())
                else:
                    cells.append(f"{found.estimate.format()} ({found.n_examples})")
            rows.append([str(group), *cells])
        print_fitted(console, cols, rows, keys=1, box=box.SIMPLE_HEAD,
                     title=Text(f"{report.env}: {titles[by]} (mean ± SE, examples)"))
    for a in report.agreements:
        console.print(
            f"judge {a.judge} vs checker {a.checker}: agree on {a.both_pass + a.both_fail}/{a.n}"
            f" ({_num(100 * a.rate, 1)}%); judge-only pass {a.judge_only}, checker-only pass"
            f" {a.checker_only}, judge unscored {a.judge_unscored}",
            highlight=False,
        )
    if report.problem:
        console.print(f"[yellow]note:[/] {escape(report.problem)}")


def print_comparison(comp: Comparison, console: Console | None = None, max_flips: int = 20) -> None:
    """Print a comparison of two runs: per grader the means, B − A, which run is better in the
    grader's direction, the paired test and the examples that flipped between pass and fail
    (at most ``max_flips`` per grader).

    Args:
        comp (Comparison): What to print.
        console (Console | None): Where to print (default: standard output).
        max_flips (int): Flipped examples listed per grader.
    """
    console = console or Console()
    if comp.env_a != comp.env_b:
        console.print(f"[yellow]warning:[/] environments differ ({comp.env_a} vs {comp.env_b})")
    if not comp.same_dataset:
        console.print("[yellow]warning:[/] the runs' datasets differ (sha256 in run.json); only shared example ids are compared")
    for label, ids in (("A", comp.examples_only_a), ("B", comp.examples_only_b)):
        if ids:
            console.print(f"[yellow]note:[/] {len(ids)} example(s) only in run {label}: {escape(', '.join(ids[:10]))}{' ...' if len(ids) > 10 else ''}")
    caption = Text(
        "test, p: the paired test and its p-value; exact = McNemar exact binomial, χ² = McNemar with continuity "
        "correction (a binary grader with one score per example in both runs); boot = paired bootstrap over examples. "
        "CI: bootstrap 95% interval of B − A, or the discordant pairs b (A only) and c (B only). "
        "better: the run whose mean is better in the grader's direction (higher, lower, or the one "
        "closer to the best value of a two-sided measure); flips (below the table): examples that changed "
        "between pass and fail under the grader's pass rule."
    )
    same_n = len({g.n_paired for g in comp.graders}) == 1  # then n is said once, in the title
    cols = [Col("grader", "left"), Col("A"), Col("B"), Col("B − A"), Col("better", "left"), Col("95% CI"),
            Col("test, p", "left"), *(() if same_n else (Col("n"),))]
    rows = []
    for g in comp.graders:
        t = g.test
        ci = f"[{t.low:+.2f},{t.high:+.2f}]" if not math.isnan(t.low) else f"b={t.b} c={t.c}"
        p = "<1e-3" if t.p_value < 1e-3 else f"{t.p_value:.3f}"
        rows.append([
            g.grader, _num(g.mean_a), _num(g.mean_b), f"{g.mean_b - g.mean_a:+.3f}",
            f"{g.better or '='} ({g.measure.direction_text})", ci,
            f"{TEST_NAMES.get(t.method, t.method)} {p}", *(() if same_n else (str(g.n_paired),)),
        ])
    paired = f", {comp.graders[0].n_paired} paired examples" if same_n and comp.graders else ""
    print_fitted(
        console, cols, rows, keys=1, title=Text(f"A = {comp.dir_a}   B = {comp.dir_b}{paired}"),
        box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False,
    )
    console.print(caption)  # below every part, at the console's width
    for note in compares_notes({g.grader: g.measure for g in comp.graders}):
        console.print(Text(f"note: {note}"))
    for g in comp.graders:
        if not g.flipped:
            continue
        shown = ", ".join(f"{escape(e)} ({a:g}→{b:g})" for e, a, b in g.flipped[:max_flips])
        more = f" ... and {len(g.flipped) - max_flips} more" if len(g.flipped) > max_flips else ""
        console.print(f"{g.grader}: {len(g.flipped)} flipped (A→B): {shown}{more}", highlight=False)

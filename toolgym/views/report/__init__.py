"""The HTML report: one self-contained file over one or more run directories.

It holds the summary table, a bar chart per grader (mean ± standard error per run and
environment), success rate against the number of expected steps per run, the result files of
JMultiWOZ-TC runs, each run's suite tables (its benchmark's ``report``), and every trajectory, filterable to failures and expandable to its trace
with the expected calls beside the actual ones.

Self-contained: styles and the viewer script are inline, charts are SVG images in ``data:``
URIs, and a Content-Security-Policy forbids every fetch and every script but the viewer's own
(allowed by its SHA-256 hash). Model and tool text travels as escaped JSON in
``<script type="application/json">`` elements (:func:`toolgym.views.report.payload.script_json`) and
is put on the page with ``textContent`` only.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from importlib import resources
from pathlib import Path

from toolgym.runio import refuse_run_file, write_text_atomic
from toolgym.views.report.payload import build_payload, script_json
from toolgym.views.report.tables import (
    RESULT_FILE_PATTERNS,
    find_result_files,
    html_table,
    render_result_file,
)
from toolgym.views.rundata import RunView, compares_notes, load_runs, suite_tables
from toolgym.views.summary import COLUMNS, SummaryCell, summary_cells, summary_headers, summary_records

__all__ = ["ReportResult", "build_report", "render_report"]


@dataclass(frozen=True)
class ReportResult:
    """What :func:`build_report` wrote.

    Attributes:
        path: The HTML file.
        size_bytes: Its size.
        n_runs / n_trajectories: What it covers.
        charts: Titles of the charts in it.
        png_files: PNG files written (with ``png_dir``).
        seconds: Wall-clock time to build it.
    """

    path: Path
    size_bytes: int
    n_runs: int
    n_trajectories: int
    charts: list[str] = field(default_factory=list)
    png_files: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        """One line for the terminal."""
        text = (
            f"wrote {self.path} ({self.size_bytes / 1e6:.2f} MB; {self.n_runs} runs, "
            f"{self.n_trajectories} trajectories, {len(self.charts)} charts) in {self.seconds:.1f} s"
        )
        if self.png_files:
            text += f"; {len(self.png_files)} PNG files in {self.png_files[0].parent}"
        return text


def _asset(name: str) -> str:
    return resources.files("toolgym.views.report").joinpath(name).read_text(encoding="utf-8")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text).strip("_") or "chart"


def success_series(runs: Sequence[RunView], success_grader: str | None = None):
    """Success counts by number of expected steps for each run, grouped by environment.

    The success grader of a run is ``success_grader`` when given (runs without it are left
    out), else the run's first grader with a pass rule; success is a value that passes that
    grader's measure. Trajectories without a score from it (errors, which are not graded, as
    in the summary table) or with an unknown number of expected steps are left out.

    Args:
        runs (Sequence[RunView]): Loaded runs.
        success_grader (str | None): The grader that defines success.

    Returns:
        dict[str, list[SuccessSeries]]: ``{env: [SuccessSeries, ...]}``.
    """
    from toolgym.views.report.charts import SuccessSeries

    by_env: dict[str, list[SuccessSeries]] = defaultdict(list)
    for run in runs:
        pass_fail = run.pass_fail_graders()
        grader = success_grader or (pass_fail[0] if pass_fail else None)
        if grader is None or grader not in pass_fail:
            continue
        measure = run.measures[grader]
        counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for traj in run.trajectories:
            passed = next((measure.passed(s.value) for s in run.scores_of(traj) if s.grader == grader), None)
            n_steps = run.n_expected_steps(traj)
            if passed is None or n_steps is None:
                continue
            counts[n_steps][0] += passed
            counts[n_steps][1] += 1
        if counts:
            by_env[run.env].append(
                SuccessSeries(run.label, grader, {k: (v[0], v[1]) for k, v in counts.items()})
            )
    return dict(by_env)


def _charts(runs: Sequence[RunView], cells: Sequence[SummaryCell], success_grader: str | None):
    """``[(section, title, figure)]`` for every chart of the report."""
    from toolgym.views.report.charts import grader_chart, run_colours, step_accuracy_chart, success_chart
    from toolgym.views.stepwise import step_accuracy

    colours = run_colours([r.label for r in runs])
    charts = []
    for grader in dict.fromkeys(c.grader for c in cells):
        chosen = [c for c in cells if c.grader == grader and c.estimate.n > 0]
        if chosen:
            charts.append(
                ("graders", f"{grader}: mean ± standard error", grader_chart(grader, chosen, colours))
            )
    for env, series in success_series(runs, success_grader).items():
        charts.append(
            ("steps", f"{env}: success by number of expected steps", success_chart(env, series, colours))
        )
    forced: dict[str, list] = defaultdict(list)
    for run in runs:
        points = [(a.k, a.estimate.mean, a.estimate.stderr, a.estimate.n) for a in step_accuracy(run.run) if a.estimate.n]
        if points:
            forced[run.env].append((run.label, points))
    for env, series in forced.items():
        charts.append(("steps", f"{env} teacher-forced: step accuracy by k", step_accuracy_chart(env, series, colours)))
    return charts


def render_report(
    runs: Sequence[RunView],
    png_dir: Path | None = None,
    success_grader: str | None = None,
    max_chars: int = 20_000,
    title: str = "toolgym report",
) -> tuple[str, list[str], list[Path]]:
    """The report's HTML text, its chart titles and the PNG files written to ``png_dir``."""
    from toolgym.views.report.charts import save_png, svg_data_uri

    cells = summary_cells(runs)
    headers = summary_headers()
    summary_html = html_table(headers, summary_records(cells), numeric_from=3, css_class="summary")
    summary_html += "".join(f'<p class="note">{escape(n)}.</p>'
                            for n in compares_notes({c.grader: c.measure for c in cells}))

    chart_html: dict[str, list[str]] = defaultdict(list)
    titles, pngs = [], []
    for section, chart_title, fig in _charts(runs, cells, success_grader):
        uri = svg_data_uri(fig)
        chart_html[section].append(
            f'<figure class="chart"><img src="{uri}" alt="{escape(chart_title)}">'
            f"<figcaption>{escape(chart_title)}</figcaption></figure>"
        )
        titles.append(chart_title)
        if png_dir is not None:
            pngs.append(
                save_png(fig, Path(png_dir) / f"{_slug(section + '_' + chart_title.split(':')[0])}.png")
            )

    results = []
    for run in runs:
        for result in find_result_files(run.directory):
            results.append(render_result_file(result, f"{run.label} · {run.env} · {result.path.name}"))
    suite_html = []
    for run in runs:
        for table in suite_tables(run):
            columns = list(table.rows[0]) if table.rows else []
            notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes)
            suite_html.append(
                f"<h3>{escape(run.label)} · {escape(table.title)}</h3>"
                f"{html_table(columns, [['—' if r.get(c) is None else r.get(c) for c in columns] for r in table.rows], numeric_from=1)}{notes}"
            )

    index, traces = build_payload(runs, max_chars=max_chars)
    script = _asset("viewer.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    n_traj = sum(len(r.trajectories) for r in runs)
    run_list = "".join(
        f"<li><b>{escape(r.label)}</b> on <b>{escape(r.env)}</b>: {len(r.trajectories)} trajectories, "
        f"<code>{escape(str(r.directory))}</code></li>"
        for r in runs
    )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    no_charts = '<p class="note">No scored trajectories to chart.</p>'
    steps_note = (
        "Success is a value that passes the pass rule of each run's first grader with one (named in "
        "the legend); trajectories that ended in an error are not graded and are left out, as in the "
        "table."
    )
    sections = [
        (
            f'<section id="summary"><h2>Summary</h2><ul class="runs">{run_list}</ul>{summary_html}'
            '<p class="note">Mean ± standard error (binomial for pass/fail graders) over scored '
            "trajectories; errors are counted apart, unscored trajectories are outside every "
            "denominator. Passed: scored trajectories whose value passes the grader's pass rule.</p></section>"
        ),
        (
            '<section id="charts"><h2>Graders by run and environment</h2>'
            f'<div class="charts">{"".join(chart_html["graders"]) or no_charts}</div></section>'
        ),
        (
            f'<section id="steps"><h2>Success by number of expected steps</h2><p class="note">{escape(steps_note)}</p>'
            f'<div class="charts">{"".join(chart_html["steps"]) or no_charts}</div></section>'
        ),
    ]
    if results:
        sections.append(
            '<section id="jmultiwoz"><h2>JMultiWOZ-TC results</h2><p class="note">Result files found in '
            f"the run directories ({escape(', '.join(RESULT_FILE_PATTERNS))}).</p>"
            f"{''.join(results)}</section>"
        )
    if suite_html:
        sections.append(
            '<section id="suites"><h2>Suite tables</h2><p class="note">Each run\'s own section, as its '
            f"suite reports it (the tables printed after <code>run</code> and <code>grade</code>).</p>{''.join(suite_html)}</section>"
        )
    sections.append(
        '<section id="examples"><h2>Examples</h2><div id="controls"></div><div id="pager"></div>'
        '<table id="examples-table"><thead></thead><tbody></tbody></table>'
        "<noscript><p>The example viewer needs JavaScript.</p></noscript></section>"
    )
    html = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_asset("viewer.css")}</style>
</head>
<body>
<header><h1>{escape(title)}</h1><p class="note">{len(runs)} runs, {n_traj} trajectories; generated {generated}
by toolgym. Columns: {escape(", ".join(c.header for c in COLUMNS))}.</p>
<nav><a href="#summary">Summary</a> · <a href="#charts">Charts</a> · <a href="#steps">Steps</a>
{'· <a href="#jmultiwoz">JMultiWOZ-TC</a> ' if results else ""}{'· <a href="#suites">Suite tables</a> ' if suite_html else ""}· <a href="#examples">Examples</a></nav></header>
<main>
{"".join(sections)}
</main>
<script type="application/json" id="toolgym-index">{script_json(index)}</script>
<script type="application/json" id="toolgym-traces">{script_json(traces)}</script>
<script>{script}</script>
</body>
</html>
"""
    return html, titles, pngs


def build_report(
    directories: Sequence[str | Path],
    out: Path,
    png_dir: Path | None = None,
    success_grader: str | None = None,
    max_chars: int = 20_000,
) -> ReportResult:
    """Write the HTML report of ``directories`` to ``out``.

    Args:
        directories (Sequence[str | Path]): Run directories (read by :func:`toolgym.api.load_run`).
        out (Path): HTML file to write (parent directories are created).
        png_dir (Path | None): Also write every chart as a PNG file there.
        success_grader (str | None): Grader with a pass rule for the success-by-steps chart
            (default: each run's first grader with a pass rule).
        max_chars (int): Longest text kept per field of a trace (longer text is cut, with a note).

    Returns:
        ReportResult: What was written.

    Raises:
        RunDirError: for a missing or invalid run directory (file and line named), or an
            ``out`` that is a record file of a run directory (nothing is written).
        ValueError: if no directory is given, or ``success_grader`` is no grader of the runs
            with a pass rule.
    """
    start = time.perf_counter()
    refuse_run_file(out, "the report", directories)
    runs = load_runs(directories)
    if success_grader is not None:
        rules = [v.measures[success_grader] for v in runs if success_grader in v.measures]
        if not any(m.pass_fail for m in rules):
            why = "has no pass rule" if rules else "is not a grader of these runs"
            raise ValueError(f"--success-grader: {success_grader!r} {why}; graders with a pass rule: "
                             f"{', '.join(dict.fromkeys(g for v in runs for g in v.pass_fail_graders())) or '(none)'}")
    html, titles, pngs = render_report(runs, png_dir, success_grader, max_chars)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, html)  # nothing half-written, no .tmp left behind
    return ReportResult(
        out,
        out.stat().st_size,
        len(runs),
        sum(len(r.trajectories) for r in runs),
        titles,
        pngs,
        time.perf_counter() - start,
    )

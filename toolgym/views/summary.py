"""The summary table over run directories: environments × runs × graders.

Each row is a :class:`SummaryCell` (one grader on one run); the columns shown are the
:data:`COLUMNS` list, so another statistic (a confidence interval, pass^k, a clustered standard
error) is one more :class:`Column` appended with :func:`add_column`, and it appears in the terminal
``summary``, in the HTML report and in :func:`summary_records` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolgym.records import Example, Measure, Score, Trajectory
from toolgym.stats import Estimate, summarize
from toolgym.views.rundata import RunView, compares_notes, rule_text, visible


@dataclass(frozen=True)
class SummaryCell:
    """One grader's results on one run.

    Attributes:
        env (str): Environment name.
        run (str): The run's label (:attr:`RunView.label`).
        directory (Path): The run directory.
        grader (str): Grader name.
        measure (Measure): What the grader measures (direction and pass rule).
        estimate (Estimate): Mean ± standard error from :func:`toolgym.stats.summarize`.
        scores (tuple[Score, ...]): This grader's scores on the run (for statistics that need
            more than the mean, such as clustering by ``example_id`` over trials).
        trajectories (tuple[Trajectory, ...]): All trajectories of the run (errors included).
    """

    env: str
    run: str
    directory: Path
    grader: str
    measure: Measure
    estimate: Estimate
    scores: tuple[Score, ...]
    trajectories: tuple[Trajectory, ...]

    @property
    def abandoned(self) -> int:
        """Trajectories the agent walked away from (status ``abandoned``): graded, in ``n``."""
        return sum(t.status == "abandoned" for t in self.trajectories)

    @property
    def passed(self) -> int | None:
        """Scored trajectories whose value passes the measure's rule (``None`` without a rule)."""
        if not self.measure.pass_fail:
            return None
        return sum(self.measure.passed(s.value) is True for s in self.scores)


@dataclass(frozen=True)
class Column:
    """A column of the summary table.

    Attributes:
        header (str): Column title.
        cell (Callable[[SummaryCell], str]): Text of the column for one :class:`SummaryCell`.
        numeric (bool): Right-aligned when true.
    """

    header: str
    cell: Callable[[SummaryCell], str]
    numeric: bool = True
    hide_when_zero: bool = False
    """Left out of the terminal table when every cell reads ``0`` (a count that is rarely
    anything else), so the common table stays narrow."""


COLUMNS: list[Column] = [
    Column("mean ± stderr", lambda c: c.estimate.format()),
    Column("n", lambda c: str(c.estimate.n)),
    Column("abandoned", lambda c: str(c.abandoned), hide_when_zero=True),
    Column("errors", lambda c: str(c.estimate.n_errors)),
    Column("unscored", lambda c: str(c.estimate.n_unscored)),
    Column("passed", lambda c: "-" if c.passed is None else f"{c.passed}/{c.estimate.n}"),
    Column("measure", lambda c: rule_text(c.measure), numeric=False),
]
"""The statistic columns after ``env``, ``run`` and ``grader``, in display order."""

KEY_HEADERS = ("env", "run", "grader")


def add_column(column: Column, after: str | None = None) -> None:
    """Add a statistic column to :data:`COLUMNS` (at the end, or right after ``after``).

    Raises:
        ValueError: if a column with the same header exists, or ``after`` names none.
    """
    headers = [c.header for c in COLUMNS]
    if column.header in headers:
        raise ValueError(f"summary column {column.header!r} already exists")
    if after is None:
        COLUMNS.append(column)
    elif after in headers:
        COLUMNS.insert(headers.index(after) + 1, column)
    else:
        raise ValueError(f"no summary column {after!r} (columns: {', '.join(headers)})")


def summary_cells(runs: Sequence[RunView]) -> list[SummaryCell]:
    """One cell per (run, grader), sorted by environment, then in the order the runs were given.

    Args:
        runs (Sequence[RunView]): Loaded runs.

    Returns:
        list[SummaryCell]: The cells.
    """
    cells: list[SummaryCell] = []
    for run in runs:
        rows = summarize(run.env, run.trajectories, run.scores, run.graders)
        trajectories = tuple(run.trajectories)
        for row in rows:
            scores = tuple(s for s in run.scores if s.grader == row.grader)
            cells.append(
                SummaryCell(
                    row.env, run.label, run.directory, row.grader, run.measures[row.grader],
                    row.estimate, scores, trajectories,
                )
            )
    order = {env: i for i, env in enumerate(sorted({c.env for c in cells}))}
    return sorted(cells, key=lambda c: order[c.env])  # stable: run and grader order kept


def summary_headers(columns: Sequence[Column] | None = None) -> list[str]:
    """All headers: ``env``, ``run``, ``grader``, then the statistic columns."""
    return [*KEY_HEADERS, *(c.header for c in (COLUMNS if columns is None else columns))]


def summary_records(cells: Sequence[SummaryCell], columns: Sequence[Column] | None = None) -> list[list[str]]:
    """The table as rows of strings, in :func:`summary_headers` order."""
    columns = COLUMNS if columns is None else columns
    return [[c.env, c.run, c.grader, *(col.cell(c) for col in columns)] for c in cells]


def rich_summary(cells: Sequence[SummaryCell], title: str = "summary"):
    """The summary as a ``rich.table.Table`` (cell text is never read as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(visible(title)))
    for header in KEY_HEADERS:
        table.add_column(header, justify="left")
    for col in COLUMNS:
        table.add_column(col.header, justify="right" if col.numeric else "left")
    previous: tuple[str, str] | None = None
    for cell, record in zip(cells, summary_records(cells), strict=True):
        if previous is not None and previous != (cell.env, cell.run):
            table.add_section()
        previous = (cell.env, cell.run)
        table.add_row(*(Text(visible(v)) for v in record))  # control characters shown, not obeyed
    return table


def print_summary(cells: Sequence[SummaryCell], console, title: str = "summary") -> None:
    """Print the summary as one table that fits ``console`` (a ``rich.console.Console``)
    without cutting a name: every column when that fits; otherwise the runs are numbered
    (``run 1: ENV · LABEL · DIRECTORY`` above the table) and each grader's measure is written
    once below it, so the table keeps one row per run and grader, as the report's does; a
    count column marked ``hide_when_zero`` that reads 0 everywhere is left out. Still
    too wide (long grader names on a narrow terminal), its columns are stacked in parts by
    :func:`toolgym.views.fit.fitted_tables`. Below it, what a grader compares when its
    measure says (:func:`toolgym.views.rundata.compares_notes`).

    Args:
        cells (Sequence[SummaryCell]): From :func:`summary_cells`.
        console (rich.console.Console): Where to print.
        title (str): Title above the table.
    """
    from rich.text import Text

    from toolgym.views.fit import Col, fitted_tables

    columns = [c for c in COLUMNS if not (c.hide_when_zero and all(c.cell(x) == "0" for x in cells))]
    stats = [Col(c.header, "right" if c.numeric else "left", wrap=not c.numeric) for c in columns]
    records = [[visible(v) for v in r] for r in summary_records(cells, columns)]  # control characters shown, not obeyed
    keys = [Col(h, "left") for h in KEY_HEADERS]
    starts = [i for i, c in enumerate(cells) if i == 0 or (cells[i - 1].env, cells[i - 1].run) != (c.env, c.run)]
    whole = fitted_tables(console, [*keys, *stats], records, keys=3, title=Text(visible(title)), sections=starts)
    measures = {c.grader: c.measure for c in cells}
    if len(whole) > 1:
        numbers = {(cells[i].env, cells[i].run, cells[i].directory): n + 1 for n, i in enumerate(starts)}
        console.print(Text(visible(title), style="bold"))
        for (env, label, directory), n in numbers.items():
            console.print(Text(visible(f"run {n}: {env} · {label} · {directory}")))
        shown = [i for i, c in enumerate(columns) if c.header != "measure"]
        compact = [[str(numbers[(c.env, c.run, c.directory)]), visible(c.grader), *(r[3 + i] for i in shown)]
                   for c, r in zip(cells, records, strict=True)]
        cols = [Col("run", "right"), keys[2], *(stats[i] for i in shown)]
        whole = fitted_tables(console, cols, compact, keys=2, sections=starts)
        for table in whole:
            console.print(table)
        rules: dict[str, list[tuple[str, list[int]]]] = {}
        for c in cells:  # a grader's measure once, unless runs recorded different ones
            text, n = rule_text(c.measure), numbers[(c.env, c.run, c.directory)]
            known = rules.setdefault(c.grader, [])
            match = next((entry for entry in known if entry[0] == text), None)
            if match is None:
                known.append((text, [n]))
            elif n not in match[1]:
                match[1].append(n)
        lines = [f"{grader}{'' if len(known) == 1 else ' (run ' + ', '.join(map(str, runs)) + ')'}: {text}"
                 for grader, known in rules.items() for text, runs in known]
        console.print(Text(visible("measure (better; pass rule): " + "; ".join(lines))))
    else:
        console.print(whole[0])
    for note in compares_notes(measures):
        console.print(Text(visible(f"note: {note}")))


FIRST_ERROR_TYPES = (
    "wrong_tool", "wrong_arguments", "missing", "out_of_order", "extra_call", "forbidden", "malformed", "rejected",
    "undone",
)
"""The error types of ``trajectory_match``'s ``first_error`` (docs/stepwise-grader.md)."""


EXAMPLES_SHOWN = 5
"""Example ids named per row of the first-error table (then ``+N`` more)."""


def milestone_depths(example: Example) -> dict[str, int]:
    """Each milestone's depth in the ``after`` order: 0 without ``after``, else one more than
    the deepest milestone it comes after (``{}`` without milestones)."""
    plan = example.plan
    if plan is None:
        return {}
    after = {m.id: m.after for m in plan.milestones}
    depth: dict[str, int] = {}

    def of(mid: str) -> int:
        if mid not in depth:
            depth[mid] = 1 + max((of(a) for a in after[mid]), default=-1)
        return depth[mid]

    for m in plan.milestones:
        of(m.id)
    return {m.id: depth[m.id] for m in plan.milestones}


def milestone_tables(view: RunView):
    """For a run graded by ``trajectory_match``: the first errors counted by type and
    milestone, with the ids of the examples where each occurred, and the
    share of required milestones matched at each depth of the ``after`` order (the run's
    examples must be loaded for the second). Returns a list of ``rich.table.Table`` (empty when
    the run has no ``trajectory_match`` score with details)."""
    from rich.table import Table
    from rich.text import Text

    scores = [s for s in view.run.scores if s.grader == "trajectory_match" and "first_error" in s.details]
    if not scores:
        return []
    order = {t: k for k, t in enumerate(FIRST_ERROR_TYPES)}
    groups: dict[tuple[str, str], list[str]] = {}
    passed = 0
    for s in scores:
        first = s.details.get("first_error")
        if isinstance(first, dict) and first.get("type") in order:
            groups.setdefault((first["type"], str(first.get("milestone") or "")), []).append(s.example_id)
        elif first is None:
            passed += 1
    errors = Table(title=Text(visible(f"{view.label} · trajectory_match: first error by type and milestone")))
    errors.add_column("first error")
    errors.add_column("milestone")
    errors.add_column("trajectories", justify="right")
    errors.add_column("share", justify="right")
    errors.add_column("examples")
    if passed:
        errors.add_row("(none: passed)", "", str(passed), f"{passed / len(scores):.3f}", "")
    for (kind, milestone), ids in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], -len(kv[1]), kv[0][1])):
        unique = list(dict.fromkeys(ids))
        shown = ", ".join(unique[:EXAMPLES_SHOWN]) + (f" +{len(unique) - EXAMPLES_SHOWN}" if len(unique) > EXAMPLES_SHOWN else "")
        errors.add_row(kind, visible(milestone), str(len(ids)), f"{len(ids) / len(scores):.3f}", visible(shown))
    tables = [errors]
    if view.examples:
        reached: dict[int, list[int]] = {}
        for s in scores:
            example = view.examples.get(s.example_id)
            if example is None or example.plan is None:
                continue
            depths = milestone_depths(example)
            matched = s.details.get("matched") or {}
            for m in example.plan.milestones:
                if not m.optional:
                    reached.setdefault(depths[m.id], [0, 0])
                    reached[depths[m.id]][0] += m.id in matched
                    reached[depths[m.id]][1] += 1
        if reached:
            progress = Table(title=Text(visible(f"{view.label} · required milestones reached by depth")))
            progress.add_column("depth", justify="right")
            progress.add_column("reached / required", justify="right")
            progress.add_column("share", justify="right")
            for d in sorted(reached):
                hit, total = reached[d]
                progress.add_row(str(d), f"{hit} / {total}", f"{hit / total:.3f}")
            tables.append(progress)
    return tables

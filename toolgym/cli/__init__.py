"""Command line: ``python run_agent.py {list,run,grade,show,summary,report,compare,generate,export}``
(also the ``toolgym`` script)."""

from __future__ import annotations

import argparse
import errno
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from toolgym.benchmark import ReportTable
from toolgym.cli.providers import add_provider_arguments, record_accounting, serve_for, settings_from_args
from toolgym.data import DatasetError
from toolgym.registry import DuplicateNameError, ExtensionError, UnknownNameError
from toolgym.runio import Run, RunDirError, locked_run_dir
from toolgym.stats import SummaryRow

console = Console()


def print_summary(rows: list[SummaryRow], title: str = "summary", measures: dict | None = None) -> None:
    """Print the grader table: mean ± stderr, n, errors, unscored (fitted to the terminal:
    :func:`toolgym.views.fit.print_fitted`), then what a grader compares when its measure says
    (``measures``: grader name → :class:`~toolgym.records.Measure`). When the table with its
    env column is wider than the terminal (an MCP spec as the environment), the environment is
    named on a line above it (``env: SPEC``; several are numbered ``env 1: ...``, and the
    column holds the numbers), as ``summary`` names its runs."""
    from rich.text import Text

    from toolgym.views.fit import Col, fitted_tables, print_fitted
    from toolgym.views.rundata import compares_notes

    cols = [Col("env", "left"), Col("grader", "left"), Col("mean ± stderr"), Col("n"), Col("errors"), Col("unscored")]
    stats = [[row.grader, row.estimate.format(), str(row.estimate.n), str(row.estimate.n_errors),
              str(row.estimate.n_unscored)] for row in rows]
    cells = [[row.env, *stat] for row, stat in zip(rows, stats, strict=True)]
    if len(fitted_tables(console, cols, cells, keys=2, title=Text(title))) == 1:
        print_fitted(console, cols, cells, keys=2, title=Text(title))
    else:  # a long environment name (an MCP spec): named above the table, as `summary` does with runs
        envs = list(dict.fromkeys(row.env for row in rows))
        console.print(Text(title, style="bold"))
        if len(envs) == 1:
            console.print(Text(f"env: {envs[0]}"), soft_wrap=True)  # one line, to copy
            print_fitted(console, cols[1:], stats, keys=1)
        else:
            for n, env in enumerate(envs, 1):
                console.print(Text(f"env {n}: {env}"), soft_wrap=True)
            numbered = [[str(envs.index(row.env) + 1), *stat] for row, stat in zip(rows, stats, strict=True)]
            print_fitted(console, [Col("env", "right"), *cols[1:]], numbered, keys=2)
    for note in compares_notes(measures or {}, [row.grader for row in rows]):
        console.print(Text(f"note: {note}"))


LIST_KINDS = {"environments": "--env", "agents": "--agent", "graders": "--grader", "models": "--model"}
"""The kinds ``list`` prints, each with the option that names one."""


def cmd_list(args: argparse.Namespace) -> int:
    """One table per kind (environments, agents, graders, models): name, where it comes from,
    and what it is (the first sentence of its docstring, read without importing it:
    :meth:`toolgym.registry.Registry.description`). Names never wrap; the description wraps
    so a table fits the terminal (80 columns in a pipe)."""
    from rich.table import Table
    from rich.text import Text

    from toolgym.plugins import registries, suite_problems

    regs = registries()
    tables: dict[str, list[list[str]]] = {kind: [] for kind in LIST_KINDS}
    environments = regs["environments"]
    for name, source in environments.sources():
        if source.startswith("entry point"):  # not imported to be listed
            tables["environments"].append([name, source, environments.description(name)])
            continue
        benchmark = environments.get(name)  # the suites are imported already
        from toolgym.registry import describe_object

        datasets = ", ".join(benchmark.builtin_datasets()) or "none built in (give --dataset)"
        tables["environments"].append([name, source, f"{describe_object(benchmark.environment)} Datasets: {datasets}."])
    for kind in ("agents", "graders", "models"):
        for name, source in regs[kind].sources():
            text = regs[kind].description(name)
            if kind == "models" and not text.startswith(name):
                text = f"{'scripted:FILE' if name == 'scripted' else f'{name}[:MODEL]'}: {text}"
            tables[kind].append([name, source, text])
    console.print(Text("toolgym: what can be named (NAME, module.path:Name or path/file.py:Name)"))
    for kind, rows in tables.items():
        table = Table(title=Text(f"{kind} ({LIST_KINDS[kind]})"))
        for n, header in enumerate(("name", "from", "what it is")):
            widest = max(len(header), *(len(row[n]) for row in rows)) if n < 2 else None
            table.add_column(Text(header), no_wrap=n < 2, min_width=widest, overflow="fold" if n == 2 else "ellipsis")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
    forms = environments.forms()
    if forms:
        console.print(Text("environments (--env) may also be an MCP server's tools (give --dataset):\n"
                           + "\n".join(f"  {form}" for form in forms)), soft_wrap=True)
    for problem in suite_problems():
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def print_report_tables(tables: list[ReportTable]) -> None:
    """Print an environment's own tables (published metrics, ...) and their notes."""
    from rich.text import Text

    from toolgym.views.fit import Col, print_fitted

    for t in tables:
        columns = list(t.rows[0]) if t.rows else []
        cols = [Col(str(c), "left" if i == 0 else "right") for i, c in enumerate(columns)]
        rows = [["—" if row.get(c) is None else str(row.get(c)) for c in columns] for row in t.rows]
        if cols:  # stacked, the first column repeated, when wider than the terminal (Japanese headers are wide)
            print_fitted(console, cols, rows, keys=1, title=Text(t.title))
        else:
            console.print(Text(t.title))
        for note in t.notes:
            print(f"note: {note}", file=sys.stderr)  # plain: never wrapped, easy to grep


def cmd_run(args: argparse.Namespace) -> int:
    from toolgym.runner import (  # not at start-up: `list` needs none
        RunConfig,
        check_resume,
        run,
        status_counts,
    )

    if args.force and not args.resume:
        raise ValueError("--force only goes with --resume (it accepts changed settings when continuing a run)")
    if args.out is None:
        if args.resume:
            raise ValueError("--resume needs --out DIR, the run directory to continue (a run given no --out "
                             "gets a new folder each time: its name was printed when it started)")
        from toolgym.agents import AGENTS
        from toolgym.runio import default_run_dir

        model = args.model if AGENTS.get(args.agent).needs_model else None
        args.out = str(default_run_dir(args.env, args.agent, model))
        args.out_chosen = True  # the Ctrl-C message names it (main)
        print(f"run directory: {args.out}", file=sys.stderr)
    out = Path(args.out)
    settings = settings_from_args(args)
    config = RunConfig(
        env=args.env, agent=args.agent, model=args.model, dataset=args.dataset, out=out,
        limit=args.limit, trials=args.trials, max_steps=args.max_steps, max_repeats=args.max_repeats,
        concurrency=args.concurrency, workers=args.workers, resume=args.resume, graders=args.grader or None,
        force=args.force, max_errors=args.max_errors,
        settings=settings, grader_settings=judge_settings(args), env_options=env_options(args),
        executor=args.executor, executor_options={"address": args.ray_address} if args.ray_address else {},
        protocol=args.protocol, inject=args.inject, user_model=args.user_model,
    )
    check_resume(config)
    with locked_run_dir(out), serve_for(args, settings, out):
        result = run(config, progress=not args.no_progress)
    counts = status_counts(result.trajectories)
    print_summary(result.summary, title=f"{out} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})",
                  measures=result.run.record.measures)
    for line in record_accounting(out, result.trajectories, args.price_in, args.price_out).lines():
        console.print(line, highlight=False, soft_wrap=True)
    print_statistics(result.run)
    print_suite_report(result.run)
    return 0


def env_options(args: argparse.Namespace) -> dict:
    """Environment options given on the command line (``--shots``, ``--sample``, ...)."""
    sample_seed = args.sample_seed if args.sample_seed is not None else args.seed
    given = {"shots": args.shots, "shots_from": args.shots_from, "sample": args.sample,
             "answers": getattr(args, "answers", None), "layout": getattr(args, "layout", None)}
    if args.sample is not None:
        given["sample_seed"] = sample_seed
    return {k: v for k, v in given.items() if v is not None}


def print_suite_report(graded: Run) -> None:
    """Print the suite's own section of a graded run (per-subject accuracy, perplexity,
    published metrics), if its benchmark declares one."""
    from toolgym.runner import benchmark_of

    benchmark = benchmark_of(graded.record, graded.directory)
    if benchmark.report is not None and graded.examples is not None:
        print_report_tables(benchmark.report(graded))


def cmd_grade(args: argparse.Namespace) -> int:
    if args.result:  # a result file in an environment's published format
        if not (args.env and args.dataset):
            raise ValueError("grade --result needs --env and --dataset")
        if args.dir:
            raise ValueError(f"grade: give a run directory ({args.dir}) or --result FILE, not both (the imported "
                             "run's directory is --out)")
        from toolgym.runner import import_results

        result = Path(args.result)
        out = Path(args.out) if args.out else result.parent
        options = {k: v for k, v in (("answers", args.answers), ("layout", args.layout)) if v}
        graded = import_results(args.env, result, args.dataset, out, env_options=options)
        print_summary(graded.summary, title=str(out), measures=graded.run.record.measures)
        print_suite_report(graded.run)
        return 0
    if not args.dir:
        raise ValueError("grade needs a run directory, or --result FILE with --env and --dataset")
    from toolgym.runner import grade

    graded = grade(
        Path(args.dir), graders=args.grader or None, dataset=args.dataset,
        grader_settings=judge_settings(args), env_options={"layout": args.layout} if args.layout else None,
    )
    print_summary(graded.summary, title=str(args.dir), measures=graded.run.record.measures)
    print_statistics(graded.run)
    print_suite_report(graded.run)
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from toolgym.views.rundata import load_runs
    from toolgym.views.summary import print_summary as print_cells
    from toolgym.views.summary import summary_cells

    runs = load_runs([Path(d) for d in args.dirs], with_examples=False)
    print_cells(summary_cells(runs), console, title="summary: mean ± standard error per grader")
    from toolgym.runio import SCORES_FILE

    for view in runs:  # a run stopped (Ctrl-C) or still running before its grading wrote the scores
        directory = view.run.directory
        if directory is None or not view.run.trajectories:
            continue
        if not (directory / SCORES_FILE).exists():
            print(f"note: {directory} has {len(view.run.trajectories)} trajectories and no {SCORES_FILE}: it was not "
                  f"graded (still running, or stopped before grading); `toolgym grade {directory}` grades it",
                  file=sys.stderr)
            continue
        scored = {(s.example_id, s.trial) for s in view.run.scores}
        waiting = [t for t in view.run.trajectories
                   if t.status not in ("error", "aborted") and (t.example_id, t.trial) not in scored]
        if waiting:
            print(f"note: {directory}: {len(waiting)} finished episode(s) have no scores yet (the run stopped before "
                  f"grading them, or is still running); `toolgym grade {directory}` grades them",
                  file=sys.stderr)
    from toolgym.views.stepwise import stepwise_tables

    for view in runs:
        for table in stepwise_tables(view.run, view.label):
            console.print(table)
    milestones = any(s.grader == "trajectory_match" for view in runs for s in view.run.scores)
    if milestones or args.suite_tables:  # the tables below need the datasets: read them once
        runs = load_runs([Path(d) for d in args.dirs], with_examples=True)
    if milestones:
        from toolgym.views.summary import milestone_tables

        for view in runs:
            for table in milestone_tables(view):
                console.print(table)
    if args.suite_tables:
        from toolgym.views.rundata import suite_tables

        for view in runs:
            tables = suite_tables(view)
            for t in tables:
                t.title = f"{view.label} · {t.title}"
            print_report_tables(tables)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from toolgym.views.report import build_report

    png = Path(args.png) if args.png else None
    result = build_report([Path(d) for d in args.dirs], Path(args.out), png_dir=png, success_grader=args.success_grader)
    console.print(result.describe(), highlight=False)
    return 0
def judge_settings(args: argparse.Namespace) -> dict[str, str | None]:
    """Grader settings from ``--judge-model`` / ``--judge-cache`` / ``--no-judge-cache`` /
    ``--trajectory-mode`` / ``--args-mode`` (``None`` keeps the grader's default or the run's
    recorded setting)."""
    cache = "" if args.no_judge_cache else args.judge_cache
    settings: dict[str, str | None] = {"judge_model": args.judge_model, "judge_cache": cache}
    for key in ("trajectory_mode", "args_mode"):  # recorded only when given
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    return settings


def print_statistics(graded: Run) -> None:
    """Pass rates with Wilson intervals, pass@k / pass^k, breakdowns and judge agreement."""
    from toolgym.views.analysis import run_report
    from toolgym.views.tables import print_run_report

    print_run_report(run_report(graded), console)


def cmd_compare(args: argparse.Namespace) -> int:
    from toolgym.views.analysis import compare_runs
    from toolgym.views.tables import print_comparison

    print_comparison(compare_runs(Path(args.run_a), Path(args.run_b), n_boot=args.n_boot, seed=args.seed), console)
    from toolgym.api import load_run
    from toolgym.views.stepwise import fork_tables

    a, b = (load_run(Path(d), with_examples=False) for d in (args.run_a, args.run_b))
    for fork_run, parent_run in ((b, a), (a, b)):  # a fork of the other run: side by side from its step K
        parent_dir = Path(parent_run.directory or ".").resolve()
        if any(t.parent and Path(str(t.parent.get("run"))).resolve() == parent_dir for t in fork_run.trajectories):
            for table in fork_tables(fork_run, parent_run):
                console.print(table)
    return 0


def add_judge_options(p: argparse.ArgumentParser) -> None:
    """``--judge-model``, ``--judge-cache``, ``--no-judge-cache``, and the settings of
    ``trajectory_match``'s agentevals modes (``--trajectory-mode``, ``--args-mode``)."""
    p.add_argument(
        "--judge-model",
        help="PROVIDER[:MODEL] of the LLM judge; switches on the correctness graders of "
        "relational_data and multiverse_math",
    )
    p.add_argument("--judge-cache", help="folder caching judge replies (default ~/.cache/toolgym/judge)")
    p.add_argument("--no-judge-cache", action="store_true", help="always call the judge")
    p.add_argument(
        "--trajectory-mode", choices=("strict", "unordered", "subset", "superset"),
        help="trajectory_match on examples with expected_calls and no milestones, as agentevals' "
        "trajectory match mode (docs/stepwise-grader.md)",
    )
    p.add_argument(
        "--args-mode", choices=("exact", "ignore", "subset", "superset"),
        help="argument comparison of --trajectory-mode (agentevals' tool_args_match_mode; default exact)",
    )


def add_answers_option(p: argparse.ArgumentParser) -> None:
    """``--answers FILE``: the expected answers of a dataset that keeps them in a file of their
    own (bfcl's ``possible_answer/``), given to the benchmark's dataset loader as the
    ``answers`` option (recorded in run.json with the other environment options)."""
    p.add_argument(
        "--answers", metavar="FILE",
        help="expected answers kept apart from the questions (e.g. bfcl's possible_answer file; "
        "default: where the environment looks beside the dataset)",
    )


def add_layout_option(p: argparse.ArgumentParser) -> None:
    """``--layout separate|published``: where an environment's exporter writes the wrong
    turns (JMultiWOZ-TC: ``incorrect_<model>.json`` beside a five-row score file, or after the
    five rows inside ``score_<model>.json`` as the published evaluate.py does); recorded in
    run.json as the ``layout`` environment option."""
    p.add_argument(
        "--layout", choices=("separate", "published"),
        help="JMultiWOZ-TC: wrong turns in incorrect_<model>.json (separate, the default) or after the "
        "five rows of score_<model>.json, as the published evaluate.py writes them (published)",
    )


def cmd_show(args: argparse.Namespace) -> int:
    from toolgym.views.show import show

    return show(Path(args.dir), example=args.example, console=console, failed=args.failed, grader=args.grader, limit=args.limit)


def cmd_check(args: argparse.Namespace) -> int:
    from toolgym.data import check_dataset, load_examples, resolve_dataset
    from toolgym.runner import resolve_benchmark

    benchmark, _ = resolve_benchmark(args.env)
    path = resolve_dataset(benchmark, args.dataset)
    examples = load_examples(path, benchmark)
    problems = check_dataset(benchmark, examples, path)
    if not problems:
        from toolgym.graders.trajectory import milestone_problems

        problems = [p for ex in examples for p in milestone_problems(benchmark, ex)]
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    console.print(f"{path}: {len(examples)} examples, {len(problems)} problem(s)", highlight=False, soft_wrap=True)
    return 1 if problems else 0


def cmd_generate(args: argparse.Namespace) -> int:
    from toolgym.data import write_examples
    from toolgym.generators import generate, parse_levels

    examples = generate(args.env, args.seed, args.per_level, parse_levels(args.levels))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_examples(out, examples)
    levels = sorted({ex.metadata.get("difficulty") for ex in examples})
    console.print(f"wrote {len(examples)} examples (levels {levels}) to {out}")
    return 0


def max_errors_arg(text: str) -> str:
    """argparse type of ``--max-errors``: a count ``N`` or a share ``P%``."""
    from toolgym.runner import parse_max_errors

    try:
        parse_max_errors(text)
    except ValueError as exc:  # argparse already names the option
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--max-errors ")) from None
    return text


def _number(kind: type, fits: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``text`` read as ``kind``, refused (naming what was expected and what
    was given) unless ``fits`` holds."""

    def read(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    return read


positive_int = _number(int, lambda v: v >= 1, "a positive integer")
"""argparse type: an integer of at least 1."""

temperature = _number(float, lambda v: math.isfinite(v) and v >= 0, "a finite number of at least 0")
"""argparse type: a sampling temperature, a finite number of at least 0."""

port_number = _number(int, lambda v: 0 <= v <= 65535, "a port number (0 to 65535)")
"""argparse type: a TCP port, 0 (any free port) to 65535."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolgym",
        description="Run agents against tool environments, grade their trajectories step by step.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="environments, agents, graders, models")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run an agent over a dataset, then grade")
    p.add_argument("--env", required=True, help="environment name (see `list`)")
    p.add_argument("--agent", default="tool_calling")
    p.add_argument("--model", default="local", help="PROVIDER[:MODEL], e.g. local, scripted:FILE")
    p.add_argument(
        "--user-model", metavar="SPEC",
        help="PROVIDER[:MODEL] that plays the simulated user of examples with `user` (multi-turn; docs/multi-turn.md)",
    )
    p.add_argument("--dataset", help="JSONL or LangChain JSON file, or a built-in dataset name (default: test)")
    p.add_argument("--limit", type=positive_int, help="only the first N examples")
    p.add_argument("--trials", type=positive_int, default=1, help="episodes per example")
    p.add_argument("--max-steps", type=positive_int, default=40,
                   help="model turns before the episode ends as step_limit (default: 40)")
    p.add_argument(
        "--max-repeats", type=_number(int, lambda v: v >= 2, "an integer of at least 2"), metavar="N",
        help="repeat guard: end an episode as repeat_limit after N identical consecutive tool calls (same tool, "
        "same arguments; default: off, so a looping model runs to --max-steps)",
    )
    p.add_argument(
        "--concurrency", type=positive_int, help="episodes in flight (default: the environment's; 1 for most, 32 for jmultiwoz_tc)"
    )
    p.add_argument(
        "--workers", type=positive_int, default=1,
        help="processes playing episodes, sharing --concurrency (one per core when a fast hosted or "
        "served model makes this process the bottleneck)",
    )
    p.add_argument(
        "--executor", default="local",
        help="where episodes are played: local (this machine) or ray (a Ray cluster; pip install -e '.[ray]' in the clone, on every node)",
    )
    p.add_argument(
        "--ray-address", metavar="auto|ray://HOST:PORT",
        help="with --executor ray: the cluster (default: RAY_ADDRESS, else a new Ray on this machine)",
    )
    p.add_argument("--temperature", type=temperature, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=positive_int, default=512, help="generated tokens per model turn")
    p.add_argument("--grader", action="append", help="grader to run (repeatable; default: the environment's)")
    p.add_argument("--out", help="run directory (default: a new folder runs/TIME_ENV_AGENT_MODEL, printed at the start)")
    p.add_argument(
        "--resume", action="store_true",
        help="continue --out: finished episodes are kept, those that ended in error are played again",
    )
    p.add_argument("--force", action="store_true", help="with --resume: accept changed settings (recorded in run.json)")
    p.add_argument(
        "--max-errors", type=max_errors_arg, metavar="N|P%",
        help="stop (exit 1) once more than N episodes, or P%% of them, end in error (default: stop when the "
        "first 20 all do)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--protocol", choices=("free-running", "teacher-forced"), default="free-running",
        help="teacher-forced: besides each episode, one per reference step k (steps before k replayed, then one "
        "model turn), graded by next_step (docs/step-by-step.md)",
    )
    from toolgym.cli.stepwise import inject_arg

    p.add_argument("--inject", type=inject_arg, metavar="KIND@K",
                   help="with --protocol teacher-forced: replace the result of tool step K (tool_error, wrong_value, "
                   "empty); the agent plays on, graded by recovery")
    p.add_argument("--shots", type=int, help="solved examples in a multiple-choice prompt (default 5)")
    p.add_argument("--shots-from", help="file the solved examples come from (default: the sibling dev/val split)")
    p.add_argument("--sample", type=positive_int, help="evaluate a reproducible subset of N examples (stratified where the environment defines strata)")
    p.add_argument("--sample-seed", type=int, help="seed of --sample (default: --seed)")
    add_answers_option(p)
    add_layout_option(p)
    add_provider_arguments(p)
    add_judge_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("grade", help="re-grade a run directory offline, or grade a result file (--result)")
    p.add_argument("dir", nargs="?", help="run directory to grade again from its trajectories")
    p.add_argument("--grader", action="append",
                   help="grader to run (repeatable; default: those recorded in run.json)")
    p.add_argument("--dataset", help="override the dataset path recorded in run.json (with --result: the gold)")
    p.add_argument("--env", help="with --result: the environment whose published format the file is in")
    p.add_argument("--result", help="a result file in the environment's published format (e.g. result_MODEL.jsonl)")
    p.add_argument("--out", help="with --result: where the score files go (default: beside the result file)")
    add_answers_option(p)
    add_layout_option(p)
    add_judge_options(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("summary", help="environments x runs x graders: mean ± stderr and n")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument(
        "--suite-tables", action="store_true",
        help="also print each run's suite tables (e.g. bfcl accuracy by category and by error type; reads the datasets)",
    )
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("report", help="write a self-contained HTML report of run directories")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    p.add_argument("--png", metavar="DIR", help="also write the charts as PNG files into DIR")
    p.add_argument("--success-grader", help="pass/fail grader of the success-by-steps chart (default: each run's first)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("show", help="print trajectories step by step")
    p.add_argument("dir")
    p.add_argument("--example", help="example id (default: the first)")
    p.add_argument("--failed", action="store_true", help="every failed trajectory")
    p.add_argument("--grader", help="grader deciding failure (default: any pass/fail grader)")
    p.add_argument("--limit", type=positive_int, help="show at most N trajectories")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("check", help="check a dataset against the dataset rules (its oracle must solve it)")
    p.add_argument("--env", required=True, help="environment name or spec")
    p.add_argument("--dataset", help="JSONL or LangChain JSON file, or a built-in dataset name (default: test)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("generate", help="write a seeded difficulty ladder as a JSONL dataset")
    p.add_argument("--env", required=True, help="typewriter_1, typewriter_26, relational_data, multiverse_math")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-level", type=int, default=3, help="examples per level")
    p.add_argument("--levels", help="e.g. 1-8 or 1,2,4 (default: the environment's)")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("compare", help="compare two runs on the same examples (paired tests, flips)")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--n-boot", type=positive_int, default=10_000, help="paired bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.set_defaults(func=cmd_compare)

    from toolgym.cli import export, serve, stepwise, view

    serve.add_parser(sub)
    export.add_parser(sub)
    stepwise.add_parsers(sub)
    view.add_parser(sub)
    parser.set_defaults(subcommands=dict(sub.choices))
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an unknown option is reported with its subcommand's usage (``run
    --limt 5`` prints ``run``'s usage, not the top-level one) and the closest options of that
    subcommand (:func:`difflib.get_close_matches`). Exits with status 2 as argparse does."""
    import difflib

    args, extras = parser.parse_known_args(argv)
    subcommands = args.__dict__.pop("subcommands")
    if not extras:
        return args
    sub = subcommands[args.command]
    options = [o for action in sub._actions for o in action.option_strings]  # argparse has no public list
    hints = []
    for extra in extras:
        close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=3, cutoff=0.6) if extra.startswith("-") else []
        if close:
            hints.append(f"{extra}: did you mean {' or '.join(close)}?")
    sub.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def os_error_text(exc: OSError) -> str:
    """One line for an operating-system error: the path(s), then the reason in words
    (``runs/x: permission denied``), without the errno number."""
    names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n is not None)
    reason = exc.strerror or str(exc) or type(exc).__name__
    if reason[1:2].islower():  # "Permission denied" -> "permission denied"; "GGUF ..." stays
        reason = reason[:1].lower() + reason[1:]
    return f"{names}: {reason}" if names else reason


WRITE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EIO")
                         if hasattr(errno, name))
"""Errors of a write to an open file (which names no file): disk full, quota, file too large,
read-only file system, I/O error. Only these are blamed on the output folder."""


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad input, 1 when a worker process died or
    too many episodes ended in error, 130 on Ctrl-C)."""
    args = parse_args(build_parser(), argv)
    warnings.simplefilter("default")
    warnings.formatwarning = lambda message, category, *rest, **kw: f"warning: {message}\n"
    try:
        return args.func(args)
    except OSError as exc:
        text = os_error_text(exc)
        if exc.filename is None and exc.errno in WRITE_ERRNOS and getattr(args, "out", None):  # names no file
            text = f"{args.out}: {text} (while writing there)"
        print(f"error: {text}", file=sys.stderr)
        return 2
    except (DatasetError, RunDirError, UnknownNameError, ExtensionError, DuplicateNameError, ValueError,
            TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # plain: never wrapped, easy to grep
        return 2
    except RuntimeError as exc:
        from toolgym.runner import TooManyErrors, WorkerDied  # loaded by then: only a run raises them

        if not isinstance(exc, (WorkerDied, TooManyErrors)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        again = (f"the same command plus --resume --out {args.out}" if getattr(args, "out_chosen", False)
                 else "the same command plus --resume")
        where = getattr(args, "out", None) if args.command == "run" else None
        print(
            f"interrupted; finished episodes are saved: continue with {again}, or score them as they are "
            f"with `grade {where or 'DIR'}` (until then they have no scores)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())

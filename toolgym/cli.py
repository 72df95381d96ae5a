"""Command line: ``python run_agent.py {list,run,grade,show}`` (also the ``toolgym`` script)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from toolgym.agents import AGENTS
from toolgym.data import DatasetError, builtin_datasets
from toolgym.environments import ENVIRONMENTS, ReportTable, get_environment
from toolgym.graders import GRADERS
from toolgym.providers import PROVIDERS, ModelSettings
from toolgym.registry import UnknownNameError
from toolgym.runio import RunDirError, read_trajectories
from toolgym.runner import RunConfig, SummaryRow, grade, run, status_counts

console = Console()
err_console = Console(stderr=True)


def print_summary(rows: list[SummaryRow], title: str = "summary") -> None:
    """Print the grader table: mean ± stderr, n, errors, unscored."""
    table = Table(title=title)
    for col in ("env", "grader", "mean ± stderr", "n", "errors", "unscored"):
        table.add_column(col, justify="left" if col in ("env", "grader") else "right")
    for row in rows:
        e = row.estimate
        table.add_row(row.env, row.grader, e.format(), str(e.n), str(e.n_errors), str(e.n_unscored))
    console.print(table)


def cmd_list(args: argparse.Namespace) -> int:
    table = Table(title="toolgym registry")
    table.add_column("kind")
    table.add_column("names")
    envs = [f"{n} (datasets: {', '.join(builtin_datasets(n)) or '-'})" for n in ENVIRONMENTS.names()]
    table.add_row("environments", "\n".join(envs))
    table.add_row("agents", ", ".join(AGENTS.names()))
    table.add_row("graders", ", ".join(GRADERS.names()))
    table.add_row("models", ", ".join(PROVIDERS.names()) + "  (spec: PROVIDER[:MODEL])")
    console.print(table)
    return 0


def print_report_tables(tables: list[ReportTable]) -> None:
    """Print an environment's own tables (published metrics, ...) and their notes."""
    for t in tables:
        table = Table(title=t.title)
        columns = list(t.rows[0]) if t.rows else []
        for i, col in enumerate(columns):
            table.add_column(col, justify="left" if i == 0 else "right", no_wrap=True)
        for row in t.rows:
            table.add_row(*("—" if row.get(c) is None else str(row.get(c)) for c in columns))
        wide = Console(width=max(console.width, 160), file=console.file)  # Japanese headers are wide
        wide.print(table)
        for note in t.notes:
            print(f"note: {note}", file=sys.stderr)  # plain: never wrapped, easy to grep


def cmd_run(args: argparse.Namespace) -> int:
    out = Path(args.out or f"runs/{args.env}-{args.agent}")
    settings = ModelSettings(temperature=args.temperature, seed=args.seed, max_tokens=args.max_tokens)
    env_cls = get_environment(args.env)
    concurrency = args.concurrency if args.concurrency is not None else env_cls.default_concurrency
    env_options = {"sample": args.sample, "seed": args.seed} if args.sample is not None else {}
    config = RunConfig(
        env=args.env, agent=args.agent, model=args.model, dataset=args.dataset, out=out,
        limit=args.limit, trials=args.trials, max_steps=args.max_steps,
        concurrency=concurrency, resume=args.resume, graders=args.grader or None,
        settings=settings, env_options=env_options,
    )
    rows = run(config, progress=not args.no_progress)
    counts = status_counts(read_trajectories(out))
    print_summary(rows, title=f"{out} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})")
    print_report_tables(env_cls.report_tables(out))
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    if args.result:  # a result file in an environment's published format
        if not (args.env and args.dataset):
            raise ValueError("grade --result needs --env and --dataset")
        result = Path(args.result)
        out = Path(args.out) if args.out else result.parent
        print_report_tables(get_environment(args.env).grade_result_file(result, args.dataset, out, {}))
        return 0
    if not args.dir:
        raise ValueError("grade needs a run directory, or --result FILE with --env and --dataset")
    rows = grade(Path(args.dir), graders=args.grader or None, dataset=args.dataset)
    print_summary(rows, title=str(args.dir))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from toolgym.show import show

    return show(Path(args.dir), example=args.example, console=console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolgym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="environments, agents, graders, models")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run an agent over a dataset, then grade")
    p.add_argument("--env", required=True, help="environment name (see `list`)")
    p.add_argument("--agent", default="tool_calling")
    p.add_argument("--model", default="local", help="PROVIDER[:MODEL], e.g. local, scripted:FILE")
    p.add_argument("--dataset", help="JSONL or LangChain JSON file, or a built-in dataset name (default: test)")
    p.add_argument("--limit", type=int, help="only the first N examples")
    p.add_argument("--trials", type=int, default=1, help="episodes per example")
    p.add_argument("--max-steps", type=int, default=40, help="model turns before step_limit")
    p.add_argument("--concurrency", type=int, help="episodes in flight (default: the environment's; 1 for most)")
    p.add_argument("--sample", type=int, help="a reproducible stratified subset of N examples, drawn with --seed (jmultiwoz_tc)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=512, help="generated tokens per model turn")
    p.add_argument("--grader", action="append", help="grader to run (repeatable; default: the environment's)")
    p.add_argument("--out", help="run directory (default: runs/ENV-AGENT)")
    p.add_argument("--resume", action="store_true", help="continue --out, skipping finished episodes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("grade", help="re-grade a run directory offline, or grade a result file (--result)")
    p.add_argument("dir", nargs="?")
    p.add_argument("--grader", action="append")
    p.add_argument("--dataset", help="override the dataset path recorded in run.json (with --result: the gold)")
    p.add_argument("--env", help="with --result: the environment whose published format the file is in")
    p.add_argument("--result", help="a result file in the environment's published format (e.g. result_MODEL.jsonl)")
    p.add_argument("--out", help="with --result: where the score files go (default: beside the result file)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("show", help="print a trajectory step by step")
    p.add_argument("dir")
    p.add_argument("--example", help="example id (default: the first)")
    p.set_defaults(func=cmd_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad input, 130 on Ctrl-C)."""
    args = build_parser().parse_args(argv)
    warnings.simplefilter("default")
    try:
        return args.func(args)
    except (DatasetError, RunDirError, UnknownNameError, ValueError, FileNotFoundError) as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted; finished episodes are saved (continue with --resume)")
        return 130


if __name__ == "__main__":
    sys.exit(main())

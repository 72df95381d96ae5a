"""Command line: ``python run_agent.py {list,run,grade,show,generate}`` (also the ``toolgym`` script)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from toolgym.agents import AGENTS
from toolgym.data import DatasetError, builtin_datasets
from toolgym.environments import ENVIRONMENTS
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


def cmd_run(args: argparse.Namespace) -> int:
    out = Path(args.out or f"runs/{args.env}-{args.agent}")
    settings = ModelSettings(temperature=args.temperature, seed=args.seed, max_tokens=args.max_tokens)
    config = RunConfig(
        env=args.env, agent=args.agent, model=args.model, dataset=args.dataset, out=out,
        limit=args.limit, trials=args.trials, max_steps=args.max_steps,
        concurrency=args.concurrency, resume=args.resume, graders=args.grader or None,
        settings=settings,
    )
    rows = run(config, progress=not args.no_progress)
    counts = status_counts(read_trajectories(out))
    print_summary(rows, title=f"{out} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    rows = grade(Path(args.dir), graders=args.grader or None, dataset=args.dataset)
    print_summary(rows, title=str(args.dir))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from toolgym.show import show

    return show(Path(args.dir), example=args.example, console=console)


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
    p.add_argument("--concurrency", type=int, default=1, help="episodes in flight")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=512, help="generated tokens per model turn")
    p.add_argument("--grader", action="append", help="grader to run (repeatable; default: the environment's)")
    p.add_argument("--out", help="run directory (default: runs/ENV-AGENT)")
    p.add_argument("--resume", action="store_true", help="continue --out, skipping finished episodes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("grade", help="re-grade a run directory offline")
    p.add_argument("dir")
    p.add_argument("--grader", action="append")
    p.add_argument("--dataset", help="override the dataset path recorded in run.json")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("show", help="print a trajectory step by step")
    p.add_argument("dir")
    p.add_argument("--example", help="example id (default: the first)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("generate", help="write a seeded difficulty ladder as a JSONL dataset")
    p.add_argument("--env", required=True, help="typewriter_1, typewriter_26, relational_data, multiverse_math")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-level", type=int, default=3, help="examples per level")
    p.add_argument("--levels", help="e.g. 1-8 or 1,2,4 (default: the environment's)")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.set_defaults(func=cmd_generate)
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

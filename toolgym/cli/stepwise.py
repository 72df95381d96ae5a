"""``toolgym fork`` and ``toolgym replay`` (see :mod:`toolgym.forks`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolgym.cli.providers import add_provider_arguments, serve_for, settings_from_args


def at_arg(text: str) -> int | str:
    """argparse type of ``--at``: a tool step ``K >= 1`` or ``first-error``."""
    if text == "first-error":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a tool step K >= 1 or first-error, got {text!r}")
    return value


def inject_arg(text: str) -> str:
    """argparse type of ``--inject``: ``KIND@K``."""
    from toolgym.forcing import Injection

    try:
        Injection.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--inject {text!r}: ")) from None
    return text


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register the ``fork`` and ``replay`` subcommands."""
    from toolgym.cli import positive_int, temperature

    p = sub.add_parser("fork", help="continue a recorded trajectory from a step with another model or agent")
    p.add_argument("run", metavar="RUN", help="the run directory holding the trajectory")
    p.add_argument("--example", required=True, help="example id of the trajectory")
    p.add_argument("--trial", type=int, help="its trial (default: the first)")
    p.add_argument("--at", required=True, type=at_arg, metavar="K|first-error",
                   help="the first tool step the new agent plays (steps before it are replayed), or the "
                   "stepwise grader's first error")
    p.add_argument("--model", help="PROVIDER[:MODEL] that plays on (default: the run's)")
    p.add_argument("--agent", help="agent that plays on (default: the run's)")
    p.add_argument("--user-model", metavar="SPEC",
                   help="PROVIDER[:MODEL] that plays a simulated user (default: the run's; docs/multi-turn.md)")
    p.add_argument("--out", required=True, help="the new run directory")
    p.add_argument("--inject", type=inject_arg, metavar="KIND@K",
                   help="replace the result of tool step K: tool_error, wrong_value or empty (graded by recovery)")
    p.add_argument("--max-steps", type=positive_int, help="model turns of the continuation (default: the run's)")
    p.add_argument("--temperature", type=temperature, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=positive_int, default=512, help="generated tokens per model turn")
    add_provider_arguments(p)
    p.set_defaults(func=cmd_fork)

    p = sub.add_parser("replay", help="execute a run's recorded tool calls again; one line per result or state that differs")
    p.add_argument("run", metavar="RUN")
    p.set_defaults(func=cmd_replay)


def cmd_fork(args: argparse.Namespace) -> int:
    """Fork, then print the new run's summary; exit 2 when the prefix does not replay."""
    from toolgym.cli import print_summary
    from toolgym.forcing import PrefixMismatch
    from toolgym.forks import fork
    from toolgym.runio import locked_run_dir

    out = Path(args.out)
    settings = settings_from_args(args)
    try:
        with locked_run_dir(out), serve_for(args, settings, out):
            result = fork(args.run, args.example, args.at, out, model=args.model, agent=args.agent, trial=args.trial,
                          inject=args.inject, max_steps=args.max_steps, settings=settings, user_model=args.user_model)
    except PrefixMismatch as exc:
        print(f"error: {args.run}: the prefix of {args.example} does not replay as recorded, so it cannot be "
              f"continued: {exc}", file=sys.stderr)
        return 2
    traj = result.trajectories[0]
    print_summary(result.summary, title=f"{out}: fork of {args.run} {args.example} trial {traj.parent['trial']} "
                                        f"at step {traj.parent['step']} ({traj.status})")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Print one line per difference; exit 1 when there is any."""
    from toolgym.forks import replay_run
    from toolgym.runio import IMPORTED_AGENT, read_run

    record = read_run(Path(args.run))
    if record.result_file is not None or record.agent_name == IMPORTED_AGENT:
        print(f"{args.run}: imported from a result file, which records no tool results: nothing was executed, "
              "so there is nothing to replay", file=sys.stderr)
        return 0
    differences = replay_run(args.run)
    for d in differences:
        print(d.line())
    kinds = sorted({(d.example_id, d.trial) for d in differences})
    if differences:
        print(f"{args.run}: {len(differences)} difference(s) in {len(kinds)} trajectory(ies)", file=sys.stderr)
    else:
        print(f"{args.run}: every trajectory replays as recorded (no difference)", file=sys.stderr)
    return 1 if differences else 0

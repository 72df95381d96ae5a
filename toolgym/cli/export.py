"""``toolgym export RUN_DIR... --format openai-chat|preference --out FILE``: run directories
as fine-tuning or preference data (:mod:`toolgym.views.export`)."""

from __future__ import annotations

import argparse
import sys

FORMATS = ("openai-chat", "preference")
"""The formats of ``toolgym.views.export.export_runs`` (imported only when the command runs)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``export`` subcommand."""
    p = sub.add_parser("export", help="write run directories as fine-tuning (openai-chat) or preference data")
    p.add_argument("dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", choices=FORMATS, default="openai-chat",
                   help="openai-chat: {messages, tools} per trajectory; preference: {prompt, chosen, rejected, tools} pairs")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.add_argument("--where", action="append", default=[], metavar="GRADER>=VALUE",
                   help="keep trajectories whose grader value satisfies this (repeatable; >= <= == != > <)")
    p.add_argument("--status", action="append", default=[],
                   choices=("completed", "step_limit", "repeat_limit", "abandoned", "error", "aborted"),
                   help="keep only this status (repeatable; default: completed, step_limit and repeat_limit)")
    p.add_argument("--env", action="append", default=[],
                   help="keep only this environment (repeatable); an MCP server's spec with the credentials its run "
                   "did not record (mcp+http://USER:PW@HOST/mcp) also gives them to read the prompt and tools")
    p.add_argument("--pass-grader", help="preference: grader whose pass rule splits chosen from rejected (default: each run's first)")
    p.add_argument("--arguments", choices=("string", "object"), default="string",
                   help="tool-call arguments as a JSON string (OpenAI fine-tuning; default) or as an object "
                   "(Hugging Face chat templates, TRL)")
    p.add_argument("--with-tokens", action="store_true", help="add the token ids and log-probabilities recorded with run --record-tokens")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the export and print what was written and skipped."""
    from toolgym.views.export import export_runs, parse_condition

    result = export_runs(
        args.dirs, args.out, args.format, where=[parse_condition(w) for w in args.where],
        status=args.status, envs=args.env, with_tokens=args.with_tokens, pass_grader=args.pass_grader,
        arguments=args.arguments,
    )
    print(f"{args.out}: {result.records} {args.format} records from {result.used} of {result.trajectories} trajectories"
          + (f" ({result.trajectories - result.used} skipped)" if result.used < result.trajectories else ""))
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for why, n in sorted(result.skipped.items()):
        print(f"skipped: {n} ({why}; first: {result.first_skipped[why]})", file=sys.stderr)
    return 0

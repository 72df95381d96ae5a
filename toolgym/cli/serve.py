"""``toolgym serve``: an environment as an MCP server (stdio or streamable HTTP) whose episodes
are recorded and graded into a run directory (:mod:`toolgym.mcp.serve`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``serve`` on the top-level subparsers."""
    from toolgym.cli import add_judge_options, port_number, positive_int

    p = sub.add_parser(
        "serve", help="serve an environment over MCP (stdio or streamable HTTP); record and grade every episode",
        description="Serve an environment over the Model Context Protocol. Each MCP session gets its own "
        "environment; the control tools start_episode and end_episode play the dataset's examples, and every "
        "episode is recorded and graded into --out like a `run`.",
    )
    p.add_argument("--env", required=True, help="environment name or spec (see `list`)")
    p.add_argument("--dataset", help="JSONL file or built-in dataset name (default: test)")
    p.add_argument("--limit", type=positive_int, help="only the first N examples")
    p.add_argument("--out", required=True, help="run directory to write; one served before with the same "
                   "settings is continued (so a static MCP client configuration works at every launch)")
    p.add_argument("--grader", action="append", help="grader to run (repeatable; default: the environment's)")
    p.add_argument("--trials", type=positive_int, default=1,
                   help="how many times each example may be started over the run (default 1; a continued run "
                   "counts the episodes it recorded); a further start_episode of it is refused")
    p.add_argument("--sample", type=positive_int, help="serve N examples drawn with --sample-seed (as run --sample)")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of --sample (default 0)")
    p.add_argument("--max-steps", type=positive_int, default=40,
                   help="model turns (tool calls) per episode before it ends as step_limit, as in `run` (default 40)")
    p.add_argument("--reveal-scores", action="store_true",
                   help="end_episode returns the scores and their explanations, which name the reference answer "
                   "and the expected calls (for debugging or training loops; default: only the episode's status)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="http: address to bind (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=port_number, default=8765, help="http: TCP port (0: any free port; default 8765)")
    p.add_argument("--path", default="/mcp", help="http: endpoint path (default /mcp)")
    p.add_argument("--token", help="http: bearer token clients must send (required beyond loopback)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="http: a browser Origin to accept besides loopback ones (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="http: a Host header to accept besides loopback ones and --host (repeatable)")
    p.add_argument("--idle-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="http: close a session idle this long (no request, no open stream); its running "
                   "episode is recorded as abandoned and graded: the agent walked away (default 300)")
    add_judge_options(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from toolgym.cli import judge_settings
    from toolgym.mcp.environment import require_mcp

    require_mcp()  # before anything is written: ValueError naming the extra to install
    from toolgym.mcp.serve import HttpSettings, ServedRun, serve_http, serve_stdio
    from toolgym.runio import locked_run_dir
    from toolgym.runner import status_counts

    settings = None
    if args.transport == "http":
        settings = HttpSettings(
            host=args.host, port=args.port, path=args.path, token=args.token,
            allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host),
            idle_timeout_s=args.idle_timeout,
        )
        settings.check()
    out = Path(args.out)
    with locked_run_dir(out):
        served = ServedRun(
            args.env, out, dataset=args.dataset, graders=args.grader or None,
            grader_settings=judge_settings(args), limit=args.limit, transport=args.transport,
            trials=args.trials, reveal_scores=args.reveal_scores, max_steps=args.max_steps,
            env_options={"sample": args.sample, "sample_seed": args.sample_seed} if args.sample else None,
        )
        try:
            result = serve_http(served, settings) if settings is not None else serve_stdio(served)
        except KeyboardInterrupt:
            result = served.finish()
        finally:
            served.close()  # the server could not start (say, the port is taken): nothing left open
    counts = status_counts(result.trajectories)
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no episodes"
    print(f"{out}: {len(result.trajectories)} trajectories ({statuses}), {len(result.scores)} scores", file=sys.stderr)
    return 0

"""``toolgym view``: a local web app over run directories (:mod:`toolgym.views.web`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``view`` on the top-level subparsers."""
    from toolgym.cli import port_number

    p = sub.add_parser(
        "view", help="browse run directories in a local web app (search, filters, live runs, side-by-side diffs)",
        description="Serve a web page over the run directories found at or below RUN_DIR (default: runs, "
        "else the current directory): runs with their summary, every trajectory with full-text search and "
        "filters, one trajectory step by step, two side by side. The JSON API the page uses is under /api "
        "(docs/view.md). Each run is indexed on first open into a cache (rebuilt when the run changes).",
    )
    p.add_argument("dirs", nargs="*", metavar="RUN_DIR", help="run directories, or folders holding them")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=port_number, default=8766, help="TCP port (0: any free port; default 8766)")
    p.add_argument("--token", help="secret every request must carry (required beyond loopback): open the "
                   "page as /?token=TOKEN, scripts send 'Authorization: Bearer TOKEN'")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="a Host header to accept besides loopback ones and --host (repeatable): the name other "
                   "machines use to reach this one when it listens on 0.0.0.0")
    p.add_argument("--no-browser", action="store_true", help="do not open the page in a browser")
    p.add_argument("--cache-dir", help="where run indexes are kept (default ~/.cache/toolgym/view)")
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                   help="how often run directories are checked for changes (default 1)")
    p.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ValueError("toolgym view needs starlette and uvicorn: pip install -e '.[view]'") from None
    from toolgym.views.web.app import ViewSettings, serve
    from toolgym.views.web.index import default_cache_dir

    dirs = [Path(d) for d in args.dirs] or [Path("runs") if Path("runs").is_dir() else Path(".")]
    settings = ViewSettings(
        host=args.host, port=args.port, token=args.token, poll_s=args.poll,
        cache_dir=Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
        allowed_hosts=tuple(args.allow_host),
    )
    settings.check()
    if args.host in ("0.0.0.0", "::") and not args.allow_host:
        print(f"toolgym view: listening on every address, but only requests naming this machine as localhost are "
              f"answered: give --allow-host NAME for each name or address other machines use (--host {args.host} "
              "accepts no Host header by itself, against DNS rebinding)", file=sys.stderr)

    def ready(url: str) -> None:
        print(f"toolgym view: {url} (Ctrl-C stops)", flush=True)

    try:
        serve(dirs, settings, open_browser=not args.no_browser, ready=ready)
    except KeyboardInterrupt:
        pass
    print("toolgym view: stopped", file=sys.stderr)
    return 0

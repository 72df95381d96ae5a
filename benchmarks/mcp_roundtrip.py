"""Per-call round trip of a tool call over MCP versus an in-process call.

Four ways to make one ``typewriter_26`` (or counter) tool call, each timed call by call:

* in-process: ``Environment.call`` on a reset environment (what the in-process agents pay);
* served over stdio: ``toolgym serve --transport stdio`` driven by the ``mcp`` client SDK
  (JSON-RPC over pipes; the server validates, executes and records the step);
* served over streamable HTTP: ``toolgym serve --transport http`` on a loopback port;
* consumed: ``--env mcp:"python tests/mcpio/counter_server.py"``, the environment toolgym makes
  of an outside stdio server, called synchronously like any environment (client SDK on a
  background event loop; the server is FastMCP).

Usage: python benchmarks/mcp_roundtrip.py [--calls 1000] [--repeats 3]
Prints a Markdown table for BENCHMARKS.md (median and 95th percentile per call, best repeat).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from toolgym.plugins import get_benchmark  # noqa: E402
from toolgym.records import Example  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
EXAMPLE = Example(id="bench", input="abc")


def summary(times: list[float]) -> tuple[float, float]:
    """(median, 95th percentile) in microseconds."""
    ordered = sorted(times)
    return statistics.median(ordered) * 1e6, ordered[int(0.95 * (len(ordered) - 1))] * 1e6


def in_process(calls: int) -> list[float]:
    env = get_benchmark("typewriter_26").environment()
    env.reset(EXAMPLE)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        env.call("a", {})
        times.append(time.perf_counter() - start)
    return times


async def timed_calls(session: ClientSession, calls: int) -> list[float]:
    await session.call_tool("start_episode", {})
    for _ in range(20):  # warm-up
        await session.call_tool("a", {})
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await session.call_tool("a", {})
        times.append(time.perf_counter() - start)
    await session.call_tool("end_episode", {"answer": ""})
    return times


def served_stdio(calls: int, out: Path) -> list[float]:
    async def main() -> list[float]:
        params = StdioServerParameters(
            command=sys.executable, args=[str(ROOT / "run_agent.py"), "serve", "--env", "typewriter_26", "--out", str(out)],
            env=ENV,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await timed_calls(session, calls)

    return asyncio.run(main())


def served_http(calls: int, out: Path) -> list[float]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_agent.py"), "serve", "--env", "typewriter_26", "--out", str(out),
         "--transport", "http", "--port", "0"], env=ENV, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = re.search(r"listening on (http://\S+)", proc.stderr.readline()).group(1)

        async def main() -> list[float]:
            async with streamable_http_client(url) as (read, write, _), ClientSession(read, write) as session:
                await session.initialize()
                return await timed_calls(session, calls)

        return asyncio.run(main())
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def consumed_stdio(calls: int) -> list[float]:
    env = get_benchmark(f"mcp:{sys.executable} {ROOT / 'tests' / 'mcpio' / 'counter_server.py'}").environment()
    env.reset(EXAMPLE)
    try:
        for _ in range(20):
            env.call("read", {})
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            env.call("read", {})
            times.append(time.perf_counter() - start)
        return times
    finally:
        env.close()


def best(repeats: int, measure: Callable[[], list[float]]) -> tuple[float, float]:
    """The repeat with the lowest median."""
    return min((summary(measure()) for _ in range(repeats)), key=lambda r: r[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows: list[tuple[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = iter(range(10_000))
        rows.append(("in-process `Environment.call` (typewriter_26)", best(args.repeats, lambda: in_process(args.calls))))
        rows.append(("`toolgym serve --transport stdio` (typewriter_26)",
                     best(args.repeats, lambda: served_stdio(args.calls, Path(tmp) / f"s{next(runs)}"))))
        rows.append(("`toolgym serve --transport http` (typewriter_26)",
                     best(args.repeats, lambda: served_http(args.calls, Path(tmp) / f"h{next(runs)}"))))
        rows.append(("`--env mcp:` environment, stdio FastMCP server (counter `read`)",
                     best(args.repeats, lambda: consumed_stdio(args.calls))))
    base = rows[0][1][0]
    print(f"{args.calls} sequential calls per repeat, best of {args.repeats} repeats (lowest median)\n")
    print("| path | median (µs/call) | p95 (µs/call) | median / in-process |")
    print("|---|---:|---:|---:|")
    for name, (median, p95) in rows:
        print(f"| {name} | {median:,.1f} | {p95:,.1f} | {median / base:,.0f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

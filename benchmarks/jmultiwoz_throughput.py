"""Benchmark: generation throughput of the harness on JMultiWOZ-TC against a loopback
OpenAI-compatible stub server.

Targets (issue "JMultiWOZ-TC replay"): with a stub that answers after a fixed 100 ms, 31,303
turns at concurrency 64 take at most 1.25 × the ideal 31,303 × 0.1 s / 64 (= 48.9 s, so at most
61.1 s); with a stub that answers at once, the harness sustains at least 300 turns/s.

The stub is a minimal HTTP/1.1 server (stdlib asyncio, keep-alive) in a separate process on
127.0.0.1, so that it does not share the harness's interpreter lock. It answers
``POST /v1/chat/completions`` with the gold calls of the turn whose history it receives (looked
up by a digest of the messages), so the run is also checked end to end: every turn is right
except those whose history is also the history of an earlier turn with other gold calls (13
of the 31,303; they get that turn's answer); the stub counts them and the script compares.

The harness is the real one: ``toolgym.runner.run`` with the ``tool_calling`` agent, the
``jmultiwoz_tc`` environment, the trajectory file, the final grading and the export of the published
files. The model is the
``openai-compatible`` provider a user would run (``--model openai-compatible:stub --base-url
<stub>``: toolgym's ``ChatOpenAI`` with retries, per-attempt timeout and the SDK's aiohttp
transport). Generation time is the wall time of the episodes
(dataset loading and grading excluded), timed around ``toolgym.runner.play_all`` (or
``play_in_processes`` with ``--workers``), with the CPU time of the harness process and its
workers over the same span, and the stub's CPU time apart.

Usage:
    python benchmarks/jmultiwoz_throughput.py [--delay 0.1] [--concurrency 64] [--limit N]
    python benchmarks/jmultiwoz_throughput.py --delay 0           # the "answers at once" case
    python benchmarks/jmultiwoz_throughput.py --workers 2         # two harness processes
    python benchmarks/jmultiwoz_throughput.py --stock             # baseline: stock ChatOpenAI
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT = ROOT.parent / "shared" / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"


# --- the stub server (runs in its own process: --serve) ----------------------------------------
def digest(messages: list[dict[str, Any]]) -> str:
    """Key of a chat history: role and text of every message."""
    h = hashlib.sha1()
    for m in messages:
        h.update(str(m.get("role")).encode() + b"\0" + str(m.get("content") or "").encode() + b"\1")
    return h.hexdigest()


def completion(calls: list[dict[str, Any]], n: int) -> bytes:
    """An OpenAI chat.completion answering with ``calls`` (or a short text when empty)."""
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else "承知しました。"}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for i, c in enumerate(calls)
        ]
    body = {
        "id": f"chatcmpl-stub-{n}", "object": "chat.completion", "created": 0, "model": "stub",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
    return json.dumps(body, ensure_ascii=False).encode()


async def serve(port_file: Path, dataset: str, delay: float, limit: int | None) -> None:
    """Serve until killed; once listening, write to ``port_file`` the bound port and the
    number of the first ``limit`` turns the stub must answer wrongly (their history is also
    the history of an earlier turn with other gold calls)."""
    from toolgym.data import load_examples
    from toolgym.plugins import get_benchmark

    answers: dict[str, list[dict[str, Any]]] = {}
    shadowed = 0
    for i, ex in enumerate(load_examples(dataset, get_benchmark("jmultiwoz_tc"))):
        calls = [c.model_dump() for c in ex.expected_calls]
        first = answers.setdefault(digest(ex.input), calls)
        if limit is None or i < limit:
            shadowed += sorted(map(canonical, first)) != sorted(map(canonical, calls))
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                path = request_line.split(" ")[1]
                if path.endswith("/chat/completions"):
                    payload = json.loads(body)
                    calls = answers.get(digest(payload["messages"]), [])
                    if delay:
                        await asyncio.sleep(delay)
                    served += 1
                    out, status = completion(calls, served), "200 OK"
                else:
                    out, status = b'{"error": {"message": "not found"}}', "404 Not Found"
                writer.write(
                    f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(out)}\r\n\r\n".encode()
                    + out
                )
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{port} {shadowed}")
    tmp.replace(port_file)  # the reader never sees half of it
    async with server:
        await server.serve_forever()


def canonical(call: dict[str, Any]) -> str:
    return json.dumps(call, sort_keys=True, ensure_ascii=False)


def start_stub(dataset: str, delay: float, limit: int | None = None) -> tuple[subprocess.Popen, int, int]:
    """Start the stub process and wait until it listens."""
    port_file = Path(tempfile.mkstemp(prefix="stub-port-")[1])
    port_file.write_text("")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), "--dataset", dataset, "--delay", str(delay)]
        + (["--limit", str(limit)] if limit else []),
        cwd=ROOT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = port_file.read_text().strip()
        if text:
            port, shadowed = map(int, text.split())
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            port_file.unlink()
            return proc, port, shadowed
        if proc.poll() is not None:
            raise RuntimeError("stub server exited")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("stub server did not start")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a running process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the harness ---------------------------------------------------------------------------
def run_harness(
    dataset: str, port: int, concurrency: int, limit: int | None, out: Path, workers: int = 1, stock: bool = False
) -> dict[str, Any]:
    """One real run through ``toolgym.runner.run``; returns timings and the five rows."""
    from toolgym.providers import ModelSettings
    from toolgym.runner import RunConfig, run
    from toolgym.runner import play as runner  # where the local executor finds play_all

    settings = ModelSettings(timeout_s=60, max_retries=2)
    settings.extra["base_url"] = f"http://127.0.0.1:{port}/v1"
    model = "openai-compatible:stub"
    if stock:  # the baseline: langchain-openai's ChatOpenAI as it comes (SDK transform, httpx)
        from langchain_openai import ChatOpenAI

        from toolgym.providers import register_provider

        @register_provider("stock-chatopenai")
        def stock_chatopenai(name: str, settings: ModelSettings) -> ChatOpenAI:
            return ChatOpenAI(model=name, base_url=settings.extra["base_url"], api_key="stub", timeout=60, max_retries=2)

        model = "stock-chatopenai:stub"
    config = RunConfig(env="jmultiwoz_tc", out=out, model=model, dataset=dataset,
                       limit=limit, concurrency=concurrency, workers=workers, settings=settings)
    generation: dict[str, float] = {}

    def cpu_now() -> float:  # this process and its finished (joined) worker processes
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    name = "play_in_processes" if workers > 1 else "play_all"
    original = getattr(runner, name)

    @contextlib.contextmanager
    def timed() -> Iterator[None]:  # times exactly the generation phase
        cpu0, wall0 = cpu_now(), time.perf_counter()
        try:
            yield
        finally:
            generation.update(cpu=cpu_now() - cpu0, wall=time.perf_counter() - wall0)

    def timed_processes(*args: Any, **kwargs: Any) -> None:
        with timed():
            original(*args, **kwargs)

    async def timed_play_all(*args: Any, **kwargs: Any) -> None:
        with timed():
            await original(*args, **kwargs)

    setattr(runner, name, timed_processes if workers > 1 else timed_play_all)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        run(config, progress=False)
    finally:
        setattr(runner, name, original)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    info = json.loads((out / "run.json").read_text())
    (score_file,) = out.glob("score_*.json")
    rows = [json.loads(x) for x in score_file.read_text().splitlines()]
    with open(out / "trajectories.jsonl", encoding="utf-8") as fh:
        trajectories = sum(1 for _ in fh)
    return {"generation_s": generation["wall"], "generation_cpu_s": generation["cpu"], "total_s": wall, "cpu_s": cpu,
            "turns": info["dataset"]["n_examples"], "trajectories": trajectories, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(DEFAULT))
    parser.add_argument("--delay", type=float, default=0.1, help="stub answer delay in seconds")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--limit", type=int, help="only the first N turns")
    parser.add_argument("--workers", type=int, default=1, help="harness worker processes (run --workers)")
    parser.add_argument("--stock", action="store_true", help="baseline: langchain-openai's ChatOpenAI as it comes")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        asyncio.run(serve(Path(args.serve), args.dataset, args.delay, args.limit))
        return 0

    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    proc, port, shadowed = start_stub(args.dataset, args.delay, args.limit)
    stub_cpu0 = process_cpu_s(proc.pid)  # after loading its answers
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_harness(args.dataset, port, args.concurrency, args.limit, Path(tmp) / "run", args.workers, args.stock)
        stub_cpu = process_cpu_s(proc.pid) - stub_cpu0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    n = result["turns"]
    rate = n / result["generation_s"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"model: {'stock ChatOpenAI' if args.stock else 'openai-compatible'}  turns: {n}  concurrency: {args.concurrency}  workers: {args.workers}  "
          f"stub delay: {args.delay * 1000:.0f} ms  load average before: {load_before}, after: {load}")
    print(f"generation: {result['generation_s']:.1f} s = {rate:.0f} turns/s; harness CPU in generation "
          f"{result['generation_cpu_s']:.1f} s = {result['generation_cpu_s'] / n * 1000:.2f} ms/turn "
          f"(whole run incl. loading and grading: {result['total_s']:.1f} s); stub server CPU "
          f"{stub_cpu:.1f} s = {stub_cpu / n * 1000:.2f} ms/turn")
    for row in result["rows"]:
        print("  ", json.dumps(row, ensure_ascii=False))
    correct = result["rows"][0]["正解数"]
    print(f"end to end: {correct} of {n} turns right; expected {n - shadowed} ({shadowed} turns share their history "
          f"with an earlier turn whose gold differs, and get its answer): {'ok' if correct == n - shadowed else 'MISMATCH'}")
    if args.delay > 0:
        ideal = n * args.delay / args.concurrency
        ratio = result["generation_s"] / ideal
        met = ratio <= 1.25
        print(f"ideal {ideal:.1f} s; ratio {ratio:.2f} (target <= 1.25): {'met' if met else 'NOT met'}")
    else:
        met = rate >= 300
        print(f"target >= 300 turns/s: {'met' if met else 'NOT met'}")
    return 0 if met and correct == n - shadowed else 1


if __name__ == "__main__":
    sys.exit(main())

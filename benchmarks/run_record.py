"""Benchmark: the run record of an ordinary run of 10,000 episodes (size on disk and time).

Generates a typewriter_1 data set (``--examples`` strings of 1 to 8 letters) and a scripted
model that types every string (every fifth one wrongly, every seventh stops one letter early,
so that failed and partial scores are recorded too), then runs, in fresh processes,
``--repeat`` times each:

    python run_agent.py run --env typewriter_1 --model scripted:SCRIPT --dataset DATA --out DIR --no-progress
    python run_agent.py grade DIR

and reports the minimum and median wall time, peak resident memory (the command's own
``ru_maxrss``, from ``wait4``) and the size of each file of the run directory.

Usage: python benchmarks/run_record.py [--examples 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    """The data set and the model script of the benchmark, in ``folder``."""
    rng = random.Random(24)
    texts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1 + i % 8)) for i in range(n)]
    dataset = folder / "typewriter_10k.jsonl"
    with open(dataset, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": f"tw-{i}", "input": text, "expected_steps": ["type_letter"] * len(text),
                                 "reference": text, "expected_state": {"paper": text},
                                 "metadata": {"n_steps": len(text)}}) + "\n")
    by_input: dict[str, list] = {}
    for i, text in enumerate(sorted(set(texts))):
        typed = text
        if i % 5 == 0:
            typed = text[:-1] + ("x" if text[-1] != "x" else "y")
        elif i % 7 == 0 and len(text) > 1:
            typed = text[:-1]
        turns: list = [{"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": c}}]} for c in typed]
        by_input[text] = [*turns, f"Typed {typed}."]
    script = folder / "script.json"
    script.write_text(json.dumps({"by_input": by_input}), encoding="utf-8")
    return dataset, script


def timed(command: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of ``command`` in a fresh process.

    Raises:
        RuntimeError: with the command's output when it fails.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise RuntimeError(f"{command[2:4]} failed: {err.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        dataset, script = write_inputs(tmp, args.examples)
        cli = [sys.executable, str(ROOT / "run_agent.py")]
        runs: dict[str, list[tuple[float, float]]] = {"run": [], "grade DIR": []}
        for r in range(args.repeat):
            out = tmp / f"out{r}"
            runs["run"].append(timed([*cli, "run", "--env", "typewriter_1", "--model", f"scripted:{script}",
                                      "--dataset", str(dataset), "--out", str(out), "--no-progress"]))
            runs["grade DIR"].append(timed([*cli, "grade", str(out)]))
        out = tmp / "out0"
        sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
        lines = sum(1 for _ in open(out / "trajectories.jsonl", encoding="utf-8"))
    print(f"{args.examples} examples, {lines} trajectories; {args.repeat} runs each, "
          f"load average now {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| command | wall min (s) | wall median (s) | peak RSS (MB) |")
    print("|---|---:|---:|---:|")
    for name, values in runs.items():
        walls, peaks = zip(*values, strict=True)
        print(f"| {name} | {min(walls):.2f} | {statistics.median(walls):.2f} | {max(peaks):.0f} |")
    print("\n| file | bytes |")
    print("|---|---:|")
    for name, size in sizes.items():
        print(f"| {name} | {size:,} |")
    print(f"| run directory | {sum(sizes.values()):,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

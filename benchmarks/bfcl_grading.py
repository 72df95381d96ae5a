"""Benchmark: grading result files of all 13 BFCL v4 single-turn categories (3,641 entries).

For each category, builds a result file from the oracle's answers with deterministic mistakes
of the kinds the checker handles (a wrong value, a dropped argument, an extra call, the answer
as a prompting-format string, text instead of a call, arguments as a JSON string), then runs the
real command

    python run_agent.py grade --env bfcl --result RESULT --dataset BFCL_v4_<category>.json --out DIR

in a fresh process, several times, and reports per category the median wall time and the peak
resident memory (the command's own ``ru_maxrss``, from ``wait4``), the size of the run
directory, and the checker alone (the
official verdict on every line, in this process, without reading or writing run files).

Usage: python benchmarks/bfcl_grading.py [--data DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT = ROOT.parent / "shared" / "data" / "bfcl_v4"


def perturb(i: int, calls: list[dict], text: str) -> object:
    """A result line's ``result`` for the oracle's ``calls``; the kind of mistake depends on ``i``."""
    if i % 11 == 0:
        return text  # the answer as the prompting format writes it
    if i % 13 == 0:
        return "I cannot help with that."
    if i % 7 == 0 and calls:
        name, args = next(iter(calls[0].items()))
        return [{name: json.dumps(args)}] + calls[1:]  # arguments as a JSON string
    if i % 5 == 0 and calls:
        name, args = next(iter(calls[0].items()))
        if args:
            key = next(iter(args))
            value = args[key]
            args = {**args, key: value + "x" if isinstance(value, str) else 12345}
        return [{name: args}] + calls[1:]
    if i % 3 == 0 and calls:
        return calls + calls[:1]
    return calls


def as_text(calls: list[dict]) -> str:
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for c in calls for n, a in c.items()) + "]"


def write_result(path: Path, category_file: Path) -> int:
    from toolgym.suites.bfcl.data import load_examples

    examples = load_examples(category_file, {})
    with open(path, "w", encoding="utf-8") as fh:
        for i, ex in enumerate(examples):
            calls = [{c.name: dict(c.arguments)} for c in ex.expected_calls or []]
            fh.write(json.dumps({"id": ex.id, "result": perturb(i, calls, as_text(calls))}) + "\n")
    return len(examples)


def run_grade(result: Path, dataset: Path, out: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (kB) of one ``grade --result`` command."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_agent.py"), "grade", "--env", "bfcl", "--result", str(result),
         "--dataset", str(dataset), "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"grade failed on {result}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DEFAULT))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from toolgym.suites.bfcl.checker import check
    from toolgym.suites.bfcl.data import CATEGORIES, entries_of, load_examples

    data = Path(args.data)
    rows, total_wall, total_entries, total_check, total_size = [], 0.0, 0, 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for category in CATEGORIES:
            dataset = data / f"BFCL_v4_{category}.json"
            result = Path(tmp) / f"BFCL_v4_{category}_result.json"
            n = write_result(result, dataset)
            walls, rss = [], []
            for r in range(args.repeat):
                wall, peak = run_grade(result, dataset, Path(tmp) / f"out-{category}-{r}")
                walls.append(wall)
                rss.append(peak)
            entries = entries_of(load_examples(dataset, {}))
            lines = [json.loads(x) for x in result.read_text().splitlines()]
            start = time.perf_counter()
            correct = sum(check(entries[line["id"]], line["result"]).valid for line in lines)
            checker = time.perf_counter() - start
            out0 = Path(tmp) / f"out-{category}-0"
            size = sum(p.stat().st_size for p in out0.iterdir() if p.is_file())
            score = json.loads((out0 / f"BFCL_v4_{category}_score.json").read_text().splitlines()[0])
            assert score["correct_count"] == correct, (category, score, correct)
            med = statistics.median(walls)
            rows.append((category, n, med, max(walls), max(rss) / 1024, checker * 1000, score["accuracy"], size))
            total_wall += med
            total_size += size
            total_entries += n
            total_check += checker
    print("| category | entries | grade --result wall, median (max) | peak RSS | checker alone | accuracy of the perturbed file | run directory |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for category, n, med, worst, mb, ms, acc, size in rows:
        print(f"| {category} | {n} | {med:.2f} s ({worst:.2f} s) | {mb:.0f} MB | {ms:.1f} ms | {acc:.3f} | {size:,} B |")
    print(f"| all 13 | {total_entries} | {total_wall:.2f} s (sum of medians) | | {total_check * 1000:.1f} ms | | {total_size:,} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

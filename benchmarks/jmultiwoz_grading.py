"""Benchmark: grading a JMultiWOZ-TC result file of all 31,303 turns (target: at most 3 s and
400 MB peak memory).

Builds a result file from the gold with deterministic mistakes of every kind the grader
handles (missed and extra calls, full-width digits, reordered keys, JSON-string arguments,
malformed arguments, unknown tools, model errors), then runs the real command

    python run_agent.py grade --env jmultiwoz_tc --result RESULT --dataset DATASET --out DIR

in a fresh process, several times, and reports wall time and peak resident memory (the
command's own ``ru_maxrss``, from ``wait4``), plus the in-process time of import, grading and
export without interpreter start-up.

Usage: python benchmarks/jmultiwoz_grading.py [--dataset PATH] [--repeat 3]
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
DEFAULT = ROOT.parent / "shared" / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"

FULL = str.maketrans("0123456789()", "０１２３４５６７８９（）")


def perturb(i: int, example) -> dict:
    """A predicted result line for the gold of ``example``; the kind of mistake depends on ``i``."""
    calls = [c.model_dump() for c in example.expected_calls]
    record = {"data_id": example.id, "dialogue_id": example.metadata["dialogue_id"]}
    if i % 50 == 0:
        return record | {"tool_calls": [], "error": "TimeoutError"}
    if i % 7 == 0:
        calls = []  # abstains
    elif i % 11 == 0 and calls:
        c = calls[0]
        args = {k: v.translate(FULL) if isinstance(v, str) else str(v) for k, v in reversed(c["arguments"].items())}
        calls[0] = {"name": c["name"], "arguments": args}  # full-width, integers as strings
    elif i % 13 == 0:
        calls = calls + [{"name": "Search_weather", "arguments": {"city": "東京"}}] * 2
    elif i % 17 == 0 and calls:
        calls[0] = {"name": calls[0]["name"], "arguments": "{not json"}
    elif i % 19 == 0:
        calls = [{"name": "Search_hotels", "arguments": {"city": "大阪"}}]
    elif i % 23 == 0 and calls:
        calls = [{"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}} for c in calls]
    return record | {"tool_calls": calls}


def write_result(dataset: str, result: Path) -> int:
    """Write the result file of the benchmark; returns the number of turns."""
    from toolgym.suites.jmultiwoz_tc.data import load_examples

    examples = load_examples(dataset)
    with open(result, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(perturb(i, ex), ensure_ascii=False) + "\n" for i, ex in enumerate(examples))
    return len(examples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(DEFAULT))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-result", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_result:
        print(write_result(args.dataset, Path(args.write_result)))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        # Everything that loads the data runs after the command's runs or in a child: a command
        # started from a large process would report that process's size as its own peak RSS
        # (the child shares its pages until it executes the command).
        result = Path(tmp) / "result_bench-model.jsonl"
        made = subprocess.run([sys.executable, __file__, "--dataset", args.dataset, "--write-result", str(result)],
                              capture_output=True, text=True, check=True)
        print(f"result file: {made.stdout.strip()} turns, {result.stat().st_size / 1e6:.1f} MB")

        command = [sys.executable, str(ROOT / "run_agent.py"), "grade", "--env", "jmultiwoz_tc",
                   "--result", str(result), "--dataset", args.dataset, "--out", str(Path(tmp) / "out")]
        walls, cpus, peaks = [], [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            with tempfile.TemporaryFile() as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
                _, status, usage = os.wait4(proc.pid, 0)  # this command's usage (and its children's) only
                proc.returncode = code = os.waitstatus_to_exitcode(status)
                out.seek(0)
                output = out.read().decode()
            walls.append(time.perf_counter() - start)
            if code:
                print(output)
                return 1
            cpus.append(usage.ru_utime + usage.ru_stime)
            peaks.append(usage.ru_maxrss / 1024)
        rows = [json.loads(x) for x in (Path(tmp) / "out" / "score_bench-model.json").read_text().splitlines()]

        from toolgym import load_run
        from toolgym.runner import import_results
        from toolgym.suites.jmultiwoz_tc import SUITE

        start = time.perf_counter()
        import_results("jmultiwoz_tc", result, args.dataset, Path(tmp) / "inproc")
        inproc = time.perf_counter() - start
        tables = SUITE.benchmarks[0].report(load_run(Path(tmp) / "inproc"))
    for row in rows:
        print("  ", json.dumps(row, ensure_ascii=False))
    print("lenient columns:", json.dumps(tables[1].rows[0], ensure_ascii=False))
    print(f"in-process import, grading and export: {inproc:.2f} s wall")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CLI (fresh process, {args.repeat} runs, load average {load}): wall median {statistics.median(walls):.2f} s, "
          f"max {max(walls):.2f} s; CPU (user+sys) median {statistics.median(cpus):.2f} s; peak RSS {max(peaks):.0f} MB")
    ok = max(walls) <= 3.0 and max(peaks) <= 400
    print("target (<= 3 s, <= 400 MB):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: grading BFCL's four multi-turn categories (800 conversations) beside the official
checker, and toolgym's stepwise view checked against it on planted faults.

Needs the leaderboard's package: ``pip install --no-deps bfcl-eval==2026.3.23 mpmath``.

For each category, two result files in the checker's decoded form (``{"id", "result": per
turn, per step, a list of call strings}``): the ground truth itself (the oracle's answer), and
the ground truth with one planted fault per entry (cycling through: a dropped call, an emptied
turn, a repeated step, an extra read, a wrong string argument, two adjacent turns swapped; the
generator of ``tests/suites/bfcl/test_bfcl_multi_turn.py``). Each file is graded by the real
command

    python run_agent.py grade --env bfcl --result BFCL_v4_<category>_result.json --dataset <category> --out DIR

in a fresh process, ``--repeat`` times (median and maximum wall time, peak RSS from ``wait4``);
beside it, in this process, the package's ``multi_turn_checker`` alone on the same lines, as
the leaderboard's runner calls it (its correct count is asserted equal to the score file's).

``--agreement`` also replays every entry with every planted fault (about 5,500 results) and
counts where toolgym's stepwise view names another error type than the official checker.

Usage: python benchmarks/bfcl_multi_turn.py [--repeat 3] [--agreement]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("drop", "empty_turn", "repeat", "extra_read", "wrong_argument", "swapped_turns")


def run_grade(result: Path, category: str, out: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (kB) of one ``grade --result`` command."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_agent.py"), "grade", "--env", "bfcl", "--result", str(result),
         "--dataset", category, "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"grade failed on {result}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss


def official_alone(entries: dict[str, dict], truths: dict[str, list], lines: list[dict], tag: str) -> int:
    """Correct count of the package's multi_turn_checker on the lines, with the runner's two
    rules before it (not a list; another number of turns). ``tag`` makes the model names
    unique: the checker keeps each entry's instances in its module's globals under the model
    name and entry id, so a second file graded under the same name would continue from the
    first file's states."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    correct = 0
    for i, line in enumerate(lines):
        truth, result = truths[line["id"]], line["result"]
        if not isinstance(result, list) or len(result) != len(truth):
            continue
        decoded = [[s for s in turn if s] for turn in result]
        entry = entries[line["id"]]
        verdict = multi_turn_checker(decoded, truth, copy.deepcopy(entry), entry["id"].rsplit("_", 1)[0], f"bench_{tag}_{i}")
        correct += bool(verdict["valid"])
    return correct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--agreement", action="store_true")
    args = parser.parse_args()
    from tests.suites.bfcl.test_bfcl_multi_turn import planted, reference_verdict
    from toolgym.suites.bfcl import multi_turn as mt

    data = mt.category_path("multi_turn_base").parent
    table = []
    agree, disagree = Counter(), Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for category in mt.MULTI_TURN_CATEGORIES:
            entries = {r["id"]: r for r in map(json.loads, (data / f"BFCL_v4_{category}.json").read_text().splitlines())}
            truths = {r["id"]: r["ground_truth"] for r in map(
                json.loads, (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines())}
            rng = random.Random(0)
            files = {"ground truth": [], "one planted fault per entry": []}
            for i, (entry_id, entry) in enumerate(entries.items()):
                faults = planted(entry, truths[entry_id], rng)
                files["ground truth"].append({"id": entry_id, "result": faults["none"]})
                kind = KINDS[i % len(KINDS)]
                files["one planted fault per entry"].append({"id": entry_id, "result": faults.get(kind, faults["none"])})
                if args.agreement:
                    for name, result in faults.items():
                        want = reference_verdict(entry, result, truths[entry_id], f"agree_{category}_{i}_{name}")
                        got = mt.stepwise(entry, result, truths[entry_id]).error_type
                        if got == want:
                            agree[name] += 1
                        else:
                            disagree[name, want, got] += 1
            for label, lines in files.items():
                folder = Path(tmp) / category / label.replace(" ", "_")
                folder.mkdir(parents=True)
                result = folder / f"BFCL_v4_{category}_result.json"
                result.write_text("".join(json.dumps(line) + "\n" for line in lines))
                walls, rss = [], []
                for r in range(args.repeat):
                    wall, peak = run_grade(result, category, folder / f"out{r}")
                    walls.append(wall)
                    rss.append(peak)
                start = time.perf_counter()
                correct = official_alone(entries, truths, lines, f"{category}_{label.replace(' ', '_')}")
                alone = time.perf_counter() - start
                score = json.loads((folder / "out0" / f"BFCL_v4_{category}_score.json").read_text().splitlines()[0])
                assert score["correct_count"] == correct, (category, label, score, correct)
                table.append((category, label, len(lines), statistics.median(walls), max(walls), max(rss) / 1024,
                              alone, score["accuracy"]))
    print("| category | result file | entries | grade --result wall, median (max) | peak RSS | official checker alone | accuracy |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for category, label, n, med, worst, mb, alone, acc in table:
        print(f"| {category} | {label} | {n} | {med:.2f} s ({worst:.2f} s) | {mb:.0f} MB | {alone:.2f} s | {acc:.3f} |")
    for label in ("ground truth", "one planted fault per entry"):
        rows = [t for t in table if t[1] == label]
        print(f"| all 4 | {label} | {sum(t[2] for t in rows)} | {sum(t[3] for t in rows):.2f} s (sum of medians) | "
              f"| {sum(t[6] for t in rows):.2f} s | |")
    if args.agreement:
        print(f"\nstepwise view vs official checker: {sum(agree.values())} agree "
              f"({', '.join(f'{k} {v}' for k, v in sorted(agree.items()))}); {sum(disagree.values())} disagree")
        for key, n in disagree.most_common():
            print(f"  {key}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: how large a run directory would be under other record layouts (issue 24's size
target, under 16 MB for the 31,303-turn JMultiWOZ-TC import).

Reads a run directory as written, re-encodes its record lines as the run writes them
(compact JSON, one line each, by orjson) and reports the size of the directory under each
combination of four candidate changes, none of which toolgym makes (run directory version 4
already leaves out an imported trajectory's origin, which a version-3 directory holds):

* ``T1`` run constants: a trajectory line leaves out ``env``, ``agent`` and ``model`` when
  they equal ``run.json``'s (a reader would fill them back from it);
* ``S1`` one score line per trajectory: ``{"example_id", "trial", "scores": {grader: rest}}``
  instead of one line per score;
* ``S2`` passing scores without an explanation (a score that passes by its grader's measure
  in ``run.json`` keeps its value and its kept details only);
* ``E1`` no wrong-turn list: the exported ``incorrect_<model>.json`` is not written.

The first line printed checks the method: the lines re-encoded without any change must have
the size of the files as written.

Usage:
    python benchmarks/record_layouts.py RUN_DIR
    python benchmarks/record_layouts.py --jmultiwoz DATASET     # imports the benchmark's
                                                                # 31,303-turn result file first
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET = 16_000_000
CHANGES = ("T1", "S1", "S2", "E1")


def _line(obj: dict) -> int:
    return len(orjson.dumps(obj)) + 1


def _trajectory_size(lines: list[dict], run: dict, t1: bool) -> int:
    agent = (run.get("agent") or {}).get("agent")
    total = 0
    for line in lines:
        if t1:
            line = dict(line)
            for key, value in (("env", run.get("env")), ("agent", agent), ("model", run.get("model"))):
                if key in line and line[key] == value:
                    del line[key]
        total += _line(line)
    return total


def _score_size(lines: list[dict], passes: Callable[[dict], bool], s1: bool, s2: bool) -> int:
    if s2:
        lines = [{k: v for k, v in s.items() if k != "explanation"} if passes(s) else s for s in lines]
    if not s1:
        return sum(_line(s) for s in lines)
    grouped: dict[tuple[str, int], dict[str, dict]] = {}
    for s in lines:
        rest = {k: v for k, v in s.items() if k not in ("example_id", "trial", "grader")}
        grouped.setdefault((s["example_id"], s.get("trial", 0)), {})[s["grader"]] = rest
    return sum(_line({"example_id": e, **({"trial": t} if t else {}), "scores": g}) for (e, t), g in grouped.items())


def layouts(directory: Path) -> tuple[dict[str, int], list[tuple[tuple[str, ...], int]]]:
    """The sizes of ``directory`` under every combination of :data:`CHANGES`.

    Returns:
        tuple: ``{file: bytes as written}``, and ``[(changes, bytes of the directory)]`` for
        each of the 16 combinations, the empty one first.

    Raises:
        ValueError: when the lines re-encoded without change differ in size from the files
            (the method would not measure the run's own encoding).
    """
    from toolgym.records import Measure

    run = orjson.loads((directory / "run.json").read_bytes())
    measures = {name: Measure.model_validate(m) for name, m in (run.get("measures") or {}).items()}
    files = {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file() and not p.name.startswith(".")}
    trajectories = [orjson.loads(raw) for raw in (directory / "trajectories.jsonl").read_bytes().splitlines() if raw.strip()]
    scores = [orjson.loads(raw) for raw in (directory / "scores.jsonl").read_bytes().splitlines() if raw.strip()]

    def passes(score: dict) -> bool:
        measure = measures.get(score["grader"])
        return measure is not None and score.get("value") is not None and bool(measure.passed(score["value"]))

    as_written = _trajectory_size(trajectories, run, False), _score_size(scores, passes, False, False)
    if as_written != (files["trajectories.jsonl"], files["scores.jsonl"]):
        raise ValueError(f"re-encoded sizes {as_written} differ from the files' "
                         f"({files['trajectories.jsonl']}, {files['scores.jsonl']})")
    wrong_list = sum(size for name, size in files.items() if name.startswith("incorrect_"))
    rest = sum(files.values()) - files["trajectories.jsonl"] - files["scores.jsonl"]
    rows = []
    for picked in itertools.chain.from_iterable(itertools.combinations(CHANGES, k) for k in range(len(CHANGES) + 1)):
        size = (_trajectory_size(trajectories, run, "T1" in picked)
                + _score_size(scores, passes, "S1" in picked, "S2" in picked)
                + rest - (wrong_list if "E1" in picked else 0))
        rows.append((picked, size))
    return files, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", help="a run directory")
    parser.add_argument("--jmultiwoz", metavar="DATASET", help="import the benchmark's JMultiWOZ-TC result file first")
    args = parser.parse_args()
    if bool(args.directory) == bool(args.jmultiwoz):
        parser.error("give a run directory or --jmultiwoz DATASET")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.directory) if args.directory else Path(tmp) / "out"
        if args.jmultiwoz:
            result = Path(tmp) / "result_bench-model.json"
            bench = ROOT / "benchmarks" / "jmultiwoz_grading.py"
            subprocess.run([sys.executable, str(bench), "--dataset", args.jmultiwoz, "--write-result", str(result)],
                           check=True, capture_output=True)
            subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "grade", "--env", "jmultiwoz_tc", "--result",
                            str(result), "--dataset", args.jmultiwoz, "--out", str(directory)],
                           check=True, capture_output=True)
        files, rows = layouts(directory)
    print("| file as written | bytes |\n|---|---:|")
    for name, size in files.items():
        print(f"| {name} | {size:,} |")
    print(f"| run directory | {sum(files.values()):,} |")
    print("\n(the record lines re-encoded without change have the size of the files: checked)\n")
    print("| changes | run directory (bytes) | under 16 MB |\n|---|---:|:---:|")
    for picked, size in sorted(rows, key=lambda r: (len(r[0]), r[1])):
        print(f"| {' + '.join(picked) or 'none (as written)'} | {size:,} | {'yes' if size < TARGET else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: grading a JMultiWOZ-TC result file of all 31,303 turns, side by side with the
published ``evaluate.py`` (target: toolgym at or under 1.0x the published script's time, goal
0.5x; the same five rows).

Builds a result file from the gold with deterministic mistakes of every kind the grader
handles (missed and extra calls, full-width digits, reordered keys, JSON-string arguments,
malformed arguments, unknown tools, model errors), then runs, interleaved, ``--repeat`` times
each, in fresh processes:

    python run_agent.py grade --env jmultiwoz_tc --result RESULT --dataset DATASET --out DIR
    python evaluate.py --result RESULT     (in a directory holding the two extracted data files,
                                            its per-turn output to a file, as its README says)

and reports the minimum and median wall time, CPU time and peak resident memory (each
command's own ``ru_maxrss``, from ``wait4``), whether the five rows are equal, the size of each
file of toolgym's run directory, the in-process time of import, grading and export
without interpreter start-up, and the time merely to decode the lines of the three files.

Usage: python benchmarks/jmultiwoz_grading.py [--dataset PATH] [--published PATH] [--repeat 5]
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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT = ROOT.parent / "shared" / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"
PUBLISHED = ROOT.parent / "shared" / "reference" / "jmultiwoz_tc" / "evaluate.py"

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


def timed(command: list[str], cwd: Path, stdout: Path | None = None) -> tuple[float, float, float]:
    """Run ``command`` once in a fresh process: (wall s, CPU user+sys s, peak RSS MB).

    Raises:
        RuntimeError: with the command's output when it fails.
    """
    # as installed: bytecode cached (a pip install compiles it; PYTHONDONTWRITEBYTECODE, set on
    # some machines, would make toolgym compile its modules on every run; the published script
    # is run as __main__, which Python never caches either way)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryFile() as err, open(stdout or os.devnull, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this command's usage (and its children's) only
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise RuntimeError(f"{command[:3]} failed: {err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def reading_floor(dataset: str, result: Path) -> float:
    """Seconds to decode every line of the two data files and the result file with msgspec,
    building nothing: a floor under any grader that reads them (toolgym's or the published
    script's, which decodes them with the json module)."""
    import msgspec

    decode = msgspec.json.decode
    start = time.perf_counter()
    with zipfile.ZipFile(dataset) as archive:
        for name in ("jmultiwoz_tc_input.json", "jmultiwoz_tc_ground.json"):
            with archive.open(name) as fh:
                for line in fh:
                    if line.strip():
                        decode(line)
    with open(result, "rb") as fh:
        for line in fh:
            if line.strip():
                decode(line)
    return time.perf_counter() - start


def phases(dataset: str, result: Path, out: Path) -> dict[str, float]:
    """Seconds of each pass of ``grade --result`` done one after the other in this process
    (the passes of :func:`toolgym.runner.import_results`, without ``run.json``)."""
    import gc

    from toolgym.data import load_examples
    from toolgym.graders import grader_name
    from toolgym.runio import Run, RunRecord, write_jsonl_atomic
    from toolgym.runner import export, grade_trajectories, make_graders, resolve_benchmark
    from toolgym.stats import summarize

    benchmark, _ = resolve_benchmark("jmultiwoz_tc")
    made = [g for g, _ in make_graders(benchmark, None, {})]
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    gc.collect()
    gc.disable()  # as import_results grades (toolgym.runner.grading._grading_gc)
    try:
        start = time.perf_counter()
        examples = load_examples(Path(dataset), benchmark, {})
        times["read the dataset"] = time.perf_counter() - start
        start = time.perf_counter()
        trajectories = benchmark.importer(result, examples)
        times["read the result file into trajectories"] = time.perf_counter() - start
        start = time.perf_counter()
        write_jsonl_atomic(out / "trajectories.jsonl", trajectories)
        times["write trajectories.jsonl"] = time.perf_counter() - start
        by_id = {ex.id: ex for ex in examples}
        start = time.perf_counter()
        scores = grade_trajectories(by_id, trajectories, made)
        times["grade (three scores a turn)"] = time.perf_counter() - start
        start = time.perf_counter()
        write_jsonl_atomic(out / "scores.jsonl", scores)
        times["write scores.jsonl"] = time.perf_counter() - start
        record = RunRecord(env=benchmark.name, agent={"agent": "imported", "result_file": str(result.resolve())},
                           model=trajectories[0].model, graders=[grader_name(g) for g in made])
        start = time.perf_counter()
        export(benchmark, Run(out, record, trajectories, scores, by_id))
        times["published exports"] = time.perf_counter() - start
        start = time.perf_counter()
        summarize(benchmark.name, trajectories, scores, record.graders)
        times["summary (means, standard errors)"] = time.perf_counter() - start
    finally:
        gc.enable()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(DEFAULT))
    parser.add_argument("--published", default=str(PUBLISHED), help="the published evaluate.py (run beside toolgym)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write-result", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_result:
        print(write_result(args.dataset, Path(args.write_result)))
        return 0

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # Everything that loads the data runs in a child: a command started from a large
        # process would report that process's size as its own peak RSS.
        result = tmp / "result_bench-model.json"
        made = subprocess.run([sys.executable, __file__, "--dataset", args.dataset, "--write-result", str(result)],
                              capture_output=True, text=True, check=True)
        print(f"result file: {made.stdout.strip()} turns, {result.stat().st_size / 1e6:.1f} MB")
        # The published script reads its two files from the working directory and writes
        # score_<name>.json there; it prints one line per turn (to a file here).
        published_dir = tmp / "published"
        published_dir.mkdir()
        with zipfile.ZipFile(args.dataset) as archive:
            for name in ("jmultiwoz_tc_ground.json", "jmultiwoz_tc_input.json"):
                (published_dir / name).write_bytes(archive.read(name))
        commands = {
            "published evaluate.py": ([sys.executable, args.published, "--result", str(result)], published_dir,
                                      tmp / "published.stdout"),
            "toolgym grade": ([sys.executable, str(ROOT / "run_agent.py"), "grade", "--env", "jmultiwoz_tc",
                               "--result", str(result), "--dataset", args.dataset, "--out", str(tmp / "out")],
                              ROOT, None),
        }
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved: both see the same machine
            for name, (command, cwd, stdout) in commands.items():
                runs[name].append(timed(command, cwd, stdout))
        sizes = {p.name: p.stat().st_size for p in sorted((tmp / "out").iterdir()) if p.is_file()}
        ours = (tmp / "out" / "score_bench-model.json").read_text(encoding="utf-8").splitlines()[:5]
        theirs = (published_dir / "score_bench-model.json").read_text(encoding="utf-8").splitlines()[:5]
        same = [json.loads(x) for x in ours] == [json.loads(x) for x in theirs]

        from toolgym import load_run
        from toolgym.runner import import_results
        from toolgym.suites.jmultiwoz_tc import SUITE

        start = time.perf_counter()
        import_results("jmultiwoz_tc", result, args.dataset, tmp / "inproc")
        inproc = time.perf_counter() - start
        tables = SUITE.benchmarks[0].report(load_run(tmp / "inproc"))
        floor = reading_floor(args.dataset, result)
        passes = phases(args.dataset, result, tmp / "phases")
    for row in ours:
        print("  ", row)
    print("the five rows equal the published script's:", same)
    print("lenient columns:", json.dumps(tables[1].rows[0], ensure_ascii=False))
    print(f"in-process import, grading and export: {inproc:.2f} s wall")
    print(f"reading floor (the three files' lines decoded by msgspec, nothing built): {floor:.2f} s wall")
    print("in-process passes, one after the other:", "; ".join(f"{k} {v:.2f} s" for k, v in passes.items()))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nfresh processes, {args.repeat} interleaved runs each, load average now {load}\n")
    print("| command | wall min (s) | wall median (s) | CPU min (s) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|")
    for name, values in runs.items():
        walls, cpus, peaks = zip(*values, strict=True)
        print(f"| {name} | {min(walls):.2f} | {statistics.median(walls):.2f} | {min(cpus):.2f} | {max(peaks):.0f} |")
    print("\n| file of the run directory | bytes |")
    print("|---|---:|")
    for name, size in sizes.items():
        print(f"| {name} | {size:,} |")
    print(f"| run directory (target < 16 MB) | {sum(sizes.values()):,} |")
    ratio = min(w for w, _, _ in runs["toolgym grade"]) / min(w for w, _, _ in runs["published evaluate.py"])
    cpu_ratio = min(c for _, c, _ in runs["toolgym grade"]) / min(c for _, c, _ in runs["published evaluate.py"])
    print(f"\ntoolgym / published, minimum wall: {ratio:.2f}x (target <= 1.0x, goal 0.5x); minimum CPU: {cpu_ratio:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

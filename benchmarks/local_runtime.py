"""The bundled model on two llama.cpp runtimes, side by side: the prebuilt server (xllamacpp,
this checkout) and the compiled llama-cpp-python 0.3.36 that toolgym used before.

Each runtime plays the same inputs through the whole harness, as a user would (``toolgym run``
in its own process): the five first typewriter_1 strings with the tool-calling agent, and
``--xcopa`` XCOPA plus ``--exam`` EXAMS Vietnamese questions by log-likelihood. It reports the
calls made and whether they are the same, the letters chosen, the largest difference between
the two runtimes' log-likelihood of one option, generated tokens per second (model-turn time
only), wall time and the peak resident memory of each run's process. Both run with
``OMP_WAIT_POLICY=passive`` (the new runtime's default) unless the variable is set.

The baseline needs its own virtual environment: llama-cpp-python 0.3.36 (compiled; on a CPU with
AMX, with ``CMAKE_ARGS=-DGGML_NATIVE=OFF``, since the native build crashes there,
ggml-org/llama.cpp#20824) and toolgym at the last commit before the runtime change, installed
with ``pip install -e``:

    git worktree add --detach ../toolgym-before c567b79
    python3 -m venv ../before && ../before/bin/pip install -e ../toolgym-before
    CMAKE_ARGS=-DGGML_NATIVE=OFF ../before/bin/pip install llama-cpp-python==0.3.36

Usage: python benchmarks/local_runtime.py --baseline-python ../before/bin/python
       --baseline-repo ../toolgym-before [--xcopa 30] [--exam 20] [--out runs/bench-runtime]
Prints Markdown tables for BENCHMARKS.md. Both runtimes read the same cached GGUF.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolgym.runio import read_trajectories  # noqa: E402


def play(python: str, repo: Path, args: list[str], out: Path) -> dict:
    """Run ``repo/run_agent.py run ARGS --out OUT`` in a child process; wall seconds and the
    child's peak resident set size (``wait4``'s ``ru_maxrss``, KiB on Linux)."""
    command = [python, str(repo / "run_agent.py"), "run", *args, "--out", str(out), "--no-progress"]
    start = time.perf_counter()
    # both runtimes with the same OpenMP wait policy (toolgym's default since the runtime change)
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
    child = subprocess.Popen(command, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=False, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    stderr = child.stderr.read().decode("utf-8", "replace") if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-2000:]}")
    return {"wall_s": wall, "rss_mib": usage.ru_maxrss / 1024}


def tool_calls(out: Path) -> dict[str, list[str]]:
    """Example id → the calls made, as ``name(arguments)`` strings, then the final answer."""
    found = {}
    for traj in read_trajectories(out):
        calls = [f"{c.name}({c.arguments})" for s in traj.model_steps for c in s.tool_calls]
        found[traj.example_id] = [*calls, f"answer={traj.final_answer!r}"]
    return found


def generation_speed(out: Path) -> float:
    """Generated tokens per second of model-turn time."""
    steps = [s for t in read_trajectories(out) for s in t.model_steps]
    seconds = sum(s.latency_s for s in steps)
    return sum(s.output_tokens or 0 for s in steps) / seconds if seconds else math.nan


def option_scores(out: Path) -> dict[str, dict[str, float]]:
    """Example id → option letter → the option's log-likelihood (sum over its tokens)."""
    found = {}
    for traj in read_trajectories(out):
        choices = traj.final_state.get("choices") or {}
        found[traj.example_id] = {k: math.fsum(v["logprobs"]) for k, v in choices.items()}
    return found


def chosen(scores: dict[str, dict[str, float]]) -> dict[str, str]:
    return {ex: max(opts, key=opts.__getitem__) for ex, opts in scores.items() if opts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-python", required=True, help="python of the llama-cpp-python environment")
    parser.add_argument("--baseline-repo", required=True, type=Path, help="toolgym checkout before the runtime change")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("TOOLGYM_REFERENCE_DATA", ROOT.parent / "shared" / "data")))
    parser.add_argument("--xcopa", type=int, default=30)
    parser.add_argument("--exam", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-runtime")
    parser.add_argument("--reuse", action="store_true",
                        help="read finished runs in --out (with their bench.json) instead of playing them again")
    args = parser.parse_args()
    vi = args.data / "vietnamese"
    runtimes = {"llama-cpp-python 0.3.36 (compiled)": (args.baseline_python, args.baseline_repo.resolve()),
                "xllamacpp (prebuilt)": (sys.executable, ROOT)}
    jobs = {
        "typewriter_1, 5 strings": ["--env", "typewriter_1", "--model", "local", "--limit", "5"],
        f"xcopa_vi, {args.xcopa} questions": ["--env", "xcopa_vi", "--dataset", str(vi / "xcopa_vi" / "test.vi.jsonl"),
                                              "--limit", str(args.xcopa), "--agent", "loglik", "--model", "local"],
        f"exam_vi, {args.exam} questions": ["--env", "exam_vi", "--dataset", str(vi / "exams_vi" / "multilingual_test_vi.jsonl"),
                                            "--limit", str(args.exam), "--agent", "loglik", "--model", "local"],
    }
    measured: dict[tuple[str, str], dict] = {}
    for job, job_args in jobs.items():  # the runtimes alternate, job by job, on the same machine state
        for label, (python, repo) in runtimes.items():
            out = args.out / f"{job.split(',')[0]}-{'new' if repo == ROOT else 'old'}"
            measures = out / "bench.json"
            if args.reuse and measures.exists():
                result = json.loads(measures.read_text())
            elif out.exists():
                raise SystemExit(f"{out} exists: remove it, give another --out, or --reuse it")
            else:
                result = play(python, repo, job_args, out)
                measures.write_text(json.dumps(result))
            result["out"] = out
            measured[job, label] = result
            print(f"{job} / {label}: {result['wall_s']:.0f} s", file=sys.stderr, flush=True)

    old, new = runtimes
    print("| job | runtime | wall time | peak RSS | generated tok/s |")
    print("|---|---|---|---|---|")
    for (job, label), r in measured.items():
        speed = generation_speed(r["out"]) if job.startswith("typewriter") else math.nan
        speed_text = f"{speed:.1f}" if not math.isnan(speed) else "—"
        rss = f"{r['rss_mib']:.0f} MiB" if r.get("rss_mib") is not None else "not recorded"
        print(f"| {job} | {label} | {r['wall_s']:.0f} s | {rss} | {speed_text} |")
    print()
    job = next(iter(jobs))
    calls_old, calls_new = tool_calls(measured[job, old]["out"]), tool_calls(measured[job, new]["out"])
    same = sum(calls_old[e] == calls_new.get(e) for e in calls_old)
    print(f"Typewriter: {same} of {len(calls_old)} episodes made the same calls and final answer on both runtimes.")
    print()
    print("| example | calls and answer, old | calls and answer, new |")
    print("|---|---|---|")
    for example in sorted(calls_old):
        print(f"| {example} | {'; '.join(calls_old[example])} | {'; '.join(calls_new.get(example, []))} |")
    print()
    print("| questions | same letter chosen | largest option difference (nats) | median difference |")
    print("|---|---|---|---|")
    for job in list(jobs)[1:]:
        s_old, s_new = option_scores(measured[job, old]["out"]), option_scores(measured[job, new]["out"])
        c_old, c_new = chosen(s_old), chosen(s_new)
        diffs = sorted(abs(s_old[e][k] - s_new[e][k]) for e in s_old for k in s_old[e] if k in s_new.get(e, {}))
        agree = sum(c_old[e] == c_new.get(e) for e in c_old)
        median = diffs[len(diffs) // 2] if diffs else math.nan
        print(f"| {job} | {agree} of {len(c_old)} | {max(diffs):.4f} | {median:.4f} |")


if __name__ == "__main__":
    main()

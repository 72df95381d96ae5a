"""CPU time (user + system) of a fresh ``toolgym`` command, the minimum over several runs.

    python benchmarks/startup_cpu.py                 # toolgym list, 7 runs
    python benchmarks/startup_cpu.py --runs 9 -- grade --help

Each run is a new interpreter (``python run_agent.py ARGS``) whose CPU time is read from
``resource.getrusage(RUSAGE_CHILDREN)``; the minimum is reported because other processes on
the machine only ever add to it. A bare ``python -c "import pydantic"`` is measured the same
way as the floor every command pays. The numbers are in BENCHMARKS.md ("Start-up").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_of(argv: list[str]) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("command", nargs="*", default=["list"])
    args = parser.parse_args()
    rows = [
        ("python -c 'import pydantic'", [sys.executable, "-c", "import pydantic"]),
        (f"toolgym {' '.join(args.command)}", [sys.executable, "run_agent.py", *args.command]),
    ]
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[0]
    print(f"load average at start: {load} on {os.cpu_count()} CPUs; minimum of {args.runs} runs")
    for label, argv in rows:
        times = sorted(cpu_of(argv) for _ in range(args.runs))
        print(f"{label:40s} CPU min {times[0]:.3f} s  median {times[len(times) // 2]:.3f} s")


if __name__ == "__main__":
    main()

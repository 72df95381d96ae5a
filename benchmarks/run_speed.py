"""Speed of the model turns recorded in run directories (no model is called).

    python benchmarks/run_speed.py runs/local-typewriter_1 [RUN_DIR ...]

Prints one Markdown row per run: episodes, model turns, mean seconds per model turn (the
agent's measured latency, prompt evaluation included), generated tokens per second of model
time (sum of output tokens / sum of model-turn latency) and mean prompt tokens per turn.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolgym.runio import read_trajectories


def speed_row(directory: Path) -> str:
    """One Markdown table row for the run in ``directory``."""
    trajectories = read_trajectories(directory)
    steps = [s for t in trajectories for s in t.steps if s.kind == "model"]
    latency = sum(s.latency_s for s in steps)
    out_tokens = sum(s.output_tokens or 0 for s in steps)
    in_tokens = sum(s.input_tokens or 0 for s in steps)
    n = max(len(steps), 1)
    wall = sum(t.duration_s or 0 for t in trajectories)
    return (
        f"| {directory} | {len(trajectories)} | {len(steps)} | {latency / n:.2f} | "
        f"{out_tokens / latency if latency else float('nan'):.1f} | {in_tokens / n:.0f} | {wall:.0f} |"
    )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    print("| run | episodes | model turns | s / turn | generated tok/s | prompt tokens / turn | episode seconds (sum) |")
    print("|---|---|---|---|---|---|---|")
    for arg in argv:
        print(speed_row(Path(arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

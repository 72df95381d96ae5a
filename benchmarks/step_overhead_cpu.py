"""Per-step overhead of toolgym's ``tool_calling`` agent by CPU time, for comparing two source
trees on a busy machine (BENCHMARKS.md, "Per-step overhead after the runner split").

The workload and formula are ``framework_overhead.py``'s toolgym ones (type N letters on
``typewriter_26`` with an instant scripted model; ms per step = (T(N) - T(1)) / (N - 1), T the
best of ``--repeats`` episodes), timed with ``time.process_time`` (this process's CPU time),
which other processes on the machine disturb far less than the wall clock.

Usage: python benchmarks/step_overhead_cpu.py [--repeats 15] [ROOT]
(ROOT: the source tree whose ``toolgym`` to import, default this one; run it once per tree,
alternating, and compare.)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

LENGTHS = (10, 50, 200)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import framework_overhead as fo  # it puts this tree first on the path: ROOT goes before it

    sys.path.insert(0, args.root)
    import toolgym
    from toolgym.plugins import get_agent, get_environment

    model_cls = fo.instant_model_class()
    env_cls, agent_cls = get_environment("typewriter_26"), get_agent("tool_calling")

    async def episode(n: int) -> float:
        text = fo.text_of(n)
        env, example = env_cls(), toolgym.Example(id="b", input=text)
        env.reset(example)
        agent = agent_cls(model=model_cls(turn=0), max_steps=n + 5)
        start = time.process_time()
        traj = await agent.arun(env, example)
        elapsed = time.process_time() - start
        assert traj.final_state["paper"] == text, traj.error
        return elapsed

    async def best() -> dict[int, float]:
        await episode(3)  # imports, schema caches
        return {n: min([await episode(n) for _ in range(args.repeats)]) for n in (1, *LENGTHS)}

    times = asyncio.run(best())
    per_step = "  ".join(f"{n} steps: {(times[n] - times[1]) / (n - 1) * 1000:.3f}" for n in LENGTHS)
    print(f"{Path(toolgym.__file__).parents[1]}  ms per step (CPU): {per_step}")


if __name__ == "__main__":
    main()

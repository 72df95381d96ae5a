"""Benchmark: JMultiWOZ-TC through the ``local`` and the ``ray`` executor, in one run, against the
loopback OpenAI-compatible stub of ``jmultiwoz_throughput.py`` (issue 14).

Both runs are the real harness (``toolgym.runner.run``: the ``tool_calling`` agent, the
``openai-compatible`` provider with retries and timeouts, the trajectory file, grading and the
published export) at the same concurrency against the same stub process, one after the other.
The Ray cluster is started here with ``ray.cluster_utils.Cluster``: a head and ``--nodes - 1``
more nodes, ``--cpus`` CPUs each, every process on 127.0.0.1, no dashboard; the driver is this
process. Generation time is the wall time of the executor's ``play`` (dataset loading, grading
and, for Ray, cluster start excluded; starting the actors and shipping the dataset to them
included). The five published rows of both runs must be equal.

Usage:
    python benchmarks/ray_throughput.py [--delay 0.1] [--concurrency 64] [--limit N] [--nodes 2] [--cpus 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # "localhost" stays 127.0.0.1 (Linux)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jmultiwoz_throughput as stub  # noqa: E402


class Timed:
    """An executor wrapper that times ``play`` (the generation phase)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.in_process = inner, inner.name, inner.in_process
        self.wall_s = 0.0

    def play(self, episodes: Any, on_done: Callable[[Any], None]) -> None:
        t0 = time.perf_counter()
        try:
            self.inner.play(episodes, on_done)
        finally:
            self.wall_s = time.perf_counter() - t0


def every_node_schedules(ray: Any) -> None:
    """Wait until the scheduler places work on every node (a node just added is alive before
    the scheduler sees its resources, and actors meant for it would start elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    placed = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes])
    assert placed == nodes, (placed, nodes)


def one_run(executor: Any, dataset: str, port: int, concurrency: int, limit: int | None, out: Path) -> dict[str, Any]:
    from toolgym.providers import ModelSettings
    from toolgym.runner import RunConfig, run

    settings = ModelSettings(timeout_s=60, max_retries=2)
    settings.extra["base_url"] = f"http://127.0.0.1:{port}/v1"
    timed = Timed(executor)
    t0 = time.perf_counter()
    run(RunConfig(env="jmultiwoz_tc", out=out, model="openai-compatible:stub", dataset=dataset, limit=limit,
                  concurrency=concurrency, settings=settings, executor=timed), progress=False)
    total = time.perf_counter() - t0
    (score_file,) = out.glob("score_*.json")
    with open(out / "trajectories.jsonl", encoding="utf-8") as fh:
        trajectories = sum(1 for _ in fh)
    rows = [json.loads(x) for x in score_file.read_text().splitlines()]
    return {"generation_s": timed.wall_s, "total_s": total, "trajectories": trajectories, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(stub.DEFAULT))
    parser.add_argument("--delay", type=float, default=0.1, help="stub answer delay in seconds")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--limit", type=int, help="only the first N turns")
    parser.add_argument("--nodes", type=int, default=2, help="Ray nodes (head included)")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs declared per Ray node (one actor each)")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from toolgym.ray_executor import RayExecutor
    from toolgym.runner import LocalExecutor

    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    proc, port, shadowed = stub.start_stub(args.dataset, args.delay, args.limit)
    cluster = None
    results: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results["local"] = one_run(LocalExecutor(), args.dataset, port, args.concurrency, args.limit, Path(tmp) / "local")
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": args.cpus, "node_ip_address": "127.0.0.1", "include_dashboard": False,
                "object_store_memory": 500 * 2**20})
            for _ in range(args.nodes - 1):
                cluster.add_node(num_cpus=args.cpus, node_ip_address="127.0.0.1", object_store_memory=500 * 2**20)
            ray.init(address=cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
            cluster.wait_for_nodes()
            every_node_schedules(ray)
            ray_executor = RayExecutor()
            results["ray"] = one_run(ray_executor, args.dataset, port, args.concurrency, args.limit, Path(tmp) / "ray")
            by_node = sorted(ray_executor.episodes_by_node.values())
            actors = f"{len(ray_executor.actor_nodes)} actors on {len(set(ray_executor.actor_nodes))} node(s)"
    finally:
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
        proc.terminate()
        proc.wait(timeout=10)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    n = results["local"]["trajectories"]
    print(f"turns: {n}  concurrency: {args.concurrency}  stub delay: {args.delay * 1000:.0f} ms  ray: {args.nodes} node(s) x "
          f"{args.cpus} CPU on 127.0.0.1, {actors} (episodes by node: {by_node})  load average before: {load_before}, after: {load}")
    for name, r in results.items():
        print(f"{name:>5}: generation {r['generation_s']:.1f} s = {r['trajectories'] / r['generation_s']:.0f} turns/s "
              f"(whole run incl. loading and grading {r['total_s']:.1f} s; {r['trajectories']} trajectories)")
    same = results["local"]["rows"] == results["ray"]["rows"]
    for row in results["ray"]["rows"]:
        print("  ", json.dumps(row, ensure_ascii=False))
    correct = results["ray"]["rows"][0]["正解数"]
    print(f"five rows equal between executors: {'yes' if same else 'NO'}; {correct} of {n} turns right, expected "
          f"{n - shadowed}: {'ok' if correct == n - shadowed else 'MISMATCH'}")
    return 0 if same and correct == n - shadowed and results["ray"]["trajectories"] == n else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the stepwise trajectory grader against agentevals' trajectory match, in one run.

Builds ``--n`` trajectories (default 10,000) of 20 tool steps each, deterministically: a
reference of 10 calls, and a trajectory that holds those calls (a few with a changed argument,
some in another order) among 10 extra calls. Then grades every trajectory

* with toolgym's ``trajectory_match`` in each agentevals mode (strict, unordered, subset,
  superset; arguments exact, then the first fifth again with arguments superset, subset and
  ignore), and
* with agentevals' ``create_trajectory_match_evaluator`` in the same mode, on the same calls
  as OpenAI-format messages (one assistant message and one tool message per call),

and reports trajectories per second and their ratio (the two alternate in chunks of 250, so a
change in the machine's load falls on both; each timed pass starts after an untimed full garbage
collection, so the one that building the inputs leaves owing falls on neither), and how many verdicts differ (agentevals'
greedy first fit can fail a valid trajectory; the toolgym alignment is optimal). It also
grades graphs of 10 milestones (random ``after`` edges, ``$lenient`` and ``$from`` arguments)
with toolgym alone (agentevals has no milestone graph), and chains of 5 to 80 milestones with
twice as many steps (the reference calls in order among as many extra calls), with both harnesses in agentevals' strict
mode, to show the cost per step stays flat (linear in the length).

agentevals is not a dependency of toolgym: ``pip install agentevals`` to run this.

Usage: python benchmarks/stepwise_grading.py [--n 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolgym.graders.trajectory import TrajectoryMatch  # noqa: E402
from toolgym.records import Example, ToolStep, Trajectory  # noqa: E402

TOOLS = [f"tool_{k}" for k in range(8)]
MODES = ("strict", "unordered", "subset", "superset")


def make_case(rng: random.Random, i: int, n_ref: int = 10, n_steps: int = 20) -> tuple[list[dict], list[dict]]:
    """A reference of ``n_ref`` calls and a trajectory of ``n_steps`` calls holding them."""
    reference = [{"name": rng.choice(TOOLS), "arguments": {"x": rng.randrange(5), "q": f"v{rng.randrange(3)}"}}
                 for _ in range(n_ref)]
    calls = [dict(c, arguments=dict(c["arguments"])) for c in reference]
    if i % 4 == 1:  # one argument changed
        calls[rng.randrange(n_ref)]["arguments"]["x"] = 99
    if i % 4 == 2:  # two calls swapped
        a, b = rng.sample(range(n_ref), 2)
        calls[a], calls[b] = calls[b], calls[a]
    extras = [{"name": rng.choice(TOOLS), "arguments": {"x": rng.randrange(5), "q": "v0"}} for _ in range(n_steps - n_ref)]
    if i % 4 == 3:  # the reference calls only, in order (strict and unordered pass)
        return reference, calls
    out = calls + extras
    positions = sorted(rng.sample(range(n_steps), n_ref))
    merged, ci, ei = [], 0, 0
    for p in range(n_steps):
        if ci < n_ref and p == positions[ci]:
            merged.append(out[ci])
            ci += 1
        else:
            merged.append(extras[ei])
            ei += 1
    return reference, merged


def trajectory(calls: list[dict], outputs: list[str] | None = None) -> Trajectory:
    steps = [ToolStep(call_id=f"c{k}", name=c["name"], arguments=c["arguments"], output=(outputs or ["ok"] * len(calls))[k])
             for k, c in enumerate(calls)]
    return Trajectory(example_id="e", env="bench", agent="bench", status="completed", steps=steps)


def messages(calls: list[dict]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "do it"}]
    for k, c in enumerate(calls):
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}]})
        out.append({"role": "tool", "content": "ok", "tool_call_id": f"c{k}"})
    out.append({"role": "assistant", "content": "done"})
    return out


def best_rate(fn, items, repeat: int) -> tuple[float, list]:
    """Items per second (best of ``repeat``) and the last run's results."""
    rates, results = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        results = [fn(item) for item in items]
        rates.append(len(items) / (time.perf_counter() - start))
    return max(rates), results


def interleaved(make_ours, theirs, n: int, repeat: int, chunk: int = 250) -> tuple[float, float, list, list]:
    """Both harnesses over ``range(n)``, ``repeat`` times, alternating chunks of ``chunk``
    trajectories so that a change in the machine's load falls on both alike. Returns each
    one's items per second over all its chunks, and the last repeat's values.
    ``make_ours()`` gives a fresh grading function per repeat.

    Each repeat starts with a full garbage collection (untimed): building the inputs (some
    two million objects) leaves a full collection owing, which otherwise falls, two seconds
    long, on whichever harness happens to cross the collector's threshold first; collections
    that a harness's own objects cause still fall on it."""
    t_ours = t_theirs = 0.0
    ours_values: list = []
    theirs_values: list = []
    for _ in range(repeat):
        gc.collect()
        ours = make_ours()
        ours_values, theirs_values = [], []
        for start in range(0, n, chunk):
            items = range(start, min(n, start + chunk))
            t0 = time.perf_counter()
            ours_values += [ours(k) for k in items]
            t1 = time.perf_counter()
            theirs_values += [theirs(k) for k in items]
            t2 = time.perf_counter()
            t_ours += t1 - t0
            t_theirs += t2 - t1
    return n * repeat / t_ours, n * repeat / t_theirs, ours_values, theirs_values


def graph_example(rng: random.Random, n: int = 10) -> tuple[Example, Trajectory]:
    """A random milestone graph of ``n`` milestones and a trajectory of ``2n`` steps that
    satisfies it in one of its valid orders, among extra reads."""
    milestones = []
    for j in range(n):
        after = sorted(rng.sample(range(j), min(j, rng.randrange(3)))) if j else []
        args: dict = {"q": {"$lenient": f"Value {j}"}}
        if after and rng.random() < 0.5:
            args["id"] = {"$from": f"m{after[0]}", "path": "/id"}
        spec = {"id": f"m{j}", "call": {"name": f"tool_{j % 8}", "arguments": args, "args": "superset"}}
        if after:
            spec["after"] = [f"m{a}" for a in after]
        if rng.random() < 0.1:
            spec["optional"] = True
        milestones.append(spec)
    ex = Example(id="g", input="x", milestones=milestones, read_only=["get_*"], extra_calls="allow_read_only")
    order, done = [], set()
    while len(order) < n:  # a random topological order
        ready = [j for j in range(n) if j not in done and all(int(a[1:]) in done for a in milestones[j].get("after", []))]
        j = rng.choice(ready)
        order.append(j)
        done.add(j)
    calls, outputs = [], []
    for j in order:
        args = {"q": f"  value {j} ".upper()}
        spec_args = milestones[j]["call"]["arguments"]
        if "id" in spec_args:
            args["id"] = 1000 + int(spec_args["id"]["$from"][1:])
        calls.append({"name": f"tool_{j % 8}", "arguments": args})
        outputs.append(json.dumps({"id": 1000 + j}))
        calls.append({"name": "get_extra", "arguments": {"k": j}})
        outputs.append("[]")
    return ex, trajectory(calls, outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-modes", action="store_true", help="skip the agentevals-mode table (the long part)")
    args = parser.parse_args()
    from agentevals.trajectory.match import create_trajectory_match_evaluator

    rng = random.Random(25)
    greedy_cases(create_trajectory_match_evaluator)
    if args.skip_modes:
        rest(rng, args)
        return
    cases = [make_case(rng, i) for i in range(args.n)]
    examples = [Example(id=str(i), input="x", expected_calls=ref) for i, (ref, _) in enumerate(cases)]
    trajs = [trajectory(calls) for _, calls in cases]
    refs_msgs = [messages(ref) for ref, _ in cases]
    outs_msgs = [messages(calls) for _, calls in cases]
    print(f"{args.n} trajectories of 20 tool steps against references of 10 calls; {args.repeat} passes, interleaved")
    print("| mode | toolgym (traj/s) | agentevals (traj/s) | ratio | passed toolgym / agentevals | verdicts differ |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in MODES:
        evaluator = create_trajectory_match_evaluator(trajectory_match_mode=mode, tool_args_match_mode="exact")
        def fresh(mode=mode):
            # a fresh grader per repeat, so every plan is built from expected_calls again
            grader = TrajectoryMatch(trajectory_mode=mode, args_mode="exact")
            return lambda k: grader.grade(examples[k], trajs[k]).value

        ours, theirs, our_scores, their_scores = interleaved(
            fresh,
            lambda k, e=evaluator: float(e(outputs=outs_msgs[k], reference_outputs=refs_msgs[k])["score"]),
            args.n, args.repeat,
        )
        differ = sum(1 for a, b in zip(our_scores, their_scores, strict=True) if a != b)
        # with exact arguments a greedy first fit cannot go wrong: both must agree everywhere
        assert differ == 0, f"{mode}: {differ} verdicts differ from agentevals' on the same trajectories"
        print(f"| {mode} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.1f}× | "
              f"{sum(our_scores):,.0f} / {sum(their_scores):,.0f} | {differ} |")

    n_args = max(1, args.n // 5)
    print(f"\nthe first {n_args} trajectories again, with the other argument modes")
    print("| mode | arguments | toolgym (traj/s) | agentevals (traj/s) | ratio | passed toolgym / agentevals "
          "| verdicts differ |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for args_mode in ("superset", "subset", "ignore"):
        for mode in MODES:
            evaluator = create_trajectory_match_evaluator(trajectory_match_mode=mode, tool_args_match_mode=args_mode)

            def fresh(mode=mode, args_mode=args_mode):
                grader = TrajectoryMatch(trajectory_mode=mode, args_mode=args_mode)
                return lambda k: grader.grade(examples[k], trajs[k]).value

            ours, theirs, our_scores, their_scores = interleaved(
                fresh,
                lambda k, e=evaluator: float(e(outputs=outs_msgs[k], reference_outputs=refs_msgs[k])["score"]),
                n_args, args.repeat,
            )
            differ = sum(1 for a, b in zip(our_scores, their_scores, strict=True) if a != b)
            # where they differ, agentevals' greedy pairing failed a trajectory the optimal one passes
            assert all(a >= b for a, b in zip(our_scores, their_scores, strict=True)), f"{mode}/{args_mode}"
            print(f"| {mode} | {args_mode} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.1f}× | "
                  f"{sum(our_scores):,.0f} / {sum(their_scores):,.0f} | {differ} |")

    rest(rng, args)


def greedy_cases(create_trajectory_match_evaluator) -> None:
    """Trajectories that agentevals' greedy first fit fails and that are valid: references
    ``f(x=k)`` and ``f(x=k, y=2)``, the trajectory ``f(x=k, y=2), f(x=k)``, arguments
    compared as superset (the call holds at least the reference's arguments)."""
    n = 1000
    examples, trajs, refs, outs = [], [], [], []
    for k in range(n):
        ref = [{"name": "f", "arguments": {"x": k}}, {"name": "f", "arguments": {"x": k, "y": 2}}]
        out = [ref[1], ref[0]]
        examples.append(Example(id=str(k), input="x", expected_calls=ref))
        trajs.append(trajectory(out))
        refs.append(messages(ref))
        outs.append(messages(out))
    print("\ngreedy-first-fit cases (superset trajectory, superset arguments), "
          f"{n} valid trajectories: passed by", end=" ")
    for mode in ("superset", "unordered"):
        grader = TrajectoryMatch(trajectory_mode=mode, args_mode="superset")
        evaluator = create_trajectory_match_evaluator(trajectory_match_mode=mode, tool_args_match_mode="superset")
        ours_v = [grader.grade(e, t).value for e, t in zip(examples, trajs, strict=True)]
        theirs_v = [float(evaluator(outputs=o, reference_outputs=r)["score"]) for o, r in zip(outs, refs, strict=True)]
        # where they differ, agentevals' greedy pairing failed a trajectory the optimal one passes
        assert all(a >= b for a, b in zip(ours_v, theirs_v, strict=True))
        differ = sum(1 for a, b in zip(ours_v, theirs_v, strict=True) if a != b)
        print(f"{mode}: toolgym {sum(ours_v):.0f}, agentevals {sum(theirs_v):.0f} ({differ} differ);", end=" ")
    print()


def rest(rng: random.Random, args: argparse.Namespace) -> None:
    """The milestone graphs and the chains of growing length (toolgym alone)."""
    graphs = [graph_example(rng) for _ in range(min(args.n, 2000))]
    grader = TrajectoryMatch()
    rate, values = best_rate(lambda g: grader.grade(*g).value, graphs, args.repeat)
    print(f"\nmilestone graphs of 10 (random after, $lenient, $from, superset args), 20 steps: "
          f"{rate:,.0f} traj/s, {sum(values):,.0f}/{len(graphs)} pass (each trajectory is a valid order)")

    from agentevals.trajectory.match import create_trajectory_match_evaluator

    strict = create_trajectory_match_evaluator(trajectory_match_mode="strict", tool_args_match_mode="exact")
    print("\n| chain of milestones | tool steps | toolgym (traj/s) | toolgym µs per step "
          "| agentevals strict (traj/s) | agentevals µs per step | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n_ref in (5, 10, 20, 40, 80):
        chain_cases = [make_case(rng, 0, n_ref, 2 * n_ref) for _ in range(300)]
        items = [(Example(id="c", input="x", expected_calls=ref), trajectory(calls)) for ref, calls in chain_cases]
        msgs = [(messages(calls), messages(ref)) for ref, calls in chain_cases]

        def fresh(items=items):
            g = TrajectoryMatch(trajectory_mode="strict")  # a fresh grader: plans built again
            return lambda k: g.grade(*items[k]).value

        ours, theirs, our_v, their_v = interleaved(
            fresh, lambda k, msgs=msgs: float(strict(outputs=msgs[k][0], reference_outputs=msgs[k][1])["score"]),
            len(items), args.repeat, chunk=50,
        )
        assert our_v == their_v, f"chain of {n_ref}: verdicts differ"
        steps = 2 * n_ref
        print(f"| {n_ref} | {steps} | {ours:,.0f} | {1e6 / ours / steps:.1f} | {theirs:,.0f} | "
              f"{1e6 / theirs / steps:.1f} | {ours / theirs:.1f}× |")
    print(f"\npython {sys.version.split()[0]}, agentevals {__import__('importlib.metadata').metadata.version('agentevals')}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    _ = statistics


if __name__ == "__main__":
    main()

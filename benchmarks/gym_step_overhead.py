"""Per-step overhead of the Gymnasium adapter's ``step()`` over calling the environment's tool
directly (BENCHMARKS.md, "Gymnasium step overhead").

For each episode length, one episode of ``typewriter_26`` (one letter tool per step, 26 tools)
is played ``--repeats`` times in three ways, in the same process, and the best time per step is
kept:

* ``direct``: ``env.call(letter, {})`` on a reset toolgym environment (the tool with its
  argument check, what an agent's tool node runs);
* ``step (dict)``: ``ToolgymEnv.step`` with an OpenAI assistant dict holding one tool call;
* ``step (text)``: ``ToolgymEnv.step`` with Hermes ``<tool_call>`` text (parsed each step).

Every step but the episode's last is timed (the last one grades the trajectory, reported
apart as "end of episode"). Rewards are ``final`` or ``stepwise`` (``--reward``).

    python benchmarks/gym_step_overhead.py --repeats 7 --reward stepwise
"""

from __future__ import annotations

import argparse
import string
import time
import warnings

import gymnasium

import toolgym.gym as tg
from toolgym.plugins import get_environment
from toolgym.records import Example


def dataset(length: int) -> list[dict]:
    text = (string.ascii_lowercase * (length // 26 + 1))[:length]
    return [{"id": f"len{length}", "input": text, "expected_calls": [{"name": c, "arguments": {}} for c in text],
             "expected_state": {"paper": text}}]


def time_direct(length: int, repeats: int) -> float:
    cls = get_environment("typewriter_26")
    example = Example.model_validate(dataset(length)[0])
    best = float("inf")
    for _ in range(repeats):
        env = cls()
        env.reset(example)
        letters = example.input
        start = time.perf_counter()
        for c in letters:
            env.call(c, {})
        best = min(best, (time.perf_counter() - start) / length)
    return best


def time_gym(length: int, repeats: int, reward: str, text: bool) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(tg.env_id("typewriter_26"), dataset=dataset(length), max_steps=length + 5,
                             reward=reward).unwrapped
    letters = env.examples[0].input
    if text:
        actions = [f'<tool_call>\n{{"name": "{c}", "arguments": {{}}}}\n</tool_call>' for c in letters]
    else:
        actions = [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": c, "arguments": "{}"}}]}
            for i, c in enumerate(letters)]
    best, best_end = float("inf"), float("inf")
    for _ in range(repeats):
        env.reset(seed=0)
        start = time.perf_counter()
        for action in actions:
            env.step(action)
        mid = time.perf_counter()
        _, _, terminated, _, info = env.step({"role": "assistant", "content": "done"})
        end = time.perf_counter()
        assert terminated and info["scores"]["final_state"] == 1.0
        best, best_end = min(best, (mid - start) / length), min(best_end, end - mid)
    return best, best_end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--lengths", default="10,50,200")
    parser.add_argument("--reward", default="stepwise", choices=["final", "stepwise"])
    args = parser.parse_args()
    print(f"reward={args.reward}, best of {args.repeats}; times in ms")
    print("| steps | direct call (ms/step) | step, dict (ms/step) | step, text (ms/step) | overhead dict | overhead text | end of episode (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for length in (int(x) for x in args.lengths.split(",")):
        direct = time_direct(length, args.repeats)
        as_dict, end = time_gym(length, args.repeats, args.reward, text=False)
        as_text, _ = time_gym(length, args.repeats, args.reward, text=True)
        print(f"| {length} | {direct * 1e3:.4f} | {as_dict * 1e3:.3f} | {as_text * 1e3:.3f} | "
              f"{(as_dict - direct) * 1e3:.3f} | {(as_text - direct) * 1e3:.3f} | {end * 1e3:.2f} |")


if __name__ == "__main__":
    main()

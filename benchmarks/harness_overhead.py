"""Harness overhead per agent step: the tool_calling langgraph agent with an instant scripted
model on typewriter_26 episodes of N steps, against a bare loop calling the same tools.

Usage: python benchmarks/harness_overhead.py [--repeats 5]
Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402

from toolgym.plugins import (
    get_agent,  # noqa: E402
    get_environment,  # noqa: E402
)
from toolgym.records import Example  # noqa: E402


class InstantModel(BaseChatModel):
    """Types ``text`` one letter per turn, then answers; keeps its own turn counter so its
    cost does not grow with the history (one instance per episode)."""

    text: str
    turn: int = 0

    @property
    def _llm_type(self) -> str:
        return "instant"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        i = self.turn
        self.turn += 1
        if i < len(self.text):
            msg = AIMessage("", tool_calls=[{"name": self.text[i], "args": {}, "id": f"c{i}"}])
        else:
            msg = AIMessage(self.text)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        # async-native like the provider clients: no hop to a worker thread per call
        return self._generate(messages, stop, **kwargs)


def text_of(n: int) -> str:
    letters = string.ascii_lowercase
    return "".join(letters[i % 26] for i in range(n))


def agent_episode(n: int) -> float:
    text = text_of(n)
    env = get_environment("typewriter_26")()
    example = Example(id="b", input=text)
    env.reset(example)
    agent = get_agent("tool_calling")(model=InstantModel(text=text), max_steps=n + 5)
    start = time.perf_counter()
    traj = agent.run(env, example)
    elapsed = time.perf_counter() - start
    assert traj.status == "completed" and traj.final_state["paper"] == text, traj.error
    return elapsed


def bare_episode(n: int) -> float:
    text = text_of(n)
    env = get_environment("typewriter_26")()
    env.reset(Example(id="b", input=text))
    start = time.perf_counter()
    for letter in text:
        env.call(letter, {})
    elapsed = time.perf_counter() - start
    assert env.read_state()["paper"] == text
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    agent_episode(5)  # warm up imports and schema caches
    print(f"| steps | agent episode (ms, best of {args.repeats}) | bare loop (ms) | overhead per step (ms) | ratio agent/bare |")
    print("|---:|---:|---:|---:|---:|")
    for n in (10, 50, 200):
        agent = min(agent_episode(n) for _ in range(args.repeats))
        bare = min(bare_episode(n) for _ in range(args.repeats))
        print(f"| {n} | {agent * 1e3:.1f} | {bare * 1e3:.2f} | {(agent - bare) / n * 1e3:.3f} | {agent / bare:.0f}× |")
    signal_cost(args.repeats)


def signal_cost(repeats: int) -> None:
    """What ``asyncio.run`` costs when its coroutine returns a 200-step trajectory: Python 3.11
    formats the finished main task, result included, while restoring the SIGINT handler, so
    ``Agent.run`` hands the trajectory back in a box with a constant repr."""
    from toolgym.agents import _boxed

    text = text_of(200)
    env = get_environment("typewriter_26")()
    example = Example(id="b", input=text)
    env.reset(example)
    traj = get_agent("tool_calling")(model=InstantModel(text=text), max_steps=205).run(env, example)

    async def give():
        return traj

    def best(call) -> float:
        times = []
        for _ in range(max(repeats, 5)):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    plain = best(lambda: asyncio.run(give()))
    boxed = best(lambda: asyncio.run(_boxed(give())).value)
    print(f"\nasyncio.run returning the 200-step trajectory itself: {plain * 1e3:.2f} ms; in Agent.run's box: "
          f"{boxed * 1e3:.2f} ms (best of {max(repeats, 5)})")


if __name__ == "__main__":
    main()

"""Per-step overhead side by side: the same typewriter workload through toolgym's
``tool_calling`` agent, langgraph's prebuilt ``create_react_agent`` and inspect_ai's ``react()``
agent, each with an instant scripted model.

Workload: type a string of N letters on ``typewriter_26`` (one tool per letter, one tool call
per model turn), then answer without a call. Per framework, in its own process:

* ms per step above the framework's one-step baseline: (T(N) - T(1)) / (N - 1) for N = 10, 50,
  200, where T is the best of ``--repeats`` episodes (T(1) holds what an episode costs once:
  graph, task and log set-up);
* episodes per second over 1,000 short episodes (3 letters) at concurrency 1 and 16;
* peak resident memory of the process (``ru_maxrss``) after all of it.

Each framework drives its own model double: a langchain-core chat model for toolgym and
langgraph, inspect_ai's ``mockllm`` with scripted outputs for inspect_ai. toolgym's short
episodes go through ``toolgym.evaluate`` (episodes, grading and summary, in memory); langgraph's
through ``graph.ainvoke`` under a semaphore; inspect_ai's through ``eval()`` with
``max_samples`` (its own sample loop, scoring off, log written to a temporary directory).

Usage: python benchmarks/framework_overhead.py [--repeats 9] [--episodes 1000]
(inspect_ai is optional: ``pip install inspect_ai``; without it its column says so.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LENGTHS = (10, 50, 200)
SHORT = "abc"


def text_of(n: int) -> str:
    return "".join(string.ascii_lowercase[i % 26] for i in range(n))


# --- langchain-core model double (toolgym and langgraph) -------------------------------------
def instant_model_class():
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class InstantModel(BaseChatModel):
        """Types the first user message one letter per turn, then answers. The turn is the
        number of AI messages since the last user message, counted from the end (one model per
        episode keeps it O(1): ``turn`` is used when set)."""

        turn: int | None = None

        @property
        def _llm_type(self) -> str:
            return "instant"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            task = next(m.content for m in messages if m.type == "human")
            if self.turn is None:
                i = sum(1 for m in messages if m.type == "ai")
            else:
                i, self.turn = self.turn, self.turn + 1
            if i < len(task):
                msg = AIMessage("", tool_calls=[{"name": task[i], "args": {}, "id": f"c{i}"}])
            else:
                msg = AIMessage(task)
            return ChatResult(generations=[ChatGeneration(message=msg)])

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            return self._generate(messages, stop, **kwargs)

    return InstantModel


# --- toolgym ---------------------------------------------------------------------------------
def toolgym_workload(repeats: int, episodes: int) -> dict:
    import toolgym
    from toolgym.plugins import get_agent, get_environment

    model_cls = instant_model_class()
    env_cls = get_environment("typewriter_26")
    agent_cls = get_agent("tool_calling")

    async def episode(n: int) -> float:
        text = text_of(n)
        env = env_cls()
        example = toolgym.Example(id="b", input=text)
        env.reset(example)
        agent = agent_cls(model=model_cls(turn=0), max_steps=n + 5)
        start = time.perf_counter()
        traj = await agent.arun(env, example)
        elapsed = time.perf_counter() - start
        assert traj.status == "completed" and traj.final_state["paper"] == text, traj.error
        return elapsed

    async def steps() -> dict[int, float]:
        await episode(3)  # schema caches, imports
        return {n: min([await episode(n) for _ in range(repeats)]) for n in (1, *LENGTHS)}

    times = asyncio.run(steps())
    rates = {}
    dataset = [{"id": f"s{i}", "input": SHORT, "expected_state": {"paper": SHORT}} for i in range(episodes)]
    for concurrency in (1, 16):
        start = time.perf_counter()
        result = toolgym.evaluate("typewriter_26", agent="tool_calling", model=model_cls(), dataset=dataset,
                                  graders=["final_state"], concurrency=concurrency, progress=False)
        elapsed = time.perf_counter() - start
        assert all(t.final_state["paper"] == SHORT for t in result.trajectories)
        rates[concurrency] = episodes / elapsed
    return {"times": times, "rates": rates}


# --- langgraph create_react_agent ------------------------------------------------------------
def langgraph_workload(repeats: int, episodes: int) -> dict:
    import warnings

    from langchain_core.messages import HumanMessage

    warnings.filterwarnings("ignore")  # create_react_agent's deprecation notice
    from langgraph.prebuilt import create_react_agent

    from toolgym.plugins import get_environment

    model_cls = instant_model_class()
    env_cls = get_environment("typewriter_26")

    def make(model):
        env = env_cls()
        env.reset(__import__("toolgym").Example(id="b", input="x"))
        return env, create_react_agent(model, list(env.tools.values()))

    async def episode(n: int) -> float:
        text = text_of(n)
        env, graph = make(model_cls(turn=0))
        start = time.perf_counter()
        await graph.ainvoke({"messages": [HumanMessage(text)]}, {"recursion_limit": 2 * n + 10})
        elapsed = time.perf_counter() - start
        assert env.read_state()["paper"] == text
        return elapsed

    async def steps() -> dict[int, float]:
        await episode(3)
        return {n: min([await episode(n) for _ in range(repeats)]) for n in (1, *LENGTHS)}

    async def short(concurrency: int) -> float:
        model = model_cls()
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                env, graph = make(model)  # a fresh environment (and its tools) per episode
                await graph.ainvoke({"messages": [HumanMessage(SHORT)]})
                assert env.read_state()["paper"] == SHORT

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(episodes)))
        return episodes / (time.perf_counter() - start)

    times = asyncio.run(steps())
    return {"times": times, "rates": {c: asyncio.run(short(c)) for c in (1, 16)}}


# --- inspect_ai react() ----------------------------------------------------------------------
def inspect_workload(repeats: int, episodes: int) -> dict:
    from inspect_ai import Task, eval
    from inspect_ai.agent import react
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.tool import ToolDef
    from inspect_ai.util import store

    def letter_tool(letter: str) -> ToolDef:
        async def press() -> str:
            paper = store().get("paper", "") + letter
            store().set("paper", paper)
            return "OK"

        return ToolDef(press, name=letter, description=f"Type the letter {letter}.", parameters={})

    tools = [letter_tool(c) for c in string.ascii_lowercase]

    usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # given: mockllm would count
    # tokens with tiktoken otherwise (a download)

    def instant(messages, tools, tool_choice, config) -> ModelOutput:
        """Types the user message one letter per turn, then answers (samples run concurrently:
        the turn is read from the sample's own history, as the langchain double does)."""
        text = next(m.text for m in messages if m.role == "user")
        i = sum(1 for m in messages if m.role == "assistant")
        if i < len(text):
            output = ModelOutput.for_tool_call("mockllm/model", text[i], {}, tool_call_id=f"c{i}")
        else:
            output = ModelOutput.from_content("mockllm/model", text)
        output.usage = usage
        return output

    def run(text: str, copies: int, concurrency: int, logs_root: str) -> float:
        log_dir = tempfile.mkdtemp(dir=logs_root)  # a fresh log directory: inspect_ai resumes from an old one
        model = get_model("mockllm/model", custom_outputs=instant, memoize=False)
        task = Task(dataset=[Sample(input=text, id=i) for i in range(copies)],
                    solver=react(tools=tools, submit=False))
        start = time.perf_counter()
        logs = eval(task, model=model, max_samples=concurrency, log_dir=log_dir, display="none",
                    score=False, log_level="error")
        elapsed = time.perf_counter() - start
        sample = logs[0].samples[0]
        assert logs[0].status == "success", logs[0].error
        assert sample.store.get("paper") == text, sample.store
        return elapsed

    with tempfile.TemporaryDirectory() as logs_root:
        run("abc", 1, 1, logs_root)
        times = {n: min(run(text_of(n), 1, 1, logs_root) for _ in range(repeats)) for n in (1, *LENGTHS)}
        rates = {c: episodes / run(SHORT, episodes, c, logs_root) for c in (1, 16)}
    return {"times": times, "rates": rates}


WORKLOADS = {"toolgym": toolgym_workload, "langgraph": langgraph_workload, "inspect_ai": inspect_workload}
LABELS = {
    "toolgym": "toolgym `tool_calling`",
    "langgraph": "langgraph `create_react_agent`",
    "inspect_ai": "inspect_ai `react()`",
}


def child(name: str, repeats: int, episodes: int) -> None:
    result = WORKLOADS[name](repeats, episodes)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--only", choices=list(WORKLOADS), action="append")
    parser.add_argument("--child", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.episodes)
        return 0
    results: dict[str, dict | str] = {}
    for name in args.only or list(WORKLOADS):
        proc = subprocess.run([sys.executable, __file__, "--child", name, "--repeats", str(args.repeats),
                               "--episodes", str(args.episodes)], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            results[name] = f"not run: {last[:200]}"
            continue
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        data["times"] = {int(k): v for k, v in data["times"].items()}
        data["rates"] = {int(k): v for k, v in data["rates"].items()}
        results[name] = data

    def per_step(data: dict, n: int) -> float:
        return (data["times"][n] - data["times"][1]) / (n - 1) * 1e3

    base = results.get("toolgym")
    print("Per-step overhead: ms per step above the framework's one-step episode (best of "
          f"{args.repeats}), and the ratio to toolgym")
    print()
    print("| framework | one-step episode (ms) | " + " | ".join(f"{n} steps (ms/step)" for n in LENGTHS) + " |")
    print("|---|---:|" + "---:|" * len(LENGTHS))
    for name, data in results.items():
        if isinstance(data, str):
            print(f"| {LABELS[name]} | {data} |" + " |" * len(LENGTHS))
            continue
        cells = []
        for n in LENGTHS:
            value = per_step(data, n)
            ratio = "" if name == "toolgym" or not isinstance(base, dict) else f" ({value / per_step(base, n):.1f}×)"
            cells.append(f"{value:.3f}{ratio}")
        print(f"| {LABELS[name]} | {data['times'][1] * 1e3:.2f} | " + " | ".join(cells) + " |")
    print()
    print(f"Short episodes ({len(SHORT)} steps), {args.episodes} per run: episodes per second, and peak RSS")
    print()
    print("| framework | concurrency 1 (episodes/s) | concurrency 16 (episodes/s) | peak RSS (MB) |")
    print("|---|---:|---:|---:|")
    for name, data in results.items():
        if isinstance(data, str):
            continue
        cells = []
        for c in (1, 16):
            ratio = "" if name == "toolgym" or not isinstance(base, dict) else f" ({data['rates'][c] / base['rates'][c]:.2f}×)"
            cells.append(f"{data['rates'][c]:.0f}{ratio}")
        rss = data["peak_rss_mb"]
        rss_ratio = "" if name == "toolgym" or not isinstance(base, dict) else f" ({rss / base['peak_rss_mb']:.1f}×)"
        print(f"| {LABELS[name]} | " + " | ".join(cells) + f" | {rss:.0f}{rss_ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The same episodes through the Python API (a scripted model) and through ``toolgym serve``
driven by the official MCP SDK client give the same scores and the same model calls, for the
suites whose graders read the model's turns (JMultiWOZ-TC, BFCL: their own tests in
tests/suites/ use the helpers here) and for one that reads the final state (relational_data). Each plan mixes the gold calls with wrong ones: a spurious call
on a turn whose gold calls nothing, a missing call, a wrong argument."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.mcpio.test_mcp_serve import CLIENT, ENV, ROOT, serve_args  # noqa: E402
from toolgym import Example, evaluate, load_run  # noqa: E402
from toolgym.providers.scripted import ScriptedChatModel  # noqa: E402

Plan = dict[str, tuple[list[dict[str, Any]], str]]
"""example id -> (the calls, in order, as {"name", "args"}; the final answer)."""


def last_user_text(example: Example) -> str:
    if isinstance(example.input, str):
        return example.input
    return [m for m in example.input if m.get("role") == "user"][-1]["content"]


def scripted_model(examples: list[Example], plan: Plan) -> ScriptedChatModel:
    """A model that plays each example's plan: all its calls in one turn, then the answer."""
    scripts = {}
    for ex in examples:
        calls, answer = plan[ex.id]
        turns = [{"content": "", "tool_calls": [{**c, "id": f"c{i}"} for i, c in enumerate(calls)]}] if calls else []
        scripts[last_user_text(ex)] = [*turns, {"content": answer}]
    assert len(scripts) == len(examples), "the fixture's user texts must differ"
    return ScriptedChatModel(by_input=scripts)


def served(out: Path, env: str, dataset: Path | None, plan: Plan, order: list[str]) -> None:
    """Play the plan through ``toolgym serve`` over stdio with the MCP SDK client."""
    extra = ["--env", env, *(["--dataset", str(dataset)] if dataset else [])]

    async def play() -> None:
        params = StdioServerParameters(command=sys.executable, args=serve_args(out, *extra), env=ENV, cwd=str(ROOT))
        async with stdio_client(params) as (read, write), ClientSession(read, write, client_info=CLIENT) as session:
            await session.initialize()
            for example_id in order:
                calls, answer = plan[example_id]
                started = await session.call_tool("start_episode", {"example_id": example_id})
                assert not started.isError
                for call in calls:
                    await session.call_tool(call["name"], call["args"])
                ended = await session.call_tool("end_episode", {"answer": answer})
                assert not ended.isError, ended.content

    asyncio.run(play())


def scores(directory: Path) -> dict[tuple[str, str], float | None]:
    return {(s.example_id, s.grader): s.value for s in load_run(directory, with_examples=False).scores}


def model_calls(directory: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    return {
        t.example_id: [(c.name, c.arguments) for s in t.model_steps for c in s.tool_calls]
        for t in load_run(directory, with_examples=False).trajectories
    }


def both_faces(tmp_path: Path, env: str, dataset: Path | None, plan: Plan) -> tuple[Path, Path]:
    api_out, mcp_out = tmp_path / "api", tmp_path / "mcp"
    result = evaluate(env, model=scripted_model(examples_of(env, dataset), plan), dataset=str(dataset) if dataset else None,
                      out=api_out)
    assert all(t.status == "completed" for t in result.trajectories)
    served(mcp_out, env, dataset, plan, [t.example_id for t in result.trajectories])
    return api_out, mcp_out


def examples_of(env: str, dataset: Path | None) -> list[Example]:
    from toolgym.data import load_examples, resolve_dataset
    from toolgym.plugins import get_benchmark

    benchmark = get_benchmark(env)
    return load_examples(dataset if dataset else resolve_dataset(benchmark, None), benchmark)


def test_relational_data_scores_equal_over_mcp(tmp_path):
    examples = examples_of("relational_data", None)[:4]
    plan: Plan = {ex.id: ([{"name": c.name, "args": c.arguments} for c in ex.expected_calls or []], str(ex.reference))
                  for ex in examples}
    first = examples[0]
    plan[first.id] = (plan[first.id][0][:-1], "I do not know")  # the last call missing, a wrong answer
    api_out, mcp_out = tmp_path / "api", tmp_path / "mcp"
    evaluate("relational_data", model=scripted_model(examples, plan), dataset=[e.model_dump() for e in examples], out=api_out)
    # serve reads the dataset from a file: the same four examples
    data = tmp_path / "four.jsonl"
    data.write_text("".join(e.model_dump_json() + "\n" for e in examples), encoding="utf-8")
    served(mcp_out, "relational_data", data, plan, [e.id for e in examples])
    api, mcp = scores(api_out), scores(mcp_out)
    assert mcp == api
    assert min(v for (i, _), v in api.items() if i == first.id and v is not None) < 1.0


def _calls_and_results(record: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """(tool name, arguments, what came back) of every call of an exported conversation."""
    import json

    results = {m["tool_call_id"]: m["content"] for m in record["messages"] if m["role"] == "tool"}
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]), results[c["id"]])
        for m in record["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])
    ]


def test_a_served_run_exports_the_same_calls_as_the_api_run_and_junk_is_refused(tmp_path):
    import json

    from toolgym.views.export import export_runs

    examples = examples_of("relational_data", None)[:3]
    plan: Plan = {ex.id: ([{"name": c.name, "args": c.arguments} for c in ex.expected_calls or []], str(ex.reference))
                  for ex in examples}
    data = tmp_path / "three.jsonl"
    data.write_text("".join(e.model_dump_json() + "\n" for e in examples), encoding="utf-8")
    api_out, mcp_out = tmp_path / "api", tmp_path / "mcp"
    evaluate("relational_data", model=scripted_model(examples, plan), dataset=str(data), out=api_out)
    served(mcp_out, "relational_data", data, plan, [e.id for e in examples])

    exported = {}
    for name, directory in (("api", api_out), ("mcp", mcp_out)):
        result = export_runs([directory], tmp_path / f"{name}.jsonl")
        assert result.records == 3, result.skipped
        exported[name] = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    for api_record, mcp_record in zip(exported["api"], exported["mcp"], strict=True):
        assert [m["role"] for m in mcp_record["messages"]][:2] == ["system", "user"]
        assert _calls_and_results(mcp_record) == _calls_and_results(api_record) != []
        assert mcp_record["messages"][-1] == api_record["messages"][-1]  # the answer, as the assistant
        assert mcp_record["messages"][-1]["role"] == "assistant"
        assert not [m for m in mcp_record["messages"][2:] if m["role"] == "user"]  # no tool output as the user

    # a served run recorded without the model's turns (as toolgym served them before): refused
    lines = (mcp_out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    stripped = []
    for line in lines:
        row = json.loads(line)
        row["steps"] = [s for s in row["steps"] if s["kind"] == "tool"]
        stripped.append(json.dumps(row, ensure_ascii=False))
    (mcp_out / "trajectories.jsonl").write_text("\n".join(stripped) + "\n", encoding="utf-8")
    result = export_runs([mcp_out], tmp_path / "junk.jsonl")
    assert result.records == 0
    assert any("no assistant message" in why for why in result.skipped), result.skipped

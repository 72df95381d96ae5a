"""BFCL through the Python API and through ``toolgym serve`` driven by the official MCP SDK
client: the same scores and model calls; the served tools change with each entry, and the
server says so."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.mcpio.test_mcp_cross_face import Plan, both_faces, examples_of, model_calls, scores  # noqa: E402
from tests.mcpio.test_mcp_serve import CLIENT, ENV, ROOT, serve_args  # noqa: E402

BFCL_WEATHER = {"name": "weather.get", "description": "Weather of a city.", "parameters": {"type": "dict", "properties": {
    "city": {"type": "string", "description": "City."}, "days": {"type": "integer", "description": "Days."}}, "required": ["city"]}}


def write_bfcl(folder: Path) -> Path:
    import json

    def q(text: str) -> list:
        return [[{"role": "user", "content": text}]]

    answers = folder / "possible_answer" / "BFCL_v4_simple_python.json"
    answers.parent.mkdir(parents=True)
    answers.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "simple_python_0", "ground_truth": [{"weather.get": {"city": ["Paris"], "days": ["", 3]}}]},
        {"id": "simple_python_1", "ground_truth": [{"weather.get": {"city": ["Rome"], "days": [2]}}]},
    ]), encoding="utf-8")
    entries = folder / "BFCL_v4_simple_python.json"
    entries.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "simple_python_0", "question": q("Weather in Paris?"), "function": [BFCL_WEATHER]},
        {"id": "simple_python_1", "question": q("Weather in Rome in two days?"), "function": [BFCL_WEATHER]},
    ]), encoding="utf-8")
    return entries


def test_bfcl_scores_equal_over_mcp(tmp_path):
    dataset = write_bfcl(tmp_path / "data")
    examples = examples_of("bfcl", dataset)
    name = examples[0].expected_calls[0].name  # the tool name the function-calling mode offers
    plan: Plan = {
        examples[0].id: ([{"name": name, "args": {"city": "Paris"}}], ""),
        examples[1].id: ([{"name": name, "args": {"city": "Rome", "days": 5}}], ""),  # a wrong argument
    }
    api_out, mcp_out = both_faces(tmp_path, "bfcl", dataset, plan)
    api, mcp = scores(api_out), scores(mcp_out)
    assert mcp == api
    assert api[(examples[0].id, "bfcl_accuracy")] == 1.0 and api[(examples[1].id, "bfcl_accuracy")] == 0.0
    assert model_calls(mcp_out) == model_calls(api_out)


BFCL_AREA = {"name": "area", "description": "Area of a triangle.", "parameters": {"type": "dict", "properties": {
    "base": {"type": "float", "description": "Base."}, "height": {"type": "integer", "description": "Height."}},
    "required": ["base", "height"]}}


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_bfcl_over_mcp_says_its_tools_change_and_notifies(transport, tmp_path):
    import json

    from mcp import types
    from mcp.client.streamable_http import streamable_http_client

    from tests.mcpio.test_mcp_serve import HttpServer

    data = tmp_path / "data"
    (data / "possible_answer").mkdir(parents=True)
    (data / "possible_answer" / "BFCL_v4_simple_python.json").write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "simple_python_0", "ground_truth": [{"weather.get": {"city": ["Paris"], "days": ["", 3]}}]},
        {"id": "simple_python_1", "ground_truth": [{"area": {"base": [2.5], "height": [4]}}]},
    ]), encoding="utf-8")
    entries = data / "BFCL_v4_simple_python.json"
    entries.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "simple_python_0", "question": [[{"role": "user", "content": "Weather in Paris?"}]], "function": [BFCL_WEATHER]},
        {"id": "simple_python_1", "question": [[{"role": "user", "content": "Area?"}]], "function": [BFCL_AREA]},
    ]), encoding="utf-8")
    changed: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ToolListChangedNotification):
            changed.append(message.root.method)

    async def scenario(read, write) -> list[set[str]]:
        async with ClientSession(read, write, client_info=CLIENT, message_handler=on_message) as session:
            init = await session.initialize()
            assert init.capabilities.tools is not None and init.capabilities.tools.listChanged is True
            seen = []
            for example_id in ("simple_python_0", "simple_python_1"):
                before = len(changed)
                await session.call_tool("start_episode", {"example_id": example_id})
                if example_id == "simple_python_1":
                    assert len(changed) == before + 1  # the first entry's tools were listed, these differ
                seen.append({t.name for t in (await session.list_tools()).tools} - {"start_episode", "end_episode"})
                await session.call_tool("end_episode", {})
            return seen

    out = tmp_path / "served"
    extra = ["--env", "bfcl", "--dataset", str(entries)]
    if transport == "stdio":
        async def go():
            params = StdioServerParameters(command=sys.executable, args=serve_args(out, *extra), env=ENV, cwd=str(ROOT))
            async with stdio_client(params) as (read, write):
                return await scenario(read, write)

        seen = asyncio.run(go())
    else:
        with HttpServer(out, *extra) as server:
            async def go():
                async with streamable_http_client(server.url) as (read, write, _):
                    return await scenario(read, write)

            seen = asyncio.run(go())
            server.stop()
    assert len(seen) == 2 and seen[0] != seen[1] and len(seen[1]) == 1

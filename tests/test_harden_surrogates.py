"""A lone surrogate from a model (``"\\ud800"`` is valid JSON; no UTF-8 encoder takes it) is a
recorded outcome on every face: ``run`` (a scripted model file read by the CLI), the Gymnasium
adapter with ``out=``, and ``toolgym serve`` over streamable HTTP (JSON-RPC posted as raw
bytes: the MCP SDK's client cannot encode the character, its server's HTTP transport decodes
it). The character is recorded and executed as U+FFFD."""

from __future__ import annotations

import json

import pytest

from toolgym.cli import main
from toolgym.runio import read_scores, read_trajectories

LONE = "\ud800"
FFFD = "\ufffd"


def test_run_records_a_lone_surrogate_in_a_call_and_the_answer(tmp_path):
    script = tmp_path / "model.json"
    # written with json.dumps' default ASCII escapes: the file holds the six characters \ud800
    script.write_text(json.dumps([
        {"content": f"typing {LONE}", "tool_calls": [{"name": "type_letter", "args": {"letter": LONE}}]},
        f"done {LONE}",
    ]), encoding="utf-8")
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "x", "input": "Type x.", "expected_steps": ["type_letter"],
                                "expected_state": {"paper": "x"}}) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress"]) == 0
    [trajectory] = read_trajectories(out)
    assert trajectory.status == "completed"
    assert trajectory.model_steps[0].tool_calls[0].arguments == {"letter": FFFD}
    assert trajectory.final_state == {"paper": FFFD}  # what the environment was given
    assert trajectory.final_answer == f"done {FFFD}"
    assert {s.grader: s.value for s in read_scores(out)}["final_state"] == 0.0
    # --resume finds nothing left to play
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress", "--resume"]) == 0
    assert len(read_trajectories(out)) == 1


def test_gym_step_with_a_lone_surrogate_is_recorded(tmp_path):
    gymnasium = pytest.importorskip("gymnasium")
    import toolgym.gym  # noqa: F401

    env = gymnasium.make("toolgym/typewriter_1-v0", out=str(tmp_path / "gym"))
    env.reset(seed=0)
    env.step({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "type_letter", "arguments": '{"letter": "\\ud800"}'}}]})
    _, _, terminated, _, info = env.step(f"the end {LONE}")
    assert terminated and info["status"] == "completed"
    env.close()
    [trajectory] = read_trajectories(tmp_path / "gym")
    assert trajectory.final_state == {"paper": FFFD} and trajectory.final_answer == f"the end {FFFD}"


def test_serve_records_a_lone_surrogate_sent_over_http(tmp_path):
    pytest.importorskip("mcp")
    import httpx

    from tests.mcpio.test_mcp_serve import HttpServer

    out = tmp_path / "served"
    with HttpServer(out, "--env", "typewriter_1") as server:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

        def rpc(client: httpx.Client, body: str) -> dict:
            response = client.post(server.url, content=body.encode("ascii"), headers=headers)
            assert response.status_code in (200, 202), response.text
            if not response.content:
                return {}
            text = response.text
            data = next(line[5:] for line in text.splitlines() if line.startswith("data:")) if "data:" in text else text
            return json.loads(data)

        with httpx.Client(timeout=30) as client:
            init = client.post(server.url, headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
            headers["mcp-session-id"] = init.headers["mcp-session-id"]
            rpc(client, '{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            started = rpc(client, '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "start_episode", "arguments": {}}}')
            assert not started["result"]["isError"]
            typed = rpc(client, '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "type_letter", "arguments": {"letter": "\\ud800"}}}')
            assert not typed["result"]["isError"], typed
            ended = rpc(client, '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "end_episode", "arguments": {"answer": "ok \\ud800"}}}')
            assert not ended["result"]["isError"], ended
            assert ended["result"]["structuredContent"]["status"] == "completed"
        server.stop()
    [trajectory] = read_trajectories(out)
    assert trajectory.status == "completed" and trajectory.final_state == {"paper": FFFD}
    assert trajectory.final_answer == f"ok {FFFD}"
    assert len(read_scores(out)) == 3

"""``toolgym serve`` of a multi-turn example: ``end_episode`` answers a user turn and returns the
next one until the last (a real server over stdio, the real ``mcp`` client)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

mcp = pytest.importorskip("mcp")

from test_mcp_serve import serve_args, stdio_session  # noqa: E402

from toolgym.runio import read_run, read_scores, read_trajectories  # noqa: E402

ADD_C = {
    "id": "add-c", "input": "type ab", "turns": ["now add c"],
    "expected_states": [{"paper": "ab"}, {"paper": "abc"}], "expected_state": {"paper": "abc"},
}


def test_a_served_agent_gets_the_next_user_message_from_end_episode(tmp_path):
    data = tmp_path / "multi.jsonl"
    data.write_text(json.dumps(ADD_C) + "\n")
    out = tmp_path / "served"
    seen = {}

    async def play() -> None:
        async with stdio_session(serve_args(out, "--env", "typewriter_1", "--dataset", str(data))) as session:
            started = await session.call_tool("start_episode", {})
            seen["start"] = started.structuredContent
            for letter in "ab":
                await session.call_tool("type_letter", {"letter": letter})
            nxt = await session.call_tool("end_episode", {"answer": "typed ab"})
            seen["next"] = nxt.structuredContent
            await session.call_tool("type_letter", {"letter": "c"})
            seen["end"] = (await session.call_tool("end_episode", {"answer": "typed c"})).structuredContent

    asyncio.run(play())
    assert seen["start"]["user_turn"] == 1 and seen["start"]["input"] == "type ab"
    assert seen["next"] == {"example_id": "add-c", "trial": 0, "status": "running", "user_turn": 2, "message": "now add c"}
    assert seen["end"]["status"] == "completed"
    deadline = time.monotonic() + 20
    while not (read_run(out).finished_at or time.monotonic() > deadline):
        time.sleep(0.1)
    (traj,) = read_trajectories(out)
    assert [(s.kind, getattr(s, "text", None)) for s in traj.steps if s.kind != "tool"] == [
        ("user", "type ab"), ("model", ""), ("model", ""), ("model", "typed ab"),
        ("user", "now add c"), ("model", ""), ("model", "typed c")]
    assert traj.turn_states == [{"paper": "ab"}, {"paper": "abc"}]
    assert {s.grader: s.value for s in read_scores(out)}["turn_state"] == 1.0

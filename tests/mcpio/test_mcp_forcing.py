"""Teacher forcing on ``mcp:`` environments: only on a server whose tools say they work on a
closed world (docs/step-by-step.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import toolgym
from tests.conftest import call, turn
from toolgym.providers.scripted import ScriptedChatModel

HERE = Path(__file__).parent
EXAMPLE = {"id": "add", "input": "add 2 then 3", "expected_calls": [
    {"name": "add", "arguments": {"amount": 2}}, {"name": "add", "arguments": {"amount": 3}}]}


def play(server: str):
    model = ScriptedChatModel(turns=[turn(call("add", amount=2)), turn(call("add", amount=3)), "5"])
    return toolgym.evaluate(f"mcp:{sys.executable} {HERE / server}", model=model, dataset=[EXAMPLE],
                            protocol="teacher-forced", graders=["steps_exact"])


def test_a_closed_world_server_is_teacher_forced():
    result = play("closed_counter_server.py")
    forced = sorted((t for t in result.trajectories if t.prefix_steps is not None), key=lambda t: t.prefix_steps)
    assert [t.status for t in forced] == ["completed", "completed"]
    assert [t.tool_steps[-1].output for t in forced] == ["2", "5"]  # the prefix ran on the server
    assert [s.value for s in result.scores if s.grader == "next_step"] == [1.0, 1.0]


def test_a_server_that_does_not_say_so_is_refused():
    result = play("counter_server.py")
    forced = [t for t in result.trajectories if t.prefix_steps is not None]
    assert forced and all(t.status == "error" and "openWorldHint" in t.error for t in forced)
    assert [t.status for t in result.trajectories if t.prefix_steps is None] == ["completed"]

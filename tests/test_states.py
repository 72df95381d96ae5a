"""The state after every step: initial state and RFC 6902 patches recorded by the runner, the
per-environment cap, old records, and the reference replay (toolgym.replay), on real
environments driven by scripted models."""

from __future__ import annotations

import json

import pytest

import toolgym
from toolgym.plugins import get_benchmark
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Trajectory


def typed(*letters: str, extra: list[dict] | None = None) -> list[dict]:
    """A script typing ``letters`` one call per turn (then ``extra`` calls), then stopping."""
    turns = [{"content": "", "tool_calls": [{"name": c, "args": {}, "id": f"c{k}"}]} for k, c in enumerate(letters)]
    turns += [{"content": "", "tool_calls": [c]} for c in extra or []]
    return turns + [{"content": "done"}]


def test_runner_records_the_state_after_every_tool_step_and_load_run_reads_it_back(tmp_path):
    example = Example(id="ab", input="Type ab", expected_state={"paper": "ab"})
    script = typed("a", "b", extra=[{"name": "nope", "args": {}, "id": "x"}])
    result = toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=script), dataset=[example],
                              out=tmp_path / "run")
    loaded = toolgym.load_run(tmp_path / "run").trajectories[0]
    assert loaded.initial_state == {"paper": ""}
    assert [s.state_patch for s in loaded.tool_steps] == [
        [{"op": "replace", "path": "/paper", "value": "a"}],
        [{"op": "replace", "path": "/paper", "value": "ab"}],
        [],  # an unknown tool: never run, nothing changed
    ]
    assert loaded.tool_steps[2].malformed
    assert toolgym.states_after(loaded) == [{"paper": "a"}, {"paper": "ab"}, {"paper": "ab"}]
    assert toolgym.states_after(loaded)[-1] == loaded.final_state
    assert loaded.state_note is None
    assert result.trajectories[0].initial_state == loaded.initial_state


class Ledger(toolgym.Environment):
    """A list of entries that grows by one long line per call."""

    instructions = "Add entries."
    state_record_chars = 400

    def reset(self, example):
        self.entries = []

    def read_state(self):
        return {"entries": list(self.entries)}

    @toolgym.tool
    def add(self, text: str) -> str:
        """Add an entry.

        Args:
            text: The entry.
        """
        self.entries.append(text)
        return "ok"


def test_the_per_environment_cap_stops_recording_with_a_note():
    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"text": "x" * 100}, "id": f"c{k}"}]}
              for k in range(4)] + [{"content": "done"}]
    result = toolgym.evaluate(Ledger, model=ScriptedChatModel(turns=script), dataset=[Example(id="e", input="go")])
    t = result.trajectories[0]
    patches = [s.state_patch for s in t.tool_steps]
    # initial {"entries": []} = 15 characters, each patch about 150: two fit under 400
    assert patches[0] == [{"op": "add", "path": "/entries/0", "value": "x" * 100}]
    assert patches[1] is not None and patches[2] is None and patches[3] is None
    assert "up to tool step 2" in t.state_note and "Ledger.state_record_chars = 400" in t.state_note
    states = toolgym.states_after(t)
    assert states[1] == {"entries": ["x" * 100] * 2} and states[2:] == [None, None]
    assert t.final_state == {"entries": ["x" * 100] * 4}  # the final state is kept whatever the cap


def test_a_cap_of_zero_records_no_state():
    class Quiet(Ledger):
        state_record_chars = 0

    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"text": "y"}, "id": "c"}]}, {"content": "done"}]
    t = toolgym.evaluate(Quiet, model=ScriptedChatModel(turns=script), dataset=[Example(id="e", input="go")]).trajectories[0]
    assert t.initial_state is None and t.tool_steps[0].state_patch is None
    assert "state_record_chars = 0" in t.state_note
    assert toolgym.states_after(t) == [None]


def test_trajectories_of_older_runs_and_imported_files_load_without_states():
    old = {"example_id": "e", "env": "typewriter_26", "agent": "tool_calling", "status": "completed",
           "steps": [{"kind": "tool", "call_id": "1", "name": "a", "output": "OK"}], "final_state": {"paper": "a"}}
    t = Trajectory.model_validate(old)
    assert t.initial_state is None and t.state_note is None and t.tool_steps[0].state_patch is None
    assert toolgym.states_after(t) == [None]


def test_a_patch_that_does_not_apply_is_refused_naming_the_step():
    t = Trajectory.model_validate({
        "example_id": "e", "env": "x", "agent": "a", "status": "completed", "initial_state": {"paper": ""},
        "steps": [{"kind": "tool", "call_id": "1", "name": "a",
                   "state_patch": [{"op": "remove", "path": "/ink"}]}],
    })
    with pytest.raises(ValueError, match="tool step 1 does not apply"):
        toolgym.states_after(t)


def test_replay_records_the_reference_as_a_run_does_on_sqlite():
    bench = get_benchmark("relational_data")
    from toolgym.data import load_examples

    example = next(ex for ex in load_examples(bench.datasets / "test.jsonl") if len(ex.expected_calls or []) >= 2)
    replay = toolgym.replay_calls(bench, example, example.expected_calls)
    oracle = toolgym.evaluate(bench, agent="oracle", dataset=[example]).trajectories[0]
    assert replay.status == "completed" and replay.agent == "reference" and replay.env == "relational_data"
    assert [(s.name, s.arguments, s.output, s.error) for s in replay.tool_steps] == \
        [(s.name, s.arguments, s.output, s.error) for s in oracle.tool_steps]
    assert replay.initial_state == oracle.initial_state and replay.final_state == oracle.final_state
    assert [s.state_patch for s in replay.tool_steps] == [s.state_patch for s in oracle.tool_steps]
    assert toolgym.reference_replay(bench, example) is toolgym.reference_replay(bench, example)  # cached


def test_replay_records_failing_calls_and_goes_on():
    bench = get_benchmark("multiverse_math")
    example = Example(id="m", input="x")
    replay = toolgym.replay_calls(bench, example, [
        {"name": "multiply", "arguments": {"a": 2, "b": 3}},
        {"name": "multiply", "arguments": {"a": "two"}},
        {"name": "no_such_tool", "arguments": {}},
        toolgym.ToolCallSpec(name="add", arguments={"a": 1, "b": 1}),
    ])
    steps = replay.tool_steps
    assert [s.error for s in steps] == [False, True, True, False]
    assert [s.rejected for s in steps] == [False, True, True, False]
    assert [s.state_patch for s in steps] == [
        [{"op": "replace", "path": "/calls", "value": 1}], [], [], [{"op": "replace", "path": "/calls", "value": 2}],
    ]
    assert replay.model_steps[0].tool_calls[1].name == "multiply"
    with pytest.raises(toolgym.ReplayError, match="call 1"):
        toolgym.replay_calls(bench, example, [{"arguments": {}}])
    with pytest.raises(toolgym.ReplayError, match="no expected_calls"):
        toolgym.reference_replay(bench, example)


class Brittle(toolgym.Environment):
    """A tool with a bug."""

    def reset(self, example):
        self.n = 0

    def read_state(self):
        return {"n": self.n}

    @toolgym.tool
    def bump(self) -> str:
        """Add one."""
        self.n += 1
        return "ok"

    @toolgym.tool
    def crash(self) -> str:
        """Broken."""
        raise RuntimeError("boom")


def test_replay_of_a_broken_tool_ends_with_status_error_and_keeps_the_steps_before():
    replay = toolgym.replay_calls(Brittle, Example(id="b", input="x"),
                                  [{"name": "bump"}, {"name": "crash"}, {"name": "bump"}])
    assert replay.status == "error" and "boom" in replay.error
    assert [s.name for s in replay.tool_steps] == ["bump"]
    assert toolgym.states_after(replay) == [{"n": 1}] and replay.final_state == {"n": 1}
    json.dumps(replay.model_dump())


# --- state milestones and minefields against the state after each step ---------------------

def typewriter_run(example: Example, *letters: str) -> Trajectory:
    return toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=typed(*letters)), dataset=[example],
                            graders=["trajectory_match", "milestone_progress"]).trajectories[0]


def grade(example: Example, trajectory: Trajectory) -> dict[str, toolgym.Score]:
    from toolgym.graders.trajectory import MilestoneProgress, TrajectoryMatch

    return {g.name: g.grade(example, trajectory) for g in (TrajectoryMatch(), MilestoneProgress())}


def without_states(trajectory: Trajectory) -> Trajectory:
    """The same trajectory as an older run stored it: no initial state, no patches."""
    return Trajectory.model_validate({
        **trajectory.model_dump(), "initial_state": None,
        "steps": [{**s.model_dump(), "state_patch": None} if s.kind == "tool" else s.model_dump()
                  for s in trajectory.steps],
    })


def test_a_state_milestone_passed_through_mid_trajectory_is_matched_from_the_patches():
    example = Example(id="abc", input="Type abc", milestones=[
        {"id": "ab", "state": {"paper": "ab"}},
        {"id": "c", "after": ["ab"], "call": {"name": "c"}},
    ], extra_calls="allow")
    t = typewriter_run(example, "a", "b", "c")
    scores = grade(example, t)
    assert scores["trajectory_match"].value == 1.0
    assert scores["trajectory_match"].details["matched"]["ab"] == {"kind": "state", "at": 2}
    old = grade(example, without_states(t))  # only the final state "abc" is known: "ab" is never seen
    assert old["trajectory_match"].value == 0.0 and old["milestone_progress"].value == 0.0
    assert old["trajectory_match"].details["missing"] == ["ab", "c"]  # c waits for ab


def test_a_state_minefield_that_held_for_one_step_fails_the_trajectory_at_that_step():
    example = Example(id="abc", input="Type abc", milestones=[{"id": "c", "call": {"name": "c"}}],
                      minefields=[{"state": {"paper": "ab"}}], extra_calls="allow")
    t = typewriter_run(example, "a", "b", "c")
    scores = grade(example, t)
    assert scores["trajectory_match"].value == 0.0 and scores["milestone_progress"].value == 0.0
    assert scores["trajectory_match"].details["first_error"] == {
        "step": 2, "type": "forbidden", "milestone": None, "argument": None}
    assert scores["trajectory_match"].details["minefields_hit"][0]["step"] == 2
    old = grade(example, without_states(t))  # the final state "abc" is no minefield
    assert old["trajectory_match"].value == 1.0


def test_a_state_minefield_seen_only_in_the_final_state_names_no_step_as_before():
    example = Example(id="ab", input="Type ab", milestones=[], minefields=[{"state": {"paper": "ab"}}],
                      extra_calls="allow")
    t = without_states(typewriter_run(example, "a", "b"))
    first = grade(example, t)["trajectory_match"].details["first_error"]
    assert first == {"step": None, "type": "forbidden", "milestone": None, "argument": None}


def test_multiverse_math_counts_calls_in_its_state_and_a_milestone_reads_the_count_after_each_step():
    example = Example(id="m", input="x", milestones=[
        {"id": "two", "state": {"calls": 2}},
        {"id": "mul", "call": {"name": "multiply", "arguments": {"a": 2, "b": 3}}},
    ], extra_calls="allow")
    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}, "id": "1"}]},
              {"content": "", "tool_calls": [{"name": "multiply", "args": {"a": 2, "b": 3}, "id": "2"}]},
              {"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "3"}]},
              {"content": "done"}]
    t = toolgym.evaluate("multiverse_math", model=ScriptedChatModel(turns=script), dataset=[example],
                         graders=["trajectory_match"]).trajectories[0]
    assert [s["calls"] for s in toolgym.states_after(t)] == [1, 2, 3]
    score = grade(example, t)["trajectory_match"]
    assert score.value == 1.0 and score.details["matched"]["two"] == {"kind": "state", "at": 2}

"""Multi-turn episodes: scripted user turns, a simulated user, the state after every user turn,
the begin_turn hook, and the records' checks (docs/multi-turn.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import call, turn
from langchain_core.messages import BaseMessage

from toolgym import Environment, ToolError, tool
from toolgym.cli import main
from toolgym.data import DatasetError, load_examples
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Score, Trajectory, turn_of_steps
from toolgym.runio import read_jsonl
from toolgym.runner import RunConfig, run
from toolgym.users import STOP


def typed(*letters: str) -> dict:
    return turn(*(call("type_letter", letter=x) for x in letters))


ADD_C = {
    "id": "add-c", "input": "type ab", "turns": ["now add c"],
    "expected_calls": [{"name": "type_letter", "arguments": {"letter": "a"}},
                       {"name": "type_letter", "arguments": {"letter": "b"}},
                       {"name": "type_letter", "arguments": {"letter": "c"}, "turn": 2}],
    "expected_states": [{"paper": "ab"}, {"paper": "abc"}], "expected_state": {"paper": "abc"},
}

WRONG_AFTER_TURN_1 = {  # types only "a" for turn 1, then "bc": wrong after turn 1, right at the end
    "by_input": {"type ab": [typed("a"), "typed a"], "now add c": [typed("b", "c"), "typed bc"]},
}


class Listening(ScriptedChatModel):
    """A scripted model that keeps every message list it was sent (to check what it saw)."""

    heard: list = []

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any):
        type(self).heard.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def steps_of(traj: Trajectory) -> list[tuple[str, Any]]:
    out = []
    for s in traj.steps:
        if s.kind == "user":
            out.append(("user", s.turn, s.text) if not s.stop else ("stop", s.turn, s.text))
        elif s.kind == "model":
            out.append(("model", s.text))
        else:
            out.append(("tool", s.arguments.get("letter")))
    return out


def test_cli_turn_state_is_half_when_the_state_is_wrong_after_turn_1_and_right_at_the_end(tmp_path):
    data = tmp_path / "multi.jsonl"
    data.write_text(json.dumps(ADD_C) + "\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(WRONG_AFTER_TURN_1))
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress"]) == 0
    scores = {s.grader: s for s in read_jsonl(out / "scores.jsonl", Score)}
    assert scores["turn_state"].value == 0.5
    assert scores["turn_state"].details["first_mismatch"] == 1
    assert scores["final_state"].value == 1.0
    (traj,) = read_jsonl(out / "trajectories.jsonl", Trajectory)
    assert steps_of(traj) == [
        ("user", 1, "type ab"), ("model", ""), ("tool", "a"), ("model", "typed a"),
        ("user", 2, "now add c"), ("model", ""), ("tool", "b"), ("tool", "c"), ("model", "typed bc"),
    ]
    assert traj.turn_states == [{"paper": "a"}, {"paper": "abc"}]
    assert turn_of_steps(traj) == [1, 1, 1, 1, 2, 2, 2, 2, 2]
    assert [len(group) for group in traj.turns()] == [4, 5]


def test_the_oracle_plays_each_turns_calls_in_that_turn():
    result = run(RunConfig(env="typewriter_1", agent="oracle", dataset=[ADD_C]), progress=False)
    (traj,) = result.trajectories
    assert traj.turn_states == [{"paper": "ab"}, {"paper": "abc"}]
    assert {s.grader: s.value for s in result.scores}["turn_state"] == 1.0


@pytest.mark.parametrize("agent", ["react_json", "xml_prompting"])
def test_prompted_agents_carry_the_conversation_across_turns(agent):
    def write(x: str) -> str:
        if agent == "react_json":
            return json.dumps({"action": "type_letter", "action_input": {"letter": x}})
        return f"<tool_call><name>type_letter</name><arguments>{json.dumps({'letter': x})}</arguments></tool_call>"

    def answer(text: str) -> str:
        if agent == "react_json":
            return json.dumps({"action": "Final Answer", "action_input": text})
        return f"<final_answer>{text}</final_answer>"

    model = Listening(by_input={"type ab": [write("a"), write("b"), answer("ab")], "now add c": [write("c"), answer("abc")]})
    Listening.heard = []
    result = run(RunConfig(env="typewriter_1", agent=agent, model=model, dataset=[ADD_C]), progress=False)
    (traj,) = result.trajectories
    assert traj.status == "completed", traj.error
    assert traj.turn_states == [{"paper": "ab"}, {"paper": "abc"}]
    last = Listening.heard[-1]  # the last call saw the whole conversation, turn 1 included
    assert [m.content for m in last if m.type == "human" and m.content in ("type ab", "now add c")] == ["type ab", "now add c"]


def test_max_steps_counts_model_turns_over_the_whole_conversation():
    model = ScriptedChatModel(by_input={"type ab": [typed("a", "b"), "typed ab"], "now add c": [typed("c"), "typed c"]})
    result = run(RunConfig(env="typewriter_1", model=model, dataset=[ADD_C], max_steps=2), progress=False)
    (traj,) = result.trajectories
    assert traj.status == "step_limit"
    assert [s.turn for s in traj.user_steps] == [1]  # turn 2 was due with no model turn left
    assert traj.turn_states == [{"paper": "ab"}]
    scores = {s.grader: s for s in result.scores}
    assert scores["turn_state"].value == 0.5
    assert scores["turn_state"].details["turns"][1]["played"] is False


SIMULATED = {
    "id": "sim", "input": "type ab",
    "user": {"instructions": "You want the paper to read 'abc': first ask for ab, then for c.", "max_turns": 5},
    "expected_states": [{"paper": "ab"}, {"paper": "abc"}], "expected_state": {"paper": "abc"},
}
AGENT = {"by_input": {"type ab": [typed("a", "b"), "typed ab"], "now add c": [typed("c"), "typed abc"],
                      "Thanks, that is all.": ["You are welcome."]}}


def test_a_scripted_simulated_user_speaks_until_its_stop_token_which_never_reaches_the_agent():
    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [f"Thanks, that is all. {STOP}"]})
    agent = Listening(**AGENT)
    Listening.heard = []
    result = run(RunConfig(env="typewriter_1", model=agent, user_model=user, dataset=[SIMULATED]), progress=False)
    (traj,) = result.trajectories
    assert traj.status == "completed", traj.error
    assert steps_of(traj) == [
        ("user", 1, "type ab"), ("model", ""), ("tool", "a"), ("tool", "b"), ("model", "typed ab"),
        ("user", 2, "now add c"), ("model", ""), ("tool", "c"), ("model", "typed abc"),
        ("stop", 3, "Thanks, that is all."), ("model", "You are welcome."),  # a last message: answered, then the end
    ]
    heard = [m.content for messages in Listening.heard for m in messages]
    assert not any(STOP in str(text) for text in heard)
    assert "Thanks, that is all." in heard
    simulated = [s for s in traj.user_steps if s.turn > 1]
    assert all(s.latency_s is not None for s in simulated)  # recorded apart from the agent's steps
    assert len(traj.model_steps) == 5 and traj.user_model == "object:ScriptedChatModel"
    assert {s.grader: s.value for s in result.scores}["turn_state"] == 1.0


def test_a_bare_stop_token_is_recorded_and_starts_no_turn(tmp_path):
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"by_input": {"typed ab": ["now add c"], "typed abc": [STOP]}}))
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(AGENT))
    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{agent}", "--user-model", f"scripted:{user}",
                 "--dataset", str(data), "--out", str(out), "--no-progress"]) == 0
    (traj,) = read_jsonl(out / "trajectories.jsonl", Trajectory)
    assert steps_of(traj)[-2:] == [("model", "typed abc"), ("stop", 2, "")]
    assert [len(g) for g in traj.turns()] == [5, 5] and len(traj.turn_states) == 2
    assert traj.user_model == f"scripted:{user}"
    assert json.loads((out / "run.json").read_text())["agent"]["user_model"] == f"scripted:{user}"


def test_a_scripted_user_list_plays_one_entry_per_user_turn(tmp_path):
    """``--user-model scripted:FILE`` with a list: its first entry is the user's message at user
    turn 2 (turn 1 is the input), the next at turn 3, and so on (not the first at every turn)."""
    user = tmp_path / "user.json"
    user.write_text(json.dumps(["now add c", f"Thanks, that is all. {STOP}"]))
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(AGENT))
    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{agent}", "--user-model", f"scripted:{user}",
                 "--dataset", str(data), "--out", str(out), "--no-progress"]) == 0
    (traj,) = read_jsonl(out / "trajectories.jsonl", Trajectory)
    assert traj.status == "completed", traj.error
    assert [(s.turn, s.text, s.stop) for s in traj.user_steps] == [
        (1, "type ab", False), (2, "now add c", False), (3, "Thanks, that is all.", True)]
    assert traj.final_state == {"paper": "abc"}


def test_a_scripted_user_whose_by_input_keys_miss_names_the_answer_it_looked_up(tmp_path):
    user = tmp_path / "user-su.json"
    user.write_text(json.dumps({"by_input": {"typed ab.": ["now add c"], "typed abc": [STOP]}}))  # "typed ab." != "typed ab"
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps(AGENT))
    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{agent}", "--user-model", f"scripted:{user}",
                 "--dataset", str(data), "--out", str(out), "--no-progress"]) == 1
    (traj,) = read_jsonl(out / "trajectories.jsonl", Trajectory)
    assert traj.status == "error" and traj.error.startswith("UserModelError: the user model scripted:"), traj.error
    assert ("no by_input key matches the agent's last answer 'typed ab' (the keys: 'typed ab.', 'typed abc'; "
            "a key is the whole text)") in traj.error, traj.error


def test_a_scripted_agent_whose_by_input_keys_miss_names_the_request():
    model = ScriptedChatModel(by_input={"type ab": [typed("a", "b"), "typed ab"]})
    (traj,) = run(RunConfig(env="typewriter_1", model=model, dataset=[{"id": "x", "input": "type abc"}],
                            max_errors="100%"), progress=False).trajectories
    assert traj.status == "error"
    assert "no by_input key matches the request (the last user message) 'type abc'" in traj.error, traj.error


def test_the_simulated_user_stops_at_max_turns_and_sees_only_the_conversation():
    Listening.heard = []
    user = Listening(repeat_last=True, turns=["and again"])
    example = {**SIMULATED, "user": {"instructions": "Ask for ab.", "max_turns": 2}}
    example.pop("expected_states")
    agent = ScriptedChatModel(by_input={"type ab": [typed("a", "b"), "typed ab"], "and again": ["ok"]})
    (traj,) = run(RunConfig(env="typewriter_1", model=agent, user_model=user, dataset=[example]), progress=False).trajectories
    assert [s.turn for s in traj.user_steps] == [1, 2]
    (seen,) = Listening.heard  # one call: turn 2
    assert seen[0].type == "system" and "Ask for ab." in seen[0].content
    assert [(m.type, m.content) for m in seen[1:]] == [("ai", "type ab"), ("human", "typed ab")]  # roles flipped
    assert "type_letter" not in str([m.content for m in seen])  # no tools, no tool results


class Failing(ScriptedChatModel):
    def _generate(self, *args: Any, **kwargs: Any):
        raise ConnectionError("user server down")


def test_a_failing_user_model_is_an_infrastructure_error_never_scored_and_played_again_on_resume(tmp_path):
    agent = ScriptedChatModel(**AGENT)
    out, data = tmp_path / "run", tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    result = run(RunConfig(env="typewriter_1", model=agent, user_model=Failing(), dataset=data, out=out,
                           max_errors="100%"), progress=False)
    (traj,) = result.trajectories
    assert traj.status == "error" and traj.error.startswith("UserModelError:") and "user server down" in traj.error
    assert result.scores == []
    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [STOP]})
    again = run(RunConfig(env="typewriter_1", model=agent, user_model=user, dataset=data, out=out, resume=True,
                          force=True), progress=False)
    assert [t.status for t in again.trajectories] == ["completed"]
    assert {s.grader: s.value for s in again.scores}["turn_state"] == 1.0


def test_a_simulated_user_needs_a_user_model_and_a_multi_turn_agent():
    with pytest.raises(DatasetError, match="--user-model"):
        run(RunConfig(env="typewriter_1", model=ScriptedChatModel(), dataset=[SIMULATED]), progress=False)
    with pytest.raises(DatasetError, match="single-turn episodes only"):
        run(RunConfig(env="typewriter_1", agent="direct", model=ScriptedChatModel(), dataset=[ADD_C]), progress=False)


def test_a_milestone_turn_names_the_turn_of_the_first_error():
    example = {**ADD_C, "milestones": [
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}, "turn": 1},
        {"id": "b", "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}, "turn": 1},
        {"id": "c", "after": ["b"], "call": {"name": "type_letter", "arguments": {"letter": "c"}}, "turn": 2},
    ]}
    model = ScriptedChatModel(by_input={"type ab": [typed("a", "b"), "ok"], "now add c": [typed("d"), "ok"]})
    result = run(RunConfig(env="typewriter_1", model=model, dataset=[example]), progress=False)
    match = next(s for s in result.scores if s.grader == "trajectory_match")
    assert match.details["first_error"]["turn"] == 2
    assert match.explanation.startswith("turn 2, step 3 (type_letter): wrong arguments (c")
    missing = ScriptedChatModel(by_input={"type ab": [typed("a", "b"), "ok"], "now add c": ["no"]})
    result = run(RunConfig(env="typewriter_1", model=missing, dataset=[example]), progress=False)
    match = next(s for s in result.scores if s.grader == "trajectory_match")
    first = match.details["first_error"]
    assert {k: first[k] for k in ("step", "type", "milestone", "argument", "turn")} == {
        "step": None, "type": "missing", "milestone": "c", "argument": None, "turn": 2}


class Unlocking(Environment):
    """A tool that appears at user turn 2."""

    name = "unlocking"

    def reset(self, example: Example) -> None:
        self.turn, self.log = 0, []

    def begin_turn(self, turn: int) -> None:
        self.turn = turn
        self.tools_changed()

    def tool_functions(self) -> dict:
        found = {"note": self.note}
        if self.turn >= 2:
            found["stamp"] = self.stamp
        return found

    def tool_set_key(self):
        return (type(self), self.turn >= 2)

    @tool
    def note(self, text: str) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        self.log.append(text)
        return "ok"

    def stamp(self) -> str:
        """Stamp the notes."""
        if self.turn < 2:
            raise ToolError("not yet")
        self.log.append("STAMP")
        return "stamped"

    def read_state(self) -> dict:
        return {"log": list(self.log)}


def test_begin_turn_may_add_a_tool_that_the_agent_can_call_from_that_turn_on():
    example = {"id": "u", "input": "stamp it", "turns": ["now stamp it"],
               "expected_states": [{"log": []}, {"log": ["STAMP"]}]}
    model = ScriptedChatModel(by_input={"stamp it": [turn(call("stamp")), "cannot"], "now stamp it": [turn(call("stamp")), "done"]})
    result = run(RunConfig(env=Unlocking, model=model, dataset=[example]), progress=False)
    (traj,) = result.trajectories
    first, second = traj.tool_steps
    assert first.error and "unknown tool 'stamp'" in first.output  # turn 1: no such tool yet
    assert second.output == "stamped" and not second.error
    assert {s.grader: s.value for s in result.scores}["turn_state"] == 1.0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("turns", "ab", "field turns: Input should be a valid list"),
    ("turns", ["ok", 3], "field turns.1: Input should be a valid string"),
    ("user", {"max_turns": 2}, "field user.instructions: Field required"),
    ("user", {"instructions": "x", "max_turns": 0}, "field user.max_turns: Input should be greater than or equal to 1"),
    ("expected_states", [{"paper": "ab"}], "field expected_states: 1 state(s) for 2 user turn(s)"),
])
def test_bad_multi_turn_fields_are_refused_naming_file_line_and_field(tmp_path, field, value, message):
    data = tmp_path / "bad.jsonl"
    good = {"id": "ok", "input": "a"}
    data.write_text(json.dumps(good) + "\n" + json.dumps({**ADD_C, field: value}) + "\n")
    with pytest.raises(DatasetError) as info:
        load_examples(data)
    assert str(info.value).startswith(f"{data}:2: {message}")


def test_turns_and_user_together_and_turns_past_the_conversation_are_refused(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({**ADD_C, "user": {"instructions": "x", "max_turns": 2}}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: field user: give scripted 'turns' or a simulated 'user'"):
        load_examples(data)
    calls = [*ADD_C["expected_calls"][:2], {"name": "type_letter", "arguments": {"letter": "c"}, "turn": 3}]
    data.write_text(json.dumps({**ADD_C, "expected_calls": calls}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: field expected_calls\[2\].turn: turn 3"):
        load_examples(data)


def test_single_turn_trajectories_record_no_user_step():
    (traj,) = run(RunConfig(env="typewriter_1", agent="oracle", dataset=[{"id": "1", "input": "a", "expected_calls": [
        {"name": "type_letter", "arguments": {"letter": "a"}}]}]), progress=False).trajectories
    assert traj.user_steps == [] and traj.turn_states is None
    assert [len(g) for g in traj.turns()] == [len(traj.steps)]
    assert "turn_states" not in traj.model_dump(exclude_none=True)



BUILT_IN = [("typewriter_1", "multi_turn"), ("typewriter_26", "multi_turn"), ("relational_data", "multi_turn"),
            ("multiverse_math", "multi_turn")]


@pytest.mark.parametrize(("env", "dataset"), BUILT_IN)
def test_the_oracle_solves_every_built_in_multi_turn_set(env, dataset):
    result = run(RunConfig(env=env, agent="oracle", dataset=dataset), progress=False)
    assert {t.status for t in result.trajectories} == {"completed"}
    for traj in result.trajectories:
        assert len(traj.user_steps) >= 2 and traj.turn_states is not None
    failed = [(s.example_id, s.grader, s.explanation) for s in result.scores
              if result.record.measures[s.grader].passed(s.value) is False]
    assert failed == []
    graders = {s.grader for s in result.scores}
    assert ("turn_state" in graders) == (env != "relational_data")


def test_check_catches_a_wrong_state_after_a_user_turn():
    from toolgym.data import check_dataset
    from toolgym.runner import resolve_benchmark

    benchmark, _ = resolve_benchmark("typewriter_1")
    bad = Example.model_validate({**ADD_C, "expected_states": [{"paper": "a"}, {"paper": "abc"}]})
    assert check_dataset(benchmark, [bad]) == [
        "add-c: replay reaches {'paper': 'ab'} after user turn 1, expected_states[0] is {'paper': 'a'}"]
    assert check_dataset(benchmark, [Example.model_validate(ADD_C)]) == []


def test_evaluate_takes_a_user_model():
    import toolgym

    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [STOP]})
    result = toolgym.evaluate("typewriter_1", model=ScriptedChatModel(**AGENT), user_model=user, dataset=[SIMULATED])
    assert [s.text for s in result.trajectories[0].user_steps] == ["type ab", "now add c", ""]
    assert result.record.agent["user_model"] == "object:ScriptedChatModel"

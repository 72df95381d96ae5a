"""Odd tool-call arguments: one rule in every agent, booleans are not numbers, rejected calls are
not steps taken, full-width names are found."""

from __future__ import annotations

import pytest

from toolgym.parsing import read_arguments
from toolgym.plugins import get_agent, get_environment, get_grader
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example

EMPTY = [None, "null", '""', "", "  ", "{}", '{}""', "{ }''", "''"]


def play(agent: str, env_name: str, turns: list, example: Example):
    env = get_environment(env_name)()
    env.reset(example)
    return get_agent(agent)(model=ScriptedChatModel(turns=turns), model_spec="scripted:t", max_steps=4).run(env, example)


def pi_example() -> Example:
    return Example(id="pi", input="what is pi?", expected_steps=["pi"], reference=3.14159)


@pytest.mark.parametrize("sent", EMPTY)
def test_empty_arguments_of_a_parameterless_tool_are_no_arguments_for_tool_calling(sent):
    turn = {"content": "", "tool_calls": [{"name": "pi", "args": sent, "id": "c1"}]} if isinstance(sent, dict) else \
        {"content": "", "invalid_tool_calls": [{"name": "pi", "args": sent, "id": "c1", "error": "bad"}]}
    traj = play("tool_calling", "multiverse_math", [turn, "done"], pi_example())
    call = traj.model_steps[0].tool_calls[0]
    assert call.malformed is None and call.arguments == {}
    assert not traj.tool_steps[0].error, traj.tool_steps[0].output


@pytest.mark.parametrize("sent", [s for s in EMPTY if s is not None])
def test_empty_arguments_in_xml_and_react(sent):
    xml = f"<tool_call><name>pi</name><arguments>{sent}</arguments></tool_call>"
    traj = play("xml_prompting", "multiverse_math", [xml, "<final_answer>done</final_answer>"], pi_example())
    assert not traj.tool_steps[0].error, traj.tool_steps[0].output
    import json
    react = 'Action:\n```json\n{"action": "pi", "action_input": ' + json.dumps(sent) + "}\n```"
    traj = play("react_json", "multiverse_math", [react, "Final Answer: done"], pi_example())
    assert not traj.tool_steps[0].error, traj.tool_steps[0].output


@pytest.mark.parametrize("sent", ["[1, 2]", "42", '"text"', "{'a': 1}", "{}x", [1, 2], 3])
def test_other_arguments_get_one_message_naming_the_tool_and_quoting_what_was_sent(sent):
    args, problem = read_arguments("add", sent)
    assert args == {} and problem.startswith("arguments of 'add' must be a JSON object, got ")
    assert (sent if isinstance(sent, str) else str(sent).replace("'", '"')) in problem.replace("\\'", "'")
    env = get_environment("multiverse_math")()
    env.reset(pi_example())
    result = env.call("add", sent)
    assert result.error and result.output == f"Error: {problem}"


def test_langchain_error_text_never_reaches_the_record():
    turn = {"content": "", "invalid_tool_calls": [{"name": "add", "args": "{'a': 1", "id": "c1",
                                                    "error": "see https://docs.langchain.com/x"}]}
    traj = play("tool_calling", "multiverse_math", [turn, "done"], pi_example())
    call = traj.model_steps[0].tool_calls[0]
    assert "langchain" not in call.malformed and "'add'" in call.malformed and "{'a': 1" in call.malformed


def test_double_encoded_json_object_is_read():
    assert read_arguments("add", '"{\\"a\\": 1, \\"b\\": 2}"') == ({"a": 1, "b": 2}, None)


@pytest.mark.parametrize("args", [{"a": True, "b": 2}, {"a": 1, "b": False}])
def test_booleans_are_not_numbers(args):
    env = get_environment("multiverse_math")()
    env.reset(pi_example())
    result = env.call("add", args)
    assert result.error and "a boolean is not a number" in result.output
    assert env.call("add", {"a": 1, "b": 2}).output == "4.2"


def test_a_boolean_for_a_string_is_named_as_such():
    env = get_environment("typewriter_1")()
    env.reset(Example(id="t", input="a"))
    result = env.call("type_letter", {"letter": True})
    assert result.error and "letter: a boolean is not a string, got true" in result.output


def test_rejected_call_is_not_the_expected_step():
    ex = Example(id="e", input="add 1 and 2", expected_steps=["add"], reference=4.2)
    turns = [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2, "c": 3}}]}, "4.2"]
    traj = play("tool_calling", "multiverse_math", turns, ex)
    assert traj.tool_steps[0].rejected
    score = get_grader("steps_exact").grade(ex, traj)
    assert score.value == 0.0 and "add (rejected)" in score.explanation
    ok = play("tool_calling", "multiverse_math", [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}}]}, "4.2"], ex)
    assert get_grader("steps_exact").grade(ex, ok).value == 1.0


def test_tool_error_after_running_is_still_the_step_taken():
    ex = Example(id="e", input="divide", expected_steps=["divide"])
    turns = [{"content": "", "tool_calls": [{"name": "divide", "args": {"a": 1, "b": 0}}]}, "none"]
    traj = play("tool_calling", "multiverse_math", turns, ex)
    assert traj.tool_steps[0].error and not traj.tool_steps[0].rejected
    assert get_grader("steps_exact").grade(ex, traj).value == 1.0


def test_full_width_names_are_found_by_the_relational_search_tools():
    env = get_environment("relational_data")()
    env.reset(Example(id="e", input="x"))
    user = env.call("get_current_user_id", {}).output
    name = env.call("get_user_name", {"user_id": int(user)}).output
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in name)
    assert wide != name
    found = env.call("find_users_by_name", {"name": name}).output
    assert name in found
    assert env.call("find_users_by_name", {"name": wide}).output == found


def test_a_huge_argument_is_not_echoed_whole_in_the_error(tmp_path):
    """A 1 MB letter (a tool whose message quotes it): the error quotes 2,000 characters; the
    line holds the letter in the model's call and in the tool step (the record's shape), not a
    third time in the error."""
    import json as _json

    from toolgym.cli import main as cli
    from toolgym.runio import read_trajectories

    letter = "x" * 1_000_000
    script = tmp_path / "model.json"
    script.write_text(_json.dumps([{"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": letter}}]}, "done"]))
    data = tmp_path / "one.jsonl"
    data.write_text(_json.dumps({"id": "x", "input": "Type x.", "expected_steps": ["type_letter"]}) + "\n")
    out = tmp_path / "run"
    assert cli(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                "--out", str(out), "--no-progress"]) == 0
    [trajectory] = read_trajectories(out)
    step = trajectory.tool_steps[0]
    assert step.error and step.arguments == {"letter": letter}
    assert len(step.output) < 2_100 and step.output.endswith("more characters)")
    assert len((out / "trajectories.jsonl").read_bytes()) < 2_100_000

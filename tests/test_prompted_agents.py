"""xml_prompting and react_json agents, end to end with scripted models and parser by parser."""

from __future__ import annotations

import pytest

from toolgym.agents.prompted import OBSERVATION_MARK
from toolgym.agents.react_json import parse_react
from toolgym.agents.xml_prompting import parse_xml_calls
from toolgym.plugins import get_agent, get_environment, get_grader
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example


def typewriter_example(text: str, env: str = "typewriter_1") -> Example:
    names = ["type_letter"] * len(text) if env == "typewriter_1" else list(text)
    return Example(id=f"ex-{text}", input=text, expected_steps=names, expected_state={"paper": text}, reference=text)


def play(agent_name: str, turns: list, example: Example, env_name: str = "typewriter_1", **kwargs):
    env = get_environment(env_name)()
    env.reset(example)
    agent = get_agent(agent_name)(model=ScriptedChatModel(turns=turns), model_spec="scripted:test", **kwargs)
    return agent, env, agent.run(env, example)


def xml_call(name: str, arguments: str) -> str:
    return f"<tool_call>\n<name>{name}</name>\n<arguments>{arguments}</arguments>\n</tool_call>"


# --- xml_prompting ---------------------------------------------------------------------------


def test_xml_well_formed_calls_type_the_string_and_pass_the_graders():
    example = typewriter_example("hi")
    turns = [
        "I will type h.\n" + xml_call("type_letter", '{"letter": "h"}'),
        xml_call("type_letter", "<letter>i</letter>"),
        "<final_answer>hi</final_answer>",
    ]
    _agent, _env, traj = play("xml_prompting", turns, example)
    assert traj.status == "completed", traj.error
    assert traj.final_state == {"paper": "hi"}
    assert traj.final_answer == "hi"
    assert [s.name for s in traj.tool_steps] == ["type_letter", "type_letter"]
    assert [c.id for s in traj.model_steps for c in s.tool_calls] == ["xml_prompting_1_0", "xml_prompting_2_0"]
    assert get_grader("final_state").grade(example, traj).value == 1.0
    assert get_grader("steps_exact").grade(example, traj).value == 1.0


def test_xml_system_prompt_describes_tools_from_their_schemas():
    agent = get_agent("xml_prompting")(model=ScriptedChatModel(turns=["x"]))
    prompt = agent.system_prompt(get_environment("typewriter_1")())
    assert prompt.startswith(get_environment("typewriter_1").instructions)
    assert "<name>type_letter</name>" in prompt
    assert "<description>Exactly one character to type.</description>" in prompt
    assert "<required>true</required>" in prompt
    prompt26 = agent.system_prompt(get_environment("typewriter_26")())
    assert prompt26.count("<tool>") == 26 and '<description>Type the letter "q" on the paper.</description>' in prompt26


def test_xml_observations_go_back_as_marked_user_messages():
    example = typewriter_example("a")
    turns = [xml_call("type_letter", '{"letter": "a"}') + xml_call("type_letter", '{"letter": "too long"}'), "done"]
    _agent, _env, traj = play("xml_prompting", turns, example)
    assert traj.status == "completed"
    steps = traj.tool_steps
    assert [s.error for s in steps] == [False, True]
    assert "exactly one character" in steps[1].output


def test_xml_malformed_blocks_are_recorded_and_answered_with_errors():
    example = typewriter_example("a")
    turns = [
        xml_call("type_letter", '{"letter": "a"')  # invalid JSON
        + "<tool_call><arguments>{}</arguments></tool_call>",  # no name
        xml_call("type_letter", '["a"]'),  # not an object
        "<tool_call><name>type_letter</name><arguments>{\"letter\": \"a\"}</arguments>",  # unclosed
        "<final_answer>a</final_answer>",
    ]
    _agent, _env, traj = play("xml_prompting", turns, example)
    assert traj.status == "completed"
    calls = [c for s in traj.model_steps for c in s.tool_calls]
    assert [bool(c.malformed) for c in calls] == [True, True, True, True]
    assert "not valid JSON" in calls[0].malformed
    assert "no <name>" in calls[1].malformed
    assert calls[2].malformed == "arguments of 'type_letter' must be a JSON object, got '[\"a\"]'"
    assert "not closed" in calls[3].malformed
    assert calls[0].raw.startswith("<tool_call>")
    assert all(s.error and "malformed tool call" in s.output for s in traj.tool_steps)
    assert traj.final_state == {"paper": ""}  # nothing malformed was executed
    assert get_grader("steps_exact").grade(example, traj).value == 0.0


def test_xml_zero_argument_tools_and_step_limit():
    example = typewriter_example("ab", env="typewriter_26")
    turns = ["<tool_call><name>a</name></tool_call><tool_call><name>b</name><arguments>{}</arguments></tool_call>"]
    _agent, _env, traj = play("xml_prompting", turns, example, env_name="typewriter_26", max_steps=1)
    assert traj.status == "step_limit"
    assert traj.final_state == {"paper": "ab"}


def test_xml_parser_ignores_invented_results_and_coerces_parameters():
    env = get_environment("typewriter_1")()
    text = xml_call("type_letter", "<letter>x</letter>") + "<tool_result>OK</tool_result>" + xml_call("type_letter", '{"letter": "y"}')
    parsed = parse_xml_calls(text, env, lambda i: f"id{i}")
    assert [c.arguments for c in parsed.calls] == [{"letter": "x"}]
    plain = parse_xml_calls("The answer is 42.", env, lambda i: f"id{i}")
    assert plain.calls == [] and plain.final_answer == "The answer is 42."


# --- react_json ------------------------------------------------------------------------------


def react(action: str, action_input: str) -> str:
    return f'Thought: next letter\nAction:\n```json\n{{"action": "{action}", "action_input": {action_input}}}\n```'


def test_react_well_formed_actions_then_final_answer():
    example = typewriter_example("hi")
    turns = [
        react("type_letter", '{"letter": "h"}') + "\nObservation: OK\nThought: invented",
        'Thought: one more\nAction: {"action": "type_letter", "action_input": "i"}',
        "Thought: I am done\nFinal Answer: hi",
    ]
    agent, env, traj = play("react_json", turns, example)
    assert traj.status == "completed", traj.error
    assert traj.final_state == {"paper": "hi"}
    assert traj.final_answer == "hi"
    assert [s.arguments for s in traj.tool_steps] == [{"letter": "h"}, {"letter": "i"}]
    assert get_grader("steps_exact").grade(example, traj).value == 1.0
    prompt = agent.system_prompt(env)
    assert "type_letter: Type one letter on the paper." in prompt and "Final Answer:" in prompt


def test_react_malformed_actions_are_recorded():
    example = typewriter_example("a")
    turns = [
        'Action:\n```json\n{"action": "type_letter", "action_input": {"letter": }\n```',
        "Action: type the letter a please",
        '```json\n{"tool": "type_letter"}\n```',
        react("type_letter", '["a", "b"]'),
        '{"action": "Final Answer", "action_input": "a"}',
    ]
    _agent, _env, traj = play("react_json", turns, example)
    assert traj.status == "completed"
    calls = [c for s in traj.model_steps for c in s.tool_calls]
    assert [c.malformed for c in calls] == [
        "action is not valid JSON: Expecting value",
        "Action without a JSON blob",
        'action blob needs a string "action"',
        "arguments of 'type_letter' must be a JSON object, got '[\"a\", \"b\"]'",
    ]
    assert calls[0].name == "type_letter"
    assert len(traj.tool_steps) == 4 and all(s.error for s in traj.tool_steps)
    assert traj.final_answer == "a"
    assert traj.final_state == {"paper": ""}


def test_react_one_action_per_turn_and_plain_text_is_an_answer():
    env = get_environment("typewriter_1")()
    two = react("type_letter", '{"letter": "a"}') + "\n" + react("type_letter", '{"letter": "b"}')
    assert [c.arguments for c in parse_react(two, env, "c").calls] == [{"letter": "a"}]
    plain = parse_react("I typed it.", env, "c")
    assert plain.calls == [] and plain.final_answer == "I typed it."
    final_first = parse_react("Final Answer: done\nAction: {\"action\": \"type_letter\"}", env, "c")
    assert final_first.final_answer.startswith("done")


def test_react_unknown_tool_gets_an_error_observation():
    example = typewriter_example("a")
    turns = [react("type_leter", '{"letter": "a"}'), "Final Answer: gave up"]
    _agent, _env, traj = play("react_json", turns, example)
    step = traj.tool_steps[0]
    assert step.error and "Did you mean 'type_letter'" in step.output


def test_scripted_model_skips_marked_observations_only():
    from langchain_core.messages import AIMessage, HumanMessage

    model = ScriptedChatModel(turns=["first", "second", "third"])
    marked = HumanMessage("Observation: OK", additional_kwargs=dict(OBSERVATION_MARK))
    history = [HumanMessage("task"), AIMessage("first"), marked]
    assert model.invoke(history).content == "second"
    assert model.invoke([*history, AIMessage("second"), HumanMessage("new request")]).content == "first"


@pytest.mark.parametrize("name", ["xml_prompting", "react_json"])
def test_prompted_graph_shape(name):
    agent = get_agent(name)(model=ScriptedChatModel(turns=["x"]))
    graph = agent.graph.get_graph()
    assert set(graph.nodes) == {"__start__", "step", "__end__"}
    assert {(e.source, e.target) for e in graph.edges} == {("__start__", "step"), ("step", "step"), ("step", "__end__")}

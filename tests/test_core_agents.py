"""The tool_calling and oracle agents, end to end with scripted models."""

from langchain_core.messages import AIMessage

from tests.conftest import call, turn
from toolgym.environments import Environment, tool
from toolgym.plugins import get_agent, get_environment
from toolgym.records import Example


def play(env_name, model, text="cat", max_steps=40, agent="tool_calling"):
    env = get_environment(env_name)()
    example = Example(id="e1", input=text, expected_steps=["type_letter"] * len(text))
    env.reset(example)
    return get_agent(agent)(model=model, model_spec="scripted", max_steps=max_steps).run(env, example)


def test_parallel_calls_are_all_executed_in_order(scripted):
    model = scripted([turn(call("type_letter", letter="c"), call("type_letter", letter="a"),
                           call("type_letter", letter="t")), "cat"])
    traj = play("typewriter_1", model)
    assert traj.status == "completed"
    assert traj.final_state == {"paper": "cat"}
    assert [s.kind for s in traj.steps] == ["model", "tool", "tool", "tool", "model"]
    assert [s.arguments["letter"] for s in traj.tool_steps] == ["c", "a", "t"]
    assert traj.final_answer == "cat"


def test_tool_error_is_an_observation_and_the_agent_recovers(scripted):
    model = scripted([turn(call("type_letter", letter="ca")), turn(call("type_letter", letter="c")), "c"])
    traj = play("typewriter_1", model, text="c")
    assert traj.status == "completed"
    first, second = traj.tool_steps
    assert first.error and "exactly one character" in first.output
    assert not second.error
    assert traj.final_state == {"paper": "c"}


def test_unknown_tool_and_extra_arguments_are_recorded(scripted):
    model = scripted([turn(call("type_leter", letter="c"), call("type_letter", letter="c", size=2)), "done"])
    traj = play("typewriter_1", model)
    assert traj.status == "completed"
    assert [s.error for s in traj.tool_steps] == [True, True]
    assert "unknown tool" in traj.tool_steps[0].output
    assert "unexpected argument(s) size" in traj.tool_steps[1].output


def test_arguments_that_are_not_json_are_malformed_calls(scripted):
    bad = {"content": "", "invalid_tool_calls": [{"name": "type_letter", "args": '{"letter": "c"', "error": "bad JSON"}]}
    model = scripted([bad, turn(call("type_letter", letter="c")), "c"])
    traj = play("typewriter_1", model, text="c")
    assert traj.status == "completed"
    malformed = traj.model_steps[0].tool_calls[0]
    assert malformed.malformed == "arguments of 'type_letter' must be a JSON object, got '{\"letter\": \"c\"' (not valid JSON)"
    assert malformed.raw == '{"letter": "c"'
    assert traj.tool_steps[0].error and "malformed tool call" in traj.tool_steps[0].output
    assert traj.final_state == {"paper": "c"}


def test_call_written_as_text_is_malformed_not_executed(scripted):
    text_call = '```json\n{"name": "type_letter", "arguments": {"letter": "c"}}\n```'
    model = scripted([text_call, turn(call("type_letter", letter="c")), "c"])
    traj = play("typewriter_1", model, text="c")
    first = traj.model_steps[0].tool_calls[0]
    assert first.malformed.startswith("tool call written as text")
    assert traj.tool_steps[0].error
    assert traj.final_state == {"paper": "c"}  # typed once, by the real call


def test_step_limit_keeps_the_steps_so_far(scripted):
    model = scripted([turn(call("type_letter", letter="a"))], repeat_last=True)
    traj = play("typewriter_1", model, max_steps=3)
    assert traj.status == "step_limit"
    assert len(traj.model_steps) == 3 and len(traj.tool_steps) == 3
    assert traj.final_state == {"paper": "aaa"}


def test_failing_model_ends_the_trajectory_with_error(scripted):
    model = scripted([turn(call("type_letter", letter="a"))])  # no second turn: raises
    traj = play("typewriter_1", model)
    assert traj.status == "error"
    assert traj.error.startswith("IndexError")
    assert traj.final_state == {"paper": "a"}


class Buggy(Environment):
    name = "buggy"

    @tool
    def explode(self) -> str:
        """Raise a bug."""
        raise KeyError("oops")


def test_bug_in_a_tool_ends_only_that_trajectory(scripted):
    env = Buggy()
    example = Example(id="b", input="go")
    model = scripted([turn(call("explode")), "done"])
    traj = get_agent("tool_calling")(model=model).run(env, example)
    assert traj.status == "error"
    assert "ToolBug" in traj.error and "KeyError" in traj.error


def test_usage_and_latency_are_recorded(scripted):
    msg = AIMessage("hi", usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15})
    traj = play("typewriter_1", scripted([msg]))
    step = traj.model_steps[0]
    assert (step.input_tokens, step.output_tokens) == (12, 3)
    assert step.latency_s >= 0


def test_oracle_replays_expected_calls():
    env = get_environment("typewriter_26")()
    example = Example(id="o", input="hey", expected_steps=list("hey"),
                      expected_calls=[{"name": c, "arguments": {}} for c in "hey"], reference="hey")
    env.reset(example)
    traj = get_agent("oracle")().run(env, example)
    assert traj.status == "completed"
    assert traj.final_state == {"paper": "hey"}
    assert traj.final_answer == "hey"


def test_malformed_call_never_matches_an_expected_step(scripted):
    from toolgym.graders.steps import StepRatio, StepsExact

    bad = {"content": "", "invalid_tool_calls": [{"name": "type_letter", "args": "{'letter': 'c'}"}]}
    traj = play("typewriter_1", scripted([bad, "c"]), text="c")
    example = Example(id="e1", input="c", expected_steps=["type_letter"])
    steps = StepsExact().grade(example, traj)
    assert steps.value == 0.0 and steps.details["actual"] == ["(malformed)"]
    assert StepRatio().grade(example, traj).value == 1.0  # the attempt still counts as a step

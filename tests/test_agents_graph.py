"""GraphAgent: a user's langgraph graph (create_react_agent) run as a toolgym agent records the
same trajectory as the built-in tool_calling agent for the same model script."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.conftest import call, turn
from toolgym.agents import as_agent_class
from toolgym.agents.graph import EpisodeRecorder, GraphAgent, episode_tools, graph_agent
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.environments import ToolError, tool
from toolgym.records import Example, Trajectory
from toolgym.suites.typewriter.environment import Typewriter1, Typewriter26

with warnings.catch_warnings():  # deprecated in langgraph 1.x in favour of langchain.agents
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


def react(model, tools, instructions):
    """The documented way to plug create_react_agent in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools, prompt=instructions or None)


ReactAgent = graph_agent(react)


def example(text: str = "ab") -> Example:
    calls = [{"name": "type_letter", "arguments": {"letter": c}} for c in text]
    return Example(id="e1", input=f"Type {text!r}", expected_calls=calls, expected_state={"paper": text})


def play(agent_cls: type, model: Any, text: str = "ab", max_steps: int = 40, env_cls: type = Typewriter1) -> Trajectory:
    env = env_cls()
    ex = example(text)
    env.reset(ex)
    return agent_cls(model=model, model_spec="scripted", max_steps=max_steps).run(env, ex)


def dump(traj: Trajectory) -> list[dict]:
    return [
        s.model_dump(exclude={"latency_s", "input_tokens", "output_tokens"}) if s.kind == "model" else s.model_dump()
        for s in traj.steps
    ]


def assert_same(a: Trajectory, b: Trajectory) -> None:
    assert dump(a) == dump(b)  # the tool steps' state patches included
    assert (a.status, a.error, a.final_answer, a.final_state) == (b.status, b.error, b.final_answer, b.final_state)
    assert a.initial_state == b.initial_state and a.state_note == b.state_note


SCRIPTS = {
    "one_call_per_turn": [turn(call("type_letter", letter="a")), turn(call("type_letter", letter="b")), "typed ab"],
    "parallel_calls": [
        turn(call("type_letter", letter="a"), call("type_letter", letter="b"), call("type_letter", letter="c"),
             call("type_letter", letter="d"), content="typing"),
        "done",
    ],
    "tool_error_then_recovery": [
        turn(call("type_letter", letter="ab")),
        turn(call("type_letter", letter="a"), call("type_letter", letter="b")),
        "typed",
    ],
    "bad_arguments": [turn(call("type_letter", letter="a", size=2), call("type_letter")), "gave up"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_graph_agent_records_the_same_trajectory_as_tool_calling(scripted, name):
    builtin = play(ToolCallingAgent, scripted(SCRIPTS[name]))
    graph = play(ReactAgent, scripted(SCRIPTS[name]))
    assert_same(builtin, graph)
    assert graph.status == "completed" and graph.agent == "react"
    assert graph.final_answer == SCRIPTS[name][-1]
    assert all(s.latency_s >= 0 for s in graph.model_steps)


def test_concurrent_tool_calls_run_in_the_models_order(scripted):
    class Slow(BaseCallbackHandler):
        """Runs in worker threads; delays earlier calls longer, to reorder a turn's calls."""

        def on_tool_start(self, serialized, input_str, **kwargs: Any) -> None:
            time.sleep({"a": 0.06, "b": 0.04, "c": 0.02}.get(kwargs["inputs"]["letter"], 0))

    def slow(model, tools, instructions):
        return react(model, tools, instructions).with_config(callbacks=[Slow()])

    traj = play(graph_agent(slow), scripted(SCRIPTS["parallel_calls"]))
    assert [s.arguments["letter"] for s in traj.tool_steps] == list("abcd")
    assert traj.final_state == {"paper": "abcd"}


def test_tool_error_is_an_observation_and_the_graph_continues(scripted):
    traj = play(ReactAgent, scripted(SCRIPTS["tool_error_then_recovery"]))
    kinds = [s.kind for s in traj.steps]
    assert kinds == ["model", "tool", "model", "tool", "tool", "model"]
    first = traj.tool_steps[0]
    assert first.error and "exactly one character" in first.output and first.call_id == "call_0"
    assert traj.final_state == {"paper": "ab"}


def test_the_model_sees_instructions_once_and_tool_errors_as_error_messages(scripted):
    seen: list[list] = []

    class Spy(type(scripted([]))):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(list(messages))
            return super()._generate(messages, stop, run_manager, **kwargs)

    traj = play(ReactAgent, Spy(turns=SCRIPTS["tool_error_then_recovery"]))
    assert traj.status == "completed"
    first, second = seen[0], seen[1]
    assert [m.type for m in first] == ["system", "human"] and first[0].content == Typewriter1.instructions
    tool_message = second[-1]
    assert tool_message.type == "tool" and tool_message.status == "error"
    assert tool_message.tool_call_id == "call_0" and "exactly one character" in tool_message.content


def test_max_steps_gives_step_limit_with_the_steps_so_far(scripted):
    model = scripted([turn(call("type_letter", letter="a"))], repeat_last=True)
    builtin = play(ToolCallingAgent, model, max_steps=3)
    graph = play(ReactAgent, model, max_steps=3)
    assert graph.status == "step_limit"
    assert len(graph.model_steps) == 3 and len(graph.tool_steps) == 3
    assert graph.final_state == {"paper": "aaa"}
    assert_same(builtin, graph)


def test_recursion_limit_gives_step_limit(scripted):
    class Tight(ReactAgent):
        def recursion_limit(self) -> int:
            return 3

    model = scripted([turn(call("type_letter", letter="a"))], repeat_last=True)
    traj = play(Tight, model, max_steps=10)
    assert traj.status == "step_limit" and traj.error is None


def test_model_calls_are_recorded_with_tokens_before_their_tool_steps(scripted):
    from langchain_core.messages import AIMessage

    message = AIMessage(
        "", tool_calls=[{"name": "type_letter", "args": {"letter": "a"}, "id": "x1", "type": "tool_call"}],
        usage_metadata={"input_tokens": 11, "output_tokens": 3, "total_tokens": 14},
    )
    traj = play(ReactAgent, scripted([message, "ok"]), text="a")
    assert [s.kind for s in traj.steps] == ["model", "tool", "model"]
    assert (traj.steps[0].input_tokens, traj.steps[0].output_tokens) == (11, 3)
    assert traj.tool_steps[0].call_id == "x1"


def test_unknown_tool_is_recorded_as_malformed_with_the_graphs_answer(scripted):
    model = scripted([turn(call("type_leter", letter="a"), call("type_letter", letter="a")), "done"])
    traj = play(ReactAgent, model, text="a")
    assert traj.status == "completed" and traj.final_state == {"paper": "a"}
    unknown, typed = traj.tool_steps
    assert unknown.malformed and unknown.error and unknown.name == "type_leter"
    assert "not a valid tool" in unknown.output  # langgraph's ToolNode wording, as the model saw it
    assert not typed.error and typed.output == "OK"
    assert traj.model_steps[0].tool_calls[0].malformed.startswith("unknown tool")


def test_arguments_that_are_not_json_end_a_react_graph(scripted):
    bad = {"content": "", "invalid_tool_calls": [{"name": "type_letter", "args": '{"letter": ', "error": "bad JSON"}]}
    traj = play(ReactAgent, scripted([bad, "never"]), text="a")
    assert traj.model_steps[0].tool_calls[0].malformed == "arguments of 'type_letter' must be a JSON object, got '{\"letter\": ' (not valid JSON)"
    assert traj.tool_steps == [] and traj.status == "completed"  # create_react_agent ignores invalid calls


def test_an_exception_inside_the_graph_is_an_error(scripted):
    def broken(model, tools, instructions):
        def node(state: MessagesState) -> dict:
            raise ValueError("graph is broken")

        graph = StateGraph(MessagesState)
        graph.add_node("node", node)
        graph.add_edge(START, "node")
        graph.add_edge("node", END)
        return graph  # uncompiled: GraphAgent compiles it

    traj = play(graph_agent(broken), scripted(["hi"]))
    assert traj.status == "error" and traj.error == "ValueError: graph is broken"
    assert traj.agent == "broken"


def test_an_exhausted_model_script_is_an_error(scripted):
    traj = play(ReactAgent, scripted([turn(call("type_letter", letter="a"))]), text="a")
    assert traj.status == "error" and traj.error.startswith("IndexError")
    assert [s.kind for s in traj.steps] == ["model", "tool"]


class Jammed(Typewriter1):
    """type_letter breaks on "z"."""

    @tool
    def type_letter(self, letter: str) -> str:
        """Type one letter on the paper.

        Args:
            letter: Exactly one character to type.
        """
        if letter == "z":
            raise KeyError("jammed")
        if len(letter) != 1:
            raise ToolError(f"letter must be exactly one character, got {letter!r}")
        self.paper += letter
        return "OK"


def test_a_broken_tool_ends_with_error(scripted):
    model = scripted([turn(call("type_letter", letter="a")), turn(call("type_letter", letter="z")), "never"])
    builtin = play(ToolCallingAgent, model, env_cls=Jammed)
    traj = play(ReactAgent, model, env_cls=Jammed)
    assert traj.status == "error" and traj.error.startswith("ToolBug") and "jammed" in traj.error
    assert traj.final_state == {"paper": "a"}
    assert_same(builtin, traj)


def test_a_broken_tool_swallowed_by_the_graph_still_ends_with_error(scripted):
    from langgraph.prebuilt import ToolNode

    def forgiving(model, tools, instructions):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return create_react_agent(model, ToolNode(tools, handle_tool_errors=True), prompt=instructions)

    model = scripted([turn(call("type_letter", letter="z")), "never"])
    traj = play(graph_agent(forgiving), model, env_cls=Jammed)
    assert traj.status == "error" and traj.error.startswith("ToolBug")
    assert [s.kind for s in traj.steps] == ["model"]


def test_environment_protocol_ends_completed(scripted):
    class OneTurn(Typewriter1):
        max_model_turns = 1

    model = scripted([turn(call("type_letter", letter="a")), turn(call("type_letter", letter="b"))])
    builtin = play(ToolCallingAgent, model, env_cls=OneTurn)
    traj = play(ReactAgent, model, env_cls=OneTurn)
    assert traj.status == "completed" and traj.final_state == {"paper": "a"}
    assert_same(builtin, traj)


def test_parameterless_tools(scripted):
    model = scripted([turn(call("a"), call("b")), turn(call("c", extra=1)), "done"])
    builtin = play(ToolCallingAgent, model, env_cls=Typewriter26)
    traj = play(ReactAgent, model, env_cls=Typewriter26)
    assert traj.final_state == {"paper": "ab"} and traj.tool_steps[-1].error
    assert_same(builtin, traj)


def test_the_graph_sees_the_environment_tool_schemas(scripted):
    from toolgym.agents import Episode

    env = Typewriter1()
    env.reset(example())
    tools = episode_tools(EpisodeRecorder(Episode(env, example()), max_steps=3))
    assert [convert_to_openai_tool(t) for t in tools] == [convert_to_openai_tool(t) for t in env.tools.values()]


def test_create_react_agent_itself_is_a_factory(scripted):
    agent = as_agent_class(create_react_agent, "react_direct")
    assert issubclass(agent, GraphAgent) and agent.name == "react_direct"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = play(agent, scripted(SCRIPTS["one_call_per_turn"]))
    assert_same(play(ToolCallingAgent, scripted(SCRIPTS["one_call_per_turn"])), traj)


def test_graph_agent_class():
    agent = graph_agent(react, name="mine")
    assert agent.name == "mine" and agent.factory is react and ReactAgent.name == "react"
    assert as_agent_class(ReactAgent) is ReactAgent
    described = agent(model=None, model_spec="scripted", max_steps=5).describe()
    assert described == {"agent": "mine", "max_steps": 5, "factory": f"{__name__}:react"}

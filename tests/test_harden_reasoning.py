"""Reasoning models: reasoning text is recorded apart, never parsed as an action, never graded."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from toolgym.parsing import message_reasoning, split_reasoning
from toolgym.plugins import get_agent, get_environment, get_grader
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Trajectory


def example(text: str = "hi") -> Example:
    return Example(id="ex", input=text, expected_steps=["type_letter"] * len(text),
                   expected_state={"paper": text}, reference=text)


def play(agent_name: str, turns: list, ex: Example | None = None):
    ex = ex or example()
    env = get_environment("typewriter_1")()
    env.reset(ex)
    agent = get_agent(agent_name)(model=ScriptedChatModel(turns=turns), model_spec="scripted:test", max_steps=5)
    return agent.run(env, ex)


@pytest.mark.parametrize(
    ("text", "visible", "reasoning"),
    [
        ("<think>let me see</think>\n\nhi", "hi", "let me see"),
        ("<THINKING>a</THINKING>b<think>c</think>d", "bd", "a\n\nc"),
        ("the template opened it</think>answer", "answer", "the template opened it"),
        ("<think>cut at the token limit", "", "cut at the token limit"),
        ("<reasoning>r</reasoning> x", "x", "r"),
        ("<|channel|>analysis<|message|>think hard<|end|><|start|>assistant<|channel|>final<|message|>42<|return|>",
         "42", "think hard"),
        ("no reasoning here < 3", "no reasoning here < 3", None),
    ],
)
def test_split_reasoning_forms(text, visible, reasoning):
    assert split_reasoning(text) == (visible, reasoning)


def test_reasoning_sent_apart_is_kept():
    vllm = AIMessage("hi", additional_kwargs={"reasoning_content": "vLLM thought"})
    anthropic = AIMessage([{"type": "thinking", "thinking": "Claude thought", "signature": "s"},
                           {"type": "text", "text": "hi"}])
    assert message_reasoning(vllm) == "vLLM thought"
    assert message_reasoning(anthropic) == "Claude thought"


@pytest.mark.parametrize("agent", ["tool_calling", "xml_prompting", "react_json", "direct"])
def test_final_answer_without_reasoning_is_graded(agent):
    reply = "<think>the answer is not bye, it is hi; wrong answer: bye</think>hi"
    ex = Example(id="ex", input="hi", reference="hi")
    traj = play(agent, [reply], ex)
    assert traj.final_answer == "hi"
    assert traj.model_steps[0].reasoning.startswith("the answer is not bye")
    ex_bye = Example(id="ex", input="hi", reference="bye")
    assert get_grader("answer_match").grade(ex_bye, traj).value == 0.0


def test_answer_match_strips_reasoning_from_foreign_trajectories():
    traj = Trajectory(example_id="ex", env="typewriter_1", agent="x", status="completed",
                      final_answer="<think>maybe 41</think>The answer is 42")
    ex = Example(id="ex", input="?", reference=41)
    assert get_grader("answer_match").grade(ex, traj).value == 0.0


def test_tool_calling_call_written_inside_reasoning_is_not_a_call():
    reply = '<think>I could write {"name": "type_letter", "arguments": {"letter": "h"}}</think>done'
    traj = play("tool_calling", [reply])
    assert traj.tool_steps == [] and traj.final_answer == "done"


def test_xml_calls_and_final_answer_inside_reasoning_are_ignored():
    think = ("<think><tool_call><name>type_letter</name><arguments>{\"letter\": \"x\"}</arguments></tool_call>"
             "<final_answer>wrong</final_answer></think>")
    call = "<tool_call><name>type_letter</name><arguments>{\"letter\": \"h\"}</arguments></tool_call>"
    traj = play("xml_prompting", [think + call, "<think>mentions <tool_result> here</think><final_answer>h</final_answer>"])
    assert traj.final_state == {"paper": "h"}
    assert traj.final_answer == "h"


def test_react_final_answer_and_action_inside_reasoning_are_ignored():
    first = ('<think>Final Answer: wrong\nObservation: invented\n```json\n{"action": "type_letter", '
             '"action_input": {"letter": "x"}}\n```</think>\nAction:\n```json\n'
             '{"action": "type_letter", "action_input": {"letter": "h"}}\n```')
    traj = play("react_json", [first, "<think>Observation: nothing</think>Final Answer: h"])
    assert traj.final_state == {"paper": "h"}
    assert traj.final_answer == "h"


def test_reasoning_content_and_tokens_recorded_for_tool_calling():
    message = AIMessage(
        "hi", additional_kwargs={"reasoning_content": "thinking..."},
        usage_metadata={"input_tokens": 5, "output_tokens": 20, "total_tokens": 25,
                        "output_token_details": {"reasoning": 17}},
    )
    traj = play("tool_calling", [message])
    step = traj.model_steps[0]
    assert (step.text, step.reasoning, step.reasoning_tokens, step.output_tokens) == ("hi", "thinking...", 17, 20)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("spec", ["openai-compatible:fake", "vllm:fake", "openai:fake"])
def test_reasoning_beside_the_message_over_http_is_recorded(field, spec, tmp_path, monkeypatch):
    """An OpenAI-compatible server on 127.0.0.1 (tests/fakeserver.py) answering with the
    reasoning in ``message.reasoning_content`` (vLLM, DeepSeek) or ``message.reasoning``
    (OpenRouter): every model turn's reasoning is in the trajectory."""
    from tests.fakeserver import FakeModelServer
    from toolgym.cli import main
    from toolgym.runio import read_trajectories

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    with FakeModelServer(reasoning_field=field) as server:
        assert main(["run", "--env", "typewriter_1", "--model", spec, "--base-url", server.url + "/v1",
                     "--limit", "2", "--out", str(out), "--no-progress", "--max-retries", "0"]) == 0
    trajectories = read_trajectories(out)
    assert [t.status for t in trajectories] == ["completed", "completed"]
    for t in trajectories:
        assert [s.reasoning for s in t.model_steps] == [f"thinking about turn {i}" for i in range(len(t.model_steps))]

"""Environments whose tools depend on the example: agents prepare the model (bind the tools,
write the tools prompt) once per tool set (``Environment.tool_set_key``), and prompted agents
stop at the environment's ``max_model_turns`` as the native agent does."""

from __future__ import annotations

from toolgym import Environment, evaluate, schema_tool
from toolgym.providers.scripted import ScriptedChatModel

BOUND: list = []
PROMPTS: list = []


class PerExample(Environment):
    """One tool, named by the example's metadata."""

    name = "per_example"
    max_model_turns = 1

    def reset(self, example):
        self.tool_name = example.metadata["tool"]

    def tool_functions(self):
        return {self.tool_name: schema_tool(self.tool_name, "Do it.", {"type": "object", "properties": {}}, lambda: "ok")}

    def tool_set_key(self):
        return (type(self), self.tool_name)


class Recording(ScriptedChatModel):
    def bind_tools(self, tools, **kwargs):
        BOUND.append([t.name for t in tools])
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        PROMPTS.append(str(messages[0].content))
        return super()._generate(messages, stop, run_manager, **kwargs)


DATA = [{"id": f"e{i}", "input": f"use {name}", "metadata": {"tool": name}} for i, name in enumerate(["alpha", "beta", "alpha"])]


def test_the_default_key_is_the_class():
    assert Environment().tool_set_key() is Environment


def test_native_agent_binds_once_per_tool_set():
    BOUND.clear()
    model = Recording(by_input={f"use {n}": [{"tool_calls": [{"name": n, "args": {}}]}] for n in ("alpha", "beta")})
    result = evaluate(PerExample, model=model, dataset=DATA, graders=[])
    assert BOUND == [["alpha"], ["beta"]]
    assert [t.tool_steps[0].name for t in result.trajectories] == ["alpha", "beta", "alpha"]
    assert all(not t.tool_steps[0].error for t in result.trajectories)


def test_prompted_agent_writes_one_tools_prompt_per_tool_set_and_stops_at_the_protocol():
    PROMPTS.clear()
    turns = {f"use {n}": [f"<tool_call><name>{n}</name><arguments>{{}}</arguments></tool_call>", "again"] for n in ("alpha", "beta")}
    result = evaluate(PerExample, agent="xml_prompting", model=Recording(by_input=turns), dataset=DATA, graders=[])
    assert ["alpha" in p for p in PROMPTS] == [True, False, True] and "beta" in PROMPTS[1]
    assert [len(t.model_steps) for t in result.trajectories] == [1, 1, 1]  # max_model_turns = 1
    assert all(t.status == "completed" for t in result.trajectories)

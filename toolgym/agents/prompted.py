"""Shared machinery of prompted agents: models that are *told* about the tools in the system
prompt and write their calls as text, which the agent parses (``xml_prompting``,
``react_json``).

:class:`PromptedAgent` is a langgraph ``StateGraph`` (one ``step`` node: a model turn, then its calls)
like the native ``tool_calling`` agent, but the model is never bound to tools: a subclass
describes the tools (:meth:`PromptedAgent.tools_prompt`), parses the reply
(:meth:`PromptedAgent.parse`) and formats observations (:meth:`PromptedAgent.observation`).
Blocks that cannot be parsed become malformed :class:`~toolgym.records.ToolCall` records, are
answered with an error observation, and count as steps like any other call.

Observations go back as user messages marked with ``additional_kwargs={"toolgym":
"observation"}`` (:func:`observation_message`); chat providers do not send that field, and the
scripted test model uses it to keep counting turns across observations.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END

from toolgym.agents import Agent, Episode
from toolgym.agents.tool_calling import AgentState, history_input, model_tool_loop, recursion_limit
from toolgym.environments import Environment
from toolgym.parsing import (
    OBSERVATION_MARK,
    message_tokens,
    observation_message,
    reasoning_tokens,
    reply_parts,
)
from toolgym.records import ModelStep, ToolCall, ToolStep

__all__ = ["OBSERVATION_MARK", "Parsed", "PromptedAgent", "observation_message", "tool_specs"]


def tool_specs(env: Environment) -> list[dict[str, Any]]:
    """The environment's tools as OpenAI-style function specs (``name``, ``description``,
    ``parameters`` as JSON Schema), generated from each tool's signature and docstring.

    Args:
        env: Any environment instance (tool schemas depend only on its class).
    """
    return [convert_to_openai_tool(t)["function"] for t in env.tools.values()]


@dataclass
class Parsed:
    """What a prompted model's reply asks for.

    Attributes:
        calls: Tool calls in the order written (malformed ones included); empty when the
            reply is a final answer.
        final_answer: The answer text when the reply contains no call, else ``None``.
    """

    calls: list[ToolCall] = field(default_factory=list)
    final_answer: str | None = None


class PromptedAgent(Agent):
    """Base class of agents whose model writes tool calls as text.

    Subclasses implement :meth:`tools_prompt`, :meth:`parse` and :meth:`observation`. The
    episode ends when a reply contains no call (``completed``, with the parsed final answer)
    or after ``max_steps`` model turns (``step_limit``). Every call of a reply is executed in
    order. Plays multi-turn episodes: each later user message joins the same history.
    """

    multi_turn = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prompts: dict[Any, str] = {}
        self.graph = self.build_graph()

    # --- what subclasses define ------------------------------------------------------------
    def tools_prompt(self, env: Environment) -> str:
        """The system-prompt section describing the tools and the reply format."""
        raise NotImplementedError

    def parse(self, text: str, env: Environment, turn: int) -> Parsed:
        """Parse one reply into calls or a final answer. Never raises for bad model output.

        Args:
            text: The model's reply.
            env: The environment (for tool names and parameter schemas).
            turn: 1-based model turn, used to make call ids (``<agent>_<turn>_<i>``).
        """
        raise NotImplementedError

    def observation(self, results: list[tuple[ToolCall, ToolStep]]) -> str:
        """The text sent back after executing a reply's calls."""
        raise NotImplementedError

    # --- shared ------------------------------------------------------------------------------
    def system_prompt(self, env: Environment) -> str:
        """The environment's instructions followed by the tools section (built once per
        tool set: :meth:`~toolgym.environments.Environment.tool_set_key`)."""
        key = env.tool_set_key()
        if key not in self._prompts:
            parts = [env.instructions.strip(), self.tools_prompt(env).strip()]
            self._prompts[key] = "\n\n".join(p for p in parts if p)
        return self._prompts[key]

    def start_messages(self, episode: Episode) -> list[BaseMessage]:
        """The environment's prompt with its system message replaced by :meth:`system_prompt`."""
        messages = episode.env.prompt(episode.example)
        system = SystemMessage(self.system_prompt(episode.env))
        if messages and isinstance(messages[0], SystemMessage):
            return [system, *messages[1:]]
        return [system, *messages]

    def call_id(self, turn: int, index: int) -> str:
        """Deterministic id of the ``index``-th call of model turn ``turn``."""
        return f"{self.name}_{turn}_{index}"

    def build_graph(self):
        """Compile the step loop (:func:`model_tool_loop`) once; each episode travels in the run config."""
        return model_tool_loop(self)

    async def _model_node(self, state: AgentState, config: RunnableConfig) -> None:
        episode: Episode = config["configurable"]["episode"]
        start = time.perf_counter()
        message = await self.model.ainvoke(history_input(episode.messages))
        latency = time.perf_counter() - start
        text, reasoning = reply_parts(message)  # only text outside the reasoning is an action
        episode.messages.append(AIMessage(text))
        parsed = self.parse(text, episode.env, episode.model_turns + 1)
        usage = getattr(message, "usage_metadata", None) or {}
        episode.record_model(
            ModelStep(
                text=text,
                tool_calls=parsed.calls,
                latency_s=latency,
                input_tokens=usage.get("input_tokens"),
                output_tokens=usage.get("output_tokens"),
                reasoning=reasoning,
                reasoning_tokens=reasoning_tokens(message),
                tokens=message_tokens(message),
            )
        )
        if not parsed.calls:
            episode.final_answer = parsed.final_answer

    async def _tools_node(self, state: AgentState, config: RunnableConfig) -> None:
        episode: Episode = config["configurable"]["episode"]
        step = episode.steps[-1]
        results = [(call, episode.execute(call)) for call in step.tool_calls]
        episode.messages.append(observation_message(self.observation(results)))

    def _after_model(self, state: AgentState, config: RunnableConfig) -> str:
        episode: Episode = config["configurable"]["episode"]
        return "tools" if episode.steps[-1].tool_calls else END

    def _after_tools(self, state: AgentState, config: RunnableConfig) -> str:
        episode: Episode = config["configurable"]["episode"]
        protocol = episode.env.max_model_turns
        if protocol is not None and episode.model_turns >= protocol:
            return END  # the environment's protocol ends the episode here (status completed)
        limit = self.limit_reached(episode)
        if limit is not None:
            episode.status = limit
            return END
        return "model"

    def write_calls(self, calls: list[ToolCall]) -> str:
        """A reply that makes ``calls`` in this architecture's format (for the reference
        steps of teacher forcing, which no model wrote)."""
        raise ValueError(f"the {self.name} agent cannot write a reference call as text")

    def prefix_messages(self, steps: list[Any]) -> list[BaseMessage]:
        """Each model turn as its reply text (a reference turn, which has none, written by
        :meth:`write_calls`), the tool steps of each turn as one observation message."""
        messages: list[BaseMessage] = []
        calls: list[ToolCall] = []
        results: list[tuple[ToolCall, ToolStep]] = []

        def flush() -> None:
            if results:
                messages.append(observation_message(self.observation(list(results))))
                results.clear()

        for step in steps:
            if step.kind == "user":
                if step.turn > 1 and not (step.stop and not step.text):  # turn 1 (the input) is in the prompt
                    flush()
                    messages.append(HumanMessage(step.text))
                continue
            if step.kind == "model":
                flush()
                calls = list(step.tool_calls)
                messages.append(AIMessage(step.text or self.write_calls(calls)))
            else:
                call = next((c for c in calls if c.id == step.call_id),
                            ToolCall(id=step.call_id, name=step.name, arguments=step.arguments))
                results.append((call, step))
        flush()
        return messages

    async def play(self, episode: Episode) -> None:
        episode.messages = self.start_messages(episode)
        if episode.prefix:
            episode.messages += self.prefix_messages(episode.prefix)
        await self._invoke(episode)

    async def play_turn(self, episode: Episode, text: str) -> None:
        """The user's message joins the history; the system prompt is written again for the
        environment's tools as they are now."""
        if episode.messages and isinstance(episode.messages[0], SystemMessage):
            episode.messages[0] = SystemMessage(self.system_prompt(episode.env))
        episode.messages.append(HumanMessage(text))
        await self._invoke(episode)

    async def _invoke(self, episode: Episode) -> None:
        await self.graph.ainvoke(
            {"turns": 0},
            config={"configurable": {"episode": episode}, "recursion_limit": recursion_limit(self.max_steps)},
        )


def parameter_schemas(env: Environment, name: str) -> dict[str, dict[str, Any]]:
    """Parameter name → JSON schema of tool ``name`` (``{}`` for an unknown tool)."""
    tool = env.tools.get(name)
    if tool is None:
        return {}
    return convert_to_openai_tool(tool)["function"]["parameters"].get("properties", {})


def coerce_text_argument(value: str, schema: dict[str, Any]) -> Any:
    """Turn an argument written as plain text into the JSON value its schema asks for.

    Strings stay as written; other types are read as JSON when possible (``"3"`` → ``3``,
    ``"[1, 2]"`` → ``[1, 2]``), else kept as text for the environment's validation to
    reject with a clear error observation.
    """
    if schema.get("type") == "string":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value

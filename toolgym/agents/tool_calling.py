"""The native tool-calling agent: a langgraph StateGraph whose one node plays a step (a model
turn and the tool calls it makes) and routes back to itself until the episode ends."""

from __future__ import annotations

import time
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from toolgym.agents import Agent, Episode, register_agent
from toolgym.parsing import model_step, observation_message


class AgentState(TypedDict):
    """Graph state: ``turns``, the model turns played before the graph was invoked (0).

    The episode travels in the run config (``config["configurable"]["episode"]``): its chat
    history ``Episode.messages`` is a plain list extended in place, so a step costs O(new
    messages) (langgraph's ``add_messages`` reducer rebuilds the whole history at every step,
    and langgraph may apply a reducer more than once per update, so an in-place reducer is not
    safe), and its live turn count is ``Episode.model_turns``. The nodes write no state: a
    write costs a channel update and a values snapshot per step.
    """

    turns: int


def history_input(messages: list[BaseMessage]) -> ChatPromptValue:
    """A chat history as a chat model's input: what ``model.ainvoke(messages)`` makes of the
    list, without re-checking every message at every turn (langchain-core converts a list
    message by message, an O(history) cost per step that made a 200-step episode's steps 7%
    dearer than a 10-step one's). A copy of the list: a tracer keeping the input sees this turn's
    history, not the messages appended later.

    Args:
        messages (list[BaseMessage]): The episode's history (every item a ``BaseMessage``).

    Returns:
        ChatPromptValue: The input for ``ainvoke`` of any langchain chat model.
    """
    return ChatPromptValue.model_construct(messages=list(messages))


def model_tool_loop(agent: Any) -> Any:
    """Compile the graph shared by the architectures: START → step; step → step or END.

    One ``step`` node is one agent step: the model turn (``agent._model_node``), then, when
    ``agent._after_model`` routes to ``"tools"``, the turn's tool calls (``agent._tools_node``),
    and ``agent._after_tools`` decides between another step and END. The node routes with
    ``Command(goto=...)``, so a step costs one langgraph superstep and no routing runnables
    (a graph with separate model and tool nodes and conditional edges pays two supersteps and
    two routing runnables per step: 0.53 against 0.31 ms of overhead per step, BENCHMARKS.md).
    """

    async def step(state: AgentState, config: RunnableConfig) -> Command:
        await agent._model_node(state, config)
        if agent._after_model(state, config) == END:
            return Command(goto=END)
        await agent._tools_node(state, config)
        return Command(goto=END if agent._after_tools(state, config) == END else "step")

    graph = StateGraph(AgentState)
    graph.add_node("step", step, destinations=("step", END))
    graph.add_edge(START, "step")
    return graph.compile()


def recursion_limit(max_steps: int) -> int:
    """langgraph's superstep budget for an episode of at most ``max_steps`` steps (one
    superstep per step, and a margin so that ``step_limit`` ends it, not langgraph)."""
    return max_steps + 5


@register_agent("tool_calling")
class ToolCallingAgent(Agent):
    """Native tool calling: the model is bound to the environment's tools; every call of a
    turn is executed in order (parallel calls are never dropped) and its observation returned
    as a ToolMessage; the episode ends when the model answers without calling a tool
    (``completed``), when the environment's ``max_model_turns`` is reached (``completed``), or
    after ``max_steps`` model turns (``step_limit``).

    Malformed calls (arguments not JSON, call written as text) are recorded as such and
    answered with an error observation. Plays multi-turn episodes: each later user message
    joins the same history.
    """

    multi_turn = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bound: dict[Any, Any] = {}
        self.graph = self.build_graph()

    def build_graph(self):
        """Compile the step loop (:func:`model_tool_loop`) once; each episode travels in the run config."""
        return model_tool_loop(self)

    def model_for(self, episode: Episode) -> Any:
        """The runnable called for each model turn: the model bound to the environment's
        tools (bound once per tool set: :meth:`~toolgym.environments.Environment.tool_set_key`)."""
        key = episode.env.tool_set_key()
        if key not in self._bound:
            self._bound[key] = self.model.bind_tools(list(episode.env.tools.values()))
        return self._bound[key]

    async def _model_node(self, state: AgentState, config: RunnableConfig) -> None:
        episode: Episode = config["configurable"]["episode"]
        model = config["configurable"]["model"]
        start = time.perf_counter()
        message = await model.ainvoke(history_input(episode.messages))
        episode.messages.append(message)
        step = model_step(message, time.perf_counter() - start, episode.env.functions.keys())
        episode.record_model(step)
        if not step.tool_calls:
            episode.final_answer = step.text

    async def _tools_node(self, state: AgentState, config: RunnableConfig) -> None:
        episode: Episode = config["configurable"]["episode"]
        step = episode.steps[-1]
        replies: list[BaseMessage] = []
        message = episode.messages[-1]
        ids = {c.get("id") for c in message.tool_calls} | {c.get("id") for c in message.invalid_tool_calls}
        for call in step.tool_calls:
            result = episode.execute(call)
            if call.id in ids:
                replies.append(
                    ToolMessage(
                        result.output,
                        tool_call_id=call.id,
                        name=call.name,
                        status="error" if result.error else "success",
                    )
                )
            else:  # a call written as text has no id the provider knows: answer as the user
                replies.append(observation_message(result.output))
        episode.messages.extend(replies)

    def _after_model(self, state: AgentState, config: RunnableConfig) -> str:
        episode: Episode = config["configurable"]["episode"]
        return "tools" if episode.steps[-1].tool_calls else END

    def prefix_messages(self, steps: list[Any]) -> list[BaseMessage]:
        """Each model turn as an AIMessage with its calls (malformed ones as invalid tool
        calls, with their raw text), each tool step as the ToolMessage answering its call
        (or, for a call the provider gave no id, the observation message)."""
        messages: list[BaseMessage] = []
        ids: set[str] = set()
        for step in steps:
            if step.kind == "user":
                if step.turn > 1 and not (step.stop and not step.text):  # turn 1 (the input) is in the prompt
                    messages.append(HumanMessage(step.text))
                continue
            if step.kind == "model":
                good = [c for c in step.tool_calls if not c.malformed]
                bad = [c for c in step.tool_calls if c.malformed]
                ids = {c.id for c in step.tool_calls}
                messages.append(AIMessage(
                    step.text,
                    tool_calls=[{"name": c.name, "args": c.arguments, "id": c.id, "type": "tool_call"} for c in good],
                    invalid_tool_calls=[{"name": c.name, "args": c.raw, "id": c.id, "error": c.malformed,
                                         "type": "invalid_tool_call"} for c in bad],
                ))
            elif step.call_id in ids:
                messages.append(ToolMessage(step.output, tool_call_id=step.call_id, name=step.name,
                                            status="error" if step.error else "success"))
            else:
                messages.append(observation_message(step.output))
        return messages

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

    async def play(self, episode: Episode) -> None:
        episode.messages = episode.env.prompt(episode.example)
        if episode.prefix:
            episode.messages += self.prefix_messages(episode.prefix)
        await self._invoke(episode)

    async def play_turn(self, episode: Episode, text: str) -> None:
        """The user's message joins the history as a ``HumanMessage``; the model is bound to
        the environment's tools as they are now."""
        episode.messages.append(HumanMessage(text))
        await self._invoke(episode)

    async def _invoke(self, episode: Episode) -> None:
        configurable = {"episode": episode, "model": self.model_for(episode)}
        await self.graph.ainvoke(
            {"turns": 0},
            config={"configurable": configurable, "recursion_limit": recursion_limit(self.max_steps)},
        )

"""Run a user's own langgraph graph as a toolgym agent.

A *graph factory* is any callable ``factory(model, tools, instructions)`` that returns a compiled
langgraph graph whose state has a ``messages`` list (the shape of
``langgraph.prebuilt.create_react_agent``), for example::

    from langgraph.prebuilt import create_react_agent

    def react(model, tools, instructions):
        return create_react_agent(model, tools, prompt=instructions or None)

``--agent mymodule:react`` (or :func:`graph_agent`) turns it into an :class:`GraphAgent`
subclass. The graph is driven unchanged; toolgym only observes it:

* the tools handed to the factory are toolgym tools: every call is executed through
  :meth:`~toolgym.agents.Episode.execute` and recorded as a ``ToolStep`` exactly as the built-in
  agents record it (the model's call id, the environment's own argument checks, error
  observations as text);
* a callback handler in the run config records one ``ModelStep`` per chat-model call as it
  ends (before that turn's tools run), and enforces ``max_steps`` and the environment's
  ``max_model_turns`` by stopping the graph when it starts one model turn too many.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any, ClassVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import LLMResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphRecursionError

from toolgym.agents import Agent, Episode
from toolgym.environments import ToolBug
from toolgym.parsing import message_text, model_step, new_call_id, strip_reasoning
from toolgym.records import Status, ToolCall, ToolStep

__all__ = ["EpisodeRecorder", "GraphAgent", "GraphFactory", "episode_tools", "graph_agent"]

GraphFactory = Callable[[Any, list[BaseTool], str], Any]
"""``factory(model, tools, instructions) -> compiled graph`` (see :meth:`GraphAgent.build`)."""

ORDER_TIMEOUT_S = 0.5
"""How long a tool call waits for the calls the model made before it in the same turn (the
graph may run a turn's calls concurrently); after that it runs anyway (the graph skipped or
reordered them on purpose)."""


class _Stop(Exception):
    """Raised from the callback handler to stop the graph before a model turn too many."""

    def __init__(self, status: Status) -> None:
        super().__init__(f"episode stopped ({status})")
        self.status = status


class _HideStops(logging.Filter):
    """Drops langchain-core's ``Error in EpisodeRecorder.on_chat_model_start callback:
    _Stop(...)`` warning: a :class:`_Stop` is how toolgym ends a graph at its turn budget (the
    trajectory records the status), not an error. Every other callback error is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[0] == "EpisodeRecorder" and str(args[2]).startswith("_Stop("))


logging.getLogger("langchain_core.callbacks.manager").addFilter(_HideStops())


class EpisodeRecorder(BaseCallbackHandler):
    """Records a graph run into an :class:`~toolgym.agents.Episode`.

    As a callback handler it records every chat-model (or LLM) call as a ``ModelStep`` when it
    ends and stops the graph when a model call would exceed the episode's turn budget. Its
    :meth:`execute` runs the tool calls the graph makes, in the order the model made them.

    Args:
        episode: The episode being played.
        max_steps: Model turns allowed; starting one more stops the graph (``step_limit``).
        max_repeats: The repeat guard (:class:`~toolgym.agents.Agent`): starting a model turn
            after this many identical consecutive tool calls stops the graph
            (``repeat_limit``); ``None``: off.
    """

    run_inline = True  # called in the event loop, in order, never in a worker thread
    raise_error = True  # a stop or a broken tool raised from a callback must end the graph

    def __init__(self, episode: Episode, max_steps: int, max_repeats: int | None = None) -> None:
        super().__init__()
        self.episode = episode
        self.max_steps = max_steps
        self.max_repeats = max_repeats
        self.tool_names = set(episode.env.tools)
        self.bug: ToolBug | None = None
        self.last_message: AIMessage | None = None
        self._started: dict[UUID, float] = {}
        # the tool calls of the current model turn, and per call: done (well-formed calls),
        # claimed by an execution, and the step recorded for it
        self._calls: list[ToolCall] = []
        self._done: list[asyncio.Event | None] = []
        self._claimed: list[bool] = []
        self._steps: dict[int, ToolStep] = {}

    # --- model turns ---------------------------------------------------------------------
    def _start(self, run_id: UUID) -> None:
        if self.bug is not None:  # a broken tool whose error the graph swallowed
            raise self.bug
        turns = self.episode.model_turns
        protocol = self.episode.env.max_model_turns
        if protocol is not None and turns >= protocol:
            raise _Stop("completed")
        if self.max_repeats is not None and self.episode.repeated_calls() >= self.max_repeats:
            raise _Stop("repeat_limit")
        if turns >= self.max_steps:
            raise _Stop("step_limit")
        self._started[run_id] = time.perf_counter()

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Check the turn budget and start the turn's clock.

        Raises:
            _Stop: when the turn would exceed ``max_steps`` or ``max_model_turns``.
            ToolBug: when a tool broke earlier and the graph went on.
        """
        self._start(run_id)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any) -> None:
        """As :meth:`on_chat_model_start`, for text-completion models."""
        self._start(run_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Record the finished model turn as a ``ModelStep`` (text, tool calls including
        malformed ones, latency, token counts)."""
        latency = time.perf_counter() - self._started.pop(run_id, time.perf_counter())
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        message = getattr(generation, "message", None)
        if not isinstance(message, AIMessage):
            message = AIMessage(generation.text if generation is not None else "")
        step = model_step(message, latency, self.tool_names)
        self.episode.record_model(step)
        self.last_message = message
        self._calls = list(step.tool_calls)
        self._done = [None if c.malformed else asyncio.Event() for c in self._calls]
        self._claimed = [False] * len(self._calls)
        self._steps = {}

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Forget a failed call's clock (the exception ends the episode)."""
        self._started.pop(run_id, None)

    # --- tool calls ----------------------------------------------------------------------
    def _claim(self, call_id: str, name: str, malformed: bool) -> int | None:
        """The index in the current turn of the first unclaimed call with this id and name."""
        for i, call in enumerate(self._calls):
            if not self._claimed[i] and call.id == call_id and call.name == name and bool(call.malformed) == malformed:
                self._claimed[i] = True
                return i
        return None

    async def execute(self, call_id: str | None, name: str, arguments: Any) -> ToolStep:
        """Run one tool call the graph made and record its ``ToolStep``.

        A call of the current model turn first waits (at most :data:`ORDER_TIMEOUT_S`) for the
        well-formed calls the model made before it, so a graph that runs a turn's calls
        concurrently still changes the environment in the model's order.

        Raises:
            ToolBug: if the tool is broken (also remembered, in case the graph swallows it).
        """
        index = self._claim(call_id, name, malformed=False) if call_id else None
        events = self._done
        if index is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ORDER_TIMEOUT_S
            for event in events[:index]:
                if event is None or event.is_set():
                    continue
                try:
                    await asyncio.wait_for(event.wait(), max(deadline - loop.time(), 0))
                except TimeoutError:
                    break
        try:
            return self._execute(index, call_id, name, arguments)
        finally:
            if index is not None and events[index] is not None:
                events[index].set()

    def execute_sync(self, call_id: str | None, name: str, arguments: Any) -> ToolStep:
        """:meth:`execute` for graphs that call tools synchronously (no ordering wait)."""
        index = self._claim(call_id, name, malformed=False) if call_id else None
        return self._execute(index, call_id, name, arguments)

    def _execute(self, index: int | None, call_id: str | None, name: str, arguments: Any) -> ToolStep:
        call = ToolCall(id=call_id or new_call_id(), name=name, arguments=arguments if isinstance(arguments, dict) else {})
        if not isinstance(arguments, dict):  # let the environment word the error
            result = self.episode.env.call(name, arguments)
            step = ToolStep(call_id=call.id, name=name, output=result.output, error=result.error, rejected=result.rejected,
                            state_patch=self.episode.states.unchanged())
            self.episode.steps.append(step)
        else:
            try:
                step = self.episode.execute(call)
            except ToolBug as exc:
                self.bug = exc
                raise
        if index is not None:
            self._steps[index] = step
        return step

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        """Record the graph's own answers to malformed calls of the current turn (a tool name
        the graph does not know, answered by langgraph's ToolNode): a ``ToolStep`` with
        ``malformed=True`` and the text the model was shown, placed in call order."""
        if not any(c.malformed for c in self._calls):
            return
        if isinstance(outputs, dict):
            outputs = outputs.get("messages")
        messages = outputs if isinstance(outputs, list) else [outputs]
        if not messages or not all(isinstance(m, ToolMessage) for m in messages):
            return  # not a tool node's output (a whole history repeats earlier call ids)
        for message in messages:
            index = self._claim(message.tool_call_id, message.name or "", malformed=True)
            if index is None:
                index = self._claim(message.tool_call_id, self._name_of(message.tool_call_id), malformed=True)
            if index is None:
                continue
            call = self._calls[index]
            step = ToolStep(
                call_id=call.id, name=call.name, arguments=call.arguments, output=message_text(message),
                error=message.status == "error", malformed=True, state_patch=self.episode.states.unchanged(),
            )
            later = [self._steps[i] for i in sorted(self._steps) if i > index]
            steps = self.episode.steps
            position = next((p for p, s in enumerate(steps) if later and s is later[0]), len(steps))
            self.episode.steps.insert(position, step)
            self._steps[index] = step

    def _name_of(self, call_id: str) -> str:
        return next((c.name for c in self._calls if c.id == call_id), "")


class _EpisodeTool(StructuredTool):
    """An environment tool as the graph sees it: the environment's name, description and
    argument schema; its call is executed by :meth:`EpisodeRecorder.execute` with the
    model's call id and the raw arguments (the environment checks them, as for the built-in
    agents, so a bad argument is an error observation rather than a langchain validation
    error)."""

    def _to_args_and_kwargs(self, tool_input: str | dict[str, Any], tool_call_id: str | None) -> tuple[tuple, dict]:
        return (), {"call_id": tool_call_id, "arguments": tool_input}


def episode_tools(recorder: EpisodeRecorder) -> list[BaseTool]:
    """One langchain ``StructuredTool`` per environment tool (same name, description and args
    schema) that executes and records its calls through ``recorder``.

    Each returns a ``ToolMessage`` (status ``error`` for an error observation) when invoked with
    a model tool call, else the observation text.
    """
    tools: list[BaseTool] = []
    for name, original in recorder.episode.env.tools.items():

        def reply(step: ToolStep, call_id: str | None) -> ToolMessage | str:
            if call_id is None:
                return step.output
            status = "error" if step.error else "success"
            return ToolMessage(step.output, tool_call_id=call_id, name=step.name, status=status)

        def run(*, call_id: str | None, arguments: Any, _name: str = name) -> ToolMessage | str:
            return reply(recorder.execute_sync(call_id, _name, arguments), call_id)

        async def arun(*, call_id: str | None, arguments: Any, _name: str = name) -> ToolMessage | str:
            return reply(await recorder.execute(call_id, _name, arguments), call_id)

        tools.append(
            _EpisodeTool(
                name=name, description=original.description, args_schema=original.args_schema,
                func=run, coroutine=arun,
            )
        )
    return tools


class GraphAgent(Agent):
    """A user's langgraph graph, built per episode by :attr:`factory`, run as a toolgym agent.

    For each episode the factory is called as ``factory(self.model, tools, instructions)``
    (see :meth:`build`) and the graph is run with ``ainvoke({"messages": [...]})``:

    * **input**: ``env.prompt(example)`` without its leading system message when that message
      is the environment's ``instructions``, which go to the factory instead (so the model
      does not see them twice).
    * **tools**: :func:`episode_tools`; every call is recorded as a ``ToolStep``; a tool
      error is returned to the graph as text (a ``ToolMessage`` with status ``error``); a
      broken tool (``ToolBug``) propagates (langgraph's ToolNode re-raises it by default; if
      the graph swallows it, it is raised again at the next model call or when the graph
      ends) and the trajectory gets status ``error``.
    * **model turns**: every chat-model call made inside the graph is a model turn, recorded
      by :class:`EpisodeRecorder` when it ends. Starting turn ``max_steps + 1`` stops the
      graph with status ``step_limit``; starting a turn past the environment's
      ``max_model_turns`` stops it with status ``completed``. The steps so far are kept.
    * **recursion limit**: :meth:`recursion_limit`, a backstop for graphs that loop without
      calling the model; reaching it (``GraphRecursionError``) gives status ``step_limit``.
    * **final answer**: when the graph ends by itself, the text of its last message if that
      is an AI message without tool calls; status ``completed``.

    Any other exception raised in the graph propagates; :meth:`Agent.arun` records status
    ``error`` with ``"ErrorType: message"``.

    Class attributes:
        factory: The graph factory (a staticmethod; set by :func:`graph_agent`).
    """

    factory: ClassVar[Callable[..., Any]]

    def recursion_limit(self) -> int:
        """The graph's recursion limit: ``4 * max_steps + 10`` supersteps.

        A ReAct graph takes 2 supersteps per model turn; the headroom leaves room for hooks
        and keeps ``max_steps`` (enforced by the callback handler) the limit that ends an
        episode. ``create_react_agent`` would otherwise answer "Sorry, need more steps..."
        in place of the model when its budget runs low, which would pass for a final answer.
        """
        return 4 * self.max_steps + 10

    def build(self, tools: list[BaseTool], instructions: str) -> Any:
        """Call the factory and return the compiled graph.

        The factory is called positionally, ``factory(model, tools, instructions)``. A factory
        that takes no third positional argument but has a ``prompt`` or ``system_prompt``
        keyword (``create_react_agent`` itself, ``langchain.agents.create_agent``) gets the
        instructions by that keyword instead, ``None`` when there are none. A returned
        uncompiled ``StateGraph`` is compiled.
        """
        factory = type(self).factory
        args: tuple = (self.model, tools, instructions)
        kwargs: dict[str, Any] = {}
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):
            signature = None
        if signature is not None:
            try:
                signature.bind(*args)
            except TypeError:
                for keyword in ("prompt", "system_prompt"):
                    if keyword in signature.parameters:
                        args, kwargs = (self.model, tools), {keyword: instructions or None}
                        break
        with warnings.catch_warnings():
            if importlib.util.find_spec("langchain") is None:
                # langgraph 1.x deprecates create_react_agent in favour of langchain.agents, a
                # package toolgym does not install: a pointer the user cannot follow, once per episode
                warnings.filterwarnings("ignore", message="create_react_agent has been moved")
            graph = factory(*args, **kwargs)
        if not hasattr(graph, "ainvoke") and hasattr(graph, "compile"):
            graph = graph.compile()
        return graph

    @staticmethod
    def start_messages(episode: Episode) -> list[BaseMessage]:
        """``env.prompt(example)`` without a leading system message equal to the instructions."""
        messages = list(episode.env.prompt(episode.example))
        instructions = episode.env.instructions
        if (
            instructions
            and messages
            and isinstance(messages[0], SystemMessage)
            and messages[0].content == instructions
        ):
            messages = messages[1:]
        return messages

    async def play(self, episode: Episode) -> None:
        """Build the graph for this episode, run it, and set the status and final answer.

        Raises:
            ToolBug: a tool is broken.
            Exception: whatever the graph raised (model failure, bug in the graph).
        """
        recorder = EpisodeRecorder(episode, self.max_steps, self.max_repeats)
        graph = self.build(episode_tools(recorder), episode.env.instructions)
        config = {"callbacks": [recorder], "recursion_limit": self.recursion_limit()}
        try:
            result = await graph.ainvoke({"messages": self.start_messages(episode)}, config=config)
        except _Stop as stop:
            episode.status = stop.status
            return
        except GraphRecursionError:
            episode.status = "step_limit"
            return
        except ToolBug:
            raise
        except Exception:
            if recorder.bug is not None:  # the graph turned the broken tool into another error
                raise recorder.bug from None
            raise
        if recorder.bug is not None:
            raise recorder.bug
        messages = result.get("messages") if isinstance(result, dict) else None
        last = messages[-1] if messages else None
        if isinstance(last, AIMessage) and not last.tool_calls:
            episode.final_answer = strip_reasoning(message_text(last))
        episode.messages = list(messages or [])

    def describe(self) -> dict[str, Any]:
        """Settings recorded in ``run.json``: also the factory's ``module:qualname``."""
        factory = type(self).factory
        where = f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', repr(factory))}"
        return super().describe() | {"factory": where}


def graph_agent(factory: GraphFactory, name: str = "") -> type[GraphAgent]:
    """A :class:`GraphAgent` subclass that runs the graphs ``factory`` builds.

    Args:
        factory: ``factory(model, tools, instructions) -> compiled langgraph graph`` (see
            :meth:`GraphAgent.build` for factories such as ``create_react_agent`` itself).
        name: The agent's name in trajectories; the factory's ``__name__`` when empty.

    Returns:
        A new subclass with ``factory`` (as a staticmethod) and ``name`` set.
    """
    agent_name = name or getattr(factory, "__name__", "") or type(factory).__name__
    return type(
        f"GraphAgent_{agent_name}".replace("<", "").replace(">", ""),
        (GraphAgent,),
        {"factory": staticmethod(factory), "name": agent_name, "__doc__": GraphAgent.__doc__},
    )

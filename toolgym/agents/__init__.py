"""Agent architectures: langgraph graphs that drive a chat model against an environment.

An architecture is one module in this package with a class registered by
:func:`register_agent`. It subclasses :class:`Agent` and implements :meth:`Agent.arun`, which
plays one episode and returns its :class:`~toolgym.records.Trajectory`. The
:class:`Episode` helper records steps so every architecture writes the same trajectory format.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

from toolgym.environments import Environment, ToolBug
from toolgym.environments.states import StateRecorder
from toolgym.providers import ModelSettings, build_model
from toolgym.records import (
    Example,
    ModelStep,
    Status,
    Step,
    ToolCall,
    ToolStep,
    Trajectory,
    without_surrogates,
)
from toolgym.registry import Registry

__all__ = ["AGENTS", "Agent", "Episode", "as_agent_class", "play_and_record", "register_agent", "repeat_guard"]

_BUILTIN = {name: f"toolgym.agents.{name}" for name in (
    "tool_calling", "oracle", "react_json", "xml_prompting", "direct", "loglik"
)}
"""Built-in agent name → the module that registers it (imported when the name is used)."""


def as_agent_class(obj: Any, name: str = "") -> type[Agent]:
    """An agent class from an :class:`Agent` subclass, or from a langgraph graph factory
    ``factory(model, tools, instructions) -> compiled graph`` (run through
    :class:`toolgym.agents.graph.GraphAgent`).

    Raises:
        TypeError: for anything else.
    """
    if isinstance(obj, type) and issubclass(obj, Agent):
        return obj
    if callable(obj) and not isinstance(obj, type):
        from toolgym.agents.graph import graph_agent

        return graph_agent(obj, name)
    raise TypeError(f"agent {name!r}: expected an Agent subclass or a graph factory, got {obj!r}")


AGENTS: Registry[type[Agent]] = Registry("agent", "toolgym.agents", _BUILTIN, as_agent_class)
"""Agent classes by name: toolgym's architectures, the suites' and the ``toolgym.agents``
entry points (an entry point may name a graph factory)."""


def register_agent(name: str) -> Callable[[type[Agent]], type[Agent]]:
    """Class decorator registering an :class:`Agent` subclass under ``name``."""

    def decorator(cls: type[Agent]) -> type[Agent]:
        cls.name = name
        return AGENTS.register(name)(cls)

    return decorator


def repeat_guard(max_repeats: int | None) -> dict[str, int]:
    """The keyword argument that switches an agent's repeat guard on (``{"max_repeats": N}``),
    or none when it is off, so that an agent class written before the guard (whose
    ``__init__`` takes no ``max_repeats``) is built as before."""
    return {} if max_repeats is None else {"max_repeats": max_repeats}


class Episode:
    """Mutable record of one episode while it runs; turned into a Trajectory at the end.

    Steps are appended to a plain list (never copied), so recording costs O(1) per step.
    """

    def __init__(self, env: Environment, example: Example, trial: int = 0) -> None:
        self.env = env
        self.example = example
        self.trial = trial
        self.steps: list[Step] = []
        self.messages: list[BaseMessage] = []  # the chat history, for architectures that keep one
        self.prefix: list[Step] = []  # steps played before the agent took over (teacher forcing, a fork)
        self.model_turns = 0
        self.status: Status = "completed"
        self.final_answer: str | None = None
        self.started = time.perf_counter()
        self.states = StateRecorder(env)  # started right after reset (Agent.arun, the Gym, serve)

    def record_model(self, step: ModelStep) -> None:
        """Append a model turn."""
        self.model_turns += 1
        self.steps.append(step)

    def execute(self, call: ToolCall) -> ToolStep:
        """Run one tool call on the environment (or reject a malformed one) and record it.

        Raises:
            ToolBug: if the tool itself is broken; the episode ends with status ``error``.
        """
        rejected = False
        self.states.start()
        if call.malformed:
            error = True
            output = (
                f"Error: malformed tool call ({call.malformed}). Use a tool call with a known "
                "tool name and a JSON object of arguments."
            )
            patch = self.states.unchanged()
        else:
            result = self.env.call(call.name, call.arguments)
            output, error, rejected = result.output, result.error, result.rejected
            patch = self.states.unchanged() if rejected else self.states.patch()
        step = ToolStep(
            call_id=call.id, name=call.name, arguments=call.arguments, output=without_surrogates(output), error=error,
            malformed=bool(call.malformed), rejected=rejected, state_patch=without_surrogates(patch),
        )
        self.steps.append(step)
        return step

    def repeated_calls(self) -> int:
        """How many of the last tool calls are the same call: same tool name, same arguments
        (compared as JSON with sorted keys), both well-formed or both malformed with the same
        fault. Model turns between them do not break the run; 0 before the first call.
        Counted from the end, so it costs at most the length of the run."""
        count, last = 0, None
        for step in reversed(self.steps):
            if step.kind != "tool":
                continue
            key = (step.name, json.dumps(step.arguments, sort_keys=True, default=str), step.malformed)
            if last is not None and key != last:
                break
            last, count = key, count + 1
        return count

    def trajectory(self, agent: str, model: str | None, error: str | None = None) -> Trajectory:
        """The finished trajectory (status ``error`` when ``error`` is given), with the state
        after reset and each tool step's state patch (:class:`StateRecorder`)."""
        initial = self.states.initial_state
        try:
            state = self.env.read_state()
            json.dumps(state)
        except Exception as exc:  # a broken read_state is a bug, recorded, never fatal
            state, error = {}, error or f"{type(exc).__name__} in read_state of {self.env.name!r}: {exc}"
        return Trajectory(
            example_id=self.example.id,
            trial=self.trial,
            env=self.env.name,
            agent=agent,
            model=model,
            status="error" if error else self.status,
            error=without_surrogates(error),
            steps=self.steps,
            final_state=without_surrogates(state),
            final_answer=without_surrogates(self.final_answer),
            duration_s=time.perf_counter() - self.started,
            initial_state=without_surrogates(initial),
            state_note=self.states.note,
        )


class Agent:
    """Base class of agent architectures.

    Args:
        model: The chat model (``None`` for agents that need none, such as ``oracle``).
        model_spec: The ``--model`` string, recorded in trajectories.
        max_steps: Maximum number of model turns; reaching it ends the episode with status
            ``step_limit``.
        max_repeats: The repeat guard: after this many identical consecutive tool calls
            (:meth:`Episode.repeated_calls`) the episode ends with status ``repeat_limit``
            instead of looping until ``max_steps``. ``None`` (the default) switches it off;
            otherwise at least 2.

    Raises:
        ValueError: ``max_repeats`` below 2.
    """

    name: ClassVar[str] = ""
    needs_model: ClassVar[bool] = True

    def __init__(
        self, model: BaseChatModel | None = None, model_spec: str | None = None, max_steps: int = 40,
        max_repeats: int | None = None,
    ) -> None:
        if max_repeats is not None and max_repeats < 2:
            raise ValueError(f"max_repeats must be at least 2 (or None for no repeat guard), got {max_repeats}")
        self.model = model
        self.model_spec = model_spec
        self.max_steps = max_steps
        self.max_repeats = max_repeats

    def limit_reached(self, episode: Episode) -> Status | None:
        """The status that ends ``episode`` before its next model turn, if any:
        ``repeat_limit`` when the repeat guard is on and the last ``max_repeats`` tool calls
        are one call repeated, ``step_limit`` when ``max_steps`` model turns are played; else
        ``None``. Checked by every architecture after a turn's tool calls."""
        if self.max_repeats is not None and episode.repeated_calls() >= self.max_repeats:
            return "repeat_limit"
        if episode.model_turns >= self.max_steps:
            return "step_limit"
        return None

    @classmethod
    def make_model(cls, spec: str, settings: ModelSettings) -> Any:
        """What this architecture drives, built from the ``--model`` spec (called by the
        runner when ``needs_model``): a chat model by default. Architectures that need
        something else, such as token log-probabilities, override it.

        Raises:
            UnknownNameError / ValueError: as :func:`toolgym.providers.build_model`.
        """
        return build_model(spec, settings)

    async def play(self, episode: Episode) -> None:
        """Play the episode: call the model, execute tools via ``episode.execute``, set
        ``episode.status`` and ``episode.final_answer``. Implemented by each architecture."""
        raise NotImplementedError

    async def arun(self, env: Environment, example: Example, trial: int = 0) -> Trajectory:
        """Play one episode on a freshly reset environment and return its trajectory.

        Never raises for a failing model or a broken tool: the trajectory gets status
        ``error`` with ``"ErrorType: message"``. Cancellation (Ctrl-C) propagates.
        """
        episode = Episode(env, example, trial)
        return await play_and_record(self, episode, episode.states.start)

    def prefix_messages(self, steps: list[Step]) -> list[BaseMessage]:
        """The chat history this architecture would have built while playing ``steps``
        (model turns, each followed by the tool steps of its calls), appended after the start
        messages when an episode starts from a prefix (:attr:`Episode.prefix`): teacher
        forcing (:mod:`toolgym.forcing`) and ``toolgym fork``. A model turn with no text
        (a reference step) is written as the architecture writes a call.

        Raises:
            ValueError: when the architecture cannot continue an episode (the default).
        """
        raise ValueError(f"the {self.name or type(self).__name__} agent cannot continue an episode from "
                         "recorded steps (teacher forcing and fork need tool_calling, react_json or xml_prompting)")

    def run(self, env: Environment, example: Example, trial: int = 0) -> Trajectory:
        """Synchronous :meth:`arun`."""
        return asyncio.run(_boxed(self.arun(env, example, trial))).value

    def describe(self) -> dict[str, Any]:
        """Settings recorded in ``run.json``."""
        described = {"agent": self.name, "max_steps": self.max_steps}
        if self.max_repeats is not None:  # recorded only when the guard is on
            described["max_repeats"] = self.max_repeats
        return described


async def play_and_record(agent: Agent, episode: Episode, setup: Callable[[], Any] | None = None) -> Trajectory:
    """Run ``setup`` (what must happen on the environment before the agent's first turn),
    then ``agent.play(episode)``, and return the episode's trajectory.

    Never raises for a failing model, tool or setup: the trajectory gets status ``error`` with
    ``"ErrorType: message"`` (``ToolBug: ...`` for a broken tool). Cancellation (Ctrl-C)
    propagates. Used by :meth:`Agent.arun` and by teacher forcing and forks
    (:mod:`toolgym.forcing`), so every episode ends the same way.
    """
    error = None
    try:
        if setup is not None:
            setup()
        await agent.play(episode)
    except asyncio.CancelledError:
        raise
    except ToolBug as exc:
        error = f"ToolBug: {exc}"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return episode.trajectory(agent.name, agent.model_spec, error)


class _Box:
    """A value with a constant ``repr``. ``asyncio.run`` restores the SIGINT handler when it
    ends, and Python 3.11's ``signal.signal`` formats the old handler (which holds the finished
    main task, and so its result) with ``repr`` while looking it up among the handler enums: a
    trajectory's repr grows with its steps (about 0.1 ms per step, paid once per episode)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<result>"


async def _boxed(coroutine: Any) -> _Box:
    return _Box(await coroutine)

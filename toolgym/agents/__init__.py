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
    UserStep,
    without_surrogates,
)
from toolgym.registry import Registry

__all__ = ["AGENTS", "Agent", "Episode", "as_agent_class", "play_and_record", "play_turns", "register_agent",
           "repeat_guard"]

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

    def __init__(self, env: Environment, example: Example, trial: int = 0, user: Any = None) -> None:
        self.env = env
        self.example = example
        self.trial = trial
        self.user = user  # a toolgym.users.User for a multi-turn example, else None
        self.turn = 1  # the user turn being played
        self.turns_begun = 0  # the last turn whose Environment.begin_turn was called
        self.turn_states: list[dict[str, Any]] | None = None  # the state after each user turn (multi-turn)
        self.steps: list[Step] = []
        self.messages: list[BaseMessage] = []  # the chat history, for architectures that keep one
        self.prefix: list[Step] = []  # steps played before the agent took over (teacher forcing, a fork)
        self.model_turns = 0
        self.status: Status = "completed"
        self.final_answer: str | None = None
        self.started = time.perf_counter()
        self.states = StateRecorder(env)  # started right after reset (Agent.arun, the Gym, serve)

    def record_user(self, step: UserStep) -> None:
        """Append a user message (a multi-turn episode); a step that starts a turn sets
        :attr:`turn`."""
        if not step.stop or step.turn > self.turn:
            self.turn = step.turn
        self.steps.append(step)

    def begin_turn(self, turn: int) -> None:
        """Call ``env.begin_turn(turn)`` once per turn (a replayed prefix may have begun it)."""
        if turn > self.turns_begun:
            self.turns_begun = turn
            self.env.begin_turn(turn)

    def end_turn(self) -> None:
        """Record the state after the agent's answer to the current user turn."""
        state = self.env.read_state()
        if self.turn_states is None:
            self.turn_states = []
        self.turn_states.append(without_surrogates(state))

    def conversation(self) -> list[dict[str, str]]:
        """What a simulated user has seen: its messages and the agent's answers, as
        ``{"role": "user" | "assistant", "content": str}`` (an answer is the text of the last
        model turn of a user turn when it made no tool call; nothing of tools or state)."""
        out: list[dict[str, str]] = []
        last: ModelStep | None = None

        def answer() -> None:
            if last is not None and not last.tool_calls:
                out.append({"role": "assistant", "content": last.text})

        for step in self.steps:  # a replayed prefix is part of the steps
            if step.kind == "user":
                answer()
                last = None
                if not (step.stop and not step.text):
                    out.append({"role": "user", "content": step.text})
            elif step.kind == "model":
                last = step
        answer()
        return out

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
            turn_states=self.turn_states,
            user_model=getattr(self.user, "model_spec", None),
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
    multi_turn: ClassVar[bool] = False
    """Whether the architecture plays later user turns (:meth:`play_turn`)."""
    user_model: Any = None
    """The chat model that plays a simulated user (``--user-model``; set by the runner)."""
    user_model_spec: str | None = None
    """Its spec, recorded in trajectories."""

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

    async def play_turn(self, episode: Episode, text: str) -> None:
        """Play a later user turn (2 or more) of a multi-turn episode: ``text``, the user's
        message, continues ``episode.messages``; play until the model answers without a tool
        call (or the limits), as :meth:`play` does. The environment's tools are read again
        (:meth:`Environment.begin_turn` may have changed them).

        Raises:
            ValueError: when the architecture plays single-turn episodes only (the default).
        """
        raise ValueError(f"the {self.name or type(self).__name__} agent plays single-turn episodes only "
                         "(multi-turn examples need tool_calling, react_json, xml_prompting or oracle)")

    def user_for(self, example: Example) -> Any:
        """The user of ``example``'s episode (:func:`toolgym.users.make_user` with this
        agent's user model), or ``None`` for a single-turn example.

        Raises:
            ValueError: for a simulated user without a user model.
        """
        if not example.multi_turn:
            return None
        from toolgym.users import make_user

        return make_user(example, self.user_model, self.user_model_spec)

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
        """Settings recorded in ``run.json`` (``max_repeats`` when the repeat guard is on,
        ``user_model`` when a model plays simulated users)."""
        described: dict[str, Any] = {"agent": self.name, "max_steps": self.max_steps}
        if self.max_repeats is not None:  # recorded only when the guard is on
            described["max_repeats"] = self.max_repeats
        if self.user_model_spec is not None:
            described["user_model"] = self.user_model_spec
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
        await play_turns(agent, episode)
    except asyncio.CancelledError:
        raise
    except ToolBug as exc:
        error = f"ToolBug: {exc}"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return episode.trajectory(agent.name, agent.model_spec, error)


async def play_turns(agent: Agent, episode: Episode) -> None:
    """The episode loop: for each user turn ``k``, ``env.begin_turn(k)``, the user's message,
    then the agent plays until it answers without a tool call; for a multi-turn example the
    state after the turn is recorded (:attr:`Episode.turn_states`) and the user
    (:attr:`Episode.user`, made by :meth:`Agent.user_for` when not set) gives the next
    message, until it stops, its turns run out, the agent's status is no longer
    ``completed``, or ``max_steps`` model turns (counted over the whole episode) are spent
    with a turn still to come (status ``step_limit``).

    Every user message of a multi-turn episode is a :class:`UserStep`, turn 1 (the input)
    included; a single-turn episode records none.

    Raises:
        Exception: whatever the agent or the user raises (``UserModelError`` for a failing
            simulated user); :func:`play_and_record` records it as the episode's error.
    """
    env, example = episode.env, episode.example
    episode.begin_turn(1)
    if not example.multi_turn:
        await agent.play(episode)
        return
    user = episode.user = episode.user if episode.user is not None else agent.user_for(example)
    if not any(s.kind == "user" for s in episode.prefix):  # a fork continues the turns of its prefix
        episode.record_user(UserStep(text=example.first_message, turn=1))
    await agent.play(episode)
    episode.end_turn()
    last = False
    while episode.status == "completed" and not last and episode.turn < user.max_turns:
        if env.max_model_turns is not None and episode.model_turns >= env.max_model_turns:
            break  # the environment's protocol ends the episode (one forced model turn)
        if episode.model_turns >= agent.max_steps:  # another turn is due and the budget is spent
            episode.status = "step_limit"
            break
        turn = episode.turn + 1
        reply = await user.reply(episode.conversation(), turn)
        if reply is None:
            break
        step = UserStep(text=reply.text, turn=turn, stop=reply.stop, latency_s=reply.latency_s,
                        input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
        if reply.stop and not reply.text:  # a bare stop token: recorded, never shown to the agent
            episode.record_user(step.model_copy(update={"turn": episode.turn}))
            break
        last = reply.stop  # a last message: the agent answers it, then the conversation ends
        episode.begin_turn(turn)
        episode.record_user(step)
        await agent.play_turn(episode, reply.text)
        episode.end_turn()


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

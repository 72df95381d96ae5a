"""Replaying calls on a fresh environment: the reference solution's trajectory.

τ²-bench grades a final state against the state that replaying the gold actions on a fresh
environment reaches (tau2-bench ``src/tau2/evaluator/evaluator_env.py``), so any path to it
passes. Toolgym's graders and ``toolgym check`` use the same replay: :func:`replay_calls` runs a
list of calls in order and returns the :class:`~toolgym.records.Trajectory` a run would have
recorded for them (outputs, errors, rejections, the state after reset and each step's state
patch), and :func:`reference_replay` does it, cached, for an example's ``expected_calls``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolgym.environments import Environment, ToolBug
from toolgym.environments.states import StateRecorder
from toolgym.records import (
    Example,
    ModelStep,
    ToolCall,
    ToolCallSpec,
    ToolStep,
    Trajectory,
    without_surrogates,
)

if TYPE_CHECKING:
    from toolgym.benchmark import Benchmark

__all__ = ["REPLAY_AGENT", "ReplayError", "reference_replay", "replay_calls"]

REPLAY_AGENT = "reference"
"""The ``agent`` a replayed trajectory carries by default."""

REPLAY_CACHE = 256
"""Reference replays :func:`reference_replay` keeps (the least recently used is dropped)."""


class ReplayError(ValueError):
    """The calls could not be replayed: the example has no reference calls, or a call is not
    a ``{"name", "arguments"}`` object."""


def _environment_class(benchmark: Any) -> tuple[type[Environment], str]:
    env_cls = getattr(benchmark, "environment", benchmark)
    if not (isinstance(env_cls, type) and issubclass(env_cls, Environment)):
        raise TypeError(f"replay: expected a Benchmark or an Environment subclass, got {benchmark!r}")
    return env_cls, getattr(benchmark, "name", "") or env_cls.name or env_cls.__name__


def _as_call(call: Any, k: int) -> ToolCallSpec:
    if isinstance(call, ToolCallSpec):
        return call
    if isinstance(call, ToolCall):
        return ToolCallSpec(name=call.name, arguments=call.arguments)
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        arguments = call.get("arguments", call.get("args", {}))
        if isinstance(arguments, dict):
            return ToolCallSpec(name=call["name"], arguments=arguments, turn=call.get("turn"))
    raise ReplayError(f"replay: call {k + 1} is not a {{'name': str, 'arguments': object}}: {call!r}")


def reference_call_groups(example: Example, calls: Sequence[Any]) -> list[list[Any]]:
    """How a reference solution's ``calls`` are grouped into model turns: all in one turn (as
    parallel calls), unless the example's milestones read results with ``$from``; then one
    call per turn, since a value read from a result can only be written in a later turn.

    Returns:
        A list of turns, each a non-empty list of the calls in order (``[]`` for no calls).
    """
    if not calls:
        return []
    plan = example.plan
    if plan is not None and plan.has_refs:
        return [[c] for c in calls]
    return [list(calls)]


def replay_calls(
    benchmark: Benchmark | type[Environment],
    example: Example,
    calls: Sequence[ToolCallSpec | ToolCall | dict[str, Any]],
    *,
    trial: int = 0,
    agent: str = REPLAY_AGENT,
) -> Trajectory:
    """Run ``calls`` in order on a fresh environment reset for ``example`` and record them as
    a run records a trajectory.

    The trajectory holds a model step carrying the calls (as the ``oracle`` agent's first
    turn does; one model step per call when the example's milestones read results with
    ``$from``: :func:`reference_call_groups`; one per user turn of a multi-turn example), each
    followed by one tool step per call with its output, ``error`` and ``rejected`` flags
    and ``state_patch``; ``initial_state`` is the state after reset and ``final_state`` the
    state after the last call. A call that fails (a tool error, an unknown tool, a bad
    argument) is recorded like a model's and the replay goes on.

    ``Environment.begin_turn(1)`` is called before the first call. For a multi-turn example
    the calls are played turn by turn (``ToolCallSpec.turn``; none is turn 1), ``begin_turn(k)``
    before turn ``k``'s, and ``turn_states`` holds the state after each of the reference's user
    turns (:func:`reference_turns`), as an episode records it.

    Args:
        benchmark: A :class:`toolgym.Benchmark` (its name goes in ``env``) or an
            :class:`~toolgym.Environment` subclass.
        example: The example the environment is reset for.
        calls: :class:`~toolgym.ToolCallSpec`, :class:`~toolgym.ToolCall` or
            ``{"name": str, "arguments": {...}}`` items.
        trial: The trial number recorded.
        agent: The ``agent`` recorded (default ``"reference"``).

    Returns:
        The trajectory: status ``completed``, or ``error`` when the reset, a tool (a bug,
        :class:`~toolgym.environments.ToolBug`) or ``read_state`` raised; its ``error`` then
        says which, and the steps played before are kept.

    Raises:
        ReplayError: a call is not a name with an object of arguments.
        TypeError: ``benchmark`` is neither a Benchmark nor an Environment subclass.
    """
    env_cls, env_name = _environment_class(benchmark)
    specs = [_as_call(c, k) for k, c in enumerate(calls)]
    started = time.perf_counter()
    tool_calls = [ToolCall(id=f"replay_{k}", name=c.name, arguments=c.arguments) for k, c in enumerate(specs)]
    groups = reference_call_groups(example, tool_calls)
    group_of_call = [g for g, group in enumerate(groups) for _ in group]
    steps: list[ModelStep | ToolStep] = []
    error = None
    state: dict[str, Any] = {}
    env = env_cls()
    recorder = StateRecorder(env)
    try:
        try:
            env.reset(example)
        except Exception as exc:  # noqa: BLE001 - a failing reset is recorded, as a run does
            error = f"{type(exc).__name__} in reset: {exc}"
        else:
            recorder.start()
            env.begin_turn(1)
            turn, turn_states = 1, [] if example.multi_turn else None
            for k, (call, spec) in enumerate(zip(tool_calls, specs, strict=True)):
                call_turn = getattr(spec, "turn", None) or 1
                while turn_states is not None and turn < call_turn:  # the reference's next user turn
                    turn_states.append(without_surrogates(env.read_state()))
                    turn += 1
                    env.begin_turn(turn)
                if k == 0 or group_of_call[k] != group_of_call[k - 1] or call_turn != (getattr(specs[k - 1], "turn", None) or 1):
                    # a model step holds the calls of one group made in one user turn
                    later = [c for j, c in enumerate(tool_calls) if j >= k and group_of_call[j] == group_of_call[k]
                             and (getattr(specs[j], "turn", None) or 1) == call_turn]
                    steps.append(ModelStep(tool_calls=later))
                try:
                    result = env.call(call.name, call.arguments)
                except ToolBug as exc:
                    error = f"ToolBug: {exc}"
                    break
                patch = recorder.unchanged() if result.rejected else recorder.patch()
                steps.append(ToolStep(
                    call_id=call.id, name=call.name, arguments=call.arguments,
                    output=without_surrogates(result.output), error=result.error, rejected=result.rejected,
                    state_patch=without_surrogates(patch),
                ))
            try:
                state = env.read_state()
                if turn_states is not None and error is None:
                    turn_states.append(without_surrogates(state))
                    while turn < reference_turns(example):  # the turns after its last call
                        turn += 1
                        env.begin_turn(turn)
                        state = env.read_state()
                        turn_states.append(without_surrogates(state))
            except Exception as exc:  # noqa: BLE001 - recorded, as a run does
                error = error or f"{type(exc).__name__} in read_state of {env_name!r}: {exc}"
    finally:
        env.close()
    return Trajectory(
        example_id=example.id, trial=trial, env=env_name, agent=agent, status="error" if error else "completed",
        error=without_surrogates(error), steps=steps, final_state=without_surrogates(state),
        duration_s=time.perf_counter() - started,
        initial_state=without_surrogates(recorder.initial_state), state_note=recorder.note,
        turn_states=turn_states if example.multi_turn and not error else None,
    )


def reference_turns(example: Example) -> int:
    """The user turns the reference solution of ``example`` plays: ``1 + len(turns)`` with
    scripted turns; with a simulated user, as many as ``expected_states`` names or the last
    expected call's ``turn`` needs; 1 for a single-turn example."""
    if example.turns is not None:
        return 1 + len(example.turns)
    calls = max((c.turn or 1 for c in example.expected_calls or []), default=1)
    return max(len(example.expected_states or []), calls, 1)


_CACHE: OrderedDict[tuple[int, int], tuple[Any, Example, Any, Trajectory]] = OrderedDict()


def reference_replay(benchmark: Benchmark | type[Environment], example: Example) -> Trajectory:
    """:func:`replay_calls` of ``example.expected_calls``, kept for the next caller (the
    graders of one run replay each example once, whatever its number of trials; up to
    :data:`REPLAY_CACHE` examples). The returned trajectory is shared: never mutate it.

    Raises:
        ReplayError: the example has no ``expected_calls``.
        TypeError: as :func:`replay_calls`.
    """
    if example.expected_calls is None:
        raise ReplayError(f"example {example.id!r} has no expected_calls to replay")
    key = (id(benchmark), id(example))
    found = _CACHE.get(key)
    if found is not None and found[0] is benchmark and found[1] is example and found[2] is example.expected_calls:
        _CACHE.move_to_end(key)
        return found[3]
    trajectory = replay_calls(benchmark, example, example.expected_calls)
    _CACHE[key] = (benchmark, example, example.expected_calls, trajectory)
    while len(_CACHE) > REPLAY_CACHE:
        _CACHE.popitem(last=False)
    return trajectory

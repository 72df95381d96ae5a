"""``toolgym fork`` and ``toolgym replay``: continue a recorded trajectory from one of its steps
with another agent or model, and audit that a run's recorded tool calls give the same results
when executed again (see :mod:`toolgym.forcing` for the replayed prefixes and the faults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.agents import repeat_guard
from toolgym.api import load_run
from toolgym.forcing import (
    FaultyEpisode,
    ForkAgent,
    Injection,
    PrefixMismatch,
    check_deterministic,
    fork_prefix,
    replay_prefix,
)
from toolgym.providers import ModelSettings
from toolgym.records import Example, Trajectory
from toolgym.runio import IMPORTED_AGENT, Run, RunDirError, latest_attempts
from toolgym.runner import RunConfig, RunResult, benchmark_of, model_spec_ref, resolve_agent, run

__all__ = ["Difference", "find_trajectory", "first_error_step", "fork", "replay_run"]


def find_trajectory(run_: Run, example_id: str, trial: int | None = None) -> Trajectory:
    """The last attempt of ``(example_id, trial)`` in ``run_`` (``trial`` ``None``: the
    example's lowest free-running trial).

    Raises:
        ValueError: naming the example and trial when there is no such trajectory.
    """
    found = [t for t in latest_attempts(run_.trajectories) if t.example_id == example_id
             and (t.trial == trial if trial is not None else t.prefix_steps is None)]
    if not found:
        ids = sorted({t.example_id for t in run_.trajectories})
        known = f"; its examples: {', '.join(ids[:5])}{' …' if len(ids) > 5 else ''}" if ids else ""
        raise ValueError(f"{run_.directory}: no trajectory of example {example_id!r}"
                         f"{f' trial {trial}' if trial is not None else ''}{known}")
    return min(found, key=lambda t: t.trial)


def first_error_step(run_: Run, trajectory: Trajectory, example: Example) -> int:
    """The 1-based tool step of the stepwise grader's first error in ``trajectory`` (the
    recorded ``trajectory_match`` score, else the grader run now, in agentevals' strict mode
    for an example with ``expected_calls`` only); a missing milestone at the end gives the
    step after the last.

    Raises:
        ValueError: when the trajectory has no error (it passes) or cannot be graded.
    """
    score = next((s for s in run_.scores if s.grader == "trajectory_match" and s.example_id == trajectory.example_id
                  and s.trial == trajectory.trial), None)
    if score is None or score.value is None:
        from toolgym.graders.trajectory import TrajectoryMatch

        score = TrajectoryMatch(trajectory_mode=None if example.milestones is not None else "strict").grade(example, trajectory)
    if score is None or score.value is None:
        raise ValueError(f"--at first-error: example {example.id!r} has neither milestones nor expected_calls to find an error by")
    first = score.details.get("first_error")
    if not first:
        raise ValueError(f"--at first-error: example {example.id!r} trial {trajectory.trial} has no error "
                         f"(trajectory_match passes); give --at K")
    return int(first["step"]) if first.get("step") is not None else len(trajectory.tool_steps) + 1


def fork(
    directory: str | Path,
    example_id: str,
    at: int | str,
    out: str | Path,
    *,
    model: Any = None,
    agent: Any = None,
    trial: int | None = None,
    inject: str | None = None,
    max_steps: int | None = None,
    settings: ModelSettings | None = None,
    user_model: Any = None,
) -> RunResult:
    """Continue a recorded trajectory from tool step ``at`` in a new run directory ``out``.

    The parent's tool steps before ``at`` are executed again on a fresh environment (never a
    model call; the recorded model turns go into the history as they were), checked against
    the record, then ``agent`` with ``model`` plays on. The new trajectory records its
    ``parent`` (``{"run", "example_id", "trial", "step"}``); ``run.json`` has protocol ``fork``.

    Args:
        directory: The parent run directory.
        example_id / trial: The trajectory to fork (``trial`` ``None``: the first).
        at: A 1-based tool step, or ``"first-error"`` (:func:`first_error_step`).
        out: The new run directory.
        model: A model spec or chat model (default: the parent's).
        agent: An agent name or spec (default: the parent's).
        inject: A fault ``KIND@K`` (``K`` may fall in the replayed prefix or after it). A
            parent that had a fault before ``at`` gets it again (unless ``inject`` is given).
        max_steps: Model turns of the continuation (default: the parent's).
        settings: Model settings (default: temperature 0).
        user_model: The simulated user's model of a multi-turn example with ``user``
            (default: the parent's, ``run.json``'s ``agent.user_model``). A multi-turn fork
            continues the parent's conversation: the user steps before ``at`` are replayed,
            then the same scripted turns, or the simulator, follow the new agent's answers.

    Raises:
        PrefixMismatch: when the prefix's replay differs from the record (the step named);
            nothing is written.
        ValueError / RunDirError: for a trajectory, step or part that cannot be found.
    """
    directory = Path(directory)
    parent_run = load_run(directory)
    if parent_run.examples is None:
        raise RunDirError(f"{directory}: its dataset cannot be read ({parent_run.problem}); fork needs the example")
    example = parent_run.examples.get(example_id)
    if example is None:
        raise ValueError(f"{directory}: example {example_id!r} is not in the run's dataset")
    traj = find_trajectory(parent_run, example_id, trial)
    step = first_error_step(parent_run, traj, example) if at == "first-error" else int(at)
    prefix = fork_prefix(traj, step)
    record = parent_run.record
    benchmark = benchmark_of(record, directory)
    states = _recorded_states(traj)
    injection = Injection.parse(inject) if inject else None
    if injection is None and traj.injected and int(traj.injected["step"]) < step:
        injection = Injection(str(traj.injected["kind"]), int(traj.injected["step"]))  # the parent's fault, again
    env = benchmark.environment()
    try:  # the check, before any model is built or called
        env.reset(example)
        check_deterministic(env)
        replay_prefix(FaultyEpisode(env, example, 0, injection), prefix, states)
    finally:
        env.close()
    recorded = record.spec_of("agent") or record.agent_name
    if agent is None and (recorded in _NOT_PLAYABLE or record.agent_name in _NOT_PLAYABLE):
        who = _NOT_PLAYABLE.get(recorded) or _NOT_PLAYABLE[record.agent_name]
        raise ValueError(f"fork: the run's episodes were played by {who} (agent {recorded!r}), which cannot play "
                         "on here: give --agent (say tool_calling) and --model")
    agent_obj, agent_ref = resolve_agent(agent or record.spec_of("agent") or record.agent_name)
    agent_cls = agent_obj if isinstance(agent_obj, type) else type(agent_obj)
    settings = settings or ModelSettings()
    steps = max_steps or int(record.agent.get("max_steps") or 40)
    if isinstance(agent_obj, type):
        model_spec = model if model is not None else record.model
        chat, label = None, None
        if agent_cls.needs_model:
            if model_spec is None:
                raise ValueError("fork: the parent run recorded no model; give --model")
            if isinstance(model_spec, str):
                label, _ = model_spec_ref(model_spec)
                chat = agent_cls.make_model(label, settings)
            else:
                chat, label = model_spec, f"object:{type(model_spec).__name__}"
        inner = agent_cls(model=chat, model_spec=label, max_steps=steps,
                          **repeat_guard(record.agent.get("max_repeats")))  # the parent's repeat guard
    else:
        inner = agent_obj
    parent = {"run": str(directory.resolve()), "example_id": example_id, "trial": traj.trial, "step": step}
    forked = ForkAgent(inner, prefix, parent, states, injection)
    env_spec = record.spec_of("env") or record.env
    config = RunConfig(
        env=env_spec if not env_spec.startswith("<object") else benchmark, out=Path(out), agent=forked,
        dataset=[example], max_steps=steps, settings=settings, env_options=dict(record.env_options),
        protocol="fork", inject=str(injection) if injection else None, grader_settings=dict(record.grader_settings),
        user_model=user_model if user_model is not None else record.agent.get("user_model") if example.user else None,
        graders=[record.spec_of(f"grader:{name}") or name for name in record.graders] or None,  # the parent's
    )
    result = run(config, progress=False)
    result.record.extensions["agent"] = agent_ref
    from toolgym.runio import write_run

    write_run(Path(out), result.record)
    return result


_NOT_PLAYABLE = {"mcp": "an MCP client (toolgym serve)", "mcp-client": "an MCP client (toolgym serve)",
                 "gym": "a policy through the Gymnasium environment", IMPORTED_AGENT: "another tool (an imported result file)"}
"""Agents a run records that no fork can build again, and what they were."""


def _recorded_states(trajectory: Trajectory) -> list[dict[str, Any] | None]:
    """The state after each tool step where the run recorded it (:func:`toolgym.states_after`;
    ``None`` entries where it did not)."""
    from toolgym.records import states_after

    return states_after(trajectory)


@dataclass(frozen=True)
class Difference:
    """One recorded result or state that a replay did not give again.

    Attributes:
        example_id / trial: The trajectory.
        step: The 1-based tool step, or ``None`` for the final state.
        what: ``output``, ``error`` or ``state``.
        recorded / replayed: The two values (text, or the state as JSON).
    """

    example_id: str
    trial: int
    step: int | None
    what: str
    recorded: Any
    replayed: Any

    def line(self) -> str:
        """One line naming the trajectory, the step and both values."""
        where = f"step {self.step}" if self.step is not None else "final state"
        return (f"{self.example_id} trial {self.trial} {where}: {self.what} recorded {_short(self.recorded)}, "
                f"replayed {_short(self.replayed)}")


def _short(value: Any, limit: int = 100) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def replay_run(directory: str | Path) -> list[Difference]:
    """Execute every recorded tool call of a run again, each trajectory on a fresh environment,
    and list every result or state that differs from the record (a non-deterministic
    environment, a changed tool). Malformed calls are not executed; an injected fault's step is
    left out (it differs on purpose; an injected ``tool_error`` was never executed, nor is it
    now).

    Raises:
        RunDirError: for a run whose environment or dataset cannot be found.
    """
    directory = Path(directory)
    parent_run = load_run(directory)
    if parent_run.examples is None:
        raise RunDirError(f"{directory}: its dataset cannot be read ({parent_run.problem}); replay needs the examples")
    benchmark = benchmark_of(parent_run.record, directory)
    found: list[Difference] = []
    for traj in latest_attempts(parent_run.trajectories):
        if traj.status == "aborted" or not traj.tool_steps:
            continue
        example = parent_run.examples.get(traj.example_id)
        if example is None:
            raise RunDirError(f"{directory}: trajectory of example {traj.example_id!r} has no example in the dataset")
        found += _replay_one(benchmark, example, traj)
    return found


def _replay_one(benchmark: Any, example: Example, traj: Trajectory) -> list[Difference]:
    """The differences of one trajectory: its executed calls replayed by
    :func:`toolgym.replay.replay_calls` (a malformed call, and an injected ``tool_error``,
    never ran: left out)."""
    from toolgym.records import states_after
    from toolgym.replay import replay_calls

    faulted = int(traj.injected["step"]) if traj.injected else None
    skip = faulted if traj.injected and traj.injected.get("kind") == "tool_error" else None
    ran = [n for n, s in enumerate(traj.tool_steps, start=1) if not s.malformed and n != skip]
    calls = [{"name": traj.tool_steps[n - 1].name, "arguments": traj.tool_steps[n - 1].arguments} for n in ran]
    replayed = replay_calls(benchmark, example, calls, trial=traj.trial)
    recorded_states = _recorded_states(traj)
    replayed_states = states_after(replayed)
    out: list[Difference] = []
    for n, new, state in zip(ran, replayed.tool_steps, replayed_states, strict=False):
        old = traj.tool_steps[n - 1]
        if n == faulted:
            continue
        if new.output != old.output:
            out.append(Difference(traj.example_id, traj.trial, n, "output", old.output, new.output))
        elif new.error != old.error:
            out.append(Difference(traj.example_id, traj.trial, n, "error", old.error, new.error))
        recorded = recorded_states[n - 1]
        if recorded is not None and state is not None and state != recorded:
            out.append(Difference(traj.example_id, traj.trial, n, "state", recorded, state))
    if replayed.status == "error":
        out.append(Difference(traj.example_id, traj.trial, None, "error", None, replayed.error))
    elif traj.status != "error" and replayed.final_state != traj.final_state:
        out.append(Difference(traj.example_id, traj.trial, None, "state", traj.final_state, replayed.final_state))
    return out


__all__ += ["PrefixMismatch"]

"""Playing an episode from a prefix: teacher forcing, forks and injected faults.

* **Teacher forcing** (``toolgym run --protocol teacher-forced``): for step ``k`` of an
  example's reference path, a fresh environment executes the reference calls ``1..k-1`` for
  real, their results go into the chat history as if the model had made them, and the agent
  takes one model turn; the ``next_step`` grader grades its first call against milestone ``k``.
  The idea is JMultiWOZ-TC's per-turn protocol (each user turn judged given the gold history),
  applied to tool-use trajectories.
* **Fork** (``toolgym fork``): a recorded trajectory's tool steps before ``K`` are executed
  again on a fresh environment without calling any model (the recorded model turns go into
  the history as they were), then another agent or model plays on.
* **Faults** (``--inject KIND@K``): the result of tool step ``K`` is replaced: ``tool_error``
  (the call is not executed; the agent sees an error), ``wrong_value`` (executed; the agent
  sees a plausible wrong result of the same JSON type), ``empty`` (executed; an empty result).

A prefix whose replay differs from its record (another output, error or state at some step)
is refused with :class:`PrefixMismatch`, naming the step: continuing it would grade the model
on a history that never happened.

Episode numbering of a teacher-forced run: each example keeps its free-running episodes as
trials ``0..T-1``; the teacher-forced episode of trial ``t`` at step ``k`` (of a reference path
of ``L`` steps) is trial ``T + t*L + k - 1``, and records ``prefix_steps = k - 1``. With
``--inject KIND@K`` there is one teacher-forced episode per trial (trial ``T + t``): the
reference steps ``1..K`` with the fault at ``K``, then the agent plays on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from toolgym.agents import Agent, Episode, play_and_record
from toolgym.environments import Environment
from toolgym.graders.forced import reference_calls, reference_plan
from toolgym.records import (
    Example,
    ModelStep,
    Step,
    ToolCall,
    ToolCallSpec,
    ToolStep,
    Trajectory,
)

__all__ = [
    "FAULT_KINDS",
    "PROTOCOLS",
    "ForkAgent",
    "NotDeterministic",
    "Injection",
    "PrefixMismatch",
    "TeacherForced",
    "empty_value",
    "episode_numbers",
    "reference_calls",
    "reference_plan",
    "reference_steps",
    "wrong_value",
]

PROTOCOLS: tuple[str, ...] = ("free-running", "teacher-forced", "fork")
"""How a run plays its episodes (``run.json``'s ``protocol``)."""

FAULT_KINDS: tuple[str, ...] = ("tool_error", "wrong_value", "empty")
"""The faults ``--inject`` knows."""

TOOL_ERROR = "Error: {name} failed: the service is temporarily unavailable. Try again."
"""The observation of an injected ``tool_error``."""


class PrefixMismatch(RuntimeError):
    """The replay of a prefix gave another result or state than its record at some step."""


@dataclass(frozen=True)
class Injection:
    """A fault to inject: ``kind`` (one of :data:`FAULT_KINDS`) at 1-based tool step ``step``."""

    kind: str
    step: int

    @classmethod
    def parse(cls, text: str) -> Injection:
        """``KIND@K`` as given to ``--inject``.

        Raises:
            ValueError: naming ``--inject`` and what was wrong.
        """
        kind, at, step = str(text).partition("@")
        if not at or kind not in FAULT_KINDS:
            raise ValueError(f"--inject {text!r}: expected KIND@K with KIND one of {', '.join(FAULT_KINDS)} "
                             "and K a tool step (1-based), such as tool_error@2")
        try:
            k = int(step)
        except ValueError:
            k = 0
        if k < 1:
            raise ValueError(f"--inject {text!r}: K must be a tool step number >= 1, got {step!r}")
        return cls(kind, k)

    def __str__(self) -> str:
        return f"{self.kind}@{self.step}"


def _shift(text: str) -> str:
    """Each letter and digit moved one place on (``a``→``b``, ``z``→``a``, ``9``→``0``)."""
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + 1) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + 1) % 26 + 65))
        elif "0" <= ch <= "9":
            out.append(chr((ord(ch) - 48 + 1) % 10 + 48))
        else:
            out.append(ch)
    shifted = "".join(out)
    return shifted if shifted != text else text + "?"


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return _shift(value)
    if isinstance(value, list):
        return [_perturb(value[0]), *value[1:]] if value else [0]
    if isinstance(value, dict):
        if not value:
            return {"value": 0}
        first = next(iter(value))
        return {**value, first: _perturb(value[first])}
    return 0  # null


def wrong_value(output: str) -> str:
    """A plausible wrong result of the same type as ``output``: the output parsed as JSON with
    its first scalar changed (a number plus one (integers) or times 1.5 plus 1 (floats), a
    boolean negated, each letter and digit of a string moved one place on), written as JSON;
    a text that is not JSON gets its letters and digits moved one place on. Deterministic, and
    never equal to ``output``."""
    try:
        value = json.loads(output)
    except (json.JSONDecodeError, ValueError):
        return _shift(output)
    return json.dumps(_perturb(value), ensure_ascii=False)


def empty_value(output: str) -> str:
    """An empty result of the same type as ``output``: ``[]`` for a JSON list, ``{}`` for an
    object, ``""`` for a JSON string, else the empty text."""
    try:
        value = json.loads(output)
    except (json.JSONDecodeError, ValueError):
        return ""
    if isinstance(value, list):
        return "[]"
    if isinstance(value, dict):
        return "{}"
    return '""' if isinstance(value, str) else ""


def reference_steps(calls: Sequence[ToolCallSpec]) -> list[Step]:
    """The reference calls as recorded steps: one model turn (no text) per call, each followed
    by its tool step (output filled in when the call is executed)."""
    steps: list[Step] = []
    for i, c in enumerate(calls):
        steps.append(ModelStep(tool_calls=[ToolCall(id=f"ref_{i + 1}", name=c.name, arguments=dict(c.arguments))]))
        steps.append(ToolStep(call_id=f"ref_{i + 1}", name=c.name, arguments=dict(c.arguments)))
    return steps


class FaultyEpisode(Episode):
    """An :class:`Episode` whose ``injection.step``-th tool step gets the fault (a malformed
    call there is recorded as it is and the fault is not injected)."""

    def __init__(self, env: Environment, example: Example, trial: int, injection: Injection | None) -> None:
        super().__init__(env, example, trial)
        self.injection = injection
        self.injected: dict[str, Any] | None = None
        self.tool_count = 0

    def execute(self, call: ToolCall) -> ToolStep:
        self.tool_count += 1
        fault = self.injection
        if fault is None or self.tool_count != fault.step or call.malformed:
            return super().execute(call)
        if fault.kind == "tool_error":  # a failed tool changes nothing: never executed
            self.states.start()
            step = ToolStep(call_id=call.id, name=call.name, arguments=call.arguments,
                            output=TOOL_ERROR.format(name=call.name), error=True, rejected=True,
                            state_patch=self.states.unchanged())
            self.steps.append(step)
            self.injected = {"kind": fault.kind, "step": fault.step, "output": None}
            return step
        step = super().execute(call)
        original = step.output
        step.output = wrong_value(original) if fault.kind == "wrong_value" else empty_value(original)
        step.error = False
        self.injected = {"kind": fault.kind, "step": fault.step, "output": original}
        return step


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def replay_prefix(
    episode: FaultyEpisode,
    steps: Sequence[Step],
    recorded_states: Sequence[dict[str, Any] | None] | None = None,
) -> None:
    """Execute the tool steps of ``steps`` on ``episode``'s environment, appending the model
    turns as recorded and the tool steps as executed now (with the episode's fault, if it falls
    in the prefix), and set :attr:`Episode.prefix`.

    Args:
        steps: Recorded steps (user messages, model turns and tool steps; a user message of
            a later turn records the state after the turn before it and begins its turn). A
            recorded tool step whose
            ``output`` is compared: the replay must give the same output and error; a
            malformed call is recorded again without being executed.
        recorded_states: The state after each recorded tool step (``None`` entries: not
            recorded), compared with the state after each replayed one.

    Raises:
        PrefixMismatch: naming the first 1-based tool step whose replay differs.
        ToolBug: when a tool is broken.
    """
    calls: dict[str, ToolCall] = {}
    n = 0
    episode.begin_turn(1)
    for step in steps:
        if step.kind == "user":  # a multi-turn prefix: the turns it holds, begun as when played
            if step.turn > episode.turn:
                episode.end_turn()
                episode.begin_turn(step.turn)
            episode.record_user(step.model_copy())
            continue
        if step.kind == "model":
            calls = {c.id: c for c in step.tool_calls}
            episode.steps.append(step.model_copy())
            continue
        n += 1
        call = calls.get(step.call_id) or ToolCall(id=step.call_id, name=step.name, arguments=step.arguments)
        if step.malformed:
            call = call.model_copy(update={"malformed": call.malformed or "malformed call", "raw": call.raw})
        now = episode.execute(call)
        if episode.injected is not None and episode.injected["step"] == n:
            continue  # the fault changed this step on purpose (and a tool_error, the state)
        if episode.injected is None and (now.output != step.output or now.error != step.error):
            raise PrefixMismatch(
                f"step {n} ({step.name}): the replay gave {_short(now.output)}{' (error)' if now.error else ''}, "
                f"the record {_short(step.output)}{' (error)' if step.error else ''}"
            )
        if recorded_states is not None and n - 1 < len(recorded_states) and recorded_states[n - 1] is not None:
            state = episode.env.read_state()
            if episode.injected is None and state != recorded_states[n - 1]:
                raise PrefixMismatch(f"step {n} ({step.name}): the state after it differs from the record: "
                                     f"replay {_short(state)}, record {_short(recorded_states[n - 1])}")
    episode.prefix = list(episode.steps)


def episode_numbers(example: Example, trials: int, injection: Injection | None = None) -> list[int]:
    """The trial numbers of ``example``'s episodes in a teacher-forced run of ``trials``
    trials: ``0..trials-1`` free-running, then ``trials + t*L + k - 1`` for trial ``t`` at
    step ``k`` of a reference path of ``L`` steps; with ``injection``, ``trials + t`` (none
    when the path is shorter than the fault's step)."""
    calls = reference_calls(example)
    n = len(calls) if calls else 0
    if injection is not None:
        forced = [trials + t for t in range(trials)] if n >= injection.step else []
    else:
        forced = [trials + t * n + k for t in range(trials) for k in range(n)]
    return [*range(trials), *forced]


class NotDeterministic(ValueError):
    """The environment does not say that it replays deterministically
    (:meth:`toolgym.Environment.replays_deterministically`)."""


def check_deterministic(env: Environment) -> None:
    """Refuse to build a prefix on an environment that does not say it replays
    deterministically.

    Raises:
        NotDeterministic: naming the environment.
    """
    if not env.replays_deterministically():
        raise NotDeterministic(
            f"environment {env.name or type(env).__name__!r} does not say that its tools replay deterministically "
            "(an MCP server: openWorldHint false on every tool), so a replayed prefix cannot stand for the recorded "
            "one; teacher forcing and fork need such an environment")


def _check_continuable(agent: Agent) -> None:
    if type(agent).prefix_messages is Agent.prefix_messages:
        agent.prefix_messages([])  # raises, naming the agent


async def _play_from(
    agent: Agent, env: Environment, example: Example, trial: int, prefix: Sequence[Step],
    injection: Injection | None, recorded_states: Sequence[dict[str, Any] | None] | None,
) -> Trajectory:
    """Replay ``prefix`` on ``env`` (freshly reset), then let ``agent`` play on. Never raises
    for a failing model, tool or prefix: the trajectory gets status ``error``."""
    episode = FaultyEpisode(env, example, trial, injection)

    def setup() -> None:
        check_deterministic(env)
        replay_prefix(episode, prefix, recorded_states)

    traj = await play_and_record(agent, episode, setup)
    traj.injected = episode.injected
    return traj


def record_reference(env_cls: type[Environment], example: Example, calls: Sequence[ToolCallSpec]) -> tuple[list[Step], list[dict[str, Any] | None]]:
    """The reference path executed once on a fresh environment (:func:`toolgym.replay.replay_calls`):
    its steps as :func:`reference_steps` writes them, outputs filled in, and the state after
    each tool step (``None`` where not recorded); what every teacher-forced prefix is checked
    against.

    Raises:
        ValueError: when the replay ends in error (a failing reset, a broken tool).
    """
    from toolgym.records import states_after
    from toolgym.replay import replay_calls

    replayed = replay_calls(env_cls, example, list(calls))
    if replayed.status == "error":
        raise ValueError(f"the reference path of {example.id!r} does not replay: {replayed.error}")
    steps = reference_steps(calls)
    for step, done in zip((s for s in steps if s.kind == "tool"), replayed.tool_steps, strict=True):
        step.output, step.error, step.rejected = done.output, done.error, done.rejected
    return steps, states_after(replayed)


class TeacherForced(Agent):
    """An agent played under teacher forcing (see the module docstring): trial numbers below
    ``trials`` are free-running episodes of ``inner``; the others replay a prefix of the
    reference path and give ``inner`` one model turn (with ``injection``: the reference steps
    through the fault, then ``inner`` plays on).

    Args:
        inner: The agent that plays (its architecture must continue from a prefix:
            :meth:`Agent.prefix_messages`).
        trials: Trials per example (``--trials``).
        injection: The fault, or ``None``.

    Raises:
        ValueError: at construction, for an agent that cannot continue an episode.
    """

    protocol: ClassVar[str] = "teacher-forced"

    def __init__(self, inner: Agent, trials: int, injection: Injection | None = None) -> None:
        _check_continuable(inner)
        super().__init__(inner.model, inner.model_spec, inner.max_steps, getattr(inner, "max_repeats", None))
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]  # trajectories name the architecture that played
        self.needs_model = inner.needs_model  # type: ignore[misc]
        self.trials = trials
        self.injection = injection
        self._references: dict[str, tuple[Example, list[Step], list[dict[str, Any] | None]]] = {}

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "protocol": self.protocol,
                **({"inject": str(self.injection)} if self.injection else {})}

    def path_length(self, example: Example) -> int:
        """The number of steps of ``example``'s reference path (0: none)."""
        calls = reference_calls(example)
        return len(calls) if calls else 0

    def episodes(self, example: Example) -> list[int]:
        """The trial numbers of ``example``'s episodes (:func:`episode_numbers`)."""
        return episode_numbers(example, self.trials, self.injection)

    def locate(self, example: Example, trial: int) -> tuple[int, int] | None:
        """``(t, k)``, the trial and 1-based step of a teacher-forced episode number (with an
        injection ``k`` is the fault's step); ``None`` for a free-running one."""
        if trial < self.trials:
            return None
        if self.injection is not None:
            return trial - self.trials, self.injection.step
        n = self.path_length(example)
        t, k = divmod(trial - self.trials, n)
        return t, k + 1

    def reference(self, env_cls: type[Environment], example: Example) -> tuple[list[Step], list[dict[str, Any] | None]]:
        """The example's reference steps and states (:func:`record_reference`), once per example."""
        kept = self._references.get(example.id)
        if kept is None or kept[0] is not example:
            calls = reference_calls(example)
            if not calls:
                raise ValueError(f"example {example.id!r} has no reference path (expected_calls, or milestones "
                                 "with plain arguments) to force")
            kept = (example, *record_reference(env_cls, example, calls))
            self._references[example.id] = kept
        return kept[1], kept[2]

    async def arun(self, env: Environment, example: Example, trial: int = 0) -> Trajectory:
        where = self.locate(example, trial)
        if where is None:
            return await self.inner.arun(env, example, trial)
        _, k = where
        try:
            steps, states = self.reference(type(env), example)
        except Exception as exc:
            return Trajectory(example_id=example.id, trial=trial, env=env.name, agent=self.name,
                              model=self.model_spec, status="error", error=f"{type(exc).__name__}: {exc}",
                              prefix_steps=k - 1 if self.injection is None else k)
        if self.injection is None:
            env.max_model_turns = 1  # type: ignore[misc]  # one model turn after the prefix
            prefix = steps[: 2 * (k - 1)]
        else:
            prefix = steps[: 2 * k]
        traj = await _play_from(self.inner, env, example, trial, prefix, self.injection, states)
        traj.prefix_steps = len(prefix) // 2
        return traj


class ForkAgent(Agent):
    """An agent that continues a recorded trajectory (``toolgym fork``): the parent's steps
    before tool step ``step`` are replayed, checked against the record, then ``inner`` plays
    on.

    Args:
        inner: The agent that plays on.
        prefix: The parent's steps to replay (:func:`fork_prefix`).
        parent: ``{"run", "example_id", "trial", "step"}``, recorded in the trajectory.
        states: The state after each of the parent's tool steps, where recorded.
        injection: A fault, or ``None``.
    """

    protocol: ClassVar[str] = "fork"

    def __init__(self, inner: Agent, prefix: Sequence[Step], parent: dict[str, Any],
                 states: Sequence[dict[str, Any] | None] | None = None, injection: Injection | None = None) -> None:
        _check_continuable(inner)
        super().__init__(inner.model, inner.model_spec, inner.max_steps, getattr(inner, "max_repeats", None))
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.needs_model = inner.needs_model  # type: ignore[misc]
        self.multi_turn = inner.multi_turn  # type: ignore[misc]
        self.prefix = list(prefix)
        self.parent = dict(parent)
        self.states = states
        self.injection = injection

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "protocol": self.protocol, "parent": self.parent,
                **({"inject": str(self.injection)} if self.injection else {}),
                **({"user_model": self.user_model_spec} if self.user_model_spec else {})}

    async def arun(self, env: Environment, example: Example, trial: int = 0) -> Trajectory:
        if self.user_model is not None:  # the simulated user the run was given plays on
            self.inner.user_model, self.inner.user_model_spec = self.user_model, self.user_model_spec
        traj = await _play_from(self.inner, env, example, trial, self.prefix, self.injection, self.states)
        traj.parent = dict(self.parent)
        return traj


def fork_prefix(trajectory: Trajectory, step: int) -> list[Step]:
    """The steps of ``trajectory`` before its 1-based tool step ``step``: every step up to the
    tool step ``step - 1``; the model turn that made the calls ``step - 1`` and ``step`` keeps
    only its calls before ``step`` (its text as it was).

    Raises:
        ValueError: for a step outside ``1..tool steps + 1``.
    """
    n_tools = len(trajectory.tool_steps)
    if not 1 <= step <= n_tools + 1:
        raise ValueError(f"--at {step}: the trajectory has {n_tools} tool step(s); fork at 1..{n_tools + 1}")
    out: list[Step] = []
    seen = 0
    for s in trajectory.steps:
        if s.kind == "tool":
            if seen == step - 1:
                break
            seen += 1
            out.append(s)
        else:
            if seen == step - 1:
                break
            out.append(s)
    kept_ids = {s.call_id for s in out if s.kind == "tool"}
    for i, s in enumerate(out):
        if s.kind == "model" and any(c.id not in kept_ids for c in s.tool_calls):
            later = [x for x in out[i + 1:] if x.kind == "model"]
            if not later:  # the last turn: drop its calls at or after the fork
                out[i] = s.model_copy(update={"tool_calls": [c for c in s.tool_calls if c.id in kept_ids]})
    return out

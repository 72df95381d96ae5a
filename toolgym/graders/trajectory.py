"""Stepwise trajectory graders over an example's milestones (:mod:`toolgym.milestones`): the
binary ``trajectory_match`` with its alignment and first error, and ``milestone_progress``,
``step_precision`` and ``step_recall``.

They read the finished trajectory only: each tool step (name, arguments, output) and the final
state, the only state a trajectory stores today, so a ``state`` milestone or minefield is
checked against the state after the last tool step. All apply only to examples with
``milestones``; ``trajectory_match`` also grades examples with ``expected_calls`` alone in one
of agentevals' modes when given ``trajectory_mode``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from toolgym.graders import make_score, register_grader
from toolgym.graders.alignment import Alignment, Diagnosis, StepView, align, diagnose, step_allowed
from toolgym.matchers import literal
from toolgym.milestones import ARGS_MODES, CallPattern, Milestone, Plan
from toolgym.records import BINARY, Example, Measure, Score, ToolCallSpec, Trajectory

__all__ = [
    "TRAJECTORY_MODES",
    "MilestoneProgress",
    "StepPrecision",
    "StepRecall",
    "TrajectoryMatch",
    "agentevals_plan",
    "analyse",
    "milestone_problems",
    "step_views",
]

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
TRAJECTORY_MODES: tuple[str, ...] = ("strict", "unordered", "subset", "superset")

PLAN_CACHE = 4096
"""Plans built from ``expected_calls`` kept by one ``trajectory_match`` (by example)."""

AGENTEVALS = "agentevals (langchain-ai/agentevals) README, 'Trajectory match'"


def _result(output: str) -> Any:
    try:
        return json.loads(output)
    except (json.JSONDecodeError, ValueError):
        return output


def step_views(trajectory: Trajectory, results: bool = True) -> list[StepView]:
    """The trajectory's tool steps as the alignment reads them: the output parsed as JSON
    (else kept as text) is the result ``$from`` reads (parsed only when ``results``); a
    malformed or rejected call was never executed."""
    return [
        StepView(
            name=s.name,
            arguments=s.arguments,
            result=_result(s.output) if results else None,
            executed=not (s.malformed or s.rejected),
            malformed=s.malformed,
            rejected=s.rejected,
        )
        for s in trajectory.tool_steps
    ]


def agentevals_plan(calls: list[ToolCallSpec], trajectory_mode: str, args_mode: str = "exact") -> Plan:
    """The plan that grades ``expected_calls`` the way one of agentevals' trajectory match
    modes defines it (agentevals README, "Trajectory match"):

    * ``strict``: "the same messages in the same order, with the same tool calls": a chain of
      the reference calls, no other call allowed (the tool calls only; how they are grouped in
      messages is not compared);
    * ``unordered``: "the same tool calls in any order": every reference call, no other call;
    * ``superset``: the trajectory holds at least the reference calls, extra calls allowed;
    * ``subset``: every call of the trajectory is one of the reference calls ("did not call
      any tools beyond the expected ones"), each reference call used at most once.

    ``args_mode`` is agentevals' ``tool_args_match_mode``, always seen from the model's call:
    ``exact`` (the same arguments), ``ignore``, ``superset`` (the call holds at least the
    reference's arguments), ``subset`` (the call's arguments are among the reference's).
    Unlike agentevals, the pairing of calls is a maximum matching, never a greedy first fit.

    Raises:
        ValueError: for an unknown mode.
    """
    if trajectory_mode not in TRAJECTORY_MODES:
        raise ValueError(f"trajectory_mode {trajectory_mode!r}: expected one of {', '.join(TRAJECTORY_MODES)}")
    if args_mode not in ARGS_MODES:
        raise ValueError(f"args_mode {args_mode!r}: expected one of {', '.join(ARGS_MODES)}")
    milestones = []
    ids = [f"call{i + 1}" for i in range(len(calls))]
    for i, c in enumerate(calls):
        pattern = CallPattern(c.name, tuple((k, literal(v)) for k, v in c.arguments.items()), args_mode)
        after = (ids[i - 1],) if trajectory_mode == "strict" and i else ()
        milestones.append(Milestone(ids[i], i, (pattern,), after, optional=trajectory_mode == "subset"))
    ancestors = {mid: frozenset(ids[:i]) if trajectory_mode == "strict" else frozenset() for i, mid in enumerate(ids)}
    return Plan(
        tuple(milestones), (), (), "allow" if trajectory_mode == "superset" else "forbid", ancestors,
        source=f"agentevals {trajectory_mode} match, arguments {args_mode}",
    )


@dataclass
class Analysis:
    """An example's plan, the trajectory's alignment with it, and its diagnosis."""

    plan: Plan
    steps: list[StepView]
    alignment: Alignment
    diagnosis: Diagnosis


_LAST: list[tuple[Any, ...]] = []


def analyse(example: Example, trajectory: Trajectory, plan: Plan | None = None) -> Analysis | None:
    """Align and diagnose ``trajectory`` against ``plan`` (default: the example's milestones);
    ``None`` when there is no plan. The last analysis is kept, so the four graders of one
    trajectory align it once.

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided (no judge is configured yet).
    """
    plan = plan if plan is not None else example.plan
    if plan is None:
        return None
    if _LAST and _LAST[0][0] is example and _LAST[0][1] is trajectory and _LAST[0][2] is plan:
        return _LAST[0][3]
    steps = step_views(trajectory, results=any(m.refs for m in plan.milestones))
    states = {len(steps): trajectory.final_state}
    alignment = align(plan, steps, states)
    diagnosis = diagnose(plan, steps, alignment, trajectory.final_state)
    result = Analysis(plan, steps, alignment, diagnosis)
    _LAST[:] = [(example, trajectory, plan, result)]
    return result


def _alignment_rows(a: Analysis) -> list[dict[str, Any]]:
    return [{"tool": s.name, **label.as_dict()} for s, label in zip(a.steps, a.diagnosis.labels, strict=True)]


def _error_text(first: dict[str, Any]) -> str:
    where = f"step {first['step']}: " if first["step"] is not None else ""
    what = first["type"].replace("_", " ")
    if first.get("milestone"):
        what += f" ({first['milestone']}"
        what += f", argument {first['argument']!r})" if first.get("argument") else ")"
    return where + what


@register_grader("trajectory_match")
@dataclass(frozen=True)
class TrajectoryMatch:
    """1.0 when every required milestone is matched in an order the ``after`` graph allows, no
    minefield is hit and no extra call breaks the example's ``extra_calls`` policy, by the
    optimal alignment (:mod:`toolgym.graders.alignment`); else 0.0.

    ``details`` hold the alignment (one row per tool step: its milestone, or the type of its
    error and why), the milestones never reached, the minefields hit, whether the search was
    exact, and ``first_error``: ``{"step": 1-based tool step or None, "type": wrong_tool |
    wrong_arguments | missing | out_of_order | extra_call | forbidden | malformed | rejected,
    "milestone": id or None, "argument": name or None}`` (``None`` when it passes).

    Applies to examples with ``milestones``; with ``trajectory_mode`` set, also to examples
    with ``expected_calls`` and no milestones, graded as that agentevals mode
    (:func:`agentevals_plan`).

    Attributes:
        trajectory_mode: ``strict``, ``unordered``, ``subset`` or ``superset`` (agentevals'
            ``trajectory_match_mode``), or ``None``.
        args_mode: agentevals' ``tool_args_match_mode`` for those modes: ``exact`` (default),
            ``ignore``, ``subset`` or ``superset``.

    Raises:
        ValueError: at construction, for an unknown mode.
    """

    trajectory_mode: TrajectoryMode | None = None
    args_mode: Literal["exact", "ignore", "subset", "superset"] = "exact"
    _plans: dict[int, tuple[Example, Plan]] = field(default_factory=dict, init=False, repr=False, compare=False)

    name: ClassVar[str] = "trajectory_match"
    measure: ClassVar[Measure] = BINARY.model_copy(
        update={"reference": "toolgym issue 25: milestones, minefields and extra calls by an optimal alignment; "
                             f"the modes: {AGENTEVALS}"}
    )

    def __post_init__(self) -> None:
        if self.trajectory_mode is not None and self.trajectory_mode not in TRAJECTORY_MODES:
            raise ValueError(f"trajectory_match: trajectory_mode {self.trajectory_mode!r} is not one of {', '.join(TRAJECTORY_MODES)}")
        if self.args_mode not in ARGS_MODES:
            raise ValueError(f"trajectory_match: args_mode {self.args_mode!r} is not one of {', '.join(ARGS_MODES)}")

    def plan_for(self, example: Example) -> Plan | None:
        """The plan this grader applies to ``example``, or ``None`` (the plan built from
        ``expected_calls`` is kept for the example's next trajectory)."""
        if example.plan is not None:
            return example.plan
        if self.trajectory_mode is not None and example.expected_calls is not None:
            cached = self._plans.get(id(example))
            if cached is not None and cached[0] is example:
                return cached[1]
            plan = agentevals_plan(example.expected_calls, self.trajectory_mode, self.args_mode)
            if len(self._plans) >= PLAN_CACHE:
                self._plans.clear()
            self._plans[id(example)] = (example, plan)
            return plan
        return None

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        plan = self.plan_for(example)
        if plan is None:
            return None
        a = analyse(example, trajectory, plan)
        assert a is not None
        d, al = a.diagnosis, a.alignment
        required = sum(1 for m in plan.milestones if not m.optional)
        if d.passed:
            explanation = f"all {required} required milestones matched"
            if al.optional_matched:
                explanation += f", {al.optional_matched} optional"
        else:
            explanation = _error_text(d.first_error or {})
            explanation += f"; {al.required_matched}/{required} required milestones matched"
        if not al.exact:
            explanation += f" ({al.method})"
        return make_score(
            self, trajectory, float(d.passed), explanation,
            first_error=d.first_error,
            alignment=_alignment_rows(a),
            missing=d.missing,
            missing_optional=d.missing_optional,
            minefields_hit=d.mines,
            matched={k: {"kind": kind, "at": pos + 1 if kind == "step" else pos} for k, (kind, pos) in al.matched.items()},
            exact=al.exact,
            method=al.method,
            plan=plan.source,
            extra_calls=plan.extra_calls,
        )


@register_grader("milestone_progress")
@dataclass(frozen=True)
class MilestoneProgress:
    """The fraction of required milestones the optimal alignment matches (0..1); 0 when a
    minefield is hit. 1.0 for an example whose milestones are all optional (unless a
    minefield is hit). Applies to examples with ``milestones``."""

    name: ClassVar[str] = "milestone_progress"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=">=", threshold=1.0,
        reference="toolgym issue 25; ToolSandbox (Apple) milestone similarity, minefields zero the score",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = analyse(example, trajectory)
        if a is None:
            return None
        required = sum(1 for m in a.plan.milestones if not m.optional)
        matched = a.alignment.required_matched
        if a.diagnosis.mines:
            return make_score(self, trajectory, 0.0, f"minefield hit ({matched}/{required} matched before)",
                              matched=matched, required=required, minefields_hit=a.diagnosis.mines)
        value = matched / required if required else 1.0
        return make_score(self, trajectory, value, f"{matched}/{required} required milestones matched",
                          matched=matched, required=required, missing=a.diagnosis.missing)


@register_grader("step_precision")
@dataclass(frozen=True)
class StepPrecision:
    """Tool steps matched to a milestone divided by tool steps made, leaving out the unmatched
    steps the ``extra_calls`` policy allows (a harmless extra read is no error). Applies to
    examples with ``milestones`` and trajectories with at least one counted step."""

    name: ClassVar[str] = "step_precision"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=None,
        reference="toolgym issue 25: matched tool steps / tool steps made, allowed extras left out",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = analyse(example, trajectory)
        if a is None:
            return None
        made = len(a.steps)
        allowed = sum(
            1 for s, mid in zip(a.steps, a.alignment.step_milestone, strict=True)
            if mid is None and step_allowed(a.plan, s)
        )
        counted = made - allowed
        if counted == 0:
            return None
        matched = made - a.alignment.unmatched
        return make_score(self, trajectory, matched / counted,
                          f"{matched}/{counted} counted tool steps matched a milestone ({allowed} allowed extras left out)",
                          matched=matched, counted=counted, allowed_extra=allowed)


@register_grader("step_recall")
@dataclass(frozen=True)
class StepRecall:
    """Required milestones matched divided by required milestones (minefields do not change
    it; see ``milestone_progress``). Applies to examples with at least one required
    milestone."""

    name: ClassVar[str] = "step_recall"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=None,
        reference="toolgym issue 25: matched required milestones / required milestones",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = analyse(example, trajectory)
        if a is None:
            return None
        required = sum(1 for m in a.plan.milestones if not m.optional)
        if not required:
            return None
        matched = a.alignment.required_matched
        return make_score(self, trajectory, matched / required, f"{matched}/{required} required milestones matched",
                          matched=matched, required=required)


def milestone_problems(benchmark: Any, example: Example) -> list[str]:
    """Whether an example's reference solves its own milestones (``toolgym check``): its
    ``expected_calls`` are replayed on a fresh environment of ``benchmark`` (a
    :class:`toolgym.Benchmark`) and the replay is graded by ``trajectory_match``; a reference
    that fails is a defect of the benchmark, not of a model. Examples without milestones or
    without expected calls have nothing to check.

    Returns:
        One line per problem (empty when the reference passes).

    Raises:
        ToolBug: when a tool of the environment is broken.
    """
    if example.plan is None or example.expected_calls is None:
        return []
    from toolgym.records import ToolStep

    env = benchmark.environment()
    steps = []
    try:
        env.reset(example)
        for k, call in enumerate(example.expected_calls):
            result = env.call(call.name, call.arguments)
            steps.append(ToolStep(call_id=f"ref{k}", name=call.name, arguments=call.arguments,
                                  output=result.output, error=result.error))
        state = env.read_state()
    finally:
        env.close()
    replay = Trajectory(example_id=example.id, env=benchmark.name, agent="reference", status="completed",
                        steps=steps, final_state=state)
    score = TrajectoryMatch().grade(example, replay)
    if score is None or score.value == 1.0:
        return []
    return [f"{example.id}: its expected calls do not satisfy its milestones ({score.explanation})"]

"""Graders of episodes played from a prefix (:mod:`toolgym.forcing`): ``next_step``, the
teacher-forced step accuracy, and ``recovery``, whether an agent reached the remaining
milestones after an injected fault. Both read the example's milestones with the stepwise
grader's matchers and alignment (:mod:`toolgym.graders.alignment`); an example without
milestones is graded against a strict chain of its ``expected_calls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from toolgym.graders import make_score, register_grader
from toolgym.graders.alignment import StepView, align, diagnose
from toolgym.graders.trajectory import _MilestoneGrader, agentevals_plan, step_views
from toolgym.matchers import Equal
from toolgym.milestones import Plan
from toolgym.records import BINARY, Example, Measure, Score, ToolCallSpec, Trajectory

__all__ = ["NextStep", "Recovery", "reference_calls", "reference_plan"]

NEXT_STEP_TYPES: tuple[str, ...] = (
    "no_call", "wrong_tool", "wrong_arguments", "out_of_order", "extra_call", "forbidden", "malformed", "rejected",
)
"""The ``first_error`` types of ``next_step``: the stepwise grader's, and ``no_call`` (the model
answered without calling a tool)."""


def reference_calls(example: Example) -> list[ToolCallSpec] | None:
    """An example's reference path: its ``expected_calls``, else the required call milestones
    in an order their ``after`` graph allows (written order among those free to go), when each
    names its arguments as plain values; ``None`` when there is no such path."""
    if example.expected_calls is not None:
        return list(example.expected_calls)
    plan = example.plan
    if plan is None:
        return None
    done: set[str] = set()
    order = []
    pending = list(plan.milestones)
    while pending:
        ready = next((m for m in pending if all(a in done for a in m.after)), None)
        if ready is None:
            return None
        pending.remove(ready)
        done.add(ready.id)
        order.append(ready)
    calls = []
    for m in order:
        if m.optional or not m.calls:
            continue
        call = m.calls[0]
        if call.arguments is None:
            if call.args != "ignore":
                return None
            calls.append(ToolCallSpec(name=call.name))
            continue
        if not all(isinstance(matcher, Equal) for _, matcher in call.arguments):
            return None
        calls.append(ToolCallSpec(name=call.name, arguments={k: matcher.value for k, matcher in call.arguments}))
    return calls or None


def reference_plan(example: Example) -> Plan | None:
    """What a step is graded against: the example's milestones, else a strict chain of its
    ``expected_calls`` with exact arguments (agentevals' ``strict`` mode); ``None`` without
    either."""
    if example.plan is not None:
        return example.plan
    if example.expected_calls is None:
        return None
    return agentevals_plan(list(example.expected_calls), "strict", "exact")


def _split(trajectory: Trajectory, prefix: int) -> tuple[list[Any], list[Any]]:
    """The trajectory's steps up to its ``prefix``-th tool step, and the steps after."""
    if prefix == 0:
        return [], list(trajectory.steps)
    seen = 0
    for i, s in enumerate(trajectory.steps):
        if s.kind == "tool":
            seen += 1
            if seen == prefix:
                return list(trajectory.steps[: i + 1]), list(trajectory.steps[i + 1:])
    return list(trajectory.steps), []


@register_grader("next_step")
@dataclass(frozen=True)
class NextStep(_MilestoneGrader):
    """Teacher-forced step accuracy: 1.0 when the model's first call after a prefix of ``k-1``
    reference steps matches a milestone of the example (milestone ``k`` of the reference path,
    or another that the ``after`` graph allows there), by the stepwise grader's alignment of
    the prefix and that call; else 0.0. Applies to teacher-forced trajectories without a fault
    (``prefix_steps`` set, ``injected`` unset).

    ``details``: ``k`` (1-based step), ``expected`` (the milestone the reference's step ``k``
    matches), ``matched`` (the milestone the model's call matched, or ``None``), ``call`` (its
    name and arguments, ``None`` without a call) and ``first_error`` (``{"step": k, "type": one
    of NEXT_STEP_TYPES, "milestone", "argument"}``, ``None`` when it passes).
    """

    name: ClassVar[str] = "next_step"
    forced: ClassVar[bool] = True
    kept_details: ClassVar[tuple[str, ...]] = ("k", "expected", "matched")  # by k, and which milestone
    measure: ClassVar[Measure] = BINARY.model_copy(update={
        "reference": "toolgym issue 26: the first call after k-1 reference steps against milestone k; "
                     "JMultiWOZ-TC's judgement of each turn given the gold history, for tool calls"})

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        if trajectory.prefix_steps is None or trajectory.injected is not None:
            return None
        calls, plan = reference_calls(example), reference_plan(example)
        p = trajectory.prefix_steps
        if not calls or plan is None or p >= len(calls):
            return None
        k = p + 1
        judge = self.value_judge() if plan.needs_judge else None
        prefix, rest = _split(trajectory, p)
        views = step_views(trajectory.model_copy(update={"steps": prefix}))
        ref = calls[p]
        expected = align(plan, [*views, StepView(ref.name, ref.arguments, None)], judge=judge).step_milestone[p]
        turn = next((s for s in rest if s.kind == "model"), None)
        first = turn.tool_calls[0] if turn is not None and turn.tool_calls else None
        tool = next((s for s in rest if s.kind == "tool" and first is not None and s.call_id == first.id), None)
        if tool is None:
            tool = next((s for s in rest if s.kind == "tool"), None) if first is not None else None
        if first is None or tool is None:
            error = {"step": k, "type": "no_call", "milestone": expected, "argument": None}
            return make_score(self, trajectory, 0.0, f"step {k}: no tool call (expected {expected})",
                              k=k, expected=expected, matched=None, call=None, first_error=error)
        one = step_views(trajectory.model_copy(update={"steps": [tool]}), results=False)
        steps = [*views, *one]
        alignment = align(plan, steps, judge=judge)
        label = diagnose(plan, steps, alignment, None, judge=judge).labels[p]
        matched = alignment.step_milestone[p]
        passed = matched is not None and label.type != "forbidden"
        call = {"name": tool.name, "arguments": tool.arguments}
        if passed:
            note = f"step {k}: {tool.name} matched {matched}" + ("" if matched == expected else f" (reference: {expected})")
            return make_score(self, trajectory, 1.0, note, k=k, expected=expected, matched=matched, call=call,
                              first_error=None)
        kind = label.type or "extra_call"
        error = {"step": k, "type": kind, "milestone": label.milestone or expected, "argument": label.argument}
        note = f"step {k}: {kind.replace('_', ' ')} ({tool.name}; expected {expected}"
        note += f", argument {label.argument!r})" if label.argument else ")"
        return make_score(self, trajectory, 0.0, note, k=k, expected=expected, matched=None, call=call,
                          first_error=error)


@register_grader("recovery")
@dataclass(frozen=True)
class Recovery(_MilestoneGrader):
    """Recovery from an injected fault (``--inject KIND@K``): 1.0 when the trajectory reaches
    every required milestone (and no minefield) despite the fault at tool step ``K``, by the
    stepwise grader's alignment; else 0.0. Applies to trajectories with ``injected`` set.

    ``details``: ``kind``, ``step`` (``K``), ``recovered``, ``steps`` (tool steps after ``K``
    up to the one that matched the last milestone, 0 when none was left; ``None`` when not
    recovered), ``missing`` and ``minefields_hit``.
    """

    name: ClassVar[str] = "recovery"
    forced: ClassVar[bool] = True
    kept_details: ClassVar[tuple[str, ...]] = ("kind", "step", "recovered", "steps")  # rates per kind, steps taken
    measure: ClassVar[Measure] = BINARY.model_copy(update={
        "reference": "toolgym issue 26: the remaining milestones reached after a fault injected at step K"})

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        injected = trajectory.injected
        plan = reference_plan(example)
        if not injected or plan is None:
            return None
        a = self.analysis(example, trajectory, plan)
        assert a is not None
        d, al = a.diagnosis, a.alignment
        at = int(injected.get("step", 0))
        recovered = not d.missing and not d.mines
        later = [pos + 1 for kind, pos in al.matched.values() if kind == "step" and pos + 1 > at]
        later += [pos for kind, pos in al.matched.values() if kind != "step" and pos > at]  # a state, text, result
        steps = (max(later) - at if later else 0) if recovered else None
        kind = injected.get("kind")
        if recovered:
            note = f"recovered from {kind} at step {at} in {steps} step(s)"
        else:
            note = f"not recovered from {kind} at step {at}: " + (
                f"missing {', '.join(d.missing)}" if d.missing else "minefield hit")
        return make_score(self, trajectory, float(recovered), note, kind=kind, step=at, recovered=recovered,
                          steps=steps, missing=d.missing, minefields_hit=d.mines)

"""``milestone_similarity``: partial credit for milestones the trajectory came close to, after
ToolSandbox's milestone similarity (Lu et al. 2024, "ToolSandbox", section 3.3: each milestone
scored in [0, 1] by per-column similarities, ROUGE-L for text). It is reported beside the
binary graders (``trajectory_match``, ``milestone_progress``), never instead of them.

A milestone matched by the optimal alignment (:mod:`toolgym.graders.alignment`) scores 1. An
unmatched required milestone scores 0 unless it declares ``similarity`` (see
:func:`toolgym.matchers.compile_similarity`); then it scores the best similarity of what the
trajectory did where it could have matched, once its ``after`` milestones were matched:

* a call: each executed tool step of one of its call's tools that matched no other milestone;
  the geometric mean, over the arguments the call names, of the argument's measure when it
  has one, else 1 when its matcher matches and 0 when not (ToolSandbox's geometric mean: a
  wrong argument without a measure still gives 0); the argument mode and the keys the call
  does not name are not compared;
* a state: each known state (after a recorded step, the final state), the geometric mean over
  the keys it names, likewise;
* a message or an answer: each text the agent said (for an answer, the final answer), its
  measure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from toolgym.graders import make_score, register_grader
from toolgym.graders.alignment import Observation, seen_counts, seen_results, turn_spans
from toolgym.graders.trajectory import Analysis, _MilestoneGrader, observations, recorded_states
from toolgym.matchers import MatchContext, Matcher, Similarity
from toolgym.milestones import MessagePattern, Milestone
from toolgym.records import Example, Measure, Score, Trajectory

__all__ = ["MilestoneSimilarity", "milestone_similarities"]


def _geometric_mean(values: list[float]) -> float:
    if not values:
        return 1.0
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _items_similarity(
    items: tuple[tuple[str, Matcher], ...],
    given: Mapping[str, Any],
    measures: Mapping[str, Similarity],
    context: MatchContext,
) -> float:
    values = []
    for key, matcher in items:
        if key in measures:
            values.append(measures[key].score(given[key]) if key in given else 0.0)
        else:
            values.append(1.0 if key in given and matcher.match(given[key], context) else 0.0)
    return _geometric_mean(values)


def milestone_similarities(analysis: Analysis, trajectory: Trajectory, judge: Any = None) -> dict[str, dict[str, Any]]:
    """Every milestone's similarity (see the module docstring): milestone id →
    ``{"value": float in [0, 1], "matched": bool}`` and, for a partial credit, where it was
    found (``"step"``: 1-based tool step, or ``"at"``: tool steps before the state or text).

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided and ``judge`` is ``None``.
    """
    plan, steps, al = analysis.plan, analysis.steps, analysis.alignment
    matched = al.matched
    times = {mid: pos if kind == "step" else pos - 0.5 for mid, (kind, pos) in matched.items()}
    results = {mid: steps[pos].result for mid, (kind, pos) in matched.items() if kind == "step"}
    needs = [m for m in plan.milestones if m.id not in matched and m.similarity]
    observed: dict[int, Observation] = observations(trajectory) if any(
        isinstance(p, MessagePattern) for m in needs for p in m.alternatives) else {}
    states: dict[int, Any] = {}
    if any(m.states for m in needs):
        states = dict(analysis.states) or {**recorded_states(trajectory), len(steps): trajectory.final_state}
    tool_context = seen_results(observations(trajectory), seen_counts(steps), judge) if plan.reads_tools else None
    context = MatchContext(results=results, judge=judge)

    spans = turn_spans(steps) if plan.has_turns else None

    def ready(m: Milestone, t: float) -> bool:
        """``m``'s ``after`` matched before time ``t`` (step ``i`` at ``i``, the state after ``k``
        steps at ``k - 0.5``), in ``m``'s user turn."""
        if m.turn is not None and spans is not None:
            first, last = spans[int(t + 0.5)] if t != int(t) else (steps[int(t)].user_turn,) * 2
            if first is not None and not first <= m.turn <= last:
                return False
        return all(a in times and times[a] < t for a in m.after)

    out: dict[str, dict[str, Any]] = {}
    for m in plan.milestones:
        if m.id in matched:
            out[m.id] = {"value": 1.0, "matched": True}
            continue
        best: dict[str, Any] = {"value": 0.0, "matched": False}
        measures = dict(m.similarity)
        if measures:
            for i, s in enumerate(steps):
                if not s.executed or al.step_milestone[i] is not None or not ready(m, i):
                    continue
                here = context
                if tool_context is not None:
                    here = MatchContext(results=results, judge=judge, tool_results=tool_context(i).tool_results)
                for c in m.calls:
                    if c.name == s.name:
                        value = _items_similarity(c.arguments or (), s.arguments, measures, here)
                        if value > best["value"]:
                            best = {"value": value, "matched": False, "step": i + 1}
            for k, state in sorted(states.items()):
                if ready(m, k - 0.5):
                    for p in m.states:
                        value = _items_similarity(p.items, state, measures, context)
                        if value > best["value"]:
                            best = {"value": value, "matched": False, "at": k}
            measure = measures.get("")
            for k, seen in sorted(observed.items()):
                if measure is None or not ready(m, k - 0.5):
                    continue
                for p in m.alternatives:
                    if isinstance(p, MessagePattern):
                        texts = (seen.answer,) if p.final and seen.answer is not None else () if p.final else seen.texts
                        for text in texts:
                            value = measure.score(text)
                            if value > best["value"]:
                                best = {"value": value, "matched": False, "at": k}
        out[m.id] = best
    return out


@register_grader("milestone_similarity")
@dataclass(frozen=True)
class MilestoneSimilarity(_MilestoneGrader):
    """The mean similarity of the required milestones (0..1): 1 for a matched one, the best
    partial credit its ``similarity`` measures give for an unmatched one (0 without them); 0
    when a minefield is hit; 1.0 when every milestone is optional (see the module docstring).
    After ToolSandbox's milestone similarity (Lu et al. 2024); ROUGE-L after Lin 2004.

    ``details``: ``similarity`` (milestone id → its value, required milestones) and
    ``partial`` (milestone id → ``{"value", "step" or "at"}`` for each partial credit).

    Applies to examples with ``milestones``. It never changes the binary graders: a
    trajectory that fails ``trajectory_match`` still fails it, whatever its similarity.
    """

    name: ClassVar[str] = "milestone_similarity"
    kept_details: ClassVar[tuple[str, ...]] = ()
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=">=", threshold=1.0,
        reference="ToolSandbox (Lu et al. 2024) milestone similarity; ROUGE-L (Lin 2004) F-measure; toolgym issue 35",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = self.analysis(example, trajectory)
        if a is None:
            return None
        required = [m for m in a.plan.milestones if not m.optional]
        if a.diagnosis.mines:
            return make_score(self, trajectory, 0.0, "minefield hit", minefields_hit=a.diagnosis.mines)
        judge = self.value_judge() if a.plan.needs_judge else None
        each = milestone_similarities(a, trajectory, judge)
        if not required:
            return make_score(self, trajectory, 1.0, "no required milestone")
        values = {m.id: each[m.id]["value"] for m in required}
        partial = {mid: {k: v for k, v in found.items() if k != "matched"}
                   for mid, found in each.items() if not found["matched"] and found["value"] > 0}
        value = sum(values.values()) / len(values)
        matched = sum(1 for m in required if each[m.id]["matched"])
        explanation = f"{matched}/{len(required)} required milestones matched"
        if partial:
            explanation += ", partial credit: " + ", ".join(f"{k} {v['value']:.2f}" for k, v in partial.items())
        return make_score(self, trajectory, value, explanation, similarity=values, partial=partial)

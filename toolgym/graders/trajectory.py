"""Stepwise trajectory graders over an example's milestones (:mod:`toolgym.milestones`): the
binary ``trajectory_match`` with its alignment and first error, and ``milestone_progress``,
``step_precision`` and ``step_recall``.

They read the finished trajectory only: each tool step (name, arguments, output, state patch),
the final state and, for ``message``, ``answer`` and ``result`` milestones, the text of each
model step, the final answer and the tools' results (:func:`observations`). A ``state`` milestone or minefield is checked against the state after
every tool step, rebuilt from the recorded patches (:func:`toolgym.states_after`); where the
trajectory records none (an older run, an imported file, the environment's cap reached), only
the final state is known, after the last tool step. All apply only to examples with
``milestones``; ``trajectory_match`` also grades examples with ``expected_calls`` alone in one
of agentevals' modes when given ``trajectory_mode``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from toolgym.graders import make_score, register_grader
from toolgym.graders.alignment import (
    Alignment,
    Diagnosis,
    Observation,
    StepView,
    align,
    diagnose,
    first_error_text,
    in_chain_order,
    seen_counts,
    turn_order,
    unpermuted,
    unpermuted_diagnosis,
    within_turns,
)
from toolgym.milestones import ARGS_MODES, Plan, calls_plan
from toolgym.records import (
    BINARY,
    Example,
    Measure,
    Score,
    ToolCallSpec,
    Trajectory,
    states_after,
    turn_of_steps,
)

__all__ = [
    "TRAJECTORY_MODES",
    "MilestoneProgress",
    "StepPrecision",
    "StepRecall",
    "TrajectoryMatch",
    "agentevals_plan",
    "analyse",
    "milestone_problems",
    "observations",
    "results_seen",
    "step_views",
]

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
TRAJECTORY_MODES: tuple[str, ...] = ("strict", "unordered", "subset", "superset")

PLAN_CACHE = 256
"""Plans built from ``expected_calls`` kept by one ``trajectory_match`` (by example), the
least recently used dropped first. A run plays the trials of one example together, so they are graded
close together; a plan kept much longer costs more than it saves (every plan kept is some
70 objects that Python's cyclic garbage collector walks again in each full collection)."""

AGENTEVALS = "agentevals (langchain-ai/agentevals) README, 'Trajectory match'"


def _result(output: str) -> Any:
    try:
        return json.loads(output)
    except (json.JSONDecodeError, ValueError):
        return output


def _changed_keys(patch: list[dict[str, Any]] | None) -> frozenset[str] | None:
    """The top-level state keys an RFC 6902 patch touches; ``None`` when it was not recorded
    or replaces the whole state."""
    if patch is None:
        return None
    keys = set()
    for op in patch:
        for where in (op.get("path"), op.get("from")):
            if isinstance(where, str):
                if where == "":
                    return None
                keys.add(where[1:].split("/", 1)[0].replace("~1", "/").replace("~0", "~"))
    return frozenset(keys)


def step_views(trajectory: Trajectory, results: bool = True) -> list[StepView]:
    """The trajectory's tool steps as the alignment reads them: the output parsed as JSON
    (else kept as text) is the result ``$from`` reads (parsed only when ``results``); a
    malformed or rejected call was never executed; ``turn`` is the model turn that made the
    call (0-based; ``None`` for a step before any model step: a hand-built trajectory),
    ``changes`` the state keys its ``state_patch`` touched, and ``user_turn`` the user turn it
    was made in (1 before the first user step; ``None`` throughout a trajectory without user
    steps, whose turns are not known)."""
    views: list[StepView] = []
    append = views.append
    make = tuple.__new__  # StepView(...) without its Python-level __new__ (a view per step of every grading)
    turn = user_turn = None
    for s in trajectory.steps:
        if s.kind == "tool":
            patch = s.state_patch
            append(make(StepView, (s.name, s.arguments, _result(s.output) if results else None,
                                   not (s.malformed or s.rejected), s.malformed, s.rejected, turn,
                                   None if patch is None else _changed_keys(patch), user_turn)))
        elif s.kind == "model":
            turn = 0 if turn is None else turn + 1
        elif s.kind == "user":
            if user_turn is None and views:  # tool steps before the first user step: turn 1
                views[:] = [v._replace(user_turn=1) for v in views]
            user_turn = s.turn
    return views


def observations(trajectory: Trajectory, results: bool = True) -> dict[int, Observation]:
    """What was observed after ``k`` tool steps, for the ``k`` where something was
    (:class:`~toolgym.graders.alignment.Observation`): the non-empty text of each model step made
    after ``k`` tool steps (before the next), the final answer after the last tool step (also
    among its texts, once), and the result of tool step ``k`` (its output parsed as JSON, else
    the text) when it ran without error (not malformed, not rejected, no tool error); with the
    user turn of each (in a trajectory with user steps). Results are left out when not
    ``results``."""
    texts: dict[int, list[tuple[str, int | None]]] = {}
    produced: dict[int, tuple[tuple[str, Any], int | None]] = {}
    k = 0
    user_turn = 1 if trajectory.user_steps else None
    for step in trajectory.steps:
        if step.kind == "model":
            if step.text:
                texts.setdefault(k, []).append((step.text, user_turn))
        elif step.kind == "tool":
            k += 1
            if results and not (step.error or step.malformed or step.rejected):
                produced[k] = ((step.name, _result(step.output)), user_turn)
        elif step.kind == "user":
            user_turn = step.turn
    answer = trajectory.final_answer
    if answer:
        said = texts.setdefault(k, [])
        if all(text != answer for text, _ in said):
            said.append((answer, user_turn))
    out: dict[int, Observation] = {}
    for position in sorted({*texts, *produced}):
        here = texts.get(position, ())
        result, result_turn = produced.get(position, (None, None))
        out[position] = Observation(
            tuple(text for text, _ in here), answer if position == k and answer else None, result,
            tuple(turn for _, turn in here) if user_turn is not None else (),
            user_turn if position == k and answer else None, result_turn)
    return out


def results_seen(trajectory: Trajectory) -> list[int]:
    """For each tool step, the tool steps whose results the model had seen when it made the
    call: those before the model turn that made it (a call made in the same turn as another
    cannot read that one's result). A tool step before any model turn (a replayed prefix)
    has seen every step before it. (:func:`~toolgym.graders.alignment.seen_counts` of the
    trajectory's :func:`step_views`, which the alignment derives itself.)"""
    return seen_counts(step_views(trajectory, results=False))


def agentevals_plan(calls: list[ToolCallSpec], trajectory_mode: str, args_mode: str = "exact") -> Plan:
    """The plan that grades ``expected_calls`` the way one of agentevals' trajectory match
    modes defines it (agentevals README, "Trajectory match"):

    * ``strict``: "the same messages in the same order, with the same tool calls": a chain of
      the reference calls, no other call allowed; the calls of one model turn may match the
      chain's next calls in any order (agentevals pairs the calls inside one assistant message
      in any order); how the reference's calls are grouped in messages is not compared;
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
    # no $from here, so no ancestor sets are needed (a chain's would be quadratic in its length)
    plan = calls_plan(
        calls, chain=trajectory_mode == "strict", optional=trajectory_mode == "subset",
        extra_calls="allow" if trajectory_mode == "superset" else "forbid", args_mode=args_mode,  # type: ignore[arg-type]
        source=f"agentevals {trajectory_mode} match, arguments {args_mode}",
    )
    plan.unordered_within_turn = trajectory_mode == "strict"
    return plan


@dataclass
class Analysis:
    """An example's plan, the trajectory's alignment with it, and its diagnosis."""

    plan: Plan
    steps: list[StepView]
    alignment: Alignment
    diagnosis: Diagnosis
    states: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The state after each tool step ``k`` known (the recorded ones, and the final state
    after the last step)."""

    def matched_details(self) -> dict[str, dict[str, Any]]:
        """``trajectory_match``'s ``details.matched``: milestone → ``{"kind": "step", "at":
        1-based tool step}``, ``{"kind": "message" | "answer" | "result", "at": tool steps
        before it}`` or ``{"kind": "state", "at": tool steps before the state that
        matched it, "met": tool steps after which it held from then on}`` (for a state
        milestone matched by the final state, where it was first met and never undone;
        ``met`` equals ``at`` otherwise)."""
        out: dict[str, dict[str, Any]] = {}
        by_id: dict[str, Any] = {}
        for mid, (kind, pos) in self.alignment.matched.items():
            if kind == "step":
                out[mid] = {"kind": "step", "at": pos + 1}
                continue
            if kind != "state":  # a message, an answer, a result: said or returned after `pos` tool steps
                out[mid] = {"kind": kind, "at": pos}
                continue
            met = pos
            if mid in self.plan.final_only:
                by_id = by_id or {m.id: m for m in self.plan.milestones}
                for k in sorted((k for k in self.states if k < pos), reverse=True):
                    if any(p.wrong_key(self.states[k]) is None for p in by_id[mid].states):
                        met = k
                    else:
                        break
            out[mid] = {"kind": "state", "at": pos, "met": met}
        return out


_LAST: list[tuple[Any, ...]] = []


def plan_reads_states(plan: Plan) -> bool:
    """Whether a plan has a state milestone or a state minefield (:attr:`Plan.reads_states`)."""
    return plan.reads_states


def recorded_states(trajectory: Trajectory) -> dict[int, dict[str, Any]]:
    """The state after each tool step ``k`` (1-based) whose patches the trajectory records
    (:func:`toolgym.states_after`), by ``k``; empty when none are (an older run, an imported
    file) or a stored patch does not apply (a record edited by hand)."""
    if trajectory.initial_state is None:
        return {}
    try:
        after = states_after(trajectory)
    except ValueError:
        return {}
    states: dict[int, dict[str, Any]] = {}
    for k, state in enumerate(after):
        if state is None:
            break
        states[k + 1] = state
    return states


def analyse(
    example: Example, trajectory: Trajectory, plan: Plan | None = None, judge: Any = None
) -> Analysis | None:
    """Align and diagnose ``trajectory`` against ``plan`` (default: the example's milestones);
    ``None`` when there is no plan. ``judge(criterion, value) -> bool`` decides ``$judge``
    matchers. The last analysis is kept, so the four graders of one trajectory align it once.

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided and ``judge`` is ``None``.
    """
    plan = plan if plan is not None else example.plan
    if plan is None:
        return None
    last = _LAST[0] if _LAST else None  # read once: graders may run in several threads
    if last is not None and last[0] is example and last[1] is trajectory and last[2] is plan and last[3] is judge:
        return last[4]
    steps = step_views(trajectory, results=plan.has_refs)
    # the states after recorded steps, and the final state after the last one: what the
    # environment held at the end, whatever was recorded
    recorded = recorded_states(trajectory) if plan_reads_states(plan) else {}
    known = {**recorded, len(steps): trajectory.final_state}
    if plan.unordered_within_turn and steps:  # agentevals' strict mode: one model turn's calls in any order
        paired = within_turns(plan, steps)
        order = turn_order(plan, steps) if paired is None else None
        inner = in_chain_order(plan)
        if order is not None:  # each model turn's calls in the chain's order, explained in that order
            view = [steps[k] for k in order]
            alignment = align(inner, view, known, judge=judge)
            diagnosis = diagnose(inner, view, alignment, trajectory.final_state, judge=judge, states=recorded)
            alignment, diagnosis = unpermuted(alignment, order), unpermuted_diagnosis(diagnosis, order)
        else:
            alignment = paired if paired is not None else align(inner, steps, known, judge=judge)
            diagnosis = diagnose(inner, steps, alignment, trajectory.final_state, judge=judge, states=recorded)
    elif plan.observes or plan.reads_tools:  # what was said and returned, and what each call had seen
        observed = observations(trajectory)
        alignment = align(plan, steps, known, judge=judge, observed=observed)
        diagnosis = diagnose(plan, steps, alignment, trajectory.final_state, judge=judge, states=recorded,
                             observed=observed)
    else:
        alignment = align(plan, steps, known, judge=judge)
        diagnosis = diagnose(plan, steps, alignment, trajectory.final_state, judge=judge, states=recorded)
    result = Analysis(plan, steps, alignment, diagnosis, known)
    _LAST[:1] = [(example, trajectory, plan, judge, result)]
    return result


VALUE_JUDGE_SYSTEM = """You check one value that an AI assistant gave as a tool argument (or \
that an environment holds) against a criterion. Decide whether the value satisfies the \
criterion. Reply with two lines:
VERDICT: CORRECT or INCORRECT
REASON: one sentence."""


@dataclass(frozen=True)
class ValueJudge:
    """Decides ``$judge`` matchers with an LLM: ``judge(criterion, value) -> bool``.

    The judge reads the criterion and the value (as JSON) and replies CORRECT or INCORRECT
    (:func:`toolgym.graders.judge.parse_verdict`); an unparseable reply or a failing call
    counts as not matching and is kept in ``calls``. Replies are cached on disk like the
    ``correctness`` judge's (:class:`toolgym.graders.judge.JudgeCache`) and in memory per
    (criterion, value), so the alignment asks once per distinct value.

    Attributes:
        model: A ready chat model (``invoke(messages)``).
        model_id: Its identity in the cache key.
        cache_dir: The reply cache folder, or ``None`` for none.
    """

    model: Any
    model_id: str
    cache_dir: str | None = None
    calls: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict, compare=False)

    def __call__(self, criterion: str, value: Any) -> bool:
        from langchain_core.messages import HumanMessage, SystemMessage

        from toolgym.graders.judge import JudgeCache, parse_verdict
        from toolgym.parsing import message_text

        shown = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        key = (criterion, shown)
        if key in self.calls:
            return self.calls[key]["verdict"] == "CORRECT"
        messages = [SystemMessage(VALUE_JUDGE_SYSTEM), HumanMessage(f"CRITERION: {criterion}\nVALUE: {shown}")]
        prompt = [{"role": "system", "content": VALUE_JUDGE_SYSTEM}, {"role": "user", "content": messages[1].content}]
        cache = JudgeCache(Path(self.cache_dir)) if self.cache_dir else None
        cache_key = JudgeCache.key(self.model_id, prompt, {"criterion": criterion, "value": shown})
        reply = cache.get(cache_key) if cache else None
        record: dict[str, Any] = {"criterion": criterion, "value": shown, "cached": reply is not None}
        if reply is None:
            try:
                reply = message_text(self.model.invoke(messages))
            except Exception as exc:  # noqa: BLE001 - a failing judge call is a non-match, recorded
                record |= {"verdict": None, "error": f"{type(exc).__name__}: {exc}"}
                self.calls[key] = record
                return False
            if cache:
                cache.put(cache_key, reply, {"judge_model": self.model_id, "prompt": prompt})
        verdict = parse_verdict(reply)
        record |= {"verdict": verdict.verdict, "reason": verdict.reason}
        self.calls[key] = record
        return verdict.verdict == "CORRECT"


@dataclass(frozen=True, kw_only=True)
class _MilestoneGrader:
    """Settings shared by the milestone graders: the judge of ``$judge`` matchers.

    Attributes:
        judge_model: Model spec of the judge (``--judge-model``); ``None``: no judge, and an
            example using ``$judge`` is unscored with the reason.
        judge_cache: Reply cache folder (default ``~/.cache/toolgym/judge``); ``""`` turns it off.
        judge: A ready chat model (tests pass a scripted one), built from ``judge_model`` when
            omitted.
    """

    judge_model: str | None = None
    judge_cache: str | None = None
    judge: Any = field(default=None, compare=False, repr=False)
    _value_judge: list[ValueJudge] = field(default_factory=list, init=False, repr=False, compare=False)

    def value_judge(self) -> ValueJudge | None:
        """The ``$judge`` decider, built on first use; ``None`` without a judge."""
        if self._value_judge:
            return self._value_judge[0]
        model = self.judge
        if model is None and self.judge_model:
            from toolgym.providers import ModelSettings, build_model

            model = build_model(self.judge_model, ModelSettings(temperature=0.0))
        if model is None:
            return None
        from toolgym.graders.judge import default_cache_dir

        cache = None if self.judge_cache == "" else (self.judge_cache or str(default_cache_dir()))
        model_id = self.judge_model or f"{type(model).__module__}.{type(model).__qualname__}"
        self._value_judge.append(ValueJudge(model, model_id, cache))
        return self._value_judge[0]

    def analysis(self, example: Example, trajectory: Trajectory, plan: Plan | None = None) -> Analysis | None:
        """:func:`analyse` with this grader's judge (asked only when a ``$judge`` is reached)."""
        plan = plan if plan is not None else example.plan
        if plan is None:
            return None
        return analyse(example, trajectory, plan, self.value_judge() if plan.needs_judge else None)


def error_turn(
    first: dict[str, Any] | None, trajectory: Trajectory, plan: Plan, steps: Sequence[StepView] | None = None
) -> int | None:
    """The user turn a first error belongs to: the turn of its tool step in a multi-turn
    trajectory (:func:`toolgym.records.turn_of_steps`; read from ``steps``, the trajectory's
    :func:`step_views`, when given), else the ``turn`` its milestone names (a missing
    milestone), else ``None``."""
    if first is None:
        return None
    step = first.get("step")
    if steps is not None:
        if isinstance(step, int) and 1 <= step <= len(steps) and steps[step - 1].user_turn is not None:
            return steps[step - 1].user_turn
    elif isinstance(step, int) and trajectory.user_steps:
        tools = [turn for s, turn in zip(trajectory.steps, turn_of_steps(trajectory), strict=True) if s.kind == "tool"]
        if 1 <= step <= len(tools):
            return tools[step - 1]
    milestone = next((m for m in plan.milestones if m.id == first.get("milestone")), None)
    return milestone.turn if milestone is not None else None


def _alignment_rows(a: Analysis) -> list[dict[str, Any]]:
    return [label.row(s.name) for s, label in zip(a.steps, a.diagnosis.labels, strict=True)]


def required_text(matched: int, required: int) -> str:
    """``"2/3 required milestones matched"``, or ``"no required milestones"``."""
    return f"{matched}/{required} required milestones matched" if required else "no required milestones (all optional)"


@register_grader("trajectory_match")
@dataclass(frozen=True)
class TrajectoryMatch(_MilestoneGrader):
    """1.0 when every required milestone is matched in an order the ``after`` graph allows, no
    minefield is hit and no extra call breaks the example's ``extra_calls`` policy, by the
    optimal alignment (:mod:`toolgym.graders.alignment`); else 0.0.

    ``details`` hold the alignment (one row per tool step: its milestone, or the type of its
    error and why), the milestones never reached, the minefields hit, whether the search was
    exact, and ``first_error``: ``{"step": 1-based tool step or None, "type": wrong_tool |
    wrong_arguments | missing | out_of_order | extra_call | forbidden | malformed | rejected,
    "milestone": id or None, "argument": name or None}`` (``None`` when it passes), plus
    ``"turn"``: the user turn of that step in a multi-turn trajectory, or the ``turn`` its
    milestone names (``"turn": k`` in the milestone), when either is known.

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
    _plans: OrderedDict[int, tuple[Example, Plan]] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False)

    name: ClassVar[str] = "trajectory_match"
    kept_details: ClassVar[tuple[str, ...]] = (  # what show draws and summary counts, passes included
        "first_error", "alignment", "missing", "missing_optional", "minefields_hit", "matched", "exact", "method")
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
                self._plans.move_to_end(id(example))
                return cached[1]
            plan = agentevals_plan(example.expected_calls, self.trajectory_mode, self.args_mode)
            plans = self._plans
            if len(plans) >= PLAN_CACHE:
                plans.popitem(last=False)
            plans[id(example)] = (example, plan)
            return plan
        return None

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        plan = self.plan_for(example)
        if plan is None:
            return None
        a = self.analysis(example, trajectory, plan)
        assert a is not None
        d, al = a.diagnosis, a.alignment
        required = sum(1 for m in plan.milestones if not m.optional)
        first_error = d.first_error
        turn = error_turn(first_error, trajectory, plan, a.steps)
        if first_error is not None and turn is not None:
            first_error = {**first_error, "turn": turn}
        if d.passed:
            explanation = f"all {required} required milestones matched" if required else required_text(0, 0)
            if al.optional_matched:
                explanation += f", {al.optional_matched} optional"
        else:
            explanation = first_error_text(first_error or {})
            explanation += f"; {required_text(al.required_matched, required)}"
        if not al.exact:
            explanation += f" ({al.method})"
        return make_score(
            self, trajectory, float(d.passed), explanation,
            first_error=first_error,
            alignment=_alignment_rows(a),
            missing=d.missing,
            missing_optional=d.missing_optional,
            minefields_hit=d.mines,
            matched=a.matched_details(),
            exact=al.exact,
            method=al.method,
            plan=plan.source,
            extra_calls=plan.extra_calls,
        )


@register_grader("milestone_progress")
@dataclass(frozen=True)
class MilestoneProgress(_MilestoneGrader):
    """The fraction of required milestones the optimal alignment matches (0..1); 0 when a
    minefield is hit. 1.0 for an example whose milestones are all optional (unless a
    minefield is hit). Applies to examples with ``milestones``."""

    name: ClassVar[str] = "milestone_progress"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=">=", threshold=1.0,
        reference="toolgym issue 25; ToolSandbox (Apple) milestone similarity, minefields zero the score",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = self.analysis(example, trajectory)
        if a is None:
            return None
        required = sum(1 for m in a.plan.milestones if not m.optional)
        matched = a.alignment.required_matched
        if a.diagnosis.mines:
            hit = a.diagnosis.mines[0]
            where = (f"at step {hit['step']} ({a.steps[hit['step'] - 1].name})" if hit["step"] is not None
                     else "in the final state")
            return make_score(self, trajectory, 0.0,
                              f"minefield {hit['minefield']} hit {where}; {required_text(matched, required)}",
                              matched=matched, required=required, minefields_hit=a.diagnosis.mines)
        value = matched / required if required else 1.0
        return make_score(self, trajectory, value, required_text(matched, required),
                          matched=matched, required=required, missing=a.diagnosis.missing)


HARMLESS_EXTRAS: frozenset[str] = frozenset({"extra_call", "wrong_tool"})
"""The error types of an unmatched step that ``step_precision`` leaves out when the extra-call
policy allows the step: a repeated or unrelated call. An allowed call that aimed at a milestone
and missed it (wrong arguments, out of order, malformed, rejected) still counts."""


@register_grader("step_precision")
@dataclass(frozen=True)
class StepPrecision(_MilestoneGrader):
    """Tool steps matched to a milestone (or that brought a state milestone about) divided by
    the tool steps counted. Every step counts except an unmatched one that the ``extra_calls``
    policy allows and that is a harmless extra (a repeated or unrelated call: its type is in
    :data:`HARMLESS_EXTRAS`); a call that aimed at a milestone and missed it (wrong arguments,
    out of order, malformed, rejected) counts against precision even when the policy allows
    it. Applies to examples with ``milestones`` and trajectories with at least one counted
    step."""

    name: ClassVar[str] = "step_precision"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=None,
        reference="toolgym issue 25: matched tool steps / tool steps made, allowed harmless extras left out",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = self.analysis(example, trajectory)
        if a is None:
            return None
        made = len(a.steps)
        left_out = sum(
            1 for label in a.diagnosis.labels
            if label.allowed is not None and label.allowed != "brings about" and label.type in HARMLESS_EXTRAS
        )
        counted = made - left_out
        if counted == 0:
            return None
        matched = sum(1 for label in a.diagnosis.labels if label.type is None and label.milestone is not None)
        return make_score(self, trajectory, matched / counted,
                          f"{matched}/{counted} counted tool steps matched a milestone ({left_out} harmless allowed "
                          "extras left out)",
                          matched=matched, counted=counted, allowed_extra=left_out)


@register_grader("step_recall")
@dataclass(frozen=True)
class StepRecall(_MilestoneGrader):
    """Required milestones matched divided by required milestones (minefields do not change
    it; see ``milestone_progress``). Applies to examples with at least one required
    milestone."""

    name: ClassVar[str] = "step_recall"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=None,
        reference="toolgym issue 25: matched required milestones / required milestones",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        a = self.analysis(example, trajectory)
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
    :class:`toolgym.Benchmark`) by :func:`toolgym.replay.reference_replay` and the replay is
    graded by ``trajectory_match``; a reference that errors or fails is a defect of the
    benchmark, not of a model. Examples without milestones or without expected calls have
    nothing to check.

    Returns:
        One line per problem (empty when the reference passes).
    """
    if example.plan is None or example.expected_calls is None:
        return []
    from toolgym.replay import reference_replay

    replay = reference_replay(benchmark, example)
    problems = []
    if replay.status == "error":
        problems.append(f"{example.id}: replaying its expected calls fails: {replay.error}")
    for k, step in enumerate(replay.tool_steps):
        if step.error:
            problems.append(f"{example.id}: expected call {k + 1} {step.name}({step.arguments}) fails: {step.output}")
    score = TrajectoryMatch().grade(example, replay)
    if score is not None and score.value != 1.0 and not _only_words_missing(example.plan, score):
        problems.append(f"{example.id}: its expected calls do not satisfy its milestones ({score.explanation})")
    return problems


def _only_words_missing(plan: Plan, score: Score) -> bool:
    """Whether a reference replay fails only for what the agent must say: the replay says
    nothing, so a missing ``message`` or ``answer`` milestone, and one that waits for it
    through ``after``, is no defect of the expected calls."""
    first = score.details.get("first_error") or {}
    if first.get("type") != "missing":
        return False
    words = {m.id for m in plan.milestones if m.observed and all(p.kind == "message" for p in m.alternatives)}
    return all(mid in words or plan.ancestors.get(mid, frozenset()) & words for mid in score.details.get("missing", []))

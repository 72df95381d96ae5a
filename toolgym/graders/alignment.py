"""The optimal alignment of a trajectory's tool steps with an example's milestones, and the
diagnosis of every step that matched none.

Nothing here knows an environment: the inputs are a :class:`~toolgym.milestones.Plan`, the tool
steps as :class:`StepView` (name, arguments, result, whether it was executed) and the states
known after some steps.

**What is optimal.** An alignment assigns each milestone at most one tool step (a call
milestone) or one known state (a state milestone), each tool step to at most one milestone, so
that a milestone is matched only when every milestone of its ``after`` is matched strictly
earlier (a state checked after step *k* is later than step *k* and earlier than step *k + 1*;
two state milestones may share a state). Among those it maximises, in this order: matched
required milestones, matched optional milestones, then minimises the unmatched steps that the
extra-call policy forbids, then all unmatched steps. ``$from`` arguments are compared with the
result of the step the alignment gives the milestone they name.

**How.** A dynamic programme over the tool steps in order whose state is the set of matched
milestones (and, for milestones read by ``$from``, the step each was matched to); one step either
matches one milestone that is ready or is left unmatched; state milestones are matched as soon
as a known state satisfies them (matching a state milestone uses no step, so earlier is never
worse). It is exact; its size is bounded by the sets of milestones that can be matched together
(the down-sets of the ``after`` order): linear in the steps for a chain, at most 2^16 per step
for 16 unordered milestones. When one step would hold more than :data:`EXACT_LIMIT` states, the
best :data:`EXACT_LIMIT` by score are kept (a beam search) and the alignment says so
(``exact=False``, ``method``). agentevals' superset match pairs each reference call with the
first unused output call that fits (greedy first fit) and can fail a valid trajectory; this
search cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgym.matchers import MatchContext
from toolgym.milestones import CallPattern, Milestone, Plan, StatePattern

__all__ = ["EXACT_LIMIT", "Alignment", "StepLabel", "StepView", "align", "diagnose"]

EXACT_LIMIT = 1 << 16
"""States kept per step before the search becomes a beam search (2^16: every set of 16
unordered milestones without ``$from``)."""

ErrorType = Literal[
    "wrong_tool", "wrong_arguments", "missing", "out_of_order", "extra_call", "forbidden", "malformed", "rejected"
]


@dataclass(frozen=True)
class StepView:
    """A tool step as the alignment sees it.

    Attributes:
        name: The tool name the model called.
        arguments: The arguments it gave.
        result: The tool's result as JSON (its output parsed as JSON, else the text).
        executed: False for a malformed call or one the environment rejected: it matches no
            milestone.
        malformed: The call could not be parsed.
        rejected: The environment refused it before running the tool.
    """

    name: str
    arguments: Mapping[str, Any]
    result: Any = None
    executed: bool = True
    malformed: bool = False
    rejected: bool = False


@dataclass
class Alignment:
    """The optimal alignment.

    Attributes:
        step_milestone: For each tool step (0-based), the id of its milestone or ``None``.
        matched: Milestone id → ``("step", i)`` (0-based tool step) or ``("state", k)`` (the
            state after ``k`` tool steps).
        required_matched / optional_matched: Counts.
        forbidden_unmatched / unmatched: Unmatched steps that the policy forbids / all.
        exact: Whether the search was exhaustive.
        method: How it was found (``"exact search"`` or the beam note).
        states_explored: Search states created (a measure of its work).
    """

    step_milestone: list[str | None]
    matched: dict[str, tuple[str, int]]
    required_matched: int
    optional_matched: int
    forbidden_unmatched: int
    unmatched: int
    exact: bool = True
    method: str = "exact search"
    states_explored: int = 0


def step_allowed(plan: Plan, step: StepView) -> bool:
    """Whether ``step``, matched to no milestone, is allowed by the plan's ``extra_calls``:
    ``allow`` allows every call, ``allow_read_only`` the read-only tools and the calls never
    executed (malformed or rejected: they changed nothing), ``forbid`` none."""
    if plan.extra_calls == "allow":
        return True
    if plan.extra_calls == "allow_read_only":
        return not step.executed or plan.is_read_only(step.name)
    return False


def _results(plan_refs: tuple[str, ...], ref_steps: tuple[int, ...], steps: list[StepView]) -> dict[str, Any]:
    return {mid: steps[i].result for mid, i in zip(plan_refs, ref_steps, strict=True) if i >= 0}


def align(
    plan: Plan,
    steps: list[StepView],
    states: Mapping[int, Mapping[str, Any]] | None = None,
    judge: Callable[[str, Any], bool] | None = None,
    limit: int = EXACT_LIMIT,
) -> Alignment:
    """The optimal alignment of ``steps`` with ``plan`` (see the module docstring).

    Args:
        plan: The example's compiled plan.
        steps: The trajectory's tool steps, in order.
        states: The environment's state after ``k`` tool steps, for the ``k`` known (for a
            stored trajectory: only the final state, at ``len(steps)``).
        judge: Decides ``$judge`` matchers (``criterion, value -> bool``), or ``None``.
        limit: States kept per step before the search becomes a beam search.

    Returns:
        Alignment: The assignment, its counts, and whether it is exact.

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided and ``judge`` is ``None``.
    """
    states = states or {}
    ms = plan.milestones
    n, m_count = len(steps), len(ms)
    index = {m.id: i for i, m in enumerate(ms)}
    after_mask = [sum(1 << index[a] for a in m.after) for m in ms]
    refs = tuple(sorted({r for m in ms for r in m.refs}))
    ref_slot = {r: j for j, r in enumerate(refs)}
    w_f = n + 1
    w_o = w_f * (n + 1)
    w_r = w_o * (m_count + 1)
    weight = [w_o if m.optional else w_r for m in ms]
    penalty = [1 + (0 if step_allowed(plan, s) else w_f) for s in steps]

    # candidates[i]: (milestone index, its call alternatives of this step's name)
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]] = []
    for s in steps:
        row = []
        if s.executed:
            for j, m in enumerate(ms):
                calls = tuple(c for c in m.calls if c.name == s.name)
                if calls:
                    row.append((j, calls))
        candidates.append(row)
    static: dict[tuple[int, int], bool] = {}
    dynamic: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def call_fits(i: int, j: int, calls: tuple[CallPattern, ...], ref_steps: tuple[int, ...]) -> bool:
        m = ms[j]
        if not m.refs:
            key = (i, j)
            if key not in static:
                context = MatchContext(judge=judge)
                static[key] = any(c.wrong_argument(steps[i].arguments, context) is None for c in calls)
            return static[key]
        mine = tuple(ref_steps[ref_slot[r]] for r in sorted(m.refs))
        dkey = (i, j, mine)
        if dkey not in dynamic:
            context = MatchContext(results=_results(refs, ref_steps, steps), judge=judge)
            dynamic[dkey] = any(c.wrong_argument(steps[i].arguments, context) is None for c in calls)
        return dynamic[dkey]

    state_milestones = [j for j, m in enumerate(ms) if m.states]

    def close(mask: int, ref_steps: tuple[int, ...], position: int) -> tuple[int, int, tuple[int, ...]]:
        """Match every state milestone the state after ``position`` steps satisfies, repeatedly
        (one may make another ready). Returns the new mask, the value gained, the ids added."""
        if position not in states or not state_milestones:
            return mask, 0, ()
        state = states[position]
        gained, added = 0, []
        changed = True
        while changed:
            changed = False
            for j in state_milestones:
                if mask >> j & 1 or after_mask[j] & ~mask:
                    continue
                context = MatchContext(results=_results(refs, ref_steps, steps), judge=judge)
                if any(p.wrong_key(state, context) is None for p in ms[j].states):
                    mask |= 1 << j
                    gained += weight[j]
                    added.append(j)
                    changed = True
        return mask, gained, tuple(added)

    # a node: (parent node, step index or -1, milestone index or -1, state milestones added, position)
    start_refs = tuple(-1 for _ in refs)
    mask0, gain0, added0 = close(0, start_refs, 0)
    layer: dict[tuple[int, tuple[int, ...]], tuple[int, Any]] = {
        (mask0, start_refs): (gain0, (None, -1, -1, added0, 0))
    }
    explored, exact = 1, True
    for i in range(n):
        nxt: dict[tuple[int, tuple[int, ...]], tuple[int, Any]] = {}
        for (mask, ref_steps), (score, node) in layer.items():
            for j, calls in candidates[i]:
                if mask >> j & 1 or after_mask[j] & ~mask or not call_fits(i, j, calls, ref_steps):
                    continue
                new_refs = ref_steps
                if ms[j].id in ref_slot:
                    slot = ref_slot[ms[j].id]
                    new_refs = ref_steps[:slot] + (i,) + ref_steps[slot + 1:]
                new_mask, gained, added = close(mask | 1 << j, new_refs, i + 1)
                value = score + weight[j] + gained
                key = (new_mask, new_refs)
                if key not in nxt or nxt[key][0] < value:
                    nxt[key] = (value, (node, i, j, added, i + 1))
            new_mask, gained, added = close(mask, ref_steps, i + 1)
            value = score - penalty[i] + gained
            key = (new_mask, ref_steps)
            if key not in nxt or nxt[key][0] < value:
                nxt[key] = (value, (node, i, -1, added, i + 1))
        explored += len(nxt)
        if len(nxt) > limit:
            exact = False
            nxt = dict(sorted(nxt.items(), key=lambda kv: -kv[1][0])[:limit])
        layer = nxt
    _, (_, node) = max(layer.items(), key=lambda kv: kv[1][0])
    step_milestone: list[str | None] = [None] * n
    matched: dict[str, tuple[str, int]] = {}
    while node is not None:
        parent, i, j, added, position = node
        if j >= 0:
            step_milestone[i] = ms[j].id
            matched[ms[j].id] = ("step", i)
        for a in added:
            matched[ms[a].id] = ("state", position)
        node = parent
    unmatched = [i for i in range(n) if step_milestone[i] is None]
    return Alignment(
        step_milestone=step_milestone,
        matched=dict(sorted(matched.items(), key=lambda kv: index[kv[0]])),
        required_matched=sum(1 for mid in matched if not ms[index[mid]].optional),
        optional_matched=sum(1 for mid in matched if ms[index[mid]].optional),
        forbidden_unmatched=sum(1 for i in unmatched if not step_allowed(plan, steps[i])),
        unmatched=len(unmatched),
        exact=exact,
        method="exact search" if exact else f"beam search keeping the best {limit} states per step (not exact)",
        states_explored=explored,
    )


@dataclass
class StepLabel:
    """Why a tool step matched its milestone, or why it matched none.

    Attributes:
        step: 1-based tool step index.
        milestone: The milestone it matched, or the one the diagnosis names.
        type: ``None`` for a matched step; else ``wrong_tool``, ``wrong_arguments``,
            ``out_of_order``, ``extra_call``, ``forbidden``, ``malformed`` or ``rejected``.
        error: Whether the step counts against the trajectory (a minefield, or an unmatched
            step the extra-call policy forbids).
        allowed: For an unmatched step the policy allows: ``"read-only"``, ``"allowed"`` or
            ``"not executed"``; else ``None``.
        argument: The first argument that did not match (``wrong_arguments``).
        expected: What the named milestone expected (for views).
        note: One short human sentence.
    """

    step: int
    milestone: str | None = None
    type: ErrorType | None = None
    error: bool = False
    allowed: str | None = None
    argument: str | None = None
    expected: Any = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None and v != ""}


@dataclass
class Diagnosis:
    """The alignment explained: a label per tool step, the milestones never reached, the
    minefields hit, and the first error (``None`` when the trajectory passes)."""

    labels: list[StepLabel]
    missing: list[str]
    missing_optional: list[str]
    mines: list[dict[str, Any]] = field(default_factory=list)
    first_error: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return self.first_error is None


def _mine_hits(plan: Plan, steps: list[StepView], final_state: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = []
    for i, s in enumerate(steps):
        if not s.executed:
            continue
        for k, p in enumerate(plan.minefields):
            if isinstance(p, CallPattern) and p.name == s.name and p.wrong_argument(s.arguments) is None:
                hits.append({"step": i + 1, "minefield": k, "expected": p.expected()})
                break
    if final_state is not None:
        for k, p in enumerate(plan.minefields):
            if isinstance(p, StatePattern) and p.wrong_key(final_state) is None:
                hits.append({"step": None, "minefield": k, "expected": p.expected()})
    return hits


def diagnose(
    plan: Plan,
    steps: list[StepView],
    alignment: Alignment,
    final_state: Mapping[str, Any] | None = None,
    judge: Callable[[str, Any], bool] | None = None,
) -> Diagnosis:
    """Label every tool step and find the first error.

    A step matched to no milestone is, in this order of checks: ``malformed`` or ``rejected``
    (never executed); ``out_of_order`` when its call fits a milestone whose ``after`` milestones
    were not all matched before it; ``extra_call`` when it repeats a call that matched a
    milestone; ``wrong_arguments`` when its tool is a call of a milestone it could have matched
    (the first argument that does not fit is named); ``wrong_tool`` when a required milestone
    that was ready then is never matched; else ``extra_call``. A step matching a minefield is
    ``forbidden`` whatever it matched.

    The first error is the earliest step that counts against the trajectory (a minefield, an
    unmatched step the policy forbids) or that names a required milestone the alignment misses;
    else ``missing`` (step ``None``) for the first missing required milestone; else
    ``forbidden`` (step ``None``) for a minefield state in the final state; else ``None``.
    """
    ms = plan.milestones
    by_id = {m.id: m for m in ms}
    results = {mid: steps[pos].result for mid, (kind, pos) in alignment.matched.items() if kind == "step"}
    context = MatchContext(results=results, judge=judge)

    def time_of(mid: str) -> float | None:
        where = alignment.matched.get(mid)
        if where is None:
            return None
        return where[1] if where[0] == "step" else where[1] - 0.5

    missing = [m.id for m in ms if m.id not in alignment.matched and not m.optional]
    missing_optional = [m.id for m in ms if m.id not in alignment.matched and m.optional]
    mines = _mine_hits(plan, steps, final_state)
    mine_steps = {h["step"]: h for h in mines if h["step"] is not None}
    labels: list[StepLabel] = []
    for i, s in enumerate(steps):
        label = StepLabel(step=i + 1)
        mid = alignment.step_milestone[i]
        if mid is not None:
            label.milestone = mid
            label.note = f"matched {mid}"
        elif s.malformed or s.rejected or not s.executed:
            label.type = "malformed" if s.malformed else "rejected"
            label.note = "malformed call, never executed" if s.malformed else "rejected by the environment, never executed"
        else:
            _explain_unmatched(label, s, i, ms, by_id, alignment, context, time_of, missing)
        if mid is None:
            allowed = step_allowed(plan, s)
            label.error = not allowed
            if allowed:
                label.allowed = (
                    "not executed" if not s.executed else "read-only" if plan.is_read_only(s.name) else "allowed"
                )
        if i + 1 in mine_steps:
            label.type, label.error = "forbidden", True
            label.expected = mine_steps[i + 1]["expected"]
            label.note = f"minefield {mine_steps[i + 1]['minefield']} hit"
        labels.append(label)
    first: dict[str, Any] | None = None
    for label in labels:
        names_missing = label.milestone in missing and label.type is not None
        if label.error or names_missing:
            first = {"step": label.step, "type": label.type, "milestone": label.milestone, "argument": label.argument}
            break
    if first is None and missing:
        first = {"step": None, "type": "missing", "milestone": missing[0], "argument": None}
    if first is None and any(h["step"] is None for h in mines):
        first = {"step": None, "type": "forbidden", "milestone": None, "argument": None}
    return Diagnosis(labels, missing, missing_optional, mines, first)


def _explain_unmatched(
    label: StepLabel,
    s: StepView,
    i: int,
    ms: tuple[Milestone, ...],
    by_id: Mapping[str, Milestone],
    alignment: Alignment,
    context: MatchContext,
    time_of: Callable[[str], float | None],
    missing: list[str],
) -> None:
    named = [m for m in ms if any(c.name == s.name for c in m.calls)]
    fits = [m for m in named if any(c.name == s.name and c.wrong_argument(s.arguments, context) is None for c in m.calls)]

    def ready(m: Milestone) -> bool:
        return all((t := time_of(a)) is not None and t < i for a in m.after)

    for m in fits:
        if not ready(m) and alignment.matched.get(m.id) != ("step", i):
            label.type, label.milestone = "out_of_order", m.id
            waiting = [a for a in m.after if not ((t := time_of(a)) is not None and t < i)]
            label.note = f"fits {m.id}, but {', '.join(waiting)} not matched before it"
            label.expected = {"after": list(m.after)}
            return
    for m in fits:
        if m.id in alignment.matched:
            label.type, label.milestone = "extra_call", m.id
            label.note = f"repeats {m.id} (matched at another step)"
            return
    if named:
        # the milestone it most likely meant: a missing one first, then one ready at that point
        named.sort(key=lambda m: (m.id not in missing, not ready(m), m.index))
        m = named[0]
        call = next(c for c in m.calls if c.name == s.name)
        argument = call.wrong_argument(s.arguments, context)
        label.type, label.milestone, label.argument = "wrong_arguments", m.id, argument or None
        label.expected = call.expected()
        label.note = f"argument {argument!r} does not match {m.id}" if argument else f"arguments do not match {m.id}"
        return
    for mid in missing:
        m = by_id[mid]
        if ready(m):
            label.type, label.milestone = "wrong_tool", mid
            label.expected = m.calls[0].expected() if m.calls else m.states[0].expected()
            label.note = f"expected {mid}"
            return
    label.type = "extra_call"
    label.note = "matches no milestone"

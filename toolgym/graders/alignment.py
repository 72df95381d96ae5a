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
from typing import Any, Literal, NamedTuple

from toolgym.matchers import MatchContext, json_key
from toolgym.milestones import CallPattern, Milestone, Plan, StatePattern

__all__ = ["EXACT_LIMIT", "Alignment", "StepLabel", "StepView", "align", "diagnose"]

EXACT_LIMIT = 1 << 16
"""States kept per step before the search becomes a beam search (2^16: every set of 16
unordered milestones without ``$from``)."""

ErrorType = Literal[
    "wrong_tool", "wrong_arguments", "missing", "out_of_order", "extra_call", "forbidden", "malformed", "rejected"
]


class StepView(NamedTuple):
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
    candidates: list[list[int]] = field(default_factory=list)
    """For each step, the milestones it may match by name and arguments (those reading
    ``$from`` by name only)."""
    allowed: list[bool] = field(default_factory=list)
    """For each step, whether the policy allows it unmatched (:func:`step_allowed`)."""


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

    The problem splits into independent parts: milestones joined by ``after`` or ``$from``, or
    able to match the same step, are solved together, with only the steps they can match. A
    part that is a plain chain (each milestone after the one before, no ``$from``, no state) is
    solved by a sparse dynamic programme linear in its (step, milestone) pairs; any other part by
    the search over matched sets.

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
    w_f = n + 1
    w_o = w_f * (n + 1)
    w_r = w_o * (m_count + 1)
    weight = [w_o if m.optional else w_r for m in ms]
    allowed_names: dict[str, bool] = {}
    allowed = []
    for s in steps:
        if not s.executed or plan.extra_calls != "allow_read_only":
            allowed.append(step_allowed(plan, s))
        else:
            if s.name not in allowed_names:
                allowed_names[s.name] = step_allowed(plan, s)
            allowed.append(allowed_names[s.name])
    penalty = [1 if ok else 1 + w_f for ok in allowed]
    exact_index, by_name = plan.call_index
    context = MatchContext(judge=judge)
    # candidates[i]: the milestones step i may match (the name fits; the arguments fit, unless
    # they read $from and are checked during the search)
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]] = []
    for s in steps:
        row: list[tuple[int, tuple[CallPattern, ...]]] = []
        if s.executed:
            if exact_index:
                try:
                    row.extend(exact_index.get((s.name, json_key(s.arguments)), ()))
                except TypeError:  # arguments that are not JSON match no plain value
                    pass
            for j, calls in by_name.get(s.name, ()):
                if ms[j].refs or calls[0].wrong_argument(s.arguments, context) is None:
                    row.append((j, calls))
            if len(row) > 1:
                merged: dict[int, tuple[CallPattern, ...]] = {}
                for j, calls in row:
                    merged[j] = merged.get(j, ()) + calls
                row = sorted(merged.items())
        candidates.append(row)

    parent = list(range(m_count))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for j, m in enumerate(ms):
        for a in (*m.after, *m.refs):
            union(j, index[a])
    for row in candidates:
        for j, _ in row[1:]:
            union(row[0][0], j)
    groups: dict[int, list[int]] = {}
    for j in range(m_count):
        groups.setdefault(find(j), []).append(j)
    group_steps: dict[int, list[int]] = {}
    for i, row in enumerate(candidates):
        if row:
            group_steps.setdefault(find(row[0][0]), []).append(i)

    step_milestone: list[str | None] = [None] * n
    matched: dict[str, tuple[str, int]] = {}
    exact, explored = True, 0
    for root, members in groups.items():
        part_steps = group_steps.get(root, [])
        if _is_chain(ms, members, index):
            found, work = _chain(ms, members, part_steps, candidates, weight, penalty)
            ok = True
        else:
            found, work, ok = _search(ms, members, part_steps, candidates, weight, penalty, steps, states,
                                      index, judge, limit)
        exact &= ok
        explored += work
        for mid, where in found.items():
            matched[mid] = where
            if where[0] == "step":
                step_milestone[where[1]] = mid
    unmatched = [i for i in range(n) if step_milestone[i] is None]
    return Alignment(
        step_milestone=step_milestone,
        matched=dict(sorted(matched.items(), key=lambda kv: index[kv[0]])),
        required_matched=sum(1 for mid in matched if not ms[index[mid]].optional),
        optional_matched=sum(1 for mid in matched if ms[index[mid]].optional),
        forbidden_unmatched=sum(1 for i in unmatched if not allowed[i]),
        unmatched=len(unmatched),
        exact=exact,
        method="exact search" if exact else f"beam search keeping the best {limit} states per step (not exact)",
        states_explored=explored,
        candidates=[[j for j, _ in row] for row in candidates],
        allowed=allowed,
    )


def _is_chain(ms: tuple[Milestone, ...], members: list[int], index: Mapping[str, int]) -> bool:
    """Whether the part is a plain chain in the order written: each milestone after exactly
    the one before it, no ``$from``, no state alternative."""
    for k, j in enumerate(members):
        m = ms[j]
        if m.refs or m.states:
            return False
        if k == 0 and m.after:
            return False
        if k > 0 and (len(m.after) != 1 or index[m.after[0]] != members[k - 1]):
            return False
    return True


def _chain(
    ms: tuple[Milestone, ...],
    members: list[int],
    part_steps: list[int],
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]],
    weight: list[int],
    penalty: list[int],
) -> tuple[dict[str, tuple[str, int]], int]:
    """A chain c_0 < c_1 < ... solved as a weighted longest common subsequence over the
    (step, milestone) pairs that fit: ``best(k, i)`` (c_k matched at step i, c_0..c_k matched)
    is ``weight(c_k) - P(i) + max over i' < i of (best(k-1, i') + P(i'+1))``, with ``P`` the
    penalties of the part's steps before a position, kept as a running maximum per ``k``;
    linear in the pairs."""
    position = {j: k for k, j in enumerate(members)}
    count = len(members)
    neg = None
    run: list[Any] = [neg] * count  # run[k]: (best(k, i') + P(i'+1), node)
    prefix = 0  # P(i): penalties of the part's steps before step i
    best_total, best_node = 0, None  # nothing matched: every part step unmatched (added below)
    pairs = 0
    for i in part_steps:
        updates = []
        for j, _ in candidates[i]:
            k = position[j]
            pairs += 1
            if k == 0:
                value, node = weight[j] - prefix, (None, i, j)
            elif run[k - 1] is not None:
                value, node = weight[j] - prefix + run[k - 1][0], (run[k - 1][1], i, j)
            else:
                continue
            updates.append((k, value, node))
        prefix += penalty[i]
        for k, value, node in updates:
            key = value + prefix
            if run[k] is None or run[k][0] < key:
                run[k] = (key, node)
            if key > best_total:
                best_total, best_node = key, node
    found: dict[str, tuple[str, int]] = {}
    node = best_node
    while node is not None:
        parent, i, j = node
        found[ms[j].id] = ("step", i)
        node = parent
    return found, pairs


def _search(
    ms: tuple[Milestone, ...],
    members: list[int],
    part_steps: list[int],
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]],
    weight: list[int],
    penalty: list[int],
    steps: list[StepView],
    states: Mapping[int, Mapping[str, Any]],
    index: Mapping[str, int],
    judge: Callable[[str, Any], bool] | None,
    limit: int,
) -> tuple[dict[str, tuple[str, int]], int, bool]:
    """The search over matched sets for one part (see the module docstring). Returns the
    matches, the states created and whether it stayed exact."""
    local = {j: b for b, j in enumerate(members)}
    after_mask = {j: sum(1 << local[index[a]] for a in ms[j].after) for j in members}
    refs = tuple(sorted({r for j in members for r in ms[j].refs}))
    ref_slot = {r: k for k, r in enumerate(refs)}
    own_refs = {j: tuple(ref_slot[r] for r in sorted(ms[j].refs)) for j in members}
    state_milestones = [j for j in members if ms[j].states]
    dynamic: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def results(ref_steps: tuple[int, ...]) -> dict[str, Any]:
        return {mid: steps[i].result for mid, i in zip(refs, ref_steps, strict=True) if i >= 0}

    def call_fits(i: int, j: int, calls: tuple[CallPattern, ...], ref_steps: tuple[int, ...]) -> bool:
        if not ms[j].refs:
            return True  # checked when the candidates were listed
        mine = tuple(ref_steps[k] for k in own_refs[j])
        key = (i, j, mine)
        if key not in dynamic:
            context = MatchContext(results=results(ref_steps), judge=judge)
            dynamic[key] = any(c.wrong_argument(steps[i].arguments, context) is None for c in calls)
        return dynamic[key]

    def close(mask: int, ref_steps: tuple[int, ...], position: int) -> tuple[int, int, tuple[int, ...]]:
        """Match every state milestone the state after ``position`` steps satisfies, repeatedly
        (one may make another ready). Returns the new mask, the value gained, the ones added."""
        state = states[position]
        gained, added = 0, []
        changed = True
        while changed:
            changed = False
            for j in state_milestones:
                bit = 1 << local[j]
                if mask & bit or after_mask[j] & ~mask:
                    continue
                context = MatchContext(results=results(ref_steps), judge=judge)
                if any(p.wrong_key(state, context) is None for p in ms[j].states):
                    mask |= bit
                    gained += weight[j]
                    added.append(j)
                    changed = True
        return mask, gained, tuple(added)

    # events in time order: step i at 2i + 1, the state after k steps at 2k
    events = [(2 * i + 1, i) for i in part_steps]
    if state_milestones:
        events += [(2 * k, -1 - k) for k in states]
    events.sort()
    # a node: (parent node, step index or -1, milestone or -1, state milestones added, position)
    start = tuple(-1 for _ in refs)
    layer: dict[tuple[int, tuple[int, ...]], tuple[int, Any]] = {(0, start): (0, None)}
    explored, exact = 1, True
    for _, event in events:
        nxt: dict[tuple[int, tuple[int, ...]], tuple[int, Any]] = {}
        if event < 0:  # a known state
            position = -1 - event
            for (mask, ref_steps), (score, node) in layer.items():
                new_mask, gained, added = close(mask, ref_steps, position)
                new_node = (node, -1, -1, added, position) if added else node
                key = (new_mask, ref_steps)
                if key not in nxt or nxt[key][0] < score + gained:
                    nxt[key] = (score + gained, new_node)
            layer = nxt
            continue
        i = event
        for (mask, ref_steps), (score, node) in layer.items():
            for j, calls in candidates[i]:
                bit = 1 << local[j]
                if mask & bit or after_mask[j] & ~mask or not call_fits(i, j, calls, ref_steps):
                    continue
                new_refs = ref_steps
                if ms[j].id in ref_slot:
                    slot = ref_slot[ms[j].id]
                    new_refs = ref_steps[:slot] + (i,) + ref_steps[slot + 1:]
                value = score + weight[j]
                key = (mask | bit, new_refs)
                if key not in nxt or nxt[key][0] < value:
                    nxt[key] = (value, (node, i, j, (), -1))
            value = score - penalty[i]
            key = (mask, ref_steps)
            if key not in nxt or nxt[key][0] < value:
                nxt[key] = (value, node)
        explored += len(nxt)
        if len(nxt) > limit:
            exact = False
            nxt = dict(sorted(nxt.items(), key=lambda kv: -kv[1][0])[:limit])
        layer = nxt
    _, (_, node) = max(layer.items(), key=lambda kv: kv[1][0])
    found: dict[str, tuple[str, int]] = {}
    while node is not None:
        parent, i, j, added, position = node
        if j >= 0:
            found[ms[j].id] = ("step", i)
        for a in added:
            found[ms[a].id] = ("state", position)
        node = parent
    return found, explored, exact


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


def _mine_hits(
    plan: Plan,
    steps: list[StepView],
    final_state: Mapping[str, Any] | None,
    states: Mapping[int, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = []
    for i, s in enumerate(steps):
        if not s.executed:
            continue
        for k, p in enumerate(plan.minefields):
            if isinstance(p, CallPattern) and p.name == s.name and p.wrong_argument(s.arguments) is None:
                hits.append({"step": i + 1, "minefield": k, "expected": p.expected()})
                break
    recorded = sorted(k for k in (states or {}) if k > 0)
    for k, p in enumerate(plan.minefields):
        if not isinstance(p, StatePattern):
            continue
        # the first state after a step that holds it names that step; only a final state: no step
        at = next((j for j in recorded if p.wrong_key(states[j]) is None), None) if states else None
        if at is not None:
            hits.append({"step": at, "minefield": k, "expected": p.expected()})
        elif final_state is not None and p.wrong_key(final_state) is None:
            hits.append({"step": None, "minefield": k, "expected": p.expected()})
    return hits


def diagnose(
    plan: Plan,
    steps: list[StepView],
    alignment: Alignment,
    final_state: Mapping[str, Any] | None = None,
    judge: Callable[[str, Any], bool] | None = None,
    states: Mapping[int, Mapping[str, Any]] | None = None,
) -> Diagnosis:
    """Label every tool step and find the first error.

    ``states`` are the recorded states after ``k`` tool steps (``k`` >= 1, as for
    :func:`align`): a state minefield is checked against each of them, and the first step
    after which one holds is labelled ``forbidden``; without them (or when none holds) only
    ``final_state`` is checked and a hit names no step.

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
    mines = _mine_hits(plan, steps, final_state, states)
    mine_steps: dict[int, dict[str, Any]] = {}
    for h in mines:
        if h["step"] is not None:
            mine_steps.setdefault(h["step"], h)
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
            _explain_unmatched(label, s, i, ms, plan.names, by_id, alignment, context, time_of, missing)
        if mid is None:
            allowed = alignment.allowed[i] if alignment.allowed else step_allowed(plan, s)
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
    absent = set(missing)
    for label in labels:
        names_missing = label.type is not None and label.milestone in absent
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
    names: Mapping[str, list[int]],
    by_id: Mapping[str, Milestone],
    alignment: Alignment,
    context: MatchContext,
    time_of: Callable[[str], float | None],
    missing: list[str],
) -> None:
    named = [ms[j] for j in names.get(s.name, ())]

    def fits_call(m: Milestone) -> bool:
        return any(c.name == s.name and c.wrong_argument(s.arguments, context) is None for c in m.calls)

    if alignment.candidates:  # the search's candidates: arguments already checked, but for $from
        fits = [ms[j] for j in alignment.candidates[i] if not ms[j].refs or fits_call(ms[j])]
    else:
        fits = [m for m in named if fits_call(m)]

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
        absent = set(missing)
        pool = [m for m in named if m.id in absent] or named
        m = next((m for m in pool if ready(m)), pool[0])
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

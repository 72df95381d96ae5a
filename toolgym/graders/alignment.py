"""The optimal alignment of a trajectory's tool steps with an example's milestones, and the
diagnosis of every step that matched none.

Nothing here knows an environment: the inputs are a :class:`~toolgym.milestones.Plan`, the tool
steps as :class:`StepView` (name, arguments, result, whether it was executed), the states
known after some steps and, for ``message``, ``answer`` and ``result`` milestones, what was
observed after some steps (:class:`Observation`: the texts the agent said, the final answer,
the result of the step just made). A milestone matched by what is observed (a state, a text,
a result) is matched as a state milestone is: after the step it follows, using no step.

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

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from toolgym.matchers import EMPTY_CONTEXT, MatchContext
from toolgym.milestones import CallPattern, Milestone, Pattern, Plan, StatePattern, call_key

__all__ = ["EXACT_LIMIT", "Alignment", "Observation", "StepLabel", "StepView", "align", "diagnose"]

_EITHER_LIMIT = 8
"""Milestones matched by a step or by what is observed that one position may leave for later,
all subsets tried (beyond it the search is no longer exact, and says so)."""

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


class Observation(NamedTuple):
    """What is observed after ``k`` tool steps, beside the state: what ``message``, ``answer``
    and ``result`` milestones and ``{"$from": {"tool": ...}}`` read.

    Attributes:
        texts: The texts the agent said after ``k`` tool steps and before the next one (the
            text of each model step there, and, after the last tool step, the final answer).
        answer: The final answer (only after the last tool step), else ``None``.
        result: ``(tool name, result)`` of tool step ``k`` (1-based) when it ran without error
            (the result as :class:`StepView` holds it), else ``None``.
    """

    texts: tuple[str, ...] = ()
    answer: str | None = None
    result: tuple[str, Any] | None = None


def observe(
    pattern: Pattern,
    state: Mapping[str, Any] | None,
    seen: Observation | None,
    context: MatchContext = EMPTY_CONTEXT,
) -> bool:
    """Whether an observed alternative (a state, a message, a result) holds at one point, given
    the state there (``None``: not known) and what was observed there (``None``: nothing)."""
    kind = pattern.kind
    if kind == "state":
        return state is not None and pattern.wrong_key(state, context) is None  # type: ignore[union-attr]
    if seen is None:
        return False
    if kind == "message":
        if pattern.final:  # type: ignore[union-attr]
            return seen.answer is not None and pattern.match((seen.answer,), context)  # type: ignore[union-attr, call-arg]
        return pattern.match(seen.texts, context)  # type: ignore[union-attr, call-arg]
    return seen.result is not None and pattern.match(seen.result[0], seen.result[1], context)  # type: ignore[union-attr, call-arg]


def seen_results(
    observed: Mapping[int, Observation] | None,
    seen: Sequence[int] | None,
    judge: Callable[[str, Any], bool] | None = None,
) -> Callable[[int], MatchContext]:
    """For tool step ``i`` (0-based), the context whose ``tool_results`` hold the results of
    the tool steps the model had seen when it made that call: tool steps ``1..seen[i]``
    (1-based; ``seen`` default: every step before ``i``), those that ran without error."""
    produced = sorted((k, o.result) for k, o in (observed or {}).items() if o.result is not None)
    cache: dict[int, MatchContext] = {}

    def context(i: int) -> MatchContext:
        upto = seen[i] if seen is not None else i
        found = cache.get(upto)
        if found is None:
            by_tool: dict[str, list[Any]] = {}
            for k, (name, value) in produced:
                if k > upto:
                    break
                by_tool.setdefault(name, []).append(value)
            found = cache[upto] = MatchContext(judge=judge, tool_results=by_tool)
        return found

    return context


@dataclass
class Alignment:
    """The optimal alignment.

    Attributes:
        step_milestone: For each tool step (0-based), the id of its milestone or ``None``.
        matched: Milestone id → ``("step", i)`` (0-based tool step), or ``("state", k)``,
            ``("message", k)``, ``("answer", k)``, ``("result", k)``: what was observed after
            ``k`` tool steps matched it.
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


class _Layout:
    """What the alignment reads from a plan on every trajectory, worked out once per plan:
    the milestones' positions, the parts they form through ``after`` and ``$from``, and the
    candidate rows of exact plain-valued calls with their alternatives merged."""

    __slots__ = ("index", "optional", "required", "root", "groups", "simple", "exact", "by_name")

    def __init__(self, plan: Plan) -> None:
        ms = plan.milestones
        self.index = index = {m.id: i for i, m in enumerate(ms)}
        # tuples of plain values, which the garbage collector stops tracking (a layout lives
        # as long as its plan)
        self.optional = optional = tuple([m.optional for m in ms])
        self.required = len(ms) - sum(optional)
        joined = [j for j, m in enumerate(ms) if m.after or m.refs]
        if joined:
            parent = list(range(len(ms)))
            for j in joined:
                m = ms[j]
                for a in (*m.after, *m.refs):
                    _union(parent, j, index[a])
            self.root = tuple([_find(parent, j) for j in range(len(ms))])
            groups: dict[int, list[int]] = {}
            for j, r in enumerate(self.root):
                found = groups.get(r)
                if found is None:
                    groups[r] = [j]
                else:
                    found.append(j)
            self.groups = {r: tuple(members) for r, members in groups.items()}
        else:  # no milestone joined to another: each its own part
            self.root = tuple(range(len(ms)))
            self.groups = {j: (j,) for j in range(len(ms))}
        # a milestone that can be solved alone when no step may match another one with it
        self.simple = tuple([not (m.after or m.refs or m.observed) for m in ms])
        exact, self.by_name = plan.call_index
        self.exact = {key: row if len(row) < 2 else _merged(row) for key, row in exact.items()}


def _merged(row: list[tuple[int, tuple[CallPattern, ...]]]) -> list[tuple[int, tuple[CallPattern, ...]]]:
    """A candidate row with each milestone once (its fitting alternatives joined), by index."""
    if len(row) < 2:
        return row
    merged: dict[int, tuple[CallPattern, ...]] = {}
    for j, calls in row:
        merged[j] = merged.get(j, ()) + calls
    return sorted(merged.items())


def _find(parent: list[int], x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _union(parent: list[int], a: int, b: int) -> None:
    ra, rb = _find(parent, a), _find(parent, b)
    if ra != rb:
        parent[max(ra, rb)] = min(ra, rb)


def _layout(plan: Plan) -> _Layout:
    """The plan's layout, kept on the plan (a plan is never changed once built)."""
    found = plan.__dict__.get("_alignment_layout")
    if found is None:
        found = plan.__dict__["_alignment_layout"] = _Layout(plan)
    return found


_NO_CANDIDATES: list[tuple[int, tuple[CallPattern, ...]]] = []

_PLAIN = frozenset({str, int, float, type(None)})
"""The argument values :func:`~toolgym.milestones.call_key` keeps as they are (its fast path,
repeated inline where every tool step is looked up)."""


def align(
    plan: Plan,
    steps: list[StepView],
    states: Mapping[int, Mapping[str, Any]] | None = None,
    judge: Callable[[str, Any], bool] | None = None,
    limit: int = EXACT_LIMIT,
    observed: Mapping[int, Observation] | None = None,
    seen: Sequence[int] | None = None,
) -> Alignment:
    """The optimal alignment of ``steps`` with ``plan`` (see the module docstring).

    The problem splits into independent parts: milestones joined by ``after`` or ``$from``, or
    able to match the same step, are solved together, with only the steps they can match. A
    part that is a plain chain (each milestone after the one before, no ``$from``, no state) is
    solved by a sparse dynamic programme linear in its (step, milestone) pairs (a milestone
    alone takes the best of its steps); any other part by the search over matched sets.

    Args:
        plan: The example's compiled plan.
        steps: The trajectory's tool steps, in order.
        states: The environment's state after ``k`` tool steps, for the ``k`` known (for a
            stored trajectory: only the final state, at ``len(steps)``).
        judge: Decides ``$judge`` matchers (``criterion, value -> bool``), or ``None``.
        limit: States kept per step before the search becomes a beam search.
        observed: What was observed after ``k`` tool steps (texts, the final answer, the
            result of step ``k``), for the ``k`` where something was; read by ``message``,
            ``answer`` and ``result`` milestones and ``{"$from": {"tool": ...}}``.
        seen: For each tool step, how many tool steps' results the model had seen when it
            made the call (default: all the steps before it); bounds what
            ``{"$from": {"tool": ...}}`` may read.

    Returns:
        Alignment: The assignment, its counts, and whether it is exact.

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided and ``judge`` is ``None``.
    """
    states = states or {}
    layout = _layout(plan)
    ms = plan.milestones
    n, m_count = len(steps), len(ms)
    index = layout.index
    w_f = n + 1
    w_o = w_f * (n + 1)
    w_r = w_o * (m_count + 1)
    weight = [w_o if optional else w_r for optional in layout.optional]
    policy = plan.extra_calls
    if policy == "allow":
        allowed = [True] * n
    elif policy == "forbid":
        allowed = [False] * n
    else:
        allowed_names: dict[str, bool] = {}
        allowed = []
        for s in steps:
            if not s.executed:
                allowed.append(True)
                continue
            ok = allowed_names.get(s.name)
            if ok is None:
                ok = allowed_names[s.name] = plan.is_read_only(s.name)
            allowed.append(ok)
    penalty = [1 if ok else 1 + w_f for ok in allowed]
    exact_index, by_name = layout.exact, layout.by_name
    context = MatchContext(judge=judge) if by_name else EMPTY_CONTEXT
    tool_context = seen_results(observed, seen, judge) if plan.reads_tools else None
    # candidates[i]: the milestones step i may match (the name fits; the arguments fit, unless
    # they read $from and are checked during the search)
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]] = []
    shared = False  # whether some step may match two milestones (which joins their parts)
    for i_s, s in enumerate(steps):
        row = _NO_CANDIDATES
        if s.executed:
            if exact_index:
                arguments = s.arguments
                for v in arguments.values():
                    if type(v) not in _PLAIN:
                        try:
                            row = exact_index.get((s.name, call_key(arguments)), _NO_CANDIDATES)
                        except TypeError:  # arguments that are not JSON match no plain value
                            pass
                        break
                else:  # plain values only: call_key's own fast path
                    row = exact_index.get((s.name, tuple(sorted(arguments.items()))), _NO_CANDIDATES)
            named = by_name.get(s.name) if by_name else None
            if named:
                if tool_context is not None:  # what this call could have read
                    context = tool_context(i_s)
                row = list(row)
                for j, calls in named:
                    if ms[j].refs or calls[0].wrong_argument(s.arguments, context) is None:
                        row.append((j, calls))
                row = _merged(row)
            if len(row) > 1:
                shared = True
        candidates.append(row)

    root = layout.root
    groups = layout.groups
    if shared:
        parent = list(root)
        for row in candidates:
            if len(row) > 1:
                first = row[0][0]
                for j, _ in row[1:]:
                    _union(parent, first, j)
        root = tuple(_find(parent, j) for j in range(m_count))
        regrouped: dict[int, list[int]] = {}
        for j, r in enumerate(root):
            regrouped.setdefault(r, []).append(j)
        groups = regrouped  # type: ignore[assignment]
    group_steps: dict[int, list[int]] = {}
    for i, row in enumerate(candidates):
        if row:
            r = root[row[0][0]]
            found_steps = group_steps.get(r)
            if found_steps is None:
                group_steps[r] = [i]
            else:
                found_steps.append(i)

    step_milestone: list[str | None] = [None] * n
    matched: dict[str, tuple[str, int]] = {}
    exact, explored = True, 0
    for r, members in groups.items():
        part_steps = group_steps.get(r)
        if not part_steps and not any(ms[j].observed for j in members):
            # nothing can be matched (a state milestone may be matched by a state); the search
            # would have counted its start state
            if not (len(members) == 1 and layout.simple[members[0]]) and not _is_chain(ms, members, index):
                explored += 1
            continue
        if len(members) == 1 and layout.simple[members[0]]:
            # one milestone alone: its first step among those costing most to leave unmatched
            j = members[0]
            best = part_steps[0]  # type: ignore[index]
            for i in part_steps:  # type: ignore[union-attr]
                if penalty[i] > penalty[best]:
                    best = i
            mid = ms[j].id
            matched[mid] = ("step", best)
            step_milestone[best] = mid
            explored += len(part_steps)  # type: ignore[arg-type]
            continue
        if _is_chain(ms, members, index):
            found, work = _chain(ms, members, part_steps or [], candidates, weight, penalty)
            ok = True
        else:
            found, work, ok = _search(ms, members, part_steps or [], candidates, weight, penalty, steps, states,
                                      index, judge, limit, observed or {}, tool_context)
        exact &= ok
        explored += work
        for mid, where in found.items():
            matched[mid] = where
            if where[0] == "step":
                step_milestone[where[1]] = mid
    optional_matched = sum(1 for mid in matched if layout.optional[index[mid]])
    unmatched = forbidden = 0
    for i in range(n):
        if step_milestone[i] is None:
            unmatched += 1
            if not allowed[i]:
                forbidden += 1
    return Alignment(
        step_milestone=step_milestone,
        matched=dict(sorted(matched.items(), key=lambda kv: index[kv[0]])) if len(matched) > 1 else matched,
        required_matched=len(matched) - optional_matched,
        optional_matched=optional_matched,
        forbidden_unmatched=forbidden,
        unmatched=unmatched,
        exact=exact,
        method="exact search" if exact else f"beam search keeping the best {limit} states per step (not exact)",
        states_explored=explored,
        candidates=[[j for j, _ in row] for row in candidates],
        allowed=allowed,
    )


def _is_chain(ms: tuple[Milestone, ...], members: Sequence[int], index: Mapping[str, int]) -> bool:
    """Whether the part is a plain chain in the order written: each milestone after exactly
    the one before it, no ``$from``, no state alternative."""
    for k, j in enumerate(members):
        m = ms[j]
        if m.refs or m.observed:
            return False
        if k == 0 and m.after:
            return False
        if k > 0 and (len(m.after) != 1 or index[m.after[0]] != members[k - 1]):
            return False
    return True


def _chain(
    ms: tuple[Milestone, ...],
    members: Sequence[int],
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
    members: Sequence[int],
    part_steps: list[int],
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]],
    weight: list[int],
    penalty: list[int],
    steps: list[StepView],
    states: Mapping[int, Mapping[str, Any]],
    index: Mapping[str, int],
    judge: Callable[[str, Any], bool] | None,
    limit: int,
    observed: Mapping[int, Observation] | None = None,
    tool_context: Callable[[int], MatchContext] | None = None,
) -> tuple[dict[str, tuple[str, int]], int, bool]:
    """The search over matched sets for one part (see the module docstring). Returns the
    matches, the states created and whether it stayed exact."""
    local = {j: b for b, j in enumerate(members)}
    after_mask = {j: sum(1 << local[index[a]] for a in ms[j].after) for j in members}
    refs = tuple(sorted({r for j in members for r in ms[j].refs}))
    ref_slot = {r: k for k, r in enumerate(refs)}
    own_refs = {j: tuple(ref_slot[r] for r in sorted(ms[j].refs)) for j in members}
    state_milestones = [j for j in members if ms[j].observed]
    observed = observed or {}
    dynamic: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def results(ref_steps: tuple[int, ...]) -> dict[str, Any]:
        return {mid: steps[i].result for mid, i in zip(refs, ref_steps, strict=True) if i >= 0}

    def call_fits(i: int, j: int, calls: tuple[CallPattern, ...], ref_steps: tuple[int, ...]) -> bool:
        if not ms[j].refs:
            return True  # checked when the candidates were listed
        mine = tuple(ref_steps[k] for k in own_refs[j])
        key = (i, j, mine)
        if key not in dynamic:
            context = MatchContext(results=results(ref_steps), judge=judge,
                                   tool_results=tool_context(i).tool_results if tool_context else {})
            dynamic[key] = any(c.wrong_argument(steps[i].arguments, context) is None for c in calls)
        return dynamic[key]

    def close(
        mask: int, ref_steps: tuple[int, ...], position: int, skip: frozenset[int] = frozenset()
    ) -> tuple[int, int, tuple[int, ...]]:
        """Match every state milestone the state after ``position`` steps satisfies, repeatedly
        (one may make another ready), but those in ``skip``. Returns the new mask, the value
        gained, the ones added."""
        state = states.get(position)
        seen = observed.get(position)
        gained, added = 0, []
        changed = True
        while changed:
            changed = False
            for j in state_milestones:
                bit = 1 << local[j]
                if mask & bit or after_mask[j] & ~mask or j in skip:
                    continue
                context = MatchContext(results=results(ref_steps), judge=judge)
                kind = next((("answer" if getattr(p, "final", False) else p.kind)
                             for p in ms[j].observed if observe(p, state, seen, context)), None)
                if kind is not None:
                    mask |= bit
                    gained += weight[j]
                    added.append((j, kind))
                    changed = True
        return mask, gained, tuple(added)

    # events in time order: step i at 2i + 1, the state after k steps at 2k
    events = [(2 * i + 1, i) for i in part_steps]
    if state_milestones:
        events += [(2 * k, -1 - k) for k in {*states, *observed}]
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
                variants = [(new_mask, gained, added)]
                # a milestone that a step may also match (any_of a call and a state, a message or
                # a result) is not always best matched here: the step it could take may
                # otherwise be an unmatched extra. Each subset of those left for later is tried.
                either = [j for j, _ in added if ms[j].calls]
                if either:
                    if len(either) > _EITHER_LIMIT:
                        exact = False
                        either = either[:_EITHER_LIMIT]
                    for size in range(1, len(either) + 1):
                        for skip in itertools.combinations(either, size):
                            variants.append(close(mask, ref_steps, position, frozenset(skip)))
                for new_mask, gained, added in variants:
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
        for a, kind in added:
            found[ms[a].id] = (kind, position)
        node = parent
    return found, explored, exact


@dataclass(slots=True)
class StepLabel:
    """Why a tool step matched its milestone, or why it matched none.

    Attributes:
        step: 1-based tool step index.
        milestone: The milestone it matched, or the one the diagnosis names (``None`` for a
            step that hit a minefield: its note says which milestone it matched, if any).
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
        """The fields that are set (neither ``None`` nor ``""``), in field order."""
        return self._fill({"step": self.step})

    def row(self, tool: str) -> dict[str, Any]:
        """``{"tool": tool}`` followed by :meth:`as_dict` (a row of ``trajectory_match``'s
        alignment)."""
        return self._fill({"tool": tool, "step": self.step})

    def _fill(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.milestone is not None and self.milestone != "":
            out["milestone"] = self.milestone
        if self.type is not None:
            out["type"] = self.type
        out["error"] = self.error
        if self.allowed is not None and self.allowed != "":
            out["allowed"] = self.allowed
        if self.argument is not None and self.argument != "":
            out["argument"] = self.argument
        if self.expected is not None and self.expected != "":
            out["expected"] = self.expected
        if self.note:
            out["note"] = self.note
        return out


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
    observed: Mapping[int, Observation] | None = None,
    seen: Sequence[int] | None = None,
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
    matched = alignment.matched
    results = {mid: steps[pos].result for mid, (kind, pos) in matched.items() if kind == "step"}
    context = MatchContext(results=results, judge=judge)
    # when each matched milestone was matched: a step at its index, a state just before the next step
    times = {mid: pos if kind == "step" else pos - 0.5 for mid, (kind, pos) in matched.items()}
    missing: list[str] = []
    missing_optional: list[str] = []
    if len(matched) < len(ms):
        for m in ms:
            if m.id not in matched:
                (missing_optional if m.optional else missing).append(m.id)
    absent = set(missing)
    mines = _mine_hits(plan, steps, final_state, states) if plan.minefields else []
    mine_steps: dict[int, dict[str, Any]] = {}
    for h in mines:  # the first minefield a step hits names it
        if h["step"] is not None:
            mine_steps.setdefault(h["step"], h)
    step_milestone = alignment.step_milestone
    allowed_of = alignment.allowed
    explain = _Explainer(plan, alignment, context, times, missing, absent)
    if plan.reads_tools:  # a call reading {"$from": {"tool": ...}} is explained with what it could have read
        tool_context = seen_results(observed, seen, judge)
        explain.step_context = lambda i: MatchContext(results=results, judge=judge,
                                                      tool_results=tool_context(i).tool_results)
    labels: list[StepLabel] = []
    for i, s in enumerate(steps):
        mid = step_milestone[i]
        if mid is not None:
            label = StepLabel(i + 1, mid, note="matched " + mid)
        else:
            label = StepLabel(i + 1)
            if s.malformed or s.rejected or not s.executed:
                label.type = "malformed" if s.malformed else "rejected"
                label.note = "malformed call, never executed" if s.malformed else "rejected by the environment, never executed"
            else:
                explain(label, s, i)
            allowed = allowed_of[i] if allowed_of else step_allowed(plan, s)
            label.error = not allowed
            if allowed:
                label.allowed = (
                    "not executed" if not s.executed else "read-only" if plan.is_read_only(s.name) else "allowed"
                )
        if mine_steps and i + 1 in mine_steps:  # the minefield names the step, not a milestone it resembles
            also = f" (it also matched milestone {mid})" if mid is not None else ""
            label.type, label.error, label.milestone, label.argument = "forbidden", True, None, None
            label.expected = mine_steps[i + 1]["expected"]
            label.note = f"minefield {mine_steps[i + 1]['minefield']} hit{also}"
        labels.append(label)
    first: dict[str, Any] | None = None
    for label in labels:
        if label.error or (label.type is not None and label.milestone in absent):
            first = {"step": label.step, "type": label.type, "milestone": label.milestone, "argument": label.argument}
            break
    if first is None and missing:
        first = {"step": None, "type": "missing", "milestone": missing[0], "argument": None}
    if first is None and any(h["step"] is None for h in mines):
        first = {"step": None, "type": "forbidden", "milestone": None, "argument": None}
    return Diagnosis(labels, missing, missing_optional, mines, first)


class _Explainer:
    """Why an executed tool step matched no milestone (the checks :func:`diagnose` lists)."""

    __slots__ = ("ms", "names", "by_id", "matched", "candidates", "context", "times", "missing", "absent", "pools",
                 "step_context")

    def __init__(
        self,
        plan: Plan,
        alignment: Alignment,
        context: MatchContext,
        times: Mapping[str, float],
        missing: list[str],
        absent: set[str],
    ) -> None:
        self.ms = plan.milestones
        self.names = plan.names
        self.by_id = {m.id: m for m in self.ms} if missing else {}
        self.matched = alignment.matched
        self.candidates = alignment.candidates
        self.context, self.times, self.missing, self.absent = context, times, missing, absent
        self.pools: dict[str, tuple[list[Milestone], list[Milestone]]] = {}
        self.step_context: Callable[[int], MatchContext] | None = None

    def pool(self, name: str, named_ids: Sequence[int]) -> tuple[list[Milestone], list[Milestone]]:
        """The milestones calling tool ``name``, and those of them a step most likely meant:
        the missing ones, or all when none is missing."""
        found = self.pools.get(name)
        if found is None:
            named = [self.ms[j] for j in named_ids]
            absent = self.absent
            pool = [m for m in named if m.id in absent] if absent else []
            found = self.pools[name] = (named, pool or named)
        return found

    def ready(self, m: Milestone, i: int) -> bool:
        """Whether every milestone of ``m``'s ``after`` was matched before step ``i``."""
        if not m.after:
            return True
        times = self.times
        for a in m.after:
            t = times.get(a)
            if t is None or t >= i:
                return False
        return True

    def __call__(self, label: StepLabel, s: StepView, i: int) -> None:
        ms, context = self.ms, self.context
        if self.step_context is not None:
            context = self.step_context(i)
        named_ids = self.names.get(s.name, ())

        def fits_call(m: Milestone) -> bool:
            return any(c.name == s.name and c.wrong_argument(s.arguments, context) is None for c in m.calls)

        if self.candidates:  # the search's candidates: arguments already checked, but for $from
            row = self.candidates[i]
            fits = [ms[j] for j in row if not ms[j].refs or fits_call(ms[j])] if row else row
        else:
            fits = [ms[j] for j in named_ids if fits_call(ms[j])]
        matched = self.matched
        for m in fits:
            if not self.ready(m, i) and matched.get(m.id) != ("step", i):
                label.type, label.milestone = "out_of_order", m.id
                waiting = [a for a in m.after if not ((t := self.times.get(a)) is not None and t < i)]
                label.note = f"fits {m.id}, but {', '.join(waiting)} not matched before it"
                label.expected = {"after": list(m.after)}
                return
        for m in fits:
            if m.id in matched:
                label.type, label.milestone = "extra_call", m.id
                label.note = f"repeats {m.id} (matched at another step)"
                return
        if named_ids:
            # the milestone it most likely meant: a missing one first, then one ready at that point
            found = self.pools.get(s.name)
            pool = (found or self.pool(s.name, named_ids))[1]
            m = pool[0]
            for candidate in pool:
                if self.ready(candidate, i):
                    m = candidate
                    break
            calls = m.calls
            call = calls[0] if calls[0].name == s.name else next(c for c in calls if c.name == s.name)
            argument = call.wrong_argument(s.arguments, context)
            label.type, label.milestone, label.argument = "wrong_arguments", m.id, argument or None
            label.expected = call.expected()
            label.note = f"argument {argument!r} does not match {m.id}" if argument else f"arguments do not match {m.id}"
            return
        for mid in self.missing:
            m = self.by_id[mid]
            if self.ready(m, i):
                label.type, label.milestone = "wrong_tool", mid
                label.expected = m.calls[0].expected() if m.calls else m.alternatives[0].expected()
                label.note = f"expected {mid}"
                return
        label.type = "extra_call"
        label.note = "matches no milestone"

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
required milestones, then minimises the unmatched steps that the extra-call policy forbids, then
maximises the matched optional milestones, then minimises all unmatched steps (an optional
milestone is never matched at the price of a forbidden extra call). ``$from`` arguments are
compared with the result of the step the alignment gives the milestone they name, and only
when that step was made in an earlier model turn than the step reading it (a model cannot copy
a result it has not seen). A state milestone that no other milestone comes after, unless
``transient``, is matched only by the final state.

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

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from toolgym.matchers import EMPTY_CONTEXT, NO_VALUE, Equal, From, MatchContext
from toolgym.milestones import CallPattern, Milestone, Pattern, Plan, ResultPattern, StatePattern, call_key

__all__ = ["EXACT_LIMIT", "Alignment", "Observation", "StepLabel", "StepView", "align", "diagnose", "first_error_text",
           "first_error_what"]

EXACT_LIMIT = 1 << 16
"""States kept per step before the search becomes a beam search (2^16: every set of 16
unordered milestones without ``$from``)."""

ErrorType = Literal[
    "wrong_tool", "wrong_arguments", "missing", "out_of_order", "extra_call", "forbidden", "malformed", "rejected",
    "undone",
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
        turn: The model turn that made the call (0-based count of model steps before it), or
            ``None`` when not known (then each step counts as its own turn). A ``$from`` value
            must come from a result returned in an earlier model turn: a model cannot copy a
            result it has not seen.
        changes: The top-level keys of the environment's state that the step changed (from its
            ``state_patch``), or ``None`` when not recorded. A step matched to no milestone that
            changed a key of a state milestone before that milestone was met brought it about
            and is no extra call.
        user_turn: The user turn (1-based) the step was made in, or ``None`` when not known. A
            milestone with ``"turn": k`` is matched only in user turn ``k``.
    """

    name: str
    arguments: Mapping[str, Any]
    result: Any = None
    executed: bool = True
    malformed: bool = False
    rejected: bool = False
    turn: int | None = None
    changes: frozenset[str] | None = None
    user_turn: int | None = None


class Observation(NamedTuple):
    """What is observed after ``k`` tool steps, beside the state: what ``message``, ``answer``
    and ``result`` milestones and ``{"$from": {"tool": ...}}`` read.

    Attributes:
        texts: The texts the agent said after ``k`` tool steps and before the next one (the
            text of each model step there, and, after the last tool step, the final answer).
        answer: The final answer (only after the last tool step), else ``None``.
        result: ``(tool name, result)`` of tool step ``k`` (1-based) when it ran without error
            (the result as :class:`StepView` holds it), else ``None``.
        text_turns: The user turn each of ``texts`` was said in (empty when not known).
        answer_turn: The user turn the final answer ended (``None`` when not known).
        result_turn: The user turn of tool step ``k`` (``None`` when not known).
    """

    texts: tuple[str, ...] = ()
    answer: str | None = None
    result: tuple[str, Any] | None = None
    text_turns: tuple[int | None, ...] = ()
    answer_turn: int | None = None
    result_turn: int | None = None


def observe(
    pattern: Pattern,
    state: Mapping[str, Any] | None,
    seen: Observation | None,
    context: MatchContext = EMPTY_CONTEXT,
    turn: int | None = None,
) -> bool:
    """Whether an observed alternative (a state, a message, a result) holds at one point, given
    the state there (``None``: not known) and what was observed there (``None``: nothing).
    With ``turn`` (a milestone's user turn), only a text, an answer or a result of that turn
    counts where their turns are known (a state's turn is the caller's to check)."""
    kind = pattern.kind
    if kind == "state":
        return state is not None and pattern.wrong_key(state, context) is None  # type: ignore[union-attr]
    if seen is None:
        return False
    if kind == "message":
        if pattern.final:  # type: ignore[union-attr]
            if turn is not None and seen.answer_turn not in (None, turn):
                return False
            return seen.answer is not None and pattern.match((seen.answer,), context)  # type: ignore[union-attr, call-arg]
        texts = seen.texts
        if turn is not None and seen.text_turns:
            texts = tuple(t for t, said_in in zip(texts, seen.text_turns, strict=True) if said_in in (None, turn))
        return pattern.match(texts, context)  # type: ignore[union-attr, call-arg]
    if turn is not None and seen.result_turn not in (None, turn):
        return False
    return seen.result is not None and pattern.match(seen.result[0], seen.result[1], context)  # type: ignore[union-attr, call-arg]


def observed_kind(pattern: Pattern) -> str:
    """What an observed alternative is matched by: ``state``, ``message``, ``answer`` or
    ``result`` (the kind :attr:`Alignment.matched` records)."""
    return "answer" if getattr(pattern, "final", False) else pattern.kind


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
    rows: list[list[tuple[int, tuple[CallPattern, ...]]]] = field(default_factory=list, repr=False)
    """For each step, the milestones it may match by name and arguments (those reading
    ``$from`` by name only), each with its call alternatives that fit: ``(index, calls)``."""
    allowed: list[bool] = field(default_factory=list)
    """For each step, whether the policy allows it unmatched (:func:`step_allowed`)."""
    brought_about: dict[int, str] = field(default_factory=dict)
    """Unmatched steps (0-based) that brought a matched state milestone about (they changed a
    key it names before it was met) → that milestone: no extra calls, left out of
    ``unmatched`` and ``forbidden_unmatched``."""

    @property
    def candidates(self) -> list[list[int]]:
        """For each step, the indices of the milestones it may match (:attr:`rows`)."""
        return [[j for j, _ in row] for row in self.rows]


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

    __slots__ = ("index", "optional", "required", "root", "groups", "simple", "exact", "by_name", "assignment",
                 "mixed")

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
        # a plain assignment problem: only calls, no order, no $from, all required or all
        # optional (the agentevals modes' unordered, subset and superset plans)
        self.assignment = bool(ms) and all(self.simple) and len(set(optional)) == 1
        # a milestone offering both a call and a state (see _brought_about)
        self.mixed = any(m.calls and m.states for m in ms)
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


def seen_counts(steps: Sequence[StepView]) -> list[int]:
    """For each tool step (0-based), how many tool steps' results the model had seen when it
    made the call: the steps before the model turn that made it (:attr:`StepView.turn`; the
    calls of one turn cannot read each other's results). A step of no known model turn (a
    replayed prefix, a trajectory built by hand) has seen every step before it. What
    ``$from`` may read, in both its forms, is bounded by this."""
    out: list[int] = []
    first: dict[int, int] = {}
    for i, s in enumerate(steps):
        out.append(i if s.turn is None else first.setdefault(s.turn, i))
    return out


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
            made the call (default: :func:`seen_counts` of ``steps``, from their model
            turns); bounds what ``{"$from": {"tool": ...}}`` may read.

    Returns:
        Alignment: The assignment, its counts, and whether it is exact.

    Raises:
        JudgeRequired: a ``$judge`` matcher had to be decided and ``judge`` is ``None``.
    """
    if plan.unordered_within_turn and steps:
        found = within_turns(plan, steps)
        if found is not None:
            return found
        order = turn_order(plan, steps)
        if order is not None:  # each model turn's calls in the chain's order, then back in the steps' order
            inner = align(in_chain_order(plan), [steps[k] for k in order], states, judge, limit, observed, seen)
            return unpermuted(inner, order)
    states = states or {}
    layout = _layout(plan)
    ms = plan.milestones
    n, m_count = len(steps), len(ms)
    index = layout.index
    # the objective's order by weights: required matched > forbidden unmatched > optional
    # matched > unmatched (each weight more than the most the ones below can add up to)
    w_o = n + 1
    w_f = w_o * (m_count + 1)
    w_r = (w_f + 1) * (n + 1)
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
    tool_context = seen_results(observed, seen if seen is not None else seen_counts(steps), judge) if plan.reads_tools else None
    # candidates[i]: the milestones step i may match (the name fits; the arguments fit, unless
    # they read $from and are checked during the search)
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]] = []
    shared = False  # whether some step may match two milestones (which joins their parts)
    has_turns = plan.has_turns
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
                arguments = s.arguments
                fits = [(j, calls) for j, calls in named
                        if ms[j].refs or calls[0].wrong_argument(arguments, context) is None]
                if fits:
                    row = _merged([*row, *fits]) if row or len(fits) > 1 else fits
            if row and has_turns and s.user_turn is not None:  # a milestone of another user turn
                row = [(j, calls) for j, calls in row if ms[j].turn is None or ms[j].turn == s.user_turn]
            if len(row) > 1:
                shared = True
        candidates.append(row)

    if shared and layout.assignment and policy != "allow_read_only":
        # every milestone of one weight, every step of one penalty: any maximum matching of
        # milestones with the steps that fit them is optimal (without a step that fits two
        # milestones, each milestone is a part of its own, solved at once below)
        found, work = _matching(ms, range(m_count), [i for i, row in enumerate(candidates) if row], candidates)
        return _finish(plan, layout, steps, found, allowed, candidates, True, "exact search", work)
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
            matched[ms[j].id] = ("step", best)
            explored += len(part_steps)  # type: ignore[arg-type]
            continue
        if _is_chain(ms, members, index):
            found, work = _chain(ms, members, part_steps or [], candidates, weight, penalty)
            ok = True
        elif _is_uniform(ms, members, part_steps or [], weight, penalty):
            found, work = _matching(ms, members, part_steps or [], candidates)
            ok = True
        else:
            found, work, ok = _search(ms, members, part_steps or [], candidates, weight, penalty, steps, states,
                                      index, judge, limit, plan.final_only, observed or {}, tool_context)
        exact &= ok
        explored += work
        matched.update(found)
    return _finish(plan, layout, steps, matched, allowed, candidates, exact,
                   "exact search" if exact else f"beam search keeping the best {limit} states per step (not exact)",
                   explored, states)


def _finish(
    plan: Plan,
    layout: _Layout,
    steps: Sequence[StepView],
    matched: dict[str, tuple[str, int]],
    allowed: list[bool],
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]],
    exact: bool,
    method: str,
    explored: int,
    states: Mapping[int, Mapping[str, Any]] | None = None,
) -> Alignment:
    """The :class:`Alignment` of the matches found: each step's milestone, the counts, the
    steps that brought a milestone about."""
    ms, index = plan.milestones, layout.index
    step_milestone: list[str | None] = [None] * len(steps)
    for mid, (kind, pos) in matched.items():
        if kind == "step":
            step_milestone[pos] = mid
    optional_matched = sum(1 for mid in matched if layout.optional[index[mid]]) if layout.required < len(ms) else 0
    brought = _brought_about(ms, index, steps, step_milestone, matched, plan.observes,
                             states if layout.mixed else None) if matched else {}
    unmatched = forbidden = 0
    for i in range(len(steps)):
        if step_milestone[i] is None and i not in brought:
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
        method=method,
        states_explored=explored,
        rows=candidates,
        allowed=allowed,
        brought_about=brought,
    )


def in_chain_order(plan: Plan) -> Plan:
    """``plan`` without :attr:`Plan.unordered_within_turn` (kept with the plan)."""
    found = plan.__dict__.get("_ordered_copy")
    if found is None:
        found = copy.copy(plan)
        found.unordered_within_turn = False
        plan.__dict__["_ordered_copy"] = found
    return found


def turn_order(plan: Plan, steps: list[StepView]) -> list[int] | None:
    """For a chain whose calls one model turn may make in any order: the steps with each
    model turn's calls sorted by the chain position they fit (arguments and name, else name
    alone; the rest last, each group in its own order), as indices into ``steps``; ``None``
    when that is the order they have."""
    ms = plan.milestones
    known = [s.turn for s in steps if s.turn is not None]
    if len(set(known)) == len(known):  # one call per model turn (a step of no known turn stands alone)
        return None
    turns = seen_counts(steps)

    def key(k: int) -> tuple[int, int]:
        s = steps[k]
        named = [j for j, m in enumerate(ms) if any(c.name == s.name for c in m.calls)]
        fits = [j for j in named if any(c.name == s.name and c.wrong_argument(s.arguments) is None for c in ms[j].calls)]
        return ((fits or named or [len(ms)])[0], k)

    order: list[int] = []
    start = 0
    while start < len(steps):
        end = start
        while end < len(steps) and turns[end] == turns[start]:
            end += 1
        order += sorted(range(start, end), key=key) if end - start > 1 else [start]
        start = end
    return None if order == list(range(len(steps))) else order


def unpermuted(al: Alignment, order: list[int]) -> Alignment:
    """An alignment of the steps ``[steps[k] for k in order]`` told in the steps' own order."""
    n = len(order)
    step_milestone: list[str | None] = [None] * n
    rows: list[list[tuple[int, tuple[CallPattern, ...]]]] = [[] for _ in range(n)] if al.rows else []
    allowed = [False] * n if al.allowed else []
    for k, original in enumerate(order):
        step_milestone[original] = al.step_milestone[k]
        if al.rows:
            rows[original] = al.rows[k]
        if al.allowed:
            allowed[original] = al.allowed[k]
    matched = {mid: (kind, order[pos]) if kind == "step" else (kind, pos) for mid, (kind, pos) in al.matched.items()}
    return replace(al, step_milestone=step_milestone, matched=matched, rows=rows, allowed=allowed,
                   brought_about={order[k]: mid for k, mid in al.brought_about.items()},
                   method=al.method + " (the calls of one model turn in any order)")


def unpermuted_diagnosis(d: Diagnosis, order: list[int]) -> Diagnosis:
    """A diagnosis of the steps ``[steps[k] for k in order]`` told in the steps' own order: its
    labels renumbered and put back in place; the first error stays the one found in the
    chain's order (within a model turn the calls have no order), named by its own step."""
    labels: list[StepLabel] = [d.labels[0]] * len(order)
    for k, label in enumerate(d.labels):
        label.step = order[k] + 1
        labels[order[k]] = label
    first = d.first_error
    if first is not None and first.get("step") is not None:
        first = {**first, "step": order[first["step"] - 1] + 1}
    return replace(d, labels=labels, first_error=first)


def within_turns(plan: Plan, steps: list[StepView]) -> Alignment | None:
    """For a chain whose calls one model turn may make in any order: the alignment that
    matches every milestone and every step, each turn's ``k`` calls paired with the chain's
    next ``k`` milestones by a perfect bipartite matching; ``None`` when there is none (the
    ordinary search then diagnoses the trajectory)."""
    ms = plan.milestones
    if len(steps) != len(ms) or not all(s.executed for s in steps):
        return None
    turns = seen_counts(steps)  # equal for the steps of one model turn
    if len(set(turns)) == len(turns):
        return None  # one call per turn: the ordinary chain is the same alignment
    plan_index = {m.id: j for j, m in enumerate(ms)}
    step_milestone: list[str | None] = [None] * len(steps)
    start = 0
    while start < len(steps):
        end = start
        while end < len(steps) and turns[end] == turns[start]:
            end += 1
        segment = range(start, end)  # these steps, and the milestones at the same positions
        fits = {i: [j for j in segment if any(c.name == steps[i].name and c.wrong_argument(steps[i].arguments) is None
                                              for c in ms[j].calls)] for i in segment}
        owner: dict[int, int] = {}  # milestone -> step (the steps look for milestones here)
        if not all(_augment(i, fits, owner, set()) for i in segment):
            return None
        for j, i in owner.items():
            step_milestone[i] = ms[j].id
        start = end
    matched = {mid: ("step", i) for i, mid in sorted(enumerate(step_milestone), key=lambda im: plan_index[im[1]])}
    optional = sum(1 for m in ms if m.optional)
    return Alignment(step_milestone, matched, len(ms) - optional, optional, 0, 0,
                     method="exact search (the calls of one model turn in any order)", states_explored=len(steps),
                     allowed=[False] * len(steps))


def _brought_about(
    ms: tuple[Milestone, ...],
    index: Mapping[str, int],
    steps: Sequence[StepView],
    step_milestone: list[str | None],
    matched: Mapping[str, tuple[str, int]],
    results: bool = False,
    states: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[int, str]:
    """The unmatched executed steps that brought a matched state milestone about: step ``i``
    changed a key that the milestone names, and the milestone was met after it (by the state
    after ``k > i`` steps). Each is given the first such milestone. A step whose changes were
    not recorded brings nothing about. The step whose result matched a ``result`` milestone
    brought that one about (looked for when ``results``: the plan has one). A milestone
    offering a state and a call (``any_of``) that its call matched counts as met by its state
    too when the state after that call holds it: the calls before it that changed the state's
    keys brought it about as well, so offering the call never makes the milestone harder to
    meet than the state alone."""
    out: dict[int, str] = {}
    for mid, (kind, pos) in matched.items() if results else ():
        if kind == "result" and 0 < pos <= len(steps) and step_milestone[pos - 1] is None and steps[pos - 1].executed:
            if pos - 1 not in out or index[mid] < index[out[pos - 1]]:
                out[pos - 1] = mid
    met = sorted(
        (pos, index[mid], mid) for mid, (kind, pos) in matched.items() if kind == "state"
    )
    if states:
        for mid, (kind, pos) in matched.items():
            m = ms[index[mid]]
            if kind == "step" and m.states and (after := states.get(pos + 1)) is not None \
                    and any(p.wrong_key(after) is None for p in m.states):
                met.append((pos + 1, index[mid], mid))
        met.sort()
    if not met:
        return out
    keys = {mid: {k for p in ms[j].states for k, _ in p.items} for _, j, mid in met}
    for i, s in enumerate(steps):
        if step_milestone[i] is not None or i in out or not s.executed or not s.changes:
            continue
        for pos, _, mid in met:
            if pos > i and keys[mid] & s.changes:
                out[i] = mid
                break
    return out


def turn_spans(steps: Sequence[StepView]) -> list[tuple[float, float]]:
    """For each position ``k`` (0 to ``len(steps)``): the user turns during which what was
    observed after ``k`` tool steps held (the state after ``k`` steps holds from the turn of
    step ``k`` until the turn of step ``k + 1``; the last one in every later turn), as
    ``(first, last)``; ``(-inf, inf)`` where a step's user turn is not known."""
    inf = float("inf")
    turns = [s.user_turn for s in steps]
    spans: list[tuple[float, float]] = []
    for k in range(len(steps) + 1):
        before = 1 if k == 0 else turns[k - 1]
        after = inf if k == len(steps) else turns[k]
        spans.append((-inf, inf) if before is None or after is None else (before, after))
    return spans


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


def _is_uniform(
    ms: tuple[Milestone, ...], members: Sequence[int], part_steps: Sequence[int], weight: list[int], penalty: list[int]
) -> bool:
    """Whether the part is a plain assignment problem: no ``after``, no ``$from``, nothing
    observed (only calls), every milestone of the same weight (all required or all optional)
    and every step of the same penalty (the policy allows all of them or none). Then every
    maximum matching is optimal (the agentevals modes' plans are such parts)."""
    first = weight[members[0]]
    for j in members:
        m = ms[j]
        if m.after or m.refs or m.observed or weight[j] != first:
            return False
    if part_steps:
        p = penalty[part_steps[0]]
        return all(penalty[i] == p for i in part_steps)
    return True


def _matching(
    ms: tuple[Milestone, ...],
    members: Sequence[int],
    part_steps: Sequence[int],
    candidates: list[list[tuple[int, tuple[CallPattern, ...]]]],
) -> tuple[dict[str, tuple[str, int]], int]:
    """A maximum matching of the part's milestones with the steps that fit them, by
    augmenting paths (Kuhn's algorithm): the milestones in the order written, each trying
    the steps in order, so a milestone takes the earliest step left when it can. Returns the
    matches and the (milestone, step) pairs that fit."""
    inside = set(members)
    fits: dict[int, list[int]] = {j: [] for j in members}
    pairs = 0
    for i in part_steps:
        for j, _ in candidates[i]:
            if j in inside:
                fits[j].append(i)
                pairs += 1
    owner: dict[int, int] = {}  # step -> milestone
    for j in members:
        if fits[j]:
            _augment(j, fits, owner, set())
    return {ms[j].id: ("step", i) for i, j in sorted(owner.items())}, pairs


def _augment(j: int, fits: Mapping[int, list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    """Kuhn's augmenting path from milestone ``j``: give it a step, moving the milestone that
    held the step to another of its steps when it can (a module function, not a closure, so
    no reference cycle is left for the garbage collector)."""
    for i in fits[j]:
        if i not in seen:
            seen.add(i)
            if i not in owner or _augment(owner[i], fits, owner, seen):
                owner[i] = j
                return True
    return False


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
    final_only: frozenset[str] = frozenset(),
    observed: Mapping[int, Observation] | None = None,
    tool_context: Callable[[int], MatchContext] | None = None,
) -> tuple[dict[str, tuple[str, int]], int, bool]:
    """The search over matched sets for one part (see the module docstring). Returns the
    matches, the states created and whether it stayed exact."""
    last = len(steps)  # the final state's position
    seen = seen_counts(steps)
    local = {j: b for b, j in enumerate(members)}
    after_mask = {j: sum(1 << local[index[a]] for a in ms[j].after) for j in members}
    refs = tuple(sorted({r for j in members for r in ms[j].refs}))
    ref_slot = {r: k for k, r in enumerate(refs)}
    own_refs = {j: tuple(ref_slot[r] for r in sorted(ms[j].refs)) for j in members}
    state_milestones = [j for j in members if ms[j].observed]  # states, messages, results
    observed = observed or {}
    turn_span = turn_spans(steps) if any(ms[j].turn is not None for j in state_milestones) else None

    turn_ends: dict[int, int] = {}

    def turn_end(turn: int) -> int:
        """The position at the end of user turn ``turn``: after its last tool step."""
        found = turn_ends.get(turn)
        if found is None:
            found = turn_ends[turn] = sum(1 for s in steps if s.user_turn is not None and s.user_turn <= turn)
        return found
    pure_states = [j for j in state_milestones if not ms[j].calls]
    mixed_states = [j for j in state_milestones if ms[j].calls]
    dynamic: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def results(ref_steps: tuple[int, ...]) -> dict[str, Any]:
        return {mid: steps[i].result for mid, i in zip(refs, ref_steps, strict=True) if i >= 0}

    def call_fits(i: int, j: int, calls: tuple[CallPattern, ...], ref_steps: tuple[int, ...]) -> bool:
        if not ms[j].refs:
            return True  # checked when the candidates were listed
        mine = tuple(ref_steps[k] for k in own_refs[j])
        if any(r >= seen[i] for r in mine):
            return False  # a result returned in the same model turn (or later) was not yet seen
        key = (i, j, mine)
        if key not in dynamic:
            context = MatchContext(results=results(ref_steps), judge=judge,
                                   tool_results=tool_context(i).tool_results if tool_context else {})
            dynamic[key] = any(c.wrong_argument(steps[i].arguments, context) is None for c in calls)
        return dynamic[key]

    def close(
        mask: int, ref_steps: tuple[int, ...], position: int
    ) -> list[tuple[int, int, tuple[tuple[int, str], ...]]]:
        """The ways to match state milestones by the state after ``position`` steps. A
        milestone with only state alternatives is matched as soon as the state satisfies it
        (it uses no step, so earlier is never worse), repeatedly (one may make another ready);
        one that a call could match too (an ``any_of`` mixing both) may be left for a later
        step, so each choice of those is a way. Returns ``(new mask, value gained, milestones
        added)`` per way, the way matching none of the mixed ones first; each milestone added
        with the kind of what matched it (:func:`observed_kind`)."""
        state = states.get(position)
        said = observed.get(position)
        context = MatchContext(results=results(ref_steps), judge=judge) if refs else MatchContext(judge=judge)

        def fits(j: int, mask: int) -> str | None:
            if mask & (1 << local[j]) or after_mask[j] & ~mask:
                return None
            turn = ms[j].turn
            if turn is None or turn_span is None:
                if position != last and ms[j].id in final_only:
                    return None
                return next((observed_kind(p) for p in ms[j].observed if observe(p, state, said, context)), None)
            # a milestone of a user turn: a state while that turn lasted (the one at its end when
            # it must hold at the end), a text or a result of that turn
            for p in ms[j].observed:
                if p.kind == "state":
                    if not turn_span[position][0] <= turn <= turn_span[position][1]:
                        continue
                    if ms[j].id in final_only and position != turn_end(turn):
                        continue
                if observe(p, state, said, context, turn):
                    return observed_kind(p)
            return None

        ways: list[tuple[int, int, tuple[tuple[int, str], ...]]] = []
        seen: set[int] = set()
        frontier = [(mask, 0, ())]
        while frontier:
            mask, gained, added = frontier.pop(0)
            changed = True
            while changed:
                changed = False
                for j in pure_states:
                    kind = fits(j, mask)
                    if kind is not None:
                        mask |= 1 << local[j]
                        gained += weight[j]
                        added += ((j, kind),)
                        changed = True
            if mask in seen:
                continue
            seen.add(mask)
            ways.append((mask, gained, added))
            for j in mixed_states:
                kind = fits(j, mask)
                if kind is not None:
                    frontier.append((mask | 1 << local[j], gained + weight[j], added + ((j, kind),)))
        return ways

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
                for new_mask, gained, added in close(mask, ref_steps, position):
                    new_node = (node, -1, -1, added, position) if added else node
                    key = (new_mask, ref_steps)
                    if key not in nxt or nxt[key][0] < score + gained:
                        nxt[key] = (score + gained, new_node)
            explored += len(nxt)
            if len(nxt) > limit:
                exact = False
                nxt = dict(sorted(nxt.items(), key=lambda kv: -kv[1][0])[:limit])
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
                hits.append({"step": i + 1, "minefield": k, "kind": "call", "expected": p.expected()})
                break
    recorded = sorted(k for k in (states or {}) if k > 0)
    for k, p in enumerate(plan.minefields):
        if not isinstance(p, StatePattern):
            continue
        # the first state after a step that holds it names that step; only a final state: no step
        at = next((j for j in recorded if p.wrong_key(states[j]) is None), None) if states else None
        if at is not None:
            hits.append({"step": at, "minefield": k, "kind": "state", "expected": p.expected()})
        elif final_state is not None and p.wrong_key(final_state) is None:
            hits.append({"step": None, "minefield": k, "kind": "state", "expected": p.expected()})
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
    (never executed; the milestone it most likely meant is named); brought about a state
    milestone (it changed a key the milestone names before it was met: no error);
    ``out_of_order`` when its call fits a milestone whose ``after`` milestones were not all
    matched before it, or whose ``$from`` value comes from a result returned in the same model
    turn; ``extra_call`` when it repeats a call that matched a milestone; ``wrong_arguments``
    when its tool is a call of a milestone it could have matched (the first argument that does
    not fit is named, with the value given and the value expected); ``wrong_tool`` when a
    required milestone that was ready then is never matched; else ``extra_call``. A step
    matching a minefield is ``forbidden`` whatever it matched.

    The first error is the earliest of: a step that counts against the trajectory (a
    minefield, an unmatched step the policy forbids), a step that names a required milestone
    the alignment misses, and the step that undid a required state milestone met before it
    (``undone``: the state milestone must hold at the end); else ``missing`` (step ``None``)
    for the first missing required milestone; else ``forbidden`` (step ``None``) for a
    minefield state in the final state; else ``None``. It holds ``step`` (1-based tool step or
    ``None``), ``tool``, ``type``, ``milestone``, ``argument`` and ``note``.
    """
    ms = plan.milestones
    matched = alignment.matched
    # the matched steps' results, which $from reads
    results = {mid: steps[pos].result for mid, (kind, pos) in matched.items() if kind == "step"} if plan.has_refs else {}
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
    brought = alignment.brought_about
    if seen is None and (plan.has_refs or plan.reads_tools):
        seen = seen_counts(steps)
    explain = _Explainer(plan, alignment, context, times, missing, absent, seen if plan.has_refs else None)
    if plan.has_turns:
        explain.user_turns = [s.user_turn for s in steps]
    if observed:
        explain.observed = observed
    if plan.reads_tools:  # a call reading {"$from": {"tool": ...}} is explained with what it could have read
        tool_context = seen_results(observed, seen, judge)
        explain.step_context = lambda i: MatchContext(results=results, judge=judge,
                                                      tool_results=tool_context(i).tool_results)
        # every result the tools returned, seen or not: a call that fits only with one of those
        # used a result before it was returned
        explain.later_context = MatchContext(results=results, judge=judge,
                                             tool_results=seen_results(observed, None, judge)(len(steps)).tool_results)
    labels: list[StepLabel] = []
    for i, s in enumerate(steps):
        mid = step_milestone[i]
        if mid is not None:
            label = StepLabel(i + 1, mid, note="matched " + mid)
        elif i in brought:
            label = StepLabel(i + 1, brought[i], allowed="brings about",
                              note=f"brings about {matched[brought[i]][0]} milestone {brought[i]}")
        else:
            label = StepLabel(i + 1)
            if s.malformed or s.rejected or not s.executed:
                label.type = "malformed" if s.malformed else "rejected"
                label.note = "malformed call, never executed" if s.malformed else "rejected by the environment, never executed"
                explain.attempt(label, s, i)
            else:
                explain(label, s, i)
            allowed = allowed_of[i] if allowed_of else step_allowed(plan, s)
            label.error = not allowed
            if allowed:
                label.allowed = (
                    "not executed" if not s.executed else "read-only" if plan.is_read_only(s.name) else "allowed"
                )
        if mine_steps and i + 1 in mine_steps:  # the minefield names the step, not a milestone it resembles
            hit = mine_steps[i + 1]
            also = f" (it also matched milestone {mid})" if mid is not None else ""
            label.type, label.error, label.milestone, label.argument = "forbidden", True, None, None
            label.allowed = None
            label.expected = hit["expected"]
            what = f"the call {s.name}" if hit["kind"] == "call" else f"the state after {s.name}"
            label.note = f"{what} matches minefield {hit['minefield']}{also}"
        labels.append(label)
    undone = _undone(plan, missing, times, states, steps) if states and plan.final_only & absent else {}
    if undone:  # the calls that brought an undone state about did what was asked; the undoing step is the error
        by_id = {m.id: m for m in ms}
        for mid, (met, _undid) in undone.items():
            keys = {k for p in by_id[mid].states for k, _ in p.items}
            for label in labels[:met]:
                s = steps[label.step - 1]
                if label.type in ("extra_call", "wrong_tool") and s.changes and keys & s.changes:
                    label.type, label.error, label.milestone, label.allowed = None, False, mid, "brings about"
                    label.expected, label.argument = None, None
                    label.note = f"brings about state milestone {mid} (undone later)"
            undoing = labels[_undid - 1]
            if undoing.milestone is None or undoing.type in ("extra_call", "wrong_tool"):  # it matched nothing else
                undoing.type, undoing.milestone, undoing.argument = "undone", mid, None
                undoing.note = f"undid state milestone {mid}, which held after tool step {met}"
    first: dict[str, Any] | None = None
    for label in labels:
        if label.error or (label.type is not None and label.milestone in absent):
            first = {"step": label.step, "tool": steps[label.step - 1].name, "type": label.type,
                     "milestone": label.milestone, "argument": label.argument, "note": label.note}
            break
    for mid, (met, undid) in undone.items():
        if first is None or first["step"] >= undid:  # the undoing step is an undone error before anything else
            first = {"step": undid, "tool": steps[undid - 1].name, "type": "undone", "milestone": mid,
                     "argument": None, "note": f"state milestone {mid} held after tool step {met} and no longer "
                                               f"after tool step {undid}; it must hold at the end"}
    if first is None and missing:
        first = {"step": None, "tool": None, "type": "missing", "milestone": missing[0], "argument": None,
                 "note": f"milestone {missing[0]} never reached"}
    if first is None and any(h["step"] is None for h in mines):
        hit = next(h for h in mines if h["step"] is None)
        first = {"step": None, "tool": None, "type": "forbidden", "milestone": None, "argument": None,
                 "note": f"the final state matches minefield {hit['minefield']}"}
    return Diagnosis(labels, missing, missing_optional, mines, first)


def _undone(
    plan: Plan,
    missing: Sequence[str],
    times: Mapping[str, float],
    states: Mapping[int, Mapping[str, Any]],
    steps: Sequence[StepView] = (),
) -> dict[str, tuple[int, int]]:
    """The missing required state milestones that must hold at the end (of their user turn,
    for a milestone with ``turn``) and held on the way: milestone id → (the tool step after
    which it first held once its ``after`` milestones were matched, the first later tool step
    after which it no longer held), both 1-based."""
    by_id = {m.id: m for m in plan.milestones}
    out: dict[str, tuple[int, int]] = {}
    positions = sorted(states)
    spans = turn_spans(steps) if plan.has_turns and steps else None
    for mid in missing:
        m = by_id[mid]
        if mid not in plan.final_only or not m.states:
            continue
        ready = max((times.get(a, float("inf")) for a in m.after), default=-1.0)
        met = None
        at = positions
        if m.turn is not None and spans is not None:  # the states while its turn lasted
            at = [k for k in positions if spans[k][0] <= m.turn <= spans[k][1]]
        for k in at:
            holds = k > ready and any(p.wrong_key(states[k]) is None for p in m.states)
            if met is None and holds:
                met = k
            elif met is not None and not holds:
                out[mid] = (met, k)
                break
    return out


def _fits_call(m: Milestone, s: StepView, context: MatchContext) -> bool:
    """Whether a call alternative of ``m`` matches step ``s``."""
    return any(c.name == s.name and c.wrong_argument(s.arguments, context) is None for c in m.calls)


def _reads_tool(m: Milestone, name: str) -> bool:
    """Whether a call alternative of ``m`` reads results of tool ``name`` (``{"$from":
    {"tool": name}}``)."""
    return any(name in getattr(matcher, "reads_tools", ()) for c in m.calls for _, matcher in c.arguments or ())


def first_error_what(first: Mapping[str, Any]) -> str:
    """What a first error (``trajectory_match``'s ``details.first_error``) is, in words: its
    type, the milestone and argument it names, and for a minefield or an undone state
    milestone the note saying which (``forbidden: the call delete_user matches minefield 0``,
    ``wrong arguments (email, argument 'user_id')``)."""
    what = str(first.get("type", "")).replace("_", " ")
    if first.get("milestone"):
        what += f" ({first['milestone']}"
        what += f", argument {first['argument']!r})" if first.get("argument") else ")"
    if first.get("note") and first.get("type") in ("forbidden", "undone"):
        what += f": {first['note']}"
    return what


def first_error_text(first: Mapping[str, Any]) -> str:
    """A first error in words, where first: ``step 3 (delete_user): forbidden: the call
    delete_user matches minefield 0``; ``end of trajectory: missing (email)`` without a step;
    ``turn 2, step 3 (...): ...`` when it names the user turn (a multi-turn episode)."""
    step = first.get("step")
    turn = f"turn {first['turn']}, " if first.get("turn") is not None else ""
    if step is None:
        return f"{turn}end of trajectory: " + first_error_what(first)
    return f"{turn}step {step}" + (f" ({first['tool']})" if first.get("tool") else "") + ": " + first_error_what(first)


class _Explainer:
    """Why an executed tool step matched no milestone (the checks :func:`diagnose` lists)."""

    __slots__ = ("ms", "names", "by_id", "matched", "candidates", "context", "times", "missing", "absent", "pools",
                 "seen", "step_context", "later_context", "user_turns", "result_milestones",
                 "observed")

    def __init__(
        self,
        plan: Plan,
        alignment: Alignment,
        context: MatchContext,
        times: Mapping[str, float],
        missing: list[str],
        absent: set[str],
        seen: Sequence[int] | None = None,
    ) -> None:
        self.ms = plan.milestones
        self.names = plan.names
        self.by_id = {m.id: m for m in self.ms} if missing else {}
        self.matched = alignment.matched
        self.candidates = alignment.rows
        self.context, self.times, self.missing, self.absent = context, times, missing, absent
        self.pools: dict[str, tuple[list[Milestone], list[Milestone]]] = {}
        self.seen = seen
        self.user_turns: list[int | None] | None = None
        self.observed: Mapping[int, Observation] = {}
        self.result_milestones = [m for m in self.ms if any(isinstance(p, ResultPattern) and p.name is not None
                                                            for p in m.observed)] if plan.observes else []
        self.step_context: Callable[[int], MatchContext] | None = None
        self.later_context: MatchContext | None = None

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
        """Whether every milestone of ``m``'s ``after`` was matched before step ``i``, and step
        ``i`` was made in ``m``'s user turn (when both are known)."""
        if m.turn is not None and self.user_turns is not None and self.user_turns[i] not in (None, m.turn):
            return False
        if not m.after:
            return True
        times = self.times
        for a in m.after:
            t = times.get(a)
            if t is None or t >= i:
                return False
        return True

    def meant(self, name: str, i: int) -> Milestone | None:
        """The milestone a call of tool ``name`` at step ``i`` most likely meant: a missing one
        first, one ready at that point first; ``None`` when no milestone calls ``name``."""
        named_ids = self.names.get(name, ())
        if not named_ids:
            return None
        pool = self.pool(name, named_ids)[1]
        for candidate in pool:
            if self.ready(candidate, i):
                return candidate
        return pool[0]

    def unseen(self, m: Milestone, i: int) -> list[str]:
        """The milestones whose results ``m`` reads with ``$from`` and that were matched at a
        step of the same model turn as step ``i`` or later: results the model had not seen."""
        seen = self.seen
        if seen is None or not m.refs:
            return []
        out = []
        for ref in sorted(m.refs):
            where = self.matched.get(ref)
            if where is not None and where[0] == "step" and where[1] >= seen[i]:
                out.append(ref)
        return out

    def result_meant(self, name: str, i: int) -> Milestone | None:
        """The ``result`` milestone of tool ``name`` (``{"result": {"name": name}}``) that a
        step ``i`` of that tool most likely meant: a missing one first, one ready at that point
        first; ``None`` when no result milestone names the tool."""
        found = [m for m in self.result_milestones
                 if any(isinstance(p, ResultPattern) and p.name == name for p in m.observed)]
        if not found:
            return None
        pool = [m for m in found if m.id in self.absent] or found
        return next((m for m in pool if self.ready(m, i)), pool[0])

    def attempt(self, label: StepLabel, s: StepView, i: int) -> None:
        """Link a call that was never executed (malformed or rejected) to the milestone it
        most likely meant, naming the argument that does not fit it (a missing ``result``
        milestone of its tool when no call milestone calls it)."""
        m = self.meant(s.name, i)
        if m is None:
            m = self.result_meant(s.name, i) if self.result_milestones else None
            if m is not None:
                label.milestone = m.id
                label.note += f"; it meant result milestone {m.id}"
            return
        call = next(c for c in m.calls if c.name == s.name)
        label.milestone = m.id
        argument = call.wrong_argument(s.arguments, self.context) if s.arguments else None
        label.argument = argument or None
        label.expected = call.expected()
        label.note += f"; it meant {m.id}" + (f": {_argument_text(call, argument, s.arguments, self.context)}"
                                              if argument else "")

    def __call__(self, label: StepLabel, s: StepView, i: int) -> None:
        ms, context = self.ms, self.context
        if self.step_context is not None:
            context = self.step_context(i)
        named_ids = self.names.get(s.name, ())
        if self.candidates:  # the search's candidates: arguments already checked, but for $from
            row = self.candidates[i]
            fits = [ms[j] for j, _ in row if not ms[j].refs or _fits_call(ms[j], s, context)] if row else []
        else:
            fits = [ms[j] for j in named_ids if _fits_call(ms[j], s, context)]
        matched = self.matched
        for m in fits:
            if not self.ready(m, i) and matched.get(m.id) != ("step", i):
                label.type, label.milestone = "out_of_order", m.id
                waiting = [a for a in m.after if not ((t := self.times.get(a)) is not None and t < i)]
                label.note = f"fits {m.id}, but {', '.join(waiting)} not matched before it"
                label.expected = {"after": list(m.after)}
                return
            unseen = self.unseen(m, i)
            if unseen and m.id not in matched:
                label.type, label.milestone = "out_of_order", m.id
                label.note = (f"fits {m.id}, but uses the result of {', '.join(unseen)} before it was returned "
                              "(made in the same model turn)")
                label.expected = {"after": list(m.after)}
                return
        for m in fits:
            if m.id in matched:
                label.type, label.milestone = "extra_call", m.id
                label.note = f"repeats {m.id} (matched at another step)"
                return
        if not fits and self.user_turns is not None and s.user_turn is not None:  # fits a milestone of another user turn
            for j in named_ids:
                m = ms[j]
                if m.turn is not None and m.turn != s.user_turn and _fits_call(m, s, context):
                    label.type, label.milestone = "out_of_order", m.id
                    label.note = f"fits {m.id}, but {m.id} belongs to user turn {m.turn} (this call was made in turn {s.user_turn})"
                    label.expected = {"turn": m.turn}
                    return
        later = self.later_context
        if later is not None and not fits:  # reads a tool's result that was returned only after the call
            for j in named_ids:
                m = ms[j]
                if m.id not in matched and any(c.name == s.name and c.wrong_argument(s.arguments, later) is None
                                               for c in m.calls):
                    call = next(c for c in m.calls if c.name == s.name)
                    argument = call.wrong_argument(s.arguments, context)  # the one read too early
                    label.type, label.milestone, label.argument = "out_of_order", m.id, argument or None
                    label.note = (f"fits {m.id}, but argument {argument!r} uses a tool's result before it was returned "
                                  "(made in the same model turn or earlier)")
                    label.expected = call.expected()
                    return
        if named_ids:
            m = self.meant(s.name, i)
            assert m is not None
            call = m.calls[0] if len(m.calls) == 1 else next(c for c in m.calls if c.name == s.name)
            argument = call.wrong_argument(s.arguments, context)
            label.type, label.milestone, label.argument = "wrong_arguments", m.id, argument or None
            label.expected = call.expected()
            label.note = _argument_text(call, argument, s.arguments, context) if argument else f"arguments do not match {m.id}"
            return
        m = self.result_meant(s.name, i) if self.result_milestones else None
        if m is not None:  # a call of the tool a result milestone names
            pattern = next(p for p in m.observed if isinstance(p, ResultPattern) and p.name == s.name)
            returned = self.observed.get(i + 1)
            if returned is not None and returned.result is not None and pattern.match(*returned.result, self.context):
                label.type, label.milestone = "extra_call", m.id
                label.note = f"repeats the result of result milestone {m.id} (matched at another step)"
                return
            label.type, label.milestone = "wrong_arguments", m.id
            label.expected = pattern.expected()
            label.note = f"its result does not match result milestone {m.id}"
            return
        for mid in self.missing:
            m = self.by_id[mid]
            if m.calls and self.ready(m, i) and not _reads_tool(m, s.name):
                # (a state milestone is no call: any tool may bring it about; a call of the tool
                # whose results the milestone reads with $from is its source, not a wrong tool)
                label.type, label.milestone = "wrong_tool", mid
                label.expected = m.calls[0].expected() if m.calls else m.alternatives[0].expected()
                label.note = f"expected {mid}"
                return
        label.type = "extra_call"
        label.note = "matches no milestone"


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object",
               type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value)) or type(value).__name__


_PLAIN_TEXT = re.compile(r'[^"\\\x00-\x1f\x7f-\uffff]*')


def _shown(value: Any) -> str:
    """``value`` as JSON, cut at 80 characters (plain numbers and short ASCII strings without
    a quote or a backslash written directly: this runs for every wrong argument)."""
    kind = type(value)
    if kind is int or kind is float:
        text = repr(value)
    elif kind is str and len(value) <= 78 and _PLAIN_TEXT.fullmatch(value):
        return f'"{value}"'
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _argument_text(call: CallPattern, argument: str, arguments: Mapping[str, Any], context: MatchContext) -> str:
    """Why argument ``argument`` of a call does not fit ``call``: not given, not expected, or
    the value given beside the value expected (a ``$from`` resolved to the value it names),
    with their types when only the type differs (``'158'`` (string) vs ``158`` (integer))."""
    matcher = None
    for k, m in call.arguments or ():
        if k == argument:
            matcher = m
            break
    if argument not in arguments:
        return f"argument {argument!r} missing"
    given = arguments[argument]
    if matcher is None:
        return f"argument {argument!r} = {_shown(given)} not expected"
    if isinstance(matcher, From):
        wanted = matcher.resolve(context)
        at = f" at {matcher.path}" if matcher.path else ""
        if matcher.tool is not None:
            source = f"a result of {matcher.tool}{at}"
            if wanted is NO_VALUE:
                return (f"argument {argument!r} = {_shown(given)}; expected a value from {source}, and no result "
                        f"of {matcher.tool} returned before this call holds one")
        else:
            source = f"{matcher.milestone}'s result{at}"
            if matcher.milestone not in context.results:
                return (f"argument {argument!r} = {_shown(given)}; expected a value from {source}, and milestone "
                        f"{matcher.milestone} was never matched (no result to read)")
        if wanted is NO_VALUE:
            return f"argument {argument!r} = {_shown(given)}; expected a value from {source}, which has none there"
        expected_text = f"{_shown(wanted)} (from {source})"
    elif isinstance(matcher, Equal):
        wanted = matcher.value
        expected_text = _shown(wanted)
    else:
        return f"argument {argument!r} = {_shown(given)} does not match {_shown(matcher.expected())}"
    if _json_type(given) != _json_type(wanted) and str(given) == str(wanted):
        return (f"argument {argument!r}: type differs: {_shown(given)} ({_json_type(given)}) vs "
                f"{_shown(wanted)} ({_json_type(wanted)})")
    return f"argument {argument!r} = {_shown(given)}, expected {expected_text}"

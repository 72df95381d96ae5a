"""The alignment with milestones matched by what is observed after a step (a state, a text the
agent said, the final answer, a tool's result) and with ``$from`` over any seen result of a
tool: a property test against brute force on random small plans and trajectories."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.graders.alignment import (
    Observation,
    StepView,
    align,
    diagnose,
    observe,
    seen_results,
    step_allowed,
)
from toolgym.matchers import MatchContext
from toolgym.milestones import compile_plan

NAMES = ["a", "b"]


@st.composite
def problems(draw):
    n_m = draw(st.integers(1, 4))
    milestones, calls = [], []
    for j in range(n_m):
        after = sorted(draw(st.sets(st.integers(0, j - 1), max_size=2))) if j else []
        ancestors, stack = set(), list(after)
        while stack:
            a = stack.pop()
            if a not in ancestors:
                ancestors.add(a)
                stack.extend(milestones[a]["_after"])

        def a_call(ancestors=ancestors):
            spec = {"name": draw(st.sampled_from(NAMES))}
            how = draw(st.sampled_from(["none", "value", "from", "tool"]))
            if how == "value":
                spec["arguments"] = {"x": draw(st.integers(0, 1))}
            elif how == "from" and [a for a in ancestors if a in calls]:
                spec["arguments"] = {"x": {"$from": f"m{draw(st.sampled_from(sorted(a for a in ancestors if a in calls)))}",
                                           "path": "/v"}}
            elif how == "tool":
                spec["arguments"] = {"x": {"$from": {"tool": draw(st.sampled_from(NAMES))}, "path": "/v"}}
            return {"call": spec}

        def observed():
            kind = draw(st.sampled_from(["state", "message", "answer", "result"]))
            if kind == "state":
                return {"state": {"k": draw(st.integers(0, 1))}}
            if kind in ("message", "answer"):
                return {kind: draw(st.sampled_from(["hi", {"$contains": "b"}]))}
            spec = {}
            if draw(st.booleans()):
                spec["name"] = draw(st.sampled_from(NAMES))
            spec["value"] = {"v": draw(st.integers(0, 1))}
            return {"result": spec}

        shape = draw(st.sampled_from(["call", "call", "observed", "observed", "any_of"]))
        m = {"id": f"m{j}", "_after": after}
        if after:
            m["after"] = [f"m{a}" for a in after]
        if draw(st.integers(0, 3)) == 0:
            m["optional"] = True
        if shape == "call":
            m.update(a_call())
            calls.append(j)
        elif shape == "observed":
            m.update(observed())
        else:
            m["any_of"] = [a_call(), observed()]
        milestones.append(m)
    for m in milestones:
        del m["_after"]
    n = draw(st.integers(0, 5))
    steps = [StepView(draw(st.sampled_from(NAMES)), draw(st.sampled_from([{}, {"x": 0}, {"x": 1}])),
                      {"v": draw(st.integers(0, 1))}, executed=draw(st.integers(0, 5)) > 0) for _ in range(n)]
    # model turns: each turn makes one or more calls; a call sees the results of earlier turns only
    seen, start = [], 0
    for i in range(n):
        if i and draw(st.booleans()):
            start = i
        seen.append(start)
    observed = {}
    for k in range(n + 1):
        texts = tuple(draw(st.lists(st.sampled_from(["hi", "bye", "ab"]), max_size=2)))
        answer = draw(st.sampled_from([None, "hi", "bye"])) if k == n else None
        result = None
        if k and steps[k - 1].executed and draw(st.integers(0, 4)) > 0:  # else a tool error: no result
            result = (steps[k - 1].name, steps[k - 1].result)
        if texts or answer or result:
            observed[k] = Observation(texts + ((answer,) if answer and answer not in texts else ()), answer, result)
    states = {k: {"k": draw(st.integers(0, 1))} for k in sorted(draw(st.sets(st.integers(0, n), max_size=2)) | {n})}
    return milestones, steps, draw(st.sampled_from(["forbid", "allow_read_only", "allow"])), states, observed, seen


def weights(n_steps, n_milestones):
    """The objective's order: required matched > forbidden unmatched > optional matched >
    unmatched, each weight more than all below it can add up to."""
    w_o = n_steps + 1
    w_f = w_o * (n_milestones + 1)
    return (w_f + 1) * (n_steps + 1), w_f, w_o


def brute_force(plan, steps, states, observed, seen):
    """The best score over every assignment, each checked against the rules directly."""
    ms, n = plan.milestones, len(steps)
    w_r, w_f, w_o = weights(n, len(ms))
    positions = sorted({*states, *observed})
    tools = seen_results(observed, seen)
    options = []
    for m in ms:
        opts = [None]
        opts += [("step", i) for i in range(n) if steps[i].executed and any(c.name == steps[i].name for c in m.calls)]
        # a last state milestone (not transient) holds only if it holds at the end
        opts += [("seen", k) for k in positions if m.observed and (m.id not in plan.final_only or k == n)]
        options.append(opts)
    best = None
    for choice in itertools.product(*options):
        used = [c[1] for c in choice if c and c[0] == "step"]
        if len(used) != len(set(used)):
            continue
        where = {m.id: c for m, c in zip(ms, choice, strict=True) if c}
        results = {mid: steps[c[1]].result for mid, c in where.items() if c[0] == "step"}

        def t(c):
            return 2 * c[1] + 1 if c[0] == "step" else 2 * c[1]

        valid = True
        for m, c in zip(ms, choice, strict=True):
            if not c:
                continue
            for a in m.after:
                p = where.get(a)
                if p is None or not (t(p) < t(c) or (p[0] == c[0] == "seen" and t(p) == t(c))):
                    valid = False
            if c[0] == "step":
                s = steps[c[1]]
                context = MatchContext(results=results, tool_results=tools(c[1]).tool_results)
                valid &= any(cp.name == s.name and cp.wrong_argument(s.arguments, context) is None for cp in m.calls)
            else:
                context = MatchContext(results=results)
                valid &= any(observe(p, states.get(c[1]), observed.get(c[1]), context) for p in m.observed)
        if not valid:
            continue
        score = sum((w_o if m.optional else w_r) for m, c in zip(ms, choice, strict=True) if c)
        score -= sum(1 + (0 if step_allowed(plan, s) else w_f) for i, s in enumerate(steps) if i not in used)
        best = score if best is None else max(best, score)
    return best


@settings(max_examples=300, deadline=None)
@given(problems())
def test_the_search_equals_brute_force(problem):
    milestones, steps, policy, states, observed, seen = problem
    plan = compile_plan(milestones, read_only=["a"], extra_calls=policy)
    result = align(plan, steps, states=states, observed=observed, seen=seen)
    n = len(steps)
    w_r, w_f, w_o = weights(n, len(plan.milestones))
    # the steps that brought a result milestone about are no extras, but the search scored them
    # as unmatched steps (they are found after it)
    brought = result.brought_about
    assert all(result.matched[mid] == ("result", i + 1) for i, mid in brought.items())
    forbidden = result.forbidden_unmatched + sum(1 for i in brought if not step_allowed(plan, steps[i]))
    score = (result.required_matched * w_r + result.optional_matched * w_o - forbidden * w_f
             - (result.unmatched + len(brought)))
    assert score == brute_force(plan, steps, states, observed, seen)
    for mid, (kind, _) in result.matched.items():  # what matched is named by its kind
        m = next(m for m in plan.milestones if m.id == mid)
        assert kind == "step" or kind in {"answer" if getattr(p, "final", False) else p.kind for p in m.observed}
    d = diagnose(plan, steps, result, final_state=states[n], states=states, observed=observed, seen=seen)
    assert d.passed == (not d.missing and result.forbidden_unmatched == 0)

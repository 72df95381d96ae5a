"""The alignment (toolgym.graders.alignment): worked cases, and a property test against brute
force on random small graphs and trajectories."""

import itertools
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.graders.alignment import StepView, align, diagnose, step_allowed
from toolgym.matchers import MatchContext, json_equal
from toolgym.milestones import call_key, calls_plan, compile_plan


def core(first):
    """A first error's step, type, milestone and argument (its tool and note left out)."""
    return {k: first[k] for k in ("step", "type", "milestone", "argument")}


def call(name, **arguments):
    return StepView(name, arguments, result=None)


def test_superset_where_greedy_first_fit_fails():
    # agentevals' superset pairs the reference call f(x=any) with the first f call and then finds
    # no partner for f(x=1); the optimal matching pairs them the other way round
    plan = compile_plan(
        [{"id": "any", "call": {"name": "f", "args": "ignore"}}, {"id": "one", "call": {"name": "f", "arguments": {"x": 1}}}],
        extra_calls="allow",
    )
    result = align(plan, [call("f", x=1), call("f", x=2)])
    assert result.required_matched == 2 and result.step_milestone == ["one", "any"]


def test_two_valid_orders_and_an_optional_step():
    plan = compile_plan([
        {"id": "find", "call": {"name": "find"}},
        {"id": "a", "after": ["find"], "call": {"name": "a"}},
        {"id": "b", "after": ["find"], "call": {"name": "b"}},
        {"id": "opt", "optional": True, "call": {"name": "o"}},
    ])
    for order in (["find", "a", "b"], ["find", "b", "a"], ["find", "o", "b", "a"]):
        result = align(plan, [call(n) for n in order])
        assert result.required_matched == 3 and result.unmatched == 0, order
    result = align(plan, [call("a"), call("find"), call("b")])
    assert result.required_matched == 2 and result.step_milestone == [None, "find", "b"]
    d = diagnose(plan, [call("a"), call("find"), call("b")], result)
    assert core(d.first_error) == {"step": 1, "type": "out_of_order", "milestone": "a", "argument": None}


def test_from_uses_the_result_of_the_step_that_matched():
    plan = compile_plan([
        {"id": "find", "call": {"name": "find"}},
        {"id": "email", "after": ["find"], "call": {"name": "email", "arguments": {"id": {"$from": "find", "path": "/0"}}}},
    ], extra_calls="allow")
    steps = [StepView("find", {}, [7]), StepView("find", {}, [9]), StepView("email", {"id": 9})]
    result = align(plan, steps)
    assert result.matched == {"find": ("step", 1), "email": ("step", 2)}
    steps = [StepView("find", {}, [7]), StepView("email", {"id": 8})]
    result = align(plan, steps)
    d = diagnose(plan, steps, result)
    assert core(d.first_error) == {"step": 2, "type": "wrong_arguments", "milestone": "email", "argument": "id"}


def test_state_milestone_against_the_final_state():
    plan = compile_plan([{"id": "t", "call": {"name": "type"}}, {"id": "s", "after": ["t"], "state": {"paper": "ab"}}])
    result = align(plan, [call("type")], states={1: {"paper": "ab"}})
    assert result.matched == {"t": ("step", 0), "s": ("state", 1)}
    result = align(plan, [call("type")], states={1: {"paper": "b"}})
    assert "s" not in result.matched


def test_the_policy_decides_which_extra_step_is_left_unmatched():
    plan = compile_plan(
        [{"id": "m", "any_of": [{"call": {"name": "get_a"}}, {"call": {"name": "set_b"}}]}],
        read_only=["get_*"], extra_calls="allow_read_only",
    )
    steps = [call("get_a"), call("set_b")]
    result = align(plan, steps)
    assert result.step_milestone == [None, "m"] and result.forbidden_unmatched == 0
    assert diagnose(plan, steps, result).passed


def test_beyond_the_limit_it_says_so():
    # one optional milestone among required ones: no plain assignment problem, so the search runs
    plan = compile_plan([{"id": f"m{i}", "call": {"name": "f"}, **({"optional": True} if i == 0 else {})}
                         for i in range(6)])
    exact = align(plan, [call("f")] * 6)
    beam = align(plan, [call("f")] * 6, limit=3)
    assert exact.exact and exact.required_matched == 5 and exact.optional_matched == 1
    assert not beam.exact and "beam search" in beam.method


def test_a_plain_assignment_problem_is_a_maximum_matching():
    # all required, no order: the agentevals unordered mode's plan; any maximum matching is optimal
    plan = compile_plan([{"id": f"m{i}", "call": {"name": "f", "arguments": {"x": {"$in": list(range(i, 3))}}}}
                         for i in range(3)])
    steps = [call("f", x=0), call("f", x=2), call("f", x=1), call("f", x=9)]
    result = align(plan, steps)
    assert result.required_matched == 3 and result.forbidden_unmatched == 1 and result.exact
    assert result.step_milestone == ["m0", "m2", "m1", None]


def test_sixteen_unordered_milestones_are_exact():
    plan = compile_plan([{"id": f"m{i}", "call": {"name": f"t{i}"}} for i in range(16)])
    steps = [call(f"t{i}") for i in reversed(range(16))]
    result = align(plan, steps)
    assert result.exact and result.required_matched == 16 and result.unmatched == 0


# ---- property test: the search against brute force ------------------------------------------

NAMES = ["a", "b"]


@st.composite
def problems(draw):
    n_m = draw(st.integers(1, 5))
    milestones = []
    for j in range(n_m):
        after = sorted(draw(st.sets(st.integers(0, j - 1), max_size=2))) if j else []
        ancestors = set()
        stack = list(after)
        while stack:
            a = stack.pop()
            if a not in ancestors:
                ancestors.add(a)
                stack.extend(milestones[a]["_after"])
        kind = draw(st.sampled_from(["call", "call", "call", "state", "any_of", "any_of"]))

        def a_call(ancestors=ancestors):
            spec = {"name": draw(st.sampled_from(NAMES))}
            how = draw(st.sampled_from(["none", "value", "from"] if ancestors else ["none", "value"]))
            if how == "value":
                spec["arguments"] = {"x": draw(st.integers(0, 1))}
            elif how == "from":
                calls = [a for a in ancestors if "state" not in milestones[a]
                         and not any("state" in o for o in milestones[a].get("any_of", []))]
                if calls:
                    spec["arguments"] = {"x": {"$from": f"m{draw(st.sampled_from(sorted(calls)))}", "path": "/v"}}
            return spec

        m = {"id": f"m{j}", "_after": after}
        if after:
            m["after"] = [f"m{a}" for a in after]
        if draw(st.booleans()):
            m["optional"] = True
        if kind == "call":
            m["call"] = a_call()
        elif kind == "state":
            m["state"] = {"k": draw(st.integers(0, 1))}
        else:  # two calls, or a call and a state
            second = {"state": {"k": draw(st.integers(0, 1))}} if draw(st.booleans()) else {"call": a_call()}
            m["any_of"] = [{"call": a_call()}, second]
        if ("state" in m or any("state" in o for o in m.get("any_of", []))) and draw(st.booleans()):
            m["transient"] = True
        milestones.append(m)
    for m in milestones:
        del m["_after"]
    n = draw(st.integers(0, 6))
    turns = sorted(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    steps = [
        StepView(
            draw(st.sampled_from(NAMES)),
            draw(st.sampled_from([{}, {"x": 0}, {"x": 1}])),
            {"v": draw(st.integers(0, 1))},
            executed=draw(st.integers(0, 5)) > 0,
            turn=turns[i],
        )
        for i in range(n)
    ]
    policy = draw(st.sampled_from(["forbid", "allow_read_only", "allow"]))
    # the state after some steps (always after the last one: the final state)
    states = {k: {"k": draw(st.integers(0, 1))} for k in range(1, n) if draw(st.booleans())}
    states[n] = {"k": draw(st.integers(0, 1))}
    return milestones, steps, policy, states


def weights(n_steps, n_milestones):
    """The objective's weights: required matched > forbidden unmatched > optional matched >
    unmatched (docs/stepwise-grader.md, "The alignment")."""
    w_o = n_steps + 1
    w_f = w_o * (n_milestones + 1)
    w_r = (w_f + 1) * (n_steps + 1)
    return w_r, w_f, w_o


def brute_force(plan, steps, states):
    """The best score over every assignment, checked against the rules directly."""
    ms = plan.milestones
    n = len(steps)
    w_r, w_f, w_o = weights(n, len(ms))
    later = {a for m in ms for a in m.after}
    best = None
    # each milestone: None, a step index (call) or a known position (state)
    options = []
    for m in ms:
        opts = [None]
        opts += [("step", i) for i in range(n) if steps[i].executed and any(c.name == steps[i].name for c in m.calls)]
        if m.states:
            # a state milestone no other comes after must hold at the end, unless transient
            last_only = m.id not in later and not m.transient
            opts += [("state", k) for k in states if not last_only or k == n]
        options.append(opts)
    for choice in itertools.product(*options):
        used = [c[1] for c in choice if c and c[0] == "step"]
        if len(used) != len(set(used)):
            continue
        where = {m.id: c for m, c in zip(ms, choice, strict=True) if c}
        results = {mid: steps[c[1]].result for mid, c in where.items() if c[0] == "step"}
        context = MatchContext(results=results)

        def t(c):
            return 2 * c[1] + 1 if c[0] == "step" else 2 * c[1]

        valid = True
        for m, c in zip(ms, choice, strict=True):
            if not c:
                continue
            for a in m.after:
                p = where.get(a)
                if p is None or not (t(p) < t(c) or (p[0] == c[0] == "state" and t(p) == t(c))):
                    valid = False
            if c[0] == "step":
                s = steps[c[1]]
                valid &= any(cp.name == s.name and cp.wrong_argument(s.arguments, context) is None for cp in m.calls)
                # $from reads a result returned in an earlier model turn
                valid &= all(r in where and steps[where[r][1]].turn < s.turn for r in m.refs)
            else:
                valid &= any(sp.wrong_key(states[c[1]], context) is None for sp in m.states)
        if not valid:
            continue
        score = 0
        for m, c in zip(ms, choice, strict=True):
            if c:
                score += w_o if m.optional else w_r
        for i, s in enumerate(steps):
            if i not in used:
                score -= 1 + (0 if step_allowed(plan, s) else w_f)
        best = score if best is None else max(best, score)
    return best


def score_of(result, n_steps, n_milestones):
    w_r, w_f, w_o = weights(n_steps, n_milestones)
    return (result.required_matched * w_r + result.optional_matched * w_o - result.forbidden_unmatched * w_f
            - result.unmatched)


@settings(max_examples=400, deadline=None)
@given(problems())
def test_the_search_equals_brute_force(problem):
    milestones, steps, policy, states = problem
    plan = compile_plan(milestones, read_only=["a"], extra_calls=policy)
    result = align(plan, steps, states=states)
    assert score_of(result, len(steps), len(plan.milestones)) == brute_force(plan, steps, states)
    # the alignment it returns is itself valid: each step at most once, `after` respected
    steps_used = [pos for kind, pos in result.matched.values() if kind == "step"]
    assert len(steps_used) == len(set(steps_used))
    for m in plan.milestones:
        if m.id in result.matched:
            kind, pos = result.matched[m.id]
            for a in m.after:
                pk, pp = result.matched[a]
                here = 2 * pos + 1 if kind == "step" else 2 * pos
                there = 2 * pp + 1 if pk == "step" else 2 * pp
                assert there < here or (pk == kind == "state" and there == here)
            if kind == "step":
                for r in m.refs:
                    assert steps[result.matched[r][1]].turn < steps[pos].turn
    d = diagnose(plan, steps, result, final_state=states[len(steps)])
    assert d.passed == (not d.missing and result.forbidden_unmatched == 0)


@st.composite
def chains(draw):
    n_m = draw(st.integers(1, 5))
    milestones = []
    for j in range(n_m):
        spec = {"id": f"m{j}", "call": {"name": draw(st.sampled_from(NAMES))}}
        if draw(st.booleans()):
            spec["call"]["arguments"] = {"x": draw(st.integers(0, 1))}
        if j:
            spec["after"] = [f"m{j - 1}"]
        if draw(st.integers(0, 3)) == 0:
            spec["optional"] = True
        milestones.append(spec)
    steps = [StepView(draw(st.sampled_from(NAMES)), draw(st.sampled_from([{}, {"x": 0}, {"x": 1}])), None,
                      executed=draw(st.integers(0, 5)) > 0) for _ in range(draw(st.integers(0, 7)))]
    return milestones, steps, draw(st.sampled_from(["forbid", "allow_read_only", "allow"]))


@settings(max_examples=300, deadline=None)
@given(chains())
def test_the_chain_programme_equals_brute_force(problem):
    milestones, steps, policy = problem
    plan = compile_plan(milestones, read_only=["a"], extra_calls=policy)
    result = align(plan, steps)
    assert score_of(result, len(steps), len(plan.milestones)) == brute_force(plan, steps, {})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, 1.0, 1.5]) | st.sampled_from(["a", "b"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2),
    max_leaves=4,
)
ARGUMENTS = st.dictionaries(st.sampled_from(["x", "y"]), JSON_VALUES, max_size=2)


@given(ARGUMENTS, ARGUMENTS)
def test_call_key_is_equality_by_value(a, b):
    assert (call_key(a) == call_key(b)) == json_equal(a, b)


@given(
    st.lists(st.tuples(st.sampled_from(NAMES), ARGUMENTS), min_size=1, max_size=4),
    st.lists(st.tuples(st.sampled_from(NAMES), ARGUMENTS, st.booleans()), max_size=6),
    st.booleans(),
    st.sampled_from(["exact", "subset", "superset", "ignore"]),
)
def test_a_plan_of_reference_calls_aligns_as_its_compiled_milestones(reference, made, chain, args_mode):
    """calls_plan builds its plan without the JSON compiler: the same calls written as
    milestones with {"$literal": value} arguments align and diagnose alike."""
    direct = calls_plan([SimpleNamespace(name=n, arguments=a) for n, a in reference], chain=chain,
                        args_mode=args_mode)
    written = compile_plan([
        {"id": f"call{i + 1}", "call": {"name": n, "arguments": {k: {"$literal": v} for k, v in a.items()},
                                        "args": args_mode},
         **({"after": [f"call{i}"]} if chain and i else {})}
        for i, (n, a) in enumerate(reference)
    ])
    steps = [StepView(n, a, None, executed=ok) for n, a, ok in made]
    one, two = align(direct, steps), align(written, steps)
    assert (one.step_milestone, one.matched, one.unmatched) == (two.step_milestone, two.matched, two.unmatched)
    assert diagnose(direct, steps, one).first_error == diagnose(written, steps, two).first_error


PLAIN = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, 1.5, -2.0]),
                  st.sampled_from(["a", "b", ""]), st.lists(st.integers(0, 1), max_size=1))


@given(st.dictionaries(st.sampled_from(["x", "y", "z"]), PLAIN, max_size=3),
       st.dictionaries(st.sampled_from(["x", "y", "w"]), PLAIN, max_size=3),
       st.sampled_from(["exact", "subset", "superset"]))
def test_plain_argument_checks_equal_the_matchers(expected, actual, args):
    """The fast check of plain expected values (strings, integers, null) names the same
    argument as the matchers do ({"$in": [v]} is the same equality through an operator)."""
    from toolgym.matchers import compile_matcher
    from toolgym.milestones import CallPattern

    plain = CallPattern("f", tuple((k, compile_matcher({"$literal": v}, "t")) for k, v in expected.items()), args)
    slow = CallPattern("f", tuple((k, compile_matcher({"$in": [{"$literal": v}]}, "t")) for k, v in expected.items()), args)
    assert plain.wrong_argument(actual) == slow.wrong_argument(actual)


def test_step_views_are_whole_step_views():
    # step_views builds StepView tuples directly (tuple.__new__): every field in its place
    from toolgym.graders.trajectory import step_views
    from toolgym.records import ModelStep, ToolCall, ToolStep, Trajectory, UserStep

    traj = Trajectory(example_id="e", env="x", agent="a", status="completed", steps=[
        UserStep(text="hi", turn=1),
        ModelStep(tool_calls=[ToolCall(id="c0", name="f", arguments={"a": 1})]),
        ToolStep(call_id="c0", name="f", arguments={"a": 1}, output='{"v": 2}', state_patch=[
            {"op": "replace", "path": "/paper", "value": "a"}]),
    ])
    (view,) = step_views(traj)
    assert view == StepView("f", {"a": 1}, {"v": 2}, True, False, False, 0, frozenset({"paper"}), 1)
    assert len(view) == len(StepView._fields)

"""The milestones of the built-in relational_data examples whose calls may come in several
orders: every valid order passes, a value from memory or a wrong id fails, and the LangChain
fields are untouched."""

from __future__ import annotations

import itertools

import pytest

from toolgym.data import load_examples
from toolgym.graders.steps import StepRatio, StepsExact
from toolgym.graders.trajectory import TrajectoryMatch
from toolgym.plugins import get_benchmark
from toolgym.records import ToolStep, Trajectory

BENCH = get_benchmark("relational_data")
EXAMPLES = [ex for ex in load_examples(BENCH.datasets / "test.jsonl") if ex.milestones is not None]


def play(example, calls):
    """Run ``calls`` on a fresh environment, as an agent would, into a trajectory."""
    env = BENCH.environment()
    env.reset(example)
    steps = []
    try:
        for k, call in enumerate(calls):
            result = env.call(call.name, call.arguments)
            steps.append(ToolStep(call_id=str(k), name=call.name, arguments=call.arguments, output=result.output, error=result.error))
        state = env.read_state()
    finally:
        env.close()
    return Trajectory(example_id=example.id, env="relational_data", agent="t", status="completed", steps=steps, final_state=state)


def valid_orders(example):
    """Every order of the reference calls that keeps each $from after its source."""
    plan = example.plan
    position = {m.id: k for k, m in enumerate(plan.milestones)}
    for order in itertools.permutations(range(len(plan.milestones))):
        seen = set()
        ok = True
        for k in order:
            if any(position[a] not in seen for a in plan.milestones[k].after):
                ok = False
                break
            seen.add(k)
        if ok:
            yield order


def test_the_examples_with_several_orders_have_milestones():
    assert [ex.id for ex in EXAMPLES] == [f"rd-{i}" for i in range(18, 27)]
    assert all(not ex.order_matters for ex in EXAMPLES)
    assert all(any(m.refs for m in ex.plan.milestones) for ex in EXAMPLES)  # ids are looked up


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda ex: ex.id)
def test_every_valid_order_passes_and_langchain_figures_do_not_change(example):
    grader = TrajectoryMatch()
    orders = list(valid_orders(example))
    assert len(orders) >= 2  # several orders are valid
    for order in orders:
        calls = [example.expected_calls[k] for k in order]
        traj = play(example, calls)
        score = grader.grade(example, traj)
        assert score.value == 1.0, (order, score.explanation)
        # LangChain's multiset comparison (order_matters false) and step ratio, as before
        assert StepsExact().grade(example, traj).value == 1.0
        assert StepRatio().grade(example, traj).value == 1.0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda ex: ex.id)
def test_an_id_not_read_from_the_lookup_fails(example):
    calls = list(example.expected_calls)
    k = next(k for k, m in enumerate(example.plan.milestones) if m.refs)
    key = next(key for key, matcher in example.plan.milestones[k].calls[0].arguments if matcher.refs)
    wrong = calls[k].model_copy(update={"arguments": {**calls[k].arguments, key: calls[k].arguments[key] + 1}})
    calls[k] = wrong
    score = TrajectoryMatch().grade(example, play(example, calls))
    assert score.value == 0.0
    first = score.details["first_error"]
    assert first["type"] == "wrong_arguments" and first["step"] == k + 1 and first["argument"] == key

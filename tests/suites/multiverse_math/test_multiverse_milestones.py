"""The milestones of the built-in multiverse_math examples whose calls may come in several
orders: both orders of independent sub-expressions pass; a number not taken from the tool's
result fails at that step; the LangChain fields are untouched."""

from __future__ import annotations

import pytest

from toolgym.data import load_examples
from toolgym.graders.steps import StepRatio, StepsExact
from toolgym.graders.trajectory import TrajectoryMatch
from toolgym.plugins import get_benchmark
from toolgym.records import ToolStep, Trajectory

BENCH = get_benchmark("multiverse_math")
EXAMPLES = [ex for ex in load_examples(BENCH.datasets / "test.jsonl") if ex.milestones is not None]


def play(example, order, tamper=None):
    """Run the reference calls in ``order`` on a fresh environment, each argument that the
    milestones take from an earlier call filled in from that call's real output."""
    env = BENCH.environment()
    env.reset(example)
    outputs: dict[str, str] = {}
    steps = []
    try:
        for n, k in enumerate(order):
            milestone = example.milestones[k]
            arguments = dict(example.expected_calls[k].arguments)
            for key, spec in milestone["call"]["arguments"].items():
                if isinstance(spec, dict) and "$from" in spec:
                    arguments[key] = float(outputs[spec["$from"]])
            if tamper == k:
                key = next(iter(arguments))
                arguments[key] = arguments[key] + 0.5
            result = env.call(milestone["call"]["name"], arguments)
            outputs[milestone["id"]] = result.output
            steps.append(ToolStep(call_id=str(n), name=milestone["call"]["name"], arguments=arguments, output=result.output))
    finally:
        env.close()
    return Trajectory(example_id=example.id, env="multiverse_math", agent="t", status="completed", steps=steps)


def test_the_examples_with_several_orders_have_milestones():
    assert [ex.id for ex in EXAMPLES] == ["mm-14", "mm-15", "mm-22", "mm-23", "mm-25"]
    assert all(not ex.order_matters for ex in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda ex: ex.id)
def test_both_orders_pass_and_a_value_not_from_the_tool_fails(example):
    n = len(example.expected_calls)
    written = list(range(n))
    swapped = [1, 0, *range(2, n)]  # the two independent sub-expressions come first in each
    for order in (written, swapped):
        traj = play(example, order)
        assert TrajectoryMatch().grade(example, traj).value == 1.0
        assert StepsExact().grade(example, traj).value == 1.0 and StepRatio().grade(example, traj).value == 1.0
    last = n - 1  # its arguments come from earlier calls
    score = TrajectoryMatch().grade(example, play(example, written, tamper=last))
    assert score.value == 0.0
    assert score.details["first_error"]["type"] == "wrong_arguments" and score.details["first_error"]["step"] == n

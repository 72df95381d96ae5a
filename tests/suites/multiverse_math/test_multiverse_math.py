"""multiverse_math: each altered operation, tool errors instead of crashes, expression
evaluation, the published answers, and the oracle end to end."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.cli import main
from toolgym.data import DatasetError, load_examples
from toolgym.plugins import get_benchmark
from toolgym.records import Example
from toolgym.runio import read_scores, read_trajectories
from toolgym.suites.multiverse_math.environment import MultiverseMath

PUBLISHED = REFERENCE_DATA / "langchain_tool_usage" / "multiverse_math_dataset.json"
needs_published = pytest.mark.skipif(not PUBLISHED.exists(), reason="reference data absent")


@pytest.fixture
def env():
    environment = MultiverseMath()
    environment.reset(Example(id="t", input="q"))
    return environment


def value(env: MultiverseMath, tool_name: str, /, **arguments) -> float:
    result = env.call(tool_name, arguments)
    assert not result.error, result.output
    return float(result.output)


@pytest.mark.parametrize(
    "tool_name,arguments,expected",
    [
        ("multiply", {"a": 3, "b": 4}, 1.1 * 3 * 4),
        ("divide", {"a": 3, "b": 4}, 0.5 * 3 / 4),
        ("add", {"a": 3, "b": 4}, 3 + 4 + 1.2),
        ("subtract", {"a": 3, "b": 4}, 3 - 4 - 3),
        ("power", {"a": 3, "b": 4}, 3.0**6),
        ("power", {"a": -2, "b": 1}, -8.0),
        ("log", {"a": 100, "base": 10}, math.log(100) / math.log(11.5)),
        ("log", {"a": 8, "base": -3.5}, math.log(8) / math.log(2)),
        ("sin", {"radians": 0.3}, math.cos(0.3)),
        ("cos", {"radians": 0.3}, math.sin(0.3)),
        ("pi", {}, math.e),
        ("negate", {"a": 5.5}, 5.5),
    ],
)
def test_altered_operations(env, tool_name, arguments, expected):
    assert value(env, tool_name, **arguments) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "tool_name,arguments,message",
    [
        ("divide", {"a": 1, "b": 0}, "division by zero"),
        ("log", {"a": 0, "base": 10}, "non-positive"),
        ("log", {"a": -3, "base": 10}, "non-positive"),
        ("log", {"a": 5, "base": -0.5}, "undefined"),  # |base + 1.5| = 1
        ("log", {"a": 5, "base": -1.5}, "undefined"),  # |base + 1.5| = 0
        ("power", {"a": -8, "b": 0.5}, "not a real number"),
        ("power", {"a": 0, "b": -3}, "not a real number"),
        ("power", {"a": 10, "b": 400}, "overflows"),
        ("multiply", {"a": 1e308, "b": 10}, "not a finite"),
        ("add", {"a": 1.7e308, "b": 1.7e308}, "not a finite"),
        ("add", {"a": "nan", "b": 1}, "a string is not a number"),  # never read as float('nan')
        ("sin", {"radians": "inf"}, "a string is not a number"),
        ("multiply", {"a": "three", "b": 1}, "invalid arguments"),
        ("add", {"a": 1}, "invalid arguments"),
    ],
)
def test_bad_operations_are_error_observations(env, tool_name, arguments, message):
    result = env.call(tool_name, arguments)  # never raises
    assert result.error and message in result.output


def test_evaluate_gives_post_order_calls_with_computed_literals():
    result, calls = MultiverseMath.evaluate("multiply(7, add(1, 2))")
    assert calls == [
        {"name": "add", "arguments": {"a": 1, "b": 2}},
        {"name": "multiply", "arguments": {"a": 7, "b": 1 + 2 + 1.2}},
    ]
    assert result == 1.1 * 7 * (1 + 2 + 1.2)
    _, calls = MultiverseMath.evaluate("divide(sin(1.5), cos(radians=1.5))")
    assert [c["name"] for c in calls] == ["sin", "cos", "divide"]
    assert MultiverseMath.evaluate("negate(-5)") == (-5, [{"name": "negate", "arguments": {"a": -5}}])


@pytest.mark.parametrize(
    "expression,message",
    [
        ("__import__('os').system('true')", "only tool calls"),
        ("add(1, 2) + 3", "only tool calls"),
        ("exp(1)", "unknown function"),
        ("add(1)", "missing"),
        ("add(1, 2, 3)", "takes 2"),
        ("add(1, c=2)", "bad keyword"),
        ("add(1, 'x')", "only tool calls"),
        ("divide(1, subtract(3, 0))", "fails: division by zero"),
        ("add(1,", "cannot parse"),
    ],
)
def test_evaluate_rejects_what_it_cannot_compute(expression, message):
    with pytest.raises(ValueError, match=message):
        MultiverseMath.evaluate(expression)


def test_langchain_records_follow_the_published_order_default(tmp_path):
    record = {"question": "divide sin 1.5 by cos 1.5", "answer": None, "expected_steps": ["sin", "cos", "divide"],
              "answer_expression": "divide(sin(1.5), cos(1.5))"}
    doc = {"examples": [record, {**record, "question": "unordered", "order_matters": False}]}
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(doc))
    ordered, unordered = load_examples(path, get_benchmark("multiverse_math"))
    assert ordered.order_matters is True and unordered.order_matters is False


def test_order_matters_only_for_chains():
    chain = MultiverseMath.example_from_expression("a", "q", "negate(add(multiply(2, 3), 4))")
    branch = MultiverseMath.example_from_expression("b", "q", "add(multiply(2, 3), multiply(4, 5))")
    assert chain.order_matters and chain.metadata["difficulty"] == 3 and chain.metadata["n_steps"] == 3
    assert not branch.order_matters and branch.metadata["difficulty"] == 2 and branch.metadata["n_steps"] == 3


@needs_published
def test_every_published_answer_is_reproduced_by_our_tools():
    doc = json.loads(PUBLISHED.read_text())
    assert len(doc["examples"]) == 20
    for record in doc["examples"]:
        result, calls = MultiverseMath.evaluate(record["answer_expression"])
        assert math.isclose(result, record["answer"], rel_tol=1e-9), record["question"]
        assert [c["name"] for c in calls] == record["expected_steps"], record["question"]
        # replaying the derived calls through the tool interface gives the same answer
        env = MultiverseMath()
        env.reset(Example(id="r", input=record["question"]))
        outputs = [env.call(c["name"], c["arguments"]) for c in calls]
        assert not any(o.error for o in outputs)
        assert math.isclose(float(outputs[-1].output), record["answer"], rel_tol=1e-9)


@needs_published
def test_loader_derives_expected_calls_and_checks_the_published_answer(tmp_path):
    examples = load_examples(PUBLISHED, get_benchmark("multiverse_math"))
    assert all(ex.expected_calls and ex.metadata["answer_expression"] for ex in examples)
    by_question = {ex.input: ex for ex in examples}
    assert by_question["Add 2 and 3"].reference == 6.2
    # the record does not say: the published default (order matters) holds, chain or not
    assert by_question["after calculating the sin of 1.5 radians, divide the result by cos of 1.5 radians"].order_matters is True
    doc = json.loads(PUBLISHED.read_text())
    doc["examples"][4]["answer"] = 21  # the ordinary-math answer, not the multiverse one
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=r"examples\[4\].*not the published 21"):
        load_examples(bad, get_benchmark("multiverse_math"))


@needs_published
def test_oracle_on_the_published_file_scores_one(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--env", "multiverse_math", "--agent", "oracle", "--dataset", str(PUBLISHED),
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    scores = read_scores(out)
    assert {s.grader for s in scores} == {"steps_exact", "step_ratio", "answer_match"}
    assert len(scores) == 60 and all(s.value == 1.0 for s in scores)


def test_oracle_on_the_builtin_test_set_scores_one(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--env", "multiverse_math", "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    assert all(t.status == "completed" for t in read_trajectories(out))
    scores = read_scores(out)
    # the 5 examples with several valid orders also carry milestones: the milestone graders join
    milestone_graders = {"trajectory_match", "milestone_progress", "step_precision", "step_recall"}
    assert len([s for s in scores if s.grader not in milestone_graders]) == 3 * 25
    assert len([s for s in scores if s.grader in milestone_graders]) == 4 * 5
    assert all(s.value == 1.0 for s in scores)


# --- datasets ------------------------------------------------------------------------------


def test_builtin_sets_have_the_promised_shape_and_their_expressions_match():
    from toolgym.plugins import get_benchmark

    folder = get_benchmark("multiverse_math").datasets
    mm = load_examples(folder / "test.jsonl")
    assert len(mm) >= 20 and all(ex.metadata["answer_expression"] for ex in mm)
    assert max(ex.metadata["n_steps"] for ex in mm) >= 4
    for name in ("test", "ladder"):
        for ex in load_examples(folder / f"{name}.jsonl"):
            result, calls = MultiverseMath.evaluate(ex.metadata["answer_expression"])
            assert math.isclose(result, ex.reference, rel_tol=1e-12), ex.id
            assert calls == [c.model_dump() for c in ex.expected_calls], ex.id


@pytest.mark.skipif(not (REFERENCE_DATA / "langchain_tool_usage").exists(), reason="reference data absent")
def test_langchain_file_loads_with_derived_calls():
    from toolgym.plugins import get_benchmark

    path = REFERENCE_DATA / "langchain_tool_usage" / "multiverse_math_dataset.json"
    doc = json.loads(path.read_text())
    generic = load_examples(path)
    examples = load_examples(path, get_benchmark("multiverse_math"))
    assert len(generic) == len(examples) == len(doc["examples"]) >= 20
    assert all(ex.expected_calls for ex in examples)

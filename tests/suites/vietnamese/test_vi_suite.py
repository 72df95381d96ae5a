"""The suite's declaration (benchmarks, graders and their measures, built on the public API
only) and its report tables computed from a run in memory."""

import ast
from pathlib import Path

import toolgym
import toolgym.suites.vietnamese as suite
from toolgym.plugins import get_benchmark, get_grader_class
from toolgym.suites.vietnamese.report import choice_report, last_word_report

ALLOWED = {"toolgym", "toolgym.data", "toolgym.graders", "toolgym.logprobs", "toolgym.stats"}


def test_the_suite_declares_three_benchmarks_with_their_graders():
    assert suite.SUITE.name == "vietnamese"
    assert [b.name for b in suite.SUITE.benchmarks] == ["exam_vi", "xcopa_vi", "lambada_vi"]
    assert get_benchmark("exam_vi").graders == get_benchmark("xcopa_vi").graders == ("choice_accuracy",)
    assert get_benchmark("lambada_vi").graders == ("last_word_accuracy", "target_nll")
    for benchmark in suite.SUITE.benchmarks:
        assert get_benchmark(benchmark.name) is benchmark
        assert (benchmark.datasets / "README.md").is_file() and benchmark.builtin_datasets() == []
        assert benchmark.load_dataset is not None and benchmark.report is not None


def test_graders_declare_what_they_measure():
    for name in ("choice_accuracy", "choice_accuracy_norm", "last_word_accuracy"):
        measure = get_grader_class(name).measure
        assert (measure.kind, measure.direction, measure.pass_if, measure.threshold) == ("binary", "higher", ">=", 1.0)
        assert measure.reference
    nll = get_grader_class("target_nll").measure
    assert (nll.kind, nll.direction, nll.pass_fail) == ("continuous", "lower", False)


def test_the_suite_imports_only_the_public_api_and_a_few_core_modules():
    folder = Path(suite.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("toolgym"):
                module = node.module
                assert module in ALLOWED or module.startswith("toolgym.suites.vietnamese"), (path.name, module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("toolgym.") for a in node.names), path.name


def example(qid, subject, n_options=4):
    options = dict(zip("ABCD"[:n_options], ("a", "b", "c", "d"), strict=False))
    return toolgym.Example(id=qid, input="?", reference="A", metadata={"options": options, "subject": subject})


def score(qid, value, trial=0, grader="choice_accuracy", **details):
    outcome = "correct" if value else "wrong"
    return toolgym.Score(example_id=qid, trial=trial, grader=grader, value=value, details={"outcome": outcome} | details)


def trajectory(qid, trial=0, status="completed"):
    return toolgym.Trajectory(example_id=qid, trial=trial, env="exam_vi", agent="direct", status=status)


def make_run(scores, examples, trajectories=()):
    record = toolgym.RunRecord(env="exam_vi")
    return toolgym.Run(None, record, list(trajectories), scores, examples)


def test_trials_are_clustered_by_example_and_problems_are_noted():
    examples = {"a": example("a", "Biology"), "b": example("b", "History", n_options=2)}
    scores = [score("a", 1.0), score("a", 1.0, trial=1), score("b", 0.0), score("b", 1.0, trial=1),
              score("ghost", 1.0)]
    trajs = [trajectory("a"), trajectory("a", 1), trajectory("b"), trajectory("b", 1), trajectory("c", status="error")]
    (table,) = choice_report(make_run(scores[:4], examples, trajs))
    assert table.title == "exam_vi: choice_accuracy by subject"
    # mean 0.75 over 4 values; clustered SE sqrt(2/1 · (0.5² + 0.5²)) / 4 = 0.25
    assert table.rows[0] == {"subject": "all", "accuracy ± s.e.": "0.750 ± 0.250", "n": 4, "correct": 3,
                             "wrong": 1, "unanswered": 0, "chance": "0.375"}
    assert [(r["subject"], r["chance"]) for r in table.rows[1:]] == [("Biology", "0.250"), ("History", "0.500")]
    assert table.notes == ["1 trajectory(ies) ended in error and are not scored (see `show --failed`)"]
    (table,) = choice_report(make_run(scores, examples))
    assert table.rows[0]["n"] == 5 and "1 scored example(s) not in the dataset" in table.notes[0]


def test_without_the_dataset_only_the_overall_row_is_reported():
    (table,) = choice_report(make_run([score("a", 1.0), score("b", 0.0)], None))
    assert table.title == "exam_vi: choice_accuracy"
    assert table.rows == [{"subject": "all", "accuracy ± s.e.": "0.500 ± 0.354", "n": 2, "correct": 1,
                           "wrong": 1, "unanswered": 0}]
    assert choice_report(make_run([], None)) == [] and last_word_report(make_run([], None)) == []

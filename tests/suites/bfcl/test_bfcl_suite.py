"""The ``bfcl`` suite end to end: entries loaded from files in the leaderboard's layout, episodes
with native tool calls and with the prompting format, the result and score files, result files
of other tools graded (decoded lists and prompting strings alike), bad input named; and, on the
real data when it is present, the oracle on all 13 categories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym import DatasetError, evaluate
from toolgym.cli import main
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runio import read_scores
from toolgym.suites.bfcl.checker import unsatisfiable
from toolgym.suites.bfcl.data import CATEGORIES, load_examples

BFCL = REFERENCE_DATA / "bfcl_v4"
needs_data = pytest.mark.skipif(not (BFCL / "BFCL_v4_simple_python.json").exists(), reason="BFCL v4 data not present at ../shared/data")

WEATHER = {"name": "weather.get", "description": "Weather of a city.", "parameters": {"type": "dict", "properties": {
    "city": {"type": "string", "description": "City."}, "days": {"type": "integer", "description": "Days."}}, "required": ["city"]}}
AREA = {"name": "area", "description": "Area of a triangle.", "parameters": {"type": "dict", "properties": {
    "base": {"type": "float", "description": "Base."}, "height": {"type": "integer", "description": "Height."}}, "required": ["base", "height"]}}


def q(text: str) -> list:
    return [[{"role": "user", "content": text}]]


def write_lines(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.fixture
def simple(tmp_path) -> Path:
    """Two simple_python entries with different functions, answers beside them."""
    data = tmp_path / "data"
    write_lines(data / "possible_answer" / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_0", "ground_truth": [{"weather.get": {"city": ["Paris", "Paris, France"], "days": ["", 3]}}]},
        {"id": "simple_python_1", "ground_truth": [{"area": {"base": [2.5], "height": [4]}}]},
    ])
    return write_lines(data / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_0", "question": q("Weather in Paris?"), "function": [WEATHER]},
        {"id": "simple_python_1", "question": q("Area with base 2.5 and height 4?"), "function": [AREA]},
    ])


@pytest.fixture
def irrelevance(tmp_path) -> Path:
    return write_lines(tmp_path / "data" / "BFCL_v4_irrelevance.json", [
        {"id": f"irrelevance_{i}", "question": q(text), "function": [WEATHER]}
        for i, text in enumerate(["Who wrote Hamlet?", "What is 2+2?", "Sing a song."])
    ])


BOUND: list = []


class RecordingModel(ScriptedChatModel):
    """A scripted model that notes the tool names it is bound to (in ``BOUND``)."""

    def bind_tools(self, tools, **kwargs):
        BOUND.append(sorted(t.name for t in tools))
        return self


def test_loading_gives_the_question_the_functions_and_the_oracle_answer(simple):
    examples = load_examples(simple, {})
    first = examples[0]
    assert first.input == [{"role": "user", "content": "Weather in Paris?"}]
    assert first.metadata["category"] == "simple_python" and first.metadata["language"] == "python"
    assert [(c.name, c.arguments) for c in first.expected_calls] == [("weather_get", {"city": "Paris"})]
    assert unsatisfiable(examples) == {}


def test_answers_elsewhere_are_given_with_the_answers_option(simple, tmp_path):
    moved = tmp_path / "elsewhere.json"
    (simple.parent / "possible_answer" / simple.name).rename(moved)
    with pytest.raises(DatasetError, match="possible_answer.*--answers"):
        load_examples(simple, {})
    assert len(load_examples(simple, {"answers": str(moved)})) == 2
    out = tmp_path / "run"
    assert main(["run", "--env", "bfcl", "--agent", "oracle", "--dataset", str(simple), "--answers", str(moved),
                 "--out", str(out), "--no-progress"]) == 0
    assert all(s.value == 1.0 for s in read_scores(out) if s.grader == "bfcl_accuracy")
    assert main(["grade", str(out)]) == 0  # run.json keeps --answers for re-grading


def test_bad_files_are_named_with_their_line(simple, tmp_path):
    bad = write_lines(tmp_path / "bad" / "BFCL_v4_simple_python.json", [{"id": "simple_python_0", "question": "hi", "function": []}])
    write_lines(tmp_path / "bad" / "possible_answer" / "BFCL_v4_simple_python.json", [{"id": "simple_python_0", "ground_truth": []}])
    with pytest.raises(DatasetError, match=r"BFCL_v4_simple_python.json:1: 'question'"):
        load_examples(bad, {})
    multi = write_lines(tmp_path / "multi" / "BFCL_v4_simple_python.json", [{"id": "simple_python_0", "question": q("a") + q("b"), "function": [WEATHER]}])
    write_lines(tmp_path / "multi" / "possible_answer" / "BFCL_v4_simple_python.json", [{"id": "simple_python_0", "ground_truth": []}])
    with pytest.raises(DatasetError, match="2 turns"):
        load_examples(multi, {})
    result = tmp_path / "r.json"
    result.write_text('{"id": "simple_python_0", "result": []}\n{"id": "nope", "result": []}\n')
    assert main(["grade", "--env", "bfcl", "--result", str(result), "--dataset", str(simple), "--out", str(tmp_path / "g")]) == 2
    result.write_text('{"id": "simple_python_0"}\n')
    assert main(["grade", "--env", "bfcl", "--result", str(result), "--dataset", str(simple), "--out", str(tmp_path / "g")]) == 2


def test_native_calls_each_entry_bound_to_its_own_functions_and_the_published_files(simple, tmp_path):
    BOUND.clear()
    model = RecordingModel(by_input={
        "Weather in Paris?": [{"tool_calls": [{"name": "weather_get", "args": {"city": "paris, france", "days": 3}}]}],
        "Area with base 2.5 and height 4?": [{"tool_calls": [{"name": "area", "args": {"base": 2.5, "height": 4.0}}]}],
    })
    out = tmp_path / "run"
    result = evaluate("bfcl", model=model, dataset=str(simple), out=out)
    assert BOUND == [["weather_get"], ["area"]]
    assert all(len(t.model_steps) == 1 and t.status == "completed" for t in result.trajectories)
    scores = {(s.example_id, s.grader): s for s in result.scores}
    assert scores["simple_python_0", "bfcl_accuracy"].value == 1.0
    wrong = scores["simple_python_1", "bfcl_accuracy"]
    assert wrong.value == 0.0 and wrong.details["error_type"] == "type_error:simple" and wrong.details["param"] == "height"
    assert lines(out / "BFCL_v4_simple_python_result.json") == [
        {"id": "simple_python_0", "result": [{"weather_get": {"city": "paris, france", "days": 3}}]},
        {"id": "simple_python_1", "result": [{"area": {"base": 2.5, "height": 4.0}}]},
    ]
    score_file = lines(out / "BFCL_v4_simple_python_score.json")
    assert score_file[0] == {"accuracy": 0.5, "correct_count": 1, "total_count": 2}
    assert [(r["id"], r["error_type"]) for r in score_file[1:]] == [("simple_python_1", "type_error:simple")]


def test_an_exported_result_file_grades_to_the_same_score_file(simple, tmp_path):
    model = ScriptedChatModel(by_input={
        "Weather in Paris?": [{"tool_calls": [{"name": "weather_get", "args": {"city": "Lyon"}}]}],
        "Area with base 2.5 and height 4?": [{"tool_calls": [{"name": "area", "args": {"base": 2.5, "height": 4}}]}],
    })
    evaluate("bfcl", model=model, dataset=str(simple), out=tmp_path / "run")
    exported = tmp_path / "run" / "BFCL_v4_simple_python_result.json"
    assert main(["grade", "--env", "bfcl", "--result", str(exported), "--dataset", str(simple), "--out", str(tmp_path / "again")]) == 0
    assert lines(tmp_path / "again" / "BFCL_v4_simple_python_score.json") == lines(tmp_path / "run" / "BFCL_v4_simple_python_score.json")
    assert lines(tmp_path / "again" / "BFCL_v4_simple_python_result.json") == lines(exported)


def test_a_prompting_string_result_file_grades_as_its_decoded_form(simple, tmp_path):
    decoded = write_lines(tmp_path / "decoded.json", [
        {"id": "simple_python_0", "result": [{"weather.get": {"city": "Paris", "days": 4}}]},
        {"id": "simple_python_1", "result": [{"area": {"base": 2.5, "height": 4}}]},
    ])
    strings = write_lines(tmp_path / "strings.json", [
        {"id": "simple_python_0", "result": "[weather.get(city='Paris', days=4)]"},
        {"id": "simple_python_1", "result": "[area(base=2.5, height=4)]"},
    ])
    for name, path in (("d", decoded), ("s", strings)):
        assert main(["grade", "--env", "bfcl", "--result", str(path), "--dataset", str(simple), "--out", str(tmp_path / name)]) == 0
    a, b = lines(tmp_path / "d" / "BFCL_v4_simple_python_score.json"), lines(tmp_path / "s" / "BFCL_v4_simple_python_score.json")
    assert a[0] == b[0] == {"accuracy": 0.5, "correct_count": 1, "total_count": 2}
    assert [r["error_type"] for r in a[1:]] == [r["error_type"] for r in b[1:]] == ["value_error:others"]
    by = lambda d: {(s.example_id, s.grader): s.value for s in read_scores(tmp_path / d)}  # noqa: E731
    assert by("d") == by("s")


def test_the_prompting_agent_writes_and_decodes_the_text_format(simple, tmp_path, capsys):
    model = ScriptedChatModel(by_input={
        "Weather in Paris?": ["[weather.get(city='Paris')]"],
        "Area with base 2.5 and height 4?": ["I need more information."],
    })
    out = tmp_path / "run"
    result = evaluate("bfcl", agent="bfcl_prompting", model=model, dataset=str(simple), out=out)
    assert [len(t.model_steps) for t in result.trajectories] == [1, 1]  # one turn, as the protocol says
    values = {(s.example_id, s.grader): s for s in result.scores}
    assert values["simple_python_0", "bfcl_accuracy"].value == 1.0
    assert values["simple_python_1", "bfcl_accuracy"].details["error_type"] == "ast_decoder:decoder_failed"
    assert lines(out / "BFCL_v4_simple_python_result.json")[0]["result"] == "[weather.get(city='Paris')]"
    capsys.readouterr()
    assert main(["show", str(out), "--example", "simple_python_1"]) == 0
    assert "ast_decoder:decoder_failed" in capsys.readouterr().out


def test_irrelevance_official_and_strict_columns(irrelevance, tmp_path):
    model = ScriptedChatModel(by_input={
        "Who wrote Hamlet?": ["Shakespeare; none of the functions helps."],
        "What is 2+2?": [{"tool_calls": [{"name": "weather_get", "args": {"city": "x"}}]}],
        "Sing a song.": [{"content": "", "invalid_tool_calls": [{"name": "weather_get", "args": '{"city": '}]}],
    })
    result = evaluate("bfcl", model=model, dataset=str(irrelevance), out=tmp_path / "run")
    by = {(s.example_id, s.grader): s for s in result.scores}
    assert [by[f"irrelevance_{i}", "bfcl_accuracy"].value for i in range(3)] == [1.0, 0.0, 1.0]
    assert [by[f"irrelevance_{i}", "bfcl_abstention"].details["outcome"] for i in range(3)] == ["abstained", "called", "malformed"]
    assert [by[f"irrelevance_{i}", "bfcl_abstention"].value for i in range(3)] == [1.0, 0.0, 0.0]
    assert lines(tmp_path / "run" / "BFCL_v4_irrelevance_score.json")[0]["correct_count"] == 2
    tables = {t.title: t for t in __import__("toolgym.suites.bfcl.results", fromlist=["report"]).report(result.run)}
    row = tables["bfcl: accuracy by category"].rows[0]
    assert row["malformed (counted correct officially)"] == 1 and row["strict abstention"].startswith("0.333")
    assert any("agentic (web search, memory)" in n for n in tables["bfcl: accuracy by category"].notes)


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
@needs_data
def test_oracle_on_all_13_categories_passes_every_satisfiable_entry():
    listed = {
        "live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_507-149-4", "live_multiple_862-181-3",
        "live_multiple_964-207-0", "simple_java_36", "simple_java_65",
    }
    failed, found = {}, {}
    for category in CATEGORIES:
        result = evaluate("bfcl", agent="oracle", dataset=str(BFCL / f"BFCL_v4_{category}.json"))
        assert len(result.trajectories) > 0 and all(t.status == "completed" for t in result.trajectories)
        failed |= {s.example_id: s.details["error_type"] for s in result.scores if s.grader == "bfcl_accuracy" and s.value != 1.0}
        found |= unsatisfiable(list(result.run.examples.values()))
    assert set(failed) == set(found) == listed
    assert len(listed) < 10


def test_show_marks_the_argument_the_official_checker_rejects(simple, tmp_path, capsys):
    model = ScriptedChatModel(by_input={
        "Weather in Paris?": [{"tool_calls": [{"name": "weather_get", "args": {"city": "PARIS"}}]}],  # passes: normalised
        "Area with base 2.5 and height 4?": [{"tool_calls": [{"name": "area", "args": {"base": 2.5, "height": 5}}]}],
    })
    out = tmp_path / "run"
    evaluate("bfcl", model=model, dataset=str(simple), out=out)
    capsys.readouterr()
    assert main(["show", str(out), "--example", "simple_python_0"]) == 0
    assert "first divergence" not in capsys.readouterr().out  # exact comparison would flag "PARIS"
    assert main(["show", str(out), "--example", "simple_python_1"]) == 0
    text = capsys.readouterr().out
    assert "first divergence: value_error:others (argument height)" in text


def test_the_summary_and_the_html_report_show_accuracy_by_category_and_error_type(simple, irrelevance, tmp_path, capsys):
    from toolgym.views.report import build_report

    evaluate("bfcl", agent="oracle", dataset=str(simple), out=tmp_path / "a")
    model = ScriptedChatModel(turns=[{"tool_calls": [{"name": "weather_get", "args": {"city": "x"}}]}])
    evaluate("bfcl", model=model, dataset=str(irrelevance), out=tmp_path / "b")
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "a"), str(tmp_path / "b"), "--suite-tables"]) == 0
    text = capsys.readouterr().out
    assert "accuracy by category" in text and "irrelevance_error:decoder_success" in text
    build_report([tmp_path / "a", tmp_path / "b"], tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="suites"' in html and "bfcl: failures by error type" in html
    assert "agentic (web search, memory)" in html

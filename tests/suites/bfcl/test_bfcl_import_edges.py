"""Edge cases of ``grade --env bfcl --result``, of the dataset messages and of the report found
by a new-user review: a repeated id, an empty or UTF-16 result file, a possible-answer file given
as the dataset, ``run`` without ``--dataset``, a second result file imported into the directory
of another's import, and the table of unsatisfiable entries at a terminal's width."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.suites.bfcl.test_bfcl_suite import AREA, WEATHER, q, write_lines
from toolgym.cli import main
from toolgym.runio import read_trajectories


@pytest.fixture
def simple(tmp_path) -> Path:
    """Two simple_python entries, answers beside them in possible_answer/."""
    data = tmp_path / "data"
    write_lines(data / "possible_answer" / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_0", "ground_truth": [{"weather.get": {"city": ["Paris"], "days": ["", 3]}}]},
        {"id": "simple_python_1", "ground_truth": [{"area": {"base": [2.5], "height": [4]}}]},
    ])
    return write_lines(data / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_0", "question": q("Weather in Paris?"), "function": [WEATHER]},
        {"id": "simple_python_1", "question": q("Area with base 2.5 and height 4?"), "function": [AREA]},
    ])


def grade(result: Path, dataset: Path, out: Path) -> int:
    return main(["grade", "--env", "bfcl", "--result", str(result), "--dataset", str(dataset), "--out", str(out)])


def good_lines() -> list:
    return [{"id": "simple_python_0", "result": [{"weather.get": {"city": "Paris"}}]},
            {"id": "simple_python_1", "result": [{"area": {"base": 2.5, "height": 4}}]}]


def test_a_repeated_id_is_refused_naming_both_lines(simple, tmp_path, capsys):
    result = write_lines(tmp_path / "dup_result.json", [*good_lines(), {"id": "simple_python_0", "result": []}])
    assert grade(result, simple, tmp_path / "g") == 2
    err = capsys.readouterr().err
    assert f"{result}:3" in err and "'simple_python_0' again (first on line 1)" in err and "one result per entry" in err
    assert not (tmp_path / "g").exists()


def test_an_empty_result_file_is_graded_with_a_warning(simple, tmp_path):
    result = tmp_path / "empty_result.json"
    result.write_text("\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="empty_result.json: the file holds no result"):
        assert grade(result, simple, tmp_path / "g") == 0


def test_a_utf16_result_file_names_its_encoding(simple, tmp_path, capsys):
    result = tmp_path / "u16_result.json"
    result.write_text("".join(json.dumps(r) + "\n" for r in good_lines()), encoding="utf-16")
    assert grade(result, simple, tmp_path / "g") == 2
    err = capsys.readouterr().err
    assert "UTF-16" in err and str(result) in err and "codec" not in err


def test_a_possible_answer_file_as_the_dataset_names_the_questions_file(simple, tmp_path, capsys):
    answers = simple.parent / "possible_answer" / simple.name
    assert main(["run", "--env", "bfcl", "--agent", "oracle", "--dataset", str(answers), "--out", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "possible-answer file" in err and "outside possible_answer/" in err and str(simple) in err


def test_run_without_a_dataset_says_there_is_no_built_in_one(tmp_path, capsys):
    assert main(["run", "--env", "bfcl", "--agent", "oracle", "--out", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "bfcl has no built-in dataset: give --dataset PATH" in err and "'test'" not in err


def test_another_result_file_is_refused_in_an_import_directory_the_same_one_regraded(simple, tmp_path, capsys):
    out = tmp_path / "imported"
    first = write_lines(tmp_path / "a_result.json", good_lines())
    assert grade(first, simple, out) == 0
    second = write_lines(tmp_path / "b_result.json", good_lines()[:1])
    assert grade(second, simple, out) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds the import of another result file" in err and str(first.resolve()) in err
    assert len(read_trajectories(out)) == 2  # left as it was
    assert grade(first, simple, out) == 0  # the same file again: re-graded
    assert len(read_trajectories(out)) == 2


def test_the_unsatisfiable_entries_keep_their_id_and_category_whole(tmp_path, capsys):
    schema = {"name": "f", "description": "F.", "parameters": {"type": "dict", "properties": {
        "origin_airport_of_the_journey": {"type": "string", "description": "X."}}, "required": ["origin_airport_of_the_journey"]}}
    data = tmp_path / "data"
    write_lines(data / "possible_answer" / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_123456", "ground_truth": [{"f": {"origin_airport_of_the_journey": [""]}}]}])
    dataset = write_lines(data / "BFCL_v4_simple_python.json", [
        {"id": "simple_python_123456", "question": q("Fly."), "function": [schema]}])
    result = write_lines(tmp_path / "r_result.json", [{"id": "simple_python_123456", "result": []}])
    assert grade(result, dataset, tmp_path / "g") == 0
    captured = capsys.readouterr()
    table = captured.out[captured.out.index("entries no answer satisfies"):]
    assert "simple_python_123456" in table and "simple_python " in table.replace("│", " ")
    assert "…" not in table.split("failures by error type")[0]
    assert "simple_python_123456: the function requires 'origin_airport_of_the_journey'" in captured.err

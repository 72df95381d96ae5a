"""Result files other tools write: toolgym grades what the published evaluate.py grades (the same
five rows), warns once per kind of oddity, and refuses only what the script cannot grade either."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import (
    EVALUATE_PY,
    HOTEL,
    ndjson,
    records,
    reference_rows,
    write_dataset,
)
from toolgym.cli import main

needs_reference = pytest.mark.skipif(not EVALUATE_PY.exists(), reason="the published evaluate.py is not at ../shared/reference")

GOLDS = records()[1]
G0, G1 = GOLDS[0]["data_id"], GOLDS[1]["data_id"]


def line(data_id, calls) -> str:
    return json.dumps({"data_id": data_id, "tool_calls": calls}, ensure_ascii=False) + "\n"


def nested(depth: int) -> str:
    city = "[" * depth + "1" + "]" * depth
    return '{"data_id": "' + G0 + '", "tool_calls": [{"name": "Search_hotel", "arguments": {"city": ' + city + "}}]}\n"


GRADED = {  # text, the warning expected
    "null data_id with an id": (json.dumps({"data_id": None, "id": G0, "tool_calls": []}) + "\n", "null data_id"),
    "boolean id": (json.dumps({"data_id": True, "tool_calls": [HOTEL]}) + "\n", "a boolean data_id"),
    "missing id": (json.dumps({"tool_calls": []}) + "\n" + line(G1, []), "no data_id"),
    "tool_calls a string": (line(G0, "Search_hotel"), "tool_calls string"),
    "tool_calls an object": (line(G0, HOTEL), "tool_calls object"),
    "calls not objects": (line(G0, ["Search_hotel", 3, None]) + line(G1, [HOTEL, "x"]), "calls that are not objects"),
    "stray whitespace lines": (line(G0, []) + "  \n\t\n\u3000\n\u3000" + line(G1, []).rstrip("\n") + "\u00a0\n",
                               "hold only whitespace"),
    "falsy tool_calls": (json.dumps({"data_id": G0, "tool_calls": ""}) + "\n" + json.dumps({"data_id": G1, "tool_calls": 0})
                         + "\n", None),
    "arguments with a huge number as text": (line(G0, [{"name": "Search_hotel", "arguments": '{"city": ' + "9" * 5000 + "}"}]),
                                             None),
    "nesting 900 deep": (nested(900), None),
    "nesting 920 deep, the deepest graded": (nested(916), None),
    "lines ending in a lone CR": (line(G0, []).rstrip("\n") + "\r" + line(G1, GOLDS[1]["ground_truth"]).rstrip("\n") + "\r", None),
    "an error line whose tool_calls is a number or holds a list as a name": (
        json.dumps({"data_id": G0, "tool_calls": 5, "error": "TimeoutError"}) + "\n"
        + json.dumps({"data_id": G1, "tool_calls": [{"name": ["x"]}], "error": "TimeoutError"}) + "\n", None),
    "a lone surrogate inside arguments given as a JSON string": (
        line(G0, [{"name": "Search_hotel", "arguments": '{"city": "\\ud800"}'}]) + line(G1, GOLDS[1]["ground_truth"]), None),
    "empty file": ("", "holds no result"),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), "zip")


def grade(result: Path, dataset: Path, out: Path) -> tuple[int, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset), "--out", str(out)])
    return code, [str(w.message) for w in caught]


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[:5]]


@needs_reference
@pytest.mark.parametrize("case", list(GRADED))
def test_graded_as_the_published_script_grades_it(tmp_path, dataset, case):
    text, warning = GRADED[case]
    result = tmp_path / "result_m.jsonl"
    result.write_text(text, encoding="utf-8")
    code, said = grade(result, dataset, tmp_path / "g")
    assert code == 0, said
    assert rows(tmp_path / "g" / "score_m.json") == reference_rows(result, ndjson(GOLDS), tmp_path / "ref")
    if warning:
        mine = [w for w in said if warning in w]
        assert len(mine) == 1 and str(result) in mine[0], said
        assert "first: line" in mine[0] or "no result" in mine[0]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_number_past_the_integer_limit_is_graded_not_fatal(tmp_path, dataset):
    """The published script stops on it (Python's 4,300-digit limit); toolgym grades the line, the
    digits compared as text (never equal to a gold value)."""
    result = tmp_path / "result_m.jsonl"
    result.write_text(line(G0, [{"name": "Search_hotel", "arguments": {"city": 1}}]).replace('"city": 1', '"city": ' + "9" * 5000)
                      + line(G1, GOLDS[1]["ground_truth"]), encoding="utf-8")
    code, said = grade(result, dataset, tmp_path / "g")
    assert code == 0 and any("longer than 4,300 digits" in w for w in said)
    totals = rows(tmp_path / "g" / "score_m.json")[0]
    assert totals["総データ数"] == 2 and totals["正解数"] == 1  # the huge number never equals the gold


def test_empty_file_is_named_after_the_file(tmp_path, dataset):
    result = tmp_path / "result_gpt-x.jsonl"
    result.write_text("", encoding="utf-8")
    code, said = grade(result, dataset, tmp_path / "g")
    assert code == 0 and (tmp_path / "g" / "score_gpt-x.json").exists()
    assert [r["総データ数"] for r in rows(tmp_path / "g" / "score_gpt-x.json")] == [0] * 5


def test_run_with_a_dataset_folder_hashes_the_folder(tmp_path, dataset):
    out = tmp_path / "run"
    assert main(["run", "--env", "jmultiwoz_tc", "--agent", "oracle", "--dataset", str(dataset.parent),
                 "--out", str(out), "--no-progress"]) == 0
    assert len(json.loads((out / "run.json").read_text())["dataset"]["sha256"]) == 64


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_jmultiwoz_file_in_utf16_is_named(tmp_path, capsys):
    inputs, golds = records()
    folder = write_dataset(tmp_path / "data", "jsonl").parent
    (folder / "jmultiwoz_tc_ground.jsonl").write_bytes(ndjson(golds).encode("utf-16"))
    result = tmp_path / "result_m.jsonl"
    result.write_bytes(ndjson([{"data_id": g["data_id"], "tool_calls": []} for g in golds]).encode("utf-16"))
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(folder / "jmultiwoz_tc_input.jsonl"),
                 "--out", str(tmp_path / "g")]) == 2
    assert "UTF-16 (little-endian, with a byte-order mark)" in _error_line(capsys)
    result.write_text(ndjson([{"data_id": g["data_id"], "tool_calls": []} for g in golds]), encoding="utf-8")
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(folder / "jmultiwoz_tc_input.jsonl"),
                 "--out", str(tmp_path / "g")]) == 2
    error = _error_line(capsys)
    assert "jmultiwoz_tc_ground.jsonl" in error and "UTF-16 (little-endian, with a byte-order mark)" in error

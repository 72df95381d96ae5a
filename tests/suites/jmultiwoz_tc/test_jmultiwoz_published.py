"""``grade --env jmultiwoz_tc --result FILE``: a result file of any generator imported into
trajectories, graded and exported; the published rows equal those of the file itself and of the
published ``evaluate.py``; bad files are refused with file and line, writing nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import (
    BENCHMARK,
    EVALUATE_PY,
    HOTEL,
    REAL_ZIP,
    TAXI,
    WEATHER,
    ndjson,
    records,
    reference_rows,
    result_row,
    write_dataset,
)
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.runio import read_run, read_scores, read_trajectories
from toolgym.suites.jmultiwoz_tc.results import import_result_file, turns_of
from toolgym.suites.jmultiwoz_tc.scoring import PUBLISHED_ROWS, evaluate, read_results

needs_reference = pytest.mark.skipif(not EVALUATE_PY.exists(), reason="the published evaluate.py is not at ../shared/reference")


@pytest.fixture
def dataset(tmp_path) -> Path:
    return write_dataset(tmp_path / "data", "zip")


def grade(result: Path, dataset: Path, out: Path | None = None) -> int:
    return main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset),
                 *(["--out", str(out)] if out else [])])


def write_result(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def direct_rows(result: Path, dataset: Path) -> list[dict]:
    """The rows of a result file graded as it is, without trajectories."""
    examples = load_examples(dataset, BENCHMARK)
    types = {t: {k: v["type"] for k, v in f["parameters"]["properties"].items()}
             for t, f in ((f["name"], f) for f in _tools(examples))}
    return evaluate(read_results(result), turns_of(examples), types).rows


def _tools(examples):
    return [t["function"] for t in json.loads(Path(examples[0].metadata["tools"]).read_text(encoding="utf-8"))]


# every tolerance of the published script, and each way a line becomes a trajectory
CORNERS = "\n".join([
    '{"data_id": "jmultiwoz_tc_0_turn_0", "tool_calls": null}',
    json.dumps({"data_id": "jmultiwoz_tc_0_turn_1", "tool_calls": [
        {"type": "function", "function": {"name": "Search_hotel", "arguments": json.dumps(HOTEL["arguments"], ensure_ascii=False)}}]},
        ensure_ascii=False),
    '',
    '{"data_id": "jmultiwoz_tc_0_turn_2", "tool_calls": [{"name": "Search_hotel", "arguments": "東京"}]}',
    '{"data_id": "jmultiwoz_tc_0_turn_1", "tool_calls": [{"name": "Search_hotel", "arguments": {"city": "東京"}}]}',
    '{"data_id": "ghost", "tool_calls": []}',
    '{"data_id": "ghost2", "tool_calls": [{"name": "Search_hotel", "arguments": {}}], "error": ""}',
    '{"data_id": "jmultiwoz_tc_1_turn_1", "tool_calls": [{"name": "Search_weather", "arguments": {}}], '
    '"error": "TimeoutError"}',
    '{"data_id": null, "id": "jmultiwoz_tc_1_turn_0", "tool_calls": [{"name": "Search_hotels", "arguments": {}}]}',
    json.dumps({"data_id": "jmultiwoz_tc_1_turn_2", "dialogue_id": 7, "tool_calls": [
        {"name": "Search_weather", "arguments": {"day": 21, "month": 3, "city": "大阪"}}, TAXI, TAXI]}, ensure_ascii=False),
    '{"data_id": "jmultiwoz_tc_1_turn_3", "tool_calls": [{"name": null, "arguments": {}}, {"name": 5}, '
    '{"name": "", "arguments": "<tool_call>…", "malformed": "tool call written as text"}]}',
    '{"data_id": "jmultiwoz_tc_1_turn_3", "tool_calls": [{"name": "Search_weather", "arguments": {"city": NaN, "day": 1.0}}]}',
    '{"id": "ghost3", "tool_calls": [], "error": "RateLimitError", "error_detail": "RateLimitError: slow down"}  ',
]) + "\n"


def test_an_imported_file_is_referenced_and_its_rows_exported(tmp_path, dataset, capsys):
    foreign = tmp_path / "elsewhere" / "result_other-tool.jsonl"
    foreign.parent.mkdir()
    foreign.write_text(CORNERS, encoding="utf-8")
    out = tmp_path / "g"
    assert grade(foreign, dataset, out) == 0
    assert foreign.read_text(encoding="utf-8") == CORNERS
    rows = lines(out / "score_other-tool.json")
    assert rows == direct_rows(foreign, dataset)
    assert rows[0] == {"評価項目": "全体", "総データ数": 12, "評価対象数": 10, "正解数": 4, "不正解数": 6,
                       "出力ミスのデータ数": 2, "全体の正答率(%)": 40.0}
    # the imported file is referenced (run.json), not exported again; its lines are read back
    assert not list(out.glob("result_*"))
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert record["result_file"]["path"] == str(foreign.resolve())
    assert record["result_file"]["size"] == foreign.stat().st_size
    assert sorted(t.steps[0].text for t in read_trajectories(out)) == sorted(
        x for x in CORNERS.splitlines() if x.strip())
    # grading the same file again gives the same rows
    assert grade(foreign, dataset, tmp_path / "again") == 0
    assert lines(tmp_path / "again" / "score_other-tool.json") == rows
    err = " ".join(capsys.readouterr().err.split())
    assert "3 result id(s) are not in the gold" in err
    assert f"{foreign.resolve()}: 2 line(s) repeat a data_id (each line counts, as published): lines 5, 12" in err
    assert f"{foreign.resolve()}: 1 line(s) have call arguments that are not a JSON object" in err


def test_how_lines_become_trajectories(tmp_path, dataset):
    foreign = tmp_path / "result_m.jsonl"
    foreign.write_text(CORNERS, encoding="utf-8")
    out = tmp_path / "g"
    assert grade(foreign, dataset, out) == 0
    trajectories = {(t.example_id, t.trial): t for t in read_trajectories(out)}
    assert len(trajectories) == 12  # one per non-blank line
    assert trajectories[("jmultiwoz_tc_0_turn_1", 1)].steps[0].text == CORNERS.splitlines()[4]  # verbatim
    hotel = trajectories[("jmultiwoz_tc_0_turn_1", 0)].steps[0].tool_calls[0]
    assert (hotel.name, hotel.arguments, hotel.malformed) == ("Search_hotel", HOTEL["arguments"], None)
    assert trajectories[("jmultiwoz_tc_0_turn_2", 0)].steps[0].tool_calls[0].malformed == "arguments are not valid JSON"
    assert trajectories[("jmultiwoz_tc_1_turn_0", 0)].steps[0].tool_calls[0].malformed == "unknown tool"
    assert trajectories[("jmultiwoz_tc_1_turn_1", 0)].status == "error"  # 出力ミス: graded by no grader
    assert trajectories[("ghost", 0)].status == "error" and "not in the dataset" in trajectories[("ghost", 0)].error
    assert trajectories[("ghost3", 0)].error.startswith("UnknownTurn")
    origin = trajectories[("jmultiwoz_tc_1_turn_3", 1)].final_state["result_file"]
    assert origin == {"file": str(foreign.resolve()), "line": 12}
    scores = {(s.example_id, s.trial, s.grader): s.value for s in read_scores(out)}
    assert scores[("jmultiwoz_tc_0_turn_1", 0, "jmultiwoz_exact")] == 1.0
    assert scores[("jmultiwoz_tc_0_turn_1", 1, "jmultiwoz_exact")] == 0.0
    assert scores[("jmultiwoz_tc_1_turn_2", 0, "jmultiwoz_exact")] == 1.0  # sets: order and repeats ignored
    assert scores[("jmultiwoz_tc_1_turn_2", 0, "jmultiwoz_lenient")] == 0.0  # multiset: the repeat counts
    assert scores[("jmultiwoz_tc_1_turn_3", 0, "jmultiwoz_decision")] == 0.0  # malformed, never an abstention
    assert not any(key[0].startswith("ghost") or key[0] == "jmultiwoz_tc_1_turn_1" for key in scores)
    record = read_run(out)
    assert record.agent == {"agent": "imported", "result_file": str(foreign.resolve())} and record.model == "m"


@needs_reference
@pytest.mark.parametrize("name", ["corners", "oracle", "scripted-like"])
def test_rows_equal_the_published_script(tmp_path, dataset, name):
    golds = records()[1]
    if name == "corners":
        text = CORNERS
    elif name == "oracle":
        text = ndjson([result_row(g["data_id"], g["ground_truth"]) for g in golds])
    else:
        rows = [result_row(g["data_id"], g["ground_truth"][:1]) for g in golds]
        rows[0]["tool_calls"] = [WEATHER]
        rows[3]["error"] = "TimeoutError"
        text = ndjson(rows)
    foreign = tmp_path / "result_m.jsonl"
    foreign.write_text(text, encoding="utf-8")
    assert grade(foreign, dataset, tmp_path / "g") == 0
    ours = lines(tmp_path / "g" / "score_m.json")
    assert ours == reference_rows(foreign, ndjson(golds), tmp_path / "ref")
    assert not (tmp_path / "g" / "result_m.jsonl").exists()  # the imported file is referenced, not copied
    # graded again from the run directory (the lines read back from the file): the same rows
    assert main(["grade", str(tmp_path / "g")]) == 0
    assert lines(tmp_path / "g" / "score_m.json") == ours
    if name == "oracle":
        assert [r["全体の正答率(%)"] for r in ours] == [100.0] * 5


def test_grade_any_result_file(tmp_path, dataset, capsys):
    golds = records()[1]
    rows = [result_row(g["data_id"], g["ground_truth"]) for g in golds]
    rows[1] = result_row(golds[1]["data_id"], [{"type": "function", "function": {"name": "Search_hotel", "arguments": json.dumps(HOTEL["arguments"])}}])
    result = write_result(tmp_path / "result_other-tool.json", rows)
    assert grade(result, dataset, tmp_path / "g") == 0
    scores = lines(tmp_path / "g" / "score_other-tool.json")
    assert [r["評価項目"] for r in scores] == list(PUBLISHED_ROWS)
    assert [r["全体の正答率(%)"] for r in scores] == [100.0] * 5
    printed = capsys.readouterr().out
    assert "tool call精度" in printed and "100.0" in printed


def test_the_imported_file_is_never_overwritten(tmp_path, dataset, capsys):
    folder = tmp_path / "runs"
    folder.mkdir()
    rows = [result_row("jmultiwoz_tc_1_turn_0"), result_row("jmultiwoz_tc_0_turn_1", [HOTEL])]  # not in dataset order
    result = write_result(folder / "result_m.jsonl", rows)
    before = result.read_bytes()
    for _ in range(2):  # grading again (the run directory now beside it) changes nothing either
        assert grade(result, dataset) == 0  # --out: the result file's folder
        assert result.read_bytes() == before
        assert [r["総データ数"] for r in lines(folder / "score_m.json")] == [2, 1, 1, 2, 1]
    assert main(["grade", str(folder)]) == 0
    assert result.read_bytes() == before
    err = " ".join(capsys.readouterr().err.split())
    assert "result_m.jsonl is the imported result file and is left as it is" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"data_id": "jmultiwoz_tc_0_turn_0", "tool_calls": []}\n{broken\n', "result_m.jsonl: 1 invalid line(s): line 2: not valid JSON"),
        ('{"data_id": "jmultiwoz_tc_0_turn_0", "tool_calls": []}\n{"data_id": "jmultiwoz_tc_0_tu',
         "line 2: not valid JSON (Unterminated string starting at) (a torn last line"),
        ('{"data_id": {"a": 1}, "tool_calls": []}\n', "line 1: data_id must be a string, got dict"),
        ('{"data_id": "x", "tool_calls": 3}\n', "line 1: 'tool_calls' must be a list of calls, got 3"),
        ('{"data_id": "x", "tool_calls": [{"name": "Search_hotel", "arguments": {"city": "\\ud800"}}]}\n',
         "line 1: a lone surrogate \\ud800 is not text"),
        ('{"data_id": "x", "tool_calls": ' + "[" * 5000 + "]" * 5000 + "}\n", "line 1: not valid JSON (nested too deeply"),
        ('{"data_id": "x", "tool_calls": [{"name": "Search_hotel", "arguments": {"city": ' + "[" * 920 + "]" * 920 + "}}]}\n",
         "line 1: nested deeper than 920 levels (toolgym grades up to 920; evaluate.py reads about 990)"),
        ('{"data_id": "x", "tool_calls": [{"name": "Search_hotel", "arguments": "{\\"a\\": ' + "[" * 980 + "]" * 980 + '}"}]}\n',
         "line 1: nested deeper than 920 levels"),
        ('{"data_id": "x", "tool_calls": [{"name": ["Search_hotel"], "arguments": {}}]}\n',
         "line 1: a call's name is a list, not text (evaluate.py cannot grade it either)"),
    ],
)
def test_a_bad_file_is_a_message_and_writes_nothing(tmp_path, dataset, capsys, text, expected):
    out = tmp_path / "g"
    out.mkdir()
    (out / "score_m.json").write_text("earlier scores\n", encoding="utf-8")
    result = tmp_path / "result_m.jsonl"
    result.write_text(text, encoding="utf-8")
    assert grade(result, dataset, out) == 2
    err = capsys.readouterr().err
    assert "".join(expected.split()) in "".join(err.split()) and "Traceback" not in err
    assert str(result) in "".join(err.split())
    assert sorted(p.name for p in out.iterdir()) == ["score_m.json"]
    assert (out / "score_m.json").read_text(encoding="utf-8") == "earlier scores\n"  # nothing lost
    assert result.read_text(encoding="utf-8") == text
    assert grade(result, dataset, tmp_path / "new") == 2 and not (tmp_path / "new").exists()


def test_importer_names_file_and_line(tmp_path, dataset):
    result = tmp_path / "r.jsonl"
    result.write_text('{"data_id": "a"}\n[1]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.jsonl: 1 invalid line\(s\): line 2: expected a JSON object"):
        import_result_file(result, load_examples(dataset, BENCHMARK))


def test_grade_needs_env_and_dataset(tmp_path, capsys):
    assert main(["grade", "--result", str(tmp_path / "r.jsonl")]) == 2
    assert "needs --env and --dataset" in capsys.readouterr().err
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(tmp_path / "r.jsonl"), "--dataset", str(tmp_path / "x.txt")]) == 2


# --- the real release ------------------------------------------------------------------------
FULL = str.maketrans("0123456789()", "０１２３４５６７８９（）")


def perturbed(i: int, data_id: str, gold: list) -> dict:
    """A result line for a gold turn with a mistake of some kind, by ``i``."""
    calls = [dict(c) for c in gold]
    if i % 50 == 0:
        return result_row(data_id, [], error="TimeoutError")
    if i % 7 == 0:
        calls = []
    elif i % 11 == 0 and calls:
        calls[0] = {"name": calls[0]["name"], "arguments": {k: str(v).translate(FULL) for k, v in calls[0]["arguments"].items()}}
    elif i % 13 == 0:
        calls = calls + [{"name": "Search_weather", "arguments": {"city": "東京"}}] * 2
    elif i % 17 == 0 and calls:
        calls[0] = {"name": calls[0]["name"], "arguments": "{not json"}
    elif i % 19 == 0:
        calls = [{"name": "Search_hotels", "arguments": {"city": "大阪"}}]
    elif i % 23 == 0 and calls:
        calls = [{"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                 for c in calls]
    return result_row(data_id, calls)


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
@needs_reference
@pytest.mark.skipif(not REAL_ZIP.exists(), reason="JMultiWOZ-TC data not present at ../shared/data")
def test_real_release_rows_equal_the_published_script(tmp_path):
    with zipfile.ZipFile(REAL_ZIP) as archive:
        gold = archive.read("jmultiwoz_tc_ground.json")
    golds = [json.loads(x) for x in io.BytesIO(gold) if x.strip()]
    rows = [perturbed(i, g["data_id"], g["ground_truth"]) for i, g in enumerate(golds)]
    rows[5:5] = [result_row("not_a_turn", [HOTEL]), rows[9]]  # an unknown id and a repeated one
    result = write_result(tmp_path / "result_m.jsonl", rows[::-1])  # any order
    assert grade(result, REAL_ZIP, tmp_path / "g") == 0
    ours = lines(tmp_path / "g" / "score_m.json")
    assert ours == reference_rows(result, gold, tmp_path / "ref")
    assert ours[0]["総データ数"] == len(golds) + 2 and 0 < ours[0]["全体の正答率(%)"] < 100
    assert not (tmp_path / "g" / "result_m.jsonl").exists()  # the imported file is referenced, not copied


def test_a_dataset_of_toolgym_examples_grades_with_slot_types_from_the_gold(tmp_path, capsys):
    examples = load_examples(write_dataset(tmp_path / "data", "zip"), BENCHMARK)
    plain = tmp_path / "turns.jsonl"
    plain.write_text("".join(ex.model_copy(update={"metadata": {}}).model_dump_json() + "\n" for ex in examples),
                     encoding="utf-8")
    day_as_text = {"name": "Search_weather", "arguments": {"city": "大阪", "month": 3, "day": "21"}}
    result = write_result(tmp_path / "result_m.jsonl", [result_row("jmultiwoz_tc_1_turn_1", [day_as_text])])
    assert grade(result, plain, tmp_path / "g") == 0
    diagnostics = json.loads((tmp_path / "g" / "diagnostics_m.json").read_text(encoding="utf-8"))
    assert diagnostics["lenient_table"][-1]["lenient(%)"] == 100.0  # "21" is 21: day is an integer in the gold
    assert "infers slot types from the gold values" in capsys.readouterr().err


def published_score_file(result: Path, workdir: Path) -> list[dict]:
    """Every line of the score file the published evaluate.py writes for ``result`` (the five
    rows, then the wrong turns), run with both data files in its working directory."""
    inputs, golds = records()
    workdir.mkdir(parents=True)
    (workdir / "jmultiwoz_tc_input.json").write_text(ndjson(inputs), encoding="utf-8")
    (workdir / "jmultiwoz_tc_ground.json").write_text(ndjson(golds), encoding="utf-8")
    (workdir / "result_ref.json").write_bytes(result.read_bytes())
    subprocess.run([sys.executable, str(EVALUATE_PY), "--result", "result_ref.json"], cwd=workdir, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return lines(workdir / "score_ref.json")


@needs_reference
def test_layout_published_writes_the_score_file_the_published_script_writes(tmp_path, dataset):
    inputs, golds = records()
    ids = [g["data_id"] for g in golds]
    rows = [
        result_row(ids[0], [HOTEL]),                                   # right or wrong by the gold
        result_row(ids[1], [], assistant="ホテルは見つかりません"),         # output: the assistant text
        result_row(ids[2], [WEATHER, TAXI]),
        result_row(ids[3], [HOTEL], message="", response="呼びます"),     # the first non-empty field
        result_row(ids[4], [], error="TimeoutError"),
        *(result_row(i, [WEATHER]) for i in ids[5:]),
        result_row("jmultiwoz_tc_9_turn_0", [HOTEL]),                  # an id the data lacks
    ]
    result = write_result(tmp_path / "result_m.json", rows)
    out = tmp_path / "out"
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset),
                 "--out", str(out), "--layout", "published"]) == 0
    expected = published_score_file(result, tmp_path / "ref")
    assert len(expected) > 5  # the file has wrong turns to compare
    assert lines(out / "score_m.json") == expected
    assert not (out / "incorrect_m.json").exists()
    assert read_run(out).env_options["layout"] == "published"

    # grading the run again keeps the recorded layout; --layout separate switches back
    assert main(["grade", str(out)]) == 0
    assert lines(out / "score_m.json") == expected
    assert main(["grade", str(out), "--layout", "separate"]) == 0
    assert lines(out / "score_m.json") == expected[:5]
    assert [r["data_id"] for r in lines(out / "incorrect_m.json")] == [r["data_id"] for r in expected[5:]]

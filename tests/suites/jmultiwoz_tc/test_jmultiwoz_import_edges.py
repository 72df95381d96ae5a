"""``grade --env jmultiwoz_tc --result`` with the wrong gold (no id in common: refused, both
files named; a partial overlap graded as published) and into the directory of another result
file's import (refused; the same file again is re-graded)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import result_row, write_dataset
from toolgym.cli import main


def grade(result: Path, dataset: Path, out: Path) -> int:
    return main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset), "--out", str(out)])


def write_result(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_result_file_sharing_no_id_with_the_dataset_is_refused_naming_both(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "data", "jsonl")
    result = write_result(tmp_path / "result_mine.jsonl", [result_row(f"other_{i}") for i in range(4)])
    assert grade(result, dataset, tmp_path / "g") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(result) in err and str(dataset) in err and "none of its 4 data_id(s) is in the dataset" in err and "(dataset: " in err
    assert not (tmp_path / "g").exists()


def test_a_partly_overlapping_result_file_is_graded_as_published(tmp_path):
    dataset = write_dataset(tmp_path / "data", "jsonl")
    result = write_result(tmp_path / "result_mine.jsonl", [result_row("jmultiwoz_tc_0_turn_0"), result_row("other_1")])
    assert grade(result, dataset, tmp_path / "g") == 0
    first = json.loads((tmp_path / "g" / "score_mine.json").read_text(encoding="utf-8").splitlines()[0])
    assert first["総データ数"] == 2  # both lines counted: the unknown id graded against an empty gold


def test_another_result_file_is_refused_in_an_import_directory(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "data", "jsonl")
    out = tmp_path / "imp"
    mine = write_result(tmp_path / "result_mine.jsonl", [result_row("jmultiwoz_tc_0_turn_0")])
    assert grade(mine, dataset, out) == 0
    before = sorted(p.name for p in out.iterdir())
    ws = write_result(tmp_path / "result_ws.jsonl", [result_row("jmultiwoz_tc_0_turn_1")])
    assert grade(ws, dataset, out) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds the import of another result file" in err and str(mine.resolve()) in err
    assert sorted(p.name for p in out.iterdir()) == before and not (out / "score_ws.json").exists()
    assert grade(mine, dataset, out) == 0  # the same file again: re-graded


def test_run_without_a_dataset_says_there_is_no_built_in_one(tmp_path, capsys):
    assert main(["run", "--env", "jmultiwoz_tc", "--agent", "oracle", "--out", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "jmultiwoz_tc has no built-in dataset: give --dataset PATH" in err and "'test'" not in err

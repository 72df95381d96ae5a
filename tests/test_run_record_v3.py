"""Run directories of schema version 3 (lean records, referenced result files) and the stored
version-2 directories of ``tests/data/run_v2``, read through the public loaders."""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
from pathlib import Path

import pytest

import toolgym
from toolgym import Score, Trajectory
from toolgym.cli import main
from toolgym.runio import RUN_SCHEMA_VERSION, read_run, write_jsonl_atomic, write_run

V2 = Path(__file__).parent / "data" / "run_v2"


needs_jmultiwoz = pytest.mark.skipif(importlib.util.find_spec("toolgym.suites.jmultiwoz_tc") is None,
                                     reason="the jmultiwoz_tc suite is not installed (a suite can be removed)")


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    """A copy of the stored version-2 directories with this copy's path put back."""
    root = tmp_path / "v2"
    shutil.copytree(V2, root)
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl"):
            path.write_text(path.read_text(encoding="utf-8").replace("@FIXTURE@", str(root)), encoding="utf-8")
    return root


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no path broken over two lines


def _show(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(["show", *argv]) == 0
    return capsys.readouterr().out


def _verdicts(shown: str) -> list[str]:
    """``show`` output without the explanations of ``jmultiwoz_lenient``, which explains its
    failures in more words than version 2 recorded."""
    return [line.split(":")[0] if "jmultiwoz_lenient" in line else line for line in shown.splitlines()]


def test_a_version_2_directory_loads_as_it_was_written(v2):
    run_dir = v2 / "typewriter_scripted"
    assert json.loads((run_dir / "run.json").read_text())["schema_version"] == 2
    run = toolgym.load_run(run_dir)
    assert run.record.schema_version == RUN_SCHEMA_VERSION == 5
    stored = [Trajectory.model_validate(d) for d in _lines(run_dir / "trajectories.jsonl")]
    assert run.trajectories == stored and len(stored) == 7
    assert run.scores == [Score.model_validate(d) for d in _lines(run_dir / "scores.jsonl")]
    # version 2 wrote every field: the passing scores of steps_exact still hold their details
    assert any(s.value == 1 and "actual" in s.details for s in run.scores if s.grader == "steps_exact")


def test_the_lean_rewrite_of_a_version_2_directory_reads_back_and_shows_the_same(v2, tmp_path, capsys):
    old = v2 / "typewriter_scripted"
    new = tmp_path / "v3"
    shutil.copytree(old, new)
    run = toolgym.load_run(old)
    write_jsonl_atomic(new / "trajectories.jsonl", run.trajectories)
    write_jsonl_atomic(new / "scores.jsonl", run.scores)
    write_run(new, run.record)
    assert (new / "trajectories.jsonl").stat().st_size < (old / "trajectories.jsonl").stat().st_size * 0.7
    assert b"null" not in (new / "trajectories.jsonl").read_bytes()
    again = toolgym.load_run(new)
    assert again.trajectories == run.trajectories and again.scores == run.scores
    for args in (["--failed"], ["--example", "tw-2-cat"]):
        assert _show(capsys, str(old), *args).replace(str(old), "DIR") == _show(capsys, str(new), *args).replace(str(new), "DIR")


@needs_jmultiwoz
def test_an_imported_version_2_directory_is_graded_again_to_the_same_rows(v2, capsys):
    run_dir = v2 / "jmultiwoz_import"
    before = (run_dir / "score_fixture.json").read_text(encoding="utf-8")
    failed = _show(capsys, str(run_dir), "--failed")
    assert main(["grade", str(run_dir)]) == 0
    assert (run_dir / "score_fixture.json").read_text(encoding="utf-8") == before
    assert read_run(run_dir).schema_version == 5
    again = _show(capsys, str(run_dir), "--failed")
    assert _verdicts(again) == _verdicts(failed)
    assert "score jmultiwoz_lenient = 0.0: 1 malformed call(s)" in again
    # scores are lean now: a pass keeps the decision class and no copy of the gold or the calls
    scores = _lines(run_dir / "scores.jsonl")
    passed = [s for s in scores if s["value"] == 1.0]
    assert passed and all(set(s.get("details", {})) <= {"decision"} for s in passed)
    assert all("decision" in s["details"] for s in scores if s["grader"] == "jmultiwoz_decision")


@needs_jmultiwoz
def test_an_import_references_its_result_file_and_reads_its_lines_back(v2, tmp_path, capsys):
    data = v2 / "jmultiwoz_data"
    result = data / "result_fixture.jsonl"
    out = tmp_path / "imported"
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset",
                 str(data / "jmultiwoz_tc_input.jsonl"), "--out", str(out)]) == 0
    record = read_run(out)
    assert record.result_file is not None
    assert (record.result_file.path, record.result_file.size) == (str(result.resolve()), result.stat().st_size)
    assert not list(out.glob("result_*"))  # no copy of the imported file
    assert (out / "score_fixture.json").read_text(encoding="utf-8") == (
        v2 / "jmultiwoz_import" / "score_fixture.json").read_text(encoding="utf-8")
    stored = _lines(out / "trajectories.jsonl")
    assert all("text" not in d["steps"][0] for d in stored)
    assert [d["source_line"] for d in stored] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert all("final_state" not in d for d in stored)  # the origin: run.json's file, source_line
    file_lines = result.read_text(encoding="utf-8").splitlines()
    run = toolgym.load_run(out)
    assert [t.model_steps[0].text for t in run.trajectories] == file_lines
    origin = [{"result_file": {"file": str(result.resolve()), "line": n}} for n in range(1, 10)]
    assert [t.final_state for t in run.trajectories] == origin
    # as version 3 wrote it (the origin on every line): read the same
    v3 = tmp_path / "as_v3"
    shutil.copytree(out, v3)
    (v3 / "trajectories.jsonl").write_text("".join(
        json.dumps({**d, "final_state": o}, ensure_ascii=False) + "\n" for d, o in zip(stored, origin, strict=True)),
        encoding="utf-8")
    assert toolgym.load_run(v3).trajectories == run.trajectories
    shown = _show(capsys, str(out), "--failed")
    assert file_lines[1] in shown
    # the v2 import of the same file (lines copied into the record) shows the same turns
    assert _verdicts(shown.replace(str(out), "DIR")) == _verdicts(_show(capsys, str(v2 / "jmultiwoz_import"), "--failed").replace(
        str(v2 / "jmultiwoz_import"), "DIR"))

    scores_before = (out / "scores.jsonl").read_bytes()
    result.write_text(result.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # changed since
    with pytest.warns(UserWarning, match="has changed since the import"):
        moved = toolgym.load_run(out)
    # grading again would compare empty lines: refused, nothing written, the way back named
    capsys.readouterr()
    assert main(["grade", str(out)]) == 2
    err = capsys.readouterr().err
    assert "has changed since the import" in err and "nothing was graded or written" in err
    assert "grade --env jmultiwoz_tc --result FILE" in err and err.count("\n") == 1, err
    assert (out / "scores.jsonl").read_bytes() == scores_before
    # the report still opens: the published rows as the last grading exported them
    with pytest.warns(UserWarning, match="has changed since the import"):
        assert main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "rows as exported by the last grading" in page and "全体" in page
    assert [t.model_steps[0].text for t in moved.trajectories] == [""] * 9
    assert [t.final_state for t in moved.trajectories] == origin  # named by run.json all the same
    assert [c.name for t in moved.trajectories for c in t.model_steps[0].tool_calls] == [
        c.name for t in run.trajectories for c in t.model_steps[0].tool_calls]
    result.unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toolgym.load_run(out)
    assert any("cannot be read" in str(w.message) and "moved or deleted" in str(w.message) for w in caught)


def test_a_passing_score_keeps_only_the_details_its_grader_declares():
    from toolgym import BINARY
    from toolgym.graders import kept_details, lean_score

    class Declares:
        name = "declares"
        kept_details = ("outcome",)

    keep = kept_details(Declares())
    assert keep == {"outcome"} and kept_details(object()) == frozenset()
    passed = lean_score(Score(example_id="e", grader="declares", value=1.0, explanation="ok",
                              details={"outcome": "right", "expected": [1, 2]}), BINARY, keep)
    assert passed.details == {"outcome": "right"} and passed.explanation == "ok"
    failed = lean_score(Score(example_id="e", grader="declares", value=0.0, details={"expected": [1, 2]}), BINARY, keep)
    assert failed.details == {"expected": [1, 2]}
    unscored = lean_score(Score(example_id="e", grader="declares", value=None, details={"why": "x"}), BINARY, keep)
    assert unscored.details == {"why": "x"}

    class Wrong:
        name = "wrong"
        kept_details = "outcome"

    with pytest.raises(TypeError, match="kept_details must be a tuple"):
        kept_details(Wrong())

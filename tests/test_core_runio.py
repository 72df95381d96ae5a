"""run.json is one typed record: written and read in toolgym.runio, older versions migrated,
newer ones refused with the version named."""

from __future__ import annotations

import json

import pytest

from toolgym import Example, RunRecord
from toolgym.cli import main
from toolgym.runio import RUN_SCHEMA_VERSION, RunDirError, read_run


def _oracle_run(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out), "--no-progress"]) == 0
    return out


def test_a_run_writes_a_versioned_record_with_measures_and_sources(tmp_path):
    out = _oracle_run(tmp_path)
    record = read_run(out)
    assert isinstance(record, RunRecord) and record.schema_version == RUN_SCHEMA_VERSION == 5
    assert record.extensions["env"].source == "suite typewriter"
    assert record.extensions["agent"].spec == "oracle"
    assert record.measures["step_ratio"].pass_if == "==" and record.measures["step_ratio"].direction == "target"
    assert record.measures["final_state"].kind == "binary"


def test_a_version_1_record_is_migrated_and_still_graded(tmp_path):
    out = _oracle_run(tmp_path)
    data = json.loads((out / "run.json").read_text())
    for key in ("schema_version", "extensions", "measures"):
        data.pop(key)
    (out / "run.json").write_text(json.dumps(data))
    assert read_run(out).schema_version == 5
    assert main(["grade", str(out)]) == 0
    assert main(["show", str(out)]) == 0


def test_a_newer_record_is_refused_naming_its_version(tmp_path, capsys):
    out = _oracle_run(tmp_path)
    data = json.loads((out / "run.json").read_text())
    data["schema_version"] = 7
    (out / "run.json").write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="schema_version 7 by a newer toolgym"):
        read_run(out)
    assert main(["show", str(out)]) == 2
    assert "schema_version 7" in capsys.readouterr().err


def test_an_invalid_field_is_named(tmp_path):
    out = _oracle_run(tmp_path)
    data = json.loads((out / "run.json").read_text())
    data["trials"] = "three"
    (out / "run.json").write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="field trials"):
        read_run(out)


def test_expected_steps_are_derived_from_expected_calls():
    example = Example(id="1", input="ab", expected_calls=[
        {"name": "type_letter", "arguments": {"letter": "a"}}, {"name": "type_letter", "arguments": {"letter": "b"}},
    ])
    assert example.expected_steps == ["type_letter", "type_letter"]
    with pytest.raises(ValueError, match="must equal expected_steps"):
        Example(id="2", input="a", expected_steps=["b"], expected_calls=[{"name": "a"}])


def test_stream_lines_goes_on_from_an_offset_and_leaves_a_torn_line(tmp_path):
    from toolgym.runio import stream_lines

    path = tmp_path / "scores.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": 2}\r\n{"c": 3')
    lines = list(stream_lines(path))
    assert [(n, raw) for n, _, raw in lines] == [(1, b'{"a": 1}'), (3, b'{"b": 2}')]  # the blank line counted
    end = lines[-1][1]
    assert end == len(b'{"a": 1}\n\n{"b": 2}\r\n')
    with open(path, "ab") as fh:  # the torn line completed, one more appended
        fh.write(b'}\n{"d": 4}\n')
    assert [(n, raw) for n, _, raw in stream_lines(path, end, 4)] == [(4, b'{"c": 3}'), (5, b'{"d": 4}')]
    assert list(stream_lines(tmp_path / "missing.jsonl")) == []


def test_score_fields_read_a_line_as_the_score_record_does(tmp_path):
    from toolgym.records import Score
    from toolgym.runio import record_line, score_fields

    path = tmp_path / "scores.jsonl"
    for score in (Score(example_id="e", grader="g", value=1), Score(example_id="e", trial=2, grader="g", value=None,
                                                                     explanation="x", details={"k": [1]})):
        raw = record_line(score).rstrip(b"\n")
        assert score_fields(path, 1, raw) == Score.model_validate_json(raw).model_dump()
    assert score_fields(path, 1, b'{"example_id": "e", "grader": "g", "value": NaN}')["value"] is None
    with pytest.raises(RunDirError, match=r"scores.jsonl:7: invalid record: field value"):
        score_fields(path, 7, b'{"example_id": "e", "grader": "g"}')
    with pytest.raises(RunDirError, match=r"scores.jsonl:3: invalid record: field trial: not an integer"):
        score_fields(path, 3, b'{"example_id": "e", "grader": "g", "trial": "1", "value": 1}')
    with pytest.raises(RunDirError, match=r"scores.jsonl:2: invalid record: not JSON"):
        score_fields(path, 2, b'{"example_id": ')


def test_a_version_4_record_reads_as_written(tmp_path):
    # version 5 only adds what the lines may hold (multi-turn steps, new statuses)
    out = _oracle_run(tmp_path)
    data = json.loads((out / "run.json").read_text())
    data["schema_version"] = 4
    (out / "run.json").write_text(json.dumps(data))
    assert read_run(out).schema_version == 5
    assert main(["show", str(out)]) == 0

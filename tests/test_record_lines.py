"""Record lines written by toolgym's fast path equal pydantic's own JSON (without the fields that
hold their declared default), byte for byte, and read back as the records written."""

from __future__ import annotations

import datetime as dt
import enum
import math
import random
import struct
import uuid

import pytest

from toolgym import ModelStep, Score, TokenRecord, ToolCall, ToolStep, Trajectory
from toolgym.runio import omitted_defaults, record_line, write_jsonl_atomic


class Color(enum.Enum):
    RED = "red"


class Text(str):
    pass


def _lean(record) -> bytes:
    """Pydantic's JSON of ``record`` without its default fields, newline included."""
    return record.model_dump_json(exclude=omitted_defaults(record)).encode() + b"\n"


def _floats(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.0, 0.1, 1e16, 1e-7, 1.5e-7, 123456789.0, 1e21, 1e22, 5e-324, 2.2250738585072014e-308,
              1.7976931348623157e308, math.pi, -math.e, 100.0, 1e15, 9007199254740993.0]
    values += [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(n)]
    values += [rng.uniform(-1e6, 1e6) for _ in range(n)] + [rng.random() * 10 ** rng.randint(-30, 30) for _ in range(n)]
    return [v for v in values if math.isfinite(v)]


STRINGS = ["", "plain", "東京の天気", "emoji 😀 and ＡＢＣ", "quote \" backslash \\ slash /", "\x00\x01\x1f\x7f",
           "\t\n\r\b\f", "\u2028\u2029", "</script>", "é" * 300]


def _trajectory(details: dict) -> Trajectory:
    return Trajectory(
        example_id="ex-1", trial=2, env="typewriter_1", agent="tool_calling", model="scripted", status="completed",
        steps=[
            ModelStep(text="hi", tool_calls=[ToolCall(id="c1", name="type_letter", arguments=details)], latency_s=0.25,
                      input_tokens=12, output_tokens=3, reasoning="thinking", reasoning_tokens=2,
                      tokens=TokenRecord(prompt_ids=[1, 2], completion_ids=[3], completion_logprobs=[-0.5],
                                         logprob_source="sampled")),
            ToolStep(call_id="c1", name="type_letter", arguments=details, output="ok"),
        ],
        final_state=details, final_answer="done", duration_s=1.5,
    )


@pytest.mark.parametrize("value", [
    _floats(300, 1), STRINGS, {s: s for s in STRINGS}, [1, -1, 2**63 - 1, -(2**63), 2**64 - 1], [True, False, None],
    {"nested": [[{"a": [1.5, "x"]}]] * 3}, (1, "tuple"), float("nan"), float("inf"), -float("inf"),
    uuid.UUID(int=12345), Color.RED,
])
def test_plain_values_are_written_as_pydantic_writes_them(value):
    for record in (_trajectory({"v": value}),
                   Score(example_id="e", grader="g", value=0.5, explanation="x", details={"v": value})):
        assert record_line(record) == _lean(record)


@pytest.mark.parametrize("value", [
    2**64, -(2**63) - 1, 10**40, b"bytes", {1, 2}, dt.datetime(2026, 12, 1, 11, 41, tzinfo=dt.UTC), dt.date(2026, 1, 2),
    Text("a str subclass"), {1: "int key"},
])
def test_other_values_are_written_by_pydantic(value):
    score = Score(example_id="e", grader="g", value=1.0, details={"v": value})
    try:
        expected = _lean(score)
    except Exception as exc:  # what pydantic cannot write, the fast path does not write either
        with pytest.raises(type(exc)):
            record_line(score)
    else:
        assert record_line(score) == expected


def test_a_lone_surrogate_is_written_as_the_replacement_character():
    score = Score(example_id="e", grader="g", value=1.0, explanation="x \udfff", details={"v": "lone \ud800", "\ud801": [1]})
    with pytest.raises(ValueError, match="surrogates not allowed"):  # what pydantic does
        score.model_dump_json()
    line = record_line(score)
    assert Score.model_validate_json(line).model_dump() == {
        **score.model_dump(), "explanation": "x \ufffd", "details": {"v": "lone \ufffd", "\ufffd": [1]}}


def test_records_built_without_validation_and_subclasses(tmp_path):
    built = Score.model_construct(schema_version=1, example_id="e", trial=0, grader="g", value=1, explanation="",
                                  details={})

    class Extended(Score):
        note: str = "default"
        flag: list[int] | None = None

    ints = _trajectory({"a": 1})
    ints.duration_s, ints.steps[0].latency_s, ints.steps[0].tokens.completion_logprobs = 2, 0, [-1, -0.5]
    records = [built, Extended(example_id="e", grader="g", value=None, note="kept", flag=[]), _trajectory({"a": 1}), ints]
    write_jsonl_atomic(tmp_path / "r.jsonl", records)
    assert (tmp_path / "r.jsonl").read_bytes() == b"".join(map(_lean, records))
    assert b'"note":"kept","flag":[]' in (tmp_path / "r.jsonl").read_bytes()
    assert b'"note"' not in record_line(Extended(example_id="e", grader="g", value=None))


def test_defaults_are_left_out_and_read_back():
    traj = Trajectory(example_id="ex", env="typewriter_1", agent="oracle", status="completed",
                      steps=[ModelStep(), ToolStep(call_id="c", name="type_letter")])
    line = record_line(traj)
    assert line == (b'{"example_id":"ex","env":"typewriter_1","agent":"oracle","status":"completed",'
                    b'"steps":[{"kind":"model"},{"kind":"tool","call_id":"c","name":"type_letter"}]}\n')
    assert Trajectory.model_validate_json(line) == traj
    score = Score(example_id="ex", grader="g", value=1.0)
    assert record_line(score) == b'{"example_id":"ex","grader":"g","value":1.0}\n'
    assert Score.model_validate_json(record_line(score)) == score


@pytest.mark.parametrize("field, value", [
    ("trial", 1), ("duration_s", -0.0), ("final_answer", ""), ("final_state", {"a": None}), ("model", "m"),
])
def test_values_beside_their_default_are_kept(field, value):
    traj = Trajectory(example_id="ex", env="e", agent="a", status="completed", **{field: value})
    line = record_line(traj)
    assert f'"{field}"'.encode() in line
    back = Trajectory.model_validate_json(line)
    assert getattr(back, field) == value and type(getattr(back, field)) is type(value)
    if field == "duration_s":
        assert str(back.duration_s) == "-0.0"


def test_a_none_default_field_holding_an_empty_list_is_kept():
    tokens = TokenRecord(prompt_ids=[], completion_ids=None)
    step = ModelStep(tokens=tokens, reasoning_tokens=0)
    line = record_line(step)
    assert line == b'{"kind":"model","reasoning_tokens":0,"tokens":{"prompt_ids":[]}}\n'
    assert ModelStep.model_validate_json(line) == step


@pytest.mark.parametrize("final_state", [
    {"result_file": {"file": "/data/result_m.jsonl", "line": 7}},  # its origin only: left out
    {"result_file": {"file": "/data/result_m.jsonl", "line": 8}},  # another line: kept
    {"result_file": {"file": "/data/result_m.jsonl", "line": 7}, "paper": "x"},  # a state beside it: kept
    {"result_file": {"file": "/data/result_m.jsonl", "line": 7, "result": "[]"}},  # more than the origin: kept
    {"result_file": "/data/result_m.jsonl"},
    {},
])
def test_an_imported_trajectory_leaves_out_its_origin_only(final_state):
    traj = Trajectory(example_id="t", env="jmultiwoz_tc", agent="imported", status="completed", source_line=7,
                      steps=[ModelStep(text='{"data_id": "t"}')], final_state=final_state)
    line = record_line(traj)
    assert line == _lean(traj)  # the fast path and pydantic's agree
    assert (b'"final_state"' in line) == (final_state != {"result_file": {"file": "/data/result_m.jsonl", "line": 7}}
                                         and final_state != {})
    assert b'"text"' not in line  # the line is the result file's

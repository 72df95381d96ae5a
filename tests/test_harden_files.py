"""Operating-system errors are one clear line and leave nothing half-written; no stray warnings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolgym.cli import main
from toolgym.runio import atomic_file

ROOT = Path(__file__).resolve().parents[1]


def oracle_run(out: Path) -> list[str]:
    return ["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--out", str(out), "--no-progress"]


@pytest.fixture
def run_dir(tmp_path):
    out = tmp_path / "run"
    assert main(oracle_run(out)) == 0
    return out


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[Errno" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def no_tmp(directory: Path) -> None:
    assert not [p for p in directory.rglob("*.tmp")], list(directory.rglob("*.tmp"))


def test_out_naming_an_existing_file(tmp_path, capsys):
    target = tmp_path / "afile"
    target.write_text("keep me")
    assert main(oracle_run(target)) == 2
    assert "afile: is a file, not a run directory" in one_error_line(capsys)
    assert target.read_text() == "keep me"
    assert main(oracle_run(target / "sub")) == 2
    assert "not a directory" in one_error_line(capsys)


@pytest.mark.parametrize("command", ["report", "generate"])
def test_writing_over_a_directory_is_one_line_and_leaves_no_tmp(tmp_path, run_dir, capsys, command):
    target = tmp_path / "somedir"
    target.mkdir()
    argv = ["report", str(run_dir), "--out", str(target)] if command == "report" else \
        ["generate", "--env", "typewriter_1", "--out", str(target)]
    assert main(argv) == 2
    assert "somedir: is a directory" in one_error_line(capsys)
    no_tmp(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path, run_dir, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert main(["report", str(run_dir), "--out", str(locked / "r.html")]) == 2
        assert "permission denied" in one_error_line(capsys)
        assert main(oracle_run(locked / "run")) == 2
        assert "permission denied" in one_error_line(capsys)
    finally:
        locked.chmod(0o755)


def test_atomic_file_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError), atomic_file(path) as fh:
        fh.write("new \ud800")  # a lone surrogate cannot be written as UTF-8
    assert path.read_text() == "old"
    no_tmp(tmp_path)


LINE = '{"id": "e1", "input": "ab", "expected_steps": ["type_letter", "type_letter"]}\n'


@pytest.mark.parametrize(
    ("codec", "found"),
    [("utf-16", "UTF-16 (little-endian, with a byte-order mark)"), ("utf-16-le", "UTF-16 (little-endian, without"),
     ("utf-16-be", "UTF-16 (big-endian, without"), ("utf-32", "UTF-32 (little-endian, with a byte-order mark)")],
)
def test_a_dataset_in_another_encoding_is_named(tmp_path, capsys, codec, found):
    data = tmp_path / "d.jsonl"
    data.write_bytes(LINE.encode(codec))
    assert main(["check", "--env", "typewriter_1", "--dataset", str(data)]) == 2
    error = one_error_line(capsys)
    assert str(data) in error and found in error and "UTF-8" in error


def test_a_dataset_with_a_utf8_byte_order_mark_is_read(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + LINE.encode())
    assert main(["check", "--env", "typewriter_1", "--dataset", str(data)]) == 0


def test_latin1_bytes_name_the_line_and_byte(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_bytes(LINE.encode() + LINE.replace("e1", "caf\xe9").encode("latin-1"))
    assert main(["check", "--env", "typewriter_1", "--dataset", str(data)]) == 2
    assert "d.jsonl:2: not UTF-8 text (byte 0xe9)" in one_error_line(capsys)


def test_a_write_that_names_no_file_names_the_output_directory(tmp_path, capsys, monkeypatch):
    """A full disk fails a write() of an open file: the error carries no file name."""
    import errno

    import toolgym.cli as cli

    def full(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cli, "cmd_run", full)
    assert main(oracle_run(tmp_path / "out")) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {tmp_path / 'out'}: no space left on device"), line


@pytest.mark.parametrize("doc, expected", [
    ('{"turns": 5}', "turns: Input should be a valid list"),
    ('{"turnz": []}', "unknown key(s) 'turnz'"),
    ('[{"tool_calls": [{"name": "a", "args": "x"}]}]', "turns[0]: tool_calls.0.args"),
    ("[5]", "turns[0]: a turn is a string or an object"),
])
def test_a_bad_scripted_model_file_is_one_line_naming_the_file(tmp_path, capsys, doc, expected):
    script = tmp_path / "script.json"
    script.write_text(doc, encoding="utf-8")
    argv = ["run", "--env", "typewriter_26", "--model", f"scripted:{script}", "--limit", "1",
            "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {script}: ") and expected in line, line


def test_a_corrupt_run_file_names_the_line_and_the_field(run_dir, capsys):
    scores = run_dir / "scores.jsonl"
    scores.write_text('{"example_id": "x"}\n', encoding="utf-8")
    assert main(["summary", str(run_dir)]) == 2
    line = one_error_line(capsys)
    assert "scores.jsonl:1: invalid record: field " in line and "Field required" in line, line


def test_evaluate_with_out_naming_a_file_is_a_clear_error(tmp_path):
    import toolgym

    target = tmp_path / "afile"
    target.write_text("keep me")
    with pytest.raises(toolgym.RunDirError, match="afile: is a file, not a run directory"):
        toolgym.evaluate("typewriter_1", agent="oracle", out=target, limit=1)
    assert target.read_text() == "keep me"

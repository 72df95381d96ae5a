"""A new user's second hour: run folders of their own, scores that say what they compare, a
repeat guard for a looping model, error lines that blame the right file, dataset checks that
report every bad line, and views that offer only what they can show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.cli import main


def error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error:")]


# --- item 4: a missing GGUF file is named, not the output folder -----------------------------
def test_a_missing_local_model_file_is_named_not_the_output_folder(tmp_path, capsys):
    pytest.importorskip("xllamacpp")
    out = tmp_path / "out"
    argv = ["run", "--env", "typewriter_1", "--model", "local:qwen7b", "--limit", "1", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 2
    [line] = error_lines(capsys)
    assert line.startswith("error: qwen7b: GGUF model file not found"), line
    assert str(out) not in line and "while writing" not in line, line


def test_an_os_error_naming_no_file_is_blamed_on_the_output_folder_only_for_a_failed_write(tmp_path, capsys,
                                                                                         monkeypatch):
    import errno

    import toolgym.cli as cli

    def missing(args):
        raise FileNotFoundError("DNS name not found")

    monkeypatch.setattr(cli, "cmd_run", missing)
    out = tmp_path / "out"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--out", str(out)]) == 2
    [line] = error_lines(capsys)
    assert line == "error: DNS name not found", line

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "cmd_run", full)
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--out", str(out)]) == 2
    [line] = error_lines(capsys)
    assert line == f"error: {out}: no space left on device (while writing there)", line

"""A new user's second hour: run folders of their own, scores that say what they compare, a
repeat guard for a looping model, error lines that blame the right file, dataset checks that
report every bad line, and views that offer only what they can show."""

from __future__ import annotations

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


# --- item 7 and 9: `list` says what each agent and grader is, in 80 columns --------------------
def _list_output() -> str:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(root / "run_agent.py"), "list"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _rows(stdout: str) -> dict[tuple[str, str], str]:
    """``(kind, name) -> description`` from the per-kind tables (a wrapped description's
    continuation lines joined)."""
    import re

    rows: dict[tuple[str, str], str] = {}
    kind, last = "", None
    for line in stdout.splitlines():
        title = re.fullmatch(r"\s*(environment|agent|grader|model)s \(--\w+\)\s*", line)
        if title:
            kind = title.group(1)
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) != 3 or cells[0] in ("", "name") and cells[2] in ("", "what it is"):
            continue
        if cells[0]:
            last = (kind, cells[0])
            rows[last] = cells[2]
        elif last is not None:
            rows[last] += " " + cells[2]
    return rows


def test_list_describes_every_agent_and_grader_and_fits_80_columns():
    out = _list_output()
    assert "(continued)" not in out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    rows = _rows(out)
    for kind in ("agent", "grader"):
        named = {name: text for (k, name), text in rows.items() if k == kind}
        assert len(named) >= 5, rows
        empty = [name for name, text in named.items() if len(text) < 15]
        assert not empty, empty
    assert rows[("grader", "steps_exact")].startswith("1.0 when the tool names called equal expected_steps")
    assert rows[("agent", "oracle")].startswith("A perfect reference trajectory")


def test_a_description_is_the_first_sentence_in_plain_words():
    from toolgym.registry import first_sentence

    doc = """Tool calls made divided by ``expected_steps`` (:class:`toolgym.graders.steps.StepRatio`, et al.
    2016). Above 1 means wasted steps.

    Args:
        x: y.
    """
    assert first_sentence(doc) == "Tool calls made divided by expected_steps (StepRatio, et al. 2016)."
    long = "A" + " long clause" * 10 + " (kept; inside) ; and a second clause that is cut."
    assert first_sentence(long) == "A" + " long clause" * 10 + " (kept; inside)."
    assert first_sentence("") == ""

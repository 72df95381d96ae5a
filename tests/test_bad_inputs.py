"""The smaller bad inputs of issue 38, item 8, through ``toolgym run``: a dataset line nested
100,000 deep and a lone surrogate in an example id are refused by name (they ended in a
traceback, or the example was recorded under another id and played twice by ``--resume``); a
string given for a number argument is an invalid argument the model sees (it was read as the
number without a word)."""

from __future__ import annotations

import json

from toolgym.cli import main
from toolgym.runio import read_trajectories


def run(tmp_path, *argv: str) -> int:
    return main(["run", "--env", "typewriter_1", "--out", str(tmp_path / "run"), "--no-progress", *argv])


def test_a_dataset_line_nested_too_deep_is_named(tmp_path, capsys):
    data = tmp_path / "deep.jsonl"
    data.write_text(json.dumps({"id": "ok", "input": "a"}) + "\n" + '{"id": "x", "input": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert run(tmp_path, "--agent", "oracle", "--dataset", str(data)) == 2
    err = capsys.readouterr().err
    assert f"{data}:2: nested too deep to read" in err and "Traceback" not in err


def test_a_lone_surrogate_in_an_id_is_refused_by_name(tmp_path, capsys):
    data = tmp_path / "ids.jsonl"
    data.write_text('{"id": "a\\ud800", "input": "a"}\n{"id": "a", "input": "a"}\n')
    assert run(tmp_path, "--agent", "oracle", "--dataset", str(data)) == 2
    assert "example id 'a\\ud800' holds a lone surrogate" in capsys.readouterr().err
    assert not (tmp_path / "run" / "trajectories.jsonl").exists()


def test_a_string_for_a_number_argument_is_refused(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": [{"name": "get_user_name", "args": {"user_id": "1"}}]},
                                  "done"]))
    assert main(["run", "--env", "relational_data", "--limit", "1", "--model", f"scripted:{script}", "--out",
                 str(tmp_path / "run"), "--no-progress"]) == 0
    [traj] = read_trajectories(tmp_path / "run")
    [step] = traj.tool_steps
    assert step.error and step.rejected
    assert step.output == "Error: invalid arguments for 'get_user_name': user_id: a string is not a number, got \"1\""

"""What a second new user's trial found in the command line: a positional run directory beside
``--result`` silently ignored, and ``replay`` of an imported run claiming it replayed."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.cli import main

DATA = Path(__file__).parent / "data" / "run_v2" / "jmultiwoz_data"
needs_jmultiwoz = pytest.mark.skipif(importlib.util.find_spec("toolgym.suites.jmultiwoz_tc") is None,
                                     reason="the jmultiwoz_tc suite is not installed (a suite can be removed)")


@pytest.fixture
def imported(tmp_path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    out = tmp_path / "imported"
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(data / "result_fixture.jsonl"), "--dataset",
                 str(data / "jmultiwoz_tc_input.jsonl"), "--out", str(out)]) == 0
    return data, out


@needs_jmultiwoz
def test_grade_refuses_a_run_directory_beside_result(imported, tmp_path, capsys):
    data, out = imported
    capsys.readouterr()
    assert main(["grade", str(out), "--env", "jmultiwoz_tc", "--result", str(data / "result_fixture.jsonl"),
                 "--dataset", str(data / "jmultiwoz_tc_input.jsonl"), "--out", str(tmp_path / "other")]) == 2
    assert "give a run directory" in capsys.readouterr().err and not (tmp_path / "other").exists()


@needs_jmultiwoz
def test_replay_of_an_imported_run_says_nothing_was_executed(imported, capsys):
    _, out = imported
    capsys.readouterr()
    assert main(["replay", str(out)]) == 0
    err = capsys.readouterr().err
    assert "nothing to replay" in err and "replays as recorded" not in err


def test_a_dataset_of_another_environment_is_refused_by_bfcl_before_any_episode(tmp_path, capsys):
    dataset = tmp_path / "rd.jsonl"
    dataset.write_text('{"id": "rd-01", "input": "Where does Alice live?", "reference": "Osaka"}\n', encoding="utf-8")
    capsys.readouterr()
    assert main(["run", "--env", "bfcl", "--agent", "oracle", "--dataset", str(dataset), "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    assert "not a BFCL dataset" in capsys.readouterr().err
    assert not (tmp_path / "r" / "trajectories.jsonl").exists()


@needs_jmultiwoz
def test_a_result_file_written_as_one_json_array_is_named_as_such(tmp_path, capsys):
    import json

    lines = (DATA / "result_fixture.jsonl").read_text(encoding="utf-8").splitlines()
    array = tmp_path / "array.json"
    array.write_text(json.dumps([json.loads(line) for line in lines if line.strip()], indent=1), encoding="utf-8")
    capsys.readouterr()
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(array), "--dataset",
                 str(DATA / "jmultiwoz_tc_input.jsonl"), "--out", str(tmp_path / "out")]) == 2
    assert "the file is one JSON array: a result file is JSON Lines" in capsys.readouterr().err


@needs_jmultiwoz
def test_a_fork_of_a_run_no_agent_here_can_play_asks_for_one(imported, tmp_path, capsys):
    _, out = imported
    capsys.readouterr()
    assert main(["fork", str(out), "--example", "jmultiwoz_tc_0_turn_1", "--at", "1", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert "another tool (an imported result file)" in err and "give --agent" in err and "unknown agent" not in err


def test_a_state_pattern_on_a_key_the_environment_lacks_is_named_when_the_dataset_is_read(tmp_path):
    import json

    dataset = tmp_path / "ds.jsonl"
    dataset.write_text(json.dumps({
        "id": "ab", "input": "Type ab.", "expected_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}],
        "milestones": [{"id": "a", "call": {"name": "a"}}, {"id": "typed", "after": ["a"], "state": {"papr": "ab"}}],
        "minefields": [{"state": {"paper": {"$contains": "zz"}}}],
    }) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"field milestones\[1\]\.state names the key 'papr', which the state of "
                                         r"typewriter_26 after reset does not have \(its keys: paper\)"):
        assert main(["run", "--env", "typewriter_26", "--agent", "oracle", "--dataset", str(dataset), "--out",
                     str(tmp_path / "r"), "--no-progress"]) == 0


@needs_jmultiwoz
def test_the_result_line_of_a_call_of_an_unknown_tool_keeps_its_arguments(tmp_path):
    import json

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "", "tool_calls": [
        {"name": "Search_station", "args": {"city": "東京"}}]}, "done"]}), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", "--env", "jmultiwoz_tc", "--model", f"scripted:{script}", "--dataset",
                 str(DATA / "jmultiwoz_tc_input.jsonl"), "--limit", "1", "--out", str(out), "--no-progress"]) == 0
    (result,) = out.glob("result_*.jsonl")
    line = json.loads(result.read_text(encoding="utf-8").splitlines()[0])
    (call,) = line["tool_calls"]
    assert (call["name"], call["arguments"]) == ("Search_station", {"city": "東京"}) and "unknown tool" in call["malformed"]


def test_summary_says_when_a_run_was_never_graded(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--env", "typewriter_26", "--agent", "oracle", "--limit", "2", "--out", str(out),
                 "--no-progress"]) == 0
    (out / "scores.jsonl").unlink()  # as a run or an import stopped before grading leaves it
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    assert "has 2 trajectories and no scores.jsonl: it was not graded" in capsys.readouterr().err
    assert main(["grade", str(out)]) == 0 and main(["summary", str(out)]) == 0
    assert "not graded" not in capsys.readouterr().err


def test_a_teacher_forced_run_counts_the_steps_of_next_step_not_trials(tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", "150")
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text(json.dumps({"id": "ab", "input": "Type ab.", "expected_state": {"paper": "ab"}, "expected_calls": [
        {"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]}) + "\n", encoding="utf-8")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"content": "", "tool_calls": [{"name": "a", "args": {}}]}],
                                  "repeat_last": True}), encoding="utf-8")
    capsys.readouterr()
    assert main(["run", "--env", "typewriter_26", "--dataset", str(dataset), "--model", f"scripted:{script}",
                 "--protocol", "teacher-forced", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "next_step" in line and "pass" in line)
    assert row.rstrip().endswith("1  2 steps"), row


@needs_jmultiwoz
def test_an_import_against_a_dataset_of_another_environment_says_so(tmp_path, capsys):
    other = tmp_path / "BFCL_like.json"
    other.write_text('{"id": "simple_python_0", "question": [[{"role": "user", "content": "hi"}]], "function": []}\n',
                     encoding="utf-8")
    capsys.readouterr()
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(DATA / "result_fixture.jsonl"), "--dataset",
                 str(other), "--out", str(tmp_path / "out")]) == 2
    assert "not a dataset in jmultiwoz_tc's own format either" in capsys.readouterr().err


def test_a_bfcl_call_with_the_datas_dotted_name_is_checked_by_the_leaderboards_name_rule(tmp_path):
    import json

    data = REFERENCE_DATA / "bfcl_v4" / "BFCL_v4_simple_python.json"
    if not data.exists():
        pytest.skip("the BFCL v4 data is not beside the repository")
    first = json.loads(data.read_text(encoding="utf-8").splitlines()[1])  # simple_python_1: math.factorial(number=5)
    question = first["question"][0][-1]["content"]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"by_input": {question: [{"tool_calls": [{"name": "math.factorial", "args": {"number": 5}}]}]},
                                  "turns": ["no"]}), encoding="utf-8")
    out = tmp_path / "r"
    assert main(["run", "--env", "bfcl", "--model", f"scripted:{script}", "--dataset", str(data), "--limit", "2",
                 "--out", str(out), "--no-progress"]) == 0
    lines = [json.loads(x) for x in (out / "BFCL_v4_simple_python_result.json").read_text(encoding="utf-8").splitlines()]
    assert {"id": "simple_python_1", "result": [{"math.factorial": {"number": 5}}]} in lines
    from toolgym import load_run

    (score,) = [s for s in load_run(out).scores if s.example_id == "simple_python_1" and s.grader == "bfcl_accuracy"]
    assert score.value == 1.0, score


def test_layout_is_refused_where_no_published_files_have_one(tmp_path, capsys):
    capsys.readouterr()
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--layout", "published",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "option 'layout' (--layout)" in capsys.readouterr().err
    assert not (tmp_path / "r" / "run.json").exists()

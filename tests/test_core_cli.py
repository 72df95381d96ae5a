"""The command line end to end: run, grade, show; bad input never loses written work."""

import json

import pytest

from tests.conftest import call, turn
from toolgym.cli import main
from toolgym.runio import read_scores, read_trajectories


@pytest.mark.parametrize("env", ["typewriter_1", "typewriter_26"])
def test_oracle_scores_one_on_every_grader(tmp_path, env, capsys):
    out = tmp_path / "run"
    assert main(["run", "--env", env, "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    scores = read_scores(out)
    assert {s.grader for s in scores} == {"final_state", "steps_exact", "step_ratio"}
    assert all(s.value == 1.0 for s in scores)
    assert len(read_trajectories(out)) == 25
    info = json.loads((out / "run.json").read_text())
    assert info["env"] == env and len(info["dataset"]["sha256"]) == 64
    assert "1.000 ± 0.000" in capsys.readouterr().out


def test_scripted_model_run_records_steps_and_scores(tmp_path, script_file):
    script = script_file({"by_input": {
        "a": [turn(call("type_letter", letter="a")), "a"],
        "aa": [turn(call("type_letter", letter="a")), "a"],  # one letter short
    }})
    out = tmp_path / "run"
    argv = ["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--limit", "3",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    trajs = {t.example_id: t for t in read_trajectories(out)}
    assert trajs["tw-00-a"].status == "completed"
    assert trajs["tw-02-aaa"].status == "error"  # no script for "aaa": recorded, run went on
    by = {(s.example_id, s.grader): s for s in read_scores(out)}
    assert by["tw-00-a", "final_state"].value == 1.0
    assert by["tw-01-aa", "final_state"].value == 0.0
    assert by["tw-01-aa", "step_ratio"].value == 0.5
    assert "step 2: expected type_letter, got (end)" == by["tw-01-aa", "steps_exact"].explanation
    assert not any(s.example_id == "tw-02-aaa" for s in by.values())


def test_grade_reproduces_scores_offline(tmp_path):
    out = tmp_path / "run"
    main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "4", "--out", str(out), "--no-progress"])
    before = (out / "scores.jsonl").read_text()
    (out / "scores.jsonl").unlink()
    assert main(["grade", str(out)]) == 0
    assert (out / "scores.jsonl").read_text() == before


def test_show_prints_the_trajectory_step_by_step(tmp_path, capsys):
    out = tmp_path / "run"
    main(["run", "--env", "typewriter_26", "--agent", "oracle", "--limit", "3", "--out", str(out), "--no-progress"])
    capsys.readouterr()
    assert main(["show", str(out), "--example", "tw-02-aaa"]) == 0
    text = capsys.readouterr().out
    assert text.count("a ⇒ OK") == 3 and "steps_exact = 1.0" in text
    assert main(["show", str(out), "--example", "nope"]) == 2


def test_bad_dataset_line_fails_before_any_model_call_and_keeps_old_run(tmp_path, capsys):
    out = tmp_path / "run"
    main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out), "--no-progress"])
    before = (out / "trajectories.jsonl").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "input": "a"}\n{oops\n')
    code = main(["run", "--env", "typewriter_1", "--dataset", str(bad), "--out", str(out), "--resume", "--no-progress"])
    assert code == 2
    assert "bad.jsonl:2: not valid JSON" in capsys.readouterr().err
    assert (out / "trajectories.jsonl").read_bytes() == before


def test_existing_run_is_not_overwritten_without_resume(tmp_path, capsys):
    out = tmp_path / "run"
    main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out), "--no-progress"])
    before = (out / "trajectories.jsonl").read_bytes()
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--out", str(out), "--no-progress"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert (out / "trajectories.jsonl").read_bytes() == before


def test_resume_skips_finished_episodes_and_drops_a_torn_line(tmp_path):
    out = tmp_path / "run"
    main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "3", "--out", str(out), "--no-progress"])
    path = out / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1] + lines[2][:40])  # killed while writing the third
    with pytest.warns(UserWarning, match="torn last line"):
        assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "5",
                     "--out", str(out), "--resume", "--no-progress"]) == 0
    ids = [t.example_id for t in read_trajectories(out)]
    assert sorted(ids) == ["tw-00-a", "tw-01-aa", "tw-02-aaa", "tw-03-aaaa", "tw-04-b"]
    assert len(ids) == len(set(ids))
    assert all(s.value == 1.0 for s in read_scores(out))


def test_unknown_names_get_did_you_mean(tmp_path, capsys):
    assert main(["run", "--env", "typewritter_1", "--out", str(tmp_path / "r")]) == 2
    assert "Did you mean 'typewriter_1'" in capsys.readouterr().err
    assert main(["run", "--env", "typewriter_1", "--agent", "orcale", "--out", str(tmp_path / "r")]) == 2
    assert "Did you mean 'oracle'" in capsys.readouterr().err


def test_list_shows_registries(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("typewriter_1", "oracle", "steps_exact", "scripted"):
        assert name in out


def test_dataset_of_another_environment_is_refused_before_running(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "--env", "typewriter_1", "--agent", "oracle", "--dataset", "toolgym/suites/multiverse_math/datasets/multiverse_math/test.jsonl",
                 "--out", str(out), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "tool 'add', named by 7 example(s) ('mm-01' (expected_steps)" in err and "typewriter_1 has no such tool" in err
    assert "every example names tools typewriter_1 lacks" in err  # all 25: the one case the note fits
    assert not out.exists()  # a failed start leaves no empty run directory (nor a lock file)


@pytest.mark.parametrize("flag", ["--limit", "--trials", "--concurrency", "--max-steps"])
@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_counts_must_be_positive_integers(tmp_path, flag, value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--env", "typewriter_1", "--agent", "oracle", flag, value, "--out", str(tmp_path / "r")])
    assert info.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_a_file_is_not_a_run_directory(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    for command in (["show", str(path)], ["grade", str(path)]):
        assert main(command) == 2
        assert "is a file, not a run directory" in capsys.readouterr().err

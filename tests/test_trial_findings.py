"""What a first user's trial of toolgym found wrong, each kept fixed: a dataset changed under a
run, options silently ignored, a broken grader hidden in "unscored", grader settings not
recorded, confident intervals from repeated trials, outputs written over a run's own files,
and ports or resample counts that crashed instead of being refused."""

import gc
import json
import warnings
from pathlib import Path

import pytest

from toolgym.api import load_run
from toolgym.cli import main
from toolgym.records import Measure, Score
from toolgym.runio import read_run, read_scores, read_trajectories
from toolgym.views.analysis import grader_stats

ORACLE = ["--agent", "oracle", "--no-progress"]


def _run(out, *extra, env="typewriter_26"):
    assert main(["run", "--env", env, *ORACLE, "--out", str(out), *extra]) == 0


def test_grade_against_a_changed_dataset_warns_and_records_the_new_sha256(tmp_path):
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "x", "input": "Type aa.", "expected_steps": ["a", "a"], "expected_calls": '
                       '[{"name": "a", "arguments": {}}, {"name": "a", "arguments": {}}], '
                       '"expected_state": {"paper": "aa"}}\n', encoding="utf-8")
    out = tmp_path / "run"
    _run(out, "--dataset", str(dataset))
    before = read_run(out).dataset.sha256
    assert read_scores(out)[0].value == 1.0
    dataset.write_text(dataset.read_text().replace('"paper": "aa"', '"paper": "ab"'), encoding="utf-8")
    with pytest.warns(UserWarning, match="changed since the run recorded it") as seen:
        load_run(out)  # the views say so too
    assert "graded against the earlier content" in str(seen[0].message)
    with pytest.warns(UserWarning, match="changed since the run recorded it.*records its new sha256"):
        assert main(["grade", str(out)]) == 0
    after = read_run(out).dataset.sha256
    assert after != before and len(after) == 64
    assert {s.grader: s.value for s in read_scores(out)}["final_state"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # graded against what run.json now names: no warning
        load_run(out)


def test_sample_draws_a_seeded_subset_where_no_suite_reads_it(tmp_path):
    first, again, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _run(first, "--sample", "5")
    _run(again, "--sample", "5")
    _run(other, "--sample", "5", "--sample-seed", "1")
    ids = [t.example_id for t in read_trajectories(first)]
    assert len(ids) == 5 and ids == [t.example_id for t in read_trajectories(again)]
    assert ids != [t.example_id for t in read_trajectories(other)]
    assert main(["grade", str(first)]) == 0  # the views read the same subset back
    assert {s.example_id for s in read_scores(first)} == set(ids)


def test_few_shot_options_are_refused_where_no_suite_reads_them(tmp_path, capsys):
    assert main(["run", "--env", "typewriter_26", *ORACLE, "--shots", "3", "--out", str(tmp_path / "r")]) == 2
    assert "option 'shots' (--shots) needs an environment" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_grader_that_raises_is_reported_not_hidden(tmp_path):
    grader = tmp_path / "boom.py"
    grader.write_text(
        "from dataclasses import dataclass\n"
        "import toolgym\n\n"
        "@dataclass\n"
        "class Boom:\n"
        "    name = 'boom'\n"
        "    def grade(self, example, trajectory):\n"
        "        if example.id.endswith('aa'):\n"
        "            raise RuntimeError('grader bug')\n"
        "        return toolgym.make_score(self, trajectory, 1.0, 'fine')\n", encoding="utf-8")
    out = tmp_path / "run"
    expected = r"grader boom raised on 2 trajectory\(ies\) \(first: example 'tw-01-aa' trial 0: RuntimeError: grader bug\)"
    with pytest.warns(UserWarning, match=expected):
        _run(out, "--limit", "3", "--grader", "final_state", "--grader", f"{grader}:Boom", env="typewriter_1")
    broken = [s for s in read_scores(out) if s.grader == "boom" and s.value is None]
    assert [s.example_id for s in broken] == ["tw-01-aa", "tw-02-aaa"]


def test_grade_records_the_trajectory_mode_it_graded_with(tmp_path):
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "ab", "input": "Type ab.", "expected_steps": ["b", "a"], '
                       '"expected_calls": [{"name": "b", "arguments": {}}, {"name": "a", "arguments": {}}]}\n',
                       encoding="utf-8")
    out = tmp_path / "run"
    _run(out, "--dataset", str(dataset), "--trajectory-mode", "unordered")  # the mode alone adds its grader
    assert "trajectory_match" in read_run(out).graders
    by = {s.grader: s.value for s in read_scores(out)}
    assert by["trajectory_match"] == 1.0
    assert main(["grade", str(out), "--trajectory-mode", "strict"]) == 0
    assert read_run(out).grader_settings["trajectory_mode"] == "strict"
    strict = {s.grader: s.value for s in read_scores(out)}["trajectory_match"]
    assert main(["grade", str(out)]) == 0  # a plain grade keeps the recorded mode
    assert read_run(out).grader_settings["trajectory_mode"] == "strict"
    assert {s.grader: s.value for s in read_scores(out)}["trajectory_match"] == strict


def test_wilson_interval_counts_agreeing_trials_once_per_example():
    binary = Measure()
    one = [Score(example_id=e, trial=0, grader="g", value=1.0) for e in "abc"]
    ten = [Score(example_id=e, trial=t, grader="g", value=1.0) for e in "abc" for t in range(10)]
    single, repeated = grader_stats("env", "g", one, binary), grader_stats("env", "g", ten, binary)
    assert repeated.wilson == pytest.approx(single.wilson)  # ten identical trials are not thirty examples
    assert single.wilson[0] < 0.5


@pytest.mark.parametrize("command", [
    ["export", "{run}", "--out", "{run}/trajectories.jsonl"],
    ["export", "{run}", "--out", "{run}/scores.jsonl"],
    ["report", "{run}", "--out", "{run}/trajectories.jsonl"],
    ["generate", "--env", "typewriter_1", "--out", "{run}/trajectories.jsonl"],
])
def test_outputs_are_never_written_over_a_runs_record_files(tmp_path, capsys, command):
    run = tmp_path / "base"
    _run(run, "--limit", "3")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()
    assert main([part.format(run=run) for part in command]) == 2
    assert "would overwrite a record file of the run directory" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert len(load_run(run).trajectories) == 3


@pytest.mark.parametrize("command", ["export", "report"])
def test_outputs_are_never_written_over_the_dataset_a_run_was_made_from(tmp_path, capsys, command):
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "x", "input": "Type a.", "expected_calls": [{"name": "a", "arguments": {}}]}\n',
                       encoding="utf-8")
    run = tmp_path / "base"
    _run(run, "--dataset", str(dataset))
    before = dataset.read_bytes()
    capsys.readouterr()
    assert main([command, str(run), "--out", str(dataset)]) == 2
    assert "would overwrite the dataset of the run" in capsys.readouterr().err
    assert dataset.read_bytes() == before
    assert main(["grade", str(run)]) == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["view", "--port", "99999", "--no-browser"], "argument --port: expected a port number (0 to 65535), got 99999"),
    (["serve", "--env", "typewriter_1", "--port", "-1"], "argument --port: expected a port number (0 to 65535), got -1"),
    (["compare", "a", "b", "--n-boot", "0"], "argument --n-boot: expected a positive integer, got 0"),
])
def test_numbers_out_of_range_are_refused_by_the_parser(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_gym_step_of_the_readme_installs_its_extra():
    text = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    block = text.split("python gym_episode.py")[0].rsplit("```bash", 1)[1]
    assert "pip install -e '.[gym]'" in block


def test_show_failed_by_a_grader_without_a_pass_rule_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    _run(out, "--limit", "2", "--grader", "step_ratio", "--grader", "steps_exact", env="typewriter_1")
    run_json = out / "run.json"
    record = json.loads(run_json.read_text())
    record["measures"]["step_ratio"]["pass_if"] = None  # a grader reading only a number (as step_precision)
    run_json.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["show", str(out), "--failed", "--grader", "step_ratio"]) == 2
    assert "grader 'step_ratio' has no pass rule" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--env", "typewriter_1", "--temperature", "nan"], "argument --temperature: expected a finite number"),
    (["run", "--env", "typewriter_1", "--max-tokens", "-5"], "argument --max-tokens: expected a positive integer"),
])
def test_model_settings_out_of_range_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("field", ["concurrency", "trials", "limit", "workers", "max_steps"])
def test_the_python_api_refuses_what_the_command_line_refuses(field, tmp_path):
    import toolgym

    with pytest.raises(ValueError, match=f"{field} must be a positive integer, got 0"):
        toolgym.evaluate("typewriter_1", agent="oracle", **{field: 0})


def test_grade_names_an_unknown_grader_as_the_callers_and_replay_says_all_replayed(tmp_path, capsys):
    out = tmp_path / "run"
    _run(out, "--limit", "1", env="typewriter_1")
    before = (out / "scores.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["grade", str(out), "--grader", "nope"]) == 2
    err = capsys.readouterr().err
    assert "error: unknown grader 'nope'" in err and "can no longer be found" not in err
    assert (out / "scores.jsonl").read_bytes() == before
    assert main(["replay", str(out)]) == 0
    assert "every trajectory replays as recorded (no difference)" in capsys.readouterr().err


def test_pass_and_success_graders_without_a_pass_rule_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    _run(out, "--limit", "2", "--grader", "step_ratio", "--grader", "steps_exact", env="typewriter_1")
    run_json = out / "run.json"
    record = json.loads(run_json.read_text())
    record["measures"]["step_ratio"]["pass_if"] = None
    run_json.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["export", str(out), "--format", "preference", "--pass-grader", "step_ratio",
                 "--out", str(tmp_path / "pairs.jsonl")]) == 2
    assert "grader 'step_ratio' has no pass rule" in capsys.readouterr().err
    for grader, why in (("step_ratio", "has no pass rule"), ("nope", "is not a grader of these runs")):
        assert main(["report", str(out), "--success-grader", grader, "--out", str(tmp_path / "r.html")]) == 2
        assert f"--success-grader: {grader!r} {why}; graders with a pass rule: steps_exact" in capsys.readouterr().err
    assert not (tmp_path / "pairs.jsonl").exists() and not (tmp_path / "r.html").exists()


def test_compare_of_a_two_sided_measure_does_not_let_over_and_undershoots_cancel():
    from toolgym.records import Trajectory
    from toolgym.runio import Run as RunData
    from toolgym.runio import RunRecord
    from toolgym.views.analysis import compare_runs

    ratio = Measure(kind="continuous", direction="target", target=1.0, pass_if="==", threshold=1.0)

    def run(values):
        record = RunRecord(env="typewriter_1", agent={"agent": "x"}, graders=["step_ratio"], measures={"step_ratio": ratio})
        scores = [Score(example_id=e, trial=0, grader="step_ratio", value=v) for e, v in zip("ab", values, strict=True)]
        trajectories = [Trajectory(example_id=e, trial=0, env="typewriter_1", agent="x", status="completed")
                        for e in "ab"]
        return RunData(None, record, trajectories, scores)

    row = compare_runs(run([0.5, 1.5]), run([1.0, 1.25])).graders[0]
    assert (row.mean_a, row.mean_b) == (1.0, 1.125)
    assert row.better == "B"  # A's mean is exactly 1, but neither of its examples is


def test_view_names_a_missing_folder_and_a_taken_port_without_leaking_the_socket(tmp_path, capsys):
    import socket

    assert main(["view", str(tmp_path / "nope"), "--no-browser"]) == 2
    assert f"{tmp_path / 'nope'}: does not exist" in capsys.readouterr().err
    (tmp_path / "runs").mkdir()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ResourceWarning)  # an unclosed socket would be one
            status = main(["view", str(tmp_path / "runs"), "--no-browser", "--port", str(taken.getsockname()[1])])
            gc.collect()
    finally:
        taken.close()
    assert status == 2 and "error:" in capsys.readouterr().err
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]


def test_scores_without_their_trajectory_are_left_out_of_the_views(tmp_path):
    out = tmp_path / "run"
    _run(out, "--limit", "4", env="typewriter_1")
    lines = (out / "trajectories.jsonl").read_bytes().splitlines(keepends=True)
    (out / "trajectories.jsonl").write_bytes(b"".join(lines[:-1]) + lines[-1][:20])  # a torn last line
    with pytest.warns(UserWarning) as seen:
        run = load_run(out)
    messages = [str(w.message) for w in seen]
    assert any("dropped a torn last line" in m for m in messages)
    assert any("score(s) have no trajectory in trajectories.jsonl" in m for m in messages)
    assert len(run.trajectories) == 3 and {s.example_id for s in run.scores} == {t.example_id for t in run.trajectories}

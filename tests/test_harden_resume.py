"""Resume checks its settings and plays errored episodes again; runs that fail fail loudly."""

from __future__ import annotations

import json

import pytest

from tests.fakeserver import FakeModelServer, Request
from toolgym.cli import main
from toolgym.runio import read_run, read_trajectories

DEAD = "http://127.0.0.1:9/v1"  # the discard port: connection refused at once


def run_args(out, url, *extra, limit=4):
    return ["run", "--env", "typewriter_1", "--model", "vllm:fake", "--base-url", url, "--limit", str(limit),
            "--out", str(out), "--no-progress", "--max-retries", "0", "--timeout", "5", *extra]


def test_every_episode_erroring_exits_non_zero_and_stops_early(tmp_path, capsys):
    out = tmp_path / "dead"
    assert main(run_args(out, DEAD, limit=30)) == 1
    err = capsys.readouterr().err
    assert "the first 20 episodes all ended in error" in err and "--resume" in err
    assert len(read_trajectories(out)) < 30  # stopped, the rest never played


def test_a_run_of_one_erroring_episode_says_so_in_the_singular(tmp_path, capsys):
    assert main(run_args(tmp_path / "one", DEAD, limit=1)) == 1
    err = capsys.readouterr().err
    assert "(the first episode ended in error)" in err and "first 1 episodes" not in err, err


@pytest.mark.parametrize(("limit", "expected"), [("3", 0), ("2", 1), ("75%", 0), ("50%", 1)])
def test_max_errors_count_or_share(tmp_path, limit, expected, capsys):
    flaky = {"aa", "aaa", "aaaa"}  # 3 of 4 targets fail

    def plan(request: Request) -> str:
        return "http400" if request.target in flaky else "ok"

    with FakeModelServer(plan) as server:
        code = main(run_args(tmp_path / "r", server.url + "/v1", "--max-errors", limit))
    assert code == expected, capsys.readouterr().err


def test_max_errors_is_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(run_args(tmp_path / "r", DEAD, "--max-errors", "lots"))
    assert "argument --max-errors: must be a count N" in capsys.readouterr().err


def test_resume_refuses_changed_settings_unless_forced(tmp_path, capsys):
    out = tmp_path / "r"
    with FakeModelServer(lambda r: "ok") as server:
        url = server.url + "/v1"
        assert main(run_args(out, url, limit=2)) == 0
        changed = ["--max-steps", "7", "--temperature", "0.5", "--seed", "3", "--max-tokens", "99"]
        assert main(run_args(out, url, *changed, "--resume", limit=3)) == 2
        err = capsys.readouterr().err
        for setting in ("max_steps: 40 before, 7 now", "temperature: 0.0 before, 0.5 now", "seed: 0 before, 3 now",
                        "max_tokens: 512 before, 99 now"):
            assert setting in err
        assert "--force" in err
        assert main(run_args(out, DEAD, "--resume", limit=3)) == 2
        assert "base_url" in capsys.readouterr().err
        assert main(run_args(out, url, "--max-steps", "7", "--resume", "--force", limit=3)) == 0
    assert read_run(out).resumes[-1]["forced"] == {"max_steps": [40, 7]}
    assert main(run_args(tmp_path / "other", DEAD, "--force")) == 2


def test_resume_plays_errored_episodes_again_and_counts_the_last_attempt(tmp_path, capsys):
    out = tmp_path / "r"
    state = {"down": True}

    def plan(request: Request) -> str:
        return "http500" if state["down"] and request.target in ("aa", "aaa") else "ok"

    with FakeModelServer(plan) as server:
        url = server.url + "/v1"
        assert main(run_args(out, url, "--max-errors", "100%")) == 0
        assert sorted(t.status for t in read_trajectories(out)) == ["completed", "completed", "error", "error"]
        state["down"] = False
        capsys.readouterr()
        assert main(run_args(out, url, "--resume")) == 0
    assert "2 that ended in error played again" in capsys.readouterr().err
    counted = read_trajectories(out)
    assert len(counted) == 4 and all(t.status == "completed" for t in counted)
    assert len(read_trajectories(out, all_attempts=True)) == 6  # both attempts kept
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len({(s["example_id"], s["grader"]) for s in scores}) == len(scores)  # each episode graded once
    assert read_run(out).resumes[-1]["reran_errors"] == 2


def test_oracle_refuses_a_dataset_without_expected_calls(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "q1", "input": "Who?", "expected_steps": ["get_current_user_id"]}) + "\n")
    code = main(["run", "--env", "relational_data", "--agent", "oracle", "--dataset", str(data),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "oracle agent cannot play 1 of 1 examples" in err and "expected_calls" in err
    assert not (tmp_path / "o" / "trajectories.jsonl").exists()

"""Nothing lost, nothing counted twice: a run killed with SIGKILL part-way and resumed gives
the scores of an uninterrupted run, every example exactly once."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.faults import write_dataset
from tests.fakeserver import FakeModelServer, Request
from toolgym.cli import main
from toolgym.runio import read_scores, read_trajectories

ROOT = Path(__file__).resolve().parents[1]


def deterministic_faults(request: Request) -> str:
    """5xx on some first attempts (always recovered) and malformed answers, chosen by the
    conversation only, so a restarted episode meets the same ones."""
    u = int(hashlib.sha256(f"{request.target}|{request.turn}".encode()).hexdigest()[:8], 16) / 16**8
    if u < 0.15:
        return "http503" if request.attempt == 1 else "ok"
    if u < 0.25:
        return "unknown_tool"
    return "ok"


def mistake(target: str) -> bool:
    return hashlib.md5(target.encode()).digest()[0] < 80  # about 30% typed wrong


def command(dataset: Path, url: str, out: Path) -> list[str]:
    return ["run", "--env", "typewriter_1", "--model", "vllm:fake", "--base-url", url, "--dataset", str(dataset),
            "--out", str(out), "--concurrency", "4", "--no-progress", "--retry-initial", "0.01", "--timeout", "10"]


def score_table(out: Path) -> dict:
    return {(s.example_id, s.trial, s.grader): s.value for s in read_scores(out)}


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    dataset = tmp_path / "data.jsonl"
    write_dataset(dataset, 40, seed=3)
    with FakeModelServer(deterministic_faults, mistake=mistake, delay_s=0.01) as server:
        url = server.url + "/v1"
        reference = tmp_path / "reference"
        assert main(command(dataset, url, reference)) == 0

        killed = tmp_path / "killed"
        proc = subprocess.Popen(
            [sys.executable, "run_agent.py", *command(dataset, url, killed)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        path = killed / "trajectories.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= 12:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        data = path.read_bytes()
        done_before = data.count(b"\n")
        assert 12 <= done_before < 40  # killed part-way
        if data.endswith(b"\n"):  # the kill did not tear a line: tear one as a kill mid-write would
            last = data.splitlines(keepends=True)[-1]
            path.write_bytes(data + last[: len(last) // 2])

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main([*command(dataset, url, killed), "--resume"]) == 0
        assert any("torn last line" in str(w.message) for w in caught)

    ids = Counter(t.example_id for t in read_trajectories(killed))
    assert len(ids) == 40 and set(ids.values()) == {1}  # every example exactly once
    assert len(read_trajectories(killed)) == 40
    assert score_table(killed) == score_table(reference)
    values = [v for (_, _, g), v in score_table(reference).items() if g == "final_state"]
    assert 0 < sum(values) < len(values)  # the comparison is not between two all-ones tables


def test_resume_refuses_a_different_run(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["run", "--env", "typewriter_1", "--limit", "2", "--out", str(out), "--no-progress"]
    assert main([*base, "--agent", "oracle"]) == 0
    before = (out / "trajectories.jsonl").read_bytes()
    assert main([*base, "--model", "vllm:other", "--base-url", "http://127.0.0.1:9/v1", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume a different run" in err and "agent: 'oracle' before, 'tool_calling' now" in err
    other = tmp_path / "other.jsonl"
    write_dataset(other, 3)
    assert main([*base, "--agent", "oracle", "--dataset", str(other), "--resume"]) == 2
    assert "dataset sha256" in capsys.readouterr().err
    assert (out / "trajectories.jsonl").read_bytes() == before
    assert main([*base, "--agent", "oracle", "--limit", "4", "--resume"]) == 0  # the same run, more examples
    assert len(read_trajectories(out)) == 4


def test_a_second_writer_on_the_same_run_directory_is_refused(tmp_path, capsys):
    from toolgym.runio import locked_run_dir

    out = tmp_path / "run"
    with locked_run_dir(out):
        code = main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out),
                     "--resume", "--no-progress"])
        assert code == 2
        assert f"being written by another run (pid {os.getpid()})" in capsys.readouterr().err
        assert not (out / "trajectories.jsonl").exists()
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out),
                 "--resume", "--no-progress"]) == 0

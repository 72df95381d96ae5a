"""``grade DIR`` while a run still writes DIR is refused (issue 38, item 3): two writers of one
run directory once tore a line of ``scores.jsonl`` (every view then refused the run) or lost
scores. Real processes: ``toolgym run`` against an OpenAI-compatible server on 127.0.0.1 whose
answers are slowed, and ``toolgym grade`` started while it plays."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fakeserver import FakeModelServer

from toolgym.runio import read_scores, read_trajectories

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*argv: str) -> list[str]:
    return [sys.executable, "run_agent.py", *argv]


def test_grade_refuses_a_directory_a_run_is_writing(tmp_path):
    out = tmp_path / "run"
    with FakeModelServer(delay_s=0.4) as server:
        run = subprocess.Popen(cli("run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url",
                                   server.url + "/v1", "--limit", "3", "--out", str(out), "--no-progress"),
                               cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (out / "run.json").exists():
                time.sleep(0.1)
            assert (out / "run.json").exists()
            graded = subprocess.run(cli("grade", str(out)), cwd=ROOT, env=ENV, capture_output=True, text=True,
                                    timeout=120)
            still_running = run.poll() is None
        finally:
            _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert still_running  # the refusal below happened while the run wrote
    assert graded.returncode != 0
    assert f"{out} is being written by another run (pid {run.pid})" in graded.stderr
    # the run's own scores are whole: one per trajectory and grader, none torn or lost
    assert len(read_trajectories(out)) == 3
    assert {(s.example_id, s.grader) for s in read_scores(out)} == {
        (t.example_id, g) for t in read_trajectories(out) for g in ("final_state", "steps_exact", "step_ratio")}
    assert subprocess.run(cli("grade", str(out)), cwd=ROOT, env=ENV, capture_output=True, timeout=120).returncode == 0

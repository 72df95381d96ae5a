"""A ``$regex`` with catastrophic backtracking has a time limit (issue 38, item 8): the run ends,
and the grader's value is unscored naming the pattern, instead of a run that hangs (with ``re``,
``(a|aa)+b`` on 60 letters takes longer than the age of the universe). ``toolgym run`` in a
real process, a scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from toolgym.runio import read_scores

ROOT = Path(__file__).resolve().parents[1]


def test_a_catastrophic_regex_is_stopped_and_named(tmp_path):
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({
        "id": "slow", "input": "find the user",
        "milestones": [{"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$regex": "(a|aa)+b"}}}}],
    }) + "\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": [{"name": "find_users_by_name", "args": {"name": "a" * 60}}]},
                                  "done"]))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "run_agent.py", "run", "--env", "relational_data", "--dataset", str(dataset),
                           "--model", f"scripted:{script}", "--grader", "trajectory_match", "--out", str(out),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    [score] = read_scores(out)
    assert score.value is None and "RegexTimeout" in score.explanation and "(a|aa)+b" in score.explanation

"""examples/rollout.py --scripted: rollouts through the Gymnasium API into a run directory and
its exports, as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from toolgym.openai_format import validate_chat
from toolgym.runio import read_trajectories

ROOT = Path(__file__).resolve().parents[1]


def test_scripted_rollouts_are_collected_and_exported(tmp_path):
    out = tmp_path / "rollouts"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rollout.py"), "--scripted", "--env", "typewriter_26",
         "--episodes", "12", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("episode ") == 12
    trajectories = read_trajectories(out)
    assert len(trajectories) == 12 and {t.agent for t in trajectories} == {"gym"}
    sft = [json.loads(line) for line in (tmp_path / "rollouts-sft.jsonl").read_text().splitlines()]
    pref = [json.loads(line) for line in (tmp_path / "rollouts-preference.jsonl").read_text().splitlines()]
    passed = proc.stdout.count("(final_state 1.0")
    assert 0 < len(sft) == passed < 12  # only passing trajectories, and the seeded mistakes fail some
    assert pref, proc.stdout
    for record in sft:
        assert validate_chat(record["messages"], record["tools"]) == []
    for pair in pref:
        assert validate_chat(pair["prompt"] + pair["chosen"], pair["tools"]) == []
        assert validate_chat(pair["prompt"] + pair["rejected"], pair["tools"]) == []

"""Arguments valid for a tool's schema that its backend refuses are the model's mistake
(issue 38, item 2): a tool error the model sees and a recorded step, never an episode ended in
``error`` (unscored, and played again by ``--resume``). Driven through ``toolgym run`` with
scripted model answers over the real relational_data environment (real SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

from toolgym.cli import main
from toolgym.runio import read_scores, read_trajectories

HUGE = "9" * 5000  # beyond Python's 4,300-digit integer-text limit


def run(tmp_path: Path, turns: list, *extra: str) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(turns))
    out = tmp_path / "run"
    code = main(["run", "--env", "relational_data", "--limit", "1", "--model", f"scripted:{script}", "--out", str(out),
                 "--no-progress", *extra])
    assert code == 0
    return out


def test_an_id_sqlite_cannot_hold_is_a_tool_error_the_model_sees(tmp_path):
    turns = [{"content": "", "tool_calls": [{"name": "get_user_name", "args": {"user_id": 2**63}}]},
             {"content": "", "tool_calls": [{"name": "get_current_user_id", "args": {}}]}, "done"]
    out = run(tmp_path, turns)
    [traj] = read_trajectories(out)
    assert traj.status == "completed" and traj.error is None
    first, second = traj.tool_steps
    assert first.error and "could not take these arguments" in first.output and "OverflowError" in first.output
    assert "signed 64-bit" in first.output
    assert not second.error  # the episode went on: the model saw the error and tried again
    assert {s.grader for s in read_scores(out)}  # graded, in every denominator
    # --resume does not play it again: it is the model's outcome, not a failure of the run
    assert main(["run", "--env", "relational_data", "--limit", "1", "--model", f"scripted:{tmp_path / 'script.json'}",
                 "--out", str(out), "--no-progress", "--resume"]) == 0
    assert len(read_trajectories(out)) == 1


def test_an_integer_beyond_pythons_digit_limit_is_a_malformed_call_recorded(tmp_path):
    turns = [f'<tool_call>{{"name": "get_user_name", "arguments": {{"user_id": {HUGE}}}}}</tool_call>',
             {"content": "", "tool_calls": [{"name": "get_user_name", "args": {"user_id": float("nan")}}]}, "done"]
    out = run(tmp_path, turns)
    [traj] = read_trajectories(out)  # the record reads back
    assert traj.status == "completed"
    first, second = (s for s in traj.steps if s.kind == "model" and s.tool_calls)
    assert first.tool_calls[0].malformed  # the text call that could not be read
    nan_call = second.tool_calls[0]
    assert nan_call.malformed and "NaN at 'user_id'" in nan_call.malformed and "not a JSON number" in nan_call.malformed
    assert nan_call.raw == '{"user_id": "NaN"}'  # never recorded as null: that would be another call
    assert all(s.error for s in traj.tool_steps)

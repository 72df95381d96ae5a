"""A run without ``--concurrency`` takes its executor's default when it declares one (issue 38,
item 10: ``--executor ray`` played one episode at a time on a whole cluster). The Ray case
itself is in tests/test_ray_executor.py (slow); here the same hook through ``toolgym run``."""

from __future__ import annotations

import json
from pathlib import Path

from toolgym.cli import main

HERE = Path(__file__).resolve().parent


def test_a_run_without_concurrency_takes_the_executors_default(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "5", "--out", str(out),
                 "--executor", f"{HERE / 'cpu_executor.py'}:FourSlots", "--no-progress"]) == 0
    assert json.loads((out / "run.json").read_text())["concurrency"] == 4
    assert "--executor four-slots plays 4 episodes at once" in capsys.readouterr().err
    again = tmp_path / "given"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "5", "--out", str(again),
                 "--executor", f"{HERE / 'cpu_executor.py'}:FourSlots", "--concurrency", "2", "--no-progress"]) == 0
    assert json.loads((again / "run.json").read_text())["concurrency"] == 2

"""docs/custom-graders.md as printed: its grader module is saved as the page says, and its
command block runs line by line in a fresh directory; the grader's measure reaches every view."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "custom-graders.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), re.S)


def test_the_worked_example_runs_as_printed(tmp_path):
    (python_block,) = blocks("python")
    (commands,) = blocks("bash")
    assert "typed_prefix.py" in PAGE.read_text() and "Save it as `typed_prefix.py`" in PAGE.read_text()
    (tmp_path / "typed_prefix.py").write_text(python_block)
    (tmp_path / "run_agent.py").symlink_to(ROOT / "run_agent.py")  # the page's commands run from a clone's root
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    outputs = []
    for line in commands.strip().splitlines():
        done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
        outputs.append(done.stdout)
    _, oracle, partial, summary, compared, shown = outputs
    assert "typed_prefix" in oracle and "typed_prefix" in partial
    scores = [json.loads(line) for line in (tmp_path / "runs/prefix-first-letter/scores.jsonl").read_text().splitlines()]
    prefix = {s["example_id"]: s["value"] for s in scores if s["grader"] == "typed_prefix"}
    assert prefix["tw-00-a"] == 1.0 and prefix["tw-01-aa"] == 0.5 and prefix["tw-02-aaa"] == 1 / 3
    assert prefix["tw-04-b"] == 0.0  # "a" for "b": nothing right from the start
    record = json.loads((tmp_path / "runs/prefix-first-letter/run.json").read_text())
    assert record["measures"]["typed_prefix"]["kind"] == "continuous"
    assert "higher, pass" in summary and re.search(r"typed_prefix .*0\.260 ± 0\.125 .* 1/8 ", summary), summary
    assert re.search(r"typed_prefix +1\.000 +0\.260 .*A \(higher\) .*boot", compared), compared
    assert "failed trajectories" in shown and "score typed_prefix = 0.5: 1 of 2 characters right" in shown

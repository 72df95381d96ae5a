"""The README's commands run as written, in order, on a fresh copy of the repository.

The convention, stated in a comment at the top of README.md:

- a ```bash block is run: each line is one command (a line ending in ``\\`` continues on the
  next), in the order the README gives them, all in one working directory, a fresh copy of the
  repository, so a later block reads what an earlier one wrote;
- a ```python block introduced by "Save it as `NAME`" is saved under that name first, so the
  blocks after it can run it;
- a ```console block, and a bare ``` block (printed output), is shown and never run: commands
  that need a hosted model's key, a GPU, or a server that keeps running, and the test command
  itself.

The install lines of a bash block (``python3 -m venv ...`` with its activation, ``pip install
-e '.[EXTRA]'``) are not run: the test uses the interpreter it runs under, with toolgym and the
extras already installed (``.[local,test]``, as ``.ci/run`` installs them). They are checked
instead: every extra they name is declared in pyproject.toml.

The first command runs the bundled local model, so the test is marked slow (``.ci/run`` runs
it with ``pytest -m slow``; it replaces the main-job smoke run that ``.ci/run`` made before) and
skips when the local runtime is not installed. It also checks that the summary the README
says the first command printed is the one it prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COPY_IGNORED = (".git", ".venv", "runs", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", "report.html")
HOSTED = re.compile(r"\b(openai|anthropic|openai-compatible|vllm):|--serve\b|--executor ray|\btoolgym serve\b")
INSTALL = re.compile(r"^(python3? -m venv \S+( && \. \S+/bin/activate)?|\. \S+/bin/activate|pip install -e '\.\[([\w,]+)\]')$")


def readme_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(info string, body, the prose before it)`` for every fenced block, in order."""
    blocks = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        before = text[: match.start()].rsplit("```", 1)[-1]
        blocks.append((match.group(1), match.group(2), before))
    return blocks


def commands(body: str) -> list[str]:
    """The commands of a bash block: one per line, ``\\`` continuing a line; no comments."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def plan(text: str) -> list[tuple[str, str]]:
    """What the README asks for, in order: ``("save", NAME + "\\n" + source)``, ``("install",
    extras)`` and ``("run", command)``.

    Raises:
        AssertionError: a ```python block meant to be run without a "Save it as" name, or a
            bash block that names a hosted model, a server or Ray (those go in ```console).
    """
    steps: list[tuple[str, str]] = []
    for kind, body, before in readme_blocks(text):
        if kind == "python":
            saved = re.findall(r"Save it as\s+`([\w./-]+\.py)`", before)
            if saved:
                steps.append(("save", f"{saved[-1]}\n{body}"))
        elif kind == "bash":
            for command in commands(body):
                assert not HOSTED.search(command), f"README: a ```bash block runs {command!r}; put it in ```console"
                for part in command.split(" && "):
                    installed = INSTALL.match(part)
                    if installed:
                        steps.append(("install", installed.group(3) or ""))
                    else:
                        steps.append(("run", part))
    return steps


def test_the_readme_plan_follows_the_convention():
    """Fast: the README's blocks parse by the convention, in the order of the tour."""
    steps = plan(README.read_text(encoding="utf-8"))
    runs = [command for kind, command in steps if kind == "run"]
    assert runs[0].startswith("python run_agent.py run --env typewriter_1 --model local --limit ")
    assert runs[1].startswith("python run_agent.py show runs/local-typewriter_1 --example ")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for kind, value in steps:
        if kind == "install":
            assert set(filter(None, value.split(","))) <= extras, f"README installs unknown extras {value!r}"
    saved = [value.split("\n", 1)[0] for kind, value in steps if kind == "save"]
    assert {"kv_store.py", "gym_episode.py"} <= set(saved)
    for name in saved:  # every saved script is run by a later command
        assert any(name in command for command in runs), f"README saves {name} but never runs it"
    assert not any("--model local" in command for command in runs[1:]), "one local-model run is enough"
    assert "```console\npip install -e '.[test]' && python -m pytest -q\n```" in README.read_text(encoding="utf-8")


def printed_summary(text: str) -> list[list[str]]:
    """The rows of the summary the README says the first command printed: the first bare
    ``` block, its grader rows split into cells."""
    body = next(body for kind, body, _ in readme_blocks(text) if kind == "")
    return [line.split() for line in body.splitlines()
            if line.startswith("│") and re.search(r"\b(final_state|steps_exact|step_ratio)\b", line)]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="the local model's runtime is not installed (pip install -e '.[local]')")
def test_the_readme_runs_in_order_on_a_fresh_copy(tmp_path):
    text = README.read_text(encoding="utf-8")
    work = tmp_path / "toolgym"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(*COPY_IGNORED), symlinks=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(work),  # the copy's toolgym, for `python run_agent.py` and `python -c` alike
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "80",
        "NO_COLOR": "1",
    }
    outputs: dict[str, str] = {}
    for kind, value in plan(text):
        if kind == "save":
            name, source = value.split("\n", 1)
            (work / name).write_text(source, encoding="utf-8")
        elif kind == "run":
            done = subprocess.run(["bash", "-c", value], cwd=work, env=env, capture_output=True, text=True,
                                  encoding="utf-8", timeout=1800)
            assert done.returncode == 0, (value, done.stdout[-3000:], done.stderr[-3000:])
            outputs[value] = done.stdout

    def output(prefix: str) -> str:
        return next(out for command, out in outputs.items() if command.startswith(prefix))

    # the first command printed what the README says it printed
    first = output("python run_agent.py run --env typewriter_1 --model local")
    rows = printed_summary(text)
    assert len(rows) == 3, rows
    for row in rows:
        assert re.search(r"\s+".join(map(re.escape, row)), first), (row, first)
    shown = output("python run_agent.py show runs/local-typewriter_1 --example tw-01-aa")
    assert "tw-01-aa" in shown and shown.count("type_letter") >= 2 and "score final_state" in shown, shown
    # the tour: runs that differ, and views that tell them apart
    summary = output("python run_agent.py summary ")
    assert all(name in summary for name in ("local-typewriter_1", "oracle-typewriter_1", "first-letter")), summary
    compared = output("python run_agent.py compare ")
    assert "step_ratio" in compared and "tw-01-aa" in compared, compared
    assert (work / "report.html").stat().st_size > 10_000
    failed = output("python run_agent.py show runs/first-letter --failed")
    assert "tw-01-aa" in failed and "first divergence" in failed, failed
    # your own environment, as the README says it prints
    kv = output("python kv_store.py").splitlines()
    assert kv[:2] == ["final_state 0.500 ± 0.354", "steps_exact 1.000 ± 0.000"], kv
    assert output("python -c ").strip() == "typewriter_1 3 trajectories"
    gym = output("python gym_episode.py")
    assert "True" in gym and "'final_state': 1.0" in gym, gym
    sft = [json.loads(line) for line in (work / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(sft) == 3 + 1 + 1  # the oracle's three, the script's `a`, the Gymnasium episode
    assert all(record["messages"][0]["role"] == "system" for record in sft)
    pairs = (work / "pairs.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(pairs) == 2  # tw-01-aa and tw-02-aaa: passed by the oracle, failed by the script
    # the checks of the convention hold on what ran
    assert (work / "runs/math-oracle/scores.jsonl").is_file()

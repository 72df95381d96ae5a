"""Commands import only what they use (issue 17): reading, grading and listing never load the
agent stack (langgraph, langchain-core, langsmith), a provider SDK, matplotlib or the llama.cpp runtime.

Each command runs in a fresh interpreter; the test reads the names in ``sys.modules`` after it
(names only, no timing).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "langgraph", "langchain_core", "langchain_openai", "langchain_anthropic", "langsmith",
    "openai", "anthropic", "httpx", "matplotlib", "xllamacpp", "gguf", "numpy", "sqlite_utils", "ray",
)

_PROBE = """
import json, sys
from toolgym.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted({m.split('.')[0] for m in sys.modules})}))
"""


def loaded_after(args: list[str], cwd: Path) -> set[str]:
    """Top-level module names in ``sys.modules`` after ``toolgym ARGS`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)], cwd=cwd, capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), out.stderr
    return set(result["modules"])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("startup")
    for name in ("a", "b"):
        subprocess.run(
            [sys.executable, "-c", "import sys; from toolgym.cli import main; sys.exit(main())", "run", "--env", "typewriter_26", "--agent", "oracle", "--limit", "3",
             "--out", str(root / name), "--no-progress"],
            cwd=root, check=True, capture_output=True,
        )
    return root


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["grade", "--help"],
        ["grade", "a"],
        ["show", "a"],
        ["summary", "a", "b"],
        ["compare", "a", "b"],
    ],
    ids=lambda a: " ".join(a),
)
def test_command_leaves_heavy_modules_unloaded(args: list[str], run_dir: Path) -> None:
    loaded = loaded_after(args, run_dir)
    assert "toolgym" in loaded
    assert not loaded & set(HEAVY), f"toolgym {' '.join(args)} imported {sorted(loaded & set(HEAVY))}"


def test_run_still_loads_the_agent_stack(run_dir: Path) -> None:
    """The probe can see a heavy import: ``run`` with a model-driven agent needs langgraph."""
    (run_dir / "turns.json").write_text(json.dumps(["done"]), encoding="utf-8")
    loaded = loaded_after(
        ["run", "--env", "typewriter_26", "--agent", "tool_calling", "--model", "scripted:turns.json", "--limit", "1",
         "--out", "c", "--no-progress"],
        run_dir,
    )
    assert {"langgraph", "langchain_core"} <= loaded
    assert "ray" not in loaded  # only --executor ray imports it


def test_list_does_not_load_the_runner(tmp_path):
    """Issue 38, item 11: `toolgym list` reads registries; playing and grading code (the
    runner: episodes, executors, resume) is for the commands that run or grade."""
    probe = _PROBE.replace("{m.split('.')[0] for m in sys.modules}", "set(sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(["list"])], cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    modules = set(json.loads(out.stdout.strip().splitlines()[-1])["modules"])
    assert not {m for m in modules if m == "toolgym.runner" or m.startswith("toolgym.runner.")}

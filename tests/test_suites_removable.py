"""Each suite is a folder that can be deleted: on a copy of the repository without it, every
remaining module imports, ``list`` works without it, and the other suites' tests pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # copies of the repository, each tested: run by .ci/run (-m slow)

ROOT = Path(__file__).resolve().parents[1]
SUITES = sorted(p.name for p in (ROOT / "toolgym" / "suites").iterdir() if (p / "__init__.py").exists())

IMPORT_ALL = """
import importlib, pkgutil, toolgym
names = [m.name for m in pkgutil.walk_packages(toolgym.__path__, "toolgym.")]
for name in names:
    importlib.import_module(name)
print(len(names), "modules")
"""


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    made = {}

    def copy_without(suite: str) -> Path:
        if suite not in made:
            dest = tmp_path_factory.mktemp(f"without-{suite}")
            for part in ("toolgym", "tests", "benchmarks", "examples", "docs", "run_agent.py", "pyproject.toml", "README.md"):
                source = ROOT / part
                if source.is_dir():
                    shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(source, dest / part)
            shutil.rmtree(dest / "toolgym" / "suites" / suite)
            shutil.rmtree(dest / "tests" / "suites" / suite, ignore_errors=True)
            made[suite] = dest
        return made[suite]

    return copy_without


def _run(copy: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "TOOLGYM_REFERENCE_DATA": os.environ.get("TOOLGYM_REFERENCE_DATA", str(ROOT.parent / "shared" / "data"))}
    return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("suite", SUITES)
def test_without_a_suite_the_rest_imports_and_lists(copies, suite):
    copy = copies(suite)
    imported = _run(copy, "-c", IMPORT_ALL)
    assert imported.returncode == 0, imported.stderr
    listed = _run(copy, "run_agent.py", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"suite {suite}" not in listed.stdout
    assert "warning" not in listed.stderr
    others = [s for s in SUITES if s != suite]
    assert all(f"suite {s}" in listed.stdout for s in others), listed.stdout


@pytest.mark.parametrize("suite", ["jmultiwoz_tc", "vietnamese"])
def test_without_a_suite_every_other_test_passes(copies, suite):
    """The whole test suite but this file and the wheel test, on a copy without ``suite``
    (the core's own tests use the typewriters, so those two suites are the ones a user can
    drop without touching a test)."""
    copy = copies(suite)
    tested = _run(copy, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests",
                  "--ignore=tests/test_suites_removable.py", "--ignore=tests/test_plugins_wheel.py", timeout=1200)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]

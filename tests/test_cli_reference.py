"""docs/cli.md is the command line's own parser written out: every command and flag, each with
its help and default. A flag added without regenerating the page fails here, naming the
command that regenerates it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "cli_reference.py"


@pytest.fixture(scope="module")
def reference():
    if not SCRIPT.is_file():  # a copy of the package and tests only (tests/test_suites_removable.py)
        pytest.skip("no docs/ in this copy")
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_the_parser_written_out(reference):
    from toolgym.cli import build_parser

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == reference.render(), "docs/cli.md is out of date: run python docs/cli_reference.py"
    commands = reference.subcommands(build_parser())
    assert {"run", "grade", "show", "summary", "compare", "report", "export", "serve"} <= set(commands)
    for name, (_, sub) in commands.items():
        assert f"## `{name}`" in page
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or f"`{flag}`" in page, (name, flag)


def test_the_check_fails_on_a_stale_page(reference, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "cli.md"
    stale.write_text("# Command-line reference\n", encoding="utf-8")
    monkeypatch.setattr(reference, "PAGE", stale)
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    assert reference.main(["--check"]) == 1
    assert "run python docs/cli_reference.py" in capsys.readouterr().err
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0

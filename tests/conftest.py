"""Shared fixtures: scripted chat models and small datasets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toolgym.providers.scripted import ScriptedChatModel

#: The public reference data (LangChain tool-usage sets, JMultiWOZ-TC, Vietnamese sets), read by
#: path and never copied into the repository: ``$TOOLGYM_REFERENCE_DATA``, or ``../shared/data``
#: beside the repository. Tests that need it skip when it is absent.
REFERENCE_DATA = Path(
    os.environ.get("TOOLGYM_REFERENCE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_run_directory(tmp_path_factory):
    """After the whole session: grep every run directory the tests wrote (under the session's
    temporary folder) for the secrets of ``secret_values.SECRETS`` (random per session, given as
    ``serve --token`` and ``--base-url`` credentials by the redaction tests); any found fails
    the session, naming the file."""
    yield
    from secret_values import leaks_in

    leaks = leaks_in(tmp_path_factory.getbasetemp())
    assert not leaks, f"secrets written in run directories: {leaks}"


def call(name: str, **args) -> dict:
    """A scripted tool call."""
    return {"name": name, "args": args}


def turn(*calls: dict, content: str = "") -> dict:
    """A scripted model turn with the given tool calls."""
    return {"content": content, "tool_calls": list(calls)}


@pytest.fixture
def scripted():
    """Factory for a ScriptedChatModel from a list of turns."""
    return lambda turns, **kw: ScriptedChatModel(turns=turns, **kw)


@pytest.fixture
def script_file(tmp_path: Path):
    """Write a scripted-model JSON file and return its path."""

    def write(doc) -> Path:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(doc))
        return path

    return write

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

"""The ``bfcl`` environment: one BFCL entry per episode, its functions as tools, one model turn,
nothing executed.

The tools are the entry's function documents converted as the leaderboard's function-calling
mode converts them (:func:`toolgym.suites.bfcl.data.fc_schema`); a call is acknowledged, never
executed, and the episode ends after the model's first turn (``max_model_turns = 1``), as the
leaderboard asks each single-turn entry once. What the model did is read from its trajectory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

from toolgym import DatasetError, Environment, Example, schema_tool
from toolgym.suites.bfcl.data import Entry, entry_of, fc_schema

__all__ = ["BFCL", "NOTE"]

NOTE = "Recorded. (BFCL replays single-turn entries: the call is checked, not executed.)"


def _ack(name: str) -> Callable[..., str]:
    def ack(**arguments: Any) -> str:
        return json.dumps({"status": "recorded", "tool": name, "note": NOTE})

    ack.__name__ = name
    return ack


class BFCL(Environment):
    """The functions of one BFCL entry, each acknowledging its call. Stateless: ``read_state``
    is empty; the calls are in the trajectory.

    Tools differ from entry to entry, so :meth:`tool_set_key` names the entry's function
    documents: agents bind (or describe) the tools once per distinct set.
    """

    name = "bfcl"
    instructions = ""  # the function-calling mode sends the question alone
    max_model_turns: ClassVar[int | None] = 1
    replay_target: ClassVar[bool] = False  # no state: final_state keeps grading expected_state only

    def __init__(self) -> None:
        super().__init__()
        self.entry: Entry | None = None
        self._key: str = ""

    def reset(self, example: Example) -> None:
        """Make the entry's tools.

        Args:
            example (Example): An entry loaded by :func:`toolgym.suites.bfcl.data.load_examples`.

        Raises:
            DatasetError: if the example is not a BFCL entry.
        """
        self.entry = entry_of(example)
        self._key = json.dumps([self.entry.language, self.entry.functions], sort_keys=True)
        self._functions = None
        self._tools = None

    def tool_functions(self) -> dict[str, Callable]:
        """The entry's functions as JSON-schema tools (:func:`~toolgym.suites.bfcl.data.fc_schema`).

        Raises:
            RuntimeError: before :meth:`reset`.
            DatasetError: when two functions of the entry get the same tool name.
        """
        if self.entry is None:
            raise RuntimeError("BFCL.reset() must run before its tools are used")
        tools: dict[str, Callable] = {}
        for function in self.entry.functions:
            schema = fc_schema(function, self.entry.language)
            if schema["name"] in tools:
                raise DatasetError(f"entry {self.entry.id!r}: two functions are offered as {schema['name']!r}")
            tools[schema["name"]] = schema_tool(schema["name"], schema["description"], schema["parameters"], _ack(schema["name"]))
        return tools

    def tool_set_key(self) -> Hashable:
        """The entry's language and function documents (two entries with the same functions
        share a binding)."""
        return (type(self), self._key)

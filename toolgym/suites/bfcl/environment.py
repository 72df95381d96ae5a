"""The ``bfcl`` environment: one BFCL entry per episode.

A single-turn entry: its functions as tools, one model turn, nothing executed. A multi-turn
entry (:mod:`toolgym.suites.bfcl.multi_turn`): the involved API classes of the installed
``bfcl-eval`` package, loaded with the entry's initial configuration, are the state; their
methods, with the published function documents, are the tools, executed; the conversation
has as many model turns as the agent takes (the leaderboard stops a turn after 20 steps;
toolgym's ``max_steps`` bounds the episode); functions a miss_func entry withholds are added
at the start of their turn (:meth:`BFCL.begin_turn`).

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
from toolgym.environments import ToolResult
from toolgym.parsing import read_arguments
from toolgym.suites.bfcl.data import Entry, entry_of, fc_schema
from toolgym.suites.bfcl.multi_turn import APIs, function_docs

__all__ = ["BFCL", "NOTE"]

NOTE = "Recorded. (BFCL replays single-turn entries: the call is checked, not executed.)"


def _ack(name: str) -> Callable[..., str]:
    def ack(**arguments: Any) -> str:
        return json.dumps({"status": "recorded", "tool": name, "note": NOTE})

    ack.__name__ = name
    return ack


def _executes(apis: APIs, name: str) -> Callable[..., str]:
    def execute(**arguments: Any) -> str:
        return apis.execute(name, [], arguments)

    execute.__name__ = name
    return execute


class BFCL(Environment):
    """The functions of one BFCL entry. A single-turn entry's tools acknowledge their call
    and ``read_state`` is empty (the calls are in the trajectory); a multi-turn entry's tools
    execute the API classes' methods and ``read_state`` is ``{class: state}`` of the stateful
    involved classes, as the official checker compares them
    (:meth:`toolgym.suites.bfcl.multi_turn.APIs.state`).

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
        self.apis: APIs | None = None
        self.offered: list[dict[str, Any]] = list(self.entry.functions)
        self.withheld: dict[str, list[str]] = {}
        if example.metadata.get("multi_turn"):
            meta = example.metadata
            self.max_model_turns = None  # type: ignore[misc]  # a conversation: as many model turns as the agent takes
            self.apis = APIs(list(meta["involved_classes"]), dict(meta["initial_config"]), "long_context" in self.entry.category)
            self.withheld = {str(k): list(v) for k, v in dict(meta.get("missed_function") or {}).items()}
        self._refresh()

    def _refresh(self) -> None:
        assert self.entry is not None
        self._key = json.dumps([self.entry.language, self.offered], sort_keys=True)
        self.tools_changed()

    def begin_turn(self, turn: int) -> None:
        """Offer the functions a miss_func entry withholds until user turn ``turn`` (from 1;
        the leaderboard adds them at that turn, whose user message says so).

        Args:
            turn (int): The user turn about to start.
        """
        names = self.withheld.get(str(turn))
        if not names or self.apis is None or self.entry is None:
            return
        docs = {d["name"]: d for d in function_docs(list(self.apis.instances))}
        self.offered = [*self.offered, *(docs[n] for n in names if n in docs)]
        self._refresh()

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Execute one tool call. A multi-turn entry's offered method is called as the
        leaderboard calls it, without checking the arguments against its document (a ground
        truth passes ``ticket_id='ticket_001'`` where the document says integer, and the
        method decides): its result, or ``Error during execution: ...`` for an exception,
        which is an error observation. Anything else (a single-turn entry, a tool not
        offered, arguments that are not an object) as :meth:`Environment.call` does it.
        """
        if self.apis is None or name not in self.functions:
            return super().call(name, arguments)
        parsed, problem = read_arguments(name, arguments)
        if problem:
            return super().call(name, arguments)
        output = self.apis.execute(name, [], parsed)
        return ToolResult(output, error=output.startswith("Error during execution"))

    def read_state(self) -> dict[str, Any]:
        """``{class: state}`` of a multi-turn entry's stateful API classes; ``{}`` for a
        single-turn entry."""
        return self.apis.state() if self.apis is not None else {}

    def tool_functions(self) -> dict[str, Callable]:
        """The functions offered so far as JSON-schema tools
        (:func:`~toolgym.suites.bfcl.data.fc_schema`): a single-turn call acknowledged, a
        multi-turn call executed on the API classes, its result (or
        ``"Error during execution: ..."``) as the checker records it.

        Raises:
            RuntimeError: before :meth:`reset`.
            DatasetError: when two functions of the entry get the same tool name.
        """
        if self.entry is None:
            raise RuntimeError("BFCL.reset() must run before its tools are used")
        tools: dict[str, Callable] = {}
        for function in self.offered:
            schema = fc_schema(function, self.entry.language)
            if schema["name"] in tools:
                raise DatasetError(f"entry {self.entry.id!r}: two functions are offered as {schema['name']!r}")
            run = _ack(schema["name"]) if self.apis is None else _executes(self.apis, function["name"])
            tools[schema["name"]] = schema_tool(schema["name"], schema["description"], schema["parameters"], run)
        return tools

    def tool_set_key(self) -> Hashable:
        """The entry's language and the function documents offered so far (two entries with
        the same functions share a binding)."""
        return (type(self), self._key)

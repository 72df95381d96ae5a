"""JMultiWOZ-TC: every user turn of 4,246 Japanese travel dialogues, judged on the tool calls
the assistant makes at that point (github.com/llm-jp/JMultiWOZ-TC; data CC BY 4.0, derived from
JMultiWOZ, CC BY-SA 4.0).

One example per user turn: the input is the chat history up to and including that turn, the
expected calls are the gold (empty when no tool should be called). The agent is offered the 9
tools of ``tools.json`` exactly as published and answers once, as the published
``generate.py`` does (one chat-completion request per turn, no system prompt); a tool call is
acknowledged, not executed, so agents that loop after a call still finish.

A run writes ``result_<model>.jsonl`` (the published result format, appended per turn,
resumable) and, at the end, ``score_<model>.json`` (the five published rows),
``incorrect_<model>.json`` and ``diagnostics_<model>.json`` (lenient, multiset, malformed,
per-tool, per-argument and per-depth figures). ``grade --env jmultiwoz_tc --result FILE``
grades a result file from any generator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.tools import BaseTool

from toolgym.data import DatasetError
from toolgym.environments import Environment, ReportTable, schema_tool
from toolgym.suites.jmultiwoz_tc.data import ToolSpecs, load_examples, load_tool_specs, load_turns
from toolgym.suites.jmultiwoz_tc.results import ResultWriter, check_trials, grade_file
from toolgym.suites.jmultiwoz_tc.scoring import PUBLISHED_KEYS, safe_model_name
from toolgym.records import Example

__all__ = ["JMultiWOZTC", "acknowledgement"]

ACK_NOTE = "受け付けました。(JMultiWOZ-TC replays recorded dialogues: the call is recorded, nothing is searched or booked.)"


def acknowledgement(name: str, arguments: dict[str, Any]) -> str:
    """The observation returned for a valid call: a JSON object ``{"status": "accepted",
    "tool", "arguments", "note"}``."""
    return json.dumps({"status": "accepted", "tool": name, "arguments": arguments, "note": ACK_NOTE}, ensure_ascii=False)


def _ack_tool(name: str) -> Callable[..., str]:
    def ack(**arguments: Any) -> str:
        return acknowledgement(name, arguments)

    ack.__name__ = name
    return ack


_TOOL_CACHE: dict[str, tuple[dict[str, Callable], dict[str, BaseTool]]] = {}


class JMultiWOZTC(Environment):
    """The 9 JMultiWOZ-TC tools, each returning an acknowledgement. Stateless: the turn's
    calls are in its trajectory (``read_state`` is empty).

    The tool schemas come from ``tools.json`` beside the data (the path travels in each
    example's ``metadata["tools"]``); tools are built once per schema file and shared.
    """

    name = "jmultiwoz_tc"

    instructions = ""  # the published generate.py sends the history without a system prompt
    graders = ("jmultiwoz_exact", "jmultiwoz_lenient", "jmultiwoz_decision")
    max_model_turns: ClassVar[int | None] = 1
    default_concurrency: ClassVar[int] = 32

    def __init__(self) -> None:
        super().__init__()
        self.tools_path: str | None = None

    def reset(self, example: Example) -> None:
        """Select the tool schemas named by the example.

        Raises:
            DatasetError: if the example has no ``metadata["tools"]`` or the file is invalid.
        """
        path = example.metadata.get("tools")
        if not path:
            raise DatasetError(f"example {example.id!r} has no metadata['tools'] (the tools.json path)")
        self.tools_path = str(path)
        if self.tools_path not in _TOOL_CACHE:
            specs = load_tool_specs(self.tools_path)
            functions = {
                name: schema_tool(name, fn["description"], fn["parameters"], _ack_tool(name))
                for name, fn in specs.functions.items()
            }
            self._functions = functions
            self._tools = None
            _TOOL_CACHE[self.tools_path] = (functions, dict(super().tools))
        self._functions, self._tools = _TOOL_CACHE[self.tools_path]

    def tool_functions(self) -> dict[str, Callable]:
        if self.tools_path is None:
            raise RuntimeError("JMultiWOZTC.reset() must run before its tools are used")
        return _TOOL_CACHE[self.tools_path][0]

    @property
    def specs(self) -> ToolSpecs:
        """The tool schemas of this episode."""
        if self.tools_path is None:
            raise RuntimeError("JMultiWOZTC.reset() must run before its tools are used")
        return load_tool_specs(self.tools_path)

    # --- data and outputs --------------------------------------------------------------------
    @classmethod
    def load_dataset(cls, path: Path, options: dict[str, Any]) -> list[Example] | None:
        """Read the published zip, its NDJSON files (``.json`` or ``.jsonl``) or a directory
        holding them; see :func:`toolgym.suites.jmultiwoz_tc.data.load_examples`
        (``sample``/``seed`` options draw a stratified subset)."""
        return load_examples(path, options)

    @classmethod
    def run_outputs(cls, out: Path, examples: list[Example], model: str, resume: bool, trials: int) -> ResultWriter:
        """The published result file of the run (see :class:`ResultWriter`).

        Raises:
            ValueError: if ``trials`` is not 1.
            RunDirError: if the result file exists and ``resume`` is off.
        """
        check_trials(trials)
        tools = examples[0].metadata["tools"] if examples else None
        specs = load_tool_specs(tools) if tools else None
        return ResultWriter(
            out, examples, model, resume,
            tool_names=list(specs.functions) if specs else [],
            slot_types=specs.slot_types if specs else {},
        )

    @classmethod
    def report_tables(cls, out: Path) -> list[ReportTable]:
        """The five published rows and the lenient columns of every ``score_*.json`` in
        ``out``."""
        tables = []
        for score in sorted(Path(out).glob("score_*.json")):
            model = score.name[len("score_"):-len(".json")]
            tables.extend(_tables(Path(out), model))
        return tables

    @classmethod
    def grade_result_file(cls, result: Path, dataset: str, out: Path, options: dict[str, Any]) -> list[ReportTable]:
        """Grade any result file in the published format against a dataset path and write
        ``score_/incorrect_/diagnostics_<model>.json`` into ``out`` (``<model>`` from the
        result file name ``result_<model>.json(l)``).

        Raises:
            DatasetError: for an invalid dataset; ResultFileError: for an invalid or empty
                result file. Nothing is written in either case.
        """
        turns, files, notes = load_turns(dataset, options)
        slot_types = load_tool_specs(str(files.tools)).slot_types if files.tools else {}
        if files.tools is None:
            notes.append("no tools.json beside the dataset: lenient coercion infers slot types from the gold values")
            slot_types = _types_from_gold(turns)
        m = re.match(r"result_(.+?)\.jsonl?$", Path(result).name)
        model = safe_model_name(m.group(1) if m else Path(result).stem)
        grade_file(Path(result), turns, slot_types, Path(out), model, notes)
        return _tables(Path(out), model)


def _types_from_gold(turns: dict[str, Any]) -> dict[str, dict[str, str]]:
    types: dict[str, dict[str, str]] = {}
    for turn in turns.values():
        for call in turn.gold:
            slots = types.setdefault(call["name"], {})
            for k, v in call["arguments"].items():
                kind = "integer" if isinstance(v, int) and not isinstance(v, bool) else "string"
                if slots.get(k, kind) != kind:
                    kind = "string"
                slots[k] = kind
    return types


def _tables(out: Path, model: str) -> list[ReportTable]:
    score = out / f"score_{model}.json"
    rows = [json.loads(line) for line in score.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [{k: r.get(k) for k in PUBLISHED_KEYS} for r in rows]
    tables = [ReportTable(f"JMultiWOZ-TC {model} (published metrics, {score})", rows)]
    diag_path = out / f"diagnostics_{model}.json"
    if diag_path.exists():
        diag = json.loads(diag_path.read_text(encoding="utf-8"))
        outcomes = diag.get("decision_outcomes", {})
        notes = list(diag.get("notes", []))
        notes.append(
            "decisions (gold call): " + json.dumps(outcomes.get("gold_call", {}), ensure_ascii=False)
            + "; (gold no call): " + json.dumps(outcomes.get("gold_no_call", {}), ensure_ascii=False)
        )
        tables.append(ReportTable(f"lenient/multiset columns ({diag_path.name})", diag.get("lenient_table", []), notes))
    return tables

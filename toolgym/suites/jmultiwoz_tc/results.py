"""The published files of JMultiWOZ-TC, derived from a graded run, and result files of other
generators read into trajectories.

A run's record is its ``trajectories.jsonl`` and ``scores.jsonl``; nothing else is written
while it plays. After every grading (``run``, ``grade DIR``, ``grade --result``) the exporter
:func:`export_published` derives from the run, each through a temporary file and a rename:

* ``result_<model>.jsonl``: the result format of ``generate.py`` (github.com/llm-jp/JMultiWOZ-TC),
  one line per trajectory in dataset order (see :func:`result_line`); not for an imported run;
* ``score_<model>.json`` (the five published rows of ``evaluate.py``), ``incorrect_<model>.json``
  and ``diagnostics_<model>.json``, computed from those very lines (:func:`evaluate_run`).

``<model>`` is the model spec, or the agent's name for an agent without a model, made safe
for a file name (:func:`~toolgym.suites.jmultiwoz_tc.scoring.safe_model_name`). A killed
run leaves these files as the last grading wrote them; ``--resume`` (or ``grade DIR``)
rewrites all of them from the trajectories, so they agree again.

``grade --env jmultiwoz_tc --result FILE --dataset D`` reads a result file of any generator
with :func:`import_result_file`: one trajectory per line (a data_id repeated in the file
becomes trial 1, 2, ... of its turn: each line counts, as published). Each line is the text
of the trajectory's model step (verbatim), its number the trajectory's ``source_line``, and
``final_state["result_file"]`` records where it came from (``{"file", "line"}``; the
environment is stateless, so its final state holds nothing else). The run record references
the file rather than copying it (``run.json``'s ``result_file``; the line's text is read back
from the file by :func:`toolgym.load_run`). Graders and the exporter read an imported turn's
calls from that line, so its published rows are identical to those of the imported file. The
model step's ``tool_calls`` show the parsed calls, for the views. A line whose ``error`` is
set, or whose data_id is not in the dataset, is a trajectory of status ``error``: the core
grades neither, the published rows count both as ``evaluate.py`` does (the first as 出力ミス,
the second against an empty gold).

No ``result_<model>.jsonl`` is exported for an imported run (it would reproduce the imported
file); the score files are computed from the imported lines.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from toolgym import Example, ModelStep, ReportTable, Run, RunRecord, ToolCall, Trajectory
from toolgym.suites.jmultiwoz_tc.building import built
from toolgym.suites.jmultiwoz_tc.data import load_tool_specs
from toolgym.suites.jmultiwoz_tc.environment import JMultiWOZTC
from toolgym.suites.jmultiwoz_tc.scoring import (
    MAX_RECORDED_DEPTH,
    PUBLISHED_KEYS,
    Evaluation,
    GoldKeys,
    ResultFileError,
    ResultRecord,
    Turn,
    Verdict,
    call_parts,
    deeper_than,
    evaluate,
    gold_keys,
    judge,
    malformed_reason,
    parse_arguments,
    parse_result_line,
    read_results,
    safe_model_name,
    write_score_files,
    write_text_atomic,
)

__all__ = [
    "IMPORTED_AGENT",
    "ORIGIN",
    "evaluate_run",
    "export_name",
    "export_published",
    "import_result_file",
    "imported_line",
    "judged",
    "report",
    "result_line",
    "trajectory_calls",
    "turn_of",
    "turns_of",
]

IMPORTED_AGENT = "imported"
"""The agent name of trajectories read from a result file (as in the run's ``run.json``)."""

ORIGIN = "result_file"
"""The ``final_state`` key of an imported trajectory: ``{"file": path, "line": number}``."""

_RESULT_NAME = re.compile(r"result_(.+?)\.jsonl?$")
_NO_ID = re.compile(r"\(line \d+: (no data_id|a boolean data_id)\)")
"""The turn :func:`~toolgym.suites.jmultiwoz_tc.scoring.parse_result_line` gives a line without a usable data_id."""


# --- memos beside live objects --------------------------------------------------------------
class _Beside(weakref.ref):
    """A weak reference to an object (an example, a trajectory, a run) carrying, in the slots
    of a subclass, what was derived from it: one object per entry, dropped with the object."""

    __slots__ = ("key",)


B = TypeVar("B", bound=_Beside)


class _Memo(Generic[B]):
    """What was derived from live objects, by their identity: one grading derives a turn's
    line, gold and verdict once, and the graders, the exporter and the report share them."""

    __slots__ = ("_entries", "_forget")

    def __init__(self) -> None:
        entries: dict[int, Any] = {}

        def forget(entry: _Beside) -> None:
            if entries.get(entry.key) is entry:
                del entries[entry.key]

        self._entries, self._forget = entries, forget

    def get(self, obj: Any) -> B | None:
        entry = self._entries.get(id(obj))
        return entry if entry is not None and entry() is obj else None

    def drop(self, obj: Any) -> None:
        entry = self._entries.get(id(obj))
        if entry is not None and entry() is obj:
            del self._entries[entry.key]

    def put(self, obj: Any, kind: type[B]) -> B:
        """A new entry of ``kind`` for ``obj`` (the caller fills its slots)."""
        entry = kind(obj, self._forget)
        entry.key = id(obj)
        self._entries[entry.key] = entry
        return entry


class _Gold(_Beside):
    """What grading needs of an example: its turn, the normal forms of its gold calls, the
    slot types of the tools it names and their names (``None``: any)."""

    __slots__ = ("turn", "keys", "types", "tool_names")
    turn: Turn
    keys: GoldKeys
    types: dict[str, dict[str, str]]
    tool_names: set[str] | None


_GOLD: _Memo[_Gold] = _Memo()
_NO_GOLD = gold_keys(())
_NO_TYPES: dict[str, dict[str, str]] = {}
_NAMES: dict[int, tuple[dict[str, dict[str, str]], set[str] | None]] = {}  # one set of tool names per types


def _gold_of(example: Example) -> _Gold:
    found = _GOLD.get(example)
    if found is not None:
        return found
    history = example.input if isinstance(example.input, list) else [{"role": "user", "content": example.input}]
    last = next((m.get("content") for m in reversed(history) if m.get("role") == "user"), None)
    gold = tuple({"name": c.name, "arguments": c.arguments} for c in example.expected_calls or ())
    path = example.metadata.get("tools")
    types = load_tool_specs(str(path)).slot_types if path else _NO_TYPES
    names = _NAMES.get(id(types))
    if names is None or names[0] is not types:
        names = _NAMES[id(types)] = (types, set(types) or None)
    entry = _GOLD.put(example, _Gold)
    entry.turn = Turn(example.id, example.metadata.get("dialogue_id"), gold, last, example.metadata.get("turn"))
    entry.keys = gold_keys(gold) if gold else _NO_GOLD
    entry.types, entry.tool_names = types, names[1]
    return entry


# --- gold and tools of a run's examples ------------------------------------------------------
def turns_of(examples: Iterable[Example]) -> dict[str, Turn]:
    """The gold turns of loaded examples, by id, in dataset order.

    Args:
        examples (Iterable[Example]): Turns loaded by
            :func:`toolgym.suites.jmultiwoz_tc.data.load_examples` (or any examples with
            ``expected_calls``).

    Returns:
        dict[str, Turn]: What grading needs of each turn (the same objects for as long as the
        examples live; not to be changed).
    """
    return {ex.id: _gold_of(ex).turn for ex in examples}


def turn_of(example: Example) -> Turn:
    """The gold turn of one example (see :func:`turns_of`)."""
    return _gold_of(example).turn


def _tool_types(examples: Iterable[Example]) -> dict[str, dict[str, str]] | None:
    """``{tool: {slot: JSON type}}`` of the ``tools.json`` the examples name (the first one
    naming a file), or ``None`` when none does."""
    path = next((ex.metadata["tools"] for ex in examples if ex.metadata.get("tools")), None)
    return load_tool_specs(str(path)).slot_types if path else None


def _types_from_gold(turns: Mapping[str, Turn]) -> dict[str, dict[str, str]]:
    types: dict[str, dict[str, str]] = {}
    for turn in turns.values():
        for call in turn.gold:
            slots = types.setdefault(call["name"], {})
            for k, v in call["arguments"].items():
                kind = "integer" if isinstance(v, int) and not isinstance(v, bool) else "string"
                slots[k] = kind if slots.get(k, kind) == kind else "string"
    return types


# --- trajectories in the result form ---------------------------------------------------------
class _TurnState(_Beside):
    """A trajectory's imported line (``None`` for a played turn) and its last verdict, with
    the example's gold it was judged against."""

    __slots__ = ("line", "verdict", "against")
    line: ResultRecord | None
    verdict: Verdict | None
    against: _Gold | None


_STATES: _Memo[_TurnState] = _Memo()


def _state(trajectory: Trajectory, line: ResultRecord | None = None) -> _TurnState:
    """The trajectory's entry; a new one holds ``line`` (the line the trajectory was just
    read from), else the line parsed from the trajectory."""
    state = _STATES.get(trajectory)
    if state is None:
        if line is None:
            line = _read_line(trajectory)
        state = _STATES.put(trajectory, _TurnState)
        state.line, state.verdict, state.against = line, None, None
    return state


def _read_line(trajectory: Trajectory) -> ResultRecord | None:
    origin = trajectory.final_state.get(ORIGIN)
    steps = trajectory.model_steps
    if isinstance(origin, dict):
        number = int(origin.get("line") or 0)
    elif trajectory.source_line is not None:  # its origin left to run.json (read without it)
        number = trajectory.source_line
    else:
        return None
    return parse_result_line(steps[0].text, number) if steps else None


def imported_line(trajectory: Trajectory) -> ResultRecord | None:
    """The result line an imported trajectory was read from, or ``None`` for a trajectory
    played by an agent.

    Parsed once per trajectory object (the importer hands over the lines it read).

    Args:
        trajectory (Trajectory): Any trajectory of the environment.

    Returns:
        ResultRecord | None: The line (its ``text`` verbatim, its ``line`` number in the
        imported file); callers must not change it.

    Raises:
        ValueError: when the stored line no longer parses (the trajectories file was edited).
    """
    return _state(trajectory).line


def judged(trajectory: Trajectory, example: Example) -> Verdict:
    """The verdict of a turn (:func:`~toolgym.suites.jmultiwoz_tc.scoring.judge` of its calls in
    the result form against the example's gold, with the example's tool schemas), computed
    once per trajectory and example: the three graders of a turn and the exporter share it.

    Args:
        trajectory (Trajectory): The turn.
        example (Example): Its example.

    Returns:
        Verdict: The judgement (not to be changed).
    """
    last = _LAST_JUDGED
    if last[0] is trajectory and last[1] is example:  # the graders of one turn one after the other
        return last[2]
    state = _state(trajectory)
    gold = _gold_of(example)
    verdict = state.verdict
    if state.against is not gold or verdict is None:
        calls = state.line.calls if state.line is not None else trajectory_calls(trajectory, gold.tool_names)
        verdict = judge(calls, gold.turn.gold, gold.types, gold.tool_names, gold.keys)
        state.verdict, state.against = verdict, gold
    last[:] = (trajectory, example, verdict)
    return verdict


_LAST_JUDGED: list[Any] = [None, None, None]  # trajectory, example, verdict


def trajectory_calls(trajectory: Trajectory, tool_names: Iterable[str] | None = None) -> list[Any]:
    """The calls of a turn in the result-file form.

    For an imported trajectory, the ``tool_calls`` of its line as written (either published
    form). Otherwise from every model step: a well-formed call is ``{"name", "arguments"}``; a
    call that could not be parsed keeps its raw text as ``arguments`` (a call refused after
    parsing, say of an unknown tool, its parsed arguments) and says why in
    ``malformed`` (the published grader then sees a call that is made but never equals the
    gold; it is never an abstention); a call of a tool not in ``tool_names`` is marked
    ``"malformed": "unknown tool"``.

    Args:
        trajectory (Trajectory): The turn.
        tool_names (Iterable[str] | None): The tools offered (``None``: any name is known).

    Returns:
        list[Any]: The calls (a new list).
    """
    line = imported_line(trajectory)
    if line is not None:
        return list(line.calls)
    known = set(tool_names) if tool_names is not None else None
    calls: list[Any] = []
    for step in trajectory.model_steps:
        for call in step.tool_calls:
            if call.malformed:  # its text as written, else (a parsed call of an unknown tool) its arguments
                arguments = call.raw if call.raw is not None else call.arguments
                calls.append({"name": call.name, "arguments": arguments, "malformed": call.malformed})
            elif known is not None and call.name not in known:
                calls.append({"name": call.name, "arguments": call.arguments, "malformed": "unknown tool"})
            else:
                calls.append({"name": call.name, "arguments": call.arguments})
    return calls


def result_line(trajectory: Trajectory, dialogue_id: str | None, tool_names: Iterable[str] | None) -> dict[str, Any]:
    """The result-file record of a played turn, as ``generate.py`` writes it.

    Args:
        trajectory (Trajectory): A turn played by an agent.
        dialogue_id (str | None): Its dialogue.
        tool_names (Iterable[str] | None): The tools offered (see :func:`trajectory_calls`).

    Returns:
        dict[str, Any]: ``{"data_id", "dialogue_id", "tool_calls"}``, plus ``"error"`` (the
        exception type; every kind of timeout is written ``"TimeoutError"``, as the published
        ``generate.py`` does) and ``"error_detail"`` (the whole message) when the episode
        ended in error (the model could not answer after its retries).
    """
    record: dict[str, Any] = {
        "data_id": trajectory.example_id,
        "dialogue_id": dialogue_id,
        "tool_calls": trajectory_calls(trajectory, tool_names),
    }
    if trajectory.status == "error":
        detail = trajectory.error or "error"
        kind = detail.split(":", 1)[0].strip() or "error"
        record["tool_calls"] = []
        # timeouts of any client (APITimeoutError, ReadTimeout, ...) as the published script names them
        record["error"] = "TimeoutError" if kind.endswith(("Timeout", "TimeoutError")) else kind
        record["error_detail"] = detail
    return record


# --- importing a result file -----------------------------------------------------------------
def _model_of(path: Path) -> str:
    m = _RESULT_NAME.match(path.name)
    return safe_model_name(m.group(1) if m else path.stem)


_SCHEMA_VERSION = Trajectory.model_fields["schema_version"].default


def _tool_call(call: Any, index: int, lineno: int, tool_names: set[str] | None) -> ToolCall:
    name, raw = call_parts(call)
    call_id = str((call.get("id") if isinstance(call, dict) else None) or f"line{lineno}_{index}")
    reason = malformed_reason(call, tool_names)
    if reason is None and deeper_than(parse_arguments(raw), MAX_RECORDED_DEPTH):
        reason = f"arguments nested deeper than {MAX_RECORDED_DEPTH} levels (kept as text; graded from the line)"
    if reason is None and isinstance(raw, str) and "\\u" in raw and not _is_text(parse_arguments(raw)):
        reason = "arguments hold a lone UTF-16 surrogate, which is not text (kept as written; graded from the line)"
    if reason is None:
        return built(ToolCall, {"id": call_id, "name": name, "arguments": parse_arguments(raw), "malformed": None, "raw": None})
    if not isinstance(call, dict):
        raw = call  # a call that is not an object: its text
    try:
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = str(raw)
    name = name if isinstance(name, str) else ""
    return built(ToolCall, {"id": call_id, "name": name, "arguments": {}, "malformed": reason, "raw": text})


def _is_text(value: Any) -> bool:
    """Whether a JSON value can be written as UTF-8 (no lone surrogate in a string)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def import_result_file(path: Path, examples: list[Example]) -> list[Trajectory]:
    """Read a result file of any generator (the published format) into trajectories.

    Every tolerance of the published ``evaluate.py`` is kept: both call forms, arguments as a
    JSON string or not an object, unknown tools, ``tool_calls`` of ``null``, the older ``id``
    key, blank lines, repeated data_ids and data_ids unknown to the dataset (see the module
    docstring for how each becomes a trajectory). Lines it could not read either are refused.

    Args:
        path (Path): The result file (``result_<model>.jsonl`` names the model ``<model>``;
            any other name, its stem).
        examples (list[Example]): The dataset's turns.

    Returns:
        list[Trajectory]: One per line, in file order.

    Raises:
        ResultFileError: (a ``ValueError``) for an unreadable file, or lines that are
            not UTF-8 JSON objects, lack ``data_id`` or have a ``tool_calls`` that is not a
            list of objects (a torn last line among them); the message names the file, the
            lines and their count. Also when the file names data_ids but none of them is in
            the dataset (the wrong dataset, surely; ``evaluate.py`` would grade every line
            against an empty gold). Nothing is returned, so nothing is written.
    """
    path = Path(path)
    records = read_results(path)
    model = _model_of(path)
    known = {ex.id for ex in examples}
    named = sorted({r.data_id for r in records if not _NO_ID.fullmatch(r.data_id)})
    if named and not known.intersection(named):
        sample = ", ".join(repr(i) for i in named[:3])
        raise ResultFileError(
            f"{path}: none of its {len(named)} data_id(s) is in the dataset ({sample}{', …' if len(named) > 3 else ''}): "
            "is the dataset the one the result file was made from? Nothing was written (a file sharing some "
            "data_ids with the dataset is graded as evaluate.py does: the others against an empty gold)"
        )
    types = _tool_types(examples)
    tool_names = set(types) if types else None
    where = str(path.resolve())
    env = JMultiWOZTC.name
    trials: dict[str, int] = {}
    trajectories = []
    for rec in records:
        trial = trials.get(rec.data_id, 0)
        trials[rec.data_id] = trial + 1
        calls = [_tool_call(c, i, rec.line, tool_names) for i, c in enumerate(rec.calls)]
        step = built(ModelStep, {
            "kind": "model", "text": rec.text, "tool_calls": calls, "latency_s": 0.0, "input_tokens": None,
            "output_tokens": None, "reasoning": None, "reasoning_tokens": None, "tokens": None,
        })
        error = None
        if rec.data_id not in known:
            error = (f"UnknownTurn: data_id {rec.data_id!r} is not in the dataset (the published rows grade "
                     "it against an empty gold, as evaluate.py does)")
        elif rec.error:
            error = rec.error_detail or rec.error
        traj = built(Trajectory, {
            "schema_version": _SCHEMA_VERSION, "example_id": rec.data_id, "trial": trial, "env": env,
            "agent": IMPORTED_AGENT, "model": model, "status": "error" if error else "completed", "error": error,
            "steps": [step], "final_state": {ORIGIN: {"file": where, "line": rec.line}}, "final_answer": None,
            "duration_s": 0.0, "initial_state": None, "state_note": None, "parent": None, "prefix_steps": None,
            "injected": None, "source_line": rec.line,  # an imported turn records no states
            "turn_states": None, "user_model": None,
        })
        _state(traj, rec)  # the line just read: graders and exporter do not parse it again
        trajectories.append(traj)
    return trajectories


# --- exporting -------------------------------------------------------------------------------
def export_name(record: RunRecord) -> str:
    """The ``<model>`` of a run's published file names.

    Args:
        record (RunRecord): The run's ``run.json``.

    Returns:
        str: The model spec; for an imported result file without a line to name it (an empty
        file), the name in the file's own name (``result_<model>.jsonl``); else the agent's name;
        made safe for a file name.
    """
    source = record.agent.get("result_file") if record.model is None else None
    if source:
        return _model_of(Path(source))
    return safe_model_name(record.model or record.agent_name)


def _is_file(path: Path, other: str | None) -> bool:
    if not other:
        return False
    try:
        return os.path.samefile(path, other)
    except OSError:  # one of them is missing
        return path.resolve() == Path(other).resolve()


class _Evaluated(_Beside):
    """A run's evaluation, with what it was computed from."""

    __slots__ = ("source", "result")
    source: tuple
    result: tuple[Evaluation, list[str], str]


_EVALUATIONS: _Memo[_Evaluated] = _Memo()


def evaluate_run(run: Run) -> tuple[Evaluation, list[str], str]:
    """The published result lines of a run and their evaluation.

    Lines are in dataset order (then trial), lines of data_ids the dataset lacks (imported)
    last, in their file order. A played turn's line is :func:`result_line`; an imported
    turn's is the line it was read from, verbatim. The graders' verdicts of the imported
    lines are reused (:func:`judged`), and the evaluation is kept with the run object, so
    that the exporter and the report of one grading compute it once (a run whose
    trajectories or examples were replaced is evaluated again).

    Args:
        run (Run): A graded run with its examples (``None`` examples: every id is unknown).

    Returns:
        tuple[Evaluation, list[str], str]: The evaluation of the lines (exactly what grading
        the exported result file gives), the lines' text, and ``<model>`` of the file names;
        not to be changed.
    """
    examples = run.examples or {}
    name = export_name(run.record)
    source = run.record.agent.get("result_file")
    key = (id(run.trajectories), len(run.trajectories), id(run.examples), len(examples), run.directory, name, source)
    kept = _EVALUATIONS.get(run)
    if kept is not None and kept.source == key:
        return kept.result
    turns = turns_of(examples.values())
    order = {ex_id: i for i, ex_id in enumerate(examples)}
    types = _tool_types(examples.values())
    notes: list[str] = []
    if types is None:
        types = _types_from_gold(turns)
        notes.append("the examples name no tools.json: lenient coercion infers slot types from the gold values")
    tool_names = list(types)

    def position(entry: tuple[Trajectory, ResultRecord | None]) -> tuple:
        traj, line = entry
        number = line.line if line is not None else 0
        if traj.example_id in order:
            return (0, order[traj.example_id], traj.trial, number)
        return (1, number, 0, 0)

    if source:  # notes name the imported file's own lines
        label = str(source)
    elif run.directory is not None:
        label = str(run.directory / f"result_{name}.jsonl")
    else:
        label = "result file"
    records: list[ResultRecord] = []
    texts: list[str] = []
    verdicts: list[Verdict | None] = []
    entries = sorted(((traj, imported_line(traj)) for traj in run.trajectories), key=position)
    for i, (traj, line) in enumerate(entries, 1):
        verdict = None
        if line is None:
            example = examples.get(traj.example_id)
            dialogue = example.metadata.get("dialogue_id") if example is not None else None
            text = json.dumps(result_line(traj, dialogue, tool_names), ensure_ascii=False)
            line = parse_result_line(text, i)
        else:  # the graders' verdict, when judged against this gold with these slot types
            state = _STATES.get(traj)
            example = examples.get(traj.example_id)
            against = state.against if state is not None else None
            if against is not None and against.types is types and example is not None and against is _GOLD.get(example):
                verdict = state.verdict
        records.append(line)
        texts.append(line.text)
        verdicts.append(verdict)
    if run.directory is not None and _is_file(run.directory / f"result_{name}.jsonl", source):
        notes.append(f"result_{name}.jsonl is the imported result file and is left as it is (not rewritten)")
    kept = _EVALUATIONS.put(run, _Evaluated)
    kept.source, kept.result = key, (evaluate(records, turns, types, notes, source=label, verdicts=verdicts), texts, name)
    return kept.result


def export_published(run: Run) -> list[Path]:
    """Write the published files of a graded run into its directory (the benchmark's
    exporter; see the module docstring), each through a temporary file and a rename.

    Args:
        run (Run): The graded run (a run kept in memory, ``directory`` ``None``, gets none).

    Returns:
        list[Path]: The files written (never the file the run was imported from).
    """
    if run.directory is None:
        return []
    evaluation, texts, name = evaluate_run(run)
    _let_go(run)
    source = run.record.agent.get("result_file")
    written = []
    result = run.directory / f"result_{name}.jsonl"
    if not source:  # an imported file is referenced in run.json, never copied
        write_text_atomic(result, "".join(t + "\n" for t in texts))
        written.append(result)
    # the score files never have the imported file's name: <model> comes from that name
    layout = run.record.env_options.get("layout", "separate")
    questions = None
    if layout == "published":  # the published script's `question`: the turn's whole history
        questions = {ex_id: ex.input for ex_id, ex in (run.examples or {}).items()}
    written += write_score_files(run.directory, name, evaluation, layout, questions).values()
    return written


def _let_go(run: Run) -> None:
    """Forget the lines, verdicts and gold derived for a run now that it is exported (its
    evaluation is kept for the report): a quarter of the objects a grading leaves, which the
    cycle collector would otherwise rescan at every full collection while the run is in
    memory. Grading the same objects again derives them again."""
    _LAST_JUDGED[:] = (None, None, None)
    for traj in run.trajectories:
        _STATES.drop(traj)
    for example in (run.examples or {}).values():
        _GOLD.drop(example)


# --- report ----------------------------------------------------------------------------------
def report(run: Run) -> list[ReportTable]:
    """The suite's section of a graded run: the five published rows, and the lenient and
    multiset columns with the notes (unknown ids, decisions, ...).

    Computed from the run by :func:`evaluate_run`, so the tables are the exported files'
    content; without the run's examples (its dataset moved), the rows are read from the
    exported ``score_<model>.json``.

    Args:
        run (Run): The graded run.

    Returns:
        list[ReportTable]: The two tables (the rows only, or nothing, without the examples).
    """
    if run.examples is None:
        return _score_file_table(run, f"{run.problem or 'the dataset was not read'}; rows as exported by the last grading")
    if _lines_missing(run):
        return _score_file_table(run, "the result file it was imported from has moved or changed since the import, so "
                                      "its lines cannot be evaluated again; rows as exported by the last grading")
    evaluation, _, name = evaluate_run(run)
    where = f", {run.directory / f'score_{name}.json'}" if run.directory is not None else ""
    rows = [{k: r.get(k) for k in PUBLISHED_KEYS} for r in evaluation.rows]
    diagnostics = evaluation.diagnostics
    outcomes = diagnostics["decision_outcomes"]
    notes = [
        *evaluation.notes,
        "decisions (gold call): " + json.dumps(outcomes["gold_call"], ensure_ascii=False)
        + "; (gold no call): " + json.dumps(outcomes["gold_no_call"], ensure_ascii=False),
    ]
    return [
        ReportTable(f"JMultiWOZ-TC {name} (published metrics{where})", rows),
        ReportTable(f"lenient/multiset columns (diagnostics_{name}.json)", diagnostics["lenient_table"], notes),
    ]


def _lines_missing(run: Run) -> bool:
    """Whether an imported trajectory of the run lacks its line (its result file could not be
    read back: :func:`toolgym.load_run` warned, and left the text empty)."""
    return any(t.source_line is not None and not (t.model_steps and t.model_steps[0].text) for t in run.trajectories)


def _score_file_table(run: Run, note: str) -> list[ReportTable]:
    if run.directory is None:
        return []
    path = run.directory / f"score_{export_name(run.record)}.json"
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
    rows = [{k: r.get(k) for k in PUBLISHED_KEYS} for r in rows if isinstance(r, dict) and "評価項目" in r]
    return [ReportTable(f"JMultiWOZ-TC {export_name(run.record)} (published metrics, {path})", rows, [note])]

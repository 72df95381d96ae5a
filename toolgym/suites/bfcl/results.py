"""Result and score files in the leaderboard's layout, result files of other tools read into
trajectories, and the suite's report.

After every grading the exporter :func:`export_published` writes into the run directory, for
each category in the run:

* ``BFCL_v4_<category>_result.json``: JSON Lines ``{"id", "result"}`` in dataset order, where
  ``result`` is ``[{func_name: {arg: value}}]`` for native tool calls (a call whose arguments
  were not JSON keeps them as the raw string, as the leaderboard's function-calling handlers
  do), the model's text when it made no call, and the text itself for the prompting format;
* ``BFCL_v4_<category>_score.json``: first line ``{"accuracy", "correct_count",
  "total_count"}``, then one line per wrong entry ``{"id", "test_category", "valid": false,
  "error", "error_type", "model_result"}`` (the leaderboard's ``save_eval_results``).

The score file counts every entry of the run, as the leaderboard does: a trajectory that ended
in ``error`` has the result ``"Error during inference: ..."`` (what the leaderboard records for
a failed request), which fails an AST entry and passes an irrelevance entry. toolgym's own
summary keeps such trajectories apart instead.

``grade --env bfcl --result FILE --dataset D`` reads a result file of any tool
(:func:`import_result_file`); each line's ``result`` is kept verbatim in the trajectory's
``final_state`` and graded as it is (decoded lists, JSON-string arguments, or prompting-format
strings), so an exported result file reproduces the imported lines.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from toolgym import (
    Example,
    ModelStep,
    ReportTable,
    Run,
    Score,
    Step,
    ToolCall,
    ToolStep,
    Trajectory,
    UserStep,
)
from toolgym.data import DatasetError, read_text
from toolgym.stats import clustered_estimate
from toolgym.suites.bfcl.checker import Verdict, abstention, check, check_optimal, unsatisfiable
from toolgym.suites.bfcl.data import CATEGORIES, Entry, entry_of
from toolgym.suites.bfcl.multi_turn import (
    MULTI_TURN_CATEGORIES,
    Judgement,
    call_string,
    judge,
    keyword_call,
    method_signatures,
)

__all__ = [
    "IMPORTED_AGENT",
    "first_divergence",
    "judgement_of",
    "multi_turn_result",
    "ORIGIN",
    "PROMPTING_AGENT",
    "export_published",
    "import_result_file",
    "report",
    "result_of",
    "verdict_of",
]

IMPORTED_AGENT = "imported"
"""The agent name of trajectories read from a result file."""

PROMPTING_AGENT = "bfcl_prompting"
"""The agent whose model writes calls as text in the prompting format."""

ORIGIN = "result_file"
"""The ``final_state`` key of an imported trajectory: ``{"file", "line", "result"}``."""

VERSION_PREFIX = "BFCL_v4"

ACCURACY, OPTIMAL, ABSTENTION = "bfcl_accuracy", "bfcl_optimal", "bfcl_abstention"
"""The names of the suite's graders (:mod:`toolgym.suites.bfcl.graders`), read by the report."""

OVERALL_NOTE = ("the leaderboard's overall accuracy weights its groups of categories and includes the agentic "
                "(web search, memory) ones, which toolgym does not run: no row here is that overall figure")

MULTI_TURN_NOTE = ("multi-turn overall: the unweighted mean of the four multi-turn categories' accuracies, as the "
                   "leaderboard computes its Multi Turn Overall Acc")

_ORDER = (*CATEGORIES, *MULTI_TURN_CATEGORIES)


def result_of(trajectory: Trajectory) -> Any:
    """The trajectory's result as a result-file line holds it.

    Returns:
        Any: An imported line's ``result`` as it was; for the prompting agent, the model's
        text; for native tool calling, ``[{name: arguments}]`` (a malformed call's arguments
        as the raw string, or, for a call refused after parsing, say of a tool not offered,
        the parsed arguments; a call written as text instead of a tool call: the text), or the
        text when no call was made; for a trajectory that ended in ``error``, the string
        ``"Error during inference: <error>"``.
    """
    origin = trajectory.final_state.get(ORIGIN)
    if isinstance(origin, dict) and "result" in origin:
        return origin["result"]
    if trajectory.status == "error":
        return f"Error during inference: {trajectory.error}"
    steps = trajectory.model_steps
    if not steps:
        return ""
    step = steps[0]
    if trajectory.agent == PROMPTING_AGENT:
        return step.text
    if not step.tool_calls:
        return step.text
    if any(c.malformed and c.raw is not None and "as text" in c.malformed for c in step.tool_calls):
        return step.text or next(c.raw for c in step.tool_calls if c.raw is not None)
    # a malformed call keeps its text as written; one refused after parsing (a tool named as the data writes
    # it, ``math.factorial`` for the listed ``math_factorial``) keeps its arguments, for the checker's name rule
    return [{c.name: (c.raw if c.raw is not None else c.arguments) if c.malformed else c.arguments} for c in step.tool_calls]


def _native(trajectory: Trajectory) -> bool:
    """A trajectory of native tool calls: its text is never decoded as calls (a
    function-calling model's text is not a call, as in the leaderboard's FC handlers)."""
    return trajectory.agent not in (PROMPTING_AGENT, IMPORTED_AGENT) and not isinstance(trajectory.final_state.get(ORIGIN), dict)


def multi_turn_result(trajectory: Trajectory) -> Any:
    """A multi-turn trajectory's result in the checker's decoded form: per user turn, per
    model step that made calls, the calls as strings (``["cd(folder='document')", ...]``,
    :func:`toolgym.suites.bfcl.multi_turn.call_string`).

    Steps are grouped by the user steps of the trajectory (all in turn 1 when it has none). A
    step without calls is left out, and so is a step with a call whose text did not decode
    (``raw`` kept: arguments that are not JSON, a call written as text), as the leaderboard's
    runner leaves out a step that does not decode. A call that decoded but was refused (a
    function not offered, such as one a miss_func entry still withholds) is kept: the
    leaderboard's decoding does not look at the offered names, and its checker executes any
    method of the involved classes. An
    imported line's ``result`` is returned as it was; a trajectory that ended in ``error``
    gives ``"Error during inference: <error>"`` (not a list: the checker's inference error).
    """
    origin = trajectory.final_state.get(ORIGIN)
    if isinstance(origin, dict) and "result" in origin:
        return origin["result"]
    if trajectory.status == "error":
        return f"Error during inference: {trajectory.error}"
    turns: list[list[list[str]]] = [[]]
    users = 0
    for step in trajectory.steps:
        kind = getattr(step, "kind", None)
        if kind == "user":
            if step.stop:  # a simulated user's closing message starts no turn
                continue
            users += 1
            if users > 1:
                turns.append([])
        elif kind == "model" and step.tool_calls and not any(c.raw is not None for c in step.tool_calls):
            turns[-1].append([call_string(c.name, c.arguments) for c in step.tool_calls])
    return turns


def _entry_dict(entry: Entry) -> dict[str, Any]:
    return {"id": entry.id, "initial_config": entry.initial_config or {}, "involved_classes": entry.involved_classes or []}


def judgement_of(entry: Entry, trajectory: Trajectory) -> Judgement:
    """The official verdict and toolgym's stepwise view of a multi-turn trajectory
    (:func:`toolgym.suites.bfcl.multi_turn.judge` on :func:`multi_turn_result`)."""
    return judge(_entry_dict(entry), multi_turn_result(trajectory), entry.ground_truth)


def verdict_of(entry: Entry, trajectory: Trajectory, optimal: bool = False) -> Verdict:
    """The official (or, with ``optimal``, the optimal-matching) verdict on a trajectory.

    A native trajectory whose result is text holds no call (see :func:`result_of`). A
    multi-turn entry gets the package's ``multi_turn_checker``'s verdict (:func:`judgement_of`),
    ``call`` being the call toolgym's replay finds at fault."""
    if entry.kind == "multi_turn":
        judged = judgement_of(entry, trajectory)
        if judged.official["valid"]:
            return Verdict(True)
        return Verdict(False, judged.official.get("error_type"), str(judged.official.get("error_message", "")),
                       call=judged.view.call)
    result = result_of(trajectory)
    if isinstance(result, str) and _native(trajectory) and trajectory.status != "error":
        result = _NO_CALL
    return (check_optimal if optimal else check)(entry, result)


_NO_CALL: Any = None  # decodes to nothing: not a call, as an FC model's plain text


def outcome_of(trajectory: Trajectory) -> str:
    """``abstained``, ``called`` or ``malformed`` (see :func:`toolgym.suites.bfcl.checker.abstention`)."""
    result = result_of(trajectory)
    if _native(trajectory) and isinstance(result, str) and trajectory.status != "error":
        return "abstained"
    if _native(trajectory) and isinstance(result, list) and any(isinstance(v, str) for c in result for v in c.values()):
        return "malformed"
    return abstention(result)


def first_divergence(example: Example, trajectory: Trajectory) -> tuple[int, str] | None:
    """Where the trajectory fails the official checks (the benchmark's ``divergence``, shown by
    ``show``): the model call at fault (or after the last call, for a result that fails as a
    whole) and ``"<error_type>: <what>"``, naming the argument; ``None`` when it passes."""
    entry = entry_of(example)
    if entry.kind == "multi_turn":
        judged = judgement_of(entry, trajectory)
        if judged.official["valid"]:
            return None
        view = judged.view
        return (view.call if view.call is not None else sum(len(s.tool_calls) for s in trajectory.model_steps),
                f"{judged.official.get('error_type')}: {view.reason or judged.official.get('error_message')}")
    verdict = verdict_of(entry, trajectory)
    if verdict.valid:
        return None
    calls = sum(len(s.tool_calls) for s in trajectory.model_steps)
    where = f" (argument {verdict.param})" if verdict.param else ""
    index = verdict.call if verdict.call is not None else calls
    return index, f"{verdict.error_type}{where}: {verdict.error}"


# --- export ---------------------------------------------------------------------------------
def _write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


def export_published(run: Run) -> list[Path]:
    """Write ``BFCL_v4_<category>_result.json`` and ``_score.json`` for each category of a
    graded run (the benchmark's exporter).

    Args:
        run (Run): A graded run with its examples.

    Returns:
        list[Path]: The files written (none without a directory or examples). An imported run
        never overwrites the file it was imported from.
    """
    if run.directory is None or run.examples is None:
        return []
    source = run.record.agent.get("result_file") if isinstance(run.record.agent, dict) else None
    by_id: dict[str, Trajectory] = {}
    for t in run.trajectories:
        by_id.setdefault(t.example_id, t)  # the leaderboard has one result per entry: the first trial
    groups: dict[str, list[tuple[Example, Trajectory]]] = defaultdict(list)
    for example in run.examples.values():
        traj = by_id.get(example.id)
        if traj is not None:
            groups[str(example.metadata.get("category"))].append((example, traj))
    written = []
    for category, pairs in groups.items():
        result_rows, wrong = [], []
        for example, traj in pairs:
            entry = entry_of(example)
            result = multi_turn_result(traj) if entry.kind == "multi_turn" else result_of(traj)
            result_rows.append({"id": example.id, "result": result})
            verdict = verdict_of(entry, traj)
            if not verdict.valid:
                wrong.append({"id": example.id, "test_category": category, "valid": False, "error": [verdict.error],
                              "error_type": verdict.error_type, "model_result": result})
        correct = len(pairs) - len(wrong)
        header = {"accuracy": correct / len(pairs), "correct_count": correct, "total_count": len(pairs)}
        result_path = run.directory / f"{VERSION_PREFIX}_{category}_result.json"
        score_path = run.directory / f"{VERSION_PREFIX}_{category}_score.json"
        if not (source and Path(source).resolve() == result_path.resolve()):
            _write_lines(result_path, result_rows)
            written.append(result_path)
        _write_lines(score_path, [header, *wrong])
        written.append(score_path)
    return written


# --- import ---------------------------------------------------------------------------------
def import_result_file(path: Path, examples: list[Example]) -> list[Trajectory]:
    """Read a result file (``{"id", "result"}`` per line, any tool's) into trajectories.

    Each line becomes a trajectory of agent ``imported`` whose model step holds the result's
    text (a string result) or its decoded calls (a list), or, for a multi-turn entry, one
    model step per step of the decoded form (per turn, per step, a list of call strings:
    ``[[["cd(folder='x')"], ["ls()"]], [...]]``), each turn opened by its user step, each call
    followed by a tool step with its result, and ``turn_states`` the states after each turn
    (toolgym's replay, what ``turn_state`` grades), and whose ``final_state`` keeps the
    line's ``result`` verbatim (:data:`ORIGIN`); graders read that. An empty file gives no
    trajectory, with a warning.

    Raises:
        ValueError: naming the file and line of a line that is not JSON, has no ``id`` or
            ``result``, names an id not in the dataset, or repeats an id (the leaderboard has
            one result per entry; its checker refuses a file with more lines than entries);
            naming the file's encoding when it is not UTF-8 (UTF-16, ...).
    """
    path = Path(path)
    known = {ex.id for ex in examples}
    by_id = {ex.id: ex for ex in examples}
    try:
        lines = read_text(path).splitlines()
    except DatasetError as exc:  # names the encoding (UTF-16, ...) or the first byte not UTF-8
        raise ValueError(str(exc)) from None
    first_line: dict[str, int] = {}
    trajectories = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "id" not in record or "result" not in record:
            raise ValueError(f"{path}:{number}: expected an object with 'id' and 'result'")
        entry_id = str(record["id"])
        if entry_id not in known:
            raise ValueError(f"{path}:{number}: id {entry_id!r} is not in the dataset")
        result = record["result"]
        text = result if isinstance(result, str) else ""
        calls = []
        if by_id[entry_id].metadata.get("multi_turn"):
            steps = _multi_turn_steps(result, by_id[entry_id])
        elif isinstance(result, list):
            for i, item in enumerate(result):
                if isinstance(item, dict) and len(item) == 1:
                    name, args = next(iter(item.items()))
                    ok = isinstance(args, dict)
                    calls.append(ToolCall(id=f"imported_{i}", name=str(name), arguments=args if ok else {},
                                          malformed=None if ok else "arguments are not an object",
                                          raw=None if ok else json.dumps(args)))
        if entry_id in first_line:
            raise ValueError(
                f"{path}:{number}: id {entry_id!r} again (first on line {first_line[entry_id]}); the leaderboard keeps "
                "one result per entry and its checker refuses a file whose lines outnumber the entries: keep one line "
                "per id"
            )
        first_line[entry_id] = number
        turn_states = None
        if not by_id[entry_id].metadata.get("multi_turn"):
            steps = [ModelStep(text=text, tool_calls=calls)]
        elif isinstance(result, list):
            entry = entry_of(by_id[entry_id])
            turn_states = judge(_entry_dict(entry), result, entry.ground_truth).view.states
        trajectories.append(Trajectory(
            example_id=entry_id, trial=0, env="bfcl", agent=IMPORTED_AGENT, model=None, status="completed",
            steps=steps, turn_states=turn_states,
            final_state={ORIGIN: {"file": str(path), "line": number, "result": result}},
        ))
    if not trajectories:
        warnings.warn(f"{path}: the file holds no result; nothing is graded and no score file is written", stacklevel=2)
    return trajectories


def _multi_turn_steps(result: Any, example: Example) -> list[Step]:
    """The steps of an imported multi-turn line, for ``show``: for each turn a user step with
    the entry's user message, for each step of the decoded
    form a model step with its calls by name and arguments, and a tool step per call with the
    result the checker's execution gives it (toolgym's replay,
    :func:`toolgym.suites.bfcl.multi_turn.stepwise`); a string that is not a call of literals
    is a malformed call with its text. Grading reads the line's ``result`` itself, not these
    steps."""
    messages = list(example.metadata.get("turns") or [])
    if not isinstance(result, list):
        return [UserStep(text=messages[0] if messages else "", turn=1), ModelStep(text=str(result), tool_calls=[])]
    entry = entry_of(example)
    outputs = iter(judge(_entry_dict(entry), result, entry.ground_truth).view.outputs)
    signatures = method_signatures(list(example.metadata.get("involved_classes") or []))
    steps: list[Step] = []
    for t, turn in enumerate(result):
        steps.append(UserStep(text=messages[t] if t < len(messages) else "", turn=t + 1))
        for s, step in enumerate(turn if isinstance(turn, list) else []):
            if not (isinstance(step, list) and step and all(isinstance(c, str) for c in step)):
                continue  # holds no call: left out, as the checker's runner leaves it out
            calls, tools = [], []
            for c, text in enumerate(step):
                ident = f"imported_{t}_{s}_{c}"
                output = next(outputs, "")
                try:
                    name, arguments = keyword_call(text, signatures)
                    calls.append(ToolCall(id=ident, name=name, arguments=arguments))
                except (ValueError, TypeError) as exc:
                    name, arguments = text.split("(")[0][:64] or "?", {}
                    calls.append(ToolCall(id=ident, name=name, arguments={}, malformed=f"not a call of literals: {exc}",
                                          raw=text))
                error = output.startswith("Error during execution") or output.startswith('{"error"')
                tools.append(ToolStep(call_id=ident, name=name, arguments=arguments, output=output, error=error))
            steps.append(ModelStep(text="", tool_calls=calls))
            steps.extend(tools)
    return steps


# --- report ---------------------------------------------------------------------------------
def _rate(scores: list[Score]) -> str:
    est = clustered_estimate([s.value for s in scores], [s.example_id for s in scores])
    return est.format()


def report(run: Run) -> list[ReportTable]:
    """Accuracy by category (official, optimal matching, strict abstention), the entries no
    answer can satisfy (:func:`~toolgym.suites.bfcl.checker.unsatisfiable`) and the failures by
    error type.

    Args:
        run (Run): A graded run.

    Returns:
        list[ReportTable]: The category table, the unsatisfiable entries of the run's dataset
        (when there are any) and the error-type table (empty without scores).
    """
    examples = run.examples or {}
    scored: dict[str, dict[str, list[Score]]] = defaultdict(lambda: defaultdict(list))
    for s in run.scores:
        if s.value is None:
            continue
        ex = examples.get(s.example_id)
        category = str(ex.metadata.get("category")) if ex is not None else "?"
        scored[s.grader][category].append(s)
    official = scored.get(ACCURACY)
    if not official:
        return []
    order = sorted(official, key=lambda c: _ORDER.index(c) if c in _ORDER else 99)
    rows = []
    for category in order:
        row: dict[str, Any] = {"category": category, "official accuracy ± s.e.": _rate(official[category]),
                               "n": len(official[category])}
        optimal = scored.get(OPTIMAL, {}).get(category)
        row["optimal matching"] = _rate(optimal) if optimal and "parallel" in category else None
        strict = scored.get(ABSTENTION, {}).get(category)
        if strict:
            counts = Counter(s.details.get("outcome") for s in strict)
            row["strict abstention"] = _rate(strict)
            row["malformed (counted correct officially)"] = counts["malformed"]
        else:
            row["strict abstention"] = None
            row["malformed (counted correct officially)"] = None
        rows.append(row)
    if len(order) > 1:
        every = [s for c in order for s in official[c]]
        rows.append({"category": "all (unweighted over entries)", "official accuracy ± s.e.": _rate(every), "n": len(every),
                     "optimal matching": None, "strict abstention": None, "malformed (counted correct officially)": None})
    notes = [OVERALL_NOTE]
    if all(c in official for c in MULTI_TURN_CATEGORIES):
        means = [sum(s.value for s in official[c]) / len(official[c]) for c in MULTI_TURN_CATEGORIES]
        rows.append({"category": "multi-turn overall (unweighted over the 4 categories)",
                     "official accuracy ± s.e.": f"{sum(means) / len(means):.3f}",
                     "n": sum(len(official[c]) for c in MULTI_TURN_CATEGORIES),
                     "optimal matching": None, "strict abstention": None, "malformed (counted correct officially)": None})
        notes.append(MULTI_TURN_NOTE)
    errors = sum(t.status == "error" for t in run.trajectories)
    if errors:
        notes.append(f"{errors} trajectory(ies) ended in error: outside these rows, counted in the score files as the leaderboard does")
    tables = [ReportTable(title=f"{run.env}: accuracy by category", rows=rows, notes=notes)]
    causes: Counter[tuple[str, str]] = Counter()
    for category in order:
        for s in official[category]:
            if s.value == 0:
                causes[category, str(s.details.get("error_type"))] += 1
    impossible = unsatisfiable(list(examples.values()))
    if impossible:
        # the explanations (up to ~200 characters) go to the notes, printed unwrapped: in a row
        # they would squeeze the id and category columns to an ellipsis at a terminal's width
        rows = []
        whys = []
        for i, why in impossible.items():
            error_type, _, explanation = why.partition(": ")
            rows.append({"id": i, "category": str(examples[i].metadata.get("category")), "error_type": error_type})
            whys.append(f"{i}: {explanation or why}")
        tables.append(ReportTable(
            title=f"{run.env}: entries no answer satisfies under the official rules",
            rows=rows,
            notes=["their ground truth contradicts the function's schema; they count as wrong for every model, "
                   "as in the official checker (the oracle fails exactly these); why, entry by entry:", *whys],
        ))
    if causes:
        tables.append(ReportTable(
            title=f"{run.env}: failures by error type",
            rows=[{"category": c, "error_type": e, "entries": n, "share of category": f"{n / len(official[c]):.3f}"}
                  for (c, e), n in sorted(causes.items(), key=lambda kv: (order.index(kv[0][0]), -kv[1]))],
        ))
    return tables

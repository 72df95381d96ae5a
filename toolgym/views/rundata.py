"""Run directories read back for inspection: the grader measures that decide pass and fail,
which trajectories failed, and where each one first left the expected calls.

Used by ``show``, ``summary``, ``report``, ``compare`` and the statistics; every run directory is
read by :func:`toolgym.api.load_run` (never a live environment), and every pass/fail reading
comes from a grader's :class:`~toolgym.records.Measure` (:func:`measure_for`).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel

from toolgym.api import load_run
from toolgym.benchmark import ReportTable
from toolgym.graders.alignment import ErrorType
from toolgym.records import BINARY, Example, Measure, Score, ToolCallSpec, ToolStep, Trajectory
from toolgym.runio import Run, RunDirError, RunRecord
from toolgym.stats import is_binary

CONTINUOUS = Measure(kind="continuous", pass_if=None)
"""What an old run's grader measures when it recorded no measure, is not installed and scored
values other than 0 and 1: higher is better, no pass rule."""


# --- measures --------------------------------------------------------------------------------


def measure_for(run: Run, grader: str) -> Measure:
    """What ``grader`` measures in ``run``: the measure recorded in ``run.json``; else the
    ``measure`` of the installed grader class (found again by its recorded spec); else, for a
    run written before graders declared measures, :data:`~toolgym.records.BINARY` when every
    value it scored is 0 or 1 and :data:`CONTINUOUS` (higher is better, no pass rule) otherwise.

    Args:
        run (Run): The run.
        grader (str): The grader's name (as its scores carry it).

    Returns:
        Measure: The grader's measure.
    """
    recorded = run.record.measures.get(grader)
    if recorded is not None:
        return recorded
    from toolgym.graders import measure_of
    from toolgym.plugins import get_grader_class

    try:
        return measure_of(get_grader_class(run.record.spec_of(f"grader:{grader}") or grader))
    except (KeyError, ValueError, TypeError):  # unknown name, bad spec, duplicate, not a grader
        pass
    values = [s.value for s in run.scores if s.grader == grader and s.value is not None]
    return BINARY if is_binary(values) else CONTINUOUS


def pass_rule_text(measure: Measure) -> str | None:
    """The pass rule in symbols: ``"≥ 1"``, ``"≤ 0"``, ``"= 1"``.

    Args:
        measure (Measure): A grader's measure.

    Returns:
        str | None: The rule, or ``None`` for a measure without one.
    """
    if measure.pass_if is None:
        return None
    return f"{ {'>=': '≥', '<=': '≤', '==': '='}[measure.pass_if]} {measure.threshold:g}"


def rule_text(measure: Measure) -> str:
    """The measure in a few words: ``"higher, pass ≥ 1"``, ``"lower, pass ≤ 0"``, ``"higher"``,
    ``"best at 1, pass = 1"`` (what it compares, :attr:`Measure.compares`, is a note of its
    own: :func:`compares_notes`).

    Args:
        measure (Measure): A grader's measure.

    Returns:
        str: Its better direction and pass rule.
    """
    rule = pass_rule_text(measure)
    return measure.direction_text if rule is None else f"{measure.direction_text}, pass {rule}"


def compares_notes(measures: Mapping[str, Measure], graders: Iterable[str] | None = None) -> list[str]:
    """One line per grader whose measure says what it compares (:attr:`Measure.compares`),
    printed under the tables that show its scores: ``"steps_exact compares tool names only,
    not arguments (trajectory_match compares those)"``.

    Args:
        measures (Mapping[str, Measure]): Grader name → measure.
        graders (Iterable[str] | None): The graders shown, in order (default: all of ``measures``).

    Returns:
        list[str]: The notes, without duplicates.
    """
    names = list(dict.fromkeys(measures if graders is None else graders))
    return [f"{g} compares {measures[g].compares}" for g in names if g in measures and measures[g].compares]


@dataclass
class RunView:
    """A run read by :func:`toolgym.api.load_run`, with what the views ask of it: a label, the
    scores of each trajectory, each grader's measure and the expected calls.

    Attributes:
        run (Run): The run.
        label (str): A short name for the run (agent, and model when it has one), made unique
            among the runs loaded together by :func:`load_runs`.
    """

    run: Run
    label: str = ""
    _by_key: dict[tuple[str, int], list[Score]] = field(default_factory=dict, repr=False)
    _measures: dict[str, Measure] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.label:
            self.label = run_label(self.run.record)
        by_key: dict[tuple[str, int], list[Score]] = defaultdict(list)
        for s in self.run.scores:
            by_key[(s.example_id, s.trial)].append(s)
        self._by_key = dict(by_key)
        self._measures = {g: measure_for(self.run, g) for g in self.run.graders}

    @property
    def directory(self) -> Path:
        """The run directory."""
        return Path(self.run.directory or ".")

    @property
    def record(self) -> RunRecord:
        """``run.json``."""
        return self.run.record

    @property
    def env(self) -> str:
        """The environment name recorded in ``run.json``."""
        return self.run.record.env

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every trajectory, in file order."""
        return self.run.trajectories

    @property
    def scores(self) -> list[Score]:
        """Every score, in file order."""
        return self.run.scores

    @property
    def examples(self) -> dict[str, Example] | None:
        """The run's examples by id, or ``None`` when the dataset was not read."""
        return self.run.examples

    @property
    def graders(self) -> list[str]:
        """Grader names (:attr:`toolgym.Run.graders`)."""
        return list(self._measures)

    @property
    def measures(self) -> dict[str, Measure]:
        """Grader name → :class:`~toolgym.records.Measure` (:func:`measure_for`)."""
        return self._measures

    def pass_fail_graders(self) -> list[str]:
        """Graders with a pass rule, in grader order."""
        return [g for g, m in self._measures.items() if m.pass_fail]

    def scores_of(self, trajectory: Trajectory) -> list[Score]:
        """The scores of one trajectory (matched by example id and trial)."""
        return self._by_key.get(trajectory.key, [])

    def failed(self, trajectory: Trajectory, grader: str | None = None) -> bool:
        """Whether a trajectory failed (:func:`is_failed` with this run's measures)."""
        return is_failed(trajectory, self.scores_of(trajectory), self._measures, grader)

    def expected_for(self, trajectory: Trajectory) -> list[ToolCallSpec] | list[str] | None:
        """The expected calls of a trajectory's example (:func:`expected_calls`)."""
        return expected_calls(self.example_of(trajectory), self.scores_of(trajectory))

    def example_of(self, trajectory: Trajectory) -> Example | None:
        """The trajectory's example, or ``None`` when the dataset was not read or lacks it."""
        return self.examples.get(trajectory.example_id) if self.examples is not None else None

    def order_matters(self, trajectory: Trajectory) -> bool:
        """Whether the example's expected calls are ordered (true when unknown)."""
        example = self.example_of(trajectory)
        return example.order_matters if example is not None else True

    def n_expected_steps(self, trajectory: Trajectory) -> int | None:
        """Number of expected tool calls of the trajectory's example, if known
        (:func:`n_expected_steps`)."""
        return n_expected_steps(self.example_of(trajectory), self.scores_of(trajectory))

    def row(self, trajectory: Trajectory) -> dict[str, Any]:
        """The trajectory's row as ``view`` and ``report`` list it (:func:`trajectory_row`)."""
        return trajectory_row(trajectory, self.scores_of(trajectory), self._measures, self.example_of(trajectory))


def expected_calls(example: Example | None, scores: Sequence[Score]) -> list[ToolCallSpec] | list[str] | None:
    """The expected calls of one trajectory: its example's (with arguments when the dataset
    gives them, else its expected tool names), else the expected tool names kept by the
    ``steps_exact`` grader in ``scores``, else ``None``."""
    if example is not None:
        if example.expected_calls is not None:
            return list(example.expected_calls)
        return list(example.expected_steps)
    for s in scores:
        if s.grader == "steps_exact" and isinstance(s.details.get("expected"), list):
            return [str(n) for n in s.details["expected"]]
    return None


def n_expected_steps(example: Example | None, scores: Sequence[Score]) -> int | None:
    """How many tool calls were expected (:func:`expected_calls`), else the example's
    ``n_steps`` metadata, else ``None``."""
    expected = expected_calls(example, scores)
    if expected is not None:
        return len(expected)
    if example is not None:
        n = example.metadata.get("n_steps")
        return int(n) if isinstance(n, int) else None
    return None


def _finite(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


FIRST_ERROR_TYPES = ("episode_error", *get_args(ErrorType), "step_limit", "repeat_limit", "abandoned")
"""Every ``type`` :func:`first_error` can give: an episode error, the stepwise grader's error
types (which include those of a departure from the expected calls), the step limit, the
repeat guard."""


def first_error(traj: Trajectory, scores: Sequence[Score], example: Example | None) -> dict[str, Any] | None:
    """Where and how a trajectory first went wrong, or ``None``.

    In this order: an episode that ended in ``error`` (type ``episode_error``, the error text);
    the ``first_error`` of its ``trajectory_match`` score (``None`` when that passed); the first
    departure from the expected calls (:func:`first_call_divergence` over
    :func:`expected_calls`, typed ``wrong_tool``, ``wrong_arguments``, ``extra_call`` or
    ``missing``); a trajectory stopped at the step limit (``step_limit``) or by the repeat
    guard (``repeat_limit``); one the agent walked away from (``abandoned``).

    Returns:
        dict | None: ``{"type": str, "step": 1-based tool step or None, "text": str}``.
    """
    if traj.status == "error":
        return {"type": "episode_error", "step": None, "text": traj.error or "error"}
    match = next((s for s in scores if s.grader == "trajectory_match"), None)
    if match is not None and match.value is not None:
        found = match.details.get("first_error")
        if not isinstance(found, dict):
            return None
        step = found.get("step")
        return {"type": str(found.get("type")), "step": step if isinstance(step, int) else None,
                "text": match.explanation}
    tools = traj.tool_steps
    expected = expected_calls(example, scores)
    divergence = first_call_divergence(expected, tools, example.order_matters if example is not None else True)
    if divergence is not None and expected is not None:
        i = divergence.index
        if i >= len(expected):
            kind = "extra_call"
        elif i >= len(tools):
            kind = "missing"
        else:
            exp = expected[i]
            kind = "wrong_tool" if tools[i].name != (exp if isinstance(exp, str) else exp.name) else "wrong_arguments"
        return {"type": kind, "step": i + 1 if i < len(tools) else None, "text": divergence.reason}
    if traj.status == "step_limit":
        return {"type": "step_limit", "step": None, "text": "stopped at the step limit"}
    if traj.status == "abandoned":
        return {"type": "abandoned", "step": None, "text": traj.error or "the agent walked away mid-episode"}
    if traj.status == "repeat_limit":
        return {"type": "repeat_limit", "step": None,
                "text": "stopped by the repeat guard (the same tool call repeated; --max-repeats)"}
    return None


def trajectory_row(
    traj: Trajectory, scores: Sequence[Score], measures: Mapping[str, Measure], example: Example | None
) -> dict[str, Any]:
    """One trajectory's row, the one data layer of ``toolgym view``'s list and ``report``'s
    table (so the two never disagree).

    Args:
        traj (Trajectory): The trajectory.
        scores (Sequence[Score]): Its scores.
        measures (Mapping[str, Measure]): Grader name → measure (:func:`measure_for`).
        example (Example | None): Its example, ``None`` when the dataset was not read.

    Returns:
        dict: ``{"example_id", "trial", "status", "n_tool_steps", "n_expected" (int | None),
        "duration_s" (seconds), "input_tokens", "output_tokens", "tokens" (sums over the
        model turns), "latency_s" (summed model latency, seconds), "failed" (:func:`is_failed`),
        "first_error" (:func:`first_error`), "parent" (a fork's parent record or ``None``),
        "metadata" (the example's), "scores": {grader: {"value": float | None, "passed":
        bool | None}}}``, the graders in the order of ``scores``.
    """
    model_steps = traj.model_steps
    tin = sum(s.input_tokens or 0 for s in model_steps)
    tout = sum(s.output_tokens or 0 for s in model_steps)
    by_grader: dict[str, dict[str, Any]] = {}
    for s in scores:
        measure = measures.get(s.grader)
        by_grader[s.grader] = {"value": _finite(s.value), "passed": None if measure is None else measure.passed(s.value)}
    parent = getattr(traj, "parent", None)
    if isinstance(parent, BaseModel):
        parent = parent.model_dump(mode="json")
    return {
        "example_id": traj.example_id,
        "trial": traj.trial,
        "status": traj.status,
        "n_tool_steps": len(traj.tool_steps),
        "n_expected": n_expected_steps(example, scores),
        "duration_s": traj.duration_s,
        "input_tokens": tin,
        "output_tokens": tout,
        "tokens": tin + tout,
        "latency_s": sum(s.latency_s for s in model_steps),
        "failed": is_failed(traj, scores, measures),
        "first_error": first_error(traj, scores, example),
        "parent": parent or None,
        "metadata": dict(example.metadata) if example is not None else {},
        "scores": by_grader,
    }


def run_label(record: RunRecord) -> str:
    """``agent`` or ``agent · model`` (a model given as a file path is shown by its file name).

    Args:
        record (RunRecord): The run's ``run.json``.

    Returns:
        str: The label.
    """
    model = record.model
    if not model:
        return record.agent_name
    provider, sep, rest = model.partition(":")
    if sep and "/" in rest:  # a file path (scripted:PATH, local:PATH): its name is enough
        model = f"{provider}:{Path(rest).name}"
    return f"{record.agent_name} · {model}"


def load_runs(directories: Iterable[str | Path], with_examples: bool = True) -> list[RunView]:
    """Read several run directories with :func:`toolgym.api.load_run`; labels that would repeat
    within one environment get the directory name appended.

    Args:
        directories (Iterable[str | Path]): Run directories.
        with_examples (bool): Read each run's dataset too.

    Returns:
        list[RunView]: The runs, in the order given.

    Raises:
        RunDirError: as :func:`toolgym.api.load_run`.
        ValueError: if no directory is given.
    """
    runs = [RunView(load_run(d, with_examples=with_examples)) for d in directories]
    if not runs:
        raise ValueError("no run directory given")
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for r in runs:
        seen[(r.env, r.label)] += 1
    for r in runs:
        if seen[(r.env, r.label)] > 1:
            r.label = f"{r.label} ({r.directory.name})"
    return runs


# --- failures ------------------------------------------------------------------------------


def is_failed(
    trajectory: Trajectory, scores: Sequence[Score], measures: Mapping[str, Measure], grader: str | None = None
) -> bool:
    """Whether a trajectory counts as a failure.

    A trajectory that did not complete (``error``, ``step_limit``, ``repeat_limit``, ``abandoned``,
    ``aborted``) always fails. Otherwise,
    with ``grader``, it fails when that grader's value does not pass its measure's rule
    (``measure.passed(value) is False``); without it, when the value of any grader with a pass
    rule does not pass. Graders without a pass rule, graders missing from ``measures`` and
    unscored (``None``) values never decide failure.

    Args:
        trajectory (Trajectory): The trajectory.
        scores (Sequence[Score]): Its scores.
        measures (Mapping[str, Measure]): Grader name → measure (see :func:`measure_for`).
        grader (str | None): The grader that decides, or ``None`` for every grader.

    Returns:
        bool: True when it failed.
    """
    if trajectory.status != "completed":
        return True
    for s in scores:
        measure = measures.get(s.grader)
        if measure is not None and (grader is None or s.grader == grader) and measure.passed(s.value) is False:
            return True
    return False


# --- divergence ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """Where a trajectory first departs from its expected calls.

    Attributes:
        index: Position (0-based) among the trajectory's tool steps; equal to the number of
            tool steps when the agent stopped before making an expected call.
        reason: One sentence: what was expected and what happened.
    """

    index: int
    reason: str


SHOWN_ARGUMENTS_CHARS = 300
"""Characters of a call's arguments shown in one-line texts (the first divergence, expected
calls); the trajectory keeps them whole."""


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, with ``… (N more characters)`` when cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - max_chars:,} more characters)"


def format_call(name: str, arguments: dict[str, Any] | None, max_chars: int = SHOWN_ARGUMENTS_CHARS) -> str:
    """``name({"arg": value})`` with the arguments as compact JSON (non-ASCII kept), cut to
    ``max_chars`` characters of arguments (see :func:`shorten`)."""
    if not arguments:
        return f"{name}()"
    return f"{name}({shorten(json.dumps(arguments, ensure_ascii=False, default=str), max_chars)})"


_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufff9-\ufffb]"
)


def visible(text: str) -> str:
    """``text`` safe for a terminal: control characters (C0 but newline and tab, DEL, C1) and
    bidirectional controls are written as escapes (``\\x1b``, ``\\u202e``), so colour codes,
    cursor movement, OSC 8 links, title changes and reordered text from a model or a tool are
    seen, not obeyed."""
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def first_call_divergence(
    expected: Sequence[ToolCallSpec] | Sequence[str] | None,
    actual: Sequence[ToolStep],
    order_matters: bool = True,
) -> Divergence | None:
    """The first tool step that departs from the expected calls, or ``None``.

    Compares in order: the tool name and, when ``expected`` holds calls with arguments, the
    arguments (exact JSON equality; graders may be more lenient, so a divergence here is where
    to look, not a verdict). Unordered examples (``order_matters`` false) and unknown
    expectations (``None``) have no divergence.
    """
    if expected is None or not order_matters:
        return None
    for i, step in enumerate(actual):
        if i >= len(expected):
            return Divergence(i, f"call {i + 1}: {step.name} is beyond the {len(expected)} expected calls")
        exp = expected[i]
        exp_name = exp if isinstance(exp, str) else exp.name
        if step.name != exp_name:
            return Divergence(i, f"call {i + 1}: expected {exp_name}, got {step.name}")
        if not isinstance(exp, str) and not _same_arguments(exp.arguments, step.arguments):
            return Divergence(
                i,
                f"call {i + 1}: expected {format_call(exp.name, exp.arguments)}, "
                f"got {format_call(step.name, step.arguments)}",
            )
    if len(actual) < len(expected):
        exp = expected[len(actual)]
        shown = exp if isinstance(exp, str) else format_call(exp.name, exp.arguments)
        return Divergence(
            len(actual), f"call {len(actual) + 1}: expected {shown}, the agent made no more calls"
        )
    return None


def _same_arguments(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """Equal as JSON values (key order ignored; ``1`` and ``True`` differ, unlike ``==``)."""
    if expected == actual:
        return (
            _canonical(expected) == _canonical(actual) if _has_bool(expected) or _has_bool(actual) else True
        )
    return False


def _has_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_has_bool(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_bool(v) for v in value)
    return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def format_value(value: float | None) -> str:
    """A score value for display: ``"1.0"``, ``"0.6667"`` (4 decimals at most), ``"unscored"``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unscored"
    return str(round(float(value), 4))


def suite_tables(run: RunView) -> list[ReportTable]:
    """The tables of the run's suite section (its benchmark's ``report``: per-category
    accuracy, published rows, ...), or none when the benchmark declares no report, the
    run's examples could not be read, or the benchmark can no longer be found.

    Args:
        run (RunView): A run loaded with its examples.

    Returns:
        list[ReportTable]: The tables, as the command line prints them after ``run``.
    """
    from toolgym.runner import benchmark_of

    if run.run.examples is None:
        return []
    try:
        benchmark = benchmark_of(run.record, run.directory)
    except RunDirError:
        return []
    return benchmark.report(run.run) if benchmark.report is not None else []


def suite_divergence(run: RunView, example: Example | None, trajectory: Trajectory) -> Divergence | None:
    """The first divergence of a trajectory as its suite judges it (the benchmark's
    ``divergence``), else as :func:`first_call_divergence` finds it against the expected calls.

    Args:
        run (RunView): The run.
        example (Example | None): The trajectory's example, if known.
        trajectory (Trajectory): The trajectory.
    """
    from toolgym.runner import benchmark_of

    if example is not None:
        try:
            benchmark = benchmark_of(run.record, run.directory)
        except RunDirError:
            benchmark = None
        if benchmark is not None and benchmark.divergence is not None:
            found = benchmark.divergence(example, trajectory)
            # a suite's own text may quote whole arguments: cut where shown
            return Divergence(found[0], shorten(found[1], 4 * SHOWN_ARGUMENTS_CHARS)) if found is not None else None
    return first_call_divergence(run.expected_for(trajectory), trajectory.tool_steps, run.order_matters(trajectory))


# --- the state change of each tool step --------------------------------------------------------


def state_changes(trajectory: Trajectory) -> list[list[dict[str, Any]] | None]:
    """What each tool step changed in the environment's state, from its stored
    ``state_patch`` (RFC 6902), with the values before and after.

    Returns:
        One entry per tool step: ``None`` when its state was not recorded (an older run, an
        imported file, the environment's cap reached, a patch that does not apply), else a
        list (empty: nothing changed) of ``{"op": add | remove | replace | move | copy,
        "path": JSON pointer, "before": value, "after": value, "from": pointer}``; ``before``
        is left out for a path that did not exist, ``after`` for one that no longer does,
        ``from`` is given for move and copy only.
    """
    import jsonpatch
    import jsonpointer

    n = len(trajectory.tool_steps)
    state = trajectory.initial_state
    out: list[list[dict[str, Any]] | None] = []
    for step in trajectory.tool_steps:
        if state is None or step.state_patch is None:
            break
        changes = []
        try:
            for op in step.state_patch:
                kind, path = op.get("op"), op.get("path")
                change: dict[str, Any] = {"op": kind, "path": path}
                if kind in ("replace", "remove") or (kind == "add" and not _inserts(state, path)):
                    before = jsonpointer.resolve_pointer(state, path, _ABSENT)
                    if before is not _ABSENT:
                        change["before"] = before
                elif kind in ("move", "copy"):
                    change["from"] = op.get("from")
                state = jsonpatch.apply_patch(state, [op])
                if kind not in ("remove", "test"):
                    change["after"] = jsonpointer.resolve_pointer(state, path)
                if kind != "test":
                    changes.append(change)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError, AttributeError):
            break
        out.append(changes)
    return out + [None] * (n - len(out))


_ABSENT = object()


def _inserts(state: Any, path: str) -> bool:
    """Whether an ``add`` at ``path`` inserts into a list (nothing was there before)."""
    import jsonpointer

    parent, _, _ = path.rpartition("/")
    return isinstance(jsonpointer.resolve_pointer(state, parent, None), list)

"""Run directories read back for inspection: trajectories, scores, the examples they came from,
which trajectories failed, and where each one first left the expected calls.

Used by ``show``, ``summary`` and ``report``; nothing here reaches back into a live environment,
everything is recomputed from the files of the run directory (and the dataset it names).
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.records import Example, Score, ToolCallSpec, ToolStep, Trajectory
from toolgym.runio import read_run, read_scores, read_trajectories
from toolgym.stats import is_binary


@dataclass
class RunView:
    """One run directory, loaded for reading.

    Attributes:
        directory: The run directory.
        info: Parsed ``run.json``.
        trajectories: Every trajectory, in file order.
        scores: Every score, in file order.
        examples: The run's examples by id, or ``None`` when the dataset recorded in
            ``run.json`` could not be read (the views then fall back to what the scores hold).
        label: A short name for the run (agent, and model when it has one), made unique among
            the runs loaded together by :func:`load_runs`.
    """

    directory: Path
    info: dict[str, Any]
    trajectories: list[Trajectory]
    scores: list[Score]
    examples: dict[str, Example] | None
    label: str = ""
    _by_key: dict[tuple[str, int], list[Score]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.label:
            self.label = run_label(self.info)
        by_key: dict[tuple[str, int], list[Score]] = defaultdict(list)
        for s in self.scores:
            by_key[(s.example_id, s.trial)].append(s)
        self._by_key = dict(by_key)

    @property
    def env(self) -> str:
        """The environment name recorded in ``run.json``."""
        return str(self.info.get("env", "?"))

    @property
    def graders(self) -> list[str]:
        """Grader names: those recorded in ``run.json``, then any others found in the scores."""
        names = [str(g) for g in self.info.get("graders", [])]
        for s in self.scores:
            if s.grader not in names:
                names.append(s.grader)
        return names

    def scores_of(self, trajectory: Trajectory) -> list[Score]:
        """The scores of one trajectory (matched by example id and trial)."""
        return self._by_key.get(trajectory.key, [])

    def pass_fail_graders(self) -> list[str]:
        """Graders whose every score in this run is 0 or 1 (and that scored something)."""
        values: dict[str, list[float]] = defaultdict(list)
        for s in self.scores:
            if s.value is not None:
                values[s.grader].append(s.value)
        return [g for g in self.graders if values.get(g) and is_binary(values[g])]

    def expected_for(self, trajectory: Trajectory) -> list[ToolCallSpec] | list[str] | None:
        """The expected calls of a trajectory's example (with arguments when the dataset gives
        them), else the expected tool names kept by ``steps_exact``, else ``None``."""
        if self.examples is not None:
            example = self.examples.get(trajectory.example_id)
            if example is not None:
                if example.expected_calls is not None:
                    return list(example.expected_calls)
                return list(example.expected_steps)
        for s in self.scores_of(trajectory):
            if s.grader == "steps_exact" and isinstance(s.details.get("expected"), list):
                return [str(n) for n in s.details["expected"]]
        return None

    def order_matters(self, trajectory: Trajectory) -> bool:
        """Whether the example's expected calls are ordered (true when unknown)."""
        if self.examples is not None and trajectory.example_id in self.examples:
            return self.examples[trajectory.example_id].order_matters
        return True

    def n_expected_steps(self, trajectory: Trajectory) -> int | None:
        """Number of expected tool calls of the trajectory's example, if known."""
        expected = self.expected_for(trajectory)
        if expected is not None:
            return len(expected)
        if self.examples is not None and trajectory.example_id in self.examples:
            n = self.examples[trajectory.example_id].metadata.get("n_steps")
            return int(n) if isinstance(n, int) else None
        return None


def run_label(info: dict[str, Any]) -> str:
    """``agent`` or ``agent · model`` from a ``run.json`` record (a model given as a file path
    is shown by its file name)."""
    agent = info.get("agent")
    name = agent.get("agent") if isinstance(agent, dict) else agent
    name = str(name or "?")
    model = info.get("model")
    if not model:
        return name
    provider, sep, rest = str(model).partition(":")
    if sep and "/" in rest:  # a file path (scripted:PATH, local:PATH): its name is enough
        model = f"{provider}:{Path(rest).name}"
    return f"{name} · {model}"


def load_run(directory: str | Path, with_examples: bool = True) -> RunView:
    """Read a run directory.

    The dataset recorded in ``run.json`` is read too (for expected calls with arguments and the
    example inputs); when it cannot be read, a warning says why and the view goes on without it.

    Raises:
        RunDirError: if ``run.json`` is missing or invalid, or a trajectory or score line is
            invalid (file and line named).
    """
    directory = Path(directory)
    info = read_run(directory)
    trajectories = read_trajectories(directory)
    scores = read_scores(directory)
    examples = _load_examples(directory, info) if with_examples else None
    return RunView(directory, info, trajectories, scores, examples)


def load_runs(directories: Iterable[str | Path], with_examples: bool = True) -> list[RunView]:
    """Read several run directories; labels that would repeat within one environment get the
    directory name appended.

    Raises:
        RunDirError: as :func:`load_run`.
        ValueError: if no directory is given.
    """
    runs = [load_run(d, with_examples) for d in directories]
    if not runs:
        raise ValueError("no run directory given")
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for r in runs:
        seen[(r.env, r.label)] += 1
    for r in runs:
        if seen[(r.env, r.label)] > 1:
            r.label = f"{r.label} ({r.directory.name})"
    return runs


def _load_examples(directory: Path, info: dict[str, Any]) -> dict[str, Example] | None:
    from toolgym.data import load_examples
    from toolgym.environments import get_environment
    from toolgym.registry import UnknownNameError

    dataset = info.get("dataset") or {}
    path = dataset.get("path") if isinstance(dataset, dict) else None
    if not path:
        return None
    try:
        try:
            env_cls = get_environment(str(info.get("env")))
        except UnknownNameError:  # an environment this installation lacks: read generic formats
            env_cls = None
        examples = load_examples(path, env_cls, info.get("env_options") or {})
    except Exception as exc:  # noqa: BLE001 -- the views work without the dataset; say why
        warnings.warn(
            f"{directory}: dataset {path} not read ({type(exc).__name__}: {exc}); "
            "expected calls come from the scores only",
            stacklevel=3,
        )
        return None
    return {ex.id: ex for ex in examples}


# --- failures ------------------------------------------------------------------------------


def is_failed(
    trajectory: Trajectory, scores: Sequence[Score], pass_fail: Iterable[str], grader: str | None = None
) -> bool:
    """Whether a trajectory counts as a failure.

    A trajectory that did not complete (``error`` or ``step_limit``) always fails. Otherwise,
    with ``grader``, it fails when that grader's score is not 1 (below 1 for a pass/fail or
    partial-credit grader; for a ratio such as ``step_ratio``, anything but the optimal 1.0);
    without it, when any pass/fail grader (``pass_fail``, see
    :meth:`RunView.pass_fail_graders`) gave 0. Unscored (``None``) scores never fail.
    """
    if trajectory.status != "completed":
        return True
    if grader is not None:
        return any(s.grader == grader and s.value is not None and s.value != 1.0 for s in scores)
    names = set(pass_fail)
    return any(s.grader in names and s.value is not None and s.value != 1.0 for s in scores)


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


def format_call(name: str, arguments: dict[str, Any] | None) -> str:
    """``name({"arg": value})`` with the arguments as compact JSON (non-ASCII kept)."""
    if not arguments:
        return f"{name}()"
    return f"{name}({json.dumps(arguments, ensure_ascii=False, default=str)})"


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

"""What a suite declares to the core: one :class:`Benchmark` per environment, gathered in a
:class:`Suite`.

A suite is a folder (toolgym's own live in ``toolgym/suites/``; a plugin's anywhere) holding
its environment, data loading, graders, generator, report section and exporters. The core never
names a suite: it reads these typed declarations. A plain :class:`~toolgym.environments.Environment`
subclass given where a benchmark is expected becomes ``Benchmark(environment=cls)`` with the
defaults below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.environments import Environment
from toolgym.records import Example, Trajectory
from toolgym.registry import Registry
from toolgym.runio import Run

__all__ = ["ENVIRONMENTS", "Benchmark", "Generator", "ReportTable", "Suite", "as_benchmark"]


@dataclass
class ReportTable:
    """A table a suite reports (printed by the CLI after ``run`` and ``grade``, shown in the
    HTML report).

    Attributes:
        title: Shown above the table.
        rows: One dict per row; the first row's keys are the columns.
        notes: Warnings shown under the table (unknown ids, ...).
    """

    title: str
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Generator:
    """A seeded difficulty-ladder generator (``toolgym generate``).

    Attributes:
        make: ``(seed, per_level, levels) -> examples``; each example's ``metadata`` carries
            ``n_steps`` (tool calls of the reference solution) and ``difficulty`` (its level).
            Raises ``ValueError`` for a level it cannot make.
        default_levels: Levels made when none are asked for.
        level: What a level means (``"string length"``, ``"hops"``), for help texts.
    """

    make: Callable[[int, int, list[int]], list[Example]]
    default_levels: tuple[int, ...]
    level: str = "difficulty"


DatasetLoader = Callable[[Path, dict[str, Any]], "list[Example] | None"]
"""``(path, env_options) -> examples`` for a format of the suite's own, or ``None`` to use the
generic loaders (JSONL of examples, the LangChain tool-usage JSON). Raises ``DatasetError``
naming the file and line."""

LangChainAdapter = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
"""``(record, fields) -> fields``: completes an example converted from a LangChain
tool-usage record (expected calls, expected state)."""

Report = Callable[[Run], "list[ReportTable]"]
"""``run -> tables``: the suite's own section of a graded run (per-subject accuracy,
perplexity, published metrics)."""

Exporter = Callable[[Run], "list[Path]"]
"""``run -> files written``: files in a published format derived from a graded run's
trajectories and scores, written into ``run.directory`` after every grading. Exports are
derived data: the trajectories and scores stay the record."""

Importer = Callable[[Path, "list[Example]"], "list[Trajectory]"]
"""``(foreign result file, examples) -> trajectories``: reads a result file written by another
tool (``grade --result FILE``) into trajectories, which are then graded and exported like a
run's own. Raises ``ValueError`` naming the file and line."""

FirstDivergence = Callable[[Example, Trajectory], "tuple[int, str] | None"]
"""``(example, trajectory) -> (index, reason) | None``: where a trajectory first departs from
what the example accepts, judged by the suite's own rules (several acceptable values, string
normalisation, unordered calls), for ``show``. ``index`` counts the trajectory's tool calls
from 0 (the number of calls, or more: after the last step); ``reason`` is one sentence naming
the argument at fault where there is one. ``None``: no divergence. Without it, ``show``
compares the calls with ``expected_calls`` exactly."""

DatasetByName = Callable[[str], "Path | None"]
"""``name -> path | None``: the file of a dataset the suite knows by name but does not hold in
its ``datasets`` folder (one shipped by an installed package); ``None`` for a name it does not
know. Raises ``DatasetError`` when the name is its own but the file cannot be had (a package
missing), saying how to get it."""

AnswerFromReplay = Callable[[Example, "list[tuple[str, Any]]"], Any]
"""``(example, [(tool name, decoded observation), ...]) -> answer``: the reference answer the
observations of the example's expected calls imply (a dataset rule: it must equal the
example's ``reference``)."""


@dataclass(frozen=True)
class Benchmark:
    """One environment and everything the core needs to run, grade and report it.

    Attributes:
        environment: The :class:`~toolgym.environments.Environment` subclass.
        name: The registry name (default: ``environment.name``, else the class name in snake
            case); trajectories carry it as ``env``.
        graders: Grader names run by default.
        judge_graders: Graders added when a judge model is given (``--judge-model``).
        datasets: Folder of built-in datasets ``<name>.jsonl`` (``--dataset NAME``; ``test``
            when no dataset is given), or ``None``.
        load_dataset: See :data:`DatasetLoader`.
        dataset_by_name: See :data:`DatasetByName`.
        from_langchain: See :data:`LangChainAdapter`.
        generator: See :class:`Generator`.
        default_concurrency: Episodes in flight when ``--concurrency`` is not given.
        report: See :data:`Report`.
        exporters: See :data:`Exporter`.
        importer: See :data:`Importer`.
        divergence: See :data:`FirstDivergence`.
        answer_from_replay: See :data:`AnswerFromReplay`; used by
            :func:`toolgym.data.replay_problems`, the dataset rules.
        max_trials: Most trials per example the suite's published formats allow (``None``:
            no limit).
        description: One line for ``list``.
    """

    environment: type[Environment]
    name: str = ""
    graders: tuple[str, ...] = ("steps_exact", "step_ratio")
    judge_graders: tuple[str, ...] = ()
    datasets: Path | None = None
    load_dataset: DatasetLoader | None = None
    dataset_by_name: DatasetByName | None = None
    from_langchain: LangChainAdapter | None = None
    generator: Generator | None = None
    default_concurrency: int = 1
    report: Report | None = None
    exporters: tuple[Exporter, ...] = ()
    importer: Importer | None = None
    divergence: FirstDivergence | None = None
    answer_from_replay: AnswerFromReplay | None = None
    max_trials: int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.environment, type) and issubclass(self.environment, Environment)):
            raise TypeError(f"Benchmark.environment must be an Environment subclass, got {self.environment!r}")
        name = self.name or self.environment.name or _snake(self.environment.__name__)
        object.__setattr__(self, "name", name)
        if not self.environment.name:
            self.environment.name = name

    def builtin_datasets(self) -> list[str]:
        """Names of the built-in datasets (files ``<datasets>/<name>.jsonl``)."""
        folder = self.datasets
        return sorted(p.stem for p in folder.glob("*.jsonl")) if folder and folder.is_dir() else []


@dataclass(frozen=True)
class Suite:
    """A suite folder's declaration: its benchmarks and the graders and agents it adds.

    toolgym's own suites expose one as ``SUITE`` in ``toolgym/suites/<name>/__init__.py``;
    a plugin declares one in the ``toolgym.suites`` entry-point group.

    Attributes:
        name: The suite's name (its folder).
        benchmarks: One per environment.
        graders: Grader classes (each with a ``name``) the suite adds.
        agents: Agent classes (each with a ``name``) the suite adds.
    """

    name: str
    benchmarks: Sequence[Benchmark] = ()
    graders: Sequence[type] = ()
    agents: Sequence[type] = ()


def as_benchmark(obj: Any, name: str = "") -> Benchmark:
    """A :class:`Benchmark` from a benchmark or an ``Environment`` subclass.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(obj, Benchmark):
        return obj
    if isinstance(obj, type) and issubclass(obj, Environment):
        return Benchmark(environment=obj, name=obj.name or (name if re.fullmatch(r"\w+", name or "") else ""))
    raise TypeError(f"environment {name or obj!r}: expected an Environment subclass or a Benchmark, got {obj!r}")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


ENVIRONMENTS: Registry[Benchmark] = Registry("environment", "toolgym.environments", coerce=as_benchmark)
"""Benchmarks by name; filled by the suites (:func:`toolgym.plugins.load_suites`), the
``toolgym.environments`` entry points and specs."""

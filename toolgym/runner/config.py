"""What defines a run (:class:`RunConfig`), what it returns (:class:`RunResult`) and when it gives up on episodes that end in error (:class:`ErrorLimit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.providers import ModelSettings
from toolgym.records import Score, Trajectory
from toolgym.runio import (
    Run,
    RunRecord,
)
from toolgym.stats import SummaryRow

EXAMPLES_FILE = "examples.jsonl"
"""Where a run given its examples in memory keeps them, so ``grade`` and ``show`` read them."""



@dataclass
class RunConfig:
    """Everything that defines a run; stored in ``run.json``.

    Every part is a name, a ``module.path:Name`` / ``file.py:Name`` spec, or an object.

    Attributes:
        env: An environment name or spec, a :class:`~toolgym.Benchmark`, or an
            :class:`~toolgym.Environment` subclass.
        out: Run directory, or ``None`` to keep the run in memory only.
        agent: An agent name or spec, an :class:`~toolgym.Agent` subclass or instance, or a
            langgraph graph factory ``factory(model, tools, instructions)``.
        model: A model spec (``local``, ``openai:gpt-4o-mini``, ``scripted:PATH``,
            ``module:factory``) or a langchain-core ``BaseChatModel`` object.
        dataset: A path, a built-in dataset name (``None``: the environment's ``test`` set), or
            a list of :class:`~toolgym.Example` objects or dicts.
        limit: Run only the first N examples.
        trials: Episodes per example (fresh environment each).
        max_steps: Model turns before ``step_limit``.
        max_repeats: The repeat guard: end an episode with status ``repeat_limit`` after this
            many identical consecutive tool calls (at least 2); ``None`` (the default): off.
            See :meth:`toolgym.agents.Agent.limit_reached`.
        concurrency: Episodes in flight at once (over all worker processes); ``None``: the
            benchmark's ``default_concurrency``.
        workers: Processes playing episodes (see :func:`play_in_processes`); 1 plays them in
            this process.
        resume: Continue a run directory, skipping finished (example, trial) pairs and playing
            again those that ended in error (the new attempt counts; both stay in
            trajectories.jsonl). Settings that change the results (``max_steps``, temperature,
            seed, token limit, base URL) must be those the run started with.
        force: With ``resume``, accept changed settings (recorded in run.json's ``resumes``).
        max_errors: When to give up on episodes that end in error: ``None`` (the default)
            stops the run once its first :data:`FIRST_ERRORS` episodes all ended in error; a
            count ``N`` or a share ``"P%"`` stops it as soon as more episodes than that erred.
            See :func:`parse_max_errors`.
        graders: Grader names, specs, classes or instances (default: the benchmark's own).
        settings: Model settings (temperature, seed, ...).
        env_options: Environment-specific options (``sample``, ``shots``, ...), passed to the
            benchmark's dataset loader.
        grader_settings: Grader settings by field name (``judge_model``, ``judge_cache``);
            recorded in run.json so that ``grade`` reuses them (see :func:`make_graders`).
        executor: Where episodes are played: ``local`` (this process, or ``workers``
            forked ones), ``ray`` (a Ray cluster), another executor's name or spec, or an
            executor object (see :mod:`toolgym.executor`).
        executor_options: Keyword arguments of the executor (``{"address": "auto"}`` for
            ``ray``).
        protocol: ``free-running`` (default), ``teacher-forced`` (besides each free-running
            episode, one episode per step ``k`` of the example's reference path: the steps
            before ``k`` replayed, then one model turn; see :mod:`toolgym.forcing`) or ``fork``
            (only with a :class:`toolgym.forcing.ForkAgent`, made by ``toolgym fork``).
        inject: A fault ``KIND@K`` (``tool_error``, ``wrong_value`` or ``empty`` at tool step
            ``K``) for a teacher-forced run or a fork; see :mod:`toolgym.forcing`.
        user_model: The chat model that plays a simulated user (examples with ``user``): a
            model spec as ``model`` takes, or a langchain-core chat model object; ``None``: no
            simulated user (a dataset with one is refused). See :mod:`toolgym.users`.
    """

    env: Any
    out: Path | None = None
    agent: Any = "tool_calling"
    model: Any = "local"
    dataset: Any = None
    limit: int | None = None
    trials: int = 1
    max_steps: int = 40
    max_repeats: int | None = None
    concurrency: int | None = None
    workers: int = 1
    resume: bool = False
    force: bool = False
    max_errors: int | str | None = None
    graders: list[Any] | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    env_options: dict[str, Any] = field(default_factory=dict)
    grader_settings: dict[str, Any] = field(default_factory=dict)
    executor: Any = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    protocol: str = "free-running"
    inject: str | None = None
    user_model: Any = None

    def __post_init__(self) -> None:
        """Refuse counts the command line would refuse (``ValueError`` naming the field)."""
        for name in ("limit", "trials", "max_steps", "concurrency", "workers"):
            value = getattr(self, name)
            if value is None and name in ("limit", "concurrency"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        repeats = self.max_repeats
        if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2):
            raise ValueError(f"max_repeats must be an integer of at least 2 (or None: no repeat guard), got {repeats!r}")


FIRST_ERRORS = 20
"""The default error limit: a run whose first this many episodes (or all, when fewer) all end
in error stops (a dead server, a missing key, a wrong model name)."""


class TooManyErrors(RuntimeError):
    """The run stopped because too many episodes ended in error (see ``RunConfig.max_errors``);
    the finished episodes are saved."""


def parse_max_errors(value: int | str | None) -> int | float | None:
    """``--max-errors``: ``None`` (the default rule), a count ``N`` (an int, or its text) or a
    share ``"P%"`` (returned as a fraction in [0, 1]).

    Raises:
        ValueError: for anything else, naming what was given.
    """
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"--max-errors must be a count N >= 0 or a share P%, got {value}")
        return value
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if not 0 <= share <= 1:
                raise ValueError
            return share
        count = int(text)
        if count < 0:
            raise ValueError
        return count
    except ValueError:
        raise ValueError(f"--max-errors must be a count N >= 0 or a share P% (such as 10%), got {value!r}") from None


@dataclass
class ErrorLimit:
    """Counts episodes that end in error while a run plays, and stops the run (raising
    :class:`TooManyErrors` from :meth:`count`) once the limit is surely passed.

    Attributes:
        limit: The most errors allowed (``None``: the default rule, see :data:`FIRST_ERRORS`).
        jobs: Episodes the run plays.
        rule: The limit as the user wrote it, for messages.
    """

    limit: int | None
    jobs: int
    rule: str
    completed_before: int = 0
    played: int = 0
    errors: int = 0
    last_error: str | None = None

    @classmethod
    def parse(cls, value: int | str | None, jobs: int, completed_before: int = 0) -> ErrorLimit:
        """The limit of a run of ``jobs`` episodes from ``RunConfig.max_errors``;
        ``completed_before`` episodes of a resumed run ended without error earlier (then the
        default rule never stops it: the setup worked)."""
        parsed = parse_max_errors(value)
        if parsed is None:
            first = min(FIRST_ERRORS, jobs)
            rule = "the first episode ended in error" if first == 1 else f"the first {first} episodes all ended in error"
            return cls(None, jobs, rule, completed_before)
        if isinstance(parsed, float):
            return cls(int(parsed * jobs), jobs, f"--max-errors {value}: more than {parsed:.0%} of {jobs} episodes")
        return cls(parsed, jobs, f"--max-errors {parsed}")

    def count(self, traj: Trajectory) -> None:
        """Count one finished episode.

        Raises:
            TooManyErrors: when the limit is passed.
        """
        self.played += 1
        if traj.status == "error":
            self.errors += 1
            self.last_error = traj.error
        if self.passed():
            raise TooManyErrors(self.message())

    def passed(self) -> bool:
        """Whether the errors so far pass the limit."""
        if self.limit is None:
            first = min(FIRST_ERRORS, self.jobs)
            return not self.completed_before and self.played == first and self.errors == first and first > 0
        return self.errors > self.limit

    def message(self) -> str:
        """Why the run stopped, with the last error and what to do."""
        return (
            f"stopped after {self.played} of {self.jobs} episodes, {self.errors} ended in error ({self.rule}); "
            f"last error: {self.last_error}. Finished episodes are saved: fix the cause and continue with "
            "--resume (episodes that ended in error are played again), or raise --max-errors"
        )


@dataclass
class RunResult:
    """What :func:`run` returns: the run as played and graded.

    Attributes:
        run: The record, trajectories, scores and examples (``run.directory`` is ``None`` for
            a run kept in memory).
        summary: Mean ± standard error per grader.
    """

    run: Run
    summary: list[SummaryRow]

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every trajectory, in the order they finished."""
        return self.run.trajectories

    @property
    def scores(self) -> list[Score]:
        """Every score."""
        return self.run.scores

    @property
    def record(self) -> RunRecord:
        """The run's ``run.json`` record."""
        return self.run.record

"""Running an agent over a dataset, grading stored trajectories, and exporting results.

:func:`run` is the whole pipeline behind ``toolgym.evaluate`` and ``toolgym run``: resolve the
parts (names, specs or objects), load and check the dataset, play every (example, trial)
episode, append each trajectory as it finishes, grade, export. Data flows one way:
dataset → episode → trajectory → scores → views and exporters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import gc
import hashlib
import os
import platform
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolgym.agents import Agent, as_agent_class
from toolgym.benchmark import Benchmark, as_benchmark
from toolgym.data import (
    DatasetError,
    check_tools,
    dataset_change,
    load_examples,
    resolve_dataset,
    sha256_file,
    write_examples,
)
from toolgym.environments import Environment
from toolgym.executor import EXECUTORS, Episodes, PartSpecs, make_executor
from toolgym.graders import Grader, grader_name, kept_details, lean_score, measure_of
from toolgym.plugins import agent_entry, benchmark_entry, grader_entry
from toolgym.providers import PROVIDERS, ModelSettings, split_spec
from toolgym.records import UNSCORED_STATUSES, Example, Score, Trajectory
from toolgym.registry import Entry, ExtensionError, UnknownNameError, is_spec
from toolgym.runio import (
    IMPORTED_AGENT,
    SCORES_FILE,
    TRAJECTORIES_FILE,
    DatasetRef,
    ExtensionRef,
    ImportedLinesMissing,
    JsonlAppender,
    Run,
    RunDirError,
    RunRecord,
    latest_attempts,
    read_jsonl,
    read_run,
    read_trajectories,
    record_line,
    result_file_ref,
    write_jsonl_atomic,
    write_run,
)
from toolgym.runio import (
    RUN_FILE as RUN_FILE_NAME,
)
from toolgym.stats import SummaryRow, summarize

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
    """

    env: Any
    out: Path | None = None
    agent: Any = "tool_calling"
    model: Any = "local"
    dataset: Any = None
    limit: int | None = None
    trials: int = 1
    max_steps: int = 40
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

    def __post_init__(self) -> None:
        """Refuse counts the command line would refuse (``ValueError`` naming the field)."""
        for name in ("limit", "trials", "max_steps", "concurrency", "workers"):
            value = getattr(self, name)
            if value is None and name in ("limit", "concurrency"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


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
            return cls(None, jobs, f"the first {min(FIRST_ERRORS, jobs)} episodes all ended in error", completed_before)
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


# --- resolving the parts --------------------------------------------------------------------


_IN_PROCESS: dict[str, Any] = {}
"""Objects recorded as ``<object Name>`` (no other process can import them: a class defined
in a script or inside a function), by their recorded spec, so that this process finds them
again when it grades, shows or exports the run (:func:`in_process`)."""


def _object_ref(obj: Any, value: Any = None) -> ExtensionRef:
    """How an object given in Python is recorded: ``module:QualName`` when another process
    can import it again, else ``<object QualName>`` (``<object QualName #2>`` for a second
    object of that name), which this process remembers (``value``, default ``obj``) so that
    it can read the run back with it; other processes read such a run without it."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and module != "__main__" and "<" not in qualname:
        return ExtensionRef(spec=f"{module}:{qualname}", source="object")
    kept = obj if value is None else value
    base = f"{qualname or type(obj).__name__}"
    spec, n = f"<object {base}>", 1
    while spec in _IN_PROCESS and _IN_PROCESS[spec] is not kept:
        n += 1
        spec = f"<object {base} #{n}>"
    _IN_PROCESS[spec] = kept
    return ExtensionRef(spec=spec, source="object")


def in_process(spec: str | None) -> Any:
    """The object this process recorded as ``spec`` (``<object Name>``), else ``None``."""
    return _IN_PROCESS.get(spec) if spec else None


NOT_IMPORTABLE_HINT = (
    "it was given as a Python object no other process can import (a class defined in a script "
    "or inside a function): read, grade or export the run from the process that made it "
    "(toolgym.load_run, toolgym.views.export.export_runs), or define the class in a module or "
    "file and pass its spec (evaluate(\"envs.py:KeyValueStore\", ...)), which every process finds again"
)


def _ref(entry: Entry[Any]) -> ExtensionRef:
    return ExtensionRef(spec=entry.spec, source=entry.source, distribution=entry.distribution, version=entry.version)


def resolve_benchmark(env: Any) -> tuple[Benchmark, ExtensionRef]:
    """A benchmark and its record from a name, spec, ``Benchmark`` or ``Environment`` class.

    Raises:
        UnknownNameError / ExtensionError: for a name or spec that cannot be found.
        TypeError: for anything else.
    """
    if isinstance(env, str):
        entry = benchmark_entry(env)
        return entry.obj, _ref(entry)
    benchmark = as_benchmark(env)
    if isinstance(env, Benchmark):  # recorded by the module-level name it is bound to, if any
        module = sys.modules.get(benchmark.environment.__module__)
        for name, value in (vars(module).items() if module is not None else ()):
            if value is env and module.__name__ != "__main__":
                return benchmark, ExtensionRef(spec=f"{module.__name__}:{name}", source="object")
        return benchmark, _object_ref(benchmark.environment, env)
    return benchmark, _object_ref(benchmark.environment)


def _is_chat_model(obj: Any) -> bool:
    from langchain_core.language_models import BaseChatModel  # only runs with a model object

    return isinstance(obj, BaseChatModel)


def resolve_agent(agent: Any) -> tuple[type[Agent] | Agent, ExtensionRef]:
    """An agent class (or instance) and its record from a name, spec, class, instance or
    graph factory."""
    if isinstance(agent, str):
        entry = agent_entry(agent)
        return entry.obj, _ref(entry)
    if isinstance(agent, Agent):
        return agent, _object_ref(type(agent))
    return as_agent_class(agent, getattr(agent, "__name__", "")), _object_ref(agent)


def model_spec_ref(spec: str) -> tuple[str, ExtensionRef]:
    """The model spec to record (a ``file.py:Name`` spec made absolute) and where its provider
    came from (built-in prefix, a ``toolgym.models`` entry point, a module or a file).

    Raises:
        UnknownNameError / ExtensionError: when neither a registered prefix nor a loadable spec.
    """
    prefix, _ = split_spec(spec)
    if prefix not in PROVIDERS and is_spec(spec):
        entry = PROVIDERS.entry(spec)
        return entry.spec, _ref(entry)
    entry = PROVIDERS.entry(prefix)
    return spec, ExtensionRef(spec=spec, source=entry.source, distribution=entry.distribution, version=entry.version)


MILESTONE_GRADERS = ("trajectory_match", "milestone_progress", "step_precision", "step_recall")
"""Graders added to the defaults when a dataset has an example with ``milestones``."""


def make_graders(
    benchmark: Benchmark,
    names: Sequence[Any] | None,
    settings: dict[str, Any] | None = None,
    examples: Sequence[Example] | None = None,
) -> list[tuple[Grader, ExtensionRef]]:
    """Instantiate the requested graders.

    Args:
        benchmark: Without ``names`` its ``graders`` are used, plus its ``judge_graders``
            when ``settings`` name a ``judge_model``.
        names: Grader names or specs, classes or instances, or ``None`` for the defaults.
        settings: Grader settings by field name; each grader (a dataclass) receives only the
            settings it declares as fields, so one ``--judge-model`` reaches every judge.
            ``None`` values are dropped (the grader's default applies). A grader declaring a
            ``benchmark`` field (``final_state``, ``collateral_damage``: they replay the
            reference on a fresh environment) receives ``benchmark``.
        examples: The dataset; without ``names``, :data:`MILESTONE_GRADERS` join the
            defaults when one of its examples has ``milestones``.

    Raises:
        UnknownNameError / ExtensionError: for an unknown grader.
        ValueError: when a grader rejects its settings (a judge without a judge model).
    """
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if names is None:
        names = list(benchmark.graders)
        if settings.get("judge_model"):
            names += [n for n in benchmark.judge_graders if n not in names]
        if examples is not None and any(ex.milestones is not None for ex in examples):
            names += [n for n in MILESTONE_GRADERS if n not in names]
        if (settings.get("trajectory_mode") or settings.get("args_mode")) and "trajectory_match" not in names:
            names.append("trajectory_match")  # the modes are its settings: asking for one asks for it
    graders = []
    for item in names:
        if isinstance(item, str) and in_process(item) is not None:  # a run of this process, read back
            item = in_process(item)
        if isinstance(item, str):
            entry = grader_entry(item)
            cls, ref = entry.obj, _ref(entry)
        else:
            cls, ref = item, _object_ref(item if isinstance(item, type) else type(item), item)
        if isinstance(cls, type):
            accepted = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
            given = {k: v for k, v in settings.items() if k in accepted}
            if "benchmark" in accepted and "benchmark" not in given:  # graders that replay the reference
                given["benchmark"] = benchmark
            grader = cls(**given)
        else:  # an instance: used as it is
            grader = cls
        name = getattr(grader, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"grader {ref.spec}: has no name (give the class a `name` string)")
        taken = {grader_name(g): r for g, r in graders}
        if name in taken:
            if taken[name].spec == ref.spec:  # the same grader asked for twice
                continue
            raise ValueError(
                f"two graders named {name!r}: {taken[name].spec} and {ref.spec}; their scores would mix (rename one)"
            )
        graders.append((grader, ref))
    return graders


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
            text=True, timeout=5,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("toolgym", "langgraph", "langchain-core", "pydantic", "xllamacpp"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def load_run_examples(
    benchmark: Benchmark, dataset: Any, limit: int | None, options: dict[str, Any] | None = None
) -> tuple[Path | None, list[Example]]:
    """Resolve and load a run's examples (validated before any model is called).

    Args:
        dataset: A path, a built-in dataset name, ``None`` (the ``test`` set), or a list of
            :class:`Example` objects or dicts (then the returned path is ``None``).

    Raises:
        DatasetError: for an invalid record (file and line, or list index, named), or an
            example whose expected steps name tools the environment does not have.
    """
    if isinstance(dataset, (list, tuple)):
        examples = []
        for i, item in enumerate(dataset):
            try:
                examples.append(item if isinstance(item, Example) else Example.model_validate(item))
            except ValidationError as exc:
                err = exc.errors()[0]
                raise DatasetError(f"dataset[{i}]: field {'.'.join(map(str, err['loc'])) or '(record)'}: {err['msg']}") from None
        if not examples:
            raise DatasetError("dataset: no examples")
        path = None
    else:
        path = resolve_dataset(benchmark, None if dataset is None else str(dataset))
        examples = load_examples(path, benchmark, options)
    check_tools(benchmark, examples, path or "dataset")
    return path, examples[:limit] if limit else examples


async def play_episode(agent: Agent, env_cls: type[Environment], example: Example, trial: int) -> Trajectory:
    """Play one (example, trial) episode on a fresh environment; never raises for a failing
    reset, model or tool (the trajectory gets status ``error``). Every executor plays an
    episode this way."""
    env = env_cls()
    try:
        env.reset(example)
    except Exception as exc:
        return Trajectory(
            example_id=example.id, trial=trial, env=env_cls.name, agent=agent.name,
            model=agent.model_spec, status="error",
            error=f"{type(exc).__name__} in reset: {exc}",
        )
    else:
        return await agent.arun(env, example, trial)
    finally:
        env.close()


async def play_all(
    agent: Agent,
    env_cls: type[Environment],
    jobs: list[tuple[Example, int]],
    concurrency: int,
    on_done: Callable[[Trajectory], None],
) -> None:
    """Play every (example, trial) job with at most ``concurrency`` episodes in flight;
    ``on_done`` receives each trajectory as soon as it finishes."""
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(example: Example, trial: int) -> None:
        async with semaphore:
            on_done(await play_episode(agent, env_cls, example, trial))

    try:
        await asyncio.gather(*(one(ex, trial) for ex, trial in jobs))
    finally:  # also on Ctrl-C: hosted models close their HTTP clients
        aclose = getattr(agent.model, "aclose", None)
        if aclose is not None:
            await aclose()


class WorkerDied(RuntimeError):
    """A worker process of ``--workers`` ended before playing its share of the episodes."""


def play_in_processes(
    agent: Agent,
    env_cls: type[Environment],
    jobs: list[tuple[Example, int]],
    concurrency: int,
    workers: int,
    on_done: Callable[[Trajectory], None],
) -> None:
    """Play the jobs in ``workers`` forked processes, each running :func:`play_all` on its
    share of the jobs with its share of ``concurrency`` (jobs are dealt in proportion to the
    slots); ``on_done`` is called in this process, in the order trajectories arrive, so this
    process stays the only writer of the run's files.

    One Python process tops out at a few hundred model calls a second against a fast server
    (each costs about 2.3 ms of CPU in the SDK, langchain and langgraph on a JMultiWOZ-TC
    turn; BENCHMARKS.md); one worker per core lifts that limit. The agent and its model are
    inherited through ``fork``, so agents, environments and providers registered by the
    caller's own code work unchanged; each worker opens its own HTTP connections on its own
    event loop. A per-process request rate (``--rps``) applies in each worker; the runner
    divides it between them.

    Ctrl-C is taken between two trajectories, never in the middle of ``on_done``; the
    workers are then terminated. A worker also ends when this process dies (Linux), so none
    is left holding the run directory.

    Raises:
        WorkerDied: when a worker dies (killed, out of memory) before playing its share;
            every trajectory it sent whole was passed to ``on_done`` (``--resume`` plays the
            rest).
        ValueError: on a platform without ``fork`` (Windows), or with ``workers`` above
            ``concurrency``.
        KeyboardInterrupt: on Ctrl-C.
    """
    import multiprocessing as mp
    import signal
    import threading
    from multiprocessing.connection import wait

    if "fork" not in mp.get_all_start_methods():
        raise ValueError("--workers above 1 needs the fork start method (Linux, macOS); use --workers 1")
    if not 1 <= workers <= concurrency:
        raise ValueError(f"--workers {workers} must be between 1 and --concurrency ({concurrency})")
    ctx = mp.get_context("fork")
    slots = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
    deal = [w for w in range(workers) for _ in range(slots[w])]  # one entry per slot
    shares: list[list[tuple[Example, int]]] = [[] for _ in range(workers)]
    for k, job in enumerate(jobs):
        shares[deal[k % len(deal)]].append(job)

    interrupted = threading.Event()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    if in_main_thread:
        signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    processes, readers = [], []
    try:
        for i, share in enumerate(shares):
            if not share:
                continue
            reader, writer = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_worker, args=(writer, [*readers, reader], os.getpid(), agent, env_cls, share, slots[i]),
                name=f"toolgym-worker-{i}",
            )
            process.start()
            writer.close()
            processes.append(process)
            readers.append(reader)
        while readers:
            if interrupted.is_set():
                raise KeyboardInterrupt
            for reader in wait(readers, timeout=0.2):
                try:
                    data = reader.recv_bytes()
                except (EOFError, OSError):  # the worker ended (a message cut short is dropped)
                    readers.remove(reader)
                    continue
                on_done(Trajectory.model_validate_json(data))
        if interrupted.is_set():
            raise KeyboardInterrupt
    except BaseException:  # Ctrl-C or a failing on_done: stop the workers
        for process in processes:
            process.terminate()
        raise
    finally:
        for process in processes:
            process.join()
        if in_main_thread:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    dead = [f"{p.name} (exit code {p.exitcode})" for p in processes if p.exitcode != 0]
    if dead:
        raise WorkerDied(f"worker process died: {', '.join(dead)}; finished episodes are saved, --resume plays the rest")


def _worker(
    writer: Any, inherited_readers: list[Any], parent: int, agent: Agent, env_cls: type[Environment],
    jobs: list[tuple[Example, int]], concurrency: int,
) -> None:
    """Body of a worker process: play ``jobs``, sending each trajectory as JSON."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it terminates us
    for reader in inherited_readers:  # only the parent reads: a write after its death fails
        reader.close()
    try:  # Linux: SIGTERM when the parent dies, whatever this process is waiting for
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed pipe ends it at its next write
        pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)
    asyncio.run(play_all(agent, env_cls, jobs, concurrency, lambda t: writer.send_bytes(record_line(t))))
    writer.close()


@EXECUTORS.register("local")
class LocalExecutor:
    """Episodes in this process (asyncio, :func:`play_all`) or, with ``workers`` above 1, in
    forked processes (:func:`play_in_processes`)."""

    name = "local"
    in_process = True

    def play(self, episodes: Episodes, on_done: Callable[[Trajectory], None]) -> None:
        """Play ``episodes``; see :class:`toolgym.executor.Executor`.

        Raises:
            WorkerDied / ValueError / KeyboardInterrupt: as :func:`play_in_processes`.
        """
        e = episodes
        if e.workers > 1:
            play_in_processes(e.agent, e.env_cls, e.jobs, e.concurrency, e.workers, on_done)
        else:
            asyncio.run(play_all(e.agent, e.env_cls, e.jobs, e.concurrency, on_done))


def _versions_of(*refs: ExtensionRef) -> dict[str, str | None]:
    found = _versions()
    for ref in refs:
        if ref.distribution:
            found[ref.distribution] = ref.version
    return found


def run(config: RunConfig, progress: bool = True) -> RunResult:
    """Run ``config``: write run.json, append each trajectory to trajectories.jsonl as it
    finishes, then grade everything into scores.jsonl and export (see :func:`grade`). With
    ``config.out`` of ``None`` nothing is written and the run is returned in memory.

    Raises:
        DatasetError: for an invalid dataset (before any model is called).
        RunDirError: when ``out`` already holds trajectories and ``resume`` is off.
        UnknownNameError / ExtensionError: for an environment, agent, grader or model that
            cannot be found.
    """
    for field_name in ("trials", "max_steps", "workers"):
        if getattr(config, field_name) < 1:
            raise ValueError(f"{field_name} must be at least 1, got {getattr(config, field_name)}")
    benchmark, env_ref = resolve_benchmark(config.env)
    env_cls = benchmark.environment
    agent_obj, agent_ref = resolve_agent(config.agent)
    agent_cls = agent_obj if isinstance(agent_obj, type) else type(agent_obj)
    if benchmark.max_trials is not None and config.trials > benchmark.max_trials:
        raise ValueError(f"{benchmark.name} allows at most {benchmark.max_trials} trial(s) per example, got --trials {config.trials}")
    dataset_path, examples = load_run_examples(benchmark, config.dataset, config.limit, config.env_options)
    unplayable = getattr(agent_cls, "unplayable", None)
    missing = unplayable(examples) if unplayable is not None else []
    if missing:
        where = dataset_path or "the dataset"
        raise DatasetError(
            f"{where}: the {agent_cls.name} agent cannot play {len(missing)} of {len(examples)} examples "
            f"(first: {missing[0]!r}): they name expected steps without expected_calls (the arguments) to replay"
        )
    from toolgym import forcing

    if config.protocol not in forcing.PROTOCOLS:
        raise ValueError(f"protocol {config.protocol!r}: expected one of {', '.join(forcing.PROTOCOLS)}")
    injection = forcing.Injection.parse(config.inject) if config.inject else None
    if injection is not None and config.protocol == "free-running":
        raise ValueError("--inject needs --protocol teacher-forced (or toolgym fork): a free-running episode has no "
                         "replayed step to put the fault in")
    if config.protocol == "fork" and not isinstance(agent_obj, forcing.ForkAgent):
        raise ValueError("protocol 'fork' is made by toolgym fork (toolgym.forks.fork), not by run")
    forced = config.protocol == "teacher-forced"
    if forced:
        pathless = [ex.id for ex in examples if not forcing.reference_calls(ex)]
        if pathless:
            raise DatasetError(
                f"{dataset_path or 'dataset'}: {len(pathless)} example(s) have no reference path to force (first: "
                f"{pathless[0]!r}): give expected_calls, or milestones whose calls name plain arguments")
        if injection is not None and (short := [ex.id for ex in examples if len(forcing.reference_calls(ex) or []) < injection.step]):
            print(f"note: --inject {injection}: {len(short)} example(s) have a reference path shorter than "
                  f"{injection.step} steps and are played free-running only (first: {short[0]!r})", file=sys.stderr)
    graders = make_graders(benchmark, config.graders, config.grader_settings, examples)
    chosen = {grader_name(g) for g, _ in graders}
    extra = [n for n in (["next_step"] if forced and injection is None else []) + (["recovery"] if injection else [])
             if n not in chosen]  # what a forced episode is graded by, whatever else was asked for
    graders += make_graders(benchmark, extra) if extra else []
    concurrency = config.concurrency if config.concurrency is not None else benchmark.default_concurrency
    out = Path(config.out) if config.out is not None else None
    done: set[tuple[str, int]] = set()
    errored: set[tuple[str, int]] = set()
    previous: list[Trajectory] = []
    previous_record: RunRecord | None = None
    changed: dict[str, list[Any]] = {}
    if out is not None and config.resume and (out / RUN_FILE_NAME).exists():
        previous_record = read_run(out)
        if (previous_record.protocol, previous_record.inject) != (config.protocol, config.inject):
            raise RunDirError(
                f"{out / RUN_FILE_NAME}: cannot resume a {previous_record.protocol} run"
                f"{f' (inject {previous_record.inject})' if previous_record.inject else ''} as a {config.protocol} one"
                f"{f' (inject {config.inject})' if config.inject else ''}")
        changed = {k: [before, now] for k, before, now in setting_differences(config, previous_record)}
        if changed and not config.force:
            raise RunDirError(resume_refusal(out, changed))
    if out is not None:
        if out.exists() and not out.is_dir():
            raise RunDirError(f"{out}: is a file, not a run directory; choose another --out (out= in Python)")
        traj_path = out / TRAJECTORIES_FILE
        if traj_path.exists() and traj_path.stat().st_size and not config.resume:
            raise RunDirError(f"{traj_path} already exists; continue it with --resume (resume=True in Python) or choose another --out")
        if config.resume:
            previous = latest_attempts(read_jsonl(traj_path, Trajectory, repair=True))
            errored = {t.key for t in previous if t.status == "error"}
            previous = [t for t in previous if t.key not in errored]  # played again; the new attempt counts
            done = {t.key for t in previous}
    jobs = [
        (ex, k) for ex in examples
        for k in (forcing.episode_numbers(ex, config.trials, injection) if forced else range(config.trials))
        if (ex.id, k) not in done
    ]
    error_limit = ErrorLimit.parse(config.max_errors, len(jobs), completed_before=len(previous))
    resumed: dict[str, Any] | None = None
    if out is not None and config.resume and previous_record is not None:
        rerun = sum(1 for ex, k in jobs if (ex.id, k) in errored)
        resumed = {"at": dt.datetime.now(dt.UTC).isoformat(), "reran_errors": rerun, "forced": changed}
        print(
            f"resuming {out}: {len(done)} finished episode(s) kept, {rerun} that ended in error played again, "
            f"{len(jobs) - rerun} not yet played",
            file=sys.stderr,
        )

    executor = make_executor(config.executor, config.executor_options)
    workers = max(1, min(config.workers, len(jobs), concurrency))
    if workers < config.workers and jobs:  # said once, so the recorded workers never surprise
        why = f"--concurrency {concurrency}" if concurrency <= len(jobs) else f"{len(jobs)} episode(s) to play"
        print(f"note: --workers {config.workers} lowered to {workers}: each worker needs an episode ({why})",
              file=sys.stderr)
    settings = config.settings
    if workers > 1 and settings.rps is not None and executor.in_process:  # the limit holds for the run, not per worker
        settings = dataclasses.replace(settings, rps=settings.rps / workers)
    model_ref: ExtensionRef | None = None
    model_part: Any = None  # what a remote executor builds the model from
    if isinstance(agent_obj, Agent):
        agent = agent_obj
        model_label = agent.model_spec
    else:
        model_label = None
        model: Any = None
        if agent_cls.needs_model:
            if not isinstance(config.model, str) and _is_chat_model(config.model):
                model, model_label = config.model, f"object:{type(config.model).__name__}"
                model_ref, model_part = _object_ref(type(config.model)), config.model
            else:
                model_label, model_ref = model_spec_ref(str(config.model))
                model_part = model_label
                model = agent_cls.make_model(model_label, settings) if jobs and executor.in_process else None
        agent = agent_cls(model=model, model_spec=model_label, max_steps=config.max_steps)
    if forced:
        if not executor.in_process:
            raise ValueError(f"--protocol teacher-forced plays in this process only (--executor local), not {executor.name}")
        agent = forcing.TeacherForced(agent, config.trials, injection)
    if out is not None:  # only now: a model refused while it was built (a server's probe) leaves nothing behind
        out.mkdir(parents=True, exist_ok=True)
        if dataset_path is None:  # examples given in memory: kept beside the run
            dataset_path = out / EXAMPLES_FILE
            write_examples(dataset_path, examples)
    record = new_record(
        benchmark, env_ref, graders, examples, dataset_path,
        agent=agent.describe(), agent_ref=agent_ref, model=model_label, model_ref=model_ref,
        model_settings=config.settings.record(), limit=config.limit, env_options=config.env_options,
        trials=config.trials, concurrency=concurrency, workers=workers, grader_settings=config.grader_settings,
    )
    record.resumes = [*(previous_record.resumes if previous_record else []), *([resumed] if resumed else [])]
    record.protocol, record.inject = config.protocol, config.inject
    if out is not None:
        write_run(out, record)

    finished: list[Trajectory] = list(previous)
    bar = None
    if progress and jobs:
        from tqdm import tqdm

        # no monitor thread: the process may fork its workers while the bar is shown
        tqdm.monitor_interval = 0
        bar = tqdm(total=len(jobs), desc=f"{benchmark.name}/{agent.name}", unit="episode", file=sys.stderr)
    writer = JsonlAppender(out / TRAJECTORIES_FILE) if out is not None else None
    try:
        def on_done(traj: Trajectory) -> None:
            if writer is not None:
                writer.write(traj)
            finished.append(traj)
            error_limit.count(traj)
            if len(finished) % 1024 == 0:  # finished trajectories live to the end: stop rescanning them
                gc.freeze()
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(traj.status)

        parts = PartSpecs(
            env=config.env if env_ref.source == "object" else env_ref.spec,
            agent=config.agent if agent_ref.source == "object" else agent_ref.spec,
            model=model_part, settings=config.settings, max_steps=config.max_steps,
        )
        with _frozen_gc():
            executor.play(Episodes(jobs, examples, concurrency, workers, agent, env_cls, parts), on_done)
        used = getattr(executor, "workers_used", None)  # a remote executor's own count (Ray: its actors)
        if isinstance(used, int) and used > 0:
            record.workers = used
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    by_id = {ex.id: ex for ex in examples}
    with _grading_gc():
        scores = grade_trajectories(by_id, finished, [g for g, _ in graders])
        return finish_run(out, benchmark, record, finished, scores, by_id)


def new_record(
    benchmark: Benchmark, env_ref: ExtensionRef, graders: list[tuple[Grader, ExtensionRef]],
    examples: list[Example], dataset_path: Path | None, *, agent: dict[str, Any],
    agent_ref: ExtensionRef | None = None, model: str | None = None, model_ref: ExtensionRef | None = None,
    model_settings: dict[str, Any] | None = None, limit: int | None = None,
    env_options: dict[str, Any] | None = None, trials: int = 1, concurrency: int = 1, workers: int = 1,
    grader_settings: dict[str, Any] | None = None,
) -> RunRecord:
    """The ``run.json`` record of a run starting now (``started_at`` set, ``finished_at`` not):
    what :func:`run` writes, and what ``toolgym serve`` writes for a served run.

    Args:
        benchmark / env_ref: The environment and how it was found (:func:`resolve_benchmark`).
        graders: From :func:`make_graders`.
        examples / dataset_path: From :func:`load_run_examples` (``dataset_path`` of ``None``:
            examples given in memory, recorded by the sha256 of their records).
        agent: The agent's settings, ``{"agent": name, ...}``.
        agent_ref / model_ref: How the agent and the model provider were found, if they were.
        Other arguments: recorded as given (see :class:`RunRecord`).
    """
    refs = [env_ref, *([agent_ref] if agent_ref else []), *(ref for _, ref in graders)]
    return RunRecord(
        env=benchmark.name,
        agent=agent,
        model=model,
        model_settings=model_settings or {},
        dataset=DatasetRef(
            path=str(dataset_path.resolve()) if dataset_path else None,
            sha256=sha256_file(dataset_path) if dataset_path else _examples_sha256(examples),
            n_examples=len(examples),
        ),
        limit=limit,
        env_options=env_options or {},
        trials=trials,
        concurrency=concurrency,
        workers=workers,
        graders=[grader_name(g) for g, _ in graders],
        grader_settings=grader_settings or {},
        measures={grader_name(g): measure_of(g) for g, _ in graders},
        extensions={
            "env": env_ref,
            **({"agent": agent_ref} if agent_ref else {}),
            **({"model": model_ref} if model_ref else {}),
            **{f"grader:{grader_name(g)}": ref for g, ref in graders},
        },
        versions=_versions_of(*refs),
        git_revision=_git_revision(),
        command=sys.argv,
        started_at=dt.datetime.now(dt.UTC).isoformat(),
    )


def finish_run(
    out: Path | None, benchmark: Benchmark, record: RunRecord, trajectories: list[Trajectory],
    scores: list[Score], examples: dict[str, Example],
) -> RunResult:
    """End a played and graded run: set ``finished_at``; with a directory, write ``run.json``
    and ``scores.jsonl`` (atomically) and run the benchmark's exporters. Used by :func:`run` and
    by ``toolgym serve`` when it stops.

    Args:
        out: The run directory, or ``None`` for a run kept in memory.
        trajectories: Every trajectory (already appended to ``trajectories.jsonl``).
        scores: Their scores (:func:`grade_trajectories`).
        examples: The run's examples by id.
    """
    record.finished_at = dt.datetime.now(dt.UTC).isoformat()
    result = Run(out, record, trajectories, scores, examples)
    if out is not None:
        write_run(out, record)
        write_jsonl_atomic(out / SCORES_FILE, scores)
        export(benchmark, result)
    return RunResult(result, summarize(benchmark.name, trajectories, scores, record.graders))


def _examples_sha256(examples: list[Example]) -> str:
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(ex.model_dump_json().encode() + b"\n")
    return digest.hexdigest()


def export(benchmark: Benchmark, graded: Run) -> list[Path]:
    """Run the benchmark's exporters on a graded run directory; returns the files written."""
    written: list[Path] = []
    for exporter in benchmark.exporters:
        written += exporter(graded)
    return written


def benchmark_of(record: RunRecord, directory: Path | None = None) -> Benchmark:
    """The benchmark a run was made with, found again from its recorded spec.

    Raises:
        RunDirError: when it can no longer be found (the spec, where it came from and why are
            named).
    """
    ref = record.extensions.get("env")
    spec = record.spec_of("env") or record.env
    kept = in_process(spec)
    if kept is not None:
        return as_benchmark(kept)
    try:
        return benchmark_entry(spec).obj
    except (UnknownNameError, ExtensionError, TypeError) as exc:
        where = f" ({ref.source}{f', {ref.distribution} {ref.version}' if ref and ref.distribution else ''})" if ref else ""
        why = NOT_IMPORTABLE_HINT if spec.startswith("<object ") else str(exc)
        raise RunDirError(
            f"{directory or 'run'}: run.json names environment {spec!r}{where}, which can no longer be "
            f"found: {why}"
        ) from None


def grade(
    directory: Path,
    graders: list[Any] | None = None,
    dataset: str | None = None,
    grader_settings: dict[str, Any] | None = None,
    env_options: dict[str, Any] | None = None,
) -> RunResult:
    """Re-grade a run directory offline from its stored trajectories; rewrites scores.jsonl
    and run.json's grader record, then runs the benchmark's exporters. Returns the graded run
    and its summary.

    Args:
        graders: Grader names or specs (default: those recorded in run.json).
        dataset: Override the dataset path recorded in run.json.
        grader_settings: Override the grader settings recorded in run.json (``None`` values
            keep the recorded ones); a ``judge_model`` given here also switches on the
            benchmark's judge graders when ``graders`` is not given.
        env_options: Environment options to add to (or replace in) those recorded in run.json
            (e.g. JMultiWOZ-TC's ``layout``); recorded.

    Raises:
        RunDirError / DatasetError: for a missing or invalid run.json, trajectories or dataset,
            or an environment or grader that can no longer be found.
    """
    directory = Path(directory)
    record = read_run(directory)
    if env_options:
        record.env_options = {**record.env_options, **env_options}
    benchmark = benchmark_of(record, directory)
    path = dataset or record.dataset.path
    if path is None:
        raise RunDirError(f"{directory}: run.json records no dataset file; pass --dataset")
    with _grading_gc():
        examples = {ex.id: ex for ex in load_examples(path, benchmark, record.env_options)}
        digest, change = dataset_change(path, record.dataset.sha256 if record.dataset.path else None)
        if change:
            warnings.warn(f"{directory}: {change}; the scores are graded against it as it is now, and run.json "
                          "records its new sha256", stacklevel=2)
        if digest is not None:  # run.json names the dataset these scores were graded against
            record.dataset = DatasetRef(path=str(Path(path).resolve()), sha256=digest, n_examples=record.dataset.n_examples)
        trajectories = _trajectories_to_grade(directory, record)
        return _grade_loaded(directory, record, benchmark, examples, trajectories, graders, grader_settings)


def _trajectories_to_grade(directory: Path, record: RunRecord) -> list[Trajectory]:
    """The trajectories of a run to grade again: refused when some were imported from a result
    file (``source_line``) that has moved or changed since, since their lines are what the
    graders compare (nothing is written then).

    Raises:
        RunDirError: naming the file, what happened to it and the command that imports it again.
    """
    try:
        return read_trajectories(directory, record=record, strict_lines=True)
    except ImportedLinesMissing as exc:
        raise RunDirError(
            f"{directory}: {exc.problem}; its lines are what the graders compare, so nothing was graded or written "
            f"(the scores stay as they were): import it again with `grade --env {record.env} --result FILE "
            f"--dataset {record.dataset.path or 'DATASET'} --out {directory}`"
        ) from None


@contextlib.contextmanager
def _frozen_gc() -> Iterator[None]:
    """Keep the cycle collector off what is loaded so far (the dataset: millions of objects
    for a large one, alive until the end): frozen, it is not rescanned while episodes
    allocate, and forked workers do not copy its pages (with two workers on JMultiWOZ-TC, CPU
    per turn 2.98 -> 2.52 ms; BENCHMARKS.md)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _grading_gc() -> Iterator[None]:
    """The cycle collector while loading, importing and grading a run: off. What these build
    (examples, trajectories, scores) lives to the end, so every collection would scan it in
    vain, and they make next to no cyclic garbage (an LLM judge's ``invoke`` leaves none:
    measured with ``ChatOpenAI`` over HTTP to a stand-in server on 127.0.0.1, 300 calls, and
    with langchain-core's fake chat model). What is loaded before is frozen; at the end a full
    collection over everything frozen scans nothing but counts the run as collected, so none
    starts over it right after. Grading 31,303 JMultiWOZ-TC turns: about 8 s of collection
    without the freeze, 0.2 s with young collections only, 0.5 s more without the last
    collection."""
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.collect()
        gc.unfreeze()
        if enabled:
            gc.enable()


def _grade_loaded(
    directory: Path, record: RunRecord, benchmark: Benchmark, examples: dict[str, Example],
    trajectories: list[Trajectory], graders: list[Any] | None, grader_settings: dict[str, Any] | None,
) -> RunResult:
    """:func:`grade` on what is already loaded: scores, run.json's grader record, exports."""
    overrides = {k: v for k, v in (grader_settings or {}).items() if v is not None}
    settings = {**record.grader_settings, **overrides}
    names: list[Any] | None = graders or [record.spec_of(f"grader:{n}") or n for n in record.graders] or None
    if not graders and names is not None and overrides.get("judge_model"):
        names = [*names, *(n for n in benchmark.judge_graders if n not in names)]
    try:
        made = make_graders(benchmark, names, settings)
    except (UnknownNameError, ExtensionError) as exc:
        if graders:  # named by the caller, not recorded by the run
            raise
        raise RunDirError(f"{directory}: a grader of this run can no longer be found: {exc}") from None
    scores = grade_trajectories(examples, trajectories, [g for g, _ in made])
    write_jsonl_atomic(directory / SCORES_FILE, scores)
    record.graders = [grader_name(g) for g, _ in made]
    record.grader_settings = settings  # what these scores were graded with (a later plain grade keeps it)
    record.measures = {**record.measures, **{grader_name(g): measure_of(g) for g, _ in made}}
    record.extensions = {**record.extensions, **{f"grader:{grader_name(g)}": ref for g, ref in made}}
    write_run(directory, record)
    graded = Run(directory, record, trajectories, scores, examples)
    export(benchmark, graded)
    return RunResult(graded, summarize(record.env, trajectories, scores, record.graders))


def import_results(
    env: Any, result: Path, dataset: str | None, out: Path, env_options: dict[str, Any] | None = None
) -> RunResult:
    """Read a result file written by another tool into a run directory, then grade and export
    it like a run of toolgym's own (``grade --env ENV --result FILE``).

    ``env_options`` go to the benchmark's dataset loader (``answers``: a file of expected
    answers kept apart from the dataset) and are recorded in ``run.json``.

    ``out`` gets ``run.json`` (agent ``imported``; ``result_file``: the file's path, size and
    SHA-256), ``trajectories.jsonl`` (rewritten; a trajectory that names its line,
    ``source_line``, is stored without the line's text), ``scores.jsonl`` and the benchmark's
    exports.

    ``out`` may be a new or plain folder (the result file's own, say), or the directory of an
    earlier import of the same result file (imported again: re-graded). It is refused when it
    holds a run of toolgym's own, or the import of another result file (its exports would be
    left beside the new ones, disagreeing with the trajectories); nothing is written then.

    Raises:
        ValueError: when the benchmark has no importer, or the importer refuses the result
            file (the file and line named, then the dataset: ``(dataset: PATH)``; nothing is
            written), e.g. one that shares no id with the dataset.
        RunDirError: when ``out`` holds a run of its own or another result file's import.
        DatasetError: for an invalid dataset.
    """
    benchmark, env_ref = resolve_benchmark(env)
    if benchmark.importer is None:
        raise ValueError(f"environment {benchmark.name!r} has no result-file format to import (--result)")
    out = Path(out)
    if (out / RUN_FILE_NAME).exists():
        before = read_run(out)
        if before.agent_name != IMPORTED_AGENT:
            raise RunDirError(
                f"{out} holds a run of its own; grade it with `grade {out}`, or give another --out for the "
                "imported result file"
            )
        earlier = before.agent.get("result_file") if isinstance(before.agent, dict) else None
        if earlier and not _same_file(Path(earlier), Path(result)):
            raise RunDirError(
                f"{out} holds the import of another result file ({earlier}); importing {result} there would mix "
                "its trajectories and exports with that file's, so nothing was written: give another --out (a "
                "directory is re-graded only from the file it was imported from)"
            )
    path = resolve_dataset(benchmark, dataset)
    with _grading_gc():
        examples = load_examples(path, benchmark, dict(env_options or {}))
        try:
            trajectories = benchmark.importer(Path(result), examples)
        except ValueError as exc:  # the importer names the result file; name the dataset too
            if len(exc.args) == 1 and isinstance(exc.args[0], str) and str(path) not in exc.args[0]:
                exc.args = (f"{exc.args[0]} (dataset: {path})",)
            raise
        out.mkdir(parents=True, exist_ok=True)
        record = RunRecord(
            env=benchmark.name,
            agent={"agent": IMPORTED_AGENT, "result_file": str(Path(result).resolve())},
            model=trajectories[0].model if trajectories else None,
            dataset=DatasetRef(path=str(path.resolve()), sha256=sha256_file(path), n_examples=len(examples)),
            graders=list(benchmark.graders),
            env_options=dict(env_options or {}),
            extensions={"env": env_ref},
            versions=_versions_of(env_ref),
            git_revision=_git_revision(),
            command=sys.argv,
            started_at=dt.datetime.now(dt.UTC).isoformat(),
            result_file=result_file_ref(Path(result)),
        )
        write_jsonl_atomic(out / TRAJECTORIES_FILE, trajectories)
        write_run(out, record)
        return _grade_loaded(out, record, benchmark, {ex.id: ex for ex in examples}, trajectories, None, None)


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the same resolved path when either is missing)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def grade_trajectories(
    examples: dict[str, Example], trajectories: Iterable[Trajectory], graders: list[Grader]
) -> list[Score]:
    """Scores of every trajectory by every applicable grader, in run order; ``error`` and
    ``aborted`` trajectories are not graded (:data:`toolgym.records.UNSCORED_STATUSES`: neither
    is a verdict on the agent), while an ``abandoned`` one (the agent walked away) is graded as
    it stands.

    A grader that raises, or returns something other than a :class:`Score` or ``None``, gives
    an unscored value (``None``) whose explanation names the exception, and a warning (one per
    grader: how many trajectories, the first exception) tells the user. A passing score keeps
    only the details its grader declares in ``kept_details``
    (:func:`toolgym.graders.lean_score`).

    A teacher-forced trajectory (``prefix_steps`` set) is graded only by the graders made for
    it (a class attribute ``forced = True``: ``next_step``, ``recovery``): the others would
    grade a reference prefix and one model turn as if they were a whole episode.

    Raises:
        RunDirError: if a trajectory names an example missing from the dataset.
    """
    scores = []
    lean = [(measure_of(g), kept_details(g)) for g in graders]
    broken: dict[str, list[str]] = {}  # grader → "example (trial): exception" of each failure
    for traj in sorted(trajectories, key=lambda t: t.key):
        if traj.status in UNSCORED_STATUSES:
            continue
        example = examples.get(traj.example_id)
        if example is None:
            raise RunDirError(f"trajectory for example {traj.example_id!r} has no example in the dataset")
        forced = traj.prefix_steps is not None
        for grader, (measure, keep) in zip(graders, lean, strict=True):
            if forced and not getattr(grader, "forced", False):
                continue
            try:
                score = grader.grade(example, traj)
                if score is not None and not isinstance(score, Score):
                    raise TypeError(f"grade() returned {type(score).__name__}, not a Score or None")
            except Exception as exc:  # a broken grader: an unscored value that says why, never a lost run
                broken.setdefault(grader_name(grader), []).append(
                    f"example {traj.example_id!r} trial {traj.trial}: {type(exc).__name__}: {exc}")
                score = Score(
                    example_id=traj.example_id, trial=traj.trial, grader=grader_name(grader), value=None,
                    explanation=f"grader raised {type(exc).__name__}: {exc}", details={"error": f"{type(exc).__name__}: {exc}"},
                )
            if score is not None:
                scores.append(lean_score(score, measure, keep))
    for name, failures in broken.items():
        warnings.warn(
            f"grader {name} raised on {len(failures)} trajectory(ies) (first: {failures[0]}); those scores are "
            "unscored (value null, the explanation names the exception), so its mean leaves them out",
            stacklevel=2,
        )
    return scores


def status_counts(trajectories: list[Trajectory]) -> Counter:
    """How many trajectories ended in each status."""
    return Counter(t.status for t in trajectories)


def check_resume(config: RunConfig) -> None:
    """Refuse to resume a run directory with a different environment, agent, model or dataset
    content than it was started with (the results would mix two runs).

    Raises:
        RunDirError: naming the fields that differ.
        DatasetError: for an invalid dataset (reported before any difference).
    """
    if config.out is None:
        return
    out = Path(config.out)
    if not config.resume or not (out / RUN_FILE_NAME).exists():
        return
    record = read_run(out)
    benchmark, _ = resolve_benchmark(config.env)
    agent_obj, _ = resolve_agent(config.agent)
    agent_cls = agent_obj if isinstance(agent_obj, type) else type(agent_obj)
    now: dict[str, Any] = {
        "env": benchmark.name,
        "agent": agent_cls.name,
        "model": (model_spec_ref(config.model)[0] if isinstance(config.model, str)
                  else f"object:{type(config.model).__name__}") if agent_cls.needs_model else None,
    }
    before: dict[str, Any] = {"env": record.env, "agent": record.agent_name, "model": record.model}
    if not isinstance(config.dataset, (list, tuple)):
        path = resolve_dataset(benchmark, None if config.dataset is None else str(config.dataset))
        now["dataset sha256"] = sha256_file(path)
        before["dataset sha256"] = record.dataset.sha256
    differ = [f"{k}: {before[k]!r} before, {now[k]!r} now" for k in now if before[k] != now[k]]
    if differ and before.get("dataset sha256") != now.get("dataset sha256"):
        load_examples(path, benchmark, config.env_options)  # an invalid file: report that first
    if differ:
        raise RunDirError(f"{out / RUN_FILE_NAME}: cannot resume a different run ({'; '.join(differ)})")
    changed = setting_differences(config, record)
    if changed and not config.force:
        raise RunDirError(resume_refusal(out, {k: [b, n] for k, b, n in changed}))


RESUME_SETTINGS = ("max_steps", "temperature", "seed", "max_tokens", "base_url")
"""Settings a resumed run must share with the run it continues (they change the results)."""


def setting_differences(config: RunConfig, record: RunRecord) -> list[tuple[str, Any, Any]]:
    """The :data:`RESUME_SETTINGS` that differ between ``config`` and a recorded run, as
    ``(setting, before, now)``. The base URL is not compared when either run started its own
    server (``--serve`` picks a free port)."""
    saved = record.model_settings
    now = config.settings.record()
    before = {"max_steps": record.agent.get("max_steps"), **{k: saved.get(k) for k in ("temperature", "seed", "max_tokens")}}
    current = {"max_steps": config.max_steps, **{k: now.get(k) for k in ("temperature", "seed", "max_tokens")}}
    extra_before, extra_now = saved.get("extra") or {}, now.get("extra") or {}
    if "serve" not in extra_before and "serve" not in extra_now:
        before["base_url"], current["base_url"] = extra_before.get("base_url"), extra_now.get("base_url")
    return [(k, before[k], current[k]) for k in RESUME_SETTINGS if k in before and before[k] != current[k]]


def resume_refusal(out: Path, differ: dict[str, list[Any]]) -> str:
    """The message refusing to resume ``out`` with changed settings."""
    listed = "; ".join(f"{k}: {b!r} before, {n!r} now" for k, (b, n) in differ.items())
    return (f"{out / RUN_FILE_NAME}: cannot resume with different settings ({listed}); use the run's settings, "
            "or add --force to continue anyway (recorded in run.json)")

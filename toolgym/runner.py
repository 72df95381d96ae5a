"""Running an agent over a dataset, grading stored trajectories, and summarising scores."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import gc
import os
import platform
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from toolgym.agents import Agent, get_agent
from toolgym.data import DatasetError, load_examples, resolve_dataset, sha256_file
from toolgym.environments import Environment, get_environment
from toolgym.graders import GRADERS, Grader, get_grader
from toolgym.providers import ModelSettings
from toolgym.records import Example, Score, Trajectory
from toolgym.runio import (
    RUN_FILE,
    SCORES_FILE,
    TRAJECTORIES_FILE,
    JsonlAppender,
    RunDirError,
    read_jsonl,
    read_run,
    read_trajectories,
    write_json_atomic,
    write_jsonl_atomic,
)
from toolgym.stats import Estimate, clustered_estimate


@dataclass
class RunConfig:
    """Everything that defines a run; stored in ``run.json``.

    Attributes:
        env: Environment name.
        agent: Agent architecture name.
        model: Model spec (``local``, ``openai:gpt-4o-mini``, ``scripted:PATH``, ...).
        dataset: Path or built-in dataset name (``None``: the environment's ``test`` set).
        out: Run directory.
        limit: Run only the first N examples.
        trials: Episodes per example (fresh environment each).
        max_steps: Model turns before ``step_limit``.
        concurrency: Episodes in flight at once (over all worker processes).
        workers: Processes playing episodes (see :func:`play_in_processes`); 1 plays them in
            this process.
        resume: Continue a run directory, skipping finished (example, trial) pairs.
        graders: Graders to run (default: the environment's own list).
        settings: Model settings (temperature, seed, ...).
        env_options: Environment-specific options (``sample``, ``shots``, ...), passed to
            ``Environment.load_dataset``.
        grader_settings: Grader settings by field name (``judge_model``, ``judge_cache``);
            recorded in run.json so that ``grade`` reuses them (see :func:`make_graders`).
    """

    env: str
    out: Path
    agent: str = "tool_calling"
    model: str = "local"
    dataset: str | None = None
    limit: int | None = None
    trials: int = 1
    max_steps: int = 40
    concurrency: int = 1
    workers: int = 1
    resume: bool = False
    graders: list[str] | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    env_options: dict[str, Any] = field(default_factory=dict)
    grader_settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SummaryRow:
    """One line of a summary table: a grader's estimate on one environment."""

    env: str
    grader: str
    estimate: Estimate


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
    for dist in ("toolgym", "langgraph", "langchain-core", "pydantic", "llama-cpp-python"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def load_run_examples(
    env_cls: type[Environment], dataset: str | None, limit: int | None, options: dict[str, Any] | None = None
) -> tuple[Path, list[Example]]:
    """Resolve and load a run's examples (validated before any model is called).

    Raises:
        DatasetError: for an invalid record, or an example whose expected steps name tools the
            environment does not have (a dataset made for another environment).
    """
    path = resolve_dataset(env_cls.name, dataset)
    examples = load_examples(path, env_cls, options)
    check_tools(env_cls, examples, path)
    return path, examples[:limit] if limit else examples


def check_tools(env_cls: type[Environment], examples: list[Example], path: Path) -> None:
    """Refuse examples whose ``expected_steps`` name tools ``env_cls`` does not have.

    Raises:
        DatasetError: naming the file, the first such example and tool, and how many examples
            are affected.
    """
    try:
        tools = set(env_cls().tool_functions())
    except Exception:  # an environment whose tools depend on the example: checked per episode
        return
    bad = [(ex.id, name) for ex in examples for name in ex.expected_steps if name not in tools]
    if bad:
        n_examples = len({ex_id for ex_id, _ in bad})
        ex_id, name = bad[0]
        raise DatasetError(
            f"{path}: example {ex_id!r} expects tool {name!r}, which {env_cls.name} does not have "
            f"({n_examples} example(s) affected; is this a dataset of another environment?)"
        )


def make_graders(
    env_cls: type[Environment], names: list[str] | None, settings: dict[str, Any] | None = None
) -> list[Grader]:
    """Instantiate the requested graders.

    Args:
        env_cls: The environment; without ``names`` its ``graders`` are used, plus its judge
            graders (:func:`toolgym.graders.judge.judge_graders_for`) when ``settings`` name a
            ``judge_model``.
        names: Grader names, or ``None`` for the defaults.
        settings: Grader settings by field name; each grader (a dataclass) receives only the
            settings it declares as fields, so one ``--judge-model`` reaches every judge.
            ``None`` values are dropped (the grader's default applies).

    Raises:
        UnknownNameError: for an unknown grader.
        ValueError: when a grader rejects its settings (a judge without a judge model).
    """
    from toolgym.graders.judge import judge_graders_for

    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if names is None:
        names = list(env_cls.graders)
        if settings.get("judge_model"):
            names += [n for n in judge_graders_for(env_cls) if n not in names]
    graders = []
    for name in names:
        accepted = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls := GRADERS.get(name)) else set()
        graders.append(get_grader(name, **{k: v for k, v in settings.items() if k in accepted}))
    return graders


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
            env = env_cls()
            try:
                env.reset(example)
            except Exception as exc:
                traj = Trajectory(
                    example_id=example.id, trial=trial, env=env_cls.name, agent=agent.name,
                    model=agent.model_spec, status="error",
                    error=f"{type(exc).__name__} in reset: {exc}",
                )
            else:
                traj = await agent.arun(env, example, trial)
            finally:
                env.close()
            on_done(traj)

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
    asyncio.run(play_all(agent, env_cls, jobs, concurrency, lambda t: writer.send_bytes(t.model_dump_json().encode())))
    writer.close()


def run(config: RunConfig, progress: bool = True) -> list[SummaryRow]:
    """Run ``config``: write run.json, append each trajectory to trajectories.jsonl as it
    finishes (and to the environment's own files, see ``Environment.run_outputs``), then grade
    everything into scores.jsonl.

    Raises:
        DatasetError: for an invalid dataset (before any model is called).
        RunDirError: when ``out`` already holds trajectories and ``resume`` is off.
        UnknownNameError: for an unknown environment, agent, grader or provider.
    """
    env_cls = get_environment(config.env)
    agent_cls = get_agent(config.agent)
    dataset_path, examples = load_run_examples(env_cls, config.dataset, config.limit, config.env_options)
    graders = make_graders(env_cls, config.graders, config.grader_settings)
    out = Path(config.out)
    traj_path = out / TRAJECTORIES_FILE
    if traj_path.exists() and traj_path.stat().st_size and not config.resume:
        raise RunDirError(f"{traj_path} already exists; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    done = {t.key for t in read_jsonl(traj_path, Trajectory, repair=True)} if config.resume else set()
    label = config.model if agent_cls.needs_model else config.agent
    outputs = env_cls.run_outputs(out, examples, label, config.resume, config.trials)
    if outputs is not None:  # the environment's own files (e.g. a published result format)
        done |= {(i, k) for i in outputs.done_ids() for k in range(config.trials)}
    jobs = [(ex, k) for ex in examples for k in range(config.trials) if (ex.id, k) not in done]

    workers = max(1, min(config.workers, len(jobs), config.concurrency))
    settings = config.settings
    if workers > 1 and settings.rps is not None:  # the limit holds for the run, not per worker
        settings = dataclasses.replace(settings, rps=settings.rps / workers)
    model = agent_cls.make_model(config.model, settings) if agent_cls.needs_model and jobs else None
    agent = agent_cls(model=model, model_spec=config.model if agent_cls.needs_model else None, max_steps=config.max_steps)
    started = dt.datetime.now(dt.UTC).isoformat()
    record = {
        "env": config.env,
        "agent": agent.describe(),
        "model": config.model if agent_cls.needs_model else None,
        "model_settings": config.settings.record(),
        "dataset": {"path": str(dataset_path.resolve()), "sha256": sha256_file(dataset_path), "n_examples": len(examples)},
        "limit": config.limit,
        "env_options": config.env_options,
        "trials": config.trials,
        "concurrency": config.concurrency,
        "workers": workers,
        "graders": [g.name for g in graders],
        "grader_settings": config.grader_settings,
        "versions": _versions(),
        "git_revision": _git_revision(),
        "command": sys.argv,
        "started_at": started,
    }
    write_json_atomic(out / RUN_FILE, record)

    bar = None
    if progress and jobs:
        from tqdm import tqdm

        # no monitor thread: the process may fork its workers while the bar is shown
        tqdm.monitor_interval = 0
        bar = tqdm(total=len(jobs), desc=f"{config.env}/{config.agent}", unit="episode", file=sys.stderr)
    with JsonlAppender(traj_path) as writer:
        def on_done(traj: Trajectory) -> None:
            if outputs is not None:
                outputs.write(traj)
            writer.write(traj)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(traj.status)

        # Everything loaded so far (the dataset: millions of objects for a large one) lives
        # until the run ends; frozen, the cycle collector stops rescanning it while episodes
        # allocate, and forked workers stop copying its pages when it would (with two workers
        # on JMultiWOZ-TC, CPU per turn 2.98 -> 2.52 ms; BENCHMARKS.md).
        gc.freeze()
        try:
            if workers > 1:
                play_in_processes(agent, env_cls, jobs, config.concurrency, workers, on_done)
            else:
                asyncio.run(play_all(agent, env_cls, jobs, config.concurrency, on_done))
        finally:
            gc.unfreeze()
            if bar is not None:
                bar.close()
            if outputs is not None:
                outputs.close()
    if outputs is not None:
        outputs.finish()
    record["finished_at"] = dt.datetime.now(dt.UTC).isoformat()
    write_json_atomic(out / RUN_FILE, record)
    return grade(out, graders=config.graders)


def grade(
    directory: Path,
    graders: list[str] | None = None,
    dataset: str | None = None,
    grader_settings: dict[str, Any] | None = None,
) -> list[SummaryRow]:
    """Re-grade a run directory offline from its stored trajectories; rewrites scores.jsonl.

    Args:
        graders: Grader names (default: those recorded in run.json).
        dataset: Override the dataset path recorded in run.json.
        grader_settings: Override the grader settings recorded in run.json (``None`` values
            keep the recorded ones); a ``judge_model`` given here also switches on the
            environment's judge graders when ``graders`` is not given.

    Raises:
        RunDirError / DatasetError: for a missing or invalid run.json, trajectories or dataset.
    """
    directory = Path(directory)
    info = read_run(directory)
    env_cls = get_environment(info["env"])
    path = dataset or info["dataset"]["path"]
    examples = {ex.id: ex for ex in load_examples(path, env_cls, info.get("env_options"))}
    overrides = {k: v for k, v in (grader_settings or {}).items() if v is not None}
    settings = {**info.get("grader_settings", {}), **overrides}
    names = graders or info.get("graders")
    if not graders and names is not None and overrides.get("judge_model"):
        from toolgym.graders.judge import judge_graders_for

        names = [*names, *(n for n in judge_graders_for(env_cls) if n not in names)]
    grader_objs = make_graders(env_cls, names, settings)
    trajectories = read_trajectories(directory)
    scores = grade_trajectories(examples, trajectories, grader_objs)
    write_jsonl_atomic(directory / SCORES_FILE, scores)
    return summarize(info["env"], trajectories, scores, [g.name for g in grader_objs])


def grade_trajectories(
    examples: dict[str, Example], trajectories: Iterable[Trajectory], graders: list[Grader]
) -> list[Score]:
    """Scores of every non-error trajectory by every applicable grader, in run order.

    Raises:
        RunDirError: if a trajectory names an example missing from the dataset.
    """
    scores = []
    for traj in sorted(trajectories, key=lambda t: t.key):
        if traj.status == "error":
            continue
        example = examples.get(traj.example_id)
        if example is None:
            raise RunDirError(f"trajectory for example {traj.example_id!r} has no example in the dataset")
        for grader in graders:
            score = grader.grade(example, traj)
            if score is not None:
                scores.append(score)
    return scores


def summarize(env: str, trajectories: list[Trajectory], scores: list[Score], graders: list[str]) -> list[SummaryRow]:
    """Mean ± standard error per grader; error trajectories counted apart (``n_errors``).

    With several trials per example the standard error is clustered by example
    (:func:`toolgym.stats.clustered_estimate`); with one trial it is the plain estimate.
    """
    n_errors = sum(t.status == "error" for t in trajectories)
    by_grader: dict[str, list[Score]] = defaultdict(list)
    for s in scores:
        by_grader[s.grader].append(s)
    rows = []
    for g in graders:
        found = by_grader.get(g, [])
        rows.append(
            SummaryRow(env, g, clustered_estimate([s.value for s in found], [s.example_id for s in found], n_errors))
        )
    return rows


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
    out = Path(config.out)
    if not config.resume or not (out / RUN_FILE).exists():
        return
    info = read_run(out)
    env_cls = get_environment(config.env)
    path = resolve_dataset(env_cls.name, config.dataset)
    now = {
        "env": config.env,
        "agent": config.agent,
        "model": config.model if get_agent(config.agent).needs_model else None,
        "dataset sha256": sha256_file(path),
    }
    before = {
        "env": info.get("env"),
        "agent": (info.get("agent") or {}).get("agent"),
        "model": info.get("model"),
        "dataset sha256": (info.get("dataset") or {}).get("sha256"),
    }
    differ = [f"{k}: {before[k]!r} before, {now[k]!r} now" for k in now if before[k] != now[k]]
    if differ and before["dataset sha256"] != now["dataset sha256"]:
        load_examples(path, env_cls, config.env_options)  # an invalid file: report that first
    if differ:
        raise RunDirError(f"{out / RUN_FILE}: cannot resume a different run ({'; '.join(differ)})")

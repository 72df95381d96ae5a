"""Running an agent over a dataset, grading stored trajectories, and summarising scores."""

from __future__ import annotations

import asyncio
import datetime as dt
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
from toolgym.data import load_examples, resolve_dataset, sha256_file
from toolgym.environments import Environment, get_environment
from toolgym.graders import Grader, get_grader
from toolgym.providers import ModelSettings, build_model
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
from toolgym.stats import Estimate, estimate


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
        concurrency: Episodes in flight at once.
        resume: Continue a run directory, skipping finished (example, trial) pairs.
        graders: Graders to run (default: the environment's own list).
        settings: Model settings (temperature, seed, ...).
        env_options: Environment-specific options (``sample``, ``shots``, ...), passed to
            ``Environment.load_dataset``.
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
    resume: bool = False
    graders: list[str] | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    env_options: dict[str, Any] = field(default_factory=dict)


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
    """Resolve and load a run's examples (validated before any model is called)."""
    path = resolve_dataset(env_cls.name, dataset)
    examples = load_examples(path, env_cls, options)
    return path, examples[:limit] if limit else examples


def make_graders(env_cls: type[Environment], names: list[str] | None) -> list[Grader]:
    """Instantiate the requested graders (default: the environment's list)."""
    return [get_grader(name) for name in (names or list(env_cls.graders))]


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

    await asyncio.gather(*(one(ex, trial) for ex, trial in jobs))


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
    graders = make_graders(env_cls, config.graders)
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

    model = build_model(config.model, config.settings) if agent_cls.needs_model and jobs else None
    agent = agent_cls(model=model, model_spec=config.model if agent_cls.needs_model else None, max_steps=config.max_steps)
    started = dt.datetime.now(dt.timezone.utc).isoformat()
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
        "graders": [g.name for g in graders],
        "versions": _versions(),
        "git_revision": _git_revision(),
        "command": sys.argv,
        "started_at": started,
    }
    write_json_atomic(out / RUN_FILE, record)

    bar = None
    if progress and jobs:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=f"{config.env}/{config.agent}", unit="episode", file=sys.stderr)
    with JsonlAppender(traj_path) as writer:
        def on_done(traj: Trajectory) -> None:
            if outputs is not None:
                outputs.write(traj)
            writer.write(traj)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(traj.status)

        try:
            asyncio.run(play_all(agent, env_cls, jobs, config.concurrency, on_done))
        finally:
            if bar is not None:
                bar.close()
            if outputs is not None:
                outputs.close()
    if outputs is not None:
        outputs.finish()
    record["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    write_json_atomic(out / RUN_FILE, record)
    return grade(out, graders=config.graders)


def grade(directory: Path, graders: list[str] | None = None, dataset: str | None = None) -> list[SummaryRow]:
    """Re-grade a run directory offline from its stored trajectories; rewrites scores.jsonl.

    Args:
        graders: Grader names (default: those recorded in run.json).
        dataset: Override the dataset path recorded in run.json.

    Raises:
        RunDirError / DatasetError: for a missing or invalid run.json, trajectories or dataset.
    """
    directory = Path(directory)
    info = read_run(directory)
    env_cls = get_environment(info["env"])
    path = dataset or info["dataset"]["path"]
    examples = {ex.id: ex for ex in load_examples(path, env_cls, info.get("env_options"))}
    grader_objs = make_graders(env_cls, graders or info.get("graders"))
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
    """Mean ± standard error per grader; error trajectories counted apart (``n_errors``)."""
    n_errors = sum(t.status == "error" for t in trajectories)
    by_grader: dict[str, list[float | None]] = defaultdict(list)
    for s in scores:
        by_grader[s.grader].append(s.value)
    return [SummaryRow(env, g, estimate(by_grader.get(g, []), n_errors=n_errors)) for g in graders]


def status_counts(trajectories: list[Trajectory]) -> Counter:
    """How many trajectories ended in each status."""
    return Counter(t.status for t in trajectories)

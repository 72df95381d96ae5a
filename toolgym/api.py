"""``toolgym.evaluate``, ``toolgym.aevaluate`` and ``toolgym.load_run``: the Python entry
points; the command line is a thin layer over them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.data import DatasetError, dataset_change, load_examples
from toolgym.providers import ModelSettings
from toolgym.records import Example
from toolgym.registry import ExtensionError, UnknownNameError
from toolgym.runio import Run, RunDirError, RunRecord, read_run, read_scores, read_trajectories
from toolgym.runner import RunConfig, RunResult, benchmark_of, check_resume, run

__all__ = ["EvalResult", "aevaluate", "evaluate", "load_run"]

EvalResult = RunResult
"""What :func:`evaluate` returns: ``.trajectories``, ``.scores``, ``.summary`` (mean ±
standard error per grader), ``.record`` (``run.json``) and ``.run`` (all of it as a
:class:`~toolgym.Run`)."""


def evaluate(
    env: Any,
    *,
    agent: Any = "tool_calling",
    model: Any = "local",
    dataset: str | Path | Sequence[Example | dict[str, Any]] | None = None,
    graders: Sequence[Any] | None = None,
    trials: int = 1,
    max_steps: int = 40,
    max_repeats: int | None = None,
    concurrency: int | None = None,
    out: str | Path | None = None,
    limit: int | None = None,
    resume: bool = False,
    settings: ModelSettings | None = None,
    env_options: dict[str, Any] | None = None,
    grader_settings: dict[str, Any] | None = None,
    workers: int = 1,
    progress: bool = False,
    executor: Any = "local",
    executor_options: dict[str, Any] | None = None,
    protocol: str = "free-running",
    inject: str | None = None,
    user_model: Any = None,
) -> EvalResult:
    """Run an agent over a dataset, grade every trajectory, and return everything in memory.

    Called where an event loop is running in the calling thread (a Jupyter notebook, an
    async application), the run is played in a worker thread with its own event loop and
    this call blocks until it ends; in async code prefer ``await`` :func:`aevaluate`, which
    leaves the loop free.

    Args:
        env: An environment name (``"typewriter_1"``), a ``module.path:Name`` or
            ``file.py:Name`` spec, an :class:`~toolgym.Environment` subclass (one defined in
            the calling script works) or a :class:`~toolgym.Benchmark`.
        agent: An agent name or spec, an :class:`~toolgym.Agent` subclass or instance, or a
            langgraph graph factory ``factory(model, tools, instructions) -> compiled graph``
            (for example a wrapper of ``langgraph.prebuilt.create_react_agent``).
        model: A model spec (``"local"``, ``"openai:gpt-4o-mini"``, ``"scripted:FILE"``) or any
            langchain-core ``BaseChatModel`` object (a ``ChatOpenAI``, a fake).
        dataset: A dataset path, a built-in dataset name (``None``: the ``test`` set), or a
            list of :class:`~toolgym.Example` objects or dicts with the same fields.
        graders: Grader names, specs, classes or instances (default: the benchmark's).
        trials: Episodes per example, each on a fresh environment.
        max_steps: Model turns per episode before status ``step_limit``.
        max_repeats: The repeat guard: identical consecutive tool calls before status
            ``repeat_limit`` (at least 2); ``None`` (the default): off.
        concurrency: Episodes in flight (default: the benchmark's, 1 for most).
        out: A run directory to write (``run.json``, ``trajectories.jsonl``, ``scores.jsonl``,
            the same files as ``toolgym run``), or ``None`` to write nothing.
        limit: Only the first N examples.
        resume: Continue ``out``, skipping finished (example, trial) pairs.
        settings: Model settings (temperature, seed, max tokens, retries, rate limit).
        env_options: Options of the benchmark's dataset loader (``sample``, ``shots``).
        grader_settings: Grader settings by field name (``judge_model``, ``judge_cache``).
        workers: Processes playing episodes (``fork``; see ``toolgym run --workers``).
        progress: Show a progress bar on standard error.
        executor: Where episodes are played: ``"local"`` or ``"ray"`` (a Ray cluster; the
            ``toolgym[ray]`` extra), or an executor spec (see :mod:`toolgym.executor`).
        executor_options: Keyword arguments of the executor, e.g. ``{"address": "auto"}``
            for ``ray``.
        protocol: ``"free-running"`` (default) or ``"teacher-forced"``: besides each
            free-running episode, one episode per step ``k`` of each example's reference path
            (the reference steps before ``k`` replayed, then one model turn), graded by
            ``next_step`` (see :mod:`toolgym.forcing`).
        inject: A fault ``"KIND@K"`` (``tool_error``, ``wrong_value``, ``empty``) injected at
            tool step ``K`` of every teacher-forced episode, graded by ``recovery``.
        user_model: The model (a spec or a chat model) that plays the simulated user of
            examples with ``user`` (docs/multi-turn.md); ``None``: none (such a dataset is
            refused). Examples with scripted ``turns`` need none.

    Returns:
        An :data:`EvalResult`.

    Raises:
        DatasetError: for an invalid dataset (file and line, or list index, named), before any
            model is called.
        RunDirError: when ``out`` already holds trajectories and ``resume`` is off.
        UnknownNameError / ExtensionError: for a name or spec that cannot be found.
        TypeError: for an object of the wrong kind.
    """
    config = RunConfig(
        env=env, out=Path(out) if out is not None else None, agent=agent, model=model, dataset=dataset,
        limit=limit, trials=trials, max_steps=max_steps, max_repeats=max_repeats, concurrency=concurrency, workers=workers,
        resume=resume, graders=list(graders) if graders is not None else None,
        settings=settings or ModelSettings(), env_options=dict(env_options or {}),
        grader_settings=dict(grader_settings or {}), executor=executor,
        executor_options=dict(executor_options or {}), protocol=protocol, inject=inject, user_model=user_model,
    )
    check_resume(config)
    if _loop_running():
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="toolgym-evaluate") as pool:
            return pool.submit(run, config, progress).result()
    return run(config, progress=progress)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def aevaluate(env: Any, **options: Any) -> EvalResult:
    """:func:`evaluate` for async code: ``result = await toolgym.aevaluate(env, model=...,
    dataset=...)``, with the same arguments, result and errors. The run is played in a worker
    thread (with its own event loop), so the caller's loop stays free meanwhile.

    Cancelling the awaiting task does not stop the run: the worker thread finishes it (its
    run directory, with ``out=``, is complete and can be resumed from).

    Raises:
        As :func:`evaluate`.
    """
    return await asyncio.to_thread(evaluate, env, **options)


def load_examples_of(
    directory: str | Path, record: RunRecord, dataset: str | Path | None = None, stacklevel: int = 2
) -> tuple[dict[str, Example] | None, str | None]:
    """The examples of a run (the dataset recorded in ``run.json``, or ``dataset``), by id.

    Returns:
        tuple: ``(examples, None)``, or ``(None, why)`` when the dataset cannot be read (moved,
        or its environment no longer installed; a warning naming the run directory says so).
        A dataset file whose bytes differ from the SHA-256 in ``run.json`` is read, with a
        warning that the scores were graded against its earlier content.
    """
    path = dataset or record.dataset.path
    try:
        if not path:
            raise DatasetError("run.json records no dataset file")
        try:
            benchmark = benchmark_of(record, Path(directory))
        except RunDirError:  # an environment this installation lacks: read generic formats
            benchmark = None
        examples = {ex.id: ex for ex in load_examples(path, benchmark, record.env_options)}
        change = dataset_change(path, record.dataset.sha256)[1] if record.dataset.path else None
        if change:
            warnings.warn(f"{directory}: {change}; its scores were graded against the earlier content (grade the "
                          "run again to grade against this one)", stacklevel=stacklevel)
        return examples, None
    except (DatasetError, OSError, ValueError, UnknownNameError, ExtensionError) as exc:
        problem = f"dataset {path} not read ({type(exc).__name__}: {exc})"
        warnings.warn(f"{directory}: {problem}; expected calls come from the scores only", stacklevel=stacklevel)
        return None, problem


def load_run(directory: str | Path, dataset: str | Path | None = None, with_examples: bool = True) -> Run:
    """Read a run directory back as a typed :class:`~toolgym.Run`.

    The dataset recorded in ``run.json`` is read too (expected calls, example inputs); when it
    cannot be read (moved, or its environment no longer installed), ``examples`` is ``None``,
    ``problem`` says why and a warning is issued; the views go on without it. Scores whose
    trajectory is not in ``trajectories.jsonl`` (its line torn off by a killed run) are left
    out, with a warning.

    Args:
        directory: The run directory.
        dataset: A dataset path overriding the one in ``run.json``.
        with_examples: Read the dataset at all.

    Raises:
        RunDirError: if ``run.json`` is missing, invalid or of a newer schema, or a trajectory
            or score line is invalid (file and line named).
    """
    directory = Path(directory)
    record = read_run(directory)
    trajectories = read_trajectories(directory, record=record)
    scores = read_scores(directory)
    keys = {t.key for t in trajectories}
    orphans = [s for s in scores if (s.example_id, s.trial) not in keys]
    if orphans:  # their trajectory line was torn off or removed: no view counts a score it cannot show
        first = orphans[0]
        warnings.warn(f"{directory}: {len(orphans)} score(s) have no trajectory in trajectories.jsonl (first: example "
                      f"{first.example_id!r} trial {first.trial}); left out (grade the run again to rewrite them)",
                      stacklevel=2)
        scores = [s for s in scores if (s.example_id, s.trial) in keys]
    result = Run(directory, record, trajectories, scores)
    if not with_examples:
        return result
    result.examples, result.problem = load_examples_of(directory, record, dataset, stacklevel=3)
    return result

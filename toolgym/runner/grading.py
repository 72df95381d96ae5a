"""Grading stored trajectories: every applicable grader over every trajectory, and a run directory graded again offline."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolgym.benchmark import Benchmark
from toolgym.data import (
    dataset_change,
    load_examples,
)
from toolgym.graders import Grader, grader_name, kept_details, lean_score, measure_of
from toolgym.records import UNSCORED_STATUSES, Example, Score, Trajectory
from toolgym.registry import ExtensionError, UnknownNameError
from toolgym.runio import (
    SCORES_FILE,
    DatasetRef,
    ImportedLinesMissing,
    Run,
    RunDirError,
    RunRecord,
    locked_run_dir,
    read_run,
    read_trajectories,
    write_jsonl_atomic,
    write_run,
)
from toolgym.runner.config import RunResult
from toolgym.runner.parts import benchmark_of, make_graders
from toolgym.runner.record import export
from toolgym.stats import summarize


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

    The directory is locked while it is graded (:func:`toolgym.runio.locked_run_dir`), as a
    run locks it while it plays: a run, a server or another ``grade`` still writing it is
    refused, never raced (two writers of ``scores.jsonl`` tore its lines or lost scores).

    Raises:
        RunDirError / DatasetError: for a missing or invalid run.json, trajectories or dataset,
            or an environment or grader that can no longer be found; a directory that another
            process is writing (``DIR is being written by another run (pid N)``).
    """
    directory = Path(directory)
    read_run(directory)  # a missing or invalid run directory is named before any lock file is made
    with locked_run_dir(directory):
        return _grade_locked(directory, graders, dataset, grader_settings, env_options)


def _grade_locked(
    directory: Path, graders: list[Any] | None, dataset: str | None, grader_settings: dict[str, Any] | None,
    env_options: dict[str, Any] | None,
) -> RunResult:
    record = read_run(directory)  # read again under the lock: the writer may have finished it since
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

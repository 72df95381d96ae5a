"""Importing a result file written by another tool into a run directory, graded like a run of toolgym's own."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

from toolgym.data import (
    load_examples,
    resolve_dataset,
    sha256_file,
)
from toolgym.runio import (
    IMPORTED_AGENT,
    TRAJECTORIES_FILE,
    DatasetRef,
    RunDirError,
    RunRecord,
    locked_run_dir,
    read_run,
    result_file_ref,
    write_jsonl_atomic,
    write_run,
)
from toolgym.runio import (
    RUN_FILE as RUN_FILE_NAME,
)
from toolgym.runner.config import RunResult
from toolgym.runner.grading import _grade_loaded, _grading_gc
from toolgym.runner.parts import resolve_benchmark
from toolgym.runner.record import _git_revision, _versions_of


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
        with locked_run_dir(out):  # never beside another writer of the directory
            return _write_import(out, benchmark, env_ref, Path(result), path, examples, trajectories, env_options)


def _write_import(
    out: Path, benchmark: Any, env_ref: Any, result: Path, path: Path, examples: list[Any], trajectories: list[Any],
    env_options: dict[str, Any] | None,
) -> RunResult:
    """Write an import's run directory and grade it (under its lock, see :func:`import_results`)."""
    record = RunRecord(
        env=benchmark.name,
        agent={"agent": IMPORTED_AGENT, "result_file": str(result.resolve())},
        model=trajectories[0].model if trajectories else None,
        dataset=DatasetRef(path=str(path.resolve()), sha256=sha256_file(path), n_examples=len(examples)),
        graders=list(benchmark.graders),
        env_options=dict(env_options or {}),
        extensions={"env": env_ref},
        versions=_versions_of(env_ref),
        git_revision=_git_revision(),
        command=sys.argv,
        started_at=dt.datetime.now(dt.UTC).isoformat(),
        result_file=result_file_ref(result),
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

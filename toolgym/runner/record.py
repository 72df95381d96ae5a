"""The ``run.json`` record of a run: made when it starts (:func:`new_record`), completed when it ends (:func:`finish_run`), and the benchmark's exporters run on it."""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from toolgym.benchmark import Benchmark
from toolgym.data import (
    sha256_file,
)
from toolgym.graders import Grader, grader_name, measure_of
from toolgym.records import Example, Score, Trajectory
from toolgym.runio import (
    SCORES_FILE,
    DatasetRef,
    ExtensionRef,
    Run,
    RunRecord,
    write_jsonl_atomic,
    write_run,
)
from toolgym.runner.config import RunResult
from toolgym.stats import summarize


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


def _versions_of(*refs: ExtensionRef) -> dict[str, str | None]:
    found = _versions()
    for ref in refs:
        if ref.distribution:
            found[ref.distribution] = ref.version
    return found



def _described(benchmark: Benchmark, examples: list[Example]) -> dict[str, Any] | None:
    """The system message and tools an episode of ``benchmark`` starts from, read from an
    environment reset on the first example (``RunRecord.described``); ``None`` when that
    cannot be done (no example, a reset that fails: the episodes will say why)."""
    from toolgym.openai_format import prompt_messages, tool_schemas

    if not examples:
        return None
    env = benchmark.environment()
    try:
        env.reset(examples[0])
        prompt = prompt_messages(env, examples[0])
        system = next((m["content"] for m in prompt if m["role"] == "system"), None)
        return {"system": system, "tools": tool_schemas(env)}
    except Exception:  # noqa: BLE001 - a failing reset is the episode's to record, not the record's
        return None
    finally:
        env.close()

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
    described = _described(benchmark, examples) if env_ref.spec.startswith("<object ") else None
    return RunRecord(
        described=described,
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

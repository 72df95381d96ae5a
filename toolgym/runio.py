"""Run directories: ``run.json``, ``trajectories.jsonl`` (appended, flushed per line) and
``scores.jsonl``; reading them back tolerates a torn last line left by a killed run."""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from toolgym.records import Score, Trajectory

RUN_FILE = "run.json"
TRAJECTORIES_FILE = "trajectories.jsonl"
SCORES_FILE = "scores.jsonl"

M = TypeVar("M", bound=BaseModel)


class RunDirError(ValueError):
    """A run directory or one of its files is missing or invalid (message names the file)."""


def read_jsonl(path: Path, model: type[M], repair: bool = False) -> list[M]:
    """Read a JSONL file of ``model`` records.

    A last line without its newline that does not parse (a write torn by ``kill -9``) is dropped
    with a warning; with ``repair`` the file is also truncated to its last complete line so
    that appending can continue.

    Raises:
        RunDirError: for an invalid line other than a torn last one (file and line named).
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    records: list[M] = []
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        last = lineno == len(lines)  # no newline after it
        try:
            records.append(model.model_validate_json(raw))
        except ValidationError as exc:
            if last:
                warnings.warn(f"{path}:{lineno}: dropped a torn last line ({len(raw)} bytes)", stacklevel=2)
                if repair:
                    with open(path, "r+b") as fh:
                        fh.truncate(len(data) - len(raw))
                break
            raise RunDirError(f"{path}:{lineno}: invalid record: {exc.errors()[0]['msg']}") from None
    return records


class JsonlAppender:
    """Appends records to a JSONL file, one line each, flushed as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, record: BaseModel) -> None:
        """Append one record and flush it to the operating system."""
        self._fh.write(record.model_dump_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and rename (never half-written)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, records: list[BaseModel]) -> None:
    """Write records as JSON Lines through a temporary file and rename."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(record.model_dump_json() + "\n" for record in records)
    os.replace(tmp, path)


def read_run(directory: Path) -> dict[str, Any]:
    """Parse ``run.json``.

    Raises:
        RunDirError: if it is missing or not JSON.
    """
    if Path(directory).exists() and not Path(directory).is_dir():
        raise RunDirError(f"{directory} is a file, not a run directory")
    path = Path(directory) / RUN_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path}: not found; is {directory} a run directory?") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None


def read_trajectories(directory: Path) -> list[Trajectory]:
    """All trajectories of a run directory (torn last line dropped with a warning)."""
    return read_jsonl(Path(directory) / TRAJECTORIES_FILE, Trajectory)


def read_scores(directory: Path) -> list[Score]:
    """All scores of a run directory."""
    return read_jsonl(Path(directory) / SCORES_FILE, Score)


LOCK_FILE = ".lock"


@contextlib.contextmanager
def locked_run_dir(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory/.lock`` while a run writes to the directory, so
    that two runs (say a ``--resume`` started while the first still runs) never append to,
    or repair, the same trajectories file. Released when the block ends or the process dies.
    No-op where ``fcntl`` is unavailable (Windows).

    Raises:
        RunDirError: if another process holds the lock (its pid is named).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    directory = Path(directory)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    fh = open(directory / LOCK_FILE, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise RunDirError(f"{directory} is being written by another run (pid {holder})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fh.close()  # closing releases the lock
        # a run that failed before writing anything leaves no empty run directory behind
        if [p.name for p in directory.iterdir()] == [LOCK_FILE]:
            (directory / LOCK_FILE).unlink(missing_ok=True)
            if created:
                directory.rmdir()

"""One run directory as a SQLite database: a row per trajectory, an FTS5 full-text index of its
text, and the run's settings and summary, so ``toolgym view`` answers a page, a filter or a
search in milliseconds without holding the run in memory.

The database is built (:class:`RunIndex`) from the run's files read one line at a time
through :mod:`toolgym.runio`'s readers (:func:`~toolgym.runio.stream_lines`,
:func:`~toolgym.runio.parse_line`, :func:`~toolgym.runio.score_fields`), never the whole run
in memory. A thread of the server commits a first batch of trajectories in file order before a
large dataset is read, so the first page answers within a fraction of a second of the server
starting; a child process (:data:`USE_PROCESS`) indexes the rest in batches, each committed, so
pages, filters and searches answer over what is indexed so far (said by
:attr:`RunIndex.indexing`). The rows are :func:`toolgym.views.rundata.trajectory_row`, the
function the static report's table is made of too. A run that grows (still being written) is
read on from the byte where the last build stopped; one whose rows depend on something that
changed (``run.json``'s graders, measures or dataset, the dataset file), or whose files were
rewritten otherwise, is indexed again (into a new file that replaces the old one once its
first batch is in). It is a cache: it lives in the cache folder
(``$XDG_CACHE_HOME/toolgym/view``, else ``~/.cache/toolgym/view``), never inside the run
directory.

Full-text search uses FTS5's ``trigram`` tokenizer (SQLite 3.34 or later; sqlite.org/fts5.html
section 4.3.4): a query matches any substring of three characters or more, case-insensitively,
which works for Japanese as well as English (no word segmentation needed); shorter queries fall
back to a scan with ``LIKE``. Six columns are indexed: ``example_id``, ``input`` (the example's request),
``model`` (model text and the final answer), ``reasoning``, ``calls`` (tool names with their
arguments as JSON, malformed calls' raw text) and ``results`` (tool outputs and the episode's
error).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

from toolgym.records import Example, Measure, Score, Trajectory
from toolgym.runio import (
    RUN_FILE,
    SCORES_FILE,
    TRAJECTORIES_FILE,
    ResultFileRef,
    Run,
    RunDirError,
    RunRecord,
    parse_line,
    read_run,
    redact_spec,
    redact_url,
    redacted_command,
    restore_line,
    result_lines,
    score_fields,
    stream_lines,
)
from toolgym.views.rundata import RunView, first_error, measure_for, rule_text, trajectory_row
from toolgym.views.summary import COLUMNS, summary_cells

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

INDEX_VERSION = 4
"""Bumped when the database layout changes (older caches are rebuilt)."""

TEXT_COLUMNS = ("example_id", "input", "model", "reasoning", "calls", "results")
"""The full-text columns, in FTS5 column order (the example id is searchable too)."""

SNIPPET_START, SNIPPET_END = "\x02", "\x03"
"""Markers around a matched substring in a search snippet (control characters that escaping
leaves alone and no record text is expected to hold); the page turns them into ``<mark>``."""

MAX_FACET_VALUES = 40
"""A metadata field with more distinct values than this is offered as free text, not a list."""

SORTS = {
    "order": "id",
    "example_id": "example_id",
    "trial": "trial",
    "status": "status",
    "steps": "n_tool",
    "duration": "duration",
    "tokens": "tokens",
    "latency": "latency",
    "first_error": "first_error",
}
"""Sort keys of :meth:`RunIndex.query` → their column (``score:GRADER`` sorts by a grader)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/toolgym/view``, else ``~/.cache/toolgym/view`` (a folder of this user,
    so no other user of the machine can plant an index in it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolgym" / "view"


@dataclass(frozen=True)
class Query:
    """A filtered, sorted page of trajectories (the parameters of ``GET
    /api/runs/{run}/trajectories``).

    Attributes:
        q: Full-text search (a substring of any indexed text, case-insensitive), or ``""``.
        status: Statuses to keep (``completed``, ``step_limit``, ``repeat_limit``, ``abandoned``, ``error``,
            ``aborted``).
        grader: With ``passed``: whose pass or fail to filter on; alone: rows it scored.
        passed: ``"1"`` passed, ``"0"`` failed, ``"none"`` unscored (with ``grader``); without
            ``grader``, ``"1"`` keeps trajectories that failed no grader and completed.
        first_error: First-error types to keep (``wrong_tool``, ``episode_error``, ...;
            ``"none"`` for rows without one).
        metadata: ``{field: value}`` equalities on the example's metadata (values as text).
        min_duration / max_duration: Bounds on ``duration_s`` in seconds.
        min_tokens / max_tokens: Bounds on the tokens of all model turns (input + output).
        sort: A key of :data:`SORTS` or ``score:GRADER``; ``order`` is file order.
        descending: Sort order.
        page: 1-based page number.
        per_page: Rows per page (1 to 1000).
    """

    q: str = ""
    status: tuple[str, ...] = ()
    grader: str | None = None
    passed: str | None = None
    first_error: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    min_duration: float | None = None
    max_duration: float | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    sort: str = "order"
    descending: bool = False
    page: int = 1
    per_page: int = 50


class QueryError(ValueError):
    """A query parameter that cannot be used (the message names it)."""


def _finite(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _input_text(value: str | list[dict[str, Any]]) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(f"{t.get('role', '')}: {t.get('content', '')}" for t in value)


def summary_of(view: RunView) -> list[dict[str, Any]]:
    """The summary table of one run, one dict per grader: the numbers (``mean``, ``stderr``,
    ``n``, ``n_errors``, ``n_unscored``, ``passed``; NaN written as ``None``), the measure in
    words, and ``cells``: the text of every column of :data:`toolgym.views.summary.COLUMNS`,
    exactly as ``summary`` and ``report`` print it (both read :func:`summary_cells` too)."""
    out = []
    for cell in summary_cells([view]):
        e = cell.estimate
        out.append(
            {
                "grader": cell.grader,
                "mean": _finite(e.mean),
                "stderr": _finite(e.stderr),
                "n": e.n,
                "n_errors": e.n_errors,
                "n_unscored": e.n_unscored,
                "passed": cell.passed,
                "measure": rule_text(cell.measure),
                "compares": cell.measure.compares,
                "pass_fail": cell.measure.pass_fail,
                "cells": {col.header: col.cell(cell) for col in COLUMNS},
            }
        )
    return out


def _settings(record: RunRecord) -> dict[str, Any]:
    r = record
    return {
        "env": redact_spec(r.env),  # a run.json written before MCP specs were redacted shows none either
        "agent": r.agent,
        "model": r.model,
        "model_settings": {**r.model_settings, **({"extra": {k: redact_url(v) if isinstance(v, str) else v
                                                            for k, v in r.model_settings["extra"].items()}}
                                                  if isinstance(r.model_settings.get("extra"), dict) else {})},
        "dataset": r.dataset.model_dump(mode="json"),
        "trials": r.trials,
        "graders": r.graders,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "command": redacted_command(r.command),  # a run.json written before redaction shows none either
        "protocol": getattr(r, "protocol", None) or (r.model_extra or {}).get("protocol"),
    }


def _texts(traj: Trajectory, example: Example | None) -> tuple[str, str, str, str, str]:
    model, reasoning, calls, results, users = [], [], [], [], []
    for step in traj.steps:
        if step.kind == "user":  # a multi-turn episode: its later user messages are searched as input
            if step.turn > 1 and step.text:
                users.append(step.text)
        elif step.kind == "model":
            if step.text:
                model.append(step.text)
            if step.reasoning:
                reasoning.append(step.reasoning)
            for c in step.tool_calls:
                if c.malformed and c.raw:
                    calls.append(c.raw)
        else:
            calls.append(f"{step.name} {json.dumps(step.arguments, ensure_ascii=False, default=str)}")
            results.append(step.output)
    if traj.final_answer:
        model.append(traj.final_answer)
    if traj.error:
        results.append(traj.error)
    return (
        "\n".join([_input_text(example.input) if example is not None else "", *users]).strip("\n"),
        "\n".join(model), "\n".join(reasoning), "\n".join(calls), "\n".join(results),
    )


def _meta_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _file_state(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
        return st.st_size, st.st_mtime_ns
    except OSError:
        return -1, 0


def _tail_hash(path: Path, end: int) -> str:
    """SHA-256 of the (up to) 4 kB before byte ``end`` of ``path``: tells a file that only grew
    since it was read up to ``end`` from one rewritten with other contents."""
    if end <= 0:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, end - 4096))
            return hashlib.sha256(fh.read(end - max(0, end - 4096))).hexdigest()
    except OSError:
        return "missing"


def _count_lines(path: Path) -> int:
    n = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                n += chunk.count(b"\n")
    except OSError:
        return 0
    return n


class _Requests:
    """How many requests the server is answering now: a build in the background pauses
    between rows while there is one (at most :attr:`max_wait_s` per batch), so that a page
    asked for while a large run is indexed is not slowed by the build (both are Python
    threads sharing one interpreter lock)."""

    max_wait_s = 2.0

    def __init__(self) -> None:
        self.n = 0
        self.waiting = 0
        """Requests waiting for a build's first batch (the build must not wait for them)."""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def waiting_for_build(self) -> Iterator[None]:
        """Mark the current request as waiting for a build while the block runs."""
        with self._lock:
            self.waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self.waiting -= 1

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Count one request while the block runs."""
        with self._lock:
            self.n += 1
        try:
            yield
        finally:
            with self._lock:
                self.n -= 1

    def give_way(self, budget: list[float]) -> None:
        """Sleep while requests are being answered, from ``budget[0]`` seconds left (spent)."""
        while self.n > self.waiting and budget[0] > 0:
            time.sleep(0.002)
            budget[0] -= 0.002


REQUESTS = _Requests()
"""The requests being answered (counted by ``toolgym view``'s server)."""

USE_PROCESS = True
"""Index all but the first batch of a run in a child process (``spawn``): the server's
Python interpreter (one lock for all its threads) then answers pages at full speed while a
large run is indexed, and the build's memory goes back to the system when it ends."""


def _build_in_child(directory: str, cache_dir: str, files: tuple[Any, ...]) -> None:
    """The child process of :meth:`RunIndex._in_child`: go on indexing from the database's
    progress; an error is written into the database (``info`` key ``error``) for the server."""
    parent = os.getppid()

    def orphaned() -> None:  # the server is gone (killed): stop rather than write on alone
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    index = RunIndex(Path(directory), Path(cache_dir))
    try:
        index._build_in(files, in_child=True)
    except (RunDirError, OSError, ValueError, sqlite3.DatabaseError) as exc:
        with index._connect() as db:
            db.execute("INSERT OR REPLACE INTO info VALUES ('error', ?)", (f"{type(exc).__name__}: {exc}",))
            db.commit()
        raise SystemExit(1) from None


FIRST_BATCH = 200
"""Trajectories in the first committed batch (what the first page is answered from)."""

BATCH = 2000
"""Trajectories per committed batch after the first."""

SCORES_AHEAD = (0.02, 0.1)
"""Share of ``scores.jsonl`` read ahead of the share of ``trajectories.jsonl`` read, in the
first batch and in the others."""

SMALL_DATASET = 2_000_000
"""A dataset file up to this size (bytes) is read before the first batch (its rows are whole
at once); a larger one after it, so the first page never waits for it."""


class _Builder:
    """Fills (or goes on filling) the database of one run from its files, batch by batch,
    committing each batch so that readers see the rows indexed so far.

    The state that lets a later call go on where this one stopped (byte offsets and line
    numbers reached in ``trajectories.jsonl`` and ``scores.jsonl``, the tail hashes, the run.json
    fingerprint) is kept in the ``info`` table as ``progress``.
    """

    def __init__(self, index: RunIndex, db: sqlite3.Connection, record: RunRecord, progress: dict[str, Any]) -> None:
        self.index, self.db, self.record, self.p = index, db, record, progress
        self.directory = index.directory
        self.graders: list[str] = list(progress.get("graders") or record.graders)
        self.measures: dict[str, Measure] = {}
        self.examples: dict[str, Example] | None = None
        self.problem: str | None = progress.get("problem")
        self.lines: list[str] | str | None = None
        self.keys: dict[tuple[str, int], int] = {}
        self.lazy_examples = False
        self.unwritten: dict[tuple[str, int], list[Score]] = {}
        self.stored_examples: set[str] = set()
        for eid, trial, tid in db.execute("SELECT example_id, trial, id FROM traj"):
            self.keys[(eid, trial)] = tid
        self.stored_examples = {r[0] for r in db.execute("SELECT id FROM example")}
        path = self.directory / SCORES_FILE
        for (raw,) in db.execute(  # scores read before their trajectory (by an earlier build)
                "SELECT raw FROM score s WHERE NOT EXISTS "
                "(SELECT 1 FROM traj t WHERE t.example_id = s.example_id AND t.trial = s.trial) ORDER BY id"):
            score = _bare(Score, None, score_fields(path, 0, raw))
            self.unwritten.setdefault((score.example_id, score.trial), []).append(score)
        self._ensure_columns()

    # --- pieces ---------------------------------------------------------------------------

    def _ensure_columns(self) -> None:
        have = {r[1] for r in self.db.execute("PRAGMA table_info(traj)")}
        for i in range(len(self.graders)):
            if f"g{i}" not in have:
                self.db.execute(f"ALTER TABLE traj ADD COLUMN g{i} REAL")
                self.db.execute(f"ALTER TABLE traj ADD COLUMN p{i} INTEGER")

    def _measure(self, grader: str, scores: Sequence[Score]) -> Measure:
        found = self.measures.get(grader)
        if found is None:
            run = Run(self.directory, self.record, [], [s for s in scores if s.grader == grader])
            found = self.measures[grader] = measure_for(run, grader)
        return found

    def _result_lines(self) -> list[str] | str:
        if self.lines is None:
            ref = self.record.result_file
            self.lines = result_lines(ref) if ref is not None else "run.json references no result file"
        return self.lines

    def load_examples(self) -> None:
        """Read the run's dataset (examples for inputs, expected calls, metadata)."""
        from toolgym.api import load_examples_of

        self.examples, self.problem = load_examples_of(self.directory, self.record)

    def _scores_of(self, key: tuple[str, int]) -> list[Score]:
        path = self.directory / SCORES_FILE
        return [_bare(Score, None, score_fields(path, 0, raw)) for (raw,) in self.db.execute(
            "SELECT raw FROM score WHERE example_id = ? AND trial = ? ORDER BY id", key)]

    def _write_rows(self, items: list[tuple[int, Trajectory, bytes | None]]) -> None:
        """Insert or replace the rows of ``items`` (``(tid, trajectory, raw line or None to keep
        the stored record)``), each computed from its scores in the database."""
        db = self.db
        if items and self.lazy_examples and self.examples is None and self.problem is None:
            self.load_examples()
        rows, fts_rows, meta_rows, records = [], [], [], []
        budget = [REQUESTS.max_wait_s]
        for k, (tid, traj, raw) in enumerate(items):
            if k % 20 == 0:
                REQUESTS.give_way(budget)
            before = raw is None or tid in self.keys
            scores = self._scores_of(traj.key) if before else self.unwritten.pop(traj.key, [])
            for s in scores:
                if s.grader not in self.graders:
                    self.graders.append(s.grader)
                    self._ensure_columns()
            measures = {g: self._measure(g, scores) for g in {s.grader for s in scores}}
            example = self.examples.get(traj.example_id) if self.examples is not None else None
            if example is not None and traj.example_id not in self.stored_examples:
                self.stored_examples.add(traj.example_id)
                db.execute("INSERT OR REPLACE INTO example VALUES (?, ?)",
                           (traj.example_id, orjson.dumps(example.model_dump(mode="json", exclude_defaults=True), default=str)))
            row = trajectory_row(traj, scores, measures, example)
            values: list[Any] = [None] * (2 * len(self.graders))
            for g, v in row["scores"].items():
                i = self.graders.index(g)
                values[2 * i] = v["value"]
                values[2 * i + 1] = None if v["passed"] is None else int(v["passed"])
            for k, v in row["metadata"].items():
                meta_rows.append((tid, str(k), _meta_text(v)))
            err = row["first_error"]
            rows.append((
                tid, traj.example_id, traj.trial, traj.status, row["n_tool_steps"], row["n_expected"], row["duration_s"],
                row["tokens"], row["latency_s"], int(row["failed"]), err["type"] if err else None,
                orjson.dumps(row, default=str, option=orjson.OPT_NON_STR_KEYS), *values,
            ))
            if raw is not None:
                records.append((tid, raw))
            fts_rows.append((tid, traj.example_id, *_texts(traj, example)))
        ids = [(tid,) for tid, _, raw in items if raw is None or tid in self.keys]  # rows indexed before
        db.executemany("DELETE FROM fts WHERE rowid = ?", ids)
        db.executemany("DELETE FROM meta WHERE tid = ?", ids)
        cols = ", ".join(["id, example_id, trial, status, n_tool, n_expected, duration, tokens, latency, failed, "
                          "first_error, row"] + [f"g{i}, p{i}" for i in range(len(self.graders))])
        db.executemany(f"INSERT OR REPLACE INTO traj ({cols}) VALUES ({', '.join('?' * (12 + 2 * len(self.graders)))})",
                       [r + (None,) * (12 + 2 * len(self.graders) - len(r)) for r in rows])
        db.executemany("INSERT OR REPLACE INTO record VALUES (?, ?)", records)
        db.executemany(f"INSERT INTO fts (rowid, {', '.join(TEXT_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)", fts_rows)
        db.executemany("INSERT INTO meta VALUES (?, ?, ?)", meta_rows)

    def _stored(self, tids: Sequence[int]) -> list[tuple[int, Trajectory, None]]:
        out = []
        for tid in tids:
            (raw,) = self.db.execute("SELECT trajectory FROM record WHERE id = ?", (tid,)).fetchone()
            out.append((tid, self.index._trajectory_of(raw, self._result_lines()), None))
        return out

    def _read_scores(self, limit: int | None) -> set[tuple[str, int]]:
        """Store score lines from where the last read stopped up to byte ``limit`` of the file
        (``None``: to the end). Returns the keys scored."""
        path = self.directory / SCORES_FILE
        scored: set[tuple[str, int]] = set()
        batch = []
        budget = [REQUESTS.max_wait_s]
        for lineno, end, raw in stream_lines(path, self.p["scores_at"], self.p["scores_line"]):
            if lineno % 200 == 0:
                REQUESTS.give_way(budget)
            score = _bare(Score, None, score_fields(path, lineno, raw))
            key = (score.example_id, score.trial)
            batch.append((score.example_id, score.trial, score.grader, _finite(score.value), raw))
            if key not in self.keys:  # kept until its trajectory's row is written
                self.unwritten.setdefault(key, []).append(score)
            scored.add(key)
            self.p["scores_at"], self.p["scores_line"] = end, lineno + 1
            if limit is not None and end >= limit:
                break
        self.db.executemany("INSERT INTO score (example_id, trial, grader, value, raw) VALUES (?, ?, ?, ?, ?)", batch)
        return scored

    # --- the loop ---------------------------------------------------------------------------

    def batch(self, size: int) -> bool:
        """Index up to ``size`` more trajectories (with the scores read so far) and commit.

        Returns:
            bool: Whether the trajectories file had more lines (``False``: all read).
        """
        path = self.directory / TRAJECTORIES_FILE
        new: dict[int, tuple[int, Trajectory, bytes]] = {}
        seen: dict[tuple[str, int], int] = {}
        more = False
        lines = None
        budget = [REQUESTS.max_wait_s]
        for lineno, end, raw in stream_lines(path, self.p["traj_at"], self.p["traj_line"]):
            if lineno % 50 == 0:
                REQUESTS.give_way(budget)
            traj = parse_line(path, lineno, raw, Trajectory)
            if traj.source_line is not None:
                lines = self._result_lines() if lines is None else lines
                restore_line(traj, lines, self.record.result_file)
            key = traj.key
            tid = self.keys.get(key) or seen.get(key)
            if tid is None:
                tid = seen[key] = len(self.keys) + len(seen) + 1
            new.pop(tid, None)  # a later attempt replaces the earlier one, at its place
            new[tid] = (tid, traj, raw)
            self.p["traj_at"], self.p["traj_line"] = end, lineno + 1
            if len(new) >= size:
                more = True
                break
        read_all = not more
        # the scores up to the same share of their file, and a little more (a grader's lines may
        # come in another order than the trajectories'); a score read after its row was written
        # makes the row be computed again
        share = min(1.0, self.p["traj_at"] / max(1, _file_state(path)[0]) + SCORES_AHEAD[size > FIRST_BATCH])
        scored = self._read_scores(None if read_all else int(share * max(0, _file_state(self.directory / SCORES_FILE)[0])))
        late = sorted(self.keys[k] for k in scored if k in self.keys and self.keys[k] not in new)
        self._write_rows([*new.values(), *self._stored(late)])
        self.keys.update(seen)
        self.p["rows"] = len(self.keys)
        self.p["lines"] = self.p["traj_line"] - 1
        self.commit()
        return more

    def refresh_examples(self) -> None:
        """Recompute the rows indexed before the dataset was read, now with their examples."""
        tids = [r[0] for r in self.db.execute("SELECT id FROM traj ORDER BY id")]
        for i in range(0, len(tids), BATCH):
            self._write_rows(self._stored(tids[i:i + BATCH]))
        self.commit()

    def commit(self) -> None:
        self.p["graders"] = self.graders
        self.p["problem"] = self.problem
        self.p["traj_hash"] = _tail_hash(self.directory / TRAJECTORIES_FILE, self.p["traj_at"])
        self.p["scores_hash"] = _tail_hash(self.directory / SCORES_FILE, self.p["scores_at"])
        self.db.execute("INSERT OR REPLACE INTO info VALUES ('progress', ?)", (json.dumps(self.p),))
        self.db.commit()

    def finish(self, in_child: bool = False) -> dict[str, Any]:
        """Every line read: the summary, facets and metadata fields over the whole run; a
        measure that reads differently over all the scores than over the first ones (a run of
        old graders that recorded none) recomputes the rows."""
        view = self.index._light_view(self.db, self.record, self.graders)
        if any(view.measures[g] != m for g, m in self.measures.items() if g in view.measures):
            self.measures = dict(view.measures)
            tids = [r[0] for r in self.db.execute("SELECT id FROM traj ORDER BY id")]
            for i in range(0, len(tids), BATCH):
                self._write_rows(self._stored(tids[i:i + BATCH]))
        info = self.index._info_of(self.db, self.record, self.graders, view, self.problem)
        info["build"] = {
            "process": "child" if in_child else "server",
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1) if resource else None,
        }
        self.p["done"] = True
        self.db.execute("INSERT OR REPLACE INTO info VALUES ('info', ?)", (json.dumps(info, ensure_ascii=False, default=str),))
        self.commit()
        return info


def _fts_phrase(q: str) -> str:
    return '"' + q.replace('"', '""') + '"'


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _bare(cls: type[M], defaults: dict[str, Any] | None, values: dict[str, Any]) -> M:
    """A record of ``cls`` holding ``values`` and, for every other field, the value in
    ``defaults`` (shared, not copied: read only; ``None`` when ``values`` has every field),
    without validation (what ``model_construct`` gives, 20 times faster: it looks each
    default up again)."""
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", values if defaults is None else {**defaults, **values})
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(cls.model_fields)
    object.__setattr__(obj, "__pydantic_fields_set__", set(names))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def _writer(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-65536")  # 64 MB: a batch is written at its commit, not spilled while readers read
    return db


SCHEMA = """
PRAGMA synchronous=OFF;
CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE traj (id INTEGER PRIMARY KEY, example_id TEXT, trial INTEGER, status TEXT, n_tool INTEGER,
    n_expected INTEGER, duration REAL, tokens INTEGER, latency REAL, failed INTEGER, first_error TEXT, row BLOB);
CREATE TABLE record (id INTEGER PRIMARY KEY, trajectory BLOB);
CREATE UNIQUE INDEX traj_key ON traj (example_id, trial);
CREATE TABLE score (id INTEGER PRIMARY KEY, example_id TEXT, trial INTEGER, grader TEXT, value REAL, raw BLOB);
CREATE INDEX score_key ON score (example_id, trial);
CREATE TABLE meta (tid INTEGER, key TEXT, value TEXT);
CREATE INDEX meta_kv ON meta (key, value);
CREATE INDEX meta_tid ON meta (tid);
CREATE TABLE example (id TEXT PRIMARY KEY, record BLOB);
"""


@dataclass
class RunIndex:
    """The database of one run directory, built in a background thread (:meth:`refresh`) in
    batches: the first :data:`FIRST_BATCH` trajectories (in file order) are committed before
    the dataset is even read, so the first page answers at once; every later batch of
    :data:`BATCH` is committed as it is done, and pages, filters and searches answer over the
    rows indexed so far (:attr:`indexing` says how far). A run that grows (a run still being
    written) is read on from where the last build stopped; a run rewritten otherwise, or whose
    ``run.json`` or dataset changed, is indexed again.

    Attributes:
        directory: The run directory.
        cache_dir: Where the database lives (:func:`default_cache_dir`).
    """

    directory: Path
    cache_dir: Path = field(default_factory=default_cache_dir)
    _info: dict[str, Any] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _first: threading.Event = field(default_factory=threading.Event, repr=False)
    _lines: list[str] | str | None = field(default=None, repr=False)
    _ref: tuple[ResultFileRef | None] | None = field(default=None, repr=False)  # run.json's, once read
    _seen: tuple[Any, ...] | None = field(default=None, repr=False)
    version: int = 0
    """Changes when the rows or the run's info change (first batch, each rebuild, each growth)."""
    error: str | None = None
    """Why the last build failed (the run directory's error), or ``None``."""
    progress: dict[str, Any] | None = None
    """While building: ``{"rows", "lines", "total_lines", "phase"}`` (see :attr:`indexing`)."""

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        key = hashlib.sha256(str(self.directory).encode()).hexdigest()[:20]
        self.path = Path(self.cache_dir) / f"{key}.sqlite"

    def _fingerprint(self) -> str:
        """What the rows depend on, as it is now: the layout of the index, the fields of
        ``run.json`` that decide a row (environment, graders and their measures, the dataset,
        an imported result file, extensions) and the dataset file (size, modification time).
        Other changes of ``run.json`` (its end time, written when the run finishes) only
        refresh the run's info."""
        try:
            data = json.loads((self.directory / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return json.dumps([INDEX_VERSION, None])
        if not isinstance(data, dict):
            return json.dumps([INDEX_VERSION, None])
        keys = ("env", "env_options", "graders", "measures", "dataset", "result_file", "extensions")
        items: list[Any] = [INDEX_VERSION, {k: data.get(k) for k in keys}]
        dataset = (data.get("dataset") or {}).get("path") if isinstance(data.get("dataset"), dict) else None
        if dataset:
            items.append(_file_state(Path(dataset)))
        return json.dumps(items, sort_keys=True, default=str)

    def _files_now(self) -> tuple[Any, ...]:
        return (self._fingerprint(), _file_state(self.directory / RUN_FILE),
                _file_state(self.directory / TRAJECTORIES_FILE), _file_state(self.directory / SCORES_FILE))

    # --- state ------------------------------------------------------------------------------

    @property
    def building(self) -> bool:
        """Whether a build is running now."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def indexing(self) -> dict[str, Any] | None:
        """``None`` once every line is indexed; while building, ``{"rows": trajectories
        indexed, "lines": lines of trajectories.jsonl read, "total_lines": lines in it (0
        until counted), "phase": "rows" | "dataset" | "summary"}``: answers are over the rows
        indexed so far (partial)."""
        return dict(self.progress) if self.progress is not None else None

    @property
    def indexed(self) -> bool:
        """Whether the info of the run is known (a first batch at least is indexed)."""
        return self._info is not None

    def load_cached(self) -> bool:
        """Load the stored info when the database is complete and up to date, without building.

        Returns:
            bool: Whether it was (else :meth:`refresh` will build it).
        """
        stored = self._stored_progress()
        if not stored or not stored.get("done") or not self._up_to_date(stored):
            return False
        with self._connect() as db:
            row = db.execute("SELECT value FROM info WHERE key = 'info'").fetchone()
        if row is None:
            return False
        self._info = json.loads(row[0])
        self._seen = self._files_now()
        self.version += 1
        return True

    def _up_to_date(self, p: dict[str, Any]) -> bool:
        return (p.get("fingerprint") == self._fingerprint() and p.get("run_json") == list(_file_state(self.directory / RUN_FILE))
                and max(0, _file_state(self.directory / TRAJECTORIES_FILE)[0]) == p["traj_at"]
                and max(0, _file_state(self.directory / SCORES_FILE)[0]) == p["scores_at"])

    def _stored_progress(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        try:
            with self._connect() as db:
                row = db.execute("SELECT value FROM info WHERE key = 'progress'").fetchone()
            return json.loads(row[0]) if row else None
        except (sqlite3.DatabaseError, ValueError):
            return None

    def refresh(self) -> bool:
        """Start a build in the background when the run's files changed since the last look
        (or the database is missing, older or incomplete); never waits for it.

        Returns:
            bool: Whether a build was started.

        Raises:
            RunDirError: when ``run.json`` cannot be read (before anything starts).
        """
        with self._lock:
            if self.building:
                return False
            now = self._files_now()
            if now == self._seen and (self._info is not None or self.error is not None):
                return False  # up to date, or failed on these very files
            read_run(self.directory)  # a missing or invalid run.json is refused here, not in the thread
            self._first.clear()
            self.progress = {"rows": 0, "lines": 0, "total_lines": 0, "phase": "rows"}
            self._thread = threading.Thread(target=self._build, args=(now,), name=f"index {self.directory.name}", daemon=True)
            self._thread.start()
            return True

    def wait(self, timeout: float | None = None, first_batch: bool = False) -> bool:
        """Wait for the running build to finish (or, with ``first_batch``, for its first batch).

        Returns:
            bool: Whether it did within ``timeout`` seconds.
        """
        if first_batch:
            with REQUESTS.waiting_for_build():
                return self._first.wait(timeout) or not self.building
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.building

    def _build(self, files: tuple[Any, ...]) -> None:
        try:
            with self._build_lock():
                if not self._built_elsewhere(files):
                    if self._build_in(files):
                        self._in_child(files)
            self.error = None
        except (RunDirError, OSError, ValueError, sqlite3.DatabaseError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self._seen = files
            log.warning("indexing %s failed: %s", self.directory, self.error)
        finally:
            self.progress = None
            self._first.set()

    def _build_in(self, files: tuple[Any, ...], in_child: bool = False) -> bool:
        """Index what is new in the run's files (all of them when the database is missing or
        out of date); with :data:`USE_PROCESS` and outside a child, only the first batch.

        Returns:
            bool: Whether the rest is left to a child process (:meth:`_in_child`).
        """
        record = read_run(self.directory)
        fingerprint = files[0]
        stored = self._stored_progress()
        tpath, spath = self.directory / TRAJECTORIES_FILE, self.directory / SCORES_FILE
        grows = (
            stored is not None and stored.get("fingerprint") == fingerprint
            and max(0, _file_state(tpath)[0]) >= stored["traj_at"] and max(0, _file_state(spath)[0]) >= stored["scores_at"]
            and _tail_hash(tpath, stored["traj_at"]) == stored["traj_hash"]
            and _tail_hash(spath, stored["scores_at"]) == stored["scores_hash"]
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if grows:
            assert stored is not None
            db = _writer(self.path)
            progress = {**stored, "done": False, "run_json": list(files[1])}
            fresh = False
        else:
            new = self.path.with_name(f"{self.path.stem}.{os.getpid()}.new.sqlite")  # this process's own
            new.unlink(missing_ok=True)
            db = _writer(new)
            db.executescript(SCHEMA + f"CREATE VIRTUAL TABLE fts USING fts5({', '.join(TEXT_COLUMNS)}, tokenize='trigram');"
                             # fewer merges of the index's segments while it is built: 25-40% faster
                             # inserts, searches as fast (sqlite.org/fts5.html, the automerge option)
                             "INSERT INTO fts(fts, rank) VALUES('automerge', 16);")
            progress = {"fingerprint": fingerprint, "run_json": list(files[1]), "traj_at": 0, "traj_line": 1, "scores_at": 0, "scores_line": 1,
                        "rows": 0, "lines": 0, "done": False}
            fresh = True
        try:
            builder = _Builder(self, db, record, progress)
            dataset = builder.record.dataset.path
            small = not dataset or max(0, _file_state(Path(dataset))[0]) <= SMALL_DATASET
            if fresh and small:  # else the first batch goes in before the dataset is read
                builder.load_examples()
            builder.lazy_examples = not fresh  # a run that grew: read the dataset if a row is written
            if not fresh and builder.p.get("examples_pending"):
                self._examples_now(builder)
            more = builder.batch(FIRST_BATCH if fresh else BATCH)
            if fresh:  # the first batch goes live: the new database replaces the old one
                db.close()
                os.replace(new, self.path)
                db = builder.db = _writer(self.path)
                self._lines = self._ref = None
                builder.p["examples_pending"] = builder.examples is None and builder.problem is None
                builder.commit()
            if (fresh or self._info is None) and not in_child:
                self._publish(db, record, builder)
            self._first.set()
            if fresh:  # counted once the first page can be answered
                builder.p["total_lines"] = _count_lines(tpath)
                builder.commit()
                self._progress_of(builder.p)
            if not in_child and (more or builder.p.get("examples_pending")) and USE_PROCESS:
                return True
            if builder.p.get("examples_pending"):
                self._examples_now(builder)
            while more:
                more = builder.batch(BATCH)
                self._progress_of(builder.p)
            builder.p["phase"] = "summary"
            self._progress_of(builder.p)
            info = builder.finish(in_child)
            with self._lock:
                self._info, self._seen = info, files
                self.version += 1
            return False
        finally:
            db.close()

    @contextlib.contextmanager
    def _build_lock(self) -> Iterator[None]:
        """Hold an exclusive lock on ``KEY.lock`` beside the database while building it (its
        child process included), so that two ``toolgym view`` processes sharing a cache folder
        never write one database at once: the second waits, then finds the database the first
        built (:meth:`_built_elsewhere`). Without ``fcntl`` (Windows): no lock."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
            yield

    def _built_elsewhere(self, files: tuple[Any, ...]) -> bool:
        """Whether another process, while this one waited for :meth:`_build_lock`, left the
        database complete and up to date for the run's files as they are: then it is loaded."""
        stored = self._stored_progress()
        if not stored or not stored.get("done") or not self._up_to_date(stored) or self._files_now() != files:
            return False
        if not self.load_cached():
            return False
        self._first.set()
        return True

    def _examples_now(self, builder: _Builder) -> None:
        """Read the dataset, then compute again the rows indexed before it was read."""
        builder.p["phase"] = "dataset"
        self._progress_of(builder.p)
        builder.load_examples()
        builder.refresh_examples()
        builder.p["examples_pending"] = False
        builder.p["phase"] = "rows"
        builder.commit()

    def _progress_of(self, p: dict[str, Any]) -> None:
        self.progress = {"rows": p.get("rows", 0), "lines": p.get("lines", 0),
                         "total_lines": max(p.get("total_lines", 0), p.get("lines", 0)) if p.get("total_lines") else 0,
                         "phase": p.get("phase", "rows")}

    def _in_child(self, files: tuple[Any, ...]) -> None:
        """Index the rest of the run in a child process (:func:`_build_in_child`), so that
        the server's interpreter stays free for requests; follow its progress in the
        database; load the info it wrote when it is done.

        Raises:
            RunDirError: with the child's error, when it failed.
        """
        import multiprocessing

        proc = multiprocessing.get_context("spawn").Process(
            target=_build_in_child, args=(str(self.directory), str(self.cache_dir), files),
            name=f"toolgym view: indexing {self.directory.name}", daemon=True)
        proc.start()
        while proc.is_alive():
            proc.join(0.5)
            stored = self._stored_progress()
            if stored is not None:
                self._progress_of(stored)
        with self._connect() as db:
            found = dict(db.execute("SELECT key, value FROM info WHERE key IN ('info', 'error')").fetchall())
        if proc.exitcode != 0 or "info" not in found:
            raise RunDirError(found.get("error") or f"{self.directory}: the indexing process ended with exit code {proc.exitcode}")
        info = json.loads(found["info"])
        with self._lock:
            self._info, self._seen = info, files
            self.version += 1

    def _publish(self, db: sqlite3.Connection, record: RunRecord, builder: _Builder) -> None:
        """Make the info of the rows indexed so far current (after the first batch)."""
        view = self._light_view(db, record, builder.graders)
        info = self._info_of(db, record, builder.graders, view, builder.problem)
        with self._lock:
            self._info = info
            self.version += 1
        self._progress_of(builder.p)

    def _light_view(self, db: sqlite3.Connection, record: RunRecord, graders: list[str]) -> RunView:
        """The run as the summary reads it (each trajectory's key and status, each score's
        key, grader and value), from the database: no step, text or detail in memory."""
        t0 = Trajectory.model_construct(example_id="", status="completed").__dict__
        s0 = Score.model_construct(example_id="", grader="", value=None).__dict__
        trajectories = [_bare(Trajectory, t0, {"example_id": e, "trial": t, "status": s})
                        for e, t, s in db.execute("SELECT example_id, trial, status FROM traj ORDER BY id")]
        scores = [_bare(Score, s0, {"example_id": e, "trial": t, "grader": g, "value": v})
                  for e, t, g, v in db.execute("SELECT example_id, trial, grader, value FROM score ORDER BY id")]
        return RunView(Run(self.directory, record, trajectories, scores))

    def _info_of(self, db: sqlite3.Connection, record: RunRecord, graders: list[str], view: RunView,
                 problem: str | None) -> dict[str, Any]:
        facets = {
            "status": dict(db.execute("SELECT status, count(*) FROM traj GROUP BY status").fetchall()),
            "first_error": dict(db.execute("SELECT coalesce(first_error, 'none'), count(*) FROM traj GROUP BY 1").fetchall()),
        }
        metadata: dict[str, Any] = {}
        for key, n in db.execute("SELECT key, count(DISTINCT value) FROM meta GROUP BY key ORDER BY key"):
            metadata[key] = None if n > MAX_FACET_VALUES else [
                v for (v,) in db.execute("SELECT DISTINCT value FROM meta WHERE key = ? ORDER BY value", (key,))]
        return {
            "settings": _settings(record),
            "label": view.label,
            "graders": list(graders),
            "measures": {g: {"rule": rule_text(m), "pass_fail": m.pass_fail, "compares": m.compares}
                         for g, m in view.measures.items()},
            "summary": summary_of(view),
            "n_trajectories": len(view.trajectories),
            "facets": facets,
            "metadata": metadata,
            "problem": problem,
        }

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def _trajectory_of(self, raw: bytes, lines: list[str] | str | None = None) -> Trajectory:
        traj = Trajectory.model_validate_json(raw)
        if traj.source_line is not None:
            if self._ref is None:
                self._ref = (read_run(self.directory).result_file,)
            if lines is None:
                if self._lines is None:
                    self._lines = result_lines(self._ref[0]) if self._ref[0] is not None else "no result file"
                lines = self._lines
            restore_line(traj, lines, self._ref[0])
        return traj

    def check(self, query: Query) -> None:
        """Raises QueryError: as :meth:`query` would, without running it."""
        self._where(query)
        self._order(query)

    @property
    def info(self) -> dict[str, Any]:
        """Settings, summary, graders, facets of the rows indexed so far.

        Raises:
            RunDirError: when nothing is indexed yet (call :meth:`refresh` and :meth:`wait`).
        """
        if self._info is None:
            if not self.load_cached():
                self.refresh()
                self.wait(first_batch=True)
            if self._info is None:
                raise RunDirError(self.error or f"{self.directory}: not indexed yet")
        return self._info





    # --- queries ----------------------------------------------------------------------------

    def _where(self, query: Query) -> tuple[str, list[Any], bool]:
        graders = self.info["graders"]
        clauses, params = [], []
        searching = bool(query.q.strip())
        if searching:
            q = query.q.strip()
            if len(q) >= 3:
                clauses.append("t.id IN (SELECT rowid FROM fts WHERE fts MATCH ?)")
                params.append(_fts_phrase(q))
            else:  # below the trigram length: a scan
                like = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                ors = " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in TEXT_COLUMNS)
                clauses.append(f"t.id IN (SELECT rowid FROM fts WHERE {ors})")
                params.extend([like] * len(TEXT_COLUMNS))
        if query.status:
            clauses.append(f"t.status IN ({', '.join('?' * len(query.status))})")
            params.extend(query.status)
        if query.grader is not None:
            if query.grader not in graders:
                raise QueryError(f"grader: {query.grader!r} is not a grader of this run (graders: {', '.join(graders)})")
            i = graders.index(query.grader)
            if query.passed in (None, ""):
                clauses.append(f"t.g{i} IS NOT NULL")
            elif query.passed in ("1", "0"):
                clauses.append(f"t.p{i} = ?")
                params.append(int(query.passed))
            elif query.passed == "none":
                clauses.append(f"t.p{i} IS NULL")
            else:
                raise QueryError(f"passed: {query.passed!r} is not one of 1, 0, none")
        elif query.passed not in (None, ""):
            if query.passed not in ("1", "0"):
                raise QueryError(f"passed: {query.passed!r} is not one of 1, 0 (give grader= for 'none')")
            clauses.append("t.failed = ?")
            params.append(1 - int(query.passed))
        if query.first_error:
            kinds = [k for k in query.first_error if k != "none"]
            parts = []
            if kinds:
                parts.append(f"t.first_error IN ({', '.join('?' * len(kinds))})")
                params.extend(kinds)
            if "none" in query.first_error:
                parts.append("t.first_error IS NULL")
            clauses.append("(" + " OR ".join(parts) + ")")
        for key, value in query.metadata:
            clauses.append("t.id IN (SELECT tid FROM meta WHERE key = ? AND value = ?)")
            params.extend([key, value])
        for column, op, bound in (
            ("duration", ">=", query.min_duration), ("duration", "<=", query.max_duration),
            ("tokens", ">=", query.min_tokens), ("tokens", "<=", query.max_tokens),
        ):
            if bound is not None:
                clauses.append(f"t.{column} {op} ?")
                params.append(bound)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params, searching

    def _order(self, query: Query) -> str:
        graders = self.info["graders"]
        if query.sort.startswith("score:"):
            name = query.sort[len("score:"):]
            if name not in graders:
                raise QueryError(f"sort: {name!r} is not a grader of this run (graders: {', '.join(graders)})")
            column = f"t.g{graders.index(name)}"
        elif query.sort in SORTS:
            column = f"t.{SORTS[query.sort]}"
        else:
            raise QueryError(f"sort: {query.sort!r} is not one of {', '.join(SORTS)} or score:GRADER")
        direction = "DESC" if query.descending else "ASC"
        if column == "t.id":  # file order: the primary key, no sort
            return f" ORDER BY t.id {direction}"
        return f" ORDER BY {column} IS NULL, {column} {direction}, t.id {direction}"

    def holds(self, env: str, example_id: str, trial: int) -> bool:
        """Whether the rows indexed so far hold a trajectory of ``example_id``, trial
        ``trial``, on environment ``env`` (so a side-by-side with it can be shown)."""
        if self._info is None or self._info.get("settings", {}).get("env") != env:
            return False
        with self._connect() as db:
            return db.execute("SELECT 1 FROM traj WHERE example_id = ? AND trial = ? LIMIT 1",
                              (example_id, trial)).fetchone() is not None

    def row(self, example_id: str, trial: int) -> dict[str, Any] | None:
        """The row of one trajectory (as in :meth:`query`), or ``None``."""
        with self._connect() as db:
            r = db.execute("SELECT row FROM traj WHERE example_id = ? AND trial = ?", (example_id, trial)).fetchone()
        return None if r is None else orjson.loads(r[0])

    def query(self, query: Query) -> dict[str, Any]:
        """A page of rows.

        Returns:
            dict: ``{"total": rows matching, "page", "per_page", "pages", "rows": [row...]}``;
            a row is ``{"example_id", "trial", "status", "n_tool_steps", "n_expected",
            "duration_s", "input_tokens", "output_tokens", "tokens", "latency_s", "failed",
            "first_error": {"type", "step", "text"} | None, "parent", "metadata", "scores":
            {grader: {"value", "passed"}}}`` plus, when searching, ``"match": {"column",
            "snippet"}`` (the first column that matched, with the matched text between
            :data:`SNIPPET_START` and :data:`SNIPPET_END`).

        Raises:
            QueryError: for an unknown grader or sort key, or a bad ``passed``.
        """
        if not 1 <= query.per_page <= 1000:
            raise QueryError(f"per_page: {query.per_page} is not between 1 and 1000")
        if query.page < 1:
            raise QueryError(f"page: {query.page} is not 1 or more")
        where, params, searching = self._where(query)
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            total = db.execute(f"SELECT count(*) FROM traj t{where}", params).fetchone()[0]
            found = db.execute(
                f"SELECT t.id, t.row FROM traj t{where}{self._order(query)} LIMIT ? OFFSET ?",
                [*params, query.per_page, (query.page - 1) * query.per_page],
            ).fetchall()
            rows = [orjson.loads(r["row"]) for r in found]
            if searching and found:
                for row, r in zip(rows, found, strict=True):
                    row["match"] = self._match(db, r["id"], query.q.strip())
        return {
            "total": total,
            "page": query.page,
            "per_page": query.per_page,
            "pages": max(1, math.ceil(total / query.per_page)),
            "rows": rows,
        }

    def _match(self, db: sqlite3.Connection, tid: int, q: str) -> dict[str, str] | None:
        texts = db.execute(f"SELECT {', '.join(TEXT_COLUMNS)} FROM fts WHERE rowid = ?", (tid,)).fetchone()
        needle = q.casefold()
        for name, text in zip(TEXT_COLUMNS, texts, strict=True):
            text = text or ""
            at = text.casefold().find(needle)
            if at < 0:
                continue
            start, end = max(0, at - 60), min(len(text), at + len(q) + 60)
            snippet = (
                ("…" if start else "") + text[start:at] + SNIPPET_START + text[at:at + len(q)] + SNIPPET_END
                + text[at + len(q):end] + ("…" if end < len(text) else "")
            )
            return {"column": name, "snippet": snippet}
        return None

    def iter_rows(self, query: Query) -> Iterator[dict[str, Any]]:
        """Every row matching ``query`` (its page ignored), in its order, read in batches."""
        where, params, _ = self._where(query)
        with self._connect() as db:
            cursor = db.execute(f"SELECT t.row FROM traj t{where}{self._order(query)}", params)
            while batch := cursor.fetchmany(500):
                for (r,) in batch:
                    yield orjson.loads(r)

    def trajectory(self, example_id: str, trial: int) -> tuple[Trajectory, list[Score], Example | None] | None:
        """One trajectory, its scores and its example (validated as toolgym records), or
        ``None`` when the run has no such (example, trial) (or it is not indexed yet)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT r.trajectory FROM traj t JOIN record r ON r.id = t.id WHERE t.example_id = ? AND t.trial = ?",
                (example_id, trial),
            ).fetchone()
            if row is None:
                return None
            scores = [Score.model_validate_json(raw) for (raw,) in db.execute(
                "SELECT raw FROM score WHERE example_id = ? AND trial = ? ORDER BY id", (example_id, trial))]
            ex = db.execute("SELECT record FROM example WHERE id = ?", (example_id,)).fetchone()
        example = Example.model_validate(orjson.loads(ex[0])) if ex else None
        return self._trajectory_of(row[0]), scores, example

    def outcomes(self, grader: str) -> dict[str, bool | None]:
        """Example id → whether every scored trial passed ``grader`` (``None``: unscored)."""
        graders = self.info["graders"]
        if grader not in graders:
            return {}
        i = graders.index(grader)
        out: dict[str, bool | None] = {}
        with self._connect() as db:
            for eid, passed in db.execute(f"SELECT example_id, p{i} FROM traj ORDER BY id"):
                if passed is None:
                    out.setdefault(eid, None)
                else:
                    prev = out.get(eid)
                    out[eid] = bool(passed) if prev is None else prev and bool(passed)
        return out


__all__ = ["Query", "QueryError", "RunDirError", "RunIndex", "first_error", "summary_of"]

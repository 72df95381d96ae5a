"""One run directory as a SQLite database: a row per trajectory, an FTS5 full-text index of its
text, and the run's settings and summary, so ``toolgym view`` answers a page, a filter or a
search in milliseconds without holding the run in memory.

The database is built from :func:`toolgym.load_run` (the run's only reader) on first open and
rebuilt when ``run.json``, ``trajectories.jsonl``, ``scores.jsonl`` or the dataset change (size
or modification time), which is how a run still being written updates live. It is a cache: it
lives in the cache folder (``$XDG_CACHE_HOME/toolgym/view``, else ``~/.cache/toolgym/view``),
never inside the run directory, and is written to a temporary file renamed into place, so a
reader never sees half of it.

Full-text search uses FTS5's ``trigram`` tokenizer (SQLite 3.34 or later; sqlite.org/fts5.html
section 4.3.4): a query matches any substring of three characters or more, case-insensitively,
which works for Japanese as well as English (no word segmentation needed); shorter queries fall
back to a scan with ``LIKE``. Six columns are indexed: ``example_id``, ``input`` (the example's request),
``model`` (model text and the final answer), ``reasoning``, ``calls`` (tool names with their
arguments as JSON, malformed calls' raw text) and ``results`` (tool outputs and the episode's
error).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from toolgym.api import load_run
from toolgym.records import Example, Score, Trajectory
from toolgym.runio import RUN_FILE, SCORES_FILE, TRAJECTORIES_FILE, RunDirError
from toolgym.views.rundata import RunView, first_call_divergence, rule_text
from toolgym.views.summary import COLUMNS, summary_cells

INDEX_VERSION = 3
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
        status: Statuses to keep (``completed``, ``step_limit``, ``error``, ``aborted``).
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


@dataclass
class _Signature:
    files: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def of(cls, directory: Path, dataset: str | None) -> _Signature:
        items = []
        paths = [directory / RUN_FILE, directory / TRAJECTORIES_FILE, directory / SCORES_FILE]
        if dataset:
            paths.append(Path(dataset))
        for p in paths:
            try:
                st = p.stat()
                items.append((str(p), st.st_size, st.st_mtime_ns))
            except OSError:
                items.append((str(p), -1, 0))
        return cls(tuple(items))

    def text(self) -> str:
        return json.dumps([INDEX_VERSION, self.files])


def _pack(value: Any) -> bytes:
    # plain JSON: records are small (hundreds of bytes to a few kB), and setting up zlib for each
    # cost more than the whole SQLite insert
    return value if isinstance(value, bytes) else orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)


def _unpack(blob: bytes) -> Any:
    return orjson.loads(blob)


def _finite(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _input_text(value: str | list[dict[str, Any]]) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(f"{t.get('role', '')}: {t.get('content', '')}" for t in value)


def first_error(view: RunView, traj: Trajectory, scores: Sequence[Score]) -> dict[str, Any] | None:
    """Where and how a trajectory first went wrong, or ``None``.

    In this order: an episode that ended in ``error`` (type ``episode_error``, the error text);
    the ``first_error`` of its ``trajectory_match`` score (``None`` when that passed); the first
    departure from the expected calls (:func:`toolgym.views.rundata.first_call_divergence`,
    typed ``wrong_tool``, ``wrong_arguments``, ``extra_call`` or ``missing``); a trajectory
    stopped at the step limit (``step_limit``).

    Returns:
        dict | None: ``{"type": str, "step": 1-based tool step or None, "text": str}``.
    """
    if traj.status == "error":
        return {"type": "episode_error", "step": None, "text": traj.error or "error"}
    match = next((s for s in scores if s.grader == "trajectory_match"), None)
    if match is not None and match.value is not None:
        found = match.details.get("first_error")
        if not isinstance(found, dict):
            return None
        step = found.get("step")
        return {"type": str(found.get("type")), "step": step if isinstance(step, int) else None,
                "text": match.explanation}
    tools = traj.tool_steps
    expected = view.expected_for(traj)
    divergence = first_call_divergence(expected, tools, view.order_matters(traj))
    if divergence is not None and expected is not None:
        i = divergence.index
        if i >= len(expected):
            kind = "extra_call"
        elif i >= len(tools):
            kind = "missing"
        else:
            exp = expected[i]
            kind = "wrong_tool" if tools[i].name != (exp if isinstance(exp, str) else exp.name) else "wrong_arguments"
        return {"type": kind, "step": i + 1 if i < len(tools) else None, "text": divergence.reason}
    if traj.status == "step_limit":
        return {"type": "step_limit", "step": None, "text": "stopped at the step limit"}
    return None


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
                "pass_fail": cell.measure.pass_fail,
                "cells": {col.header: col.cell(cell) for col in COLUMNS},
            }
        )
    return out


def _settings(view: RunView) -> dict[str, Any]:
    r = view.record
    return {
        "env": r.env,
        "agent": r.agent,
        "model": r.model,
        "model_settings": r.model_settings,
        "dataset": r.dataset.model_dump(mode="json"),
        "trials": r.trials,
        "graders": r.graders,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "command": r.command,
        "protocol": getattr(r, "protocol", None) or (r.model_extra or {}).get("protocol"),
    }


def _texts(traj: Trajectory, example: Example | None) -> tuple[str, str, str, str, str]:
    model, reasoning, calls, results = [], [], [], []
    for step in traj.steps:
        if step.kind == "model":
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
        _input_text(example.input) if example is not None else "",
        "\n".join(model), "\n".join(reasoning), "\n".join(calls), "\n".join(results),
    )


def _meta_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def build_index(directory: Path, path: Path) -> dict[str, Any]:
    """Write the database of the run in ``directory`` to ``path`` (through a temporary file
    renamed into place).

    Returns:
        dict: The run's ``info`` record (settings, summary, graders, facets).

    Raises:
        RunDirError: as :func:`toolgym.load_run`.
    """
    t0 = time.perf_counter()
    view = RunView(load_run(directory))
    graders = view.graders
    g_index = {g: i for i, g in enumerate(graders)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    os.close(fd)
    db = sqlite3.connect(tmp)
    try:
        score_cols = "".join(f", g{i} REAL, p{i} INTEGER" for i in range(len(graders)))
        db.executescript(
            f"""
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
            CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE traj (id INTEGER PRIMARY KEY, example_id TEXT, trial INTEGER, status TEXT,
                n_tool INTEGER, n_expected INTEGER, duration REAL, tokens_in INTEGER, tokens_out INTEGER,
                tokens INTEGER, latency REAL, failed INTEGER, first_error TEXT, first_error_step INTEGER,
                first_error_text TEXT, parent TEXT, meta TEXT{score_cols});
            CREATE TABLE record (id INTEGER PRIMARY KEY, trajectory BLOB, scores BLOB);
            CREATE UNIQUE INDEX traj_key ON traj (example_id, trial);
            CREATE TABLE meta (tid INTEGER, key TEXT, value TEXT);
            CREATE TABLE example (id TEXT PRIMARY KEY, record BLOB);
            CREATE VIRTUAL TABLE fts USING fts5({", ".join(TEXT_COLUMNS)}, tokenize='trigram');
            """
        )
        examples = view.examples or {}
        facets: dict[str, Counter] = {"status": Counter(), "first_error": Counter()}
        meta_values: dict[str, set[str]] = defaultdict(set)
        rows, fts_rows, meta_rows, records = [], [], [], []
        used_examples: set[str] = set()
        marks = ", ".join("?" * (17 + 2 * len(graders)))
        n, n_rows = len(view.trajectories), 0
        for tid, traj in enumerate(view.trajectories, 1):
            scores = view.scores_of(traj)
            example = examples.get(traj.example_id)
            if example is not None:
                used_examples.add(traj.example_id)
            err = first_error(view, traj, scores)
            tin = sum(s.input_tokens or 0 for s in traj.model_steps)
            tout = sum(s.output_tokens or 0 for s in traj.model_steps)
            values: list[Any] = [None] * (2 * len(graders))
            for s in scores:
                i = g_index[s.grader]
                passed = view.measures[s.grader].passed(s.value)
                values[2 * i] = _finite(s.value)
                values[2 * i + 1] = None if passed is None else int(passed)
            meta = dict(example.metadata) if example is not None else {}
            for k, v in meta.items():
                text = _meta_text(v)
                meta_rows.append((tid, str(k), text))
                if len(meta_values[str(k)]) <= MAX_FACET_VALUES:
                    meta_values[str(k)].add(text)
            parent = getattr(traj, "parent", None)
            facets["status"][traj.status] += 1
            facets["first_error"][err["type"] if err else "none"] += 1
            rows.append(
                (
                    tid, traj.example_id, traj.trial, traj.status, len(traj.tool_steps),
                    view.n_expected_steps(traj), traj.duration_s, tin, tout, tin + tout,
                    sum(s.latency_s for s in traj.model_steps), int(view.failed(traj)),
                    err["type"] if err else None, err["step"] if err else None, err["text"] if err else None,
                    json.dumps(parent) if parent else None, orjson.dumps(meta, default=str).decode(),
                    *values,
                )
            )
            records.append((tid, _pack(traj.model_dump_json().encode()), _pack([s.model_dump(mode="json") for s in scores])))
            fts_rows.append((tid, traj.example_id, *_texts(traj, example)))
            if len(rows) >= 2000 or tid == n:
                db.executemany(f"INSERT INTO traj VALUES ({marks})", rows)
                db.executemany("INSERT INTO record VALUES (?, ?, ?)", records)
                db.executemany(f"INSERT INTO fts (rowid, {', '.join(TEXT_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)", fts_rows)
                db.executemany("INSERT INTO meta VALUES (?, ?, ?)", meta_rows)
                n_rows += len(rows)
                rows, fts_rows, meta_rows, records = [], [], [], []
        db.executemany(
            "INSERT INTO example VALUES (?, ?)",
            ((i, _pack(examples[i].model_dump(mode="json", exclude_defaults=True))) for i in used_examples),
        )
        db.execute("CREATE INDEX meta_kv ON meta (key, value)")
        info = {
            "settings": _settings(view),
            "label": view.label,
            "graders": graders,
            "measures": {g: {"rule": rule_text(m), "pass_fail": m.pass_fail} for g, m in view.measures.items()},
            "summary": summary_of(view),
            "n_trajectories": n_rows,
            "facets": {k: dict(v) for k, v in facets.items()},
            "metadata": {k: sorted(v) if len(v) <= MAX_FACET_VALUES else None for k, v in sorted(meta_values.items())},
            "problem": view.run.problem,
            "built_s": round(time.perf_counter() - t0, 3),
        }
        db.execute("INSERT INTO info VALUES ('info', ?)", (json.dumps(info, ensure_ascii=False, default=str),))
        db.commit()
        db.close()
        os.replace(tmp, path)
    except BaseException:
        db.close()
        Path(tmp).unlink(missing_ok=True)
        raise
    return info


def _fts_phrase(q: str) -> str:
    return '"' + q.replace('"', '""') + '"'


@dataclass
class RunIndex:
    """The database of one run directory, built or rebuilt on demand (:meth:`refresh`).

    Attributes:
        directory: The run directory.
        cache_dir: Where the database lives (:func:`default_cache_dir`).
    """

    directory: Path
    cache_dir: Path = field(default_factory=default_cache_dir)
    _info: dict[str, Any] | None = field(default=None, repr=False)
    _signature: str | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    version: int = 0
    """How many times the database was (re)loaded by this process: changes when the run does."""

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        key = hashlib.sha256(str(self.directory).encode()).hexdigest()[:20]
        self.path = Path(self.cache_dir) / f"{key}.sqlite"

    def _dataset_path(self) -> str | None:
        try:
            data = json.loads((self.directory / RUN_FILE).read_text(encoding="utf-8"))
            return (data.get("dataset") or {}).get("path")
        except (OSError, ValueError, AttributeError):
            return None

    def load_cached(self) -> bool:
        """Load the database's info when it is up to date with the run, without building.

        Returns:
            bool: Whether it was (else :meth:`refresh` will build it).
        """
        signature = _Signature.of(self.directory, self._dataset_path()).text()
        if self._stored_signature() != signature:
            return False
        return self.refresh()

    def refresh(self) -> bool:
        """Build the database if missing or older than the run's files; load its info.

        Returns:
            bool: Whether the run changed since the last call (a new :attr:`version`).

        Raises:
            RunDirError: as :func:`toolgym.load_run`.
        """
        with self._lock:
            signature = _Signature.of(self.directory, self._dataset_path()).text()
            if signature == self._signature:
                return False
            stored = self._stored_signature()
            if stored != signature:
                info = build_index(self.directory, self.path)
                with self._connect() as db:
                    db.execute("INSERT OR REPLACE INTO info VALUES ('signature', ?)", (signature,))
                    db.commit()
            else:
                with self._connect() as db:
                    info = json.loads(db.execute("SELECT value FROM info WHERE key = 'info'").fetchone()[0])
            self._info, self._signature = info, signature
            self.version += 1
            return True

    def _stored_signature(self) -> str | None:
        if not self.path.exists():
            return None
        try:
            with self._connect() as db:
                row = db.execute("SELECT value FROM info WHERE key = 'signature'").fetchone()
            return row[0] if row else None
        except sqlite3.DatabaseError:
            return None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    @property
    def indexed(self) -> bool:
        """Whether the database has been loaded (:attr:`info` answers without building)."""
        return self._info is not None

    def check(self, query: Query) -> None:
        """Raises QueryError: as :meth:`query` would, without running it."""
        self._where(query)
        self._order(query)

    @property
    def info(self) -> dict[str, Any]:
        """Settings, summary, graders, facets (:func:`build_index`); builds on first use."""
        if self._info is None:
            self.refresh()
        assert self._info is not None
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

    def _columns(self) -> str:
        return (
            "t.id, t.example_id, t.trial, t.status, t.n_tool, t.n_expected, t.duration, t.tokens_in, "
            "t.tokens_out, t.tokens, t.latency, t.failed, t.first_error, t.first_error_step, "
            "t.first_error_text, t.parent, t.meta" + "".join(f", t.g{i}, t.p{i}" for i in range(len(self.info["graders"])))
        )

    def row(self, example_id: str, trial: int) -> dict[str, Any] | None:
        """The row of one trajectory (as in :meth:`query`), or ``None``."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            r = db.execute(f"SELECT {self._columns()} FROM traj t WHERE t.example_id = ? AND t.trial = ?",
                           (example_id, trial)).fetchone()
        return None if r is None else self._row(r, self.info["graders"])

    def _row(self, r: sqlite3.Row, graders: list[str]) -> dict[str, Any]:
        out = {
            "example_id": r["example_id"],
            "trial": r["trial"],
            "status": r["status"],
            "n_tool_steps": r["n_tool"],
            "n_expected": r["n_expected"],
            "duration_s": r["duration"],
            "input_tokens": r["tokens_in"],
            "output_tokens": r["tokens_out"],
            "tokens": r["tokens"],
            "latency_s": r["latency"],
            "failed": bool(r["failed"]),
            "first_error": (
                {"type": r["first_error"], "step": r["first_error_step"], "text": r["first_error_text"]}
                if r["first_error"] else None
            ),
            "parent": json.loads(r["parent"]) if r["parent"] else None,
            "metadata": json.loads(r["meta"]),
            "scores": {
                g: {"value": r[f"g{i}"], "passed": None if r[f"p{i}"] is None else bool(r[f"p{i}"])}
                for i, g in enumerate(graders)
                if r[f"g{i}"] is not None or r[f"p{i}"] is not None
            },
        }
        return out

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
        graders = self.info["graders"]
        where, params, searching = self._where(query)
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            total = db.execute(f"SELECT count(*) FROM traj t{where}", params).fetchone()[0]
            columns = self._columns()
            found = db.execute(
                f"SELECT {columns} FROM traj t{where}{self._order(query)} LIMIT ? OFFSET ?",
                [*params, query.per_page, (query.page - 1) * query.per_page],
            ).fetchall()
            rows = [self._row(r, graders) for r in found]
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
        graders = self.info["graders"]
        where, params, _ = self._where(query)
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            cursor = db.execute(f"SELECT {self._columns()} FROM traj t{where}{self._order(query)}", params)
            while batch := cursor.fetchmany(500):
                for r in batch:
                    yield self._row(r, graders)

    def trajectory(self, example_id: str, trial: int) -> tuple[Trajectory, list[Score], Example | None] | None:
        """One trajectory, its scores and its example (validated as toolgym records), or
        ``None`` when the run has no such (example, trial)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT r.trajectory, r.scores FROM traj t JOIN record r ON r.id = t.id WHERE t.example_id = ? AND t.trial = ?",
                (example_id, trial),
            ).fetchone()
            if row is None:
                return None
            ex = db.execute("SELECT record FROM example WHERE id = ?", (example_id,)).fetchone()
        traj = Trajectory.model_validate(_unpack(row[0]))
        scores = [Score.model_validate(s) for s in _unpack(row[1])]
        example = Example.model_validate(_unpack(ex[0])) if ex else None
        return traj, scores, example

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


__all__ = ["Query", "QueryError", "RunDirError", "RunIndex", "build_index", "first_error", "summary_of"]

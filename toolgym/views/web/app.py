"""The ``toolgym view`` web application (Starlette, served by uvicorn): the JSON API under
``/api`` (documented in ``docs/view.md``) and the page that uses it.

Safety: every text from a run (model output, tool results, example ids, file names) reaches the
page as JSON and is put on it with ``textContent`` only, under a Content-Security-Policy that
allows the app's own script and nothing inline; the ``Host`` header must name this server (DNS
rebinding); with a token, every request must carry it (``Authorization: Bearer TOKEN``, or the
cookie set by opening ``/?token=TOKEN`` once); the only files served are the app's own assets
and the top-level files of the given run directories, as downloads.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import hmac
import io
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, get_args
from urllib.parse import quote

import orjson

from toolgym.records import Status
from toolgym.runio import LOCK_FILE, RUN_FILE, RunDirError
from toolgym.views.rundata import FIRST_ERROR_TYPES
from toolgym.views.show import observed_milestones_met
from toolgym.views.web.diff import align_steps, milestone_keys
from toolgym.views.web.index import REQUESTS, Query, QueryError, RunIndex, default_cache_dir

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
COOKIE = "toolgym_view_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
FIRST_BATCH_WAIT_S = 10.0
"""How long a request for a run not indexed yet waits for its first batch (seconds)."""

MAX_DEPTH = 4
"""How deep below a given directory run directories are looked for."""

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
"""Cell starts a spreadsheet reads as a formula (OWASP, "CSV Injection")."""


@dataclass(frozen=True)
class ViewSettings:
    """Where and how ``toolgym view`` listens.

    Attributes:
        host: Address to bind; anything but a loopback address needs ``token``.
        port: TCP port (0: any free port).
        token: Secret every request must carry; ``None``: none (loopback only).
        cache_dir: Where run databases are kept (:func:`default_cache_dir`).
        poll_s: Seconds between checks of the run directories for changes (live runs).
        allowed_hosts: ``Host`` header names accepted besides the loopback ones and ``host``
            (``--allow-host``, as ``serve`` has): the names other machines reach this one by
            when it listens on ``0.0.0.0``; a leading ``*.`` admits subdomains. Any other
            ``Host`` gets 400 (DNS rebinding).
    """

    host: str = "127.0.0.1"
    port: int = 8766
    token: str | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    poll_s: float = 1.0
    allowed_hosts: tuple[str, ...] = ()

    def check(self) -> None:
        """Raises ValueError: listening beyond loopback without a token, or an empty token."""
        if self.token is not None and not self.token:
            raise ValueError("--token must not be empty")
        if self.host not in LOOPBACK_HOSTS and self.token is None:
            raise ValueError(
                f"--host {self.host} listens beyond this machine: give --token (open the page as "
                "http://HOST:PORT/?token=TOKEN; scripts send 'Authorization: Bearer TOKEN')"
            )


def find_run_dirs(roots: Iterable[Path]) -> list[Path]:
    """Every run directory (a folder holding ``run.json``) at or below ``roots`` (at most
    :data:`MAX_DEPTH` levels down; hidden folders skipped), resolved, without repeats, in order.

    Raises:
        RunDirError: for a root that does not exist.
    """
    found: dict[Path, None] = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise RunDirError(f"{root}: does not exist")
        if not root.is_dir():
            raise RunDirError(f"{root}: not a directory")
        stack = [(root.resolve(), 0)]
        while stack:
            d, depth = stack.pop()
            if (d / RUN_FILE).is_file():
                found[d] = None
                continue
            if depth >= MAX_DEPTH:
                continue
            try:
                children = sorted((p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True)
            except OSError:
                continue
            stack.extend((c, depth + 1) for c in children)
    return list(found)


def being_written(directory: Path) -> bool:
    """Whether a run is writing to ``directory`` now (it holds the run's lock file,
    :func:`toolgym.runio.locked_run_dir`)."""
    lock = directory / LOCK_FILE
    if not lock.exists():
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        with open(lock, "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


class Catalog:
    """The runs found under the given directories, each with its :class:`RunIndex`, named by
    its directory's name (made unique with ``-2``, ``-3``...; a name never changes while the
    server runs)."""

    def __init__(self, roots: Sequence[Path], cache_dir: Path) -> None:
        self.roots = [Path(r) for r in roots]
        self.cache_dir = Path(cache_dir)
        self.indexes: dict[str, RunIndex] = {}
        self.errors: dict[str, str] = {}
        self._names: dict[Path, str] = {}
        self.scan()

    def scan(self) -> None:
        """Look for run directories again (a run started after the server shows up)."""
        for d in find_run_dirs(self.roots):
            if d in self._names:
                continue
            name, n = d.name, 1
            while name in self.indexes:
                n += 1
                name = f"{d.name}-{n}"
            self._names[d] = name
            self.indexes[name] = index = RunIndex(d, self.cache_dir)
            try:
                index.load_cached()  # up-to-date caches are ready at once; the others build in the background
            except (RunDirError, OSError, ValueError):
                pass

    def name_of(self, run: str) -> str | None:
        """The name of a run given by name or by directory (as a fork's ``parent`` records it),
        or ``None`` when it is not one of the runs served."""
        if run in self.indexes:
            return run
        try:
            return self._names.get(Path(run).resolve())
        except (OSError, ValueError):
            return None

    def get(self, name: str) -> RunIndex:
        """The run called ``name``.

        Raises:
            KeyError: when there is none.
        """
        return self.indexes[name]

    def refresh(self, name: str) -> bool:
        """Start indexing one run (in the background) if its files changed; a failure is kept
        in :attr:`errors` (shown by ``/api/runs``) rather than raised."""
        index = self.indexes[name]
        try:
            started = index.refresh()
        except (RunDirError, OSError, ValueError) as exc:
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            return False
        if index.error is not None:
            self.errors[name] = index.error
        else:
            self.errors.pop(name, None)
        return started


# --- responses --------------------------------------------------------------------------------


def _json(data: Any, status: int = 200) -> Any:
    from starlette.responses import Response

    return Response(
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY),
        status_code=status, media_type="application/json",
    )


def _error(status: int, message: str) -> Any:
    return _json({"error": message}, status)


def neutralise(value: Any) -> Any:
    """A CSV cell safe to open in a spreadsheet: text starting with ``=``, ``+``, ``-``, ``@``,
    a tab or a line break gets a leading ``'`` so it is read as text, not run as a formula
    (OWASP, "CSV Injection"); numbers and everything else are returned as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


STATUSES = get_args(Status)
"""The trajectory statuses a ``status`` filter may name."""

FIRST_ERRORS = (*FIRST_ERROR_TYPES, "none")
"""What a ``first_error`` filter may name (:data:`toolgym.views.rundata.FIRST_ERROR_TYPES`;
``none``: rows without one)."""


MAX_QUERY_INT = 10**15
"""The largest integer a query parameter or path may give (a page, a token bound, a trial):
far above any run, and small enough that SQLite's 64-bit integers hold it times a page size
(a larger one answered 500 with an ``OverflowError``)."""


def _query_of(params: Any) -> Query:
    def number(name: str, kind: type) -> Any:
        raw = params.get(name)
        if raw in (None, ""):
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise QueryError(f"{name}: {raw!r} is not a number") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise QueryError(f"{name}: {raw!r} is not a finite number")
        if isinstance(value, int) and not -MAX_QUERY_INT <= value <= MAX_QUERY_INT:
            raise QueryError(f"{name}: {raw!r} is out of range (at most {MAX_QUERY_INT:,} either way)")
        return value

    def listed(name: str, known: tuple[str, ...] | None = None) -> tuple[str, ...]:
        values = tuple(v for raw in params.getlist(name) for v in raw.split(",") if v)
        unknown = [v for v in values if known is not None and v not in known]
        if unknown:
            raise QueryError(f"{name}: {unknown[0]!r} is not one of {', '.join(known or ())}")
        return values

    metadata = tuple((k[len("meta."):], v) for k, v in params.multi_items() if k.startswith("meta.") and v != "")
    page, per_page = number("page", int), number("per_page", int)
    return Query(
        q=params.get("q", ""),
        status=listed("status", STATUSES),
        grader=params.get("grader") or None,
        passed=params.get("passed") or None,
        first_error=listed("first_error", FIRST_ERRORS),
        metadata=metadata,
        min_duration=number("min_duration", float),
        max_duration=number("max_duration", float),
        min_tokens=number("min_tokens", int),
        max_tokens=number("max_tokens", int),
        sort=params.get("sort") or "order",
        descending=params.get("order", "asc") == "desc",
        page=1 if page is None else page,
        per_page=50 if per_page is None else per_page,
    )


CSV_COLUMNS = ("example_id", "trial", "status", "failed", "first_error", "first_error_step", "first_error_text",
               "n_tool_steps", "n_expected", "duration_s", "input_tokens", "output_tokens", "tokens", "latency_s")


def csv_lines(rows: Iterable[dict[str, Any]], graders: Sequence[str]) -> Iterable[str]:
    """The rows as CSV text (RFC 4180, a header line first), every text cell neutralised
    (:func:`neutralise`); a grader gives two columns, ``GRADER`` (value) and ``GRADER.passed``."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([*CSV_COLUMNS, *(c for g in graders for c in (g, f"{g}.passed")), "metadata"])
    for row in rows:
        fe = row["first_error"] or {}
        values = [
            row["example_id"], row["trial"], row["status"], int(row["failed"]), fe.get("type"), fe.get("step"),
            fe.get("text"), *(row[c] for c in CSV_COLUMNS[7:]),
        ]
        for g in graders:
            s = row["scores"].get(g)
            values += [None, None] if s is None else [s["value"], None if s["passed"] is None else int(s["passed"])]
        values.append(json.dumps(row["metadata"], ensure_ascii=False) if row["metadata"] else None)
        writer.writerow([neutralise(v) for v in values])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    if buf.tell():
        yield buf.getvalue()


def _parse_ref(ref: str | None, what: str) -> tuple[str, str, int]:
    if not ref:
        raise QueryError(f"{what}: give RUN/EXAMPLE_ID/TRIAL")
    run, sep, rest = ref.partition("/")
    example_id, sep2, trial = rest.rpartition("/")
    if not sep or not sep2 or not trial.isdigit() or len(trial) > 15:
        raise QueryError(f"{what}: {ref!r} is not RUN/EXAMPLE_ID/TRIAL (a trial of at most 15 digits)")
    return run, example_id, int(trial)


def _states_after(traj: Any) -> list[Any] | None:
    import toolgym

    fn = getattr(toolgym, "states_after", None)
    if fn is None or getattr(traj, "initial_state", None) is None:
        return None
    try:
        return list(fn(traj))
    except Exception as exc:  # a patch that does not apply: shown as missing, not a crash
        log.warning("states_after failed: %s", exc)
        return None


def trajectory_detail(
    run: str, index: RunIndex, example_id: str, trial: int, catalog: Catalog | None = None
) -> dict[str, Any] | None:
    """The document of ``GET /api/runs/{run}/trajectories/{example_id}/{trial}``: the trajectory
    record as stored (every field, ``steps`` whole), its scores (with ``passed``), its example,
    the first error, and on each step: ``index`` (0-based among all steps), on tool steps
    ``tool_index`` (0-based among tool steps), ``milestone`` (the milestone the alignment
    matched), ``label`` (the ``trajectory_match`` alignment row), ``state_milestones_met`` (the
    state milestones first met, and held from then on, after this step) and ``state_after``
    (when the run recorded state patches); ``state_milestones_met_at_start`` those met before
    any step; ``None`` when there is no such trajectory."""
    found = index.trajectory(example_id, trial)
    if found is None:
        return None
    traj, scores, example = found
    doc = traj.model_dump(mode="json")
    match = next((s for s in scores if s.grader == "trajectory_match"), None)
    labels = match.details.get("alignment") if match is not None else None
    milestones = milestone_keys(traj, scores)
    states = _states_after(traj)
    # tool steps after which a milestone no step matched was met (a state, a text, a result) → (kind, id)
    observed = observed_milestones_met(match.details if match is not None else {})
    met = {k: [mid for kind, mid in found if kind == "state"] for k, found in observed.items()}
    tool_i = 0
    for i, step in enumerate(doc["steps"]):
        step["index"] = i
        if step["kind"] == "tool":
            step["tool_index"] = tool_i
            step["milestone"] = milestones[tool_i]
            step["state_milestones_met"] = met.get(tool_i + 1, [])
            step["milestones_met"] = [{"kind": kind, "id": mid} for kind, mid in observed.get(tool_i + 1, [])]
            if isinstance(labels, list) and tool_i < len(labels):
                step["label"] = labels[tool_i]
            if states is not None and tool_i < len(states):
                step["state_after"] = states[tool_i]
            tool_i += 1
    row = index.row(example_id, trial) or {}
    passed = {g: v["passed"] for g, v in row.get("scores", {}).items()}
    return {
        "run": run,
        "trajectory": doc,
        "scores": [{**s.model_dump(mode="json"), "passed": passed.get(s.grader)} for s in scores],
        "example": example.model_dump(mode="json", exclude_defaults=True) if example is not None else None,
        "first_error": row.get("first_error"),
        "state_milestones_met_at_start": met.get(0, []),
        "milestones_met_at_start": [{"kind": kind, "id": mid} for kind, mid in observed.get(0, [])],
        "row": row,
        "parent_ref": _parent_ref(doc.get("parent"), catalog),
    }


def _parent_ref(parent: Any, catalog: Catalog | None) -> str | None:
    if not isinstance(parent, dict) or catalog is None:
        return None
    name = catalog.name_of(str(parent.get("run")))
    if name is None:
        return None
    return f"{name}/{parent.get('example_id')}/{parent.get('trial', 0)}"


# --- the application -----------------------------------------------------------------------------


def create_app(roots: Sequence[Path], settings: ViewSettings) -> Any:
    """The Starlette application over the run directories found under ``roots``.

    Raises:
        RunDirError: for a root that does not exist.
        ValueError: as :meth:`ViewSettings.check`.
    """
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import FileResponse, RedirectResponse, Response, StreamingResponse
    from starlette.routing import Route

    settings.check()
    catalog = Catalog(roots, settings.cache_dir)
    assets = resources.files("toolgym.views.web")

    async def watch() -> None:
        while True:
            await run_in_threadpool(catalog.scan)
            for name in list(catalog.indexes):
                await run_in_threadpool(catalog.refresh, name)
            await asyncio.sleep(settings.poll_s)

    @asynccontextmanager
    async def lifespan(app: Any):
        task = asyncio.create_task(watch())
        try:
            yield
        finally:
            task.cancel()

    async def index_of(name: str) -> RunIndex | None:
        try:
            idx = catalog.get(name)
        except KeyError:
            return None
        if not idx.indexed:  # the first open: answer from the first batch, as soon as it is in
            await run_in_threadpool(catalog.refresh, name)
            await run_in_threadpool(idx.wait, FIRST_BATCH_WAIT_S, True)
            catalog.refresh(name)  # records a build's error
        return idx if idx.indexed else None

    def run_doc(name: str, idx: RunIndex, full: bool = False) -> dict[str, Any]:
        info = idx.info if idx.indexed else None
        doc: dict[str, Any] = {
            "name": name,
            "directory": str(idx.directory),
            "live": being_written(idx.directory),
            "version": idx.version,
            "error": catalog.errors.get(name),
            "indexed": info is not None and idx.indexing is None,
            "indexing": idx.indexing,
        }
        if info is not None:
            doc.update(
                label=info["label"], settings=info["settings"], summary=info["summary"], graders=info["graders"],
                measures=info["measures"], n_trajectories=info["n_trajectories"], problem=info["problem"],
            )
            if full:
                doc.update(facets=info["facets"], metadata=info["metadata"], build=info.get("build"))
        return doc

    async def page(request: Request) -> Response:
        if settings.token is not None and request.query_params.get("token") is not None:
            # the token was checked by _Guard: keep it in a cookie and drop it from the address
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, settings.token, httponly=True, samesite="strict")
            return response
        return Response(assets.joinpath("view.html").read_text(encoding="utf-8"), media_type="text/html")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        types = {"view.js": "text/javascript", "view.css": "text/css"}
        if name not in types:
            return Response("not found\n", status_code=404, media_type="text/plain")
        return Response(assets.joinpath(name).read_text(encoding="utf-8"), media_type=types[name])

    async def api_runs(request: Request) -> Response:
        await run_in_threadpool(catalog.scan)
        return _json({"runs": [run_doc(n, i) for n, i in catalog.indexes.items()]})

    async def api_run(request: Request) -> Response:
        name = request.path_params["run"]
        idx = await index_of(name)
        if idx is None:
            return _error(404, catalog.errors.get(name) or f"no run {name!r}")
        return _json(run_doc(name, idx, full=True))

    async def api_trajectories(request: Request) -> Response:
        name = request.path_params["run"]
        idx = await index_of(name)
        if idx is None:
            return _error(404, catalog.errors.get(name) or f"no run {name!r}")
        try:
            query = _query_of(request.query_params)
            fmt = request.query_params.get("format", "json")
            if fmt == "json":
                result = await run_in_threadpool(idx.query, query)
                indexing = idx.indexing
                return _json({"run": name, "version": idx.version, "indexing": indexing, "partial": indexing is not None,
                              **result})
            idx.check(query)  # refuse bad parameters before the download starts
        except QueryError as exc:
            return _error(400, str(exc))
        filename = quote(f"{name}.{fmt}")
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{filename}"}
        if fmt == "csv":
            lines = csv_lines(idx.iter_rows(query), idx.info["graders"])
            return StreamingResponse(iterate_in_threadpool(iter(lines)), media_type="text/csv; charset=utf-8",
                                     headers=headers)
        if fmt == "jsonl":
            lines = (orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in idx.iter_rows(query))
            return StreamingResponse(iterate_in_threadpool(lines), media_type="application/x-ndjson", headers=headers)
        return _error(400, f"format: {fmt!r} is not one of json, csv, jsonl")

    async def api_trajectory(request: Request) -> Response:
        name = request.path_params["run"]
        idx = await index_of(name)
        if idx is None:
            return _error(404, catalog.errors.get(name) or f"no run {name!r}")
        eid, trial = request.path_params["example_id"], request.path_params["trial"]
        if not 0 <= trial <= MAX_QUERY_INT:
            return _error(404, f"run {name!r} has no trajectory {eid!r} trial {trial}")
        doc = await run_in_threadpool(trajectory_detail, name, idx, eid, trial, catalog)
        if doc is None:
            return _error(404, f"run {name!r} has no trajectory {eid!r} trial {trial}")
        env = doc["trajectory"].get("env")
        names = [other for other in catalog.indexes if other != name]
        indexes = await asyncio.gather(*(index_of(other) for other in names))  # their first batches, waited together
        others = []  # the runs a side by side can be shown with: they hold this example and trial
        for other, other_idx in zip(names, indexes, strict=True):
            if other_idx is not None and await run_in_threadpool(other_idx.holds, env, eid, trial):
                others.append(other)
        doc["same_example_in"] = others
        return _json(doc)

    async def api_diff(request: Request) -> Response:
        try:
            ra, ea, ta = _parse_ref(request.query_params.get("a"), "a")
            rb, eb, tb = _parse_ref(request.query_params.get("b"), "b")
        except QueryError as exc:
            return _error(400, str(exc))
        docs = []
        for run, eid, trial in ((ra, ea, ta), (rb, eb, tb)):
            idx = await index_of(run)
            if idx is None:
                return _error(404, f"no run {run!r}")
            found = await run_in_threadpool(idx.trajectory, eid, trial)
            if found is None:
                return _error(404, f"run {run!r} has no trajectory {eid!r} trial {trial}")
            docs.append((run, idx, found))
        (_, _, (traj_a, sa, _)), (_, _, (traj_b, sb, _)) = docs
        method, pairs = align_steps(traj_a, sa, traj_b, sb)
        sides = []
        for run, idx, (traj, _, _) in docs:
            detail = await run_in_threadpool(trajectory_detail, run, idx, traj.example_id, traj.trial, catalog)
            sides.append(detail)
        return _json({"a": sides[0], "b": sides[1], "method": method, "pairs": pairs,
                      "same": all(p["status"] == "same" for p in pairs)})

    async def api_compare(request: Request) -> Response:
        a, b = request.query_params.get("a"), request.query_params.get("b")
        ia, ib = (await index_of(a or "")), (await index_of(b or ""))
        if ia is None or ib is None:
            return _error(404, f"no run {a if ia is None else b!r}")
        common = [g for g in ia.info["graders"] if g in ib.info["graders"] and ia.info["measures"][g]["pass_fail"]]
        if not common:
            return _error(400, f"runs {a!r} and {b!r} share no pass/fail grader")
        grader = request.query_params.get("grader") or common[0]
        if grader not in common:
            return _error(400, f"grader: {grader!r} is not a pass/fail grader of both runs ({', '.join(common)})")
        oa, ob = await run_in_threadpool(ia.outcomes, grader), await run_in_threadpool(ib.outcomes, grader)
        groups: dict[str, list[str]] = {"both_pass": [], "only_a": [], "only_b": [], "both_fail": [], "unpaired": []}
        for eid in list(dict.fromkeys([*oa, *ob])):
            pa, pb = oa.get(eid), ob.get(eid)
            key = ("unpaired" if pa is None or pb is None else "both_pass" if pa and pb
                   else "only_a" if pa else "only_b" if pb else "both_fail")
            groups[key].append(eid)
        limit = 500
        test = await run_in_threadpool(_paired_test, ia, ib, grader)
        return _json({
            "a": a, "b": b, "grader": grader, "graders": common, "test": test,
            "counts": {k: len(v) for k, v in groups.items()},
            "examples": {k: v[:limit] for k, v in groups.items()}, "limit": limit,
        })

    async def api_files(request: Request) -> Response:
        name = request.path_params["run"]
        try:
            idx = catalog.get(name)
        except KeyError:
            return _error(404, f"no run {name!r}")
        files = sorted(p for p in idx.directory.iterdir()
                       if p.is_file() and not p.name.startswith(".") and _inside(p, idx.directory))
        wanted = request.path_params.get("name")
        if wanted is None:
            return _json({"run": name, "files": [{"name": p.name, "bytes": p.stat().st_size} for p in files]})
        match = next((p for p in files if p.name == wanted), None)
        if match is None:
            return _error(404, f"run {name!r} has no file {wanted!r}")
        return FileResponse(match, media_type="application/octet-stream", filename=match.name)

    routes = [
        Route("/", page),
        Route("/static/{name}", asset),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/runs", api_runs),
        Route("/api/runs/{run}", api_run),
        Route("/api/runs/{run}/trajectories", api_trajectories),
        Route("/api/runs/{run}/trajectories/{example_id:path}/{trial:int}", api_trajectory),
        Route("/api/runs/{run}/files", api_files),
        Route("/api/runs/{run}/files/{name}", api_files),
        Route("/api/diff", api_diff),
        Route("/api/compare", api_compare),
        Route("/api/{rest:path}", lambda request: _error(404, f"no API path {request.url.path!r} (docs/view.md)")),
    ]
    hosts = [*LOOPBACK_HOSTS, "[::1]"]
    if settings.host not in hosts:
        hosts.append(settings.host)
    hosts += [h.rsplit(":", 1)[0] if h.count(":") == 1 else h for h in settings.allowed_hosts]  # the middleware drops ports
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts), Middleware(_Guard, token=settings.token)]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.catalog = catalog
    return app


def _inside(path: Path, directory: Path) -> bool:
    """Whether ``path``, its links followed, stays in ``directory`` (a link that leaves the
    run directory, say to ``/etc/passwd``, is neither listed nor served)."""
    try:
        return path.resolve(strict=True).is_relative_to(directory.resolve(strict=True))
    except OSError:
        return False


def _paired_test(ia: RunIndex, ib: RunIndex, grader: str) -> dict[str, Any] | None:
    """The paired test of ``toolgym compare`` (:func:`toolgym.views.analysis.compare_runs`) for
    ``grader``: reads both runs in full, so it costs what ``compare`` costs."""
    from toolgym.views.analysis import compare_runs

    try:
        comparison = compare_runs(ia.directory, ib.directory)
    except (RunDirError, ValueError) as exc:
        return {"error": str(exc)}
    row = next((r for r in comparison.graders if r.grader == grader), None)
    if row is None:
        return None
    return {"mean_a": row.mean_a, "mean_b": row.mean_b, "n_paired": row.n_paired, "better": row.better,
            **dataclasses.asdict(row.test)}


class _Guard:
    """ASGI middleware: the security headers on every response, and the token check."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app, self.token = app, token

    def _authorised(self, scope: dict[str, Any]) -> bool:
        if self.token is None:
            return True
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given = None
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        else:
            for part in headers.get("cookie", "").split(";"):
                k, _, v = part.strip().partition("=")
                if k == COOKIE:
                    given = v
        if given is None and scope.get("path") == "/":
            from urllib.parse import parse_qs

            given = (parse_qs(scope.get("query_string", b"").decode()).get("token") or [None])[0]
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        if not self._authorised(scope):
            body = b"401: this server needs its token: open /?token=TOKEN or send 'Authorization: Bearer TOKEN'\n"
            await send_with_headers({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"www-authenticate", b"Bearer"),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        with REQUESTS.serving():  # a build in the background gives way while a request is answered
            await self.app(scope, receive, send_with_headers)


def serve(roots: Sequence[Path], settings: ViewSettings, open_browser: bool = True, ready: Any = None) -> None:
    """Run the server until interrupted: bind, print the address, open the browser (unless
    ``open_browser`` is false), serve.

    Args:
        roots: Directories holding run directories (or run directories themselves).
        settings: Where to listen.
        open_browser: Open the page in the default browser.
        ready: Called with the page's URL once listening (the command line prints it).

    Raises:
        ValueError: as :meth:`ViewSettings.check`.
        RunDirError: for a root that does not exist.
        OSError: when the port cannot be bound.
    """
    import socket

    import uvicorn

    app = create_app(roots, settings)
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError:
        sock.close()  # the address is taken: nothing is left open behind the error
        raise
    sock.listen(128)  # connections made as soon as the address is printed wait for the server
    port = sock.getsockname()[1]
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    url = f"http://{shown}:{port}/"
    if settings.token is not None:
        url += f"?token={quote(settings.token)}"
    config = uvicorn.Config(app, log_level=os.environ.get("TOOLGYM_VIEW_LOG", "warning"), lifespan="on")
    server = uvicorn.Server(config)
    if ready is not None:
        ready(url)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    server.run(sockets=[sock])

"""Run directories: ``run.json`` (the typed :class:`RunRecord`, read and written here and
nowhere else), ``trajectories.jsonl`` (appended, flushed per line) and ``scores.jsonl``;
reading them back tolerates a torn last line left by a killed run."""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeVar, get_args, get_origin

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticSerializationError

from toolgym.records import (
    Example,
    Measure,
    ModelStep,
    Score,
    TokenRecord,
    ToolCall,
    ToolCallSpec,
    ToolStep,
    Trajectory,
    UserSpec,
    UserStep,
    without_surrogates,
)

RUN_FILE = "run.json"
TRAJECTORIES_FILE = "trajectories.jsonl"
SCORES_FILE = "scores.jsonl"

M = TypeVar("M", bound=BaseModel)

IMPORTED_AGENT = "imported"
"""The agent of a run read from a result file (``grade --result``): ``run.json``'s
``agent.agent`` and its trajectories' ``agent``."""

RECORD_FILES = (RUN_FILE, TRAJECTORIES_FILE, SCORES_FILE, "examples.jsonl")
"""The files that make a run directory's record (``examples.jsonl``: examples given in memory)."""


def refuse_run_file(path: str | Path, what: str = "the output", directories: Iterable[str | Path] = ()) -> None:
    """Refuse to write ``path`` when it is one of a run directory's record files
    (:data:`RECORD_FILES` beside a ``run.json``), or the dataset or the imported result file of
    one of ``directories`` (the runs being read): an export, report or dataset written there
    would destroy the run it may have been read from.

    Raises:
        RunDirError: naming the file and the run directory.
    """
    path = Path(path)
    if path.name in RECORD_FILES and (path.parent / RUN_FILE).is_file():
        raise RunDirError(f"{path}: {what} would overwrite a record file of the run directory {path.parent}; "
                          "nothing was written (give another path)")
    if not path.exists():
        return
    for directory in directories:
        try:
            record = read_run(Path(directory))
        except RunDirError:
            continue  # the caller reports an unreadable run
        for kind, other in (("dataset", record.dataset.path), ("imported result file", record.result_file and record.result_file.path)):
            if other and _same_path(path, Path(other)):
                raise RunDirError(f"{path}: {what} would overwrite the {kind} of the run {directory}; nothing was "
                                  "written (give another path)")


def _same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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
            err = exc.errors()[0]
            where = ".".join(map(str, err["loc"])) or "record"
            raise RunDirError(f"{path}:{lineno}: invalid record: field {where}: {err['msg']}") from None
    return records


class JsonlAppender:
    """Appends records to a JSONL file, one line each, flushed as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "ab")

    def write(self, record: BaseModel) -> None:
        """Append one record (:func:`record_line`) and flush it to the operating system."""
        self._fh.write(record_line(record))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open ``PATH.tmp`` for writing; when the block ends, rename it over ``path`` (readers see
    the old file or the new one, never half of it). When anything fails (a full disk, Ctrl-C, a
    bug while writing) the temporary file is removed and ``path`` left as it was.

    Args:
        path: The file to write (its directory must exist).
        mode: ``"w"`` (UTF-8 text) or ``"wb"``.

    Raises:
        IsADirectoryError: when ``path`` is a directory (named, before anything is written).
        OSError: as the file system reports it (a read-only directory, a missing parent).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory; give a file name", str(path))
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as fh:
        fh.write(text)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and rename (never half-written)."""
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


_PLAIN: dict[type[BaseModel], tuple[str, ...]] = {
    Trajectory: ("duration_s",), ModelStep: ("latency_s",), ToolStep: (), ToolCall: (), Score: ("value",),
    TokenRecord: ("completion_logprobs",), Example: (), ToolCallSpec: (), UserStep: ("latency_s",), UserSpec: (),
}
"""Record classes whose JSON is their fields in declaration order (no alias, serializer,
computed or excluded field), with their fields typed float (pydantic writes an int there as
a float: such a record is left to pydantic)."""

_FAST = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS

_NO_DEFAULT = object()


def _is_tag(annotation: Any) -> bool:
    """Whether a field's type is one literal value (a discriminator such as a step's ``kind``)."""
    return get_origin(annotation) is Literal and len(get_args(annotation)) == 1


def _field_defaults(cls: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """``(name, declared default)`` of each field of ``cls`` in declaration order;
    :data:`_NO_DEFAULT` for a required field or a tag (both always written)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = tuple(
            (name, _NO_DEFAULT if info.is_required() or _is_tag(info.annotation) else info.get_default(call_default_factory=True))
            for name, info in cls.model_fields.items()
        )
        _DEFAULTS[cls] = found
    return found


_DEFAULTS: dict[type[BaseModel], tuple[tuple[str, Any], ...]] = {}


def is_default(value: Any, default: Any) -> bool:
    """Whether a field's ``value`` is its declared ``default`` (then the record omits it):
    the same type and an equal value; ``None`` only for ``None``, ``False`` only for
    ``False`` (never ``0``), ``0.0`` only for ``0.0`` (not ``-0.0``), ``[]`` only for an
    empty list (so a ``None``-default field holding ``[]`` is kept)."""
    if default is None:
        return value is None
    if type(value) is not type(default):
        return False
    if type(value) is float:
        return value == default and math.copysign(1.0, value) == math.copysign(1.0, default)
    return bool(value == default)


def _condition(name: str, default: Any) -> str:
    """Python source testing that the local ``v`` is not ``default`` (see :func:`is_default`)."""
    if default is None:
        return "v is not None"
    if default is False or default is True:
        return f"v is not {default}"
    if type(default) is float:
        return f"not (type(v) is float and v == {default!r} and copysign(1.0, v) == {math.copysign(1.0, default)!r})"
    if type(default) in (int, str) and default == default:
        return f"not (type(v) is {type(default).__name__} and v == {default!r})"
    if type(default) in (list, dict) and not default:
        return f"not (type(v) is {type(default).__name__} and not v)"
    return f"not is_default(v, DEFAULTS[{name!r}])"


def _encoder(cls: type[BaseModel]) -> Callable[[Any], dict[str, Any]]:
    """A function from a record of ``cls`` to the dict its line holds: its fields in declaration
    order, without those holding their declared default (:func:`is_default`); raises
    ``TypeError`` when a float field holds anything but floats (pydantic writes an int there as
    a float, so such a record is left to pydantic). Generated once per class: the fast path
    of :func:`record_line` runs it for every record and every step."""
    floats = _PLAIN[cls]
    defaults = dict(_field_defaults(cls))
    lines = ["def encode(obj):", "    d = obj.__dict__", "    r = {}"]
    for name, default in defaults.items():
        lines.append(f"    v = d[{name!r}]")
        if name in floats:
            lines.append("    if type(v) is not float and v is not None and (type(v) is not list or any(type(x) is not float for x in v)):")
            lines.append(f"        raise TypeError({name + ': not a float'!r})")
        if default is _NO_DEFAULT:
            lines.append(f"    r[{name!r}] = v")
        else:
            lines.append(f"    if {_condition(name, default)}:")
            lines.append(f"        r[{name!r}] = v")
    lines.append("    return r")
    namespace: dict[str, Any] = {"copysign": math.copysign, "is_default": is_default, "DEFAULTS": defaults}
    exec("\n".join(lines), namespace)  # noqa: S102 - source built above from the class's own field names
    return namespace["encode"]


_ENCODERS: dict[type[BaseModel], Callable[[Any], dict[str, Any]]] = {}


def _fields(obj: Any) -> dict[str, Any]:
    encode = _ENCODERS.get(type(obj))
    if encode is None:
        if type(obj) not in _PLAIN:
            raise TypeError(type(obj).__name__)
        encode = _ENCODERS[type(obj)] = _encoder(type(obj))
    lean = encode(obj)
    if type(obj) is Trajectory and lean.get("source_line") is not None:
        at = _line_step(obj)
        if at is not None:  # the imported line is the result file's, not the record's
            steps = list(lean["steps"])
            step = _fields(steps[at])
            step.pop("text", None)
            steps[at] = step
            lean["steps"] = steps
        if _is_origin(obj):
            del lean["final_state"]
    return lean


ORIGIN = "result_file"
"""The ``final_state`` key of an imported trajectory's origin, ``{"file": path, "line": N}``."""


def _is_origin(trajectory: Trajectory) -> bool:
    """Whether an imported trajectory's ``final_state`` is only its origin, ``{"result_file":
    {"file": path, "line": source_line}}``: the record leaves it out, since ``run.json`` names
    the file and ``source_line`` the line (:func:`restore_line` puts it back)."""
    state = trajectory.final_state
    if len(state) != 1:
        return False
    origin = state.get(ORIGIN)
    return (type(origin) is dict and len(origin) == 2 and type(origin.get("file")) is str
            and origin.get("line") == trajectory.source_line)


def _line_step(trajectory: Trajectory) -> int | None:
    """The index of the first model step of an imported trajectory (its text is the line)."""
    return next((i for i, s in enumerate(trajectory.steps) if s.kind == "model"), None)


def omitted_defaults(record: BaseModel) -> dict[str, Any]:
    """The fields of ``record`` (and of the models nested in it, in fields and lists) that
    hold their declared default (and an imported trajectory's line, see :func:`record_line`), as pydantic's ``exclude`` argument takes them
    (``{"trial": True, "steps": {0: {"text": True}}}``): what a record line leaves out.

    Tags (a field typed as one literal value, such as a step's ``kind``, which tells the
    reader which record it is) and required fields are never left out.
    """
    exclude: dict[Any, Any] = {}
    values = record.__dict__
    for name, default in _field_defaults(type(record)):
        value = values.get(name, _NO_DEFAULT)
        if default is not _NO_DEFAULT and is_default(value, default):
            exclude[name] = True
        elif isinstance(value, BaseModel):
            inner = omitted_defaults(value)
            if inner:
                exclude[name] = inner
        elif isinstance(value, list | tuple):
            inner_items = {i: sub for i, v in enumerate(value) if isinstance(v, BaseModel) and (sub := omitted_defaults(v))}
            if inner_items:
                exclude[name] = inner_items
    if isinstance(record, Trajectory) and record.source_line is not None:
        at = _line_step(record)
        if at is not None:
            steps = exclude.setdefault("steps", {})
            if steps is not True:
                step = steps.setdefault(at, {})
                if step is not True:
                    step["text"] = True
        if _is_origin(record):
            exclude["final_state"] = True
    return exclude


def record_line(record: BaseModel) -> bytes:
    """A record's JSON line (newline included, UTF-8): ``record.model_dump_json(exclude=
    omitted_defaults(record))``, i.e. every field except those holding their declared default
    (:func:`omitted_defaults`); reading the line back (``model_validate_json``) gives an equal
    record, the defaults filled in.

    The core records (:class:`Trajectory`, :class:`Score`, their steps and calls, examples) are
    encoded by orjson (github.com/ijl/orjson) from their fields, 2-3 times faster, whenever
    their values are plain JSON (dicts with string keys, lists, tuples, strings, 64-bit
    integers, floats, booleans, ``None``); a record holding anything else (a datetime, bytes,
    a set, a subclass of a built-in type, a larger integer, another model), and any other
    model, is encoded by pydantic. ``tests/test_record_lines.py`` compares both, byte for byte.
    """
    if type(record) in _PLAIN:
        try:
            return orjson.dumps(_fields(record), default=_fields, option=_FAST)
        except TypeError:
            pass
    try:
        return record.__pydantic_serializer__.to_json(record, exclude=omitted_defaults(record)) + b"\n"
    except PydanticSerializationError as exc:
        if "surrogates not allowed" not in str(exc):
            raise
    # a lone surrogate that reached a record (a model's text, a tool's output): written as
    # U+FFFD (:func:`toolgym.records.without_surrogates`) rather than losing the record
    cleaned = type(record).model_validate(without_surrogates(record.model_dump()))
    return cleaned.__pydantic_serializer__.to_json(cleaned, exclude=omitted_defaults(cleaned)) + b"\n"


def write_jsonl_atomic(path: Path, records: list[BaseModel]) -> None:
    """Write records as JSON Lines (:func:`record_line` each) through a temporary file and rename."""
    with atomic_file(path, "wb") as fh:
        fh.writelines(map(record_line, records))


RUN_SCHEMA_VERSION = 5
"""The ``schema_version`` of the run directories this toolgym writes (recorded in ``run.json``).

* 5: as 4, and the record lines may hold what multi-turn episodes and the honest-status work
  added: user steps (``kind: "user"``), ``turn_states`` and ``user_model`` on trajectories, the
  statuses ``abandoned`` and ``repeat_limit``, and ``compares`` on measures; examples may hold
  ``turns``, ``user``, ``expected_states`` and ``allowed_changes``. A toolgym reading version 4
  would refuse such lines with a field error deep in a file, so it refuses version 5 by its
  version, naming it.
* 4: as 3, and an imported trajectory whose ``final_state`` is only its origin (``{"result_file":
  {"file", "line"}}``, the file ``run.json`` references and the line ``source_line`` names)
  leaves it out; readers put it back (:func:`restore_line`). A toolgym reading version 3
  would take such a trajectory for one played by an agent, so it refuses version 4.
* 3: record lines (trajectories, scores, examples) omit every field holding its declared
  default (:func:`record_line`), an imported result file is referenced (``result_file``) and
  its trajectories name their line (``source_line``) instead of copying it, and graders leave
  out the details of passing scores (``Grader.kept_details``).
* 2: every field of every record line written; read as before (the lines hold their defaults).
* 1: no ``schema_version`` key (toolgym before the public API); the fields of version 2
  without ``extensions`` and ``measures``.
"""


class ResultFileRef(BaseModel):
    """The result file a run was imported from (``grade --result``), referenced, not copied.

    Attributes:
        path: Its absolute path at the import.
        size: Its size in bytes then.
        sha256: The SHA-256 of its bytes then (hex); a file whose size or digest differs has
            changed since the import.
    """

    model_config = ConfigDict(extra="forbid")

    path: str
    size: int
    sha256: str


class ExtensionRef(BaseModel):
    """How a run found one of its parts (environment, agent, model provider, grader), so that
    ``grade``, ``show`` and ``--resume`` load the same one again.

    Attributes:
        spec: What to look up again: a registered name (``typewriter_1``), ``module.path:Name``
            or ``/abs/path/file.py:Name``.
        source: Where it came from, for people: ``built-in``, ``suite typewriter``,
            ``entry point toolgym.environments (mycorp-envs 1.2)``, ``module``, ``file``.
        distribution: The installed distribution that provides it, if any.
        version: That distribution's version.
    """

    model_config = ConfigDict(extra="forbid")

    spec: str
    source: str = "built-in"
    distribution: str | None = None
    version: str | None = None


class DatasetRef(BaseModel):
    """The dataset a run read: its path (absolute), sha256 of the file and example count;
    ``path`` is ``None`` for examples given in memory."""

    path: str | None = None
    sha256: str | None = None
    n_examples: int = 0


class RunRecord(BaseModel):
    """``run.json``: everything needed to reproduce a run and to read it back.

    Attributes:
        schema_version: :data:`RUN_SCHEMA_VERSION` when written by this toolgym.
        env: The environment's name (the one in every trajectory's ``env``).
        agent: The agent's settings, ``{"agent": name, "max_steps": N, ...}``.
        model: The model spec (``None`` for agents without a model).
        model_settings: Temperature, seed, token limit, retries (never an API key).
        dataset: The dataset read.
        graders: Grader names run by default by ``grade``.
        grader_settings: Grader settings (``judge_model``, ``judge_cache``).
        measures: What each grader measures (:class:`~toolgym.records.Measure`), so views
            read a run even where the grader is not installed.
        extensions: How each part was found (keys ``env``, ``agent``, ``model`` and
            ``grader:NAME``); see :class:`ExtensionRef`.
        accounting: Token and cost totals (written after the run).
        result_file: For a run imported from a result file: where the file was, its size
            and SHA-256 (:class:`ResultFileRef`); its trajectories name their line.
        resumes: One entry per ``--resume`` of the run: ``{"at": ISO time, "reran_errors": N,
            "forced": {setting: [before, now]}, "command": [argv...]}`` (``forced`` lists the
            settings changed under ``--force``); ``started_at`` and ``command`` stay those of the
            run's first start.
        protocol: How episodes were played: ``free-running`` (the agent plays each episode
            from the start), ``teacher-forced`` (reference steps replayed, then one model
            turn per step ``k``; see :mod:`toolgym.forcing`) or ``fork`` (a recorded
            trajectory continued from a step).
        inject: The fault injected in every episode (``KIND@K``), or ``None``.
        described: For an environment given as a Python object no other process can import
            (its ``extensions.env`` is ``<object Name>``): what an episode starts from,
            ``{"system": the system message's text or None, "tools": [OpenAI function
            schemas]}``, read from an environment reset on the first example, so ``export``
            builds conversations without the class (the system message, then the example's
            input). ``None`` otherwise.
    """

    model_config = ConfigDict(extra="allow")

    schema_version: int = RUN_SCHEMA_VERSION
    env: str
    agent: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    model_settings: dict[str, Any] = Field(default_factory=dict)
    dataset: DatasetRef = Field(default_factory=DatasetRef)
    limit: int | None = None
    env_options: dict[str, Any] = Field(default_factory=dict)
    trials: int = 1
    concurrency: int = 1
    workers: int = 1
    graders: list[str] = Field(default_factory=list)
    grader_settings: dict[str, Any] = Field(default_factory=dict)
    measures: dict[str, Measure] = Field(default_factory=dict)
    extensions: dict[str, ExtensionRef] = Field(default_factory=dict)
    versions: dict[str, str | None] = Field(default_factory=dict)
    git_revision: str | None = None
    command: list[str] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    accounting: dict[str, Any] | None = None
    resumes: list[dict[str, Any]] = Field(default_factory=list)
    protocol: str = "free-running"
    inject: str | None = None
    result_file: ResultFileRef | None = None
    described: dict[str, Any] | None = None

    @property
    def agent_name(self) -> str:
        """The agent's name (``?`` when not recorded)."""
        return str(self.agent.get("agent") or "?")

    def spec_of(self, part: str) -> str | None:
        """The spec to load ``part`` (``env``, ``agent``, ``model``, ``grader:NAME``) again:
        the recorded extension spec, else the recorded name."""
        ref = self.extensions.get(part)
        if ref is not None:
            return ref.spec
        if part == "env":
            return self.env
        if part == "agent":
            return self.agent_name
        if part == "model":
            return self.model
        return part.partition(":")[2] or None


def read_run(directory: Path) -> RunRecord:
    """Read ``run.json`` as a :class:`RunRecord` (a version-1 record is migrated).

    Raises:
        RunDirError: if it is missing, not JSON, invalid (field named), or written by a newer
            schema than this toolgym reads (the version is named).
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise RunDirError(f"{directory} is a file, not a run directory")
    path = directory / RUN_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path}: not found; is {directory} a run directory?") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise RunDirError(f"{path}: schema_version must be a positive integer, got {version!r}")
    if version > RUN_SCHEMA_VERSION:
        raise RunDirError(
            f"{path}: written with run.json schema_version {version} by a newer toolgym; this one "
            f"reads versions 1 to {RUN_SCHEMA_VERSION} (upgrade toolgym to read it)"
        )
    if version < RUN_SCHEMA_VERSION:  # 1: without the extension and measure records; 2 to 4: the same fields
        data = {**data, "schema_version": RUN_SCHEMA_VERSION}
    try:
        return RunRecord.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(map(str, err["loc"])) or "(record)"
        raise RunDirError(f"{path}: field {field}: {err['msg']}") from None


SECRET_OPTIONS = ("--token",)
"""Options of the command line whose value is a secret (``serve --token``, ``view --token``):
recorded as ``***`` in ``run.json``'s ``command``."""

REDACTED = "***"

_REFERENCES = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*\})+")
"""One or more ``${NAME}`` references and nothing else: a value that names where a credential
is (an environment variable, read when connecting), not the credential itself."""

HEADER_OPTION = "--header"
"""The word before an HTTP header in a spec (``--header "Authorization: Bearer ${TOKEN}"``, or
``--header=...``): the header's value is a credential unless it is a reference
(:func:`redact_header`)."""

_HEADER_VALUE_KEPT = re.compile(r"(?:[A-Za-z][A-Za-z0-9._~+/-]* +)?" + _REFERENCES.pattern)
"""A header value recorded as it is: ``${NAME}`` references, after an optional scheme word
(``Bearer ${TOKEN}``, ``Basic ${B64}``)."""


def is_reference(value: str) -> bool:
    """Whether ``value`` is made of ``${NAME}`` references only (``${TOKEN}``,
    ``${A}${B}``): it is recorded as it is, and expanded from the environment only when a
    connection is made."""
    return _REFERENCES.fullmatch(value) is not None


class UnsetVariables(ValueError):
    """``${NAME}`` references to environment variables that are not set.

    Attributes:
        names: The variables, sorted.
    """

    def __init__(self, names: list[str]) -> None:
        self.names = sorted(set(names))
        super().__init__(f"the environment variable{'s' if len(self.names) > 1 else ''} {', '.join(self.names)} "
                         f"{'are' if len(self.names) > 1 else 'is'} not set")


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_references(text: str, environ: Mapping[str, str], encode: bool = False) -> str:
    """``text`` with each ``${NAME}`` replaced by ``environ[NAME]`` (percent-encoded with
    ``encode``, for a part of a URL); nothing else in it is touched (no ``$NAME``, no escapes).

    Raises:
        UnsetVariables: naming every variable of ``text`` missing from ``environ``.
    """
    from urllib.parse import quote

    missing = [name for name in _REFERENCE.findall(text) if name not in environ]
    if missing:
        raise UnsetVariables(missing)
    return _REFERENCE.sub(lambda m: quote(environ[m.group(1)], safe="") if encode else environ[m.group(1)], text)


def expand_url(url: str, environ: Mapping[str, str]) -> str:
    """A URL with its ``${NAME}`` references expanded: percent-encoded in the user, the
    password, the query values and the fragment (a password holding ``@`` or ``&`` stays one
    value), as they are in the host and the path.

    Raises:
        UnsetVariables: naming every variable of ``url`` missing from ``environ``.
    """
    from urllib.parse import urlsplit, urlunsplit

    missing = [name for name in _REFERENCE.findall(url) if name not in environ]
    if missing:
        raise UnsetVariables(missing)
    if "${" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hostport = netloc.rsplit("@", 1)
        netloc = (":".join(expand_references(part, environ, encode=True) for part in userinfo.split(":", 1))
                  + "@" + expand_references(hostport, environ))
    else:
        netloc = expand_references(netloc, environ)
    query = "&".join(
        f"{pair.split('=', 1)[0]}={expand_references(pair.split('=', 1)[1], environ, encode=True)}" if "=" in pair
        else expand_references(pair, environ, encode=True)
        for pair in parts.query.split("&") if pair
    )
    return urlunsplit((parts.scheme, netloc, expand_references(parts.path, environ), query,
                       expand_references(parts.fragment, environ, encode=True)))


def referenced_values(text: str, environ: Mapping[str, str]) -> list[str]:
    """The values (as they are and percent-encoded) of the variables ``text`` references that
    are set: what to scrub from messages once ``text`` is expanded."""
    from urllib.parse import quote

    values = [environ[name] for name in _REFERENCE.findall(text) if environ.get(name)]
    return sorted({v for value in values for v in (value, quote(value, safe=""))}, key=len, reverse=True)


def redact_url(text: str) -> str:
    """``text`` with the secrets a URL may carry replaced by ``***``: the user and password
    (``https://user:pw@host`` → ``https://***@host``), every query value (``?api_key=K&x=1`` →
    ``?api_key=***&x=***``: no list of parameter names can know every service's) and the
    fragment. A part made only of ``${NAME}`` references (:func:`is_reference`:
    ``https://${USER}:${PW}@host``, ``?key=${KEY}``) is kept: it names a variable, not a
    value. Text that is not a URL with a scheme and host is returned unchanged.

    Args:
        text: A URL, or any string.
    """
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in text:
        return text
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # not a URL after all (a bad port, brackets): hide all but the scheme
        return f"{text.split('://', 1)[0]}://{REDACTED}"
    if not parts.scheme or not parts.netloc:
        return text
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hostport = netloc.rsplit("@", 1)
        if not all(not part or is_reference(part) for part in userinfo.split(":", 1)):
            netloc = f"{REDACTED}@{hostport}"
    query = "&".join(
        (pair if is_reference(pair.split("=", 1)[1]) else f"{pair.split('=', 1)[0]}={REDACTED}") if "=" in pair
        else (pair if is_reference(pair) else REDACTED)
        for pair in parts.query.split("&") if pair
    ) if parts.query else ""
    fragment = parts.fragment if not parts.fragment or is_reference(parts.fragment) else REDACTED
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_header(header: str) -> str:
    """An HTTP header ``Name: value`` as a run records it: ``Name: ***`` unless the value is
    ``${NAME}`` references, alone or after a scheme word (``Authorization: Bearer ${TOKEN}``
    is kept). Every other value is taken for a credential, whatever the header's name.

    Args:
        header: ``Name: value`` (a text without a colon is all hidden).
    """
    name, colon, value = header.partition(":")
    if not colon:
        return REDACTED
    if _HEADER_VALUE_KEPT.fullmatch(value.strip()):
        return header
    return f"{name}: {REDACTED}"


def _redacted_word(word: str, after_header: bool) -> str:
    if after_header:
        return redact_header(word)
    if word.startswith(HEADER_OPTION + "="):
        return f"{HEADER_OPTION}={redact_header(word[len(HEADER_OPTION) + 1:])}"
    return redact_url(word)


def _words(text: str) -> list[str] | None:
    """``text`` split like a POSIX shell, or ``None`` when it cannot be (unbalanced quotes)."""
    import shlex

    try:
        return shlex.split(text)
    except ValueError:
        return None


def _quoted(word: str, first: bool) -> str:
    """A word as :func:`_words` reads it back: as it is when it holds no space, quote or
    backslash; else quoted (a first word ``PREFIX:rest`` keeps its prefix outside the quotes,
    so the spec form is still recognised by its prefix)."""
    import shlex

    if word and not re.search(r"[\s'\"\\]", word):
        return word
    if first and ":" in word:
        prefix, rest = word.split(":", 1)
        if not re.search(r"[\s'\"\\]", prefix):
            return f"{prefix}:{shlex.quote(rest)}"
    return shlex.quote(word)


def redact_spec(text: str) -> str:
    """A spec (an ``--env`` value such as ``mcp+http://HOST/mcp --header "Name: value"`` or
    ``mcp:COMMAND ARGS...``, or any command-line argument) as a run records it: each word that
    is a URL loses its credentials (:func:`redact_url`) and the word after ``--header`` its
    value (:func:`redact_header`). Text holding no credential is returned unchanged; text that
    does is rewritten with its words re-quoted (read back the same way by
    :func:`shlex.split`). ``${NAME}`` references are kept (:func:`is_reference`).

    Args:
        text: The spec, or any string.
    """
    if not re.search(r"\s", text.strip()):
        return _redacted_word(text, after_header=False)
    words = _words(text)
    if words is None:
        return redact_url(text)
    redacted = [_redacted_word(word, i > 0 and words[i - 1] == HEADER_OPTION) for i, word in enumerate(words)]
    if redacted == words:
        return text
    return " ".join(_quoted(word, i == 0) for i, word in enumerate(redacted))


def withheld_credentials(text: str) -> list[str]:
    """Where a spec recorded by :func:`redact_spec` holds ``***`` in place of a credential,
    for the message refusing to connect with it: ``"the URL's user and password"``, ``"the
    value of query parameter 'key'"``, ``"the URL's fragment"``, ``"the value of header
    'Authorization'"``; ``[]`` when none was withheld.

    Args:
        text: A spec, as recorded.
    """
    from urllib.parse import urlsplit

    found: list[str] = []
    words = _words(text) or [text]
    for i, word in enumerate(words):
        if i > 0 and words[i - 1] == HEADER_OPTION or word.startswith(HEADER_OPTION + "="):
            name, _, value = word.removeprefix(HEADER_OPTION + "=").partition(":")
            if value.strip() == REDACTED or word.removeprefix(HEADER_OPTION + "=") == REDACTED:
                found.append(f"the value of header {name.strip()!r}" if value else "a header")
            continue
        if "://" not in word:
            continue
        try:
            parts = urlsplit(word)
        except ValueError:
            continue
        if parts.netloc.rsplit("@", 1)[0] == REDACTED and "@" in parts.netloc:
            found.append("the URL's user and password")
        found += [f"the value of query parameter {pair.split('=', 1)[0]!r}" for pair in parts.query.split("&")
                  if pair.split("=", 1)[-1] == REDACTED]
        if parts.fragment == REDACTED:
            found.append("the URL's fragment")
    return found


def url_secrets(text: str) -> list[str]:
    """The secrets :func:`redact_url` hides in ``text``, as strings (the user, the password,
    each query value, the fragment; percent-decoded too), for scrubbing them out of error
    messages; ``[]`` for text that is not such a URL."""
    from urllib.parse import unquote, urlsplit

    if "://" not in text:
        return []
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        return []
    found = [parts.username or "", parts.password or "", parts.fragment]
    found += [pair.split("=", 1)[-1] for pair in parts.query.split("&") if pair]
    return sorted({s for v in found for s in (v, unquote(v)) if s and not is_reference(s)}, key=len, reverse=True)


def redacted_command(argv: Iterable[str]) -> list[str]:
    """A command line as ``run.json`` records it: the value of every option in
    :data:`SECRET_OPTIONS` (``--token T`` or ``--token=T``) is ``***``, and every URL in it
    (``--base-url``, an ``mcp+http://`` environment) loses its user, password, query values
    and fragment, and every ``--header`` in a spec its value (:func:`redact_spec`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        option, eq, _ = arg.partition("=")
        if option in SECRET_OPTIONS:
            if eq:
                out.append(f"{option}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        if eq and option.startswith("--") and not re.search(r"\s", option):
            out.append(f"{option}={redact_spec(arg[len(option) + 1:])}")
        else:
            out.append(redact_spec(arg))
    return out


def _redacted_values(value: Any) -> Any:
    """Every string of a JSON value passed through :func:`redact_spec`."""
    if isinstance(value, str):
        return redact_spec(value)
    if isinstance(value, dict):
        return {k: _redacted_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted_values(v) for v in value]
    return value


def write_run(directory: Path, record: RunRecord) -> None:
    """Write ``run.json`` atomically (never half-written), without secrets: the ``command`` as
    :func:`redacted_command` gives it; the environment's name and every part's spec, and every
    string in the model, agent and grader settings and resume entries, as :func:`redact_spec`
    gives them (a ``--base-url`` with ``user:pw@`` or ``?api_key=``, an ``mcp+http://`` server
    with credentials or a ``--header`` are recorded without them; ``${NAME}`` references are
    kept)."""
    data = record.model_dump(mode="json")
    data["command"] = redacted_command(data.get("command") or [])
    data["env"] = redact_spec(data["env"])
    for ref in (data.get("extensions") or {}).values():
        ref["spec"] = redact_spec(ref["spec"])
    for key in ("model_settings", "agent", "grader_settings", "resumes"):
        if key in data:
            data[key] = _redacted_values(data[key])
    for entry in data.get("resumes") or []:
        if isinstance(entry, dict) and isinstance(entry.get("command"), list):
            entry["command"] = redacted_command(entry["command"])
    write_json_atomic(Path(directory) / RUN_FILE, data)


class ImportedLinesMissing(RunDirError):
    """The result file a run's trajectories were imported from cannot be read back (moved,
    deleted or changed since the import); ``problem`` says which, in words."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def read_trajectories(
    directory: Path, all_attempts: bool = False, record: RunRecord | None = None, *, strict_lines: bool = False,
) -> list[Trajectory]:
    """The trajectories of a run directory (torn last line dropped with a warning): the last
    attempt of each (example, trial) (an episode that errored and was played again by
    ``--resume`` has both attempts in the file; the last one counts), or every line with
    ``all_attempts``.

    The lines of imported trajectories (``source_line``) are read back from the result file
    that ``run.json`` (or ``record``, when given) references; when it has moved or changed
    since the import, a warning says so and those texts stay empty (the parsed calls are in
    the record), or, with ``strict_lines``, :class:`ImportedLinesMissing` is raised.
    """
    records = read_jsonl(Path(directory) / TRAJECTORIES_FILE, Trajectory)
    if any(t.source_line is not None for t in records):
        ref = (record if record is not None else read_run(directory)).result_file
        restore_lines(records, ref, Path(directory), strict=strict_lines)
    return records if all_attempts else latest_attempts(records)


def result_file_ref(path: Path) -> ResultFileRef:
    """The reference to a result file as it is now (absolute path, size, SHA-256)."""
    path = Path(path).resolve()
    data = path.read_bytes()
    return ResultFileRef(path=str(path), size=len(data), sha256=hashlib.sha256(data).hexdigest())


def result_lines(ref: ResultFileRef) -> list[str] | str:
    """The lines of a referenced result file (index 0 is line 1; lines end at ``\\n``,
    ``\\r\\n`` or a lone ``\\r``; a UTF-8 byte-order mark at the start is dropped; a line that
    is not UTF-8 is ``""``), or, when the file is missing or has changed since the import,
    a sentence saying so."""
    path = Path(ref.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"the result file {path} it was imported from cannot be read ({exc.strerror or exc}): moved or deleted since the import"
    if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
        return (f"the result file {path} it was imported from has changed since the import "
                f"({len(data):,} bytes now, {ref.size:,} then; SHA-256 differs)")
    data = data.removeprefix(b"\xef\xbb\xbf")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return [raw.decode("utf-8", errors="replace") for raw in data.split(b"\n")]


def restore_lines(
    trajectories: list[Trajectory], ref: ResultFileRef | None, directory: Path, strict: bool = False,
) -> str | None:
    """Put back what the record of an imported trajectory (``source_line``) leaves out: its
    origin (``final_state``) and its line (the text of its first model step, read from the
    result file). Returns ``None``, or why the lines could not be read (also issued as a
    warning that names the run directory; the origins are put back all the same).

    Raises:
        ImportedLinesMissing: with ``strict``, instead of the warning.
    """
    lines = result_lines(ref) if ref is not None else "run.json references no result file"
    for traj in trajectories:
        restore_line(traj, lines, ref)
    if isinstance(lines, str):
        if strict:
            raise ImportedLinesMissing(lines)
        warnings.warn(f"{directory}: {lines}; imported lines are not shown (their parsed calls are)", stacklevel=3)
        return lines
    return None


def stream_lines(path: Path, start: int = 0, lineno: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """The complete lines of a JSONL file of a run directory, read one at a time from byte
    offset ``start`` (so a reader can go on where it stopped while a run appends), holding
    only one line in memory.

    Args:
        path: ``trajectories.jsonl`` or ``scores.jsonl`` (a missing file has no lines).
        start: Byte offset of the first line to read (0, or an ``end`` given before).
        lineno: The 1-based line number of the line at ``start``.

    Yields:
        tuple[int, int, bytes]: ``(line number, end, raw)``: ``end`` is the byte offset just
        after the line's newline, ``raw`` the line without it. A last line without its newline
        (still being written, or torn by a killed run) is not given; blank lines are skipped.
    """
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        fh.seek(start)
        at = start
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            at += len(raw)
            if raw.strip():
                yield lineno, at, raw.rstrip(b"\r\n")
            lineno += 1


def parse_line(path: Path, lineno: int, raw: bytes, model: type[M]) -> M:
    """One record line of ``path`` (as :func:`stream_lines` gives it) as a ``model`` record.

    Raises:
        RunDirError: for an invalid line (file, line and field named).
    """
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "record"
        raise RunDirError(f"{path}:{lineno}: invalid record: field {where}: {err['msg']}") from None


def score_fields(path: Path, lineno: int, raw: bytes) -> dict[str, Any]:
    """One line of ``scores.jsonl`` (as :func:`stream_lines` gives it) read as plain JSON, not
    validated as a :class:`Score`: every field of :class:`Score`, those the line leaves out
    (:func:`record_line` omits defaults) filled with their declared defaults. For readers that
    only need the values (the index of ``toolgym view``); 3 to 4 times faster than
    :func:`parse_line`. A NaN value is ``None``, as :class:`Score` reads it.

    Raises:
        RunDirError: for a line that is not a JSON object or lacks a required field, or whose
            ``example_id``, ``grader`` or ``value`` has the wrong type (file, line and field named).
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:  # NaN, which orjson refuses and Python's json module (and pydantic) read
            data = json.loads(raw)
        except ValueError:
            raise RunDirError(f"{path}:{lineno}: invalid record: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}:{lineno}: invalid record: expected a JSON object")
    out: dict[str, Any] = {}
    for name, default in _field_defaults(Score):
        if name in data:
            out[name] = data[name]
        elif default is _NO_DEFAULT:
            raise RunDirError(f"{path}:{lineno}: invalid record: field {name}: Field required")
        else:
            out[name] = type(default)() if isinstance(default, dict | list) and not default else default
    for name, kind in (("example_id", str), ("grader", str), ("trial", int)):
        if not isinstance(out[name], kind) or isinstance(out[name], bool):
            raise RunDirError(f"{path}:{lineno}: invalid record: field {name}: not {'a string' if kind is str else 'an integer'}")
    value = out["value"]
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise RunDirError(f"{path}:{lineno}: invalid record: field value: not a number or null")
    if isinstance(value, float) and math.isnan(value):
        out["value"] = None
    elif isinstance(value, int) and not isinstance(value, bool):
        out["value"] = float(value)
    return out


def restore_line(trajectory: Trajectory, lines: list[str] | str | None, ref: ResultFileRef | None) -> None:
    """Put back what an imported trajectory's record leaves out (:func:`record_line`): its
    origin, ``final_state`` ``{"result_file": {"file": ref.path, "line": source_line}}``, when
    ``final_state`` is empty and ``ref`` given; and its line, the text of its first model step,
    when that is empty and ``lines`` (as :func:`result_lines` gives them) is a list. A
    trajectory without ``source_line`` is left as it is."""
    number = trajectory.source_line
    if number is None:
        return
    if ref is not None and not trajectory.final_state:
        trajectory.final_state = {ORIGIN: {"file": ref.path, "line": number}}
    at = _line_step(trajectory)
    if isinstance(lines, list) and at is not None and not trajectory.steps[at].text and 0 < number <= len(lines):
        trajectory.steps[at].text = lines[number - 1]


def latest_attempts(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """One trajectory per (example, trial): the last one given, at the place of the first."""
    latest: dict[tuple[str, int], Trajectory] = {}
    for traj in trajectories:
        latest[traj.key] = traj
    return list(latest.values())


def read_scores(directory: Path) -> list[Score]:
    """All scores of a run directory."""
    return read_jsonl(Path(directory) / SCORES_FILE, Score)


LOCK_FILE = ".lock"


def _slug(text: str, keep: int = 40) -> str:
    """``text`` as a piece of a folder name: letters, digits, ``.``, ``_`` and ``-`` only."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:keep].rstrip("-.") or "x"


def _spec_name(spec: str) -> str:
    """The short name of a registry spec: ``path/file.py:Name`` -> ``Name``;
    ``mcp:"COMMAND"`` or ``mcp+http://...`` -> ``mcp``; a name -> itself."""
    if spec.startswith("mcp"):
        return "mcp"
    return spec.rsplit(":", 1)[-1] if ":" in spec else spec


def _model_name(model: str) -> str:
    """A model spec in a folder name: ``openai:gpt-4o-mini`` -> ``openai-gpt-4o-mini``,
    ``scripted:turns/first.json`` -> ``scripted-first``, ``vllm:Qwen/Qwen2.5-7B`` ->
    ``vllm-Qwen2.5-7B``, ``local`` -> ``local``."""
    provider, _, name = model.partition(":")
    if not name:
        return provider
    name = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".json", ".jsonl", ".gguf"):
        name = name.removesuffix(suffix)
    return f"{provider}-{name}"


def default_run_dir(env: str, agent: str, model: str | None, root: str | Path = "runs",
                    now: datetime.datetime | None = None) -> Path:
    """A run directory of its own for a run given no ``--out``:
    ``ROOT/TIME_ENV_AGENT[_MODEL]`` with the time in UTC as ``2026-12-04T05-31-07`` (first, so
    that the folders sort by time, as inspect_ai names its log files), and ``-2``, ``-3``, ...
    appended when that folder exists already (two runs started within a second).

    Args:
        env: The environment name or spec (a spec is shortened: ``mcp``, or its ``Name``).
        agent: The agent name or spec.
        model: The ``--model`` spec, or ``None`` for an agent that uses no model (``oracle``).
        root: The folder the run directory goes in.
        now: The start time (default: now); a naive time is taken as UTC.

    Returns:
        Path: A path that does not exist yet.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    if now.tzinfo is not None:
        now = now.astimezone(datetime.UTC)
    parts = [now.strftime("%Y-%m-%dT%H-%M-%S"), _slug(_spec_name(env)), _slug(_spec_name(agent))]
    if model:
        parts.append(_slug(_model_name(model)))
    base = Path(root) / "_".join(parts)
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


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
    if directory.exists() and not directory.is_dir():
        raise RunDirError(f"{directory}: is a file, not a run directory; choose another --out")
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


@dataclass
class Run:
    """A run read back (or just played): its record, trajectories, scores and examples.

    Attributes:
        directory: The run directory (``None`` for a run kept in memory only).
        record: ``run.json``.
        trajectories: Every trajectory, in file order.
        scores: Every score, in file order.
        examples: The run's examples by id; ``None`` when the dataset could not be read
            (``problem`` says why).
        problem: Why the examples are missing, if they are.
    """

    directory: Path | None
    record: RunRecord
    trajectories: list[Trajectory]
    scores: list[Score]
    examples: dict[str, Example] | None = None
    problem: str | None = None

    @property
    def env(self) -> str:
        """The environment name."""
        return self.record.env

    @property
    def graders(self) -> list[str]:
        """Graders recorded in run.json, then any other grader found in the scores."""
        names = list(self.record.graders)
        for s in self.scores:
            if s.grader not in names:
                names.append(s.grader)
        return names

"""Reading JMultiWOZ-TC (github.com/llm-jp/JMultiWOZ-TC, CC BY 4.0) from where the user keeps it.

The data set is two NDJSON files: ``jmultiwoz_tc_input.json`` (``data_id``, ``dialogue_id``,
``question`` = the chat history ending with a user turn) and ``jmultiwoz_tc_ground.json``
(``data_id``, ``dialogue_id``, ``ground_truth`` = list of ``{name, arguments}``). They are read
from the published zip, from the files themselves (``.json``) or from the ``.jsonl`` names of a
newer release, line by line (the input file is 37 MB), and checked to correspond one to one.
The 9 tool schemas are read from ``tools.json`` beside the data (or the ``tools`` option).

Nothing here holds the data in the project: every function takes a path.
"""

from __future__ import annotations

import io
import json
import random
import re
import weakref
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

import msgspec

from toolgym import DatasetError, Example, ToolCallSpec
from toolgym.data import loads_json
from toolgym.suites.jmultiwoz_tc.building import built
from toolgym.suites.jmultiwoz_tc.scoring import gold_calls_of

__all__ = [
    "DataFiles",
    "ToolSpecs",
    "load_examples",
    "load_tool_specs",
    "locate",
    "stratified_sample",
]

_INPUT = re.compile(r"input", re.IGNORECASE)
_GROUND = re.compile(r"ground", re.IGNORECASE)
_NDJSON = (".json", ".jsonl")
MAX_LISTED = 5  # ids or lines quoted in an error message before "and N more"
_SCHEMA_VERSION = Example.model_fields["schema_version"].default


@dataclass(frozen=True)
class Source:
    """One NDJSON file, on disk or inside a zip.

    Attributes:
        label: How messages name it (``data.zip!jmultiwoz_tc_input.json`` inside a zip).
        open: Opens it for binary reading (a fresh stream each time).
        file: The file on disk (the zip for a member).
    """

    label: str
    open: Callable[[], IO[bytes]]
    file: Path


@dataclass(frozen=True)
class DataFiles:
    """Where the two files of a JMultiWOZ-TC release are.

    Attributes:
        input: The chat histories.
        ground: The gold calls.
        tools: ``tools.json`` when found beside the data (or given), else ``None``.
    """

    input: Source
    ground: Source
    tools: Path | None


def _file_source(path: Path) -> Source:
    return Source(str(path), lambda: open(path, "rb"), path)


def _zip_source(path: Path, member: str) -> Source:
    def opener() -> IO[bytes]:
        archive = zipfile.ZipFile(path)
        return _ZipMember(archive, archive.open(member))

    return Source(f"{path}!{member}", opener, path)


class _ZipMember(io.RawIOBase):
    """A zip member stream that also closes its archive."""

    def __init__(self, archive: zipfile.ZipFile, stream: IO[bytes]) -> None:
        super().__init__()
        self._archive, self._stream = archive, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            self._archive.close()
        super().close()


def _pick(names: list[str], pattern: re.Pattern[str], where: str) -> str | None:
    found = [n for n in names if pattern.search(Path(n).name) and Path(n).suffix in _NDJSON]
    if len(found) > 1:
        raise DatasetError(f"{where}: several candidate files: {', '.join(sorted(found))}")
    return found[0] if found else None


def _sibling(path: Path, pattern: re.Pattern[str], replacement: str) -> Path | None:
    stem = pattern.sub(replacement, path.stem, count=1)
    for suffix in (path.suffix, *_NDJSON):
        candidate = path.with_name(stem + suffix)
        if candidate.exists():
            return candidate
    return None


def locate(path: str | Path, options: dict[str, Any] | None = None) -> DataFiles | None:
    """Find the input and gold files from a ``--dataset`` path.

    Accepted: the published zip (members found by name, at any depth), either NDJSON file
    (``*input*.json``/``.jsonl`` or ``*ground*.json``/``.jsonl``; the other one is looked
    for beside it), or a directory holding them (or the zip).

    Args:
        path (str | Path): The ``--dataset`` path.
        options (dict[str, Any] | None): ``tools`` may name the tool-schema file explicitly.

    Returns:
        The files, or ``None`` when ``path`` is not in a JMultiWOZ-TC form (so that the
        generic loaders may try it).

    Raises:
        DatasetError: when the path looks like JMultiWOZ-TC but a file is missing or the
            zip is unreadable.
    """
    path = Path(path)
    options = options or {}
    tools = Path(options["tools"]) if options.get("tools") else None
    if tools is not None and not tools.is_file():
        raise DatasetError(f"{tools}: tool schema file not found")
    beside = (path if path.is_dir() else path.parent) / "tools.json"
    tools = tools or (beside if beside.is_file() else None)

    if path.is_dir():
        names = [p.name for p in path.iterdir() if p.is_file()]
        zips = sorted(n for n in names if n.endswith(".zip"))
        ground = _pick(names, _GROUND, str(path))
        if ground is None and len(zips) == 1:
            return locate(path / zips[0], options | {"tools": str(tools) if tools else None})
        if ground is None:
            raise DatasetError(f"{path}: no *ground*.json(l) file and no single zip in this directory")
        inp = _pick(names, _INPUT, str(path))
        if inp is None:
            raise DatasetError(f"{path}: no *input*.json(l) file beside {ground}")
        return DataFiles(_file_source(path / inp), _file_source(path / ground), tools)

    if path.suffix.lower() == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = [i.filename for i in archive.infolist() if not i.is_dir()]
        except (OSError, zipfile.BadZipFile) as exc:
            raise DatasetError(f"{path}: cannot read the zip: {exc}") from None
        members = [m for m in members if not Path(m).name.startswith((".", "_"))]
        inp, ground = _pick(members, _INPUT, str(path)), _pick(members, _GROUND, str(path))
        if ground is None or inp is None:
            raise DatasetError(
                f"{path}: expected jmultiwoz_tc_input.json(l) and jmultiwoz_tc_ground.json(l) inside; "
                f"found: {', '.join(members) or 'nothing'}"
            )
        return DataFiles(_zip_source(path, inp), _zip_source(path, ground), tools)

    if path.suffix.lower() not in _NDJSON:
        return None
    if _GROUND.search(path.name):
        other = _sibling(path, _GROUND, "input")
        if other is None:
            raise DatasetError(f"{path}: the input file (…input.json or .jsonl) was not found beside it")
        return DataFiles(_file_source(other), _file_source(path), tools)
    if _INPUT.search(path.name):
        other = _sibling(path, _INPUT, "ground")
        if other is None:
            raise DatasetError(f"{path}: the gold file (…ground.json or .jsonl) was not found beside it")
        return DataFiles(_file_source(path), _file_source(other), tools)
    return None


def iter_lines(source: Source) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` for every non-blank line, streamed (a UTF-8 byte-order mark
    on the first line is dropped).

    Raises:
        DatasetError: when the file cannot be opened.
    """
    try:
        stream = source.open()
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise DatasetError(f"{source.label}: cannot read: {exc}") from None
    with stream as raw:
        reader = io.BufferedReader(raw, buffer_size=1 << 20) if isinstance(raw, io.RawIOBase) else raw
        for lineno, line in enumerate(reader, 1):
            if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if line.strip():
                yield lineno, line


def parse_line(source: Source, lineno: int, line: bytes) -> dict[str, Any]:
    """One NDJSON line as a JSON object.

    Raises:
        DatasetError: naming the file and line when it is not UTF-8 JSON or not an object.
    """
    try:
        record = loads_json(line.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{source.label}:{lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except UnicodeDecodeError:
        from toolgym.data import foreign_encoding

        found = foreign_encoding(line) if lineno == 1 else None
        if found:
            raise DatasetError(f"{source.label}: the file is {found}; JMultiWOZ-TC files are UTF-8 "
                               "(convert it, e.g. with iconv)") from None
        raise DatasetError(f"{source.label}:{lineno}: not UTF-8 text") from None
    if not isinstance(record, dict):
        raise DatasetError(f"{source.label}:{lineno}: expected a JSON object, got {type(record).__name__}")
    return record


def iter_ndjson(source: Source) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line, streamed.

    Raises:
        DatasetError: naming the file and line of a line that is not a JSON object, or when
            the file cannot be read.
    """
    for lineno, line in iter_lines(source):
        yield lineno, parse_line(source, lineno, line)


def _record_id(record: dict[str, Any], label: str, lineno: int) -> str:
    data_id = record.get("data_id", record.get("id"))  # "id": the format before data_id
    if isinstance(data_id, str):
        return data_id
    if data_id is None:
        raise DatasetError(f"{label}:{lineno}: record without 'data_id'")
    if not isinstance(data_id, int) or isinstance(data_id, bool):
        raise DatasetError(f"{label}:{lineno}: 'data_id' must be a string, got {data_id!r}")
    return str(data_id)


def _listing(ids: list[str]) -> str:
    shown = ", ".join(ids[:MAX_LISTED])
    return shown + (f", … ({len(ids) - MAX_LISTED} more)" if len(ids) > MAX_LISTED else "")


@dataclass(frozen=True, slots=True)
class _Gold:
    line: int
    dialogue_id: str | None
    calls: tuple[dict[str, Any], ...]


def _read_gold(source: Source) -> dict[str, _Gold]:
    gold: dict[str, _Gold] = {}
    label = source.label
    for lineno, record in iter_ndjson(source):
        data_id = _record_id(record, label, lineno)
        if data_id in gold:
            raise DatasetError(f"{label}:{lineno}: duplicate data_id {data_id!r} (first on line {gold[data_id].line})")
        if "ground_truth" not in record:
            raise DatasetError(f"{label}:{lineno}: record without 'ground_truth'")
        try:
            calls = gold_calls_of(record["ground_truth"])
        except ValueError as exc:
            raise DatasetError(f"{label}:{lineno}: ground_truth: {exc}") from None
        gold[data_id] = _Gold(lineno, record.get("dialogue_id"), calls)
    if not gold:
        raise DatasetError(f"{source.label}: no records")
    return gold


_ROLES = ("user", "assistant", "system")


def _history(
    question: Any, label: str, lineno: int, before: tuple[list[dict[str, str]], int] = ([], 0)
) -> tuple[list[dict[str, str]], int]:
    """The chat history of a turn, checked, with the messages equal to those of ``before``
    (the previous turn of its dialogue, checked with it, and its count of user messages)
    replaced by them, so that the dialogue's messages are stored once; and how many are the
    user's."""
    if not isinstance(question, list) or not question:
        raise DatasetError(f"{label}:{lineno}: 'question' must be a non-empty list of {{role, content}} messages")
    known, known_users = before
    start = len(known)
    if start and question[:start] == known:  # the dialogue so far, as the previous turn had it
        shared, users = known[:], known_users
    else:
        start, shared, users = 0, [], 0
    for i in range(start, len(question)):
        message = question[i]
        if i < len(known) and known[i] == message:
            message = known[i]
        elif (
            not isinstance(message, dict)
            or message.get("role") not in _ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise DatasetError(
                f"{label}:{lineno}: question[{i}] must be {{'role': user|assistant|system, 'content': str}}"
            )
        if message["role"] == "user":
            users += 1
        shared.append(message)
    return shared, users


class _InputRecord(msgspec.Struct):
    """The fields of an input line that loading reads; ``question`` is kept as JSON text."""

    data_id: Any = msgspec.UNSET
    id: Any = msgspec.UNSET
    dialogue_id: Any = None
    question: msgspec.Raw = msgspec.Raw()


_READ_INPUT = msgspec.json.Decoder(_InputRecord).decode
_READ_JSON = msgspec.json.Decoder().decode


def _input_line(source: Source, lineno: int, line: bytes) -> tuple[dict[str, Any], Any]:
    """An input line's ``data_id``, ``id`` and ``dialogue_id`` (as a dict holding those
    present), and its ``question``: the JSON text when read by msgspec, else (a line msgspec
    refuses) the parsed value of :func:`parse_line`, which names a line that is not JSON.

    Raises:
        DatasetError: for a line that is not a UTF-8 JSON object.
    """
    try:
        line.decode("utf-8")  # msgspec does not check the text it skips or keeps
        fields = _READ_INPUT(line)
    except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
        record = parse_line(source, lineno, line)
        return record, record.get("question")
    record = {k: v for k, v in (("data_id", fields.data_id), ("id", fields.id)) if v is not msgspec.UNSET}
    record["dialogue_id"] = fields.dialogue_id
    return record, bytes(fields.question) or None


def _question(question: Any, before_text: bytes = b"", before: list[dict[str, str]] | None = None) -> Any:
    """A turn's history from its JSON text (anything else: already parsed).

    When ``before_text``, the text of the previous turn's history ``before``, without its
    closing bracket, starts this one and a comma follows, the messages it holds are those of
    ``before`` (JSON values end where their text ends): only the messages after the comma are
    parsed, and ``before`` precedes them. Otherwise the whole text is parsed.
    """
    if not isinstance(question, bytes):
        return question
    head = before_text[:-1]
    if before and head and question.startswith(head):
        rest = question[len(head):].lstrip(b" \t\r\n")
        if rest.startswith(b","):
            try:
                added = _READ_JSON(b"[" + rest[1:])
            except (msgspec.DecodeError, RecursionError):
                added = None
            if isinstance(added, list):
                return before + added
    return loads_json(question.decode("utf-8"))


def _check_correspondence(in_label: str, gold_label: str, only_input: list[str], only_gold: list[str]) -> None:
    if not only_input and not only_gold:
        return
    parts = []
    if only_input:
        parts.append(f"{len(only_input)} id(s) only in the input: {_listing(only_input)}")
    if only_gold:
        parts.append(f"{len(only_gold)} id(s) only in the gold: {_listing(only_gold)}")
    raise DatasetError(f"{in_label} and {gold_label} do not correspond one to one: {'; '.join(parts)}")


def _stamp(*paths: Path) -> tuple:
    """What identifies the content of files without reading them: path, size, modification."""
    stamps = []
    for path in paths:
        stat = path.stat()
        stamps.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)


class _Loaded:
    """The examples of one reading of the files, and what identifies it."""

    __slots__ = ("__weakref__", "examples", "key")

    def __init__(self, key: tuple, examples: list[Example]) -> None:
        self.key, self.examples = key, examples


class _Examples(list):  # type: ignore[type-arg]
    """A list returned by :func:`load_examples`: it keeps the reading it came from alive."""

    __slots__ = ("_loaded",)


_LAST_LOADED: list[weakref.ref[_Loaded]] = []  # at most one, alive while a list returned from it is


def load_examples(path: str | Path, options: dict[str, Any] | None = None) -> list[Example] | None:
    """All turns of a JMultiWOZ-TC release as Examples (one per user turn), in input order.

    Each example's ``input`` is the chat history; ``expected_calls`` the gold calls (an empty
    list when no tool should be called); ``metadata`` holds ``dialogue_id``, ``turn`` (the
    dialogue depth: user turns before this one), ``n_steps`` and ``tools`` (the schema file).
    Messages shared by consecutive turns of a dialogue are stored once.

    While a list returned by the last call lives, a call for the same files (by path, size and
    modification time) and options returns a new list of the same examples instead of reading
    them again (0.5 s for the release); once no list lives, the examples are freed with it.
    Callers must not modify the examples.

    Args:
        path (str | Path): See :func:`locate`.
        options (dict[str, Any] | None): ``sample`` (N) and ``sample_seed`` draw a stratified
            subset (see :func:`stratified_sample`); ``tools`` names the schema file.

    Returns:
        list[Example] | None: The examples, or ``None`` when ``path`` is not in a JMultiWOZ-TC
        form.

    Raises:
        DatasetError: for a bad line (file and line named), duplicate ids, ids present in one
            file only (count and first ids), or a missing ``tools.json``.
    """
    options = options or {}
    files = locate(path, options)
    if files is None:
        return None
    if files.tools is None:
        raise DatasetError(
            f"{path}: tools.json (the 9 JMultiWOZ-TC tool schemas) was not found beside the data; "
            "put it there (the tools.json of the JMultiWOZ-TC repository), or, from Python, name it with env_options={'tools': PATH}"
        )
    tools_path = str(files.tools.resolve())
    load_tool_specs(tools_path)  # fail early on a bad schema file
    try:
        key = (_stamp(files.input.file, files.ground.file, files.tools), json.dumps(options, sort_keys=True, default=str))
    except OSError:
        key = None
    loaded = _LAST_LOADED[0]() if _LAST_LOADED else None
    if loaded is None or key is None or loaded.key != key:
        loaded = _Loaded(key or (), _load(files, tools_path, options))
        _LAST_LOADED[:] = [weakref.ref(loaded)] if key is not None else []
    examples = _Examples(loaded.examples)
    examples._loaded = loaded
    return examples


def _load(files: DataFiles, tools_path: str, options: dict[str, Any]) -> list[Example]:
    gold = _read_gold(files.ground)
    examples: list[Example] = []
    seen: dict[str, int] = {}
    only_input: list[str] = []
    dialogue_mismatch: list[str] = []
    previous: dict[str, tuple[list[dict[str, str]], int]] = {}  # dialogue id → last history, user messages
    label = files.input.label
    texts: dict[str, bytes] = {}  # dialogue id → the JSON text of its last history
    for lineno, line in iter_lines(files.input):
        record, question = _input_line(files.input, lineno, line)
        data_id = _record_id(record, label, lineno)
        if data_id in seen:
            raise DatasetError(f"{label}:{lineno}: duplicate data_id {data_id!r} (first on line {seen[data_id]})")
        seen[data_id] = lineno
        entry = gold.get(data_id)
        if entry is None:
            _history(_question(question), label, lineno)
            only_input.append(data_id)
            continue
        dialogue_id = record.get("dialogue_id")
        if entry.dialogue_id is not None and dialogue_id is not None and entry.dialogue_id != dialogue_id:
            dialogue_mismatch.append(data_id)
        dialogue = str(dialogue_id if dialogue_id is not None else entry.dialogue_id)
        before = previous.get(dialogue, ([], 0))
        shared, users = _history(_question(question, texts.get(dialogue, b""), before[0]), label, lineno, before)
        previous[dialogue] = shared, users
        if isinstance(question, bytes):
            texts[dialogue] = question
        else:  # read without its text: the next turn is parsed whole
            texts.pop(dialogue, None)
        calls = [built(ToolCallSpec, {"name": c["name"], "arguments": c["arguments"], "turn": None}) for c in entry.calls]
        examples.append(
            built(Example, {  # validated above
                "schema_version": _SCHEMA_VERSION,
                "id": data_id,
                "input": shared,
                "expected_steps": [c["name"] for c in entry.calls],
                "expected_calls": calls,
                "order_matters": False,
                "reference": None,
                "expected_state": None,
                "metadata": {
                    "dialogue_id": dialogue,
                    "turn": users - 1,
                    "n_steps": len(calls),
                    "tools": tools_path,
                },
                "milestones": None,
                "minefields": None,
                "read_only": None,
                "extra_calls": None,
                "turns": None,
                "user": None,
                "expected_states": None,
                "allowed_changes": None,
            })
        )
    only_gold = [i for i in gold if i not in seen]
    _check_correspondence(files.input.label, files.ground.label, only_input, only_gold)
    if dialogue_mismatch:
        raise DatasetError(
            f"{files.input.label} and {files.ground.label} disagree on dialogue_id for "
            f"{len(dialogue_mismatch)} data_id(s): {_listing(dialogue_mismatch)}"
        )
    if not examples:
        raise DatasetError(f"{files.input.label}: no records")
    if options.get("sample"):
        seed = options.get("sample_seed", options.get("seed"))
        examples = stratified_sample(examples, int(options["sample"]), int(seed or 0))
    return examples


def stratified_sample(examples: list[Example], n: int, seed: int) -> list[Example]:
    """A reproducible subset of ``n`` turns, stratified by whether the gold calls a tool.

    Each stratum gets its share of ``n`` in proportion to its size (largest remainder), at
    least one turn when ``n >= 2`` and the stratum is not empty; turns are drawn with
    ``random.Random(seed)`` and returned in dataset order.

    Raises:
        DatasetError: if ``n`` is not positive.
    """
    if n <= 0:
        raise DatasetError(f"--sample must be positive, got {n}")
    if n >= len(examples):
        return list(examples)
    strata = [[e.id for e in examples if e.expected_calls], [e.id for e in examples if not e.expected_calls]]
    sizes = [len(s) for s in strata]
    share = [n * size / len(examples) for size in sizes]
    take = [int(x) for x in share]
    if sum(take) < n:  # largest remainder
        take[max(range(2), key=lambda i: share[i] - take[i])] += n - sum(take)
    if n >= 2:
        for i in range(2):
            if sizes[i] and take[i] == 0:
                take[i], take[1 - i] = 1, take[1 - i] - 1
    rng = random.Random(seed)
    chosen = set()
    for ids, k in zip(strata, take, strict=True):
        chosen.update(rng.sample(ids, k))
    return [e for e in examples if e.id in chosen]


@dataclass(frozen=True)
class ToolSpecs:
    """The tool schemas of ``tools.json``.

    Attributes:
        functions: ``{name: {"name", "description", "parameters"}}`` in file order.
        slot_types: ``{name: {slot: JSON type}}`` (``"string"``, ``"integer"``, ...).
    """

    functions: dict[str, dict[str, Any]]
    slot_types: dict[str, dict[str, str]]


@lru_cache(maxsize=8)
def load_tool_specs(path: str) -> ToolSpecs:
    """Parse an OpenAI-style tool list (``[{"type": "function", "function": {...}}]``).

    Raises:
        DatasetError: naming the file and the tool index of anything malformed.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(doc, list) or not doc:
        raise DatasetError(f"{path}: expected a non-empty JSON list of tools")
    functions: dict[str, dict[str, Any]] = {}
    types: dict[str, dict[str, str]] = {}
    for i, entry in enumerate(doc):
        fn = entry.get("function", entry) if isinstance(entry, dict) else None
        params = fn.get("parameters") if isinstance(fn, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(params, dict)
            or params.get("type") != "object"
            or not isinstance(params.get("properties", {}), dict)
        ):
            raise DatasetError(f"{path}: tool [{i}] must be {{'function': {{'name', 'parameters': {{'type': 'object', ...}}}}}}")
        name = fn["name"]
        if name in functions:
            raise DatasetError(f"{path}: tool [{i}]: duplicate name {name!r}")
        functions[name] = {"name": name, "description": str(fn.get("description", "")), "parameters": params}
        types[name] = {
            slot: spec.get("type", "string") if isinstance(spec, dict) else "string"
            for slot, spec in params.get("properties", {}).items()
        }
    return ToolSpecs(functions, types)

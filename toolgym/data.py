"""Loading datasets: the project's JSONL files and the LangChain tool-usage JSON form.

Every record is validated before any model is called; a bad record raises
:class:`DatasetError` naming the file and line.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import random
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from pydantic import ValidationError

from toolgym.records import Example
from toolgym.runio import atomic_file, refuse_run_file

if TYPE_CHECKING:
    from toolgym.benchmark import Benchmark


class DatasetError(ValueError):
    """A dataset file or record is invalid; the message names the file and line.

    Attributes:
        problems (list[str]): Every problem found, one line each (``path:line: ...``); the
            message is that line when there is one, else a count followed by the lines.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems) if problems else [message]

    @classmethod
    def of(cls, problems: list[str], what: str) -> DatasetError:
        """One error for several problems: the problem itself when there is one, else
        ``"WHAT: N problems:"`` and each on its own indented line (at most
        :data:`MAX_LISTED`, then how many more)."""
        if len(problems) == 1:
            return cls(problems[0])
        listed = [f"  {p}" for p in problems[:MAX_LISTED]]
        if len(problems) > MAX_LISTED:
            listed.append(f"  ... and {len(problems) - MAX_LISTED} more")
        return cls("\n".join([f"{what}: {len(problems)} problems:", *listed]), problems)


MAX_LISTED = 50
"""Problems listed in one :class:`DatasetError` message (all are in its ``problems``)."""


def resolve_dataset(benchmark: Benchmark | None, dataset: str | None) -> Path:
    """Turn ``--dataset`` (a path, a built-in name, a name the benchmark's ``dataset_by_name``
    knows, or ``None`` for ``test``) into a file path.

    Raises:
        DatasetError: if it is neither an existing file nor a built-in dataset of the
            benchmark (for a benchmark without built-in datasets, read by path: that it has
            none and needs ``--dataset PATH``, with the benchmark's description).
    """
    name = dataset or "test"
    path = Path(name)
    if path.exists():
        return path
    folder = benchmark.datasets if benchmark is not None else None
    if folder is not None and (folder / f"{name}.jsonl").exists():
        return folder / f"{name}.jsonl"
    by_name = benchmark.dataset_by_name if benchmark is not None else None
    if by_name is not None and dataset and (found := by_name(dataset)) is not None:
        return found
    known = benchmark.builtin_datasets() if benchmark is not None else []
    env = benchmark.name if benchmark is not None else "?"
    if not known and benchmark is not None:
        what = f" ({benchmark.description})" if benchmark.description else ""
        given = f"{name!r} is not a file; " if dataset else ""
        raise DatasetError(
            f"{given}{env} has no built-in dataset: give --dataset PATH, a file of its data{what}"
        )
    raise DatasetError(
        f"dataset {name!r} is neither a file nor a built-in dataset of {env!r} "
        f"(built-in: {', '.join(known) or 'none'})"
    )


def foreign_encoding(data: bytes) -> str | None:
    """The name of a text encoding other than UTF-8 that ``data`` (the start of a file) is
    plainly in: from its byte-order mark (UTF-16, UTF-32), or the zero bytes of UTF-16 text
    without one; ``None`` for anything else (UTF-8 with or without its byte-order mark
    included)."""
    for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian, with a byte-order mark)"),
                      (b"\x00\x00\xfe\xff", "UTF-32 (big-endian, with a byte-order mark)"),
                      (b"\xff\xfe", "UTF-16 (little-endian, with a byte-order mark)"),
                      (b"\xfe\xff", "UTF-16 (big-endian, with a byte-order mark)")):
        if data.startswith(bom):
            return name
    head = data[:200]
    if len(head) >= 4 and head.count(0) * 3 >= len(head):
        if head[1::2].count(0) * 4 >= len(head):
            return "UTF-16 (little-endian, without a byte-order mark)"
        if head[0::2].count(0) * 4 >= len(head):
            return "UTF-16 (big-endian, without a byte-order mark)"
    return None


_DECODE = msgspec.json.Decoder().decode


def loads_json(text: str) -> Any:
    """One JSON document, exactly as ``json.loads(text)`` reads it (the same value, the same
    errors), about twice as fast on large files.

    msgspec (jcrist.github.io/msgspec) decodes the text; whatever it refuses (``NaN`` and
    ``Infinity``, integers of more than 4,300 digits, lone surrogates, nesting deeper than it
    reads, invalid JSON) is read again by ``json.loads``, whose value or error is returned.
    Objects with a repeated key keep the last value, as ``json.loads`` does.

    Args:
        text (str): The document.

    Returns:
        Any: The value (dicts, lists, str, int, float, bool, None).

    Raises:
        json.JSONDecodeError: as ``json.loads`` raises it (a ``ValueError``), naming line and
            column; ``RecursionError`` for nesting too deep for ``json.loads``.
    """
    try:
        return _DECODE(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text)


def read_text(path: Path) -> str:
    """A UTF-8 text file's text (a UTF-8 byte-order mark at the start dropped).

    Raises:
        DatasetError: naming the file and the encoding found (UTF-16, UTF-32), or the first
            byte and line that are not UTF-8; or why the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    encoding = foreign_encoding(data)
    if encoding:
        raise DatasetError(f"{path}: the file is {encoding}; toolgym reads UTF-8 (convert it, e.g. with iconv)")
    try:
        return data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes; for a directory (a dataset given as a folder), of the
    relative path and bytes of every file in it, in sorted order."""
    path = Path(path)
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if file is not path:
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def dataset_change(path: str | Path, recorded_sha256: str | None) -> tuple[str | None, str | None]:
    """Whether a dataset file still holds the bytes a run recorded.

    Args:
        path (str | Path): The dataset as read now (a file or a folder).
        recorded_sha256 (str | None): The hex SHA-256 in ``run.json`` (``None``: not recorded).

    Returns:
        tuple[str | None, str | None]: The SHA-256 now (``None`` when the path cannot be
        hashed: a built-in name, a missing file), and a sentence saying the file changed, or
        ``None`` when it did not (or nothing was recorded to compare with).
    """
    try:
        digest = sha256_file(Path(path))
    except OSError:
        return None, None
    if recorded_sha256 is None or digest == recorded_sha256:
        return digest, None
    return digest, (f"the dataset {path} changed since the run recorded it (sha256 {recorded_sha256[:12]}… then, "
                    f"{digest[:12]}… now)")


def _describe(exc: ValidationError) -> str:
    return "; ".join(describe_error(e) for e in exc.errors())


def describe_error(error: Any) -> str:
    """One pydantic validation error of an example as ``field NAME: what is wrong`` (an
    example-level check's own ``field ...`` text as it is; a close field name suggested for a
    mistyped one)."""
    if not error["loc"] and error["msg"].startswith("Value error, field "):
        return error["msg"].removeprefix("Value error, ")
    text = f"field {'.'.join(map(str, error['loc'])) or '(record)'}: {error['msg']}"
    if error.get("type") == "extra_forbidden" and len(error["loc"]) == 1:  # a mistyped field of an example
        close = difflib.get_close_matches(str(error["loc"][0]), list(Example.model_fields), n=1, cutoff=0.6)
        if close:
            text += f" (did you mean {close[0]!r}?)"
    return text



def _encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode text (no lone surrogate), as UTF-8 can store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

def load_examples(
    path: str | Path, benchmark: Benchmark | None = None, options: dict[str, Any] | None = None
) -> list[Example]:
    """Read and validate every example of a dataset file.

    Two forms are accepted:

    * JSON Lines, one :class:`~toolgym.records.Example` per line (blank lines skipped);
    * the LangChain tool-usage JSON form: an object with ``examples``, each with
      ``question``, ``reference`` or ``answer``, ``expected_steps`` and optional
      ``order_matters``; the benchmark's ``from_langchain`` (when given) adds what the
      environment can derive (expected calls, expected state);
    * any format the benchmark reads itself (its ``load_dataset``).

    Raises:
        DatasetError: naming the file and line (JSONL) or example index (JSON) of every
            invalid record and every duplicate id, all in one error (its ``problems``).
    """
    path = Path(path)
    if benchmark is not None and benchmark.load_dataset is not None:
        special = benchmark.load_dataset(path, options or {})
        if special is not None:
            return special
    text = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("{") and '"examples"' in stripped[:200_000] and _is_single_json(text):
        examples = _load_langchain(path, json.loads(text), benchmark)
    else:
        examples, problems, lines = [], [], {}
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if lineno == 1 and _is_single_json(text):
                    raise DatasetError(
                        f"{path}: one JSON object without an 'examples' list: not a dataset "
                        "(expected JSON Lines of examples or the LangChain form with 'examples')"
                    ) from None
                problems.append(f"{path}:{lineno}: not valid JSON: {exc.msg}")
                continue
            except RecursionError:
                problems.append(f"{path}:{lineno}: nested too deep to read (more levels of arrays and objects "
                                "than Python's JSON reader takes)")
                continue
            except ValueError as exc:  # an integer beyond Python's integer-text limit
                problems.append(f"{path}:{lineno}: cannot be read: {exc}")
                continue
            if not isinstance(record, dict):
                problems.append(f"{path}:{lineno}: expected a JSON object")
                continue
            try:
                examples.append(Example.model_validate(record))
                lines[id(examples[-1])] = lineno
            except ValidationError as exc:
                hint = ""  # a first line without toolgym's one required field: another format altogether
                if lineno == 1 and "input" not in record and benchmark is not None and benchmark.load_dataset is not None:
                    hint = (f" (not a dataset in {benchmark.name}'s own format either, nor toolgym's examples: "
                            "is it a dataset of another environment?)")
                problems.append(f"{path}:{lineno}: {_describe(exc)}{hint}")
        first_line: dict[str, int] = {}
        for ex in examples:  # every duplicate, with the line it repeats
            where = lines[id(ex)]
            if ex.id in first_line:
                problems.append(f"{path}:{where}: duplicate example id {ex.id!r} (first on line {first_line[ex.id]})")
            else:
                first_line[ex.id] = where
        if problems:
            raise DatasetError.of(problems, str(path))
    seen: set[str] = set()
    for ex in examples:
        if not _encodable(ex.id):
            raise DatasetError(
                f"{path}: example id {ex.id!r} holds a lone surrogate (half of a UTF-16 pair), which no run "
                "record can store as it is (it would be recorded under another id): fix the id in the dataset"
            )
        if ex.id in seen:
            raise DatasetError(f"{path}: duplicate example id {ex.id!r}")
        seen.add(ex.id)
    if not examples:
        raise DatasetError(f"{path}: no examples")
    return sampled(examples, options or {}, path)


FEW_SHOT_OPTIONS = ("shots", "shots_from")
"""Environment options only a suite's own loader can honour (few-shot examples in the prompt)."""


def sampled(examples: list[Example], options: dict[str, Any], path: str | Path) -> list[Example]:
    """The examples of a dataset read by the generic loaders, as the run's options ask:
    ``sample`` N draws N of them at random without replacement (``sample_seed``, default 0;
    Python's ``random.Random(seed).sample``), kept in dataset order; all of them when N is
    at least their number. Suites with strata draw their own stratified subsets (their
    ``load_dataset``).

    Raises:
        DatasetError: for a ``sample`` or ``sample_seed`` that is not a positive / any
            integer, or a few-shot option (:data:`FEW_SHOT_OPTIONS`) or a ``layout``, which no
            generic dataset can honour (naming the option and the file).
    """
    for key in FEW_SHOT_OPTIONS:
        if options.get(key) is not None:
            raise DatasetError(f"{path}: option {key!r} (--{key.replace('_', '-')}) needs an environment whose own "
                               "dataset format has few-shot examples (the Vietnamese suites); this one has none")
    if options.get("layout") is not None:
        raise DatasetError(f"{path}: option 'layout' (--layout) chooses how an environment's own published files "
                           "are laid out (JMultiWOZ-TC's, read from its release); a dataset read as toolgym's "
                           "examples has none")
    size = options.get("sample")
    if size is None:
        return examples
    seed = options.get("sample_seed", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DatasetError(f"{path}: option 'sample' must be a positive integer, got {size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DatasetError(f"{path}: option 'sample_seed' must be an integer, got {seed!r}")
    if size >= len(examples):
        return examples
    picked = sorted(random.Random(seed).sample(range(len(examples)), size))
    return [examples[i] for i in picked]


def _is_single_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _load_langchain(path: Path, doc: dict[str, Any], benchmark: Benchmark | None) -> list[Example]:
    records = doc.get("examples")
    if not isinstance(records, list):
        raise DatasetError(f"{path}: field 'examples' must be a list")
    examples, problems = [], []
    for index, record in enumerate(records):
        where = f"{path}: examples[{index}]"
        if not isinstance(record, dict) or "question" not in record:
            problems.append(f"{where}: expected an object with 'question'")
            continue
        reference = record.get("reference", record.get("answer"))
        fields: dict[str, Any] = {
            "id": str(record.get("id", index)),
            "input": record["question"],
            "expected_steps": record.get("expected_steps", []),
            "order_matters": record.get("order_matters", True),
            "reference": reference,
            "metadata": {"n_steps": len(record.get("expected_steps", [])), "source": "langchain"},
        }
        try:
            if benchmark is not None and benchmark.from_langchain is not None:
                fields = benchmark.from_langchain(record, fields)
            examples.append(Example.model_validate(fields))
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            detail = _describe(exc) if isinstance(exc, ValidationError) else str(exc)
            problems.append(f"{where}: {detail}")
    if problems:
        raise DatasetError.of(problems, str(path))
    return examples


def write_examples(path: str | Path, examples: list[Example]) -> None:
    """Write examples as JSON Lines (used by the generators), through a temporary file and a
    rename (see :func:`toolgym.runio.atomic_file`).

    Raises:
        OSError: when the file cannot be written (a directory, a read-only place).
        RunDirError: when ``path`` is a record file of a run directory (nothing is written).
    """
    refuse_run_file(path, "the dataset")
    with atomic_file(path) as fh:
        fh.writelines(ex.model_dump_json(exclude_none=True, exclude_defaults=False) + "\n" for ex in examples)


def check_tools(benchmark: Benchmark, examples: list[Example], where: str | Path) -> None:
    """Refuse examples whose ``expected_steps`` or milestone calls name tools the environment
    does not have (minefields may name any tool: a call of a missing tool is refused anyway).
    Each unknown name is reported once, with the examples that use it and the closest tool
    names (:func:`difflib.get_close_matches`) as "did you mean".

    Raises:
        DatasetError: with one problem per unknown tool name in ``expected_steps`` and one per
            milestone call naming a missing tool (its ``problems``).
        EnvironmentUnavailable: when the environment cannot be used at all (an MCP server whose
            credentials were not recorded); any other failure to list the tools leaves the
            check to each episode.
    """
    from toolgym.environments import EnvironmentUnavailable

    try:
        tools = set(benchmark.environment().tool_functions())
    except EnvironmentUnavailable:  # nothing can be played: say so before anything is written
        raise
    except Exception:  # an environment whose tools depend on the example: checked per episode
        return

    def hint(name: str) -> str:
        close = difflib.get_close_matches(name, sorted(tools), n=2, cutoff=0.6)
        return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""

    users: dict[str, dict[str, str]] = {}  # unknown tool -> example id -> the first field naming it
    for ex in examples:
        for name in ex.expected_steps:
            if name not in tools:
                users.setdefault(name, {}).setdefault(ex.id, "expected_steps")
        for milestone in ex.plan.milestones if ex.plan is not None else ():
            for alt, call in enumerate(milestone.alternatives):
                if getattr(call, "kind", "") == "call" and call.name not in tools:
                    field = ".call" if len(milestone.alternatives) == 1 else f".any_of[{alt}].call"
                    users.setdefault(call.name, {}).setdefault(ex.id, f"milestones[{milestone.index}]{field}.name")
                named = call.name if getattr(call, "kind", "") == "result" else None
                if named is not None and named not in tools:  # a result of a tool that does not exist
                    field = ".result" if len(milestone.alternatives) == 1 else f".any_of[{alt}].result"
                    users.setdefault(named, {}).setdefault(ex.id, f"milestones[{milestone.index}]{field}.name")
    problems = []
    for name, uses in users.items():
        shown = ", ".join(f"{ex_id!r} ({field})" for ex_id, field in list(uses.items())[:3])
        more = f" and {len(uses) - 3} more" if len(uses) > 3 else ""
        problems.append(f"{where}: tool {name!r}, named by {len(uses)} example(s) ({shown}{more}): "
                        f"{benchmark.name} has no such tool{hint(name)}")
    if problems:
        every = len({ex_id for uses in users.values() for ex_id in uses}) == len(examples) > 1
        if every and not any(map(hint, users)):
            problems.append(f"{where}: every example names tools {benchmark.name} lacks (it has "
                            f"{', '.join(sorted(tools))}): was the dataset written for another environment?")
        raise DatasetError.of(problems, str(where))
    _warn_unknown_state_keys(benchmark, examples, where)


def _warn_unknown_state_keys(benchmark: Benchmark, examples: list[Example], where: str | Path) -> None:
    """Warn, once, when a state milestone or minefield names a key that the environment's state
    after reset lacks (it can match only if a tool adds the key): a pattern written for another
    environment, or a typo, would otherwise fail or never fire without a word."""
    patterns = [
        (ex, f"milestones[{m.index}]", pattern)
        for ex in examples if ex.plan is not None
        for m in ex.plan.milestones for pattern in m.alternatives if getattr(pattern, "kind", "") == "state"
    ] + [
        (ex, f"minefields[{i}]", pattern)
        for ex in examples if ex.plan is not None
        for i, pattern in enumerate(ex.plan.minefields) if getattr(pattern, "kind", "") == "state"
    ]
    if not patterns:
        return
    ex, field, pattern = patterns[0]
    env = benchmark.environment()
    try:
        env.reset(ex)
        keys = set(env.read_state())
    except Exception:  # an environment that needs more than reset: checked when it plays
        return
    finally:
        with contextlib.suppress(Exception):
            env.close()
    unknown = [(e, f, k) for e, f, p in patterns for k, _ in p.items if k not in keys]
    if unknown:
        e, f, key = unknown[0]
        warnings.warn(
            f"{where}: example {e.id!r}: field {f}.state names the key {key!r}, which the state of {benchmark.name} "
            f"after reset does not have (its keys: {', '.join(sorted(keys)) or 'none'}); it matches only if a tool "
            f"adds it ({len(unknown)} such key(s) in all)", stacklevel=3)


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _same_answer(derived: Any, reference: Any) -> bool:
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        return isinstance(derived, (int, float)) and math.isclose(derived, reference, rel_tol=1e-9, abs_tol=1e-12)
    return str(derived).casefold() == str(reference).casefold()


def replay_problems(benchmark: Benchmark, example: Example) -> list[str]:
    """The dataset rules, checked on one example by replaying its expected calls on a fresh
    environment (what the ``oracle`` agent does); an empty list when it satisfies them:

    * every expected call runs without a tool error;
    * the final state holds the example's ``expected_state`` (the keys it names), and the
      state after each user turn of a multi-turn example its ``expected_states``;
    * when the benchmark derives answers (``answer_from_replay``), the answer the observations
      imply equals ``reference`` (numbers within a relative 1e-9, text ignoring case).

    Examples without ``expected_calls`` have nothing to replay (only their tool names are
    checked, by :func:`check_tools`). The replay is :func:`toolgym.replay.reference_replay`'s
    (the one the graders use); a reset, tool or ``read_state`` that raises is reported as a
    problem too (a broken example or environment is a benchmark defect).
    """
    if example.expected_calls is None:
        return []
    from toolgym.replay import reference_replay

    replay = reference_replay(benchmark, example)
    problems = []
    results = []
    for i, step in enumerate(replay.tool_steps):
        if step.error:
            problems.append(f"{example.id}: expected call {i + 1} {step.name}({step.arguments}) fails: {step.output}")
        results.append((step.name, _decode(step.output)))
    if replay.status == "error":
        done = len(replay.tool_steps)
        where = f"after {done} of its {len(example.expected_calls)} expected calls" if done else "before its first call"
        problems.append(f"{example.id}: replaying its expected calls fails {where}: {replay.error}")
        return problems
    state = replay.final_state
    for k, (expected, reached_state) in enumerate(zip(example.expected_states or [], replay.turn_states or [],
                                                     strict=False), 1):
        reached = {key: reached_state.get(key) for key in expected}
        if reached != expected:
            problems.append(f"{example.id}: replay reaches {reached} after user turn {k}, expected_states[{k - 1}] is "
                            f"{expected}")
    if example.expected_state is not None:
        reached = {k: state.get(k) for k in example.expected_state}
        if reached != example.expected_state:
            problems.append(f"{example.id}: replay reaches {reached}, expected_state is {example.expected_state}")
    if example.reference is not None and benchmark.answer_from_replay is not None and results:
        derived = benchmark.answer_from_replay(example, results)
        if not _same_answer(derived, example.reference):
            problems.append(f"{example.id}: replay implies the answer {derived!r}, reference is {example.reference!r}")
    return problems


def check_dataset(benchmark: Benchmark, examples: list[Example], where: str | Path = "dataset") -> list[str]:
    """Every dataset rule on every example (``toolgym check``): the expected tools exist
    (:func:`check_tools`) and replaying each example's expected calls reproduces its expected
    state and reference (:func:`replay_problems`).

    Returns:
        One line per problem found; empty when the dataset is sound.
    """
    try:
        check_tools(benchmark, examples, where)
    except DatasetError as exc:
        return exc.problems
    return [problem for ex in examples for problem in replay_problems(benchmark, ex)]

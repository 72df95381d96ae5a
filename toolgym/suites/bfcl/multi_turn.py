"""BFCL's multi-turn categories: conversations over eight stateful APIs, graded by the
leaderboard's own checker.

The four categories (``multi_turn_base``, ``multi_turn_miss_param``, ``multi_turn_miss_func``,
``multi_turn_long_context``; 200 entries each) ship with the PyPI package ``bfcl-eval``
(github.com/ShishirPatil/gorilla, ``berkeley-function-call-leaderboard``, Apache 2.0): the
questions, the possible answers, the function documents, the API classes
(``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/``) and the official
``multi_turn_checker``. This module imports them from the installed package and copies none
of them. The package's declared dependencies (torch, faiss, a pinned numpy) are not needed by
these modules, so it is installed without them: :data:`INSTALL`.

An entry (``{"id", "question": [[{"role": "user", "content"}], ...], "initial_config":
{class: state}, "involved_classes", "excluded_function"?, "missed_function"?: {turn index:
[names]}}``) becomes an :class:`~toolgym.Example` whose ``input`` is its first user turn,
``turns`` the later ones and ``metadata`` everything the environment and the checker need.
The ground truth is one list of call strings per turn (``["cd(folder='document')", ...]``).

What this module defines, in the leaderboard's terms:

* :class:`APIs`: the involved classes instantiated and loaded with the entry's initial
  configuration (``_load_scenario``, ``long_context`` for that category), a method call
  executed and its result written as the checker writes it (a string as is, a dict as JSON,
  anything else with ``str``; an exception as ``"Error during execution: <message>"``), and
  the state as the checker compares it (the public attributes of every instance, File and
  Directory objects by the fields their ``__eq__`` compares);
* :func:`official_verdict`: the leaderboard's rule for one entry (``_evaluate_single_multi_turn_entry``
  of ``bfcl_eval/eval_checker/eval_runner.py``: a result that is not a list is an
  ``inference_error``, a turn count other than the ground truth's is ``force_terminated``,
  empty steps are dropped) and then the package's own ``multi_turn_checker``, imported;
* :func:`stepwise`: toolgym's view beside it, from its own replay: the state after every turn,
  and the first failing turn, step and call with the checker's error type.
"""

from __future__ import annotations

import ast
import copy
import datetime
import functools
import importlib
import inspect
import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym import DatasetError

__all__ = [
    "ADDED_FUNCTIONS_PROMPT",
    "INSTALL",
    "MULTI_TURN_CATEGORIES",
    "APIs",
    "Judgement",
    "Stepwise",
    "call_string",
    "category_path",
    "function_docs",
    "judge",
    "keyword_call",
    "load_multi_turn",
    "method_signatures",
    "official_verdict",
    "package",
    "parse_call",
    "replay_states",
    "state_of",
    "stepwise",
]

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23 mpmath"
"""The command that installs what the multi-turn categories need (the package without its
declared dependencies, plus ``mpmath``, which its math API imports)."""

MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_param", "multi_turn_miss_func", "multi_turn_long_context")
"""The four multi-turn categories of BFCL v4 (800 entries)."""

ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
"""The user message of a miss_func turn that adds functions (the package's
``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``; checked against it by the tests)."""

_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval"


@functools.cache
def package() -> Any:
    """The installed ``bfcl_eval`` package.

    Raises:
        DatasetError: when it is not installed, with the command that installs it (:data:`INSTALL`).
    """
    try:
        return importlib.import_module("bfcl_eval")
    except ImportError:
        raise DatasetError(f"BFCL's multi-turn categories need the bfcl-eval package: {INSTALL}") from None


def _backend() -> Any:
    package()
    return importlib.import_module("bfcl_eval.constants.executable_backend_config")


def _data_dir() -> Path:
    return Path(package().__file__).parent / "data"


def category_path(name: str) -> Path | None:
    """The package's test file of a multi-turn category given by name (``multi_turn_base``;
    ``base`` and ``BFCL_v4_multi_turn_base`` too), or ``None`` for any other name.

    Raises:
        DatasetError: for a multi-turn category name when the package is not installed.
    """
    stem = name.removesuffix(".json").removeprefix("BFCL_v4_")
    if not stem.startswith("multi_turn_"):
        stem = f"multi_turn_{stem}"
    if stem not in MULTI_TURN_CATEGORIES:
        return None
    return _data_dir() / f"BFCL_v4_{stem}.json"


def function_docs(classes: list[str]) -> list[dict[str, Any]]:
    """The published function documents of the given API classes, in their order (the
    package's ``data/multi_turn_func_doc/<file>.json``, one document per line).

    Raises:
        DatasetError: for a class the package does not document.
    """
    mapping = _backend().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    docs: list[dict[str, Any]] = []
    for name in classes:
        if name not in mapping:
            raise DatasetError(f"BFCL multi-turn: no function documents for class {name!r} (known: {', '.join(mapping)})")
        docs.extend(_docs_file(mapping[name]))
    return copy.deepcopy(docs)


@functools.cache
def _docs_file(file_name: str) -> list[dict[str, Any]]:
    path = _data_dir() / "multi_turn_func_doc" / file_name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- calls ----------------------------------------------------------------------------------
def call_string(name: str, arguments: dict[str, Any]) -> str:
    """A call as the leaderboard's function-calling handlers decode it for execution:
    ``name(a=1,b='x')`` (each value written with ``repr``)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``name``, positional and keyword arguments of a call string whose arguments are
    Python literals.

    Raises:
        ValueError: when the string is not one such call.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("not a call of a function by name")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except ValueError:
        raise ValueError("an argument is not a literal") from None
    if any(k.arg is None for k in node.keywords):
        raise ValueError("** arguments are not supported")
    return node.func.id, args, kwargs


# --- the API classes ------------------------------------------------------------------------
def _result_text(value: Any) -> str:
    # as the checker writes an execution result: a str as is, a dict as JSON (str() when not
    # serialisable), anything else with str()
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a state value, equal where the checker's ``!=`` finds them equal."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    kind = type(value).__name__
    if kind == "Directory":  # gorilla_file_system: equal by name and contents (not parent)
        return {"type": "directory", "name": value.name, "contents": _plain(value.contents)}
    if kind == "File":  # equal by name and content
        return {"type": "file", "name": value.name, "content": value.content}
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def state_of(instance: Any) -> dict[str, Any]:
    """The state of one API instance as the checker compares it: its public attributes
    (``vars`` without names starting with ``_``), JSON-safe (:func:`_plain`)."""
    return {k: _plain(v) for k, v in vars(instance).items() if not k.startswith("_")}


class APIs:
    """The involved API classes of one entry, instantiated from the installed package and
    loaded with the entry's initial configuration, as the checker loads them.

    Args:
        classes (list[str]): ``involved_classes`` (``GorillaFileSystem``, ``TwitterAPI``, ...).
        initial_config (dict): ``{class: configuration}``; deep-copied.
        long_context (bool): Load the long-context scenario (the long_context category).

    Raises:
        DatasetError: for a class the package does not know, or the package missing.
    """

    def __init__(self, classes: list[str], initial_config: dict[str, Any], long_context: bool = False) -> None:
        backend = _backend()
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, tuple[str, Any]] = {}
        for name in classes:
            module = backend.CLASS_FILE_PATH_MAPPING.get(name)
            if module is None:
                raise DatasetError(f"BFCL multi-turn: unknown API class {name!r}")
            instance = getattr(importlib.import_module(module), name)()
            if name not in backend.STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self.methods[method_name] = (name, method)

    def execute(self, name: str, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> str:
        """Call a method by name, on copies of the arguments; its result (or error) as the
        checker records it.

        Returns:
            str: The result text, or ``"Error during execution: <message>"`` for an unknown
            method or an exception it raised.
        """
        found = self.methods.get(name)
        # the methods keep what they are given (a tweet keeps its list of mentions and a later
        # call appends to it): a copy, so the caller's values (a trajectory's recorded arguments)
        # never change, as the checker's calls, evaluated from strings, get fresh values
        args, kwargs = copy.deepcopy(list(args or [])), copy.deepcopy(dict(kwargs or {}))
        try:
            if found is None:
                raise NameError(f"name '{name}' is not defined")
            return _result_text(found[1](*args, **kwargs))
        except Exception as exc:  # the checker records any exception as the call's result
            return f"Error during execution: {exc}"

    def execute_string(self, text: str) -> str:
        """Execute a call string (:func:`parse_call`); a string that is not a call of
        literals gives ``"Error during execution: ..."``."""
        try:
            name, args, kwargs = parse_call(text)
        except ValueError as exc:
            return f"Error during execution: {exc}"
        return self.execute(name, args, kwargs)

    def keywords(self, text: str) -> tuple[str, dict[str, Any]]:
        """A call string's name and its arguments by parameter name (positional arguments
        named by the method's signature).

        Raises:
            ValueError: when the string is not a call of literals or its arguments do not fit.
        """
        name, args, kwargs = parse_call(text)
        if args:
            found = self.methods.get(name)
            if found is None:
                raise ValueError(f"unknown method {name!r}")
            bound = inspect.signature(found[1]).bind_partial(*args, **kwargs)
            kwargs = dict(bound.arguments)
        return name, kwargs

    def state(self) -> dict[str, Any]:
        """``{class: state}`` of every stateful instance (:func:`state_of`)."""
        stateless = _backend().STATELESS_CLASSES
        return {name: state_of(inst) for name, inst in self.instances.items() if name not in stateless}


# --- the official verdict -------------------------------------------------------------------
_CHECKER_LOCK = threading.Lock()


def _decoded(result: list[Any]) -> list[list[list[str]]]:
    # the runner's decoding of the decoded form: a step that is not a non-empty list of strings holds
    # no executable call and is dropped (as a step whose decoding fails or is empty is dropped there)
    turns = []
    for turn in result:
        steps = []
        for step in turn if isinstance(turn, list) else []:
            if isinstance(step, list) and step and all(isinstance(c, str) for c in step):
                steps.append(list(step))
        turns.append(steps)
    return turns


def official_verdict(entry: dict[str, Any], result: Any, ground_truth: list[list[str]]) -> dict[str, Any]:
    """The leaderboard's verdict on one entry's result, from the package's ``multi_turn_checker``.

    The rule of ``_evaluate_single_multi_turn_entry`` (``bfcl_eval/eval_checker/eval_runner.py``)
    first: a result that is not a list fails with ``multi_turn:inference_error``; one with a
    number of turns other than the ground truth's with ``multi_turn:force_terminated``; steps
    that hold no call are dropped. Then the package's checker: after every turn with a
    ground truth, the state of every involved instance compared with the ground truth's and
    the execution results of the ground truth's calls looked for among all the model's
    results so far.

    Args:
        entry (dict): ``{"id", "initial_config", "involved_classes"}``.
        result (Any): The decoded result: per turn, per step, a list of call strings.
        ground_truth (list[list[str]]): Per turn, the ground truth's call strings.

    Returns:
        dict: ``{"valid": bool}`` and, on failure, ``error_type`` and ``error_message`` (the
        checker's), plus ``details`` where it gives them (``differences`` of a state mismatch,
        ``missing_items`` of a response mismatch; values longer than :data:`DETAIL_CHARS`
        cut).
    """
    if not isinstance(result, list):
        return {"valid": False, "error_type": "multi_turn:inference_error",
                "error_message": "Error during inference phase. Model did not output a list of model responses."}
    if len(result) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"Model was force-terminated during inference phase. The length of the model result turns "
                                 f"({len(result)}) does not match the length of the ground truth turns ({len(ground_truth)})."}
    package()
    checker = importlib.import_module(f"{_PREFIX}.multi_turn_checker")
    utils = importlib.import_module(f"{_PREFIX}.multi_turn_utils")
    # the checker keeps each instance in its module's globals under a name made of the model
    # name and the entry id; a fresh model name per call keeps verdicts apart, and the names
    # are removed afterwards
    model = f"toolgym_{uuid.uuid4().hex}"
    test_entry = {"id": entry["id"], "initial_config": entry["initial_config"], "involved_classes": entry["involved_classes"]}
    try:
        verdict = checker.multi_turn_checker(_decoded(result), ground_truth, copy.deepcopy(test_entry),
                                             entry["id"].rsplit("_", 1)[0], model)
    finally:
        with _CHECKER_LOCK:
            for key in [k for k in utils.__dict__ if k.startswith(model)]:
                utils.__dict__.pop(key, None)
    out = {"valid": bool(verdict.get("valid"))}
    if not out["valid"]:
        out["error_type"] = verdict.get("error_type")
        out["error_message"] = verdict.get("error_message")
        details = verdict.get("details") or {}
        kept = {k: details[k] for k in ("differences", "missing_items") if k in details}
        if kept:
            out["details"] = _short(json.loads(json.dumps(kept, default=_plain_default)))
    return out


DETAIL_CHARS = 1000
"""The longest value (in characters of JSON) the details of a verdict keep; a longer one (a
long-context file system) is kept as its JSON cut there."""


def _short(value: Any, depth: int = 0) -> Any:
    text = json.dumps(value, sort_keys=True)
    if len(text) <= DETAIL_CHARS:
        return value
    if isinstance(value, dict) and depth < 2:
        return {k: _short(v, depth + 1) for k, v in value.items()}
    return f"{text[:DETAIL_CHARS]}… ({len(text) - DETAIL_CHARS:,} more characters)"


def _plain_default(value: Any) -> Any:
    plain = _plain(value)
    return plain if not isinstance(plain, type(value)) else str(value)


# --- toolgym's stepwise view ----------------------------------------------------------------
@dataclass
class Stepwise:
    """A result replayed turn by turn beside the ground truth.

    Attributes:
        states: The state after each turn (``{class: state}``), one per turn played.
        expected_states: The ground truth's state after each turn.
        turn: The first failing turn (1-based), or ``None``.
        step: The step of that turn at fault (1-based; ``None`` when the turn as a whole
            falls short: no call, or a state or result the turn's calls never reach).
        call: The call at fault, counted over the whole result from 0 (the number of calls
            up to the end of the turn when no single call is at fault).
        error_type: The checker's error type of that turn.
        reason: One sentence.
        outputs: The result of each of the model's calls, in order, as the checker records it.
    """

    states: list[dict[str, Any]] = field(default_factory=list)
    expected_states: list[dict[str, Any]] = field(default_factory=list)
    turn: int | None = None
    step: int | None = None
    call: int | None = None
    error_type: str | None = None
    reason: str = ""
    outputs: list[str] = field(default_factory=list)


def replay_states(entry: dict[str, Any], turns: list[list[str]]) -> list[dict[str, Any]]:
    """The state after each turn of a list of call strings per turn (the ground truth's
    ``expected_states``)."""
    apis = APIs(entry["involved_classes"], entry["initial_config"], "long_context" in entry["id"])
    states = []
    for calls in turns:
        for text in calls:
            apis.execute_string(text)
        states.append(apis.state())
    return states


def _subsequence_missing(expected: list[str], got: list[str]) -> list[str]:
    pool = list(got)
    missing = []
    for item in expected:
        if item in pool:
            pool.remove(item)
        else:
            missing.append(item)
    return missing


def stepwise(entry: dict[str, Any], result: Any, ground_truth: list[list[str]]) -> Stepwise:
    """Replay a decoded result beside the ground truth, turn by turn, and find where it first
    fails, by the checker's rules read as toolgym's own steps.

    A turn fails as the checker fails it: no call where the ground truth has some
    (``multi_turn:empty_turn_model_response``), a state other than the ground truth's
    (``multi_turn:instance_state_mismatch``), or a ground-truth result missing from all the
    results so far (``multi_turn:execution_response_mismatch``). The step at fault in a turn
    whose state is wrong is the first call after which the state of a mismatching class is
    none of the states the ground truth passes through in that turn (a call that did what
    the ground truth never does); when every call stays on that path the turn stopped short,
    and no single step is at fault. A result with the wrong number of turns (which the
    official checker fails as ``multi_turn:force_terminated`` without looking further) fails
    at the first played turn that fails, else at the first turn it lacks (or the first extra
    one): for a conversation cut short by a step limit, the error it made first.

    Args:
        entry (dict): ``{"id", "initial_config", "involved_classes"}``.
        result (Any): Per turn, per step, a list of call strings.
        ground_truth (list[list[str]]): Per turn, the ground truth's call strings.

    Returns:
        Stepwise: The states and the first failure (none when the result passes).
    """
    view = Stepwise()
    long_context = "long_context" in entry["id"]
    model = APIs(entry["involved_classes"], entry["initial_config"], long_context)
    truth = APIs(entry["involved_classes"], entry["initial_config"], long_context)
    if not isinstance(result, list):
        view.turn, view.call, view.error_type = 1, 0, "multi_turn:inference_error"
        view.reason = "the result is not a list of turns"
        return view
    turns = _decoded(result)
    all_results: list[str] = []
    calls_before = 0
    for index, expected in enumerate(ground_truth):
        if index >= len(turns):
            if view.turn is None:  # a failure in a turn played comes first
                view.turn, view.call, view.error_type = index + 1, calls_before, "multi_turn:force_terminated"
                view.reason = f"the result ends after {len(turns)} of {len(ground_truth)} turns"
            return view
        truth_path = [truth.state()]
        truth_results = []
        for text in expected:
            truth_results.append(truth.execute_string(text))
            truth_path.append(truth.state())
        per_call: list[tuple[int, int, dict[str, Any], str]] = []  # (step, call index, state after, result)
        for step_index, step in enumerate(turns[index], 1):
            for text in step:
                outcome = model.execute_string(text)
                all_results.append(outcome)
                view.outputs.append(outcome)
                per_call.append((step_index, calls_before + len(per_call), model.state(), outcome))
        turn_calls = len(per_call)
        view.states.append(model.state())
        view.expected_states.append(truth_path[-1])
        if view.turn is not None or not expected:
            calls_before += turn_calls
            continue
        if not per_call:
            view.turn, view.call, view.error_type = index + 1, calls_before, "multi_turn:empty_turn_model_response"
            view.reason = f"turn {index + 1}: no call, where the ground truth makes {len(expected)}"
        elif view.states[-1] != truth_path[-1]:
            wrong = sorted(c for c in truth_path[-1] if view.states[-1].get(c) != truth_path[-1][c])
            view.turn, view.error_type = index + 1, "multi_turn:instance_state_mismatch"
            path = {c: [s[c] for s in truth_path] for c in wrong}
            off = next((p for p in per_call if any(p[2].get(c) not in path[c] for c in wrong)), None)
            if off is not None:
                view.step, view.call = off[0], off[1]
                view.reason = (f"turn {index + 1}, step {off[0]}: after this call the state of {', '.join(wrong)} is none "
                               "the ground truth passes through")
            else:
                view.call = calls_before + turn_calls
                view.reason = f"turn {index + 1}: the state of {', '.join(wrong)} stops short of the ground truth's"
        else:
            missing = _subsequence_missing(truth_results, all_results)
            if missing:
                view.turn, view.call, view.error_type = index + 1, calls_before + turn_calls, "multi_turn:execution_response_mismatch"
                view.reason = f"turn {index + 1}: {len(missing)} result(s) of the ground truth never returned: {missing[0][:120]!r}"
        calls_before += turn_calls
    if view.turn is None and len(turns) > len(ground_truth):
        view.turn, view.call, view.error_type = len(ground_truth) + 1, calls_before, "multi_turn:force_terminated"
        view.reason = f"the result has {len(turns)} turns, the ground truth {len(ground_truth)}"
    return view


# --- loading --------------------------------------------------------------------------------
def method_signatures(classes: list[str]) -> dict[str, inspect.Signature]:
    """The signatures of the public methods of the given API classes, by method name."""
    backend = _backend()
    found: dict[str, inspect.Signature] = {}
    for name in classes:
        cls = getattr(importlib.import_module(backend.CLASS_FILE_PATH_MAPPING[name]), name)
        for method_name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not method_name.startswith("_"):
                found[method_name] = inspect.signature(method)
    return found


def keyword_call(text: str, signatures: dict[str, inspect.Signature]) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string as a tool call: its name and its arguments by parameter
    name (``sort('a.txt')`` → ``("sort", {"file_name": "a.txt"})``).

    Raises:
        ValueError: when the string is not a call of literals of a known method.
    """
    name, args, kwargs = parse_call(text)
    if args:
        if name not in signatures:
            raise ValueError(f"unknown method {name!r}")
        bound = signatures[name].bind_partial(None, *args, **kwargs)
        kwargs = {k: v for k, v in bound.arguments.items() if k != "self"}
    return name, kwargs


def is_multi_turn_file(path: Path, first: dict[str, Any] | None) -> bool:
    """Whether a test file holds multi-turn entries: by its name
    (``BFCL_v4_multi_turn_<...>.json``) or its first record (``involved_classes``)."""
    return "multi_turn" in path.name or (isinstance(first, dict) and "involved_classes" in first)


def load_multi_turn(path: Path, rows: list[tuple[int, dict[str, Any]]], answers: dict[str, Any],
                    answer_file: Path) -> list[Any]:
    """The examples of a multi-turn test file (called by :func:`toolgym.suites.bfcl.data.load_examples`).

    Each entry becomes one example: ``input`` its first user turn (as a chat history),
    ``turns`` the later ones (a miss_func turn without a message gets
    :data:`ADDED_FUNCTIONS_PROMPT`, as the leaderboard's inference sends), ``expected_states``
    the ground truth's state after every turn (:func:`replay_states`, graded by
    ``turn_state``), and in ``metadata``: ``turns`` (every turn's user message),
    ``category``, ``multi_turn`` (true), ``involved_classes``,
    ``initial_config``, ``excluded_function`` (recorded; the leaderboard's inference of this
    version offers those functions all the same, and so does toolgym), ``missed_function``
    (``{turn number from 1: [function names]}``: withheld until that turn),
    ``functions`` (the documents offered from turn 1) and ``ground_truth`` (per turn, the
    call strings). ``expected_calls`` are the ground truth's calls in order, arguments by
    name, each with its ``turn`` (what the ``oracle`` agent replays, turn by turn).

    Raises:
        DatasetError: naming file and line for a malformed entry, one without a possible
            answer, or one whose ground truth has another number of turns than its question.
    """
    from toolgym import Example, ToolCallSpec

    examples = []
    for number, record in rows:
        where = f"{path}:{number}"
        for key, kind in (("question", list), ("initial_config", dict), ("involved_classes", list)):
            if not isinstance(record.get(key), kind):
                raise DatasetError(f"{where}: multi-turn entry {record['id']!r}: {key!r} must be a {kind.__name__}")
        question, classes = record["question"], record["involved_classes"]
        truth = answers.get(record["id"])
        if truth is None:
            raise DatasetError(f"{where}: entry {record['id']!r} has no possible answer in {answer_file}")
        if not isinstance(truth, list) or len(truth) != len(question) or not all(isinstance(t, list) for t in truth):
            raise DatasetError(f"{answer_file}: entry {record['id']!r}: the ground truth must be one list of calls per turn "
                               f"({len(question)} turns)")
        missed = record.get("missed_function") or {}
        docs = function_docs(classes)
        withheld = {n for names in missed.values() for n in names}
        messages = []
        for index, turn in enumerate(question):
            if not isinstance(turn, list):
                raise DatasetError(f"{where}: turn {index + 1} must be a list of messages")
            if not turn and str(index) in missed:
                messages.append(ADDED_FUNCTIONS_PROMPT)
            elif len(turn) == 1 and isinstance(turn[0], dict) and turn[0].get("role") == "user":
                messages.append(str(turn[0].get("content", "")))
            else:
                raise DatasetError(f"{where}: turn {index + 1} must be one user message (or, in miss_func, none where "
                                   "functions are added)")
        signatures = method_signatures(classes)
        calls = []
        for turn, turn_calls in enumerate(truth, 1):
            for text in turn_calls:
                try:
                    name, kwargs = keyword_call(text, signatures)
                except (ValueError, TypeError) as exc:
                    raise DatasetError(f"{answer_file}: entry {record['id']!r}: ground-truth call {text!r}: {exc}") from None
                calls.append(ToolCallSpec(name=name, arguments=kwargs, turn=turn))
        category = record["id"].rsplit("_", 1)[0]
        meta = {
            "category": category, "language": "python", "multi_turn": True, "involved_classes": classes,
            "initial_config": record["initial_config"], "excluded_function": record.get("excluded_function") or [],
            "missed_function": {str(int(k) + 1): list(v) for k, v in missed.items()},
            "functions": [d for d in docs if d["name"] not in withheld], "ground_truth": truth, "turns": messages,
            "n_steps": len(calls),
        }
        entry = {"id": record["id"], "initial_config": record["initial_config"], "involved_classes": classes}
        examples.append(Example(id=record["id"], input=[{"role": "user", "content": messages[0]}], turns=messages[1:],
                                expected_calls=calls, expected_states=replay_states(entry, truth), metadata=meta))
    if not examples:
        raise DatasetError(f"{path}: no entries")
    return examples


# --- one verdict: the official one and toolgym's view ---------------------------------------
@dataclass
class Judgement:
    """The official verdict on a multi-turn result and toolgym's stepwise view of it.

    Attributes:
        official: :func:`official_verdict`'s dict (``valid``, ``error_type``, ...).
        view: :func:`stepwise`'s replay (states per turn, first failing turn and step).
    """

    official: dict[str, Any]
    view: Stepwise

    @property
    def turn_states(self) -> list[bool]:
        """Whether the state after each played turn equals the ground truth's (toolgym's
        per-turn view: every turn, also those the official checker does not check)."""
        return [a == b for a, b in zip(self.view.states, self.view.expected_states, strict=True)]


_JUDGED: dict[tuple[str, str], Judgement] = {}
_JUDGED_MAX = 512  # a long-context judgement holds its states: a bounded memory


def judge(entry: dict[str, Any], result: Any, ground_truth: list[list[str]]) -> Judgement:
    """:func:`official_verdict` and :func:`stepwise` of one result, remembered for the last
    results judged (the grader, ``show`` and the exporter ask for the same verdict).

    Args:
        entry (dict): ``{"id", "initial_config", "involved_classes"}``.
        result (Any): The decoded result (per turn, per step, a list of call strings).
        ground_truth (list[list[str]]): Per turn, the ground truth's call strings.

    Returns:
        Judgement: Both views.
    """
    key = (entry["id"], json.dumps([result, ground_truth, entry["initial_config"]], sort_keys=True, default=str))
    found = _JUDGED.get(key)
    if found is None:
        found = Judgement(official_verdict(entry, result, ground_truth), stepwise(entry, result, ground_truth))
        if len(_JUDGED) >= _JUDGED_MAX:
            _JUDGED.pop(next(iter(_JUDGED)))
        _JUDGED[key] = found
    return found

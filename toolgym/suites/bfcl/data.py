"""Reading the Berkeley Function Calling Leaderboard's single-turn test files, and the function
documents as its function-calling mode shows them to a model.

The data (github.com/ShishirPatil/gorilla, ``berkeley-function-call-leaderboard/bfcl_eval/data/``,
Apache 2.0) is JSON Lines despite the ``.json`` name:

* ``BFCL_v4_<category>.json``: ``{"id", "question": [[{"role", "content"}, ...]], "function":
  [{"name", "description", "parameters": {"type": "dict", "properties", "required"}}]}``;
* ``possible_answer/BFCL_v4_<category>.json``: ``{"id", "ground_truth": [{fn: {arg: [acceptable
  values...]}}]}`` (none for the irrelevance and relevance categories), where ``""`` among the
  values marks an argument that may be omitted.

Each entry becomes one :class:`~toolgym.Example`: the question as the chat history, the entry's
functions and ground truth in ``metadata``, and as ``expected_calls`` the first acceptable
answer of every call (what the ``oracle`` agent replays; :func:`oracle_calls`).

The conversion of a function document follows the leaderboard's generation code
(``bfcl_eval/utils.py``, ``_func_doc_language_specific_pre_processing``; ``bfcl_eval/model_handler/
utils.py``, ``convert_to_tool`` and ``_cast_to_openai_type``; ``bfcl_eval/constants/
type_mappings.py``, ``GORILLA_TO_OPENAPI``), rewritten here: see :func:`language_document` and
:func:`fc_schema`.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym import DatasetError, Example, ToolCallSpec
from toolgym.data import read_text
from toolgym.suites.bfcl.multi_turn import MULTI_TURN_CATEGORIES, is_multi_turn_file, load_multi_turn
from toolgym.suites.bfcl.values import first_value, to_source

__all__ = [
    "CATEGORIES",
    "Entry",
    "category_of",
    "entries_of",
    "entry_of",
    "fc_name",
    "fc_schema",
    "language_document",
    "language_of",
    "load_examples",
    "oracle_calls",
    "placeholder_call",
]

CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
    "irrelevance", "live_irrelevance", "live_relevance",
)
"""The 13 single-turn categories of BFCL v4 this suite reads by path (the four multi-turn ones:
:data:`toolgym.suites.bfcl.multi_turn.MULTI_TURN_CATEGORIES`; the agentic ones are not run)."""

_FILE = re.compile(r"BFCL_v\d+_(\w+?)(?:_result|_score)?\.json$")
_ID = re.compile(r"^(?P<category>[a-z_]+?)_\d+(?:-\d+)*$")

# The leaderboard's type names mapped to JSON Schema (GORILLA_TO_OPENAPI of
# bfcl_eval/constants/type_mappings.py); any other name becomes "string", as there.
_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string", "byte": "integer", "short": "integer", "long": "integer", "double": "number", "char": "string",
    "ArrayList": "array", "Array": "array", "HashMap": "object", "Hashtable": "object", "Queue": "array",
    "Stack": "array", "Any": "string", "String": "string", "Bigint": "integer",
}

# The leaderboard's language hints (quoted from _get_language_specific_hint and
# _func_doc_language_specific_pre_processing of bfcl_eval/utils.py: they are part of what the
# model reads, so they are kept word for word).
_HINT = {
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
    "python": " Note that the provided function is in Python 3 syntax.",
}
_LANGUAGE_NAME = {"java": "Java", "javascript": "JavaScript"}


def category_of(entry_id: str, path: Path | None = None) -> str:
    """The test category of an entry: from its id (``simple_python_12`` → ``simple_python``,
    ``live_irrelevance_3-0-1`` → ``live_irrelevance``), else from the file name.

    Raises:
        DatasetError: when neither names a category.
    """
    match = _ID.match(entry_id)
    if match and (match["category"] in CATEGORIES or match["category"] in MULTI_TURN_CATEGORIES):
        return match["category"]
    if path is not None and (m := _FILE.search(path.name)):
        return m.group(1)
    raise DatasetError(f"{path or 'bfcl'}: cannot tell the category of entry {entry_id!r}")


def language_of(category: str) -> str:
    """``java`` for simple_java, ``javascript`` for simple_javascript, else ``python``."""
    return {"simple_java": "java", "simple_javascript": "javascript"}.get(category, "python")


def fc_name(name: str) -> str:
    """A function name as the function-calling mode offers it: dots replaced by underscores
    (tool names must match ``^[a-zA-Z0-9_-]{1,64}$``; ``convert_to_tool``)."""
    return name.replace(".", "_")


def language_document(function: dict[str, Any], language: str) -> dict[str, Any]:
    """A function document with the leaderboard's language-specific changes (a copy).

    The description gets the language hint. For Java and JavaScript every parameter becomes
    ``"type": "string"`` (values are written as source code), its description saying which
    type it stands for; the element type of arrays and the schema of JavaScript dicts move into
    the description. Python documents keep their types.

    Args:
        function (dict): ``{"name", "description", "parameters"}`` as in the data.
        language (str): ``python``, ``java`` or ``javascript``.

    Returns:
        dict: The changed document.
    """
    doc = copy.deepcopy(function)
    doc["description"] = str(doc.get("description", "")) + _HINT[language]
    if language == "python":
        return doc
    lang = _LANGUAGE_NAME[language]
    for spec in doc.get("parameters", {}).get("properties", {}).values():
        kind = spec.get("type")
        text = str(spec.get("description", ""))
        if kind == "any":
            text += f" This parameter can be of any type of {lang} object in string representation."
        else:
            text += f" This is {lang} {kind} type parameter in string representation."
        if kind in (("ArrayList", "Array") if language == "java" else ("array",)) and "items" in spec:
            text += f" The list elements are of type {spec['items'].get('type')}; they are not in string representation."
            del spec["items"]
        if language == "javascript" and kind == "dict" and "properties" in spec:
            text += (" The dictionary entries have the following schema; they are not in string representation. "
                     + json.dumps(spec["properties"]))
            del spec["properties"]
        spec["description"] = text
        spec["type"] = "string"
    return doc


def _to_openapi(properties: dict[str, Any]) -> dict[str, Any]:
    for spec in properties.values():
        kind = spec.get("type")
        if kind is None:
            spec["type"] = "string"
        else:
            if kind == "float":
                spec["format"] = "float"
                spec["description"] = str(spec.get("description", "")) + " This is a float type value."
            spec["type"] = _OPENAPI.get(kind, "string") if isinstance(kind, str) else "string"
        if spec["type"] in ("array", "object"):
            if isinstance(spec.get("properties"), dict):
                _to_openapi(spec["properties"])
            elif isinstance(spec.get("items"), dict):
                items = spec["items"]
                items["type"] = _OPENAPI.get(items.get("type"), "string")
                if items["type"] == "array" and isinstance(items.get("items"), dict):
                    items["items"]["type"] = _OPENAPI.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and isinstance(items.get("properties"), dict):
                    _to_openapi(items["properties"])
    return properties


def fc_schema(function: dict[str, Any], language: str) -> dict[str, Any]:
    """An OpenAI-style function schema of a BFCL function, as the leaderboard's
    function-calling mode makes it.

    After :func:`language_document`: the name gets underscores for dots (:func:`fc_name`),
    ``parameters.type`` becomes ``object``, each property's type is mapped to JSON Schema
    (``dict`` → ``object``, ``float`` → ``number`` with ``"format": "float"`` and the sentence
    "This is a float type value." added to its description, ``tuple`` → ``array``, ``any`` and
    unknown or missing types → ``string``), recursively into object properties and up to two
    levels of array items.

    Args:
        function (dict): A function of the data.
        language (str): ``python``, ``java`` or ``javascript``.

    Returns:
        dict: ``{"name", "description", "parameters"}`` with a JSON-schema ``parameters``.
    """
    doc = language_document(function, language)
    params = doc.get("parameters") or {}
    params["type"] = "object"
    params["properties"] = _to_openapi(params.get("properties") or {})
    return {"name": fc_name(doc["name"]), "description": doc.get("description", ""), "parameters": params}


@dataclass(frozen=True)
class Entry:
    """What grading needs of one test entry.

    Attributes:
        id: The entry id.
        category: Its test category (:data:`CATEGORIES`).
        language: ``python``, ``java`` or ``javascript``.
        functions: The function documents as in the data.
        ground_truth: ``[{fn: {arg: [acceptable values]}}]``; empty for (ir)relevance; for a
            multi-turn entry, per turn, the call strings.
        initial_config: A multi-turn entry's ``{class: configuration}`` (else ``None``).
        involved_classes: A multi-turn entry's API classes (else ``None``).
    """

    id: str
    category: str
    language: str
    functions: list[dict[str, Any]]
    ground_truth: list[Any]
    initial_config: dict[str, Any] | None = None
    involved_classes: list[str] | None = None

    @property
    def kind(self) -> str:
        """``multi_turn``, ``irrelevance``, ``relevance``, ``parallel``, ``multiple`` or
        ``simple`` (the checker the leaderboard applies, chosen by the category name as
        there)."""
        c = self.category
        if c.startswith("multi_turn"):
            return "multi_turn"
        if "irrelevance" in c:
            return "irrelevance"
        if "relevance" in c:
            return "relevance"
        return "parallel" if "parallel" in c else "multiple" if "multiple" in c else "simple"


def entry_of(example: Example) -> Entry:
    """The :class:`Entry` of an example loaded by :func:`load_examples`.

    Raises:
        DatasetError: when the example does not carry the BFCL fields.
    """
    meta = example.metadata
    try:
        multi = bool(meta.get("multi_turn"))
        return Entry(example.id, str(meta["category"]), str(meta["language"]), list(meta["functions"]),
                     list(meta.get("ground_truth") or []),
                     dict(meta["initial_config"]) if multi else None, list(meta["involved_classes"]) if multi else None)
    except KeyError as exc:
        raise DatasetError(f"example {example.id!r} is not a BFCL entry (metadata lacks {exc})") from None


def entries_of(examples: list[Example]) -> dict[str, Entry]:
    """:func:`entry_of` for each example, by id."""
    return {ex.id: entry_of(ex) for ex in examples}


def _read_lines(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = read_text(path)  # names UTF-16/UTF-32 and the first byte that is not UTF-8
    except DatasetError as exc:
        raise DatasetError(f"{exc} (the {what})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise DatasetError(f"{path}:{number}: expected an object with a string 'id'")
        rows.append((number, record))
    return rows


def answers_path(path: Path) -> Path:
    """Where the possible answers of a test file are: ``possible_answer/<same name>`` beside it."""
    return path.parent / "possible_answer" / path.name


def load_examples(path: Path, options: dict[str, Any]) -> list[Example] | None:
    """The examples of a BFCL test file (the benchmark's ``load_dataset``).

    Args:
        path (Path): ``BFCL_v4_<category>.json`` (JSON Lines); a multi-turn category's file
            is read by :func:`toolgym.suites.bfcl.multi_turn.load_multi_turn`.
        options (dict): ``answers``: the possible-answer file (default: :func:`answers_path`;
            needed for every category but the (ir)relevance ones).

    Returns:
        list[Example] | None: One example per entry (a multi-turn entry: one conversation), or ``None`` when the file is not a BFCL
        test file (no ``question`` and ``function`` on its first line) but may hold examples
        written for the environment (``metadata.category``), so the generic loaders read it.

    Raises:
        DatasetError: naming the file and line of a bad record, a missing
            answers file, or an entry without an answer; for a file of some other
            environment's examples; for a possible-answer file given as
            the dataset, naming the questions file to give instead.
    """
    path = Path(path)
    if not _FILE.search(path.name):
        try:
            with path.open(encoding="utf-8") as handle:
                first = json.loads(handle.readline() or "{}")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not (isinstance(first, dict) and "question" in first and ("function" in first or "involved_classes" in first)):
            metadata = first.get("metadata") if isinstance(first, dict) else None
            if isinstance(first, dict) and first and not (isinstance(metadata, dict) and "category" in metadata):
                raise DatasetError(
                    f"{path}: not a BFCL dataset: its first line has neither 'question' and 'function' (a "
                    "BFCL_v4_<category>.json test file) nor metadata.category (examples written for the bfcl "
                    "environment)"
                )
            return None
    rows = _read_lines(path, "test file")
    if rows and "ground_truth" in rows[0][1] and "question" not in rows[0][1]:
        questions = path.parent.parent / path.name if path.parent.name == "possible_answer" else None
        where = f" ({questions})" if questions is not None else ""
        raise DatasetError(
            f"{path}: this is a possible-answer file (ground truths, no questions); give the questions file as "
            f"--dataset: the file of the same name outside possible_answer/{where}"
        )
    answers: dict[str, Any] = {}
    given = options.get("answers")
    multi_turn = bool(rows) and is_multi_turn_file(path, rows[0][1])
    needs_answers = any("relevance" not in category_of(r["id"], path) for _, r in rows)
    answer_file = Path(given) if given else answers_path(path)
    if needs_answers:
        if not answer_file.exists():
            raise DatasetError(f"{path}: no possible answers at {answer_file} (give them with --answers FILE)")
        for number, record in _read_lines(answer_file, "possible answers"):
            truth = record.get("ground_truth")
            if not isinstance(truth, list):
                raise DatasetError(f"{answer_file}:{number}: 'ground_truth' must be a list")
            answers[record["id"]] = truth
    if multi_turn:
        return load_multi_turn(path, rows, answers, answer_file)
    examples = []
    for number, record in rows:
        where = f"{path}:{number}"
        question, functions = record.get("question"), record.get("function")
        if not isinstance(question, list) or not question or not isinstance(question[0], list):
            raise DatasetError(f"{where}: 'question' must be a list of turns, each a list of messages")
        if len(question) != 1:
            raise DatasetError(f"{where}: entry {record['id']!r} has {len(question)} turns but no 'involved_classes' (a multi-turn entry needs them)")
        if not isinstance(functions, list) or not all(isinstance(f, dict) and "name" in f for f in functions):
            raise DatasetError(f"{where}: 'function' must be a list of function documents with a 'name'")
        category = category_of(record["id"], path)
        truth = answers.get(record["id"])
        if truth is None and "relevance" not in category:
            raise DatasetError(f"{where}: entry {record['id']!r} has no possible answer in {answer_file}")
        language = language_of(category)
        meta = {"category": category, "language": language, "functions": functions, "ground_truth": truth or []}
        calls = oracle_calls(truth or [], functions, language)
        if category == "live_relevance" or (truth is None and "irrelevance" not in category):
            calls = [placeholder_call(functions[0])] if functions else []
        examples.append(Example(
            id=record["id"], input=question[0], expected_calls=calls,
            order_matters="parallel" not in category, metadata=meta,
        ))
    if not examples:
        raise DatasetError(f"{path}: no entries")
    return examples


def oracle_calls(ground_truth: list[dict[str, Any]], functions: list[dict[str, Any]], language: str) -> list[ToolCallSpec]:
    """The first acceptable answer of every ground-truth call, as the function-calling mode
    would send it: the tool name of :func:`fc_name`; for each argument its first acceptable
    value, where ``""`` (leave it out) is passed over for a required parameter and taken
    whenever allowed for a name the function does not declare (the checker refuses
    undeclared parameters); Java and JavaScript values written as source code by the declared
    type (:func:`toolgym.suites.bfcl.values.to_source`).

    Where the ground truth contradicts the function's schema (a required parameter with no
    acceptable value, a parameter the function lacks that may not be left out) no answer
    passes, and these calls fail the checker; see
    :func:`toolgym.suites.bfcl.checker.unsatisfiable`.

    Args:
        ground_truth (list): ``[{fn: {arg: [values]}}]``.
        functions (list): The entry's function documents (for the declared types).
        language (str): ``python``, ``java`` or ``javascript``.

    Returns:
        list[ToolCallSpec]: One call per ground-truth call, in order.
    """
    docs = {f["name"]: f for f in functions}
    calls = []
    for call in ground_truth:
        for name, args in call.items():
            params = docs.get(name, {}).get("parameters", {})
            props, required = params.get("properties", {}), set(params.get("required", []))
            arguments = {}
            for arg, values in args.items():
                if not isinstance(values, list):
                    continue
                if arg not in props and "" in values:
                    continue
                options = [v for v in values if v != ""] if arg in required else values
                if not options or options[0] == "":
                    continue
                value = first_value(options[0])
                if language != "python":
                    value = to_source(value, props.get(arg, {}), language)
                arguments[arg] = value
            calls.append(ToolCallSpec(name=fc_name(name), arguments=arguments))
    return calls


_PLACEHOLDER = {"integer": 0, "float": 0.0, "number": 0.0, "boolean": False, "array": [], "tuple": [], "dict": {}}


def placeholder_call(function: dict[str, Any]) -> ToolCallSpec:
    """A call of ``function`` with a placeholder of the declared type for each required
    parameter (``0``, ``False``, ``[]``, ``{}``, ``""``): the oracle's answer to a relevance
    entry, which has no ground truth and passes with any call."""
    params = function.get("parameters", {})
    props = params.get("properties", {})
    args = {p: _PLACEHOLDER.get(props.get(p, {}).get("type"), "") for p in params.get("required", []) if p in props}
    return ToolCallSpec(name=fc_name(function["name"]), arguments=args)

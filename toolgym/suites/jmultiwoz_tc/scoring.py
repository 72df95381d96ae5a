"""JMultiWOZ-TC scoring: the five published metrics and stricter diagnostics beside them.

Published definitions (``evaluate.py`` of github.com/llm-jp/JMultiWOZ-TC, re-implemented here):

* a call is normalised to ``(name, arguments serialised as JSON with sorted keys)``; arguments
  given as a JSON string are parsed first; the predicted and gold calls of a turn are compared
  as **sets** (key order, call order and duplicates do not matter);
* five rows: 全体 (all turns; correct when the sets are equal), ツール使用判断 (gold non-empty;
  correct when a call was made), ツール不使用判断 (gold empty; correct when no call was made),
  ツール使用・不使用判断 (all turns; correct when call made == gold non-empty) and tool call精度
  (gold non-empty; correct when the sets are equal);
* 全体's 総データ数 is the number of result lines; a line with ``error`` counts in 総データ数 and
  出力ミスのデータ数 of the first four rows and not in their 評価対象数 (= 正解数 + 不正解数);
  tool call精度 leaves such lines out entirely and its 出力ミスのデータ数 is always 0;
  percentages = 正解数 / 評価対象数 × 100 rounded to 2 decimals (0.0 when nothing is evaluated);
* a result id unknown to the gold is graded against an empty gold.

Diagnostics (never changing the five rows): lenient equality (strings NFKC-normalised and
trimmed, values coerced by the tool's JSON schema), multiset matching (duplicates count),
a third decision outcome ``malformed`` (a call that could not be parsed is never an
abstention), per-tool and per-argument scores from an optimal one-to-one assignment of
predicted to gold calls (Hungarian algorithm), and accuracy by dialogue depth.
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.data import loads_json

__all__ = [
    "PUBLISHED_KEYS",
    "PUBLISHED_ROWS",
    "Evaluation",
    "GoldFormatError",
    "GoldKeys",
    "ResultFileError",
    "ResultRecord",
    "Turn",
    "Verdict",
    "evaluate",
    "gold_keys",
    "judge",
    "lenient_key",
    "max_weight_assignment",
    "published_set",
    "MAX_GRADED_DEPTH",
    "MAX_RECORDED_DEPTH",
    "deeper_than",
    "parse_result_line",
    "recordable",
    "read_results",
    "safe_model_name",
    "split_calls",
    "strict_key",
    "write_score_files",
    "write_text_atomic",
]

PUBLISHED_ROWS = ("全体", "ツール使用判断", "ツール不使用判断", "ツール使用・不使用判断", "tool call精度")
PUBLISHED_KEYS = ("評価項目", "総データ数", "評価対象数", "正解数", "不正解数", "出力ミスのデータ数", "全体の正答率(%)")
MAX_LISTED = 5


class ResultFileError(ValueError):
    """A result file cannot be graded; the message names the file and the lines."""


class GoldFormatError(ValueError):
    """A gold ``ground_truth`` value is not a list of ``{name, arguments}`` objects."""


# --- records ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Turn:
    """What grading needs to know about one gold turn.

    Attributes:
        data_id: The turn's id (``jmultiwoz_tc_<k>_turn_<t>``).
        dialogue_id: Its dialogue.
        gold: The gold calls, ``{"name", "arguments"}`` each (empty: no call expected).
        last_user: The last user utterance of the history (``None`` if unknown).
        depth: User turns before this one in the dialogue (``None`` if unknown).
    """

    data_id: str
    dialogue_id: str | None
    gold: tuple[dict[str, Any], ...]
    last_user: str | None
    depth: int | None


@dataclass(slots=True)
class ResultRecord:
    """One line of a result file.

    Attributes:
        line: Line number in the file (1-based).
        data_id: The turn graded.
        dialogue_id: As written (may be ``None``).
        calls: ``tool_calls`` as written (``{"name", "arguments"}`` or the OpenAI
            ``{"function": {...}}`` form).
        error: The ``error`` field when truthy (the model gave no answer), else ``None``.
        error_detail: The ``error_detail`` field when truthy (toolgym writes the whole message
            there), else ``None``.
        text: The line as read (without its newline), when read from a file.
    """

    line: int
    data_id: str
    dialogue_id: str | None
    calls: list[Any]
    error: str | None
    error_detail: str | None = None
    text: str = ""


def gold_calls_of(value: Any) -> tuple[dict[str, Any], ...]:
    """Validate a gold ``ground_truth`` list into ``({"name", "arguments"}, ...)``.

    Arguments given as a JSON string are parsed.

    Raises:
        GoldFormatError: describing the first invalid call.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise GoldFormatError(f"must be a list of calls, got {type(value).__name__}")
    calls = []
    for i, call in enumerate(value):
        if not isinstance(call, dict):
            raise GoldFormatError(f"[{i}] must be an object with 'name' and 'arguments'")
        name, raw = call_parts(call)
        if not isinstance(name, str):
            raise GoldFormatError(f"[{i}]: 'name' must be a string")
        args = parse_arguments({} if raw is None else raw)
        if not isinstance(args, dict):
            raise GoldFormatError(f"[{i}] ({name}): arguments must be a JSON object, got {raw!r}")
        calls.append({"name": name, "arguments": args})
    return tuple(calls)


# --- published equality --------------------------------------------------------------------
def call_parts(call: Any) -> tuple[Any, Any]:
    """``(name, raw arguments)`` of a call in either published form: ``{"name", "arguments"}``
    or ``{"function": {"name", "arguments"}}``; anything else is ``(str(call), None)``."""
    if isinstance(call, dict):
        fn = call.get("function")
        if isinstance(fn, dict):
            return fn.get("name"), fn.get("arguments")
        return call.get("name"), call.get("arguments")
    return str(call), None


def parse_arguments(raw: Any) -> Any:
    """Arguments given as a JSON string are parsed; anything else (or unparsable) is returned
    as is."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # evaluate.py keeps the text on any failure
            return raw
    return raw


def strict_key(call: Any) -> tuple[Any, str]:
    """The published normal form of one call: ``(name, JSON of its arguments, keys sorted)``."""
    name, raw = call_parts(call)
    return _strict(name, parse_arguments(raw))


# json.dumps(x, sort_keys=True, ensure_ascii=False) and json.dumps(x, ensure_ascii=False), without
# building an encoder per call (a normal form per call of every turn)
_SORTED_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode
_JSON = json.JSONEncoder(ensure_ascii=False).encode


def _strict(name: Any, args: Any) -> tuple[Any, str]:
    try:
        if isinstance(args, (dict, list)):
            return name, _SORTED_JSON(args)
        return name, _JSON(args)
    except (TypeError, ValueError, RecursionError):
        return name, str(args)


MAX_GRADED_DEPTH = 920
"""Deepest result line graded, in levels of lists and objects (a call's arguments given as a
JSON string, too): a deeper one is refused, as the published script refuses those it cannot
read (about 990 levels): comparing and writing such values needs more of Python's recursion
limit than toolgym's deeper stack leaves (at 985 levels, the lenient comparison ran out)."""

MAX_RECORDED_DEPTH = 64
"""Deepest JSON recorded as parsed values in trajectories and scores (their serialiser stops
near 255 levels; evaluate.py reads about 985): deeper calls are kept as text."""


def deeper_than(value: Any, limit: int) -> bool:
    """Whether a JSON value nests lists or objects more than ``limit`` levels deep."""
    level = [value]
    for _ in range(limit + 1):
        level = [v for item in level if isinstance(item, (dict, list))
                 for v in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return False
    return any(isinstance(v, (dict, list)) for v in level)


def recordable(value: Any) -> Any:
    """``value``, or its JSON text when it nests deeper than :data:`MAX_RECORDED_DEPTH`."""
    if not deeper_than(value, MAX_RECORDED_DEPTH):
        return value
    try:
        return _JSON(value)
    except (ValueError, RecursionError):
        return str(value)


def published_set(calls: Iterable[Any] | None) -> frozenset[tuple[Any, str]]:
    """The published comparison object of a turn's calls: the set of their normal forms."""
    return frozenset(strict_key(c) for c in calls or ())


# --- lenient equality ------------------------------------------------------------------------
def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text).strip()


_LENIENT_CACHE: dict[tuple[type, Any, str | None], Any] = {}


def lenient_value(value: Any, json_type: str | None) -> Any:
    """A value's lenient normal form: strings NFKC-normalised and trimmed; coerced to the
    slot's JSON type (``"3"``, ``3`` and ``3.0`` are equal for an integer slot, ``21`` and
    ``"２１"`` for a string slot)."""
    if isinstance(value, (str, int, float)):  # scalars repeat a lot (cities, days): memoised
        key = (type(value), value, json_type)
        found = _LENIENT_CACHE.get(key)
        if found is None:
            if len(_LENIENT_CACHE) > 200_000:
                _LENIENT_CACHE.clear()
            found = _LENIENT_CACHE[key] = _lenient_value(value, json_type)
        return found
    return _lenient_value(value, json_type)


def _lenient_value(value: Any, json_type: str | None) -> Any:
    if isinstance(value, str):
        value = _nfkc(value)
    if json_type in ("integer", "number"):
        number: Any = value
        if isinstance(value, str):
            try:
                number = float(value) if value else value
            except ValueError:
                return ("str", value)
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            if isinstance(number, float) and number.is_integer():
                number = int(number)
            return ("num", number)
        return ("other", json.dumps(value, sort_keys=True, ensure_ascii=False))
    if json_type == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("str", _nfkc(str(int(value) if isinstance(value, float) and value.is_integer() else value)))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, float) and value.is_integer():
        return ("num", int(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("num", value)
    return ("other", json.dumps(value, sort_keys=True, ensure_ascii=False))


def lenient_key(name: str, args: Mapping[str, Any], slot_types: Mapping[str, Mapping[str, str]]) -> tuple:
    """A well-formed call's lenient normal form (hashable): the name and every slot's
    :func:`lenient_value`, in key order."""
    types = slot_types.get(name, {})
    return (name, tuple(sorted((k, lenient_value(v, types.get(k))) for k, v in args.items())))


def malformed_reason(call: Any, tool_names: set[str] | None) -> str | None:
    """Why a predicted call could not be parsed as a call of a known tool, or ``None``.

    Malformed: a call that is not an object, a call the generator flagged (``"malformed"``),
    a name not among ``tool_names`` (when given), arguments that are not a JSON object
    (after parsing a JSON string).
    """
    name, raw = call_parts(call)
    return _malformed(call, name, raw, parse_arguments(raw), tool_names)


def split_calls(calls: Iterable[Any], tool_names: set[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """A turn's calls (either published form) split as the diagnostics see them.

    Args:
        calls (Iterable[Any]): The calls as written in a result line.
        tool_names (set[str] | None): The known tools (``None``: any name).

    Returns:
        tuple[list[dict[str, Any]], list[str]]: The well-formed calls as ``{"name",
        "arguments"}`` (arguments parsed), and why each other call is malformed (see
        :func:`malformed_reason`).
    """
    well: list[dict[str, Any]] = []
    reasons: list[str] = []
    for call in calls:
        name, raw = call_parts(call)
        args = parse_arguments(raw)
        reason = _malformed(call, name, raw, args, tool_names)
        if reason is None:
            well.append({"name": name, "arguments": args})
        else:
            reasons.append(reason)
    return well, reasons


def _malformed(call: Any, name: Any, raw: Any, args: Any, tool_names: set[str] | None) -> str | None:
    if not isinstance(call, dict):
        return "call is not an object"
    if call.get("malformed"):
        return str(call["malformed"])
    if not isinstance(name, str) or not name:
        return "no tool name"
    if tool_names is not None and name not in tool_names:
        return "unknown tool"
    if not isinstance(args, dict):
        return "arguments are not valid JSON" if isinstance(raw, str) else "arguments are not a JSON object"
    return None


def _same_multiset(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    if len(a) <= 1:
        return a == b
    return Counter(a) == Counter(b)


GoldKeys = tuple[frozenset, list]
"""The published normal forms of a turn's gold calls: as a set, and in order (see :func:`gold_keys`)."""


def gold_keys(gold: Iterable[Mapping[str, Any]]) -> GoldKeys:
    """The published normal forms (:func:`strict_key`) of gold calls ``{"name", "arguments"}``,
    as a set and as a list in call order."""
    keys = [_strict(c["name"], c["arguments"]) for c in gold]
    return frozenset(keys), keys


@dataclass(frozen=True, slots=True)
class Verdict:
    """How one turn's calls compare with its gold: what :func:`evaluate` counts for a result
    line, and what the per-turn graders score (one judgement shared by both).

    Attributes:
        calls: The calls judged, as written (either published form); not to be changed.
        exact: The published equality: the sets of normal forms are equal.
        made: A call was made (a malformed one too, as published).
        well: The well-formed calls as ``{"name", "arguments"}`` (arguments parsed).
        reasons: Why each other call is malformed (see :func:`malformed_reason`).
        strict_multiset: No malformed call, and the normal forms are equal as multisets.
        lenient_set: No malformed call, and the lenient forms (:func:`lenient_key`) are
            equal as sets.
        lenient_multiset: The same as multisets (the ``jmultiwoz_lenient`` grader).
    """

    calls: Sequence[Any]
    exact: bool
    made: bool
    well: Sequence[dict[str, Any]]
    reasons: tuple[str, ...]
    strict_multiset: bool
    lenient_set: bool
    lenient_multiset: bool

    @property
    def decision(self) -> str:
        """``malformed`` (a call could not be parsed), ``call`` or ``no_call``."""
        return "malformed" if self.reasons else ("call" if self.well else "no_call")

    @property
    def bad_arguments(self) -> bool:
        """A call's arguments are not a JSON object (after parsing a JSON string)."""
        return any(r.startswith("arguments are not") for r in self.reasons)


def judge(
    calls: Sequence[Any],
    gold: Sequence[Mapping[str, Any]],
    slot_types: Mapping[str, Mapping[str, str]],
    tool_names: set[str] | None,
    keys: GoldKeys | None = None,
) -> Verdict:
    """Compare a turn's calls with its gold, every way :func:`evaluate` and the graders do.

    Args:
        calls (Sequence[Any]): The calls as written in a result line (either form).
        gold (Sequence[Mapping[str, Any]]): The gold calls, ``{"name", "arguments"}`` each.
        slot_types (Mapping[str, Mapping[str, str]]): ``{tool: {slot: JSON type}}`` for
            lenient coercion.
        tool_names (set[str] | None): The known tools (``None``: any name).
        keys (GoldKeys | None): :func:`gold_keys` of ``gold``, when already known.

    Returns:
        Verdict: The judgement.
    """
    gold_set, gold_strict = keys if keys is not None else gold_keys(gold)
    pred_strict = []
    well: list[dict[str, Any]] = []
    well_strict = []
    reasons: list[str] = []
    for call in calls:
        name, raw = call_parts(call)
        args = parse_arguments(raw)
        key = _strict(name, args)
        pred_strict.append(key)
        reason = _malformed(call, name, raw, args, tool_names)
        if reason is None:  # the call itself when written so
            same = args is raw and len(call) == 2 and "name" in call and "arguments" in call
            well.append(call if same else {"name": name, "arguments": args})
            well_strict.append(key)
        else:
            reasons.append(reason)
    if reasons:
        strict_ms = len_set = len_ms = False
    elif _same_multiset(well_strict, gold_strict):  # strictly equal: leniently too
        strict_ms = len_set = len_ms = True
    else:
        strict_ms = False
        gold_len = [lenient_key(c["name"], c["arguments"], slot_types) for c in gold]
        pred_len = [lenient_key(c["name"], c["arguments"], slot_types) for c in well]
        len_set = set(pred_len) == set(gold_len)
        len_ms = _same_multiset(pred_len, gold_len)
    predicted = frozenset(pred_strict)
    return Verdict(
        calls, predicted == gold_set, bool(predicted), well or _NONE, tuple(reasons), strict_ms, len_set, len_ms,
    )


_NONE: tuple = ()


# --- optimal assignment ----------------------------------------------------------------------
def max_weight_assignment(weights: list[list[float]]) -> list[tuple[int, int]]:
    """Pairs ``(row, column)`` of a one-to-one assignment maximising the total weight
    (Hungarian algorithm with potentials, O(n²m)); pairs of weight ≤ 0 are left out.

    Args:
        weights (list[list[float]]): ``n × m`` non-negative weights (rows and columns may differ in number).
    """
    n = len(weights)
    m = len(weights[0]) if n else 0
    if n == 0 or m == 0:
        return []
    transposed = n > m
    if transposed:
        weights = [list(col) for col in zip(*weights, strict=True)]
        n, m = m, n
    top = max(max(row) for row in weights)
    cost = [[top - w for w in row] for row in weights]
    inf = math.inf
    u = [0.0] * (n + 1)
    v = [0.0] * (m + 1)
    owner = [0] * (m + 1)  # owner[j]: row (1-based) assigned to column j
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = [inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = owner[j0], inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    reduced = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if reduced < minv[j]:
                        minv[j], way[j] = reduced, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    pairs = []
    for j in range(1, m + 1):
        if owner[j]:
            r, c = owner[j] - 1, j - 1
            if transposed:
                r, c = c, r
            if (weights[owner[j] - 1][j - 1]) > 0:
                pairs.append((r, c))
    return sorted(pairs)


# --- reading result files --------------------------------------------------------------------
_INT_DIGITS = 4300
"""Python's default limit on the digits of an integer read from text (``sys.int_info``)."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

Oddities = dict[str, list[int]]
"""Kinds of oddity met while reading a result file → ``[count, first line]``."""


def _read_int(digits: str) -> int | str:
    """A JSON integer; one longer than Python converts (more than 4,300 digits) is kept as its
    digits, compared as text."""
    return int(digits) if len(digits) <= _INT_DIGITS else digits


def _note(oddities: Oddities | None, kind: str, lineno: int) -> None:
    if oddities is not None:
        seen = oddities.setdefault(kind, [0, lineno])
        seen[0] += 1


def parse_result_line(text: str, lineno: int, oddities: Oddities | None = None) -> ResultRecord:
    """One line of a result file, read as the published ``evaluate.py`` reads it.

    What the published script grades is graded, each oddity noted in ``oddities``: a
    ``data_id`` of ``null`` with an ``id`` (the older key) to fall back on; a missing, ``null``
    or boolean id (graded against no gold, as the script's lookup finds none); a falsy
    ``tool_calls`` (no call); a ``tool_calls`` string or object (the script iterates it: each
    character or key is read as a call's name); calls that are not objects (a call named by
    their text); integers longer than 4,300 digits (which stop the script: here kept as text, so
    they never equal a gold value); on a line with an ``error``, a ``tool_calls`` of any form (the
    script never reads it). Refused, as the script cannot grade them either: text that is not
    JSON (also nesting too deep to read), a line that is not an object, an id that is an object or
    a list, a ``tool_calls`` that is a number or ``true``, a call whose name is an object or a
    list. Refused by toolgym alone: a lone UTF-16 surrogate (``\\ud800``: not text, the line
    cannot be kept as UTF-8) and nesting deeper than :data:`MAX_GRADED_DEPTH` levels.

    Args:
        text (str): The line (decoded, without its newline; surrounding whitespace is ignored,
            as the script strips it).
        lineno (int): Its number in the file (1-based), kept in the record.
        oddities (Oddities | None): Where the oddities are counted, or ``None``.

    Returns:
        ResultRecord: The record; ``text`` is kept verbatim in it.

    Raises:
        ValueError: saying why the line cannot be graded.
    """
    long_ints = False
    try:
        rec = loads_json(text.strip())
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply to read)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    except ValueError:  # an integer longer than Python converts: read again, kept as its digits
        rec = json.loads(text.strip(), parse_int=_read_int)
        long_ints = True
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(rec, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start : exc.end]
            raise ValueError(f"a lone surrogate {ascii(bad)[1:-1]} is not text: the line cannot be kept as UTF-8") from None
        except (ValueError, RecursionError):
            pass
    if long_ints and any(isinstance(v, str) and v.isdigit() and len(v) > _INT_DIGITS for v in _scalars(rec)):
        _note(oddities, f"hold integers longer than {_INT_DIGITS:,} digits (compared as text)", lineno)
    data_id = rec.get("data_id")
    if data_id is None and rec.get("id") is not None:  # the format before data_id, as evaluate.py reads it
        data_id = rec["id"]
        if "data_id" in rec:
            _note(oddities, "have a null data_id (their 'id' is used)", lineno)
    if isinstance(data_id, (dict, list)):
        raise ValueError(f"data_id must be a string, got {type(data_id).__name__} (evaluate.py cannot grade it either)")
    if data_id is None or isinstance(data_id, bool):
        what = "no data_id" if data_id is None else "a boolean data_id"
        _note(oddities, f"have {what} (graded against no gold, as evaluate.py does)", lineno)
        data_id = f"(line {lineno}: {what})"
    error, detail = rec.get("error"), rec.get("error_detail")
    calls = rec.get("tool_calls")
    if not calls:
        calls = []
    elif error and not isinstance(calls, list):  # an error line: evaluate.py never reads its calls
        calls = []
    elif isinstance(calls, (str, dict)):
        kind = "string" if isinstance(calls, str) else "object"
        _note(oddities, f"have a tool_calls {kind} (each {'character' if kind == 'string' else 'key'} read as a call, "
                        "as evaluate.py does)", lineno)
        calls = list(calls)
    elif not isinstance(calls, list):
        raise ValueError(f"'tool_calls' must be a list of calls, got {json.dumps(calls)} (evaluate.py cannot grade it either)")
    if any(not isinstance(c, dict) for c in calls):
        _note(oddities, "have calls that are not objects (named by their text, as evaluate.py does)", lineno)
    for call in () if error else calls:
        name = call_parts(call)[0]
        if isinstance(name, (dict, list)):
            raise ValueError(f"a call's name is {'an object' if isinstance(name, dict) else 'a list'}, not text "
                             "(evaluate.py cannot grade it either)")
    if text.count("[") + text.count("{") > MAX_GRADED_DEPTH and _nested_deeper(rec, calls, MAX_GRADED_DEPTH):
        raise ValueError(f"nested deeper than {MAX_GRADED_DEPTH} levels (toolgym grades up to {MAX_GRADED_DEPTH}; "
                         "evaluate.py reads about 990)")
    return ResultRecord(
        lineno, str(data_id), rec.get("dialogue_id"), calls, str(error) if error else None,
        str(detail) if detail else None, text,
    )


def _nested_deeper(rec: dict[str, Any], calls: list[Any], limit: int) -> bool:
    """Whether a result line, or the arguments of one of its calls given as a JSON string,
    nests more than ``limit`` levels."""
    if deeper_than(rec, limit):
        return True
    for call in calls:
        raw = call_parts(call)[1]
        if isinstance(raw, str) and raw.count("[") + raw.count("{") > limit - 2:
            try:
                if deeper_than(json.loads(raw), limit - 2):
                    return True
            except RecursionError:  # deeper than this stack reads
                return True
            except ValueError:  # not JSON: graded as its text
                pass
    return False


def _scalars(value: Any, depth: int = 0) -> Iterable[Any]:
    """The scalars of a JSON value (not below 50 levels: enough for the arguments of a call)."""
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, list):
        yield value
        return
    if depth < 50:
        for item in value:
            yield from _scalars(item, depth + 1)


def read_results(path: Path, warn: bool = True) -> list[ResultRecord]:
    """Parse a result file (JSON Lines, one turn per line; published format) with
    :func:`parse_result_line`. Lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` and lines holding
    only whitespace are skipped, as published; a UTF-8 byte-order mark at the start is dropped
    (the published script stops on it). Each kind of oddity met is reported once as a warning
    with its count and first line.

    Args:
        path (Path): The result file, from any generator.
        warn (bool): Report the oddities as warnings.

    Returns:
        list[ResultRecord]: The records in file order (repeated ids and arguments that are not
        an object are graded as published and noted by :func:`evaluate`). An empty file gives
        no record (the published rows then count nothing), with a warning.

    Raises:
        ResultFileError: for an unreadable file, or lines the published script cannot grade
            either (see :func:`parse_result_line`) or that are not UTF-8; the message names the
            file, the first lines and the count.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    from toolgym.data import foreign_encoding  # the shared rule

    encoding = foreign_encoding(data)
    if encoding:
        raise ResultFileError(f"{path}: the file is {encoding}; result files are UTF-8 (convert it, e.g. with iconv)")
    data = data.removeprefix(b"\xef\xbb\xbf")
    if b"\r" in data:  # line ends as evaluate.py reads them (text mode): \r\n, \n or a lone \r
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    records: list[ResultRecord] = []
    problems: list[str] = []
    oddities: Oddities = {}
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"line {lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
            continue
        if not text.strip():
            _note(oddities, "hold only whitespace (skipped, as evaluate.py does)", lineno)
            continue
        try:
            rec = parse_result_line(text, lineno, oddities)
        except ValueError as exc:
            torn = " (a torn last line: was the generator interrupted?)" if lineno == len(lines) else ""
            problems.append(f"line {lineno}: {exc}{torn}")
            continue
        records.append(rec)
    if problems:
        shown = "; ".join(problems[:MAX_LISTED])
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        whole = ""
        if data.lstrip().startswith(b"["):
            try:
                if isinstance(json.loads(data), list):
                    whole = ("; the file is one JSON array: a result file is JSON Lines, one object per line "
                             "(as generate.py writes it)")
            except ValueError:
                pass
        raise ResultFileError(f"{path}: {len(problems)} invalid line(s): {shown}{more}{whole}")
    if warn:
        for kind, (count, first) in oddities.items():
            warnings.warn(f"{path}: {count} line(s) {kind}; first: line {first}", stacklevel=2)
        if not records:
            warnings.warn(f"{path}: the file holds no result; the five rows count nothing, as evaluate.py writes them",
                          stacklevel=2)
    return records


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:MAX_LISTED]))
    return shown + (f", … ({len(numbers) - MAX_LISTED} more)" if len(numbers) > MAX_LISTED else "")


# --- evaluation ------------------------------------------------------------------------------
def _rate(correct: int, evaluated: int) -> float:
    return round(correct / evaluated * 100, 2) if evaluated else 0.0


@dataclass
class _Row:
    total: int = 0
    errors: int = 0
    correct: int = 0
    incorrect: int = 0

    def published(self, label: str, error_column: int | None = None) -> dict[str, Any]:
        evaluated = self.correct + self.incorrect
        values = (
            label, self.total, evaluated, self.correct, self.incorrect,
            self.errors if error_column is None else error_column, _rate(self.correct, evaluated),
        )
        return dict(zip(PUBLISHED_KEYS, values, strict=True))


@dataclass
class _SlotStats:
    gold: int = 0
    strict_correct: int = 0
    lenient_correct: int = 0
    wrong_value: int = 0
    missing_slot: int = 0
    missed_call: int = 0
    extra: int = 0


@dataclass
class _ToolStats:
    gold_calls: int = 0
    predicted_calls: int = 0
    matched: int = 0
    strict_exact: int = 0
    lenient_exact: int = 0
    missed: int = 0
    spurious: int = 0


@dataclass
class Evaluation:
    """Everything computed from one result file.

    Attributes:
        rows: The five published rows (dicts with :data:`PUBLISHED_KEYS`), in order.
        incorrect: The wrong turns, tool-call-accuracy errors first, then use-judgement
            errors, then non-use errors.
        incorrect_records: The result line of each entry of ``incorrect`` (same order), for
            writing them in the published script's own form (:func:`published_incorrect`).
        diagnostics: Lenient/multiset columns, decision outcomes, per-tool, per-argument and
            per-depth breakdowns (JSON-safe).
        notes: Warnings (unknown ids, arguments that are not objects, ...).
    """

    rows: list[dict[str, Any]]
    incorrect: list[dict[str, Any]]
    diagnostics: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    incorrect_records: list[ResultRecord] = field(default_factory=list)


def evaluate(
    results: list[ResultRecord],
    turns: Mapping[str, Turn],
    slot_types: Mapping[str, Mapping[str, str]],
    notes: Iterable[str] = (),
    source: str = "result file",
    verdicts: Sequence[Verdict | None] | None = None,
) -> Evaluation:
    """Grade result records against the gold turns: the five published rows of
    ``evaluate.py`` (github.com/llm-jp/JMultiWOZ-TC) and the diagnostics beside them.

    Args:
        results (list[ResultRecord]): The result lines, in file order (each line counts once,
            a repeated data_id too, as published; repeats are noted).
        turns (Mapping[str, Turn]): Gold turns by ``data_id``; a result id missing here is
            graded against an empty gold (as published) and reported in ``notes`` with a count.
        slot_types (Mapping[str, Mapping[str, str]]): ``{tool: {slot: JSON type}}`` for
            lenient coercion; its keys are the known tool names (a call of another name is
            malformed).
        notes (Iterable[str]): Notes carried into the evaluation.
        source (str): How notes name the result file (its line numbers are ``results[i].line``).
        verdicts (Sequence[Verdict | None] | None): Already known verdicts of the lines, in
            the order of ``results`` (``None``: judged here); each must be :func:`judge` of
            that line's calls against its turn's gold with ``slot_types`` (the graders'
            verdicts of a run, shared with its export).

    Returns:
        Evaluation: The rows, the wrong turns, the diagnostics and the notes.
    """
    tool_names = set(slot_types) or None
    notes = list(notes)
    overall, use, nouse, both, precision = _Row(), _Row(), _Row(), _Row(), _Row()
    # per row label: [n, multiset, lenient, lenient_multiset] correct counts
    lenient = {"全体": [0, 0, 0, 0], "tool call精度": [0, 0, 0, 0]}
    malformed_turns: Counter = Counter()
    decisions: dict[str, Counter] = {"gold_call": Counter(), "gold_no_call": Counter()}
    reasons: Counter = Counter()
    tools: dict[str, _ToolStats] = defaultdict(_ToolStats)
    slots: dict[tuple[str, str], _SlotStats] = defaultdict(_SlotStats)
    # per depth: [n, exact, lenient, decision, gold_call, call_exact, call_lenient]
    depth: dict[Any, list[int]] = defaultdict(lambda: [0] * 7)
    wrong_call: list[tuple[ResultRecord, dict[str, Any]]] = []
    wrong_use: list[tuple[ResultRecord, dict[str, Any]]] = []
    wrong_nouse: list[tuple[ResultRecord, dict[str, Any]]] = []
    unknown: list[str] = []
    gold_cache: dict[str, GoldKeys] = {}
    bad_args: list[int] = []

    for i, rec in enumerate(results):
        turn = turns.get(rec.data_id)
        if turn is None:
            unknown.append(rec.data_id)
            gold: tuple = ()
        else:
            gold = turn.gold
        gold_used = bool(gold)
        overall.total += 1
        both.total += 1
        (use if gold_used else nouse).total += 1
        if rec.error:
            overall.errors += 1
            both.errors += 1
            (use if gold_used else nouse).errors += 1
            continue

        verdict = verdicts[i] if verdicts is not None else None
        if verdict is None:
            keys = gold_cache.get(rec.data_id) if turn is not None else None
            if keys is None:
                keys = gold_keys(gold)
                if turn is not None:
                    gold_cache[rec.data_id] = keys
            verdict = judge(rec.calls, gold, slot_types, tool_names, keys)
        well = verdict.well
        bad = len(verdict.reasons)
        for reason in verdict.reasons:
            reasons[reason] += 1
        if verdict.bad_arguments:
            bad_args.append(rec.line)
        exact = verdict.exact
        made = verdict.made
        _count(overall, exact)
        _count(both, made == gold_used)
        if gold_used:
            _count(use, made)
            _count(precision, exact)
            precision.total += 1
        else:
            _count(nouse, not made)

        # --- diagnostics -----------------------------------------------------------------
        decisions["gold_call" if gold_used else "gold_no_call"][verdict.decision] += 1
        strict_ms, len_set, len_ms = verdict.strict_multiset, verdict.lenient_set, verdict.lenient_multiset
        for label in ("全体", "tool call精度") if gold_used else ("全体",):
            counts = lenient[label]
            counts[0] += 1
            counts[1] += strict_ms
            counts[2] += len_set
            counts[3] += len_ms
        if bad:
            malformed_turns["全体"] += 1
            malformed_turns["ツール使用・不使用判断"] += 1
            malformed_turns["ツール使用判断" if gold_used else "ツール不使用判断"] += 1
            if gold_used:
                malformed_turns["tool call精度"] += 1
        bucket = depth[turn.depth if turn is not None and turn.depth is not None else "unknown"]
        bucket[0] += 1
        bucket[1] += exact
        bucket[2] += len_ms
        bucket[3] += made == gold_used
        if gold_used:
            bucket[4] += 1
            bucket[5] += exact
            bucket[6] += len_ms
        if gold or well:
            _match_calls(gold, well, slot_types, tools, slots)

        if not exact and gold_used:
            wrong_call.append((rec, _incorrect(rec, turn, "tool call精度", gold)))
        if gold_used and not made:
            wrong_use.append((rec, _incorrect(rec, turn, "ツール使用判断", gold)))
        if not gold_used and made:
            wrong_nouse.append((rec, _incorrect(rec, turn, "ツール不使用判断", gold)))

    seen: set[str] = set()
    repeated = []
    for rec in results:
        if rec.data_id in seen:
            repeated.append(rec.line)
        seen.add(rec.data_id)
    if repeated:
        notes.append(
            f"{source}: {len(repeated)} line(s) repeat a data_id (each line counts, as published): lines {_lines(repeated)}"
        )
    if bad_args:
        lines = sorted(set(bad_args))
        notes.append(
            f"{source}: {len(lines)} line(s) have call arguments that are not a JSON object "
            f"(graded as published, never equal to the gold; counted as malformed): lines {_lines(lines)}"
        )
    if unknown:
        notes.append(
            f"{len(unknown)} result id(s) are not in the gold and were graded against an empty gold "
            f"(as published): {', '.join(unknown[:MAX_LISTED])}{' …' if len(unknown) > MAX_LISTED else ''}"
        )
    rows = [
        overall.published(PUBLISHED_ROWS[0]),
        use.published(PUBLISHED_ROWS[1]),
        nouse.published(PUBLISHED_ROWS[2]),
        both.published(PUBLISHED_ROWS[3]),
        precision.published(PUBLISHED_ROWS[4], error_column=0),
    ]
    diagnostics = {
        "lenient_table": _lenient_table(rows, lenient, malformed_turns),
        "decision_outcomes": {
            "definition": "per evaluated turn (no error): call = only well-formed calls, no_call = no call, "
            "malformed = at least one call that could not be parsed (never counted as abstention)",
            "gold_call": dict(decisions["gold_call"]),
            "gold_no_call": dict(decisions["gold_no_call"]),
            "malformed_reasons": dict(reasons.most_common()),
        },
        "per_tool": {name: vars(stats) for name, stats in sorted(tools.items())},
        "per_argument": _slot_table(slots),
        "per_slot": _slot_name_table(slots),
        "per_depth": _depth_table(depth),
        "unknown_ids": len(unknown),
        "notes": notes,
    }
    wrong = wrong_call + wrong_use + wrong_nouse
    return Evaluation(rows, [entry for _, entry in wrong], diagnostics, notes, [rec for rec, _ in wrong])


def _count(row: _Row, ok: bool) -> None:
    if ok:
        row.correct += 1
    else:
        row.incorrect += 1


def _incorrect(rec: ResultRecord, turn: Turn | None, genre: str, gold: tuple) -> dict[str, Any]:
    return {
        "data_id": rec.data_id,
        "dialogue_id": rec.dialogue_id if rec.dialogue_id is not None else (turn.dialogue_id if turn else None),
        "Incorrect_genre": genre,
        "last_user_utterance": turn.last_user if turn else None,
        "ground_truth": list(gold),
        "output": rec.calls,
    }


_OUTPUT_FIELDS = ("assistant", "message", "output", "text", "response")


def published_incorrect(entry: dict[str, Any], record: ResultRecord, question: Any) -> dict[str, Any]:
    """A wrong turn as the published ``evaluate.py`` writes it after the five rows of its score
    file: ``data_id``, ``dialogue_id``, ``Incorrect_genre``, ``question`` (the turn's chat
    history from the input file), ``output`` (the line's first non-empty field among
    ``assistant``, ``message``, ``output``, ``text``, ``response``, else its ``tool_calls``)
    and ``ground_truth``.

    Args:
        entry (dict[str, Any]): The entry of :attr:`Evaluation.incorrect`.
        record (ResultRecord): Its result line.
        question (Any): The turn's history (``None`` for an id the input file lacks).

    Returns:
        dict[str, Any]: The published form, keys in the published order.
    """
    try:
        line = json.loads(record.text) if record.text else {}
    except ValueError:
        line = {}
    if not isinstance(line, dict):
        line = {}
    output = next((line[k] for k in _OUTPUT_FIELDS if line.get(k)), None) or line.get("tool_calls")
    return {
        "data_id": entry["data_id"],
        "dialogue_id": entry["dialogue_id"],
        "Incorrect_genre": entry["Incorrect_genre"],
        "question": question,
        "output": output,
        "ground_truth": entry["ground_truth"],
    }


def _strict_equal(a: Any, b: Any) -> bool:
    """Equal as published: the same JSON text (so ``1`` ≠ ``1.0`` ≠ ``True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, list)):
        return json.dumps(a, sort_keys=True, ensure_ascii=False) == json.dumps(b, sort_keys=True, ensure_ascii=False)
    return a == b


def _slot_equal(a: Any, b: Any, json_type: str | None) -> tuple[bool, bool]:
    strict = _strict_equal(a, b)
    return strict, strict or lenient_value(a, json_type) == lenient_value(b, json_type)


def _pair_weight(g: dict[str, Any], p: dict[str, Any], types: Mapping[str, str]) -> float:
    if g["name"] != p["name"]:
        return 0.0
    ga, pa = g["arguments"], p["arguments"]
    return 1.0 + sum(1 for k, v in ga.items() if k in pa and _slot_equal(v, pa[k], types.get(k))[1])


def _match_calls(
    gold: tuple[dict[str, Any], ...],
    predicted: list[dict[str, Any]],
    slot_types: Mapping[str, Mapping[str, str]],
    tools: dict[str, _ToolStats],
    slots: dict[tuple[str, str], _SlotStats],
) -> None:
    for p in predicted:
        tools[p["name"]].predicted_calls += 1
    for g in gold:
        tools[g["name"]].gold_calls += 1
        for k in g["arguments"]:
            slots[(g["name"], k)].gold += 1
    if len(gold) == 1 and len(predicted) == 1:
        pairs = [(0, 0)] if gold[0]["name"] == predicted[0]["name"] else []
    else:
        weights = [[_pair_weight(g, p, slot_types.get(g["name"], {})) for p in predicted] for g in gold]
        pairs = max_weight_assignment(weights) if gold and predicted else []
    matched_gold = {gi for gi, _ in pairs}
    matched_pred = {pi for _, pi in pairs}
    for gi, pi in pairs:
        g, p = gold[gi], predicted[pi]
        types = slot_types.get(g["name"], {})
        stats = tools[g["name"]]
        stats.matched += 1
        all_strict = all_lenient = True
        for k, v in g["arguments"].items():
            cell = slots[(g["name"], k)]
            if k not in p["arguments"]:
                cell.missing_slot += 1
                all_strict = all_lenient = False
                continue
            strict, len_ok = _slot_equal(v, p["arguments"][k], types.get(k))
            cell.strict_correct += strict
            cell.lenient_correct += len_ok
            cell.wrong_value += not len_ok
            all_strict &= strict
            all_lenient &= len_ok
        for k in p["arguments"]:
            if k not in g["arguments"]:
                slots[(g["name"], k)].extra += 1
                all_strict = all_lenient = False
        stats.strict_exact += all_strict
        stats.lenient_exact += all_lenient
    for gi, g in enumerate(gold):
        if gi not in matched_gold:
            tools[g["name"]].missed += 1
            for k in g["arguments"]:
                slots[(g["name"], k)].missed_call += 1
    for pi, p in enumerate(predicted):
        if pi not in matched_pred:
            tools[p["name"]].spurious += 1


def _lenient_table(rows: list[dict[str, Any]], lenient: dict[str, list[int]], malformed: Counter) -> list[dict[str, Any]]:
    table = []
    for row in rows:
        label = row["評価項目"]
        counts = lenient.get(label)
        entry = {
            "評価項目": label,
            "評価対象数": row["評価対象数"],
            "published(%)": row["全体の正答率(%)"],
            "multiset(%)": None,
            "lenient(%)": None,
            "lenient_multiset(%)": None,
            "malformed": malformed[label],
        }
        if counts is not None:
            n, multiset, len_set, len_ms = counts
            entry["multiset(%)"] = _rate(multiset, n)
            entry["lenient(%)"] = _rate(len_set, n)
            entry["lenient_multiset(%)"] = _rate(len_ms, n)
        table.append(entry)
    return table


def _slot_row(s: _SlotStats) -> dict[str, Any]:
    slot_errors = s.wrong_value + s.missing_slot + s.extra
    in_matched = s.gold - s.missed_call  # gold values whose call was matched
    return {
        **vars(s),
        "slot_errors": slot_errors,
        "lenient_accuracy(%)": _rate(s.lenient_correct, s.gold) if s.gold else None,
        "accuracy_in_matched_calls(%)": _rate(s.lenient_correct, in_matched) if in_matched else None,
    }


def _slot_table(slots: dict[tuple[str, str], _SlotStats]) -> list[dict[str, Any]]:
    """Per (tool, slot), most slot errors (wrong, missing or extra values in matched calls)
    first; values of calls that were never made are counted apart (``missed_call``)."""
    table = [{"tool": tool, "slot": slot, **_slot_row(s)} for (tool, slot), s in slots.items()]
    table.sort(key=lambda r: (-r["slot_errors"], -r["missed_call"], r["tool"], r["slot"]))
    return table


def _slot_name_table(slots: dict[tuple[str, str], _SlotStats]) -> list[dict[str, Any]]:
    """The same figures summed over tools by slot name (``city``, ``name``, ``day``, ...)."""
    by_name: dict[str, _SlotStats] = defaultdict(_SlotStats)
    for (_, slot), s in slots.items():
        total = by_name[slot]
        for key, value in vars(s).items():
            setattr(total, key, getattr(total, key) + value)
    table = [{"slot": slot, **_slot_row(s)} for slot, s in by_name.items()]
    table.sort(key=lambda r: (-r["slot_errors"], -r["missed_call"], r["slot"]))
    return table


def _depth_table(depth: dict[Any, list[int]]) -> list[dict[str, Any]]:
    keys = sorted((k for k in depth if k != "unknown"), key=int) + (["unknown"] if "unknown" in depth else [])
    table = []
    for k in keys:
        n, exact, len_ms, decision, gold_call, call_exact, call_len = depth[k]
        table.append(
            {
                "depth": k, "n": n,
                "全体(%)": _rate(exact, n), "全体_lenient(%)": _rate(len_ms, n),
                "使用・不使用判断(%)": _rate(decision, n), "n_gold_call": gold_call,
                "tool call精度(%)": _rate(call_exact, gold_call) if gold_call else None,
                "tool call精度_lenient(%)": _rate(call_len, gold_call) if gold_call else None,
            }
        )
    return table


# --- writing ---------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_model_name(model: str) -> str:
    """A model spec usable in a file name (``Qwen/Qwen3-14B`` → ``Qwen_Qwen3-14B``, as the
    published script does; any other character outside ``[A-Za-z0-9._-]`` becomes ``_``)."""
    return _UNSAFE.sub("_", model).strip("._") or "model"


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text through a temporary file beside ``path`` and a rename (readers see
    the old file or the new one, never half of it).

    Args:
        path (Path): The file.
        text (str): Its new content.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:  # nothing half-written and no .tmp left behind
        tmp.unlink(missing_ok=True)
        raise


LAYOUTS = ("separate", "published")
"""How wrong turns are written: ``separate`` (default: ``incorrect_<model>.json`` beside a score
file of exactly five rows, as the dataset's README describes) or ``published`` (after the five
rows inside ``score_<model>.json``, as ``evaluate.py`` at its last public revision does)."""


def write_score_files(
    out: Path, model: str, evaluation: Evaluation, layout: str = "separate",
    questions: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``score_<model>.json``, ``incorrect_<model>.json`` (``separate`` layout only) and
    ``diagnostics_<model>.json`` (one JSON document) into ``out``, each through a temporary
    file (an earlier version is never left half-written).

    Args:
        out (Path): The folder.
        model (str): Already sanitised (see :func:`safe_model_name`).
        evaluation (Evaluation): What to write.
        layout (str): One of :data:`LAYOUTS`. ``separate``: the score file holds exactly the
            five rows and the wrong turns go to ``incorrect_<model>.json`` (toolgym's form, with
            ``last_user_utterance``). ``published``: the wrong turns follow the five rows in the
            score file in the published script's form (:func:`published_incorrect`), and a stale
            ``incorrect_<model>.json`` is removed.
        questions (Mapping[str, Any] | None): data_id → chat history, for the ``published``
            layout's ``question`` field.

    Returns:
        The paths written, by kind (``score``, ``incorrect``, ``diagnostics``).

    Raises:
        ValueError: for an unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown JMultiWOZ-TC layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "score": out / f"score_{model}.json",
        "incorrect": out / f"incorrect_{model}.json",
        "diagnostics": out / f"diagnostics_{model}.json",
    }
    dumps = json.dumps
    rows = "".join(dumps(r, ensure_ascii=False) + "\n" for r in evaluation.rows)
    if layout == "published":
        questions = questions or {}
        wrong = (
            published_incorrect(entry, record, questions.get(entry["data_id"]))
            for entry, record in zip(evaluation.incorrect, evaluation.incorrect_records, strict=True)
        )
        write_text_atomic(paths["score"], rows + "".join(dumps(r, ensure_ascii=False) + "\n" for r in wrong))
        paths.pop("incorrect").unlink(missing_ok=True)
    else:
        write_text_atomic(paths["score"], rows)
        write_text_atomic(paths["incorrect"], "".join(dumps(r, ensure_ascii=False) + "\n" for r in evaluation.incorrect))
    write_text_atomic(paths["diagnostics"], dumps(evaluation.diagnostics, ensure_ascii=False, indent=1) + "\n")
    return paths

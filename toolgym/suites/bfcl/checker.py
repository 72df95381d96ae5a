"""The leaderboard's single-turn checker, in toolgym's own code, and the columns it lacks.

Rules (github.com/ShishirPatil/gorilla, ``berkeley-function-call-leaderboard/bfcl_eval/
eval_checker/``: ``eval_runner.py`` and ``ast_eval/ast_checker.py``; the AST metric of the
leaderboard's first release blog, gorilla.cs.berkeley.edu/blogs/8_berkeley_function_calling_leaderboard.html):

* **decoding** (:func:`decode`): a result is a list ``[{name: {arg: value}}]`` (an arguments
  object may be a JSON string, as function-calling handlers store them) or a string in the
  prompting format ``[f(a=1, b="x"), g(...)]``. A result that does not decode, or decodes to
  something else, fails an AST category (``ast_decoder:decoder_failed``,
  ``ast_decoder:decoder_wrong_output_format``);
* **irrelevance** passes when the result holds no call: it does not decode, or decodes to
  ``[]``/``[{}]`` or to something other than a list of calls (so a malformed call counts as an
  abstention; gorilla issue #1362). **relevance** passes when it holds at least one call;
* **simple**: exactly one call; **multiple**: exactly one call, checked against the one
  expected function; **parallel** (and parallel_multiple): as many calls as expected, each
  expected call matched greedily, in the ground truth's order, to the first unmatched model
  call that passes (:func:`check`);
* **one call** (:func:`check_call`): the function name (the name in the data, or with dots as
  underscores as function-calling models must write it); every required parameter present;
  no parameter the function or the ground truth does not have; each value typed as declared
  and among the acceptable values; every parameter of the ground truth present unless ``""``
  is among its values;
* **types**: Python values must have the declared type exactly (``bool`` is not a number; an
  ``int`` is accepted for ``float``, a ``float`` is not accepted for ``integer``); array
  elements are checked one level deep; a value of the ground truth's own type is accepted as a
  variable name and then compared as is. Java and JavaScript values must be strings of source
  code, read by the declared type (:mod:`toolgym.suites.bfcl.values`);
* **values**: strings after the leaderboard's normalisation; lists element by element with
  their strings normalised; dicts key by key (keys whose values include ``""`` may be left
  out); lists of dicts position by position; anything else by ``==`` among the acceptable
  values.

Every failure carries the leaderboard's ``error_type`` code. Beside the official verdict,
:func:`check_optimal` matches parallel calls optimally (a perfect matching of model calls to
expected calls, where the greedy order can miss one), and :func:`abstention` tells a clean
abstention from a malformed output on irrelevance entries. Neither changes the official
verdict.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass
from typing import Any

from toolgym import Example
from toolgym.suites.bfcl.data import Entry, entry_of, fc_name
from toolgym.suites.bfcl.values import JAVA_TYPES, JS_TYPES, from_java, from_javascript, standardize

__all__ = ["ERROR_TYPES", "Decoded", "Verdict", "abstention", "check", "check_call", "check_optimal", "decode", "unsatisfiable"]

ERROR_TYPES = (
    "simple_function_checker:wrong_count", "simple_function_checker:wrong_func_name",
    "simple_function_checker:missing_required", "simple_function_checker:unexpected_param",
    "simple_function_checker:missing_optional", "multiple_function_checker:wrong_count",
    "parallel_function_checker_no_order:wrong_count", "parallel_function_checker_no_order:cannot_find_match",
    "type_error:simple", "type_error:nested", "type_error:java", "type_error:js",
    "value_error:string", "value_error:list/tuple", "value_error:dict_key", "value_error:dict_value",
    "value_error:list_dict_count", "value_error:others",
    "ast_decoder:decoder_failed", "ast_decoder:decoder_wrong_output_format",
    "irrelevance_error:decoder_success", "relevance_error:decoder_failed",
)
"""The leaderboard's error codes this checker gives (``dict_checker:unclear`` and
``list_dict_checker:unclear`` too, when no acceptable dict is given)."""

PYTHON_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict,
    "any": str,
}
"""The Python type a declared type is checked as (``PYTHON_TYPE_MAPPING`` of ast_checker.py)."""

_NESTED = {"python": ("array", "tuple"), "java": ("Array", "ArrayList"), "javascript": ("array",)}


@dataclass(frozen=True)
class Verdict:
    """The checker's judgement of one entry (or one call).

    Attributes:
        valid: Whether it passes.
        error_type: The leaderboard's code of the failure (``None`` when valid).
        error: What failed, in words.
        param: The first argument found wrong (the per-argument divergence), if any.
        cause: For a parallel mismatch, the ``error_type`` of the closest candidate call.
        call: The position of the model call at fault (``None``: the result as a whole, such
            as a wrong number of calls).
    """

    valid: bool
    error_type: str | None = None
    error: str = ""
    param: str | None = None
    cause: str | None = None
    call: int | None = None


OK = Verdict(True)


def _fail(error_type: str, error: str, param: str | None = None) -> Verdict:
    return Verdict(False, error_type, error, param)


# --- decoding -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decoded:
    """A result decoded into calls.

    Attributes:
        calls: ``[{name: {arg: value}}]`` when the result decoded, else ``None``.
        error: Why it did not decode (``None`` when it did).
        form_ok: Whether ``calls`` is a list of one-key dicts whose values are dicts (the
            leaderboard's ``is_function_calling_format_output``).
        attempted: Whether the result looks like an attempt at a call (for the abstention
            column): a decoded call, or text containing ``name(``.
    """

    calls: list[Any] | None
    error: str | None = None
    form_ok: bool = False
    attempted: bool = False

    @property
    def empty(self) -> bool:
        """No call: not decoded, not in call form, ``[]`` or ``[{}]`` (``is_empty_output``)."""
        c = self.calls
        return c is None or not self.form_ok or len(c) == 0 or (len(c) == 1 and len(c[0]) == 0)


_ATTEMPT = re.compile(r"[A-Za-z_][\w.]*\s*\(")


def _form_ok(calls: Any) -> bool:
    return isinstance(calls, list) and all(
        isinstance(c, dict) and len(c) == 1 and isinstance(next(iter(c.values())), dict) for c in calls
    )


def decode(result: Any, language: str = "python") -> Decoded:
    """Decode a result as the leaderboard does before checking.

    Args:
        result (Any): A list of calls ``[{name: {arg: value} | JSON string}]``, or text in the
            prompting format (``[f(a=1), g(b="x")]``; backticks, newlines and spaces around it
            and missing outer brackets tolerated), or ``None``: a reply that holds no call.
        language (str): ``python`` (values as Python literals), ``java`` or ``javascript``
            (values kept as source strings; a top-level string literal loses its quotes).

    Returns:
        Decoded: Never raises for bad input: a failure is ``calls=None`` with the reason.
    """
    if isinstance(result, str):
        attempted = bool(_ATTEMPT.search(result))
        try:
            calls = _decode_text(result, language)
        except (SyntaxError, ValueError, TypeError, KeyError, RecursionError, ArithmeticError) as exc:
            return Decoded(None, f"{type(exc).__name__}: {exc}", attempted=attempted)
        return Decoded(calls, None, _form_ok(calls), attempted=attempted or bool(calls))
    if isinstance(result, list):
        calls = []
        for item in result:
            if isinstance(item, dict):
                decoded = {}
                for name, args in item.items():
                    if isinstance(args, str):
                        try:
                            args = json.loads(args)
                        except json.JSONDecodeError as exc:
                            return Decoded(None, f"arguments of {name!r} are not JSON: {exc.msg}", attempted=True)
                    decoded[name] = args
                calls.append(decoded)
            else:
                calls.append(item)
        return Decoded(calls, None, _form_ok(calls), attempted=bool(calls))
    if result is None:  # a function-calling model's plain reply (toolgym.suites.bfcl.results): no call
        return Decoded(None, "the reply holds no call (a function-calling model's text is not decoded as calls)",
                       attempted=False)
    return Decoded(None, f"a result must be a list of calls or a string, got {type(result).__name__}", attempted=True)


def _decode_text(text: str, language: str) -> list[Any]:
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    if language == "python":
        return _decode_python(text)
    return _decode_source(text[1:-1], strip_strings=True)


def _decode_python(text: str) -> list[Any]:
    tree = ast.parse(text.strip().strip("'"), mode="eval").body
    nodes = [tree] if isinstance(tree, ast.Call) else getattr(tree, "elts", None)
    if nodes is None:
        raise ValueError("not a list of calls")
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise ValueError(f"not a call: {ast.unparse(node)}")
        calls.append(_python_call(node))
    return calls


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _python_call(node: ast.Call) -> dict[str, dict[str, Any]]:
    return {_dotted(node.func): {kw.arg: _python_value(kw.value) for kw in node.keywords if kw.arg is not None}}


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _python_value(node: ast.AST) -> Any:
    """A Python argument value: literals, ``-x``, lists, tuples, dicts, arithmetic on numbers
    (evaluated, as the leaderboard evaluates binary operations), a bare name as its text, a
    call with keywords as a nested call, other calls and subscripts as their source text;
    anything else (attributes, lambdas, sets, comprehensions) does not decode, as there."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _python_value(node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"cannot negate {ast.unparse(node.operand)}")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List):
        return [_python_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_python_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        return {_python_value(k): _python_value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _python_value(node.left), _python_value(node.right)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            raise ValueError(f"cannot evaluate {ast.unparse(node)}")
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ValueError(f"exponent too large in {ast.unparse(node)}")
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _python_call(node) if node.keywords else ast.unparse(node)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node)
    raise ValueError(f"unsupported value {ast.unparse(node)!r}")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and string literals."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {ch!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    if quote or depth:
        raise ValueError("unbalanced brackets or quotes")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


_SOURCE_CALL = re.compile(r"^([A-Za-z_$][\w.$]*)\s*\((.*)\)$", re.DOTALL)


def _decode_source(text: str, strip_strings: bool) -> list[Any]:
    """Calls written in Java or JavaScript syntax with named arguments ``f(a=x, b=y)``: each
    value kept as its source text (a top-level string literal without its quotes)."""
    calls = []
    for part in _split_top(text):
        m = _SOURCE_CALL.match(part)
        if not m:
            raise ValueError(f"not a call: {part[:80]!r}")
        args = {}
        for arg in _split_top(m.group(2)):
            key, eq, value = arg.partition("=")
            if not eq or not re.fullmatch(r"\s*[A-Za-z_$][\w$]*\s*", key):
                raise ValueError(f"not a named argument: {arg[:80]!r}")
            value = value.strip()
            if strip_strings and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            args[key.strip()] = value
        calls.append({m.group(1): args})
    return calls


# --- one call -------------------------------------------------------------------------------
def _answer_type(options: list[Any]) -> type | None:
    for option in options:
        if option != "":
            return type(option)
    return None


def _type_check(param: str, value: Any, options: list[Any], declared: str, expected: type, nested: type | None) -> tuple[Verdict, bool]:
    """``(verdict, is_variable)`` of a value's type (``type_checker`` of ast_checker.py)."""
    answer_type = _answer_type(options)
    variable = answer_type is not None and answer_type is not expected
    failed: Verdict | None = None
    if type(value) is expected:
        if nested is None:
            return OK, variable
        for option in options:
            fits = True
            if type(option) is list:
                fits = all(_type_check(param, item, option, nested.__name__, nested, None)[0].valid for item in value)
            if fits:
                return OK, variable
        failed = _fail("type_error:nested", f"{param}: expected {declared} of {nested.__name__}, got {value!r}", param)
    if answer_type is not None and type(value) is answer_type:
        return (failed or OK), True
    return _fail("type_error:simple", f"{param}: expected type {declared}, got {type(value).__name__} ({value!r})", param), False


def _string_check(param: str, value: str, options: list[Any]) -> Verdict:
    if standardize(value) in [standardize(o) for o in options if isinstance(o, str)]:
        return OK
    return _fail("value_error:string", f"{param}: {value!r} is not one of {options} (after normalisation)", param)


def _normal_list(values: Any) -> list[Any]:
    return [standardize(v) if isinstance(v, str) else v for v in values]


def _list_check(param: str, value: list[Any], options: list[Any]) -> Verdict:
    if _normal_list(value) in [_normal_list(o) for o in options]:
        return OK
    return _fail("value_error:list/tuple", f"{param}: {value!r} is not one of {options}", param)


def _dict_check(param: str, value: dict[str, Any], options: list[Any]) -> Verdict:
    verdict = _fail("dict_checker:unclear", f"{param}: no acceptable dict", param)
    for option in options:
        if option == "":
            continue
        verdict = None
        for key, item in value.items():
            if key not in option:
                verdict = _fail("value_error:dict_key", f"{param}: unexpected key {key!r}", f"{param}.{key}")
                break
            item = standardize(item) if isinstance(item, str) else item
            allowed = [standardize(o) if isinstance(o, str) else o for o in option[key]]
            if item not in allowed:
                verdict = _fail("value_error:dict_value", f"{param}.{key}: {value[key]!r} is not one of {option[key]}", f"{param}.{key}")
                break
        if verdict is None:
            missing = [k for k, allowed in option.items() if k not in value and "" not in allowed]
            if missing:
                verdict = _fail("value_error:dict_key", f"{param}: missing key {missing[0]!r}", f"{param}.{missing[0]}")
        if verdict is None:
            return OK
    return verdict


def _list_dict_check(param: str, value: list[Any], options: list[Any]) -> Verdict:
    verdict = _fail("list_dict_checker:unclear", f"{param}: no acceptable list", param)
    for option in options:
        if len(value) != len(option):
            verdict = _fail("value_error:list_dict_count", f"{param}: {len(value)} dicts, expected {len(option)}", param)
            continue
        for i, item in enumerate(value):
            verdict = _dict_check(param, item, [option[i]])
            if not verdict.valid:
                break
        else:
            return OK
    return verdict


def check_call(function: dict[str, Any], call: dict[str, Any], answer: dict[str, dict[str, list[Any]]], language: str) -> Verdict:
    """Check one model call against one ground-truth call (``simple_function_checker``).

    Args:
        function (dict): The expected function's document (as in the data).
        call (dict): ``{name: {arg: value}}`` as decoded.
        answer (dict): ``{name: {arg: [acceptable values]}}``.
        language (str): ``python``, ``java`` or ``javascript``.

    Returns:
        Verdict: The first failure found, in the leaderboard's order of checks, or valid.
    """
    expected_name, options = next(iter(answer.items()))
    name = expected_name if expected_name in call else fc_name(expected_name)
    if name not in call:
        return _fail("simple_function_checker:wrong_func_name", f"expected {expected_name}, got {', '.join(map(str, call)) or 'nothing'}")
    args = call[name]
    params = function.get("parameters", {})
    props: dict[str, Any] = params.get("properties", {})
    for param in params.get("required", []):
        if param not in args:
            return _fail("simple_function_checker:missing_required", f"missing required parameter {param!r}", param)
    for param, value in args.items():
        if param not in props or param not in options:
            return _fail("simple_function_checker:unexpected_param", f"unexpected parameter {param!r}", param)
        spec = props[param]
        declared = str(spec.get("type", "any"))
        nested_name = (spec.get("items") or {}).get("type") if declared in _NESTED[language] else None
        if language == "python":
            expected = PYTHON_TYPES.get(declared, str)
            nested = PYTHON_TYPES.get(nested_name, str) if nested_name else None
        else:
            table = JAVA_TYPES if language == "java" else JS_TYPES
            expected = table.get(declared, str)
            nested = table.get(nested_name, str) if nested_name else None
            if not isinstance(value, str):
                code = "type_error:java" if language == "java" else "type_error:js"
                return _fail(code, f"{param}: expected a {declared} written as a string of source, got {type(value).__name__} ({value!r})", param)
            reader = from_java if language == "java" else from_javascript
            value = reader(value, declared, nested_name)
        if declared == "tuple" and type(value) is tuple:
            value = list(value)
        if language == "python" and declared == "float" and type(value) is int:
            value = float(value)
        verdict, variable = _type_check(param, value, options[param], declared, expected, nested)
        if not verdict.valid:
            return verdict
        if not variable:
            if expected is dict:
                verdict = _dict_check(param, value, options[param])
            elif expected is list and nested is dict:
                verdict = _list_dict_check(param, value, options[param])
            elif expected is str:
                verdict = _string_check(param, value, options[param])
            elif expected is list:
                verdict = _list_check(param, value, options[param])
            else:
                verdict = None
            if verdict is not None:
                if not verdict.valid:
                    return verdict
                continue
        if value not in options[param]:
            return _fail("value_error:others", f"{param}: {value!r} is not one of {options[param]}", param)
    for param, allowed in options.items():
        if param not in args and "" not in allowed:
            return _fail("simple_function_checker:missing_optional", f"parameter {param!r} of the ground truth not given (not optional)", param)
    return OK


def _document(entry: Entry, name: str) -> dict[str, Any]:
    return next((f for f in entry.functions if f.get("name") == name), entry.functions[0] if len(entry.functions) == 1 else {})


# --- one entry ------------------------------------------------------------------------------
def check(entry: Entry, result: Any) -> Verdict:
    """The leaderboard's verdict on one entry.

    Args:
        entry (Entry): The test entry.
        result (Any): Its result, as in a result file (see :func:`decode`).

    Returns:
        Verdict: Valid or the failure with its ``error_type``.
    """
    if entry.kind in ("irrelevance", "relevance"):
        decoded = decode(result, "python")
        if entry.kind == "irrelevance":
            return OK if decoded.empty else _fail("irrelevance_error:decoder_success", "a call was made where none should be")
        return _fail("relevance_error:decoder_failed", f"no call was made ({decoded.error or 'empty'})") if decoded.empty else OK
    decoded = decode(result, entry.language)
    if decoded.calls is None:
        return _fail("ast_decoder:decoder_failed", f"the result does not decode: {decoded.error}")
    if not decoded.form_ok:
        return _fail("ast_decoder:decoder_wrong_output_format", "the result is not a list of calls")
    return _check_calls(entry, decoded.calls, optimal=False)


def check_optimal(entry: Entry, result: Any) -> Verdict:
    """:func:`check` with parallel calls matched optimally: valid when some one-to-one
    assignment of model calls to expected calls passes every pair (the official greedy
    matching can take, for an earlier expected call, the model call a later one needed).
    The same as :func:`check` for every other kind of entry."""
    if entry.kind != "parallel":
        return check(entry, result)
    decoded = decode(result, entry.language)
    if decoded.calls is None or not decoded.form_ok:
        return check(entry, result)
    return _check_calls(entry, decoded.calls, optimal=True)


def _check_calls(entry: Entry, calls: list[dict[str, Any]], optimal: bool) -> Verdict:
    truth = entry.ground_truth
    if entry.kind == "simple":
        if len(calls) != 1:
            return _fail("simple_function_checker:wrong_count", f"{len(calls)} calls, expected 1")
        name = next(iter(truth[0]))
        return _at(check_call(_document(entry, name), calls[0], truth[0], entry.language), 0)
    if entry.kind == "multiple":
        if len(calls) != len(truth):
            return _fail("multiple_function_checker:wrong_count", f"{len(calls)} calls, expected {len(truth)}")
        name = next(iter(truth[0]))
        return _at(check_call(_document(entry, name), calls[0], truth[0], entry.language), 0)
    if len(calls) != len(truth):
        return _fail("parallel_function_checker_no_order:wrong_count", f"{len(calls)} calls, expected {len(truth)}")
    verdicts = [[check_call(_document(entry, next(iter(answer))), call, answer, entry.language) for call in calls] for answer in truth]
    if optimal:
        if _perfect_matching([[v.valid for v in row] for row in verdicts]):
            return OK
        return _mismatch(verdicts, None)
    used: set[int] = set()
    for i, row in enumerate(verdicts):
        match = next((j for j, v in enumerate(row) if j not in used and v.valid), None)
        if match is None:
            return _mismatch(verdicts, i, used)
        used.add(match)
    return OK


def _mismatch(verdicts: list[list[Verdict]], index: int | None, used: set[int] | None = None) -> Verdict:
    """The parallel failure, naming the expected call left unmatched and the closest cause."""
    if index is None:
        index = next((i for i, row in enumerate(verdicts) if not any(v.valid for v in row)), 0)
    candidates = [(j, v) for j, v in enumerate(verdicts[index]) if not (used and j in used) and not v.valid]
    j, closest = min(candidates, key=lambda jv: _closeness(jv[1])) if candidates else (None, None)
    return Verdict(
        False, "parallel_function_checker_no_order:cannot_find_match",
        f"no model call matches expected call {index + 1}" + (f" (closest: call {j + 1}, {closest.error})" if closest else ""),
        closest.param if closest else None, closest.error_type if closest else None, j,
    )


def _at(verdict: Verdict, call: int) -> Verdict:
    return verdict if verdict.valid else Verdict(False, verdict.error_type, verdict.error, verdict.param, verdict.cause, call)


_FAR = ("simple_function_checker:wrong_func_name", "simple_function_checker:missing_required",
        "simple_function_checker:unexpected_param")


def _closeness(v: Verdict) -> int:
    """0 for a wrong type or value (the closest miss), higher for a missing or unexpected
    parameter, highest for another function."""
    return len(_FAR) - _FAR.index(v.error_type) if v.error_type in _FAR else 0


def _perfect_matching(ok: list[list[bool]]) -> bool:
    """Whether every row can be given a distinct column with ``ok[row][col]`` (augmenting
    paths, Kuhn's algorithm; rows and columns are a handful of calls)."""
    owner: dict[int, int] = {}

    def place(row: int, seen: set[int]) -> bool:
        for col, fits in enumerate(ok[row]):
            if fits and col not in seen:
                seen.add(col)
                if col not in owner or place(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(place(row, set()) for row in range(len(ok)))


def abstention(result: Any) -> str:
    """How an irrelevance entry's result abstains: ``abstained`` (no call, and nothing that
    looks like one), ``called`` (a decodable call) or ``malformed`` (an attempt at a call that
    does not decode; the official checker counts it as an abstention)."""
    decoded = decode(result, "python")
    if not decoded.empty:
        return "called"
    return "malformed" if decoded.attempted else "abstained"


def unsatisfiable(examples: list[Example]) -> dict[str, str]:
    """Entries whose own ground truth fails the official checks (the ground truth contradicts
    the function's schema), with the reason: the verdict on the oracle's answer
    (:func:`toolgym.suites.bfcl.data.oracle_calls`).

    Args:
        examples (list[Example]): Examples loaded by :func:`load_examples`.

    Returns:
        dict[str, str]: ``{id: "error_type: error"}`` for each such entry (7 in the BFCL v4
        release: live_simple_106-63-0, live_simple_112-68-0, live_multiple_507-149-4,
        live_multiple_862-181-3, live_multiple_964-207-0, simple_java_36, simple_java_65).
    """
    found = {}
    for example in examples:
        entry = entry_of(example)
        if entry.kind in ("irrelevance", "relevance", "multi_turn"):
            continue
        verdict = check(entry, [{c.name: c.arguments} for c in example.expected_calls or []])
        if not verdict.valid:
            found[example.id] = f"{verdict.error_type}: {_contradiction(entry, verdict)}"
    return found


def _contradiction(entry: Entry, verdict: Verdict) -> str:
    """The schema/ground-truth contradiction behind a failing oracle answer, in words."""
    param = (verdict.param or "").split(".")[0]
    truth = {p: v for call in entry.ground_truth for args in call.values() for p, v in args.items()}
    if verdict.error_type == "simple_function_checker:missing_required":
        if param not in truth:
            return f"the function requires {param!r}; the ground truth does not give it (it names {', '.join(map(repr, truth))})"
        return f"the function requires {param!r}; the ground truth accepts no value for it ({truth[param]!r})"
    if verdict.error_type == "simple_function_checker:unexpected_param":
        return f"the ground truth requires {param!r}, which the function does not declare"
    declared = next((f["parameters"]["properties"].get(param, {}) for f in entry.functions
                     if param in f.get("parameters", {}).get("properties", {})), {})
    if entry.language != "python" and (declared.get("items") or {}).get("type") == "any":
        return (f"{param!r} is declared {declared.get('type')} of any: its elements are read as strings, while the "
                f"ground truth lists other types ({truth.get(param)!r})")
    return verdict.error

"""Values as the leaderboard's checker sees them: the string normalisation, Java and JavaScript
values read from source syntax by the declared type, and the reverse (a value written as source,
for the oracle).

Rules from the leaderboard's checker (github.com/ShishirPatil/gorilla,
``berkeley-function-call-leaderboard/bfcl_eval/eval_checker/ast_eval/``: ``ast_checker.py``
``standardize_string``; ``type_convertor/java_type_converter.py``; ``type_convertor/
js_type_converter.py``), written again here:

* strings compare after removing spaces and the characters ``, . / - _ * ^``, lower-casing,
  and turning ``'`` into ``"`` (:func:`standardize`);
* a Java or JavaScript value is a string of source code, read by the parameter's declared type
  (:func:`from_java`, :func:`from_javascript`); text that does not have the declared type's
  syntax stays a string, so it later fails the type check. Collections are split at every
  comma, as the leaderboard does (an element holding a comma is split too).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["first_value", "from_java", "from_javascript", "standardize", "to_source"]

_DROPPED = re.compile(r"[ ,./\-_*^]")


def standardize(text: str) -> str:
    """The leaderboard's string normal form: spaces and ``,./-_*^`` removed, lower case,
    ``'`` turned into ``"`` (``standardize_string`` of ``ast_checker.py``).

    Example: ``"April 1, 2024"`` and ``"april 1 2024"`` both become ``"april12024"``.
    """
    return _DROPPED.sub("", text).lower().replace("'", '"')


# --- Java -----------------------------------------------------------------------------------
_INT = re.compile(r"^-?\d+$")
_JAVA_FLOAT = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$")
_JAVA_DOUBLE = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_JAVA_LONG = re.compile(r"^-?\d+[lL]$")

JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int, "boolean": bool,
    "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict, "Hashtable": dict, "Queue": list,
    "Stack": list, "String": str, "any": str,
}
"""The Python type a Java declared type is checked as (``JAVA_TYPE_CONVERSION``)."""

JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict, "array": list,
    "any": str,
}
"""The Python type a JavaScript declared type is checked as (``JS_TYPE_CONVERSION``)."""


def java_literal(text: str) -> Any:
    """A Java literal of unknown type: ``true``/``false``, a quoted string (quotes removed),
    ``12L``, ``1.5f``, an integer, a decimal, else the text itself."""
    if text in ("true", "false"):
        return text == "true"
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if _JAVA_LONG.match(text):
        return int(text[:-1])
    if _JAVA_FLOAT.match(text):
        return float(text[:-1])
    return _number_or_text(text)


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _java_elements(inner: str, nested: str | None, strip_quotes: bool) -> list[Any]:
    out = []
    for part in inner.split(","):
        part = part.strip()
        if strip_quotes and nested in ("char", "String"):
            out.append(part[1:-1])
        elif nested:
            out.append(from_java(part, nested))
        else:
            out.append(java_literal(part))
    return out


def from_java(text: str, declared: str, nested: str | None = None) -> Any:
    """A Java source value read by its declared type.

    ``byte``/``short``/``integer``: ``-?digits``; ``long``: with an ``L`` suffix; ``float``:
    with an ``f`` suffix; ``double``: a decimal; ``boolean``: ``true``/``false``; ``Array``:
    ``new T[]{a, b}``; ``ArrayList``: ``new ArrayList<>(Arrays.asList(a, b))``,
    ``new ArrayList<>() {{ add(a); }}`` or ``new ArrayList<>()``; ``HashMap``:
    ``new HashMap<K, V>() {{ put("k", v); }}``; ``String``, ``char``, ``any`` and the types
    the leaderboard does not read (``Set``, ``Hashtable``, ``Queue``, ``Stack``): the text.

    Args:
        text (str): The value as written.
        declared (str): The parameter's declared Java type.
        nested (str | None): The element type of an ``Array``/``ArrayList``.

    Returns:
        Any: The value, or ``text`` itself when it does not have the declared syntax.
    """
    if declared in ("byte", "short", "integer"):
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(text[:-1]) if _JAVA_FLOAT.match(text) else text
    if declared == "double":
        return float(text) if _JAVA_DOUBLE.match(text) else text
    if declared == "long":
        return int(text[:-1]) if _JAVA_LONG.match(text) else text
    if declared == "boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "Array":
        m = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
        if not m:
            return text
        parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
        return [from_java(p, nested) if nested else java_literal(p) for p in parts]
    if declared == "ArrayList":
        m = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
        if m:
            return _java_elements(m.group(1), nested, strip_quotes=True)
        m = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
        if m:
            return [_java_elements(a, nested, strip_quotes=True)[0] for a in re.findall(r"add\((.+?)\)", m.group(1))]
        return [] if re.search(r"new\s+ArrayList<\w*>\(\)", text) else text
    if declared == "HashMap":
        m = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
        if m:
            return {k: java_literal(v.strip()) for k, v in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", m.group(1))}
        return {} if re.search(r"new\s+HashMap<.*?>\s*\(\)", text) else text
    return text


# --- JavaScript -----------------------------------------------------------------------------
def js_literal(text: str) -> Any:
    """A JavaScript literal of unknown type: ``true``/``false``, a string in ``"`` or ``'``
    (quotes removed), an integer, a decimal, else the text itself."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return _number_or_text(text)


def _js_array(code: str, nested: str | None) -> Any:
    two_d = re.match(r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)", code)
    if two_d:
        rows = []
        for i, inner in enumerate(re.findall(r"\[(.*?)\]", two_d.group(0))):
            inner = inner.strip()
            if i == 0 and inner.startswith("["):
                inner = inner[1:]
            rows.append([js_literal(e) for e in inner.split(",")])
        return rows
    one_d = re.match(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)", code)
    if not one_d:
        return code
    inner = (one_d.group(1) if one_d.group(1) is not None else one_d.group(2) or "").strip()
    parts = inner.split(",") if inner else []
    if nested:
        return [from_javascript(p.strip(), nested) for p in parts]
    return [js_literal(p) for p in parts]


def _js_dict(code: str) -> Any:
    if code == "{}":
        return {}
    m = re.match(r"\{(.*?)\}", code)
    if not m:
        return code
    out: dict[str, Any] = {}
    for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", m.group(1)):
        key, value = key.strip().strip("'\""), value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key] = _js_array(value, None)
        elif value.startswith("{") and value.endswith("}"):
            out[key] = _js_dict(value)
        else:
            out[key] = js_literal(value.strip("'\""))
    return out


def from_javascript(text: str, declared: str, nested: str | None = None) -> Any:
    """A JavaScript source value read by its declared type.

    ``String``: quotes removed when quoted; ``integer``: ``-?digits``; ``float``:
    ``-?digits[.digits]``; ``Bigint``: with an ``n`` suffix; ``Boolean``: ``true``/``false``;
    ``array``: ``[a, b]``, ``new Array(a, b)``, or rows ``[[a], [b]]``; ``dict``:
    ``{key: value, ...}``; ``any``: the text.

    Args:
        text (str): The value as written.
        declared (str): The parameter's declared JavaScript type.
        nested (str | None): The element type of an ``array``.

    Returns:
        Any: The value, or ``text`` itself when it does not have the declared syntax.
    """
    if declared == "String":
        quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"
        return text[1:-1] if quoted else text
    if declared == "integer":
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(text) if re.match(r"^-?\d+(\.\d+)?$", text) else text
    if declared == "Bigint":
        return int(text[:-1]) if re.match(r"^-?\d+n$", text) else text
    if declared == "Boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "array":
        return _js_array(text.strip(), nested)
    if declared == "dict":
        return _js_dict(text.strip())
    return text


# --- the other way: values written as source, for the oracle --------------------------------
def first_value(value: Any) -> Any:
    """A concrete value from an acceptable value of the ground truth: in a dict (whose entries
    list acceptable values, as the leaderboard's dict checker reads them) each key takes its
    first acceptable value and keys whose first value is ``""`` are left out; lists are
    taken element by element.

    A dict entry whose acceptable values are a string instead of a list (one in the v4
    release: simple_java_64) is left out: the checker compares a value with the characters of
    that string, which nothing passes, while ``""`` is "in" any string, so leaving the key out
    passes."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            if isinstance(options, list):
                if options and options[0] != "":
                    out[key] = first_value(options[0])
            elif not isinstance(options, str):
                out[key] = options
        return out
    if isinstance(value, list):
        return [first_value(v) if isinstance(v, dict) else v for v in value]
    return value


def _java_source(value: Any, declared: str, nested: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if declared == "long" and isinstance(value, int):
        return f"{value}L"
    if declared == "float" and isinstance(value, (int, float)):
        return f"{float(value)}f"
    if declared == "double" and isinstance(value, (int, float)):
        return repr(float(value))
    if declared in ("byte", "short", "integer") and isinstance(value, int):
        return str(value)
    if declared == "Array" and isinstance(value, list):
        elements = [_java_source(v, nested, None) if nested else _java_untyped(v) for v in value]
        return f"new {_JAVA_ELEMENT.get(nested or '', 'Object')}[]{{{', '.join(elements)}}}"
    if declared == "ArrayList" and isinstance(value, list):
        if not value:
            return "new ArrayList<>()"
        if nested in ("char", "String"):
            elements = [json.dumps(v) if isinstance(v, str) else str(v) for v in value]
        else:
            elements = [_java_source(v, nested, None) if nested else _java_untyped(v) for v in value]
        return f"new ArrayList<>(Arrays.asList({', '.join(elements)}))"
    if declared == "HashMap" and isinstance(value, dict):
        puts = " ".join(f"put({json.dumps(str(k))}, {_java_untyped(v)});" for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}" if puts else "new HashMap<>()"
    return value if isinstance(value, str) else json.dumps(value)


_JAVA_ELEMENT = {"integer": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean",
                 "String": "String", "char": "char", "byte": "byte", "short": "short"}


def _java_untyped(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _js_source(value: Any, declared: str, nested: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if declared == "Bigint" and isinstance(value, int):
        return f"{value}n"
    if declared in ("integer", "float") and isinstance(value, (int, float)):
        return str(value)
    if declared == "array" and isinstance(value, list):
        if nested and nested != "String":
            return "[" + ", ".join(_js_source(v, nested, None) for v in value) + "]"
        return "[" + ", ".join(_js_untyped(v) for v in value) + "]"
    if declared == "dict" and isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_untyped(v)}" for k, v in value.items()) + "}"
    return value if isinstance(value, str) else json.dumps(value)


def _js_untyped(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_js_untyped(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_untyped(v)}" for k, v in value.items()) + "}"
    return str(value)


def to_source(value: Any, spec: dict[str, Any], language: str) -> str:
    """A Java or JavaScript value written as source code by its declared type, so that
    :func:`from_java` / :func:`from_javascript` read it back (what the oracle sends).

    Args:
        value (Any): A concrete value (:func:`first_value`).
        spec (dict): The parameter's declared schema (``type``, ``items``).
        language (str): ``java`` or ``javascript``.

    Returns:
        str: The source text.
    """
    declared = str(spec.get("type", "any"))
    nested = (spec.get("items") or {}).get("type")
    if language == "java":
        return _java_source(value, declared, nested)
    return _js_source(value, declared, nested)

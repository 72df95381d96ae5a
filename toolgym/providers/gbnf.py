"""JSON schema → GBNF, llama.cpp's grammar format, for the arguments of a tool call.

The local model's turns are constrained by a GBNF grammar (:func:`toolgym.providers.local.tool_grammar`)
whose argument rules come from here. GBNF is the grammar language of llama.cpp's own sampler
(https://github.com/ggml-org/llama.cpp/blob/master/grammars/README.md); its literals match
text whatever tokens spell it, so the model keeps its own tokenisation of the call (llguidance's
Lark grammars, the runtime's other format, force the one canonical token sequence of a literal,
which derailed this model: a ``<tool_call>`` tag written as one special token it never
predicts).

What a schema admits (JSON text, RFC 8259):

- ``object``: the declared ``properties`` in the schema's order, each required one present,
  optional ones free to be left out; no other key unless ``additionalProperties`` is true or a
  schema (then further ``"key": value`` pairs may follow). An object schema without
  ``additionalProperties`` is closed: tools are called with the arguments they declare.
- ``string`` (``enum`` and ``const`` as their literal values; ``pattern``, ``format`` and length
  limits are not enforced), ``integer``, ``number``, ``boolean``, ``null``, ``array`` of
  ``items`` (``minItems`` / ``maxItems`` not enforced), a list of types, ``anyOf`` / ``oneOf``,
  ``$ref`` into ``$defs`` or ``definitions``; a schema without a type admits any JSON value.
- Whitespace between tokens: nothing, one space, or one or two newlines with up to 20 spaces or
  tabs of indentation, the same language as llama.cpp's own converter's ``space`` rule, so the
  model writes JSON the way it is used to.
- Numbers have at most 16 digits before the decimal point (as in llama.cpp's converter), so a
  looping model cannot write an endless integer.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["GrammarBuilder", "literal"]

PRIMITIVES = {
    "ws": '| " " | "\\n"{1,2} [ \\t]{0,20}',
    "json-char": '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "json-string": '"\\"" json-char* "\\"" ws',
    "json-int": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "json-integer": "json-int ws",
    "json-number": 'json-int ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws',
    "json-boolean": '("true" | "false") ws',
    "json-null": '"null" ws',
    "json-value": "json-object | json-array | json-string | json-number | json-boolean | json-null",
    "json-object": '"{" ws (json-string ":" ws json-value ("," ws json-string ":" ws json-value)*)? "}" ws',
    "json-array": '"[" ws (json-value ("," ws json-value)*)? "]" ws',
}
"""Rules every grammar may use (JSON's own definitions; ``ws`` after every value)."""


def literal(text: str) -> str:
    """``text`` as a GBNF string literal (backslash, quote and control characters escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> str:
    """A rule body admitting exactly ``value`` written as JSON (``ensure_ascii`` off, the
    separators Qwen's ``tojson`` writes)."""
    return literal(json.dumps(value, ensure_ascii=False, separators=(", ", ": "))) + " ws"


class GrammarBuilder:
    """Collects GBNF rules for several JSON schemas into one grammar.

    Usage: ``rule = builder.schema_rule(schema, "tool0-args")`` for each schema, then
    ``builder.rules()`` gives every rule those need, primitives included, as ``name ::= body``
    lines.

    Raises (from :meth:`schema_rule`):
        ValueError: naming the schema path, for a ``$ref`` that does not resolve, an unknown
            ``type``, or a schema that is neither an object nor a boolean.
    """

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._used: set[str] = set()

    def rules(self) -> list[str]:
        """Every rule, as ``name ::= body`` lines: the schema rules in the order they were
        made, then the primitives they use."""
        needed = self._closure()
        prims = [f"{name} ::= {body}" for name, body in PRIMITIVES.items() if name in needed]
        return [f"{name} ::= {body}" for name, body in self._rules.items()] + prims

    def _closure(self) -> set[str]:
        names = set(self._used) | {"ws"}
        pending = list(names)
        while pending:
            body = PRIMITIVES.get(pending.pop(), "")
            for name in PRIMITIVES:
                if name not in names and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", body):
                    names.add(name)
                    pending.append(name)
        return names

    def _add(self, name: str, body: str) -> str:
        name = _rule_name(name)
        base, i = name, 1
        while name in self._rules or name in PRIMITIVES:
            i += 1
            name = f"{base}-{i}"
        self._rules[name] = body
        return name

    def _prim(self, name: str) -> str:
        self._used.add(name)
        return name

    def schema_rule(self, schema: Any, name: str, root: Any = None) -> str:
        """The name of a rule admitting the JSON values ``schema`` admits (see the module's
        documentation), its sub-rules added to this builder.

        Args:
            schema: A JSON schema (dict, or a boolean: ``true`` admits anything).
            name: Base name for the rule (letters, digits and dashes).
            root: The document ``$ref`` pointers resolve in (default: ``schema``).
        """
        return self._visit(schema, _rule_name(name), schema if root is None else root, name, frozenset())

    def _visit(self, schema: Any, name: str, root: Any, path: str, refs: frozenset[str]) -> str:
        if schema is True or schema == {}:
            return self._prim("json-value")
        if not isinstance(schema, dict):
            raise ValueError(f"{path}: a schema must be an object or a boolean, got {schema!r}")
        if "$ref" in schema:
            return self._ref(schema["$ref"], root, path, refs)
        if "const" in schema:
            return self._add(name, _json_literal(schema["const"]))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise ValueError(f"{path}.enum: must be a non-empty list")
            return self._add(name, " | ".join(f"({_json_literal(v)})" for v in values))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                alts = [self._visit(s, f"{name}-{i}", root, f"{path}.{key}[{i}]", refs) for i, s in enumerate(schema[key])]
                return self._add(name, " | ".join(alts))
        kind = schema.get("type")
        if isinstance(kind, list):
            alts = [self._visit({**schema, "type": k}, f"{name}-{k}", root, path, refs) for k in kind]
            return self._add(name, " | ".join(alts))
        if kind is None and "properties" in schema:
            kind = "object"
        if kind is None:
            return self._prim("json-value")
        if kind == "object":
            return self._object(schema, name, root, path, refs)
        if kind == "array":
            items = schema.get("items", True)
            item = self._visit(items, f"{name}-item", root, f"{path}.items", refs)
            return self._add(name, f'"[" {self._prim("ws")} ({item} ("," ws {item})*)? "]" ws')
        primitive = {"string": "json-string", "integer": "json-integer", "number": "json-number",
                     "boolean": "json-boolean", "null": "json-null"}.get(kind)
        if primitive is None:
            raise ValueError(f"{path}.type: unknown JSON schema type {kind!r}")
        return self._prim(primitive)

    def _ref(self, ref: Any, root: Any, path: str, refs: frozenset[str]) -> str:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise ValueError(f"{path}.$ref: only references inside the schema (#/...) are supported, got {ref!r}")
        rule = _rule_name("ref-" + ref[2:].replace("/", "-"))
        if rule in self._rules or ref in refs:
            return rule  # defined, or being defined (a recursive schema)
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise ValueError(f"{path}.$ref: {ref!r} does not resolve")
            target = target[part]
        self._rules[rule] = ""  # reserve the name for recursive references
        body_rule = self._visit(target, rule + "-def", root, f"{path}.$ref", refs | {ref})
        self._rules[rule] = body_rule
        return rule

    def _object(self, schema: dict[str, Any], name: str, root: Any, path: str, refs: frozenset[str]) -> str:
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        pairs: list[tuple[str, bool]] = []
        for key, sub in props.items():
            value = self._visit(sub, f"{name}-{key}", root, f"{path}.properties.{key}", refs)
            kv = self._add(f"{name}-{key}-kv", f"{literal(json.dumps(key, ensure_ascii=False))} ws \":\" ws {value}")
            pairs.append((kv, key in required))
        extra = schema.get("additionalProperties", False)
        tail = ""
        if extra is not False:
            value = self._visit(extra, f"{name}-extra", root, f"{path}.additionalProperties", refs)
            tail = self._add(f"{name}-extra-kv", f'{self._prim("json-string")} ":" ws {value}')
        self._prim("ws")
        # rest[i]: the pairs from i on, after at least one pair was written (each starts with ",")
        rest = [""] * (len(pairs) + 1)
        rest[len(pairs)] = f'("," ws {tail})*' if tail else ""
        for i in range(len(pairs) - 1, 0, -1):
            kv, needed = pairs[i]
            step = f'"," ws {kv}' if needed else f'("," ws {kv})?'
            rest[i] = self._add(f"{name}-rest{i}", f"{step} {rest[i + 1]}".strip()) if (step or rest[i + 1]) else ""
        # first[i]: the pairs from i on, none written yet
        alternatives: list[str] = []
        for i, (kv, needed) in enumerate(pairs):
            alternatives.append(f"{kv} {rest[i + 1]}".strip())
            if needed:
                break
        else:
            if tail:
                alternatives.append(f'{tail} {rest[len(pairs)]}'.strip())
            alternatives.append("")  # nothing required: the empty object
        inner = " | ".join(f"({a})" if a else "" for a in alternatives)
        inner = inner.strip(" |") if alternatives == [""] else inner
        body = f'"{{" ws ({inner}) "}}" ws' if inner else '"{" ws "}" ws'
        return self._add(name, body)


def _rule_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-").lower()
    return name or "rule"

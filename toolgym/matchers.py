"""Matchers: how a milestone's expected value is compared with what the model sent or the
environment holds.

A matcher is written in a dataset as a JSON value and compiled once, when the dataset is
loaded, by :func:`compile_matcher`; :meth:`Matcher.match` is then a pure function of the actual
JSON value (and, for ``$from`` and ``$judge``, a :class:`MatchContext`). The operators:

======================================  =====================================================
``1``, ``"a"``, ``[...]``, ``{...}``     equality by value: ``1 == 1.0``, a boolean is never a
                                        number, object keys unordered, lists ordered; a plain
                                        list or object may hold operators inside
``{"$lenient": s}``                      a string equal to ``s`` after Unicode NFKC, case
                                        folding, whitespace collapsed to one space and trimmed
``{"$num": x, "rel": r, "abs": a}``      a number (never a boolean) close to ``x``:
                                        ``math.isclose(v, x, rel_tol=r, abs_tol=a)``
                                        (defaults ``rel=1e-9``, ``abs=0``)
``{"$regex": p}``                        a string that ``p`` matches whole (``re.fullmatch``)
``{"$in": [v, ...]}``                    any one of the values (each may be an operator)
``{"$any": true}``                       any value at all
``{"$contains": s}``                     a string holding ``s`` (``{"$lenient": t}`` as ``s``:
                                        holding ``t`` once both are normalised as
                                        ``$lenient`` does), or a list with an element that
                                        matches ``s``
``{"$prefix": s}``                       a string starting with ``s``
``{"$unordered": [v, ...]}``             a list equal as a multiset (elements may be
                                        operators; the pairing is a maximum matching)
``{"$subset": {k: v, ...}}``             an object holding at least these keys, each matching
``{"$from": id, "path": p}``             equal to the part at JSON pointer ``p`` (RFC 6901;
                                        default ``""``, the whole) of the result of the step
                                        that matched milestone ``id``
``{"$from": {"tool": t}, "path": p}``    equal to the part at ``p`` of the result of any tool
                                        step of tool ``t`` that the model had seen
                                        (:attr:`MatchContext.tool_results`)
``{"$judge": criterion}``                an LLM judge decides (needs a judge:
                                        :class:`MatchContext.judge`)
``{"$literal": v}``                      ``v`` by plain equality, never read as an operator
======================================  =====================================================

Partial credit (:class:`Similarity`, compiled by :func:`compile_similarity`) is apart from
matching: a number in [0, 1] saying how close an actual value is to a reference, by ROUGE-L
(:func:`rouge_l`) for text or by numeric closeness (:func:`closeness`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpointer

__all__ = [
    "OPERATORS",
    "JudgeRequired",
    "MatchContext",
    "Matcher",
    "Similarity",
    "SpecError",
    "closeness",
    "compile_matcher",
    "compile_similarity",
    "rouge_l",
    "text_tokens",
    "json_equal",
    "json_key",
    "literal",
    "lenient_text",
]


class SpecError(ValueError):
    """A matcher or milestone specification is invalid; ``where`` names the field (a dotted
    path such as ``milestones[1].call.arguments.user_id``)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


class JudgeRequired(RuntimeError):
    """A ``$judge`` matcher was reached but no judge is configured."""


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values by value: numbers compare by value (``1 == 1.0``), a
    boolean equals only a boolean (never ``0``/``1``), object keys are unordered, lists are
    ordered, ``None`` equals only ``None``."""
    kind = type(a)
    if (kind is str or kind is int) and type(b) is kind:  # the common case: two strings, two integers
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return a is None and b is None


class _Bool:
    """A boolean in a :func:`json_key` (so it never equals the number 0 or 1)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bool) and other.value == self.value

    def __hash__(self) -> int:
        return hash((_Bool, self.value))


_TRUE, _FALSE = _Bool(True), _Bool(False)


def json_key(value: Any) -> Any:
    """A hashable key of a JSON value such that ``json_key(a) == json_key(b)`` exactly when
    :func:`json_equal` holds: objects become frozensets of items, lists tuples, booleans a
    marker that never equals a number (numbers compare by value, as in Python: ``1 == 1.0``).

    Raises:
        TypeError: for a value that is not JSON (a set, an object).
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        for v in value.values():
            if type(v) not in _SCALARS:
                return frozenset([(k, v if type(v) in _SCALARS else json_key(v)) for k, v in value.items()])
        return frozenset(value.items())  # plain values only (the common case): their items are the key
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if kind is list or kind is tuple:
        return tuple([v if type(v) in _SCALARS else json_key(v) for v in value])
    if isinstance(value, dict):
        return frozenset((k, json_key(v)) for k, v in value.items())
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(f"not a JSON value: {type(value).__name__}")


_SCALARS = frozenset({str, int, float, type(None)})


_SPACE = re.compile(r"\s+")


def lenient_text(text: str) -> str:
    """``text`` normalised as ``$lenient`` compares it: Unicode NFKC, then case folding
    (``str.casefold``), then every run of whitespace made one space, trimmed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class MatchContext:
    """What a matcher may need beyond the actual value.

    Attributes:
        results: Milestone id → the result (a JSON value: the tool output parsed as JSON, else
            its text) of the step that matched it; read by ``$from``.
        judge: ``judge(criterion, value) -> bool`` deciding ``$judge``; ``None`` when no judge
            is configured (a ``$judge`` then raises :class:`JudgeRequired`).
        tool_results: Tool name → the results (JSON values) of its steps that ran without
            error and that the model had seen when it made the call being matched; read by
            ``{"$from": {"tool": name}}``.
    """

    results: Mapping[str, Any] = field(default_factory=dict)
    judge: Callable[[str, Any], bool] | None = None
    tool_results: Mapping[str, Sequence[Any]] = field(default_factory=dict)


EMPTY_CONTEXT = MatchContext()


class Matcher:
    """A compiled matcher. ``match(actual, context)`` → bool; ``expected()`` a JSON value
    describing what was expected (for explanations); ``refs`` the milestone ids that ``$from``
    inside it reads; ``reads_tools`` the tool names that ``{"$from": {"tool": ...}}`` inside it
    reads."""

    refs: frozenset[str] = frozenset()
    needs_judge: bool = False
    reads_tools: frozenset[str] = frozenset()

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:  # pragma: no cover
        raise NotImplementedError

    def expected(self) -> Any:  # pragma: no cover
        raise NotImplementedError


@dataclass(eq=False)
class Equal(Matcher):
    value: Any

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return json_equal(self.value, actual)

    def expected(self) -> Any:
        return self.value


@dataclass(eq=False)
class Literal(Equal):
    """``{"$literal": value}``: plain equality with a value never read as operators."""

    def expected(self) -> Any:
        # shown as written: plainly, unless the value holds what would read as an operator
        return {"$literal": self.value} if _has_operator_key(self.value) else self.value


def _has_operator_key(value: Any) -> bool:
    """Whether ``value`` holds an object with a key starting with ``$`` (at any depth)."""
    if isinstance(value, dict):
        return any(isinstance(k, str) and k.startswith("$") or _has_operator_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_operator_key(v) for v in value)
    return False


@dataclass(eq=False)
class ListOf(Matcher):
    """A plain list holding operators: same length, element by element."""

    items: tuple[Matcher, ...]

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return (
            isinstance(actual, list)
            and len(actual) == len(self.items)
            and all(m.match(a, context) for m, a in zip(self.items, actual, strict=True))
        )

    def expected(self) -> Any:
        return [m.expected() for m in self.items]


@dataclass(eq=False)
class ObjectOf(Matcher):
    """A plain object holding operators (``exact`` keys) or ``$subset`` (at least these keys)."""

    items: tuple[tuple[str, Matcher], ...]
    exact: bool = True

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        if not isinstance(actual, dict):
            return False
        if self.exact and len(actual) != len(self.items):
            return False
        return all(k in actual and m.match(actual[k], context) for k, m in self.items)

    def expected(self) -> Any:
        body = {k: m.expected() for k, m in self.items}
        return body if self.exact else {"$subset": body}


@dataclass(eq=False)
class Lenient(Matcher):
    text: str

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return isinstance(actual, str) and lenient_text(actual) == lenient_text(self.text)

    def expected(self) -> Any:
        return {"$lenient": self.text}


@dataclass(eq=False)
class Num(Matcher):
    target: float
    rel: float
    abs: float

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return _is_number(actual) and math.isclose(actual, self.target, rel_tol=self.rel, abs_tol=self.abs)

    def expected(self) -> Any:
        return {"$num": self.target, "rel": self.rel, "abs": self.abs}


REGEX_TIMEOUT_S = 1.0
"""Seconds one ``$regex`` match may take. A pattern with nested repetition, ``(a+)+b``,
backtracks for exponential time on a string that almost matches (24 s at 28 letters with
``re``); past the limit the match raises :class:`RegexTimeout`, so the grader's value is
unscored, naming the pattern, rather than a run that hangs."""


class RegexTimeout(TimeoutError):
    """A ``$regex`` match took longer than :data:`REGEX_TIMEOUT_S` (catastrophic backtracking)."""


@dataclass(eq=False)
class Regex(Matcher):
    pattern: re.Pattern[str]

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        """``re.fullmatch`` semantics, run by the ``regex`` package (the same syntax for these
        patterns) under :data:`REGEX_TIMEOUT_S`.

        Raises:
            RegexTimeout: when the match takes longer.
        """
        if not isinstance(actual, str):
            return False
        import regex  # the one engine of Python with a time limit per match

        compiled = _timed_patterns.get(self.pattern.pattern)
        if compiled is None:
            compiled = _timed_patterns[self.pattern.pattern] = regex.compile(self.pattern.pattern, self.pattern.flags & ~re.UNICODE)
        try:
            return compiled.fullmatch(actual, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            raise RegexTimeout(
                f"$regex {self.pattern.pattern!r} took more than {REGEX_TIMEOUT_S:g} s on a string of {len(actual):,} "
                "characters (catastrophic backtracking): rewrite the pattern without nested repetition"
            ) from None

    def expected(self) -> Any:
        return {"$regex": self.pattern.pattern}


@dataclass(eq=False)
class OneOf(Matcher):
    options: tuple[Matcher, ...]

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return any(m.match(actual, context) for m in self.options)

    def expected(self) -> Any:
        return {"$in": [m.expected() for m in self.options]}


@dataclass(eq=False)
class Anything(Matcher):
    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return True

    def expected(self) -> Any:
        return {"$any": True}


@dataclass(eq=False)
class Contains(Matcher):
    part: Any
    element: Matcher

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        if isinstance(actual, str):
            if isinstance(self.part, str):
                return self.part in actual
            if type(self.element) is Lenient:  # a lenient substring
                return lenient_text(self.element.text) in lenient_text(actual)
            return False
        if isinstance(actual, list):
            return any(self.element.match(a, context) for a in actual)
        return False

    def expected(self) -> Any:
        return {"$contains": self.part}


@dataclass(eq=False)
class Prefix(Matcher):
    prefix: str

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        return isinstance(actual, str) and actual.startswith(self.prefix)

    def expected(self) -> Any:
        return {"$prefix": self.prefix}


@dataclass(eq=False)
class Unordered(Matcher):
    items: tuple[Matcher, ...]

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        if not isinstance(actual, list) or len(actual) != len(self.items):
            return False
        fits = [[j for j, a in enumerate(actual) if m.match(a, context)] for m in self.items]
        return _perfect_matching(fits, len(actual))

    def expected(self) -> Any:
        return {"$unordered": [m.expected() for m in self.items]}


def _perfect_matching(fits: list[list[int]], n: int) -> bool:
    """Whether every row can take a distinct column it fits (augmenting paths, Kuhn's
    algorithm): a maximum bipartite matching, so no valid pairing is missed by a greedy
    first fit."""
    owner = [-1] * n

    def augment(row: int, seen: list[bool]) -> bool:
        for col in fits[row]:
            if not seen[col]:
                seen[col] = True
                if owner[col] < 0 or augment(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(augment(row, [False] * n) for row in range(len(fits)))


_MISSING = object()
NO_VALUE = _MISSING
"""What :meth:`From.resolve` gives when the milestone has no result or the pointer does not
resolve."""


@dataclass(eq=False)
class From(Matcher):
    """``$from``: the part at ``path`` of the result of the step that matched ``milestone``,
    or, with ``tool`` set (``milestone`` then ``""``), of any seen result of that tool."""

    milestone: str
    path: str
    tool: str | None = None

    @property
    def refs(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({self.milestone}) if self.tool is None else frozenset()

    @property
    def reads_tools(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({self.tool}) if self.tool is not None else frozenset()

    def resolve(self, context: MatchContext) -> Any:
        """The value this ``$from`` names, or a sentinel when the milestone has no result or
        the pointer does not resolve (for the tool form: the value in its first seen result
        where the pointer resolves)."""
        if self.tool is not None:
            for result in context.tool_results.get(self.tool, ()):
                value = jsonpointer.resolve_pointer(result, self.path, _MISSING)
                if value is not _MISSING:
                    return value
            return _MISSING
        if self.milestone not in context.results:
            return _MISSING
        return jsonpointer.resolve_pointer(context.results[self.milestone], self.path, _MISSING)

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        if self.tool is not None:  # any seen result of the tool may hold it
            return any(
                (value := jsonpointer.resolve_pointer(result, self.path, _MISSING)) is not _MISSING
                and json_equal(value, actual)
                for result in context.tool_results.get(self.tool, ())
            )
        value = self.resolve(context)
        return value is not _MISSING and json_equal(value, actual)

    def expected(self) -> Any:
        if self.tool is not None:
            return {"$from": {"tool": self.tool}, "path": self.path}
        return {"$from": self.milestone, "path": self.path}


@dataclass(eq=False)
class Judge(Matcher):
    criterion: str
    needs_judge = True

    def match(self, actual: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        if context.judge is None:
            raise JudgeRequired(
                f"a $judge matcher ({self.criterion!r}) needs a judge model; none is configured "
                "(give the grader a judge, e.g. trajectory_match with --judge-model)"
            )
        return bool(context.judge(self.criterion, actual))

    def expected(self) -> Any:
        return {"$judge": self.criterion}


def _string(spec: dict[str, Any], op: str, where: str) -> str:
    value = spec[op]
    if not isinstance(value, str):
        raise SpecError(where, f"{op} takes a string, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_keys(spec: dict[str, Any], op: str, allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(set(spec) - {op, *allowed})
    if extra:
        also = f" (it takes {', '.join(allowed)})" if allowed else ""
        raise SpecError(where, f"{op} does not take {', '.join(map(repr, extra))}{also}")


def _compile_num(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$num", ("rel", "abs"), where)
    target, rel, abs_ = spec["$num"], spec.get("rel", 1e-9), spec.get("abs", 0.0)
    for name, value in (("$num", target), ("rel", rel), ("abs", abs_)):
        if not _is_number(value) or not math.isfinite(value):
            raise SpecError(where, f"{name} takes a finite number, got {_short(value)}")
    if rel < 0 or abs_ < 0:
        raise SpecError(where, "rel and abs must not be negative")
    return Num(float(target), float(rel), float(abs_))


_timed_patterns: dict[str, Any] = {}


def _compile_regex(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$regex", (), where)
    pattern = _string(spec, "$regex", where)
    try:
        return Regex(re.compile(pattern))
    except re.error as exc:
        raise SpecError(where, f"$regex {pattern!r} is not a valid regular expression: {exc}") from None


def _compile_in(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$in", (), where)
    options = spec["$in"]
    if not isinstance(options, list) or not options:
        raise SpecError(where, f"$in takes a non-empty list, got {_short(options)}")
    return OneOf(tuple(compile_matcher(v, f"{where}.$in[{i}]") for i, v in enumerate(options)))


def _compile_any(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$any", (), where)
    if spec["$any"] is not True:
        raise SpecError(where, f"$any takes true, got {_short(spec['$any'])}")
    return Anything()


def _compile_contains(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$contains", (), where)
    part = spec["$contains"]
    return Contains(part, compile_matcher(part, f"{where}.$contains"))


def _compile_prefix(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$prefix", (), where)
    return Prefix(_string(spec, "$prefix", where))


def _compile_lenient(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$lenient", (), where)
    return Lenient(_string(spec, "$lenient", where))


def _compile_unordered(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$unordered", (), where)
    items = spec["$unordered"]
    if not isinstance(items, list):
        raise SpecError(where, f"$unordered takes a list, got {_short(items)}")
    return Unordered(tuple(compile_matcher(v, f"{where}.$unordered[{i}]") for i, v in enumerate(items)))


def _compile_subset(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$subset", (), where)
    body = spec["$subset"]
    if not isinstance(body, dict):
        raise SpecError(where, f"$subset takes an object, got {_short(body)}")
    return ObjectOf(tuple((k, compile_matcher(v, f"{where}.$subset.{k}")) for k, v in body.items()), exact=False)


def _compile_from(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$from", ("path",), where)
    source, tool = spec["$from"], None
    if isinstance(source, dict):
        if set(source) != {"tool"} or not isinstance(source["tool"], str) or not source["tool"]:
            raise SpecError(where, f'$from takes a milestone id or {{"tool": name}}, got {_short(source)}')
        milestone, tool = "", source["tool"]
    else:
        milestone = _string(spec, "$from", where)
    path = spec.get("path", "")
    if not isinstance(path, str):
        raise SpecError(where, f"path takes a JSON pointer string, got {_short(path)}")
    try:
        jsonpointer.JsonPointer(path)
    except jsonpointer.JsonPointerException as exc:
        raise SpecError(where, f"path {path!r} is not a JSON pointer (RFC 6901): {exc}") from None
    return From(milestone, path, tool)


def _compile_judge(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$judge", (), where)
    return Judge(_string(spec, "$judge", where))


def _compile_literal(spec: dict[str, Any], where: str) -> Matcher:
    _check_keys(spec, "$literal", (), where)
    return Literal(spec["$literal"])


OPERATORS: dict[str, Callable[[dict[str, Any], str], Matcher]] = {
    "$lenient": _compile_lenient,
    "$num": _compile_num,
    "$regex": _compile_regex,
    "$in": _compile_in,
    "$any": _compile_any,
    "$contains": _compile_contains,
    "$prefix": _compile_prefix,
    "$unordered": _compile_unordered,
    "$subset": _compile_subset,
    "$from": _compile_from,
    "$judge": _compile_judge,
    "$literal": _compile_literal,
}
"""Operator name → its compiler (``spec, where -> Matcher``)."""


def compile_matcher(spec: Any, where: str = "") -> Matcher:
    """Compile a matcher written as JSON (see the module docstring for the operators).

    Args:
        spec: A JSON value: a plain value (equality by value, operators allowed inside lists
            and objects) or an object with exactly one ``$`` key naming an operator.
        where: The field it came from, for error messages (``milestones[0].call.arguments.x``).

    Returns:
        Matcher: The compiled matcher (its ``refs`` are the milestones its ``$from`` read).

    Raises:
        SpecError: an unknown operator (with the known ones), an object mixing an operator with
            other keys, or an operator given the wrong kind of value; naming ``where``.
    """
    if isinstance(spec, dict):
        ops = [k for k in spec if isinstance(k, str) and k.startswith("$")]
        if not ops:
            items = tuple((k, compile_matcher(v, f"{where}.{k}")) for k, v in spec.items())
            if all(isinstance(m, Equal) and not isinstance(m, Literal) for _, m in items):
                return Equal(spec)
            return _with_refs(ObjectOf(items))
        op = ops[0]
        if op not in OPERATORS:
            raise SpecError(
                where,
                f"unknown operator {op!r} (known: {', '.join(OPERATORS)}; write a real object "
                'with a "$" key as {"$literal": value})',
            )
        if len(ops) > 1:
            raise SpecError(where, f"one operator per object, got {', '.join(ops)}")
        return _with_refs(OPERATORS[op](spec, where))
    if isinstance(spec, list):
        items_l = tuple(compile_matcher(v, f"{where}[{i}]") for i, v in enumerate(spec))
        if all(isinstance(m, Equal) and not isinstance(m, Literal) for m in items_l):
            return Equal(spec)
        return _with_refs(ListOf(items_l))
    if isinstance(spec, float) and not math.isfinite(spec):
        raise SpecError(where, f"{spec} is not a JSON number")
    return Equal(spec)


def literal(value: Any) -> Matcher:
    """The matcher of ``{"$literal": value}``: plain equality by value, without compiling
    ``value`` (a reference call's argument)."""
    return Literal(value)


def _children(m: Matcher) -> tuple[Matcher, ...]:
    if isinstance(m, (ListOf, OneOf, Unordered)):
        return m.items if not isinstance(m, OneOf) else m.options
    if isinstance(m, ObjectOf):
        return tuple(v for _, v in m.items)
    if isinstance(m, Contains):
        return (m.element,)
    return ()


def _with_refs(m: Matcher) -> Matcher:
    """Record on a compound matcher the ``$from`` ids and ``$judge`` use of its parts."""
    children = _children(m)
    if children and not isinstance(m, From):
        refs = frozenset().union(*(c.refs for c in children))
        judge = any(c.needs_judge for c in children)
        tools = frozenset().union(*(c.reads_tools for c in children))
        if refs:
            object.__setattr__(m, "refs", refs)
        if judge:
            object.__setattr__(m, "needs_judge", True)
        if tools:
            object.__setattr__(m, "reads_tools", tools)
    return m


# ---- partial credit ---------------------------------------------------------------------------

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+")


def text_tokens(text: str) -> list[str]:
    """The tokens ROUGE-L compares: ``text`` normalised with Unicode NFKC and case folding,
    then each run of letters and digits one token, except that each Chinese character, kana or
    kanji is a token of its own (those scripts do not separate words with spaces)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of a longest common subsequence of ``a`` and ``b`` (dynamic programme over
    one row, O(len(a) * len(b)) time)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        previous = 0  # row[j - 1] of the row before
        for j, y in enumerate(b, 1):
            here = row[j]
            row[j] = previous + 1 if x == y else max(row[j], row[j - 1])
            previous = here
    return row[-1]


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L between two texts: the F-measure of the longest common subsequence of their
    tokens (Lin 2004, "ROUGE: A Package for Automatic Evaluation of Summaries", section 3.1):
    with ``LCS`` its length, ``R = LCS / len(reference)``, ``P = LCS / len(candidate)`` and
    ``F = 2PR / (P + R)`` (``beta = 1``, as the ``rouge-score`` package reports ``fmeasure``).
    Tokens are :func:`text_tokens` (no stemming). 0.0 when either text has no token.

    Returns:
        float: In [0, 1]; 1.0 for the same tokens in the same order.
    """
    ref, cand = text_tokens(reference), text_tokens(candidate)
    if not ref or not cand:
        return 0.0
    lcs = _lcs_length(ref, cand)
    if lcs == 0:
        return 0.0
    recall, precision = lcs / len(ref), lcs / len(cand)
    return 2 * precision * recall / (precision + recall)


def closeness(actual: Any, target: float, scale: float) -> float:
    """Numeric closeness: ``max(0, 1 - |actual - target| / scale)``, 1.0 at the target and 0.0
    from ``scale`` away; 0.0 for a value that is not a number (a boolean is not one).

    Args:
        actual: The value given.
        target: The reference number.
        scale: The distance at which closeness reaches 0 (positive).
    """
    if not _is_number(actual) or not math.isfinite(actual):
        return 0.0
    return max(0.0, 1.0 - abs(actual - target) / scale)


@dataclass(frozen=True)
class Similarity:
    """A partial-credit measure of one value against a reference.

    Attributes:
        kind: ``rouge_l`` (:func:`rouge_l` of a text with ``reference``, a string) or ``num``
            (:func:`closeness` of a number to ``reference`` with ``scale``).
        reference: The reference text or number.
        scale: For ``num``: the distance at which closeness reaches 0.
    """

    kind: str
    reference: Any
    scale: float = 1.0

    def score(self, actual: Any) -> float:
        """The similarity of ``actual``, in [0, 1] (0.0 for a value of the wrong type)."""
        if self.kind == "rouge_l":
            return rouge_l(self.reference, actual) if isinstance(actual, str) else 0.0
        return closeness(actual, self.reference, self.scale)

    def expected(self) -> Any:
        if self.kind == "rouge_l":
            return {"rouge_l": self.reference}
        return {"num": self.reference, "scale": self.scale}


def _reference_of(matcher: Matcher | None) -> Any:
    """The plain value a matcher compares with, when it has one (for a measure written without
    its reference): a plain value, ``$literal``, ``$lenient``, ``$contains`` of a string, ``$num``."""
    if isinstance(matcher, Equal):
        return matcher.value
    if isinstance(matcher, Lenient):
        return matcher.text
    if isinstance(matcher, Contains) and isinstance(matcher.part, str):
        return matcher.part
    if isinstance(matcher, Num):
        return matcher.target
    return None


def compile_similarity(spec: Any, matcher: Matcher | None, where: str) -> Similarity:
    """Compile a partial-credit measure: ``"rouge_l"``, ``{"rouge_l": text}``, ``"num"``,
    ``{"num": x}``, ``{"num": x, "scale": s}`` (``x`` ``null``: the matcher's number). Without
    its reference, a measure takes the value ``matcher`` compares with (a plain value,
    ``$literal``, ``$lenient``, ``$contains`` of a string, ``$num``'s number); ``num``'s scale
    defaults to ``|x|`` (closeness is then one minus the relative error), 1 when ``x`` is 0.

    Raises:
        SpecError: naming ``where``: an unknown measure, a reference of the wrong type, a
            measure whose reference cannot be read from the matcher, a scale that is not
            positive.
    """
    if isinstance(spec, str):
        kind, given, scale = spec, None, None
    elif isinstance(spec, dict) and len(spec) >= 1 and next(iter(spec)) in ("rouge_l", "num"):
        kind = next(iter(spec))
        allowed = {"rouge_l"} if kind == "rouge_l" else {"num", "scale"}
        extra = sorted(set(spec) - allowed)
        if extra:
            raise SpecError(where, f"{kind} does not take {extra[0]!r}")
        given, scale = spec[kind], spec.get("scale")
    else:
        raise SpecError(where, f'expected a measure ("rouge_l", "num", {{"rouge_l": text}}, {{"num": x, "scale": s}}), '
                               f"got {_short(spec)}")
    if kind not in ("rouge_l", "num"):
        raise SpecError(where, f"unknown measure {kind!r} (known: rouge_l, num)")
    reference = given if given is not None else _reference_of(matcher)
    if kind == "rouge_l":
        if not isinstance(reference, str):
            raise SpecError(where, "rouge_l needs a reference text: write {\"rouge_l\": \"...\"}"
                            if given is None else f"rouge_l takes a string, got {_short(given)}")
        return Similarity("rouge_l", reference)
    if not _is_number(reference) or not math.isfinite(reference):
        raise SpecError(where, "num needs a reference number: write {\"num\": x}"
                        if given is None else f"num takes a finite number, got {_short(given)}")
    if scale is None:
        scale = abs(reference) or 1.0
    if not _is_number(scale) or not math.isfinite(scale) or scale <= 0:
        raise SpecError(where, f"scale takes a positive number, got {_short(scale)}")
    return Similarity("num", float(reference), float(scale))

"""The milestone format of an example, compiled into typed objects when the example is read.

An example may carry (beside ``expected_calls``, which keeps its meaning)::

    "milestones": [
      {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
      {"id": "email", "after": ["find"], "call": {"name": "get_user_email",
                      "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}},
      {"id": "foods", "after": ["find"], "optional": true, "call": {"name": "get_user_favorite_foods"}},
      {"id": "city", "after": ["email"], "any_of": [{"call": {"name": "get_city_for_location"}},
                                                   {"call": {"name": "get_current_weather_for_location"}}]},
      {"id": "typed", "after": ["city"], "state": {"paper": "ab"}}
    ],
    "minefields": [{"call": {"name": "delete_user"}}, {"state": {"paper": {"$contains": "zz"}}}],
    "read_only": ["find_*", "get_*", "list_*"],
    "extra_calls": "allow_read_only"

* A milestone is a ``call`` (a tool name, and ``arguments`` matched key by key with
  :mod:`toolgym.matchers`), a ``state`` (keys of the environment's state, each matched), or
  ``any_of`` a list of those. Without ``arguments`` a call matches any arguments; with them the
  model's call must give exactly those keys, unless the call sets ``"args"``: ``"superset"``
  (the call may give more keys), ``"subset"`` (it may leave some out) or ``"ignore"``.
* ``after`` names the milestones that must be matched earlier (a partial order); a milestone
  whose ``after`` milestones are not all matched earlier is not matched. ``optional``
  milestones never count against a trajectory.
* A ``state`` milestone that no other milestone comes after must hold in the final state (a
  state met on the way and undone by the end is not met), unless it sets ``"transient": true``.
* A milestone may also be ``message`` (a matcher over what the agent says: the text of each
  model step and the final answer), ``answer`` (a matcher over the final answer only) or
  ``result`` (``{"name": tool, "value": matcher}``: some tool step that ran without error
  returned a matching result, BFCL's response check). Like a state, these are observed after
  a step (a text said after ``k`` tool steps, the result of tool step ``k``) and use no step.
* ``minefields``: a call or state that fails the trajectory whatever else it did.
* ``read_only`` (``fnmatch`` globs of tool names) and ``extra_calls`` (``forbid``, the default,
  ``allow_read_only`` or ``allow``) decide whether a call matched to no milestone is an error.
  A call that was never executed (malformed, or rejected by the environment) changed nothing and
  counts as read-only.

:func:`compile_plan` refuses a bad spec with a :class:`~toolgym.matchers.SpecError` naming the
field: an unknown key or operator, an ``after`` naming no milestone, a cycle, a ``$from``
pointing at a milestone that is not always matched earlier (not an ancestor through
``after``) or that is not a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property
from typing import Any, Literal

from toolgym.matchers import (
    EMPTY_CONTEXT,
    Equal,
    MatchContext,
    Matcher,
    Similarity,
    SpecError,
    compile_matcher,
    compile_similarity,
    json_key,
)
from toolgym.matchers import Literal as LiteralValue

__all__ = [
    "ARGS_MODES",
    "EXTRA_CALLS",
    "CallPattern",
    "MessagePattern",
    "Milestone",
    "Plan",
    "ResultPattern",
    "StatePattern",
    "calls_plan",
    "compile_plan",
]

ArgsMode = Literal["exact", "subset", "superset", "ignore"]
ARGS_MODES: tuple[str, ...] = ("exact", "subset", "superset", "ignore")
ExtraCalls = Literal["forbid", "allow_read_only", "allow"]
EXTRA_CALLS: tuple[str, ...] = ("forbid", "allow_read_only", "allow")


_UNSET: Any = object()


def call_key(arguments: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable key of a call's arguments (a JSON object): equal exactly when the arguments
    are equal by value (:func:`~toolgym.matchers.json_equal`). Its items sorted by name, each
    value as :func:`~toolgym.matchers.json_key` keys it: a tuple, which the garbage collector
    stops tracking once it holds plain values only.

    Raises:
        TypeError: for a value that is not JSON.
    """
    for v in arguments.values():
        if type(v) not in _SCALARS:
            break
    else:  # plain values only (the common case); names are unique, so values are never compared
        return tuple(sorted(arguments.items()))
    return tuple(sorted([(k, v if type(v) in _SCALARS else json_key(v)) for k, v in arguments.items()], key=_first))


def _first(item: tuple[str, Any]) -> str:
    return item[0]


_SCALARS = frozenset({str, int, float, type(None)})


@dataclass(eq=False, slots=True)
class CallPattern:
    """A tool call to match: ``name``, and ``arguments`` (``None``: any) compared by ``args``.

    Attributes:
        name: The tool name (compared exactly).
        arguments: Argument name → compiled matcher, or ``None`` for any arguments.
        args: ``exact`` (the call gives exactly these keys, each matching), ``superset`` (at
            least these keys), ``subset`` (only keys among these, each given one matching) or
            ``ignore``.
    """

    name: str
    arguments: tuple[tuple[str, Matcher], ...] | None = None
    args: ArgsMode = "exact"
    refs: frozenset[str] = frozenset()

    kind: Literal["call"] = "call"
    _keys: frozenset[str] | None = field(default=None, init=False, repr=False)
    _exact_key: Any = field(default=None, init=False, repr=False)
    _plain: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._exact_key = _UNSET
        self._plain = _UNSET

    def wrong_argument(
        self, arguments: Mapping[str, Any], context: MatchContext = EMPTY_CONTEXT
    ) -> str | None:
        """The first argument that makes ``arguments`` fail this pattern, ``""`` when the
        failure is no single argument, or ``None`` when they match.

        A key the pattern expects but the call lacks, or (``exact``/``subset``) a key the call
        gives but the pattern does not name, is that failing argument.
        """
        args = self.args
        if self.arguments is None or args == "ignore":
            return None
        plain = self._plain
        if plain is _UNSET:
            plain = self._plain = self._plain_values()
        if plain is not None:
            return _plain_wrong_argument(plain, args, arguments)
        if args != "superset":  # exact and subset: no key beyond the pattern's
            expected = self.keys
            for key in arguments:
                if key not in expected:
                    return str(key)
        for key, matcher in self.arguments:
            if key not in arguments:
                if args == "subset":
                    continue
                return key
            if not matcher.match(arguments[key], context):
                return key
        return None

    def _plain_values(self) -> dict[str, Any] | None:
        """The expected arguments as a dict when every matcher is plain equality with a
        string, an integer (never a boolean) or null, which :func:`_plain_wrong_argument`
        compares without the matchers; else ``None``."""
        values = {}
        for k, m in self.arguments or ():
            if type(m) is not Equal and type(m) is not LiteralValue:
                return None
            v = m.value  # type: ignore[attr-defined]
            if not (v is None or type(v) is str or type(v) is int):
                return None
            values[k] = v
        return values

    @property
    def keys(self) -> frozenset[str]:
        """The argument names the pattern names (empty for any arguments)."""
        # kept in an attribute set on first use, not a cached_property: that would give every
        # pattern a __dict__, and a plan lives as long as its example (fewer objects to collect)
        found = self._keys
        if found is None:
            found = self._keys = frozenset(k for k, _ in self.arguments or ())
        return found

    @property
    def exact_key(self) -> Any:
        """For ``exact`` arguments that are all plain values: :func:`call_key` of them (a call
        fits exactly when its arguments have this key); else ``None``."""
        found = self._exact_key
        if found is _UNSET:
            found = self._exact_key = self._compute_exact_key()
        return found

    def _compute_exact_key(self) -> Any:
        if self.args != "exact" or self.arguments is None:
            return None
        values = {}
        for k, m in self.arguments:
            if type(m) is not Equal and type(m) is not LiteralValue:
                return None
            values[k] = m.value  # type: ignore[attr-defined]
        return call_key(values)

    def expected(self) -> dict[str, Any]:
        """The pattern as JSON (for explanations)."""
        out: dict[str, Any] = {"name": self.name}
        if self.arguments is not None:
            out["arguments"] = {k: m.expected() for k, m in self.arguments}
        if self.args != "exact":
            out["args"] = self.args
        return out


def _plain_wrong_argument(expected: dict[str, Any], args: str, arguments: Mapping[str, Any]) -> str | None:
    """:meth:`CallPattern.wrong_argument` for expected values that are all strings, integers
    or null, in the same order of checks, by JSON equality (an integer equals the float of the
    same value; a boolean is never a number)."""
    if args != "superset":
        for key in arguments:
            if key not in expected:
                return str(key)
    for key, want in expected.items():
        if key not in arguments:
            if args == "subset":
                continue
            return key
        got = arguments[key]
        if want is None:
            if got is not None:
                return key
        elif type(want) is str:
            if type(got) is not str or got != want:
                return key
        elif not ((type(got) is int or type(got) is float) and got == want):
            return key
    return None


@dataclass(eq=False, slots=True)
class StatePattern:
    """A state to match: each named key of the environment's state matches its matcher (keys
    not named are not compared)."""

    items: tuple[tuple[str, Matcher], ...]
    refs: frozenset[str] = frozenset()

    kind: Literal["state"] = "state"

    def wrong_key(self, state: Mapping[str, Any], context: MatchContext = EMPTY_CONTEXT) -> str | None:
        """The first key of the pattern the state does not match, else ``None``."""
        for key, matcher in self.items:
            if key not in state or not matcher.match(state[key], context):
                return key
        return None

    def expected(self) -> dict[str, Any]:
        return {"state": {k: m.expected() for k, m in self.items}}


@dataclass(eq=False, slots=True)
class MessagePattern:
    """What the agent says: ``matcher`` against each text the agent said at one point (the text
    of a model step, the final answer), or only the final answer when ``final``."""

    matcher: Matcher
    final: bool = False
    refs: frozenset[str] = frozenset()

    kind: Literal["message"] = "message"

    def match(self, texts: Sequence[str], context: MatchContext = EMPTY_CONTEXT) -> bool:
        """Whether one of ``texts`` matches."""
        return any(self.matcher.match(t, context) for t in texts)

    def expected(self) -> dict[str, Any]:
        return {"answer" if self.final else "message": self.matcher.expected()}


@dataclass(eq=False, slots=True)
class ResultPattern:
    """What a tool step returned (its output parsed as JSON, else its text), for a step that
    ran without error: of tool ``name`` (``None``: any tool), matching ``value`` (``None``: any
    result)."""

    name: str | None = None
    value: Matcher | None = None
    refs: frozenset[str] = frozenset()

    kind: Literal["result"] = "result"

    def match(self, name: str, result: Any, context: MatchContext = EMPTY_CONTEXT) -> bool:
        """Whether the result ``result`` of a step of tool ``name`` matches."""
        return (self.name is None or name == self.name) and (self.value is None or self.value.match(result, context))

    def expected(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.name is not None:
            body["name"] = self.name
        if self.value is not None:
            body["value"] = self.value.expected()
        return {"result": body}


Pattern = CallPattern | StatePattern | MessagePattern | ResultPattern
OBSERVED_KINDS = ("state", "message", "answer", "result")
"""The milestone kinds matched by what is observed after a step (a state, a text, a result),
not by a step."""


@dataclass(eq=False, slots=True)
class Milestone:
    """One milestone: its alternatives (one for ``call`` or ``state``, several for ``any_of``),
    the milestones that must come earlier, and whether it is optional."""

    id: str
    index: int
    alternatives: tuple[Pattern, ...]
    after: tuple[str, ...] = ()
    optional: bool = False
    refs: frozenset[str] = frozenset()
    transient: bool = False
    """For a milestone with a state alternative: whether a state met on the way counts even
    when it no longer holds at the end. A state milestone that no other milestone comes after
    must hold in the final state unless it is transient."""
    turn: int | None = None
    """The user turn the milestone belongs to (``"turn": k``): it is matched only by a step made
    in that turn, or by what was observed while that turn lasted; errors about it name it."""
    similarity: tuple[tuple[str, Similarity], ...] = ()
    """Partial credit when unmatched (``milestone_similarity``): argument name or state key →
    its measure; for a message or answer, one measure keyed ``""`` (the text)."""

    calls: tuple[CallPattern, ...] = field(init=False, repr=False)
    """The call alternatives."""
    states: tuple[StatePattern, ...] = field(init=False, repr=False)
    """The state alternatives."""
    observed: tuple[Pattern, ...] = field(init=False, repr=False)
    """The alternatives matched by what is observed after a step: states, messages, results."""

    def __post_init__(self) -> None:
        if len(self.alternatives) == 1:
            only = self.alternatives
            kind = only[0].kind
            if kind == "call":  # the common case (every milestone of a plan of reference calls)
                self.calls, self.states, self.observed = only, (), ()  # type: ignore[assignment]
            else:
                self.calls, self.states, self.observed = (), only if kind == "state" else (), only  # type: ignore[assignment]
        else:
            self.calls = tuple(a for a in self.alternatives if isinstance(a, CallPattern))
            self.states = tuple(a for a in self.alternatives if isinstance(a, StatePattern))
            self.observed = tuple(a for a in self.alternatives if not isinstance(a, CallPattern))


@dataclass(eq=False)
class Plan:
    """An example's compiled milestones, minefields and extra-call policy.

    Attributes:
        milestones: In the order written.
        minefields: Calls and states that fail a trajectory.
        read_only: ``fnmatch`` patterns of the read-only tool names.
        extra_calls: ``forbid``, ``allow_read_only`` or ``allow``.
        ancestors: Milestone id → every milestone that is always matched before it (what
            ``$from`` is checked against; a plan built without ``$from`` may leave it empty).
        source: A note on where the plan comes from (``"milestones"``, or an agentevals mode
            built from ``expected_calls``).
        unordered_within_turn: The calls of one model turn may match the chain's next calls in
            any order (agentevals' strict mode).
    """

    milestones: tuple[Milestone, ...]
    minefields: tuple[Pattern, ...] = ()
    read_only: tuple[str, ...] = ()
    extra_calls: ExtraCalls = "forbid"
    ancestors: Mapping[str, frozenset[str]] = field(default_factory=dict)
    source: str = "milestones"
    unordered_within_turn: bool = False
    """For a chain of reference calls (agentevals' strict mode): the calls one model turn
    made may match the next calls of the chain in any order, as agentevals pairs the calls
    inside one assistant message."""

    @cached_property
    def call_index(self) -> tuple[dict[Any, list[tuple[int, tuple[CallPattern, ...]]]], dict[str, list[tuple[int, tuple[CallPattern, ...]]]]]:
        """Where a step's candidate milestones are found: ``(exact, by_name)``. ``exact`` maps
        ``(tool name, call_key(arguments))`` to the milestones (index, alternatives) whose
        exact plain-valued call it is; ``by_name`` maps a tool name to the milestones with any
        other call of that name, whose arguments must be matched."""
        exact: dict[Any, list[tuple[int, tuple[CallPattern, ...]]]] = {}
        by_name: dict[str, list[tuple[int, tuple[CallPattern, ...]]]] = {}
        for j, m in enumerate(self.milestones):
            for c in m.calls:
                entry = (j, m.calls if len(m.calls) == 1 else (c,))
                key = c.exact_key
                if key is not None:
                    exact.setdefault((c.name, key), []).append(entry)
                else:
                    by_name.setdefault(c.name, []).append(entry)
        return exact, by_name

    @cached_property
    def names(self) -> dict[str, tuple[int, ...]]:
        """Tool name → the milestones with a call of that name."""
        out: dict[str, list[int]] = {}
        for j, m in enumerate(self.milestones):
            for c in m.calls:
                row = out.setdefault(c.name, [])
                if not row or row[-1] != j:
                    row.append(j)
        return {name: tuple(row) for name, row in out.items()}  # type: ignore[misc]

    @cached_property
    def needs_judge(self) -> bool:
        """Whether a milestone uses ``$judge`` (an LLM judge must decide it)."""
        return any(
            m.needs_judge
            for milestone in self.milestones
            for pattern in milestone.alternatives
            for m in pattern_matchers(pattern)
        )

    @cached_property
    def has_refs(self) -> bool:
        """Whether a milestone reads another's result with ``$from``."""
        return any(m.refs for m in self.milestones)

    @cached_property
    def final_only(self) -> frozenset[str]:
        """The milestones whose state alternatives only the final state can match: those with
        a state alternative that no other milestone comes after and that are not
        ``transient`` (a state reached and undone by the end was not reached)."""
        later = {a for m in self.milestones for a in m.after}
        return frozenset(m.id for m in self.milestones if m.states and not m.transient and m.id not in later)

    @cached_property
    def has_turns(self) -> bool:
        """Whether a milestone names its user turn (``"turn": k``): matched only in that turn."""
        return any(m.turn is not None for m in self.milestones)

    @cached_property
    def reads_states(self) -> bool:
        """Whether a milestone or a minefield is a state (the alignment must be given the
        states after the steps)."""
        return any(m.states for m in self.milestones) or any(isinstance(p, StatePattern) for p in self.minefields)

    @cached_property
    def has_similarity(self) -> bool:
        """Whether a milestone declares partial credit (``similarity``)."""
        return any(m.similarity for m in self.milestones)

    @cached_property
    def observes(self) -> bool:
        """Whether a milestone is a ``message``, ``answer`` or ``result`` (the alignment must be
        given what the agent said and what the tools returned)."""
        return any(p.kind in ("message", "result") for m in self.milestones for p in m.observed)

    @cached_property
    def reads_tools(self) -> bool:
        """Whether a call milestone reads ``{"$from": {"tool": ...}}`` (the alignment must be
        given the results each call could have seen)."""
        return any(m.reads_tools for milestone in self.milestones for c in milestone.calls for _, m in c.arguments or ())

    def is_read_only(self, name: str) -> bool:
        """Whether tool ``name`` matches a ``read_only`` pattern."""
        return any(fnmatchcase(name, pattern) for pattern in self.read_only)

    def tool_names(self) -> set[str]:
        """Every tool name the milestones and minefields call."""
        names = {c.name for m in self.milestones for c in m.calls}
        return names | {p.name for p in self.minefields if isinstance(p, CallPattern)}


def pattern_matchers(pattern: Pattern) -> tuple[Matcher, ...]:
    """The compiled matchers of a pattern (arguments, state keys, a message, a result)."""
    if isinstance(pattern, CallPattern):
        return tuple(m for _, m in pattern.arguments or ())
    if isinstance(pattern, StatePattern):
        return tuple(m for _, m in pattern.items)
    if isinstance(pattern, MessagePattern):
        return (pattern.matcher,)
    return (pattern.value,) if pattern.value is not None else ()


_MILESTONE_KEYS = {"id", "after", "optional", "transient", "call", "state", "any_of", "turn", "message", "answer",
                   "result", "similarity"}
_RESULT_KEYS = {"name", "value"}
_CALL_KEYS = {"name", "arguments", "args"}


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _pattern(spec: Any, where: str, *, allow_any_of: bool = False) -> tuple[Pattern, ...]:
    """The alternatives written in ``spec`` (an object with ``call``, ``state`` or, when
    allowed, ``any_of``)."""
    if not isinstance(spec, dict):
        raise SpecError(where, f"expected an object with 'call' or 'state', got {_type_name(spec)}")
    kinds = [k for k in ("call", "state", "message", "answer", "result", "any_of") if k in spec]
    if not allow_any_of and "any_of" in spec:
        raise SpecError(f"{where}.any_of", "any_of is not allowed here (only 'call' or 'state')")
    if len(kinds) != 1:
        wanted = ("'call', 'state', 'message', 'answer', 'result' or 'any_of'" if allow_any_of
                  else "'call', 'state', 'message', 'answer' or 'result'")
        got = f"got {', '.join(kinds)}" if kinds else "got neither"
        raise SpecError(where, f"expected exactly one of {wanted}, {got}")
    kind = kinds[0]
    if kind == "call":
        return (_call(spec["call"], f"{where}.call"),)
    if kind == "state":
        return (_state(spec["state"], f"{where}.state"),)
    if kind in ("message", "answer"):
        matcher = compile_matcher(spec[kind], f"{where}.{kind}")
        return (MessagePattern(matcher, kind == "answer", matcher.refs),)
    if kind == "result":
        return (_result(spec["result"], f"{where}.result"),)
    options = spec["any_of"]
    if not isinstance(options, list) or not options:
        got = "an empty list" if options == [] else _type_name(options)
        raise SpecError(f"{where}.any_of", f"expected a non-empty list, got {got}")
    out: list[Pattern] = []
    for i, option in enumerate(options):
        here = f"{where}.any_of[{i}]"
        if isinstance(option, dict):
            extra = sorted(set(option) - {"call", "state", "message", "answer", "result"})
            if extra:
                raise SpecError(
                    here, f"unknown field {extra[0]!r} (an alternative has 'call', 'state', 'message', 'answer' or 'result')")
        out.extend(_pattern(option, here))
    return tuple(out)


def _call(spec: Any, where: str) -> CallPattern:
    if not isinstance(spec, dict):
        raise SpecError(where, f"expected an object with 'name', got {_type_name(spec)}")
    extra = sorted(set(spec) - _CALL_KEYS)
    if extra:
        raise SpecError(f"{where}.{extra[0]}", f"unknown field (a call has {', '.join(sorted(_CALL_KEYS))})")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}.name", f"expected a tool name (a non-empty string), got {_type_name(name)}")
    args = spec.get("args", "exact")
    if args not in ARGS_MODES:
        raise SpecError(f"{where}.args", f"unknown mode {args!r} (known: {', '.join(ARGS_MODES)})")
    arguments = spec.get("arguments")
    if arguments is None:
        return CallPattern(name=name, args=args)
    if not isinstance(arguments, dict):
        raise SpecError(f"{where}.arguments", f"expected an object, got {_type_name(arguments)}")
    items = tuple((k, compile_matcher(v, f"{where}.arguments.{k}")) for k, v in arguments.items())
    refs = frozenset().union(*(m.refs for _, m in items)) if items else frozenset()
    return CallPattern(name=name, arguments=items, args=args, refs=refs)


def _result(spec: Any, where: str) -> ResultPattern:
    if not isinstance(spec, dict):  # {} is any result of any tool
        raise SpecError(where, f"expected an object with 'name' and/or 'value', got {_type_name(spec)}")
    extra = sorted(set(spec) - _RESULT_KEYS)
    if extra:
        raise SpecError(f"{where}.{extra[0]}", "unknown field (a result has name, value)")
    name = spec.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise SpecError(f"{where}.name", f"expected a tool name (a non-empty string), got {_type_name(name)}")
    value = compile_matcher(spec["value"], f"{where}.value") if "value" in spec else None
    return ResultPattern(name, value, value.refs if value is not None else frozenset())


def _state(spec: Any, where: str) -> StatePattern:
    if not isinstance(spec, dict) or not spec:
        raise SpecError(where, f"expected a non-empty object of state keys, got {_type_name(spec)}")
    items = tuple((k, compile_matcher(v, f"{where}.{k}")) for k, v in spec.items())
    return StatePattern(items=items, refs=frozenset().union(*(m.refs for _, m in items)))


def _milestone(spec: Any, index: int) -> Milestone:
    where = f"milestones[{index}]"
    if not isinstance(spec, dict):
        raise SpecError(where, f"expected an object, got {_type_name(spec)}")
    extra = sorted(set(spec) - _MILESTONE_KEYS)
    if extra:
        raise SpecError(
            f"{where}.{extra[0]}", f"unknown field (a milestone has {', '.join(sorted(_MILESTONE_KEYS))})"
        )
    mid = spec.get("id")
    if not isinstance(mid, str) or not mid:
        raise SpecError(f"{where}.id", f"expected a non-empty string, got {_type_name(mid)}")
    after = spec.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        raise SpecError(f"{where}.after", "expected a list of milestone ids")
    optional = spec.get("optional", False)
    if not isinstance(optional, bool):
        raise SpecError(f"{where}.optional", f"expected true or false, got {_type_name(optional)}")
    turn = spec.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 1):
        raise SpecError(f"{where}.turn", f"expected a user turn number (1 or more), got {turn!r}")
    alternatives = _pattern(spec, where, allow_any_of=True)
    refs = frozenset().union(*(a.refs for a in alternatives))
    similarity = _similarity(spec["similarity"], alternatives, f"{where}.similarity") if "similarity" in spec else ()
    transient = spec.get("transient", False)
    if not isinstance(transient, bool):
        raise SpecError(f"{where}.transient", f"expected true or false, got {_type_name(transient)}")
    if transient and not any(a.kind == "state" for a in alternatives):
        raise SpecError(f"{where}.transient", "only a state milestone (or an any_of with a state) can be transient")
    return Milestone(mid, index, alternatives, tuple(dict.fromkeys(after)), optional, refs, transient=transient, turn=turn,
                     similarity=similarity)


def _similarity(spec: Any, alternatives: tuple[Pattern, ...], where: str) -> tuple[tuple[str, Similarity], ...]:
    """A milestone's ``similarity``: for a message or answer milestone, one measure of the text;
    else an object of argument names (of its calls) and state keys (of its states), each a
    measure (:func:`~toolgym.matchers.compile_similarity`)."""
    messages = [p for p in alternatives if isinstance(p, MessagePattern)]
    if messages:
        if len(messages) != len(alternatives):
            raise SpecError(where, "similarity of a message is given on a milestone that is only messages or answers")
        return (("", compile_similarity(spec, messages[0].matcher, where)),)
    if any(isinstance(p, ResultPattern) for p in alternatives):
        raise SpecError(where, "similarity applies to call, state, message and answer milestones, not to a result")
    if not isinstance(spec, dict) or not spec:
        raise SpecError(where, f"expected an object of argument names or state keys, each a measure, got {_type_name(spec)}")
    out = []
    for key, measure in spec.items():
        matcher = None
        for p in alternatives:
            items = p.arguments or () if isinstance(p, CallPattern) else p.items  # type: ignore[union-attr]
            matcher = next((m for k, m in items if k == key), None)
            if matcher is not None:
                break
        if matcher is None:
            raise SpecError(f"{where}.{key}", "names no argument of the milestone's calls and no key of its states")
        out.append((key, compile_similarity(measure, matcher, f"{where}.{key}")))
    return tuple(out)


def _ancestors(milestones: list[Milestone]) -> dict[str, frozenset[str]]:
    """Every milestone's ancestors through ``after``; refuses an unknown id and a cycle."""
    by_id = {m.id: m for m in milestones}
    for m in milestones:
        for a in m.after:
            if a not in by_id:
                known = ", ".join(by_id)
                raise SpecError(f"milestones[{m.index}].after", f"{a!r} names no milestone (ids: {known})")
            if a == m.id:
                raise SpecError(f"milestones[{m.index}].after", f"milestone {a!r} cannot come after itself")
    out: dict[str, frozenset[str]] = {}
    visiting: list[str] = []

    def visit(mid: str) -> frozenset[str]:
        if mid in out:
            return out[mid]
        if mid in visiting:
            cycle = visiting[visiting.index(mid):] + [mid]
            first = by_id[cycle[0]]
            raise SpecError(
                f"milestones[{first.index}].after",
                f"the after order has a cycle: {' -> '.join(reversed(cycle))}",
            )
        visiting.append(mid)
        found: set[str] = set()
        for a in by_id[mid].after:
            found.add(a)
            found |= visit(a)
        visiting.pop()
        out[mid] = frozenset(found)
        return out[mid]

    for m in milestones:
        visit(m.id)
    return out


def compile_plan(
    milestones: Any,
    minefields: Any = None,
    read_only: Any = None,
    extra_calls: Any = None,
) -> Plan:
    """Compile an example's ``milestones``, ``minefields``, ``read_only`` and ``extra_calls``.

    Args:
        milestones: The JSON list of milestones (see the module docstring).
        minefields: A JSON list of ``{"call": ...}`` / ``{"state": ...}``, or ``None``.
        read_only: A list of tool-name glob patterns, or ``None``.
        extra_calls: ``"forbid"`` (the default), ``"allow_read_only"`` or ``"allow"``.

    Returns:
        Plan: The typed plan.

    Raises:
        SpecError: naming the field (``milestones[2].after``, ``minefields[0].call.name``,
            ...) and the problem.
    """
    if not isinstance(milestones, list):
        raise SpecError("milestones", f"expected a list, got {_type_name(milestones)}")
    parsed = [_milestone(spec, i) for i, spec in enumerate(milestones)]
    seen: dict[str, int] = {}
    for m in parsed:
        if m.id in seen:
            raise SpecError(f"milestones[{m.index}].id", f"{m.id!r} is already the id of milestones[{seen[m.id]}]")
        seen[m.id] = m.index
    ancestors = _ancestors(parsed)
    by_id = {m.id: m for m in parsed}
    for m in parsed:
        for ref in sorted(m.refs):
            where = f"milestones[{m.index}]"
            if ref not in by_id:
                raise SpecError(where, f"$from {ref!r} names no milestone")
            if ref not in ancestors[m.id]:
                raise SpecError(
                    where,
                    f"$from {ref!r}: milestone {ref!r} is not always matched before {m.id!r} "
                    f"(add it to {m.id!r}'s after, directly or through another milestone)",
                )
            if by_id[ref].states:
                raise SpecError(where, f"$from {ref!r}: a state milestone has no result to read")
            if by_id[ref].observed:
                raise SpecError(where, f"$from {ref!r}: a {by_id[ref].observed[0].kind} milestone matches no step, "
                                "so it has no result to read (read a tool's results with {\"$from\": {\"tool\": name}})")
    for m in parsed:
        if any(matcher.reads_tools for p in m.observed for matcher in pattern_matchers(p)):
            raise SpecError(f"milestones[{m.index}]", '{"$from": {"tool": ...}} is read by call arguments only '
                            "(a state, a message or a result has no call that saw the results)")
    mines: list[Pattern] = []
    if minefields is not None:
        if not isinstance(minefields, list):
            raise SpecError("minefields", f"expected a list, got {_type_name(minefields)}")
        for i, spec in enumerate(minefields):
            here = f"minefields[{i}]"
            if isinstance(spec, dict):
                extra = sorted(set(spec) - {"call", "state"})
                if extra:
                    raise SpecError(f"{here}.{extra[0]}", "unknown field (a minefield has 'call' or 'state')")
            found = _pattern(spec, here)
            if any(p.refs or any(matcher.reads_tools for matcher in pattern_matchers(p)) for p in found):
                raise SpecError(here, "$from is not allowed in a minefield (it has no earlier milestone)")
            mines.extend(found)
    if read_only is None:
        read_only = []
    if not isinstance(read_only, list) or not all(isinstance(p, str) for p in read_only):
        raise SpecError("read_only", "expected a list of tool-name patterns (strings)")
    if extra_calls is None:
        extra_calls = "forbid"
    if extra_calls not in EXTRA_CALLS:
        raise SpecError("extra_calls", f"unknown policy {extra_calls!r} (known: {', '.join(EXTRA_CALLS)})")
    return Plan(tuple(parsed), tuple(mines), tuple(read_only), extra_calls, ancestors)


def calls_plan(
    calls: Any,
    *,
    chain: bool,
    optional: bool = False,
    extra_calls: ExtraCalls = "forbid",
    args_mode: ArgsMode = "exact",
    source: str = "expected calls",
) -> Plan:
    """A plan of plain reference calls: one milestone ``call1``, ``call2``, ... per call,
    whose arguments are matched by plain equality (``{"$literal": value}``, never read as
    operators) in ``args_mode``. Built directly, without the JSON compiler, with its lookup
    tables filled in, since a plan built from ``expected_calls`` is built once per example.

    Args:
        calls: The reference calls, each with ``name`` (str) and ``arguments`` (a JSON object)
            attributes (:class:`toolgym.records.ToolCallSpec`).
        chain: Each milestone after the one before it (a chain in the order given); else none
            has an ``after``.
        optional: Every milestone optional.
        extra_calls: The plan's policy for calls matched to no milestone.
        args_mode: ``exact``, ``subset``, ``superset`` or ``ignore`` (see :class:`CallPattern`).
        source: The plan's note on where it comes from.

    Returns:
        Plan: Without minefields, ``read_only`` patterns or ancestors (no ``$from``).

    Raises:
        TypeError: for an argument value that is not JSON.
    """
    milestones: list[Milestone] = []
    exact: dict[Any, list[tuple[int, tuple[CallPattern, ...]]]] = {}
    by_name: dict[str, list[tuple[int, tuple[CallPattern, ...]]]] = {}
    names: dict[str, list[int]] = {}
    previous: tuple[str, ...] = ()
    is_exact = args_mode == "exact"
    literals = _LITERALS
    for i, call in enumerate(calls):
        name, arguments = call.name, call.arguments
        items = []
        plain = True  # every value a string, integer, float or null (call_key keeps them as they are)
        simple = True  # every value a string, integer or null (what _plain_values keeps)
        for k, v in arguments.items():
            kind = type(v)
            if kind is str or kind is int or kind is bool or v is None:
                item = literals.get((k, kind, v))
                if item is None:
                    item = _literal_item(k, v)
                items.append(item)
                if kind is bool:
                    plain = simple = False
            else:
                items.append((k, LiteralValue(v)))
                plain = plain and kind is float
                simple = False
        pattern = CallPattern(name, tuple(items), args_mode)
        if simple:  # what _plain_values would compute
            pattern._plain = dict(arguments)
        alternatives = (pattern,)
        entry = (i, alternatives)
        if is_exact:
            # what exact_key would compute: call_key(arguments)
            key = pattern._exact_key = tuple(sorted(arguments.items())) if plain else call_key(arguments)
            row = exact.get((name, key))
            if row is None:
                exact[(name, key)] = [entry]
            else:
                row.append(entry)
        else:
            pattern._exact_key = None
            by_name.setdefault(name, []).append(entry)
        mid = f"call{i + 1}"
        milestones.append(Milestone(mid, i, alternatives, previous, optional))
        found = names.get(name)
        if found is None:
            names[name] = [i]
        else:
            found.append(i)
        if chain:
            previous = (mid,)
    plan = Plan(tuple(milestones), (), (), extra_calls, {}, source=source)
    # the cached properties, filled in as they would be computed
    plan.__dict__.update(
        call_index=(exact, by_name), names={k: tuple(v) for k, v in names.items()}, needs_judge=False,
        observes=False, reads_tools=False, has_similarity=False, has_refs=False, final_only=frozenset(),
        reads_states=False, has_turns=False,
    )
    return plan


_LITERALS: dict[tuple[str, type, Any], tuple[str, LiteralValue]] = {}
"""Shared ``(argument name, literal matcher)`` items of reference calls, for plain values that
are strings, integers, booleans or null (matchers never change, so plans may share them)."""

_LITERALS_KEPT = 4096


def _literal_item(name: str, value: Any) -> tuple[str, LiteralValue]:
    kind = type(value)
    if kind is not str and kind is not int and kind is not bool and value is not None:
        return (name, LiteralValue(value))
    key = (name, kind, value)
    found = _LITERALS.get(key)
    if found is None:
        if len(_LITERALS) >= _LITERALS_KEPT:
            _LITERALS.clear()
        found = _LITERALS[key] = (name, LiteralValue(value))
    return found

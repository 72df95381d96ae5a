"""Stateful tool environments.

An environment is one class whose tools are methods marked with :func:`tool`; the model reads
each tool's JSON schema, built from the method's signature and Google-style docstring (its
summary line and ``Args:`` section). A fresh instance is made for every (example, trial) and
:meth:`Environment.reset` prepares it.

Two kinds of failure are kept apart:

* :class:`ToolError` is an expected failure (unknown id, bad letter, division by zero): the
  agent sees the message as an error observation and may recover.
* any other exception raised by a tool is a bug: :meth:`Environment.call` raises
  :class:`ToolBug`, which ends that trajectory with status ``error`` while the run goes on.

The line between the two for arguments the model chose: arguments that fit the tool's schema
but that its backend cannot take (an id of 2**63 that SQLite cannot store, a power too large
for a float) are the model's mistake, as any other wrong argument: the call is a tool error the
model sees, a recorded step, and the episode goes on (:func:`rejected_by_backend`). The schema
is the tool's promise about types, not about the range of numbers a backend holds; a model that
sends an id no database could hold has made the same kind of mistake as one that sends an id
that does not exist. Anything else a tool raises is still its bug.
"""

from __future__ import annotations

import difflib
import json
import math
import typing
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from toolgym.parsing import read_arguments
from toolgym.records import Example

if TYPE_CHECKING:  # langchain-core is imported by the methods that need it (start-up time)
    from langchain_core.messages import BaseMessage
    from langchain_core.tools import BaseTool

__all__ = [
    "Environment",
    "EnvironmentUnavailable",
    "SupportsSubmit",
    "ToolBug",
    "ToolError",
    "ToolResult",
    "beyond_backend_range",
    "rejected_by_backend",
    "schema_tool",
    "tool",
]


class ToolError(Exception):
    """An expected tool failure; its message is shown to the agent as an error observation."""


class ToolBug(RuntimeError):
    """A tool raised an unexpected exception: the episode ends with status ``error``."""


class EnvironmentUnavailable(ValueError):
    """The environment cannot be used at all with what it was given, whatever the example: an
    MCP server whose credentials the run did not record, or an environment variable its spec
    names that is not set. Raised by :meth:`Environment.reset` or
    :meth:`Environment.tool_functions` before anything is called; the dataset check
    (:func:`toolgym.data.check_tools`) lets it through, so a run or ``--resume`` stops before it
    plays or writes anything (the command line: ``error: MESSAGE``, exit status 2), and
    ``export`` names it."""


def tool(method: Callable) -> Callable:
    """Mark an environment method as a tool the model can call.

    The tool's name is the method name, its description the docstring's summary, and each
    parameter's description comes from the docstring's ``Args:`` section.
    """
    method.__toolgym_tool__ = True
    return method


def schema_tool(name: str, description: str, parameters: dict[str, Any], func: Callable) -> Callable:
    """Give ``func`` an explicit JSON-schema signature instead of its docstring.

    For environments whose tools are published as OpenAI-style function schemas: return the
    result from :meth:`Environment.tool_functions`. The model is shown ``parameters`` exactly
    as given, and :meth:`Environment.call` checks arguments against it (property types,
    ``required``, no unknown properties) before calling ``func(**arguments)``.

    Args:
        name: The tool name the model calls.
        description: The tool description shown to the model.
        parameters: A JSON schema of ``"type": "object"`` with ``properties`` (and optional
            ``required``).
        func: A plain function or closure (not a bound method), called with the validated
            arguments as keywords.

    Raises:
        ValueError: if ``parameters`` is not an object schema.
    """
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ValueError(f"tool {name!r}: parameters must be a JSON schema of type 'object'")
    func.__toolgym_schema__ = {"name": name, "description": description, "parameters": parameters}
    return func


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def check_json_arguments(parameters: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Problems of ``arguments`` against an object schema (empty list when valid).

    Checks only what function schemas use: property types (``type`` as a string or a list),
    ``required``, ``enum``, and unknown properties (allowed only with
    ``additionalProperties: true``).
    """
    props = parameters.get("properties", {})
    problems = [f"{key}: required argument missing" for key in parameters.get("required", []) if key not in arguments]
    for key, value in arguments.items():
        spec = props.get(key)
        if spec is None:
            if parameters.get("additionalProperties") is not True:
                problems.append(f"{key}: unexpected argument (it takes: {', '.join(props) or 'none'})")
            continue
        types = spec.get("type")
        types = [types] if isinstance(types, str) else types or []
        if types and not any(_JSON_TYPES.get(t, lambda v: True)(value) for t in types):
            problems.append(f"{key}: expected {' or '.join(types)}, got {value!r}")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"{key}: {value!r} is not one of {spec['enum']}")
    return problems


@dataclass(frozen=True)
class ToolResult:
    """The observation returned for one tool call.

    Attributes:
        output: Text the agent sees.
        error: True for an expected failure (unknown tool, invalid arguments, ToolError).
        rejected: True when the call was refused before the tool ran (unknown tool, arguments
            that do not fit its parameters): it did not take the step it names.
    """

    output: str
    error: bool = False
    rejected: bool = False


@runtime_checkable
class SupportsSubmit(Protocol):
    """An environment whose state is what the agent submits rather than what tools did (a
    tool-free task measured by log-likelihood): the ``loglik`` agent writes its measurements
    (option log-probabilities, a target's token log-probabilities) with :meth:`submit`, and
    graders read them from the trajectory's final state."""

    def submit(self, **fields: Any) -> None:
        """Record JSON-safe measurements on the sheet."""
        ...


class Environment:
    """Base class of all environments.

    Subclasses set ``instructions`` (the system prompt), mark tools with :func:`tool` (or
    override :meth:`tool_functions` to make them dynamically), and implement :meth:`reset`
    and :meth:`read_state`. Everything else about running and grading it (default graders,
    datasets, reports) is declared in a :class:`toolgym.Benchmark`.

    Class attributes:
        name: The environment's name in trajectories (set from its benchmark; the class name
            in snake case when none is given).
        instructions: System prompt given to the agent.
        max_model_turns: Model turns an episode has by the environment's protocol (``None``:
            unlimited). An agent that reaches it stops with status ``completed`` once that
            turn's tool calls are executed; ``max_steps`` still bounds agents that loop.
        stop_sequences: Where a text-completing model should stop (the start of a next
            question); empty for most environments.
        describe_once: ``True`` when the instructions and the tools are the same after every
            reset, whatever the example, so readers of a run (``export``) reset one instance
            once instead of once per example (an MCP server's tools: one server start, not
            one per example).
        state_record_chars: How much of the state a trajectory records, in characters of JSON:
            the state after reset plus every tool step's patch (see
            :class:`toolgym.environments.states.StateRecorder`). At the first step that would
            pass it, recording stops (that step's and later steps' ``state_patch`` are
            ``None``) and the trajectory's ``state_note`` says so; state milestones and
            minefields then fall back to the final state. Default
            :data:`STATE_RECORD_CHARS`; ``None``: no cap; ``0``: no states recorded.
        replay_target: Whether the state that replaying an example's ``expected_calls``
            reaches is the task's target, so ``final_state`` grades an example without
            ``expected_state`` against it (τ²-bench's rule). ``False`` for environments whose
            state is bookkeeping rather than the task's outcome (a call counter) or that hold
            no state at all.
        volatile_state: JSON Pointer patterns (``fnmatch`` globs, as
            ``allowed_changes`` of an example) of state paths that change as bookkeeping
            whatever the agent does (a clock, a counter of calls, a log): ``collateral_damage``
            never counts a change there, nor below it. Empty by default.
    """

    name: ClassVar[str] = ""
    state_record_chars: ClassVar[int | None] = 200_000  # STATE_RECORD_CHARS
    replay_target: ClassVar[bool] = True
    volatile_state: ClassVar[tuple[str, ...]] = ()
    instructions: ClassVar[str] = ""
    max_model_turns: ClassVar[int | None] = None
    describe_once: ClassVar[bool] = False
    stop_sequences: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self._functions: dict[str, Callable] | None = None
        self._tools: dict[str, BaseTool] | None = None

    # --- lifecycle -----------------------------------------------------------------------
    def reset(self, example: Example) -> None:
        """Prepare a fresh episode for ``example``. Called once, right after construction."""

    def read_state(self) -> dict[str, Any]:
        """A JSON-safe snapshot of the state (a copy, never a live reference)."""
        return {}

    def replays_deterministically(self) -> bool:
        """Whether the same calls on a freshly reset environment give the same results and
        states (call after :meth:`reset`). Teacher forcing and ``toolgym fork`` build only on
        an environment that says so (and check each replayed prefix against its record).

        True by default (an environment is a Python object toolgym resets); an environment
        whose tools reach the outside world overrides it (an MCP server: only when each of its
        tools declares ``openWorldHint: false``).
        """
        return True

    def close(self) -> None:
        """Release resources (database connections, files) at the end of the episode."""

    def begin_turn(self, turn: int) -> None:
        """Called before user turn ``turn`` (1-based) reaches the agent, in every episode
        (turn 1 right after :meth:`reset`; later turns only in a multi-turn episode). Does
        nothing by default.

        An environment may change its tools here (a function that becomes available in a
        later turn): it then calls :meth:`tools_changed` and returns a :meth:`tool_set_key`
        naming the new set. Agents read the tools again at every user turn.

        Args:
            turn: The user turn about to start.
        """

    def tools_changed(self) -> None:
        """Forget the tools computed so far, so :attr:`functions` and :attr:`tools` are built
        again from :meth:`tool_functions` (call it when the tool set changes mid-episode)."""
        self._functions = None
        self._tools = None

    def prompt(self, example: Example) -> list[BaseMessage]:
        """The messages the agent starts from: the instructions and the example's input.

        A chat-history input (list of ``{"role", "content"}``) is turned into messages.
        """
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        messages: list[BaseMessage] = []
        if self.instructions:
            messages.append(SystemMessage(self.instructions))
        if isinstance(example.input, str):
            messages.append(HumanMessage(example.input))
        else:
            kinds = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}
            for turn in example.input:
                messages.append(kinds[turn.get("role", "user")](str(turn.get("content", ""))))
        return messages

    # --- tools ---------------------------------------------------------------------------
    def tool_functions(self) -> dict[str, Callable]:
        """Name → bound method for every tool; override to build tools dynamically."""
        found = {}
        for attr in dir(type(self)):
            member = getattr(type(self), attr, None)
            if callable(member) and getattr(member, "__toolgym_tool__", False):
                found[attr] = getattr(self, attr)
        return found

    def tool_set_key(self) -> Hashable:
        """What identifies this instance's set of tools, for agents that prepare something
        per tool set (bind a chat model to the tools, write a tools prompt) and reuse it.

        The default, the class, suits environments whose tools are fixed by their class.
        Environments whose tools depend on the example (one set of functions per dataset
        entry) return a key naming that set; two instances with equal keys must offer the same
        tools.

        Returns:
            Hashable: The key (the class by default).
        """
        return type(self)

    @property
    def functions(self) -> dict[str, Callable]:
        """Name → bound tool method of this instance (computed once)."""
        if self._functions is None:
            self._functions = self.tool_functions()
        return self._functions

    @property
    def tools(self) -> dict[str, BaseTool]:
        """Name → langchain-core tool bound to this instance; models are bound to these."""
        if self._tools is None:
            from langchain_core.tools import StructuredTool

            self._tools = {}
            for name, fn in self.functions.items():
                explicit = getattr(fn, "__toolgym_schema__", None)
                if explicit is not None:
                    self._tools[name] = StructuredTool(
                        name=name, description=explicit["description"],
                        args_schema=explicit["parameters"], func=fn,
                    )
                    continue
                spec = _schema_cache(type(self), name, fn)
                self._tools[name] = StructuredTool(
                    name=name, description=spec.description, args_schema=spec.args_schema, func=fn
                )
        return self._tools

    def args_schema(self, name: str) -> Any:
        """The argument schema of tool ``name``: the JSON schema of a :func:`schema_tool`, else
        the pydantic model parsed (once per class) from the method's signature and docstring.

        Raises:
            KeyError: for an unknown tool.
        """
        fn = self.functions[name]
        explicit = getattr(fn, "__toolgym_schema__", None)
        if explicit is not None:
            return explicit["parameters"]
        return _schema_cache(type(self), name, fn).args_schema

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Execute one tool call and return its observation.

        Args:
            name: Tool name as the model wrote it.
            arguments: Parsed arguments; anything but a dict, unknown names, missing or extra
                arguments and values of the wrong type give an error observation.

        An error observation longer than :data:`ERROR_CHARS` characters (a message quoting a
        huge argument) is cut there, saying how much was left out: a 1 MB argument is kept once,
        in the call, not a second time in the error.

        Raises:
            ToolBug: if the tool raised anything other than :class:`ToolError`.
        """
        result = self._call(name, arguments)
        if result.error and len(result.output) > ERROR_CHARS:
            cut = len(result.output) - ERROR_CHARS
            result = ToolResult(f"{result.output[:ERROR_CHARS]}… ({cut:,} more characters)", error=True,
                                rejected=result.rejected)
        return result

    def _call(self, name: str, arguments: Any) -> ToolResult:
        functions = self.functions
        if name not in functions:
            close = difflib.get_close_matches(name, list(functions), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            return ToolResult(f"Error: unknown tool {name!r}.{hint}", error=True, rejected=True)
        arguments, problem = read_arguments(name, arguments)  # empty or null: no arguments
        if problem:
            return ToolResult(f"Error: {problem}", error=True, rejected=True)
        schema = self.args_schema(name)
        if isinstance(schema, dict):  # a JSON-schema tool (see schema_tool)
            problems = check_json_arguments(schema, arguments)
            if problems:
                return ToolResult(f"Error: invalid arguments for {name!r}: {'; '.join(problems)}", error=True, rejected=True)
            return self._invoke(name, arguments)
        expected = set(schema.model_fields)
        extra = sorted(set(arguments) - expected)
        if extra:
            return ToolResult(
                f"Error: {name!r} got unexpected argument(s) {', '.join(extra)}; "
                f"it takes: {', '.join(sorted(expected)) or 'no arguments'}",
                error=True,
                rejected=True,
            )
        booleans = [k for k, v in arguments.items() if _has_bool(v) and not _takes_bool(schema.model_fields[k].annotation)]
        if booleans:  # pydantic's lax mode would read true as 1
            return ToolResult(
                f"Error: invalid arguments for {name!r}: "
                + "; ".join(
                    f"{k}: a boolean is not {_kind(schema.model_fields[k].annotation)}, got {json.dumps(arguments[k])}"
                    for k in booleans
                ),
                error=True,
                rejected=True,
            )
        texts = [k for k, v in arguments.items() if isinstance(v, str) and _number_only(schema.model_fields[k].annotation)]
        if texts:  # pydantic's lax mode would read "5" as 5: the schema says number, the model sent text
            return ToolResult(
                f"Error: invalid arguments for {name!r}: "
                + "; ".join(f"{k}: a string is not a number, got {json.dumps(arguments[k])}" for k in texts),
                error=True,
                rejected=True,
            )
        from pydantic import ValidationError

        try:
            validated = schema.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult(f"Error: invalid arguments for {name!r}: {problems}", error=True, rejected=True)
        return self._invoke(name, {k: getattr(validated, k) for k in arguments})

    def _invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        fn = self.functions[name]
        try:
            result = fn(**arguments)
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", error=True)
        except Exception as exc:  # a bug in the tool, not the agent's fault ...
            reason = rejected_by_backend(exc, arguments)
            if reason is not None:  # ... unless the model's argument is what the backend refused
                return ToolResult(f"Error: {name!r} could not take these arguments: {reason}", error=True)
            raise ToolBug(f"tool {name!r} raised {type(exc).__name__}: {exc}") from exc
        return ToolResult(_to_text(result))


INT64_RANGE = (-(2**63), 2**63 - 1)
"""The integers a backend is sure to hold: signed 64-bit (SQLite's INTEGER, SQL's BIGINT,
most languages' and JSON parsers' widest integer)."""


def beyond_backend_range(value: Any) -> str | None:
    """The first number in ``value`` (searched through lists and dict values) beyond what
    backends hold, described for the model, or ``None``: an integer outside
    :data:`INT64_RANGE` (its digits counted without writing it as text, which Python refuses
    past ``sys.get_int_max_str_digits()``), or a float that is NaN or infinite."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not INT64_RANGE[0] <= item <= INT64_RANGE[1]:
            return f"the integer of about {int(item.bit_length() * 0.30103) + 1:,} digits is outside the signed 64-bit range"
        if isinstance(item, float) and not math.isfinite(item):
            return f"the number {item} is not finite"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def rejected_by_backend(exc: BaseException, arguments: dict[str, Any]) -> str | None:
    """Why a tool's exception is the model's mistake (a message for the model), or ``None``
    when it is the tool's bug. It is the model's when its arguments, valid for the schema, are
    what the backend refused: the exception is an ``OverflowError`` (Python's error for a
    number out of an operation's range: SQLite's ``Python int too large to convert to SQLite
    INTEGER``, ``math.exp(1000)``), or an argument holds a number beyond what backends hold
    (:func:`beyond_backend_range`: the int-to-text limit of 4,300 digits, an id of 2**64).

    Args:
        exc: What the tool raised (not a :class:`ToolError`).
        arguments: The validated arguments the tool was called with.
    """
    beyond = beyond_backend_range(arguments)
    if isinstance(exc, OverflowError) or beyond is not None:
        detail = str(exc)
        if len(detail) > 300:
            detail = detail[:300] + "…"
        return f"{type(exc).__name__}: {detail}" + (f" ({beyond})" if beyond else "")
    return None


STATE_RECORD_CHARS = 200_000
"""The default :attr:`Environment.state_record_chars`: 200,000 characters of JSON per
trajectory, far above what the built-in environments record (a typewriter's 40 letters take a
few kilobytes) and small enough that a run of thousands of trajectories stays a few hundred
megabytes at worst."""

ERROR_CHARS = 2000
"""Characters of an error observation kept (see :meth:`Environment.call`)."""


def _kind(annotation: Any) -> str:
    """What a parameter annotated ``annotation`` holds, for messages: ``a number``, ``a
    string``, ``a list``, ... (``a value of TYPE`` otherwise)."""
    origin = typing.get_origin(annotation) or annotation
    if origin is typing.Annotated:
        return _kind(typing.get_args(annotation)[0])
    names = {int: "a number", float: "a number", complex: "a number", str: "a string", list: "a list",
             tuple: "a list", set: "a list", dict: "an object"}
    if isinstance(origin, type):
        for base, name in names.items():
            if issubclass(origin, base):
                return name
    return f"a value of {getattr(annotation, '__name__', annotation)}"


def _has_bool(value: Any) -> bool:
    """Whether a JSON value is or holds (in a list or object) a boolean."""
    if isinstance(value, bool):
        return True
    if isinstance(value, list):
        return any(_has_bool(v) for v in value)
    if isinstance(value, dict):
        return any(_has_bool(v) for v in value.values())
    return False


def _number_only(annotation: Any) -> bool:
    """Whether a parameter annotated ``annotation`` takes only a number (``int``, ``float``,
    optionally ``None``): a string given for it is refused, never read as a number."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _number_only(typing.get_args(annotation)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(_number_only(a) for a in args)
    return annotation in (int, float)


def _takes_bool(annotation: Any) -> bool:
    """Whether a parameter annotated ``annotation`` may hold a boolean anywhere (``bool``,
    ``Any``, ``object``, unions, containers and unparameterised types that may). Numbers do not:
    ``true`` is never the number 1."""
    if annotation in (bool, Any, object) or annotation is None:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _takes_bool(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    if origin is None:
        return annotation not in (int, float, str, complex, type(None)) and not (
            isinstance(annotation, type) and issubclass(annotation, (int, float, str))
        )
    if origin is typing.Literal:
        return any(isinstance(a, bool) for a in args)
    return not args or any(_takes_bool(a) for a in args)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


_SCHEMAS: dict[tuple[type, str], BaseTool] = {}


def _schema_cache(cls: type, name: str, fn: Callable) -> BaseTool:
    """Parse (once per class and tool) the signature and docstring into a schema carrier.

    The returned tool wraps the first instance's method and must only be used for its
    ``description`` and ``args_schema``.
    """
    key = (cls, name)
    if key not in _SCHEMAS:
        from langchain_core.tools import StructuredTool

        _SCHEMAS[key] = StructuredTool.from_function(
            fn, name=name, parse_docstring=True, error_on_invalid_docstring=False
        )
    return _SCHEMAS[key]

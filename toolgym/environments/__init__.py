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
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ValidationError

from toolgym.records import Example
from toolgym.registry import Registry

__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "ToolBug",
    "ToolError",
    "ToolResult",
    "get_environment",
    "register_environment",
    "tool",
]

ENVIRONMENTS: Registry[type[Environment]] = Registry("environment", "toolgym.environments")


def register_environment(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator registering an :class:`Environment` subclass under ``name``."""

    def decorator(cls: type[Environment]) -> type[Environment]:
        ENVIRONMENTS.register(name)(cls)
        cls.name = name
        return cls

    return decorator


def get_environment(name: str) -> type[Environment]:
    """The environment class registered as ``name``.

    Raises:
        UnknownNameError: with "did you mean" suggestions.
    """
    return ENVIRONMENTS.get(name)


class ToolError(Exception):
    """An expected tool failure; its message is shown to the agent as an error observation."""


class ToolBug(RuntimeError):
    """A tool raised an unexpected exception: the episode ends with status ``error``."""


def tool(method: Callable) -> Callable:
    """Mark an environment method as a tool the model can call.

    The tool's name is the method name, its description the docstring's summary, and each
    parameter's description comes from the docstring's ``Args:`` section.
    """
    method.__toolgym_tool__ = True
    return method


@dataclass(frozen=True)
class ToolResult:
    """The observation returned for one tool call.

    Attributes:
        output: Text the agent sees.
        error: True for an expected failure (unknown tool, invalid arguments, ToolError).
    """

    output: str
    error: bool = False


class Environment:
    """Base class of all environments.

    Subclasses set ``instructions`` (the system prompt), mark tools with :func:`tool` (or
    override :meth:`tool_functions` to make them dynamically), implement :meth:`reset` and
    :meth:`read_state`, and list their default ``graders``.

    Class attributes:
        name: Registry key, set by :func:`register_environment`.
        instructions: System prompt given to the agent.
        graders: Names of the graders run by default on this environment's trajectories.
        default_dataset: Dataset name under ``toolgym/datasets/<env>/`` used without ``--dataset``.
    """

    name: ClassVar[str] = ""
    instructions: ClassVar[str] = ""
    graders: ClassVar[tuple[str, ...]] = ("steps_exact", "step_ratio")
    default_dataset: ClassVar[str | None] = None

    def __init__(self) -> None:
        self._functions: dict[str, Callable] | None = None
        self._tools: dict[str, BaseTool] | None = None

    # --- lifecycle -----------------------------------------------------------------------
    def reset(self, example: Example) -> None:
        """Prepare a fresh episode for ``example``. Called once, right after construction."""

    def read_state(self) -> dict[str, Any]:
        """A JSON-safe snapshot of the state (a copy, never a live reference)."""
        return {}

    def close(self) -> None:
        """Release resources (database connections, files) at the end of the episode."""

    def prompt(self, example: Example) -> list[BaseMessage]:
        """The messages the agent starts from: the instructions and the example's input.

        A chat-history input (list of ``{"role", "content"}``) is turned into messages.
        """
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

    @classmethod
    def load_dataset(cls, path: Path, options: dict[str, Any]) -> list[Example] | None:
        """Load a dataset in an environment-specific format, or return ``None`` to use the
        generic loaders (JSONL of Examples, LangChain JSON).

        Args:
            path: The ``--dataset`` file.
            options: Environment options from the command line (``--sample``, ``--shots``, ...).

        Raises:
            DatasetError: naming the file and line of an invalid record.
        """
        return None

    @classmethod
    def from_langchain(cls, record: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """Complete an :class:`Example`'s fields from a LangChain tool-usage record.

        Args:
            record: The original JSON object (``question``, ``reference``/``answer``, ...).
            fields: The generic conversion; return it with environment-specific additions
                (``expected_calls``, ``expected_state``).
        """
        return fields

    # --- tools ---------------------------------------------------------------------------
    def tool_functions(self) -> dict[str, Callable]:
        """Name → bound method for every tool; override to build tools dynamically."""
        found = {}
        for attr in dir(type(self)):
            member = getattr(type(self), attr, None)
            if callable(member) and getattr(member, "__toolgym_tool__", False):
                found[attr] = getattr(self, attr)
        return found

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
            self._tools = {}
            for name, fn in self.functions.items():
                spec = _schema_cache(type(self), name, fn)
                self._tools[name] = StructuredTool(
                    name=name, description=spec.description, args_schema=spec.args_schema, func=fn
                )
        return self._tools

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Execute one tool call and return its observation.

        Args:
            name: Tool name as the model wrote it.
            arguments: Parsed arguments; anything but a dict, unknown names, missing or extra
                arguments and values of the wrong type give an error observation.

        Raises:
            ToolBug: if the tool raised anything other than :class:`ToolError`.
        """
        tools = self.tools
        if name not in tools:
            close = difflib.get_close_matches(name, list(tools), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            return ToolResult(f"Error: unknown tool {name!r}.{hint}", error=True)
        if not isinstance(arguments, dict):
            return ToolResult(
                f"Error: arguments of {name!r} must be a JSON object, got {arguments!r}",
                error=True,
            )
        schema = tools[name].args_schema
        expected = set(schema.model_fields)
        extra = sorted(set(arguments) - expected)
        if extra:
            return ToolResult(
                f"Error: {name!r} got unexpected argument(s) {', '.join(extra)}; "
                f"it takes: {', '.join(sorted(expected)) or 'no arguments'}",
                error=True,
            )
        try:
            validated = schema.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult(f"Error: invalid arguments for {name!r}: {problems}", error=True)
        fn = self.functions[name]
        try:
            result = fn(**{k: getattr(validated, k) for k in arguments})
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", error=True)
        except Exception as exc:  # a bug in the tool, not the agent's fault
            raise ToolBug(f"tool {name!r} raised {type(exc).__name__}: {exc}") from exc
        return ToolResult(_to_text(result))


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
        _SCHEMAS[key] = StructuredTool.from_function(
            fn, name=name, parse_docstring=True, error_on_invalid_docstring=False
        )
    return _SCHEMAS[key]

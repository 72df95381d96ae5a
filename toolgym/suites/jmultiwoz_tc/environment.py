"""The JMultiWOZ-TC environment: the 9 published tools, each acknowledging the call
(github.com/llm-jp/JMultiWOZ-TC; data CC BY 4.0, derived from JMultiWOZ, CC BY-SA 4.0).

One example per user turn: the input is the chat history up to and including that turn, the
expected calls are the gold (empty when no tool should be called). The agent is offered the 9
tools of ``tools.json`` exactly as published and answers once, as the published
``generate.py`` does (one chat-completion request per turn, no system prompt); a tool call is
acknowledged, not executed, so agents that loop after a call still finish.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from toolgym import DatasetError, Environment, Example, schema_tool
from toolgym.suites.jmultiwoz_tc.data import ToolSpecs, load_tool_specs

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["ACK_NOTE", "JMultiWOZTC", "acknowledgement"]

ACK_NOTE = "受け付けました。(JMultiWOZ-TC replays recorded dialogues: the call is recorded, nothing is searched or booked.)"


def acknowledgement(name: str, arguments: dict[str, Any]) -> str:
    """The observation returned for a valid call.

    Args:
        name (str): The tool called.
        arguments (dict[str, Any]): Its (validated) arguments.

    Returns:
        str: A JSON object ``{"status": "accepted", "tool", "arguments", "note"}``.
    """
    return json.dumps({"status": "accepted", "tool": name, "arguments": arguments, "note": ACK_NOTE}, ensure_ascii=False)


def _ack_tool(name: str) -> Callable[..., str]:
    def ack(**arguments: Any) -> str:
        return acknowledgement(name, arguments)

    ack.__name__ = name
    return ack


_TOOL_CACHE: dict[str, tuple[dict[str, Callable], dict[str, BaseTool]]] = {}


class JMultiWOZTC(Environment):
    """The 9 JMultiWOZ-TC tools, each returning an acknowledgement. Stateless: the turn's
    calls are in its trajectory (``read_state`` is empty).

    The tool schemas come from ``tools.json`` beside the data (the path travels in each
    example's ``metadata["tools"]``); tools are built once per schema file and shared.
    """

    name = "jmultiwoz_tc"
    instructions = ""  # the published generate.py sends the history without a system prompt
    max_model_turns: ClassVar[int | None] = 1
    replay_target: ClassVar[bool] = False  # no state: final_state keeps grading expected_state only

    def __init__(self) -> None:
        super().__init__()
        self.tools_path: str | None = None

    def reset(self, example: Example) -> None:
        """Select the tool schemas named by the example.

        Args:
            example (Example): A turn loaded by :func:`toolgym.suites.jmultiwoz_tc.data.load_examples`.

        Raises:
            DatasetError: if the example has no ``metadata["tools"]`` or the file is invalid.
        """
        path = example.metadata.get("tools")
        if not path:
            raise DatasetError(f"example {example.id!r} has no metadata['tools'] (the tools.json path)")
        self.tools_path = str(path)
        if self.tools_path not in _TOOL_CACHE:
            specs = load_tool_specs(self.tools_path)
            functions = {
                name: schema_tool(name, fn["description"], fn["parameters"], _ack_tool(name))
                for name, fn in specs.functions.items()
            }
            self._functions = functions
            self._tools = None
            _TOOL_CACHE[self.tools_path] = (functions, dict(super().tools))
        self._functions, self._tools = _TOOL_CACHE[self.tools_path]

    def tool_functions(self) -> dict[str, Callable]:
        """The acknowledging functions of this episode's schema file.

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self.tools_path is None:
            raise RuntimeError("JMultiWOZTC.reset() must run before its tools are used")
        return _TOOL_CACHE[self.tools_path][0]

    @property
    def specs(self) -> ToolSpecs:
        """The tool schemas of this episode.

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self.tools_path is None:
            raise RuntimeError("JMultiWOZTC.reset() must run before its tools are used")
        return load_tool_specs(self.tools_path)

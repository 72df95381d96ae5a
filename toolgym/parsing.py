"""Turning chat-model messages into recorded steps, and spotting malformed tool calls."""

from __future__ import annotations

import difflib
import json
import re
import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from toolgym.records import ModelStep, ToolCall

OBSERVATION_MARK = {"toolgym": "observation"}
"""Set in ``additional_kwargs`` of user-role messages that carry tool observations rather than a
new request (chat providers do not send that field)."""


def observation_message(text: str) -> HumanMessage:
    """A user-role message carrying tool observations back to the model (marked as such)."""
    return HumanMessage(text, additional_kwargs=dict(OBSERVATION_MARK))


def is_observation(message: BaseMessage) -> bool:
    """True for messages made by :func:`observation_message`."""
    return message.additional_kwargs.get("toolgym") == "observation"

_FENCED = re.compile(r"```(?:json|tool_call|python)?\s*(\{.*?\})\s*```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def message_text(message: BaseMessage) -> str:
    """The plain text of a message (text blocks joined for list content)."""
    return content_text(message.content)


def content_text(content: str | list[Any]) -> str:
    """The plain text of message content: a string, or a list of blocks whose text blocks are
    joined."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def new_call_id() -> str:
    """A fresh tool-call id for calls the model did not give one."""
    return f"call_{uuid.uuid4().hex[:12]}"


def text_calls(text: str, tool_names: set[str] | list[str]) -> list[ToolCall]:
    """Tool calls written as text instead of through the tool-calling interface.

    Recognises ``<tool_call>{...}</tool_call>`` tags, fenced JSON blocks and bare JSON objects
    in the text that either name a known tool (``{"name": ...}``, ``{"tool": ...}``) or have
    the shape of a call (a name with ``arguments``/``parameters``/``args``/``input``). Each is
    returned as a malformed call (it is never executed): the agent is told to use real tool
    calls.
    """
    found = []
    for pattern in (_TAGGED, _FENCED):
        for match in pattern.finditer(text):
            raw = match.group(1)
            name = _named_tool(raw)
            if pattern is _TAGGED or name in tool_names or _call_shaped(raw):
                found.append(_text_call(name, raw))
        if found:
            return found
    for raw in _json_objects(text):
        name = _named_tool(raw)
        if name in tool_names or _call_shaped(raw):
            found.append(_text_call(name, raw))
    return found


def _text_call(name: str | None, raw: str) -> ToolCall:
    return ToolCall(
        id=new_call_id(),
        name=name or "",
        malformed="tool call written as text instead of a tool call",
        raw=raw,
    )


_CALL_ARG_KEYS = ("arguments", "parameters", "args", "input")


def _call_shaped(raw: str) -> bool:
    """True for a JSON object with a string ``name`` and an arguments object."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        return False
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("name"), str)
        and any(isinstance(obj.get(k), dict) for k in _CALL_ARG_KEYS)
    )


def _json_objects(text: str, limit: int = 20) -> list[str]:
    """The top-level JSON objects embedded in ``text`` (at most ``limit`` tried)."""
    decoder = json.JSONDecoder()
    found, start, tries = [], text.find("{"), 0
    while start != -1 and tries < limit:
        tries += 1
        try:
            _, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        found.append(text[start:end])
        start = text.find("{", end)
    return found


def unknown_tool(name: str, tool_names: set[str] | list[str]) -> str:
    """The malformed-call reason for a call of a tool that does not exist."""
    close = difflib.get_close_matches(name, list(tool_names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown tool {name!r}{hint}"


def _named_tool(raw: str) -> str | None:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        m = re.search(r'"(?:name|tool|action)"\s*:\s*"([^"]+)"', raw)
        return m.group(1) if m else None
    if isinstance(obj, dict):
        name = obj.get("name", obj.get("tool", obj.get("action")))
        return name if isinstance(name, str) else None
    return None


def model_step(message: AIMessage, latency_s: float, tool_names: set[str]) -> ModelStep:
    """Record an AIMessage as a :class:`ModelStep`.

    Well-formed calls keep their parsed arguments; ``invalid_tool_calls`` (arguments that are
    not a JSON object), calls of a tool that is not in ``tool_names`` (when it is non-empty)
    and calls written as text become malformed calls.
    """
    text = message_text(message)
    calls: list[ToolCall] = []
    for call in message.tool_calls:
        args: Any = call.get("args")
        if isinstance(args, dict):
            name = call["name"] or ""
            bad = unknown_tool(name, tool_names) if tool_names and name not in tool_names else None
            calls.append(ToolCall(id=call.get("id") or new_call_id(), name=name, arguments=args, malformed=bad))
        else:
            calls.append(
                ToolCall(
                    id=call.get("id") or new_call_id(),
                    name=call["name"],
                    malformed="arguments are not a JSON object",
                    raw=json.dumps(args),
                )
            )
    for bad in message.invalid_tool_calls:
        calls.append(
            ToolCall(
                id=bad.get("id") or new_call_id(),
                name=bad.get("name") or "",
                malformed=bad.get("error") or "arguments are not valid JSON",
                raw=bad.get("args"),
            )
        )
    if not calls and text:
        calls = text_calls(text, tool_names)
    usage = message.usage_metadata or {}
    return ModelStep(
        text=text,
        tool_calls=calls,
        latency_s=latency_s,
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
    )

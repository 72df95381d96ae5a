"""Turning chat-model messages into recorded steps, and spotting malformed tool calls."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from toolgym.records import ModelStep, ToolCall

FEEDBACK = "toolgym_feedback"
"""Key set in ``additional_kwargs`` of user-role messages that carry an observation (the answer
to a call written as text) rather than a request."""

_FENCED = re.compile(r"```(?:json|tool_call|python)?\s*(\{.*?\})\s*```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def message_text(message: BaseMessage) -> str:
    """The plain text of a message (text blocks joined for list content)."""
    content = message.content
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

    Recognises ``<tool_call>{...}</tool_call>`` tags and fenced JSON blocks whose object names
    a known tool (``{"name": ...}`` or ``{"tool": ...}``). Each is returned as a malformed
    call (it is never executed): the agent is told to use real tool calls.
    """
    found = []
    for pattern in (_TAGGED, _FENCED):
        for match in pattern.finditer(text):
            raw = match.group(1)
            name = _named_tool(raw)
            if pattern is _TAGGED or name in tool_names:
                found.append(
                    ToolCall(
                        id=new_call_id(),
                        name=name or "",
                        malformed="tool call written as text instead of a tool call",
                        raw=raw,
                    )
                )
        if found:
            break
    return found


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
    not a JSON object) and calls written as text become malformed calls.
    """
    text = message_text(message)
    calls: list[ToolCall] = []
    for call in message.tool_calls:
        args: Any = call.get("args")
        if isinstance(args, dict):
            calls.append(ToolCall(id=call.get("id") or new_call_id(), name=call["name"], arguments=args))
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

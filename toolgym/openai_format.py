"""Trajectories as OpenAI chat messages: the format of the Gymnasium adapter's observations
(:mod:`toolgym.gym`) and of ``toolgym export`` (fine-tuning and preference data).

Message shapes (OpenAI Chat Completions; the chat fine-tuning format uses the same ones):

* ``{"role": "system" | "user", "content": str}``;
* ``{"role": "assistant", "content": str | None, "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments": JSON string}}]}`` (``tool_calls`` only when there are any);
* ``{"role": "tool", "tool_call_id": str, "content": str}``, one per call, in call order.

A malformed call (arguments that were not a JSON object, a call written as text, an unknown
tool) was never executed, so it has no well-formed ``tool_calls`` entry: its raw text is kept in
the assistant message's content as a ``<tool_call>`` block, and the error the model was shown
comes back as a user message after the tool messages, the way toolgym's agents answer calls
written as text (:func:`toolgym.parsing.observation_message`). The Gymnasium adapter passes
``answered``: the ids of malformed calls the policy sent in ``tool_calls`` with its own id; those
stay in ``tool_calls`` (arguments as sent) and their error comes back as a tool message with
that id, as chat servers require of every call id.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

from langchain_core.messages import convert_to_openai_messages
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolgym.environments import Environment
from toolgym.records import Example, ModelStep, Step, ToolCall, ToolStep, UserStep

__all__ = [
    "assistant_message",
    "prompt_messages",
    "step_messages",
    "tool_schemas",
    "validate_chat",
]


def tool_schemas(env: Environment) -> list[dict[str, Any]]:
    """The environment's tools in the OpenAI function format, ``[{"type": "function",
    "function": {"name", "description", "parameters"}}]``, in the environment's order.

    ``env`` must have been reset when its tools depend on the example (JMultiWOZ-TC)."""
    return [convert_to_openai_tool(tool) for tool in env.tools.values()]


def prompt_messages(env: Environment, example: Example) -> list[dict[str, Any]]:
    """The messages an episode starts from (``env.prompt(example)``: the instructions as the
    system message when there are any, then the example's input) as OpenAI chat dicts."""
    return [_plain(m) for m in convert_to_openai_messages(env.prompt(example))]


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """Only the fields of the fine-tuning format (no ``name`` or ``id`` from langchain)."""
    keep = {"role": message["role"], "content": message.get("content")}
    if message.get("tool_calls"):
        keep["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        keep["tool_call_id"] = message["tool_call_id"]
    if isinstance(keep["content"], list):  # text blocks only: these messages are text
        keep["content"] = "".join(b.get("text", "") for b in keep["content"] if isinstance(b, dict))
    return keep


def _call(call: ToolCall) -> dict[str, Any]:
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    if call.malformed and call.raw is not None:
        arguments = call.raw  # as sent
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def assistant_message(step: ModelStep, answered: Collection[str] = ()) -> dict[str, Any]:
    """One model turn as an assistant message: well-formed calls as ``tool_calls``; each
    malformed call's raw text appended to the content as a ``<tool_call>`` block, except the
    malformed calls whose id is in ``answered``: those stay in ``tool_calls``, arguments as
    sent."""
    text = step.text
    bad = [c for c in step.tool_calls if c.malformed and c.id not in answered]
    for call in bad:
        raw = call.raw if call.raw else json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        block = f"<tool_call>\n{raw}\n</tool_call>"
        if block not in text:
            text = f"{text}\n{block}" if text else block
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    good = [_call(c) for c in step.tool_calls if not c.malformed or c.id in answered]
    if good:
        message["tool_calls"] = good
    elif message["content"] is None:
        message["content"] = ""
    return message


def step_messages(steps: Iterable[Step], answered: Collection[str] = ()) -> list[dict[str, Any]]:
    """Recorded steps as OpenAI chat messages (see the module docstring).

    Each model turn is an assistant message; the tool steps after it are tool messages for its
    well-formed calls (and the malformed calls whose id is in ``answered``), and one user
    message with the observations of the other calls (malformed ones, or calls the model did
    not make in that turn). The user messages of a multi-turn episode after the first (which
    is the prompt's) are user messages in place; a simulated user's bare stop, which the agent
    never saw, is left out."""
    out: list[dict[str, Any]] = []
    pending: set[str] = set()
    notes: list[str] = []

    def flush() -> None:
        if notes:
            out.append({"role": "user", "content": "\n".join(notes)})
            notes.clear()

    for step in steps:
        if isinstance(step, ModelStep):
            flush()
            message = assistant_message(step, answered)
            out.append(message)
            pending = {c["id"] for c in message.get("tool_calls", [])}
        elif isinstance(step, UserStep):
            if step.turn > 1 and not (step.stop and not step.text):
                flush()
                out.append({"role": "user", "content": step.text})
                pending = set()
        elif isinstance(step, ToolStep):
            if step.call_id in pending and (not step.malformed or step.call_id in answered):
                pending.discard(step.call_id)
                out.append({"role": "tool", "tool_call_id": step.call_id, "content": step.output})
            else:
                notes.append(step.output)
    flush()
    return out


_ROLES = {"system", "user", "assistant", "tool"}


def validate_chat(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *, open_end: bool = False,
) -> list[str]:
    """Problems of a conversation in the OpenAI chat format (an empty list when valid).

    Checks: each message is an object with a known role and string content (``None`` allowed
    for an assistant message with calls); system messages only at the start; a tool message
    answers a call of the latest assistant message; each ``tool_call_id`` is answered exactly
    once, before the next message of another role; call ids are unique; ``arguments`` are strings
    holding a JSON object; called functions are among ``tools`` when given; at least one
    assistant message (there is nothing to train on without one: OpenAI's fine-tuning data
    check refuses such an example, "Examples must contain at least one assistant message").

    With ``open_end``, the calls of a last assistant message may be left unanswered: the
    conversation ends with the calls as its target, the shape of the tool-calling examples of
    OpenAI's fine-tuning guide (a user message, then an assistant message with ``tool_calls``);
    for a trajectory imported from a result file, which records the calls and no results.
    """
    problems: list[str] = []
    names = {t["function"]["name"] for t in tools} if tools is not None else None
    open_calls: dict[str, bool] = {}
    seen_ids: set[str] = set()
    started = False
    for i, m in enumerate(messages):
        where = f"message {i}"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            problems.append(f"{where}: not a message with a known role")
            continue
        role, content = m["role"], m.get("content")
        if not (isinstance(content, str) or (content is None and role == "assistant" and m.get("tool_calls"))):
            problems.append(f"{where}: content must be a string")
        if role == "system":
            if started:
                problems.append(f"{where}: system message after the conversation started")
            continue
        if role != "tool":
            unanswered = [k for k, done in open_calls.items() if not done]
            if unanswered:
                problems.append(f"{where}: calls {unanswered} not answered before a {role} message")
            open_calls = {}
        if role == "user":
            started = True
        elif role == "assistant":
            if not started:
                problems.append(f"{where}: assistant message before any user message")
            started = True
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                cid = call.get("id")
                if not isinstance(cid, str) or not cid or cid in seen_ids:
                    problems.append(f"{where}: tool call id {cid!r} missing or repeated")
                    continue
                seen_ids.add(cid)
                open_calls[cid] = False
                args = fn.get("arguments")
                try:
                    if not isinstance(args, str) or not isinstance(json.loads(args), dict):
                        raise ValueError
                except ValueError:
                    problems.append(f"{where}: arguments of {cid} are not a string holding a JSON object")
                if names is not None and fn.get("name") not in names:
                    problems.append(f"{where}: call {cid} names {fn.get('name')!r}, not in tools")
        else:  # tool
            cid = m.get("tool_call_id")
            if cid not in open_calls:
                problems.append(f"{where}: tool message answers {cid!r}, not a call of the last assistant message")
            elif open_calls[cid]:
                problems.append(f"{where}: call {cid!r} answered twice")
            else:
                open_calls[cid] = True
    unanswered = [k for k, done in open_calls.items() if not done]
    last_is_assistant = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"
    if unanswered and not (open_end and last_is_assistant):
        problems.append(f"end: calls {unanswered} never answered")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
        problems.append("end: no assistant message (nothing to train on)")
    return problems

"""Turning chat-model messages into recorded steps, and spotting malformed tool calls."""

from __future__ import annotations

import difflib
import json
import math
import re
import uuid
from typing import TYPE_CHECKING, Any

from toolgym.records import ModelStep, TokenRecord, ToolCall, without_surrogates

if TYPE_CHECKING:  # langchain-core loads with the first message, not with the text helpers
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

OBSERVATION_MARK = {"toolgym": "observation"}
"""Set in ``additional_kwargs`` of user-role messages that carry tool observations rather than a
new request (chat providers do not send that field)."""


def observation_message(text: str) -> HumanMessage:
    """A user-role message carrying tool observations back to the model (marked as such)."""
    from langchain_core.messages import HumanMessage

    return HumanMessage(text, additional_kwargs=dict(OBSERVATION_MARK))


def is_observation(message: BaseMessage) -> bool:
    """True for messages made by :func:`observation_message`."""
    return message.additional_kwargs.get("toolgym") == "observation"


USER_SIMULATOR_MARK = {"toolgym": "user_simulator"}
"""Set in ``additional_kwargs`` of the system message :class:`toolgym.users.ModelUser` sends,
so that a scripted model (``scripted:FILE``) knows it plays the user (chat providers do not send
that field)."""


def plays_the_user(messages: list[BaseMessage]) -> bool:
    """True when ``messages`` are a simulated user's call (their first message carries
    :data:`USER_SIMULATOR_MARK`): the roles are flipped, the agent's answers are the human
    messages and the user's own messages the AI ones."""
    return bool(messages) and messages[0].additional_kwargs.get("toolgym") == USER_SIMULATOR_MARK["toolgym"]

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


# --- reasoning ("thinking") text -----------------------------------------------------------------
# Reasoning models write their chain of thought before the answer: Qwen3, DeepSeek-R1, QwQ and
# many distillations between ``<think>`` and ``</think>`` (Qwen3's chat template may open the tag
# in the prompt, so a reply can start inside it and show only ``</think>``); others use
# ``<thinking>`` or ``<reasoning>``; gpt-oss writes OpenAI's harmony format, with the reasoning
# in the ``analysis`` channel and the answer in the ``final`` channel. Only text outside the
# reasoning is an action or an answer.
_THINK_TAGS = ("think", "thinking", "reasoning", "thought")
_THINK_OPEN = re.compile(r"<(" + "|".join(_THINK_TAGS) + r")\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(" + "|".join(_THINK_TAGS) + r")\s*>", re.IGNORECASE)
_HARMONY = re.compile(
    r"(?:<\|start\|>\s*\w*\s*)?<\|channel\|>\s*(\w+)[^<]*?<\|message\|>(.*?)"
    r"(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|<\|channel\|>|$)",
    re.DOTALL,
)
_HARMONY_MARKS = re.compile(r"<\|(?:end|return|call|start)\|>")


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Split a reply into the text outside the reasoning and the reasoning itself.

    Recognised forms:

    * ``<think>…</think>`` (also ``<thinking>``, ``<reasoning>``, ``<thought>``; any case),
      anywhere and any number of times; an unclosed opening tag (a reply cut at its token
      limit) makes the rest of the reply reasoning;
    * a closing ``</think>`` without an opening tag (Qwen3's template opens the tag in the
      prompt): everything before it is reasoning;
    * OpenAI harmony channels (gpt-oss): ``analysis`` (and ``commentary`` without a call) is
      reasoning, ``final`` is the answer.

    Args:
        text: The model's reply as text.

    Returns:
        ``(visible, reasoning)``: the reply with the reasoning removed (stripped of the
        surrounding whitespace when something was removed), and the reasoning parts joined by a
        blank line, or ``None`` when there was none.
    """
    if "<|channel|>" in text:
        return _split_harmony(text)
    if "<" not in text:
        return text, None
    thoughts: list[str] = []
    first_open = _THINK_OPEN.search(text)
    first_close = _THINK_CLOSE.search(text)
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        thoughts.append(text[: first_close.start()])  # the opening tag was in the prompt
        text = text[first_close.end() :]
    elif first_open is None:
        return text, None
    visible: list[str] = []
    pos = 0
    while (opened := _THINK_OPEN.search(text, pos)) is not None:
        visible.append(text[pos : opened.start()])
        closed = re.compile(rf"</{opened.group(1)}\s*>", re.IGNORECASE).search(text, opened.end())
        if closed is None:
            thoughts.append(text[opened.end() :])
            pos = len(text)
            break
        thoughts.append(text[opened.end() : closed.start()])
        pos = closed.end()
    visible.append(text[pos:])
    reasoning = "\n\n".join(t.strip() for t in thoughts if t.strip())
    return "".join(visible).strip(), reasoning or None


def _split_harmony(text: str) -> tuple[str, str | None]:
    thoughts, visible = [], []
    head = text[: text.find("<|channel|>")]
    head = _HARMONY_MARKS.sub("", head).strip()
    if head and not head.endswith("assistant"):
        visible.append(head)
    for match in _HARMONY.finditer(text):
        channel, body = match.group(1).lower(), match.group(2).strip()
        (visible if channel == "final" else thoughts).append(body)
    reasoning = "\n\n".join(t for t in thoughts if t)
    return "\n\n".join(v for v in visible if v).strip(), reasoning or None


def strip_reasoning(text: str | None) -> str | None:
    """``text`` without its reasoning (see :func:`split_reasoning`); ``None`` stays ``None``."""
    return None if text is None else split_reasoning(text)[0]


_REASONING_BLOCKS = ("thinking", "reasoning", "redacted_thinking")


def message_reasoning(message: BaseMessage) -> str | None:
    """Reasoning a provider sent beside the answer, outside the message text.

    * ``additional_kwargs["reasoning_content"]`` (OpenAI-compatible servers: vLLM's reasoning
      parsers, DeepSeek's API) or ``additional_kwargs["reasoning"]``;
    * content blocks of type ``thinking`` (Anthropic extended thinking: ``block["thinking"]``),
      ``redacted_thinking`` (recorded as ``[redacted thinking]``) and ``reasoning``
      (langchain's standard block: ``block["reasoning"]``, or its ``summary`` texts).

    Returns:
        The reasoning texts joined by a blank line, or ``None``.
    """
    found: list[str] = []
    for key in ("reasoning_content", "reasoning"):
        value = message.additional_kwargs.get(key)
        if isinstance(value, str) and value.strip():
            found.append(value.strip())
        elif isinstance(value, dict):
            found += [s.get("text", "") for s in value.get("summary", []) if isinstance(s, dict)]
    if isinstance(message.content, list):
        for block in message.content:
            if not isinstance(block, dict) or block.get("type") not in _REASONING_BLOCKS:
                continue
            if block["type"] == "redacted_thinking":
                found.append("[redacted thinking]")
                continue
            value = block.get("thinking", block.get("reasoning"))
            if isinstance(value, str):
                found.append(value)
            else:
                found += [s.get("text", "") for s in block.get("summary", []) if isinstance(s, dict)]
    joined = "\n\n".join(f.strip() for f in found if f and f.strip())
    return joined or None


def reply_parts(message: BaseMessage) -> tuple[str, str | None]:
    """The visible text of a model reply and all its reasoning (sent apart by the provider, or
    written inline as ``<think>`` blocks); see :func:`message_reasoning` and
    :func:`split_reasoning`."""
    visible, inline = split_reasoning(message_text(message))
    apart = message_reasoning(message)
    parts = [p for p in (apart, inline) if p]
    return visible, "\n\n".join(parts) if parts else None


def reasoning_tokens(message: BaseMessage) -> int | None:
    """Reasoning tokens the provider reported (``usage_metadata.output_token_details.reasoning``;
    they are already part of ``output_tokens``), else ``None``."""
    usage = getattr(message, "usage_metadata", None) or {}
    details = usage.get("output_token_details") or {}
    value = details.get("reasoning")
    return int(value) if isinstance(value, int) else None


# --- tool-call arguments ---------------------------------------------------------------------------
_EMPTY_ARGUMENTS = re.compile(r"""\s*(?:\{\s*\}|null|None|""|''|)\s*(?:""|'')*\s*""")
SHOWN_SENT_CHARS = 200
"""Characters of unusable arguments quoted in the error message (the call keeps them whole)."""


def empty_arguments(sent: Any) -> bool:
    """Whether ``sent`` means "no arguments": ``None``, ``{}``, or a text that is empty,
    ``null``, ``""``, ``''`` or ``{}``, possibly followed by stray quotes (vLLM's tool parsers
    emit ``{}""`` for a tool without parameters)."""
    if sent is None or sent == {}:
        return True
    return isinstance(sent, str) and _EMPTY_ARGUMENTS.fullmatch(sent) is not None


JSON_INT_DIGITS = 4300
"""Digits of the longest integer a run record holds: Python writes no more as text (its
default ``sys.get_int_max_str_digits()``) and pydantic's JSON reader reads no more."""


_LONGEST = 10**JSON_INT_DIGITS


def _too_long(value: int) -> bool:
    return value.bit_length() > 14_000 and abs(value) >= _LONGEST


def _int_digits(value: int) -> int:
    """Decimal digits of ``value`` (about: counted from its bits without writing it as text,
    which Python refuses past its limit)."""
    return int(value.bit_length() * math.log10(2)) + 1


def unrecordable(value: Any, where: str = "") -> str | None:
    """What in a JSON value cannot be recorded as sent, or ``None``: NaN or ±Infinity (not
    JSON numbers, RFC 8259 §6: written as ``null`` they would record another call), an integer
    of more than :data:`JSON_INT_DIGITS` digits. Searched through lists and dict values; the
    answer names the place (``at 'x'``, ``at 'xs[2]'``)."""
    at = f" at {where!r}" if where else ""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and _too_long(value):
        return f"an integer of {_int_digits(value):,} digits{at}, more than the {JSON_INT_DIGITS:,} a recorded JSON number may have"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{recordable(value)}{at}, which is not a JSON number (RFC 8259: no NaN or Infinity)"
    if isinstance(value, dict):
        for k, v in value.items():
            found = unrecordable(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = unrecordable(v, f"{where}[{i}]")
            if found:
                return found
    return None


def recordable(value: Any) -> Any:
    """A copy of ``value`` that JSON can write and read back: what :func:`unrecordable` finds
    is replaced by a string naming it (``"<integer of 5,000 digits>"``, ``"NaN"``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and _too_long(value):
        return f"<integer of {_int_digits(value):,} digits>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("nan", "NaN").replace("inf", "Infinity")
    if isinstance(value, dict):
        return {k: recordable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [recordable(v) for v in value]
    return value


def quote_sent(sent: Any, max_chars: int = SHOWN_SENT_CHARS) -> str:
    """What the model sent, quoted for a message: its text (a JSON value is written as JSON),
    cut to ``max_chars`` characters."""
    if not isinstance(sent, str):
        try:
            sent = json.dumps(recordable(sent), ensure_ascii=False)
        except (TypeError, ValueError):
            sent = repr(recordable(sent))
    if len(sent) > max_chars:
        sent = f"{sent[:max_chars]}… ({len(sent) - max_chars:,} more characters)"
    return repr(sent)


def read_arguments(name: str, sent: Any) -> tuple[dict[str, Any], str | None]:
    """The arguments of a call of tool ``name`` from what the model sent, or why they are
    unusable. The one rule every agent applies.

    * a JSON object (a dict, or a text holding one, also once more JSON-encoded as a string)
      is the arguments;
    * empty or null arguments (see :func:`empty_arguments`) are ``{}``: right for a tool
      without parameters, and a tool with parameters reports each missing one;
    * anything else (a list, a number, a string, text that is not JSON) is unusable, with one
      message naming the tool and quoting what was sent.

    Arguments that cannot be recorded as sent (NaN, ±Infinity, an integer of more than
    :data:`JSON_INT_DIGITS` digits: :func:`unrecordable`) are unusable too: the model's
    mistake, never a crash or a changed call in the record.

    Returns:
        ``(arguments, None)``, or ``({}, reason)`` for unusable arguments.
    """
    arguments, problem = _read_arguments(name, sent)
    if problem is None:
        found = unrecordable(arguments)
        if found:
            return {}, f"arguments of {name!r} hold {found}"
    return arguments, problem


def _read_arguments(name: str, sent: Any) -> tuple[dict[str, Any], str | None]:
    if isinstance(sent, dict):
        return sent, None
    if empty_arguments(sent):
        return {}, None
    value = sent
    if isinstance(sent, str):
        try:
            value = json.loads(sent)
            if isinstance(value, str) and not empty_arguments(value):
                value = json.loads(value)  # a JSON object encoded twice
        except (json.JSONDecodeError, RecursionError):
            return {}, f"arguments of {name!r} must be a JSON object, got {quote_sent(sent)} (not valid JSON)"
        except ValueError as exc:  # a number beyond Python's integer-text limit (4,300 digits)
            return {}, f"arguments of {name!r} cannot be read: {exc}; got {quote_sent(sent)}"
        if isinstance(value, dict):
            return value, None
        if empty_arguments(value):
            return {}, None
    return {}, f"arguments of {name!r} must be a JSON object, got {quote_sent(sent)}"


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
    except ValueError:  # not JSON, or a number beyond Python's integer-text limit
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
        except ValueError:  # not JSON, or a number beyond Python's integer-text limit
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
    except ValueError:  # not JSON, or a number beyond Python's integer-text limit
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
    text, reasoning = reply_parts(message)
    text, reasoning = without_surrogates(text), without_surrogates(reasoning)
    calls: list[ToolCall] = []
    sent = [(c.get("id"), c.get("name"), c.get("args")) for c in message.tool_calls]
    sent += [(c.get("id"), c.get("name"), c.get("args")) for c in message.invalid_tool_calls]
    for call_id, name, args in sent:
        name, args = without_surrogates(name or ""), without_surrogates(args)  # a lone one cannot be recorded
        arguments, unreadable = read_arguments(name, args)
        problem = unreadable
        if problem is None and tool_names and name not in tool_names:
            problem = unknown_tool(name, tool_names)
        # the text as sent only when it could not be read; read arguments are the call (so an
        # unknown tool's call sent with a JSON string is recorded as one sent as an object is)
        raw = (args if isinstance(args, str) else json.dumps(recordable(args))) if unreadable is not None else None
        calls.append(ToolCall(id=call_id or new_call_id(), name=name, arguments=arguments, malformed=problem, raw=raw))
    if not calls and text:
        calls = text_calls(text, tool_names)
    usage = message.usage_metadata or {}
    return ModelStep(
        text=text,
        tool_calls=calls,
        latency_s=latency_s,
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        reasoning=reasoning,
        reasoning_tokens=reasoning_tokens(message),
        tokens=message_tokens(message),
    )


TOKENS_KEY = "toolgym_tokens"
"""Key of ``response_metadata`` where a provider that records tokens (``--record-tokens``)
puts a :class:`~toolgym.records.TokenRecord` as a dict."""


def message_tokens(message: BaseMessage) -> TokenRecord | None:
    """The token record a provider attached to a message (see :data:`TOKENS_KEY`), else
    ``None``; a malformed record is dropped rather than failing the episode."""
    data = getattr(message, "response_metadata", {}).get(TOKENS_KEY)
    if not data:
        return None
    try:
        return TokenRecord.model_validate(data)
    except ValueError:
        return None


_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def hermes_message(text: str) -> AIMessage:
    """Parse raw model text in the Hermes / Qwen2.5 tool-call format into an ``AIMessage``.

    The format (Nous Research Hermes 2 Pro function calling, also Qwen2.5's chat template, and
    vLLM's ``--tool-call-parser hermes``) writes each call as
    ``<tool_call>\n{"name": <tool>, "arguments": <object>}\n</tool_call>``; a last block may
    be left unclosed. A block whose JSON is an object with a string ``name`` is a call, its
    ``arguments`` as sent (read by :func:`read_arguments` when recorded: an object, a string
    holding one, empty for none); any other block goes to ``invalid_tool_calls`` with its raw
    text, so :func:`model_step` records it as malformed. The text outside the blocks, stripped,
    is the message content.

    Reasoning (``<think>…</think>`` and the other forms of :func:`split_reasoning`) is split
    off first: a ``<tool_call>`` block written inside it is not a call. The reasoning goes to
    ``additional_kwargs["reasoning_content"]``, where :func:`model_step` records it.

    Args:
        text: The model's raw output.

    Returns:
        An ``AIMessage``; call ids are made up (:func:`new_call_id`).
    """
    from langchain_core.messages import AIMessage

    text, reasoning = split_reasoning(text)
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    outside: list[str] = []
    end = 0
    for match in _HERMES_BLOCK.finditer(text):
        outside.append(text[end:match.start()])
        end = match.end()
        raw = match.group(1)
        try:
            obj = json.loads(raw, strict=False)
        except (ValueError, RecursionError):  # not JSON, or a number beyond Python's integer-text limit
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments")
            if isinstance(args, dict):
                calls.append({"name": obj["name"], "args": args, "id": new_call_id(), "type": "tool_call"})
            else:  # as sent; read_arguments decides (a JSON string holding an object, empty, or bad)
                sent = args if isinstance(args, str) or args is None else json.dumps(args)
                invalid.append({"name": obj["name"], "args": sent, "id": new_call_id(), "type": "invalid_tool_call",
                                "error": None})
        else:
            invalid.append({"name": _named_tool(raw), "args": raw if obj is None else "(not a call)",
                            "id": new_call_id(), "type": "invalid_tool_call",
                            "error": 'tool call must be {"name": str, "arguments": object}'})
    outside.append(text[end:])
    extra = {"reasoning_content": reasoning} if reasoning else {}
    return AIMessage("".join(outside).strip(), tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=extra)


def openai_assistant_message(message: dict[str, Any]) -> AIMessage:
    """An ``AIMessage`` from one assistant message in the OpenAI chat format.

    Args:
        message: ``{"role": "assistant", "content": str | list | None, "tool_calls": [{"id",
            "type": "function", "function": {"name", "arguments": JSON string}}]}``; ``role``
            may be left out. ``arguments`` given as an object is accepted too.

    Returns:
        An ``AIMessage``: calls with arguments given as an object are ``tool_calls``; the
        others keep their arguments as sent in ``invalid_tool_calls``, for
        :func:`model_step` to read by :func:`read_arguments` (a JSON string holding an object
        is a well-formed call; text that is not JSON, a list, a number are malformed).

    Raises:
        ValueError: when ``message`` is not a dict, its role is not ``assistant``, or
            ``tool_calls`` is not a list of objects (the field is named).
    """
    from langchain_core.messages import AIMessage

    if not isinstance(message, dict):
        raise ValueError(f"an assistant message must be a dict, got {type(message).__name__}")
    role = message.get("role", "assistant")
    if role != "assistant":
        raise ValueError(f"message role must be 'assistant', got {role!r}")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list) or not all(isinstance(c, dict) for c in raw_calls):
        raise ValueError("tool_calls must be a list of objects")
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for raw in raw_calls:
        fn = raw.get("function") if isinstance(raw.get("function"), dict) else raw
        name, args, call_id = fn.get("name"), fn.get("arguments"), raw.get("id") or new_call_id()
        name = name if isinstance(name, str) else ""
        if isinstance(args, dict) and name:
            calls.append({"name": name, "args": args, "id": call_id, "type": "tool_call"})
        else:
            sent = args if isinstance(args, str) or args is None else json.dumps(args)
            invalid.append({"name": name, "args": sent, "id": call_id, "error": None, "type": "invalid_tool_call"})
    content = message.get("content")
    return AIMessage(content if content is not None else "", tool_calls=calls, invalid_tool_calls=invalid)

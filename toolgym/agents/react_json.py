"""The ReAct agent with JSON actions: a thought, then one JSON action blob per step.

ReAct (Yao et al., 2023, "ReAct: Synergizing Reasoning and Acting in Language Models",
arXiv:2210.03629) interleaves a free-text thought with one action and its observation. The
action is written as a JSON blob ``{"action": TOOL, "action_input": {ARGUMENTS}}``, the form
LangChain's JSON/structured-chat ReAct agents used for models without native tool calling::

    Thought: I need to type the first letter.
    Action:
    ```json
    {"action": "type_letter", "action_input": {"letter": "a"}}
    ```

The result comes back as ``Observation: ...``. A reply with ``Final Answer: ...`` (or the
action ``"Final Answer"``), or with no action at all, ends the episode.
"""

from __future__ import annotations

import json
import re
from typing import Any

from toolgym.agents import register_agent
from toolgym.agents.prompted import Parsed, PromptedAgent, parameter_schemas, tool_specs
from toolgym.environments import Environment
from toolgym.parsing import read_arguments
from toolgym.records import ToolCall, ToolStep

_FENCE = re.compile(r"```[a-zA-Z_]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
_ACTION = re.compile(r"^\s*Action\s*:", re.MULTILINE | re.IGNORECASE)
_FINAL = re.compile(r"Final Answer\s*:", re.IGNORECASE)
_SELF_OBSERVED = re.compile(r"^\s*Observation\s*:", re.MULTILINE | re.IGNORECASE)
_BLOB_START = re.compile(r"\{\s*\"action\"", re.IGNORECASE)

FINAL_ACTION = "final answer"


def describe_tools_text(env: Environment) -> str:
    """One line per tool: ``name: description``, then its arguments' JSON schema."""
    lines = []
    for spec in tool_specs(env):
        props = spec.get("parameters", {}).get("properties", {})
        args = {k: {kk: vv for kk, vv in v.items() if kk != "title"} for k, v in props.items()}
        lines.append(f"{spec['name']}: {spec.get('description', '')}")
        lines.append(f"    action_input: {json.dumps(args, ensure_ascii=False)}")
    return "\n".join(lines)


FORMAT = """\
Use this format for every reply:

Thought: what to do next and why
Action:
```json
{{"action": TOOL_NAME, "action_input": {{ARGUMENTS}}}}
```

Write exactly one action per reply, then stop: its result comes back as "Observation: ...".
TOOL_NAME is one of: {names}. ARGUMENTS is a JSON object ({{}} for a tool without arguments).
When you are finished, reply instead:

Thought: I am done
Final Answer: your answer

You have access to the following tools:

{tools}"""


def parse_react(text: str, env: Environment, call_id: str) -> Parsed:
    """Parse a ReAct reply into one action or a final answer.

    Only the first action counts; anything the model writes after it (including an invented
    ``Observation:``) is ignored, as a stop sequence would cut it. A blob that is not valid
    JSON, lacks a string ``"action"``, or whose ``action_input`` cannot be arguments becomes
    a malformed call. A string or number ``action_input`` is accepted for a tool with exactly
    one parameter (as LangChain's single-input tools allowed).

    Args:
        text: The model's reply.
        env: The environment (parameter names of the named tool).
        call_id: Id given to the parsed call.
    """
    observed = _SELF_OBSERVED.search(text)
    if observed:
        text = text[: observed.start()]
    final = _FINAL.search(text)
    blob_start, raw = _find_blob(text)
    action_at = _ACTION.search(text)
    first_action = min(p for p in (blob_start, action_at.start() if action_at else None, len(text)) if p is not None)
    if final and final.start() < first_action:
        return Parsed(final_answer=text[final.end() :].strip())
    if raw is None:
        if action_at:
            snippet = text[action_at.start() :].strip()
            return Parsed(calls=[ToolCall(id=call_id, name="", malformed="Action without a JSON blob", raw=snippet)])
        return Parsed(final_answer=text.strip())
    try:
        blob, _ = json.JSONDecoder().raw_decode(raw)
    except json.JSONDecodeError as exc:
        return Parsed(calls=[ToolCall(id=call_id, name=_guess_name(raw), malformed=f"action is not valid JSON: {exc.msg}", raw=raw)])
    if not isinstance(blob, dict) or not isinstance(blob.get("action"), str):
        return Parsed(calls=[ToolCall(id=call_id, name="", malformed='action blob needs a string "action"', raw=raw)])
    name = blob["action"].strip()
    action_input = blob.get("action_input", {})
    if name.lower() == FINAL_ACTION:
        answer = action_input if isinstance(action_input, str) else json.dumps(action_input, ensure_ascii=False)
        return Parsed(final_answer=answer.strip())
    args, problem = _arguments(name, action_input, list(parameter_schemas(env, name)))
    if problem:
        return Parsed(calls=[ToolCall(id=call_id, name=name, malformed=problem, raw=raw)])
    return Parsed(calls=[ToolCall(id=call_id, name=name, arguments=args)])


def _find_blob(text: str) -> tuple[int | None, str | None]:
    """Start and text of the first action blob: inside a code fence, else the first ``{``
    after ``Action:``, else the first ``{"action"`` anywhere."""
    for fence in _FENCE.finditer(text):
        body = fence.group(1).strip()
        if body.startswith("{"):
            return fence.start(), body
    action_at = _ACTION.search(text)
    if action_at:
        brace = text.find("{", action_at.end())
        if brace >= 0:
            return action_at.start(), text[brace:].strip()
        return None, None
    loose = _BLOB_START.search(text)
    if loose:
        return loose.start(), text[loose.start() :].strip()
    return None, None


def _guess_name(raw: str) -> str:
    match = re.search(r'"action"\s*:\s*"([^"]*)"', raw)
    return match.group(1) if match else ""


def _arguments(name: str, action_input: Any, params: list[str]) -> tuple[dict[str, Any], str | None]:
    """Arguments from ``action_input``: the shared rule (:func:`toolgym.parsing.read_arguments`),
    except that a tool with exactly one parameter may be given its value bare (a number, a
    boolean, or a text that is not a JSON object), as LangChain's single-input tools allowed."""
    if len(params) == 1 and not isinstance(action_input, dict | list) and action_input is not None:
        if isinstance(action_input, str):
            args, _ = read_arguments(name, action_input)
            if args:
                return args, None
        return {params[0]: action_input}, None
    return read_arguments(name, action_input)


@register_agent("react_json")
class ReactJsonAgent(PromptedAgent):
    """ReAct with JSON actions: one ``{"action", "action_input"}`` blob per model turn, its
    result returned as ``Observation: ...``; ``Final Answer:`` ends the episode. Malformed
    blobs are recorded as malformed calls and answered with an error observation."""

    def tools_prompt(self, env: Environment) -> str:
        names = ", ".join(spec["name"] for spec in tool_specs(env))
        return FORMAT.format(names=names, tools=describe_tools_text(env))

    def parse(self, text: str, env: Environment, turn: int) -> Parsed:
        return parse_react(text, env, self.call_id(turn, 0))

    def observation(self, results: list[tuple[ToolCall, ToolStep]]) -> str:
        return "\n".join(f"Observation: {step.output}" for _, step in results)

    def write_calls(self, calls: list[ToolCall]) -> str:
        blobs = [json.dumps({"action": c.name, "action_input": c.arguments}, ensure_ascii=False) for c in calls]
        return "\n".join(f"Action:\n```json\n{b}\n```" for b in blobs)

"""The XML-prompting agent: tools described in the system prompt, calls written as XML blocks.

This is how models without a native tool-calling interface were driven in the LangChain
tool-usage benchmark (Claude 2.1 through XML prompting). The model writes::

    <tool_call>
    <name>type_letter</name>
    <arguments>{"letter": "a"}</arguments>
    </tool_call>

(arguments as a JSON object, or as one ``<param>value</param>`` element per argument), any
number of blocks per reply, and gets the results back as ``<tool_result>`` blocks. A reply
without a block is the final answer (inside ``<final_answer>`` when the model uses it).
``<invoke>``/``<tool_name>``/``<parameters>`` are accepted as synonyms of
``<tool_call>``/``<name>``/``<arguments>``.
"""

from __future__ import annotations

import json
import re
from typing import Any
from xml.sax.saxutils import escape, unescape

from toolgym.agents import register_agent
from toolgym.agents.prompted import (
    Parsed,
    PromptedAgent,
    coerce_text_argument,
    parameter_schemas,
    tool_specs,
)
from toolgym.environments import Environment
from toolgym.parsing import quote_sent, read_arguments
from toolgym.records import ToolCall, ToolStep

_OPEN = re.compile(r"<(tool_call|invoke)>", re.IGNORECASE)
_NAME = re.compile(r"<(name|tool_name)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_ARGS = re.compile(r"<(arguments|parameters)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_ARGS_OPEN = re.compile(r"<(arguments|parameters)>", re.IGNORECASE)
_CHILD = re.compile(r"<([A-Za-z_][\w.\-]*)>(.*?)</\1>", re.DOTALL)
_FINAL = re.compile(r"<final_answer>(.*?)(?:</final_answer>|$)", re.DOTALL | re.IGNORECASE)
_SELF_OBSERVED = re.compile(r"<(tool_result|function_results)>", re.IGNORECASE)


def _type_text(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if kind in ("string", "integer", "number", "boolean"):
        return kind
    rest = {k: v for k, v in schema.items() if k not in ("description", "title")}
    return json.dumps(rest, ensure_ascii=False)


def describe_tools_xml(env: Environment) -> str:
    """The tools of ``env`` as an XML ``<tools>`` list (name, description, parameters with
    type, whether required, and description), generated from their JSON schemas."""
    lines = ["<tools>"]
    for spec in tool_specs(env):
        params = spec.get("parameters", {})
        required = set(params.get("required", []))
        lines += ["<tool>", f"<name>{escape(spec['name'])}</name>"]
        lines.append(f"<description>{escape(spec.get('description', ''))}</description>")
        lines.append("<parameters>")
        for pname, pschema in params.get("properties", {}).items():
            lines.append(
                f"<parameter><name>{escape(pname)}</name><type>{escape(_type_text(pschema))}</type>"
                f"<required>{str(pname in required).lower()}</required>"
                f"<description>{escape(pschema.get('description', ''))}</description></parameter>"
            )
        lines += ["</parameters>", "</tool>"]
    lines.append("</tools>")
    return "\n".join(lines)


FORMAT = """\
You can use the tools listed below. To call a tool, write a block exactly like this:
<tool_call>
<name>TOOL_NAME</name>
<arguments>{"PARAMETER": VALUE}</arguments>
</tool_call>
The arguments are a JSON object ({} for a tool without parameters). You may write several
blocks in one reply; they run in order and their results come back in <tool_result> blocks.
When you are finished, reply without any <tool_call> block and put your answer inside
<final_answer></final_answer>."""


def _malformed(id_: str, name: str, why: str, raw: str) -> ToolCall:
    return ToolCall(id=id_, name=name, malformed=why, raw=raw)


def parse_xml_calls(text: str, env: Environment, make_id) -> Parsed:
    """Parse a reply into ``<tool_call>`` blocks or a final answer.

    Text after the model starts writing a ``<tool_result>`` itself is ignored (the model is
    inventing observations). Blocks without a ``<name>``, without a closing tag, or whose
    arguments are neither a JSON object nor ``<param>`` elements become malformed calls.

    Args:
        text: The model's reply.
        env: The environment (parameter schemas for ``<param>`` values).
        make_id: ``index -> call id``.
    """
    observed = _SELF_OBSERVED.search(text)
    if observed:
        text = text[: observed.start()]
    calls: list[ToolCall] = []
    pos = 0
    while (start := _OPEN.search(text, pos)) is not None:
        tag = start.group(1)
        close = re.compile(rf"</{tag}>", re.IGNORECASE).search(text, start.end())
        body = text[start.end() : close.start()] if close else text[start.end() :]
        raw = text[start.start() : close.end()] if close else text[start.start() :]
        pos = close.end() if close else len(text)
        call_id = make_id(len(calls))
        name_match = _NAME.search(body)
        name = unescape(name_match.group(2).strip()) if name_match else ""
        if close is None:
            calls.append(_malformed(call_id, name, f"<{tag}> block is not closed", raw))
            continue
        if not name:
            calls.append(_malformed(call_id, "", f"<{tag}> block has no <name>", raw))
            continue
        args, problem = _arguments(body, name, parameter_schemas(env, name))
        if problem:
            calls.append(_malformed(call_id, name, problem, raw))
        else:
            calls.append(ToolCall(id=call_id, name=name, arguments=args))
    if calls:
        return Parsed(calls=calls)
    final = _FINAL.search(text)
    return Parsed(final_answer=(final.group(1) if final else text).strip())


def _arguments(body: str, name: str, schemas: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    match = _ARGS.search(body)
    if match is None:
        if _ARGS_OPEN.search(body):
            return {}, "<arguments> element is not closed"
        return {}, None  # no arguments given: fine for a tool without parameters
    inner = match.group(2).strip()
    if not inner.startswith("<"):  # JSON, or empty / null (no arguments): the shared rule
        return read_arguments(name, unescape(inner))
    children = _CHILD.findall(inner)
    if not children:
        return {}, (f"arguments of {name!r} must be a JSON object or one <parameter_name>value</parameter_name> "
                    f"element each, got {quote_sent(inner)}")
    args = {}
    for pname, value in children:
        args[pname] = coerce_text_argument(unescape(value.strip()), schemas.get(pname, {}))
    return args, None


@register_agent("xml_prompting")
class XmlPromptingAgent(PromptedAgent):
    """Tools described as XML in the system prompt; the model writes ``<tool_call>`` blocks
    which are parsed and executed in order; results return as ``<tool_result>`` blocks (an
    ``<error>`` element for a failed or malformed call). Malformed blocks are recorded as
    malformed calls."""

    def tools_prompt(self, env: Environment) -> str:
        return f"{FORMAT}\n\n{describe_tools_xml(env)}"

    def parse(self, text: str, env: Environment, turn: int) -> Parsed:
        return parse_xml_calls(text, env, lambda i: self.call_id(turn, i))

    def write_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f"<tool_call>\n<name>{escape(c.name)}</name>\n"
            f"<arguments>{escape(json.dumps(c.arguments, ensure_ascii=False))}</arguments>\n</tool_call>"
            for c in calls
        )

    def observation(self, results: list[tuple[ToolCall, ToolStep]]) -> str:
        blocks = []
        for call, step in results:
            element = "error" if step.error else "output"
            blocks.append(
                f"<tool_result>\n<name>{escape(call.name)}</name>\n"
                f"<{element}>{escape(step.output)}</{element}>\n</tool_result>"
            )
        return "\n".join(blocks)

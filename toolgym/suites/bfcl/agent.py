"""``bfcl_prompting``: the leaderboard's prompting mode, where the model is told about the
functions in its system prompt and answers with calls written as text,
``[func_name1(param=value, ...), func_name2(...)]``.

The system prompt says what the leaderboard's default prompt says (its task, the output format
``[func(a=1, b="x")]`` with nothing else in the reply, and the function documents as JSON with
the language hints of :func:`toolgym.suites.bfcl.data.language_document`), in toolgym's own
words: prompting-mode figures are comparable in format with the leaderboard's, not made with
its exact prompt. A system message of the entry's own question is kept after it, as the
leaderboard does. The reply is decoded as the checker decodes it
(:func:`toolgym.suites.bfcl.checker.decode`); the text itself is the result
(:func:`toolgym.suites.bfcl.results.result_of`).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from toolgym import Environment, ToolCall
from toolgym.agents.prompted import Parsed, PromptedAgent
from toolgym.suites.bfcl.checker import decode
from toolgym.suites.bfcl.data import language_document
from toolgym.suites.bfcl.results import PROMPTING_AGENT

__all__ = ["BFCLPromptingAgent", "PROMPT"]

PROMPT = """You compose function calls. Given a question and a set of functions, decide which \
calls serve the question and write them. If none of the functions fits, or the question lacks \
a parameter the function needs, say so in plain words instead.

Write the calls, and nothing else, in this form:
[func_name1(param_name1=value1, param_name2=value2), func_name2(param_name=value)]

The functions you can call, in JSON:
{functions}
"""
"""The system prompt (``{functions}``: the entry's function documents as JSON)."""


class BFCLPromptingAgent(PromptedAgent):
    """The prompting mode of the leaderboard on the ``bfcl`` environment: one reply, decoded
    into calls (none when it does not decode). Ends after the environment's one model turn."""

    name = PROMPTING_AGENT

    def tools_prompt(self, env: Environment) -> str:
        """The prompt with the entry's function documents (see :data:`PROMPT`).

        Raises:
            TypeError: for an environment that is not ``bfcl``.
        """
        entry = getattr(env, "entry", None)
        if entry is None:
            raise TypeError(f"{self.name} runs on the bfcl environment, not {env.name!r}")
        docs = [language_document(f, entry.language) for f in entry.functions]
        return PROMPT.format(functions=json.dumps(docs, ensure_ascii=False))

    def start_messages(self, episode: Any) -> list[BaseMessage]:
        """The system prompt first; a system message of the question follows it in the same
        system message, after a blank line."""
        messages = episode.env.prompt(episode.example)
        system = self.system_prompt(episode.env)
        if messages and isinstance(messages[0], SystemMessage):
            return [SystemMessage(system + "\n\n" + str(messages[0].content)), *messages[1:]]
        return [SystemMessage(system), *messages]

    def parse(self, text: str, env: Environment, turn: int) -> Parsed:
        """The calls of a reply in the prompting format; a reply that does not decode (or
        decodes to no call) is a final answer. Never raises."""
        entry = getattr(env, "entry", None)
        decoded = decode(text, entry.language if entry is not None else "python")
        if decoded.empty:
            return Parsed(final_answer=text)
        calls = []
        for i, call in enumerate(decoded.calls or []):
            name, args = next(iter(call.items()))
            calls.append(ToolCall(id=self.call_id(turn, i), name=str(name), arguments=_json_safe(args)))
        return Parsed(calls=calls)

    def observation(self, results: list[tuple[ToolCall, Any]]) -> str:
        """The acknowledgements, one per line (the episode ends after them)."""
        return "\n".join(step.output for _, step in results)


def _json_safe(value: Any) -> Any:
    """Tuples as lists, other non-JSON values as text (a call's arguments are recorded as JSON)."""
    return json.loads(json.dumps(value, default=str))


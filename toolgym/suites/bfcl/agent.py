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

from toolgym import Agent, Environment, Episode, ToolCall
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


def tools_prompt(env: Environment) -> str:
    """The prompt with the entry's function documents (see :data:`PROMPT`).

    Raises:
        TypeError: for an environment that is not ``bfcl``.
    """
    entry = getattr(env, "entry", None)
    if entry is None:
        raise TypeError(f"{PROMPTING_AGENT} runs on the bfcl environment, not {env.name!r}")
    docs = [language_document(f, entry.language) for f in entry.functions]
    return PROMPT.format(functions=json.dumps(docs, ensure_ascii=False))


def parse_reply(text: str, env: Environment) -> tuple[list[ToolCall], str | None]:
    """The calls of a reply in the prompting format, ids ``bfcl_prompting_1_<i>`` (the one
    turn), or no call and the reply as the final answer when it does not decode (or decodes
    to no call). Never raises."""
    entry = getattr(env, "entry", None)
    decoded = decode(text, entry.language if entry is not None else "python")
    if decoded.empty:
        return [], text
    calls = []
    for i, call in enumerate(decoded.calls or []):
        name, args = next(iter(call.items()))
        calls.append(ToolCall(id=f"{PROMPTING_AGENT}_1_{i}", name=str(name), arguments=_json_safe(args)))
    return calls, None


class BFCLPromptingAgent(Agent):
    """The prompting mode of the leaderboard on the ``bfcl`` environment: one reply, decoded
    into calls (none when it does not decode). Ends after the environment's one model turn.

    It plays through a :class:`toolgym.agents.prompted.PromptedAgent` built on first use, so
    declaring the suite loads no agent stack (langgraph, langchain-core) for commands that only
    read runs."""

    name = PROMPTING_AGENT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop: Any = None

    async def play(self, episode: Episode) -> None:
        """Play the episode with the prompted loop (system prompt, one reply, its calls)."""
        if self._loop is None:
            self._loop = _prompted_loop()(self.model, self.model_spec, self.max_steps)
        await self._loop.play(episode)


def _prompted_loop() -> type:
    """The :class:`~toolgym.agents.prompted.PromptedAgent` subclass that plays the episodes."""
    from langchain_core.messages import SystemMessage

    from toolgym.agents.prompted import Parsed, PromptedAgent

    class Loop(PromptedAgent):
        name = PROMPTING_AGENT

        def tools_prompt(self, env: Environment) -> str:
            return tools_prompt(env)

        def start_messages(self, episode: Episode) -> list:
            # the system prompt first; a system message of the question follows it, after a blank line
            messages = episode.env.prompt(episode.example)
            system = self.system_prompt(episode.env)
            if messages and isinstance(messages[0], SystemMessage):
                return [SystemMessage(system + "\n\n" + str(messages[0].content)), *messages[1:]]
            return [SystemMessage(system), *messages]

        def parse(self, text: str, env: Environment, turn: int) -> Parsed:
            calls, answer = parse_reply(text, env)
            return Parsed(calls=calls, final_answer=answer)

        def observation(self, results: list) -> str:
            return "\n".join(step.output for _, step in results)

    return Loop


def _json_safe(value: Any) -> Any:
    """Tuples as lists, other non-JSON values as text (a call's arguments are recorded as JSON)."""
    return json.loads(json.dumps(value, default=str))

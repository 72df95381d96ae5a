"""A scripted chat model: replays prepared turns. The test double for model answers, and the
``scripted:PATH`` model spec for reproducing a recorded conversation without a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from toolgym.parsing import is_observation, plays_the_user
from toolgym.providers import ModelSettings, register_provider

Turn = dict[str, Any]


def to_message(turn: Turn | AIMessage | str) -> AIMessage:
    """Build an AIMessage from a scripted turn.

    A turn is a string (text only), an AIMessage, or ``{"content": str, "tool_calls": [{"name",
    "args"}], "invalid_tool_calls": [{"name", "args": str}]}``.
    """
    if isinstance(turn, AIMessage):
        return turn
    if isinstance(turn, str):
        return AIMessage(turn)
    calls = [
        {"name": c["name"], "args": c.get("args", c.get("arguments", {})), "id": c.get("id", f"call_{i}"), "type": "tool_call"}
        for i, c in enumerate(turn.get("tool_calls", []))
    ]
    invalid = [
        {"name": c.get("name"), "args": c.get("args"), "id": c.get("id", f"bad_{i}"), "error": c.get("error"), "type": "invalid_tool_call"}
        for i, c in enumerate(turn.get("invalid_tool_calls", []))
    ]
    return AIMessage(turn.get("content", ""), tool_calls=calls, invalid_tool_calls=invalid)



def _short(text: Any, limit: int = 80) -> str:
    """``repr`` of ``text``, cut to about ``limit`` characters."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


class ScriptedChatModel(BaseChatModel):
    """Answers from a script, statelessly, so it is safe under concurrency.

    The turn played is chosen by counting the AI messages after the last human message of the
    input; with ``by_input``, the script is looked up by that human message's text first.
    Human messages marked as tool observations (``additional_kwargs["toolgym"] ==
    "observation"``, sent by the prompted agents) are not requests and do not reset the count.

    Playing a simulated user (``--user-model scripted:FILE``; the conversation starts with the
    system message of :class:`toolgym.users.ModelUser`, :func:`toolgym.parsing.plays_the_user`),
    the roles are flipped: ``by_input`` is keyed on the agent's last answer (its script's entry
    k is the reply to the (k+1)-th time the agent gave that answer), and ``turns`` has one entry
    per user turn, the first for user turn 2 (turn 1 is the example's ``input``).

    Raises ``IndexError`` when no turn is left (the episode ends in ``error``), saying which
    script ran out, or which text no ``by_input`` key matched.

    Attributes:
        turns: The default script (list of turns, see :func:`to_message`).
        by_input: Scripts keyed by the user's request text.
        repeat_last: When the script is exhausted, repeat its last turn (to test step limits);
            otherwise an exhausted script raises ``IndexError`` (the episode ends in ``error``).
    """

    turns: list[Any] = Field(default_factory=list)
    by_input: dict[str, list[Any]] = Field(default_factory=dict)
    repeat_last: bool = False

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        """Scripts ignore the tools; returns the model itself."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last_human = max(
            (i for i, m in enumerate(messages) if isinstance(m, HumanMessage) and not is_observation(m)),
            default=-1,
        )
        request = messages[last_human].content if last_human >= 0 else ""
        keyed = isinstance(request, str) and request in self.by_input
        script = self.by_input[request] if keyed else self.turns
        user = plays_the_user(messages)
        if not user:
            turn_index = sum(isinstance(m, AIMessage) for m in messages[last_human + 1 :])
        elif keyed:  # the reply to the k-th time the agent gave this answer
            turn_index = sum(isinstance(m, HumanMessage) and m.content == request for m in messages[:last_human])
        else:  # one entry per user turn; the user's first message (turn 1) is the example's input, not scripted
            turn_index = max(sum(isinstance(m, AIMessage) for m in messages) - 1, 0)
        if turn_index >= len(script):
            if not (self.repeat_last and script):
                raise IndexError(self._exhausted(turn_index, request, keyed, user))
            turn_index = len(script) - 1
        return ChatResult(generations=[ChatGeneration(message=to_message(script[turn_index]))])

    def _exhausted(self, turn_index: int, request: Any, keyed: bool, user: bool) -> str:
        """Why no turn can be played: which script ran out, or which text no ``by_input`` key
        matched (a simulated user's script is keyed on the agent's last answer)."""
        what = "the agent's last answer" if user else "the request (the last user message)"
        wanted = f"user turn {turn_index + 2}" if user and not keyed else f"turn {turn_index + 1}"
        if keyed:
            return f"scripted model has no {wanted} (the by_input script of {_short(request)} has {len(self.by_input[request])})"
        if self.by_input:
            keys = ", ".join(_short(k) for k in list(self.by_input)[:5]) + (", ..." if len(self.by_input) > 5 else "")
            return (f"scripted model has no {wanted}: no by_input key matches {what} {_short(request)} "
                    f"(the keys: {keys}; a key is the whole text), and 'turns' has {len(self.turns)}")
        if user:
            return (f"scripted model has no {wanted} ('turns' has {len(self.turns)}: its first entry is the user's "
                    "message at user turn 2, the input being turn 1)")
        return f"scripted model has no {wanted} (script has {len(self.turns)})"

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        """Async-native: answers in the event loop (no worker thread per turn)."""
        return self._generate(messages, stop, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedChatModel:
        """Load ``{"turns": [...], "by_input": {...}, "repeat_last": bool}`` or a bare list of
        turns from a JSON file.

        Raises:
            ValueError: naming the file when it is not such a JSON document.
        """
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read scripted model: {exc}") from None
        if isinstance(doc, list):
            doc = {"turns": doc}
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: expected a JSON list of turns or an object with 'turns'")
        unknown = sorted(set(doc) - {"turns", "by_input", "repeat_last"})
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; a script has "
                             "'turns', 'by_input' and 'repeat_last'")
        from pydantic import ValidationError

        try:
            model = cls(**doc)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(map(str, err["loc"])) or "script"
            raise ValueError(f"{path}: {where}: {err['msg']}") from None
        for where, turns in [("turns", model.turns), *((f"by_input[{k!r}]", v) for k, v in model.by_input.items())]:
            for i, turn in enumerate(turns):
                try:
                    to_message(turn)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    raise ValueError(f"{path}: {where}[{i}]: {'.'.join(map(str, err['loc']))}: {err['msg']} "
                                     "(tool call arguments are an object; put text in invalid_tool_calls)") from None
                except (ValueError, TypeError, AttributeError, KeyError):
                    raise ValueError(f"{path}: {where}[{i}]: a turn is a string or an object with 'content', "
                                     "'tool_calls' [{name, args}] and 'invalid_tool_calls' [{name, args}]") from None
        return model


@register_provider("scripted")
def scripted_provider(name: str, settings: ModelSettings) -> ScriptedChatModel:
    """``scripted:PATH``: a :class:`ScriptedChatModel` loaded from a JSON file."""
    if not name:
        raise ValueError("scripted models need a file: --model scripted:PATH")
    return ScriptedChatModel.from_file(name)

"""The user of a multi-turn episode: who sends user turn 2, 3, ... (turn 1 is the example's
``input``).

A user is a small protocol (:class:`User`): given the conversation so far, the next user
message, or ``None`` to end the conversation. Two implementations:

- :class:`ScriptedUser`: the example's ``turns``, in order.
- :class:`ModelUser`: a chat model (``--user-model SPEC``, any provider spec, ``scripted:`` in
  tests) playing the user from the example's ``user.instructions``. It sees only the
  conversation (the user's messages and the agent's answers, never the tools, tool results or
  the state), and ends it with :data:`STOP` or at ``user.max_turns``.

The episode loop that alternates user and agent is :func:`toolgym.agents.play_turns`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from toolgym.records import Example

__all__ = ["STOP", "ModelUser", "ScriptedUser", "User", "UserModelError", "UserReply", "make_user", "user_prompt"]

STOP = "###STOP###"
"""The token a simulated user writes to end the conversation (τ²-bench's ``###STOP###``). It
never reaches the agent."""


class UserModelError(RuntimeError):
    """The simulated user's model failed (a provider error after its retries, an empty reply):
    an infrastructure error. The episode ends with status ``error`` (never graded; ``--resume``
    plays it again)."""


@dataclass(frozen=True)
class UserReply:
    """The user's next message.

    Attributes:
        text: The message (the stop token removed).
        stop: True when the user ended the conversation with this message: an empty ``text``
            (a bare stop token) ends it at once; a message with text is delivered and the
            agent answers it before the conversation ends.
        latency_s / input_tokens / output_tokens: The simulated user's model call; ``None``
            for a scripted message.
        reasoning: The simulated user's reasoning text, kept out of ``text``.
    """

    text: str
    stop: bool = False
    latency_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning: str | None = None


@runtime_checkable
class User(Protocol):
    """Who sends the user turns after the first.

    Attributes:
        max_turns: The most user turns of the conversation, turn 1 (the input) included.
        model_spec: The simulated user's model spec, recorded in the trajectory (``None`` for
            scripted turns).
    """

    max_turns: int
    model_spec: str | None

    async def reply(self, conversation: list[dict[str, str]], turn: int) -> UserReply | None:
        """The message of user turn ``turn`` (2 or more), or ``None`` to end the conversation.

        Args:
            conversation: What the user has seen: ``{"role": "user" | "assistant",
                "content": str}`` in order, the user's own messages and the agent's answers
                (its text when it stopped calling tools), nothing else.
            turn: The user turn asked for.

        Raises:
            UserModelError: when a model playing the user fails.
        """
        ...


@dataclass
class ScriptedUser:
    """The example's scripted ``turns``: turn ``k`` (k >= 2) is ``turns[k - 2]``."""

    turns: list[str]
    model_spec: str | None = None

    @property
    def max_turns(self) -> int:
        """1 + the scripted turns."""
        return 1 + len(self.turns)

    async def reply(self, conversation: list[dict[str, str]], turn: int) -> UserReply | None:
        """The scripted message of ``turn``; ``None`` after the last."""
        return UserReply(self.turns[turn - 2]) if 2 <= turn <= self.max_turns else None


def user_prompt(instructions: str) -> str:
    """The simulated user's system prompt: the role, the rules, then ``instructions``.

    The rules answer the simulator failures seen in τ²-bench's issues: stopping as soon as the
    user confirms an action, before the agent has taken it (sierra-research/tau2-bench issue
    182, pull request 297), and drifting from the scenario (inventing facts, giving everything
    at once, taking over the agent's work).
    """
    return (
        "You are playing a user who talks to an assistant, in a test of the assistant. Write only the user's "
        "next message, in plain text, as the user would type it: no role names, no explanations, no notes "
        "about the test.\n\n"
        "Rules:\n"
        "- Follow the scenario below. Say only what the scenario says you know; never invent names, numbers or "
        "facts. If the assistant asks for something the scenario does not give, say you do not know.\n"
        "- Give information when it is needed, a little at a time, not the whole scenario at once.\n"
        "- You cannot see the assistant's tools or systems; judge only by what it tells you. Do not do the "
        "assistant's work for it, and do not correct its mistakes for it.\n"
        f"- When everything the scenario asks for is done (the assistant has said so, not only asked you to "
        f"confirm), or the assistant says it cannot be done, end the conversation: write {STOP} alone, or after "
        f"a last message you want the assistant to act on. Confirming an action is not the end: wait for the "
        f"assistant to say it has taken it.\n"
        f"- Never write {STOP} for any other reason.\n\n"
        f"Scenario:\n{instructions.strip()}"
    )


class ModelUser:
    """A chat model playing the user from an example's ``user`` instructions.

    Each reply is one stateless call: the system prompt (:func:`user_prompt`, the
    instructions in it, sent again at every turn) and the conversation with the roles
    flipped (the agent's answers as the model's "user" messages, the user's own messages as
    its replies), as τ²-bench's ``UserSimulator`` does. Reasoning text is split off
    (:func:`toolgym.parsing.reply_parts`) and never sent. A reply holding :data:`STOP` ends
    the conversation (its text, if any, delivered first; see :class:`UserReply`).

    Args:
        model: A langchain-core chat model.
        instructions: The scenario.
        max_turns: The most user turns, turn 1 (the input) included.
        model_spec: The model's spec, recorded in trajectories.
    """

    def __init__(self, model: Any, instructions: str, max_turns: int, model_spec: str | None = None) -> None:
        self.model = model
        self.instructions = instructions
        self.max_turns = max_turns
        self.model_spec = model_spec

    async def reply(self, conversation: list[dict[str, str]], turn: int) -> UserReply | None:
        """The model's next user message; ``None`` past ``max_turns``.

        Raises:
            UserModelError: for a failing model call or an empty reply without the stop token.
        """
        if turn > self.max_turns:
            return None
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        from toolgym.parsing import USER_SIMULATOR_MARK, reply_parts

        messages: list[Any] = [SystemMessage(user_prompt(self.instructions), additional_kwargs=dict(USER_SIMULATOR_MARK))]
        for message in conversation:  # the roles flipped: the model plays the user
            kind = AIMessage if message["role"] == "user" else HumanMessage
            messages.append(kind(message["content"] or "(no answer)"))
        start = time.perf_counter()
        try:
            answer = await self.model.ainvoke(messages)
        except Exception as exc:
            raise UserModelError(f"the user model {self.model_spec or type(self.model).__name__} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        latency = time.perf_counter() - start
        text, reasoning = reply_parts(answer)
        usage = getattr(answer, "usage_metadata", None) or {}
        stop = STOP in text
        text = text.replace(STOP, "").strip()
        if not text and not stop:
            raise UserModelError(f"the user model {self.model_spec or type(self.model).__name__} wrote an empty "
                                 f"message at user turn {turn} (neither a message nor {STOP})")
        return UserReply(text, stop, latency, usage.get("input_tokens"), usage.get("output_tokens"), reasoning)


def make_user(example: Example, user_model: Any = None, user_model_spec: str | None = None) -> User | None:
    """The user of ``example``'s episode: :class:`ScriptedUser` for ``turns``,
    :class:`ModelUser` for ``user``, ``None`` for a single-turn example.

    Args:
        user_model: The chat model that plays a simulated user (``--user-model``).
        user_model_spec: Its spec, recorded.

    Raises:
        ValueError: for an example with ``user`` and no user model.
    """
    if example.turns is not None:
        return ScriptedUser(list(example.turns))
    if example.user is not None:
        if user_model is None:
            raise ValueError(f"example {example.id!r} has a simulated user: give a user model (--user-model SPEC)")
        return ModelUser(user_model, example.user.instructions, example.user.max_turns, user_model_spec)
    return None

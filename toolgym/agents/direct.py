"""The direct agent: one chat-model turn without tools; its text is the answer.

For tool-free tasks scored by answer extraction (multiple choice, last word). The model is
not bound to any tool (some APIs reject an empty tool list) and stops at the environment's
``stop_sequences`` when it has any (for example the start of a next exam question).
"""

from __future__ import annotations

import time

from toolgym.agents import Agent, Episode, register_agent
from toolgym.parsing import message_tokens, reasoning_tokens, reply_parts
from toolgym.records import ModelStep


@register_agent("direct")
class DirectAgent(Agent):
    """Sends the environment's prompt (instructions as the system message, the example's input
    as the user message) once and records the reply as the final answer. Tool calls in the
    reply are ignored; the episode is ``completed`` after one model turn."""

    async def answer(self, episode: Episode) -> None:
        """One model turn on the episode's prompt; the reply text is the final answer."""
        episode.messages = episode.env.prompt(episode.example)
        stop = list(episode.env.stop_sequences) or None
        start = time.perf_counter()
        message = await self.model.ainvoke(episode.messages, stop=stop)
        episode.messages.append(message)
        text, reasoning = reply_parts(message)  # the reasoning is never the answer
        usage = getattr(message, "usage_metadata", None) or {}
        episode.record_model(
            ModelStep(
                text=text,
                latency_s=time.perf_counter() - start,
                input_tokens=usage.get("input_tokens"),
                output_tokens=usage.get("output_tokens"),
                reasoning=reasoning,
                reasoning_tokens=reasoning_tokens(message),
                tokens=message_tokens(message),
            )
        )
        episode.final_answer = text

    async def play(self, episode: Episode) -> None:
        await self.answer(episode)

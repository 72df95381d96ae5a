"""The oracle agent: replays an example's expected calls through the tool-calling graph."""

from __future__ import annotations

from typing import Any

from toolgym.agents import Episode, register_agent
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.replay import reference_call_groups


def oracle_script(example, turn: int | None = None) -> list[dict[str, Any]]:
    """The expected calls, all at once as parallel tool calls (one per model turn when the
    example's milestones read results with ``$from``: :func:`toolgym.replay.reference_call_groups`),
    then the reference answer as text.

    Args:
        example: The example.
        turn: In a multi-turn episode, the user turn being answered: only the calls of that
            turn (``ToolCallSpec.turn``; none given is turn 1), and the reference answer only
            at the last scripted turn (at every turn for a simulated user). ``None``: every
            call, then the reference.

    Raises:
        ValueError: if the example expects steps but has no ``expected_calls`` to replay.
    """
    if example.expected_steps and example.expected_calls is None:
        raise ValueError(f"example {example.id!r} has no expected_calls for the oracle to replay")
    calls = [
        {"name": c.name, "args": c.arguments, "id": f"oracle_{i}"}
        for i, c in enumerate(example.expected_calls or [])
        if turn is None or (c.turn or 1) == turn
    ]
    last = turn is None or example.turns is None or turn == 1 + len(example.turns)
    answer = "" if example.reference is None or not last else str(example.reference)
    return [{"content": "", "tool_calls": group} for group in reference_call_groups(example, calls)] + [{"content": answer}]


@register_agent("oracle")
class OracleAgent(ToolCallingAgent):
    """A perfect reference trajectory: the example's expected calls, then its reference
    answer; in a multi-turn episode, each user turn's calls in that turn. Checks graders,
    datasets and the pipeline without a model."""

    needs_model = False

    @staticmethod
    def unplayable(examples: list[Any]) -> list[str]:
        """Ids of the examples the oracle cannot replay (steps expected, no calls given); the
        runner refuses such a dataset before playing anything."""
        return [ex.id for ex in examples if ex.expected_steps and ex.expected_calls is None]

    def model_for(self, episode: Episode) -> ScriptedChatModel:
        """The script of the user turn being played (every call in a single-turn episode)."""
        turn = episode.turn if episode.example.multi_turn else None
        return ScriptedChatModel(turns=oracle_script(episode.example, turn))

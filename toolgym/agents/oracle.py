"""The oracle agent: replays an example's expected calls through the tool-calling graph."""

from __future__ import annotations

from typing import Any

from toolgym.agents import Episode, register_agent
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.replay import reference_turns


def oracle_script(example) -> list[dict[str, Any]]:
    """The expected calls, all at once as parallel tool calls (one per turn when the
    example's milestones read results with ``$from``: :func:`toolgym.replay.reference_turns`),
    then the reference answer as text.

    Raises:
        ValueError: if the example expects steps but has no ``expected_calls`` to replay.
    """
    if example.expected_steps and example.expected_calls is None:
        raise ValueError(f"example {example.id!r} has no expected_calls for the oracle to replay")
    calls = [
        {"name": c.name, "args": c.arguments, "id": f"oracle_{i}"}
        for i, c in enumerate(example.expected_calls or [])
    ]
    answer = "" if example.reference is None else str(example.reference)
    return [{"content": "", "tool_calls": turn} for turn in reference_turns(example, calls)] + [{"content": answer}]


@register_agent("oracle")
class OracleAgent(ToolCallingAgent):
    """A perfect reference trajectory: the example's expected calls, then its reference
    answer. Checks graders, datasets and the pipeline without a model."""

    needs_model = False

    @staticmethod
    def unplayable(examples: list[Any]) -> list[str]:
        """Ids of the examples the oracle cannot replay (steps expected, no calls given); the
        runner refuses such a dataset before playing anything."""
        return [ex.id for ex in examples if ex.expected_steps and ex.expected_calls is None]

    def model_for(self, episode: Episode) -> ScriptedChatModel:
        return ScriptedChatModel(turns=oracle_script(episode.example))

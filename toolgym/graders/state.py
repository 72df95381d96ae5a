"""Final-state grader (LangChain tool-usage benchmark: "the state of the environment")."""

from __future__ import annotations

from dataclasses import dataclass

from toolgym.graders import make_score, register_grader
from toolgym.records import Example, Score, Trajectory


@register_grader("final_state")
@dataclass(frozen=True)
class FinalState:
    """1.0 when the environment's final state equals ``example.expected_state``, else 0.0.

    Compares only the keys present in the expected state. Does not apply (returns ``None``)
    to examples without an expected state.
    """

    name = "final_state"

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        if example.expected_state is None:
            return None
        actual = {k: trajectory.final_state.get(k) for k in example.expected_state}
        ok = actual == example.expected_state
        diff = {
            k: {"expected": v, "actual": actual[k]}
            for k, v in example.expected_state.items()
            if actual[k] != v
        }
        explanation = "final state matches" if ok else f"final state differs in {sorted(diff)}"
        return make_score(self, trajectory, float(ok), explanation, diff=diff)

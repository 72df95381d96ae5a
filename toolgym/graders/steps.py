"""Intermediate-step graders (LangChain tool-usage benchmark: "intermediate step correctness"
and "# steps / # expected steps")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from toolgym.graders import make_score, register_grader
from toolgym.records import Example, Measure, Score, Trajectory


def first_divergence(expected: list[str], actual: list[str]) -> int | None:
    """Index of the first position where two tool-name sequences differ, or ``None``."""
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        if e != a:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


COMPARES = (
    "tool names only, not arguments; trajectory_match compares those (--trajectory-mode strict where an "
    "example has no milestones)"
)
"""What ``steps_exact`` compares, shown beside its rule in every view."""

MALFORMED = "(malformed)"
REJECTED = "{name} (rejected)"


def step_names(trajectory: Trajectory) -> list[str]:
    """The tool names called, in order; a malformed call (never executed) reads
    ``"(malformed)"`` and a call the environment refused before running the tool (an unknown
    tool, an extra or ill-typed argument) reads ``"NAME (rejected)"``, so neither can match an
    expected step: the step was not taken."""
    return [
        MALFORMED if s.malformed else REJECTED.format(name=s.name) if s.rejected else s.name
        for s in trajectory.tool_steps
    ]


@register_grader("steps_exact")
@dataclass(frozen=True)
class StepsExact:
    """1.0 when the tool names called equal ``expected_steps``: as sequences when
    ``order_matters`` (the default), as multisets otherwise. Every attempted tool call counts,
    including those whose tool reported an error; a malformed call (never executed) counts as
    ``"(malformed)"`` and a call refused for its arguments as ``"NAME (rejected)"``, so neither
    matches.

    Only the names: ``put(color, blue)`` where ``put(color, red)`` was expected scores 1.0.
    This is the LangChain tool-usage benchmark's "intermediate step correctness" (its
    ``expected_steps`` are tool names), kept as published; ``trajectory_match`` compares the
    arguments too (``expected_calls`` or milestones, docs/stepwise-grader.md). Does not apply
    to an example with ``milestones`` and no ``expected_steps`` (its task is given by the
    milestones), as ``step_ratio`` does not apply without expected steps."""

    name = "steps_exact"
    kept_details: ClassVar[tuple[str, ...]] = ("expected",)  # the views read the expected names
    measure: ClassVar[Measure] = Measure(
        reference="LangChain tool-usage benchmark, 'intermediate step correctness' (tool names)",
        compares=COMPARES,
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        expected = example.expected_steps
        if not expected and example.milestones is not None:
            return None  # the task is given by its milestones, not by a list of steps
        actual = step_names(trajectory)
        if example.order_matters:
            ok = actual == expected
            diverge = first_divergence(expected, actual)
        else:
            ok = Counter(actual) == Counter(expected)
            diverge = None
        if ok:
            explanation = f"{len(actual)} tool names as expected (arguments not compared)"
        elif diverge is not None:
            exp = expected[diverge] if diverge < len(expected) else "(end)"
            act = actual[diverge] if diverge < len(actual) else "(end)"
            explanation = f"step {diverge + 1}: expected {exp}, got {act}"
        else:
            explanation = "tool calls differ from the expected multiset"
        return make_score(
            self, trajectory, float(ok), explanation,
            expected=expected, actual=actual, first_divergence=diverge,
        )


@register_grader("step_ratio")
@dataclass(frozen=True)
class StepRatio:
    """Tool calls made divided by tool calls expected (LangChain tool-usage benchmark,
    "# steps / # expected steps"). 1.0 is optimal; above 1 means wasted steps, below 1 missing
    ones. Every attempted call counts, malformed ones included (they are wasted steps). Does not
    apply to examples that expect no tool call."""

    name = "step_ratio"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="target", target=1.0, pass_if="==", threshold=1.0,
        reference="LangChain tool-usage benchmark, '# steps / # expected steps'",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        expected = len(example.expected_steps)
        if expected == 0:
            return None
        made = len(trajectory.tool_steps)
        return make_score(
            self, trajectory, made / expected, f"{made} tool calls / {expected} expected",
            made=made, expected=expected,
        )

"""Two trajectories side by side: their tool steps paired, each pair marked same or different.

Pairing, in this order of preference:

1. **By milestone.** When both trajectories were graded by ``trajectory_match``, a tool step the
   alignment matched to a milestone is keyed by that milestone's id, so "the step that booked the
   hotel" pairs with the other run's booking step even when the two took other steps around it.
2. **By a sequence alignment of the tool calls.** Every other step is keyed by its call (tool
   name and arguments), and the two key sequences are aligned by
   :class:`difflib.SequenceMatcher` (Ratcliff and Obershelp's longest matching blocks, Python's
   standard library); where the calls differ, that stretch is aligned again by tool name alone.
   Steps in a matching block pair one to one, a replaced block pairs its steps in order, and
   what is left over stands alone (a step only one trajectory took).

A pair is ``same`` when both steps called the same tool with equal arguments, got the same
output and error flag, and (when both recorded one) made the same state change; otherwise
``different``, with the fields that differ named. A step on one side only is ``only_a`` or
``only_b``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any

from toolgym.records import Score, ToolStep, Trajectory


def milestone_keys(traj: Trajectory, scores: Sequence[Score]) -> list[str | None]:
    """The milestone each tool step matched (from the ``trajectory_match`` alignment), in tool
    step order; ``None`` for a step that matched none or when the trajectory was not graded so."""
    n = len(traj.tool_steps)
    match = next((s for s in scores if s.grader == "trajectory_match"), None)
    rows = match.details.get("alignment") if match is not None else None
    if not isinstance(rows, list) or len(rows) != n:
        return [None] * n
    return [r.get("milestone") if isinstance(r, dict) and not r.get("type") else None for r in rows]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _differences(a: ToolStep, b: ToolStep) -> list[str]:
    fields = []
    if a.name != b.name:
        fields.append("tool")
    if _canonical(a.arguments) != _canonical(b.arguments):
        fields.append("arguments")
    if a.output != b.output:
        fields.append("output")
    if a.error != b.error:
        fields.append("error")
    pa, pb = getattr(a, "state_patch", None), getattr(b, "state_patch", None)
    if pa is not None and pb is not None and _canonical(pa) != _canonical(pb):
        fields.append("state_patch")
    return fields


def align_steps(
    a: Trajectory, scores_a: Sequence[Score], b: Trajectory, scores_b: Sequence[Score]
) -> tuple[str, list[dict[str, Any]]]:
    """The tool steps of ``a`` and ``b`` paired (see the module docstring).

    Returns:
        tuple[str, list[dict]]: The method (``"milestones"`` when both carry a milestone
        alignment, else ``"sequence"``) and the pairs in order, each ``{"a": 0-based tool step
        index of a or None, "b": the same for b, "status": "same" | "different" | "only_a" |
        "only_b", "differences": [field...], "milestone": id or None}``.
    """
    steps_a, steps_b = a.tool_steps, b.tool_steps
    ma, mb = milestone_keys(a, scores_a), milestone_keys(b, scores_b)
    method = "milestones" if any(ma) and any(mb) else "sequence"
    full_a = [f"m:{m}" if m else f"c:{s.name}:{_canonical(s.arguments)}" for s, m in zip(steps_a, ma, strict=True)]
    full_b = [f"m:{m}" if m else f"c:{s.name}:{_canonical(s.arguments)}" for s, m in zip(steps_b, mb, strict=True)]
    name_a, name_b = [s.name for s in steps_a], [s.name for s in steps_b]
    pairs: list[dict[str, Any]] = []

    def pair(i: int | None, j: int | None) -> None:
        if i is not None and j is not None:
            diff = _differences(steps_a[i], steps_b[j])
            pairs.append({"a": i, "b": j, "status": "different" if diff else "same", "differences": diff,
                          "milestone": ma[i] if ma[i] and ma[i] == mb[j] else None})
        elif i is not None:
            pairs.append({"a": i, "b": None, "status": "only_a", "differences": [], "milestone": ma[i]})
        else:
            pairs.append({"a": None, "b": j, "status": "only_b", "differences": [], "milestone": mb[j]})

    def walk(a0: int, a1: int, b0: int, b1: int, level: int) -> None:
        keys = [(full_a, full_b), (name_a, name_b)][level]
        matcher = difflib.SequenceMatcher(a=keys[0][a0:a1], b=keys[1][b0:b1], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            i1, i2, j1, j2 = i1 + a0, i2 + a0, j1 + b0, j2 + b0
            if op == "replace" and level == 0:  # the calls differ: align these by tool name
                walk(i1, i2, j1, j2, 1)
            elif op in ("equal", "replace"):
                n = min(i2 - i1, j2 - j1)
                for k in range(n):
                    pair(i1 + k, j1 + k)
                for i in range(i1 + n, i2):
                    pair(i, None)
                for j in range(j1 + n, j2):
                    pair(None, j)
            elif op == "delete":
                for i in range(i1, i2):
                    pair(i, None)
            else:  # insert
                for j in range(j1, j2):
                    pair(None, j)

    walk(0, len(steps_a), 0, len(steps_b), 0)
    return method, pairs

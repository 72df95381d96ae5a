"""The per-example data of the HTML report, as JSON embedded in the page.

Two documents are embedded: a small *index* (one row per trajectory: run, example id, trial,
status, score values, whether it failed) parsed when the page opens, and the *traces* (every
step of every trajectory, example inputs and expected calls, score explanations) parsed only
when a trace is first opened. Both are escaped with :func:`script_json` so that no model or tool
text can close the ``<script type="application/json">`` element they travel in; the page shows
them with ``textContent`` only.

Pass and fail follow each grader's :class:`~toolgym.records.Measure` (its pass rule), computed
here once: the page never compares values itself.

Index format (``schema`` 2)::

    {"schema": 2, "graders": [name...], "rules": [rule text|null...] (per grader, the pass
     rule as "≥ 1", "≤ 0", "= 1"; null when no run gives it one),
     "runs": [{"label", "env", "dir", "graders": [...], "passFail": [graders with a pass rule]}...],
     "items": [[run, example_id, trial, status, n_calls, n_expected|null, failed 0|1,
                divergence_call|null, {grader_index: value|null}, {grader_index: passed 0|1},
                [first error type, step|null, text]|null, duration_s, tokens]...]}

where ``failed`` is :func:`~toolgym.views.rundata.is_failed` over every grader with a pass
rule and ``passed`` holds the scored values of graders with a pass rule; every field but the
divergence comes from :func:`~toolgym.views.rundata.trajectory_row`, the rows of ``toolgym
view`` too (:func:`item_of`).

Traces format: ``{"examples": [{"in": input, "exp": [[name, arguments]|name...]|null}...],
"traces": [trace...]}`` in ``items`` order, where a trace is ``{"x": example|null, "d":
duration_s, "e": error, "fa": final answer, "fs": final state, "dv": [call, reason]|null,
"sc": [[grader, value, explanation, passed 1|0|null]...], "s": [step...], "al": {"ms": [required
milestones never reached], "mo": [optional ones], "fe": first error text, "mh": [minefield
states reached at the end]} (when ``trajectory_match`` graded it), "sn": state note}``; a model step is ``{"m": text, "l":
latency_s, "ti"/"to": tokens, "r"/"rt": reasoning text and tokens, "nc": number of calls, "c": [[name, arguments, malformed, raw]...]
for calls that were never executed}``; a tool step is ``{"t": name, "a": arguments, "o":
output, "err": 1, "mf": malformed, "raw": raw, "al": alignment label (:func:`_label`), "sp":
[[op, path, before, after, has_before, has_after]...] its state change (absent: not recorded;
``[]``: unchanged; for move and copy ``[op, path, from, after, 1, 1]``), "spn": changes left
out}``; a user message of a multi-turn episode is ``{"u": text, "tn": its turn, "stop": 1 (the
simulated user's last message), "l": the simulated user's latency_s}``. Optional keys are left
out when empty.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from toolgym.graders.alignment import first_error_text
from toolgym.records import ModelStep, ToolCallSpec, Trajectory
from toolgym.views.rundata import RunView, first_call_divergence, pass_rule_text, state_changes

SCHEMA = 2
TRUNCATION_NOTE = "… [{n} more characters not included in the report]"


def script_json(value: Any) -> str:
    """JSON text safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` are
    written as ``\\u003c``, ``\\u003e``, ``\\u0026`` (the JSON stays equal), so neither
    ``</script>`` nor ``<!--`` can appear. Non-finite numbers become ``null``.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # NaN or infinity somewhere (a final state, an argument): JSON has none
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def clip(text: str | None, max_chars: int) -> str | None:
    """``text`` cut to ``max_chars`` characters with a note saying how much was left out."""
    if text is None or len(text) <= max_chars:
        return text
    return text[:max_chars] + TRUNCATION_NOTE.format(n=len(text) - max_chars)


def _size_at_least(value: Any, limit: int) -> int:
    """A lower bound of the length of ``value``'s JSON text, exact enough to compare with
    ``limit`` (stops counting once past it)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        total = 2
        for k, v in value.items():
            total += len(str(k)) + 4 + _size_at_least(v, limit - total)
            if total > limit:
                break
        return total
    if isinstance(value, list | tuple):
        total = 2
        for v in value:
            total += 1 + _size_at_least(v, limit - total)
            if total > limit:
                break
        return total
    return 8


def _clip_json(value: Any, max_chars: int) -> Any:
    """Arguments or states too large for the report become a clipped JSON string."""
    if _size_at_least(value, max_chars) <= max_chars // 2:  # surely short: skip serialising
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= max_chars else clip(text, max_chars)


def _input(value: Any, max_chars: int) -> Any:
    if isinstance(value, str):
        return clip(value, max_chars)
    turns, budget = [], max_chars
    for turn in reversed(value):  # keep the latest turns: they hold the request being answered
        content = str(turn.get("content", ""))
        if budget <= 0:
            turns.append({"role": "…", "content": f"[{len(value) - len(turns)} earlier turns not included]"})
            break
        turns.append({"role": str(turn.get("role", "user")), "content": clip(content, budget)})
        budget -= len(content)
    return list(reversed(turns))


def _model_step(step: ModelStep, executed: set[str], max_chars: int) -> dict[str, Any]:
    out: dict[str, Any] = {"m": clip(step.text, max_chars), "l": round(step.latency_s, 4)}
    if step.input_tokens is not None:
        out["ti"] = step.input_tokens
    if step.output_tokens is not None:
        out["to"] = step.output_tokens
    if step.reasoning:  # shown folded; never graded
        out["r"] = clip(step.reasoning, max_chars)
        if step.reasoning_tokens is not None:
            out["rt"] = step.reasoning_tokens
    if step.tool_calls:
        out["nc"] = len(step.tool_calls)
        unexecuted = [
            [c.name, _clip_json(c.arguments, max_chars), c.malformed, clip(c.raw, max_chars)]
            for c in step.tool_calls
            if c.id not in executed
        ]
        if unexecuted:
            out["c"] = unexecuted
    return out


def trajectory_payload(
    run: RunView, traj: Trajectory, example_index: int | None, max_chars: int
) -> dict[str, Any]:
    """The trace of one trajectory in the report's compact form (see the module docstring)."""
    calls = {c.id: c for s in traj.model_steps for c in s.tool_calls}
    executed = {s.call_id for s in traj.tool_steps}
    scores = run.scores_of(traj)
    aligned = next((s for s in scores if s.grader == ALIGNMENT_GRADER and isinstance(s.details.get("alignment"), list)), None)
    labels = aligned.details["alignment"] if aligned is not None else []
    changes = state_changes(traj)
    steps: list[dict[str, Any]] = []
    tool_index = 0
    for step in traj.steps:
        if step.kind == "model":
            steps.append(_model_step(step, executed, max_chars))
            continue
        if step.kind == "user":
            user: dict[str, Any] = {"u": clip(step.text, max_chars), "tn": step.turn}
            if step.stop:
                user["stop"] = 1
            if step.latency_s is not None:
                user["l"] = round(step.latency_s, 3)
            steps.append(user)
            continue
        entry: dict[str, Any] = {
            "t": step.name,
            "a": _clip_json(step.arguments, max_chars),
            "o": clip(step.output, max_chars),
        }
        if step.error:
            entry["err"] = 1
        call = calls.get(step.call_id)
        if call is not None and call.malformed:
            entry["mf"] = call.malformed
            if call.raw:
                entry["raw"] = clip(call.raw, max_chars)
        if tool_index < len(labels) and isinstance(labels[tool_index], dict):
            entry["al"] = _label(labels[tool_index], max_chars)
        change = changes[tool_index] if tool_index < len(changes) else None
        if change is not None:
            entry["sp"] = [_change(c, max_chars) for c in change[:STATE_CHANGES_KEPT]]
            if len(change) > STATE_CHANGES_KEPT:
                entry["spn"] = len(change) - STATE_CHANGES_KEPT
        tool_index += 1
        steps.append(entry)
    divergence = first_call_divergence(run.expected_for(traj), traj.tool_steps, run.order_matters(traj))
    out: dict[str, Any] = {
        "x": example_index,
        "d": round(traj.duration_s, 3),
        "s": steps,
        "fs": _clip_json(traj.final_state, max_chars),
        "sc": [
            [s.grader, s.value, clip(s.explanation, max_chars), _flag(run.measures[s.grader].passed(s.value))]
            for s in run.scores_of(traj)
        ],
    }
    if divergence is not None:
        out["dv"] = [divergence.index, divergence.reason]
    if traj.error:
        out["e"] = clip(traj.error, max_chars)
    if traj.final_answer is not None:
        out["fa"] = clip(traj.final_answer, max_chars)
    if aligned is not None:
        d = aligned.details
        out["al"] = {
            k: v for k, v in {
                "ms": [str(m) for m in d.get("missing") or []],
                "mo": [str(m) for m in d.get("missing_optional") or []],
                "fe": _first_error_text(d.get("first_error")),
                "mh": [_clip_json(h.get("expected"), max_chars) for h in d.get("minefields_hit") or []
                       if isinstance(h, dict) and h.get("step") is None],
            }.items() if v
        }
    if traj.state_note:
        out["sn"] = clip(traj.state_note, max_chars)
    return out


ALIGNMENT_GRADER = "trajectory_match"
"""The grader whose details hold the alignment the report draws (as ``show`` does)."""

STATE_CHANGES_KEPT = 50
"""State changes kept per tool step in the report (the rest are counted)."""


def _label(label: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """A tool step's alignment label in compact form: ``m`` milestone, ``ty`` error type,
    ``arg`` the wrong argument, ``n`` note, ``x`` what was expected, ``er`` 1 when it counts
    against the trajectory, ``ok`` why an unmatched call is allowed."""
    out = {
        "m": label.get("milestone"), "ty": label.get("type"), "arg": label.get("argument"),
        "n": clip(label.get("note"), max_chars) if isinstance(label.get("note"), str) else None,
        "x": _clip_json(label["expected"], max_chars) if label.get("expected") is not None else None,
        "er": 1 if label.get("error") else None, "ok": label.get("allowed"),
    }
    return {k: v for k, v in out.items() if v is not None}


def _change(change: dict[str, Any], max_chars: int) -> list[Any]:
    """A state change as ``[op, path, before | null, after | null, has_before 0|1, has_after
    0|1]``; a move or copy as ``[op, path, from, after, 1, 1]``."""
    op, after = change.get("op"), _clip_json(change.get("after"), max_chars)
    if op in ("move", "copy"):
        return [op, change.get("path"), change.get("from"), after, 1, 1]
    return [op, change.get("path"), _clip_json(change.get("before"), max_chars), after,
            int("before" in change), int("after" in change)]


def _first_error_text(first: Any) -> str | None:
    return first_error_text(first) if isinstance(first, dict) else None


def _flag(passed: bool | None) -> int | None:
    return None if passed is None else int(passed)


def _expected_payload(expected: Sequence[ToolCallSpec] | Sequence[str] | None, max_chars: int) -> Any:
    if expected is None:
        return None
    return [c if isinstance(c, str) else [c.name, _clip_json(c.arguments, max_chars)] for c in expected]


def item_of(run_i: int, row: dict[str, Any], grader_index: dict[str, int], divergence: int | None) -> list[Any]:
    """One entry of the index's ``items`` (see the module docstring) from a trajectory's row,
    :func:`toolgym.views.rundata.trajectory_row`, the function ``toolgym view`` lists its rows
    with too (so the two never disagree)."""
    fe = row["first_error"]
    return [
        run_i, row["example_id"], row["trial"], row["status"], row["n_tool_steps"], row["n_expected"],
        int(row["failed"]), divergence,
        {str(grader_index[g]): v["value"] for g, v in row["scores"].items()},
        {str(grader_index[g]): int(v["passed"]) for g, v in row["scores"].items() if v["passed"] is not None},
        [fe["type"], fe["step"], fe["text"]] if fe else None, row["duration_s"], row["tokens"],
    ]


def build_payload(runs: Sequence[RunView], max_chars: int = 20_000) -> tuple[dict[str, Any], dict[str, Any]]:
    """The index and traces documents for ``runs`` (see the module docstring).

    Examples shared by several runs or trials (same dataset file and example id) are stored
    once.

    Args:
        runs (Sequence[RunView]): Loaded run directories.
        max_chars (int): Longest text kept per field (model text, tool output, input, ...);
            longer text is cut with a note of how much was left out.

    Returns:
        tuple[dict[str, Any], dict[str, Any]]: The index and the traces.
    """
    graders = list(dict.fromkeys(g for r in runs for g in r.graders))
    grader_index = {g: i for i, g in enumerate(graders)}
    rules = [
        next((rule for r in runs if g in r.measures and (rule := pass_rule_text(r.measures[g]))), None)
        for g in graders
    ]
    runs_out, items, traces, examples = [], [], [], []
    example_ids: dict[tuple[str, str], int] = {}
    for run_i, run in enumerate(runs):
        runs_out.append(
            {
                "label": run.label,
                "env": run.env,
                "dir": str(run.directory),
                "graders": run.graders,
                "passFail": run.pass_fail_graders(),
            }
        )
        dataset = run.record.dataset
        dataset_key = str(dataset.sha256 or dataset.path or run.directory)
        for traj in run.trajectories:
            x = None
            if run.examples is not None and traj.example_id in run.examples:
                key = (dataset_key, traj.example_id)
                if key not in example_ids:
                    ex = run.examples[traj.example_id]
                    example_ids[key] = len(examples)
                    examples.append(
                        {
                            "in": _input(ex.input, max_chars),
                            "exp": _expected_payload(run.expected_for(traj), max_chars),
                        }
                    )
                x = example_ids[key]
            trace = trajectory_payload(run, traj, x, max_chars)
            if x is None:
                trace["exp"] = _expected_payload(run.expected_for(traj), max_chars)
            items.append(item_of(run_i, run.row(traj), grader_index, trace["dv"][0] if "dv" in trace else None))
            traces.append(trace)
    index = {"schema": SCHEMA, "graders": graders, "rules": rules, "runs": runs_out, "items": items}
    return index, {"schema": SCHEMA, "examples": examples, "traces": traces}

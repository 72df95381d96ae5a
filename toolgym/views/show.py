"""Terminal view of trajectories, step by step: model text, every tool call with its arguments,
every result, errors, latency and tokens, the state change each tool step made (from its stored
patch), the first step that departs from the expected calls (or, for an example with
milestones, each step's place in the alignment), and the scores with their explanations.

Model and tool text is printed as :class:`rich.text.Text`, never parsed as markup. Colours follow
the console: off when the output is not a terminal (or ``NO_COLOR`` is set).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from toolgym.api import load_run
from toolgym.graders.alignment import first_error_what
from toolgym.records import UNSCORED_STATUSES, ToolCallSpec, Trajectory
from toolgym.views.rundata import (
    RunView,
    format_call,
    format_value,
    rule_text,
    shorten,
    state_changes,
    suite_divergence,
    visible,
)

SHOWN_CHARS = 2_000
"""Characters of one argument list, tool output or raw call shown; the trajectory keeps all."""

REASONING_CHARS = 160
"""Characters of a model turn's reasoning shown (folded to one line)."""

STATE_CHANGES_SHOWN = 8
"""State changes listed under one tool step (the rest are counted)."""

STATE_VALUE_CHARS = 200
"""Characters of one value before or after a state change shown."""


def show(
    directory: Path,
    example: str | None = None,
    console: Console | None = None,
    failed: bool = False,
    grader: str | None = None,
    limit: int | None = None,
) -> int:
    """Print trajectories of a run directory.

    Without ``example`` or ``failed``, the first trajectory is shown, then how many there are
    ("trajectory 1 of N") and how to see others; with ``example``, every
    trial of that example; with ``failed``, every failed trajectory (of ``example`` only, when
    given). Failure is defined by :func:`toolgym.views.rundata.is_failed`: a trajectory that did
    not complete, or a value that does not pass its grader's measure.

    Args:
        directory (Path): A run directory.
        example (str | None): Example id to show.
        console (Console | None): Where to print (default: standard output).
        failed (bool): Show only failed trajectories.
        grader (str | None): The grader that decides failure (default: every grader of the run
            with a pass rule).
        limit (int | None): Show at most this many trajectories.

    Returns:
        int: Exit status: 0 (also when ``failed`` and nothing failed, which is said); 2 when the
        example or grader is not in the run (the closest example ids are listed).

    Raises:
        RunDirError: for a missing or invalid run directory.
    """
    console = console or Console()
    run = RunView(load_run(directory))
    if grader is not None and grader not in run.graders:
        console.print(
            Text(f"error: no grader {grader!r} in {directory} (graders: {', '.join(run.graders) or 'none'})")
        )
        return 2
    chosen = [t for t in run.trajectories if example is None or t.example_id == example]
    if not chosen:
        if example is None:
            console.print(Text(f"error: no trajectory in {directory}"))
            return 2
        console.print(Text(f"error: no trajectory for example {example!r} in {directory}{_closest_ids(run, example)}"))
        return 2
    if failed and grader is not None and grader in run.measures and not run.measures[grader].pass_fail:
        console.print(Text(
            f"error: grader {grader!r} has no pass rule ({rule_text(run.measures[grader])}), so --failed cannot "
            f"pick by it; graders with one: {', '.join(run.pass_fail_graders()) or '(none)'}"
        ))
        return 2
    if failed:
        chosen = [t for t in chosen if run.failed(t, grader)]
        if grader is not None:
            by = f"grader {grader}, {rule_text(run.measures[grader])}"
        else:
            by = f"graders with a pass rule: {', '.join(run.pass_fail_graders()) or '(none)'}"
        console.print(
            Text(
                f"{len(chosen)} failed trajectories in {directory} (by {by}; not completed counts as failed)"
            )
        )
        if not chosen:
            console.print(Text("nothing failed; drop --failed to see the first trajectory, or --example ID for one"))
            return 0
    total = len(chosen)
    if example is None and not failed:
        chosen = chosen[:1]
    for traj in chosen[:limit] if limit else chosen:
        print_trajectory(run, traj, console, highlight_grader=grader)
    if example is None and not failed and total > 1:
        console.print(Text(f"trajectory 1 of {total} in {directory}; --example ID shows another "
                           f"({_closest_ids(run, '', n=3).removeprefix('; ')}), --failed the failed ones"))
    if any(t.parent for t in chosen):
        from toolgym.views.stepwise import fork_tables

        shown = {t.key for t in chosen}
        only = dataclasses.replace(run.run, trajectories=[t for t in run.run.trajectories if t.key in shown])
        for table in fork_tables(only):
            console.print(table)
    if limit and len(chosen) > limit:
        console.print(Text(f"... {len(chosen) - limit} more (raise --limit)"))
    return 0


def _closest_ids(run: RunView, example: str, n: int = 3) -> str:
    """``"; closest ids: a, b"`` (by :func:`difflib.get_close_matches`), else the first ids."""
    ids = list(dict.fromkeys(t.example_id for t in run.trajectories))
    close = difflib.get_close_matches(example, ids, n=n, cutoff=0.6)
    if close:
        return f"; closest ids: {', '.join(close)}"
    more = f", ... ({len(ids)} in all)" if len(ids) > n else ""
    return f"; ids are {', '.join(ids[:n])}{more}"


def _json(value: Any, max_chars: int = SHOWN_CHARS) -> str:
    return visible(shorten(json.dumps(value, ensure_ascii=False, default=str), max_chars))


def _safe(text: str, max_chars: int | None = None) -> str:
    """Text from a model, tool or file, safe to print (see :func:`visible`), optionally cut."""
    return visible(text if max_chars is None else shorten(text, max_chars))


def _folded(reasoning: str) -> str:
    """The reasoning on one line, cut to :data:`REASONING_CHARS` characters."""
    line = " ".join(reasoning.split())
    return _safe(line, REASONING_CHARS)


def _input_text(value: str | list[dict[str, Any]]) -> Text:
    if isinstance(value, str):
        return Text(_safe(value))
    text = Text()
    for turn in value:
        text.append(f"\n    {_safe(str(turn.get('role', 'user')))}: ", style="dim")
        text.append(_safe(str(turn.get("content", ""))))
    return text


def _prefix_notes(traj: Trajectory) -> list[str]:
    """Lines saying which steps were replayed rather than played (teacher forcing, a fork) and
    which fault was injected."""
    notes = []
    if traj.parent:
        p = traj.parent
        notes.append(f"fork of {p.get('run')} · example {p.get('example_id')} trial {p.get('trial')}: tool steps "
                     f"before {p.get('step')} replayed without a model")
    elif traj.prefix_steps is not None:
        notes.append(f"teacher-forced: {traj.prefix_steps} reference tool step(s) replayed, then the model's turn")
    if traj.injected:
        notes.append(f"injected: {traj.injected.get('kind')} at tool step {traj.injected.get('step')}")
    return notes


def print_trajectory(
    run: RunView, traj: Trajectory, console: Console, highlight_grader: str | None = None
) -> None:
    """Print one trajectory: header, input, expected calls, steps, outcome and scores (green
    when the value passes its grader's measure, red when it does not).

    Args:
        run (RunView): The run it belongs to.
        traj (Trajectory): The trajectory.
        console (Console): Where to print.
        highlight_grader (str | None): A grader whose score is printed in bold.
    """
    status_style = {"completed": "green", "step_limit": "yellow", "repeat_limit": "yellow", "error": "bold red",
                    "aborted": "magenta", "abandoned": "bold magenta"}[traj.status]
    console.rule()  # the header below wraps at spaces: a rule's title would be cut at the width
    console.print(
        Text.assemble(
            _safe(f"{run.env} · {run.label} · example {traj.example_id} · trial {traj.trial} · "),
            (traj.status, status_style),
            f" · {traj.duration_s:.2f} s",
        )
    )
    for note in _prefix_notes(traj):
        console.print(Text(note, style="dim"))
    example = run.examples.get(traj.example_id) if run.examples is not None else None
    if example is not None:
        console.print(Text.assemble(("input: ", "bold"), _input_text(example.input)))
    expected = run.expected_for(traj)
    if expected is not None:
        console.print(Text.assemble(("expected calls: ", "bold"), expected_text(expected) or "(none)"))
    scores = run.scores_of(traj)
    aligned = _alignment_score(scores)
    divergence = suite_divergence(run, example, traj) if aligned is None else None
    labels = list(aligned.details.get("alignment") or []) if aligned is not None else []
    changes = state_changes(traj)
    stopped_noted = False
    met = state_milestones_met(aligned.details if aligned is not None else {})
    for line in met.get(0, []):
        console.print(line)
    tool_index = 0
    for number, step in enumerate(traj.steps, 1):
        if step.kind == "user":
            console.print(user_step_line(number, step))
            continue
        if step.kind == "model":
            tokens = ""
            if step.input_tokens is not None or step.output_tokens is not None:
                tokens = f", {step.input_tokens if step.input_tokens is not None else '?'} in → "
                tokens += f"{step.output_tokens if step.output_tokens is not None else '?'} out tokens"
            console.print(
                Text.assemble((f"{number:>3} model", "bold cyan"), f"  ({step.latency_s:.2f} s{tokens})")
            )
            if step.reasoning:
                tokens = f" ({step.reasoning_tokens} tokens)" if step.reasoning_tokens is not None else ""
                console.print(Text(f"      reasoning{tokens}: {_folded(step.reasoning)}", style="dim"))
            if step.text:
                console.print(Text("      ") + Text(_safe(step.text)))
            for call in step.tool_calls:
                line = Text.assemble(
                    "      → ", (_safe(call.name) or "(no name)", "bold"), f"({_json(call.arguments)})"
                )
                if call.malformed:
                    line.append(f"  MALFORMED: {_safe(call.malformed, SHOWN_CHARS)}", style="bold red")
                    if call.raw:
                        line.append(f"  raw: {_safe(call.raw, SHOWN_CHARS)}", style="red")
                console.print(line)
        else:
            marked = divergence is not None and divergence.index == tool_index
            line = Text.assemble(
                (f"{number:>3} tool ", "bold"),
                (f" {_safe(step.name)}", "red" if step.error else "green"),
                f"({_json(step.arguments)}) ⇒ " if step.arguments else " ⇒ ",
                (_safe(step.output, SHOWN_CHARS), "red" if step.error else ""),
            )
            if step.error:
                line.append("  [tool error]", style="red")
            if marked:
                line = Text("▶ ", style="bold yellow") + line
                console.print(line)
                console.print(Text(f"      ▲ first divergence: {_safe(divergence.reason)}", style="bold yellow"))
            else:
                console.print(line)
            if tool_index < len(labels) and isinstance(labels[tool_index], dict):
                first = aligned.details.get("first_error") if aligned is not None else None
                console.print(alignment_line(labels[tool_index], first.get("step") if isinstance(first, dict) else None))
            change = changes[tool_index] if tool_index < len(changes) else None
            if change is None and traj.initial_state is not None and not stopped_noted:
                stopped_noted = True
                note = f": {traj.state_note}" if traj.state_note else ""
                console.print(Text(f"      state not recorded from this step{_safe(note)}", style="dim"))
            for line in state_change_lines(change or []):
                console.print(line)
            for line in met.get(tool_index + 1, []):
                console.print(line)
            tool_index += 1
    if divergence is not None and divergence.index >= tool_index:
        reason = divergence.reason.replace("the agent made no more calls", "the episode ended in error") if traj.status == "error" else divergence.reason
        console.print(Text(f"  ▲ first divergence: {_safe(reason)}", style="bold yellow"))
    if traj.error:
        console.print(Text.assemble(("error: ", "bold red"), _safe(traj.error, SHOWN_CHARS)))
    if traj.final_answer is not None:
        console.print(Text.assemble(("final answer: ", "bold"), _safe(traj.final_answer)))
    console.print(Text.assemble(("final state: ", "bold"), _json(traj.final_state)))
    if aligned is not None:
        rows = [number for number, step in enumerate(traj.steps, 1) if step.kind == "tool"]
        for line in alignment_summary(aligned.details, rows):
            console.print(line)
    if not scores:
        reason = f"{traj.status} trajectories are not graded" if traj.status in UNSCORED_STATUSES else "no scores"
        console.print(Text(f"scores: ({reason})", style="dim"))
    for s in scores:
        passed = run.measures[s.grader].passed(s.value)
        style = "dim" if passed is None else "green" if passed else "red"
        weight = " bold" if s.grader == highlight_grader else ""
        console.print(
            Text.assemble(
                "  score ",
                (s.grader, "bold" if weight else ""),
                " = ",
                (format_value(s.value), style + weight),
                f": {_safe(s.explanation, SHOWN_CHARS)}",
            )
        )


def user_step_line(number: int, step: Any) -> Text:
    """A user message of a multi-turn episode: its turn and text (a simulated user's latency
    and tokens, a stop)."""
    what = "stop" if step.stop else f"user · turn {step.turn}"
    extra = ""
    if step.latency_s is not None:
        extra = f"  ({step.latency_s:.2f} s"
        if step.input_tokens is not None or step.output_tokens is not None:
            extra += f", {step.input_tokens if step.input_tokens is not None else '?'} in → "
            extra += f"{step.output_tokens if step.output_tokens is not None else '?'} out tokens"
        extra += ", simulated user)"
    text = _safe(step.text) if step.text else "(ends the conversation)"
    return Text.assemble((f"{number:>3} {what}", "bold magenta"), extra, "\n      ", text)


def state_change_text(change: dict[str, Any]) -> str:
    """One state change as ``path: before → after`` (``+ value`` for a path added, ``− value``
    for one removed, ``← from`` for a move or copy)."""
    path = change.get("path") or "(whole state)"
    before = _json(change["before"], STATE_VALUE_CHARS) if "before" in change else None
    after = _json(change["after"], STATE_VALUE_CHARS) if "after" in change else None
    if change.get("op") in ("move", "copy"):
        return f"{path} ← {change.get('from')}: {after}"
    if before is not None and after is not None:
        return f"{path}: {before} → {after}"
    if after is not None:
        return f"{path}: + {after}"
    return f"{path}: − {before}" if before is not None else f"{path}: removed"


def state_change_lines(changes: list[dict[str, Any]]) -> list[Text]:
    """The lines drawing one tool step's state change (none when it changed nothing)."""
    lines = [Text.assemble(("      state ", "magenta"), _safe(state_change_text(c))) for c in changes[:STATE_CHANGES_SHOWN]]
    if len(changes) > STATE_CHANGES_SHOWN:
        lines.append(Text(f"      state … {len(changes) - STATE_CHANGES_SHOWN} more change(s)", style="magenta"))
    return lines


ALIGNMENT_GRADER = "trajectory_match"
"""The grader whose details hold an alignment that ``show`` draws."""


def _alignment_score(scores: list[Any]) -> Any:
    for score in scores:
        if score.grader == ALIGNMENT_GRADER and isinstance(score.details.get("alignment"), list):
            return score
    return None


def alignment_line(label: dict[str, Any], first_error_step: int | None = None) -> Text:
    """One tool step's place in the alignment of ``trajectory_match``: ``✓ milestone``, or why
    it matched none (its error type, the milestone it names, the wrong argument and what was
    expected), and whether the extra call is allowed (read-only, allowed, never executed). The
    step of the first error is marked ✗ in red even when the policy allows the call itself (a
    wrong read that the trajectory never corrected)."""
    kind = label.get("type")
    milestone = label.get("milestone")
    if kind is None and milestone:
        if label.get("allowed") == "brings about" and label.get("note"):  # a call that brought a state about
            return Text.assemble(("      ✓ ", "green"), (_safe(str(label["note"])), "green"))
        return Text.assemble(("      ✓ ", "green"), (f"milestone {_safe(str(milestone))}", "green"))
    error = bool(label.get("error")) or (first_error_step is not None and label.get("step") == first_error_step)
    style = "bold red" if error else "yellow"
    text = Text.assemble(("      ✗ " if error else "      · ", style), (str(kind or "unmatched").replace("_", " "), style))
    if milestone:
        text.append(f" ({_safe(str(milestone))}" + (f", argument {_safe(str(label['argument']))}" if label.get("argument") else "") + ")")
    if label.get("note"):
        text.append(f": {_safe(str(label['note']))}", style="dim")
    if label.get("allowed"):  # the extra-call policy lets the call stand unmatched (its milestone may still be missing)
        text.append(f" [allowed by extra_calls: {label['allowed']}]", style="dim")
    if label.get("expected") is not None and kind in ("wrong_arguments", "wrong_tool", "forbidden", "out_of_order"):
        text.append(f"; expected {_json(label['expected'], 400)}", style="dim")
    return text


def observed_milestones_met(details: dict[str, Any]) -> dict[int, list[tuple[str, str]]]:
    """Where each milestone of ``trajectory_match``'s ``details.matched`` that no step matched
    was met (a state, a message, an answer, a result): the number of tool steps after which it
    held or was said or returned (``met``, else ``at``; 0 before any step) → ``(kind, id)``."""
    out: dict[int, list[tuple[str, str]]] = {}
    for mid, where in (details.get("matched") or {}).items():
        if isinstance(where, dict) and where.get("kind") in ("state", "message", "answer", "result"):
            k = where.get("met", where.get("at"))
            if isinstance(k, int):
                out.setdefault(k, []).append((str(where["kind"]), str(mid)))
    return out


def state_milestones_met(details: dict[str, Any]) -> dict[int, list[Text]]:
    """The lines ``✓ state milestone ID met`` (``✓ result milestone ID met``, ...) of
    :func:`observed_milestones_met`, by the number of tool steps after which each was met."""
    return {k: [Text.assemble(("      ✓ ", "green"), (f"{kind} milestone {_safe(mid)} met", "green")) for kind, mid in met]
            for k, met in observed_milestones_met(details).items()}


def alignment_summary(details: dict[str, Any], rows: list[int] | None = None) -> list[Text]:
    """The lines after the steps: milestones never reached (required, then optional),
    minefield states hit, how the alignment was found, and the first error (its tool step, and
    its row among all steps when ``rows`` gives the row number of each tool step)."""
    lines = []
    missing = [str(m) for m in details.get("missing") or []]
    optional = [str(m) for m in details.get("missing_optional") or []]
    if missing:
        lines.append(Text.assemble(("milestones never reached: ", "bold red"), _safe(", ".join(missing))))
    if optional:
        lines.append(Text.assemble(("optional milestones not reached: ", "bold"), _safe(", ".join(optional))))
    for hit in details.get("minefields_hit") or []:
        if isinstance(hit, dict) and hit.get("step") is None:
            lines.append(Text.assemble(("minefield state reached: ", "bold red"), _json(hit.get("expected"), 400)))
    if details.get("exact") is False:
        lines.append(Text(f"alignment: {_safe(str(details.get('method')))}", style="yellow"))
    first = details.get("first_error")
    if isinstance(first, dict):
        step = first.get("step")
        where = "end of trajectory"
        if isinstance(step, int):  # the grader counts tool steps; the rows above count every step
            row = rows[step - 1] if rows is not None and 0 < step <= len(rows) else None
            where = f"tool step {step}" + (f" (row {row})" if row is not None else "")
        if first.get("turn") is not None:  # a multi-turn episode: the user turn first, as the score says
            where = f"turn {first['turn']}, {where}"
        lines.append(Text.assemble(("first error: ", "bold red"), _safe(f"{where}: {first_error_what(first)}")))
    return lines


def expected_text(expected: list[ToolCallSpec] | list[str] | None) -> str:
    """The expected calls as one line (``"(unknown)"`` when not known)."""
    if expected is None:
        return "(unknown)"
    return ", ".join(c if isinstance(c, str) else format_call(c.name, c.arguments) for c in expected)

"""Terminal view of a trajectory, step by step."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolgym.graders.steps import first_divergence
from toolgym.runio import read_run, read_scores, read_trajectories


def show(directory: Path, example: str | None = None, console: Console | None = None) -> int:
    """Print one trajectory (the first, or ``example``'s) with its scores.

    Returns:
        Exit status: 0, or 2 when the example is not in the run.
    """
    console = console or Console()
    read_run(directory)
    trajectories = read_trajectories(directory)
    chosen = [t for t in trajectories if example is None or t.example_id == example]
    if not chosen:
        console.print(f"no trajectory for example {example!r} in {directory}")
        return 2
    scores = read_scores(directory)
    for traj in chosen[:1] if example is None else chosen:
        expected = next((s.details.get("expected") for s in scores if s.example_id == traj.example_id and s.grader == "steps_exact"), None)
        actual = [s.name for s in traj.tool_steps]
        diverge = first_divergence(expected, actual) if expected is not None else None
        console.rule(f"example {escape(traj.example_id)} trial {traj.trial}: {traj.status}")
        tool_index = 0
        for step in traj.steps:
            if step.kind == "model":
                tokens = f", {step.input_tokens}→{step.output_tokens} tokens" if step.input_tokens is not None else ""
                console.print(f"[bold cyan]model[/] ({step.latency_s:.2f} s{tokens}) {escape(step.text)}")
                for call in step.tool_calls:
                    flag = f" [red]MALFORMED: {escape(call.malformed)}[/]" if call.malformed else ""
                    console.print(f"  → {escape(call.name)}({escape(json.dumps(call.arguments, ensure_ascii=False))}){flag}")
            else:
                mark = " [bold yellow]← first divergence from expected steps[/]" if tool_index == diverge else ""
                colour = "red" if step.error else "green"
                console.print(f"  [{colour}]{escape(step.name)}[/] ⇒ {escape(step.output)}{mark}")
                tool_index += 1
        if traj.error:
            console.print(f"[red]error:[/] {escape(traj.error)}")
        console.print(f"final answer: {escape(str(traj.final_answer))}")
        console.print(f"final state: {escape(json.dumps(traj.final_state, ensure_ascii=False))}")
        for s in scores:
            if s.example_id == traj.example_id and s.trial == traj.trial:
                console.print(f"  score {s.grader} = {s.value}: {escape(s.explanation)}")
    return 0

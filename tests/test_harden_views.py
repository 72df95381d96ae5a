"""Views print model output safely: control characters visible, huge arguments capped,
reasoning folded."""

from __future__ import annotations

import io
import json

from rich.console import Console

from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runner import RunConfig, run
from toolgym.views.report.payload import build_payload
from toolgym.views.rundata import load_runs, visible
from toolgym.views.show import show
from toolgym.views.summary import rich_summary, summary_cells

ESCAPES = "\x1b[31mred\x1b[0m \x1b[2J\x1b]0;pwned title\x07 \x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\ \x9b1A \u202eevil\r"


def make_run(tmp_path, turns, dataset, name="r"):
    out = tmp_path / name
    run(RunConfig(env="typewriter_1", agent="tool_calling", model=ScriptedChatModel(turns=turns),
                  dataset=dataset, out=out), progress=False)
    return out


def terminal(width: int = 200) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=True, color_system=None), buf


def test_visible_escapes_every_control_character():
    shown = visible(ESCAPES + "\tok\n")
    assert not any(ord(c) < 32 and c not in "\t\n" or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\\x1b[31m" in shown and "\\u202e" in shown and "\\x07" in shown and "\\r" not in shown
    assert shown.endswith("\tok\n")


def test_show_and_summary_never_send_model_escape_codes(tmp_path):
    turns = [{"content": ESCAPES, "tool_calls": [{"name": "type_letter", "args": {"letter": "\x1b[5m"}}]},
             "done " + ESCAPES]
    out = make_run(tmp_path, turns, [{"id": "e\x1b[1m", "input": "h\x1b]0;x\x07", "expected_steps": ["type_letter"]}],
                   name="run\x1b[31m")
    console, buf = terminal()
    show(out, console=console)
    printed = buf.getvalue()
    assert "\x1b]" not in printed and "\x07" not in printed and "\x9b" not in printed and "\u202e" not in printed
    assert "\x1b[31m" not in printed and "\x1b[2J" not in printed
    assert "\\x1b[31mred" in printed  # shown, not obeyed
    console, buf = terminal()
    console.print(rich_summary(summary_cells(load_runs([out], with_examples=False))))
    assert "\x1b[31m" not in buf.getvalue()


def test_megabyte_argument_is_capped_where_shown_and_kept_in_the_trajectory(tmp_path):
    big = "x" * 1_000_000
    turns = [{"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": big}}]}, "done"]
    dataset = [{"id": "e", "input": "h", "expected_calls": [{"name": "type_letter", "arguments": {"letter": "h"}}]}]
    out = make_run(tmp_path, turns, dataset)
    kept = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert kept["steps"][1]["arguments"]["letter"] == big
    console, buf = terminal()
    show(out, console=console)
    assert len(buf.getvalue()) < 20_000 and "more characters" in buf.getvalue()
    view = load_runs([out])[0]
    _, traces = build_payload([view])
    divergence = traces["traces"][0]["dv"][1]
    assert len(divergence) < 2_000 and "more characters" in divergence


def test_reasoning_is_shown_folded(tmp_path):
    thought = "step one. " * 100
    out = make_run(tmp_path, [f"<think>{thought}</think>hi"], [{"id": "e", "input": "h", "reference": "hi"}])
    console, buf = terminal()
    show(out, console=console)
    printed = buf.getvalue()
    assert "reasoning: step one." in printed and printed.count("step one.") < 30
    view = load_runs([out])[0]
    _, traces = build_payload([view])
    model = traces["traces"][0]["s"][0]
    assert model["m"] == "hi" and model["r"].startswith("step one.")

"""docs/extending.md's "Your own agent architecture" example, defined exactly as printed there,
registered and run on typewriter_1 with a scripted model."""

from __future__ import annotations

# --- docs example start ---
import time

from toolgym import Agent, Episode
from toolgym.parsing import model_step


class SingleTurnAgent(Agent):
    """One model turn; every tool call of it is executed; no observation is shown."""

    name = "single_turn"

    async def play(self, episode: Episode) -> None:
        tools = episode.env.tools
        model = self.model.bind_tools(list(tools.values()))
        start = time.perf_counter()
        message = await model.ainvoke(episode.env.prompt(episode.example))
        step = model_step(message, time.perf_counter() - start, set(tools))
        episode.record_model(step)
        for call in step.tool_calls:
            episode.execute(call)
        episode.final_answer = step.text
# --- docs example end ---

import json
import re
from pathlib import Path

from toolgym.plugins import get_agent
from toolgym.runio import read_scores, read_trajectories
from toolgym.runner import RunConfig, run

ROOT = Path(__file__).resolve().parent.parent


def test_readme_shows_exactly_this_example():
    source = Path(__file__).read_text(encoding="utf-8")
    tested = source.split("# --- docs example start ---\n")[1].split("# --- docs example end ---")[0]
    page = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    section = page.split("**Your own agent architecture.**")[1]
    shown = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    assert shown.strip() == tested.strip()


def test_custom_agent_runs_on_typewriter_1(tmp_path):
    spec = f"{Path(__file__)}:SingleTurnAgent"
    assert get_agent(spec).name == "single_turn"
    dataset = tmp_path / "two.jsonl"
    rows = []
    for text in ("hi", "cat"):
        calls = [{"name": "type_letter", "arguments": {"letter": c}} for c in text]
        rows.append({
            "id": text, "input": text, "expected_steps": ["type_letter"] * len(text),
            "expected_calls": calls, "expected_state": {"paper": text}, "reference": text,
        })
    dataset.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    # "hi": both letters in one reply (passes); "cat": the model forgets the last letter.
    script = {"by_input": {
        "hi": [{"content": "typed", "tool_calls": [{"name": "type_letter", "args": {"letter": c}} for c in "hi"]}],
        "cat": [{"content": "", "tool_calls": [
            {"name": "type_letter", "args": {"letter": "c"}}, {"name": "type_letter", "args": {"letter": "a"}},
        ]}],
    }}
    model_file = tmp_path / "script.json"
    model_file.write_text(json.dumps(script), encoding="utf-8")
    out = tmp_path / "run"
    run(RunConfig(env="typewriter_1", agent=spec, model=f"scripted:{model_file}", dataset=str(dataset), out=out), progress=False)
    trajectories = {t.example_id: t for t in read_trajectories(out)}
    assert trajectories["hi"].status == "completed" and trajectories["hi"].agent == "single_turn"
    assert trajectories["hi"].final_state == {"paper": "hi"} and trajectories["hi"].final_answer == "typed"
    assert len(trajectories["hi"].model_steps) == 1
    assert trajectories["cat"].final_state == {"paper": "ca"}
    final = {s.example_id: s.value for s in read_scores(out) if s.grader == "final_state"}
    assert final == {"hi": 1.0, "cat": 0.0}

"""Real run directories for the show/summary/report tests, made through toolgym.runner with the
oracle agent and a scripted model that makes wrong calls, stops early, loops, crashes and
writes HTML/script payloads into its text, its tool arguments and an example id."""

from __future__ import annotations

import json
from pathlib import Path

from toolgym.data import write_examples
from toolgym.records import Example
from toolgym.runner import RunConfig, run
from toolgym.suites.typewriter.environment import Typewriter1

SCRIPT_PAYLOAD = "<script>window.__xss = 'script'; alert(1)</script>"
IMG_PAYLOAD = "<img src=x onerror=\"window.__xss = 'img'; alert(2)\">"
ID_PAYLOAD = "xss-<img src=x onerror=window.__xss='id'>"
ARG_PAYLOAD = "<img src=x onerror=window.__xss='arg'>"


def _call(letter: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": letter}}]}


# request text -> scripted turns of the model
SCRIPTS: dict[str, list] = {
    "a": [_call("a"), "Done: a"],  # correct
    "ab": [_call("a"), _call("c"), f"Typed it. {SCRIPT_PAYLOAD} {IMG_PAYLOAD}"],  # wrong letter, payload text
    "cat": [_call("c"), _call(ARG_PAYLOAD), _call("a"), _call("t"), "cat"],  # tool error with payload
    "dog": [_call("d")] * 5,  # loops until the step limit (max_steps=5)
    "hi": [_call("h"), "I typed hi."],  # stops one call early
    "ok": [
        {
            "content": "",
            "invalid_tool_calls": [{"name": "type_letter", "args": "{not json", "error": "bad json"}],
        },
        _call("o"),
        _call("k"),
        "ok",
    ],  # malformed call first
    "zz": [_call("z")],  # script runs out: the episode ends in error
}
IDS = {"ab": ID_PAYLOAD}


def write_dataset(path: Path) -> Path:
    """A typewriter_1 dataset of the requests in :data:`SCRIPTS`."""
    examples = []
    for i, text in enumerate(SCRIPTS):
        fields = {
            "id": IDS.get(text, f"tw-{i}-{text}"),
            "input": text,
            "expected_steps": ["type_letter"] * len(text),
            "expected_calls": Typewriter1.calls_for(text),
            "reference": text,
            "expected_state": {"paper": text},
            "metadata": {"n_steps": len(text)},
        }
        examples.append(Example.model_validate(fields))
    write_examples(path, examples)
    return path


def make_runs(root: Path) -> dict[str, Path]:
    """Three run directories under ``root``: ``oracle`` and ``scripted`` on the dataset above
    (typewriter_1) and ``oracle26`` on the built-in typewriter_26 set (first 6 examples)."""
    root.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(root / "dataset.jsonl")
    script = root / "script.json"
    script.write_text(json.dumps({"by_input": SCRIPTS}), encoding="utf-8")
    dirs = {"oracle": root / "oracle", "scripted": root / "scripted", "oracle26": root / "oracle26"}
    run(
        RunConfig(env="typewriter_1", agent="oracle", dataset=str(dataset), out=dirs["oracle"]),
        progress=False,
    )
    run(
        RunConfig(
            env="typewriter_1",
            agent="tool_calling",
            model=f"scripted:{script}",
            dataset=str(dataset),
            out=dirs["scripted"],
            max_steps=5,
        ),
        progress=False,
    )
    run(RunConfig(env="typewriter_26", agent="oracle", out=dirs["oracle26"], limit=6), progress=False)
    return dirs

"""Small JMultiWOZ-TC-shaped fixture files, written by the tests into tmp_path.

Two dialogues, seven user turns: gold with and without calls, a turn with two calls, a
full-width name, integer slots.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from tests.conftest import REFERENCE_DATA
from toolgym.suites.jmultiwoz_tc import SUITE

BENCHMARK = SUITE.benchmarks[0]
REAL_DIR = REFERENCE_DATA / "jmultiwoz_tc"
REAL_ZIP = REAL_DIR / "JMultiWOZ-TC_data.zip"
EVALUATE_PY = REFERENCE_DATA.parent / "reference" / "jmultiwoz_tc" / "evaluate.py"
"""The published scoring script (github.com/llm-jp/JMultiWOZ-TC), run as it is, never copied."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Search_hotel",
            "description": "ホテルを検索します。",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "都市"},
                    "name": {"type": "string", "description": "名前"},
                    "genre": {"type": "string", "description": "種類"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "Search_weather",
            "description": "天気を調べます。",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "都市"},
                    "month": {"type": "integer", "description": "月"},
                    "day": {"type": "integer", "description": "日"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "Booking_taxi",
            "description": "タクシーを予約します。",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "都市"},
                    "name": {"type": "string", "description": "会社"},
                    "hour": {"type": "integer", "description": "時"},
                },
                "required": ["city", "name", "hour"],
            },
        },
    },
]

HOTEL = {"name": "Search_hotel", "arguments": {"city": "東京", "name": "ホテル２１"}}
WEATHER = {"name": "Search_weather", "arguments": {"city": "大阪", "month": 3, "day": 21}}
TAXI = {"name": "Booking_taxi", "arguments": {"city": "大阪", "name": "なにわタクシー", "hour": 9}}

# (dialogue, user utterances with the gold calls after each)
DIALOGUES: list[tuple[str, list[tuple[str, list[dict[str, Any]]]]]] = [
    ("dialogue_A", [
        ("こんにちは。", []),
        ("東京のホテル２１を探しています。", [HOTEL]),
        ("ありがとう。", []),
    ]),
    ("dialogue_B", [
        ("大阪に行きます。", []),
        ("3月21日の大阪の天気は？", [WEATHER]),
        ("9時になにわタクシーを予約して、天気も教えて。", [TAXI, WEATHER]),
        ("以上です。", []),
    ]),
]


def records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(input records, gold records) in file order."""
    inputs, golds = [], []
    for k, (dialogue, turns) in enumerate(DIALOGUES):
        history: list[dict[str, str]] = []
        for t, (utterance, gold) in enumerate(turns):
            history = [*history, {"role": "user", "content": utterance}]
            data_id = f"jmultiwoz_tc_{k}_turn_{t}"
            inputs.append({"data_id": data_id, "dialogue_id": dialogue, "question": list(history)})
            golds.append({"data_id": data_id, "dialogue_id": dialogue, "ground_truth": gold})
            history = [*history, {"role": "assistant", "content": f"応答{k}-{t}"}]
    return inputs, golds


def ndjson(rows: list[Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_dataset(
    folder: Path,
    form: str = "zip",
    inputs: list[dict[str, Any]] | None = None,
    golds: list[dict[str, Any]] | None = None,
    tools: bool = True,
    input_text: str | None = None,
    gold_text: str | None = None,
) -> Path:
    """Write the fixture data set and return the path to pass as ``--dataset``.

    Args:
        form: ``zip`` (members inside a folder, as a re-zipped release might have),
            ``json`` or ``jsonl`` (the two NDJSON files; the input file's path is returned).
        input_text / gold_text: Raw file contents overriding the records (for bad input).
    """
    folder.mkdir(parents=True, exist_ok=True)
    default_inputs, default_golds = records()
    in_text = input_text if input_text is not None else ndjson(inputs if inputs is not None else default_inputs)
    gd_text = gold_text if gold_text is not None else ndjson(golds if golds is not None else default_golds)
    if tools:
        (folder / "tools.json").write_text(json.dumps(TOOLS, ensure_ascii=False), encoding="utf-8")
    if form == "zip":
        path = folder / "JMultiWOZ-TC_data.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("JMultiWOZ-TC_data/jmultiwoz_tc_input.json", in_text)
            archive.writestr("JMultiWOZ-TC_data/jmultiwoz_tc_ground.json", gd_text)
            archive.writestr("__MACOSX/._jmultiwoz_tc_input.json", "resource fork")
        return path
    suffix = "." + form
    (folder / f"jmultiwoz_tc_input{suffix}").write_text(in_text, encoding="utf-8")
    (folder / f"jmultiwoz_tc_ground{suffix}").write_text(gd_text, encoding="utf-8")
    return folder / f"jmultiwoz_tc_input{suffix}"


def result_row(data_id: str, calls: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A result-file record."""
    return {"data_id": data_id, "dialogue_id": None, "tool_calls": calls if calls is not None else [], **extra}


def reference_rows(result: Path, gold: str | bytes, workdir: Path) -> list[dict[str, Any]]:
    """The five rows the published ``evaluate.py`` writes for ``result``.

    The script reads ``jmultiwoz_tc_ground.json`` from its working directory and names its
    output after ``result_<name>.json``, so both are put in ``workdir`` first.

    Args:
        result: Any result file.
        gold: The gold file's content.
        workdir: A new folder to run the script in.
    """
    workdir.mkdir(parents=True)
    (workdir / "jmultiwoz_tc_ground.json").write_bytes(gold.encode() if isinstance(gold, str) else gold)
    shutil.copyfile(result, workdir / "result_ref.json")
    subprocess.run([sys.executable, str(EVALUATE_PY), "--result", "result_ref.json"], cwd=workdir, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return [json.loads(line) for line in (workdir / "score_ref.json").read_text(encoding="utf-8").splitlines()[:5]]

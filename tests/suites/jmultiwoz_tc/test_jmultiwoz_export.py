"""JMultiWOZ-TC runs as training data (``toolgym export``), whichever face played or imported
them: the CLI with the scripted model, the Gymnasium adapter given the same turns, and the
import of the CLI's result file (``grade --result``), whose turns have calls and no tool
results. Also the published files the Gymnasium adapter writes at ``close()``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import pytest

import toolgym.gym as tg
from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import HOTEL, TAXI, WEATHER, write_dataset
from toolgym.cli import main

UNKNOWN = {"name": "Search_station", "arguments": {"city": "東京"}}  # a tool JMultiWOZ-TC does not have

ANSWERS: dict[str, Any] = {  # user turn -> the model's answer: text, or calls
    "こんにちは。": "いらっしゃいませ。",
    "東京のホテル２１を探しています。": [HOTEL],
    "ありがとう。": [UNKNOWN],
    "大阪に行きます。": "はい。",
    "3月21日の大阪の天気は？": [WEATHER],
    "9時になにわタクシーを予約して、天気も教えて。": [TAXI, WEATHER],
    "以上です。": "ありがとうございました。",
}
PUBLISHED = ("result_", "score_", "incorrect_")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with call ids numbered in order (each face makes its own ids)."""
    ids: dict[str, str] = {}
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": ids.setdefault(c["id"], f"#{len(ids)}")} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            m["tool_call_id"] = ids[m["tool_call_id"]]
        out.append(m)
    return out


@pytest.fixture
def cli_run(tmp_path) -> tuple[Path, Path, str]:
    """(dataset, run directory, model spec) of a CLI run of the scripted model on the fixture."""
    dataset = write_dataset(tmp_path / "jm")
    script = {"by_input": {
        turn: [answer if isinstance(answer, str) else {"tool_calls": [{"name": c["name"], "args": c["arguments"]} for c in answer]}]
        for turn, answer in ANSWERS.items()
    }}
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script, ensure_ascii=False), encoding="utf-8")
    spec = f"scripted:{path}"
    out = tmp_path / "cli"
    assert main(["run", "--env", "jmultiwoz_tc", "--model", spec, "--dataset", str(dataset), "--out", str(out),
                 "--no-progress"]) == 0
    return dataset, out, spec


def gym_run(dataset: Path, out: Path, model: str) -> None:
    """Play every turn of the fixture through the Gymnasium adapter with the answers of ANSWERS,
    as chat dicts (arguments as JSON strings, as a policy sends them); check that the published
    files appear at close() and not before."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(tg.env_id("jmultiwoz_tc"), dataset=str(dataset), out=str(out), model=model)
    examples = env.unwrapped.examples
    for example in examples:
        env.reset(options={"example_id": example.id})
        answer = ANSWERS[example.input[-1]["content"]]
        if isinstance(answer, str):
            action: dict[str, Any] = {"role": "assistant", "content": answer}
        else:
            action = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"g{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                for i, c in enumerate(answer)]}
        *_, terminated, _, _ = env.step(action)
        assert terminated
    assert not [p for p in out.iterdir() if p.name.startswith(PUBLISHED)]  # written at close()
    env.close()
    env.close()  # idempotent


def test_gymnasium_and_cli_export_the_same_records_and_publish_the_same_files(cli_run, tmp_path):
    dataset, cli, spec = cli_run
    gym = tmp_path / "gym"
    gym_run(dataset, gym, model=spec)
    # the suite's published files: the same names (the model label is the spec) and content
    published = sorted(p.name for p in cli.iterdir() if p.name.startswith(PUBLISHED))
    assert len(published) == 3
    assert sorted(p.name for p in gym.iterdir() if p.name.startswith(PUBLISHED)) == published
    for name in published:
        assert (gym / name).read_text(encoding="utf-8") == (cli / name).read_text(encoding="utf-8"), name
    result = next(cli.glob("result_*.jsonl"))
    assert len(lines(result)) == len(ANSWERS)
    # the same training records, call ids aside
    assert main(["export", str(cli), "--out", str(tmp_path / "cli.jsonl")]) == 0
    assert main(["export", str(gym), "--out", str(tmp_path / "gym.jsonl")]) == 0
    from_cli, from_gym = lines(tmp_path / "cli.jsonl"), lines(tmp_path / "gym.jsonl")
    assert len(from_cli) == len(from_gym) == len(ANSWERS)
    for a, b in zip(from_cli, from_gym, strict=True):
        assert without_ids(a["messages"]) == without_ids(b["messages"])
        assert a["tools"] == b["tools"]
    # the unknown tool's call: its name and arguments, as written, in both
    block = '<tool_call>\n{"name": "Search_station", "arguments": {"city": "東京"}}\n</tool_call>'
    for records in (from_cli, from_gym):
        (malformed,) = [r for r in records if any(m.get("content") == block for m in r["messages"])]
        assert malformed["messages"][-1]["role"] == "user" and "Search_station" in malformed["messages"][-1]["content"]


def test_an_imported_result_exports_every_turn_the_calls_last(cli_run, tmp_path, capsys):
    dataset, cli, _ = cli_run
    result = next(cli.glob("result_*.jsonl"))
    imported = tmp_path / "imported"
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset),
                 "--out", str(imported)]) == 0
    capsys.readouterr()
    assert main(["export", str(imported), "--out", str(tmp_path / "imp.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "skipped" not in err  # no turn left out, with a call or without
    assert "imported from a result file" in err  # the records carry no reply text: said once
    assert main(["export", str(cli), "--out", str(tmp_path / "cli.jsonl")]) == 0
    records, played = lines(tmp_path / "imp.jsonl"), lines(tmp_path / "cli.jsonl")
    assert len(records) == len(played) == len(ANSWERS)
    rows = {json.dumps(r["tool_calls"], ensure_ascii=False) for r in lines(result)}
    with_calls = 0
    for record, run in zip(records, played, strict=True):
        messages = without_ids(record["messages"])
        last = messages[-1]
        assert last["role"] == "assistant"
        assert all(line not in (last["content"] or "") for line in rows)  # never the result file's line
        n = len(messages)
        assert messages[:-1] == without_ids(run["messages"])[:n - 1]  # the same prompt
        if last.get("tool_calls"):  # the turn's calls are the record's target, as the CLI's model made them
            with_calls += 1
            assert last == without_ids(run["messages"])[n - 1]
        elif "<tool_call>" not in (last["content"] or ""):
            assert last["content"] == ""  # a turn without a call: the file records no reply
    assert with_calls == sum(1 for a in ANSWERS.values() if isinstance(a, list) and a is not ANSWERS["ありがとう。"])

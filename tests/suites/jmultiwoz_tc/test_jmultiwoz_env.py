"""The jmultiwoz_tc environment end to end: tools from JSON schemas, one model answer per turn,
the published files exported after grading, and a killed run resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import (
    BENCHMARK,
    EVALUATE_PY,
    HOTEL,
    TAXI,
    TOOLS,
    WEATHER,
    ndjson,
    records,
    reference_rows,
    write_dataset,
)
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runio import read_scores, read_trajectories
from toolgym.runner import RunConfig, grade, run
from toolgym.suites.jmultiwoz_tc.results import result_line
from toolgym.suites.jmultiwoz_tc.scoring import PUBLISHED_ROWS, safe_model_name

ENV = BENCHMARK.environment
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]


@pytest.fixture
def dataset(tmp_path) -> Path:
    return write_dataset(tmp_path / "data", "zip")


def first_example(dataset, index=1):
    return load_examples(dataset, BENCHMARK)[index]


# --- tools -----------------------------------------------------------------------------------
def test_tools_are_the_published_schemas_and_acknowledge(dataset):
    env = ENV()
    env.reset(first_example(dataset))
    assert list(env.tools) == ["Search_hotel", "Search_weather", "Booking_taxi"]
    assert [convert_to_openai_tool(t) for t in env.tools.values()] == TOOLS
    result = env.call("Search_weather", WEATHER["arguments"])
    ack = json.loads(result.output)
    assert not result.error and ack["status"] == "accepted" and ack["arguments"] == WEATHER["arguments"]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("Booking_taxi", {"city": "大阪"}, "name: required argument missing"),
        ("Search_weather", {"city": "大阪", "day": "21日"}, "day: expected integer"),
        ("Search_hotel", {"city": "東京", "stars": 5}, "stars: unexpected argument"),
        ("Search_hotels", {"city": "東京"}, "unknown tool 'Search_hotels'. Did you mean 'Search_hotel'?"),
        ("Search_hotel", ["東京"], "must be a JSON object"),
    ],
)
def test_invalid_calls_get_error_observations(dataset, name, arguments, expected):
    env = ENV()
    env.reset(first_example(dataset))
    result = env.call(name, arguments)
    assert result.error and expected in result.output


def test_one_model_answer_per_turn_even_if_the_model_would_loop(dataset):
    example = first_example(dataset)
    model = ScriptedChatModel(turns=[{"tool_calls": [{"name": "Search_hotel", "args": HOTEL["arguments"]}]}], repeat_last=True)
    env = ENV()
    env.reset(example)
    traj = ToolCallingAgent(model=model, max_steps=5).run(env, example)
    assert traj.status == "completed"
    assert len(traj.model_steps) == 1 and len(traj.tool_steps) == 1
    assert json.loads(traj.tool_steps[0].output)["status"] == "accepted"


def test_agents_that_loop_after_a_call_still_finish(dataset):
    class Looping(ENV):
        max_model_turns = None

    example = first_example(dataset)
    model = ScriptedChatModel(turns=[{"tool_calls": [{"name": "Search_hotel", "args": HOTEL["arguments"]}]}, "東京のホテル２１が見つかりました。"])
    env = Looping()
    env.reset(example)
    traj = ToolCallingAgent(model=model, max_steps=5).run(env, example)
    assert traj.status == "completed" and len(traj.model_steps) == 2
    assert traj.final_answer.startswith("東京")


# --- runs ------------------------------------------------------------------------------------
def script(tmp_path: Path, answers: dict[str, list], default: list | None = None) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"by_input": answers, "turns": default or []}, ensure_ascii=False), encoding="utf-8")
    return f"scripted:{path}"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def scripted_answers() -> dict[str, list]:
    wrong_day = {"city": "大阪", "month": 3, "day": "２１"}  # right only leniently
    return {
        "こんにちは。": [""],
        "東京のホテル２１を探しています。": [{"tool_calls": [{"name": "Search_hotel", "args": HOTEL["arguments"]}]}],
        "ありがとう。": [{"tool_calls": [{"name": "Search_hotel", "args": {"city": "東京"}}]}],
        "大阪に行きます。": [{"content": "", "invalid_tool_calls": [{"name": "Search_weather", "args": "{city: 大阪"}]}],
        "3月21日の大阪の天気は？": [{"tool_calls": [{"name": "Search_weather", "args": wrong_day}]}],
        "9時になにわタクシーを予約して、天気も教えて。": [
            {"tool_calls": [{"name": "Search_weather", "args": WEATHER["arguments"]}, {"name": "Booking_taxi", "args": TAXI["arguments"]}]}
        ],
        # "以上です。" is missing: the scripted model raises, the turn ends in error
    }


def test_run_writes_published_files(tmp_path, dataset):
    out = tmp_path / "run"
    model = script(tmp_path, scripted_answers())
    run(RunConfig(env="jmultiwoz_tc", out=out, model=model, dataset=str(dataset), concurrency=4), progress=False)
    name = safe_model_name(model)
    result = lines(out / f"result_{name}.jsonl")
    assert [r["data_id"] for r in result] == [r["data_id"] for r in records()[0]]  # dataset order
    by_id = {r["data_id"]: r for r in result}
    assert by_id["jmultiwoz_tc_0_turn_1"] == {
        "data_id": "jmultiwoz_tc_0_turn_1", "dialogue_id": "dialogue_A", "tool_calls": [HOTEL],
    }
    assert by_id["jmultiwoz_tc_1_turn_3"]["error"] == "IndexError" and by_id["jmultiwoz_tc_1_turn_3"]["tool_calls"] == []
    bad = by_id["jmultiwoz_tc_1_turn_0"]["tool_calls"][0]
    assert bad["malformed"] and bad["arguments"] == "{city: 大阪"
    rows = {r["評価項目"]: r for r in lines(out / f"score_{name}.json")}
    assert list(rows) == list(PUBLISHED_ROWS)
    assert rows["全体"]["総データ数"] == 7 and rows["全体"]["出力ミスのデータ数"] == 1
    assert rows["全体"]["正解数"] == 3  # turn 0, the hotel, the two-call turn (order differs)
    assert rows["ツール不使用判断"]["正解数"] == 1  # the malformed attempt is a call, not an abstention
    assert rows["tool call精度"]["正解数"] == 2 and rows["tool call精度"]["総データ数"] == 3
    diag = json.loads((out / f"diagnostics_{name}.json").read_text(encoding="utf-8"))
    lenient = {r["評価項目"]: r for r in diag["lenient_table"]}
    assert lenient["tool call精度"]["lenient(%)"] == 100.0
    assert diag["decision_outcomes"]["gold_no_call"] == {"no_call": 1, "call": 1, "malformed": 1}
    incorrect = lines(out / f"incorrect_{name}.json")
    assert [e["data_id"] for e in incorrect] == ["jmultiwoz_tc_1_turn_1", "jmultiwoz_tc_0_turn_2", "jmultiwoz_tc_1_turn_0"]
    assert incorrect[0]["last_user_utterance"] == "3月21日の大阪の天気は？"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["run.json", "trajectories.jsonl", "scores.jsonl", f"result_{name}.jsonl", f"score_{name}.json",
         f"incorrect_{name}.json", f"diagnostics_{name}.json"]
    )


def test_oracle_run_scores_100(tmp_path, dataset):
    out = tmp_path / "oracle"
    assert main(["run", "--env", "jmultiwoz_tc", "--agent", "oracle", "--dataset", str(dataset), "--out", str(out), "--no-progress"]) == 0
    rows = lines(out / "score_oracle.json")
    assert len(rows) == 5 and all(r["全体の正答率(%)"] == 100.0 for r in rows)
    info = json.loads((out / "run.json").read_text())
    assert info["concurrency"] == 32  # the environment's default
    assert (out / "incorrect_oracle.json").read_text() == ""


def test_sample_flag(tmp_path, dataset):
    out = tmp_path / "s"
    args = ["run", "--env", "jmultiwoz_tc", "--agent", "oracle", "--dataset", str(dataset), "--out", str(out), "--no-progress"]
    assert main([*args, "--sample", "3", "--seed", "5"]) == 0
    result = lines(out / "result_oracle.jsonl")
    assert len(result) == 3
    assert json.loads((out / "run.json").read_text())["env_options"] == {"sample": 3, "sample_seed": 5}


def test_trials_other_than_one_are_refused(tmp_path, dataset):
    with pytest.raises(ValueError, match=r"at most 1 trial\(s\) per example, got --trials 2"):
        run(RunConfig(env="jmultiwoz_tc", agent="oracle", out=tmp_path / "t", dataset=str(dataset), trials=2), progress=False)


# --- one source of truth ----------------------------------------------------------------------
def run_config(tmp_path: Path, dataset: Path, agent: str, out: Path, **extra) -> RunConfig:
    model = {"model": script(tmp_path, scripted_answers())} if agent == "scripted" else {"agent": agent}
    return RunConfig(env="jmultiwoz_tc", out=out, dataset=str(dataset), concurrency=4, **model, **extra)


def published(out: Path) -> dict[str, bytes]:
    """The exported files of a run directory, by kind (``result``, ``score``, ...)."""
    return {p.name.split("_", 1)[0]: p.read_bytes() for p in out.iterdir() if p.name.split("_", 1)[0] in
            ("result", "score", "incorrect", "diagnostics")}


def check_agreement(out: Path) -> None:
    """The exported result file holds one line per trajectory, each the trajectory's own line, in
    dataset order; the score file is what the published script gives for it."""
    trajectories = read_trajectories(out)
    (result,) = out.glob("result_*.jsonl")
    rows = lines(result)
    dialogues = {r["data_id"]: r["dialogue_id"] for r in records()[0]}
    order = list(dialogues)
    by_id = {t.example_id: t for t in trajectories}
    assert len(rows) == len(trajectories) == len(by_id)
    assert [r["data_id"] for r in rows] == sorted(by_id, key=order.index)
    assert rows == [result_line(by_id[r["data_id"]], dialogues[r["data_id"]], TOOL_NAMES) for r in rows]
    exact = {s.example_id: s.value for s in read_scores(out) if s.grader == "jmultiwoz_exact"}
    assert set(exact) == {t.example_id for t in trajectories if t.status != "error"}
    (score,) = out.glob("score_*.json")
    table = {r["評価項目"]: r for r in lines(score)}  # the graders' scores agree with the published rows
    assert (table["全体"]["評価対象数"], table["全体"]["正解数"]) == (len(exact), sum(exact.values()))
    calls = {g["data_id"] for g in records()[1] if g["ground_truth"]} & set(exact)
    assert table["tool call精度"]["正解数"] == sum(exact[i] for i in calls)


@pytest.mark.parametrize("agent", ["oracle", "scripted"])
@pytest.mark.parametrize("keep", [0, 3, 6])
def test_a_run_killed_at_any_moment_then_resumed_exports_what_a_whole_run_does(tmp_path, dataset, agent, keep):
    whole = tmp_path / "whole"
    run(run_config(tmp_path, dataset, agent, whole), progress=False)
    out = tmp_path / "killed"
    run(run_config(tmp_path, dataset, agent, out), progress=False)
    # killed mid-way: the trajectories end after `keep` lines and half of the next one (a torn
    # line), and the exports of an earlier grading no longer agree with them
    path = out / "trajectories.jsonl"
    kept = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(kept[:keep]) + kept[keep][: len(kept[keep]) // 2])
    (result,) = out.glob("result_*.jsonl")
    result.write_text('{"data_id": "stale", "tool_calls": []}\ngarbage\n', encoding="utf-8")
    with pytest.warns(UserWarning, match="torn last line"):
        run(run_config(tmp_path, dataset, agent, out, resume=True), progress=False)
    check_agreement(out)
    before, after = published(whole), published(out)
    assert after["score"] == before["score"] and after["incorrect"] == before["incorrect"]
    assert after["result"] == before["result"]
    assert json.loads(after["diagnostics"])["lenient_table"] == json.loads(before["diagnostics"])["lenient_table"]


def test_nothing_is_exported_while_a_run_plays(tmp_path, dataset):
    class Watching(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.update(p.name for p in out.iterdir())
            return super()._generate(messages, stop, run_manager, **kwargs)

    seen: set[str] = set()
    out = tmp_path / "w"
    run(RunConfig(env="jmultiwoz_tc", out=out, model=Watching(turns=[""]), dataset=str(dataset)), progress=False)
    assert seen == {"run.json", "trajectories.jsonl"}
    check_agreement(out)


def test_grading_again_rewrites_the_exports_from_the_trajectories(tmp_path, dataset):
    out = tmp_path / "g"
    run(run_config(tmp_path, dataset, "scripted", out), progress=False)
    before = published(out)
    for path in out.glob("*_*.json*"):
        if path.name.split("_", 1)[0] in before:
            path.write_text("edited by hand\n", encoding="utf-8")
    grade(out)
    assert published(out) == before
    check_agreement(out)


@pytest.mark.skipif(not EVALUATE_PY.exists(), reason="the published evaluate.py is not at ../shared/reference")
def test_exported_score_file_is_what_the_published_script_gives(tmp_path, dataset):
    out = tmp_path / "p"
    run(run_config(tmp_path, dataset, "scripted", out), progress=False)
    (result,) = out.glob("result_*.jsonl")
    (score,) = out.glob("score_*.json")
    assert lines(score) == reference_rows(result, ndjson(records()[1]), tmp_path / "ref")


def test_result_order_does_not_depend_on_completion_order(tmp_path, dataset):
    import asyncio

    from toolgym.providers import register_provider

    class Slow(ScriptedChatModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            await asyncio.sleep(0.02 * (10 - len(messages)))  # early turns (short histories) finish last
            return self._generate(messages, stop, run_manager, **kwargs)

    register_provider("slow-test")(lambda name, settings: Slow(turns=[""]))
    out = tmp_path / "o"
    run(RunConfig(env="jmultiwoz_tc", out=out, model="slow-test", dataset=str(dataset), concurrency=8), progress=False)
    finished = [t.example_id for t in read_trajectories(out)]
    dataset_order = [r["data_id"] for r in records()[0]]
    assert finished != dataset_order  # they really finished out of order
    assert [r["data_id"] for r in lines(out / "result_slow-test.jsonl")] == dataset_order


def test_run_with_a_bad_dataset_line_stops_before_any_model_call(tmp_path, capsys):
    inputs, _ = records()
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in inputs[:2]) + "{oops\n"
    bad = write_dataset(tmp_path / "bad", "json", input_text=text)
    out = tmp_path / "o"
    out.mkdir()
    (out / "result_oracle.jsonl").write_text('{"data_id": "x", "tool_calls": []}\n', encoding="utf-8")
    code = main(["run", "--env", "jmultiwoz_tc", "--agent", "oracle", "--dataset", str(bad), "--out", str(out), "--no-progress"])
    err = "".join(capsys.readouterr().err.split())  # the message may be wrapped at any character
    assert code == 2 and "jmultiwoz_tc_input.json:3:notvalidJSON" in err and "Traceback" not in err
    assert (out / "result_oracle.jsonl").read_text(encoding="utf-8") == '{"data_id": "x", "tool_calls": []}\n'
    assert not (out / "trajectories.jsonl").exists()

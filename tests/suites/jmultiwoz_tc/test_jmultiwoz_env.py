"""The jmultiwoz_tc environment end to end: tools from JSON schemas, one model answer per turn,
the published result/score files, resume, and the grade command's handling of bad input."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool

from tests.jmultiwoz_helpers import HOTEL, TAXI, TOOLS, WEATHER, records, result_row, write_dataset
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.environments import get_environment
from toolgym.suites.jmultiwoz_tc.scoring import PUBLISHED_ROWS, safe_model_name
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runio import RunDirError, read_trajectories
from toolgym.runner import RunConfig, run

ENV = get_environment("jmultiwoz_tc")


@pytest.fixture
def dataset(tmp_path) -> Path:
    return write_dataset(tmp_path / "data", "zip")


def first_example(dataset, index=1):
    return load_examples(dataset, ENV)[index]


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
    assert (out / "scores.jsonl").exists()


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
    with pytest.raises(ValueError, match="--trials must be 1"):
        run(RunConfig(env="jmultiwoz_tc", agent="oracle", out=tmp_path / "t", dataset=str(dataset), trials=2), progress=False)


def test_resume_skips_present_ids_repairs_a_torn_line_and_loses_nothing(tmp_path, dataset):
    out = tmp_path / "r"
    config = {"env": "jmultiwoz_tc", "agent": "oracle", "out": out, "dataset": str(dataset)}
    run(RunConfig(**config, limit=3), progress=False)
    result = out / "result_oracle.jsonl"
    before = result.read_bytes()
    with pytest.raises(RunDirError, match="--resume"):
        run(RunConfig(**config), progress=False)
    assert result.read_bytes() == before
    # a line written by hand is kept and its id is not re-run; a torn last line is cut off
    hand = result_row("jmultiwoz_tc_1_turn_0", [HOTEL])
    hand["dialogue_id"] = "dialogue_B"
    with open(result, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(hand, ensure_ascii=False) + "\n" + '{"data_id": "jmultiwoz_tc_1_tu')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(RunConfig(**config, resume=True), progress=False)
    assert any("torn last line" in str(w.message) for w in caught)
    after = lines(result)
    assert [r["data_id"] for r in after] == [r["data_id"] for r in records()[0]]
    assert {json.dumps(r, ensure_ascii=False) for r in after} >= {x for x in before.decode().splitlines()}
    assert next(r for r in after if r["data_id"] == "jmultiwoz_tc_1_turn_0")["tool_calls"] == [HOTEL]
    assert len(read_trajectories(out)) == 6  # the hand-written turn was not played
    rows = {r["評価項目"]: r for r in lines(out / "score_oracle.json")}
    assert rows["全体"]["総データ数"] == 7 and rows["ツール不使用判断"]["不正解数"] == 1


def test_resume_refuses_a_corrupt_middle_line(tmp_path, dataset):
    out = tmp_path / "c"
    config = {"env": "jmultiwoz_tc", "agent": "oracle", "out": out, "dataset": str(dataset)}
    run(RunConfig(**config, limit=2), progress=False)
    result = out / "result_oracle.jsonl"
    text = result.read_text(encoding="utf-8")
    result.write_text("garbage\n" + text, encoding="utf-8")
    with pytest.raises(RunDirError, match=r"result_oracle\.jsonl:1: cannot resume"):
        run(RunConfig(**config, resume=True), progress=False)
    assert result.read_text(encoding="utf-8") == "garbage\n" + text


# --- grade --result --------------------------------------------------------------------------
def grade(result: Path, dataset: Path, out: Path) -> int:
    return main(["grade", "--env", "jmultiwoz_tc", "--result", str(result), "--dataset", str(dataset), "--out", str(out)])


def write_result(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_grade_any_result_file(tmp_path, dataset, capsys):
    golds = records()[1]
    rows = [result_row(g["data_id"], g["ground_truth"]) for g in golds]
    rows[1] = result_row(golds[1]["data_id"], [{"type": "function", "function": {"name": "Search_hotel", "arguments": json.dumps(HOTEL["arguments"])}}])
    result = write_result(tmp_path / "result_other-tool.json", rows)
    assert grade(result, dataset, tmp_path / "g") == 0
    scores = lines(tmp_path / "g" / "score_other-tool.json")
    assert [r["全体の正答率(%)"] for r in scores] == [100.0] * 5
    printed = capsys.readouterr().out
    assert "tool call精度" in printed and "100.0" in printed


def test_grade_warns_about_unknown_ids(tmp_path, dataset, capsys):
    rows = [result_row("jmultiwoz_tc_0_turn_0"), result_row("nope_1"), result_row("nope_2", [HOTEL])]
    assert grade(write_result(tmp_path / "result_m.jsonl", rows), dataset, tmp_path / "g") == 0
    assert "2 result id(s) are not in the gold" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"data_id": "jmultiwoz_tc_0_turn_0", "tool_calls": []}\n{broken\n', "result_m.jsonl: 1 invalid line(s): line 2: not valid JSON"),
        ('{"tool_calls": []}\n', "line 1: record without 'data_id'"),
        ("", "no results (the file is empty)"),
    ],
)
def test_grade_bad_input_is_a_message_not_a_traceback(tmp_path, dataset, capsys, text, expected):
    out = tmp_path / "g"
    out.mkdir()
    (out / "score_m.json").write_text("earlier scores\n", encoding="utf-8")
    result = tmp_path / "result_m.jsonl"
    result.write_text(text, encoding="utf-8")
    assert grade(result, dataset, out) == 2
    err = capsys.readouterr().err
    assert "".join(expected.split()) in "".join(err.split()) and "Traceback" not in err
    assert (out / "score_m.json").read_text(encoding="utf-8") == "earlier scores\n"  # nothing lost
    assert result.read_text(encoding="utf-8") == text


def test_grade_arguments_not_an_object_is_a_warning(tmp_path, dataset, capsys):
    rows = [result_row("jmultiwoz_tc_0_turn_1", [{"name": "Search_hotel", "arguments": "東京"}])]
    assert grade(write_result(tmp_path / "result_m.jsonl", rows), dataset, tmp_path / "g") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "result_m.jsonl: 1 line(s) have call arguments that are not a JSON object" in err and "lines 1" in err


def test_grade_needs_env_and_dataset(tmp_path, capsys):
    assert main(["grade", "--result", str(tmp_path / "r.jsonl")]) == 2
    assert "needs --env and --dataset" in capsys.readouterr().err
    assert main(["grade", "--env", "jmultiwoz_tc", "--result", str(tmp_path / "r.jsonl"), "--dataset", str(tmp_path / "x.txt")]) == 2


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

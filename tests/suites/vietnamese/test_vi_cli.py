"""The Vietnamese tasks through the command line: the oracle scores 100%, a writing model is
scored by answer extraction (unanswered kept apart from wrong)."""

import json

import pytest

import toolgym
from tests.suites.vietnamese.vi_helpers import EXAMS_TEST, FIXTURES, printed_row
from toolgym.agents.direct import DirectAgent
from toolgym.agents.tool_calling import ToolCallingAgent
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.plugins import get_benchmark, get_grader
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runio import read_scores, read_trajectories

EXAM = get_benchmark("exam_vi")


@pytest.mark.parametrize(
    ("env", "dataset", "n", "grader"),
    [
        ("exam_vi", "multilingual_test_vi.jsonl", 6, "choice_accuracy"),
        ("xcopa_vi", "test.vi.jsonl", 3, "choice_accuracy"),
        ("lambada_vi", "xquad_mini.json", 2, "last_word_accuracy"),
    ],
)
def test_oracle_scores_100_percent(tmp_path, capsys, env, dataset, n, grader):
    out = tmp_path / "run"
    argv = ["run", "--env", env, "--dataset", str(FIXTURES / dataset), "--agent", "oracle", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    scores = [s for s in read_scores(out) if s.grader == grader]
    assert len(scores) == n and all(s.value == 1.0 for s in scores)
    # the suite's report table: accuracy, n, correct, wrong, unanswered (, chance)
    assert printed_row(capsys.readouterr().out, "all", after=f"{env}: {grader}")[1:6] == [
        "1.000 ± 0.000", str(n), str(n), "0", "0"]


def test_direct_agent_answers_are_extracted(tmp_path, script_file, capsys):
    # answers in Vietnamese phrasing; one without a letter, one wrong
    examples = load_examples(EXAMS_TEST, EXAM, {"shots": 1})
    replies = {"t-bio-1": "Đáp án: B. Tim", "t-bio-2": "Tôi chọn (A)", "t-bio-3": "Tôi không chắc.",
               "t-his-1": "Câu trả lời là D", "t-his-2": "đáp án đúng là d", "t-phy-1": "Ａ"}
    script = script_file({"by_input": {e.input: [replies[e.id]] for e in examples}})
    out = tmp_path / "run"
    argv = ["run", "--env", "exam_vi", "--dataset", str(EXAMS_TEST), "--shots", "1",
            "--agent", "direct", "--model", f"scripted:{script}", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    outcome = {s.example_id: s.details["outcome"] for s in read_scores(out)}
    assert outcome == {"t-bio-1": "correct", "t-bio-2": "correct", "t-bio-3": "unanswered",
                       "t-his-1": "wrong", "t-his-2": "correct", "t-phy-1": "correct"}
    # accuracy ± s.e., n, correct, wrong, unanswered, chance: unanswered is kept apart from wrong
    row = printed_row(capsys.readouterr().out, "all", after="exam_vi: choice_accuracy by subject")
    assert row == ["all", "0.667 ± 0.192", "6", "4", "1", "1", "0.250"]
    traj = read_trajectories(out)[0]
    assert traj.status == "completed" and len(traj.steps) == 1 and traj.final_state == {}
    # the same table from the Python API
    (table,) = EXAM.report(toolgym.load_run(out))
    assert table.rows[1] == {"subject": "Biology", "accuracy ± s.e.": "0.667 ± 0.272", "n": 3, "correct": 2,
                             "wrong": 0, "unanswered": 1, "chance": "0.250"}
    assert [r["subject"] for r in table.rows] == ["all", "Biology", "History", "Physics"]


def test_direct_agent_sends_instructions_and_stop_sequences():
    seen = {}

    class Recording(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen["messages"], seen["stop"] = messages, stop
            return super()._generate(messages, stop, run_manager, **kwargs)

    example = load_examples(EXAMS_TEST, EXAM, {"shots": 1})[0]
    env = EXAM.environment()
    env.reset(example)
    traj = DirectAgent(model=Recording(turns=["C"])).run(env, example)
    assert traj.final_answer == "C"
    assert seen["messages"][0].content == EXAM.environment.instructions
    assert seen["messages"][1].content == example.input
    assert seen["stop"] == ["\nCâu hỏi:", "\n\nCâu hỏi"]  # where a next question would start


def test_tool_calling_agent_without_tools_returns_the_text():
    example = load_examples(EXAMS_TEST, EXAM, {"shots": 0})[0]
    env = EXAM.environment()
    env.reset(example)
    traj = ToolCallingAgent(model=ScriptedChatModel(turns=["Đáp án: B"])).run(env, example)
    assert traj.status == "completed" and traj.final_answer == "Đáp án: B"
    assert get_grader("choice_accuracy").grade(example, traj).value == 1.0


def test_run_json_records_the_options(tmp_path):
    out = tmp_path / "run"
    main(["run", "--env", "exam_vi", "--dataset", str(EXAMS_TEST), "--agent", "oracle",
          "--shots", "3", "--sample", "4", "--sample-seed", "7", "--out", str(out), "--no-progress"])
    info = json.loads((out / "run.json").read_text())
    assert info["env_options"] == {"shots": 3, "sample": 4, "sample_seed": 7}
    assert len(read_trajectories(out)) == 4
    assert main(["grade", str(out)]) == 0  # the same sample is rebuilt from run.json


def test_bad_dataset_is_a_clear_cli_error(tmp_path, capsys):
    bad = tmp_path / "multilingual_test_vi.jsonl"
    bad.write_text('{"id": "x", "question": {"stem": "?", "choices": []}, "answerKey": "A"}\n')
    assert main(["run", "--env", "exam_vi", "--dataset", str(bad), "--agent", "oracle", "--shots", "0",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "multilingual_test_vi.jsonl:1: answerKey 'A' is not among the labels" in capsys.readouterr().err


def test_run_without_a_dataset_says_there_is_no_built_in_one(tmp_path, capsys):
    assert main(["run", "--env", "exam_vi", "--agent", "oracle", "--out", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "exam_vi has no built-in dataset: give --dataset PATH" in err and "'test'" not in err

"""Log-likelihood scoring with a scripted scorer: choice by the most probable option,
LAMBADA accuracy and perplexity, the fallback to answer extraction."""

import json
import math

import pytest

import toolgym
from tests.suites.vietnamese.vi_helpers import EXAMS_TEST, XQUAD, printed_row
from toolgym.agents.loglik import Backend, LoglikAgent
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.logprobs import ScriptedScorer, build_scorer, perplexity
from toolgym.plugins import get_benchmark
from toolgym.providers import ModelSettings
from toolgym.runio import read_scores, read_trajectories
from toolgym.suites.vietnamese.graders import ChoiceAccuracy, ChoiceAccuracyNorm, LastWordAccuracy, TargetNLL
from toolgym.suites.vietnamese.report import run_perplexity

EXAM = get_benchmark("exam_vi")
LAMBADA = get_benchmark("lambada_vi")


def exam_example(qid="t-bio-1"):
    return {e.id: e for e in load_examples(EXAMS_TEST, EXAM, {"shots": 2})}[qid]


def play(agent, benchmark, example):
    env = benchmark.environment()
    env.reset(example)
    return agent.run(env, example)


def test_perplexity_of_a_known_sequence():
    # probabilities 1/2 and 1/8: mean log-prob = -2 ln 2, perplexity = 4
    result = perplexity([[math.log(0.5), math.log(0.125)]])
    assert result.value == pytest.approx(4.0)
    assert (result.n_tokens, result.n_sequences) == (2, 1)
    # token-weighted over sequences: three tokens of probability 1/2 and one of 1/16
    pooled = perplexity([[math.log(0.5)] * 3, [math.log(1 / 16)]])
    assert pooled.value == pytest.approx(math.exp((3 * math.log(2) + math.log(16)) / 4))
    assert math.isnan(perplexity([]).value)


def test_the_most_probable_option_is_chosen():
    example = exam_example()
    scorer = ScriptedScorer(logprobs={
        " A. Phổi": [-2.0, -1.0],          # -3.0
        " B. Tim": [-0.5, -0.4],           # -0.9  best sum
        " C. Gan": [-1.0, -0.2],           # -1.2
        " D. Thận": [-3.0, -0.1, -0.1],    # -3.2
    })
    traj = play(LoglikAgent(model=scorer), EXAM, example)
    assert traj.status == "completed" and traj.final_answer == "B"
    assert [ctx for ctx, _ in scorer.calls] == [example.input] * 4
    assert traj.final_state["choices"]["D"] == {"logprobs": [-3.0, -0.1, -0.1], "chars": 8, "greedy": False}
    score = ChoiceAccuracy().grade(example, traj)
    assert score.value == 1.0 and score.details["mode"] == "loglik" and score.details["chosen"] == "B"


def test_length_normalised_choice_can_differ():
    example = exam_example()
    scorer = ScriptedScorer(logprobs={
        " A. Phổi": [-1.0], " B. Tim": [-1.1], " C. Gan": [-5.0], " D. Thận": [-5.0],
    })
    traj = play(LoglikAgent(model=scorer), EXAM, example)
    assert ChoiceAccuracy().grade(example, traj).details["chosen"] == "A"
    # per character: A -1/8 = -0.125, B -1.1/7 ≈ -0.157: still A
    assert ChoiceAccuracyNorm().grade(example, traj).details["chosen"] == "A"
    scorer.logprobs[" A. Phổi"] = [-1.2]  # sum: B wins (-1.1); per char: A -0.15 beats B -0.157
    traj = play(LoglikAgent(model=scorer), EXAM, example)
    assert ChoiceAccuracy().grade(example, traj).details["chosen"] == "B"
    assert ChoiceAccuracyNorm().grade(example, traj).details["chosen"] == "A"


def test_lambada_greedy_accuracy_and_nll():
    example = load_examples(XQUAD, LAMBADA, {})[0]
    scorer = ScriptedScorer(logprobs={" Hồng": [math.log(0.5), math.log(0.25)]}, greedy={" Hồng"})
    traj = play(LoglikAgent(model=scorer), LAMBADA, example)
    assert traj.final_state["greedy"] is True
    assert LastWordAccuracy().grade(example, traj).value == 1.0
    nll = TargetNLL().grade(example, traj)
    assert nll.value == pytest.approx(math.log(8)) and nll.details["n_tokens"] == 2
    assert run_perplexity([nll]).value == pytest.approx(math.sqrt(8))
    scorer.greedy.clear()
    assert LastWordAccuracy().grade(example, play(LoglikAgent(model=scorer), LAMBADA, example)).value == 0.0


def test_a_missing_continuation_is_a_recorded_error_not_a_crash():
    traj = play(LoglikAgent(model=ScriptedScorer(logprobs={})), EXAM, exam_example())
    assert traj.status == "error" and "no log-probabilities" in traj.error


def test_chat_only_provider_falls_back_to_answer_extraction(script_file):
    chat_file = script_file(["Đáp án: (b)"])
    with pytest.warns(UserWarning, match="falling back to answer extraction"):
        backend = LoglikAgent.make_model(f"scripted:{chat_file}", ModelSettings())
    assert backend.scorer is None and backend.chat is not None
    agent = LoglikAgent(model=backend)
    assert agent.describe()["scoring"] == "answer_extraction"
    example = exam_example()
    traj = play(agent, EXAM, example)
    assert traj.final_answer == "Đáp án: (b)"
    assert ChoiceAccuracy().grade(example, traj).details == {
        "outcome": "correct", "chosen": "B", "expected": "B", "mode": "extraction", "subject": "Biology"}
    assert ChoiceAccuracyNorm().grade(example, traj) is None


def test_build_scorer_says_why_there_is_none(script_file):
    scorer, note = build_scorer("anthropic:claude", ModelSettings())
    assert scorer is None and "chat-only" in note
    scorer, note = build_scorer(f"scripted:{script_file({'logprobs': {' x': [-1]}})}", ModelSettings())
    assert isinstance(scorer, ScriptedScorer) and note == "log-likelihood via scripted"
    assert isinstance(LoglikAgent(model=Backend(scorer)).backend.scorer, ScriptedScorer)


def exam_scorer_doc():
    """Log-probabilities that make the fixture's Biology answers right and the rest wrong."""
    rows = [json.loads(line) for line in EXAMS_TEST.read_text(encoding="utf-8").splitlines()]
    table = {}
    for row in rows:
        for c in row["question"]["choices"]:
            right = c["label"] == row["answerKey"]
            good = right == (row["info"]["subject"] == "Biology")
            table[f" {c['label']}. {c['text']}"] = [-0.5 if good else -2.0]
    return {"logprobs": table}


def test_cli_loglik_run_reports_accuracy_per_subject(tmp_path, script_file, capsys):
    scorer_file = script_file(exam_scorer_doc())
    out = tmp_path / "run"
    argv = ["run", "--env", "exam_vi", "--dataset", str(EXAMS_TEST), "--agent", "loglik",
            "--model", f"scripted:{scorer_file}", "--shots", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    scores = {s.example_id: s for s in read_scores(out)}
    assert {k for k, s in scores.items() if s.value == 1.0} == {"t-bio-1", "t-bio-2", "t-bio-3"}
    info = json.loads((out / "run.json").read_text())
    assert info["env_options"] == {"shots": 2} and info["agent"]["scoring"] == "loglik"
    text = capsys.readouterr().out
    title = "exam_vi: choice_accuracy by subject"
    # accuracy ± s.e., n, correct, wrong, unanswered, chance
    assert printed_row(text, "all", after=title)[1:] == ["0.500 ± 0.204", "6", "3", "3", "0", "0.250"]
    assert printed_row(text, "Biology", after=title)[1:3] == ["1.000 ± 0.000", "3"]
    assert printed_row(text, "History", after=title)[1:3] == ["0.000 ± 0.000", "2"]
    # grading offline, with the length-normalised grader too, gives the same table and one more
    assert main(["grade", str(out), "--grader", "choice_accuracy", "--grader", "choice_accuracy_norm"]) == 0
    again = capsys.readouterr().out
    assert printed_row(again, "Biology", after=title) == printed_row(text, "Biology", after=title)
    assert printed_row(again, "all", after="exam_vi: choice_accuracy_norm by subject")[2] == "6"
    tables = EXAM.report(toolgym.load_run(out))
    assert [t.title for t in tables] == [title, "exam_vi: choice_accuracy_norm by subject"]


def test_cli_lambada_perplexity(tmp_path, script_file, capsys):
    scorer_file = script_file({"logprobs": {" Hồng": [math.log(0.5)], "ASL": [math.log(0.25), math.log(0.5)]},
                               "greedy": [" Hồng"]})
    out = tmp_path / "run"
    argv = ["run", "--env", "lambada_vi", "--dataset", str(XQUAD), "--agent", "loglik",
            "--model", f"scripted:{scorer_file}", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert len(read_trajectories(out)) == 2
    text = capsys.readouterr().out
    # accuracy 1 of 2: accuracy ± s.e., n, correct, wrong, unanswered
    assert printed_row(text, "all", after="lambada_vi: last_word_accuracy")[1:] == ["0.500 ± 0.354", "2", "1", "1", "0"]
    # perplexity over 3 tokens of 2 targets: exp((ln2 + ln4 + ln2) / 3) = exp(4 ln2 / 3)
    ppl = f"{math.exp(4 * math.log(2) / 3):.2f}"
    assert printed_row(text, ppl, after="lambada_vi: perplexity of the targets")[1:3] == ["3", "2"]
    (_, table) = LAMBADA.report(toolgym.load_run(out))
    assert table.rows == [{"perplexity": ppl, "tokens": 3, "targets": 2, "definition": "exp(-mean log-prob per token)"}]

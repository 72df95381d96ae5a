"""LLM-as-judge graders (scripted judges), the reply cache, the numeric checker, and how judge
settings flow from the command line into graders."""

from __future__ import annotations

import json
import math

import pytest

from toolgym import Benchmark
from toolgym.cli import main
from toolgym.environments import Environment, tool
from toolgym.graders.answer import AnswerMatch, last_number
from toolgym.graders.judge import (
    Correctness,
    numbers_match,
    parse_verdict,
)
from toolgym.plugins import get_benchmark, get_grader
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Score, Trajectory
from toolgym.runio import read_run, read_scores
from toolgym.runner import RunConfig, grade, make_graders, run
from toolgym.suites.multiverse_math.graders import MultiverseCorrectness
from toolgym.views.analysis import agreement

CORRECT = "VERDICT: CORRECT\nREASON: Same city as the reference."
INCORRECT = "VERDICT: INCORRECT\nREASON: The reference says Paris."


def example(reference="New York", question="What is the city for location ID 1?") -> Example:
    return Example(id="q1", input=question, expected_steps=["get_city_for_location"], reference=reference)


def trajectory(answer: str | None, trial: int = 0) -> Trajectory:
    return Trajectory(example_id="q1", trial=trial, env="relational_data", agent="tool_calling", status="completed", final_answer=answer)


def judge(reply_or_turns, tmp_path, grader=Correctness, **kwargs):
    turns = reply_or_turns if isinstance(reply_or_turns, list) else [reply_or_turns]
    return grader(judge_model="scripted:test", judge_cache=str(tmp_path / "cache"), judge=ScriptedChatModel(turns=turns), **kwargs)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "value", "reason"),
    [
        (CORRECT, 1.0, "Same city as the reference."),
        (INCORRECT, 0.0, "The reference says Paris."),
        ("**Verdict:** incorrect\nReason: wrong id", 0.0, "wrong id"),
        ("The answer is CORRECT because it names New York.", 1.0, "The answer is CORRECT because it names New York."),
        ("The answer is correct.", 1.0, "The answer is correct."),
        ("I cannot tell without more context.", None, "I cannot tell without more context."),
        ("It is CORRECT in part but INCORRECT overall.", None, "It is CORRECT in part but INCORRECT overall."),
        ("The answer is not correct.", None, "The answer is not correct."),
        ("", None, ""),
    ],
)
def test_parse_verdict(reply, value, reason):
    verdict = parse_verdict(reply)
    assert verdict.value == value
    assert verdict.reason == reason
    assert verdict.verdict == {1.0: "CORRECT", 0.0: "INCORRECT", None: None}[value]


# --- the correctness grader --------------------------------------------------------------------


def test_correct_and_incorrect_with_prompt_and_reply_kept(tmp_path):
    score = judge(CORRECT, tmp_path).grade(example(), trajectory("Location 1 is in New York."))
    assert score.grader == "correctness" and score.value == 1.0
    assert score.explanation == "CORRECT: Same city as the reference."
    assert score.details["reply"] == CORRECT and score.details["cached"] is False
    prompt = score.details["prompt"]
    assert [m["role"] for m in prompt] == ["system", "human"]
    assert "REFERENCE ANSWER:\nNew York" in prompt[1]["content"]
    assert "ASSISTANT'S ANSWER:\nLocation 1 is in New York." in prompt[1]["content"]
    assert "What is the city for location ID 1?" in prompt[1]["content"]

    wrong = judge(INCORRECT, tmp_path / "other").grade(example(), trajectory("Paris"))
    assert wrong.value == 0.0 and wrong.details["verdict"] == "INCORRECT"


def test_garbage_reply_is_unscored_with_raw_text(tmp_path):
    score = judge("Hmm, hard to say.", tmp_path).grade(example(), trajectory("New York"))
    assert score.value is None
    assert score.details["reply"] == "Hmm, hard to say." and score.details["verdict"] is None
    assert "unparseable" in score.explanation
    assert json.loads(score.model_dump_json())["value"] is None


def test_second_grading_comes_from_the_cache(tmp_path):
    first = judge(CORRECT, tmp_path).grade(example(), trajectory("New York"))
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["reply"] == CORRECT
    # A judge with an empty script raises if it is called: the cache must answer.
    silent = judge([], tmp_path)
    again = silent.grade(example(), trajectory("New York"))
    assert again.value == first.value == 1.0 and again.details["cached"] is True
    # Another answer is another key: the (empty) judge is called, fails, and the score is unscored.
    other = silent.grade(example(), trajectory("Boston"))
    assert other.value is None and other.details["error"].startswith("IndexError")
    # Another judge model is another key too.
    renamed = Correctness(judge_model="scripted:other", judge_cache=str(tmp_path / "cache"), judge=ScriptedChatModel(turns=[]))
    assert renamed.grade(example(), trajectory("New York")).value is None


def test_cache_off_writes_nothing(tmp_path):
    grader = Correctness(judge_model="scripted:test", judge_cache="", judge=ScriptedChatModel(turns=[CORRECT]))
    assert grader.grade(example(), trajectory("New York")).value == 1.0
    assert grader.cache is None
    assert not list(tmp_path.rglob("*.json"))


def test_no_answer_and_no_reference(tmp_path):
    silent = judge([], tmp_path)
    empty = silent.grade(example(), trajectory(None))
    assert empty.value == 0.0 and empty.explanation == "no final answer"
    assert silent.grade(example(reference=None), trajectory("x")) is None


def test_judge_needs_a_model_and_builds_one_from_a_spec(tmp_path):
    with pytest.raises(ValueError, match="--judge-model"):
        Correctness()
    script = tmp_path / "judge.json"
    script.write_text(json.dumps([INCORRECT]))
    grader = get_grader("correctness", judge_model=f"scripted:{script}", judge_cache="")
    assert isinstance(grader.judge, ScriptedChatModel)
    assert grader.grade(example(), trajectory("Paris")).value == 0.0


# --- multiverse math ---------------------------------------------------------------------------


def test_multiverse_judge_is_told_about_the_universe_and_carries_the_checker(tmp_path):
    ex = Example(id="q1", input="Add 2 and 3", expected_steps=["add"], reference=6.2)
    grader = judge(INCORRECT, tmp_path, grader=MultiverseCorrectness)
    score = grader.grade(ex, trajectory("In this universe add(2, 3) = 6.2."))
    assert score.grader == "multiverse_correctness"
    assert "different universe" in score.details["prompt"][0]["content"]
    assert score.value == 0.0  # the judge was wrong ...
    assert score.details["answer_match"] is True  # ... the checker was right
    checker = AnswerMatch().grade(ex, trajectory("In this universe add(2, 3) = 6.2."))
    assert checker.value == 1.0
    found = agreement([score, checker], "multiverse_correctness", "answer_match")
    assert (found.n, found.both_pass, found.checker_only, found.rate) == (1, 0, 1, 0.0)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("The answer is -1,234.5", -1234.5),
        ("about 3e-4", 3e-4),
        ("so the result is 6.2.", 6.2),
        ("between 2 and 3", 3.0),
        ("\u22125", -5.0),
        ("no digits here", None),
        (None, None),
    ],
)
def test_last_number(text, number):
    assert last_number(text) == number


def test_numbers_match_relative_tolerance():
    assert numbers_match(6.2000001, 6.2) is True  # 1.6e-8 relative
    assert numbers_match(6.21, 6.2) is False
    assert numbers_match(0.0, 0) is True
    assert numbers_match(1e-9, 0) is False  # relative tolerance only
    assert numbers_match(None, 1.0) is False
    assert numbers_match(1.0, "not a number") is None
    assert numbers_match(-4.0, "-4") is True



def test_agreement_counts_table_and_unscored():
    def s(grader, eid, value):
        return Score(example_id=eid, grader=grader, value=value)

    scores = [
        s("multiverse_correctness", "a", 1.0), s("answer_match", "a", 1.0),
        s("multiverse_correctness", "b", 0.0), s("answer_match", "b", 0.0),
        s("multiverse_correctness", "c", 1.0), s("answer_match", "c", 0.0),
        s("multiverse_correctness", "d", None), s("answer_match", "d", 1.0),
    ]
    found = agreement(scores, "multiverse_correctness", "answer_match")
    assert (found.n, found.both_pass, found.both_fail, found.judge_only, found.checker_only, found.judge_unscored) == (3, 1, 1, 1, 0, 1)
    assert math.isclose(found.rate, 2 / 3)
    assert agreement(scores, "correctness", "answer_match") is None


# --- settings flow -----------------------------------------------------------------------------


def test_judge_on_by_default_only_with_a_judge_model(tmp_path):
    script = tmp_path / "judge.json"
    script.write_text(json.dumps([CORRECT]))
    settings = {"judge_model": f"scripted:{script}", "judge_cache": str(tmp_path / "c")}
    multiverse, relational = get_benchmark("multiverse_math"), get_benchmark("relational_data")
    typewriter = get_benchmark("typewriter_1")

    def names(benchmark, graders=None, settings=None):
        return [g.name for g, _ in make_graders(benchmark, graders, settings)]

    assert names(multiverse) == ["steps_exact", "step_ratio", "answer_match"]
    assert names(multiverse, None, settings) == ["steps_exact", "step_ratio", "answer_match", "multiverse_correctness"]
    assert names(relational, None, settings) == ["steps_exact", "step_ratio", "answer_match", "correctness"]
    assert names(typewriter, None, settings) == ["final_state", "steps_exact", "step_ratio"]
    judged = make_graders(relational, ["correctness"], settings)[0][0]
    assert judged.judge_model == settings["judge_model"] and judged.judge_cache == settings["judge_cache"]
    with pytest.raises(ValueError, match="needs a judge model"):
        make_graders(typewriter, ["correctness"], {"judge_model": None})


def test_cli_run_records_judge_settings_and_regrading_uses_the_cache(tmp_path, capsys):
    script = tmp_path / "judge.json"
    script.write_text(json.dumps({"turns": [CORRECT]}))
    cache = tmp_path / "cache"
    out = tmp_path / "run"
    argv = [
        "run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "3", "--out", str(out), "--no-progress",
        "--grader", "final_state", "--grader", "correctness",
        "--judge-model", f"scripted:{script}", "--judge-cache", str(cache),
    ]
    assert main(argv) == 0
    info = read_run(out)
    assert info.grader_settings == {"judge_model": f"scripted:{script}", "judge_cache": str(cache)}
    first = [s for s in read_scores(out) if s.grader == "correctness"]
    assert [s.value for s in first] == [1.0, 1.0, 1.0] and not any(s.details["cached"] for s in first)
    # Re-grade with the recorded settings while the judge's script is empty: no judge call may happen.
    script.write_text(json.dumps({"turns": []}))
    assert main(["grade", str(out)]) == 0
    again = [s for s in read_scores(out) if s.grader == "correctness"]
    assert [s.value for s in again] == [1.0, 1.0, 1.0] and all(s.details["cached"] for s in again)
    # Without the cache the empty judge is called and every score becomes unscored, not an error.
    assert main(["grade", str(out), "--no-judge-cache"]) == 0
    assert [s.value for s in read_scores(out) if s.grader == "correctness"] == [None, None, None]
    assert "correctness" in capsys.readouterr().out


class JudgedLookup(Environment):
    """A one-tool environment whose benchmark declares its own judge graders (test only)."""

    name = "test_judged_lookup"

    @tool
    def lookup(self, key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return {"capital": "Paris"}.get(key, "unknown")


JUDGED = Benchmark(environment=JudgedLookup, graders=("steps_exact",), judge_graders=("correctness",))


def test_environment_declared_judges_switch_on_when_regrading_with_a_judge(tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({
        "id": "1", "input": "Capital of France?", "expected_steps": ["lookup"],
        "expected_calls": [{"name": "lookup", "arguments": {"key": "capital"}}], "reference": "Paris",
    }) + "\n")
    out = tmp_path / "run"
    rows = run(RunConfig(env=JUDGED, agent="oracle", dataset=str(dataset), out=out), progress=False).summary
    assert [r.grader for r in rows] == ["steps_exact"]  # no judge model: no judge
    script = tmp_path / "judge.json"
    script.write_text(json.dumps([CORRECT]))
    rows = grade(out, grader_settings={"judge_model": f"scripted:{script}", "judge_cache": ""}).summary
    assert [(r.grader, r.estimate.mean) for r in rows] == [("steps_exact", 1.0), ("correctness", 1.0)]

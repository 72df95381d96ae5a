"""Teacher forcing, fork, replay audit and injected faults (docs/step-by-step.md), on the real
environments with scripted models (the only test double: the model's answers)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import toolgym
from tests.conftest import call, turn
from toolgym.cli import main
from toolgym.providers.scripted import ScriptedChatModel

TYPEWRITER = {
    "id": "tw-abcd", "input": "abcd", "expected_state": {"paper": "abcd"},
    "expected_calls": [{"name": "type_letter", "arguments": {"letter": c}} for c in "abcd"],
}
RELATIONAL = {  # milestones whose arguments come from earlier results ($from)
    "id": "rd-tomasz", "input": "Which city does Tomasz live in?", "reference": "Montreal",
    "expected_calls": [
        {"name": "find_users_by_name", "arguments": {"name": "Tomasz"}},
        {"name": "get_user_location", "arguments": {"user_id": 117}},
        {"name": "get_city_for_location", "arguments": {"location_id": 58}},
    ],
    "milestones": [
        {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "tomasz"}}}},
        {"id": "location", "after": ["find"], "call": {"name": "get_user_location",
                                                        "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}},
        {"id": "city", "after": ["location"], "call": {"name": "get_city_for_location",
                                                        "arguments": {"location_id": {"$from": "location"}}}},
    ],
}
MATH = {  # expected_calls only: graded as a strict chain of them
    "id": "mm-wheel", "input": "A wheel has a radius of 3 metres. What is its circumference (2 times pi times the radius)?",
    "expected_calls": [
        {"name": "pi", "arguments": {}},
        {"name": "multiply", "arguments": {"a": 2, "b": 2.718281828459045}},
        {"name": "multiply", "arguments": {"a": 5.9802200226099, "b": 3}},
    ],
}
WRONG = {  # a wrong call for each example's step (1-based) k
    "typewriter_1": ("tw-abcd", 3, call("type_letter", letter="x")),
    "relational_data": ("rd-tomasz", 2, call("get_user_location", user_id=999)),
    "multiverse_math": ("mm-wheel", 3, call("multiply", a=5.9802200226099, b=4)),
}
EXAMPLES = {"typewriter_1": TYPEWRITER, "relational_data": RELATIONAL, "multiverse_math": MATH}


def reference_turns(example: dict, wrong_at: int | None = None, wrong: dict | None = None) -> list:
    """One scripted turn per reference call (the call at ``wrong_at`` replaced), then an answer."""
    turns = [turn(wrong if k == wrong_at else {"name": c["name"], "args": c.get("arguments", {})})
             for k, c in enumerate(example["expected_calls"], start=1)]
    return [*turns, "done"]


def next_step_scores(result) -> list:
    return sorted((s for s in result.scores if s.grader == "next_step"), key=lambda s: s.details["k"])


@pytest.mark.parametrize("env", sorted(WRONG))
def test_one_wrong_step_is_one_failed_next_step(env):
    example = EXAMPLES[env]
    _, k, wrong = WRONG[env]
    model = ScriptedChatModel(turns=reference_turns(example, k, wrong))
    result = toolgym.evaluate(env, model=model, dataset=[example], protocol="teacher-forced", trials=2)
    n = len(example["expected_calls"])
    scores = next_step_scores(result)
    assert len(scores) == 2 * n  # one per (trial, k)
    failed = [s for s in scores if s.value == 0.0]
    assert [s.details["k"] for s in failed] == [k, k]
    assert all(s.value == 1.0 for s in scores if s.details["k"] != k)
    assert failed[0].details["first_error"]["type"] == "wrong_arguments"
    forced = [t for t in result.trajectories if t.prefix_steps is not None]
    assert sorted(t.prefix_steps for t in forced) == sorted([*range(n)] * 2)
    for t in forced:  # the prefix is the reference, executed for real, then the model's one call
        assert [s.arguments for s in t.tool_steps[: t.prefix_steps]] == [c["arguments"] for c in example["expected_calls"][: t.prefix_steps]]
        assert len(t.model_steps) == t.prefix_steps + 1
        assert toolgym.states_after(t)[-1] == t.final_state  # the state after every step is recorded too
    # free-running episodes keep trials 0 and 1 and are graded by the usual graders only
    free_graders = {s.grader for s in result.scores if s.trial < 2}
    assert "next_step" not in free_graders and free_graders
    assert {s.grader for s in result.scores if s.trial >= 2} == {"next_step"}


def test_prompted_agent_is_teacher_forced_too():
    k = 2
    text = lambda c: f'Action:\n```json\n{json.dumps({"action": "type_letter", "action_input": {"letter": c}})}\n```'  # noqa: E731
    turns = [text(c if i != k else "q") for i, c in enumerate("abcd", start=1)] + ["Final Answer: done"]
    result = toolgym.evaluate("typewriter_1", agent="react_json", model=ScriptedChatModel(turns=turns),
                              dataset=[TYPEWRITER], protocol="teacher-forced")
    assert [s.value for s in next_step_scores(result)] == [1.0, 0.0, 1.0, 1.0]


def test_no_call_is_a_failed_step():
    turns = [turn(call("type_letter", letter="a")), "I am done"]
    result = toolgym.evaluate("typewriter_1", model=ScriptedChatModel(turns=turns), dataset=[TYPEWRITER],
                              protocol="teacher-forced")
    scores = next_step_scores(result)
    assert scores[0].value == 1.0
    assert scores[1].details["first_error"]["type"] == "no_call"


def test_teacher_forced_needs_a_reference_path():
    with pytest.raises(toolgym.DatasetError, match="no reference path"):
        toolgym.evaluate("typewriter_1", model=ScriptedChatModel(turns=["x"]), protocol="teacher-forced",
                         dataset=[{"id": "x", "input": "ab"}])


def test_cli_summary_and_report(tmp_path, capsys, script_file):
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(TYPEWRITER) + "\n")
    script = script_file(reference_turns(TYPEWRITER, 3, call("type_letter", letter="x")))
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress", "--protocol", "teacher-forced"]) == 0
    assert json.loads((out / "run.json").read_text())["protocol"] == "teacher-forced"
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step accuracy (next_step) by k" in text and "compounding" in text
    assert main(["report", str(out), "--out", str(tmp_path / "r.html"), "--png", str(tmp_path / "png")]) == 0
    assert (tmp_path / "png" / "steps_typewriter_1_teacher-forced.png").stat().st_size > 1000


def test_fork_replays_the_prefix_without_the_model(tmp_path, capsys, script_file):
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(TYPEWRITER) + "\n")
    bad = script_file(reference_turns(TYPEWRITER, 3, call("type_letter", letter="x")))
    parent = tmp_path / "parent"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{bad}", "--dataset", str(data),
                 "--out", str(parent), "--no-progress"]) == 0
    # the new model would type "q" for the first two turns: the paper shows whether it was asked
    good = tmp_path / "good.json"
    good.write_text(json.dumps([turn(call("type_letter", letter="q"))] * 2
                               + reference_turns(TYPEWRITER)[2:]))
    out = tmp_path / "fork"
    assert main(["fork", str(parent), "--example", "tw-abcd", "--at", "first-error", "--model", f"scripted:{good}",
                 "--out", str(out)]) == 0
    run = toolgym.load_run(out)
    (traj,) = run.trajectories
    assert traj.parent == {"run": str(parent.resolve()), "example_id": "tw-abcd", "trial": 0, "step": 3}
    assert traj.final_state == {"paper": "abcd"}
    assert run.record.protocol == "fork"
    parent_traj = toolgym.load_run(parent).trajectories[0]
    assert traj.steps[:4] == parent_traj.steps[:4]  # two recorded model turns and their tool steps
    from toolgym.accounting import account

    assert account(run.trajectories).model_calls == 3  # c, d and the answer: the replayed turns called no model
    assert next(s.value for s in run.scores if s.grader == "final_state") == 1.0
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "side by side from step 3" in shown and '"x"' in shown
    assert main(["compare", str(parent), str(out)]) == 0
    assert "side by side from step 3" in capsys.readouterr().out
    assert main(["replay", str(parent)]) == 0
    assert toolgym.replay_run(out) == []


def test_a_fork_is_graded_by_its_parents_graders(tmp_path, script_file):
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(TYPEWRITER) + "\n")
    bad = script_file(reference_turns(TYPEWRITER, 3, call("type_letter", letter="x")))
    parent = tmp_path / "parent"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{bad}", "--dataset", str(data), "--out",
                 str(parent), "--no-progress", "--grader", "final_state", "--grader", "trajectory_match"]) == 0
    out = tmp_path / "fork"
    assert main(["fork", str(parent), "--example", "tw-abcd", "--at", "3", "--model", f"scripted:{bad}",
                 "--out", str(out)]) == 0
    assert toolgym.load_run(out).record.graders == toolgym.load_run(parent).record.graders == [
        "final_state", "trajectory_match"]
    assert {s.grader for s in toolgym.load_run(out).scores} <= {"final_state", "trajectory_match"}


NONDETERMINISTIC = '''
import itertools

import toolgym

_COUNTER = itertools.count()


class Ticket(toolgym.Environment):
    """A ticket machine whose numbers never repeat across episodes: not deterministic."""

    name = "ticket"
    instructions = "Take tickets."

    def reset(self, example):
        self.taken = []

    def read_state(self):
        return {"taken": list(self.taken)}

    @toolgym.tool
    def take(self) -> str:
        """Take the next ticket."""
        number = next(_COUNTER)
        self.taken.append(number)
        return str(number)
'''


def test_replay_and_fork_catch_a_nondeterministic_environment(tmp_path, capsys, script_file):
    envs = tmp_path / "tickets.py"
    envs.write_text(textwrap.dedent(NONDETERMINISTIC))
    example = {"id": "two", "input": "take two", "expected_calls": [{"name": "take"}, {"name": "take"}]}
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(example) + "\n")
    script = script_file([turn(call("take")), turn(call("take")), "done"])
    out = tmp_path / "run"
    spec = f"{envs}:Ticket"
    assert main(["run", "--env", spec, "--model", f"scripted:{script}", "--dataset", str(data), "--out", str(out),
                 "--no-progress", "--grader", "steps_exact"]) == 0
    capsys.readouterr()
    assert main(["replay", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5  # each step's output and state after it, and the final state
    assert lines[0].startswith("two trial 0 step 1: output recorded")
    assert lines[1].startswith("two trial 0 step 1: state recorded")
    assert lines[4].startswith("two trial 0 final state: state recorded")
    assert main(["fork", str(out), "--example", "two", "--at", "2", "--model", f"scripted:{script}",
                 "--out", str(tmp_path / "fork")]) == 2
    err = capsys.readouterr().err
    assert "step 1 (take)" in err
    assert not (tmp_path / "fork" / "trajectories.jsonl").exists()
    # teacher forcing refuses the prefix too: the episode of step 2 ends in error, naming step 1
    result = toolgym.evaluate(spec, model=ScriptedChatModel(turns=[turn(call("take"))] * 3), dataset=[example],
                              protocol="teacher-forced", graders=["steps_exact"])
    forced = {t.prefix_steps: t for t in result.trajectories if t.prefix_steps is not None}
    assert forced[0].status == "completed"
    assert forced[1].status == "error" and "PrefixMismatch: step 1 (take)" in forced[1].error


@pytest.mark.parametrize(("kind", "turns", "recovered", "steps"), [
    ("tool_error", "abbcd", True, 3),  # retypes b after the error
    ("tool_error", "abcd", False, None),  # goes on as if b were typed
    ("empty", "abcd", True, 2),  # b was typed; an empty result changes nothing
])
def test_inject_and_recovery(kind, turns, recovered, steps):
    model = ScriptedChatModel(turns=[turn(call("type_letter", letter=c)) for c in turns] + ["done"])
    result = toolgym.evaluate("typewriter_1", model=model, dataset=[TYPEWRITER], protocol="teacher-forced",
                              inject=f"{kind}@2", trials=1)
    (traj,) = [t for t in result.trajectories if t.injected]
    assert traj.trial == 1 and traj.prefix_steps == 2 and traj.injected["kind"] == kind
    shown = traj.tool_steps[1]
    assert shown.output == ("" if kind == "empty" else shown.output) and (shown.error == (kind == "tool_error"))
    (score,) = [s for s in result.scores if s.grader == "recovery"]
    assert score.details["recovered"] is recovered and score.details["steps"] == steps
    assert not any(s.grader == "next_step" for s in result.scores)
    from toolgym.views.stepwise import recovery_rates

    assert recovery_rates(result.run)[kind].mean == float(recovered)


def test_wrong_value_keeps_the_type_and_misleads():
    from toolgym.forcing import empty_value, wrong_value

    assert json.loads(wrong_value('[{"id": 117, "name": "Tomasz"}]')) == [{"id": 118, "name": "Tomasz"}]
    assert wrong_value("58") == "59" and wrong_value("2.5") == str(2.5 * 1.5 + 1.0)
    assert wrong_value("Montreal") != "Montreal" and len(wrong_value("Montreal")) == len("Montreal")
    assert wrong_value("true") == "false"
    assert (empty_value("[1]"), empty_value('{"a": 1}'), empty_value('"x"'), empty_value("OK")) == ("[]", "{}", '""', "")
    # on a real environment: the model is shown another user id, the state is the reference's
    model = ScriptedChatModel(turns=reference_turns(RELATIONAL))
    result = toolgym.evaluate("relational_data", model=model, dataset=[RELATIONAL], protocol="teacher-forced",
                              inject="wrong_value@1")
    (traj,) = [t for t in result.trajectories if t.injected]
    assert json.loads(traj.tool_steps[0].output)[0]["id"] == 118
    assert traj.injected["output"] == '[{"id": 117, "name": "Tomasz"}]'
    (score,) = [s for s in result.scores if s.grader == "recovery"]
    assert score.value == 0.0  # the scripted model kept the true id, which no longer follows from what it saw


def test_fork_with_a_fault_after_the_fork(tmp_path, script_file):
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(TYPEWRITER) + "\n")
    script = script_file(reference_turns(TYPEWRITER))
    parent = tmp_path / "parent"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(parent), "--no-progress"]) == 0
    result = toolgym.fork(parent, "tw-abcd", 2, tmp_path / "fork", model=ScriptedChatModel(turns=reference_turns(TYPEWRITER)),
                  inject="tool_error@3")
    (traj,) = result.trajectories
    assert traj.injected == {"kind": "tool_error", "step": 3, "output": None}
    assert traj.final_state == {"paper": "abd"}
    (score,) = [s for s in result.scores if s.grader == "recovery"]
    assert score.value == 0.0 and score.details["missing"] == ["call3", "call4"]  # a chain: 4 needs 3 first


def test_inject_needs_a_forced_protocol():
    with pytest.raises(ValueError, match="--inject needs"):
        toolgym.evaluate("typewriter_1", model=ScriptedChatModel(turns=["x"]), dataset=[TYPEWRITER], inject="empty@1")
    with pytest.raises(ValueError, match="KIND@K"):
        toolgym.evaluate("typewriter_1", model=ScriptedChatModel(turns=["x"]), dataset=[TYPEWRITER],
                         protocol="teacher-forced", inject="boom@1")


def test_fork_step_out_of_range(tmp_path, script_file):
    data = tmp_path / "ds.jsonl"
    data.write_text(json.dumps(TYPEWRITER) + "\n")
    script = script_file(reference_turns(TYPEWRITER))
    parent = tmp_path / "parent"
    main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
          "--out", str(parent), "--no-progress"])
    assert main(["fork", str(parent), "--example", "tw-abcd", "--at", "9", "--model", f"scripted:{script}",
                 "--out", str(tmp_path / "f")]) == 2
    assert Path(parent / "run.json").exists()


def test_step_accuracy_and_compounding_over_examples():
    from toolgym.views.stepwise import compounding, step_accuracy

    good = {**TYPEWRITER, "id": "good"}
    bad = {**TYPEWRITER, "id": "bad", "input": "abcd!"}  # the same path, another request: another script
    model = ScriptedChatModel(turns=reference_turns(TYPEWRITER),
                              by_input={"abcd!": reference_turns(TYPEWRITER, 3, call("type_letter", letter="x"))})
    result = toolgym.evaluate("typewriter_1", model=model, dataset=[good, bad], protocol="teacher-forced")
    by_k = {a.k: a for a in step_accuracy(result.run)}
    assert [by_k[k].estimate.mean for k in (1, 2, 3, 4)] == [1.0, 1.0, 0.5, 1.0]
    assert by_k[3].estimate.n == 2 and by_k[3].examples == 2 and by_k[3].estimate.stderr > 0
    rows = {r.example_id: r for r in compounding(result.run)}
    assert (rows["good"].product, rows["good"].free_pass_rate) == (1.0, 1.0)
    assert (rows["bad"].product, rows["bad"].free_pass_rate, rows["bad"].mean_accuracy) == (0.0, 0.0, 0.75)
    assert rows["bad"].grader == "final_state"


def test_fork_of_a_faulted_trajectory_replays_its_fault(tmp_path):
    model = ScriptedChatModel(turns=[turn(call("type_letter", letter=c)) for c in "abbcd"] + ["done"])
    parent = tmp_path / "tf"
    toolgym.evaluate("typewriter_1", model=model, dataset=[TYPEWRITER], protocol="teacher-forced",
                     inject="tool_error@2", out=parent)
    result = toolgym.fork(parent, "tw-abcd", 4, tmp_path / "fork", trial=1,
                          model=ScriptedChatModel(turns=[turn(call("type_letter", letter=c)) for c in "abbcd"] + ["ok"]))
    (traj,) = result.trajectories
    assert traj.injected == {"kind": "tool_error", "step": 2, "output": None}
    assert traj.final_state == {"paper": "abcd"} and result.run.record.inject == "tool_error@2"
    assert [s.value for s in result.scores if s.grader == "recovery"] == [1.0]


def test_milestones_without_expected_calls_give_the_reference_path():
    example = {"id": "ms", "input": "ab", "milestones": [
        {"id": "b", "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}},
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
    ]}
    model = ScriptedChatModel(turns=[turn(call("type_letter", letter="a")), turn(call("type_letter", letter="c")), "ok"])
    result = toolgym.evaluate("typewriter_1", model=model, dataset=[example], protocol="teacher-forced")
    scores = next_step_scores(result)
    assert [(s.details["k"], s.details["expected"], s.value) for s in scores] == [(1, "a", 1.0), (2, "b", 0.0)]
    forced = next(t for t in result.trajectories if t.prefix_steps == 1)
    assert forced.tool_steps[0].arguments == {"letter": "a"}  # the order `after` allows, not the written one


def test_export_leaves_out_teacher_forced_trajectories(tmp_path):
    """Their first steps replay the reference: exported as training data, they would teach
    turns no model wrote. The free-running episode of the same run is kept."""
    from toolgym.views.export import export_runs

    model = ScriptedChatModel(turns=reference_turns(TYPEWRITER))
    result = toolgym.evaluate("typewriter_1", model=model, dataset=[TYPEWRITER], protocol="teacher-forced",
                              out=tmp_path / "run")
    forced = [t for t in result.trajectories if t.prefix_steps is not None]
    assert forced
    exported = export_runs([tmp_path / "run"], tmp_path / "sft.jsonl")
    assert exported.skipped["teacher-forced"] == len(forced)
    assert exported.kept == len(result.trajectories) - len(forced) == 1

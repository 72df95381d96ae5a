"""trajectory_match, milestone_progress, step_precision and step_recall, end to end: a real
environment, a scripted model, a dataset in the milestone format."""

from __future__ import annotations

import re

import pytest

import toolgym
from toolgym.graders.trajectory import TrajectoryMatch
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Score, ToolStep, Trajectory

USERS = [{"id": 21, "name": "Kwame"}, {"id": 22, "name": "Ada"}]


def core(first):
    """A first error's step, type, milestone and argument (its tool and note left out)."""
    return {k: first[k] for k in ("step", "type", "milestone", "argument")}


class Directory(toolgym.Environment):
    """Users with emails, places with weather, and a sheet of paper."""

    instructions = "Answer with the tools."

    def reset(self, example):
        self.paper = ""
        self.users = {u["id"]: dict(u) for u in USERS}

    @toolgym.tool
    def find_users_by_name(self, name: str) -> list:
        """Users whose name contains ``name``.

        Args:
            name: Part of a name.
        """
        return [u for u in self.users.values() if name.lower() in u["name"].lower()]

    @toolgym.tool
    def get_user_email(self, user_id: int) -> str:
        """A user's email.

        Args:
            user_id: The user's id.
        """
        if user_id not in self.users:
            raise toolgym.ToolError(f"no user {user_id}")
        return f"{self.users[user_id]['name'].lower()}@example.org"

    @toolgym.tool
    def get_user_favorite_foods(self, user_id: int) -> list:
        """A user's favourite foods.

        Args:
            user_id: The user's id.
        """
        return ["soup"]

    @toolgym.tool
    def get_city_for_location(self, location_id: int) -> str:
        """A city.

        Args:
            location_id: The location.
        """
        return "Accra"

    @toolgym.tool
    def get_current_weather_for_location(self, location_id: int) -> str:
        """The weather.

        Args:
            location_id: The location.
        """
        return "sunny"

    @toolgym.tool
    def write(self, text: str) -> str:
        """Write on the paper.

        Args:
            text: What to write.
        """
        self.paper += text
        return "ok"

    @toolgym.tool
    def delete_user(self, user_id: int) -> str:
        """Delete a user.

        Args:
            user_id: The user's id.
        """
        self.users.pop(user_id, None)
        return "deleted"

    def read_state(self):
        return {"paper": self.paper, "users": len(self.users)}


PLAN = {
    "milestones": [
        {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
        {"id": "email", "after": ["find"], "call": {"name": "get_user_email",
                                                   "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}},
        {"id": "foods", "after": ["find"], "optional": True, "call": {"name": "get_user_favorite_foods"}},
        {"id": "city", "after": ["email"], "any_of": [{"call": {"name": "get_city_for_location"}},
                                                      {"call": {"name": "get_current_weather_for_location"}}]},
        {"id": "typed", "after": ["city"], "state": {"paper": "ab"}},
        # a state milestone matches a state, not a step: the call that writes is a milestone of
        # its own (or extra_calls must allow it)
        {"id": "write", "after": ["city"], "optional": True, "call": {"name": "write"}},
    ],
    "minefields": [{"call": {"name": "delete_user"}}, {"state": {"paper": {"$contains": "zz"}}}],
    "read_only": ["find_*", "get_*", "list_*"],
    "extra_calls": "allow_read_only",
}


def c(tool, **args):
    return {"tool_calls": [{"name": tool, "args": args}]}


SCRIPTS = {
    "pass": [c("find_users_by_name", name="KWAME"), c("get_user_email", user_id=21),
             c("get_current_weather_for_location", location_id=3), c("write", text="ab"), "done"],
    "extra_read": [c("find_users_by_name", name="Kwame"), c("get_user_favorite_foods", user_id=21),
                   c("get_user_email", user_id=21), c("get_user_email", user_id=21),
                   c("get_city_for_location", location_id=3), c("write", text="ab"), "done"],
    "wrong_id": [c("find_users_by_name", name="Kwame"), c("get_user_email", user_id=22),
                 c("get_city_for_location", location_id=3), c("write", text="ab"), "done"],
    "memory": [c("get_user_email", user_id=21), c("find_users_by_name", name="Kwame"),
               c("get_city_for_location", location_id=3), c("write", text="ab"), "done"],
    "mine": [c("find_users_by_name", name="Kwame"), c("get_user_email", user_id=21), c("delete_user", user_id=22),
             c("get_city_for_location", location_id=3), c("write", text="ab"), "done"],
    "stopped": [c("find_users_by_name", name="Kwame"), "done"],
    "extra_write": [c("find_users_by_name", name="Kwame"), c("get_user_email", user_id=21),
                    c("get_city_for_location", location_id=3), c("write", text="a"), c("write", text="b"), "done"],
}

GRADERS = ["trajectory_match", "milestone_progress", "step_precision", "step_recall", "steps_exact"]


@pytest.fixture(scope="module")
def result():
    dataset = [{"id": k, "input": k, "expected_steps": ["find_users_by_name"], **PLAN} for k in SCRIPTS]
    dataset.append({"id": "plain", "input": "plain", "expected_calls": [{"name": "write", "arguments": {"text": "ab"}}]})
    model = ScriptedChatModel(by_input={**SCRIPTS, "plain": [c("write", text="ab"), "done"]})
    return toolgym.evaluate(Directory, model=model, dataset=dataset, graders=GRADERS)


def scores(result, grader):
    return {s.example_id: s for s in result.scores if s.grader == grader}


def test_verdicts_and_first_errors(result):
    match = scores(result, "trajectory_match")
    assert {k: s.value for k, s in match.items()} == {
        "pass": 1.0, "extra_read": 1.0, "wrong_id": 0.0, "memory": 0.0, "mine": 0.0, "stopped": 0.0, "extra_write": 1.0,
    }  # "plain" has no milestones: trajectory_match does not apply
    first = {k: s.details["first_error"] for k, s in match.items()}
    assert first["pass"] is None and first["extra_read"] is None
    assert core(first["wrong_id"]) == {"step": 2, "type": "wrong_arguments", "milestone": "email", "argument": "user_id"}
    assert core(first["memory"]) == {"step": 1, "type": "out_of_order", "milestone": "email", "argument": None}
    assert core(first["mine"]) == {"step": 3, "type": "forbidden", "milestone": None, "argument": None}
    assert core(first["stopped"]) == {"step": None, "type": "missing", "milestone": "email", "argument": None}
    # two writes put "ab" on the paper: the one not matched to `write` brought `typed` about
    assert first["extra_write"] is None
    assert "wrong arguments (email, argument 'user_id')" in match["wrong_id"].explanation


def test_the_alignment_names_each_step(result):
    rows = scores(result, "trajectory_match")["extra_read"].details["alignment"]
    assert [(r["tool"], r.get("milestone"), r.get("type"), r.get("allowed")) for r in rows] == [
        ("find_users_by_name", "find", None, None),
        ("get_user_favorite_foods", "foods", None, None),
        ("get_user_email", "email", None, None),
        ("get_user_email", "email", "extra_call", "read-only"),
        ("get_city_for_location", "city", None, None),
        ("write", "write", None, None),
    ]
    details = scores(result, "trajectory_match")["extra_read"].details
    assert details["matched"]["typed"] == {"kind": "state", "at": 6, "met": 6} and details["exact"] is True


def test_progress_precision_recall(result):
    progress = {k: s.value for k, s in scores(result, "milestone_progress").items()}
    assert progress == {"pass": 1.0, "extra_read": 1.0, "wrong_id": 0.25, "memory": 0.25, "mine": 0.0,
                        "stopped": 0.25, "extra_write": 1.0}
    recall = {k: s.value for k, s in scores(result, "step_recall").items()}
    assert recall["mine"] == 1.0 and recall["stopped"] == 0.25 and recall["wrong_id"] == 0.25  # city and typed wait for email
    precision = {k: s.value for k, s in scores(result, "step_precision").items()}
    # extra_read: 6 steps, 5 matched, the repeated read is allowed and left out
    assert precision["pass"] == 1.0 and precision["extra_read"] == 1.0
    assert precision["extra_write"] == 1.0  # the second write brought the state milestone about
    assert "plain" not in precision


def test_steps_exact_is_unchanged(result):
    exact = {k: s.value for k, s in scores(result, "steps_exact").items()}
    assert exact["stopped"] == 1.0 and exact["pass"] == 0.0 and exact["plain"] == 1.0


def traj(*calls, state=None):
    steps = [ToolStep(call_id=str(i), name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    return Trajectory(example_id="e", env="x", agent="y", status="completed", steps=steps, final_state=state or {})


CALLS = [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {"y": 2}}]


@pytest.mark.parametrize(
    "mode, args, calls, passed",
    [
        ("strict", "exact", [("f", {"x": 1}), ("g", {"y": 2})], True),
        ("strict", "exact", [("g", {"y": 2}), ("f", {"x": 1})], False),
        ("unordered", "exact", [("g", {"y": 2}), ("f", {"x": 1})], True),
        ("unordered", "exact", [("g", {"y": 2}), ("f", {"x": 1}), ("f", {"x": 1})], False),
        ("superset", "exact", [("h", {}), ("g", {"y": 2}), ("f", {"x": 1})], True),
        ("superset", "exact", [("g", {"y": 2})], False),
        ("subset", "exact", [("g", {"y": 2})], True),
        ("subset", "exact", [("g", {"y": 2}), ("h", {})], False),
        ("strict", "ignore", [("f", {"x": 9}), ("g", {})], True),
        ("strict", "superset", [("f", {"x": 1, "z": 0}), ("g", {"y": 2})], True),
        ("strict", "superset", [("f", {}), ("g", {"y": 2})], False),
        ("strict", "subset", [("f", {}), ("g", {"y": 2})], True),
        ("strict", "subset", [("f", {"x": 1, "z": 0}), ("g", {"y": 2})], False),
    ],
)
def test_agentevals_modes_on_expected_calls(mode, args, calls, passed):
    example = Example(id="e", input="x", expected_calls=CALLS)
    score = TrajectoryMatch(trajectory_mode=mode, args_mode=args).grade(example, traj(*calls))
    assert isinstance(score, Score) and score.value == float(passed), score.explanation
    assert TrajectoryMatch().grade(example, traj(*calls)) is None  # no mode, no milestones: not applicable


def test_superset_where_agentevals_greedy_fails_a_valid_trajectory():
    example = Example(id="e", input="x", expected_calls=[{"name": "f", "arguments": {"x": 1}}, {"name": "f", "arguments": {"x": 1, "y": 2}}])
    # args superset: the call holds at least the reference's arguments. A greedy first fit gives
    # the first reference call f(x=1) the first output call f(x=1, y=2) and finds nothing for f(x=1, y=2)
    score = TrajectoryMatch("superset", "superset").grade(example, traj(("f", {"x": 1, "y": 2}), ("f", {"x": 1})))
    assert score.value == 1.0


def test_plans_of_expected_calls_are_kept_for_the_latest_examples_least_recently_used_dropped_first():
    from toolgym.graders.trajectory import PLAN_CACHE

    grader = TrajectoryMatch(trajectory_mode="unordered")
    examples = [Example(id=str(k), input="x", expected_calls=[{"name": "f", "arguments": {"x": k}}])
                for k in range(PLAN_CACHE + 1)]
    first = [grader.plan_for(e) for e in examples[:PLAN_CACHE]]
    # all kept: each example's next trajectory reuses its plan
    assert all(grader.plan_for(e) is p for e, p in zip(examples[:PLAN_CACHE], first, strict=True))
    assert grader.plan_for(examples[0]) is first[0]  # used again: now the most recent
    newest = grader.plan_for(examples[PLAN_CACHE])  # one more drops the least recently used only
    assert grader.plan_for(examples[PLAN_CACHE]) is newest and grader.plan_for(examples[0]) is first[0]
    assert grader.plan_for(examples[2]) is first[2] and grader.plan_for(examples[-2]) is first[-1]
    rebuilt = grader.plan_for(examples[1])
    assert rebuilt is not first[1] and [m.calls[0].expected() for m in rebuilt.milestones] == [
        {"name": "f", "arguments": {"x": 1}}]
    trajectory = traj(("f", {"x": 1}))
    assert grader.grade(examples[1], trajectory).value == 1.0 and grader.grade(examples[0], trajectory).value == 0.0


def test_a_judge_operator_without_a_judge_is_refused_clearly():
    example = Example(id="e", input="x", milestones=[{"id": "a", "call": {"name": "f", "arguments": {"x": {"$judge": "polite"}}}}])
    with pytest.raises(Exception, match="needs a judge model"):
        TrajectoryMatch().grade(example, traj(("f", {"x": "hi"})))


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="trajectory_mode 'loose'"):
        TrajectoryMatch(trajectory_mode="loose")


def test_show_draws_the_alignment(tmp_path):
    import io

    from rich.console import Console

    from toolgym.views.show import show

    dataset = [{"id": k, "input": k, **PLAN} for k in ("wrong_id", "extra_read", "mine")]
    out = tmp_path / "run"
    toolgym.evaluate(Directory, model=ScriptedChatModel(by_input=SCRIPTS), dataset=dataset, graders=GRADERS, out=out)
    text = {}
    for example in ("wrong_id", "extra_read", "mine"):
        buffer = io.StringIO()
        assert show(out, example=example, console=Console(file=buffer, width=240)) == 0
        text[example] = buffer.getvalue()
    wrong = text["wrong_id"]
    assert "✓ milestone find" in wrong
    assert "✗ wrong arguments (email, argument user_id)" in wrong and '"$from": "find"' in wrong
    assert "milestones never reached: email, city, typed" in wrong
    first = re.search(r"first error: tool step 2 \(row (\d+)\): wrong arguments \(email, argument 'user_id'\)", wrong)
    assert first is not None and f"\n{int(first.group(1)):>3} tool  get_user_email" in wrong  # the row named is that step
    assert wrong.index("✓ milestone find") < wrong.index("✗ wrong arguments") < wrong.index("milestones never reached")
    extra = text["extra_read"]
    assert "· extra call (email): repeats email (matched at another step) [allowed by extra_calls: read-only]" in extra
    assert "first error" not in extra
    assert "never reached" not in extra
    assert "✗ forbidden: the call delete_user matches minefield 0" in text["mine"] and re.search(r"first error: tool step 3 \(row \d+\): forbidden", text["mine"])


def test_run_and_grade_from_the_command_line_add_the_milestone_graders(tmp_path):
    import json

    from toolgym.cli import main

    # typewriter: "ba" and "ab" are both fine as long as the paper ends as a letter multiset {a, b}
    record = {
        "id": "ab", "input": "Type a and b, in any order.",
        "milestones": [
            {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
            {"id": "b", "call": {"name": "type_letter", "arguments": {"letter": {"$in": ["b", "B"]}}}},
            {"id": "paper", "after": ["a", "b"], "state": {"paper": {"$in": ["ab", "ba", "aB", "Ba"]}}},
        ],
    }
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(record) + "\n", encoding="utf-8")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [
        {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": "B"}}]},
        {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]},
        {"content": "done"},
    ]}))
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--dataset", str(dataset), "--model", f"scripted:{script}",
                 "--out", str(out), "--no-progress"]) == 0
    scores = {json.loads(line)["grader"]: json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()}
    assert scores["trajectory_match"]["value"] == 1.0 and scores["milestone_progress"]["value"] == 1.0
    assert scores["trajectory_match"]["details"]["matched"]["paper"] == {"kind": "state", "at": 2, "met": 2}
    (out / "scores.jsonl").unlink()
    assert main(["grade", str(out)]) == 0
    again = {json.loads(line)["grader"]: json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()}
    assert again["trajectory_match"] == scores["trajectory_match"]


def test_agentevals_modes_from_the_command_line(tmp_path):
    import json

    from toolgym.cli import main

    # the scripted model types "a" whatever it is asked: "a" passes every mode, "aa" only superset
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [
        {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]}, {"content": "done"}]}))
    values = {}
    for mode in ("strict", "superset", "subset"):
        out = tmp_path / mode
        assert main(["run", "--env", "typewriter_1", "--limit", "2", "--model", f"scripted:{script}", "--grader",
                     "trajectory_match", "--trajectory-mode", mode, "--out", str(out), "--no-progress"]) == 0
        lines = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
        values[mode] = {s["example_id"]: s["value"] for s in lines}
        # a failure says how it was graded; a pass keeps what show draws, not the plan
        assert all(s["details"]["plan"] == f"agentevals {mode} match, arguments exact" for s in lines if s["value"] < 1)
        assert all("plan" not in s["details"] and "alignment" in s["details"] for s in lines if s["value"] == 1)
    assert values == {
        "strict": {"tw-00-a": 1.0, "tw-01-aa": 0.0},
        "superset": {"tw-00-a": 1.0, "tw-01-aa": 0.0},
        "subset": {"tw-00-a": 1.0, "tw-01-aa": 1.0},
    }
    # grade again: the recorded mode is used
    out = tmp_path / "subset"
    (out / "scores.jsonl").unlink()
    assert main(["grade", str(out)]) == 0
    again = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert {s["example_id"]: s["value"] for s in again} == values["subset"]


def test_check_reports_an_example_whose_reference_misses_its_milestones(tmp_path, capsys):
    import json

    from toolgym.cli import main

    good = {"id": "good", "input": "ab", "expected_calls": [{"name": "type_letter", "arguments": {"letter": "a"}},
                                                            {"name": "type_letter", "arguments": {"letter": "b"}}],
            "milestones": [{"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
                           {"id": "paper", "after": ["a"], "state": {"paper": "ab"}}],
            "extra_calls": "allow"}
    broken = {**good, "id": "broken", "milestones": [{"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "A"}}}]}
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(good) + "\n", encoding="utf-8")
    assert main(["check", "--env", "typewriter_1", "--dataset", str(dataset)]) == 0
    dataset.write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n", encoding="utf-8")
    assert main(["check", "--env", "typewriter_1", "--dataset", str(dataset)]) == 1
    err = capsys.readouterr().err
    assert ("problem: broken: its expected calls do not satisfy its milestones "
            "(step 1 (type_letter): wrong arguments (a, argument 'letter'); 0/1 required milestones matched)") in err
    assert "good" not in err


def test_every_builtin_example_with_milestones_is_solved_by_its_reference():
    from toolgym.data import load_examples
    from toolgym.graders.trajectory import milestone_problems
    from toolgym.plugins import get_benchmark

    checked = 0
    for env in ("relational_data", "multiverse_math"):
        bench = get_benchmark(env)
        for ex in load_examples(bench.datasets / "test.jsonl"):
            assert milestone_problems(bench, ex) == []
            checked += ex.milestones is not None
    assert checked == 14


def test_judge_operator_with_a_scripted_judge(tmp_path):
    example = Example(id="e", input="x", milestones=[
        {"id": "greet", "call": {"name": "say", "arguments": {"text": {"$judge": "a polite greeting"}}}},
    ])
    judge = ScriptedChatModel(by_input={
        'CRITERION: a polite greeting\nVALUE: "Good morning, madam"': ["VERDICT: CORRECT\nREASON: polite"],
        'CRITERION: a polite greeting\nVALUE: "go away"': ["VERDICT: INCORRECT\nREASON: rude"],
    })
    grader = TrajectoryMatch(judge=judge, judge_cache=str(tmp_path / "cache"))
    assert grader.grade(example, traj(("say", {"text": "Good morning, madam"}))).value == 1.0
    rude = grader.grade(example, traj(("say", {"text": "go away"})))
    assert rude.value == 0.0 and rude.details["first_error"]["type"] == "wrong_arguments"
    calls = grader.value_judge().calls
    assert {c["verdict"] for c in calls.values()} == {"CORRECT", "INCORRECT"}
    # a second grader reads the replies from the disk cache: the scripted judge is not asked again
    silent = ScriptedChatModel(turns=["VERDICT: INCORRECT"])
    again = TrajectoryMatch(judge=silent, judge_cache=str(tmp_path / "cache"))
    assert again.grade(example, traj(("say", {"text": "Good morning, madam"}))).value == 1.0
    assert all(c["cached"] for c in again.value_judge().calls.values())


def test_summary_counts_first_errors_and_progress_by_depth(tmp_path, capsys):
    from toolgym.cli import main

    dataset = [{"id": k, "input": k, **PLAN} for k in SCRIPTS]
    out = tmp_path / "run"
    toolgym.evaluate(Directory, model=ScriptedChatModel(by_input=SCRIPTS), dataset=dataset, graders=GRADERS, out=out)
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert "┃ first error " in text and "┃ reached / required ┃" in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]]
            for line in text.splitlines() if line.count("│") >= 3}
    # pass, extra_read, extra_write pass; wrong_id, memory (out of order), mine, stopped fail;
    # each row names its milestone and its examples
    assert rows["(none: passed)"][2] == "3"
    assert rows["wrong_arguments"] == ["wrong_arguments", "email", "1", "0.143", "wrong_id"]
    assert rows["out_of_order"] == ["out_of_order", "email", "1", "0.143", "memory"]
    assert rows["missing"] == ["missing", "email", "1", "0.143", "stopped"]
    assert rows["forbidden"] == ["forbidden", "", "1", "0.143", "mine"]
    # depth 0 (find) is reached by all 7; email and what comes after it by 4
    assert "7 / 7" in rows["0"] and "4 / 7" in rows["1"] and "4 / 7" in rows["3"]


def test_milestone_depths():
    from toolgym.views.summary import milestone_depths

    example = Example(id="e", input="x", **PLAN)
    assert milestone_depths(example) == {"find": 0, "email": 1, "foods": 1, "city": 2, "typed": 3, "write": 3}

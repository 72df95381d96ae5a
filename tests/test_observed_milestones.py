"""Milestones on what the agent says (``message``, ``answer``) and on what a tool returned
(``result``), and ``$from`` over any seen result of a tool: end to end with a real environment
and a scripted model, and the refusals of bad specs."""

from __future__ import annotations

import pytest

import toolgym
from toolgym.graders.trajectory import TrajectoryMatch, observations, results_seen
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, ModelStep, ToolCall, ToolStep, Trajectory


class People(toolgym.Environment):
    """Users with emails."""

    instructions = "Answer with the tools."

    def reset(self, example):
        self.users = {21: "Kwame", 22: "Ada"}

    @toolgym.tool
    def find_users_by_name(self, name: str) -> list:
        """Users whose name contains ``name``.

        Args:
            name: Part of a name.
        """
        return [{"id": i, "name": n} for i, n in self.users.items() if name.lower() in n.lower()]

    @toolgym.tool
    def get_user_email(self, user_id: int) -> str:
        """A user's email.

        Args:
            user_id: The user's id.
        """
        if user_id not in self.users:
            raise toolgym.ToolError(f"no user {user_id}")
        return f"{self.users[user_id].lower()}@example.org"


def c(tool, text="", **args):
    return {"content": text, "tool_calls": [{"name": tool, "args": args}]}


FIND = {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}}
EMAIL = {"id": "email", "after": ["find"],
         "call": {"name": "get_user_email", "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}}
RIGHT = [c("find_users_by_name", name="Kwame"), c("get_user_email", user_id=21)]


def grade(milestones, scripts, graders=("trajectory_match", "milestone_progress"), **grader_settings):
    dataset = [{"id": k, "input": k, "milestones": milestones} for k in scripts]
    result = toolgym.evaluate(People, model=ScriptedChatModel(by_input=scripts), dataset=dataset,
                              graders=list(graders) if not grader_settings else [
                                  TrajectoryMatch(**grader_settings)])
    return {(s.grader, s.example_id): s for s in result.scores}


def test_a_right_sequence_of_calls_with_a_wrong_answer_fails():
    said = {"id": "said", "after": ["email"], "message": {"$contains": "kwame@example.org"}}
    scores = grade([FIND, EMAIL, said], {
        "right": [*RIGHT, "Kwame's email is kwame@example.org."],
        "wrong": [*RIGHT, "Kwame's email is ada@example.org."],
        "silent": [*RIGHT, ""],
    })
    assert scores["trajectory_match", "right"].value == 1.0
    assert scores["trajectory_match", "right"].details["matched"]["said"] == {"kind": "message", "at": 2}
    wrong = scores["trajectory_match", "wrong"]
    assert wrong.value == 0.0
    first = wrong.details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (None, "missing", "said")
    assert scores["milestone_progress", "wrong"].value == pytest.approx(2 / 3)
    assert scores["trajectory_match", "silent"].value == 0.0


def test_a_message_said_before_its_after_milestones_does_not_count():
    # the agent guesses the address in the turn that looks the user up: the text comes before the
    # email call, so a message milestone after `email` is not met by it
    said = {"id": "said", "after": ["email"], "message": {"$contains": "kwame@example.org"}}
    scores = grade([FIND, EMAIL, said], {
        "guess": [c("find_users_by_name", "Probably kwame@example.org", name="Kwame"),
                  c("get_user_email", user_id=21), "Done."],
    })
    assert scores["trajectory_match", "guess"].details["missing"] == ["said"]


def test_lenient_contains_regex_and_answer():
    milestones = [FIND, EMAIL,
                  {"id": "lenient", "after": ["email"], "message": {"$contains": {"$lenient": "KWAME@EXAMPLE.ORG"}}},
                  {"id": "regex", "after": ["email"], "message": {"$regex": "(?s).*\\b21\\b.*"}},
                  {"id": "final", "after": ["email"], "answer": {"$contains": "Done"}}]
    scores = grade(milestones, {
        "all": [*RIGHT, "User 21:  Kwame@Example.org. Done."],
        # the right words in a turn that is not the last: `answer` reads the final answer only
        "early": [*RIGHT, c("find_users_by_name", "user 21: kwame@example.org. Done.", name="Ada"), "Bye."],
    })
    assert scores["trajectory_match", "all"].value == 1.0
    early = scores["trajectory_match", "early"]
    assert early.details["missing"] == ["final"]  # the message milestones were met by the earlier turn
    assert {"lenient", "regex"} <= set(early.details["matched"])


def test_message_with_a_scripted_judge(tmp_path):
    said = {"id": "said", "after": ["email"], "message": {"$judge": "tells the user Kwame's email address"}}
    judge = ScriptedChatModel(by_input={
        'CRITERION: tells the user Kwame\'s email address\nVALUE: "It is kwame@example.org"':
            ["VERDICT: CORRECT\nREASON: it does"],
        'CRITERION: tells the user Kwame\'s email address\nVALUE: "I could not find it"':
            ["VERDICT: INCORRECT\nREASON: it does not"],
    })
    grader = TrajectoryMatch(judge=judge, judge_cache=str(tmp_path / "cache"))
    dataset = [{"id": k, "input": k, "milestones": [FIND, EMAIL, said]} for k in ("yes", "no")]
    result = toolgym.evaluate(People, model=ScriptedChatModel(by_input={
        "yes": [*RIGHT, "It is kwame@example.org"], "no": [*RIGHT, "I could not find it"]}),
        dataset=dataset, graders=[grader])
    assert {s.example_id: s.value for s in result.scores} == {"yes": 1.0, "no": 0.0}


def test_a_result_milestone_credits_any_route_to_the_result():
    # BFCL's response check: some step returned the record, whatever query found it
    found = {"id": "found", "result": {"name": "find_users_by_name", "value": {"$contains": {"$subset": {"id": 21}}}}}
    emailed = {"id": "emailed", "after": ["found"], "result": {"value": "kwame@example.org"}}
    milestones = [found, emailed]
    scripts = {
        "near_miss": [c("find_users_by_name", name="Kwa"), c("get_user_email", user_id=21), "ok"],
        "wrong_user": [c("find_users_by_name", name="Ada"), c("get_user_email", user_id=22), "ok"],
        "error": [c("get_user_email", user_id=99), "ok"],
    }
    # extra calls forbidden: the steps that returned the results brought those milestones about
    dataset = [{"id": k, "input": k, "milestones": milestones} for k in scripts]
    result = toolgym.evaluate(People, model=ScriptedChatModel(by_input=scripts), dataset=dataset,
                              graders=["trajectory_match", "milestone_progress"])
    scores = {(s.grader, s.example_id): s for s in result.scores}
    assert scores["trajectory_match", "near_miss"].value == 1.0
    assert scores["trajectory_match", "near_miss"].details["matched"] == {
        "found": {"kind": "result", "at": 1}, "emailed": {"kind": "result", "at": 2}}
    rows = scores["trajectory_match", "near_miss"].details["alignment"]
    assert [(r["milestone"], r.get("allowed"), r["error"]) for r in rows] == [
        ("found", "brings about", False), ("emailed", "brings about", False)]
    assert scores["milestone_progress", "wrong_user"].value == 0.0
    # a tool error is no result
    assert scores["milestone_progress", "error"].value == 0.0


def test_from_a_tool_credits_a_near_miss_query_downstream():
    by_tool = {"id": "email", "call": {"name": "get_user_email", "arguments": {
        "user_id": {"$from": {"tool": "find_users_by_name"}, "path": "/0/id"}}}}
    scripts = {
        "near_miss": [c("find_users_by_name", name="Kwa"), c("get_user_email", user_id=21), "ok"],
        "memory": [c("get_user_email", user_id=21), c("find_users_by_name", name="Kwame"), "ok"],
        # both calls in one model turn: the id could not come from a result the model had not seen
        "same_turn": [{"content": "", "tool_calls": [{"name": "find_users_by_name", "args": {"name": "Kwame"}},
                                                     {"name": "get_user_email", "args": {"user_id": 21}}]}, "ok"],
    }
    dataset = [{"id": k, "input": k, "milestones": [{**FIND, "optional": True}, by_tool], "extra_calls": "allow_read_only",
                "read_only": ["find_*"]} for k in scripts]
    result = toolgym.evaluate(People, model=ScriptedChatModel(by_input=scripts), dataset=dataset,
                              graders=["trajectory_match"])
    scores = {s.example_id: s for s in result.scores}
    assert scores["near_miss"].value == 1.0
    assert scores["near_miss"].details["matched"] == {"email": {"kind": "step", "at": 2}}  # find missed: optional
    assert scores["memory"].value == 0.0 and scores["memory"].details["missing"] == ["email"]
    assert scores["same_turn"].value == 0.0
    assert scores["same_turn"].details["first_error"]["argument"] == "user_id"
    # the milestone form keeps its meaning: a near miss of `find` leaves `email` unmatched
    old = grade([FIND, EMAIL], {"near_miss": scripts["near_miss"]}, graders=("milestone_progress",))
    assert old["milestone_progress", "near_miss"].value == 0.0


def test_what_is_observed_after_each_step():
    t = Trajectory(example_id="e", env="x", agent="a", status="completed", final_answer="42", steps=[
        ModelStep(text="looking", tool_calls=[ToolCall(id="1", name="f", arguments={}),
                                              ToolCall(id="2", name="g", arguments={})]),
        ToolStep(call_id="1", name="f", output='{"v": 1}'),
        ToolStep(call_id="2", name="g", output="boom", error=True),
        ModelStep(text="42"),
    ])
    seen = observations(t)
    assert seen[0].texts == ("looking",) and seen[0].result is None
    assert seen[1].result == ("f", {"v": 1}) and seen[1].texts == ()
    assert 2 in seen and seen[2].texts == ("42",) and seen[2].answer == "42" and seen[2].result is None
    assert results_seen(t) == [0, 0]  # both calls were made before any result came back


@pytest.mark.parametrize(("spec", "where", "message"), [
    ({"milestones": [], "minefields": [{"message": {"$contains": "password"}}]},
     "minefields[0].message", "unknown field \\(a minefield has 'call' or 'state'\\)"),
    ({"milestones": [{"id": "a", "message": "hi"}, {"id": "b", "after": ["a"], "call": {
        "name": "f", "arguments": {"x": {"$from": "a"}}}}]}, "milestones[1]", "a message milestone matches no step"),
    ({"milestones": [{"id": "a", "call": {"name": "f", "arguments": {"x": {"$from": {"tol": "f"}}}}}]},
     "milestones[0].call.arguments.x", "$from takes a milestone id or"),
    ({"milestones": [{"id": "a", "result": {"tool": "f"}}]}, "milestones[0].result.tool", "unknown field"),
    ({"milestones": [{"id": "a", "message": {"$from": {"tool": "f"}}}]}, "milestones[0]", "read by call arguments only"),
    ({"milestones": [], "minefields": [{"call": {"name": "f", "arguments": {"x": {"$from": {"tool": "f"}}}}}]},
     "minefields[0]", "$from is not allowed in a minefield"),
    ({"milestones": [{"id": "a", "message": "hi", "answer": "hi"}]}, "milestones[0]", "exactly one of"),
])
def test_bad_specs_are_refused_naming_the_field(spec, where, message):
    with pytest.raises(ValueError, match="field " + where.replace("[", r"\[").replace("]", r"\]") + ": .*" +
                       message.replace("$", r"\$")):
        Example(id="e", input="x", **spec)


def test_a_result_of_a_tool_the_environment_lacks_is_refused():
    from toolgym.data import DatasetError, check_tools
    from toolgym.plugins import get_benchmark

    examples = [Example(id="1", input="x", milestones=[
        {"id": "a", "call": {"name": "find_users_by_name"}},
        {"id": "b", "result": {"name": "get_user_phone", "value": {"$any": True}}},
    ])]
    with pytest.raises(DatasetError, match=r"tool 'get_user_phone', named by 1 example\(s\) \('1' "
                                           r"\(milestones\[1\]\.result\.name\)\): relational_data has no such tool"):
        check_tools(get_benchmark("relational_data"), examples, "d.jsonl")


def test_check_does_not_blame_the_reference_for_saying_nothing():
    from toolgym.benchmark import as_benchmark
    from toolgym.graders.trajectory import milestone_problems

    calls = [{"name": "find_users_by_name", "arguments": {"name": "Kwame"}},
             {"name": "get_user_email", "arguments": {"user_id": 21}}]
    said = {"id": "said", "after": ["email"], "message": {"$contains": "kwame@example.org"}}
    bench = as_benchmark(People)
    ok = Example(id="ok", input="x", expected_calls=calls, milestones=[FIND, EMAIL, said])
    assert milestone_problems(bench, ok) == []  # the replay says nothing: no defect of its calls
    wrong = Example(id="wrong", input="x", expected_calls=calls[:1], milestones=[FIND, EMAIL, said])
    (problem,) = milestone_problems(bench, wrong)
    assert "do not satisfy its milestones" in problem and "missing (email)" in problem

"""The stepwise grader on the cases an outside expert review found wrong or misleading (issue 35),
each played through `toolgym.evaluate` on a real environment with a scripted model."""

from __future__ import annotations

import json

import toolgym
from toolgym.graders.alignment import StepView, align, diagnose
from toolgym.milestones import compile_plan
from toolgym.providers.scripted import ScriptedChatModel

STEPWISE = ["trajectory_match", "milestone_progress", "step_precision", "step_recall"]


def turn(*calls):
    """One model turn making ``calls`` (``(name, args)`` pairs) as parallel tool calls."""
    return {"content": "", "tool_calls": [{"name": n, "args": a, "id": f"c{k}"} for k, (n, a) in enumerate(calls)]}


def play(env, example, *turns, graders=STEPWISE):
    """Play ``turns`` (then "done") on ``env`` for ``example``; the scores by grader."""
    result = toolgym.evaluate(env, model=ScriptedChatModel(turns=[*turns, "done"]), dataset=[example], graders=graders)
    return {s.grader: s for s in result.scores}, result.trajectories[0]


KWAME = {
    "id": "kwame", "input": "What is Kwame's email?",
    "milestones": [
        {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
        {"id": "email", "after": ["find"], "call": {"name": "get_user_email",
                                                   "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}},
    ],
    "read_only": ["find_*", "get_*"], "extra_calls": "allow_read_only",
}


def test_data_flow_from_a_result_the_model_had_not_seen_is_out_of_order():
    # both calls in one model turn: 158 cannot have come from find's result
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"}),
                                                    ("get_user_email", {"user_id": 158})))
    match = scores["trajectory_match"]
    assert match.value == 0.0
    assert match.details["first_error"]["type"] == "out_of_order" and match.details["first_error"]["step"] == 2
    row = match.details["alignment"][1]
    assert "before it was returned" in row["note"] and row["milestone"] == "email"
    # the same calls in two turns: the id was read from the result
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"})),
                     turn(("get_user_email", {"user_id": 158})))
    assert scores["trajectory_match"].value == 1.0


def test_an_optional_milestone_never_costs_a_forbidden_extra_call():
    plan = compile_plan([
        {"id": "o1", "optional": True, "any_of": [{"call": {"name": "r"}}, {"call": {"name": "w"}}]},
        {"id": "o2", "optional": True, "after": ["o1"], "call": {"name": "r"}},
    ], read_only=["r"], extra_calls="allow_read_only")
    steps = [StepView("r", {}), StepView("r", {}), StepView("w", {})]
    result = align(plan, steps)
    assert result.forbidden_unmatched == 0 and result.step_milestone == [None, None, "o1"]
    assert diagnose(plan, steps, result).passed


def test_a_last_state_milestone_undone_at_the_end_fails_unless_transient():
    example = {"id": "cab", "input": "Type cab", "milestones": [{"id": "cab", "state": {"paper": "cab"}}],
               "extra_calls": "allow"}
    typing = [turn(("type_letter", {"letter": x})) for x in "cabb"]
    scores, _ = play("typewriter_1", example, *typing)
    match = scores["trajectory_match"]
    assert match.value == 0.0 and match.details["first_error"]["type"] == "undone"
    assert match.details["first_error"]["step"] == 4 and "held after tool step 3" in match.explanation
    scores, _ = play("typewriter_1", {**example, "milestones": [{**example["milestones"][0], "transient": True}]},
                     *typing)
    assert scores["trajectory_match"].value == 1.0
    assert scores["trajectory_match"].details["matched"]["cab"] == {"kind": "state", "at": 3, "met": 3}


def test_calls_that_bring_state_milestones_about_are_not_extra_calls():
    example = {"id": "abc", "input": "Type ab, then c",
               "milestones": [{"id": "ab", "state": {"paper": "ab"}}, {"id": "abc", "after": ["ab"], "state": {"paper": "abc"}}]}
    scores, _ = play("typewriter_1", example, *[turn(("type_letter", {"letter": x})) for x in "abc"])
    assert scores["trajectory_match"].value == 1.0, scores["trajectory_match"].explanation
    assert scores["step_precision"].value == 1.0
    rows = scores["trajectory_match"].details["alignment"]
    assert [r.get("milestone") for r in rows] == ["ab", "ab", "abc"]
    assert all(r["note"].startswith("brings about state milestone") for r in rows)
    # a call that changes the paper after the last state milestone was met is still an extra
    scores, _ = play("typewriter_1", {**example, "milestones": [*example["milestones"][:1],
                                                                {**example["milestones"][1], "transient": True}]},
                     *[turn(("type_letter", {"letter": x})) for x in "abcd"])
    assert scores["trajectory_match"].value == 0.0
    assert scores["trajectory_match"].details["first_error"]["type"] == "extra_call"


def test_wrong_argument_reads_count_against_precision():
    wrong = turn(("get_user_email", {"user_id": 7}))
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"})), wrong,
                     turn(("get_user_email", {"user_id": 158})))
    assert scores["trajectory_match"].value == 1.0  # the policy allows the read, and it was corrected
    assert scores["step_precision"].value == 2 / 3
    # every call wrong: precision 0, not unscored
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Nobody"})), wrong)
    assert scores["step_precision"].value == 0.0


def test_steps_exact_does_not_apply_to_an_example_given_by_milestones_alone():
    scores, _ = play("relational_data", KWAME, graders=["steps_exact", "trajectory_match"])
    assert "steps_exact" not in scores and scores["trajectory_match"].value == 0.0


def test_a_wrong_argument_is_shown_by_value_and_type():
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"})),
                     turn(("get_user_email", {"user_id": "158"})))
    row = scores["trajectory_match"].details["alignment"][1]
    # the environment refuses a string for an integer (its schema); the label says why in types
    assert (row["type"], row["milestone"], row["argument"]) == ("rejected", "email", "user_id")
    assert row["note"].endswith("it meant email: argument 'user_id': type differs: \"158\" (string) vs 158 (integer)")
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"})),
                     turn(("get_user_email", {"user_id": 22})))
    assert scores["trajectory_match"].details["alignment"][1]["note"] == (
        "argument 'user_id' = 22, expected 158 (from find's result at /0/id)")


def test_a_rejected_attempt_names_the_milestone_it_meant():
    scores, traj = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Kwame"})),
                        turn(("get_user_email", {"user_id": 158, "verbose": True})))
    assert traj.tool_steps[1].rejected
    match = scores["trajectory_match"]
    row = match.details["alignment"][1]
    assert (row["type"], row["milestone"], row["argument"]) == ("rejected", "email", "verbose")
    first = match.details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (2, "rejected", "email")


def test_wording_of_minefields_progress_and_all_optional_examples():
    example = {**KWAME, "minefields": [{"call": {"name": "get_user_name"}}]}
    scores, _ = play("relational_data", example, turn(("find_users_by_name", {"name": "Kwame"})),
                     turn(("get_user_name", {"user_id": 158})), turn(("get_user_email", {"user_id": 158})))
    match = scores["trajectory_match"]
    assert match.explanation.startswith("step 2 (get_user_name): forbidden: the call get_user_name matches minefield 0")
    row = match.details["alignment"][1]
    assert row["type"] == "forbidden" and "allowed" not in row
    progress = scores["milestone_progress"]
    assert progress.explanation == "minefield 0 hit at step 2 (get_user_name); 2/2 required milestones matched"
    optional = {"id": "o", "input": "x", "milestones": [{"id": "o", "optional": True, "call": {"name": "get_user_name"}}]}
    scores, _ = play("relational_data", optional)
    assert scores["trajectory_match"].explanation == "no required milestones (all optional)"
    assert scores["milestone_progress"].explanation == "no required milestones (all optional)"


def test_strict_mode_pairs_the_calls_of_one_model_turn_in_any_order():
    from toolgym.graders.trajectory import TrajectoryMatch

    example = {"id": "two", "input": "x", "expected_calls": [
        {"name": "find_users_by_name", "arguments": {"name": "Kwame"}},
        {"name": "find_users_by_name", "arguments": {"name": "Ada"}},
    ]}
    strict = TrajectoryMatch(trajectory_mode="strict")
    one_turn = turn(("find_users_by_name", {"name": "Ada"}), ("find_users_by_name", {"name": "Kwame"}))
    scores, _ = play("relational_data", example, one_turn, graders=[strict])
    assert scores["trajectory_match"].value == 1.0
    two_turns = [turn(("find_users_by_name", {"name": "Ada"})), turn(("find_users_by_name", {"name": "Kwame"}))]
    scores, _ = play("relational_data", example, *two_turns, graders=[strict])
    assert scores["trajectory_match"].value == 0.0


def test_show_marks_where_each_state_milestone_was_met(tmp_path):
    import io

    from rich.console import Console

    from toolgym.views.show import show

    example = {"id": "abc", "input": "Type ab, then c",
               "milestones": [{"id": "ab", "state": {"paper": "ab"}}, {"id": "abc", "after": ["ab"], "state": {"paper": "abc"}}]}
    model = ScriptedChatModel(turns=[*[turn(("type_letter", {"letter": x})) for x in "abc"], "done"])
    toolgym.evaluate("typewriter_1", model=model, dataset=[example], graders=STEPWISE, out=tmp_path / "run")
    buffer = io.StringIO()
    assert show(tmp_path / "run", example="abc", console=Console(file=buffer, width=200)) == 0
    lines = buffer.getvalue().splitlines()
    tools = [k for k, line in enumerate(lines) if " tool  type_letter" in line]
    ab = lines.index("      ✓ state milestone ab met")
    abc = lines.index("      ✓ state milestone abc met")
    assert tools[1] < ab < tools[2] < abc  # after the second letter, and after the third
    assert lines[tools[0] + 1] == "      ✓ brings about state milestone ab"  # no extra call


def test_the_view_marks_where_each_state_milestone_was_met(tmp_path):
    from toolgym.views.web.app import trajectory_detail
    from toolgym.views.web.index import RunIndex

    example = {"id": "abc", "input": "Type ab, then c",
               "milestones": [{"id": "ab", "state": {"paper": "ab"}}, {"id": "abc", "after": ["ab"], "state": {"paper": "abc"}}]}
    model = ScriptedChatModel(turns=[*[turn(("type_letter", {"letter": x})) for x in "abc"], "done"])
    toolgym.evaluate("typewriter_1", model=model, dataset=[example], graders=STEPWISE, out=tmp_path / "run")
    index = RunIndex(tmp_path / "run", cache_dir=tmp_path / "cache")
    index.refresh()
    assert index.wait(timeout=60)
    doc = trajectory_detail("run", index, "abc", 0)
    tools = [s for s in doc["trajectory"]["steps"] if s["kind"] == "tool"]
    assert [s["state_milestones_met"] for s in tools] == [[], ["ab"], ["abc"]]
    assert [s["milestones_met"] for s in tools] == [[], [{"kind": "state", "id": "ab"}], [{"kind": "state", "id": "abc"}]]
    assert doc["state_milestones_met_at_start"] == [] and doc["milestones_met_at_start"] == []


def test_an_undone_last_state_is_blamed_on_the_step_that_undid_it_under_every_policy():
    for policy in ("forbid", "allow"):
        example = {"id": "a", "input": "Type a", "milestones": [{"id": "a", "state": {"paper": "a"}}], "extra_calls": policy}
        scores, _ = play("typewriter_1", example, turn(("type_letter", {"letter": "a"})), turn(("type_letter", {"letter": "b"})))
        first = scores["trajectory_match"].details["first_error"]
        assert (first["step"], first["type"], first["milestone"]) == (2, "undone", "a"), policy
        assert scores["step_precision"].value == 0.5  # the right letter counts, the undoing one counts against


def test_a_from_tool_note_names_the_tool_and_why_there_is_no_value():
    example = {"id": "t", "input": "x", "read_only": ["find_*", "get_*"], "extra_calls": "allow_read_only",
               "milestones": [{"id": "e", "call": {"name": "get_user_email", "arguments": {
                   "user_id": {"$from": {"tool": "find_users_by_name"}, "path": "/0/id"}}}}]}
    # an id no result holds (the right one, 158, written before the search, is out of order)
    scores, _ = play("relational_data", example, turn(("get_user_email", {"user_id": 7})),
                     turn(("find_users_by_name", {"name": "Kwame"})))
    assert scores["trajectory_match"].details["alignment"][0]["note"] == (
        "argument 'user_id' = 7; expected a value from a result of find_users_by_name at /0/id, and no result of "
        "find_users_by_name returned before this call holds one")


def test_a_from_tool_value_used_in_the_same_turn_as_its_source_is_out_of_order():
    example = {"id": "t", "input": "x", "read_only": ["find_*", "get_*"], "extra_calls": "allow_read_only",
               "milestones": [{"id": "e", "call": {"name": "get_user_email", "arguments": {
                   "user_id": {"$from": {"tool": "find_users_by_name"}, "path": "/0/id"}}}}]}
    scores, _ = play("relational_data", example, turn(("find_users_by_name", {"name": "Kwame"}),
                                                      ("get_user_email", {"user_id": 158})))
    match = scores["trajectory_match"]
    first = match.details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (2, "out_of_order", "e")
    assert "before it was returned" in match.details["alignment"][1]["note"]
    assert match.details["alignment"][0].get("type") != "wrong_tool"  # the search is the value's source


def test_a_result_milestone_names_the_step_that_meant_it():
    # the only call of the tool a result milestone names: rejected, then with a wrong result
    example = {"id": "r", "input": "What is Kwame's email?", "extra_calls": "allow", "milestones": [
        {"id": "email", "result": {"name": "get_user_email", "value": {"$contains": "@"}}}]}
    scores, _ = play("relational_data", example, turn(("get_user_email", {"user_id": 158, "verbose": True})))
    first = scores["trajectory_match"].details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (1, "rejected", "email")
    assert scores["trajectory_match"].details["alignment"][0]["note"].endswith("it meant result milestone email")
    scores, _ = play("relational_data", example, turn(("get_user_email", {"user_id": 99999})))
    first = scores["trajectory_match"].details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (1, "wrong_arguments", "email")
    assert first["note"] == "its result does not match result milestone email"
    scores, _ = play("relational_data", example, turn(("get_user_email", {"user_id": 158})))
    assert scores["trajectory_match"].value == 1.0


def test_data_flow_after_a_replayed_prefix_follows_the_model_turns():
    # a replayed prefix (no model turn) then one model turn making both calls: the id could not
    # come from find's result; find replayed in the prefix: it could
    plan = compile_plan(KWAME["milestones"], extra_calls="allow")
    found = '[{"id": 158, "name": "Kwame"}]'
    same_turn = [StepView("get_user_name", {"user_id": 1}, "x", turn=None),
                 StepView("find_users_by_name", {"name": "Kwame"}, json.loads(found), turn=0),
                 StepView("get_user_email", {"user_id": 158}, "k@x", turn=0)]
    result = align(plan, same_turn)
    assert result.required_matched == 1
    first = diagnose(plan, same_turn, result).first_error
    assert (first["step"], first["type"], first["milestone"]) == (3, "out_of_order", "email")
    replayed = [StepView("find_users_by_name", {"name": "Kwame"}, json.loads(found), turn=None),
                StepView("get_user_email", {"user_id": 158}, "k@x", turn=0)]
    assert align(plan, replayed).required_matched == 2


def test_a_from_whose_milestone_was_never_matched_says_so():
    scores, _ = play("relational_data", KWAME, turn(("find_users_by_name", {"name": "Nobody"})),
                     turn(("get_user_email", {"user_id": 158})))
    row = scores["trajectory_match"].details["alignment"][1]
    assert (row["type"], row["milestone"]) == ("wrong_arguments", "email")
    assert row["note"] == ("argument 'user_id' = 158; expected a value from find's result at /0/id, "
                           "and milestone find was never matched (no result to read)")


TYPE_ABC = {
    "id": "abc", "input": "Type: ab", "turns": ["Now also type: c"],
    "milestones": [
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
        {"id": "b", "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}},
        {"id": "c", "after": ["b"], "turn": 2, "call": {"name": "type_letter", "arguments": {"letter": "c"}}},
    ],
}


def test_a_milestone_of_a_user_turn_is_matched_only_in_that_turn():
    def run(first, second):
        scripts = {"Type: ab": [*[turn(("type_letter", {"letter": x})) for x in first], "ok"],
                   "Now also type: c": [*[turn(("type_letter", {"letter": x})) for x in second], "ok"]}
        result = toolgym.evaluate("typewriter_1", model=ScriptedChatModel(by_input=scripts), dataset=[TYPE_ABC],
                                  graders=STEPWISE)
        return {s.grader: s for s in result.scores}, result.trajectories[0]

    # c typed in turn 1, before the user asked for it: not credited to turn 2's milestone
    scores, traj = run("abc", "")
    assert [u.turn for u in traj.user_steps] == [1, 2] and traj.final_state == {"paper": "abc"}
    match = scores["trajectory_match"]
    assert match.value == 0.0 and scores["milestone_progress"].value == 2 / 3
    row = match.details["alignment"][2]
    assert (row["type"], row["milestone"]) == ("out_of_order", "c")
    assert row["note"] == "fits c, but c belongs to user turn 2 (this call was made in turn 1)"
    # c typed once asked, in turn 2
    scores, _ = run("ab", "c")
    assert scores["trajectory_match"].value == 1.0


def test_a_state_milestone_of_a_user_turn_counts_while_that_turn_lasts():
    plan = compile_plan([{"id": "ab", "turn": 2, "transient": True, "state": {"paper": "ab"}},
                         {"id": "end", "state": {"paper": {"$regex": "^ab"}}}], extra_calls="allow")
    steps = [StepView("type_letter", {"letter": x}, user_turn=t) for x, t in (("a", 1), ("b", 1), ("c", 3))]
    states = {0: {"paper": ""}, 1: {"paper": "a"}, 2: {"paper": "ab"}, 3: {"paper": "abc"}}
    # "ab" held after step 2 until step 3, made in turn 3: it held during turn 2
    assert "ab" in align(plan, steps, states).matched
    # "ab" undone within turn 1: it never held in turn 2
    steps[2] = steps[2]._replace(user_turn=1)
    assert "ab" not in align(plan, steps, states).matched


def test_partial_credit_comes_from_the_milestone_s_own_user_turn():
    example = {**TYPE_ABC, "milestones": [*TYPE_ABC["milestones"][:2],
                                          {**TYPE_ABC["milestones"][2], "similarity": {"letter": "rouge_l"}}]}
    scripts = {"Type: ab": [*[turn(("type_letter", {"letter": x})) for x in "abc"], "ok"], "Now also type: c": ["ok"]}
    result = toolgym.evaluate("typewriter_1", model=ScriptedChatModel(by_input=scripts), dataset=[example],
                              graders=["milestone_similarity"])
    (score,) = result.scores
    # c typed in turn 1 earns turn 2's milestone nothing
    assert score.value == 2 / 3 and score.details["similarity"]["c"] == 0.0


def test_a_state_milestone_of_a_user_turn_must_hold_at_the_end_of_that_turn():
    example = {"id": "ab", "input": "Type: ab", "turns": ["Now also type: c"],
               "milestones": [{"id": "ab", "turn": 1, "state": {"paper": "ab"}},
                              {"id": "abc", "turn": 2, "state": {"paper": "abc"}}]}

    def run(first, second):
        scripts = {"Type: ab": [*[turn(("type_letter", {"letter": x})) for x in first], "ok"],
                   "Now also type: c": [*[turn(("type_letter", {"letter": x})) for x in second], "ok"]}
        result = toolgym.evaluate("typewriter_1", model=ScriptedChatModel(by_input=scripts), dataset=[example],
                                  graders=["trajectory_match"])
        return result.scores[0]

    assert run("ab", "c").value == 1.0  # each turn's state at its end, though turn 2 changed the paper
    score = run("abc", "")  # c typed in turn 1: "ab" did not hold at the end of turn 1
    assert score.value == 0.0
    first = score.details["first_error"]
    assert (first["step"], first["type"], first["milestone"], first["turn"]) == (3, "undone", "ab", 1)


def test_show_marks_where_result_and_message_milestones_were_met(tmp_path, capsys):
    from toolgym.cli import main

    example = {"id": "r", "input": "What is Kwame's email?", "extra_calls": "allow", "milestones": [
        {"id": "got", "result": {"name": "get_user_email", "value": {"$contains": "@"}}},
        {"id": "told", "after": ["got"], "message": {"$contains": "kwame@"}}]}
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(example) + "\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([turn(("get_user_email", {"user_id": 158})), "It is kwame@kmail.com"]))
    out = tmp_path / "run"
    assert main(["run", "--env", "relational_data", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["show", str(out), "--example", "r"]) == 0
    text = capsys.readouterr().out
    assert "✓ result milestone got met" in text and "✓ message milestone told met" in text

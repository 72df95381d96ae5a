"""An outside check of the stepwise trajectory grader on multi-turn episodes, as a careful
reviewer would make it before trusting its scores: hand-written cases on typewriter_1 and
relational_data, each played through `toolgym.evaluate` with a scripted model answering every
user turn (`ScriptedChatModel(by_input=...)`), with the verdict an expert gives written down
before the grader was run.

The tests named `test_defect_*` failed on the grader as it was checked (each comment says what
the grader said, what it should say and why) and pass since it was fixed; the others held and
stay as regression tests."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import toolgym
from toolgym.cli import main
from toolgym.graders.trajectory import TrajectoryMatch
from toolgym.providers.scripted import ScriptedChatModel

STEPWISE = ["trajectory_match", "milestone_progress", "step_precision", "step_recall"]


def turn(*calls, content=""):
    """One model turn making ``calls`` (``(name, args)`` pairs) as parallel tool calls."""
    return {"content": content, "tool_calls": [{"name": n, "args": a, "id": f"c{k}"} for k, (n, a) in enumerate(calls)]}


def letter(x):
    return turn(("type_letter", {"letter": x}))


def find(name="Kwame"):
    return turn(("find_users_by_name", {"name": name}))


def email(user_id=158):
    return turn(("get_user_email", {"user_id": user_id}))


def play(env, example, scripts, graders=STEPWISE, out=None):
    """Play ``example`` on ``env`` with a scripted model whose script for each user message is
    ``scripts[message]``; the scores by grader and the trajectory."""
    result = toolgym.evaluate(env, model=ScriptedChatModel(by_input=scripts), dataset=[example], graders=graders,
                              **({"out": out} if out is not None else {}))
    return {s.grader: s for s in result.scores}, result.trajectories[0]


# relational_data: Kwame is user 158, email kwame@kmail.com
KWAME_TURNS = {"id": "kwame-mt", "input": "Who is Kwame?", "turns": ["And what is his email address?"],
               "read_only": ["get_*", "find_*"], "extra_calls": "allow_read_only"}
Q1, Q2 = "Who is Kwame?", "And what is his email address?"
FIND = {"id": "find", "turn": 1, "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}}


def rd_mt_01():
    """The built-in example rd-mt-01: c1 (find Kwame, turn 1), c2 (his email with $from c1, turn 2)."""
    from toolgym.suites.relational_data import environment

    path = environment.__file__.replace("environment.py", "datasets/relational_data/multi_turn.jsonl")
    with open(path, encoding="utf-8") as f:
        example = json.loads(f.readline())
    assert example["id"] == "rd-mt-01"
    return example


# ------------------------------------------------------------------------------------------
# Defects (fail on the checked main)
# ------------------------------------------------------------------------------------------


def test_defect_a_state_milestone_of_an_earlier_user_turn_is_checked_in_that_turn_not_at_the_end():
    # The user asks for "ab", then "Now also type: c". The author writes what must hold after
    # each turn, as `expected_states` would: {"paper": "ab"} in turn 1, {"paper": "abc"} in turn
    # 2, without `after` (the turns already order them). The agent types a, b, then c when asked.
    # Expert verdict: 1.0; both states held in their turns, the agent did exactly what was asked.
    # The grader said 0.0: `ab` has no milestone after it, so it "must hold at the end" (the
    # final state, which belongs to turn 2 and can never match a turn-1 milestone): "turn 2,
    # step 3 (type_letter): undone (ab)", blaming the very call the user asked for in turn 2.
    # A turn-1 state milestone is thus unmatchable by any trajectory that does something in a
    # later turn. It should hold at the end of its own turn (or the spec should be refused).
    example = {"id": "tw-ab-c", "input": "Type: ab", "turns": ["Now also type: c"],
               "milestones": [{"id": "ab", "turn": 1, "state": {"paper": "ab"}},
                              {"id": "abc", "turn": 2, "state": {"paper": "abc"}}]}
    scores, traj = play("typewriter_1", example, {"Type: ab": [letter("a"), letter("b"), "typed ab"],
                                                  "Now also type: c": [letter("c"), "typed c"]})
    assert traj.final_state == {"paper": "abc"}
    match = scores["trajectory_match"]
    assert match.value == 1.0, match.explanation
    assert scores["milestone_progress"].value == 1.0
    # turn_state, on the same facts written as expected_states, agrees with the expert today:
    # the two graders must not disagree on what held after each turn
    with_states = {**example, "expected_states": [{"paper": "ab"}, {"paper": "abc"}]}
    scores, _ = play("typewriter_1", with_states, {"Type: ab": [letter("a"), letter("b"), "typed ab"],
                                                   "Now also type: c": [letter("c"), "typed c"]},
                     graders=[*STEPWISE, "turn_state"])
    assert scores["turn_state"].value == 1.0
    assert scores["trajectory_match"].value == 1.0, scores["trajectory_match"].explanation
    # and when the agent does undo turn 1's state within turn 1, that is where it is blamed
    scores, _ = play("typewriter_1", example, {"Type: ab": [letter("a"), letter("b"), letter("x"), "typed"],
                                               "Now also type: c": [letter("c"), "typed c"]})
    first = scores["trajectory_match"].details["first_error"]
    assert (first["step"], first["milestone"], first["turn"]) == (3, "ab", 1), first


def test_defect_a_message_milestone_of_turn_2_is_not_matched_by_text_said_in_turn_1():
    # `told` belongs to turn 2 ("And what is his email address?"). The agent blurts the email
    # in turn 1 (before being asked), then in turn 2 fetches it and says "Sorry, I could not
    # find it." Expert verdict: 0.0, `told` missing: in turn 2 the agent did not tell the user.
    # The grader said 1.0 ("told": message at 1): the text said after tool step 1 is taken as
    # "observed while turn 2 lasted" because the state after step 1 lasts until step 2 (made in
    # turn 2). A message is said at one moment, in one turn; it does not last like a state.
    example = {**KWAME_TURNS, "milestones": [FIND, {"id": "told", "turn": 2, "message": {"$contains": "kwame@kmail.com"}}]}
    scores, _ = play("relational_data", example, {Q1: [find(), "Kwame is user 158, kwame@kmail.com"],
                                                  Q2: [email(), "Sorry, I could not find it."]})
    match = scores["trajectory_match"]
    assert match.value == 0.0, match.explanation
    assert match.details["missing"] == ["told"]


def test_defect_a_message_milestone_of_turn_1_is_not_matched_by_text_said_in_turn_2():
    # The converse: `told` belongs to turn 1; the agent says only "Kwame is user 158." in turn 1
    # and gives the email in turn 2 without a tool call. Expert verdict: 0.0 (`told` missing in
    # turn 1). The grader said 1.0: text after the last tool step (made in turn 1) counts for
    # every later turn, so turn 2's answer is credited to turn 1.
    example = {**KWAME_TURNS, "milestones": [FIND, {"id": "told", "turn": 1, "message": {"$contains": "kwame@kmail.com"}}]}
    scores, _ = play("relational_data", example, {Q1: [find(), "Kwame is user 158."], Q2: ["It is kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0, match.explanation
    assert match.details["missing"] == ["told"]


RESULT_OF_TURN_2 = {**KWAME_TURNS, "milestones": [
    FIND, {"id": "emailed", "turn": 2, "after": ["find"], "result": {"name": "get_user_email", "value": "kwame@kmail.com"}}]}


def test_defect_a_result_milestone_of_turn_2_is_not_matched_by_a_result_returned_in_turn_1():
    # `emailed` (get_user_email returned kwame@kmail.com) belongs to turn 2. The agent fetches
    # the email in turn 1, before the user asked, and in turn 2 only repeats it. Expert verdict:
    # 0.0, as for a call milestone of turn 2 made in turn 1 (rd-mt-01 gives exactly that:
    # "out of order (c2) ... belongs to user turn 2"): the result was returned in turn 1. The
    # first error is the early call (step 2), linked to `emailed` (result milestones naming a
    # tool link the calls of that tool). The grader said 1.0, `emailed` matched "at 2".
    scores, _ = play("relational_data", RESULT_OF_TURN_2, {Q1: [find(), email(), "Kwame, kwame@kmail.com"],
                                                           Q2: ["As I said, kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0, match.explanation
    assert match.details["missing"] == ["emailed"]
    first = match.details["first_error"]
    assert (first["step"], first["milestone"]) == (2, "emailed"), first


def test_defect_a_result_milestone_of_turn_2_is_credited_to_the_call_made_in_turn_2():
    # The same, under `forbid`, with the agent fetching the email again in turn 2. Expert
    # verdict: 0.0 (the turn-1 fetch is a forbidden extra call, made before it was asked), with
    # the first error at step 2 (the early call) and step 3, the turn-2 fetch that returned the
    # email, credited with `emailed`. The grader gave `emailed` to the turn-1 result and blamed
    # step 3, the one right call: "turn 2, step 3 (get_user_email): extra call".
    example = {**RESULT_OF_TURN_2, "extra_calls": "forbid"}
    scores, _ = play("relational_data", example, {Q1: [find(), email(), "Kwame, kwame@kmail.com"],
                                                  Q2: [email(), "kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0
    assert match.details["matched"]["emailed"] == {"kind": "result", "at": 3}, match.details["matched"]
    rows = match.details["alignment"]
    assert rows[2].get("milestone") == "emailed" and not rows[2]["error"], rows[2]
    first = match.details["first_error"]
    assert (first["step"], first["turn"]) == (2, 1), first


def test_defect_a_call_made_a_turn_early_is_out_of_order_even_when_its_milestone_is_matched_later():
    # TYPE ab, then "Now also type: c"; `c` belongs to turn 2. The agent types a, b, c in turn 1
    # and c again in turn 2 (paper "abcc"). Expert verdict: 0.0 (the early c is an extra call
    # under forbid), and the early c is labelled for what it is: `out_of_order` for c ("c
    # belongs to user turn 2, this call was made in turn 1"), as it is when c is never typed
    # in turn 2. The grader said "turn 1, step 3 (type_letter): wrong arguments (a, argument
    # 'letter')": `argument 'letter' = "c", expected "a"`, naming milestone a, matched at step 1.
    example = {"id": "abc", "input": "Type: ab", "turns": ["Now also type: c"], "milestones": [
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
        {"id": "b", "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}},
        {"id": "c", "after": ["b"], "turn": 2, "call": {"name": "type_letter", "arguments": {"letter": "c"}}}]}
    scores, _ = play("typewriter_1", example, {"Type: ab": [letter("a"), letter("b"), letter("c"), "ok"],
                                               "Now also type: c": [letter("c"), "ok"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0
    row = match.details["alignment"][2]
    assert (row.get("type"), row.get("milestone")) == ("out_of_order", "c"), row


def test_defect_an_early_read_repeated_in_its_turn_is_not_labelled_with_arguments_that_do_not_match():
    # rd-mt-01: the agent finds Kwame, fetches his email already in turn 1, and again in turn 2
    # when asked. Expert verdict: 1.0 (the early read is allowed by allow_read_only and the
    # milestone was matched in its turn), with the early read labelled out_of_order for c2 (it
    # belongs to user turn 2). The grader's verdict is right, but the row says
    # `wrong_arguments` with the note "arguments do not match c2", which is false: user_id 158
    # is exactly c1's result; only the turn is wrong.
    scores, _ = play("relational_data", rd_mt_01(), {Q1: [find(), email(), "Kwame, kwame@kmail.com"],
                                                     Q2: [email(), "kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 1.0
    row = match.details["alignment"][1]
    assert (row.get("type"), row.get("milestone")) == ("out_of_order", "c2"), row
    assert "do not match" not in row.get("note", "")


def test_defect_an_answer_milestone_of_an_earlier_turn_is_either_refused_or_read_in_that_turn():
    # `ans` is an `answer` milestone with "turn": 1: "the answer to 'Who is Kwame?' gives his id".
    # The agent answers "Kwame is user 158" at the end of turn 1, then the email in turn 2.
    # Expert verdict: 1.0 (the answer that ended turn 1 holds 158), or the spec refused when
    # the dataset is read (the answer is the episode's last word, so a turn-1 answer milestone
    # can never match once turn 2 has a tool step). The grader accepted the spec silently and
    # said "turn 1, end of trajectory: missing (ans)": a milestone no trajectory can meet.
    example = {**KWAME_TURNS, "milestones": [FIND, {"id": "ans", "turn": 1, "answer": {"$contains": "158"}}]}
    try:
        scores, _ = play("relational_data", example, {Q1: [find(), "Kwame is user 158"],
                                                      Q2: [email(), "kwame@kmail.com"]})
    except ValueError as exc:  # refused when read: it must say why
        assert "answer" in str(exc) and "turn" in str(exc)
        return
    assert scores["trajectory_match"].value == 1.0, scores["trajectory_match"].explanation


def test_defect_the_format_section_does_not_call_turn_a_label_only():
    # docs/stepwise-grader.md, "The format", still says of `turn`: "It is a label, not a
    # constraint", while "A milestone of a user turn is matched in that turn only" (same page)
    # and docs/multi-turn.md say it is a constraint. A user reading the format reference is
    # told the opposite of what the grader does.
    text = (Path(__file__).resolve().parents[1] / "docs" / "stepwise-grader.md").read_text(encoding="utf-8")
    assert "It is a label, not a constraint" not in text


def test_defect_a_failed_call_of_a_result_milestones_tool_counts_against_precision_when_corrected_later():
    # `em` is a result milestone naming get_user_email (kwame@kmail.com), extra calls allowed.
    # The agent first asks for user 162's email (Lucia's), then for 158's. Expert verdict: 1.0
    # (the policy allows the miss, the result was returned), step_precision 1/2 and the first
    # call labelled wrong_arguments for `em` ("its result does not match result milestone em"):
    # docs/stepwise-grader.md says a call of the named tool "that ran but returned something
    # else is wrong_arguments for it", and step_precision leaves out only "a repeated call, a
    # call of a tool no milestone has". Its twin with a call milestone get_user_email(158)
    # scores precision 1/2 with that label. The grader said precision 1.0 ("1 harmless allowed
    # extras left out") and labelled the miss "extra call: matches no milestone": the link to
    # the result milestone is made only while the milestone stays missing.
    example = {"id": "r", "input": "What is Kwame's email?", "extra_calls": "allow",
               "milestones": [{"id": "em", "result": {"name": "get_user_email", "value": "kwame@kmail.com"}}]}
    scores, _ = play("relational_data", example, {"What is Kwame's email?": [email(162), email(158), "done"]})
    assert scores["trajectory_match"].value == 1.0
    row = scores["trajectory_match"].details["alignment"][0]
    assert (row.get("type"), row.get("milestone")) == ("wrong_arguments", "em"), row
    assert scores["step_precision"].value == 0.5, scores["step_precision"].explanation
    # the twin with a call milestone, which holds today
    twin = {**example, "milestones": [{"id": "em", "call": {"name": "get_user_email", "arguments": {"user_id": 158}}}]}
    scores, _ = play("relational_data", twin, {"What is Kwame's email?": [email(162), email(158), "done"]})
    assert scores["step_precision"].value == 0.5


def test_defect_strict_mode_blames_the_wrong_call_of_a_model_turn_not_the_right_one():
    # agentevals strict mode on expected calls find_users_by_name(Kwame), get_user_name(158);
    # one model turn makes get_user_name(158) and find_users_by_name(Ada). The calls of one
    # model turn may come in any order (docs/stepwise-grader.md, agentevals' modes), so
    # get_user_name(158) is right; find_users_by_name(Ada) is the wrong call. Expert verdict:
    # 0.0 with the first error at step 2, wrong_arguments (call1, argument 'name'). The grader
    # said "step 1 (get_user_name): out of order (call2)": "fits call2, but call1 not matched
    # before it", blaming the right call for an order the mode does not ask for.
    example = {"id": "s", "input": "x", "expected_calls": [
        {"name": "find_users_by_name", "arguments": {"name": "Kwame"}},
        {"name": "get_user_name", "arguments": {"user_id": 158}}]}
    one_turn = turn(("get_user_name", {"user_id": 158}), ("find_users_by_name", {"name": "Ada"}))
    scores, _ = play("relational_data", example, {"x": [one_turn, "done"]},
                     graders=[TrajectoryMatch(trajectory_mode="strict")])
    match = scores["trajectory_match"]
    assert match.value == 0.0
    first = match.details["first_error"]
    assert (first["step"], first["type"], first["milestone"], first["argument"]) == (
        2, "wrong_arguments", "call1", "name"), first


def test_defect_strict_mode_with_one_extra_call_still_pairs_the_calls_of_a_model_turn_in_any_order():
    # The same expected calls; one model turn makes both, get_user_name(158) first, then a
    # second turn searches for Ada. Expert verdict: 0.0 (strict allows no other call), first
    # error at step 3, both expected calls matched (2/2). The grader said "step 1
    # (get_user_name): out of order (call2) ...; 1/2 required milestones matched": with one
    # step more than the reference, the any-order pairing inside a model turn is not applied.
    example = {"id": "s", "input": "x", "expected_calls": [
        {"name": "find_users_by_name", "arguments": {"name": "Kwame"}},
        {"name": "get_user_name", "arguments": {"user_id": 158}}]}
    both = turn(("get_user_name", {"user_id": 158}), ("find_users_by_name", {"name": "Kwame"}))
    scores, _ = play("relational_data", example, {"x": [both, find("Ada"), "done"]},
                     graders=[TrajectoryMatch(trajectory_mode="strict")])
    match = scores["trajectory_match"]
    assert match.value == 0.0
    assert match.details["first_error"]["step"] == 3, match.explanation
    assert match.details["missing"] == [], match.details["missing"]


def test_defect_an_expected_call_is_shown_as_written_not_wrapped_in_literal():
    # In an agentevals mode the expected call find_users_by_name(name="Kwame") is shown to the
    # user, in the alignment row and by `show`, as {"name": {"$literal": "Kwame"}}: an operator
    # the user never wrote (the plain value needs no $literal). Expert: {"name": "Kwame"}, as a
    # milestone's plain value is shown.
    example = {"id": "s", "input": "x", "expected_calls": [{"name": "find_users_by_name", "arguments": {"name": "Kwame"}}]}
    scores, _ = play("relational_data", example, {"x": [find("Ada"), "done"]},
                     graders=[TrajectoryMatch(trajectory_mode="unordered")])
    row = scores["trajectory_match"].details["alignment"][0]
    assert row["type"] == "wrong_arguments"
    assert row["expected"] == {"name": "find_users_by_name", "arguments": {"name": "Kwame"}}, row["expected"]


def test_defect_a_call_of_an_unknown_tool_is_labelled_as_the_docs_say():
    # docs/stepwise-grader.md, the error types: `rejected` "was refused by the environment
    # (unknown tool, arguments that do not fit)"; `malformed` "could not be parsed". The model
    # calls delete_user, a well-formed call of a tool relational_data lacks. Expert: `rejected`.
    # The grader labels it "malformed: malformed call, never executed" (the record marks an
    # unknown tool as malformed), so a reader looks for a parse error that is not there.
    example = {"id": "u", "input": "x", "extra_calls": "allow_read_only",
               "milestones": [{"id": "find", "call": {"name": "find_users_by_name"}}]}
    scores, _ = play("relational_data", example, {"x": [turn(("delete_user", {"user_id": 1})), find(), "done"]})
    row = scores["trajectory_match"].details["alignment"][0]
    # resolved in the docs: a tool-calling agent records a call of a tool it was not given as
    # malformed (its output says "unknown tool"), and the error-type table now says so
    assert row["type"] == "malformed", row
    doc = Path(__file__).resolve().parents[1] / "docs" / "stepwise-grader.md"
    if doc.exists():  # (a copy of the tests without docs/: tests/test_suites_removable.py)
        assert "names a tool the agent was not given" in doc.read_text(encoding="utf-8")


def test_defect_a_milestone_after_one_of_a_later_turn_is_refused_when_the_dataset_is_read():
    # `b` belongs to turn 1 and comes after `a`, which belongs to turn 2: no trajectory can
    # ever match `b` (a must be matched first, in turn 2, and b only in turn 1). The dataset
    # reader refuses an `after` cycle and a `$from` that is no ancestor, naming the field;
    # expert: this unsatisfiable order is refused the same way. The grader accepted it and
    # failed the only sensible trajectory ("turn 1, step 1 (type_letter): out of order (b)").
    from toolgym.data import DatasetError

    example = {"id": "a", "input": "Type: a", "turns": ["Now b"], "milestones": [
        {"id": "a", "turn": 2, "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
        {"id": "b", "turn": 1, "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}}]}
    with pytest.raises(DatasetError, match=r"milestones\[1\]"):
        play("typewriter_1", example, {"Type: a": [letter("b"), "ok"], "Now b": [letter("a"), "ok"]})


def test_defect_a_turn_past_the_examples_turns_names_the_field_as_the_other_errors_do(tmp_path):
    # Every other refused milestone names its field as `milestones[1].after` (docs/stepwise-grader.md);
    # a turn past the example's turns is named `milestones.1.turn` (expected_calls likewise
    # `expected_calls.1.turn`). Expert: one notation, `milestones[1].turn`.
    from toolgym.data import DatasetError

    example = {"id": "a", "input": "Type: a", "turns": ["Now b"], "milestones": [
        {"id": "a", "call": {"name": "type_letter"}}, {"id": "b", "turn": 3, "call": {"name": "type_letter"}}]}
    with pytest.raises(DatasetError) as raised:
        play("typewriter_1", example, {"Type: a": ["ok"], "Now b": ["ok"]})
    assert "field milestones[1].turn: turn 3 of an example with 2 user turn(s)" in str(raised.value)


def test_defect_a_bad_milestone_in_a_dataset_given_in_python_is_named_as_from_a_file():
    # From a file, a bad milestone reads "data.jsonl:1: field milestones[1].after: 'c' names no
    # milestone (ids: a, b)" (docs/stepwise-grader.md). Given to `toolgym.evaluate` as a list of
    # dicts, it reads "dataset[0]: field (record): Value error, field milestones[1].after: ...":
    # pydantic's wrapping ("field (record): Value error,") left in the message. Expert: the same
    # sentence, with the example's place: "dataset[0]: field milestones[1].after: ...".
    from toolgym.data import DatasetError

    example = {"id": "a", "input": "Type: a", "milestones": [
        {"id": "a", "call": {"name": "type_letter"}}, {"id": "b", "after": ["c"], "call": {"name": "type_letter"}}]}
    with pytest.raises(DatasetError) as raised:
        play("typewriter_1", example, {"Type: a": ["ok"]})
    assert str(raised.value) == "dataset[0]: field milestones[1].after: 'c' names no milestone (ids: a, b)"


def test_defect_an_any_of_offering_a_state_is_never_harder_to_meet_than_the_state_alone():
    # "Type abc": milestone `a` (type a), then `end` after it, any_of [the state paper "abc",
    # the call type_letter(c)]; extra calls forbidden. The agent types a, b, c: the paper ends
    # "abc". With `end` written as the state alone the grader passes it (b and c brought the
    # state about: no extra calls). Expert verdict with the any_of: 1.0 too; offering one more
    # way to meet a milestone cannot make it harder to meet. The grader said 0.0, "step 2
    # (type_letter): wrong arguments (a, argument 'letter')": the search gave `end` to the
    # call c, leaving b an extra call, because which calls bring a state about is worked out
    # only after the search (docs: "the alignment also tries leaving the observation for the
    # step, so the step is not left an extra call").
    state_only = {"id": "s", "input": "Type abc", "milestones": [
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
        {"id": "end", "after": ["a"], "state": {"paper": "abc"}}]}
    scripts = {"Type abc": [letter("a"), letter("b"), letter("c"), "ok"]}
    scores, _ = play("typewriter_1", state_only, scripts)
    assert scores["trajectory_match"].value == 1.0  # holds today
    either = {**state_only, "milestones": [state_only["milestones"][0], {
        "id": "end", "after": ["a"], "any_of": [{"state": {"paper": "abc"}},
                                                {"call": {"name": "type_letter", "arguments": {"letter": "c"}}}]}]}
    scores, _ = play("typewriter_1", either, scripts)
    assert scores["trajectory_match"].value == 1.0, scores["trajectory_match"].explanation
    assert scores["step_precision"].value == 1.0


def test_defect_a_result_milestone_refused_for_being_empty_says_what_is_wrong():
    # docs/stepwise-grader.md: in `{"result": {"name": tool, "value": matcher}}`, "`name` may be
    # left out (any tool) and so may `value` (any result)". `"result": {}` (some tool returned
    # something) is refused with "expected an object with 'name' and/or 'value', got an object":
    # it was an object. Expert: accepted as any result of any tool, or refused saying that the
    # object is empty.
    from toolgym.data import DatasetError

    example = {"id": "s", "input": "Type ab", "extra_calls": "allow",
               "milestones": [{"id": "ab", "state": {"paper": "ab"}}, {"id": "any", "result": {}}]}
    try:
        scores, _ = play("typewriter_1", example, {"Type ab": [letter("a"), letter("b"), "ok"]})
    except DatasetError as exc:
        assert "got an object" not in str(exc) and "empty" in str(exc), str(exc)
        return
    assert scores["trajectory_match"].value == 1.0


# ------------------------------------------------------------------------------------------
# Cases that held (regression tests)
# ------------------------------------------------------------------------------------------


def test_rd_mt_01_passes_when_each_turn_does_its_part_and_names_the_turn_of_an_early_call():
    # expert: find in turn 1, email in turn 2 -> 1.0
    scores, _ = play("relational_data", rd_mt_01(), {Q1: [find(), "Kwame, id 158"], Q2: [email(), "kwame@kmail.com"]})
    assert scores["trajectory_match"].value == 1.0 and scores["step_precision"].value == 1.0
    # expert: the email fetched in turn 1 only (before it was asked) -> 0.0, out_of_order c2 at
    # step 2 in turn 1, c2 missing, progress 1/2; the early read counts against precision
    scores, _ = play("relational_data", rd_mt_01(), {Q1: [find(), email(), "Kwame, kwame@kmail.com"],
                                                     Q2: ["kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0
    assert match.explanation == "turn 1, step 2 (get_user_email): out of order (c2); 1/2 required milestones matched"
    assert match.details["alignment"][1]["note"] == "fits c2, but c2 belongs to user turn 2 (this call was made in turn 1)"
    assert scores["milestone_progress"].value == 0.5 and scores["step_recall"].value == 0.5
    assert scores["step_precision"].value == 0.5


def test_an_early_read_repeated_in_its_turn_passes_under_allow_read_only():
    # expert: 1.0 (the early read is allowed, c2 is matched in turn 2); precision 2/3
    scores, _ = play("relational_data", rd_mt_01(), {Q1: [find(), email(), "Kwame, kwame@kmail.com"],
                                                     Q2: [email(), "kwame@kmail.com"]})
    assert scores["trajectory_match"].value == 1.0
    assert scores["trajectory_match"].details["matched"]["c2"] == {"kind": "step", "at": 3}
    assert scores["step_precision"].value == pytest.approx(2 / 3)


def test_data_flow_in_a_later_user_turn_still_needs_an_earlier_model_turn():
    # expert: in turn 2 the agent searches and fetches the email in one model turn: the id
    # cannot come from a result it had not seen -> 0.0, out_of_order at step 2, in turn 2
    example = {**KWAME_TURNS, "milestones": [
        {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
        {"id": "email", "after": ["find"], "turn": 2,
         "call": {"name": "get_user_email", "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}}]}
    both = turn(("find_users_by_name", {"name": "Kwame"}), ("get_user_email", {"user_id": 158}))
    scores, _ = play("relational_data", example, {Q1: ["Let me know what you need."], Q2: [both, "kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 0.0
    first = match.details["first_error"]
    assert (first["step"], first["type"], first["milestone"], first["turn"]) == (2, "out_of_order", "email", 2)
    assert "before it was returned" in first["note"]
    # the search in turn 1 and the fetch in turn 2: 1.0
    scores, _ = play("relational_data", example, {Q1: [find(), "Kwame is 158"], Q2: [email(), "kwame@kmail.com"]})
    assert scores["trajectory_match"].value == 1.0


def test_a_minefield_hit_in_turn_2_is_named_with_its_turn_and_tool():
    # expert: 0.0, first error the minefield call (step 2, turn 2); progress 0 after a minefield,
    # recall unchanged by it
    example = {**rd_mt_01(), "minefields": [{"call": {"name": "get_user_name"}}]}
    scores, _ = play("relational_data", example, {Q1: [find(), "Kwame, id 158"],
                                                  Q2: [turn(("get_user_name", {"user_id": 158})), email(), "kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.explanation.startswith("turn 2, step 2 (get_user_name): forbidden: the call get_user_name matches "
                                        "minefield 0")
    assert scores["milestone_progress"].value == 0.0 and scores["step_recall"].value == 1.0
    row = match.details["alignment"][1]
    assert row["type"] == "forbidden" and "allowed" not in row


def test_an_answer_milestone_of_the_last_turn_reads_the_final_answer():
    # expert: `ans` (turn 2) is in the final answer -> 1.0; when only turn 1's answer had it -> 0.0
    example = {**KWAME_TURNS, "milestones": [FIND, {"id": "ans", "turn": 2, "answer": {"$contains": "kwame@kmail.com"}}]}
    scores, _ = play("relational_data", example, {Q1: [find(), "Kwame is user 158"], Q2: [email(), "kwame@kmail.com"]})
    assert scores["trajectory_match"].value == 1.0
    scores, _ = play("relational_data", example, {Q1: [find(), "kwame@kmail.com"], Q2: [email(), "Done."]})
    assert scores["trajectory_match"].value == 0.0
    assert scores["trajectory_match"].details["missing"] == ["ans"]


def test_an_optional_milestone_of_turn_2_done_early_never_fails_the_trajectory():
    # expert: 1.0 (optional, and the policy allows the read); the early read is out_of_order
    # for `opt` and counts against precision (1/2)
    example = {**KWAME_TURNS, "milestones": [FIND, {"id": "opt", "optional": True, "turn": 2,
                                                    "call": {"name": "get_user_email"}}]}
    scores, _ = play("relational_data", example, {Q1: [find(), email(), "Kwame is user 158"], Q2: ["kwame@kmail.com"]})
    match = scores["trajectory_match"]
    assert match.value == 1.0 and match.details["missing_optional"] == ["opt"]
    assert (match.details["alignment"][1]["type"], match.details["alignment"][1]["allowed"]) == ("out_of_order",
                                                                                                 "read-only")
    assert scores["step_precision"].value == 0.5


def test_turn_states_as_waypoints_and_a_state_minefield_in_turn_2():
    # `ab` (turn 1) is a waypoint (`abc` comes after it): expert 1.0, every call brings a state
    # milestone about; a `z` typed in turn 2 hits the state minefield -> 0.0 at step 3, turn 2
    example = {"id": "tw", "input": "Type: ab", "turns": ["Now also type: c"],
               "milestones": [{"id": "ab", "turn": 1, "state": {"paper": "ab"}},
                              {"id": "abc", "turn": 2, "after": ["ab"], "state": {"paper": "abc"}}],
               "minefields": [{"state": {"paper": {"$contains": "z"}}}]}
    scores, _ = play("typewriter_1", example, {"Type: ab": [letter("a"), letter("b"), "ok"],
                                               "Now also type: c": [letter("c"), "ok"]})
    match = scores["trajectory_match"]
    assert match.value == 1.0 and scores["step_precision"].value == 1.0
    assert match.details["matched"] == {"ab": {"kind": "state", "at": 2, "met": 2},
                                        "abc": {"kind": "state", "at": 3, "met": 3}}
    assert [r["note"] for r in match.details["alignment"]] == [
        "brings about state milestone ab", "brings about state milestone ab", "brings about state milestone abc"]
    scores, _ = play("typewriter_1", example, {"Type: ab": [letter("a"), letter("b"), "ok"],
                                               "Now also type: c": [letter("z"), letter("c"), "ok"]})
    match = scores["trajectory_match"]
    assert match.explanation.startswith("turn 2, step 3 (type_letter): forbidden: the state after type_letter matches "
                                        "minefield 0")
    assert scores["milestone_progress"].value == 0.0 and scores["step_recall"].value == 0.5


def test_a_last_state_undone_in_the_last_turn_is_blamed_on_the_undoing_step():
    # `abc` (turn 2, the last state) met after "c" and undone by a "d" in the same turn:
    # expert 0.0, undone at step 4, turn 2; unless transient
    example = {"id": "tw", "input": "Type: ab", "turns": ["Now also type: c"], "extra_calls": "allow",
               "milestones": [{"id": "abc", "turn": 2, "state": {"paper": "abc"}}]}
    scripts = {"Type: ab": [letter("a"), letter("b"), "ok"], "Now also type: c": [letter("c"), letter("d"), "ok"]}
    scores, _ = play("typewriter_1", example, scripts)
    first = scores["trajectory_match"].details["first_error"]
    assert (first["step"], first["type"], first["milestone"], first["turn"]) == (4, "undone", "abc", 2)
    transient = {**example, "milestones": [{**example["milestones"][0], "transient": True}]}
    scores, _ = play("typewriter_1", transient, scripts)
    assert scores["trajectory_match"].value == 1.0


def test_milestones_without_a_turn_may_be_matched_in_any_turn():
    # expert: the agent asks nothing back in turn 1 and types a, b, c in turn 2: milestones a and
    # b name no turn, c names turn 2 -> 1.0
    example = {"id": "abc", "input": "Type: ab", "turns": ["Now also type: c"], "milestones": [
        {"id": "a", "call": {"name": "type_letter", "arguments": {"letter": "a"}}},
        {"id": "b", "after": ["a"], "call": {"name": "type_letter", "arguments": {"letter": "b"}}},
        {"id": "c", "after": ["b"], "turn": 2, "call": {"name": "type_letter", "arguments": {"letter": "c"}}}]}
    scores, _ = play("typewriter_1", example, {"Type: ab": ["Sure."],
                                               "Now also type: c": [letter("a"), letter("b"), letter("c"), "ok"]})
    assert scores["trajectory_match"].value == 1.0


@pytest.mark.parametrize(("mode", "verdicts"), [
    ("strict", {"right": 1.0, "swapped": 0.0, "extra": 0.0, "one": 0.0}),
    ("unordered", {"right": 1.0, "swapped": 1.0, "extra": 0.0, "one": 0.0}),
    ("superset", {"right": 1.0, "swapped": 1.0, "extra": 1.0, "one": 0.0}),
    ("subset", {"right": 1.0, "swapped": 1.0, "extra": 0.0, "one": 1.0}),
])
def test_agentevals_modes_on_a_multi_turn_example_read_turn_as_a_label(mode, verdicts):
    # expected_calls Kwame (turn 1) then Ada (turn 2), graded in agentevals' modes, which have
    # no turns (docs/multi-turn.md): an expert reads agentevals' definitions
    example = {"id": "ev", "input": "Who is Kwame?", "turns": ["And Ada?"], "expected_calls": [
        {"name": "find_users_by_name", "arguments": {"name": "Kwame"}},
        {"name": "find_users_by_name", "arguments": {"name": "Ada"}, "turn": 2}]}
    scripts = {
        "right": {"Who is Kwame?": [find(), "ok"], "And Ada?": [find("Ada"), "ok"]},
        "swapped": {"Who is Kwame?": [find("Ada"), "ok"], "And Ada?": [find(), "ok"]},
        "extra": {"Who is Kwame?": [find(), "ok"], "And Ada?": [find("Ada"), find("Bob"), "ok"]},
        "one": {"Who is Kwame?": [find(), "ok"], "And Ada?": ["ok"]},
    }
    got = {}
    for name, script in scripts.items():
        scores, _ = play("relational_data", example, script, graders=[TrajectoryMatch(trajectory_mode=mode)])
        got[name] = scores["trajectory_match"].value
    assert got == verdicts


def test_show_and_summary_of_a_multi_turn_run_name_the_early_call(tmp_path):
    # the rd-mt-01 run where the email is fetched in turn 1 only: `show` draws the user turns,
    # the out_of_order row and the milestone never reached; `summary` counts the first error
    # by type and milestone with the example's id
    from rich.console import Console

    from toolgym.views.show import show

    out = tmp_path / "run"
    play("relational_data", rd_mt_01(), {Q1: [find(), email(), "Kwame, kwame@kmail.com"], Q2: ["kwame@kmail.com"]},
         out=out)
    buffer = io.StringIO()
    assert show(out, example="rd-mt-01", console=Console(file=buffer, width=300)) == 0
    text = buffer.getvalue()
    assert "user · turn 1" in text and "user · turn 2" in text
    assert "✗ out of order (c2): fits c2, but c2 belongs to user turn 2 (this call was made in turn 1)" in text
    assert "milestones never reached: c2" in text
    assert "first error: turn 1, tool step 2 (row 5): out of order (c2)" in text
    assert "turn 1, step 2 (get_user_email): out of order" in text


def test_summary_cli_counts_first_errors_of_a_multi_turn_run(tmp_path, capsys):
    # through the command line, with a scripted model file: the summary's first-error table
    # has one row, out_of_order / c2 / rd-mt-01
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"by_input": {Q1: [find(), email(), "Kwame"], Q2: ["kwame@kmail.com"]}}))
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(rd_mt_01()) + "\n")
    out = tmp_path / "run"
    assert main(["run", "--env", "relational_data", "--dataset", str(data), "--model", f"scripted:{script}",
                 "--grader", "trajectory_match", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "out_of_order" in line)
    assert "c2" in row and "rd-mt-01" in row and "1.000" in row


KWAME_SAID = {"id": "k", "input": "What is Kwame's email?", "read_only": ["find_*", "get_*"],
              "extra_calls": "allow_read_only", "milestones": [
                  {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
                  {"id": "email", "after": ["find"], "call": {"name": "get_user_email", "arguments": {
                      "user_id": {"$from": "find", "path": "/0/id"}}}},
                  {"id": "said", "after": ["email"], "message": {"$contains": "kwame@kmail.com"}}]}
Q = "What is Kwame's email?"


def test_single_turn_message_and_data_flow_cases():
    # an unknown tool first (never executed, allowed), then the right path and the email said:
    # expert 1.0; the unknown call counts against precision (2/3)
    scores, _ = play("relational_data", KWAME_SAID, {Q: [turn(("delete_user", {"user_id": 1})), find(), email(),
                                                         "Kwame's email is kwame@kmail.com"]})
    assert scores["trajectory_match"].value == 1.0
    assert scores["step_precision"].value == pytest.approx(2 / 3)
    # the email written in the same model turn as its fetch, then "Done.": expert 0.0, `said`
    # missing (said before the result came back), progress 2/3
    early = {"content": "It is kwame@kmail.com",
             "tool_calls": [{"name": "get_user_email", "args": {"user_id": 158}, "id": "x"}]}
    scores, _ = play("relational_data", KWAME_SAID, {Q: [find(), early, "Done."]})
    match = scores["trajectory_match"]
    assert match.value == 0.0 and match.details["first_error"]["type"] == "missing"
    assert match.details["missing"] == ["said"] and scores["milestone_progress"].value == pytest.approx(2 / 3)
    # the right id guessed before the search: expert 0.0, out_of_order at step 1
    scores, _ = play("relational_data", KWAME_SAID, {Q: [email(), find(), "kwame@kmail.com"]})
    first = scores["trajectory_match"].details["first_error"]
    assert (first["step"], first["type"], first["milestone"]) == (1, "out_of_order", "email")


def test_a_judge_milestone_without_a_judge_is_unscored_with_the_reason():
    # expert: no verdict can be given without the judge, and the score says why
    example = {**KWAME_SAID, "milestones": [*KWAME_SAID["milestones"][:2],
                                            {"id": "said", "after": ["email"], "message": {"$judge": "gives the email"}}]}
    with pytest.warns(UserWarning):
        scores, _ = play("relational_data", example, {Q: [find(), email(), "kwame@kmail.com"]})
    assert scores["trajectory_match"].value is None
    assert "needs a judge model" in scores["trajectory_match"].explanation


def test_from_tool_in_turn_2_reads_a_near_miss_search_of_turn_1():
    # the optional `find` (Kwame) is missed by a search for "Kwa", whose result still holds
    # 158; in turn 2 the email of 158 is fetched: expert 1.0 (route-independent data flow),
    # the near miss counts against precision
    example = {"id": "t", "input": "Find Kwa", "turns": ["His email?"], "read_only": ["find_*", "get_*"],
               "extra_calls": "allow_read_only", "milestones": [
                   {"id": "find", "turn": 1, "optional": True,
                    "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
                   {"id": "em", "turn": 2, "call": {"name": "get_user_email", "arguments": {
                       "user_id": {"$from": {"tool": "find_users_by_name"}, "path": "/0/id"}}}}]}
    scores, _ = play("relational_data", example, {"Find Kwa": [find("Kwa"), "found"], "His email?": [email(), "ok"]})
    match = scores["trajectory_match"]
    assert match.value == 1.0 and match.details["missing_optional"] == ["find"]
    assert scores["step_precision"].value == 0.5


def test_a_replayed_prefix_counts_as_seen_and_later_calls_follow_their_turns():
    from toolgym.records import Example, ModelStep, ToolCall, ToolStep, Trajectory

    example = Example(id="k", input="x", milestones=KWAME_SAID["milestones"][:2])

    def graded(steps):
        return TrajectoryMatch().grade(example, Trajectory(example_id="k", env="relational_data", agent="x",
                                                           status="completed", steps=steps))

    found = '[{"id": 158, "name": "Kwame"}]'
    prefix_find = ToolStep(call_id="p1", name="find_users_by_name", arguments={"name": "Kwame"}, output=found)
    fetch = ToolStep(call_id="c1", name="get_user_email", arguments={"user_id": 158}, output="kwame@kmail.com")
    one = ModelStep(tool_calls=[ToolCall(id="c1", name="get_user_email", arguments={"user_id": 158})])
    # expert: the search replayed before any model turn was seen by the model's call -> 1.0
    assert graded([prefix_find, one, fetch]).value == 1.0
    # expert: search and fetch made in one model turn after a prefix -> 0.0, the fetch out of order
    both = ModelStep(tool_calls=[ToolCall(id="c0", name="find_users_by_name", arguments={"name": "Kwame"}),
                                 ToolCall(id="c1", name="get_user_email", arguments={"user_id": 158})])
    search = ToolStep(call_id="c0", name="find_users_by_name", arguments={"name": "Kwame"}, output=found)
    score = graded([ToolStep(call_id="p1", name="get_user_name", arguments={"user_id": 1}, output="x"), both, search,
                    fetch])
    assert score.value == 0.0
    assert score.details["alignment"][2]["type"] == "out_of_order"


def test_agentevals_argument_modes_pair_calls_by_a_maximum_matching():
    from toolgym.graders.alignment import StepView, align, diagnose
    from toolgym.graders.trajectory import agentevals_plan
    from toolgym.records import ToolCallSpec

    def passes(reference, calls, mode, args_mode):
        plan = agentevals_plan([ToolCallSpec(name=n, arguments=a) for n, a in reference], mode, args_mode)
        steps = [StepView(n, a, turn=k) for k, (n, a) in enumerate(calls)]
        return diagnose(plan, steps, align(plan, steps)).passed

    reference = [("f", {"x": 1}), ("f", {"x": 1, "y": 2})]
    trap = [("f", {"x": 1, "y": 2}), ("f", {"x": 1})]  # agentevals' greedy first fit fails it
    # expert (agentevals' definitions, with the optimal pairing): every mode but strict passes
    assert [passes(reference, trap, m, "superset") for m in ("strict", "unordered", "superset", "subset")] == [
        False, True, True, True]
    assert passes([("f", {"x": 1, "y": 2})], [("f", {"x": 1})], "unordered", "subset")
    assert not passes([("f", {"x": 1, "y": 2})], [("f", {"x": 1, "z": 3})], "unordered", "subset")
    assert not passes([("f", {"n": 1})], [("f", {"n": True})], "unordered", "exact")  # a boolean is no number
    assert passes([("f", {"n": 1})], [("f", {"n": 1.0})], "unordered", "exact")
    assert passes([("f", {"n": 1})], [("f", {"m": 2})], "strict", "ignore")


def test_a_trajectory_mode_that_applies_to_no_example_is_warned_about(tmp_path):
    # every example has milestones: --trajectory-mode would grade none of them
    from toolgym.cli import main

    with pytest.warns(UserWarning, match="all 4 examples here have milestones"):
        assert main(["run", "--env", "relational_data", "--agent", "oracle", "--dataset", "multi_turn",
                     "--trajectory-mode", "strict", "--out", str(tmp_path / "r"),
                     "--no-progress"]) == 0


def test_trajectory_match_on_examples_it_cannot_grade_is_warned_about(tmp_path):
    from toolgym.cli import main

    with pytest.warns(UserWarning, match="none of the 2 examples here has milestones"):
        assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--grader", "trajectory_match",
                     "--out", str(tmp_path / "r"), "--no-progress"]) == 0

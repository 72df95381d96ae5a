"""Partial credit by similarity (``milestone_similarity``): ROUGE-L and numeric closeness on
their published definitions, the refusals of bad measures, and end to end beside the binary
graders, which it never changes."""

from __future__ import annotations

import math

import pytest

import toolgym
from toolgym.matchers import closeness, compile_matcher, compile_similarity, rouge_l, text_tokens
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example


def test_rouge_l_on_lins_worked_example():
    # Lin 2004, section 3.1: with S1 the reference, S2 scores 3/4 and S3 2/4 (beta = 1 here, so
    # the F-measure of equal recall and precision)
    s1, s2, s3 = "police killed the gunman", "police kill the gunman", "the gunman kill police"
    assert rouge_l(s1, s2) == pytest.approx(0.75)
    assert rouge_l(s1, s3) == pytest.approx(0.5)
    assert rouge_l(s1, s1) == 1.0 and rouge_l(s1, "") == 0.0 and rouge_l("", "") == 0.0
    # recall and precision differ: LCS 2 of a 2-token reference and a 4-token candidate
    assert rouge_l("the cat", "the big fat cat") == pytest.approx(2 * 1.0 * 0.5 / 1.5)


def test_tokens_fold_case_and_split_scripts_without_spaces():
    assert text_tokens("The  CAT, sat!") == ["the", "cat", "sat"]
    assert text_tokens("東京の天気") == ["東", "京", "の", "天", "気"]
    assert rouge_l("東京の天気", "京都の天気") == pytest.approx(0.8)  # LCS 京の天気: 4 of 5 each way


def test_numeric_closeness():
    assert closeness(10, 10, 10) == 1.0
    assert closeness(9, 10, 10) == pytest.approx(0.9)
    assert closeness(25, 10, 10) == 0.0
    assert closeness(True, 1, 1) == 0.0 and closeness("10", 10, 10) == 0.0
    measure = compile_similarity("num", compile_matcher({"$num": 200}), "x")
    assert measure.scale == 200 and measure.score(150) == pytest.approx(0.75)  # one minus the relative error
    assert compile_similarity({"num": 0}, None, "x").scale == 1.0


@pytest.mark.parametrize(("spec", "matcher", "message"), [
    ("bleu", None, "unknown measure 'bleu'"),
    ("rouge_l", {"$regex": "a.*"}, "rouge_l needs a reference text"),
    ({"rouge_l": 3}, None, "rouge_l takes a string"),
    ("num", "ten", "num needs a reference number"),
    ({"num": 10, "scale": 0}, None, "scale takes a positive number"),
    ({"num": 10, "tol": 1}, None, "num does not take 'tol'"),
])
def test_bad_measures_are_refused(spec, matcher, message):
    with pytest.raises(ValueError, match=message):
        compile_similarity(spec, compile_matcher(matcher) if matcher is not None else None, "milestones[0].similarity")


def test_a_similarity_naming_no_argument_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"field milestones\[0\]\.similarity\.bdy: names no argument"):
        Example(id="e", input="x", milestones=[
            {"id": "m", "call": {"name": "send", "arguments": {"body": "hi"}}, "similarity": {"bdy": "rouge_l"}}])
    with pytest.raises(ValueError, match="not to a result"):
        Example(id="e", input="x", milestones=[{"id": "m", "result": {"value": 1}, "similarity": "rouge_l"}])


class Outbox(toolgym.Environment):
    """Messages sent and money paid."""

    instructions = "Do as asked."

    def reset(self, example):
        self.sent, self.paid = [], []

    @toolgym.tool
    def send_message(self, to: str, body: str) -> str:
        """Send a message.

        Args:
            to: The recipient.
            body: The text.
        """
        self.sent.append({"to": to, "body": body})
        return "sent"

    @toolgym.tool
    def pay(self, to: str, amount: float) -> str:
        """Pay someone.

        Args:
            to: The payee.
            amount: In euros.
        """
        self.paid.append({"to": to, "amount": amount})
        return "paid"

    def read_state(self):
        return {"sent": len(self.sent), "paid": len(self.paid)}


MILESTONES = [
    {"id": "msg", "call": {"name": "send_message", "arguments": {"to": "Ada", "body": "the meeting moved to 3 pm"}},
     "similarity": {"body": "rouge_l"}},
    {"id": "pay", "after": ["msg"], "call": {"name": "pay", "arguments": {"to": "Ada", "amount": {"$num": 40}}},
     "similarity": {"amount": {"num": 40, "scale": 20}}},
    {"id": "told", "after": ["pay"], "message": {"$contains": "paid Ada 40 euros"}, "similarity": "rouge_l"},
]


def c(tool, **args):
    return {"content": "", "tool_calls": [{"name": tool, "args": args}]}


SCRIPTS = {
    "exact": [c("send_message", to="Ada", body="the meeting moved to 3 pm"), c("pay", to="Ada", amount=40),
              "I paid Ada 40 euros."],
    "close": [c("send_message", to="Ada", body="meeting moved to 3 pm today"), c("pay", to="Ada", amount=35),
              "Ada got 40 euros."],
    "wrong_payee": [c("send_message", to="Ada", body="the meeting moved to 3 pm"), c("pay", to="Bob", amount=40),
                    "Done."],
}


@pytest.fixture(scope="module")
def scores():
    dataset = [{"id": k, "input": k, "milestones": MILESTONES} for k in SCRIPTS]
    result = toolgym.evaluate(Outbox, model=ScriptedChatModel(by_input=SCRIPTS), dataset=dataset)
    return {(s.grader, s.example_id): s for s in result.scores}


def test_it_is_a_default_grader_where_a_milestone_declares_similarity(scores):
    assert {g for g, _ in scores} >= {"trajectory_match", "milestone_progress", "milestone_similarity"}


def test_partial_credit_beside_the_binary_figures(scores):
    assert scores["milestone_similarity", "exact"].value == 1.0
    close = scores["milestone_similarity", "close"]
    # nothing matched (the body differs, so msg is missed and pay, told wait for it): partial credit only
    assert scores["trajectory_match", "close"].value == 0.0 and scores["milestone_progress", "close"].value == 0.0
    body = rouge_l("the meeting moved to 3 pm", "meeting moved to 3 pm today")
    assert close.details["partial"]["msg"] == {"value": pytest.approx(math.sqrt(1.0 * body)), "step": 1}
    # pay and told are not ready (msg unmatched): no credit where the order forbids a match
    assert close.details["similarity"] == {"msg": pytest.approx(math.sqrt(body)), "pay": 0.0, "told": 0.0}
    assert close.value == pytest.approx(math.sqrt(body) / 3)


def test_an_argument_without_a_measure_still_gives_zero(scores):
    wrong = scores["milestone_similarity", "wrong_payee"]
    # msg matched; pay: `to` has no measure and is wrong, so the geometric mean is 0; told waits for pay
    assert wrong.details["similarity"] == {"msg": 1.0, "pay": 0.0, "told": 0.0}
    assert wrong.value == pytest.approx(1 / 3)
    assert scores["milestone_progress", "wrong_payee"].value == pytest.approx(1 / 3)


def test_a_close_amount_and_a_close_message_once_ready():
    milestones = [MILESTONES[0], MILESTONES[1], MILESTONES[2]]
    script = [c("send_message", to="Ada", body="the meeting moved to 3 pm"), c("pay", to="Ada", amount=35),
              "Ada got 40 euros."]
    result = toolgym.evaluate(Outbox, model=ScriptedChatModel(turns=script),
                              dataset=[{"id": "e", "input": "x", "milestones": milestones}],
                              graders=["milestone_similarity", "trajectory_match"])
    s = {x.grader: x for x in result.scores}
    assert s["trajectory_match"].value == 0.0
    # pay: to matches (1), amount 35 vs 40 on a scale of 20: 0.75; geometric mean sqrt(0.75)
    assert s["milestone_similarity"].details["partial"]["pay"] == {"value": pytest.approx(math.sqrt(0.75)), "step": 2}
    # told waits for pay, which is unmatched: no credit for the text
    assert s["milestone_similarity"].details["similarity"]["told"] == 0.0
    optional_pay = [MILESTONES[0], {**MILESTONES[1], "optional": True}, {**MILESTONES[2], "after": ["msg"]}]
    result = toolgym.evaluate(Outbox, model=ScriptedChatModel(turns=script),
                              dataset=[{"id": "e", "input": "x", "milestones": optional_pay}],
                              graders=["milestone_similarity"])
    (score,) = result.scores
    said = rouge_l("paid Ada 40 euros", "Ada got 40 euros.")
    assert score.details["similarity"] == {"msg": 1.0, "told": pytest.approx(said)}
    assert score.value == pytest.approx((1 + said) / 2)

"""answer_match: the text and number rules on hand-made trajectories."""

from __future__ import annotations

import pytest

from toolgym.plugins import get_grader
from toolgym.records import Example, Trajectory


def grade(reference, answer, status="completed"):
    example = Example(id="e", input="q", reference=reference)
    trajectory = Trajectory(example_id="e", env="x", agent="y", status=status, final_answer=answer)
    return get_grader("answer_match").grade(example, trajectory)


@pytest.mark.parametrize(
    "reference,answer,expected",
    [
        ("Osaka", "Haruto lives in  OSAKA.", 1.0),
        ("Sunny, Temperature: 75°F", "It is sunny, temperature: 75°F right now", 1.0),
        ("yes", "Yes", 1.0),
        ("no", "No, they do not.", 1.0),
        ("no", "I don't know", 0.0),  # "no" inside "know" is not the word "no"
        ("42", "Eve's user id is 42.", 1.0),
        ("42", "It is 142.", 0.0),
        ("milk, soy", "milk and soy", 0.0),  # documented: no paraphrase matching
        ("Lentil Soup", "lentil soup", 1.0),
        (6.2, "The result is 6.2", 1.0),
        (6.2, "6.2 is not it, the answer is 7", 0.0),  # the last number counts
        (102518.7812110542, "about 102,518.78121105", 1.0),  # within 1e-6 relative, separators read
        (102518.7812110542, "102518.5", 0.0),  # 2.7e-6 relative: too far
        (-4, "subtract gives −4", 1.0),
        (32, "32.0", 1.0),
        (0, "0.0", 1.0),
        (5, "five", 0.0),
    ],
)
def test_rules(reference, answer, expected):
    assert grade(reference, answer).value == expected


def test_no_answer_scores_zero_and_no_reference_does_not_apply():
    assert grade("yes", None, status="step_limit").value == 0.0
    assert grade(1.5, "   ").value == 0.0
    assert grade(None, "anything") is None


def test_details_record_the_rule_and_the_extracted_number():
    score = grade(3.5, "x = 3.5")
    assert score.details["rule"] == "number" and score.details["extracted"] == 3.5
    assert grade("a", "a").details["rule"] == "text"

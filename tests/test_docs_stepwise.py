"""docs/stepwise-grader.md: every row of the operator table is true, and the refusals it quotes
are the ones the loader gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toolgym.matchers import MatchContext, compile_matcher

DOC = Path(__file__).resolve().parents[1] / "docs" / "stepwise-grader.md"
if not DOC.exists():  # a copy of the package and its tests without docs/ (tests/test_suites_removable.py)
    pytest.skip("docs/ is not beside the tests", allow_module_level=True)
ROWS = [line for line in DOC.read_text(encoding="utf-8").splitlines() if re.match(r"\| (plain value|`\$\w+`) \|", line)]


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def json_cell(cell):
    found = re.match(r"`(.+?)`( when `find`'s step returned `(.+)`)?$", cell)
    if not found:
        return None, None
    return json.loads(found.group(1)), json.loads(found.group(3)) if found.group(3) else None


def test_the_table_has_every_operator():
    from toolgym.matchers import OPERATORS

    named = {cells(r)[0].strip("`") for r in ROWS}
    assert named == {"plain value", *OPERATORS}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: cells(r)[0])
def test_each_worked_example_is_true(row):
    op, expected, good, bad = cells(row)
    spec, _ = json_cell(expected)
    matcher = compile_matcher(spec, "doc")
    if op == "`$judge`":
        context = MatchContext(judge=lambda criterion, value: value == "hello")
        assert matcher.match("hello", context) and not matcher.match("go away", context)
        return
    value, result = json_cell(good)
    context = MatchContext(results={"find": result}) if result is not None else MatchContext()
    assert matcher.match(value, context), row
    if bad.startswith("`"):
        wrong, _ = json_cell(bad)
        assert not matcher.match(wrong, context), row


TEXT = DOC.read_text(encoding="utf-8")
RULES = TEXT[TEXT.index("## The rules, each with a worked example"):TEXT.index("## The graders")]
WORKED = [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", RULES, re.S)]


def test_every_rule_has_its_worked_example():
    assert len(WORKED) >= 5


@pytest.mark.parametrize("example", WORKED, ids=lambda e: e["milestones"][0]["id"])
def test_each_worked_rule_gives_the_verdict_it_states(example):
    from toolgym.graders.alignment import StepView, align, diagnose
    from toolgym.milestones import compile_plan

    plan = compile_plan(example["milestones"], read_only=example.get("read_only"), extra_calls=example.get("extra_calls"))
    steps = [
        StepView(s["call"][0], s["call"][1], s.get("result"), executed=not s.get("rejected"), rejected=bool(s.get("rejected")),
                 turn=s["turn"], changes=frozenset(s["changes"]) if "changes" in s else frozenset(),
                 user_turn=s.get("user_turn"))
        for s in example["steps"]
    ]
    states = {int(k): v for k, v in example.get("states", {}).items()}
    final = states.get(len(steps), {})
    alignment = align(plan, steps, {**states, len(steps): final})
    diagnosis = diagnose(plan, steps, alignment, final, states={k: v for k, v in states.items() if k > 0})
    assert diagnosis.passed == example["passes"], diagnosis.first_error
    for key, value in example.get("first_error", {}).items():
        assert diagnosis.first_error[key] == value, (key, diagnosis.first_error)

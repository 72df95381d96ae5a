"""The milestone format: parsed into typed objects when a dataset is read, bad specs refused
naming the file, line and field."""

import json

import pytest

from toolgym.data import DatasetError, check_tools, load_examples
from toolgym.milestones import CallPattern, StatePattern
from toolgym.plugins import get_benchmark

ISSUE_EXAMPLE = {
    "id": "kwame",
    "input": "Where does Kwame live and what is the weather?",
    "milestones": [
        {"id": "find", "call": {"name": "find_users_by_name", "arguments": {"name": {"$lenient": "kwame"}}}},
        {"id": "email", "after": ["find"], "call": {"name": "get_user_email",
                                                   "arguments": {"user_id": {"$from": "find", "path": "/0/id"}}}},
        {"id": "foods", "after": ["find"], "optional": True, "call": {"name": "get_user_favorite_foods"}},
        {"id": "city", "after": ["email"], "any_of": [{"call": {"name": "get_city_for_location"}},
                                                      {"call": {"name": "get_current_weather_for_location"}}]},
        {"id": "typed", "after": ["city"], "state": {"paper": "ab"}},
    ],
    "minefields": [{"call": {"name": "delete_user"}}, {"state": {"paper": {"$contains": "zz"}}}],
    "read_only": ["find_*", "get_*", "list_*"],
    "extra_calls": "allow_read_only",
}


def write(tmp_path, *records):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def refusal(tmp_path, **changes):
    good = {"id": "ok", "input": "x", "milestones": [{"id": "a", "call": {"name": "f"}}]}
    bad = {"id": "bad", "input": "x", **changes}
    with pytest.raises(DatasetError) as info:
        load_examples(write(tmp_path, good, bad))
    return str(info.value)


def test_the_issue_example_is_parsed_into_typed_objects(tmp_path):
    (ex,) = load_examples(write(tmp_path, ISSUE_EXAMPLE))
    plan = ex.plan
    assert [m.id for m in plan.milestones] == ["find", "email", "foods", "city", "typed"]
    email = plan.milestones[1]
    assert email.after == ("find",) and email.refs == {"find"}
    assert isinstance(email.alternatives[0], CallPattern) and email.alternatives[0].name == "get_user_email"
    assert plan.milestones[2].optional and len(plan.milestones[3].alternatives) == 2
    assert isinstance(plan.milestones[4].alternatives[0], StatePattern)
    assert plan.ancestors["typed"] == {"find", "email", "city"}
    assert len(plan.minefields) == 2 and plan.extra_calls == "allow_read_only"
    assert plan.is_read_only("get_user_email") and not plan.is_read_only("delete_user")
    # the record keeps the fields exactly as written
    dumped = ex.model_dump(exclude_none=True)
    for key in ("milestones", "minefields", "read_only", "extra_calls"):
        assert dumped[key] == ISSUE_EXAMPLE[key]


def test_an_example_without_milestones_has_no_plan(tmp_path):
    (ex,) = load_examples(write(tmp_path, {"id": "1", "input": "x", "expected_steps": ["f"]}))
    assert ex.plan is None


@pytest.mark.parametrize(
    "changes, where, what",
    [
        ({"milestones": [{"id": "a", "call": {"name": "f", "arguments": {"x": {"$lenent": "k"}}}}]},
         "milestones[0].call.arguments.x", "unknown operator '$lenent'"),
        ({"milestones": [{"id": "a", "call": {"name": "f"}}, {"id": "b", "after": ["c"], "call": {"name": "g"}}]},
         "milestones[1].after", "'c' names no milestone"),
        ({"milestones": [{"id": "a", "after": ["b"], "call": {"name": "f"}},
                         {"id": "b", "after": ["a"], "call": {"name": "g"}}]},
         "milestones[0].after", "cycle: a -> b -> a"),
        ({"milestones": [{"id": "a", "call": {"name": "f"}},
                         {"id": "b", "call": {"name": "g", "arguments": {"x": {"$from": "a"}}}}]},
         "milestones[1]", "'a' is not always matched before 'b'"),
        ({"milestones": [{"id": "a", "call": {"name": "f"}},
                         {"id": "b", "after": ["a"], "call": {"name": "g", "arguments": {"x": {"$from": "b"}}}}]},
         "milestones[1]", "'b' is not always matched before 'b'"),
        ({"milestones": [{"id": "a", "state": {"k": 1}},
                         {"id": "b", "after": ["a"], "call": {"name": "g", "arguments": {"x": {"$from": "a"}}}}]},
         "milestones[1]", "a state milestone has no result"),
        ({"milestones": [{"id": "a", "call": {"name": "f", "args": "loose"}}]},
         "milestones[0].call.args", "unknown mode 'loose'"),
        ({"milestones": [{"id": "a", "call": {"name": "f"}, "state": {"k": 1}}]},
         "milestones[0]", "exactly one of 'call', 'state', 'message', 'answer', 'result' or 'any_of'"),
        ({"milestones": [{"id": "a", "calls": {"name": "f"}}]}, "milestones[0].calls", "unknown field"),
        ({"milestones": [{"id": "a", "call": {"name": "f"}}, {"id": "a", "call": {"name": "g"}}]},
         "milestones[1].id", "already the id of milestones[0]"),
        ({"milestones": [{"id": "a", "any_of": []}]}, "milestones[0].any_of", "non-empty list"),
        ({"milestones": [], "minefields": [{"call": {"name": "f", "arguments": {"x": {"$from": "a"}}}}]},
         "minefields[0]", "$from is not allowed"),
        ({"milestones": [], "extra_calls": "sometimes"}, "extra_calls", "Input should be"),
        ({"minefields": [{"call": {"name": "f"}}]}, "minefields", "only meaningful with milestones"),
    ],
)
def test_bad_specs_are_refused_naming_file_line_and_field(tmp_path, changes, where, what):
    message = refusal(tmp_path, **changes)
    assert message.startswith(f"{tmp_path / 'd.jsonl'}:2: "), message
    assert where in message and what in message, message


def test_a_milestone_tool_the_environment_lacks_is_refused(tmp_path):
    bench = get_benchmark("relational_data")
    record = {"id": "1", "input": "x", "milestones": [
        {"id": "a", "call": {"name": "find_users_by_name"}},
        {"id": "b", "any_of": [{"call": {"name": "get_user_email"}}, {"call": {"name": "get_user_phone"}}]},
    ], "minefields": [{"call": {"name": "delete_user"}}]}
    examples = load_examples(write(tmp_path, record))
    with pytest.raises(DatasetError, match=r"tool 'get_user_phone', named by 1 example\(s\) \('[^']+' \(milestones\[1\]\.any_of\[1\]\.call\.name\)\): relational_data has no such tool"):
        check_tools(bench, examples, "d.jsonl")
    record["milestones"][1] = {"id": "b", "call": {"name": "get_user_email"}}
    check_tools(bench, load_examples(write(tmp_path, record)), "d.jsonl")  # a minefield may name any tool

"""One test per matcher operator (toolgym.matchers): what it accepts and what it refuses."""

import pytest

from toolgym.matchers import (
    OPERATORS,
    JudgeRequired,
    MatchContext,
    SpecError,
    compile_matcher,
    json_equal,
    lenient_text,
)


def ok(spec, actual, context=None):
    return compile_matcher(spec, "x").match(actual, context or MatchContext())


def test_plain_equality_by_value():
    assert ok(1, 1.0) and ok(1.0, 1) and ok(-0.0, 0)
    assert not ok(1, True) and not ok(True, 1) and not ok(0, False) and not ok(False, 0)
    assert ok(True, True) and not ok(True, False)
    assert ok({"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1})  # keys unordered
    assert not ok([1, 2], [2, 1])  # lists ordered
    assert not ok({"a": 1}, {"a": 1, "b": 2}) and not ok({"a": 1, "b": 2}, {"a": 1})
    assert not ok("1", 1) and not ok(None, 0) and ok(None, None) and not ok(None, "")
    assert not ok([1], (1, 2)) and not ok({"a": None}, {})


def test_plain_containers_hold_operators():
    spec = {"who": {"$lenient": "Ada"}, "ids": [1, {"$any": True}]}
    assert ok(spec, {"who": " ADA ", "ids": [1, "whatever"]})
    assert not ok(spec, {"who": "Bob", "ids": [1, 2]})
    assert not ok(spec, {"who": "ada", "ids": [1, 2], "more": 0})
    assert not ok(spec, {"who": "ada", "ids": [1]})


def test_lenient():
    assert lenient_text("  Ｋｗａｍｅ\tSTRASSE \n") == "kwame strasse"
    assert ok({"$lenient": "Straße  Nord"}, " STRASSE nord")  # casefold ß -> ss, spaces collapsed
    assert ok({"$lenient": "ﬁle"}, "FILE")  # NFKC ligature
    assert not ok({"$lenient": "kwame"}, "kwam e") and not ok({"$lenient": "1"}, 1)


def test_num():
    assert ok({"$num": 10, "rel": 0.01}, 10.05) and not ok({"$num": 10, "rel": 0.001}, 10.05)
    assert ok({"$num": 0, "abs": 0.5}, -0.4) and not ok({"$num": 0, "abs": 0.5}, 0.6)
    assert ok({"$num": 3}, 3.0) and not ok({"$num": 3}, 3.001)  # default rel 1e-9
    assert not ok({"$num": 1}, True) and not ok({"$num": 1}, "1")
    with pytest.raises(SpecError, match="rel takes a finite number"):
        compile_matcher({"$num": 1, "rel": "big"}, "x")
    with pytest.raises(SpecError, match="does not take 'tol'"):
        compile_matcher({"$num": 1, "tol": 1}, "x")


def test_regex_is_a_full_match():
    assert ok({"$regex": r"\d{3}-\d{4}"}, "555-1234")
    assert not ok({"$regex": r"\d{3}"}, "1234") and not ok({"$regex": "a"}, "ba") and not ok({"$regex": "1"}, 1)
    with pytest.raises(SpecError, match="not a valid regular expression"):
        compile_matcher({"$regex": "("}, "x")


def test_in():
    assert ok({"$in": ["Paris", 2, {"$lenient": "rome"}]}, "ROME ")
    assert ok({"$in": [1, 2]}, 2.0) and not ok({"$in": [1, 2]}, 3) and not ok({"$in": [1]}, True)
    with pytest.raises(SpecError, match="non-empty list"):
        compile_matcher({"$in": []}, "x")


def test_any():
    assert ok({"$any": True}, None) and ok({"$any": True}, {"a": [1]})
    with pytest.raises(SpecError, match="takes true"):
        compile_matcher({"$any": False}, "x")


def test_contains():
    assert ok({"$contains": "zz"}, "abzzc") and not ok({"$contains": "zz"}, "abz")
    assert ok({"$contains": 2}, [1, 2.0, 3]) and not ok({"$contains": 2}, [1, 3])
    assert ok({"$contains": "b"}, ["a", "b"]) and not ok({"$contains": "b"}, ["abc"])
    assert not ok({"$contains": "a"}, 5)


def test_prefix():
    assert ok({"$prefix": "get_"}, "get_x") and not ok({"$prefix": "get_"}, "xget_") and not ok({"$prefix": "1"}, 1)


def test_unordered_is_a_multiset_with_a_maximum_matching():
    assert ok({"$unordered": [1, 2, 2]}, [2, 1, 2]) and not ok({"$unordered": [1, 2, 2]}, [1, 1, 2])
    # a greedy first fit pairs {"$any"} with "a" and then finds nothing for "a": the matching does not
    assert ok({"$unordered": [{"$any": True}, "a"]}, ["a", "b"])
    assert not ok({"$unordered": [1]}, [1, 1]) and not ok({"$unordered": [1]}, 1)


def test_subset():
    spec = {"$subset": {"a": 1, "b": {"$prefix": "x"}}}
    assert ok(spec, {"a": 1.0, "b": "xy", "c": 0}) and not ok(spec, {"a": 1}) and not ok(spec, [1])
    assert not ok(spec, {"a": 2, "b": "xy"})


def test_from_reads_the_result_of_the_matched_step():
    m = compile_matcher({"$from": "find", "path": "/0/id"}, "x")
    assert m.refs == {"find"}
    context = MatchContext(results={"find": [{"id": 7, "name": "a/b"}]})
    assert m.match(7, context) and m.match(7.0, context) and not m.match(8, context)
    assert not m.match(7, MatchContext())  # no such milestone matched
    assert not compile_matcher({"$from": "find", "path": "/3/id"}).match(7, context)  # pointer misses
    escaped = compile_matcher({"$from": "find", "path": "/0/name"})
    assert escaped.match("a/b", context)
    whole = compile_matcher({"$from": "s"})
    assert whole.match("text", MatchContext(results={"s": "text"}))
    with pytest.raises(SpecError, match="not a JSON pointer"):
        compile_matcher({"$from": "find", "path": "0/id"}, "x")
    nested = compile_matcher({"ids": [{"$from": "a"}], "n": {"$in": [{"$from": "b", "path": "/n"}]}})
    assert nested.refs == {"a", "b"}


def test_judge_needs_a_judge():
    m = compile_matcher({"$judge": "a polite greeting"}, "x")
    assert m.needs_judge and compile_matcher({"k": {"$judge": "c"}}).needs_judge
    seen = []
    verdict = m.match("hello", MatchContext(judge=lambda c, v: seen.append((c, v)) or v == "hello"))
    assert verdict and seen == [("a polite greeting", "hello")]
    with pytest.raises(JudgeRequired, match="needs a judge model"):
        m.match("hello")


def test_literal_is_never_an_operator():
    spec = {"$literal": {"$in": [1]}}
    assert ok(spec, {"$in": [1]}) and not ok(spec, 1)
    assert ok({"$literal": 1}, 1.0) and not ok({"$literal": 1}, True)


def test_unknown_operator_and_mixed_objects_are_refused_naming_the_field():
    with pytest.raises(SpecError) as info:
        compile_matcher({"q": {"$lenent": "a"}}, "milestones[0].call.arguments")
    assert info.value.where == "milestones[0].call.arguments.q" and "unknown operator '$lenent'" in str(info.value)
    assert "$lenient" in str(info.value)  # the known operators are listed
    with pytest.raises(SpecError, match="one operator per object"):
        compile_matcher({"$in": [1], "$any": True}, "x")
    with pytest.raises(SpecError, match="does not take 'b'"):
        compile_matcher({"$prefix": "a", "b": 1}, "x")


def test_every_operator_has_a_test_here():
    source = open(__file__, encoding="utf-8").read()
    for op in OPERATORS:
        assert f"def test_{op[1:]}" in source or f'"{op}"' in source


def test_json_equal_on_nested_values():
    assert json_equal({"a": [1, {"b": 2.0}]}, {"a": [1.0, {"b": 2}]})
    assert not json_equal({"a": [True]}, {"a": [1]})


def test_json_key_agrees_with_json_equal():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from toolgym.matchers import json_key

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, 2.5]), st.sampled_from(["", "a", "1"]))
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner, max_size=2), max_leaves=6)

    @settings(max_examples=400, deadline=None)
    @given(values, values)
    def check(a, b):
        assert (json_key(a) == json_key(b)) == json_equal(a, b)

    check()
    assert json_key({"a": [1, True]}) != json_key({"a": [1, 1]}) and json_key(1) == json_key(1.0)

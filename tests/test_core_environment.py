"""Environment base: tool schemas, argument validation, tool errors vs tool bugs."""

import pytest

from toolgym import Benchmark
from toolgym.benchmark import ENVIRONMENTS
from toolgym.environments import Environment, ToolBug, tool
from toolgym.plugins import get_environment, load_suites
from toolgym.records import Example
from toolgym.registry import DuplicateNameError, UnknownNameError

EX = Example(id="x", input="ab")


def fresh(name: str) -> Environment:
    env = get_environment(name)()
    env.reset(EX)
    return env


def test_unknown_environment_suggests_names():
    with pytest.raises(UnknownNameError, match="Did you mean 'typewriter_1'") as info:
        get_environment("typewriter1")
    assert "typewriter_26" in str(info.value)


def test_schema_comes_from_signature_and_docstring():
    env = fresh("typewriter_1")
    schema = env.tools["type_letter"].args_schema.model_json_schema()
    assert schema["required"] == ["letter"]
    assert schema["properties"]["letter"]["type"] == "string"
    assert schema["properties"]["letter"]["description"] == "Exactly one character to type."
    assert env.tools["type_letter"].description == "Type one letter on the paper."


def test_typewriter_1_types_and_rejects_bad_letters():
    env = fresh("typewriter_1")
    assert env.call("type_letter", {"letter": "a"}).output == "OK"
    bad = env.call("type_letter", {"letter": "ab"})
    assert bad.error and "exactly one character" in bad.output
    assert env.read_state() == {"paper": "a"}


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("type_leter", {"letter": "a"}, "Did you mean 'type_letter'"),
        ("type_letter", {}, "letter: Field required"),
        ("type_letter", {"letter": 3}, "valid string"),
        ("type_letter", {"letter": "a", "font": "x"}, "unexpected argument(s) font"),
        ("type_letter", '{"letter": "a"', "must be a JSON object"),
    ],
)
def test_bad_calls_are_error_observations(name, args, message):
    env = fresh("typewriter_1")
    result = env.call(name, args)
    assert result.error
    assert message in result.output
    assert env.read_state() == {"paper": ""}


def test_typewriter_26_has_26_parameterless_tools():
    env = fresh("typewriter_26")
    assert sorted(env.tools) == [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for letter in "hello":
        assert env.call(letter, {}).output == "OK"
    assert env.call("q", {"x": 1}).error
    assert env.read_state() == {"paper": "hello"}


def test_state_is_a_snapshot_not_a_live_reference():
    env = fresh("typewriter_1")
    state = env.read_state()
    env.call("type_letter", {"letter": "z"})
    assert state == {"paper": ""}


def test_fresh_instances_do_not_share_state():
    a, b = fresh("typewriter_26"), fresh("typewriter_26")
    a.call("a", {})
    assert b.read_state() == {"paper": ""}
    assert a.tools["a"] is not b.tools["a"]


class Broken(Environment):
    @tool
    def explode(self) -> str:
        """Raise a bug."""
        return 1 / 0


def test_bug_in_a_tool_raises_toolbug():
    env = Broken()
    with pytest.raises(ToolBug, match="ZeroDivisionError"):
        env.call("explode", {})


def test_registering_a_name_twice_is_refused():
    load_suites()
    with pytest.raises(DuplicateNameError, match="registered twice.*suite typewriter"):
        ENVIRONMENTS.add("typewriter_1", Benchmark(environment=Broken, name="typewriter_1"), "a test")

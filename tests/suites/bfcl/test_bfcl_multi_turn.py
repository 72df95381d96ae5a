"""BFCL's multi-turn categories: loading from the installed ``bfcl-eval`` package (by category
name or by path), the API classes as the environment's state and tools, and the official
checker's verdict beside toolgym's stepwise view. Skipped when the package is not installed
(``pip install --no-deps bfcl-eval==2026.3.23 mpmath``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolgym import DatasetError
from toolgym.data import resolve_dataset
from toolgym.suites.bfcl import SUITE

bfcl_eval = pytest.importorskip("bfcl_eval")

from toolgym.suites.bfcl import multi_turn as mt  # noqa: E402
from toolgym.suites.bfcl.data import load_examples  # noqa: E402

BENCHMARK = SUITE.benchmarks[0]
DATA = Path(bfcl_eval.__file__).parent / "data"


def rows(category: str, answers: bool = False) -> list[dict]:
    folder = DATA / "possible_answer" if answers else DATA
    return [json.loads(line) for line in (folder / f"BFCL_v4_{category}.json").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def miss_func() -> list:
    return load_examples(resolve_dataset(BENCHMARK, "multi_turn_miss_func"), {})


def test_a_category_is_found_by_name_in_the_package():
    assert resolve_dataset(BENCHMARK, "multi_turn_base") == DATA / "BFCL_v4_multi_turn_base.json"
    assert mt.category_path("long_context") == DATA / "BFCL_v4_multi_turn_long_context.json"
    assert mt.category_path("simple_python") is None
    with pytest.raises(DatasetError, match="neither a file nor|has no built-in dataset"):
        resolve_dataset(BENCHMARK, "multi_turn_nothing")


def test_every_category_loads_its_200_conversations_with_their_turns():
    for category in mt.MULTI_TURN_CATEGORIES:
        examples = load_examples(mt.category_path(category), {})
        raw = {r["id"]: r for r in rows(category)}
        truth = {r["id"]: r["ground_truth"] for r in rows(category, answers=True)}
        assert len(examples) == 200
        for ex in examples:
            meta = ex.metadata
            assert meta["category"] == category and meta["multi_turn"] is True
            assert len(meta["turns"]) == len(raw[ex.id]["question"]) == len(meta["ground_truth"])
            assert ex.input == [{"role": "user", "content": meta["turns"][0]}]
            assert meta["ground_truth"] == truth[ex.id]
            assert meta["initial_config"] == raw[ex.id]["initial_config"]
            assert meta["excluded_function"] == raw[ex.id].get("excluded_function", [])
            assert len(ex.expected_calls) == sum(len(t) for t in truth[ex.id])


def test_miss_func_withholds_its_functions_until_their_turn(miss_func):
    first = next(ex for ex in miss_func if ex.id == "multi_turn_miss_func_0")
    assert first.metadata["missed_function"] == {"4": ["sort"]}  # turn index 3 of the data, numbered from 1
    assert first.metadata["turns"][3] == mt.ADDED_FUNCTIONS_PROMPT
    names = {d["name"] for d in first.metadata["functions"]}
    assert "sort" not in names and {"mv", "grep", "post_tweet"} <= names


def test_the_added_functions_prompt_is_the_leaderboards():
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    assert mt.ADDED_FUNCTIONS_PROMPT == DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def test_positional_ground_truth_calls_get_their_parameter_names():
    ex = next(e for e in load_examples(mt.category_path("multi_turn_base"), {})
              if any("sort('" in c for t in e.metadata["ground_truth"] for c in t))
    call = next(c for c in ex.expected_calls if c.name == "sort")
    assert list(call.arguments) == ["file_name"]


def test_a_file_by_path_with_answers_beside_it(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    name = "BFCL_v4_multi_turn_base.json"
    shutil.copy(DATA / "possible_answer" / name, tmp_path / "possible_answer" / name)
    (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows("multi_turn_base")[:3]) + "\n")
    assert [e.id for e in load_examples(tmp_path / name, {})] == [f"multi_turn_base_{i}" for i in range(3)]


def test_a_ground_truth_with_the_wrong_number_of_turns_is_refused(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    name = "BFCL_v4_multi_turn_base.json"
    entry = rows("multi_turn_base")[0]
    truth = rows("multi_turn_base", answers=True)[0]
    truth["ground_truth"] = truth["ground_truth"][:1]
    (tmp_path / "possible_answer" / name).write_text(json.dumps(truth) + "\n")
    (tmp_path / name).write_text(json.dumps(entry) + "\n")
    with pytest.raises(DatasetError, match=r"multi_turn_base_0.*one list of calls per turn"):
        load_examples(tmp_path / name, {})


def test_a_missing_package_names_the_install_command(monkeypatch):
    mt.package.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "bfcl_eval", None)
    try:
        with pytest.raises(DatasetError, match=r"pip install --no-deps bfcl-eval==2026\.3\.23 mpmath"):
            mt.category_path("multi_turn_base")
    finally:
        mt.package.cache_clear()


# --- the environment --------------------------------------------------------------------------
def test_the_environment_executes_the_api_methods_and_reads_their_state(miss_func):
    from toolgym.suites.bfcl.environment import BFCL

    ex = next(e for e in miss_func if e.id == "multi_turn_miss_func_0")
    env = BFCL()
    env.reset(ex)
    assert env.max_model_turns is None
    assert set(env.read_state()) == {"GorillaFileSystem", "TwitterAPI"}
    root = env.read_state()["GorillaFileSystem"]["root"]
    assert root["name"] == "workspace"
    assert root["contents"]["document"]["contents"]["final_report.pdf"]["type"] == "file"
    assert "sort" not in env.functions and "mkdir" in env.functions
    out = env.call("cd", {"folder": "document"})
    assert not out.error and json.loads(out.output) == {"current_working_directory": "document"}
    assert not env.call("mkdir", {"dir_name": "temp"}).error
    after = env.read_state()["GorillaFileSystem"]["root"]["contents"]["document"]
    assert after["contents"]["temp"] == {"type": "directory", "name": "temp", "contents": {}}
    # a failing method's result is the checker's error text, shown to the model as the observation
    assert json.loads(env.call("cd", {"folder": "nowhere"}).output) == {"error": "cd: 'nowhere': No such file or directory"}
    key = env.tool_set_key()
    env.begin_turn(3)
    assert "sort" not in env.functions
    env.begin_turn(4)  # the turn the data withholds it for
    assert "sort" in env.functions and env.tool_set_key() != key
    assert "Python 3 syntax" in env.tools["sort"].description


def test_the_state_equals_where_the_checker_finds_it_equal():
    apis = mt.APIs(["GorillaFileSystem"], rows("multi_turn_base")[0]["initial_config"])
    other = mt.APIs(["GorillaFileSystem"], rows("multi_turn_base")[0]["initial_config"])
    assert apis.state() == other.state()
    apis.execute("cd", [], {"folder": "workspace"})  # moves the current directory: private, not compared
    assert apis.state() == other.state()
    apis.execute_string("touch(file_name='x.txt')")
    assert apis.state() != other.state()
    assert apis.execute_string("no_such_method()").startswith("Error during execution")
    assert apis.execute_string("cd(folder=open('x'))") == "Error during execution: an argument is not a literal"

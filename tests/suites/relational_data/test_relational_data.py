"""relational_data: every tool on the built-in tables, SQL safety, tables files, the published
questions against the published tables, and the oracle end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.cli import main
from toolgym.data import DatasetError, load_examples
from toolgym.plugins import get_benchmark
from toolgym.records import Example
from toolgym.runio import read_scores
from toolgym.suites.relational_data.environment import (
    DEFAULT_TABLES,
    RelationalData,
    Tables,
    derive_answer,
    name_similarity,
)

LANGCHAIN = REFERENCE_DATA / "langchain_tool_usage"
PUBLISHED_DATASET = LANGCHAIN / "relational_data_dataset.json"
PUBLISHED_TABLES = LANGCHAIN / "relational_data_tables.json"
needs_published = pytest.mark.skipif(not PUBLISHED_DATASET.exists(), reason="reference data absent")

USERS = {u["id"]: u for u in DEFAULT_TABLES["user_data"]}
LOCATIONS = {loc["id"]: loc for loc in DEFAULT_TABLES["location_data"]}
FOODS = {f["id"]: f for f in DEFAULT_TABLES["food_data"]}


@pytest.fixture
def env():
    environment = RelationalData()
    environment.reset(Example(id="t", input="q"))
    yield environment
    environment.close()


def ask(env: RelationalData, tool_name: str, /, **arguments):
    """Call a tool through the environment (schema validation included), decode the output."""
    result = env.call(tool_name, arguments)
    assert not result.error, result.output
    try:
        return json.loads(result.output)
    except json.JSONDecodeError:
        return result.output


@needs_published
def test_tool_names_are_exactly_the_published_ones(env):
    published = json.loads(PUBLISHED_DATASET.read_text())["tools"]
    assert sorted(env.tools) == sorted(published) and len(published) == 17


def test_every_tool_has_a_description_and_documented_arguments(env):
    for name, t in env.tools.items():
        assert t.description and "Args:" not in t.description, name
        for field, info in t.args_schema.model_fields.items():
            assert info.description, f"{name}.{field} has no description"


def test_ids_differ_from_names_and_are_not_consecutive():
    for table in (USERS, LOCATIONS, FOODS):
        ids = sorted(table)
        assert any(b - a > 1 for a, b in zip(ids, ids[1:], strict=False))
    assert not set(USERS) & set(LOCATIONS) and not set(USERS) & set(FOODS)


def test_user_tools(env):
    for uid, user in USERS.items():
        assert ask(env, "get_user_name", user_id=uid) == user["name"]
        assert ask(env, "get_user_email", user_id=uid) == user["email"]
        assert ask(env, "get_user_location", user_id=uid) == user["location"]
        assert ask(env, "get_user_favorite_color", user_id=uid) == user["favorite_color"]
        assert ask(env, "get_user_favorite_foods", user_id=uid) == user["favorite_foods"]
    assert ask(env, "list_user_ids") == sorted(USERS)
    assert ask(env, "get_current_user_id") == DEFAULT_TABLES["current_user_id"]


def test_location_and_food_tools(env):
    for lid, loc in LOCATIONS.items():
        assert ask(env, "get_city_for_location", location_id=lid) == loc["city"]
        assert ask(env, "get_current_time_for_location", location_id=lid) == loc["current_time"]
        assert ask(env, "get_current_weather_for_location", location_id=lid) == loc["current_weather"]
        assert ask(env, "get_weather_at_location", location_id=lid) == loc["current_weather"]
    for fid, food in FOODS.items():
        assert ask(env, "get_food_name", food_id=fid) == food["name"]
        assert ask(env, "get_food_calories", food_id=fid) == food["calories"]
        assert ask(env, "get_food_allergic_ingredients", food_id=fid) == food["allergic_ingredients"]


def test_find_tools_are_fuzzy_and_return_ids(env):
    assert ask(env, "find_users_by_name", name="kwame") == [{"id": 158, "name": "Kwame"}]
    assert ask(env, "find_users_by_name", name="Kwmae")[0]["id"] == 158  # typo
    assert ask(env, "find_users_by_name", name="sofia")[0] == {"id": 245, "name": "Ana Sofia"}  # one word
    assert ask(env, "find_locations_by_name", city="  OSLO ")[0] == {"id": 31, "city": "Oslo"}
    assert ask(env, "find_foods_by_name", food="sticky rice")[0]["id"] == 356
    assert ask(env, "find_foods_by_name", food="pad thai") == [{"id": 395, "name": "Pad Thai"}]
    assert ask(env, "find_users_by_name", name="Zebulon") == []
    assert len(ask(env, "find_users_by_name", name="a")) <= 5


def test_similarity_scores():
    assert name_similarity("Los Angeles", "LA") == 1.0
    assert name_similarity("Frank The Cat", "frank") == 1.0
    assert name_similarity("Alice", "Bob") < 0.6
    assert name_similarity("Alice", "") == 0.0


@pytest.mark.parametrize(
    "name,argument",
    [
        ("get_user_name", "user_id"), ("get_user_email", "user_id"), ("get_user_location", "user_id"),
        ("get_user_favorite_color", "user_id"), ("get_user_favorite_foods", "user_id"),
        ("get_city_for_location", "location_id"), ("get_current_time_for_location", "location_id"),
        ("get_current_weather_for_location", "location_id"), ("get_weather_at_location", "location_id"),
        ("get_food_name", "food_id"), ("get_food_calories", "food_id"),
        ("get_food_allergic_ingredients", "food_id"),
    ],
)
def test_unknown_id_is_an_error_observation(env, name, argument):
    result = env.call(name, {argument: 1})  # 1 is no id in the built-in tables
    assert result.error and "no " in result.output and "id 1" in result.output
    wrong_type = env.call(name, {argument: "Kwame"})
    assert wrong_type.error and "invalid arguments" in wrong_type.output


@pytest.mark.parametrize(
    "payload", ["1; DROP TABLE users", "x'); DROP TABLE users; --", "' OR '1'='1", "%", "_"]
)
def test_sql_injection_matches_nothing_and_tables_stay_intact(env, payload):
    before = env.read_state()
    for tool_name, arg in (("find_users_by_name", "name"), ("find_locations_by_name", "city"),
                           ("find_foods_by_name", "food")):
        assert ask(env, tool_name, **{arg: payload}) == []
    assert env.read_state() == before
    assert before["rows"]["users"] == len(USERS)
    assert ask(env, "list_user_ids") == sorted(USERS)


def test_each_episode_gets_its_own_database():
    first, second = RelationalData(), RelationalData()
    for e in (first, second):
        e.reset(Example(id="t", input="q"))
    first.db.execute("DELETE FROM user_favorite_foods")
    first.db.execute("DELETE FROM users")
    assert ask(first, "list_user_ids") == []
    assert ask(second, "list_user_ids") == sorted(USERS)
    first.reset(Example(id="t", input="q"))  # a reset rebuilds the world
    assert ask(first, "list_user_ids") == sorted(USERS)
    first.close()
    second.close()


def test_foreign_keys_are_real(env):
    import sqlite3

    with pytest.raises(sqlite3.IntegrityError):
        env.db.execute("INSERT INTO users (id, name, location_id) VALUES (999, 'Ghost', 4242)")


def test_invalid_tables_are_rejected_with_the_field():
    doc = json.loads(json.dumps(DEFAULT_TABLES))
    doc["user_data"][0]["location"] = 4242
    with pytest.raises(ValueError, match=r"user_data\[0\]\.location"):
        Tables.from_dict(doc, "mine.json")
    doc = json.loads(json.dumps(DEFAULT_TABLES))
    doc["food_data"][1]["calories"] = "many"
    with pytest.raises(ValueError, match=r"food_data\[1\]\.calories"):
        Tables.from_dict(doc)
    doc = json.loads(json.dumps(DEFAULT_TABLES))
    doc["current_user_id"] = 5
    with pytest.raises(ValueError, match="current_user_id"):
        Tables.from_dict(doc)


def test_tables_from_constructor_and_from_example_metadata(tmp_path):
    doc = json.loads(json.dumps(DEFAULT_TABLES))
    doc["user_data"][0]["name"] = "Ottilie"
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(doc))
    env = RelationalData(Tables.from_json(path))
    env.reset(Example(id="t", input="q"))
    assert ask(env, "get_user_name", user_id=104) == "Ottilie"
    env = RelationalData()
    env.reset(Example(id="t", input="q", metadata={"tables": str(path)}))
    assert ask(env, "get_user_name", user_id=104) == "Ottilie"
    assert env.read_state()["tables"] == str(path.resolve())


def test_derive_answer_rules():
    results = [("find_users_by_name", [{"id": 7, "name": "X"}]), ("get_user_email", "a@b.com"),
               ("get_user_email", "c@B.com"), ("get_food_allergic_ingredients", ["Gluten", "Soy"])]
    assert derive_answer({"op": "first_id"}, results[:1]) == 7
    assert derive_answer({"op": "same_domain", "tool": "get_user_email"}, results) == "yes"
    assert derive_answer({"op": "equal", "tool": "get_user_email"}, results) == "no"
    assert derive_answer({"op": "last"}, results) == "Gluten, Soy"
    assert derive_answer({"op": "count"}, results) == 2
    assert derive_answer({"op": "contains", "value": "soy"}, results) == "yes"
    assert derive_answer({"op": "lacks", "value": "soy"}, results) == "no"
    with pytest.raises(ValueError, match="unknown answer rule"):
        derive_answer({"op": "guess", "tool": "get_user_email"}, results)


# --- the published questions against the published tables -----------------------------------
def _awake(time_text: str) -> bool:
    clock, half = time_text.split()[-2:]
    hour = int(clock.split(":")[0]) % 12 + (12 if half == "PM" else 0)
    return 7 <= hour < 23


def _user(call, name):
    return call("find_users_by_name", name=name)[0]["id"]


def _location(call, city):
    return call("find_locations_by_name", city=city)[0]["id"]


def _food(call, food):
    return call("find_foods_by_name", food=food)[0]["id"]


def _yes(flag):
    return "yes" if flag else "no"


# Hand-written solutions, keyed by the published question; each returns the answer text.
PUBLISHED_SOLUTIONS = {
    "What is the city for location ID 1?": lambda c: c("get_city_for_location", location_id=1),
    "What is the name of food with id 6?": lambda c: c("get_food_name", food_id=6),
    "what is eve's user id?": lambda c: str(_user(c, "eve")),
    "get the current user id": lambda c: str(c("get_current_user_id")),
    "How many users by the name of bob?": lambda c: str(
        sum(m["name"].casefold() == "bob" for m in c("find_users_by_name", name="bob"))
    ),
    "what is alice's email address?": lambda c: c("get_user_email", user_id=_user(c, "alice")),
    "find donna's favorite color": lambda c: c("get_user_favorite_color", user_id=_user(c, "donna")),
    "weather in LA right now?": lambda c: c("get_current_weather_for_location", location_id=_location(c, "LA")),
    "time in chicago": lambda c: c("get_current_time_for_location", location_id=_location(c, "chicago")),
    "list the allergens in chocolate": lambda c: ", ".join(
        a.lower() for a in c("get_food_allergic_ingredients", food_id=_food(c, "chocolate"))
    ),
    "If i eat a serving of pizza, how many calories will I consume?": lambda c: (
        f"{c('get_food_calories', food_id=_food(c, 'pizza'))} calories"
    ),
    "what is the current users favorite color?": lambda c: c(
        "get_user_favorite_color", user_id=c("get_current_user_id")
    ),
    "eve ate a serving of sushi, what allergens was she exposed to?": lambda c: ", ".join(
        a.lower() for a in c("get_food_allergic_ingredients", food_id=_food(c, "sushi"))
    ),
    "Frank who is Even's friend is allergic to dairy. Can he eat the salad?": lambda c: _yes(
        _user(c, "Frank") is not None
        and "dairy" not in [a.lower() for a in c("get_food_allergic_ingredients", food_id=_food(c, "salad"))]
    ),
    "do bob and alice live in the same city?": lambda c: _yes(
        c("get_city_for_location", location_id=c("get_user_location", user_id=_user(c, "bob")))
        == c("get_city_for_location", location_id=c("get_user_location", user_id=_user(c, "alice")))
    ),
    "what is the current users favorite color and name?": lambda c: (
        lambda me: f"{c('get_user_favorite_color', user_id=me)} and {c('get_user_name', user_id=me)}"
    )(c("get_current_user_id")),
    "whats the name of the city where bob lives?": lambda c: c(
        "get_city_for_location", location_id=c("get_user_location", user_id=_user(c, "bob"))
    ),
    "Donna is about to go outside. Does she need an umbrella?": lambda c: _yes(
        "rain" in c("get_current_weather_for_location",
                    location_id=c("get_user_location", user_id=_user(c, "donna"))).lower()
    ),
    "Is it likely that Donna is awake right now?": lambda c: _yes(
        _awake(c("get_current_time_for_location", location_id=c("get_user_location", user_id=_user(c, "donna"))))
    ),
    "do alice and charlie use the same email provider?": lambda c: _yes(
        c("get_user_email", user_id=_user(c, "alice")).split("@")[1]
        == c("get_user_email", user_id=_user(c, "charlie")).split("@")[1]
    ),
    "Is it likely that Donna is outside with an umbrella at this time?": lambda c: (
        lambda loc: _yes(
            _awake(c("get_current_time_for_location", location_id=loc))
            and "rain" in c("get_current_weather_for_location", location_id=loc).lower()
        )
    )(c("get_user_location", user_id=_user(c, "donna"))),
}


@needs_published
def test_published_questions_are_answered_by_our_tools_on_the_published_tables():
    examples = load_examples(PUBLISHED_DATASET, get_benchmark("relational_data"))
    assert len(examples) == 21
    assert {ex.input for ex in examples} == set(PUBLISHED_SOLUTIONS)
    for ex in examples:
        env = RelationalData()
        env.reset(ex)  # metadata["tables"] points at the published tables beside the dataset
        used: list[str] = []

        def call(tool_name, /, _env=env, _used=used, **arguments):
            _used.append(tool_name)
            return ask(_env, tool_name, **arguments)

        answer = PUBLISHED_SOLUTIONS[ex.input](call)
        assert str(answer).casefold() == str(ex.reference).casefold(), ex.input
        assert set(used) >= set(ex.expected_steps) - {"find_users_by_name"}, ex.input
        env.close()


@needs_published
def test_langchain_form_needs_the_published_tables(tmp_path):
    lonely = tmp_path / "relational_data_dataset.json"
    shutil.copy(PUBLISHED_DATASET, lonely)
    with pytest.raises(DatasetError, match="needs the published tables"):
        load_examples(lonely, get_benchmark("relational_data"))
    examples = load_examples(lonely, get_benchmark("relational_data"), {"tables": str(PUBLISHED_TABLES)})
    assert all(ex.metadata["tables"] == str(PUBLISHED_TABLES.resolve()) for ex in examples)


@needs_published
def test_tables_file_is_not_a_dataset():
    with pytest.raises(DatasetError, match="tables file, not a dataset"):
        load_examples(PUBLISHED_TABLES, get_benchmark("relational_data"))
    with pytest.raises(DatasetError, match="without an 'examples' list"):
        load_examples(PUBLISHED_TABLES)


def test_bad_tables_option_is_a_dataset_error(tmp_path):
    dataset = Path(__file__).resolve().parents[3] / "toolgym" / "suites" / "relational_data" / "datasets" / "relational_data" / "test.jsonl"
    with pytest.raises(DatasetError, match="cannot read tables"):
        load_examples(dataset, get_benchmark("relational_data"), {"tables": str(tmp_path / "missing.json")})


def test_oracle_scores_one_on_every_grader(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--env", "relational_data", "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    scores = read_scores(out)
    # the 9 examples with several valid orders also carry milestones: the milestone graders join
    milestone_graders = {"trajectory_match", "milestone_progress", "step_precision", "step_recall"}
    assert {s.grader for s in scores} == {"steps_exact", "step_ratio", "answer_match", *milestone_graders}
    assert len([s for s in scores if s.grader not in milestone_graders]) == 3 * 26
    assert len([s for s in scores if s.grader in milestone_graders]) == 4 * 9
    assert all(s.value == 1.0 for s in scores)


# --- datasets ------------------------------------------------------------------------------


def test_builtin_test_set_has_the_promised_shape():
    from collections import Counter

    from toolgym.plugins import get_benchmark

    rel = load_examples(get_benchmark("relational_data").datasets / "test.jsonl")
    assert len(rel) >= 20
    assert set(Counter(ex.metadata["n_steps"] for ex in rel)) == {1, 2, 3, 4, 5}
    assert {ex.order_matters for ex in rel} == {True, False}


@pytest.mark.skipif(not (REFERENCE_DATA / "langchain_tool_usage").exists(), reason="reference data absent")
def test_langchain_file_loads_and_the_tables_file_is_refused():
    from toolgym.plugins import get_benchmark

    folder = REFERENCE_DATA / "langchain_tool_usage"
    doc = json.loads((folder / "relational_data_dataset.json").read_text())
    examples = load_examples(folder / "relational_data_dataset.json", get_benchmark("relational_data"))
    assert len(examples) == len(doc["examples"]) >= 21
    for record, ex in zip(doc["examples"], examples, strict=True):
        assert ex.input == record["question"] and ex.expected_steps == record["expected_steps"]
        assert ex.reference == record.get("reference", record.get("answer"))
    path = folder / "relational_data_tables.json"
    for benchmark in (None, get_benchmark("relational_data")):
        with pytest.raises(DatasetError, match="not a dataset") as info:
            load_examples(path, benchmark)
        assert str(path) in str(info.value)

"""The leaderboard's checker rules, one test per rule and per error type, on hand-written
entries in Python, Java and JavaScript; a result in the prompting-string format grades as its
decoded form."""

from __future__ import annotations

import pytest

from toolgym.suites.bfcl.checker import ERROR_TYPES, abstention, check, check_optimal, decode
from toolgym.suites.bfcl.data import Entry, fc_schema, language_document
from toolgym.suites.bfcl.values import from_java, from_javascript, standardize, to_source


def fn(fname: str, required: list[str] | None = None, **props: dict) -> dict:
    return {"name": fname, "description": f"{fname} does something.",
            "parameters": {"type": "dict", "properties": props, "required": required or []}}


WEATHER = fn("weather.get", ["city"], city={"type": "string"}, days={"type": "integer"},
             unit={"type": "string", "enum": ["c", "f"]}, precise={"type": "boolean"})
AREA = fn("area", ["base", "height"], base={"type": "float"}, height={"type": "integer"})
STATS = fn("stats", ["values"], values={"type": "array", "items": {"type": "float"}}, point={"type": "tuple", "items": {"type": "integer"}})
CONFIG = fn("configure", ["options"], options={"type": "dict", "properties": {"mode": {"type": "string"}, "level": {"type": "integer"}}})
ROWS = fn("insert", ["rows"], rows={"type": "array", "items": {"type": "dict"}})
ANY = fn("log", ["message"], message={"type": "any"})


def entry(category: str, functions: list[dict], truth: list[dict], language: str = "python") -> Entry:
    return Entry(f"{category}_0", category, language, functions, truth)


SIMPLE_WEATHER = entry("simple_python", [WEATHER], [{"weather.get": {"city": ["Paris", "Paris, France"], "days": [3, ""], "unit": ["", "c"], "precise": ["", False]}}])


def error(e: Entry, result) -> str | None:
    return check(e, result).error_type


# --- simple: names, parameters, optional values ---------------------------------------------
def test_a_right_answer_passes_with_optional_parameters_left_out_or_given():
    assert check(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "days": 3}}]).valid
    assert check(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "days": 3, "unit": "c"}}]).valid
    assert check(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris"}}]).valid  # days may be omitted ("")


def test_function_names_are_accepted_as_in_the_data_or_with_underscores_for_dots():
    assert check(SIMPLE_WEATHER, [{"weather_get": {"city": "Paris"}}]).valid
    assert error(SIMPLE_WEATHER, [{"weather.fetch": {"city": "Paris"}}]) == "simple_function_checker:wrong_func_name"


def test_simple_needs_exactly_one_call():
    two = [{"weather.get": {"city": "Paris"}}, {"weather.get": {"city": "Paris"}}]
    assert error(SIMPLE_WEATHER, two) == "simple_function_checker:wrong_count"
    assert error(SIMPLE_WEATHER, []) == "simple_function_checker:wrong_count"


def test_missing_required_unexpected_and_missing_optional_parameters():
    assert error(SIMPLE_WEATHER, [{"weather.get": {"days": 3}}]) == "simple_function_checker:missing_required"
    verdict = check(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "country": "FR"}}])
    assert (verdict.error_type, verdict.param) == ("simple_function_checker:unexpected_param", "country")
    strict = entry("simple_python", [WEATHER], [{"weather.get": {"city": ["Paris"], "days": [3]}}])
    verdict = check(strict, [{"weather.get": {"city": "Paris"}}])
    assert (verdict.error_type, verdict.param) == ("simple_function_checker:missing_optional", "days")


def test_a_parameter_the_ground_truth_lacks_is_unexpected_even_if_the_function_has_it():
    e = entry("simple_python", [WEATHER], [{"weather.get": {"city": ["Paris"]}}])
    assert error(e, [{"weather.get": {"city": "Paris", "precise": True}}]) == "simple_function_checker:unexpected_param"


# --- strings: the leaderboard's normalisation -----------------------------------------------
def test_strings_compare_after_normalisation():
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"
    assert standardize("it's") == 'it"s'
    assert check(SIMPLE_WEATHER, [{"weather.get": {"city": "paris, FRANCE"}}]).valid
    assert check(SIMPLE_WEATHER, [{"weather.get": {"city": "P-a_r.i/s*^"}}]).valid
    verdict = check(SIMPLE_WEATHER, [{"weather.get": {"city": "Lyon"}}])
    assert (verdict.error_type, verdict.param) == ("value_error:string", "city")


# --- Python types ---------------------------------------------------------------------------
AREA_ENTRY = entry("simple_python", [AREA], [{"area": {"base": [2.5, 3.0], "height": [4]}}])


def test_an_int_is_accepted_for_a_float():
    assert check(AREA_ENTRY, [{"area": {"base": 3, "height": 4}}]).valid


def test_a_float_is_not_accepted_for_an_int():
    verdict = check(AREA_ENTRY, [{"area": {"base": 2.5, "height": 4.0}}])
    assert (verdict.error_type, verdict.param) == ("type_error:simple", "height")


def test_a_boolean_is_not_a_number():
    assert error(AREA_ENTRY, [{"area": {"base": 2.5, "height": True}}]) == "type_error:simple"
    assert error(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "days": True}}]) == "type_error:simple"


def test_other_values_compare_by_equality():
    verdict = check(AREA_ENTRY, [{"area": {"base": 2.5, "height": 5}}])
    assert (verdict.error_type, verdict.param) == ("value_error:others", "height")
    assert error(SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "precise": True}}]) == "value_error:others"


def test_a_value_of_the_ground_truths_type_counts_as_a_variable_name():
    e = entry("simple_python", [AREA], [{"area": {"base": ["b"], "height": [4]}}])  # a variable in the answer
    assert check(e, [{"area": {"base": "b", "height": 4}}]).valid
    assert error(e, [{"area": {"base": "c", "height": 4}}]) == "value_error:others"


def test_arrays_elementwise_with_normalised_strings_and_nested_types_one_level_deep():
    e = entry("simple_python", [STATS], [{"stats": {"values": [[1.5, 2.0]], "point": ["", [1, 2]]}}])
    assert check(e, [{"stats": {"values": [1.5, 2.0]}}]).valid
    assert check(e, [{"stats": {"values": [1.5, 2.0], "point": (1, 2)}}]).valid  # a tuple reads as a list
    assert error(e, [{"stats": {"values": [1.5, 3.0]}}]) == "value_error:list/tuple"
    verdict = check(e, [{"stats": {"values": [1.5, "2.0"]}}])
    assert (verdict.error_type, verdict.param) == ("type_error:nested", "values")
    words = entry("simple_python", [fn("tag", ["tags"], tags={"type": "array", "items": {"type": "string"}})],
                  [{"tag": {"tags": [["New York", "LA"]]}}])
    assert check(words, [{"tag": {"tags": ["new york", "la"]}}]).valid


def test_dicts_key_by_key():
    e = entry("simple_python", [CONFIG], [{"configure": {"options": [{"mode": ["fast", "quick"], "level": [1, ""]}]}}])
    assert check(e, [{"configure": {"options": {"mode": "Quick"}}}]).valid
    assert check(e, [{"configure": {"options": {"mode": "fast", "level": 1}}}]).valid
    verdict = check(e, [{"configure": {"options": {"mode": "slow"}}}])
    assert (verdict.error_type, verdict.param) == ("value_error:dict_value", "options.mode")
    assert error(e, [{"configure": {"options": {"mode": "fast", "colour": "red"}}}]) == "value_error:dict_key"
    assert error(e, [{"configure": {"options": {"level": 1}}}]) == "value_error:dict_key"  # mode is not optional


def test_lists_of_dicts_position_by_position():
    e = entry("simple_python", [ROWS], [{"insert": {"rows": [[{"a": [1]}, {"a": [2]}]]}}])
    assert check(e, [{"insert": {"rows": [{"a": 1}, {"a": 2}]}}]).valid
    assert error(e, [{"insert": {"rows": [{"a": 1}]}}]) == "value_error:list_dict_count"
    assert error(e, [{"insert": {"rows": [{"a": 2}, {"a": 1}]}}]) == "value_error:dict_value"


def test_any_is_checked_as_a_string():
    e = entry("simple_python", [ANY], [{"log": {"message": ["hello"]}}])
    assert check(e, [{"log": {"message": "Hello"}}]).valid
    assert error(e, [{"log": {"message": 5}}]) == "type_error:simple"


# --- multiple and parallel ------------------------------------------------------------------
def test_multiple_checks_the_one_expected_function():
    e = entry("multiple", [WEATHER, AREA], [{"area": {"base": [2.5], "height": [4]}}])
    assert check(e, [{"area": {"base": 2.5, "height": 4}}]).valid
    assert error(e, [{"weather.get": {"city": "Paris"}}]) == "simple_function_checker:wrong_func_name"
    assert error(e, [{"area": {"base": 2.5, "height": 4}}] * 2) == "multiple_function_checker:wrong_count"


PARALLEL = entry("parallel", [WEATHER], [
    {"weather.get": {"city": ["Paris"], "days": ["", 3]}},
    {"weather.get": {"city": ["Paris"], "days": [3]}},
])


def test_parallel_calls_match_in_any_order_with_the_same_count():
    a, b = {"weather.get": {"city": "Paris", "days": 3}}, {"weather.get": {"city": "Paris"}}
    assert check(entry("parallel", [WEATHER], [{"weather.get": {"city": ["Paris"], "days": [3]}},
                                              {"weather.get": {"city": ["Lyon"]}}]),
                 [{"weather.get": {"city": "Lyon"}}, a]).valid
    assert error(PARALLEL, [a]) == "parallel_function_checker_no_order:wrong_count"
    verdict = check(PARALLEL, [a, {"weather.get": {"city": "Paris", "days": 4}}])
    assert verdict.error_type == "parallel_function_checker_no_order:cannot_find_match"
    assert (verdict.cause, verdict.param) == ("value_error:others", "days")
    assert b  # (used below)


def test_greedy_matching_misses_what_optimal_matching_finds():
    # Expected call 1 accepts either model call; expected call 2 only the first one. The
    # leaderboard gives call 1 the first model call, then finds nothing for call 2.
    result = [{"weather.get": {"city": "Paris", "days": 3}}, {"weather.get": {"city": "Paris"}}]
    official = check(PARALLEL, result)
    assert official.error_type == "parallel_function_checker_no_order:cannot_find_match"
    assert check_optimal(PARALLEL, result).valid
    assert check(PARALLEL, list(reversed(result))).valid  # the other order passes both
    assert check_optimal(SIMPLE_WEATHER, [{"weather.get": {"city": "Lyon"}}]) == check(SIMPLE_WEATHER, [{"weather.get": {"city": "Lyon"}}])


# --- decoding, irrelevance, relevance -------------------------------------------------------
def test_results_that_do_not_decode_fail_ast_entries():
    assert error(SIMPLE_WEATHER, "I cannot help with that.") == "ast_decoder:decoder_failed"
    assert error(SIMPLE_WEATHER, [{"weather.get": '{"city": "Par'}]) == "ast_decoder:decoder_failed"
    assert error(SIMPLE_WEATHER, ["weather.get(city='Paris')"]) == "ast_decoder:decoder_wrong_output_format"
    assert error(SIMPLE_WEATHER, 42) == "ast_decoder:decoder_failed"
    # a function-calling model's plain reply (given as None): said to hold no call, not "got NoneType"
    assert error(SIMPLE_WEATHER, None) == "ast_decoder:decoder_failed"
    assert decode(None).error.startswith("the reply holds no call") and not decode(None).attempted
    assert "got int" in decode(42).error


def test_json_string_arguments_decode_as_function_calling_handlers_store_them():
    assert check(SIMPLE_WEATHER, [{"weather_get": '{"city": "Paris", "days": 3}'}]).valid


IRRELEVANT = entry("irrelevance", [WEATHER], [])
RELEVANT = entry("live_relevance", [WEATHER], [])


def test_irrelevance_passes_without_a_call_and_counts_malformed_output_as_an_abstention():
    for result in ("I cannot answer that with these functions.", "[]", [], [{}], "[weather.get(city='Paris'"):
        assert check(IRRELEVANT, result).valid, result
    assert error(IRRELEVANT, "[weather.get(city='Paris')]") == "irrelevance_error:decoder_success"
    assert error(IRRELEVANT, [{"weather_get": {"city": "Paris"}}]) == "irrelevance_error:decoder_success"


def test_the_strict_abstention_column_keeps_malformed_output_apart():
    assert abstention("There is no suitable function.") == "abstained"
    assert abstention([]) == "abstained"
    assert abstention("[weather.get(city='Paris'") == "malformed"
    assert abstention([{"weather_get": '{"city": '}]) == "malformed"
    assert abstention("[weather.get(city='Paris')]") == "called"


def test_relevance_passes_with_any_call():
    assert check(RELEVANT, "[weather.get(city='Nowhere')]").valid
    assert check(RELEVANT, [{"weather_get": {}}]).valid
    assert error(RELEVANT, "Sure, it is sunny.") == "relevance_error:decoder_failed"
    assert error(RELEVANT, []) == "relevance_error:decoder_failed"


# --- the prompting format grades as its decoded form ----------------------------------------
@pytest.mark.parametrize(("text", "decoded"), [
    ("[weather.get(city='Paris', days=3)]", [{"weather.get": {"city": "Paris", "days": 3}}]),
    ("```\nweather.get(city=\"Lyon\")\n```", [{"weather.get": {"city": "Lyon"}}]),
    ("[weather.get(city='Paris', days=-3), weather.get(city='Paris')]",
     [{"weather.get": {"city": "Paris", "days": -3}}, {"weather.get": {"city": "Paris"}}]),
    ("[stats(values=[1.5, 2.0], point=(1, 2))]", [{"stats": {"values": [1.5, 2.0], "point": (1, 2)}}]),
    ("[configure(options={'mode': 'fast', 'level': 2 * 1})]", [{"configure": {"options": {"mode": "fast", "level": 2}}}]),
    ("[log(message=my_variable)]", [{"log": {"message": "my_variable"}}]),
])
def test_python_prompting_strings_decode_to_the_calls(text, decoded):
    assert decode(text).calls == decoded


def _cases():
    e_stats = entry("parallel", [STATS], [{"stats": {"values": [[1.5, 2.0]], "point": ["", [1, 2]]}},
                                          {"stats": {"values": [[3.0]]}}])
    return [
        (SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "days": 3}}]),
        (SIMPLE_WEATHER, [{"weather.get": {"city": "Paris", "days": 3.0}}]),
        (SIMPLE_WEATHER, [{"weather.get": {"city": "Lyon"}}]),
        (AREA_ENTRY, [{"area": {"base": 3, "height": 4}}]),
        (e_stats, [{"stats": {"values": [3.0]}}, {"stats": {"values": [1.5, 2.0], "point": (1, 2)}}]),
        (e_stats, [{"stats": {"values": [3.0]}}]),
        (IRRELEVANT, [{"weather.get": {"city": "Paris"}}]),
        (RELEVANT, [{"weather.get": {"city": "Paris"}}]),
    ]


def _as_text(calls) -> str:
    return "[" + ", ".join(f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
                           for call in calls for name, args in call.items()) + "]"


@pytest.mark.parametrize(("e", "calls"), _cases())
def test_a_prompting_string_grades_the_same_as_its_decoded_form(e, calls):
    assert check(e, _as_text(calls)) == check(e, calls)


# --- Java -----------------------------------------------------------------------------------
JAVA_FN = fn("Sorter.sort", ["items", "limit"], items={"type": "Array", "items": {"type": "integer"}},
             limit={"type": "long"}, ratio={"type": "float"}, name={"type": "String"}, flag={"type": "boolean"},
             opts={"type": "HashMap"}, names={"type": "ArrayList", "items": {"type": "String"}}, obj={"type": "any"})
JAVA = entry("simple_java", [JAVA_FN], [{"Sorter.sort": {
    "items": [[3, 1, 2]], "limit": [10], "ratio": ["", 0.5], "name": ["", "byName"], "flag": ["", True],
    "opts": ["", {"key": ["v"]}], "names": ["", ["a", "b"]], "obj": ["", "myList"]}}], "java")


def test_java_values_are_source_strings_read_by_the_declared_type():
    assert from_java("42", "integer") == 42 and from_java("42L", "long") == 42 and from_java("4.5f", "float") == 4.5
    assert from_java("4.5", "double") == 4.5 and from_java("true", "boolean") is True
    assert from_java("new int[]{1, 2}", "Array", "integer") == [1, 2]
    assert from_java('new ArrayList<>(Arrays.asList("a", "b"))', "ArrayList", "String") == ["a", "b"]
    assert from_java('new HashMap<String, String>() {{ put("k", "v"); }}', "HashMap") == {"k": "v"}
    assert from_java("42", "long") == "42"  # no L suffix: not a long, stays text
    args = {"items": "new int[]{3, 1, 2}", "limit": "10L", "ratio": "0.5f", "name": "byName", "flag": "true",
            "opts": 'new HashMap<String, String>() {{ put("key", "v"); }}',
            "names": 'new ArrayList<>(Arrays.asList("a", "b"))', "obj": "myList"}
    assert check(JAVA, [{"Sorter.sort": args}]).valid


def test_java_errors():
    base = {"items": "new int[]{3, 1, 2}", "limit": "10L"}
    assert check(JAVA, [{"Sorter.sort": base}]).valid
    verdict = check(JAVA, [{"Sorter.sort": {**base, "limit": 10}}])
    assert (verdict.error_type, verdict.param) == ("type_error:java", "limit")
    assert error(JAVA, [{"Sorter.sort": {**base, "limit": "10"}}]) == "type_error:simple"  # an int needs L for long
    assert error(JAVA, [{"Sorter.sort": {**base, "ratio": "0.5"}}]) == "type_error:simple"  # a float needs f
    assert error(JAVA, [{"Sorter.sort": {**base, "items": "new int[]{3, 2, 1}"}}]) == "value_error:list/tuple"
    assert error(JAVA, [{"Sorter.sort": {**base, "name": "byDate"}}]) == "value_error:string"
    assert error(JAVA, [{"Sorter.sort": {**base, "flag": "false"}}]) == "value_error:others"


def test_java_prompting_strings_keep_values_as_source():
    text = '[Sorter.sort(items=new int[]{3, 1, 2}, limit=10L, name="byName")]'
    assert decode(text, "java").calls == [{"Sorter.sort": {"items": "new int[]{3, 1, 2}", "limit": "10L", "name": "byName"}}]
    assert check(JAVA, text) == check(JAVA, decode(text, "java").calls)
    assert check(JAVA, text).valid


# --- JavaScript -----------------------------------------------------------------------------
JS_FN = fn("render", ["id"], id={"type": "String"}, count={"type": "integer"}, big={"type": "Bigint"},
           show={"type": "Boolean"}, scale={"type": "float"}, tags={"type": "array", "items": {"type": "String"}},
           style={"type": "dict"}, handler={"type": "any"})
JS = entry("simple_javascript", [JS_FN], [{"render": {
    "id": ["main"], "count": ["", 3], "big": ["", 10], "show": ["", True], "scale": ["", 1.5],
    "tags": ["", ["a", "b"]], "style": ["", {"color": ["red"]}], "handler": ["", "onClick"]}}], "javascript")


def test_javascript_values_are_source_strings_read_by_the_declared_type():
    assert from_javascript("'main'", "String") == "main" and from_javascript("3", "integer") == 3
    assert from_javascript("10n", "Bigint") == 10 and from_javascript("true", "Boolean") is True
    assert from_javascript("[1, 2]", "array") == [1, 2] and from_javascript("new Array(1, 2)", "array", "integer") == [1, 2]
    assert from_javascript("{color: 'red'}", "dict") == {"color": "red"}
    args = {"id": "'main'", "count": "3", "big": "10n", "show": "true", "scale": "1.5", "tags": "['a', 'b']",
            "style": "{color: 'red'}", "handler": "onClick"}
    assert check(JS, [{"render": args}]).valid


def test_javascript_errors():
    verdict = check(JS, [{"render": {"id": "main", "count": 3}}])
    assert (verdict.error_type, verdict.param) == ("type_error:js", "count")
    assert error(JS, [{"render": {"id": "main", "big": "10"}}]) == "type_error:simple"  # a Bigint needs n
    assert error(JS, [{"render": {"id": "other"}}]) == "value_error:string"
    assert error(JS, [{"render": {"id": "main", "tags": "['a', 'c']"}}]) == "value_error:list/tuple"
    assert error(JS, [{"render": {"id": "main", "style": "{color: 'blue'}"}}]) == "value_error:dict_value"


def test_oracle_source_values_read_back():
    for value, spec in [([3, 1, 2], {"type": "Array", "items": {"type": "integer"}}), (10, {"type": "long"}),
                        (0.5, {"type": "float"}), ({"k": "v", "n": 2}, {"type": "HashMap"}),
                        (["a", "b"], {"type": "ArrayList", "items": {"type": "String"}}), (True, {"type": "boolean"})]:
        assert from_java(to_source(value, spec, "java"), spec["type"], spec.get("items", {}).get("type")) == value
    for value, spec in [(["a", "b"], {"type": "array", "items": {"type": "String"}}), (10, {"type": "Bigint"}),
                        ({"color": "red"}, {"type": "dict"}), (1.5, {"type": "float"}), ("main", {"type": "String"})]:
        assert from_javascript(to_source(value, spec, "javascript"), spec["type"], spec.get("items", {}).get("type")) == value


# --- the function documents as the function-calling mode shows them -------------------------
def test_python_documents_get_json_schema_types_and_the_float_note():
    schema = fc_schema(fn("m.f", ["a"], a={"type": "float", "description": "A."}, b={"type": "dict"},
                          c={"type": "tuple", "items": {"type": "integer"}}, d={"description": "no type"}), "python")
    assert schema["name"] == "m_f"
    assert schema["description"].endswith("Note that the provided function is in Python 3 syntax.")
    props = schema["parameters"]["properties"]
    assert schema["parameters"]["type"] == "object"
    assert props["a"] == {"type": "number", "description": "A. This is a float type value.", "format": "float"}
    assert props["b"]["type"] == "object" and props["c"] == {"type": "array", "items": {"type": "integer"}}
    assert props["d"]["type"] == "string"


def test_java_and_javascript_documents_turn_every_parameter_into_a_string():
    doc = language_document(JAVA_FN, "java")
    assert all(p["type"] == "string" for p in doc["parameters"]["properties"].values())
    assert doc["parameters"]["properties"]["limit"]["description"].endswith("This is Java long type parameter in string representation.")
    assert "items" not in doc["parameters"]["properties"]["items"]
    assert "not in string representation" in doc["parameters"]["properties"]["items"]["description"]
    js = fc_schema(JS_FN, "javascript")
    assert js["description"].endswith("in JavaScript syntax.")
    assert {p["type"] for p in js["parameters"]["properties"].values()} == {"string"}


def test_every_error_type_is_exercised_above():
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    missing = [code for code in ERROR_TYPES if f'"{code}"' not in source.split("def test_every_error_type")[0]]
    assert not missing

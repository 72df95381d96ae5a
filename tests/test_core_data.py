"""Dataset loading: JSONL and the LangChain JSON form; bad input names file and line."""

import json

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.data import DatasetError, load_examples, resolve_dataset
from toolgym.plugins import get_benchmark

LANGCHAIN = REFERENCE_DATA / "langchain_tool_usage"
needs_shared = pytest.mark.skipif(not LANGCHAIN.exists(), reason="reference data not beside the repository")


def write(tmp_path, lines):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"id": "a", "input": "ab", "expected_steps": ["a", "b"]})


def test_line_that_is_not_json_is_reported_with_file_and_line(tmp_path):
    path = write(tmp_path, [GOOD, "{not json"])
    with pytest.raises(DatasetError, match=r"d\.jsonl:2: not valid JSON"):
        load_examples(path)


def test_invalid_field_is_named(tmp_path):
    path = write(tmp_path, [GOOD, json.dumps({"id": "b", "input": "x", "order_matters": "maybe"})])
    with pytest.raises(DatasetError, match=r"d\.jsonl:2: field order_matters"):
        load_examples(path)


def test_unknown_field_and_missing_input_are_refused(tmp_path):
    with pytest.raises(DatasetError, match=r":1: field input: Field required"):
        load_examples(write(tmp_path, [json.dumps({"id": "a"})]))
    with pytest.raises(DatasetError, match=r"field questoin"):
        load_examples(write(tmp_path, [json.dumps({"id": "a", "input": "x", "questoin": 1})]))


def test_expected_calls_must_match_expected_steps(tmp_path):
    rec = {"id": "a", "input": "x", "expected_steps": ["a"], "expected_calls": [{"name": "b"}]}
    with pytest.raises(DatasetError, match="expected_calls names must equal expected_steps"):
        load_examples(write(tmp_path, [json.dumps(rec)]))


def test_duplicate_ids_and_empty_files_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="duplicate example id 'a'"):
        load_examples(write(tmp_path, [GOOD, GOOD]))
    with pytest.raises(DatasetError, match="no examples"):
        load_examples(write(tmp_path, [""]))


def test_unknown_dataset_name_lists_builtins():
    with pytest.raises(DatasetError, match="built-in: .*test"):
        resolve_dataset(get_benchmark("typewriter_1"), "nope")


@needs_shared
@pytest.mark.parametrize("env, file", [("typewriter_1", "typewriter_1_tool_dataset.json"),
                                       ("typewriter_26", "typewriter_26_tools_dataset.json")])
def test_langchain_typewriter_files_load_with_state_and_calls(env, file):
    examples = load_examples(LANGCHAIN / file, get_benchmark(env))
    assert len(examples) >= 20
    for ex in examples:
        assert ex.expected_state == {"paper": ex.reference}
        assert [c.name for c in ex.expected_calls] == ex.expected_steps


def test_builtin_typewriter_datasets_cover_lengths_1_to_13():
    for env in ("typewriter_1", "typewriter_26"):
        examples = load_examples(resolve_dataset(get_benchmark(env), None), get_benchmark(env))
        lengths = {len(ex.input) for ex in examples}
        assert len(examples) >= 20 and min(lengths) == 1 and max(lengths) == 13
        assert any(len(set(ex.input)) == 1 and len(ex.input) > 2 for ex in examples)


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1.5, -0.0, 1e-7, 5e-324, 1.7976931348623157e308], "c": null, "d": true}',
    '{"a": 1, "a": 2}', '"\\u6771\\u4eac \\ud83d\\ude00"', '{"n": NaN, "i": Infinity, "m": -Infinity}',
    '123456789012345678901234567890', '-9223372036854775809', "1e400", ' \t{"x": "東京"}\r\n', "[]",
    '"\\ud800"', '{"k": "\\u0000\\u001f"}',
])
def test_loads_json_reads_what_json_loads_reads(text):
    from toolgym.data import loads_json

    expected = json.loads(text)
    value = loads_json(text)
    assert json.dumps(value) == json.dumps(expected) and type(value) is type(expected)


@pytest.mark.parametrize("text", ["{", '{"a": 1,}', "", "[1] x", "1" * 4301, "\ufeff{}", "nul"])
def test_loads_json_refuses_what_json_loads_refuses(text):
    from toolgym.data import loads_json

    with pytest.raises(ValueError) as ours:
        loads_json(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def test_loads_json_nesting_too_deep_for_json_loads():
    from toolgym.data import loads_json

    with pytest.raises(RecursionError):
        loads_json("[" * 100_000 + "]" * 100_000)
    assert loads_json("[" * 500 + "]" * 500) == json.loads("[" * 500 + "]" * 500)

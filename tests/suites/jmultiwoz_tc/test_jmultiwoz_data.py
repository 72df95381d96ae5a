"""JMultiWOZ-TC loading: the published zip, the NDJSON files (.json/.jsonl), id correspondence,
bad input, stratified sampling, and the real release when it is present."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import (
    BENCHMARK,
    HOTEL,
    REAL_ZIP,
    TAXI,
    WEATHER,
    ndjson,
    records,
    write_dataset,
)
from toolgym.data import DatasetError, load_examples
from toolgym.suites.jmultiwoz_tc.data import stratified_sample


@pytest.mark.parametrize("form", ["zip", "json", "jsonl"])
def test_loads_every_published_form(tmp_path, form):
    path = write_dataset(tmp_path, form)
    examples = load_examples(path, BENCHMARK)
    assert [e.id for e in examples] == [r["data_id"] for r in records()[0]]
    by_id = {e.id: e for e in examples}
    two = by_id["jmultiwoz_tc_1_turn_2"]
    assert [c.model_dump() for c in two.expected_calls] == [TAXI, WEATHER]
    assert two.input[-1] == {"role": "user", "content": "9時になにわタクシーを予約して、天気も教えて。"}
    assert len(two.input) == 5
    assert two.metadata["dialogue_id"] == "dialogue_B" and two.metadata["turn"] == 2
    assert by_id["jmultiwoz_tc_0_turn_0"].expected_calls == []
    assert by_id["jmultiwoz_tc_0_turn_1"].expected_calls[0].arguments == HOTEL["arguments"]


def test_gold_file_path_and_directory_are_accepted(tmp_path):
    write_dataset(tmp_path, "jsonl")
    assert len(load_examples(tmp_path / "jmultiwoz_tc_ground.jsonl", BENCHMARK)) == 7
    assert len(load_examples(tmp_path, BENCHMARK)) == 7


def test_histories_share_messages_within_a_dialogue(tmp_path):
    examples = {e.id: e for e in load_examples(write_dataset(tmp_path, "json"), BENCHMARK)}
    first, later = examples["jmultiwoz_tc_1_turn_0"], examples["jmultiwoz_tc_1_turn_3"]
    assert later.input[0] is first.input[0]


def test_id_mismatch_reports_count_and_first_ids(tmp_path):
    inputs, golds = records()
    extra_inputs = [dict(inputs[0], data_id=f"only_in_input_{i}") for i in range(7)]
    golds = golds[:-1] + [dict(golds[0], data_id="only_in_gold")]
    path = write_dataset(tmp_path, "json", inputs=inputs + extra_inputs, golds=golds)
    with pytest.raises(DatasetError) as info:
        load_examples(path, BENCHMARK)
    message = str(info.value)
    assert "do not correspond one to one" in message
    assert "8 id(s) only in the input: jmultiwoz_tc_1_turn_3, only_in_input_0" in message
    assert "(3 more)" in message
    assert "1 id(s) only in the gold: only_in_gold" in message


@pytest.mark.parametrize(
    ("which", "line", "expected"),
    [
        ("input", "{oops", r"jmultiwoz_tc_input\.json:3: not valid JSON"),
        ("input", '{"dialogue_id": "x", "question": []}', r"jmultiwoz_tc_input\.json:3: record without 'data_id'"),
        ("input", '{"data_id": "z", "question": "hello"}', r"jmultiwoz_tc_input\.json:3: 'question' must be"),
        ("gold", '{"data_id": "z", "ground_truth": [{"name": "Search_hotel", "arguments": [1]}]}',
         r"jmultiwoz_tc_ground\.json:3: ground_truth: \[0\] \(Search_hotel\): arguments must be a JSON object"),
        ("gold", '{"data_id": "z", "ground_truth": [{"name": "Search_hotel", "arguments": "{bad"}]}',
         r"jmultiwoz_tc_ground\.json:3: ground_truth: .*arguments must be a JSON object"),
        ("gold", '{"data_id": "jmultiwoz_tc_0_turn_0", "ground_truth": []}', r"ground\.json:3: duplicate data_id"),
        ("gold", '[]', r"jmultiwoz_tc_ground\.json:3: expected a JSON object"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, which, line, expected):
    inputs, golds = records()
    rows = inputs if which == "input" else golds
    text = ndjson(rows[:2]) + line + "\n" + ndjson(rows[2:])
    kwargs = {"input_text": text} if which == "input" else {"gold_text": text}
    path = write_dataset(tmp_path, "json", **kwargs)
    with pytest.raises(DatasetError, match=expected):
        load_examples(path, BENCHMARK)


def test_gold_arguments_as_json_string_are_parsed(tmp_path):
    _inputs, golds = records()
    golds[1] = dict(golds[1], ground_truth=[{"name": "Search_hotel", "arguments": json.dumps(HOTEL["arguments"])}])
    examples = load_examples(write_dataset(tmp_path, "json", golds=golds), BENCHMARK)
    assert examples[1].expected_calls[0].arguments == HOTEL["arguments"]


def test_missing_files_are_named(tmp_path):
    write_dataset(tmp_path, "json")
    (tmp_path / "jmultiwoz_tc_ground.json").unlink()
    with pytest.raises(DatasetError, match="gold file .* was not found beside it"):
        load_examples(tmp_path / "jmultiwoz_tc_input.json", BENCHMARK)
    other = tmp_path / "notools"
    with pytest.raises(DatasetError, match="tools.json .* was not found"):
        load_examples(write_dataset(other, "zip", tools=False), BENCHMARK)
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK not really")
    with pytest.raises(DatasetError, match="cannot read the zip"):
        load_examples(broken, BENCHMARK)


def test_other_files_fall_back_to_the_generic_loader(tmp_path):
    path = tmp_path / "examples.jsonl"
    path.write_text('{"id": "1", "input": "hi"}\n', encoding="utf-8")
    assert [e.id for e in load_examples(path, BENCHMARK)] == ["1"]


# --- sampling --------------------------------------------------------------------------------
def _many(tmp_path, n_dialogues=30):
    inputs, golds = [], []
    for k in range(n_dialogues):
        for t in range(4):
            data_id = f"jmultiwoz_tc_{k}_turn_{t}"
            inputs.append({"data_id": data_id, "dialogue_id": f"d{k}", "question": [{"role": "user", "content": data_id}]})
            golds.append({"data_id": data_id, "dialogue_id": f"d{k}", "ground_truth": [HOTEL] if t == 1 else []})
    return write_dataset(tmp_path, "jsonl", inputs=inputs, golds=golds)


def test_sample_is_stratified_reproducible_and_in_dataset_order(tmp_path):
    path = _many(tmp_path)  # 120 turns, 30 with a gold call
    first = load_examples(path, BENCHMARK, {"sample": 20, "seed": 0})
    again = load_examples(path, BENCHMARK, {"sample": 20, "seed": 0})
    other = load_examples(path, BENCHMARK, {"sample": 20, "seed": 1})
    assert [e.id for e in first] == [e.id for e in again]
    assert [e.id for e in first] != [e.id for e in other]
    assert Counter(bool(e.expected_calls) for e in first) == {True: 5, False: 15}
    order = [int(re.search(r"_(\d+)_turn_(\d+)", e.id).group(1)) * 10 + int(e.id[-1]) for e in first]
    assert order == sorted(order)


def test_small_samples_keep_both_strata(tmp_path):
    examples = load_examples(_many(tmp_path), BENCHMARK)
    sample = stratified_sample(examples, 2, 3)
    assert sorted(bool(e.expected_calls) for e in sample) == [False, True]
    assert len(stratified_sample(examples, 500, 0)) == 120
    with pytest.raises(DatasetError, match="positive"):
        stratified_sample(examples, 0, 0)


# --- the real release ------------------------------------------------------------------------
@pytest.mark.skipif(not REAL_ZIP.exists(), reason="JMultiWOZ-TC data not present at ../shared/data")
def test_real_release_loads_with_its_quirks():
    examples = load_examples(REAL_ZIP, BENCHMARK)
    assert len(examples) == 31_303
    assert len({e.metadata["dialogue_id"] for e in examples}) == 4_246
    assert sum(len(e.expected_calls) for e in examples) == 16_523
    assert sum(len(e.expected_calls) == 2 for e in examples) == 13
    names = [c.arguments.get("name", "") for e in examples for c in e.expected_calls]
    assert any(re.search("[０-９]", n) for n in names)  # full-width digits inside names
    months = [c.arguments["month"] for e in examples for c in e.expected_calls if "month" in c.arguments]
    assert months and all(type(m) is int for m in months)
    sample = stratified_sample(examples, 200, 0)  # what --sample 200 --seed 0 runs
    assert len(sample) == 200 and 0 < sum(bool(e.expected_calls) for e in sample) < 200


def test_histories_read_from_the_text_equal_a_full_parse(tmp_path):
    """A turn's history is parsed only past the previous turn's text when that text starts it;
    every way the texts can differ (spacing, a changed or longer message, numbers that continue,
    key order, escapes) gives what json.loads gives."""
    m = [json.dumps({"role": "user", "content": "東京"}, ensure_ascii=False), '{"role": "assistant", "content": "はい"}']
    questions = [
        f"[{m[0]}]",
        f"[{m[0]}, {m[1]}, {m[0]}]",  # the previous text and more: the common case
        f"[{m[0]} ,{m[1]},\t{m[0]} , {m[1]}, {m[0]}]",  # other spacing: a full parse
        f'[{m[0]}, {m[1]}, {m[0]}, {m[1]}, {{"content": "\\u6771\\u4eac", "role": "user"}}]',
        f'[{m[0]}, {m[1]}, {m[0]}, {m[1]}, {{"content": "\\u6771\\u4eac", "role": "user"}}, {m[1]}, {{"role": "user", "content": "x"}}]',
        f'[{m[0]}, {{"role": "assistant", "content": "いいえ"}}, {{"role": "user", "content": "y"}}]',  # an earlier message changed
        f'[{m[0]}, {{"role": "assistant", "content": "いいえ"}}, {{"role": "user", "content": "y"}}]',  # the same text again
        f'[{m[0]}, {{"role": "assistant", "content": "いいえ"}}, {{"role": "user", "content": "y"}}, {m[1]}, {m[0]}], "x": NaN',
        f'[{m[0]}, {{"role": "assistant", "content": "いいえ"}}, {{"role": "user", "content": "y"}}, {m[1]}, {m[0]}, {m[1]}, {m[0]}]',
    ]  # the last but one is read by json.loads alone (NaN): the last is then parsed whole
    lines = [f'{{"data_id": "t{i}", "dialogue_id": "d", "question": {q}}}' for i, q in enumerate(questions)]
    golds = [{"data_id": f"t{i}", "dialogue_id": "d", "ground_truth": []} for i in range(len(questions))]
    path = write_dataset(tmp_path, "jsonl", input_text="\n".join(lines) + "\n", golds=golds)
    examples = load_examples(path, BENCHMARK)
    assert [e.input for e in examples] == [json.loads(f'{{"q": {q}}}')["q"] for q in questions]
    assert [e.metadata["turn"] for e in examples] == [0, 1, 2, 2, 3, 1, 1, 2, 3]
    assert examples[1].input[0] is examples[0].input[0]


@pytest.mark.parametrize("question, expected", [
    ('[{"role": "user", "content": "a"}, 5', "not valid JSON"),
    ('[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]', r"question\[1\] must be"),
    ('[{"role": "user", "content": "a"}, 7]', r"question\[1\] must be"),
])
def test_a_bad_message_after_the_previous_turns_is_named(tmp_path, question, expected):
    lines = ['{"data_id": "t0", "dialogue_id": "d", "question": [{"role": "user", "content": "a"}]}',
             f'{{"data_id": "t1", "dialogue_id": "d", "question": {question}}}']
    golds = [{"data_id": f"t{i}", "dialogue_id": "d", "ground_truth": []} for i in range(2)]
    path = write_dataset(tmp_path, "jsonl", input_text="\n".join(lines) + "\n", golds=golds)
    with pytest.raises(DatasetError, match=rf"jmultiwoz_tc_input.jsonl:2: {expected}"):
        load_examples(path, BENCHMARK)

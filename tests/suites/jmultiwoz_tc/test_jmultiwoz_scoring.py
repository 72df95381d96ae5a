"""JMultiWOZ-TC scoring: published equality and counting corners, lenient and multiset
diagnostics, optimal matching, malformed outcomes."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import HOTEL, TAXI, TOOLS, WEATHER
from toolgym import Trajectory
from toolgym.suites.jmultiwoz_tc.results import result_line
from toolgym.suites.jmultiwoz_tc.scoring import (
    PUBLISHED_KEYS,
    PUBLISHED_ROWS,
    ResultFileError,
    ResultRecord,
    Turn,
    evaluate,
    lenient_key,
    max_weight_assignment,
    published_set,
    read_results,
    safe_model_name,
    write_score_files,
)

SLOT_TYPES = {
    t["function"]["name"]: {k: v["type"] for k, v in t["function"]["parameters"]["properties"].items()}
    for t in TOOLS
}


def turn(data_id: str, gold: list[dict], depth: int = 0, user: str = "u") -> Turn:
    return Turn(data_id, "d", tuple(gold), user, depth)


def rec(data_id: str, calls: list | None = None, error: str | None = None, line: int = 1) -> ResultRecord:
    return ResultRecord(line, data_id, "d", calls or [], error)


def rows_by_label(evaluation) -> dict[str, dict]:
    return {r["評価項目"]: r for r in evaluation.rows}


# --- published equality ----------------------------------------------------------------------
def test_equality_ignores_key_order_call_order_and_parses_json_strings():
    gold = [HOTEL, WEATHER]
    reordered = [
        {"name": "Search_weather", "arguments": {"day": 21, "month": 3, "city": "大阪"}},
        {"type": "function", "function": {"name": "Search_hotel", "arguments": json.dumps(HOTEL["arguments"], ensure_ascii=False)}},
    ]
    assert published_set(reordered) == published_set(gold)
    assert published_set([{"name": "Search_weather", "arguments": {"city": "大阪", "month": 3, "day": "21"}}]) != published_set([WEATHER])
    assert published_set([{"name": "Search_weather", "arguments": {"city": "大阪", "month": 3.0, "day": 21}}]) != published_set([WEATHER])


def test_published_sets_collapse_duplicates_but_multiset_column_does_not():
    evaluation = evaluate([rec("t", [HOTEL, HOTEL])], {"t": turn("t", [HOTEL])}, SLOT_TYPES)
    rows = rows_by_label(evaluation)
    assert rows["全体"]["正解数"] == 1  # published: sets are equal
    lenient = {r["評価項目"]: r for r in evaluation.diagnostics["lenient_table"]}
    assert lenient["全体"]["multiset(%)"] == 0.0
    assert lenient["全体"]["lenient(%)"] == 100.0  # lenient as sets
    assert lenient["全体"]["lenient_multiset(%)"] == 0.0


# --- published counting ----------------------------------------------------------------------
def test_five_rows_in_order_with_exact_keys():
    evaluation = evaluate([rec("t", [])], {"t": turn("t", [])}, SLOT_TYPES)
    assert [r["評価項目"] for r in evaluation.rows] == list(PUBLISHED_ROWS)
    assert all(tuple(r) == PUBLISHED_KEYS for r in evaluation.rows)


def test_error_turns_and_tool_call_accuracy_corner():
    turns = {
        "use_ok": turn("use_ok", [HOTEL]),
        "use_wrong": turn("use_wrong", [WEATHER]),
        "use_none": turn("use_none", [TAXI]),
        "use_err": turn("use_err", [HOTEL]),
        "no_ok": turn("no_ok", []),
        "no_wrong": turn("no_wrong", []),
        "no_err": turn("no_err", []),
    }
    results = [
        rec("use_ok", [HOTEL]),
        rec("use_wrong", [{"name": "Search_weather", "arguments": {"city": "大阪"}}]),
        rec("use_none", []),
        rec("use_err", [HOTEL], error="TimeoutError"),  # error wins even with calls
        rec("no_ok", []),
        rec("no_wrong", [HOTEL]),
        rec("no_err", [], error="TimeoutError"),
    ]
    rows = rows_by_label(evaluate(results, turns, SLOT_TYPES))
    assert rows["全体"] == dict(zip(PUBLISHED_KEYS, ["全体", 7, 5, 2, 3, 2, 40.0], strict=True))
    assert rows["ツール使用判断"] == dict(zip(PUBLISHED_KEYS, ["ツール使用判断", 4, 3, 2, 1, 1, 66.67], strict=True))
    assert rows["ツール不使用判断"] == dict(zip(PUBLISHED_KEYS, ["ツール不使用判断", 3, 2, 1, 1, 1, 50.0], strict=True))
    assert rows["ツール使用・不使用判断"] == dict(
        zip(PUBLISHED_KEYS, ["ツール使用・不使用判断", 7, 5, 3, 2, 2, 60.0], strict=True)
    )
    # errors left out entirely: 総データ数 = 評価対象数 = gold-non-empty turns without error
    assert rows["tool call精度"] == dict(zip(PUBLISHED_KEYS, ["tool call精度", 3, 3, 1, 2, 0, 33.33], strict=True))


def test_empty_error_field_is_not_an_error_and_lines_count_not_ids():
    turns = {"a": turn("a", [])}
    evaluation = evaluate([rec("a", [], error=None), rec("a", [], error=None, line=2)], turns, SLOT_TYPES, source="f")
    assert rows_by_label(evaluation)["全体"]["総データ数"] == 2
    assert evaluation.notes == ["f: 1 line(s) repeat a data_id (each line counts, as published): lines 2"]


def test_unknown_ids_graded_as_empty_gold_with_a_note():
    turns = {"a": turn("a", [HOTEL])}
    evaluation = evaluate([rec("a", [HOTEL]), rec("ghost1", []), rec("ghost2", [HOTEL])], turns, SLOT_TYPES)
    rows = rows_by_label(evaluation)
    assert rows["全体"]["総データ数"] == 3
    assert rows["全体"]["正解数"] == 2  # ghost1: empty vs empty gold is correct, as published
    assert rows["ツール不使用判断"]["総データ数"] == 2
    assert rows["ツール不使用判断"]["不正解数"] == 1
    assert any("2 result id(s) are not in the gold" in n and "ghost1" in n for n in evaluation.notes)
    assert evaluation.diagnostics["unknown_ids"] == 2


def test_no_evaluated_turns_gives_zero_percent():
    evaluation = evaluate([rec("a", [], error="TimeoutError")], {"a": turn("a", [HOTEL])}, SLOT_TYPES)
    rows = rows_by_label(evaluation)
    assert rows["全体"]["評価対象数"] == 0 and rows["全体"]["全体の正答率(%)"] == 0.0
    assert rows["tool call精度"]["総データ数"] == 0


def test_incorrect_order_precision_then_use_then_nonuse():
    turns = {"n": turn("n", []), "u": turn("u", [HOTEL], user="最後の発話"), "w": turn("w", [WEATHER])}
    results = [rec("n", [HOTEL]), rec("u", []), rec("w", [HOTEL])]
    evaluation = evaluate(results, turns, SLOT_TYPES)
    order = [(e["Incorrect_genre"], e["data_id"]) for e in evaluation.incorrect]
    assert order == [("tool call精度", "u"), ("tool call精度", "w"), ("ツール使用判断", "u"), ("ツール不使用判断", "n")]
    first = evaluation.incorrect[0]
    assert first["last_user_utterance"] == "最後の発話" and first["ground_truth"] == [HOTEL] and first["output"] == []


def test_score_files(tmp_path):
    evaluation = evaluate([rec("u", [HOTEL]), rec("n", [HOTEL])], {"u": turn("u", [HOTEL]), "n": turn("n", [])}, SLOT_TYPES)
    paths = write_score_files(tmp_path, safe_model_name("org/Model:v1"), evaluation)
    assert paths["score"].name == "score_org_Model_v1.json"
    lines = paths["score"].read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5
    assert [json.loads(x)["評価項目"] for x in lines] == list(PUBLISHED_ROWS)
    assert "全体" in lines[0]  # Japanese written as is, not \\u escapes
    assert [json.loads(x)["data_id"] for x in paths["incorrect"].read_text().splitlines()] == ["n"]
    assert json.loads(paths["diagnostics"].read_text())["lenient_table"][0]["評価項目"] == "全体"


def test_safe_model_name():
    assert safe_model_name("Qwen/Qwen3-14B") == "Qwen_Qwen3-14B"  # as the published script
    assert safe_model_name("openai-compatible:a b/../c") == "openai-compatible_a_b_.._c"
    assert safe_model_name("///") == "model"


# --- lenient equality ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ({"city": "東京", "name": "ホテル２１"}, {"city": "東京", "name": "ホテル21"}),
        ({"city": "東京", "genre": "簡易宿所（民宿）"}, {"city": "東京 ", "genre": "簡易宿所(民宿)"}),
        ({"city": "東京", "name": "21"}, {"city": "東京", "name": 21}),
    ],
)
def test_lenient_strings_nfkc_trim_and_string_coercion(gold, pred):
    assert lenient_key("Search_hotel", gold, SLOT_TYPES) == lenient_key("Search_hotel", pred, SLOT_TYPES)
    assert published_set([{"name": "Search_hotel", "arguments": gold}]) != published_set([{"name": "Search_hotel", "arguments": pred}])


@pytest.mark.parametrize("day", ["21", 21, 21.0, "２１", " 21 "])
def test_lenient_integer_slots_coerced_by_schema(day):
    pred = {"city": "大阪", "month": 3, "day": day}
    assert lenient_key("Search_weather", pred, SLOT_TYPES) == lenient_key("Search_weather", WEATHER["arguments"], SLOT_TYPES)


@pytest.mark.parametrize("day", ["21日", 22, True, None])
def test_lenient_is_not_anything_goes(day):
    pred = {"city": "大阪", "month": 3, "day": day}
    assert lenient_key("Search_weather", pred, SLOT_TYPES) != lenient_key("Search_weather", WEATHER["arguments"], SLOT_TYPES)


def test_lenient_columns_beside_published():
    pred = {"name": "Search_hotel", "arguments": {"name": "ホテル21", "city": "東京"}}
    evaluation = evaluate([rec("t", [pred])], {"t": turn("t", [HOTEL])}, SLOT_TYPES)
    table = {r["評価項目"]: r for r in evaluation.diagnostics["lenient_table"]}
    assert table["tool call精度"]["published(%)"] == 0.0
    assert table["tool call精度"]["lenient(%)"] == 100.0
    assert rows_by_label(evaluation)["tool call精度"]["正解数"] == 0  # published rows unchanged


# --- optimal matching ------------------------------------------------------------------------
def brute_force(weights):
    n, m = len(weights), len(weights[0])
    best = 0.0
    for perm in itertools.permutations(range(m), min(n, m)) if n <= m else ():
        best = max(best, sum(max(weights[i][j], 0) for i, j in enumerate(perm)))
    if n > m:
        for perm in itertools.permutations(range(n), m):
            best = max(best, sum(max(weights[i][j], 0) for j, i in enumerate(perm)))
    return best


def test_assignment_is_optimal_on_random_matrices():
    rng = random.Random(7)
    for _ in range(300):
        n, m = rng.randint(1, 5), rng.randint(1, 5)
        weights = [[float(rng.choice([0, 0, 1, 2, 3, 5])) for _ in range(m)] for _ in range(n)]
        pairs = max_weight_assignment(weights)
        assert len({i for i, _ in pairs}) == len(pairs) == len({j for _, j in pairs})  # one-to-one
        assert sum(weights[i][j] for i, j in pairs) == brute_force(weights)


def test_assignment_beats_greedy_first_fit():
    # gold 0 fits both predictions equally (2); gold 1 fits only the first (3). Greedy
    # first-fit gives gold 0 the first prediction and loses gold 1's best partner.
    weights = [[2.0, 2.0], [3.0, 0.0]]
    assert max_weight_assignment(weights) == [(0, 1), (1, 0)]


def test_per_argument_scores_use_optimal_matching():
    gold = [
        {"name": "Search_hotel", "arguments": {"city": "東京", "name": "X"}},
        {"name": "Search_hotel", "arguments": {"city": "東京", "name": "Y"}},
    ]
    pred = [
        {"name": "Search_hotel", "arguments": {"city": "東京", "name": "Y"}},
        {"name": "Search_hotel", "arguments": {"city": "東京", "name": "Z"}},
    ]
    evaluation = evaluate([rec("t", pred)], {"t": turn("t", gold)}, SLOT_TYPES)
    cells = {(r["tool"], r["slot"]): r for r in evaluation.diagnostics["per_argument"]}
    assert cells[("Search_hotel", "name")]["lenient_correct"] == 1  # Y matched to Y
    assert cells[("Search_hotel", "name")]["wrong_value"] == 1
    assert cells[("Search_hotel", "city")]["lenient_correct"] == 2
    tool = evaluation.diagnostics["per_tool"]["Search_hotel"]
    assert (tool["gold_calls"], tool["matched"], tool["strict_exact"]) == (2, 2, 1)


def test_per_argument_counts_missing_extra_and_missed_calls():
    pred = [{"name": "Booking_taxi", "arguments": {"city": "大阪", "name": "なにわタクシー", "minute": 0}}]
    evaluation = evaluate([rec("t", pred)], {"t": turn("t", [TAXI, WEATHER])}, SLOT_TYPES)
    cells = {(r["tool"], r["slot"]): r for r in evaluation.diagnostics["per_argument"]}
    assert cells[("Booking_taxi", "hour")]["missing_slot"] == 1
    assert cells[("Booking_taxi", "minute")]["extra"] == 1
    assert cells[("Search_weather", "day")]["missed_call"] == 1
    assert evaluation.diagnostics["per_tool"]["Search_weather"]["missed"] == 1
    ranked = evaluation.diagnostics["per_argument"]
    assert [r["slot_errors"] for r in ranked] == sorted((r["slot_errors"] for r in ranked), reverse=True)
    by_slot = {r["slot"]: r for r in evaluation.diagnostics["per_slot"]}
    assert by_slot["city"]["gold"] == 2 and by_slot["city"]["lenient_correct"] == 1
    assert by_slot["city"]["missed_call"] == 1 and by_slot["city"]["accuracy_in_matched_calls(%)"] == 100.0


def test_accuracy_by_depth():
    turns = {"a": turn("a", [], depth=0), "b": turn("b", [HOTEL], depth=2), "c": turn("c", [HOTEL], depth=2)}
    evaluation = evaluate([rec("a", []), rec("b", [HOTEL]), rec("c", [])], turns, SLOT_TYPES)
    depth = {r["depth"]: r for r in evaluation.diagnostics["per_depth"]}
    assert depth[0]["n"] == 1 and depth[0]["全体(%)"] == 100.0
    assert depth[2]["n"] == 2 and depth[2]["tool call精度(%)"] == 50.0


# --- malformed ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ({"name": "Search_hotel", "arguments": "{city: 東京"}, "arguments are not valid JSON"),
        ({"name": "Search_hotels", "arguments": {"city": "東京"}}, "unknown tool"),
        ({"name": "Search_hotel", "arguments": ["東京"]}, "arguments are not a JSON object"),
        ({"name": "", "arguments": "<tool_call>…", "malformed": "tool call written as text instead of a tool call"},
         "tool call written as text instead of a tool call"),
    ],
)
def test_malformed_is_counted_apart_from_abstention(call, reason):
    turns = {"no": turn("no", []), "use": turn("use", [HOTEL])}
    evaluation = evaluate([rec("no", [call]), rec("use", [call])], turns, SLOT_TYPES)
    outcomes = evaluation.diagnostics["decision_outcomes"]
    assert outcomes["gold_no_call"] == {"malformed": 1}  # never credited as a correct "no call"
    assert outcomes["gold_call"] == {"malformed": 1}
    assert outcomes["malformed_reasons"] == {reason: 2}
    rows = rows_by_label(evaluation)
    assert rows["ツール不使用判断"]["正解数"] == 0
    assert rows["tool call精度"]["正解数"] == 0
    table = {r["評価項目"]: r for r in evaluation.diagnostics["lenient_table"]}
    assert table["全体"]["malformed"] == 2 and table["ツール不使用判断"]["malformed"] == 1


# --- reading result files --------------------------------------------------------------------
def test_read_results_accepts_both_call_forms_and_null_calls(tmp_path):
    path = tmp_path / "result_m.jsonl"
    path.write_text(
        '{"data_id": "a", "tool_calls": null}\n\n'
        '{"id": "b", "tool_calls": [{"type": "function", "function": {"name": "Search_hotel", "arguments": "{}"}}]}\n'
        '{"data_id": "c", "tool_calls": [], "error": "TimeoutError"}\n'
        '{"data_id": null, "id": "d", "error": "", "error_detail": "x"}',
        encoding="utf-8",
    )
    records = read_results(path)
    assert [(r.data_id, r.line, r.error) for r in records] == [
        ("a", 1, None), ("b", 3, None), ("c", 4, "TimeoutError"), ("d", 5, None),  # "id" when data_id is null
    ]
    assert records[0].text == '{"data_id": "a", "tool_calls": null}'  # kept verbatim


def test_read_results_drops_a_byte_order_mark_and_refuses_other_encodings(tmp_path):
    path = tmp_path / "result_m.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"data_id": "a"}\n{"data_id": "\xff"}\n')
    with pytest.raises(ResultFileError, match="1 invalid line.*line 2: not UTF-8 text"):
        read_results(path)
    path.write_bytes(b'\xef\xbb\xbf{"data_id": "a"}\n')
    assert read_results(path)[0].text == '{"data_id": "a"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"data_id": "a"}\nnot json\n', "line 2: not valid JSON"),
        ('{"data_id": "a"}\n{"data_id": [1], "tool_calls": []}\n', "line 2: data_id must be a string, got list"),
        ('[1, 2]\n', "line 1: expected a JSON object"),
        ('{"data_id": "a", "tool_calls": true}\n', "line 1: 'tool_calls' must be a list of calls, got true"),
        ('\xff\xfe{\x00', "the file is UTF-16 (little-endian, with a byte-order mark)"),
        ('{\x00"\x00d\x00a\x00t\x00a\x00', "the file is UTF-16 (little-endian, without a byte-order mark)"),
        ('{"data_id": "a"}\n{"data_id": "b"', "line 2: not valid JSON (Expecting ',' delimiter) (a torn last line"),
    ],
)
def test_read_results_bad_input_names_file_and_line(tmp_path, text, expected):
    path = tmp_path / "result_m.jsonl"
    path.write_bytes(text.encode("latin-1") if "\x00" in text else text.encode("utf-8"))
    with pytest.raises(ResultFileError) as info:
        read_results(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_many_bad_lines_are_counted(tmp_path):
    path = tmp_path / "result_m.jsonl"
    path.write_text("oops\n" * 12, encoding="utf-8")
    with pytest.raises(ResultFileError, match=r"12 invalid line\(s\): line 1: .*\(and 7 more\)"):
        read_results(path)


def test_arguments_not_an_object_are_a_warning_with_lines(tmp_path):
    path = tmp_path / "result_m.jsonl"
    rows = [{"data_id": str(i), "tool_calls": [{"name": "Search_hotel", "arguments": "not json"}]} for i in range(7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    records = read_results(path)
    assert len(records) == 7
    turns = {str(i): turn(str(i), [HOTEL]) for i in range(7)}
    notes = evaluate(records, turns, SLOT_TYPES, source=str(path)).notes
    assert len(notes) == 1 and str(path) in notes[0] and "7 line(s)" in notes[0]
    assert "lines 1, 2, 3, 4, 5, … (2 more)" in notes[0]


@pytest.mark.parametrize(
    ("error", "written"),
    [("APITimeoutError: Request timed out.", "TimeoutError"), ("TimeoutError: no response", "TimeoutError"),
     ("ReadTimeout: slow", "TimeoutError"), ("IndexError: script exhausted", "IndexError")],
)
def test_result_line_of_a_failed_turn(error, written):
    traj = Trajectory(example_id="x", env="jmultiwoz_tc", agent="tool_calling", status="error", error=error)
    line = result_line(traj, "d1", ["Search_hotel"])
    assert line == {"data_id": "x", "dialogue_id": "d1", "tool_calls": [], "error": written, "error_detail": error}

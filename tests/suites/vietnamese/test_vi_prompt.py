"""Five-shot prompts and the EXAMS/XCOPA loaders."""

import json
import shutil

import pytest

from tests.suites.vietnamese.vi_helpers import EXAMS_DEV, EXAMS_TEST, XCOPA_TEST
from toolgym.data import DatasetError, load_examples
from toolgym.plugins import get_benchmark
from toolgym.suites.vietnamese.multiple_choice import Question, build_prompt, format_question, select_shots

EXAM = get_benchmark("exam_vi")
XCOPA = get_benchmark("xcopa_vi")


def q(i: int, subject: str = "Biology", answer: str = "A") -> Question:
    return Question(f"q{i}", f"Câu {i}?", {"A": f"a{i}", "B": f"b{i}", "C": f"c{i}", "D": f"d{i}"}, answer, subject)


def test_five_shot_prompt_layout():
    shots = [q(i, answer="ABCDA"[i]) for i in range(5)]
    prompt = build_prompt(q(9), shots, "Sau đây là các câu hỏi trắc nghiệm (có đáp án) môn Sinh học.")
    blocks = prompt.split("\n\n")
    assert len(blocks) == 7  # header, five solved questions, the question
    assert blocks[0] == "Sau đây là các câu hỏi trắc nghiệm (có đáp án) môn Sinh học."
    assert blocks[2] == "Câu hỏi: Câu 1?\nA. a1\nB. b1\nC. c1\nD. d1\nĐáp án: B. b1"
    assert [b.rsplit("Đáp án:", 1)[1] for b in blocks[1:6]] == [" A. a0", " B. b1", " C. c2", " D. d3", " A. a4"]
    assert blocks[-1] == "Câu hỏi: Câu 9?\nA. a9\nB. b9\nC. c9\nD. d9\nĐáp án:"
    assert prompt.endswith("Đáp án:")  # the scored continuation brings its own space


def test_zero_shot_prompt_is_header_and_question():
    assert build_prompt(q(1), [], "H.") == "H.\n\n" + format_question(q(1), with_answer=False)


def test_shots_prefer_the_subject_then_top_up_in_file_order():
    pool = [q(0, "Physics"), q(1, "Biology"), q(2, "History"), q(3, "Biology"), q(4, "Physics")]
    assert [s.id for s in select_shots(pool, 3, "Biology")] == ["q1", "q3", "q0"]
    assert [s.id for s in select_shots(pool, 2, "Chemistry")] == ["q0", "q1"]
    assert [s.id for s in select_shots(pool, 3, "Biology", exclude={"q1"})] == ["q3", "q0", "q2"]
    assert select_shots(pool, 0, "Biology") == []


def test_exams_examples_take_shots_from_the_dev_split_of_the_same_subject():
    examples = load_examples(EXAMS_TEST, EXAM, {"shots": 2})
    by_id = {e.id: e for e in examples}
    bio = by_id["t-bio-1"]
    assert bio.reference == "B"
    assert bio.metadata["shots"] == ["d-bio-1", "d-bio-2"]
    assert bio.metadata["subject"] == "Biology"
    assert bio.metadata["continuations"]["B"] == " B. Tim"
    assert bio.input.startswith("Sau đây là các câu hỏi trắc nghiệm (có đáp án) môn Sinh học.\n\nCâu hỏi: Loài nào")
    assert "Đáp án: B. Cá voi" in bio.input and bio.input.endswith("D. Thận\nĐáp án:")
    # questions grouped by subject (first appearance order), file order inside a subject
    assert [e.id for e in examples] == ["t-bio-1", "t-bio-2", "t-bio-3", "t-his-1", "t-his-2", "t-phy-1"]
    # every question of a subject shares the same prefix (one cache fill per subject)
    prefix = bio.input.split("Câu hỏi: Cơ quan")[0]
    assert by_id["t-bio-2"].input.startswith(prefix) and not by_id["t-his-1"].input.startswith(prefix)
    assert by_id["t-phy-1"].metadata["shots"] == ["d-phy-1", "d-bio-1"]  # topped up from other subjects


def test_default_is_five_shots():
    examples = load_examples(EXAMS_TEST, EXAM, {})
    assert all(len(e.metadata["shots"]) == 5 for e in examples)
    assert examples[0].input.count("Câu hỏi:") == 6


def test_sample_is_deterministic_and_a_subset():
    a = load_examples(EXAMS_TEST, EXAM, {"shots": 0, "sample": 3, "sample_seed": 1})
    b = load_examples(EXAMS_TEST, EXAM, {"shots": 0, "sample": 3, "sample_seed": 1})
    assert [e.id for e in a] == [e.id for e in b] and len(a) == 3
    assert len({e.id for e in load_examples(EXAMS_TEST, EXAM, {"shots": 0, "sample": 99})}) == 6


def test_shots_need_a_separate_split(tmp_path):
    lonely = tmp_path / "multilingual_test_vi.jsonl"
    shutil.copy(EXAMS_TEST, lonely)
    with pytest.raises(DatasetError, match="--shots-from"):
        load_examples(lonely, EXAM, {})
    with pytest.raises(DatasetError, match="separate split"):
        load_examples(lonely, EXAM, {"shots_from": str(lonely)})
    assert len(load_examples(lonely, EXAM, {"shots": 0})) == 6
    assert load_examples(lonely, EXAM, {"shots_from": str(EXAMS_DEV), "shots": 1})[0].metadata["shots"] == ["d-bio-1"]


def test_a_copy_of_the_evaluated_file_never_puts_a_question_among_its_own_shots(tmp_path):
    copy = tmp_path / "shots.jsonl"
    rows = [json.loads(line) for line in EXAMS_TEST.read_text(encoding="utf-8").splitlines() if line.strip()]
    original = rows[1]["id"]
    rows[1]["id"] = "renamed"  # the same question under another id: its text still matches
    rows[1]["question"]["stem"] = "  " + rows[1]["question"]["stem"].upper() + " "
    copy.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    examples = {e.id: e for e in load_examples(EXAMS_TEST, EXAM, {"shots_from": str(copy), "shots": 5})}
    for example in examples.values():
        shots = example.metadata["shots"]
        assert example.id not in shots and len(shots) == 5, (example.id, shots)
    assert "renamed" not in examples[original].metadata["shots"]
    assert "renamed" in examples[rows[0]["id"]].metadata["shots"]  # a shot for the other questions
    # the published way (a separate split) is unchanged
    assert load_examples(EXAMS_TEST, EXAM, {})[0].metadata["shots"] == load_examples(
        EXAMS_TEST, EXAM, {"shots_from": str(EXAMS_DEV)})[0].metadata["shots"]


def test_bad_records_name_file_line_and_field(tmp_path):
    rows = [json.loads(line) for line in EXAMS_TEST.read_text(encoding="utf-8").splitlines()]
    rows[2]["answerKey"] = "E"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: answerKey 'E' is not among the labels ABCD"):
        load_examples(bad, EXAM, {"shots": 0})
    del rows[2]["question"]["stem"]
    rows[2]["answerKey"] = "A"
    bad.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: missing field question.stem"):
        load_examples(bad, EXAM, {"shots": 0})
    with pytest.raises(DatasetError, match="shots=-1 must be at least 0"):
        load_examples(EXAMS_TEST, EXAM, {"shots": -1})


def test_xcopa_prompt_and_shots_from_val():
    examples = load_examples(XCOPA_TEST, XCOPA, {"shots": 1})
    first = {e.id: e for e in examples}["0"]
    assert first.reference == "A"
    assert first.metadata["options"] == {"A": "Đường phố ngập nước.", "B": "Mặt trời chiếu sáng."}
    assert first.metadata["shots"] == ["1"]  # the validation question of the same type (effect)
    assert first.input.endswith("Câu hỏi: Trời mưa to. Kết quả là gì?\nA. Đường phố ngập nước.\nB. Mặt trời chiếu sáng.\nĐáp án:")
    assert "Câu hỏi: Tôi đói. Kết quả là gì?" in first.input and "Đáp án: B. Tôi ăn cơm." in first.input
    cause = {e.id: e for e in examples}["1"]
    assert cause.reference == "B" and "Nguyên nhân là gì?" in cause.input


def test_toolgym_jsonl_still_loads(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"id": "x", "input": "Đáp án:", "reference": "A",
                                "metadata": {"options": {"A": "a", "B": "b"}}}) + "\n")
    assert load_examples(path, EXAM, {})[0].id == "x"

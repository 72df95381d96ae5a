"""Answer extraction: the option letter a written answer chooses."""

import pytest

from toolgym.suites.vietnamese.graders import extract_letter, normalize_word


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Đáp án: C", "C"),
        ("Đáp án: C. Tạo ra cừu Đôly.", "C"),
        ("đáp án đúng là c", "C"),
        ("Câu trả lời chính xác là (B) vì tim bơm máu.", "B"),
        ("Chọn (b)", "B"),
        ("(D)", "D"),
        ("D.", "D"),
        ("B) Tim", "B"),
        ("C", "C"),
        ("Ｃ", "C"),  # full-width letter
        ("（Ｄ）", "D"),  # full-width brackets
        ("Đáp án：Ａ", "A"),  # full-width colon
        ("Answer: B", "B"),
        # several letters: the last one of the most reliable form wins
        ("A... không, đáp án là D", "D"),
        ("Tôi phân vân giữa B và C, cuối cùng là C", "C"),
        ("Đáp án: B. Thiếu vitamin A.", "B"),  # an answer marker beats a later bare letter
        ("(A) sai, (C) đúng", "C"),
    ],
)
def test_extracts_the_chosen_letter(text, expected):
    assert extract_letter(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", None, "Tôi không biết.", "Phân tử DNA có cấu trúc xoắn kép.", "Đáp án: E", "Đáp án là anh ấy"],
)
def test_no_letter_is_unanswered(text):
    assert extract_letter(text) is None


def test_only_valid_letters_count():
    assert extract_letter("Đáp án: C", letters="AB") is None
    assert extract_letter("Đáp án: B", letters="AB") == "B"


def test_normalize_word_for_last_word_answers():
    assert normalize_word("Touchdown.") == "touchdown"
    assert normalize_word("  «Hà» Nội") == "hà"
    assert normalize_word("") == ""

"""The LAMBADA-style construction from XQuAD paragraphs."""

import pytest

from tests.suites.vietnamese.vi_helpers import XQUAD
from toolgym.data import DatasetError, load_examples
from toolgym.plugins import get_benchmark
from toolgym.suites.vietnamese.lambada_vi import LastWordItem, build_lambada, read_xquad, split_last_word

LAMBADA = get_benchmark("lambada_vi")


def test_last_word_is_the_target_and_the_rest_the_context():
    item = split_last_word("Thành phố nằm bên bờ sông Hồng. Nó rất đẹp.\n")
    assert item == LastWordItem("", "Thành phố nằm bên bờ sông Hồng. Nó rất", "đẹp", " đẹp")


def test_bracketed_last_word_keeps_the_bracket_in_the_context():
    item = split_last_word("Ngôn ngữ Ký hiệu Mỹ (ASL).")
    assert (item.context, item.target, item.continuation) == ("Ngôn ngữ Ký hiệu Mỹ (", "ASL", "ASL")


@pytest.mark.parametrize(
    ("paragraph", "reason"),
    [
        ("Dân số tăng từ năm 1990.", "number"),
        ("Giá là 3,5.", "number"),
        ("Mạng mới là Internet2.", "number"),
        ("Họ mua \"nhu yếu phẩm\" .", "punctuation"),
        ("Ông hát cho AC/DC.", "not a word"),
        ("Tuyệt", "no context"),
        ("   ", "no context"),
    ],
)
def test_unusable_paragraphs_are_dropped_with_a_reason(paragraph, reason):
    assert split_last_word(paragraph) == reason


def test_vietnamese_is_normalised_to_nfc():
    decomposed = "Đây là sông Ho\u0302\u0300ng."  # "Hồng" written with combining marks
    assert split_last_word(decomposed).target == "Hồng"


def test_construction_counts_and_ids():
    built = build_lambada(read_xquad(XQUAD))
    assert built.n_paragraphs == 7
    assert [i.id for i in built.items] == ["Ha_Noi/0", "Am_nhac/1"]
    assert built.items[0].target == "Hồng"
    assert built.dropped == {"number": 1, "punctuation": 1, "not a word": 1, "duplicate": 1, "no context": 1}
    assert built.n_paragraphs == len(built.items) + sum(built.dropped.values())


def test_environment_examples():
    examples = load_examples(XQUAD, LAMBADA, {})
    first = examples[0]
    assert first.input == "Hà Nội là thủ đô của Việt Nam. Thành phố nằm bên bờ sông"
    assert first.reference == "Hồng"
    assert first.metadata == {"task": "last_word", "continuation": " Hồng"}
    assert len(load_examples(XQUAD, LAMBADA, {"sample": 1})) == 1


def test_malformed_xquad_names_the_record(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"data": [{"title": "t", "paragraphs": [{"context": 3}]}]}')
    with pytest.raises(DatasetError, match=r"data\[0\].paragraphs\[0\].context must be a string"):
        load_examples(bad, LAMBADA, {})
    bad.write_text("[1, 2]")
    with pytest.raises(DatasetError, match="expected a JSON object"):
        load_examples(bad, LAMBADA, {})

"""The Vietnamese tasks on the real reference data (skipped when it is absent): the documented
counts hold and the oracle scores 100%."""

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.plugins import get_benchmark
from toolgym.runio import read_scores
from toolgym.suites.vietnamese.lambada_vi import build_lambada, read_xquad

VI = REFERENCE_DATA / "vietnamese"
pytestmark = pytest.mark.skipif(not VI.is_dir(), reason="reference data not found")


def test_lambada_construction_counts_match_its_readme():
    built = build_lambada(read_xquad(VI / "xquad_vi" / "xquad.vi.json"))
    assert (built.n_paragraphs, len(built.items)) == (240, 211)
    assert built.dropped == {"number": 25, "not a word": 2, "punctuation": 2}


def test_exams_and_xcopa_load_with_five_shots():
    exams = load_examples(VI / "exams_vi" / "multilingual_test_vi.jsonl", get_benchmark("exam_vi"), {})
    assert len(exams) == 1222 and all(len(e.metadata["shots"]) == 5 for e in exams)
    assert all(set(e.metadata["options"]) == set("ABCD") for e in exams)
    xcopa = load_examples(VI / "xcopa_vi" / "test.vi.jsonl", get_benchmark("xcopa_vi"), {})
    assert len(xcopa) == 500 and {e.reference for e in xcopa} == {"A", "B"}


def test_oracle_scores_100_percent_on_exams(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--env", "exam_vi", "--dataset", str(VI / "exams_vi" / "multilingual_test_vi.jsonl"),
            "--agent", "oracle", "--sample", "100", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    scores = read_scores(out)
    assert len(scores) == 100 and all(s.value == 1.0 for s in scores)

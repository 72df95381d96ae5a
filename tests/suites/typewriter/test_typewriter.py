"""The typewriter suite: the published LangChain datasets load and replay to their state."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.data import check_dataset, load_examples
from toolgym.plugins import get_benchmark

LANGCHAIN = REFERENCE_DATA / "langchain_tool_usage"
needs_published = pytest.mark.skipif(not LANGCHAIN.exists(), reason="reference data absent")


@needs_published
@pytest.mark.parametrize(("name", "env"), [
    ("typewriter_1_tool_dataset.json", "typewriter_1"), ("typewriter_26_tools_dataset.json", "typewriter_26"),
])
def test_published_typewriter_files_load_and_replay_to_their_state(name, env):
    benchmark = get_benchmark(env)
    doc = json.loads((LANGCHAIN / name).read_text())
    examples = load_examples(LANGCHAIN / name, benchmark)
    assert len(examples) == len(doc["examples"]) >= 20
    for record, ex in zip(doc["examples"], examples, strict=True):
        assert ex.input == record["question"] and ex.expected_steps == record["expected_steps"]
        assert ex.expected_calls and ex.expected_state is not None
    assert check_dataset(benchmark, examples) == []


def test_the_generator_writes_what_the_oracle_solves():
    benchmark = get_benchmark("typewriter_26")
    ladder = benchmark.generator.make(3, 2, [1, 4])
    assert [ex.metadata["difficulty"] for ex in ladder] == [1, 1, 4, 4]
    assert check_dataset(benchmark, ladder) == []

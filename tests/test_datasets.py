"""Integrity of every built-in dataset (its own oracle must solve it) and the LangChain loader
on all five reference files."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from tests.conftest import REFERENCE_DATA
from toolgym.data import DATASETS_DIR, DatasetError, load_examples
from toolgym.environments import get_environment
from toolgym.records import Example

DATASET_FILES = sorted(DATASETS_DIR.glob("*/*.jsonl"))
LANGCHAIN = REFERENCE_DATA / "langchain_tool_usage"
needs_published = pytest.mark.skipif(not LANGCHAIN.exists(), reason="reference data absent")


def _decode(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _same(derived, reference) -> bool:
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        return isinstance(derived, (int, float)) and math.isclose(derived, reference, rel_tol=1e-9, abs_tol=1e-12)
    return str(derived).casefold() == str(reference).casefold()


def replay(env_cls, example: Example):
    """Replay the expected calls on a fresh environment; return its final state and the
    reference the observations imply (``None`` when the environment derives none)."""
    env = env_cls()
    env.reset(example)
    try:
        results = []
        for call in example.expected_calls or []:
            result = env.call(call.name, call.arguments)
            assert not result.error, f"{example.id}: {call.name}{call.arguments} -> {result.output}"
            results.append((call.name, _decode(result.output)))
        derive = getattr(env_cls, "reference_from_replay", None)
        derived = derive(example, results) if derive and results else None
        return env.read_state(), derived
    finally:
        env.close()


def test_every_environment_folder_is_covered():
    folders = {p.parent.name for p in DATASET_FILES}
    assert folders >= {"typewriter_1", "typewriter_26", "relational_data", "multiverse_math"}
    for folder in folders:
        assert (DATASETS_DIR / folder / "README.md").exists(), f"{folder} has no README.md"
        assert {"test", "ladder"} <= {p.stem for p in (DATASETS_DIR / folder).glob("*.jsonl")}


@pytest.mark.parametrize("path", DATASET_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replaying_expected_calls_reproduces_the_reference(path):
    env_cls = get_environment(path.parent.name)
    examples = load_examples(path, env_cls)
    for ex in examples:
        assert ex.expected_calls is not None, f"{ex.id}: no expected_calls for the oracle"
        assert ex.metadata["n_steps"] == len(ex.expected_steps) > 0, ex.id
        assert isinstance(ex.metadata.get("difficulty"), int), ex.id
        assert ex.reference is not None or ex.expected_state is not None, ex.id
        state, derived = replay(env_cls, ex)
        if ex.expected_state is not None:
            assert {k: state.get(k) for k in ex.expected_state} == ex.expected_state, ex.id
        if ex.reference is not None:
            if derived is None:  # typewriters: the reference is the typed text
                derived = state.get("paper")
            assert _same(derived, ex.reference), f"{ex.id}: replay gives {derived!r}, reference {ex.reference!r}"


def test_builtin_test_sets_have_the_promised_shape():
    rel = load_examples(DATASETS_DIR / "relational_data" / "test.jsonl")
    assert len(rel) >= 20
    assert set(Counter(ex.metadata["n_steps"] for ex in rel)) == {1, 2, 3, 4, 5}
    assert {ex.order_matters for ex in rel} == {True, False}
    mm = load_examples(DATASETS_DIR / "multiverse_math" / "test.jsonl")
    assert len(mm) >= 20 and all(ex.metadata["answer_expression"] for ex in mm)
    assert max(ex.metadata["n_steps"] for ex in mm) >= 4


def test_multiverse_answer_expressions_match_references():
    from toolgym.suites.multiverse_math.environment import MultiverseMath

    for name in ("test", "ladder"):
        for ex in load_examples(DATASETS_DIR / "multiverse_math" / f"{name}.jsonl"):
            result, calls = MultiverseMath.evaluate(ex.metadata["answer_expression"])
            assert math.isclose(result, ex.reference, rel_tol=1e-12), ex.id
            assert calls == [c.model_dump() for c in ex.expected_calls], ex.id


# --- the LangChain form ---------------------------------------------------------------------
LANGCHAIN_FILES = {
    "typewriter_1_tool_dataset.json": ("typewriter_1", 20),
    "typewriter_26_tools_dataset.json": ("typewriter_26", 20),
    "relational_data_dataset.json": ("relational_data", 21),
    "multiverse_math_dataset.json": ("multiverse_math", 20),
}


@needs_published
@pytest.mark.parametrize("name", sorted(LANGCHAIN_FILES))
def test_langchain_loader_reads_every_dataset_file(name):
    env_name, minimum = LANGCHAIN_FILES[name]
    doc = json.loads((LANGCHAIN / name).read_text())
    generic = load_examples(LANGCHAIN / name)  # no environment: the generic conversion
    specific = load_examples(LANGCHAIN / name, get_environment(env_name))
    assert len(generic) == len(specific) == len(doc["examples"]) >= minimum
    for record, ex in zip(doc["examples"], specific, strict=True):
        assert ex.input == record["question"]
        assert ex.expected_steps == record["expected_steps"]
        assert ex.reference == record.get("reference", record.get("answer"))
    if env_name != "relational_data":  # the environment derives calls the oracle can replay
        assert all(ex.expected_calls for ex in specific)


@needs_published
def test_the_tables_file_is_refused_with_a_clear_error():
    path = LANGCHAIN / "relational_data_tables.json"
    for env in (None, get_environment("relational_data"), get_environment("multiverse_math")):
        with pytest.raises(DatasetError, match="not a dataset") as info:
            load_examples(path, env)
        assert str(path) in str(info.value)


@needs_published
@pytest.mark.parametrize("name", ["typewriter_1_tool_dataset.json", "typewriter_26_tools_dataset.json"])
def test_published_typewriter_files_replay_to_their_state(name):
    env_cls = get_environment(LANGCHAIN_FILES[name][0])
    for ex in load_examples(LANGCHAIN / name, env_cls):
        state, _ = replay(env_cls, ex)
        assert state == ex.expected_state

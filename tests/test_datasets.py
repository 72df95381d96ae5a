"""The dataset rules on every built-in dataset of every installed suite: its own oracle must
solve it (toolgym.data.check_dataset), and the shape the breakdowns rely on."""

from __future__ import annotations

import pytest

from toolgym.data import check_dataset, load_examples
from toolgym.plugins import registries

ENVIRONMENTS = registries()["environments"]
BUILTIN = [name for name, source in ENVIRONMENTS.sources() if not source.startswith("entry point")]
DATASET_FILES = [
    (name, path)
    for name in BUILTIN
    if ENVIRONMENTS.get(name).datasets is not None
    for path in sorted(ENVIRONMENTS.get(name).datasets.glob("*.jsonl"))
]


def test_every_folder_with_data_has_a_readme_a_test_and_a_ladder():
    for name in {n for n, _ in DATASET_FILES}:
        folder = ENVIRONMENTS.get(name).datasets
        assert (folder / "README.md").exists(), f"{folder} has no README.md"
        assert {"test", "ladder"} <= {p.stem for p in folder.glob("*.jsonl")}, folder


@pytest.mark.parametrize(("env", "path"), DATASET_FILES, ids=lambda v: getattr(v, "name", v))
def test_every_builtin_dataset_obeys_the_dataset_rules(env, path):
    benchmark = ENVIRONMENTS.get(env)
    examples = load_examples(path, benchmark)
    for ex in examples:
        assert ex.expected_calls is not None, f"{ex.id}: no expected_calls for the oracle"
        assert ex.metadata["n_steps"] == len(ex.expected_steps) > 0, ex.id
        assert isinstance(ex.metadata.get("difficulty"), int), ex.id
        assert ex.reference is not None or ex.expected_state is not None, ex.id
    assert check_dataset(benchmark, examples, path) == []


def test_the_rules_catch_a_broken_example():
    from toolgym import Example

    typewriter = ENVIRONMENTS.get("typewriter_1") if "typewriter_1" in ENVIRONMENTS else None
    if typewriter is None:
        pytest.skip("typewriter suite absent")
    bad = Example(id="x", input="ab", expected_calls=[{"name": "type_letter", "arguments": {"letter": "a"}}],
                  expected_state={"paper": "ab"})
    wrong_tool = Example(id="y", input="ab", expected_steps=["type_word"])
    assert check_dataset(typewriter, [bad]) == ["x: replay reaches {'paper': 'a'}, expected_state is {'paper': 'ab'}"]
    assert check_dataset(typewriter, [wrong_tool]) == [
        "dataset: tool 'type_word', named by 1 example(s) ('y' (expected_steps)): typewriter_1 has no such tool; "
        "did you mean 'type_letter'?"]

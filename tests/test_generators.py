"""Seeded difficulty ladders: deterministic per seed, harder levels need more steps, the
shipped ladder files are what the command writes, and the `generate` command."""

from __future__ import annotations

from statistics import mean

import pytest

from toolgym.cli import main
from toolgym.data import load_examples
from toolgym.generators import generate, parse_levels
from toolgym.plugins import get_benchmark

ENVS = ["typewriter_1", "typewriter_26", "relational_data", "multiverse_math"]


def dump(examples):
    return [ex.model_dump() for ex in examples]


@pytest.mark.parametrize("env", ENVS)
def test_same_seed_same_examples_other_seed_other_examples(env):
    first = generate(env, seed=7, per_level=3)
    assert dump(first) == dump(generate(env, seed=7, per_level=3))
    assert [ex.input for ex in first] != [ex.input for ex in generate(env, seed=8, per_level=3)]
    assert len({ex.id for ex in first}) == len(first)


@pytest.mark.parametrize("env", ENVS)
def test_levels_increase_the_number_of_steps(env):
    examples = generate(env, seed=3, per_level=4)
    levels = list(get_benchmark(env).generator.default_levels)
    assert [lv for lv in levels for _ in range(4)] == [ex.metadata["difficulty"] for ex in examples]
    by_level = {lv: [ex.metadata["n_steps"] for ex in examples if ex.metadata["difficulty"] == lv] for lv in levels}
    for lv, steps in by_level.items():
        assert all(s >= lv for s in steps)
        if env != "multiverse_math":  # one call per letter / per hop
            assert steps == [lv] * 4
    means = [mean(by_level[lv]) for lv in levels]
    if env == "multiverse_math":  # side branches add calls; the trend still rises
        assert mean(means[:4]) < mean(means[4:]) and means[0] == 1
    else:
        assert means == sorted(means) and len(set(means)) == len(means)


def test_multiverse_depth_is_the_tree_depth():
    from toolgym.suites.multiverse_math.environment import _tree_shape

    for ex in generate("multiverse_math", seed=5, per_level=2, levels=[1, 4, 8]):
        assert _tree_shape(ex.metadata["answer_expression"])["depth"] == ex.metadata["difficulty"]
        assert ex.input.startswith("In this universe, what is ")


@pytest.mark.parametrize("env", ENVS)
def test_shipped_ladder_is_what_the_generator_writes(env):
    shipped = load_examples(get_benchmark(env).datasets / "ladder.jsonl")
    assert dump(shipped) == dump(generate(env, seed=0, per_level=3))


def test_parse_levels():
    assert parse_levels("1-8") == list(range(1, 9))
    assert parse_levels("4, 1,2") == [1, 2, 4]
    assert parse_levels("1-3,8") == [1, 2, 3, 8]
    assert parse_levels(None) is None
    for bad in ("3-1", "x", "1-", ""):
        with pytest.raises(ValueError, match="--levels"):
            parse_levels(bad)


def test_bad_levels_are_refused():
    with pytest.raises(ValueError, match="hop counts 1..5"):
        generate("relational_data", 0, 1, [6])
    with pytest.raises(ValueError, match="depths >= 1"):
        generate("multiverse_math", 0, 1, [0])
    with pytest.raises(ValueError, match="per-level"):
        generate("typewriter_1", 0, 0)


def test_generate_command_writes_a_loadable_dataset(tmp_path, capsys):
    out = tmp_path / "sub" / "ladder.jsonl"
    argv = ["generate", "--env", "multiverse_math", "--seed", "1", "--per-level", "2", "--levels", "1-3",
            "--out", str(out)]
    assert main(argv) == 0
    examples = load_examples(out, get_benchmark("multiverse_math"))
    assert [ex.metadata["difficulty"] for ex in examples] == [1, 1, 2, 2, 3, 3]
    assert "wrote 6 examples" in capsys.readouterr().out
    run_dir = tmp_path / "run"
    assert main(["run", "--env", "multiverse_math", "--agent", "oracle", "--dataset", str(out),
                 "--out", str(run_dir), "--no-progress"]) == 0


def test_generate_command_bad_input_exits_2(tmp_path, capsys):
    out = str(tmp_path / "x.jsonl")
    assert main(["generate", "--env", "relational_dat", "--out", out]) == 2
    assert "did you mean" in capsys.readouterr().err.lower()
    assert main(["generate", "--env", "relational_data", "--levels", "0-9", "--out", out]) == 2
    assert not (tmp_path / "x.jsonl").exists()

"""Statistics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from toolgym.records import BINARY, Example, Measure, Score
from toolgym.stats import (
    clustered_estimate,
    estimate,
    mcnemar,
    paired_bootstrap,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)
from toolgym.views.analysis import breakdown, grader_stats

# 3 examples x 4 trials: A passes 3 of 4, B none, C all.
TABLE = {"A": [1, 1, 0, 1], "B": [0, 0, 0, 0], "C": [1, 1, 1, 1]}


def table_scores(grader: str = "final_state") -> list[Score]:
    return [
        Score(example_id=eid, trial=t, grader=grader, value=float(v))
        for eid, values in TABLE.items()
        for t, v in enumerate(values)
    ]


def test_wilson_interval_for_7_of_10():
    low, high = wilson_interval(7, 10)
    assert round(low, 4) == 0.3968 and round(high, 4) == 0.8922


def test_wilson_interval_edges_and_errors():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and round(high, 4) == 0.2775  # z²/(n+z²) = 3.8415/13.8415
    with pytest.raises(ValueError):
        wilson_interval(1, 0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_pass_hat_k_on_the_3_by_4_table():
    # pass^k per example = C(c,k)/C(4,k): A (c=3): 3/4, 3/6, 1/4, 0; B: 0; C: 1.
    expected = {1: (3 / 4 + 0 + 1) / 3, 2: (3 / 6 + 0 + 1) / 3, 3: (1 / 4 + 0 + 1) / 3, 4: (0 + 0 + 1) / 3}
    for k, value in expected.items():
        got = sum(pass_hat_k(4, sum(v), k) for v in TABLE.values()) / 3
        assert math.isclose(got, value)
    stats = grader_stats("typewriter_1", "final_state", table_scores(), BINARY)
    assert stats.trials == 4 and stats.n_examples == 3 and stats.pass_rate == pytest.approx(7 / 12)
    assert {k: round(v, 4) for k, v in stats.pass_hat_k.items()} == {1: 0.5833, 2: 0.5, 3: 0.4167, 4: 0.3333}


def test_pass_at_k_on_the_3_by_4_table():
    # pass@k per example = 1 - C(4-c,k)/C(4,k): A (c=3): 3/4, 1, 1, 1; B: 0; C: 1.
    stats = grader_stats("typewriter_1", "final_state", table_scores(), BINARY)
    assert {k: round(v, 4) for k, v in stats.pass_at_k.items()} == {1: 0.5833, 2: 0.6667, 3: 0.6667, 4: 0.6667}
    assert pass_at_k(10, 0, 3) == 0.0 and pass_at_k(10, 10, 3) == 1.0
    assert math.isclose(pass_at_k(5, 2, 2), 1 - 3 / 10)  # C(3,2)/C(5,2)
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_clustered_standard_error_by_hand():
    # mean 7/12; residual sums per example: A 3-28/12 = 2/3, B -7/3, C 5/3;
    # squares sum to 78/9; times C/(C-1) = 3/2 gives 13; SE = sqrt(13)/12.
    values = [v for vs in TABLE.values() for v in vs]
    clusters = [eid for eid, vs in TABLE.items() for _ in vs]
    est = clustered_estimate(values, clusters)
    assert math.isclose(est.mean, 7 / 12)
    assert math.isclose(est.stderr, math.sqrt(13) / 12)
    assert est.n == 12
    naive = estimate(values)
    assert est.stderr > naive.stderr  # trials of one example are correlated


def test_clustered_estimate_with_one_trial_is_the_plain_estimate_and_counts_unscored():
    est = clustered_estimate([1.0, 0.0, 1.0, None], ["a", "b", "c", "d"], n_errors=2)
    plain = estimate([1.0, 0.0, 1.0])
    assert (est.mean, est.stderr, est.n, est.n_errors, est.n_unscored) == (plain.mean, plain.stderr, 3, 2, 1)
    single = clustered_estimate([1.0, 0.0], ["a", "a"])
    assert single.mean == 0.5 and math.isnan(single.stderr)
    with pytest.raises(ValueError):
        clustered_estimate([1.0], ["a", "b"])


def test_grader_stats_wilson_uses_the_effective_sample_size():
    stats = grader_stats("typewriter_1", "final_state", table_scores(), BINARY)
    # design effect = SE_clustered² / (p(1-p)/n) = (13/144) / ((7/12)(5/12)/12) = 156/35
    n_eff = 12 / (156 / 35)
    assert stats.wilson == pytest.approx(wilson_interval(7 / 12 * n_eff, n_eff))
    assert stats.wilson[1] - stats.wilson[0] > wilson_interval(7, 12)[1] - wilson_interval(7, 12)[0]


def test_grader_without_a_pass_rule_has_no_pass_rate():
    loglik = Measure(kind="continuous", pass_if=None)
    stats = grader_stats("typewriter_1", "loglik", table_scores("loglik"), loglik)
    assert stats.pass_rate is None and stats.wilson is None and stats.pass_hat_k == {}
    assert stats.estimate.mean == pytest.approx(7 / 12)


def test_pass_rates_follow_the_pass_rule_not_the_values():
    # a lower-is-better count passing at 0: the 0 values of TABLE are the passes
    wasted = Measure(kind="continuous", direction="lower", pass_if="<=", threshold=0.0)
    stats = grader_stats("typewriter_1", "wasted", table_scores("wasted"), wasted)
    assert stats.pass_rate == pytest.approx(5 / 12)
    # pass^k per example = C(c,k)/C(4,k) with c = zeros: A (c=1): 1/4, 0...; B (c=4): 1; C: 0.
    assert {k: round(v, 4) for k, v in stats.pass_hat_k.items()} == {1: 0.4167, 2: 0.3333, 3: 0.3333, 4: 0.3333}
    assert stats.pass_at_k[4] == pytest.approx(2 / 3)  # A and B pass at least once


def test_mcnemar_exact_and_chi_square():
    exact = mcnemar(1, 6)
    assert exact.method == "mcnemar_exact" and math.isclose(exact.p_value, 2 * (1 + 7) / 2**7)
    assert mcnemar(0, 0).p_value == 1.0
    assert mcnemar(5, 5).p_value == 1.0
    chi = mcnemar(10, 30)
    assert chi.method == "mcnemar_chi2"
    assert math.isclose(chi.p_value, math.erfc(math.sqrt(19**2 / 40 / 2)))


def test_paired_bootstrap_is_seeded_and_centred_on_the_difference():
    a = [0.0, 0.0, 1.0, 1.0, 0.5]
    b = [1.0, 1.0, 1.0, 1.0, 0.5]
    first = paired_bootstrap(a, b, n_boot=2000, seed=3)
    assert first == paired_bootstrap(a, b, n_boot=2000, seed=3)
    assert math.isclose(first.diff, 0.4)
    assert first.low <= 0.4 <= first.high and first.low >= 0.0
    # P*(mean diff <= 0) = P(no resampled 1-difference) = 0.6^5 = 0.078, so p is about 0.156.
    assert abs(first.p_value - 2 * 0.6**5) < 0.03
    same = paired_bootstrap(a, a, n_boot=500)
    assert same.diff == 0.0 and same.p_value == 1.0
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_breakdown_by_steps_and_difficulty():
    examples = {
        "A": Example(id="A", input="x", expected_steps=["t"], metadata={"difficulty": "easy"}),
        "B": Example(id="B", input="x", expected_steps=["t", "t", "t"], metadata={"difficulty": "hard"}),
        "C": Example(id="C", input="x", expected_steps=["t"], metadata={}),
    }
    rows = breakdown(examples, table_scores(), "final_state", "n_steps")
    assert [(r.group, r.n_examples) for r in rows] == [(1, 2), (3, 1)]
    assert math.isclose(rows[0].estimate.mean, 7 / 8) and rows[1].estimate.mean == 0.0
    by_level = breakdown(examples, table_scores(), "final_state", "difficulty")
    assert [(r.group, r.estimate.mean) for r in by_level] == [("easy", 0.75), ("hard", 0.0)]
    with pytest.raises(ValueError, match="unknown breakdown"):
        breakdown(examples, [], "final_state", "length")


def test_one_example_with_several_trials_prints_no_nan(tmp_path, capsys):
    from toolgym.cli import main

    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--trials", "7",
                 "--out", str(out), "--no-progress"]) == 0
    assert main(["grade", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nan" not in printed and "1.000 (n=1)" in printed

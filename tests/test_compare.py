"""`compare` and the run statistics on real run directories made by the oracle and a scripted
model (typewriter_1, first six examples: a, aa, aaa, aaaa, b, hi)."""

from __future__ import annotations

import json
import math

import pytest
from rich.console import Console

from toolgym.api import load_run
from toolgym.cli import main
from toolgym.views.analysis import compare_runs, run_report
from toolgym.views.tables import print_comparison, print_run_report

# The scripted model types "a" whatever it is asked, then stops.
SCRIPT = {"turns": [{"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]}, {"content": "done"}]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    script = root / "script.json"
    script.write_text(json.dumps(SCRIPT))
    common = ["--env", "typewriter_1", "--limit", "6", "--no-progress"]
    assert main(["run", *common, "--agent", "oracle", "--out", str(root / "oracle")]) == 0
    assert main(["run", *common, "--agent", "oracle", "--trials", "2", "--out", str(root / "oracle2")]) == 0
    assert main(["run", *common, "--model", f"scripted:{script}", "--out", str(root / "scripted")]) == 0
    return root


def by_grader(comparison):
    return {g.grader: g for g in comparison.graders}


def test_compare_uses_mcnemar_for_single_pass_fail_scores(runs):
    comp = compare_runs(runs / "oracle", runs / "scripted")
    assert comp.same_dataset and comp.examples_only_a == comp.examples_only_b == []
    rows = by_grader(comp)
    final = rows["final_state"]
    assert (final.mean_a, final.n_paired) == (1.0, 6)
    assert math.isclose(final.mean_b, 1 / 6)  # only "a" is typed right
    assert (final.test.method, final.test.b, final.test.c) == ("mcnemar_exact", 5, 0)
    assert math.isclose(final.test.p_value, 2 / 2**5)
    assert [e for e, _, _ in final.flipped] == ["tw-01-aa", "tw-02-aaa", "tw-03-aaaa", "tw-04-b", "tw-05-hi"]
    steps = rows["steps_exact"]  # "b" also takes one type_letter call
    assert (steps.test.b, steps.test.c) == (4, 0) and math.isclose(steps.test.p_value, 2 / 2**4)
    assert final.better == steps.better == "A"  # higher is better
    ratio = rows["step_ratio"]
    assert ratio.test.method == "paired_bootstrap"
    assert ratio.test.low <= ratio.mean_b - ratio.mean_a <= ratio.test.high < 0
    # step_ratio is two-sided (best at 1): the scripted run's smaller ratios (it stops early)
    # are farther from 1 than the oracle's exact 1, so A is the better run, never B for making
    # too few calls; its flips are the examples whose ratio left the optimal 1 ("b" is typed
    # with one wrong call: ratio 1, so it flips final_state but not step_ratio)
    assert ratio.mean_b < ratio.mean_a and ratio.better == "A"
    assert (ratio.measure.direction, ratio.measure.target) == ("target", 1.0)
    assert [e for e, _, _ in ratio.flipped] == [e for e, _, _ in steps.flipped] == [
        "tw-01-aa", "tw-02-aaa", "tw-03-aaaa", "tw-05-hi",
    ]
    assert all(a == 1.0 and b < 1.0 for _, a, b in ratio.flipped)


def test_compare_is_antisymmetric_and_switches_to_bootstrap_with_trials(runs):
    forward = by_grader(compare_runs(runs / "oracle", runs / "scripted"))["final_state"]
    backward = by_grader(compare_runs(runs / "scripted", runs / "oracle"))["final_state"]
    assert backward.mean_b - backward.mean_a == -(forward.mean_b - forward.mean_a)
    assert (backward.test.b, backward.test.c, backward.test.p_value) == (0, 5, forward.test.p_value)
    with_trials = by_grader(compare_runs(runs / "oracle2", runs / "scripted", n_boot=500))["final_state"]
    assert with_trials.test.method == "paired_bootstrap" and with_trials.n_paired == 6


def test_compare_cli_prints_flips_and_rejects_unrelated_runs(runs, tmp_path, capsys):
    assert main(["compare", str(runs / "oracle"), str(runs / "scripted")]) == 0
    out = capsys.readouterr().out
    assert "final_state" in out and "exact" in out and "tw-05-hi (1→0)" in out
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "zzz", "input": "z", "expected_steps": ["type_letter"],
                                 "expected_calls": [{"name": "type_letter", "arguments": {"letter": "z"}}],
                                 "expected_state": {"paper": "z"}}) + "\n")
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--dataset", str(other), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["compare", str(runs / "oracle"), str(tmp_path / "o")]) == 2
    assert "share no example" in " ".join(capsys.readouterr().err.split())


def test_run_report_with_trials(runs):
    report = run_report(load_run(runs / "oracle2"))
    stats = {s.grader: s for s in report.stats}
    assert stats["final_state"].trials == 2 and stats["final_state"].pass_hat_k == {1: 1.0, 2: 1.0}
    assert stats["final_state"].pass_rate == 1.0
    ratio = stats["step_ratio"]  # a ratio with a pass rule (== 1): its pass rate counts optimal ratios
    assert ratio.measure.kind == "continuous" and ratio.pass_rate == 1.0 and ratio.pass_hat_k == {1: 1.0, 2: 1.0}
    assert set(report.breakdowns) == {"n_steps"}  # typewriter difficulty equals the step count
    assert [r.group for r in report.breakdowns["n_steps"]["final_state"]] == [1, 2, 3, 4]
    console = Console(record=True, width=120)
    print_run_report(report, console)
    text = console.export_text()
    assert "pass^2" in text and "by number of expected steps" in text


def test_run_report_breakdown_shows_failure_growing_with_steps(runs):
    report = run_report(runs / "scripted")
    rows = report.breakdowns["n_steps"]["final_state"]
    assert [(r.group, r.estimate.mean) for r in rows] == [(1, 0.5), (2, 0.0), (3, 0.0), (4, 0.0)]
    console = Console(record=True, width=120)
    print_comparison(compare_runs(runs / "oracle", runs / "scripted"), console)
    assert "b=5 c=0" in console.export_text()

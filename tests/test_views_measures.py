"""Every view reads pass and fail from the grader's declared Measure: a lower-is-better grader
that passes at 0 ("wasted_calls") must not make perfect trajectories look failed in ``show
--failed``, the summary, ``compare``, the statistics or the HTML report."""

from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import dataclass
from typing import ClassVar

import pytest
from rich.console import Console

import toolgym
from toolgym import cli
from toolgym.graders import make_score
from toolgym.records import Example, Measure, Score, Trajectory
from toolgym.views.analysis import compare_runs, run_report
from toolgym.views.report import build_report
from toolgym.views.rundata import RunView, load_runs, measure_for
from toolgym.views.summary import summary_cells, summary_headers, summary_records

WASTED = Measure(kind="continuous", direction="lower", pass_if="<=", threshold=0.0)


@dataclass(frozen=True)
class WastedCalls:
    """Tool calls beyond the expected number (0 is perfect; lower is better)."""

    name: ClassVar[str] = "wasted_calls"
    measure: ClassVar[Measure] = WASTED

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        wasted = max(0, len(trajectory.tool_steps) - len(example.expected_steps))
        return make_score(self, trajectory, float(wasted), f"{wasted} calls beyond the expected")


def _call(letter: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": letter}}]}


# typewriter_1's test set starts a, aa, aaa
SCRIPT = {
    "a": [_call("a"), "done"],  # perfect
    "aa": [_call("ab"), _call("a"), _call("a"), "done"],  # a rejected call first: right paper, 1 wasted
    "aaa": [_call("a"), _call("a"), _call("a"), _call("a"), "done"],  # one letter too many
}
GRADERS = [WastedCalls, "final_state"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("measures")
    script = root / "script.json"
    script.write_text(json.dumps({"by_input": SCRIPT}), encoding="utf-8")
    common = {"dataset": "test", "limit": 3, "graders": GRADERS}
    toolgym.evaluate("typewriter_1", agent="oracle", out=root / "oracle", **common)
    toolgym.evaluate(
        "typewriter_1", agent="tool_calling", model=f"scripted:{script}", out=root / "scripted", **common
    )
    return {"oracle": root / "oracle", "scripted": root / "scripted"}


def wasted_by_example(directory) -> dict[str, float]:
    """wasted_calls computed here from the trajectories and the dataset, not read from scores."""
    run = toolgym.load_run(directory)
    return {
        t.example_id: max(0, len(t.tool_steps) - len(run.examples[t.example_id].expected_steps))
        for t in run.trajectories
    }


def shown_examples(text: str) -> set[str]:
    return set(re.findall(r"· example (\S+) · trial", text))


def cli_output(monkeypatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(cli, "console", Console(file=io.StringIO(), width=300))
    code = cli.main(list(args))
    return code, cli.console.file.getvalue()


def test_the_run_records_the_declared_measure_and_how_to_find_the_grader(runs):
    record = toolgym.load_run(runs["scripted"]).record
    assert record.measures["wasted_calls"] == WASTED
    assert record.extensions["grader:wasted_calls"].spec == f"{WastedCalls.__module__}:WastedCalls"
    wasted = wasted_by_example(runs["scripted"])
    assert sorted(v == 0 for v in wasted.values()) == [False, False, True]  # the fixture is what it claims


def test_show_failed_by_wasted_calls_lists_only_wasteful_trajectories(runs, monkeypatch):
    wasted = wasted_by_example(runs["scripted"])
    code, out = cli_output(monkeypatch, "show", str(runs["scripted"]), "--failed", "--grader", "wasted_calls")
    assert code == 0
    assert shown_examples(out) == {e for e, w in wasted.items() if w > 0}
    assert "tw-00-a" not in shown_examples(out)  # perfect: 0 wasted calls passes "≤ 0"
    assert out.startswith(f"{sum(w > 0 for w in wasted.values())} failed trajectories")
    assert "lower, pass ≤ 0" in out
    # the oracle wastes nothing: 0 is a pass, not a failure, by every grader
    assert set(wasted_by_example(runs["oracle"]).values()) == {0}
    code, out = cli_output(monkeypatch, "show", str(runs["oracle"]), "--failed")
    assert code == 0 and out.startswith("0 failed trajectories") and "nothing failed" in out
    code, out = cli_output(monkeypatch, "show", str(runs["oracle"]), "--failed", "--grader", "wasted_calls")
    assert code == 0 and "nothing failed" in out


def test_show_failed_without_grader_combines_every_pass_rule(runs, monkeypatch):
    run = toolgym.load_run(runs["scripted"])
    wasted = wasted_by_example(runs["scripted"])
    wrong_paper = {t.example_id for t in run.trajectories if t.final_state != run.examples[t.example_id].expected_state}
    code, out = cli_output(monkeypatch, "show", str(runs["scripted"]), "--failed")
    assert code == 0
    assert shown_examples(out) == {e for e, w in wasted.items() if w > 0} | wrong_paper
    code, out = cli_output(monkeypatch, "show", str(runs["scripted"]), "--failed", "--grader", "final_state")
    assert shown_examples(out) == wrong_paper and "tw-01-aa" not in wrong_paper  # right paper, one call wasted


def test_summary_counts_passes_by_the_rule(runs, monkeypatch):
    wasted = wasted_by_example(runs["scripted"])
    cells = summary_cells(load_runs([runs["oracle"], runs["scripted"]], with_examples=False))
    rows = [dict(zip(summary_headers(), r, strict=True)) for r in summary_records(cells)]
    by_run = {(r["run"], r["grader"]): r for r in rows}
    oracle = by_run[("oracle", "wasted_calls")]
    scripted = next(r for (run, g), r in by_run.items() if g == "wasted_calls" and run != "oracle")
    assert oracle["passed"] == "3/3" and oracle["measure"] == "lower, pass ≤ 0"
    assert scripted["passed"] == f"{sum(w == 0 for w in wasted.values())}/3"
    code, out = cli_output(monkeypatch, "summary", str(runs["oracle"]), str(runs["scripted"]))
    assert code == 0 and "lower, pass ≤ 0" in out and "3/3" in out


def test_compare_prefers_fewer_wasted_calls_and_flips_by_the_rule(runs, monkeypatch):
    wasted = wasted_by_example(runs["scripted"])
    comp = compare_runs(runs["oracle"], runs["scripted"], n_boot=200)
    row = next(g for g in comp.graders if g.grader == "wasted_calls")
    assert row.measure == WASTED
    assert row.mean_a == 0.0 and row.mean_b == pytest.approx(sum(wasted.values()) / 3)
    assert row.better == "A"  # lower is better, though B's mean is higher
    assert [e for e, _, _ in row.flipped] == sorted(e for e, w in wasted.items() if w > 0)
    backward = next(g for g in compare_runs(runs["scripted"], runs["oracle"], n_boot=200).graders
                    if g.grader == "wasted_calls")
    assert backward.better == "B"
    code, out = cli_output(monkeypatch, "compare", str(runs["oracle"]), str(runs["scripted"]), "--n-boot", "200")
    assert code == 0 and "A (lower)" in out and f"wasted_calls: {len(row.flipped)} flipped (A→B): tw-01-aa (0→1)" in out


def test_statistics_pass_rate_follows_the_rule(runs):
    wasted = wasted_by_example(runs["scripted"])
    stats = {s.grader: s for s in run_report(runs["scripted"]).stats}
    assert stats["wasted_calls"].pass_rate == pytest.approx(sum(w == 0 for w in wasted.values()) / 3)
    assert stats["wasted_calls"].pass_hat_k[1] == pytest.approx(stats["wasted_calls"].pass_rate)
    assert {s.grader: s.pass_rate for s in run_report(runs["oracle"]).stats} == {
        "wasted_calls": 1.0, "final_state": 1.0,
    }


def test_report_marks_failures_by_the_rule(runs, monkeypatch, tmp_path):
    result = build_report([runs["oracle"], runs["scripted"]], tmp_path / "r.html")
    html = result.path.read_text(encoding="utf-8")
    index = json.loads(re.search(r'id="toolgym-index">(.*?)</script>', html, re.DOTALL).group(1))
    g = str(index["graders"].index("wasted_calls"))
    assert index["rules"][int(g)] == "≤ 0"
    wasted = wasted_by_example(runs["scripted"])
    oracle_items = [it for it in index["items"] if it[0] == 0]
    scripted_items = [it for it in index["items"] if it[0] == 1]
    assert all(it[6] == 0 and it[9][g] == 1 for it in oracle_items)
    assert {it[1]: it[9][g] for it in scripted_items} == {e: int(w == 0) for e, w in wasted.items()}
    # the report's failure filter agrees with show --failed
    _, out = cli_output(monkeypatch, "show", str(runs["scripted"]), "--failed")
    assert {it[1] for it in scripted_items if it[6] == 1} == shown_examples(out)


def test_old_run_without_recorded_measures_finds_the_grader_class(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs["oracle"], old)
    data = json.loads((old / "run.json").read_text(encoding="utf-8"))
    del data["measures"], data["schema_version"]  # as written by toolgym before measures
    (old / "run.json").write_text(json.dumps(data), encoding="utf-8")
    run = toolgym.load_run(old, with_examples=False)
    assert run.record.measures == {}
    assert measure_for(run, "wasted_calls") == WASTED  # from the installed class, by its spec
    assert not RunView(run).failed(run.trajectories[0])
    # a grader that can no longer be found: its 0/1 values make it binary, others continuous
    data["extensions"]["grader:wasted_calls"]["spec"] = "no_such_module:Nothing"
    (old / "run.json").write_text(json.dumps(data), encoding="utf-8")
    lost = toolgym.load_run(old, with_examples=False)
    assert measure_for(lost, "wasted_calls").kind == "binary"  # the oracle's values are all 0
    i = next(i for i, s in enumerate(lost.scores) if s.grader == "wasted_calls")
    lost.scores[i] = lost.scores[i].model_copy(update={"value": 2.0})
    inferred = measure_for(lost, "wasted_calls")
    assert (inferred.kind, inferred.direction, inferred.pass_fail) == ("continuous", "higher", False)

"""`show` and `summary`: trajectories step by step in the terminal, and the summary table."""

from __future__ import annotations

import io
import json

import pytest
from report_runs import ARG_PAYLOAD, ID_PAYLOAD, SCRIPT_PAYLOAD, make_runs
from rich.console import Console

from toolgym import cli
from toolgym.api import load_run
from toolgym.records import BINARY, Measure, Score, ToolCallSpec, ToolStep, Trajectory
from toolgym.runio import Run, RunRecord
from toolgym.stats import summarize
from toolgym.views.rundata import (
    RunView,
    first_call_divergence,
    is_failed,
    load_runs,
    measure_for,
    run_label,
)
from toolgym.views.show import show
from toolgym.views.summary import (
    COLUMNS,
    Column,
    add_column,
    summary_cells,
    summary_headers,
    summary_records,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("runs"))


def plain_console(width: int = 200) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width), buf


def step(name: str, **args) -> ToolStep:
    return ToolStep(call_id="c", name=name, arguments=args)


def test_divergence_on_name_argument_missing_and_extra_calls():
    expected = [ToolCallSpec(name="a", arguments={"x": 1}), ToolCallSpec(name="b", arguments={})]
    assert first_call_divergence(expected, [step("a", x=1), step("b")]) is None
    wrong_arg = first_call_divergence(expected, [step("a", x=2), step("b")])
    assert wrong_arg.index == 0 and '{"x": 2}' in wrong_arg.reason
    wrong_name = first_call_divergence(expected, [step("a", x=1), step("c")])
    assert wrong_name.index == 1 and "expected b, got c" in wrong_name.reason
    missing = first_call_divergence(expected, [step("a", x=1)])
    assert missing.index == 1 and "no more calls" in missing.reason
    extra = first_call_divergence(expected, [step("a", x=1), step("b"), step("b")])
    assert extra.index == 2 and "beyond the 2 expected" in extra.reason
    # names only (from steps_exact details), unordered examples, unknown expectation
    assert first_call_divergence(["a", "b"], [step("a", x=9), step("b")]) is None
    assert first_call_divergence(expected, [step("b"), step("a", x=1)], order_matters=False) is None
    assert first_call_divergence(None, [step("a")]) is None


def test_run_label_uses_file_name_of_model_paths():
    def label(model):
        return run_label(RunRecord(env="e", agent={"agent": "tool_calling"}, model=model))

    assert run_label(RunRecord(env="e", agent={"agent": "oracle"})) == "oracle"
    assert label("scripted:/x/y/s.json") == "tool_calling · scripted:s.json"
    assert label("openai:gpt-4o-mini") == "tool_calling · openai:gpt-4o-mini"


def test_failures_follow_the_measures_and_status(runs):
    run = RunView(load_run(runs["scripted"]))
    assert run.measures["step_ratio"] == Measure(
        kind="continuous", direction="target", target=1.0, pass_if="==", threshold=1.0,
        reference="LangChain tool-usage benchmark, '# steps / # expected steps'",
    )
    assert run.pass_fail_graders() == ["final_state", "steps_exact", "step_ratio"]
    failed = {t.example_id for t in run.trajectories if run.failed(t)}
    assert failed == {ID_PAYLOAD, "tw-2-cat", "tw-3-dog", "tw-4-hi", "tw-5-ok", "tw-6-zz"}
    by_state = {t.example_id for t in run.trajectories if run.failed(t, grader="final_state")}
    assert by_state == {ID_PAYLOAD, "tw-3-dog", "tw-4-hi", "tw-6-zz"}  # cat and ok end with the right paper
    # step_ratio fails every completed trajectory whose ratio is not the optimal 1
    ratios = {
        t.example_id: s.value for t in run.trajectories for s in run.scores_of(t) if s.grader == "step_ratio"
    }
    by_ratio = {t.example_id for t in run.trajectories if run.failed(t, grader="step_ratio")}
    completed = {t.example_id for t in run.trajectories if t.status == "completed"}
    not_one = {e for e, v in ratios.items() if v is not None and v != 1.0}
    assert by_ratio == (not_one & completed) | ({t.example_id for t in run.trajectories} - completed)
    assert "tw-0-a" not in by_ratio and "tw-4-hi" in by_ratio  # ratio 1/2


def test_is_failed_ignores_graders_without_a_pass_rule_and_unscored_values():
    traj = Trajectory(example_id="x", env="e", agent="a", status="completed")
    loglik = Measure(kind="continuous", pass_if=None)
    scores = [Score(example_id="x", grader="ll", value=-9.0), Score(example_id="x", grader="ok", value=None)]
    assert not is_failed(traj, scores, {"ll": loglik, "ok": BINARY})
    assert not is_failed(traj, scores, {"ll": loglik, "ok": BINARY}, grader="ll")
    assert is_failed(traj.model_copy(update={"status": "step_limit"}), [], {})
    lower = Measure(kind="continuous", direction="lower", pass_if="<=", threshold=0.0)
    assert is_failed(traj, [Score(example_id="x", grader="w", value=2.0)], {"w": lower})
    assert not is_failed(traj, [Score(example_id="x", grader="w", value=0.0)], {"w": lower})


def test_measure_for_prefers_the_record_then_the_grader_class_then_the_values():
    def run_with(values, measures=None, graders=("mystery",)):
        record = RunRecord(env="typewriter_1", graders=list(graders), measures=measures or {})
        scores = [Score(example_id=str(i), grader=graders[0], value=v) for i, v in enumerate(values)]
        return Run(None, record, [], scores)

    lower = Measure(kind="continuous", direction="lower", pass_if="<=", threshold=0.0)
    assert measure_for(run_with([1.0, 0.0], {"mystery": lower}), "mystery") == lower
    assert measure_for(run_with([1.0, 0.0]), "mystery") == BINARY  # an old run of 0/1 values
    inferred = measure_for(run_with([0.5, 2.0]), "mystery")
    assert (inferred.kind, inferred.direction, inferred.pass_fail) == ("continuous", "higher", False)
    # an old run of step_ratio: the installed grader class says what it measures
    ratio = measure_for(run_with([1.0, 0.0], graders=("step_ratio",)), "step_ratio")
    assert (ratio.direction, ratio.target, ratio.pass_if, ratio.threshold) == ("target", 1.0, "==", 1.0)


def test_show_prints_steps_arguments_results_divergence_and_scores(runs):
    console, buf = plain_console()
    assert show(runs["scripted"], example="tw-2-cat", console=console) == 0
    out = buf.getvalue()
    assert "\x1b[" not in out  # not a terminal: no colour codes
    assert "input: cat" in out
    assert 'type_letter({"letter": "c"}) ⇒ OK' in out
    assert ARG_PAYLOAD in out and "[tool error]" in out
    lines = out.splitlines()
    marked = [i for i, line in enumerate(lines) if line.startswith("▶")]
    assert len(marked) == 1 and ARG_PAYLOAD in lines[marked[0]]
    assert "first divergence: call 2" in lines[marked[0] + 1]
    assert "score steps_exact = 0.0: step 4: expected (end), got type_letter" in out
    assert "score step_ratio = 1.3333" in out
    assert "(0.00 s)" in out or "s)" in out  # latency shown per model turn


def test_show_failed_with_grader_and_payload_printed_verbatim(runs):
    console, buf = plain_console(width=400)
    assert show(runs["scripted"], console=console, failed=True, grader="final_state") == 0
    out = buf.getvalue()
    assert out.startswith("4 failed trajectories") and "by grader final_state, higher, pass ≥ 1" in out
    assert SCRIPT_PAYLOAD in out  # markup-like text is printed as it is, never interpreted
    assert "tw-5-ok" not in out and "tw-3-dog" in out
    assert "error: IndexError: scripted model has no turn 2" in out
    assert "no more calls" in out  # hi stopped early: divergence after the last call


def test_show_failed_of_oracle_is_empty_and_bad_names_exit_2(runs):
    console, buf = plain_console()
    assert show(runs["oracle"], console=console, failed=True) == 0  # nothing failed is no error
    assert buf.getvalue().startswith("0 failed trajectories")
    assert "nothing failed" in buf.getvalue()
    assert show(runs["oracle"], console=console, example="nope") == 2
    assert show(runs["oracle"], console=console, grader="nope") == 2
    assert "no grader 'nope'" in buf.getvalue()


def test_show_malformed_call_and_tokens(runs):
    console, buf = plain_console(width=300)
    show(runs["scripted"], example="tw-5-ok", console=console)
    out = buf.getvalue()
    assert "MALFORMED: arguments of 'type_letter' must be a JSON object, got '{not json' (not valid JSON)  raw: {not json" in out
    assert "first divergence: call 1" in out


def test_summary_cells_match_runner_summarize(runs):
    loaded = load_runs(runs.values(), with_examples=False)
    cells = summary_cells(loaded)
    assert [c.env for c in cells] == sorted(c.env for c in cells)
    scripted = next(r for r in loaded if r.directory == runs["scripted"])
    expected = summarize(scripted.env, scripted.trajectories, scripted.scores, scripted.graders)
    got = [c.estimate for c in cells if c.directory == runs["scripted"]]
    assert got == [row.estimate for row in expected]
    state = next(c for c in cells if c.directory == runs["scripted"] and c.grader == "final_state")
    assert (state.estimate.n, state.estimate.n_errors) == (6, 1) and state.estimate.mean == pytest.approx(0.5)
    record = dict(zip(summary_headers(), summary_records([state])[0], strict=True))
    assert record["mean ± stderr"] == "0.500 ± 0.204"
    assert (record["passed"], record["measure"]) == ("3/6", "higher, pass ≥ 1")
    ratio = next(c for c in cells if c.directory == runs["scripted"] and c.grader == "step_ratio")
    ones = sum(s.value == 1.0 for s in ratio.scores)
    assert dict(zip(summary_headers(), summary_records([ratio])[0], strict=True))["passed"] == f"{ones}/6"


def test_added_column_shows_in_summary_cli(runs, monkeypatch, capsys):
    monkeypatch.setattr(cli, "console", Console(file=io.StringIO(), width=250))
    monkeypatch.setattr("toolgym.views.summary.COLUMNS", list(COLUMNS))
    add_column(Column("scored ids", lambda c: str(len({s.example_id for s in c.scores}))), after="n")
    with pytest.raises(ValueError, match="already exists"):
        add_column(Column("n", lambda c: ""))
    assert cli.main(["summary", str(runs["scripted"]), str(runs["oracle"])]) == 0
    out = cli.console.file.getvalue()
    header = next(line for line in out.splitlines() if "scored ids" in line)
    assert header.index("scored ids") < header.index("errors")
    assert "0.333 ± 0.192" in out and "tool_calling · scripted:script.json" in out


def test_summary_cli_rejects_a_directory_without_run_json(tmp_path, capsys):
    assert cli.main(["summary", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "run.json: not found" in err


def test_show_cli_flags(runs, monkeypatch):
    monkeypatch.setattr(cli, "console", Console(file=io.StringIO(), width=250))
    assert (
        cli.main(["show", str(runs["scripted"]), "--failed", "--grader", "steps_exact", "--limit", "2"]) == 0
    )
    out = cli.console.file.getvalue()
    assert out.startswith("5 failed trajectories") and "... 3 more (raise --limit)" in out
    assert json.dumps({"letter": "c"}) in out


def test_divergence_treats_true_and_1_as_different_arguments():
    expected = [ToolCallSpec(name="a", arguments={"flag": True, "n": [1, {"k": 2}]})]
    assert first_call_divergence(expected, [step("a", flag=True, n=[1, {"k": 2}])]) is None
    assert first_call_divergence(expected, [step("a", flag=1, n=[1, {"k": 2}])]).index == 0


def test_show_tool_without_arguments_and_float_scores(runs):
    console, buf = plain_console()
    assert show(runs["oracle26"], example="tw-02-aaa", console=console) == 0
    out = buf.getvalue()
    assert out.count(" a ⇒ OK") == 3 and "a()" not in out.split("expected calls")[0]
    assert "score steps_exact = 1.0: 3 tool names as expected (arguments not compared)" in out

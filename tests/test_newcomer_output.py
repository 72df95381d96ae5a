"""What a newcomer sees: tables that fit 80 columns in a pipe without cutting a name, no
``nan`` standard error, the two-sided step_ratio in every view, and messages that point to the
next step (closest example ids, nothing failed, a subcommand's own usage, a lowered setting,
third-party noise kept out of the way)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from toolgym.benchmark import ReportTable
from toolgym.cli import main, print_report_tables
from toolgym.records import Measure
from toolgym.stats import Estimate
from toolgym.views.analysis import compare_runs
from toolgym.views.fit import Col, fitted_tables

ROOT = Path(__file__).resolve().parents[1]
GRADERS = ("final_state", "steps_exact", "step_ratio")


def _cli(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command line in a child process whose output is a pipe, at COLUMNS=80."""
    environ = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "run_agent.py"), *argv], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300)


def _fits(text: str, width: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, too_wide
    assert "…" not in text, text  # rich's mark of a cut cell


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The oracle on six typewriter strings, and a scripted model that answers at once (it makes
    no call: a step_ratio of 0, the worst, not the best)."""
    base = tmp_path_factory.mktemp("newcomer")
    (base / "idle.json").write_text(json.dumps(["Done."]))
    made = {}
    for name, extra in (("oracle", ["--agent", "oracle"]), ("idle", ["--model", f"scripted:{base / 'idle.json'}"])):
        out = base / f"{name}-with-a-rather-long-run-directory-name"
        assert main(["run", "--env", "typewriter_1", *extra, "--limit", "6", "--out", str(out), "--no-progress"]) == 0
        made[name] = out
    return made


def test_summary_compare_show_and_grade_fit_80_columns_in_a_pipe(runs):
    cwd = runs["oracle"].parent
    summary = _cli("summary", str(runs["oracle"]), str(runs["idle"]), cwd=cwd)
    assert summary.returncode == 0, summary.stderr
    _fits(summary.stdout)
    for name in ("typewriter_1", "oracle", "scripted:idle.json", *GRADERS, "unscored", "best at 1"):
        assert name in summary.stdout, name
    compared = _cli("compare", str(runs["idle"]), str(runs["oracle"]), cwd=cwd)
    assert compared.returncode == 0, compared.stderr
    _fits(compared.stdout)
    assert all(g in compared.stdout for g in GRADERS) and "flips" in compared.stdout
    shown = _cli("show", str(runs["idle"]), cwd=cwd)
    _fits(shown.stdout)
    assert "trial 0 · completed" in " ".join(shown.stdout.split())  # the header wraps, never cut
    graded = _cli("grade", str(runs["idle"]), cwd=cwd)
    assert graded.returncode == 0, graded.stderr
    _fits(graded.stdout)
    assert "pass [95% Wilson]" in graded.stdout and "trials" in graded.stdout


def test_a_suite_table_wider_than_the_terminal_is_stacked_with_its_first_column_repeated(monkeypatch):
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    monkeypatch.setattr("toolgym.cli.console", console)
    headers = ["カテゴリ名", *(f"正解率_{i}_published_metric" for i in range(6))]
    rows = [{h: ("category_with_a_long_name" if i == 0 else f"{n}.{i}") for i, h in enumerate(headers)} for n in range(3)]
    print_report_tables([ReportTable(title="a wide suite table", rows=rows)])
    text = console.export_text()
    _fits(text)
    assert all(h in text for h in headers)
    assert text.count("category_with_a_long_name") > 3  # the key column repeated in every part


def test_fitted_tables_keep_one_table_when_it_fits_and_name_a_bad_row():
    console = Console(width=80, file=open(os.devnull, "w"))  # noqa: SIM115
    cols = [Col("name", "left"), Col("value")]
    assert len(fitted_tables(console, cols, [["a", "1"]])) == 1
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        fitted_tables(console, cols, [["a"]])


def test_one_example_with_trials_says_n_1_never_nan(tmp_path, capsys):
    out = tmp_path / "trials"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--trials", "3",
                 "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "nan" not in printed
    assert "1.000 (n=1)" in printed  # each step count has one example: no standard error
    assert Estimate(0.5, float("nan"), 3).format() == "0.500 (n=1)"


def test_step_ratio_is_two_sided_in_the_measure_compare_and_summary(runs, capsys):
    ratio = Measure(kind="continuous", direction="target", target=1.0, pass_if="==", threshold=1.0)
    assert ratio.better(1.2, 0.7) and not ratio.better(0.7, 1.2)  # 0.2 from 1 beats 0.3 from 1
    assert ratio.better(1.0, 0.0) and not ratio.better(0.0, 1.0)  # doing nothing is the worst, not the best
    assert ratio.direction_text == "best at 1"
    with pytest.raises(ValueError, match="needs a finite target"):
        Measure(direction="target")
    with pytest.raises(ValueError, match="only goes with direction 'target'"):
        Measure(direction="lower", target=1.0)
    rows = {g.grader: g for g in compare_runs(runs["idle"], runs["oracle"]).graders}
    assert rows["step_ratio"].mean_a == 0.0 and rows["step_ratio"].better == "B"
    capsys.readouterr()
    assert main(["summary", str(runs["idle"])]) == 0
    assert "best at 1," in capsys.readouterr().out


def test_a_wrong_example_lists_the_closest_ids_and_nothing_failed_is_not_an_error(runs, capsys):
    assert main(["show", str(runs["oracle"]), "--example", "tw-04-hi"]) == 2
    out = capsys.readouterr().out
    assert "no trajectory for example 'tw-04-hi'" in out and "closest ids: " in out and "tw-05-hi" in out
    assert main(["show", str(runs["oracle"]), "--failed"]) == 0
    assert "nothing failed" in capsys.readouterr().out
    assert main(["show", str(runs["idle"]), "--failed", "--limit", "1"]) == 0


def test_a_typo_in_a_subcommands_option_prints_that_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--env", "typewriter_1", "--limt", "5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: toolgym run ") and "--max-steps" in err
    assert "unrecognized arguments: --limt 5" in err and "did you mean --limit" in err
    with pytest.raises(SystemExit):
        main(["show", "some-dir", "--falied"])
    err = capsys.readouterr().err
    assert err.startswith("usage: toolgym show ") and "did you mean --failed" in err


def test_lowered_workers_are_said_once(tmp_path, capsys):
    out = tmp_path / "workers"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "4", "--workers", "4",
                 "--concurrency", "2", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("note: --workers 4 lowered to 2") == 1 and "--concurrency 2" in err
    assert json.loads((out / "run.json").read_text())["workers"] == 2


def test_a_graph_stopped_by_max_steps_logs_no_callback_error(scripted, caplog):
    import warnings

    from tests.conftest import call, turn
    from toolgym.agents.graph import graph_agent
    from toolgym.records import Example
    from toolgym.suites.typewriter.environment import Typewriter1

    def react(model, tools, instructions):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            return create_react_agent(model, tools, prompt=instructions or None)

    ex = Example(id="e", input="Type 'a'", expected_calls=[{"name": "type_letter", "arguments": {"letter": "a"}}])
    env = Typewriter1()
    env.reset(ex)
    model = scripted([turn(call("type_letter", letter="a"))], repeat_last=True)
    with caplog.at_level(logging.WARNING):
        traj = graph_agent(react)(model=model, model_spec="scripted", max_steps=2).run(env, ex)
    assert traj.status == "step_limit"
    assert not [r for r in caplog.records if "_Stop" in r.getMessage()], caplog.text
    # any other callback error is still logged
    other = logging.LogRecord("langchain_core.callbacks.manager", logging.WARNING, __file__, 1,
                              "Error in %s.%s callback: %s", ("EpisodeRecorder", "on_llm_end", "ValueError('x')"), None)
    assert all(f.filter(other) for f in logging.getLogger("langchain_core.callbacks.manager").filters)


def test_an_mcp_servers_own_logs_go_to_a_file_named_once(tmp_path):
    pytest.importorskip("mcp")
    server = tmp_path / "noisy_server.py"  # FastMCP at its default log level: INFO per request
    server.write_text(
        "import sys\n"
        "from mcp.server.fastmcp import FastMCP\n"
        "server = FastMCP('noisy', log_level='INFO')\n"
        "count = 0\n"
        "@server.tool()\n"
        "def add(amount: int) -> str:\n"
        "    'Add to the counter.'\n"
        "    global count\n"
        "    count += amount\n"
        "    print('noisy server: added', amount, file=sys.stderr, flush=True)\n"
        "    return str(count)\n"
        "server.run()\n"
    )
    data = tmp_path / "counter.jsonl"
    data.write_text("".join(json.dumps({
        "id": f"c{n}", "input": f"task {n}", "reference": str(n),
        "expected_calls": [{"name": "add", "arguments": {"amount": n}}],
    }) + "\n" for n in (1, 2)))
    done = _cli("run", "--env", f"mcp:{sys.executable} {server}", "--agent", "oracle", "--dataset", str(data),
                "--out", str(tmp_path / "run"), "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # a server's stderr is kept per session and quoted only when the server fails
    assert "noisy server" not in done.stdout + done.stderr and "INFO" not in done.stdout + done.stderr


def test_export_filters_read_the_measure_and_an_unquoted_where_is_explained(runs, tmp_path, capsys):
    from toolgym.views.export import export_runs, parse_condition

    everything = export_runs([runs["idle"], runs["oracle"]], tmp_path / "all.jsonl", where=[])
    passing = export_runs([runs["idle"], runs["oracle"]], tmp_path / "ok.jsonl", where=[parse_condition("step_ratio:pass")])
    failing = export_runs([runs["idle"], runs["oracle"]], tmp_path / "bad.jsonl", where=[parse_condition("step_ratio:fail")])
    # the oracle's ratios are all 1 (pass); the idle model's 0 is a failure, not the best value
    assert (everything.kept, passing.kept, failing.kept) == (12, 6, 6)
    assert failing.skipped == {"not step_ratio:fail": 6}
    # bash turns an unquoted `--where final_state>=1` into `--where final_state` plus a file "=1"
    with pytest.raises(ValueError, match="quote it: the shell reads > as a redirection"):
        parse_condition("final_state")
    assert main(["export", str(runs["oracle"]), "--out", str(tmp_path / "x.jsonl"), "--where", "final_state>=1"]) == 0


def _plain_react(model, tools, instructions):
    from langgraph.prebuilt import create_react_agent

    return create_react_agent(model, tools, prompt=instructions or None)  # as the README suggests


def test_the_suggested_create_react_agent_warns_of_no_package_toolgym_lacks(scripted):
    import importlib.util
    import warnings

    from tests.conftest import call, turn
    from toolgym.agents.graph import graph_agent
    from toolgym.records import Example
    from toolgym.suites.typewriter.environment import Typewriter1

    if importlib.util.find_spec("langchain") is not None:
        pytest.skip("langchain is installed: its create_agent is a pointer the user can follow")
    ex = Example(id="e", input="Type 'a'", expected_calls=[{"name": "type_letter", "arguments": {"letter": "a"}}])
    env = Typewriter1()
    env.reset(ex)
    model = scripted([turn(call("type_letter", letter="a")), "done"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traj = graph_agent(_plain_react)(model=model, model_spec="scripted", max_steps=5).run(env, ex)
    assert traj.status == "completed" and traj.final_state == {"paper": "a"}
    assert not [w for w in caught if "create_react_agent" in str(w.message)], [str(w.message) for w in caught]


def test_the_report_and_a_pipe_without_columns_say_best_at_1(runs, tmp_path):
    from toolgym.views.report import build_report

    build_report([runs["idle"], runs["oracle"]], tmp_path / "report.html")
    assert "best at 1, pass = 1" in (tmp_path / "report.html").read_text(encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    piped = subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "summary", str(runs["idle"])],
                           env={**environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    _fits(piped.stdout)  # a pipe is 80 columns wide for rich


def test_a_run_recorded_before_two_sided_measures_reads_as_recorded_until_regraded(runs, tmp_path, capsys):
    """run.json stayed at schema_version 2 when measures gained ``direction: "target"`` and the
    ``target`` field: a record written before (no ``target`` keys, step_ratio ``lower``) reads
    with the direction it recorded, and ``grade`` records the two-sided one."""
    import shutil

    from toolgym.runio import read_run

    old = tmp_path / "before-two-sided"
    shutil.copytree(runs["oracle"], old)
    data = json.loads((old / "run.json").read_text())
    assert data["measures"]["step_ratio"]["direction"] == "target"
    data["schema_version"] = 2  # as written then
    for measure in data["measures"].values():
        measure.pop("target", None)
    data["measures"]["step_ratio"]["direction"] = "lower"
    (old / "run.json").write_text(json.dumps(data))
    assert read_run(old).measures["step_ratio"].direction == "lower"
    assert main(["summary", str(old)]) == 0
    assert "best at 1" not in capsys.readouterr().out  # the recorded measure, not today's
    assert main(["grade", str(old)]) == 0
    regraded = read_run(old).measures["step_ratio"]
    assert (regraded.direction, regraded.target) == ("target", 1.0)

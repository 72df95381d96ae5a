"""A new user's second hour: run folders of their own, scores that say what they compare, a
repeat guard for a looping model, error lines that blame the right file, dataset checks that
report every bad line, and views that offer only what they can show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.cli import main


def error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error:")]


# --- item 4: a missing GGUF file is named, not the output folder -----------------------------
def test_a_missing_local_model_file_is_named_not_the_output_folder(tmp_path, capsys):
    pytest.importorskip("xllamacpp")
    out = tmp_path / "out"
    argv = ["run", "--env", "typewriter_1", "--model", "local:qwen7b", "--limit", "1", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 2
    [line] = error_lines(capsys)
    assert line.startswith("error: qwen7b: GGUF model file not found"), line
    assert str(out) not in line and "while writing" not in line, line


def test_an_os_error_naming_no_file_is_blamed_on_the_output_folder_only_for_a_failed_write(tmp_path, capsys,
                                                                                         monkeypatch):
    import errno

    import toolgym.cli as cli

    def missing(args):
        raise FileNotFoundError("DNS name not found")

    monkeypatch.setattr(cli, "cmd_run", missing)
    out = tmp_path / "out"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--out", str(out)]) == 2
    [line] = error_lines(capsys)
    assert line == "error: DNS name not found", line

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "cmd_run", full)
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--out", str(out)]) == 2
    [line] = error_lines(capsys)
    assert line == f"error: {out}: no space left on device (while writing there)", line


# --- item 7 and 9: `list` says what each agent and grader is, in 80 columns --------------------
def _list_output() -> str:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(root / "run_agent.py"), "list"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _rows(stdout: str) -> dict[tuple[str, str], str]:
    """``(kind, name) -> description`` from the per-kind tables (a wrapped description's
    continuation lines joined)."""
    import re

    rows: dict[tuple[str, str], str] = {}
    kind, last = "", None
    for line in stdout.splitlines():
        title = re.fullmatch(r"\s*(environment|agent|grader|model)s \(--\w+\)\s*", line)
        if title:
            kind = title.group(1)
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) != 3 or cells[0] in ("", "name") and cells[2] in ("", "what it is"):
            continue
        if cells[0]:
            last = (kind, cells[0])
            rows[last] = cells[2]
        elif last is not None:
            rows[last] += " " + cells[2]
    return rows


def test_list_describes_every_agent_and_grader_and_fits_80_columns():
    out = _list_output()
    assert "(continued)" not in out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    rows = _rows(out)
    for kind in ("agent", "grader"):
        named = {name: text for (k, name), text in rows.items() if k == kind}
        assert len(named) >= 5, rows
        empty = [name for name, text in named.items() if len(text) < 15]
        assert not empty, empty
    assert rows[("grader", "steps_exact")].startswith("1.0 when the tool names called equal expected_steps")
    assert rows[("agent", "oracle")].startswith("A perfect reference trajectory")


def test_a_description_is_the_first_sentence_in_plain_words():
    from toolgym.registry import first_sentence

    doc = """Tool calls made divided by ``expected_steps`` (:class:`toolgym.graders.steps.StepRatio`, et al.
    2016). Above 1 means wasted steps.

    Args:
        x: y.
    """
    assert first_sentence(doc) == "Tool calls made divided by expected_steps (StepRatio, et al. 2016)."
    long = "A" + " long clause" * 10 + " (kept; inside) ; and a second clause that is cut."
    assert first_sentence(long) == "A" + " long clause" * 10 + " (kept; inside)."
    assert first_sentence("") == ""


# --- item 1: a run without --out gets a folder of its own --------------------------------------
def test_runs_without_out_never_collide_and_say_where_they_went(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "idle.json").write_text(json.dumps(["Done."]), encoding="utf-8")
    printed = []
    for argv in (["--agent", "oracle"], ["--agent", "oracle"], ["--model", "scripted:idle.json"]):
        assert main(["run", "--env", "typewriter_1", "--limit", "1", "--no-progress", *argv]) == 0
        err = capsys.readouterr().err
        [line] = [line for line in err.splitlines() if line.startswith("run directory: ")]
        printed.append(Path(line.removeprefix("run directory: ")))
    assert len(set(printed)) == 3, printed
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(p.name for p in printed)
    for directory in printed:
        assert (tmp_path / directory / "scores.jsonl").is_file()
    oracle, again, scripted = (p.name for p in printed)
    assert "_typewriter_1_oracle" in oracle and "local" not in oracle  # the oracle uses no model
    assert scripted.endswith("_typewriter_1_tool_calling_scripted-idle"), scripted
    assert again != oracle


def test_resume_without_out_asks_for_the_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--resume", "--no-progress"]) == 2
    [line] = error_lines(capsys)
    assert "--resume needs --out DIR" in line
    assert not (tmp_path / "runs").exists()


def test_the_default_run_directory_name():
    import datetime

    from toolgym.runio import default_run_dir

    when = datetime.datetime(2026, 12, 4, 6, 31, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert default_run_dir("typewriter_1", "tool_calling", "openai:gpt-4o-mini", now=when) == Path(
        "runs/2026-12-04T05-31-07_typewriter_1_tool_calling_openai-gpt-4o-mini")
    assert default_run_dir('mcp:"python s.py"', "my/agent.py:Mine", "vllm:Qwen/Qwen2.5-7B", root="r",
                           now=when).name == "2026-12-04T05-31-07_mcp_Mine_vllm-Qwen2.5-7B"


def test_a_name_taken_within_the_same_second_gets_a_suffix(tmp_path):
    import datetime

    from toolgym.runio import default_run_dir

    when = datetime.datetime(2026, 12, 4, 5, 31, 7)
    first = default_run_dir("typewriter_1", "oracle", None, root=tmp_path, now=when)
    first.mkdir()
    second = default_run_dir("typewriter_1", "oracle", None, root=tmp_path, now=when)
    assert second.name == f"{first.name}-2"


def test_ctrl_c_names_the_run_and_says_its_episodes_wait_for_grade(tmp_path, capsys, monkeypatch):
    import toolgym.runner as runner

    def interrupted(config, progress=True):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run", interrupted)  # the command line imports it when a run starts
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--no-progress"]) == 130
    err = capsys.readouterr().err
    [where] = [line.removeprefix("run directory: ") for line in err.splitlines() if line.startswith("run directory: ")]
    assert f"--resume --out {where}" in err and f"`grade {where}`" in err and "no scores" in err, err


# --- item 3: the repeat guard ------------------------------------------------------------------
def _typewriter_example(text: str = "ab"):
    from toolgym.records import Example

    calls = [{"name": "type_letter", "arguments": {"letter": c}} for c in text]
    return Example(id="e1", input=f"Type {text!r}", expected_calls=calls, expected_state={"paper": text})


def _looping_turns(n: int = 30) -> list:
    """A model that types 'a', then asks for the same 'b' over and over (as the bundled model
    repeated get_food_name(369) for 40 turns)."""
    from tests.conftest import call, turn

    return [turn(call("type_letter", letter="a"))] + [turn(call("type_letter", letter="b"))] * n


def _play(agent_cls, model, **kwargs):
    from toolgym.suites.typewriter.environment import Typewriter1

    env, example = Typewriter1(), _typewriter_example()
    env.reset(example)
    return agent_cls(model=model, model_spec="scripted", **kwargs).run(env, example)


@pytest.mark.parametrize("agent", ["tool_calling", "graph"])
def test_the_repeat_guard_stops_after_n_identical_consecutive_calls(scripted, agent):
    from toolgym.agents.tool_calling import ToolCallingAgent

    if agent == "graph":
        from tests.test_agents_graph import ReactAgent as agent_cls
    else:
        agent_cls = ToolCallingAgent
    guarded = _play(agent_cls, scripted(_looping_turns()), max_repeats=3)
    assert guarded.status == "repeat_limit"
    assert [s.arguments["letter"] for s in guarded.tool_steps] == ["a", "b", "b", "b"]
    assert guarded.final_state == {"paper": "abbb"}
    unguarded = _play(agent_cls, scripted(_looping_turns()), max_steps=10)  # off by default
    assert unguarded.status == "step_limit" and len(unguarded.tool_steps) == 10


def test_the_repeat_guard_in_a_prompted_agent():
    from toolgym.plugins import get_agent
    from toolgym.providers.scripted import ScriptedChatModel

    react = 'Thought: next\nAction: {"action": "type_letter", "action_input": {"letter": "%s"}}'
    turns = [react % "a"] + [react % "b"] * 20
    traj = _play(get_agent("react_json"), ScriptedChatModel(turns=turns), max_repeats=2)
    assert traj.status == "repeat_limit"
    assert [s.arguments["letter"] for s in traj.tool_steps] == ["a", "b", "b"]


def test_calls_that_differ_in_arguments_are_not_repeats(scripted):
    from tests.conftest import call, turn
    from toolgym.agents.tool_calling import ToolCallingAgent

    turns = [turn(call("type_letter", letter=c)) for c in "abababab"] + ["done"]
    traj = _play(ToolCallingAgent, scripted(turns), max_repeats=2)
    assert traj.status == "completed" and len(traj.tool_steps) == 8


def test_a_repeat_guard_below_two_is_refused():
    from toolgym.agents.tool_calling import ToolCallingAgent

    with pytest.raises(ValueError, match="max_repeats must be at least 2"):
        ToolCallingAgent(model=None, max_repeats=1)


# --- item 2: steps_exact says it compares tool names only --------------------------------------
def test_steps_exact_scores_a_wrong_argument_1_and_every_view_says_why(tmp_path, capsys):
    script = tmp_path / "wrong-letter.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "type_letter", "args": {"letter": "b"}}]}, "done"]))
    out = tmp_path / "run"
    argv = ["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--limit", "1", "--out", str(out),
            "--no-progress", "--grader", "steps_exact", "--grader", "trajectory_match", "--trajectory-mode", "strict"]
    assert main(argv) == 0
    printed = " ".join(capsys.readouterr().out.split())
    scores = {s["grader"]: s for s in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    assert scores["steps_exact"]["value"] == 1.0  # the published definition, unchanged
    assert scores["trajectory_match"]["value"] == 0.0  # the grader that compares arguments
    assert "arguments not compared" in scores["steps_exact"]["explanation"]
    note = ("note: steps_exact compares tool names only, not arguments; trajectory_match compares those "
            "(--trajectory-mode strict where an example has no milestones)")
    assert note in printed
    assert main(["summary", str(out)]) == 0
    assert note in " ".join(capsys.readouterr().out.split())
    measures = json.loads((out / "run.json").read_text())["measures"]
    assert "tool names only" in measures["steps_exact"]["compares"]
    assert "compares" not in measures["trajectory_match"]  # written only when set: older readers read it
    from toolgym.views.report import build_report

    build_report([out], tmp_path / "report.html")
    assert "steps_exact compares tool names only" in (tmp_path / "report.html").read_text(encoding="utf-8")


# --- item 6: summary of several runs is one table; unscored episodes are pointed to grade -------
def test_summary_of_several_runs_is_one_table_in_80_columns(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "first-letter.json").write_text(json.dumps(
        [{"tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]}, "done"]))
    dirs = []
    for name, env, extra in (("oracle-1", "typewriter_1", ["--agent", "oracle"]),
                             ("first-letter", "typewriter_1", ["--model", "scripted:first-letter.json"]),
                             ("oracle-26", "typewriter_26", ["--agent", "oracle"])):
        assert main(["run", "--env", env, "--limit", "3", "--out", str(tmp_path / "runs" / name), "--no-progress",
                     *extra]) == 0
        dirs.append(f"runs/{name}")
    environ = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(root / "run_agent.py"), "summary", *dirs], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert sum(line.startswith("┏") for line in out.splitlines()) == 1, out  # one table
    for n, directory in enumerate(dirs, 1):
        assert f"run {n}: " in out and directory in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 9 and all(r.split("│")[1].strip() in "123" for r in rows), rows
    assert "best at 1, pass = 1" in out


def test_summary_points_finished_but_unscored_episodes_to_grade(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "3", "--out", str(out),
                 "--no-progress"]) == 0
    scores = (out / "scores.jsonl").read_text().splitlines()
    kept = [line for line in scores if json.loads(line)["example_id"] == json.loads(scores[0])["example_id"]]
    (out / "scores.jsonl").write_text("\n".join(kept) + "\n")  # as a resumed run stopped before grading leaves it
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{out}: 2 finished episode(s) have no scores yet" in err and f"`toolgym grade {out}`" in err
    assert main(["grade", str(out)]) == 0 and main(["summary", str(out)]) == 0
    assert "no scores" not in capsys.readouterr().err


def test_run_max_repeats_is_recorded_shown_and_kept_on_resume(tmp_path, capsys):
    script = tmp_path / "loop.json"
    script.write_text(json.dumps({"turns": [{"tool_calls": [{"name": "type_letter", "args": {"letter": "q"}}]}],
                                  "repeat_last": True}))
    out = tmp_path / "run"
    argv = ["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--limit", "2", "--out", str(out),
            "--no-progress", "--max-repeats", "3"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "repeat_limit: 2" in " ".join(printed.split())
    lines = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [t["status"] for t in lines] == ["repeat_limit", "repeat_limit"]
    assert all(sum(s["kind"] == "tool" for s in t["steps"]) == 3 for t in lines)
    assert json.loads((out / "run.json").read_text())["agent"]["max_repeats"] == 3
    assert main(["show", str(out)]) == 0
    assert "repeat_limit" in capsys.readouterr().out
    changed = [a if a != "3" else "4" for a in argv] + ["--resume"]
    assert main(changed) == 2
    assert "max_repeats: 3 before, 4 now" in " ".join(capsys.readouterr().err.split())


def test_help_shows_the_step_limit_default_and_the_repeat_guard(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "step_limit (default: 40)" in text
    assert "--max-repeats N" in text and "default: off" in text


def test_max_repeats_below_two_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--env", "typewriter_1", "--max-repeats", "1", "--out", str(tmp_path / "r")])
    assert "expected an integer of at least 2, got 1" in capsys.readouterr().err


# --- item 8: dataset checks report every bad line at once ---------------------------------------
def test_every_bad_line_of_a_dataset_is_reported_in_one_round(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join([
        json.dumps({"id": "a", "input": "Type a", "expected_steps": ["type_letter"], "expected_state": {"paper": "a"}}),
        json.dumps({"id": "b", "input": "Type b", "expected_step": ["type_letter"]}),
        '{"id": "c" "input": "x"}',
        json.dumps({"id": "d", "input": 5}),
        json.dumps({"id": "a", "input": "Type a again"}),
    ]) + "\n")
    assert main(["check", "--env", "typewriter_1", "--dataset", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {data}: 4 problems:"), err
    for expected in (f"{data}:2: field expected_step: Extra inputs are not permitted (did you mean 'expected_steps'?)",
                     f"{data}:3: not valid JSON", f"{data}:4: field input", f"{data}:5: duplicate example id 'a' "
                     "(first on line 1)"):
        assert expected in err, (expected, err)


@pytest.mark.parametrize("env", ["typewriter_1", "relational_data"])
def test_a_mistyped_tool_gets_did_you_mean_and_no_other_environment_note(tmp_path, capsys, env):
    from toolgym.plugins import get_benchmark

    tool = sorted(get_benchmark(env).environment().tool_functions())[0]
    data = tmp_path / "d.jsonl"
    rows = [{"id": "a", "input": "x", "expected_steps": [tool[:-1] + tool[-1] * 2]},
            {"id": "b", "input": "y", "expected_steps": [tool]},
            {"id": "c", "input": "z", "expected_steps": [tool], "expected_stat": {}}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    assert main(["run", "--env", env, "--agent", "oracle", "--dataset", str(data), "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    [line] = error_lines(capsys)
    assert f"did you mean {tool!r}" in line and "another environment" not in line, line
    data.write_text(json.dumps(rows[2]) + "\n")  # a typo on line 1 of an environment with its own format
    assert main(["check", "--env", env, "--dataset", str(data)]) == 2
    [line] = error_lines(capsys)
    assert "did you mean 'expected_state'?" in line and "another environment" not in line, line


# --- item 9: the smaller items ------------------------------------------------------------------
def test_the_scripted_model_example_in_models_md_runs_as_documented(tmp_path, capsys):
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text(encoding="utf-8")
    section = page.split("## The scripted model", 1)[1]
    script = tmp_path / "script.json"
    script.write_text(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": s, "input": s, "expected_steps": ["type_letter"] * len(s),
                                        "expected_state": {"paper": s}}) + "\n" for s in ("ab", "cd")))
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--dataset", str(data),
                 "--out", str(out), "--no-progress"]) == 0
    played = {t["example_id"]: t for t in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    assert played["ab"]["final_state"] == {"paper": "ab"} and played["ab"]["final_answer"] == "Typed ab."
    assert played["cd"]["final_state"] == {"paper": ""} and played["cd"]["final_answer"] == "I give up."


def test_show_without_an_example_says_which_of_how_many(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "3", "--out", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"trajectory 1 of 3 in {out}; --example ID shows another" in text


def test_the_oracles_summary_reports_no_model_calls(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "episodes 2, errors 0" in printed and "model calls" not in printed
    assert json.loads((out / "run.json").read_text())["accounting"]["model_calls"] == 0


def test_resume_with_a_larger_limit_keeps_the_start_time_and_command(tmp_path, capsys):
    import sys

    out = tmp_path / "run"
    first = ["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out), "--no-progress"]
    assert main(first) == 0
    before = json.loads((out / "run.json").read_text())
    argv = [a if a != "2" else "3" for a in first] + ["--resume"]
    old_argv = sys.argv
    sys.argv = ["run_agent.py", *argv]
    try:
        assert main(argv) == 0
    finally:
        sys.argv = old_argv
    after = json.loads((out / "run.json").read_text())
    assert after["started_at"] == before["started_at"] and after["command"] == before["command"]
    assert after["limit"] == 3 and len((out / "trajectories.jsonl").read_text().splitlines()) == 3
    [resumed] = after["resumes"]
    assert resumed["command"][-1] == "--resume" and "3" in resumed["command"]


def test_compare_is_one_table_in_80_columns(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "first-letter.json").write_text(json.dumps(
        [{"tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]}, "done"]))
    for name, extra in (("oracle", ["--agent", "oracle"]), ("first", ["--model", "scripted:first-letter.json"])):
        assert main(["run", "--env", "typewriter_1", "--limit", "3", "--out", f"runs/{name}", "--no-progress",
                     *extra]) == 0
    environ = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(root / "run_agent.py"), "compare", "runs/oracle", "runs/first"],
                          env=environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(continued)" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    assert "3 paired examples" in out and "A (best at 1)" in out and "exact 0.500" in out
    assert "final_state: 2 flipped (A→B): tw-01-aa (1→0), tw-02-aaa (1→0)" in out
    assert "note: steps_exact compares tool names only" in out

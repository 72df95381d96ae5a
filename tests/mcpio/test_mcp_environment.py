"""``--env mcp:"COMMAND"`` and ``--env mcp+http://...``: an MCP server written here
(``counter_server.py``, FastMCP) evaluated as an environment through the real client SDK."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from toolgym.cli import main  # noqa: E402
from toolgym.plugins import get_benchmark  # noqa: E402
from toolgym.registry import ExtensionError  # noqa: E402
from toolgym.runio import read_run, read_scores, read_trajectories  # noqa: E402
from toolgym.runner import RunConfig, run  # noqa: E402

SERVER = Path(__file__).with_name("counter_server.py")
ROOT = Path(__file__).resolve().parents[2]
STDIO_SPEC = f"mcp:{sys.executable} {SERVER}"


def dataset(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def counter(id: str, *calls: tuple[str, dict], reference: str) -> dict:
    return {"id": id, "input": f"task {id}", "reference": reference,
            "expected_calls": [{"name": n, "arguments": a} for n, a in calls]}


C1 = counter("c1", ("add", {"amount": 2}), ("add", {"amount": 3}), reference="5")
C2 = counter("c2", ("add", {"amount": 4}), ("read", {}), reference="4")
CRASH = counter("c3", ("add", {"amount": 1}), ("crash", {}), reference="1")
C4 = counter("c4", ("add", {"amount": -1}), reference="-1")


def test_oracle_scores_one_and_a_crash_is_a_recorded_error(tmp_path, capsys):
    data = dataset(tmp_path / "counter.jsonl", C1, C2, CRASH, C4)
    out = tmp_path / "run"
    assert main(["run", "--env", STDIO_SPEC, "--agent", "oracle", "--dataset", str(data), "--out", str(out),
                 "--no-progress"]) == 0
    trajectories = {t.example_id: t for t in read_trajectories(out)}
    assert [trajectories[k].status for k in ("c1", "c2", "c3", "c4")] == ["completed", "completed", "error", "completed"]
    crashed = trajectories["c3"]
    assert crashed.error.startswith("ToolBug: tool 'crash' raised") and "Connection closed" in crashed.error
    assert [s.name for s in crashed.tool_steps] == ["add"]  # the call that died is not an observation
    # each episode has its own server process: c2 starts from zero again
    assert [s.output for s in trajectories["c2"].tool_steps] == ["4", "4"]
    scores = read_scores(out)
    assert {s.example_id for s in scores} == {"c1", "c2", "c4"}
    assert {s.grader for s in scores} == {"steps_exact", "step_ratio", "answer_match"}
    assert all(s.value == 1.0 for s in scores)
    # run.json names the spec, and the run is graded again from it
    assert read_run(out).env == STDIO_SPEC
    assert main(["grade", str(out)]) == 0
    assert len(read_scores(out)) == len(scores)
    # show says the crashing call ended the episode, not that the agent stopped calling
    capsys.readouterr()
    assert main(["show", str(out), "--example", "c3"]) == 0
    shown = capsys.readouterr().out
    assert "call 2: expected crash(), the episode ended in error" in shown and "the agent made no more calls" not in shown, shown


def test_the_model_sees_the_servers_schemas_and_error_messages(tmp_path, scripted):
    benchmark = get_benchmark(STDIO_SPEC)
    assert get_benchmark(STDIO_SPEC) is benchmark  # one environment class per spec
    env = benchmark.environment()
    env.reset(None)
    try:
        assert env.instructions == "Keep count with the tools; answer with the final count."
        schema = env.tools["add"].args_schema
        assert schema["properties"]["amount"]["type"] == "integer" and schema["required"] == ["amount"]
        assert env.tools["add"].description.startswith("Add to the counter")
        assert env.call("add", {"amount": "x"}).output == "Error: invalid arguments for 'add': amount: expected integer, got 'x'"
        refused = env.call("add", {"amount": 0})  # the server's isError result
        assert refused.error and "amount must not be zero" in refused.output
        assert env.call("add", {"amount": 2}) .output == "2"
        assert env.call("ad", {}).output.endswith("Did you mean 'add'?")
    finally:
        env.close()
    model = scripted([
        {"content": "", "tool_calls": [{"name": "add", "args": {"amount": 0}, "id": "1"},
                                      {"name": "add", "args": {"amount": 5}, "id": "2"}]},
        {"content": "5"},
    ])
    result = run(RunConfig(env=STDIO_SPEC, agent="tool_calling", model=model, out=None,
                           dataset=[counter("c", ("add", {"amount": 5}), reference="5")]), progress=False)
    (traj,) = result.trajectories
    assert [(s.error, s.output) for s in traj.tool_steps][1] == (False, "5")
    assert {s.grader: s.value for s in result.scores} == {"steps_exact": 0.0, "step_ratio": 2.0, "answer_match": 1.0}


def test_dataset_naming_a_tool_the_server_lacks_is_refused(tmp_path, capsys):
    data = dataset(tmp_path / "bad.jsonl", counter("x", ("subtract", {"amount": 1}), reference="-1"))
    assert main(["run", "--env", STDIO_SPEC, "--agent", "oracle", "--dataset", str(data), "--out",
                 str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "tool 'subtract', named by 1 example(s)" in err and "has no such tool" in err, err


def test_malformed_specs_are_named():
    with pytest.raises(ExtensionError, match="no command after 'mcp:'"):
        get_benchmark("mcp:  ")
    with pytest.raises(ExtensionError, match="no host"):
        get_benchmark("mcp+http:///mcp")
    with pytest.raises(RuntimeError, match="cannot open an MCP session: FileNotFoundError"):
        env = get_benchmark("mcp:/nonexistent/server --flag").environment()
        env.reset(None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_server_as_environment(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        data = dataset(tmp_path / "counter.jsonl", C1, C4)
        out = tmp_path / "run"
        spec = f"mcp+http://127.0.0.1:{port}/mcp"
        assert main(["run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out),
                     "--no-progress"]) == 0
        assert [t.status for t in read_trajectories(out)] == ["completed", "completed"]
        assert all(s.value == 1.0 for s in read_scores(out))
    finally:
        proc.kill()
        proc.wait()


def test_a_command_that_is_not_an_mcp_server_is_one_clear_line(tmp_path):
    data = dataset(tmp_path / "counter.jsonl", C1, C4)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from toolgym.cli import main; sys.exit(main(sys.argv[1:]))", "run",
         "--env", "mcp:echo hi", "--agent", "oracle", "--dataset", str(data), "--out", str(tmp_path / "run"),
         "--no-progress"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "the command 'echo hi' is not an MCP server: it wrote 'hi' on stdout" in proc.stderr
    # one line of ours; asyncio may add "Unknown child process pid N" when the dead command is
    # reaped twice under load (a race inside the event loop's child watcher, not an error of the run)
    ours = [line for line in proc.stderr.strip().splitlines() if "Unknown child process pid" not in line]
    assert len(ours) == 1, proc.stderr


def test_without_the_mcp_sdk_the_extra_is_named_at_once(tmp_path):
    data = dataset(tmp_path / "counter.jsonl", C1)
    code = ("import sys; sys.modules['mcp'] = None\n"
            "from toolgym.cli import main\n"
            f"sys.exit(main(['run', '--env', {STDIO_SPEC!r}, '--agent', 'oracle', '--dataset', {str(data)!r},"
            f" '--out', {str(tmp_path / 'run')!r}, '--no-progress']))")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.monotonic() - started < 30
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("install the extra in the toolgym clone: pip install -e '.[mcp]'"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


ENV_SERVER = Path(__file__).with_name("env_server.py")


def test_a_stdio_server_gets_a_minimal_environment_plus_the_variables_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGYM_TEST_API_KEY", "sk-secret-value")
    monkeypatch.setenv("TOOLGYM_TEST_WANTED", "given")
    data = dataset(tmp_path / "env.jsonl", {"id": "e", "input": "report", "reference": "",
                                            "expected_calls": [{"name": "environment", "arguments": {}}]})
    seen = {}
    for name, spec in (("bare", f"mcp:{sys.executable} {ENV_SERVER}"),
                       ("named", f"mcp:--pass-env TOOLGYM_TEST_WANTED {sys.executable} {ENV_SERVER}")):
        out = tmp_path / name
        assert main(["run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--no-progress"]) == 0
        [trajectory] = read_trajectories(out)
        seen[name] = json.loads(trajectory.tool_steps[0].output)
        assert "sk-secret-value" not in (out / "trajectories.jsonl").read_text() + (out / "run.json").read_text()
    assert "TOOLGYM_TEST_API_KEY" not in seen["bare"] and "TOOLGYM_TEST_WANTED" not in seen["bare"]
    assert seen["bare"].get("PATH") == os.environ["PATH"]  # the SDK's default set is kept
    assert seen["named"]["TOOLGYM_TEST_WANTED"] == "given" and "TOOLGYM_TEST_API_KEY" not in seen["named"]


def test_pass_env_takes_names_only(tmp_path):
    from toolgym.mcp.environment import parse_spec

    assert parse_spec("mcp:--pass-env A --pass-env=B_2 npx srv").pass_env == ("A", "B_2")
    assert parse_spec("mcp:--pass-env A npx srv").command == ("npx", "srv")
    for bad in ("mcp:--pass-env", "mcp:--pass-env A=1 npx", "mcp:--pass-env A"):
        with pytest.raises(ValueError, match="pass-env|no command"):
            parse_spec(bad)


def test_export_of_an_mcp_run_starts_the_server_once_and_names_a_gone_one(tmp_path, monkeypatch, capsys):
    import shutil

    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("TOOLGYM_TEST_STARTS", str(starts))
    server = tmp_path / "env_server.py"
    shutil.copy(ENV_SERVER, server)
    data = dataset(tmp_path / "env.jsonl", *[
        {"id": f"e{i}", "input": f"report {i}", "reference": "", "expected_calls": [{"name": "environment", "arguments": {}}]}
        for i in range(3)])
    out = tmp_path / "run"
    spec = f"mcp:--pass-env TOOLGYM_TEST_STARTS {sys.executable} {server}"
    assert main(["run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--no-progress"]) == 0
    before = len(starts.read_text().splitlines())
    assert main(["export", str(out), "--out", str(tmp_path / "sft.jsonl")]) == 0
    assert len(starts.read_text().splitlines()) - before == 1  # not one per trajectory
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["tools"][0]["function"]["name"] == "environment" for r in records)
    assert [r["messages"][1] for r in records] == [{"role": "user", "content": f"report {i}"} for i in range(3)]
    server.unlink()  # the server is gone
    capsys.readouterr()
    assert main(["export", str(out), "--out", str(tmp_path / "again.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "cannot be reset to give the prompt and tools" in err and "Traceback" not in err, err


def test_a_stdio_servers_stderr_is_quoted_when_it_fails_not_printed_per_episode(tmp_path, capfd):
    data = dataset(tmp_path / "env.jsonl", *[
        {"id": f"e{i}", "input": "report", "reference": "", "expected_calls": [{"name": "environment", "arguments": {}}]}
        for i in range(2)])
    assert main(["run", "--env", f"mcp:{sys.executable} {ENV_SERVER}", "--agent", "oracle", "--dataset", str(data),
                 "--out", str(tmp_path / "ok"), "--no-progress"]) == 0
    assert "env_server: starting" not in capfd.readouterr().err
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nsys.stderr.write('boom: no configuration file\\n')\nsys.exit(1)\n")
    code = main(["run", "--env", f"mcp:{sys.executable} {failing}", "--agent", "oracle", "--dataset", str(data),
                 "--out", str(tmp_path / "bad"), "--no-progress"])
    err = capfd.readouterr().err
    assert code != 0 and "stderr: boom: no configuration file" in err, err


def test_state_kept_in_a_file_leaks_between_episodes_unless_the_command_names_episode_dir(tmp_path):
    server = Path(__file__).with_name("file_counter_server.py")
    data = dataset(tmp_path / "add.jsonl", *[counter(f"a{i}", ("add", {"amount": 2}), reference="2") for i in range(3)])
    outputs = {}
    for name, path in (("fixed", str(tmp_path / "count.txt")), ("per_episode", "{episode_dir}/count.txt")):
        out = tmp_path / name
        assert main(["run", "--env", f"mcp:{sys.executable} {server} {path}", "--agent", "oracle", "--dataset", str(data),
                     "--out", str(out), "--no-progress"]) == 0
        outputs[name] = sorted(t.tool_steps[0].output for t in read_trajectories(out))
    assert outputs["fixed"] == ["2", "4", "6"]  # a fresh process each episode, the same file
    assert outputs["per_episode"] == ["2", "2", "2"]
    import tempfile

    assert not [p for p in Path(tempfile.gettempdir()).glob("toolgym-mcp-episode-*") if (p / "count.txt").exists()]

"""``--serve``: the run starts ``vllm serve`` itself and stops it at the end, on Ctrl-C, on
SIGTERM and on an error. A stand-in ``vllm`` (tests/fake_vllm.py, put on PATH) speaks the same
HTTP API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgym.cli import main
from toolgym.runio import read_scores, read_trajectories

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """Put a ``vllm`` stand-in on PATH; returns a function reading its recorded events."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "fake_vllm.py"}" "$@"\n')
    exe.chmod(0o755)
    record = tmp_path / "vllm-events.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "0.5")

    def events() -> list[dict]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return events


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def serve_argv(out: Path, *extra: str) -> list[str]:
    return ["run", "--env", "typewriter_1", "--model", "vllm:Qwen/Qwen2.5-7B-Instruct", "--serve",
            "--limit", "3", "--out", str(out), "--no-progress", "--tensor-parallel-size", "2",
            "--vllm-arg=--enforce-eager", "--vllm-arg=--max-num-seqs=8", *extra]


def test_serve_starts_vllm_waits_for_it_runs_and_stops_it(tmp_path, fake_vllm):
    out = tmp_path / "run"
    assert main(serve_argv(out)) == 0
    start, ready, stopped = fake_vllm()
    argv = start["argv"]
    port = argv[argv.index("--port") + 1]
    assert argv[:2] == ["serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert argv[2:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--host", "127.0.0.1",
                        "--port", port, "--tensor-parallel-size", "2", "--enforce-eager", "--max-num-seqs", "8"]
    assert ready == {"ready": True} and stopped == {"stopped": "SIGTERM"}
    assert not alive(start["pid"])
    assert [t.status for t in read_trajectories(out)] == ["completed"] * 3
    assert all(s.value == 1.0 for s in read_scores(out) if s.grader == "final_state")
    info = json.loads((out / "run.json").read_text())
    assert info["model_settings"]["extra"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert "--tensor-parallel-size 2" in info["model_settings"]["extra"]["serve"]["command"]
    assert "Uvicorn running" in (out / "vllm.log").read_text()


def test_a_server_that_exits_is_reported_with_its_output(tmp_path, fake_vllm, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    assert main(serve_argv(tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert "vllm serve exited with status 3" in err and "unrecognized option --bogus" in err


def test_the_server_is_stopped_when_the_run_fails(tmp_path, fake_vllm, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectories.jsonl").write_text("{}\n")  # an existing run without --resume: the run refuses
    assert main(serve_argv(out)) == 2
    assert "--resume" in capsys.readouterr().err
    events = fake_vllm()
    assert events[-1] == {"stopped": "SIGTERM"} and not alive(events[0]["pid"])


def test_no_vllm_on_path_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(serve_argv(tmp_path / "run")) == 2
    assert "'vllm' is not on PATH" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGKILL, -signal.SIGKILL)]
)
@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_ctrl_c_sigterm_or_sigkill_stops_the_server(tmp_path, fake_vllm, monkeypatch, sig, code):
    """SIGINT and SIGTERM stop it through the run's cleanup; after SIGKILL (no cleanup) the
    kernel's parent-death signal does.

    Deterministic by construction, whatever the load: the stand-in answers 3 requests (the first
    episode's two turns and one more), then holds every later request until it is stopped. The
    signal is sent once a trajectory is on disk (the run is playing, its handlers in place) and
    a request is held (a model call is in flight), so the run cannot have ended before it."""
    monkeypatch.setenv("FAKE_VLLM_HOLD_AFTER", "3")
    out = tmp_path / "run"
    # a shell's background job (CI scripts, `cmd &`) starts with SIGINT ignored, and children
    # inherit that: give the run the default disposition, as a terminal's foreground job has
    proc = subprocess.Popen([sys.executable, "run_agent.py", *serve_argv(out, "--limit", "20")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    trajectories = out / "trajectories.jsonl"
    while not (trajectories.exists() and trajectories.read_bytes().endswith(b"\n")
               and any("held" in e for e in fake_vllm())):
        assert time.monotonic() < deadline and proc.poll() is None, "the run never reached a held model call"
        time.sleep(0.02)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    if sig != signal.SIGKILL:
        assert "--resume" in stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(fake_vllm()[0]["pid"]):  # after SIGKILL, no wait()
        time.sleep(0.05)
    events = fake_vllm()
    assert events[-1]["stopped"] == "SIGTERM" and not alive(events[0]["pid"])
    done = read_trajectories(out)
    assert len(done) < 20  # interrupted part-way; what finished is kept

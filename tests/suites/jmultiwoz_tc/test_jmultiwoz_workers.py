"""``run --workers N``: episodes played in forked processes give the same files as one process;
a worker that dies, or a Ctrl-C, loses nothing finished, and ``--resume`` plays the rest."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.faults import write_dataset as write_words
from tests.fakeserver import FakeModelServer
from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import write_dataset
from tests.suites.jmultiwoz_tc.test_jmultiwoz_env import script, scripted_answers
from toolgym.agents import Agent, register_agent
from toolgym.cli import main
from toolgym.records import ToolCall
from toolgym.runio import read_trajectories
from toolgym.runner import RunConfig, run
from toolgym.suites.jmultiwoz_tc.scoring import safe_model_name


def comparable(directory):
    """Trajectories by key, without timings."""
    return {t.key: t.model_dump(exclude={"duration_s"}) | {"steps": [s.model_dump(exclude={"latency_s"}) for s in t.steps]}
            for t in read_trajectories(directory)}


def start_run(argv: list[str], lines: int, stderr: int = subprocess.DEVNULL) -> subprocess.Popen:
    """Start ``run_agent.py`` with ``argv`` in a new process group; return once the run
    directory's trajectories file has ``lines`` lines (or after 60 s)."""
    out = Path(argv[argv.index("--out") + 1])
    proc = subprocess.Popen([sys.executable, "run_agent.py", *argv], cwd=Path(__file__).resolve().parents[3],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
    path = out / "trajectories.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (path.exists() and path.read_bytes().count(b"\n") >= lines):
        time.sleep(0.02)
    return proc


def server_argv(server: FakeModelServer, dataset: Path, out: Path) -> list[str]:
    return ["run", "--env", "typewriter_1", "--model", "vllm:fake", "--base-url", server.url + "/v1",
            "--dataset", str(dataset), "--out", str(out), "--concurrency", "4", "--workers", "2", "--no-progress"]


def test_workers_write_what_one_process_writes(tmp_path):
    dataset = write_dataset(tmp_path / "data", "zip")
    model = script(tmp_path, scripted_answers())
    name = safe_model_name(model)
    out = {}
    for workers in (1, 3):
        out[workers] = tmp_path / f"run{workers}"
        run(RunConfig(env="jmultiwoz_tc", out=out[workers], model=model, dataset=str(dataset), concurrency=4,
                      workers=workers), progress=False)
    for filename in (f"result_{name}.jsonl", f"score_{name}.json", f"incorrect_{name}.json"):
        assert (out[3] / filename).read_bytes() == (out[1] / filename).read_bytes(), filename
    assert comparable(out[3]) == comparable(out[1])
    assert len(comparable(out[1])) == 7
    assert json.loads((out[3] / "run.json").read_text())["workers"] == 3


@register_agent("dies_on_c")
class DiesOnC(Agent):
    """Types the input letter by letter; its worker process dies on the example 'c'
    (registered here, in the test's own code: forked workers inherit it)."""

    needs_model = False

    async def play(self, episode):
        in_worker = multiprocessing.parent_process() is not None  # never take pytest down
        if episode.example.input == "c" and os.environ.get("TOOLGYM_TEST_DIE") == "1" and in_worker:
            os._exit(7)
        for letter in episode.example.input:
            episode.execute(ToolCall(id=letter, name="type_letter", arguments={"letter": letter}))


@pytest.mark.parametrize("concurrency", [2, 6])  # alone in flight in its worker, or beside others
def test_an_episode_that_kills_its_worker_is_an_error_naming_it_and_the_run_goes_on(concurrency, tmp_path, monkeypatch):
    """Issue 38, item 6: every --resume died again on the same example; now the example is
    recorded as an error naming the death, and the other episodes are played."""
    data = tmp_path / "words.jsonl"
    words = ["a", "b", "c", "d", "e", "f"]
    data.write_text("".join(json.dumps({"id": w, "input": w, "expected_state": {"paper": w}}) + "\n" for w in words))
    out = tmp_path / "run"
    argv = ["run", "--env", "typewriter_1", "--agent", "dies_on_c", "--dataset", str(data), "--out", str(out),
            "--workers", "2", "--concurrency", str(concurrency), "--no-progress"]
    monkeypatch.setenv("TOOLGYM_TEST_DIE", "1")
    # the worker given a, c, e dies on c (after a); a fresh one plays e; the other plays b, d, f
    assert main(argv) == 0
    by_id = {t.example_id: t for t in read_trajectories(out)}
    assert sorted(by_id) == words
    assert by_id["c"].status == "error" and "example 'c'" in by_id["c"].error
    assert "toolgym-worker-0 (exit code 7)" in by_id["c"].error
    assert all(t.status == "completed" for k, t in by_id.items() if k != "c")
    monkeypatch.setenv("TOOLGYM_TEST_DIE", "0")  # the cause fixed, --resume plays the error again
    assert main([*argv, "--resume"]) == 0
    trajectories = read_trajectories(out)
    assert sorted(t.example_id for t in trajectories) == words and all(t.status == "completed" for t in trajectories)
    assert all(t.final_state == {"paper": t.example_id} for t in trajectories)


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_ctrl_c_stops_every_worker_and_resume_finishes(tmp_path):
    """SIGINT to the process group (a terminal's Ctrl-C) during a run with two workers: exit
    status 130, no process left, every finished episode saved once; --resume plays the rest."""
    dataset = tmp_path / "data.jsonl"
    write_words(dataset, 60, seed=5)
    out = tmp_path / "run"
    with FakeModelServer(delay_s=0.05) as server:
        argv = server_argv(server, dataset, out)
        proc = start_run(argv, lines=8, stderr=subprocess.PIPE)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err.decode()[-500:]
        assert b"--resume" in err
        with pytest.raises(ProcessLookupError):  # the group is gone: no worker outlived the run
            os.killpg(proc.pid, 0)
        saved = [t.example_id for t in read_trajectories(out)]
        assert 8 <= len(saved) < 60 and len(set(saved)) == len(saved)
        assert main([*argv, "--resume"]) == 0
    ids = [t.example_id for t in read_trajectories(out)]
    assert len(ids) == 60 == len(set(ids))


def test_workers_are_never_more_than_the_concurrency(tmp_path):
    out = tmp_path / "run"
    run(RunConfig(env="typewriter_1", agent="oracle", out=out, limit=5, concurrency=2, workers=4), progress=False)
    assert json.loads((out / "run.json").read_text())["workers"] == 2
    assert len(read_trajectories(out)) == 5


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_workers_end_when_the_run_process_is_killed(tmp_path):
    """kill -9 of the run process: its workers end too (none keeps playing or holds the run
    directory's lock), and --resume finishes the run."""
    dataset = tmp_path / "data.jsonl"
    write_words(dataset, 40, seed=7)
    out = tmp_path / "run"
    with FakeModelServer(delay_s=0.2) as server:
        argv = server_argv(server, dataset, out)
        proc = start_run(argv, lines=4)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)  # a worker of the group still alive
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("a worker outlived the run process by 10 s")
        assert main([*argv, "--resume"]) == 0
    ids = [t.example_id for t in read_trajectories(out)]
    assert len(ids) == 40 == len(set(ids))

"""The ``ray`` executor on a real two-node Ray cluster on 127.0.0.1 (issue 14).

One module-scoped cluster (``ray.cluster_utils.Cluster``: a head and a second node, one CPU
each, no dashboard) serves every test; the node-kill test removes the second node and so runs
last. Ray turns a "localhost" address into the machine's outward address on Linux unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; it is set before Ray is imported so that every
process of the cluster listens and connects on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a local Ray cluster per module: run by .ci/run (-m slow)

from ray.cluster_utils import Cluster  # noqa: E402

from tests.fakeserver import FakeModelServer  # noqa: E402
from toolgym.data import write_examples  # noqa: E402
from toolgym.providers import ModelSettings  # noqa: E402
from toolgym.ray_executor import RayExecutor  # noqa: E402
from toolgym.records import Example  # noqa: E402
from toolgym.registry import ExtensionError  # noqa: E402
from toolgym.runio import read_scores, read_trajectories  # noqa: E402
from toolgym.runner import RunConfig, run  # noqa: E402
from toolgym.suites.typewriter.environment import Typewriter1  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node on 127.0.0.1, and this process connected as the driver."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    second = c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c, second
    finally:
        ray.shutdown()
        c.shutdown()


def _call(letter: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": letter}}]}


SCRIPTS = {
    "a": [_call("a"), "a"],  # right
    "ab": [_call("a"), _call("c"), "ab"],  # a wrong letter
    "hi": [_call("h"), "hi"],  # stops one letter early
    "ok": [{"content": "", "invalid_tool_calls": [{"name": "type_letter", "args": "{x", "error": "bad json"}]},
           _call("o"), _call("k"), "ok"],  # a malformed call first
    "zz": [_call("z")],  # the script runs out: status error
}


def _dataset(path: Path, n: int) -> Path:
    texts = list(SCRIPTS)
    examples = []
    for i in range(n):
        text = texts[i % len(texts)]
        examples.append(Example(
            id=f"tw-{i:04d}-{text}", input=text, expected_steps=["type_letter"] * len(text),
            expected_calls=Typewriter1.calls_for(text), reference=text, expected_state={"paper": text},
        ))
    write_examples(path, examples)
    return path


def _scores(out: Path) -> dict[tuple[str, int, str], float | None]:
    return {(s.example_id, s.trial, s.grader): s.value for s in read_scores(out)}


def test_workers_that_cannot_import_an_extension_stop_the_run_before_any_episode(cluster, tmp_path, monkeypatch):
    """A model provider importable in the driver only (its folder is on the driver's
    ``sys.path``, not the workers'): a clear error naming the module, and no trajectory."""
    here = tmp_path / "driver_only"
    here.mkdir()
    (here / "driver_only_models.py").write_text(
        "from toolgym.providers.scripted import ScriptedChatModel\n"
        "def factory(name, settings):\n    return ScriptedChatModel(turns=['done'])\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(here))
    out = tmp_path / "run"
    config = RunConfig(env="typewriter_1", model="driver_only_models:factory", limit=2, out=out, executor="ray")
    with pytest.raises(ExtensionError) as info:
        run(config, progress=False)
    message = str(info.value)
    assert "cannot build this run's environment, agent or model" in message
    assert "driver_only_models" in message and "importable on every node" in message
    assert not (out / "trajectories.jsonl").exists() or not (out / "trajectories.jsonl").read_text()


def test_rps_is_one_budget_for_the_cluster(cluster, tmp_path):
    """Two actors on two nodes share ``--rps``: the fake OpenAI-compatible server sees the
    requests of both at most ``rps`` a second (each actor alone would be allowed ``rps``)."""
    seen: list[float] = []

    def plan(request) -> str:
        seen.append(time.monotonic())
        return "ok"

    rps = 8.0
    executor = RayExecutor(actors=2)
    with FakeModelServer(plan) as server:
        settings = ModelSettings(rps=rps, timeout_s=10, max_retries=0)
        settings.extra["base_url"] = server.url + "/v1"
        result = run(RunConfig(
            env="typewriter_1", model="openai-compatible:fake", limit=5, concurrency=4, out=tmp_path / "run",
            settings=settings, executor=executor,
        ), progress=False)
    assert {t.status for t in result.trajectories} == {"completed"}
    assert len(executor.episodes_by_node) == 2  # both nodes played
    assert json.loads((tmp_path / "run" / "run.json").read_text())["workers"] == 2  # the actors, not 1
    assert len(seen) == (1 + 2 + 3 + 4 + 1) + 5  # a letter per call, then "Done." (inputs a, aa, aaa, aaaa, b)
    span = max(seen) - min(seen)
    assert (len(seen) - 1) / span <= rps * 1.1, f"{len(seen)} requests in {span:.2f} s"


def test_starting_restartable_actors_logs_no_core_worker_error(cluster, tmp_path, capfd):
    """The actors get the dataset by value: an ``ObjectRef`` constructor argument of an actor
    that may restart makes Ray's core worker print an error line per actor on the driver's
    stderr (``core_worker.cc: ... has constructor arguments in the object store and
    max_restarts > 0``), noise that is not the user's business."""
    result = run(RunConfig(env="typewriter_1", agent="oracle", limit=4, out=tmp_path / "run",
                           executor=RayExecutor(actors=2)), progress=False)
    assert [t.status for t in result.trajectories] == ["completed"] * 4
    err = capfd.readouterr().err
    assert "core_worker.cc" not in err and "max_restarts" not in err, err


def test_resume_on_ray_plays_only_what_is_missing(cluster, tmp_path):
    """A run cut short (the driver killed) is finished by ``--resume`` through the ray
    executor: every (example, trial) once, the finished ones untouched."""
    dataset = _dataset(tmp_path / "data.jsonl", 30)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"by_input": SCRIPTS}), encoding="utf-8")
    common = dict(env="typewriter_1", model=f"scripted:{script}", dataset=str(dataset), trials=2, max_steps=6)
    full = tmp_path / "full"
    run(RunConfig(out=full, **common), progress=False)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "run.json").write_text((full / "run.json").read_text())
    lines = (full / "trajectories.jsonl").read_text().splitlines(keepends=True)
    (cut / "trajectories.jsonl").write_text("".join(lines[:25]) + lines[25][: len(lines[25]) // 2])  # died mid-line
    executor = RayExecutor()
    run(RunConfig(out=cut, resume=True, concurrency=6, executor=executor, **common), progress=False)
    keys = Counter(t.key for t in read_trajectories(cut))
    assert len(keys) == 60 and set(keys.values()) == {1}
    errored = sum(json.loads(line)["status"] == "error" for line in lines[:25])  # played again on resume
    assert sum(executor.episodes_by_node.values()) == 35 + errored
    assert len(read_trajectories(cut, all_attempts=True)) == 60 + errored  # 25 kept, 35 new, the errors' new attempts
    assert _scores(cut) == _scores(full)


def _actor_pids() -> list[int]:
    """Process ids of the EpisodeWorker actors (Ray names their processes ``ray::EpisodeWorker...``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"ray::EpisodeWorker" in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def _when_written(path: Path, lines: int, action) -> threading.Thread:
    """A thread calling ``action()`` once ``path`` has ``lines`` lines (gives up after 600 s)."""

    def watch() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= lines:
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def test_actor_process_killed_ray_restarts_it_and_replays_its_episodes(cluster, tmp_path):
    """SIGKILL of one actor's process mid-run: Ray restarts the actor on its node and resubmits
    its unfinished calls; every (example, trial) once, local scores."""
    dataset = _dataset(tmp_path / "data.jsonl", 60)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"by_input": SCRIPTS}), encoding="utf-8")
    common = dict(env="typewriter_1", model=f"scripted:{script}", dataset=str(dataset), trials=4, max_steps=6,
                  concurrency=8)
    run(RunConfig(out=tmp_path / "local", **common), progress=False)
    out = tmp_path / "ray"
    killed: list[int] = []

    def kill_one_actor() -> None:
        pids = _actor_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    watcher = _when_written(out / "trajectories.jsonl", 60, kill_one_actor)
    executor = RayExecutor()
    try:
        run(RunConfig(out=out, executor=executor, **common), progress=False)
    finally:
        watcher.join()
    assert killed
    keys = Counter(t.key for t in read_trajectories(out, all_attempts=True))  # every line of the file
    assert len(keys) == 240 and set(keys.values()) == {1}
    assert executor.duplicates == 0
    assert _scores(out) == _scores(tmp_path / "local")


def test_node_killed_mid_run_every_episode_once_same_scores(cluster, tmp_path):
    """2,000 typewriter episodes with the scripted model; the second node's processes are
    killed mid-run. Every (example, trial) is in trajectories.jsonl exactly once, with the
    scores of a local run of the same spec. Runs last: it removes the second node."""
    c, second = cluster
    dataset = _dataset(tmp_path / "data.jsonl", 500)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"by_input": SCRIPTS}), encoding="utf-8")
    common = dict(env="typewriter_1", model=f"scripted:{script}", dataset=str(dataset), trials=4, max_steps=6,
                  concurrency=16)
    local = run(RunConfig(out=tmp_path / "local", **common), progress=False)

    out = tmp_path / "ray"
    killed_at: list[int] = []

    def kill_second_node() -> None:  # once a quarter of the episodes are written
        killed_at.append((out / "trajectories.jsonl").read_bytes().count(b"\n"))
        c.remove_node(second, allow_graceful=False)

    killer = _when_written(out / "trajectories.jsonl", 500, kill_second_node)
    executor = RayExecutor()
    try:
        result = run(RunConfig(out=out, executor=executor, **common), progress=False)
    finally:
        killer.join()
    assert killed_at and killed_at[0] < 1500, killed_at  # the node died with most of the run ahead
    assert not second.any_processes_alive()
    keys = Counter(t.key for t in read_trajectories(out, all_attempts=True))  # every line of the file
    assert len(keys) == 2000 and set(keys.values()) == {1}
    assert executor.duplicates == 0
    assert len(executor.episodes_by_node) == 2  # the second node played before it died
    assert executor.replayed > 0  # its in-flight episodes were played again elsewhere
    assert _scores(out) == _scores(tmp_path / "local")
    assert [(r.grader, r.estimate.mean, r.estimate.stderr, r.estimate.n) for r in result.summary] == [
        (r.grader, r.estimate.mean, r.estimate.stderr, r.estimate.n) for r in local.summary
    ]
    assert Counter(t.status for t in result.trajectories) == Counter(t.status for t in local.trajectories)


def test_without_concurrency_a_ray_run_uses_the_clusters_cpus(cluster, tmp_path, capsys):
    """Issue 38, item 10: the environment's default concurrency (1) left all but one CPU of the
    cluster idle; now a run that gives none plays one episode per CPU of the cluster (2 here)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"by_input": {text: turns for text, turns in SCRIPTS.items()}}))
    result = run(RunConfig(env="typewriter_1", model=f"scripted:{script}", dataset=str(_dataset(tmp_path / "d.jsonl", 4)),
                           out=tmp_path / "run", executor="ray"), progress=False)
    assert len(result.trajectories) == 4
    assert json.loads((tmp_path / "run" / "run.json").read_text())["concurrency"] == 2
    assert "--executor ray plays 2 episodes at once" in capsys.readouterr().err

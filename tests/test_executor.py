"""The executor interface (toolgym/executor.py) without Ray: executors by name or as objects,
and the runner staying the only writer whatever plays the episodes."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.cli import main
from toolgym.executor import Episodes, make_executor
from toolgym.registry import UnknownNameError
from toolgym.runio import read_scores
from toolgym.runner import LocalExecutor, RunConfig, play_episode, run


class BackwardsExecutor:
    """Plays the jobs one at a time in reverse order, on the agent the runner built."""

    name = "backwards"
    in_process = True

    def __init__(self) -> None:
        self.played: list[tuple[str, int]] = []

    def play(self, episodes: Episodes, on_done) -> None:
        async def go() -> None:
            for example, trial in reversed(episodes.jobs):
                self.played.append((example.id, trial))
                on_done(await play_episode(episodes.agent, episodes.env_cls, example, trial))

        asyncio.run(go())


def test_an_executor_object_plays_and_the_runner_writes(tmp_path):
    executor = BackwardsExecutor()
    out = tmp_path / "run"
    result = run(RunConfig(env="typewriter_1", agent="oracle", limit=4, trials=2, out=out, executor=executor), progress=False)
    assert executor.played[0] == ("tw-03-aaaa", 1) and len(executor.played) == 8
    assert [t.key for t in result.trajectories] == executor.played
    local = run(RunConfig(env="typewriter_1", agent="oracle", limit=4, trials=2, out=tmp_path / "local"), progress=False)
    assert sorted(read_scores(out), key=lambda s: (s.example_id, s.trial, s.grader)) == sorted(
        read_scores(tmp_path / "local"), key=lambda s: (s.example_id, s.trial, s.grader))
    assert len(local.trajectories) == 8


def test_executors_by_name():
    assert isinstance(make_executor("local"), LocalExecutor)
    with pytest.raises(UnknownNameError, match="Did you mean 'local'"):
        make_executor("locla")
    with pytest.raises(TypeError, match="executor options"):
        make_executor(LocalExecutor(), {"address": "auto"})


def test_unknown_executor_on_the_command_line_exits_2(tmp_path, capsys):
    code = main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--out", str(tmp_path / "r"),
                 "--executor", "nope", "--no-progress"])
    assert code == 2
    assert "unknown executor 'nope'" in capsys.readouterr().err

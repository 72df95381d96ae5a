"""Extensions that misbehave: a clear error naming the spec, or a recorded outcome, never a
traceback and never a lost run."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolgym
from toolgym.cli import main
from toolgym.records import Measure
from toolgym.runio import read_scores, read_trajectories

EXTENSIONS = '''
import toolgym
from toolgym.providers.scripted import ScriptedChatModel


class Counter(toolgym.Environment):
    """A counter."""

    def reset(self, example):
        self.n = 0

    @toolgym.tool
    def increment(self) -> str:
        """Add one."""
        self.n += 1
        return str(self.n)

    def read_state(self):
        return {"n": self.n}


class Unsaveable(Counter):
    def read_state(self):
        return {"n": object()}


def broken_factory(model_name, settings):
    raise RuntimeError("factory broke")


def not_a_model(model_name, settings):
    return 42


def one_call(model_name, settings):
    return ScriptedChatModel(turns=[{"tool_calls": [{"name": "increment", "args": {}}]}, "done"])


class Raises:
    name = "raises"
    measure = toolgym.BINARY

    def grade(self, example, trajectory):
        raise RuntimeError("grader bug")


class Nameless:
    def grade(self, example, trajectory):
        return None


class ClashesWithFinalState:
    name = "final_state"

    def grade(self, example, trajectory):
        return None
'''


@pytest.fixture
def ext(tmp_path: Path) -> Path:
    (tmp_path / "ext.py").write_text(EXTENSIONS, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text(
        '{"id": "1", "input": "count once", "expected_calls": [{"name": "increment"}], "expected_state": {"n": 1}}\n',
        encoding="utf-8",
    )
    return tmp_path


def _run(ext: Path, *extra: str, env: str = "Counter", model: str = "one_call") -> int:
    return main(["run", "--env", f"{ext / 'ext.py'}:{env}", "--model", f"{ext / 'ext.py'}:{model}",
                 "--dataset", str(ext / "data.jsonl"), "--out", str(ext / "run"), "--no-progress", *extra])


def test_the_extension_run_itself_works(ext):
    assert _run(ext, "--grader", "final_state") == 0
    assert [s.value for s in read_scores(ext / "run")] == [1.0]


@pytest.mark.parametrize(("model", "message"), [
    ("broken_factory", "factory raised RuntimeError: factory broke"),
    ("not_a_model", "returned int, not a langchain-core BaseChatModel"),
])
def test_a_model_factory_that_fails_is_named(ext, capsys, model, message):
    assert _run(ext, model=model) == 2
    err = capsys.readouterr().err
    assert message in err and f"ext.py:{model}" in err and "Traceback" not in err


def test_a_state_that_cannot_be_saved_is_an_error_trajectory(ext):
    assert _run(ext, env="Unsaveable") == 1  # every episode erred: the run fails loudly (--max-errors)
    (traj,) = read_trajectories(ext / "run")
    assert traj.status == "error" and "read_state of 'unsaveable'" in traj.error


def test_a_grader_that_raises_is_an_unscored_value_naming_it(ext):
    assert _run(ext, "--grader", f"{ext / 'ext.py'}:Raises", "--grader", "final_state") == 0
    scores = {s.grader: s for s in read_scores(ext / "run")}
    assert scores["final_state"].value == 1.0
    assert scores["raises"].value is None and "RuntimeError: grader bug" in scores["raises"].explanation


@pytest.mark.parametrize(("grader", "message"), [
    ("Nameless", "has no name"),
    ("ClashesWithFinalState", "two graders named 'final_state'"),
])
def test_graders_without_a_name_or_with_one_name_twice_are_refused(ext, capsys, grader, message):
    assert _run(ext, "--grader", f"{ext / 'ext.py'}:{grader}", "--grader", "final_state") == 2
    assert message in capsys.readouterr().err
    assert not (ext / "run" / "trajectories.jsonl").exists()


def test_evaluate_refuses_zero_trials():
    with pytest.raises(ValueError, match="trials"):
        toolgym.evaluate("typewriter_1", agent="oracle", trials=0)


def test_measure_pass_rules():
    lower = Measure(kind="continuous", direction="lower", pass_if="<=", threshold=0.0)
    assert lower.passed(0.0) is True and lower.passed(2.0) is False and lower.passed(None) is None
    assert lower.better(1.0, 2.0) and not lower.better(2.0, 1.0)
    assert Measure(pass_if=None).passed(1.0) is None

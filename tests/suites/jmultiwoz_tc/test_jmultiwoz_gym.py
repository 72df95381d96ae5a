"""JMultiWOZ-TC through the Gymnasium adapter: one episode per user turn (the history is the
observation, the turn's judgement the reward), and the env checker."""

from __future__ import annotations

import json
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import toolgym.gym as tg
from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import write_dataset


def make(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gymnasium.make(tg.env_id("jmultiwoz_tc"), **kwargs).unwrapped


def test_env_checker_passes(tmp_path):
    env = make(dataset=str(write_dataset(tmp_path / "jm")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)


def test_one_episode_per_user_turn(tmp_path):
    env = make(dataset=str(write_dataset(tmp_path / "jm")), reward="stepwise")
    with_calls = next(e for e in env.examples if e.expected_calls)
    obs, info = env.reset(options={"example_id": with_calls.id})
    assert obs == [{"role": m["role"], "content": m["content"]} for m in with_calls.input]  # the history
    assert {t["function"]["name"] for t in info["tools"]} >= {c.name for c in with_calls.expected_calls}
    calls = [{"id": f"j{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
             for i, c in enumerate(with_calls.expected_calls)]
    _, reward, terminated, truncated, info = env.step({"content": None, "tool_calls": calls})
    assert terminated and not truncated  # the turn is over after one answer
    assert info["scores"]["jmultiwoz_exact"] == 1.0 and reward == pytest.approx(1.0)
    no_calls = next(e for e in env.examples if not e.expected_calls)
    env.reset(options={"example_id": no_calls.id})
    _, reward, terminated, _, info = env.step({"content": None, "tool_calls": calls})
    assert terminated and reward == 0.0 and info["scores"]["jmultiwoz_exact"] == 0.0
    env.reset(options={"example_id": no_calls.id})
    _, reward, terminated, _, info = env.step({"content": "かしこまりました。"})
    assert terminated and reward == 1.0

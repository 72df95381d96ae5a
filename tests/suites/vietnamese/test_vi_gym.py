"""The Vietnamese tasks through the Gymnasium adapter: one step per question, graded by answer
extraction, and the env checker on each task."""

from __future__ import annotations

import warnings

import gymnasium
from gymnasium.utils.env_checker import check_env

import toolgym.gym as tg
from tests.suites.vietnamese.vi_helpers import EXAMS_TEST, XCOPA_TEST, XQUAD


def make(name: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gymnasium.make(tg.env_id(name), **kwargs).unwrapped


def test_env_checker_passes_on_each_task():
    for name, dataset in {"exam_vi": EXAMS_TEST, "xcopa_vi": XCOPA_TEST, "lambada_vi": XQUAD}.items():
        env = make(name, dataset=str(dataset))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env)


def test_multiple_choice_is_one_step_per_question():
    env = make("exam_vi", dataset=str(EXAMS_TEST))
    example = env.examples[0]
    obs, info = env.reset(options={"example_id": example.id})
    assert info["tools"] == [] and obs[-1]["content"].endswith("Đáp án:")
    _, reward, terminated, _, info = env.step(f"Đáp án: {example.reference}")
    assert terminated and reward == 1.0 and info["scores"]["choice_accuracy"] == 1.0
    wrong = next(letter for letter in "ABCD" if letter != example.reference)
    env.reset(options={"example_id": example.id})
    _, reward, terminated, _, _ = env.step(wrong)
    assert terminated and reward == 0.0

"""The Gymnasium adapter (toolgym.gym): registration, the env checker, oracle replays of every
built-in dataset for the maximum return, stepwise credit, seeding, raw-text actions, run
directories, an outside environment. The suite-shaped episodes (JMultiWOZ-TC turns, Vietnamese
questions) are tested in tests/suites/<suite>/."""

from __future__ import annotations

import asyncio
import json
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import toolgym.gym as tg
from toolgym.cli import main
from toolgym.plugins import get_benchmark, registries
from toolgym.runio import RunDirError, read_scores, read_trajectories

TOOL_ENVS = ["typewriter_1", "typewriter_26", "relational_data", "multiverse_math"]
BUILTIN = [(env, ds) for env in TOOL_ENVS for ds in get_benchmark(env).builtin_datasets()
           if ds != "simulated_user"]  # a user model plays those: tests/test_multi_turn_faces.py


def make(name: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the passive checker's render-fps note
        return gymnasium.make(tg.env_id(name), **kwargs)


def call_dict(call, call_id: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


def replay(env, example, per_step: bool = True) -> tuple[float, list[float], dict]:
    """Play the example's expected calls (one per step, or all in one turn), then answer with
    the reference. Returns (return, rewards, last info)."""
    calls = list(example.expected_calls or [])
    rewards, info = [], {}
    n_turns = 1 + len(example.turns or [])  # a multi-turn example: each user turn's calls, then an answer
    for user_turn in range(1, n_turns + 1):
        mine = [c for c in calls if (c.turn or 1) == user_turn]
        turns = [[c] for c in mine] if per_step else ([mine] if mine else [])
        for i, group in enumerate(turns):
            action = {"role": "assistant", "content": None,
                      "tool_calls": [call_dict(c, f"c{user_turn}_{i}_{k}") for k, c in enumerate(group)]}
            _, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
            assert not truncated
            if terminated:
                return sum(rewards), rewards, info
        last = user_turn == n_turns
        answer = "" if example.reference is None or not last else str(example.reference)
        observation, reward, terminated, _, info = env.step({"role": "assistant", "content": answer})
        assert terminated == last
        if not last:
            assert observation == [{"role": "user", "content": example.turns[user_turn - 1]}]
        rewards.append(reward)
    return sum(rewards), rewards, info


def test_every_registered_environment_has_a_gymnasium_id():
    ids = set(gymnasium.registry)
    for name in registries()["environments"].names():
        assert f"toolgym/{name}-v0" in ids


@pytest.mark.parametrize("name", TOOL_ENVS)
def test_env_checker_passes_on_tool_environments(name):
    env = make(name, reward="stepwise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize(("name", "dataset"), BUILTIN)
@pytest.mark.parametrize("reward", ["stepwise", "final"])
def test_oracle_replay_gets_the_maximum_return_on_every_example(name, dataset, reward):
    env = make(name, dataset=dataset, reward=reward).unwrapped
    primary = env.graders[0].name
    for example in env.examples:
        env.reset(options={"example_id": example.id})
        total, rewards, info = replay(env, example, per_step=True)
        assert total == pytest.approx(1.0), (example.id, rewards)
        assert info["scores"][primary] == 1.0
        assert all(r >= -1e-12 for r in rewards)  # a perfect trajectory is never penalised
        if reward == "stepwise" and example.expected_steps:
            # credit is paid as each expected step is matched, not only at the end
            assert rewards[0] == pytest.approx(1 / len(example.expected_steps))
        env.reset(options={"example_id": example.id})
        assert replay(env, example, per_step=False)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("name", TOOL_ENVS)
def test_a_wrong_call_earns_less_stepwise(name):
    env = make(name, reward="stepwise").unwrapped
    tools = None
    checked = 0
    for example in env.examples:
        if not example.expected_calls:
            continue
        _, info = env.reset(options={"example_id": example.id})
        tools = [t["function"]["name"] for t in info["tools"]]
        first = example.expected_calls[0]
        others = [t for t in tools if t not in example.expected_steps]
        if others:  # another tool: the names diverge at once
            wrong = {"name": others[0], "arguments": "{}"}
        else:  # typewriter_1 has one tool: a wrong letter (credited by name, failed by final_state)
            letter = "q" if first.arguments.get("letter") != "q" else "z"
            wrong = {"name": first.name, "arguments": json.dumps({"letter": letter})}
        _, r_wrong, *_ = env.step({"tool_calls": [{"id": "w", "type": "function", "function": wrong}]})
        if others:
            assert r_wrong == 0.0  # no credit for a step that diverges
        rest = example.expected_calls
        total = r_wrong
        for i, c in enumerate(rest):
            _, r, terminated, _, info = env.step({"tool_calls": [call_dict(c, f"r{i}")]})
            total += r
        _, r, terminated, _, info = env.step({"content": str(example.reference or "")})
        total += r
        assert terminated
        assert total < 1.0 - 1e-9, example.id
        assert info["scores"]["steps_exact"] == 0.0
        checked += 1
    assert checked >= 10


def test_reset_with_the_same_seed_gives_the_same_example_and_observation():
    a = make("relational_data").unwrapped
    b = make("relational_data").unwrapped
    for seed in (0, 7, 12345):
        obs1, info1 = a.reset(seed=seed)
        obs2, info2 = a.reset(seed=seed)
        obs3, info3 = b.reset(seed=seed)
        assert obs1 == obs2 == obs3
        assert info1["example_id"] == info2["example_id"] == info3["example_id"]
        assert info1["tools"] == info3["tools"]
    seen = {a.reset(seed=s)[1]["example_id"] for s in range(30)}
    assert len(seen) > 5  # seeds pick different examples


def test_observation_shape_tools_and_example_id():
    env = make("typewriter_1").unwrapped
    obs, info = env.reset(options={"example_id": env.examples[3].id})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert obs[1]["content"] == env.examples[3].input
    assert info["example_id"] == env.examples[3].id
    assert info["tools"] == [{"type": "function", "function": {
        "name": "type_letter", "description": "Type one letter on the paper.",
        "parameters": {"type": "object", "properties": {"letter": {"type": "string",
                                                                    "description": "Exactly one character to type."}},
                       "required": ["letter"]}}}]
    with pytest.raises(KeyError, match="nope"):
        env.reset(options={"example_id": "nope"})


def test_raw_hermes_text_runs_calls_in_order_and_malformed_output_is_an_observation():
    env = make("typewriter_1", dataset=[{"id": "x", "input": "ab", "expected_calls": [
        {"name": "type_letter", "arguments": {"letter": "a"}},
        {"name": "type_letter", "arguments": {"letter": "b"}}], "expected_state": {"paper": "ab"}}],
        reward="stepwise").unwrapped
    env.reset(seed=0)
    text = ('Typing.\n<tool_call>\n{"name": "type_letter", "arguments": {"letter": "a"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "type_letter", "arguments": {"letter": "b"}}\n</tool_call>')
    obs, reward, terminated, truncated, _ = env.step(text)
    assert [m["role"] for m in obs] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in obs] == ["call_1_0", "call_1_1"]
    assert reward == pytest.approx(1.0) and not terminated
    obs, reward, *_ = env.step('<tool_call>\n{"name": "type_letter", "arguments": {"letter": \n</tool_call>')
    assert obs[0]["role"] == "user" and "malformed" in obs[0]["content"]
    assert reward == 0.0
    obs, reward, terminated, _, info = env.step("done")
    assert terminated and info["status"] == "completed" and info["final_answer"] == "done"
    assert info["scores"] == {"final_state": 1.0, "steps_exact": 0.0, "step_ratio": 1.5}
    assert reward == pytest.approx(0.0)  # the return is the final_state score: 1.0 - 1.0 + 0
    traj = env.trajectory()
    assert [s.malformed for s in traj.tool_steps] == [False, False, True]
    assert traj.model_steps[0].text == "Typing."
    json.dumps(traj.model_dump(mode="json"))


def test_truncated_at_max_steps_and_graded():
    env = make("typewriter_26", max_steps=2).unwrapped
    example = next(e for e in env.examples if len(e.expected_steps) >= 3)
    env.reset(options={"example_id": example.id})
    c = example.expected_calls
    _, _, terminated, truncated, _ = env.step({"tool_calls": [call_dict(c[0], "a")]})
    assert not terminated and not truncated
    _, reward, terminated, truncated, info = env.step({"tool_calls": [call_dict(c[1], "b")]})
    assert truncated and not terminated and info["status"] == "step_limit"
    assert reward == 0.0 and info["scores"]["final_state"] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("more")


def test_reward_by_grader_name_or_callable():
    env = make("typewriter_1", reward="steps_exact").unwrapped
    example = env.examples[0]
    env.reset(options={"example_id": example.id})
    assert replay(env, example)[0] == 1.0
    env = make("typewriter_1", reward=lambda ex, traj: len(traj.tool_steps) * 10.0).unwrapped
    env.reset(options={"example_id": example.id})
    assert replay(env, example)[0] == 10.0 * len(example.expected_steps)
    with pytest.raises(ValueError, match="reward"):
        make("typewriter_1", reward=3)


def test_a_reward_grader_that_does_not_apply_says_so_once_and_the_reward_is_zero():
    env = make("typewriter_1", reward="trajectory_match").unwrapped  # its examples have no milestones
    first, second = env.examples[:2]
    env.reset(options={"example_id": first.id})
    with pytest.warns(UserWarning, match="reward grader trajectory_match gave no value for example 'tw-"):
        total, _, info = replay(env, first)
    assert total == 0.0 and info["reward_scored"] is False and info["scores"]["trajectory_match"] is None
    env.reset(options={"example_id": second.id})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per grader
        assert replay(env, second)[2]["reward_scored"] is False
    env = make("typewriter_1", reward="steps_exact").unwrapped
    env.reset(options={"example_id": first.id})
    assert replay(env, first)[2]["reward_scored"] is True


def test_async_twins():
    env = make("multiverse_math", reward="stepwise").unwrapped
    example = env.examples[0]

    async def play() -> float:
        await env.areset(options={"example_id": example.id})
        total = 0.0
        for i, c in enumerate(example.expected_calls):
            _, r, *_ = await env.astep({"tool_calls": [call_dict(c, f"a{i}")]})
            total += r
        _, r, terminated, _, _ = await env.astep({"content": str(example.reference)})
        assert terminated
        return total + r

    assert asyncio.run(play()) == pytest.approx(1.0)


def test_out_writes_a_run_directory_that_grade_and_show_read(tmp_path, capsys):
    out = tmp_path / "rollouts"
    env = make("typewriter_26", dataset="ladder", out=str(out), model="policy-v1").unwrapped
    for seed in range(3):
        _, info = env.reset(seed=seed)
        replay(env, env.example)
    first = env.trajectory()
    env.reset(options={"example_id": first.example_id})
    env.step("<tool_call>\n{\"name\": \"zz\", \"arguments\": {}}\n</tool_call>")
    env.step("gave up")
    trajectories = read_trajectories(out)
    assert len(trajectories) == 4
    assert trajectories[2].model_dump() != trajectories[3].model_dump()
    assert trajectories[3] == env.trajectory()
    assert {t.agent for t in trajectories} == {"gym"} and {t.model for t in trajectories} == {"policy-v1"}
    keys = [t.key for t in trajectories]
    assert len(set(keys)) == 4  # a replayed example gets the next trial number
    stored = {(s.example_id, s.trial, s.grader): s.value for s in read_scores(out)}
    assert main(["grade", str(out)]) == 2  # the environment still writes the directory: refused
    assert "is being written by another run" in capsys.readouterr().err
    assert main(["show", str(out), "--example", first.example_id]) == 0
    assert "gave up" in capsys.readouterr().out
    # a second environment on the same directory continues it (once the first is closed)
    env.close()
    assert main(["grade", str(out)]) == 0
    regraded = {(s.example_id, s.trial, s.grader): s.value for s in read_scores(out)}
    assert regraded == stored
    env2 = make("typewriter_26", dataset="ladder", out=str(out)).unwrapped
    env2.reset(options={"example_id": first.example_id})
    assert env2.trajectory().trial == sum(t.example_id == first.example_id for t in trajectories)
    env2.step({"tool_calls": [call_dict(env2.example.expected_calls[0], "x")]})
    env2.close()  # left unfinished: written as aborted, never graded
    last = read_trajectories(out)[-1]
    assert last.status == "aborted" and len(last.tool_steps) == 1
    assert main(["grade", str(out)]) == 0
    assert {(s.example_id, s.trial) for s in read_scores(out)} == {t.key for t in trajectories}
    with pytest.raises(Exception, match="typewriter_26"):
        make("typewriter_1", out=str(out))


PLUGIN = '''
import toolgym


class Counter(toolgym.Environment):
    """A counter."""

    instructions = "Count with the tools."

    def reset(self, example):
        self.n = 0

    @toolgym.tool
    def bump(self, by: int) -> str:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.n += by
        return str(self.n)

    def read_state(self):
        return {"n": self.n}
'''


def test_an_outside_environment_by_spec_and_by_registry(tmp_path):
    from toolgym.benchmark import ENVIRONMENTS

    path = tmp_path / "counter_env.py"
    path.write_text(PLUGIN)
    data = [{"id": "two", "input": "bump by 2", "expected_calls": [{"name": "bump", "arguments": {"by": 2}}],
             "expected_state": {"n": 2}}]
    env = tg.ToolgymEnv(f"{path}:Counter", dataset=data, reward="stepwise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    env.reset(seed=0)
    _, r1, *_ = env.step('<tool_call>\n{"name": "bump", "arguments": {"by": 2}}\n</tool_call>')
    _, r2, terminated, _, info = env.step("2")
    assert (r1, r2, terminated) == (1.0, 0.0, True)
    # an Environment without a Benchmark is graded by steps_exact (its first) and step_ratio
    assert info["scores"] == {"steps_exact": 1.0, "step_ratio": 1.0}
    # an environment registered later (as a plugin's entry point would be) gets an id on request
    ENVIRONMENTS.add("counter_gym_test", env.env_cls, "test")
    try:
        assert tg.env_id("counter_gym_test") in tg.register_environments()
        made = make("counter_gym_test", dataset=data).unwrapped
        assert made.reset(seed=1)[1]["example_id"] == "two"
    finally:
        ENVIRONMENTS._entries.pop("counter_gym_test", None)
        ENVIRONMENTS._raw.pop("counter_gym_test", None)
        gymnasium.registry.pop(tg.env_id("counter_gym_test"), None)


# --- fixes from the new-user review -------------------------------------------------------------


def test_two_environments_cannot_share_one_out_and_each_vector_sub_environment_gets_its_own(tmp_path):
    out = tmp_path / "shared"
    first = make("typewriter_1", out=str(out))
    with pytest.raises(RunDirError, match="give each environment its own out="):
        make("typewriter_1", out=str(out))
    with pytest.raises(RunDirError, match="its own out="):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gymnasium.make_vec(tg.env_id("typewriter_1"), num_envs=2, vectorization_mode="sync", out=str(tmp_path / "vec"))
    first.close()
    make("typewriter_1", out=str(out)).close()  # closed: the directory is free again

    def sub(i):
        return lambda: make("typewriter_1", out=str(tmp_path / f"env{i}"))

    envs = gymnasium.vector.SyncVectorEnv([sub(i) for i in range(2)])
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(["no call", "no call either"])  # each step ends both episodes (autoreset next)
    envs.close()
    for i in range(2):
        keys = [t.key for t in read_trajectories(tmp_path / f"env{i}", all_attempts=True)]
        assert len(keys) == 2 and len(set(keys)) == 2


def test_out_naming_a_file_is_a_clear_error(tmp_path):
    path = tmp_path / "afile"
    path.write_text("x")
    with pytest.raises(RunDirError, match=f"out='{path}' is a file, not a run directory"):
        make("typewriter_1", out=str(path))


def test_hermes_calls_inside_reasoning_are_not_actions():
    env = make("typewriter_1").unwrapped
    env.reset(seed=0)
    thought = '<think>hmm <tool_call>{"name":"type_letter","arguments":{"letter":"z"}}</tool_call></think>'
    obs, *_ = env.step(thought + '<tool_call>{"name": "type_letter", "arguments": {"letter": "a"}}</tool_call>')
    assert [m["role"] for m in obs] == ["tool"]
    (model,) = env.trajectory().model_steps
    assert [c.arguments for c in model.tool_calls] == [{"letter": "a"}]
    assert "hmm" in model.reasoning and '"z"' in model.reasoning and model.text == ""


def test_dict_action_keeps_reasoning_content_and_think_text():
    env = make("typewriter_1").unwrapped
    env.reset(seed=0)
    env.step({"content": "<think>inline thought</think>Done.", "reasoning_content": "thought sent apart"})
    (model,) = env.trajectory().model_steps
    assert "inline thought" in model.reasoning and "thought sent apart" in model.reasoning
    assert model.text == "Done."


def test_a_malformed_call_with_an_id_is_answered_by_a_tool_message():
    env = make("typewriter_1").unwrapped
    env.reset(seed=0)
    action = {"content": None, "tool_calls": [
        {"id": "3", "function": {"name": "type_letter", "arguments": 5}},
        {"id": "4", "type": "function", "function": {"name": "type_letter", "arguments": '{"letter": "a"}'}}]}
    obs, *_ = env.step(action)
    assert [(m["role"], m.get("tool_call_id")) for m in obs] == [("tool", "3"), ("tool", "4")]
    assert "malformed" in obs[0]["content"]
    from toolgym.openai_format import validate_chat
    assistant = env.messages[-3]
    assert [c["id"] for c in assistant["tool_calls"]] == ["3", "4"]
    problems = validate_chat(env.messages + [{"role": "assistant", "content": "ok"}])
    assert problems == ["message 2: arguments of 3 are not a string holding a JSON object"]  # as sent, and answered
    assert [s.malformed for s in env.trajectory().tool_steps] == [True, False]


def test_import_without_gymnasium_names_the_extra(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "gymnasium.py").write_text("raise ModuleNotFoundError(\"No module named 'gymnasium'\", name='gymnasium')\n")
    path = os.pathsep.join([str(tmp_path), os.path.dirname(os.path.dirname(tg.__file__))])
    probe = subprocess.run([sys.executable, "-c", "import toolgym.gym"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": path})
    assert probe.returncode != 0
    assert "pip install -e '.[gym]'" in probe.stderr



def test_stepwise_reward_follows_milestones_on_an_example_with_several_orders():
    env = make("relational_data", reward="stepwise").unwrapped
    example = next(ex for ex in env.examples if ex.id == "rd-18")  # two users looked up, then their locations
    calls = example.expected_calls
    order = [1, 3, 0, 2]  # Ana Sofia first: a valid order that is not the written one
    env.reset(options={"example_id": example.id})
    rewards = []
    for i, k in enumerate(order):
        _, r, *_ = env.step({"tool_calls": [call_dict(calls[k], f"c{i}")]})
        rewards.append(r)
    _, r, terminated, _, info = env.step({"content": str(example.reference)})
    assert terminated
    assert rewards == pytest.approx([0.25, 0.25, 0.25, 0.25])  # each required milestone paid as it is reached
    assert info["scores"]["trajectory_match"] == 1.0
    # the final reward is the first grader's (steps_exact: the multiset matches), so the return is 1
    assert sum(rewards) + r == pytest.approx(info["scores"]["steps_exact"]) == 1.0
    # a location looked up before its user earns nothing for it
    env.reset(options={"example_id": example.id})
    _, r_early, *_ = env.step({"tool_calls": [call_dict(calls[2], "x")]})
    assert r_early == 0.0


def test_stepwise_reward_pays_a_state_milestone_when_the_step_that_reaches_it_is_taken():
    data = [{"id": "abc", "input": "abc", "expected_calls": [{"name": n} for n in "abc"],
             "milestones": [{"id": "ab", "state": {"paper": "ab"}}, {"id": "c", "after": ["ab"], "call": {"name": "c"}}],
             "extra_calls": "allow"}]
    env = make("typewriter_26", dataset=data, reward="stepwise").unwrapped
    env.reset(options={"example_id": "abc"})
    rewards = []
    for i, letter in enumerate("abc"):
        _, r, *_ = env.step({"tool_calls": [{"id": f"c{i}", "type": "function",
                                             "function": {"name": letter, "arguments": "{}"}}]})
        rewards.append(r)
    assert rewards == pytest.approx([0.0, 0.5, 0.5])  # "ab" is reached by the second step, from its patch


@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
def test_a_limit_that_is_not_a_positive_integer_is_refused_as_run_refuses_it(limit, capsys):
    with pytest.raises(ValueError, match=f"limit must be a positive integer, got {limit!r}"):
        make("typewriter_1", limit=limit)
    if limit == 0:
        with pytest.raises(SystemExit):
            main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "0"])
        assert "expected a positive integer" in capsys.readouterr().err
    assert len(make("typewriter_1", limit=2).unwrapped.examples) == 2


def test_close_ends_the_run_of_out_as_a_run_ends(tmp_path):
    out = tmp_path / "rollouts"
    env = make("typewriter_1", out=str(out))
    env.reset(seed=0)
    env.step("done")
    assert json.loads((out / "run.json").read_text())["finished_at"] is None
    scores = (out / "scores.jsonl").read_text()
    env.close()
    assert json.loads((out / "run.json").read_text())["finished_at"]  # set by close(), as a run sets it
    assert (out / "scores.jsonl").read_text() == scores  # the same scores
    env.close()  # idempotent
    again = make("typewriter_1", out=str(out))  # the lock was released
    again.close()


def test_with_out_an_example_is_played_no_more_often_than_its_published_format_allows(tmp_path):
    pytest.importorskip("toolgym.suites.jmultiwoz_tc")
    from pathlib import Path

    data = Path(__file__).parent / "data" / "run_v2" / "jmultiwoz_data" / "jmultiwoz_tc_input.jsonl"
    env = make("jmultiwoz_tc", dataset=str(data), out=tmp_path / "rollouts").unwrapped  # one result line a turn
    first, second = env.examples[:2]
    env.reset(options={"example_id": first.id})
    env.step("no call")
    with pytest.raises(ValueError, match=r"has been played 1 time\(s\) in .*the most jmultiwoz_tc's published format"):
        env.reset(options={"example_id": first.id})
    env.reset(options={"example_id": second.id})  # another turn is fine
    env.close()
    free = make("jmultiwoz_tc", dataset=str(data)).unwrapped  # without out=, rollouts repeat as training needs
    for _ in range(2):
        free.reset(options={"example_id": first.id})
    free.close()

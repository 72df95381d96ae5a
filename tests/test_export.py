"""``toolgym export``: OpenAI-chat fine-tuning data and preference pairs from run directories,
checked by an independent validator, loaded by ``datasets``, and replayed through the
Gymnasium adapter to the same final state and scores."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium
import pytest

import toolgym.gym as tg
from toolgym.cli import main
from toolgym.openai_format import validate_chat
from toolgym.runio import read_scores, read_trajectories

TOOL_ENVS = ["typewriter_1", "typewriter_26", "relational_data", "multiverse_math"]


def check_conversation(messages: list[dict], tools: list[dict]) -> None:
    """The test's own validator of one OpenAI chat conversation (independent of
    toolgym.openai_format.validate_chat): roles in a valid order, every tool_call_id answered
    exactly once before the next non-tool message, arguments strings holding JSON objects,
    functions among the tools."""
    names = {t["function"]["name"] for t in tools}
    assert all(t["type"] == "function" and isinstance(t["function"]["parameters"], dict) for t in tools)
    waiting: list[str] = []
    answered: set[str] = set()
    previous = None
    for m in messages:
        role = m["role"]
        assert role in {"system", "user", "assistant", "tool"}
        if role == "system":
            assert previous is None
        elif role == "tool":
            assert previous in {"assistant", "tool"}
            assert m["tool_call_id"] in waiting, m
            waiting.remove(m["tool_call_id"])
            assert m["tool_call_id"] not in answered
            answered.add(m["tool_call_id"])
            assert isinstance(m["content"], str)
        else:
            assert not waiting, f"unanswered calls {waiting} before a {role} message"
            if role == "assistant":
                assert previous in {"user", "tool", "assistant"}
                for c in m.get("tool_calls", []):
                    assert c["type"] == "function" and c["function"]["name"] in names
                    assert isinstance(c["function"]["arguments"], str)
                    assert isinstance(json.loads(c["function"]["arguments"]), dict)
                    waiting.append(c["id"])
                assert isinstance(m["content"], str) or (m["content"] is None and m.get("tool_calls"))
            else:
                assert isinstance(m["content"], str)
        previous = role
    assert not waiting
    assert validate_chat(messages, tools) == []


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def make(name: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gymnasium.make(tg.env_id(name), **kwargs).unwrapped


@pytest.fixture(scope="module")
def oracle_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("oracle")
    runs = {}
    for env in TOOL_ENVS:
        out = root / env
        assert main(["run", "--env", env, "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
        runs[env] = out
    return runs


def test_openai_chat_export_is_valid_and_loads_with_datasets(oracle_runs, tmp_path):
    from datasets import load_dataset

    for env, run in oracle_runs.items():
        out = tmp_path / f"{env}.jsonl"
        assert main(["export", str(run), "--format", "openai-chat", "--out", str(out)]) == 0
        records = read_jsonl(out)
        assert len(records) == len(read_trajectories(run)) > 0
        for record in records:
            assert set(record) == {"messages", "tools"}
            check_conversation(record["messages"], record["tools"])
            assert record["messages"][-1]["role"] == "assistant"  # the final answer
        loaded = load_dataset("json", data_files=str(out), split="train")
        assert loaded.num_rows == len(records)
        assert loaded[0]["messages"][0]["role"] == "system"
        # exactly as written (datasets 3.x gave each tool's properties every other tool's, as null)
        assert [loaded[i] for i in range(loaded.num_rows)] == records


def test_arguments_as_objects_for_hugging_face_chat_templates(oracle_runs, tmp_path):
    from datasets import load_dataset

    run = oracle_runs["relational_data"]
    as_string, as_object = tmp_path / "s.jsonl", tmp_path / "o.jsonl"
    assert main(["export", str(run), "--out", str(as_string)]) == 0
    assert main(["export", str(run), "--arguments", "object", "--out", str(as_object)]) == 0
    strings, objects = read_jsonl(as_string), read_jsonl(as_object)
    calls = 0
    for s_record, o_record in zip(strings, objects, strict=True):
        for s_msg, o_msg in zip(s_record["messages"], o_record["messages"], strict=True):
            for s_call, o_call in zip(s_msg.get("tool_calls", []), o_msg.get("tool_calls", []), strict=True):
                assert isinstance(o_call["function"]["arguments"], dict)
                assert o_call["function"]["arguments"] == json.loads(s_call["function"]["arguments"])
                calls += 1
            assert {k: v for k, v in o_msg.items() if k != "tool_calls"} == {k: v for k, v in s_msg.items() if k != "tool_calls"}
    assert calls > 0
    # a chat template's `arguments | tojson` now writes the object once, not a quoted string
    first = next(c for r in objects for m in r["messages"] for c in m.get("tool_calls", []))
    assert json.dumps(first["function"]["arguments"]).startswith("{")
    loaded = load_dataset("json", data_files=str(as_object), split="train")
    assert [loaded[i] for i in range(loaded.num_rows)] == objects
    with pytest.raises(ValueError, match="unknown arguments form"):
        from toolgym.views.export import export_runs

        export_runs([run], tmp_path / "x.jsonl", arguments="dict")


@pytest.mark.parametrize("env", TOOL_ENVS)
def test_exported_oracle_trajectories_replay_through_gymnasium_to_the_same_state_and_scores(oracle_runs, tmp_path, env):
    run = oracle_runs[env]
    out = tmp_path / "chat.jsonl"
    assert main(["export", str(run), "--out", str(out)]) == 0
    records = read_jsonl(out)
    trajectories = read_trajectories(run)
    scores = {(s.example_id, s.grader): s.value for s in read_scores(run)}
    gym_env = make(env)
    for record, original in zip(records, trajectories, strict=True):
        obs, info = gym_env.reset(options={"example_id": original.example_id})
        messages = record["messages"]
        assert messages[: len(obs)] == obs  # the same prompt
        assert record["tools"] == info["tools"]
        i, terminated = len(obs), False
        while i < len(messages):
            action = messages[i]
            assert action["role"] == "assistant"
            obs, _, terminated, truncated, info = gym_env.step(action)
            i += 1
            assert messages[i : i + len(obs)] == obs  # the same observations, message by message
            i += len(obs)
        assert terminated
        replayed = gym_env.trajectory()
        assert replayed.final_state == original.final_state
        assert replayed.final_answer == original.final_answer
        assert info["scores"] == {g: scores.get((original.example_id, g)) for g in info["scores"]}


def gym_rollouts(out: Path, env: str = "typewriter_26", n: int = 4) -> None:
    """For the first n examples: an oracle replay (passes) and a wrong first call (fails)."""
    gym_env = make(env, dataset="ladder", out=str(out))
    for example in gym_env.examples[:n]:
        for wrong in (False, True):
            gym_env.reset(options={"example_id": example.id})
            for i, c in enumerate(example.expected_calls):
                name = "z" if (wrong and i == 0 and c.name != "z") else ("y" if wrong and i == 0 else c.name)
                gym_env.step({"content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}],
                    "tokens": {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5 + i], "completion_logprobs": [-0.5, -0.25]}})
            gym_env.step({"content": "done", "tokens": {"prompt_ids": [1], "completion_ids": [9]}})


def test_preference_pairs_from_gymnasium_rollouts(tmp_path):
    from datasets import load_dataset

    run = tmp_path / "rollouts"
    gym_rollouts(run)
    out = tmp_path / "pref.jsonl"
    assert main(["export", str(run), "--format", "preference", "--out", str(out)]) == 0
    pairs = read_jsonl(out)
    assert len(pairs) == 4
    final = {(s.example_id, s.trial): s.value for s in read_scores(run) if s.grader == "final_state"}
    assert sorted(final.values()) == [0.0] * 4 + [1.0] * 4
    by_calls = {}
    for t in read_trajectories(run):
        by_calls[json.dumps([s.name for s in t.tool_steps])] = final[t.key]
    for pair in pairs:
        assert set(pair) == {"prompt", "chosen", "rejected", "tools"}
        assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
        check_conversation(pair["prompt"] + pair["chosen"], pair["tools"])
        check_conversation(pair["prompt"] + pair["rejected"], pair["tools"])
        names = lambda msgs: json.dumps([c["function"]["name"] for m in msgs for c in m.get("tool_calls", [])])  # noqa: E731
        assert by_calls[names(pair["chosen"])] == 1.0
        assert by_calls[names(pair["rejected"])] == 0.0
    assert load_dataset("json", data_files=str(out), split="train").num_rows == 4


def test_preference_export_counts_each_trajectory_once_as_used_or_skipped(tmp_path, capsys):
    """The summary line counts the trajectories in the written pairs, and the skipped lines the
    rest: an example with only a passing trajectory, and a passing trajectory no pair needed
    (two passing, one failing), are skipped, not counted as used."""
    run = tmp_path / "rollouts"
    gym_env = make("typewriter_26", dataset="ladder", out=str(run))
    for example, plays in zip(gym_env.examples, [(False, True), (False, False, True), (False,)], strict=False):
        for wrong in plays:
            gym_env.reset(options={"example_id": example.id})
            for i, c in enumerate(example.expected_calls):
                name = ("z" if c.name != "z" else "y") if (wrong and i == 0) else c.name
                gym_env.step({"content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}]})
            gym_env.step({"content": "done"})
    out = tmp_path / "pairs.jsonl"
    assert main(["export", str(run), "--format", "preference", "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert len(read_jsonl(out)) == 2
    assert stdout.strip() == f"{out}: 2 preference records from 4 of 6 trajectories (2 skipped)", stdout
    skipped = sorted(line for line in stderr.splitlines() if line.startswith("skipped:"))
    assert [line.split(" (")[0] for line in skipped] == ["skipped: 1", "skipped: 1"], stderr
    assert "example without both a passing and a failing trajectory" in stderr
    assert "passing trajectory in no pair" in stderr


def test_filters_and_tokens(tmp_path, capsys):
    run = tmp_path / "rollouts"
    gym_rollouts(run, n=3)
    out = tmp_path / "good.jsonl"
    assert main(["export", str(run), "--where", "final_state>=1", "--where", "step_ratio<=1", "--out", str(out),
                 "--with-tokens"]) == 0
    records = read_jsonl(out)
    assert len(records) == 3
    for record in records:
        n_assistant = sum(m["role"] == "assistant" for m in record["messages"])
        assert len(record["tokens"]) == n_assistant
        assert record["tokens"][0] == {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5], "completion_logprobs": [-0.5, -0.25],
                                       "logprob_source": None}
        assert record["tokens"][-1]["completion_ids"] == [9]
    assert main(["export", str(run), "--where", "final_state<1", "--out", str(out)]) == 0
    assert len(read_jsonl(out)) == 3
    capsys.readouterr()
    # an environment no run is of keeps nothing: an error naming the runs' environments, nothing written
    assert main(["export", str(run), "--env", "typewriter_1", "--out", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no run is of environment 'typewriter_1'" in err and "typewriter_26" in err
    assert not (tmp_path / "none.jsonl").exists()
    assert main(["export", str(run), "--env", "typewriter_26", "--out", str(out)]) == 0
    assert len(read_jsonl(out)) == 6  # the 3 passing and the 3 failing
    assert main(["export", str(run), "--status", "step_limit", "--out", str(out)]) == 0
    assert read_jsonl(out) == []


def test_malformed_calls_export_as_text_and_a_user_observation(tmp_path):
    run = tmp_path / "rollouts"
    gym_env = make("typewriter_1", out=str(run))
    gym_env.reset(seed=0)
    gym_env.step('<tool_call>\n{"name": "type_letter", "arguments": {"letter": "a"}}\n</tool_call>\n'
                 '<tool_call>\n{"name": "type_letter", "arguments": {"letter": \n</tool_call>')
    gym_env.step("stop")
    out = tmp_path / "chat.jsonl"
    assert main(["export", str(run), "--out", str(out)]) == 0
    (record,) = read_jsonl(out)
    check_conversation(record["messages"], record["tools"])
    assistant, tool, user = record["messages"][2:5]
    assert len(assistant["tool_calls"]) == 1 and "<tool_call>" in assistant["content"]
    assert tool["role"] == "tool" and user["role"] == "user" and "malformed" in user["content"]


def test_bad_where_is_a_clear_error(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--where", "final_state~1", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "GRADER>=VALUE" in capsys.readouterr().err


# --- fixes from the new-user review -------------------------------------------------------------


def test_call_ids_repeated_across_turns_are_renamed_with_their_answers(tmp_path):
    run = tmp_path / "rollouts"
    gym_env = make("typewriter_1", dataset=[{"id": "ab", "input": "ab"}], out=str(run))
    gym_env.reset(seed=0)
    for letter in "ab":  # the same id each turn, as toolgym's scripted provider and some servers send
        gym_env.step({"content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "type_letter", "arguments": json.dumps({"letter": letter})}}]})
    gym_env.step("done")
    gym_env.close()
    out = tmp_path / "chat.jsonl"
    assert main(["export", str(run), "--out", str(out)]) == 0
    (record,) = read_jsonl(out)
    check_conversation(record["messages"], record["tools"])
    calls = [(c["id"], json.loads(c["function"]["arguments"])["letter"])
             for m in record["messages"] for c in m.get("tool_calls", [])]
    assert calls == [("call_0", "a"), ("call_0~1", "b")]
    answers = [m["tool_call_id"] for m in record["messages"] if m["role"] == "tool"]
    assert answers == ["call_0", "call_0~1"]


def test_skipped_records_name_the_reason_and_the_first_example(tmp_path, capsys):
    run = tmp_path / "rollouts"
    gym_rollouts(run, env="typewriter_26", n=2)
    gym_env = make("typewriter_26", dataset="ladder", out=str(run))
    gym_env.reset(options={"example_id": gym_env.examples[1].id})
    gym_env.close()  # aborted
    lines = (run / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    broken = [json.loads(line) for line in lines[:2]]
    for traj, call_id in zip(broken, ("a1", "b2"), strict=True):  # a well-formed call of a tool the environment lacks
        traj["steps"][0]["tool_calls"][0].update(name="nosuch", id=call_id)
    (run / "trajectories.jsonl").write_text("\n".join([*map(json.dumps, broken), *lines[2:]]) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "x.jsonl")]) == 0
    err = capsys.readouterr().err
    first = gym_env.examples[0].id
    # one count for one problem, whatever call ids it names; the first one's ids beside it
    assert (f"skipped: 2 (record failed validation: a call names 'nosuch', not in tools; first: {first} trial 0: "
            "call a1 names 'nosuch', not in tools)") in err
    assert f"skipped: 1 (status aborted; first: {gym_env.examples[1].id} trial 2)" in err
    assert err.count("skipped:") == 2


def test_unknown_grader_in_where_or_pass_grader_is_an_error_naming_the_runs_graders(tmp_path, capsys):
    run = tmp_path / "rollouts"
    gym_rollouts(run, n=1)
    out = str(tmp_path / "x.jsonl")
    assert main(["export", str(run), "--where", "nosuch>=1", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "--where: unknown grader 'nosuch'" in err and "final_state" in err and "steps_exact" in err
    assert main(["export", str(run), "--format", "preference", "--pass-grader", "final_stat", "--out", out]) == 2
    assert "did you mean 'final_state'?" in capsys.readouterr().err


def test_with_tokens_on_a_run_without_tokens_warns_once(tmp_path, capsys):
    run = tmp_path / "rollouts"
    gym_env = make("typewriter_1", out=str(run))
    for seed in range(2):
        gym_env.reset(seed=seed)
        gym_env.step("no call")
    gym_env.close()
    with_tokens = tmp_path / "rollouts-tokens"
    gym_rollouts(with_tokens, n=1)
    capsys.readouterr()
    out = tmp_path / "x.jsonl"
    assert main(["export", str(run), str(with_tokens), "--with-tokens", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"of {run} has recorded tokens" in err and "null" in err
    assert [r["tokens"] for r in read_jsonl(out)[:2]] == [[None], [None]]

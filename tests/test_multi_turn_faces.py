"""Multi-turn episodes on every face: show, the web view's API, the report, export, the
Gymnasium adapter, fork and teacher forcing (serve: tests/mcpio/test_mcp_multi_turn.py)."""

from __future__ import annotations

import json

import pytest
from conftest import call, turn
from test_multi_turn import ADD_C, AGENT, SIMULATED, WRONG_AFTER_TURN_1, typed

from toolgym.cli import main
from toolgym.data import DatasetError
from toolgym.forks import fork
from toolgym.gym import ToolgymEnv
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.runner import RunConfig, run
from toolgym.users import STOP


@pytest.fixture
def multi_run(tmp_path):
    data = tmp_path / "multi.jsonl"
    data.write_text(json.dumps(ADD_C) + "\n")
    out = tmp_path / "run"
    run(RunConfig(env="typewriter_1", model=ScriptedChatModel(**WRONG_AFTER_TURN_1), dataset=data, out=out), progress=False)
    return out


def test_show_draws_each_user_message_in_place(multi_run, capsys):
    assert main(["show", str(multi_run)]) == 0
    out = capsys.readouterr().out
    first, second = out.index("user · turn 1"), out.index("user · turn 2")
    assert first < out.index("typed a") < second < out.index("typed bc")
    assert "turn_state = 0.5" in out


def test_export_writes_one_conversation_with_every_user_turn(multi_run, tmp_path):
    target = tmp_path / "sft.jsonl"
    assert main(["export", str(multi_run), "--out", str(target)]) == 0
    (record,) = [json.loads(line) for line in target.read_text().splitlines()]
    users = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert users == ["type ab", "now add c"]
    roles = [m["role"] for m in record["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "tool", "assistant"]


def test_the_report_and_the_web_view_carry_user_steps(multi_run):
    from toolgym.api import load_run
    from toolgym.views.report.payload import trajectory_payload
    from toolgym.views.rundata import RunView

    view = RunView(load_run(multi_run))
    (traj,) = view.run.trajectories
    payload = trajectory_payload(view, traj, 0, 1000)
    users = [s for s in payload["s"] if "u" in s]
    assert [(s["u"], s["tn"]) for s in users] == [("type ab", 1), ("now add c", 2)]
    assert payload["s"].index(users[1]) == 4  # in place: after turn 1's answer


def test_gym_gives_the_next_user_message_as_the_observation_and_terminates_when_the_user_stops():
    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [STOP]})
    env = ToolgymEnv("typewriter_1", [SIMULATED], user_model=user)
    env.reset(seed=0)

    def act(*letters, text=None):
        if text is not None:
            return {"role": "assistant", "content": text}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{x}", "type": "function", "function": {"name": "type_letter", "arguments": json.dumps({"letter": x})}}
            for x in letters]}

    assert env.step(act("a", "b"))[2:4] == (False, False)
    observation, _, terminated, truncated, info = env.step(act(text="typed ab"))
    assert observation == [{"role": "user", "content": "now add c"}] and info["user_turn"] == 2
    assert not terminated and not truncated
    env.step(act("c"))
    observation, reward, terminated, _, info = env.step(act(text="typed abc"))
    assert terminated and observation == [] and info["scores"]["turn_state"] == 1.0
    assert not any(STOP in json.dumps(m) for m in env.messages)
    traj = env.trajectory()
    assert [(s.turn, s.stop) for s in traj.user_steps] == [(1, False), (2, False), (2, True)]
    with pytest.raises(DatasetError, match="user_model="):
        ToolgymEnv("typewriter_1", [SIMULATED])


def test_gym_scripted_turns_truncate_when_max_steps_are_spent():
    env = ToolgymEnv("typewriter_1", [ADD_C], max_steps=1)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step({"role": "assistant", "content": "done"})
    assert truncated and not terminated and info["status"] == "step_limit"
    assert env.trajectory().turn_states == [{"paper": ""}]


def test_fork_continues_with_the_same_user_turns(multi_run, tmp_path):
    # turn 1's script starts after the replayed model turn (the parent's call of "a")
    good = ScriptedChatModel(by_input={"type ab": ["(replayed)", typed("b"), "typed ab"], "now add c": [typed("c"), "typed c"]})
    result = fork(multi_run, "add-c", 2, tmp_path / "fork", model=good)
    (traj,) = result.trajectories
    assert traj.parent["step"] == 2
    assert [s.text for s in traj.user_steps] == ["type ab", "now add c"]  # turn 1 replayed, turn 2 scripted again
    assert traj.turn_states == [{"paper": "ab"}, {"paper": "abc"}]
    assert {s.grader: s.value for s in result.scores}["turn_state"] == 1.0


def test_fork_of_a_simulated_user_conversation_plays_on_with_the_simulator(tmp_path):
    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    user_script = tmp_path / "user.json"
    user_script.write_text(json.dumps({"by_input": {"typed ab": ["now add c"], "typed abc": [STOP], "typed a": ["and b, then c"]}}))
    agent_script = tmp_path / "agent.json"
    agent_script.write_text(json.dumps(AGENT))
    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{agent_script}", "--user-model", f"scripted:{user_script}",
                 "--dataset", str(data), "--out", str(out), "--no-progress"]) == 0
    stops_after_a = ScriptedChatModel(by_input={"type ab": [typed("a"), "typed a"],
                                                "and b, then c": [typed("b", "c"), "typed abc"]})
    result = fork(out, "sim", 1, tmp_path / "fork", model=stops_after_a)  # the parent's user model, from run.json
    (traj,) = result.trajectories
    assert [s.text for s in traj.user_steps] == ["type ab", "and b, then c", ""]
    assert traj.user_model == f"scripted:{user_script}"
    assert traj.final_state == {"paper": "abc"}


def test_teacher_forcing_refuses_multi_turn_examples():
    with pytest.raises(DatasetError, match="teacher forcing replays a single-turn reference path"):
        run(RunConfig(env="typewriter_1", model=ScriptedChatModel(turns=[turn(call("type_letter", letter="a"))]),
                      dataset=[ADD_C], protocol="teacher-forced"), progress=False)


def test_export_leaves_a_bare_stop_out(tmp_path):
    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [STOP]})
    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    out = tmp_path / "run"
    run(RunConfig(env="typewriter_1", model=ScriptedChatModel(**AGENT), user_model=user, dataset=data, out=out),
        progress=False)
    target = tmp_path / "sft.jsonl"
    assert main(["export", str(out), "--out", str(target)]) == 0
    (record,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert [m["content"] for m in record["messages"] if m["role"] == "user"] == ["type ab", "now add c"]
    assert record["messages"][-1] == {"role": "assistant", "content": "typed abc"}


def test_the_web_view_serves_user_steps_and_finds_a_later_user_message(multi_run, tmp_path):
    pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")
    from test_view_api import api, wait_indexed
    from view_runs import view_server

    with view_server([multi_run.parent], tmp_path / "cache") as (url, _proc):
        (listed,) = [r for r in wait_indexed(url) if r["name"].endswith("run")]
        name = listed["name"]
        detail = api(url, f"/api/runs/{name}/trajectories/add-c/0")
        steps = detail["trajectory"]["steps"]
        assert [(s["kind"], s.get("turn")) for s in steps if s["kind"] == "user"] == [("user", 1), ("user", 2)]
        assert [s.get("tool_index") for s in steps if s["kind"] == "tool"] == [0, 1, 2]
        found = api(url, f"/api/runs/{name}/trajectories", q="now add c")["rows"]
        assert [r["example_id"] for r in found] == ["add-c"]


def test_a_fork_shows_the_simulated_user_the_replayed_conversation_once(tmp_path):
    from test_multi_turn import Listening

    data = tmp_path / "sim.jsonl"
    data.write_text(json.dumps(SIMULATED) + "\n")
    out = tmp_path / "run"
    user = ScriptedChatModel(by_input={"typed ab": ["now add c"], "typed abc": [STOP]})
    run(RunConfig(env="typewriter_1", model=ScriptedChatModel(**AGENT), user_model=user, dataset=data, out=out),
        progress=False)
    Listening.heard = []
    listening = Listening(by_input={"done with ab": [STOP]})
    # fork at tool step 3: turn 1's calls replayed, then the new agent answers turn 1 (its script
    # counts the replayed model turn)
    agent = ScriptedChatModel(by_input={"type ab": ["(replayed)", "done with ab"]})
    result = fork(out, "sim", 3, tmp_path / "fork", model=agent, user_model=listening)
    (traj,) = result.trajectories
    assert [(s.turn, s.stop, s.text) for s in traj.user_steps] == [(1, False, "type ab"), (1, True, "")]
    (seen,) = Listening.heard
    assert [(m.type, m.content) for m in seen[1:]] == [("ai", "type ab"), ("human", "done with ab")]

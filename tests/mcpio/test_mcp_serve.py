"""``toolgym serve``: real servers (a subprocess over stdio, or streamable HTTP on a free
loopback port) driven by the real ``mcp`` client SDK; served runs are compared with
``run --agent oracle`` on the same dataset."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, types  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from secret_values import SECRETS  # noqa: E402, I001

import toolgym  # noqa: E402
from toolgym.cli import main  # noqa: E402
from toolgym.data import load_examples, resolve_dataset  # noqa: E402
from toolgym.plugins import get_benchmark  # noqa: E402
from toolgym.runio import read_run, read_scores, read_trajectories  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SERVE = [str(ROOT / "run_agent.py"), "serve"]
CLIENT = types.Implementation(name="test-client", version="1.2")
SECRET = SECRETS["token"]  # random per session: conftest greps every run directory for it


def serve_args(out: Path, *extra: str) -> list[str]:
    return [*SERVE, "--out", str(out), *extra]


@contextlib.asynccontextmanager
async def stdio_session(args: list[str]):
    params = StdioServerParameters(command=sys.executable, args=args, env=ENV, cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write, client_info=CLIENT) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as client, \
            streamable_http_client(url, http_client=client) as (read, write, _), \
            ClientSession(read, write, client_info=CLIENT) as session:
        await session.initialize()
        yield session


class HttpServer:
    """``toolgym serve --transport http --port 0`` in a subprocess; the URL is read from the
    line it prints once listening."""

    def __init__(self, out: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *serve_args(out, "--transport", "http", "--port", "0", *extra)],
            env=ENV, cwd=ROOT, stderr=subprocess.PIPE, text=True,
        )
        line = self.proc.stderr.readline()
        found = re.search(r"listening on (http://\S+)", line)
        if not found:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line}{self.proc.stderr.read()}")
        self.url = found.group(1)
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        return err

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content)


async def play_oracle(session: ClientSession, examples) -> None:
    """The oracle agent's calls, played over MCP: every expected call, then the reference."""
    for ex in examples:
        started = await session.call_tool("start_episode", {"example_id": ex.id})
        assert not started.isError, text(started)
        for call in ex.expected_calls or []:
            await session.call_tool(call.name, call.arguments)
        answer = "" if ex.reference is None else str(ex.reference)
        ended = await session.call_tool("end_episode", {"answer": answer})
        assert not ended.isError and ended.structuredContent["status"] == "completed"


def score_table(directory: Path) -> dict[tuple[str, int, str], float | None]:
    return {(s.example_id, s.trial, s.grader): s.value for s in read_scores(directory)}


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("oracle") / "run"
    assert main(["run", "--env", "relational_data", "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    return out


def relational_examples():
    return load_examples(resolve_dataset(get_benchmark("relational_data"), None))


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_served_oracle_scores_equal_run_oracle(transport, oracle_run, tmp_path):
    out = tmp_path / "served"
    examples = relational_examples()

    async def play(session: ClientSession) -> None:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert {"start_episode", "end_episode", "get_city_for_location"} <= set(listed)
        assert listed["get_city_for_location"].inputSchema["properties"]["location_id"]["type"] == "integer"
        await play_oracle(session, examples)

    if transport == "stdio":
        async def over_stdio() -> None:
            async with stdio_session(serve_args(out, "--env", "relational_data")) as session:
                await play(session)

        asyncio.run(over_stdio())
        deadline = time.monotonic() + 20  # the server writes the run once the session closed
        while not (read_run(out).finished_at or time.monotonic() > deadline):
            time.sleep(0.1)
    else:
        with HttpServer(out, "--env", "relational_data") as server:
            async def over_http() -> None:
                async with http_session(server.url) as session:
                    await play(session)

            asyncio.run(over_http())
            server.stop()
    record = read_run(out)
    assert record.finished_at is not None
    assert record.agent["agent"] == "test-client" and record.agent["version"] == "1.2"
    assert record.agent["transport"] == transport
    served, expected = score_table(out), score_table(oracle_run)
    with_milestones = sum(1 for ex in examples if ex.milestones is not None)  # 4 milestone graders each
    assert len(served) == len(expected) == 3 * len(examples) + 4 * with_milestones
    assert served == expected
    trajectories = read_trajectories(out)
    assert [t.example_id for t in trajectories] == [ex.id for ex in examples]
    assert {t.agent for t in trajectories} == {"test-client"}
    # the views read a served run like any other
    assert main(["summary", str(out)]) == 0
    assert main(["show", str(out), "--example", examples[0].id]) == 0
    assert main(["compare", str(oracle_run), str(out), "--n-boot", "100"]) == 0


def test_stdio_episode_rules_and_error_results(tmp_path):
    out = tmp_path / "served"

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "relational_data", "--limit", "2")) as session:
            outside = await session.call_tool("get_food_name", {"food_id": 369})
            assert outside.isError and "start_episode" in text(outside)
            task = await session.call_tool("start_episode", {})
            assert task.structuredContent["example_id"] == "rd-01"  # dataset order
            assert task.structuredContent["input"] == "Which city is location 46 in?"
            assert "find_* tools" in task.structuredContent["instructions"]
            again = await session.call_tool("start_episode", {})
            assert again.isError and "end_episode" in text(again)
            wrong_type = await session.call_tool("get_city_for_location", {"location_id": "x"})
            unknown = await session.call_tool("get_citys_for_location", {"location_id": 46})
            extra = await session.call_tool("get_city_for_location", {"location_id": 46, "zip": 1})
            assert wrong_type.isError and unknown.isError and extra.isError
            # an unknown tool is a malformed call, as a run records a model's call of one
            assert "malformed tool call (unknown tool" in text(unknown)
            assert "did you mean 'get_city_for_location'" in text(unknown)
            ok = await session.call_tool("get_city_for_location", {"location_id": 46})
            assert not ok.isError and "Osaka" in text(ok)
            ended = await session.call_tool("end_episode", {"answer": "Osaka"})
            assert ended.structuredContent == {"example_id": "rd-01", "trial": 0, "status": "completed", "recorded": True}
            nxt = await session.call_tool("start_episode", {})
            assert nxt.structuredContent["example_id"] == "rd-02"
            await session.call_tool("end_episode", {})
            done = await session.call_tool("start_episode", {})
            assert done.isError and "no example is left" in text(done) and "(--trials 1)" in text(done)
            replay = await session.call_tool("start_episode", {"example_id": "rd-01"})
            assert replay.isError and "'rd-01' has been started 1 time(s)" in text(replay)
            assert "(--trials 1)" in text(replay)
            no_episode = await session.call_tool("end_episode", {})
            assert no_episode.isError and "no episode is running" in text(no_episode)
            bad = await session.call_tool("start_episode", {"example_id": "nope"})
            assert bad.isError and "unknown example_id" in text(bad)

    asyncio.run(scenario())
    deadline = time.monotonic() + 20
    while not (read_run(out).finished_at or time.monotonic() > deadline):
        time.sleep(0.1)
    first = read_trajectories(out)[0]
    # the observations are the in-process ones, word for word (a model's call of an unknown
    # tool is malformed, never sent to the environment)
    from langchain_core.messages import AIMessage

    from toolgym.agents import Episode
    from toolgym.parsing import model_step
    from toolgym.suites.relational_data.environment import RelationalData

    env = RelationalData()
    env.reset(relational_examples()[0])
    episode = Episode(env, relational_examples()[0])
    calls = model_step(AIMessage("", tool_calls=[
        {"name": s.name, "args": s.arguments, "id": f"c{i}", "type": "tool_call"} for i, s in enumerate(first.tool_steps)
    ]), 0.0, set(env.functions)).tool_calls
    expected = [episode.execute(c) for c in calls]
    assert [(s.output, s.error) for s in first.tool_steps] == [(r.output, r.error) for r in expected]
    assert [s.malformed for s in first.tool_steps] == [False, True, False, False]
    assert [c.name for s in first.model_steps for c in s.tool_calls] == [s.name for s in first.tool_steps]
    assert [s.error for s in first.tool_steps] == [True, True, True, False]
    assert [(t.example_id, t.trial, t.status) for t in read_trajectories(out)] == [
        ("rd-01", 0, "completed"), ("rd-02", 0, "completed")]
    # graded on the server as before: the scores the client was not told
    assert {s.grader: s.value for s in read_scores(out) if s.example_id == "rd-01"} == {
        "steps_exact": 0.0, "step_ratio": 4.0, "answer_match": 1.0}


def leaked(result: types.CallToolResult) -> list[str]:
    """What of rd-01's gold (its reference, its expected tool, the graders' words) a result
    shows the client, in its text or its structured content."""
    shown = text(result) + json.dumps(result.structuredContent)
    return [w for w in ("Osaka", "get_city_for_location", "expected", "explanation", "score", "answer_match",
                        "does not contain", "value") if w in shown]


def served_record(out: Path):
    """``run.json`` once the stdio server wrote it (after the client closed the session)."""
    wait_unlocked(out)
    return read_run(out)


def test_end_episode_keeps_the_gold_from_the_client_and_an_example_is_started_once(tmp_path):
    """The trial's finding: an agent answered "no idea", read the reference out of the returned
    explanation and started the same id again with it."""
    out = tmp_path / "served"

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "relational_data", "--limit", "2")) as session:
            listed = {t.name: t.description for t in (await session.list_tools()).tools}
            assert "scores stay with the evaluator" in listed["end_episode"]
            assert "at most 1 time(s)" in listed["start_episode"]
            await session.call_tool("start_episode", {"example_id": "rd-01"})
            ended = await session.call_tool("end_episode", {"answer": "no idea"})
            assert not ended.isError
            assert ended.structuredContent == {"example_id": "rd-01", "trial": 0, "status": "completed", "recorded": True}
            assert json.loads(text(ended)) == ended.structuredContent
            assert leaked(ended) == []
            again = await session.call_tool("start_episode", {"example_id": "rd-01"})
            assert again.isError and "(--trials 1)" in text(again)
            drawn = await session.call_tool("start_episode", {})  # only examples with trials left
            assert drawn.structuredContent["example_id"] == "rd-02"

    asyncio.run(scenario())
    record = served_record(out)
    assert record.trials == 1 and record.agent["reveal_scores"] is False
    [score] = [s for s in read_scores(out) if s.grader == "answer_match" and s.example_id == "rd-01"]
    # the grader ran as before: its explanation names the reference, kept in the run directory
    assert score.value == 0.0 and "Osaka" in score.explanation
    assert [(t.example_id, t.trial, t.status) for t in read_trajectories(out)] == [
        ("rd-01", 0, "completed"), ("rd-02", 0, "abandoned")]


def test_a_served_episode_ends_at_the_step_limit_as_a_run_does(tmp_path):
    """The trial's finding: a looping agent was cut at 40 turns by `run` and Gym, never over MCP."""
    out = tmp_path / "served"

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "typewriter_1", "--limit", "1", "--max-steps", "3")) as session:
            await session.call_tool("start_episode", {})
            for _ in range(3):
                assert not (await session.call_tool("type_letter", {"letter": "a"})).isError
            beyond = await session.call_tool("type_letter", {"letter": "a"})
            assert beyond.isError and "ended with status step_limit" in text(beyond) and "(--max-steps)" in text(beyond)
            assert (await session.call_tool("end_episode", {"answer": "done"})).isError  # no episode is running

    asyncio.run(scenario())
    (served,) = read_trajectories(out)
    assert served.status == "step_limit" and len(served.tool_steps) == 3 and served.final_state == {"paper": "aaa"}
    assert served_record(out).agent["max_steps"] == 3
    script = tmp_path / "loop.json"
    script.write_text(json.dumps({"turns": [{"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": "a"}}]}],
                                  "repeat_last": True}), encoding="utf-8")
    ran = tmp_path / "ran"
    assert main(["run", "--env", "typewriter_1", "--model", f"scripted:{script}", "--limit", "1", "--max-steps", "3",
                 "--out", str(ran), "--no-progress"]) == 0
    (played,) = read_trajectories(ran)
    assert (played.status, len(played.tool_steps)) == (served.status, len(served.tool_steps))
    assert {(s.grader, s.value) for s in read_scores(ran)} == {(s.grader, s.value) for s in read_scores(out)}


def test_serve_sample_draws_the_examples_run_sample_draws(tmp_path):
    out = tmp_path / "served"

    async def scenario() -> list[str]:
        drawn = []
        args = serve_args(out, "--env", "typewriter_26", "--sample", "3", "--sample-seed", "5")
        async with stdio_session(args) as session:
            while not (task := await session.call_tool("start_episode", {})).isError:
                drawn.append(task.structuredContent["example_id"])
                await session.call_tool("end_episode", {"answer": "x"})
        return drawn

    served = asyncio.run(scenario())
    ran = tmp_path / "ran"
    assert main(["run", "--env", "typewriter_26", "--agent", "oracle", "--sample", "3", "--sample-seed", "5",
                 "--out", str(ran), "--no-progress"]) == 0
    assert len(served) == 3 and sorted(served) == sorted(t.example_id for t in read_trajectories(ran))
    assert served_record(out).env_options == {"sample": 3, "sample_seed": 5}


def test_reveal_scores_returns_them_and_trials_2_allows_one_replay(tmp_path):
    out = tmp_path / "served"

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "relational_data", "--limit", "1", "--trials", "2",
                                            "--reveal-scores")) as session:
            await session.call_tool("start_episode", {"example_id": "rd-01"})
            ended = await session.call_tool("end_episode", {"answer": "no idea"})
            scores = {s["grader"]: s for s in ended.structuredContent["scores"]}
            assert scores["answer_match"]["value"] == 0.0 and "Osaka" in scores["answer_match"]["explanation"]
            assert "get_city_for_location" in text(ended)  # steps_exact names the expected call
            replay = await session.call_tool("start_episode", {"example_id": "rd-01"})
            assert not replay.isError and replay.structuredContent["trial"] == 1
            await session.call_tool("get_city_for_location", {"location_id": 46})
            ended = await session.call_tool("end_episode", {"answer": "Osaka"})
            assert {s["grader"]: s["value"] for s in ended.structuredContent["scores"]}["answer_match"] == 1.0
            third = await session.call_tool("start_episode", {"example_id": "rd-01"})
            assert third.isError and "started 2 time(s)" in text(third) and "(--trials 2)" in text(third)
            none_left = await session.call_tool("start_episode", {})
            assert none_left.isError and "no example is left" in text(none_left)

    asyncio.run(scenario())
    record = served_record(out)
    assert record.trials == 2 and record.agent["reveal_scores"] is True
    assert [(t.example_id, t.trial) for t in read_trajectories(out)] == [("rd-01", 0), ("rd-01", 1)]
    assert {(s.trial, s.grader): s.value for s in read_scores(out) if s.grader == "answer_match"} == {
        (0, "answer_match"): 0.0, (1, "answer_match"): 1.0}


def test_a_continued_served_run_counts_the_trials_it_recorded(tmp_path):
    out = tmp_path / "served"

    async def launch(*extra: str, starts: tuple[str | None, ...]) -> list[types.CallToolResult]:
        results = []
        async with stdio_session(serve_args(out, "--env", "relational_data", "--limit", "2", *extra)) as session:
            for example_id in starts:
                started = await session.call_tool("start_episode", {"example_id": example_id} if example_id else {})
                results.append(started)
                if not started.isError:
                    await session.call_tool("end_episode", {"answer": "x"})
        wait_unlocked(out)
        return results

    [first] = asyncio.run(launch(starts=(None,)))
    assert first.structuredContent["example_id"] == "rd-01"
    again, drawn, none_left = asyncio.run(launch(starts=("rd-01", None, None)))
    assert again.isError and "'rd-01' has been started 1 time(s)" in text(again)  # counted from the first launch
    assert drawn.structuredContent["example_id"] == "rd-02"
    assert none_left.isError and "no example is left" in text(none_left)
    [second_trial] = asyncio.run(launch("--trials", "2", starts=("rd-01",)))  # a later launch allows two
    assert second_trial.structuredContent["trial"] == 1
    record = read_run(out)
    assert record.trials == 2
    assert [(r["trials"], r["reveal_scores"]) for r in record.resumes] == [(1, False), (2, False)]
    assert [(t.example_id, t.trial) for t in read_trajectories(out)] == [("rd-01", 0), ("rd-02", 0), ("rd-01", 1)]


def write_words(path: Path, words: list[str]) -> Path:
    with open(path, "w") as fh:
        for i, word in enumerate(words):
            calls = [{"name": letter, "arguments": {}} for letter in word]
            fh.write(json.dumps({"id": f"w{i:02d}", "input": word, "expected_calls": calls, "reference": word,
                                 "expected_state": {"paper": word}}) + "\n")
    return path


WORDS = ["abc", "dog", "quiz", "jump", "lynx", "fox", "hymn", "vex", "wry", "zig", "kelp", "brim",
         "crux", "gnat", "sprig", "twelve"]


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_sixteen_concurrent_http_sessions_are_isolated(tmp_path):
    dataset = write_words(tmp_path / "words.jsonl", WORDS)
    out = tmp_path / "served"
    with HttpServer(out, "--env", "typewriter_26", "--dataset", str(dataset)) as server:
        async def one(i: int) -> None:
            async with http_session(server.url) as session:
                await session.call_tool("start_episode", {"example_id": f"w{i:02d}"})
                for letter in WORDS[i]:
                    await session.call_tool(letter, {})
                    await asyncio.sleep(0)  # interleave the sessions
                await session.call_tool("end_episode", {"answer": WORDS[i]})

        async def all_sessions() -> None:
            await asyncio.gather(*(one(i) for i in range(16)))

        asyncio.run(all_sessions())
        server.stop()
    trajectories = {t.example_id: t for t in read_trajectories(out)}
    assert len(trajectories) == 16
    for i, word in enumerate(WORDS):
        traj = trajectories[f"w{i:02d}"]
        assert traj.status == "completed"
        assert traj.final_state == {"paper": word}
        assert [s.name for s in traj.tool_steps] == list(word)
        # each session recorded its own environment's state after every step
        assert traj.initial_state == {"paper": ""}
        assert [st["paper"] for st in toolgym.states_after(traj)] == [word[:k + 1] for k in range(len(word))]
    assert set(score_table(out).values()) == {1.0}
    assert read_run(out).concurrency == 16  # sessions open at once, at most


KILLED_CLIENT = textwrap.dedent("""
    import asyncio, sys
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        async with streamable_http_client(sys.argv[1]) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("start_episode", {"example_id": "w00"})
            await session.call_tool("a", {})
            await session.call_tool("b", {})
            print("typed", flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
""")


def test_killed_client_leaves_aborted_trajectory_and_sigterm_flushes(tmp_path):
    dataset = write_words(tmp_path / "words.jsonl", WORDS[:2])
    out = tmp_path / "served"
    with HttpServer(out, "--env", "typewriter_26", "--dataset", str(dataset), "--idle-timeout", "1") as server:
        client = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, server.url], env=ENV, stdout=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "typed"
        finally:
            client.kill()
            client.communicate()
        deadline = time.monotonic() + 20
        while not read_trajectories(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        (aborted,) = read_trajectories(out)
        assert aborted.status == "abandoned" and aborted.example_id == "w00"  # the agent's doing: graded
        assert [s.name for s in aborted.tool_steps] == ["a", "b"]
        assert aborted.final_state == {"paper": "ab"}
        assert aborted.agent == "mcp"  # the SDK's default clientInfo name

        # an episode still running when the server gets SIGTERM is written before it exits
        stopped: list[str] = []

        async def open_episode() -> None:
            async with http_session(server.url) as session:
                await session.call_tool("start_episode", {"example_id": "w01"})
                await session.call_tool("d", {})
                stopped.append(await asyncio.to_thread(server.stop, signal.SIGTERM))

        with contextlib.suppress(Exception):  # the client sees its server go away
            asyncio.run(open_episode())
        (err,) = stopped
        assert server.proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), err
        # the streams closed on purpose at shutdown are not reported as an ASGI error
        assert "ASGI callable returned without completing response" not in err, err
    trajectories = read_trajectories(out)
    assert [(t.example_id, t.status) for t in trajectories] == [("w00", "abandoned"), ("w01", "aborted")]
    assert trajectories[1].error == "the server was stopped" and trajectories[1].final_state == {"paper": "d"}
    assert read_run(out).finished_at is not None
    assert {s.example_id for s in read_scores(out)} == {"w00"}  # an aborted episode is not graded


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stdio_sigterm_or_ctrl_c_flushes_the_running_episode(sig, tmp_path):
    out = tmp_path / "served"

    def server_pid() -> int:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                    if str(out).encode() in cmdline and b"serve" in cmdline:
                        return int(proc.name)
        raise AssertionError("server process not found")

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "typewriter_26", "--limit", "2")) as session:
            await session.call_tool("start_episode", {})
            await session.call_tool("a", {})
            os.kill(server_pid(), sig)
            deadline = time.monotonic() + 20
            while not read_trajectories(out) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)

    with contextlib.suppress(Exception):
        asyncio.run(scenario())
    (traj,) = read_trajectories(out)
    assert traj.status == "aborted" and traj.error == f"the server was stopped ({signal.Signals(sig).name})"
    assert [s.name for s in traj.tool_steps] == ["a"]
    assert read_run(out).finished_at is not None


def test_http_token_origin_and_host_checks(tmp_path):
    out = tmp_path / "served"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with HttpServer(out, "--env", "typewriter_26", "--token", SECRET) as server:
        for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {SECRET}"}):
            r = httpx.post(server.url, json=init, headers={**accept, **auth})
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        good = {**accept, "Authorization": f"Bearer {SECRET}"}
        evil = httpx.post(server.url, json=init, headers={**good, "Origin": "http://evil.example"})
        assert evil.status_code == 403
        rebound = httpx.post(server.url, json=init, headers={**good, "Host": f"evil.example:{server.port}"})
        assert rebound.status_code == 421
        local = httpx.post(server.url, json=init, headers={**good, "Origin": f"http://localhost:{server.port}"})
        assert local.status_code == 200

        async def with_token() -> None:
            async with http_session(server.url, token=SECRET) as session:
                task = await session.call_tool("start_episode", {})
                assert not task.isError
                await session.call_tool("end_episode", {"answer": "a"})

        asyncio.run(with_token())
        err = server.stop()
    # both refusals are logged in one form (the first one used to go out bare, the next with the logger's name)
    refusals = [line for line in err.splitlines() if "Invalid" in line]
    assert refusals == ["warning: refused a request: Invalid Origin header: http://evil.example",
                        f"warning: refused a request: Invalid Host header: evil.example:{server.port}"], err
    # only the authorised session was recorded
    assert [t.example_id for t in read_trajectories(out)] == ["tw-00-a"]


def test_beyond_loopback_needs_a_token(tmp_path, capsys):
    code = main(["serve", "--env", "typewriter_26", "--out", str(tmp_path / "x"), "--transport", "http",
                 "--host", "0.0.0.0"])
    assert code == 2
    assert "--token" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_react_agent_through_langchain_mcp_adapters(tmp_path):
    adapters = pytest.importorskip("langchain_mcp_adapters.tools")
    from langgraph.prebuilt import create_react_agent

    from toolgym.providers.scripted import ScriptedChatModel

    out = tmp_path / "served"
    model = ScriptedChatModel(turns=[
        {"content": "", "tool_calls": [{"name": "start_episode", "args": {"example_id": "rd-01"}, "id": "c1"}]},
        {"content": "", "tool_calls": [{"name": "get_city_for_location", "args": {"location_id": 46}, "id": "c2"}]},
        {"content": "", "tool_calls": [{"name": "end_episode", "args": {"answer": "Osaka"}, "id": "c3"}]},
        {"content": "Location 46 is in Osaka."},
    ])

    async def scenario() -> list:
        async with stdio_session(serve_args(out, "--env", "relational_data")) as session:
            tools = await adapters.load_mcp_tools(session)
            assert {"start_episode", "end_episode", "get_city_for_location"} <= {t.name for t in tools}
            agent = create_react_agent(model, tools)
            state = await agent.ainvoke({"messages": [("user", "Play one episode.")]})
            return state["messages"]

    messages = asyncio.run(scenario())
    tool_replies = [m for m in messages if m.type == "tool"]
    assert "Osaka" in str(tool_replies[1].content)
    assert '"recorded": true' in str(tool_replies[2].content) and "steps_exact" not in str(tool_replies[2].content)
    deadline = time.monotonic() + 20
    while not (read_run(out).finished_at or time.monotonic() > deadline):
        time.sleep(0.1)
    (traj,) = read_trajectories(out)
    assert traj.final_answer == "Osaka" and [s.name for s in traj.tool_steps] == ["get_city_for_location"]
    assert {s.grader: s.value for s in read_scores(out)} == {"steps_exact": 1.0, "step_ratio": 1.0, "answer_match": 1.0}


def test_a_trajectory_appended_before_grading_is_graded_when_the_server_stops(tmp_path):
    from toolgym.mcp.serve import ServedRun, Session

    served = ServedRun("typewriter_26", tmp_path / "served", limit=1)
    session = Session(served)
    assert session.start(None)["example_id"] == "tw-00-a"
    assert session.call("1", "a", {}) == ("OK", False)
    trajectory = session.end("a")
    assert served.append(trajectory)  # stopped here: the grading thread never wrote its scores
    result = served.finish()
    assert {s.grader: s.value for s in result.scores} == {"final_state": 1.0, "steps_exact": 1.0, "step_ratio": 1.0}
    assert read_scores(tmp_path / "served") == result.scores
    assert served.grade(trajectory) and read_scores(tmp_path / "served") == result.scores  # never twice


def test_http_normal_disconnect_logs_no_error(tmp_path):
    """A client that ends its session the ordinary way leaves no ERROR or traceback in the log."""

    async def client(url: str) -> None:
        async with http_session(url) as session:
            await session.list_tools()
            await session.call_tool("start_episode", {})
            await session.call_tool("end_episode", {"answer": "x"})

    with HttpServer(tmp_path / "served", "--env", "typewriter_1", "--limit", "1") as server:
        asyncio.run(client(server.url))
        time.sleep(0.5)
        err = server.stop()
    assert "ERROR" not in err and "Traceback" not in err, err
    assert [t.status for t in read_trajectories(tmp_path / "served")] == ["completed"]


def run_cli(*argv: str, no_mcp: bool = False) -> subprocess.CompletedProcess:
    """``main(argv)`` in a fresh interpreter (warnings shown as the console script shows them);
    ``no_mcp``: as if the MCP SDK were not installed."""
    code = ("import sys\n" + ("sys.modules['mcp'] = None\n" if no_mcp else "")
            + "from toolgym.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *argv], env=ENV, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_serve_without_the_mcp_sdk_names_the_extra(tmp_path):
    proc = run_cli("serve", "--env", "typewriter_1", "--out", str(tmp_path / "served"), no_mcp=True)
    assert proc.returncode == 2
    assert proc.stderr == "error: install the extra in the toolgym clone: pip install -e '.[mcp]'\n"
    assert not (tmp_path / "served").exists()


def test_port_in_use_is_named_and_nothing_is_left_open(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("serve", "--env", "typewriter_1", "--out", str(tmp_path / "served"), "--transport", "http",
                       "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr == f"error: 127.0.0.1:{port}: address already in use\n"


def wait_unlocked(out: Path, timeout_s: float = 30) -> None:
    """Wait until no server holds the run directory's lock (the server process ended)."""
    import fcntl

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(out / ".lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"{out} still locked after {timeout_s} s")


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_relaunching_with_the_same_out_continues_the_served_run(tmp_path):
    """A client configuration is static: every launch names the same --out."""
    out = tmp_path / "served"
    args = serve_args(out, "--env", "typewriter_26", "--limit", "3", "--trials", "2")

    async def one_episode(example_id: str | None) -> dict:
        async with stdio_session(args) as session:
            task = await session.call_tool("start_episode", {"example_id": example_id} if example_id else {})
            assert not task.isError, text(task)
            ended = await session.call_tool("end_episode", {"answer": "x"})
            assert not ended.isError, text(ended)
            return task.structuredContent

    first = asyncio.run(one_episode(None))
    wait_unlocked(out)
    started_at = read_run(out).started_at
    second = asyncio.run(one_episode(None))  # the next example in dataset order
    wait_unlocked(out)
    third = asyncio.run(one_episode(first["example_id"]))  # played again: the next trial
    wait_unlocked(out)
    assert second["example_id"] != first["example_id"]
    assert (third["example_id"], third["trial"]) == (first["example_id"], 1)
    record = read_run(out)
    assert record.started_at == started_at and record.finished_at
    assert len(record.resumes) == 2 and record.agent["agent"] == "test-client"
    assert record.trials == 2  # an example was played twice over the launches
    assert [(t.example_id, t.trial) for t in read_trajectories(out)] == [
        (first["example_id"], 0), (second["example_id"], 0), (first["example_id"], 1)]
    assert {(s.example_id, s.trial) for s in read_scores(out)} == {
        (first["example_id"], 0), (second["example_id"], 0), (first["example_id"], 1)}


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_a_served_run_is_continued_only_with_the_same_settings(tmp_path):
    out = tmp_path / "served"

    async def one_episode() -> None:
        async with stdio_session(serve_args(out, "--env", "typewriter_26", "--limit", "2")) as session:
            await session.call_tool("start_episode", {})
            await session.call_tool("end_episode", {"answer": "x"})

    asyncio.run(one_episode())
    wait_unlocked(out)
    other = run_cli("serve", "--env", "typewriter_26", "--limit", "1", "--out", str(out))
    assert other.returncode == 2 and "other settings (limit 2 -> 1)" in other.stderr, other.stderr
    # a grading mode too: the same calls would be graded two ways in one run
    mode = run_cli("serve", "--env", "typewriter_26", "--limit", "2", "--trajectory-mode", "strict", "--out", str(out))
    assert mode.returncode == 2 and "grader setting trajectory_mode None -> 'strict'" in mode.stderr, mode.stderr
    ran = tmp_path / "ran"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--out", str(ran),
                 "--no-progress"]) == 0
    not_served = run_cli("serve", "--env", "typewriter_1", "--limit", "1", "--out", str(ran))
    assert not_served.returncode == 2 and "is not from `toolgym serve`" in not_served.stderr, not_served.stderr
    # two servers never write one directory at once
    with HttpServer(out, "--env", "typewriter_26", "--limit", "2"):
        second = run_cli("serve", "--env", "typewriter_26", "--limit", "2", "--out", str(out))
    assert second.returncode == 2 and "being written by another run" in second.stderr, second.stderr
    assert len(read_trajectories(out)) == 1


def test_the_task_says_how_to_answer_and_an_object_answer_is_kept_as_json(tmp_path):
    out = tmp_path / "served"

    async def scenario() -> None:
        async with stdio_session(serve_args(out, "--env", "relational_data", "--limit", "1")) as session:
            task = (await session.call_tool("start_episode", {})).structuredContent
            assert "plain text without calling another tool" in task["instructions"]  # written for in-process agents
            assert "end_episode" in task["answer_with"] and "plain text" in task["answer_with"]
            ended = await session.call_tool("end_episode", {"answer": {"city": "Osaka", "n": 1}})
            assert not ended.isError

    asyncio.run(scenario())
    wait_unlocked(out)
    [trajectory] = read_trajectories(out)
    assert json.loads(trajectory.final_answer) == {"city": "Osaka", "n": 1}
    assert trajectory.model_steps[-1].text == trajectory.final_answer

"""No secret in a run directory (issue 38, item 4): ``serve --token`` and the credentials of a
``--base-url`` (``user:pw@``, a query value) are redacted wherever a run is written. The values
are random per session (``secret_values.SECRETS``), so nothing but the redaction itself can hide
them; real processes: ``toolgym serve`` over HTTP on 127.0.0.1 with the real MCP client, and
``toolgym run`` against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakeserver import FakeModelServer
from secret_values import SECRETS, leaks_in

from toolgym.runio import read_run, read_trajectories, redact_url, redacted_command

ROOT = Path(__file__).resolve().parents[1]


def credentialed(url: str, user: bool = True) -> str:
    """``url`` (``http://127.0.0.1:PORT/v1``) with a query value and (``user``) a user and a
    password."""
    scheme, rest = url.split("://", 1)
    userinfo = f"{SECRETS['user']}:{SECRETS['password']}@" if user else ""
    return f"{scheme}://{userinfo}{rest}?{SECRETS['query_name']}={SECRETS['query']}"


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run_agent.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_serve_token_is_not_written_in_the_run(tmp_path):
    pytest.importorskip("mcp")
    from mcpio.test_mcp_serve import HttpServer, http_session

    out = tmp_path / "served"
    with HttpServer(out, "--env", "typewriter_26", "--limit", "1", "--token", SECRETS["token"]) as server:
        async def one() -> None:
            async with http_session(server.url, token=SECRETS["token"]) as session:
                await session.call_tool("start_episode", {})
                await session.call_tool("end_episode", {"answer": "a"})

        asyncio.run(one())
        server.stop(signal.SIGTERM)
    assert [t.status for t in read_trajectories(out)] == ["completed"]
    command = read_run(out).command
    assert command[command.index("--token") + 1] == "***"
    assert leaks_in(tmp_path) == []


def test_a_base_url_query_secret_is_not_written_in_the_run(tmp_path):
    """The server answers 404 quoting the path and query it got: the recorded error keeps
    the message, without the query's value."""
    with FakeModelServer() as server:
        out = tmp_path / "run"
        done = run_cli("run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url",
                       credentialed(server.url + "/v1", user=False), "--limit", "1", "--out", str(out), "--no-progress",
                       "--max-retries", "0")
    [traj] = read_trajectories(out)
    assert traj.status == "error" and "404" in traj.error and f"{SECRETS['query_name']}=***" in traj.error
    record = read_run(out)
    assert record.model_settings["extra"]["base_url"] == f"{server.url}/v1?{SECRETS['query_name']}=***"
    assert "--base-url" in record.command
    assert leaks_in(tmp_path) == []
    assert SECRETS["query"] not in done.stderr + done.stdout


def test_base_url_credentials_are_not_written_when_the_calls_fail(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on: every model call fails
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "run"
    done = run_cli("run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url",
                   credentialed(f"http://127.0.0.1:{port}/v1"), "--limit", "1", "--out", str(out), "--no-progress",
                   "--max-retries", "0", "--timeout", "5")
    assert [t.status for t in read_trajectories(out)] == ["error"], done.stderr
    assert leaks_in(tmp_path) == []
    assert SECRETS["password"] not in done.stderr + done.stdout


@pytest.mark.parametrize("url, shown", [
    ("https://me:pw@h.example/v1", "https://***@h.example/v1"),
    ("http://h:8000/v1?sig=abc&x=1#f", "http://h:8000/v1?sig=***&x=***#***"),
    ("not a url", "not a url"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_redacted_command_forms():
    argv = ["toolgym", "serve", "--token", "a", "--token=b", "--base-url=http://u:p@h/v1", "x.py"]
    assert redacted_command(argv) == ["toolgym", "serve", "--token", "***", "--token=***", "--base-url=http://***@h/v1",
                                      "x.py"]
    assert json.dumps(redacted_command(argv)).count("***") == 3


def test_a_base_url_reads_its_credentials_from_variables_and_is_recorded_as_written(tmp_path, monkeypatch):
    """``--base-url 'http://HOST/v1?NAME=${VAR}'``: the value reaches the server (its 404 quotes
    the query, recorded scrubbed), run.json records the reference, and a run whose variable is
    unset stops before anything is written, naming it."""
    monkeypatch.setenv("TG_TEST_BASE_KEY", SECRETS["query"])
    with FakeModelServer() as server:
        given = f"{server.url}/v1?{SECRETS['query_name']}=${{TG_TEST_BASE_KEY}}"
        out = tmp_path / "run"
        run_cli("run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url", given, "--limit", "1",
                "--out", str(out), "--no-progress", "--max-retries", "0")
        [traj] = read_trajectories(out)
        assert traj.status == "error" and "404" in traj.error and f"{SECRETS['query_name']}=***" in traj.error, traj.error
        assert read_run(out).model_settings["extra"]["base_url"] == given
        assert leaks_in(tmp_path) == []
        monkeypatch.delenv("TG_TEST_BASE_KEY")
        done = run_cli("run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url", given,
                       "--limit", "1", "--out", str(tmp_path / "unset"), "--no-progress")
    assert done.returncode == 2 and "TG_TEST_BASE_KEY is not set" in done.stderr, done.stderr
    assert not (tmp_path / "unset").exists()

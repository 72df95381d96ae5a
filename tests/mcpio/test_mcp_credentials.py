"""An MCP server that needs credentials, consumed as an environment (``--env mcp+http://...``):
no credential reaches a run directory, and ``grade``, ``export`` and ``--resume`` reach the
server again when the credentials come from the environment (``${NAME}`` references), or refuse
clearly, without connecting, when the run withheld them. Real parts: ``counter_server.py`` over
streamable HTTP on 127.0.0.1 behind its credential check (it logs every request it refused or
let through), the real MCP client, the command line in this process. The credentials are the
random values of ``secret_values.SECRETS``; the session-end fixture of ``conftest.py`` greps
every run directory for them as well."""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from secret_values import SECRETS, leaks_in

pytest.importorskip("mcp")

import toolgym.cli  # noqa: E402
from toolgym.cli import main  # noqa: E402
from toolgym.environments import EnvironmentUnavailable  # noqa: E402
from toolgym.mcp.environment import connection_target, parse_spec  # noqa: E402
from toolgym.runio import (  # noqa: E402
    read_run,
    read_scores,
    read_trajectories,
    redact_spec,
    redacted_command,
    withheld_credentials,
)

SERVER = Path(__file__).with_name("counter_server.py")
USER, PASSWORD, KEY, TOKEN, QUERY = (SECRETS[k] for k in ("user", "password", "query", "token", "query_name"))


class AuthServer:
    """``counter_server.py`` on a free port of 127.0.0.1, requiring ``need`` (its
    ``COUNTER_AUTH``); :meth:`requests` reads what it let through and refused so far."""

    def __init__(self, tmp_path: Path, need: dict) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.log = tmp_path / f"auth-{self.port}.log"
        env = {**os.environ, "COUNTER_AUTH": json.dumps(need), "COUNTER_AUTH_LOG": str(self.log)}
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("the test MCP server did not start") from None
                time.sleep(0.1)

    def requests(self) -> dict[str, int]:
        lines = self.log.read_text().split() if self.log.exists() else []
        return {"ok": lines.count("ok"), "refused": lines.count("refused")}

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def basic_server(tmp_path):
    """Needs the URL's user and password (HTTP Basic), a query value and an ``X-Api-Key`` header."""
    server = AuthServer(tmp_path, {
        "headers": {"authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(), "x-api-key": TOKEN},
        "query": {QUERY: KEY},
    })
    yield server
    server.stop()


@pytest.fixture
def bearer_server(tmp_path):
    """Needs ``Authorization: Bearer TOKEN`` and a query value."""
    server = AuthServer(tmp_path, {"headers": {"authorization": f"Bearer {TOKEN}"}, "query": {QUERY: KEY}})
    yield server
    server.stop()


def counter_dataset(path: Path) -> Path:
    records = [{"id": f"c{n}", "input": f"add {n}", "reference": str(n), "expected_calls": [{"name": "add", "arguments": {"amount": n}}]}
               for n in (1, 2, 3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def cli(*argv: str) -> int:
    """``toolgym ARGV...`` in this process, with ``sys.argv`` as a shell would give it (run.json
    records it as the command)."""
    argv = (*argv, "--no-progress") if argv[0] == "run" else argv
    saved = sys.argv
    sys.argv = ["toolgym", *argv]
    try:
        return main(list(argv))
    finally:
        sys.argv = saved


def test_written_out_credentials_never_reach_the_run_and_are_never_replaced_by_none(tmp_path, basic_server, capsys):
    data = counter_dataset(tmp_path / "counter.jsonl")
    spec = (f"mcp+http://{USER}:{PASSWORD}@127.0.0.1:{basic_server.port}/mcp?{QUERY}={KEY} "
            f"--header 'X-Api-Key: {TOKEN}'")
    recorded = f"mcp+http://***@127.0.0.1:{basic_server.port}/mcp?{QUERY}=*** --header 'X-Api-Key: ***'"
    out = tmp_path / "run"
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--limit", "2", "--out", str(out)) == 0
    assert [t.status for t in read_trajectories(out)] == ["completed", "completed"]
    assert {s.value for s in read_scores(out)} == {1.0}
    assert basic_server.requests()["refused"] == 0  # every credential was sent
    record = read_run(out)
    assert record.env == recorded and record.extensions["env"].spec == recorded
    assert {t.env for t in read_trajectories(out)} == {recorded}
    assert recorded in record.command
    assert leaks_in(tmp_path) == []
    # grade reads the files only: it works without the credentials
    assert cli("grade", str(out)) == 0
    before = basic_server.requests()
    kept = (out / "trajectories.jsonl").read_bytes()
    capsys.readouterr()
    # export and --resume need the server: refused, naming what was withheld, before any request
    assert cli("export", str(out), "--out", str(tmp_path / "sft.jsonl")) == 2
    err = capsys.readouterr().err
    assert "the URL's user and password, the value of query parameter" in err and "were not recorded" in err, err
    assert "--env SPEC" in err and "${NAME}" in err
    assert cli("run", "--env", record.env, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--resume") == 2
    err = capsys.readouterr().err
    assert "of this MCP server were not recorded" in err and "value of header 'X-Api-Key'" in err, err
    assert basic_server.requests() == before  # never tried without the credentials
    assert (out / "trajectories.jsonl").read_bytes() == kept  # nothing written, nothing lost
    # given again, the same spec exports and resumes
    assert cli("export", str(out), "--env", spec, "--out", str(tmp_path / "sft.jsonl")) == 0
    exported = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(exported) == 2 and {t["function"]["name"] for t in exported[0]["tools"]} == {"add", "read", "crash"}
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--resume") == 0
    assert sorted(t.example_id for t in read_trajectories(out)) == ["c1", "c2", "c3"]
    assert {t.env for t in read_trajectories(out)} == {recorded}
    assert basic_server.requests()["refused"] == 0
    assert leaks_in(tmp_path) == []


def test_credentials_from_variables_are_recorded_as_references_and_read_when_connecting(tmp_path, bearer_server,
                                                                                      monkeypatch, capsys):
    monkeypatch.setenv("TG_TEST_MCP_TOKEN", TOKEN)
    monkeypatch.setenv("TG_TEST_MCP_KEY", KEY)
    data = counter_dataset(tmp_path / "counter.jsonl")
    spec = (f"mcp+http://127.0.0.1:{bearer_server.port}/mcp?{QUERY}=${{TG_TEST_MCP_KEY}} "
            '--header "Authorization: Bearer ${TG_TEST_MCP_TOKEN}"')
    out = tmp_path / "run"
    shown = io.StringIO()
    monkeypatch.setattr(toolgym.cli, "console", Console(width=80, file=shown))  # a pipe's width
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--limit", "1", "--out", str(out)) == 0
    assert [t.status for t in read_trajectories(out)] == ["completed"]
    # the end-of-run table: the spec (wider than 80 columns) is named above it, and each grader's row fits
    table = shown.getvalue()
    assert f"env: {spec}" in " ".join(table.split()) and "(continued)" not in table, table
    graders = read_run(out).graders
    assert graders and all(any(g in line and "1.000" in line for line in table.splitlines()) for g in graders), table
    assert max(len(line) for line in table.splitlines() if not line.startswith("env: ")) <= 80
    assert f"env: {spec}" in table.splitlines()  # on one line, to copy
    record = read_run(out)
    assert record.env == spec and record.extensions["env"].spec == spec  # as written: no secret in it
    assert leaks_in(tmp_path) == []
    # export and grade connect again from run.json alone
    assert cli("export", str(out), "--out", str(tmp_path / "sft.jsonl")) == 0
    assert cli("grade", str(out)) == 0
    # a variable that is not set: refused by name, no request without it
    monkeypatch.delenv("TG_TEST_MCP_TOKEN")
    before, kept = bearer_server.requests(), (out / "trajectories.jsonl").read_bytes()
    capsys.readouterr()
    assert cli("export", str(out), "--out", str(tmp_path / "again.jsonl")) == 2
    assert "the environment variable TG_TEST_MCP_TOKEN named in the spec is not set" in capsys.readouterr().err
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--resume") == 2
    assert "TG_TEST_MCP_TOKEN" in capsys.readouterr().err
    assert bearer_server.requests() == before and (out / "trajectories.jsonl").read_bytes() == kept
    monkeypatch.setenv("TG_TEST_MCP_TOKEN", TOKEN)
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out), "--resume") == 0
    assert sorted(t.status for t in read_trajectories(out)) == ["completed"] * 3
    assert bearer_server.requests()["refused"] == 0
    assert leaks_in(tmp_path) == []


def test_wrong_credentials_end_episodes_in_error_without_quoting_them(tmp_path, bearer_server):
    """The server answers 401 and the HTTP client's message quotes the URL it requested: the
    recorded error keeps the message, without the values."""
    data = counter_dataset(tmp_path / "counter.jsonl")
    wrong = f"mcp+http://127.0.0.1:{bearer_server.port}/mcp?{QUERY}={PASSWORD} --header 'Authorization: Bearer {USER}'"
    out = tmp_path / "run"
    assert cli("run", "--env", wrong, "--agent", "oracle", "--dataset", str(data), "--limit", "1", "--out", str(out)) == 1
    [trajectory] = read_trajectories(out)
    assert trajectory.status == "error" and "401" in trajectory.error, trajectory.error
    assert f"{QUERY}=***" in trajectory.error
    # it says plainly that the credentials were refused, and which parts of the spec hold them
    assert "the server refused the credentials (HTTP 401" in trajectory.error, trajectory.error
    assert f"check the value of query parameter {QUERY!r} and the header 'Authorization'" in trajectory.error
    assert "developer.mozilla.org" not in trajectory.error
    assert bearer_server.requests()["refused"] >= 1
    assert leaks_in(tmp_path) == []


def test_a_wrong_token_from_a_variable_names_the_variable_to_check(tmp_path, bearer_server, monkeypatch):
    monkeypatch.setenv("TG_TEST_MCP_TOKEN", USER)  # set, but not the token the server wants
    monkeypatch.setenv("TG_TEST_MCP_KEY", KEY)
    data = counter_dataset(tmp_path / "counter.jsonl")
    spec = (f"mcp+http://127.0.0.1:{bearer_server.port}/mcp?{QUERY}=${{TG_TEST_MCP_KEY}} "
            '--header "Authorization: Bearer ${TG_TEST_MCP_TOKEN}"')
    out = tmp_path / "run"
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--limit", "1", "--out", str(out)) == 1
    [trajectory] = read_trajectories(out)
    assert "the server refused the credentials (HTTP 401" in trajectory.error, trajectory.error
    assert "the values of ${TG_TEST_MCP_KEY} and ${TG_TEST_MCP_TOKEN} in your environment" in trajectory.error
    assert USER not in trajectory.error and KEY not in trajectory.error
    assert leaks_in(tmp_path) == []


def test_specs_are_recorded_without_credentials_and_references_are_expanded_only_to_connect():
    assert redact_spec("mcp+http://h:1/mcp?k=${K}&x=v#${F}") == "mcp+http://h:1/mcp?k=${K}&x=***#${F}"
    assert redact_spec("mcp+http://${U}:${P}@h/mcp") == "mcp+http://${U}:${P}@h/mcp"
    assert redact_spec("mcp+http://${U}:pw@h/mcp") == "mcp+http://***@h/mcp"
    assert redact_spec("mcp+http://h/mcp --header 'A: Bearer ${T}' --header=B:x") == "mcp+http://h/mcp --header 'A: Bearer ${T}' '--header=B: ***'"
    # a stdio server's URL argument and header (mcp-remote's form) lose their credentials too
    stdio = "mcp:--pass-env T npx mcp-remote https://u:pw@h/sse --header 'Authorization: Bearer abcd'"
    assert redact_spec(stdio) == "mcp:--pass-env T npx mcp-remote https://***@h/sse --header 'Authorization: ***'"
    assert withheld_credentials(redact_spec(stdio)) == ["the URL's user and password", "the value of header 'Authorization'"]
    assert redact_spec("mcp:python server.py --db 'my file.db'") == "mcp:python server.py --db 'my file.db'"
    assert redacted_command(["run", "--env", "mcp+http://h/mcp --header 'X: abcd'"]) == ["run", "--env", "mcp+http://h/mcp --header 'X: ***'"]
    # expanded for the connection: percent-encoded in the user, password and query values
    server = parse_spec("mcp+http://${U}:${P}@h:1/mcp?k=${K} --header 'Authorization: Bearer ${T}'")
    target = connection_target(server, {"U": "me", "P": "p@ss&w/rd", "K": "a b", "T": "tok=1"})
    assert target.url == "http://me:p%40ss%26w%2Frd@h:1/mcp?k=a%20b"
    assert target.headers == {"Authorization": "Bearer tok=1"}
    assert "p@ss&w/rd" in target.secrets and "p%40ss%26w%2Frd" in target.secrets
    assert target.scrub("401 for http://me:p%40ss%26w%2Frd@h:1/mcp") == "401 for http://me:***@h:1/mcp"
    with pytest.raises(EnvironmentUnavailable, match="variables K, T named in the spec are not set"):
        connection_target(server, {"U": "me", "P": "pw"})
    with pytest.raises(EnvironmentUnavailable, match="the URL's user and password of this MCP server was not recorded"):
        connection_target(parse_spec("mcp+http://***@h:1/mcp"), {})
    with pytest.raises(ValueError, match="--header takes 'Name: value'"):
        parse_spec("mcp+http://h/mcp --header nocolon")
    with pytest.raises(ValueError, match="expected --header 'Name: value' after the URL"):
        parse_spec("mcp+http://h/mcp extra")


def test_a_stdio_command_gets_its_references_expanded_and_its_url_credentials_are_not_recorded(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv("TG_TEST_MCP_KEY", KEY)
    server = Path(__file__).with_name("env_server.py")
    url = f"https://{USER}:{PASSWORD}@h.example/sse"
    spec = f"mcp:{sys.executable} {server} {url} --key ${{TG_TEST_MCP_KEY}}"
    data = tmp_path / "args.jsonl"
    data.write_text(json.dumps({"id": "a", "input": "report", "reference": "",
                                "expected_calls": [{"name": "arguments_digest", "arguments": {}}]}) + "\n")
    out = tmp_path / "run"
    assert cli("run", "--env", spec, "--agent", "oracle", "--dataset", str(data), "--out", str(out)) == 0
    [trajectory] = read_trajectories(out)
    assert trajectory.tool_steps[0].output == hashlib.sha256(json.dumps([url, "--key", KEY]).encode()).hexdigest()
    assert read_run(out).env == f"mcp:{sys.executable} {server} https://***@h.example/sse --key ${{TG_TEST_MCP_KEY}}"
    assert leaks_in(tmp_path) == []

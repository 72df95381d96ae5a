"""An agent served over MCP cannot drop the episodes it is failing (issue 38, item 1): a
session closed without ``end_episode`` is ``abandoned``, graded as it stands and counted in
``summary`` and ``view``; only a stopped server leaves an episode ``aborted`` and unscored.
Real servers (``toolgym serve`` over streamable HTTP on 127.0.0.1, ``toolgym view``) driven by
the real ``mcp`` client SDK and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from test_mcp_serve import ENV, ROOT, HttpServer, http_session, write_words  # noqa: E402

from toolgym.runio import read_scores, read_trajectories  # noqa: E402

WORDS = ["abc", "dog", "quiz", "jump"]


def summary_rows(out: Path) -> dict[str, dict[str, str]]:
    """``toolgym summary --format`` is not there: read the terminal table, wide enough for one
    table, into ``{grader: {header: cell}}``."""
    done = subprocess.run([sys.executable, "run_agent.py", "summary", str(out)], cwd=ROOT, capture_output=True,
                          text=True, env={**ENV, "COLUMNS": "250"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if "│" in ln or "┃" in ln]
    header = [c.strip() for c in lines[0].strip("┃ ").split("┃")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == len(header):
            rows[cells[header.index("grader")]] = dict(zip(header, cells, strict=True))
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    """Four examples over HTTP: two played right and ended, two started, typed wrong and left
    (the client closed its session without ``end_episode``), then the server stopped."""
    tmp = tmp_path_factory.mktemp("abandoned")
    dataset = write_words(tmp / "words.jsonl", WORDS)
    out = tmp / "served"
    with HttpServer(out, "--env", "typewriter_26", "--dataset", str(dataset)) as server:
        async def play(example_id: str, letters: str, end: bool) -> None:
            async with http_session(server.url) as session:
                await session.call_tool("start_episode", {"example_id": example_id})
                for letter in letters:
                    await session.call_tool(letter, {})
                if end:
                    await session.call_tool("end_episode", {"answer": letters})

        async def clients() -> None:
            await play("w00", "abc", True)
            await play("w01", "dog", True)
            await play("w02", "qx", False)  # failing, so it walks away
            await play("w03", "j", False)

        asyncio.run(clients())
        server.stop(signal.SIGTERM)
    return out


def test_an_episode_the_client_walked_away_from_is_graded_and_counted(served):
    statuses = {t.example_id: (t.status, t.error) for t in read_trajectories(served)}
    assert [statuses[f"w0{i}"][0] for i in range(4)] == ["completed", "completed", "abandoned", "abandoned"]
    assert "without end_episode" in statuses["w02"][1]
    final = {s.example_id: s.value for s in read_scores(served) if s.grader == "final_state"}
    assert final == {"w00": 1.0, "w01": 1.0, "w02": 0.0, "w03": 0.0}  # every episode is in the denominator
    rows = summary_rows(served)
    assert rows["final_state"]["mean ± stderr"].startswith("0.500")
    assert (rows["final_state"]["n"], rows["final_state"]["abandoned"], rows["final_state"]["errors"]) == ("4", "2", "0")


def test_view_shows_the_abandoned_episodes(served, tmp_path):
    from view_runs import view_server

    with view_server([served], tmp_path / "cache") as (url, _):
        runs = json.load(urllib.request.urlopen(f"{url}/api/runs", timeout=60))["runs"]
        name = runs[0]["name"]
        doc = json.load(urllib.request.urlopen(f"{url}/api/runs/{name}", timeout=60))
        [final] = [row for row in doc["summary"] if row["grader"] == "final_state"]
        assert (final["n"], final["mean"], final["cells"]["abandoned"]) == (4, 0.5, "2")
        query = f"{url}/api/runs/{name}/trajectories?status=abandoned"
        for _ in range(100):
            page = json.load(urllib.request.urlopen(query, timeout=60))
            if not page["partial"]:
                break
        assert sorted(r["example_id"] for r in page["rows"]) == ["w02", "w03"]


def test_a_stopped_server_leaves_its_running_episode_aborted_and_counted_apart(tmp_path):
    dataset = write_words(tmp_path / "words.jsonl", WORDS[:2])
    out = tmp_path / "served"
    with HttpServer(out, "--env", "typewriter_26", "--dataset", str(dataset)) as server:
        async def left_running() -> None:
            async with http_session(server.url) as session:
                await session.call_tool("start_episode", {"example_id": "w00"})
                await session.call_tool("a", {})
                await asyncio.to_thread(server.stop, signal.SIGTERM)

        try:
            asyncio.run(left_running())
        except BaseException:  # noqa: BLE001 - the client sees its server go away
            pass
    [traj] = read_trajectories(out)
    assert traj.status == "aborted" and traj.error == "the server was stopped"
    assert read_scores(out) == []
    rows = summary_rows(out)
    assert (rows["final_state"]["n"], rows["final_state"]["errors"]) == ("0", "1")
    assert os.path.exists(out / "run.json")

"""Out-of-range viewer requests answer 400 or 404, never 500 (issue 38, item 8): a page, a token
bound or a trial beyond SQLite's 64-bit integers made it raise ``OverflowError``. A real
``toolgym view`` process on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from view_runs import view_server

from toolgym.cli import main

pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")
# the view_server's pipes are closed: an unclosed file is a failure here, not a warning
pytestmark = pytest.mark.filterwarnings("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")

HUGE = str(10**19)


def status_of(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_out_of_range_requests_are_client_errors(tmp_path):
    out = tmp_path / "runs" / "oracle"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", str(out), "--no-progress"]) == 0
    with view_server([out], tmp_path / "cache") as (url, _):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{url}/api/runs", timeout=60) as r:
            [run] = json.load(r)["runs"]
        name = run["name"]
        base = f"{url}/api/runs/{name}/trajectories"
        assert status_of(f"{base}?page=2") == 200
        for query in (f"page={HUGE}", f"min_tokens={HUGE}", f"max_tokens=-{HUGE}", "page=" + "9" * 5000):
            assert status_of(f"{base}?{query}") == 400, query
        assert status_of(f"{base}/tw-1-a/{HUGE}") == 404
        assert status_of(f"{url}/api/diff?a={name}/x/{HUGE}&b={name}/x/0") == 400

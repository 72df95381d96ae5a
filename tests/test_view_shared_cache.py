"""Two ``toolgym view`` processes sharing one cache folder (issue 38, item 5): each indexed the
same run into the same database file at once, and one of them then answered "attempt to write
a readonly database" and 404. Real processes on 127.0.0.1 over one large run."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from view_runs import view_server, write_big_run

pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")

N = 3000


def read_all(url: str, out: dict, key: str) -> None:
    """Ask for the run's first page until it is indexed in full; keep every status seen."""
    seen, deadline = [], time.monotonic() + 240
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        try:
            with opener.open(f"{url}/api/runs", timeout=60) as r:
                runs = json.load(r)["runs"]
            name = runs[0]["name"]
            with opener.open(f"{url}/api/runs/{name}/trajectories?per_page=1", timeout=60) as r:
                page = json.load(r)
            seen.append(200)
            if not page["partial"] and page["total"] == N:
                break
        except urllib.error.HTTPError as exc:
            seen.append(exc.code)
            if exc.code >= 500 or exc.code == 404:
                break
        time.sleep(0.05)
    out[key] = (seen, page if seen and seen[-1] == 200 else None)


def test_two_viewers_share_a_cache_folder(tmp_path):
    run = write_big_run(tmp_path / "runs" / "big", tmp_path / "big.jsonl", N)
    cache = tmp_path / "cache"
    with view_server([run], cache) as (url_a, proc_a), view_server([run], cache) as (url_b, proc_b):
        results: dict = {}
        threads = [threading.Thread(target=read_all, args=(u, results, k)) for u, k in ((url_a, "a"), (url_b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # the run is rewritten (as `grade` rewrites scores.jsonl): both viewers index it again at once
        scores = run / "scores.jsonl"
        scores.write_text("".join(reversed(scores.read_text().splitlines(keepends=True))))
        time.sleep(1.0)
        threads = [threading.Thread(target=read_all, args=(u, results, k)) for u, k in ((url_a, "a"), (url_b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for key in ("a", "b"):
            seen, page = results[key]
            assert set(seen) == {200}, (key, seen)
            assert page is not None and page["total"] == N
    for proc in (proc_a, proc_b):
        err = proc.stderr.read()
        assert "failed" not in err and "readonly" not in err and "Traceback" not in err, err

"""``toolgym view`` reachable from other machines and never serving a file outside a run
(issue 38, item 7): ``--allow-host`` as ``serve`` has it, and downloads that refuse a symbolic
link leaving the run directory. A real ``toolgym view`` process on 127.0.0.1."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest
from view_runs import view_server

from toolgym.cli import main

pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")
# the view_server's pipes are closed: an unclosed file is a failure here, not a warning
pytestmark = pytest.mark.filterwarnings("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("linked")
    out = root / "runs" / "oracle"
    assert main(["run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "1", "--out", str(out),
                 "--no-progress"]) == 0
    outside = root / "outside-secret.txt"
    outside.write_text("not part of any run\n")
    os.symlink(outside, out / "leak.txt")
    os.symlink("/etc/passwd", out / "passwd")
    os.symlink(out / "run.json", out / "run-copy.json")  # a link that stays inside is a file of the run
    return out


def test_downloads_refuse_links_that_leave_the_run(run_dir, tmp_path):
    with view_server([run_dir], tmp_path / "cache") as (url, _):
        [run] = json.loads(fetch(f"{url}/api/runs")[1])["runs"]
        listed = {f["name"] for f in json.loads(fetch(f"{url}/api/runs/{run['name']}/files")[1])["files"]}
        assert {"run.json", "run-copy.json"} <= listed and not {"leak.txt", "passwd"} & listed
        for name in ("leak.txt", "passwd"):
            status, body = fetch(f"{url}/api/runs/{run['name']}/files/{name}")
            assert status == 404 and b"root:" not in body and b"not part of any run" not in body
        status, body = fetch(f"{url}/api/runs/{run['name']}/files/run-copy.json")
        assert status == 200 and json.loads(body)["env"] == "typewriter_1"


def test_allow_host_admits_the_name_other_machines_use(run_dir, tmp_path):
    token = "t" + os.urandom(8).hex()
    with view_server([run_dir], tmp_path / "cache", "--host", "0.0.0.0", "--token", token,
                     "--allow-host", "viewer.example.test") as (url, proc):
        port = url.rsplit(":", 1)[1]
        local = f"http://127.0.0.1:{port}/api/runs"
        auth = {"Authorization": f"Bearer {token}"}
        assert fetch(local, {**auth, "Host": f"viewer.example.test:{port}"})[0] == 200
        assert fetch(local, {**auth, "Host": f"evil.example.test:{port}"})[0] == 400  # still no DNS rebinding
        assert fetch(local, {"Host": f"viewer.example.test:{port}"})[0] == 401  # and still the token

"""``toolgym view``'s JSON API against a real server on 127.0.0.1 (a child process), over real run
directories made by the runner (tests/report_runs.py) and written as records
(tests/view_runs.py). Expected values are computed from the runs read back with
``toolgym.load_run``, not written down."""

from __future__ import annotations

import csv
import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

import pytest
from report_runs import make_runs
from view_runs import (
    FORMULA_IDS,
    LONG_OUTPUT,
    custom_examples,
    make_custom_run,
    view_server,
    write_custom_run,
)

from toolgym import load_run
from toolgym.runio import locked_run_dir
from toolgym.views.report import build_report
from toolgym.views.rundata import load_runs
from toolgym.views.summary import summary_cells, summary_records

pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def wait_indexed(url: str, timeout: float = 60) -> list[dict]:
    """``/api/runs`` once every run is indexed (each is built in the background on first open)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = api(url, "/api/runs")["runs"]
        if all(r["indexed"] for r in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)


def api(url: str, path: str, **params) -> dict:
    query = urllib.parse.urlencode(params, doseq=True)
    status, _, body = get(f"{url}{path}" + (f"?{query}" if query else ""))
    assert status == 200, body
    return json.loads(body)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    dirs = make_runs(root / "runs")
    dirs["custom"] = make_custom_run(root / "runs")
    return root, dirs


@pytest.fixture(scope="module")
def server(runs):
    root, _ = runs
    with view_server([root / "runs"], root / "cache") as (url, _proc):
        yield url


def test_runs_lists_every_run_with_the_summary_the_report_shows(server, runs):
    root, dirs = runs
    by_dir = {r["directory"]: r for r in wait_indexed(server)}
    assert set(by_dir) == {str(d.resolve()) for d in dirs.values()}
    # the report's summary table, parsed back from its HTML
    report = build_report(list(dirs.values()), root / "report.html")
    table = _summary_rows(report.path.read_text(encoding="utf-8"))
    views = load_runs(list(dirs.values()))
    for view in views:
        api_run = by_dir[str(view.directory.resolve())]
        assert api_run["settings"]["env"] == view.env and api_run["n_trajectories"] == len(view.trajectories)
        expected = summary_records(summary_cells([view]))
        got = [[view.env, view.label, s["grader"], *s["cells"].values()] for s in api_run["summary"]]
        assert got == expected
        in_report = [row for row in table if row[0] == view.env and row[1] == view.label]
        assert in_report == expected, (in_report, expected)
        for s in api_run["summary"]:  # the numbers behind the text
            scored = [x.value for x in view.scores if x.grader == s["grader"] and x.value is not None]
            assert s["n"] == len(scored) and s["mean"] == pytest.approx(sum(scored) / len(scored))


class _Table(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self._in, self._row, self._cell = [], False, None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("class", "summary") in attrs:
            self._in = True
        elif self._in and tag == "tr":
            self._row = []
        elif self._in and tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "table" and self._in:
            self._in = False
        elif self._in and tag == "tr" and self._row:
            self.rows.append(self._row)
            self._row = None
        elif self._in and tag == "td" and self._row is not None:
            self._row.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _summary_rows(html: str) -> list[list[str]]:
    parser = _Table()
    parser.feed(html)
    return parser.rows


def _failed_ids(directory, grader):
    run = load_run(directory, with_examples=False)
    return sorted(s.example_id for s in run.scores if s.grader == grader and s.value is not None and s.value < 1)


def _ids(rows):
    return sorted(r["example_id"] for r in rows)


def test_paging_and_sorting(server, runs):
    _, dirs = runs
    n = len(load_run(dirs["custom"], with_examples=False).trajectories)
    first = api(server, "/api/runs/custom/trajectories", per_page=5)
    assert first["total"] == n and first["pages"] == -(-n // 5) and len(first["rows"]) == 5
    seen = []
    for page in range(1, first["pages"] + 1):
        seen += api(server, "/api/runs/custom/trajectories", per_page=5, page=page)["rows"]
    assert len(seen) == n and len({r["example_id"] for r in seen}) == n
    by_tokens = api(server, "/api/runs/custom/trajectories", sort="tokens", order="desc", per_page=100)["rows"]
    tokens = [r["tokens"] for r in by_tokens]
    assert tokens == sorted(tokens, reverse=True) and tokens[0] > tokens[-1]
    by_score = api(server, "/api/runs/scripted/trajectories", sort="score:final_state", per_page=100)["rows"]
    values = [r["scores"]["final_state"]["value"] for r in by_score if "final_state" in r["scores"]]
    assert values == sorted(values) and values[0] < values[-1]
    assert "final_state" not in by_score[-1]["scores"]  # the unscored (errored) episode sorts last


def test_filters(server, runs):
    _, dirs = runs
    run = load_run(dirs["custom"])
    trajectories = run.trajectories
    got = api(server, "/api/runs/custom/trajectories", status="error", per_page=100)
    assert _ids(got["rows"]) == sorted(t.example_id for t in trajectories if t.status == "error") != []
    got = api(server, "/api/runs/custom/trajectories", grader="final_state", passed="0", per_page=100)
    assert _ids(got["rows"]) == _failed_ids(dirs["custom"], "final_state") != []
    passed = api(server, "/api/runs/custom/trajectories", grader="final_state", passed="1", per_page=100)
    assert passed["total"] + got["total"] == sum(1 for s in run.scores if s.grader == "final_state")
    hard = api(server, "/api/runs/custom/trajectories", **{"meta.difficulty": "hard"}, per_page=100)
    assert _ids(hard["rows"]) == sorted(t.example_id for t in trajectories
                                        if run.examples[t.example_id].metadata["difficulty"] == "hard")
    slow = api(server, "/api/runs/custom/trajectories", min_duration="3", per_page=100)
    assert _ids(slow["rows"]) == sorted(t.example_id for t in trajectories if t.duration_s >= 3) != []
    big = api(server, "/api/runs/custom/trajectories", min_tokens="1000", max_tokens="2000", per_page=100)
    totals = {t.example_id: sum((s.input_tokens or 0) + (s.output_tokens or 0) for s in t.model_steps) for t in trajectories}
    assert _ids(big["rows"]) == sorted(e for e, n in totals.items() if 1000 <= n <= 2000) != []
    wrong = api(server, "/api/runs/custom/trajectories", first_error="wrong_arguments", per_page=100)
    assert wrong["total"] > 0 and all(r["first_error"]["type"] == "wrong_arguments" for r in wrong["rows"])
    episode = api(server, "/api/runs/custom/trajectories", first_error="episode_error", per_page=100)
    assert _ids(episode["rows"]) == _ids(got_error := api(server, "/api/runs/custom/trajectories", status="error")["rows"])
    assert got_error
    info = api(server, "/api/runs/custom")
    assert sum(info["facets"]["first_error"].values()) == len(trajectories)
    assert info["metadata"]["difficulty"] == ["easy", "hard"]


def _text_of(run, traj):
    ex = run.examples.get(traj.example_id)
    parts = [ex.input if ex else "", traj.final_answer or "", traj.error or ""]
    for s in traj.steps:
        if s.kind == "model":
            parts += [s.text, s.reasoning or ""]
        else:
            parts += [s.name, json.dumps(s.arguments, ensure_ascii=False), s.output]
    return "\n".join(parts).casefold()


@pytest.mark.parametrize("q", ["long-output-end", "CAREFULLY", "moon", "done: s", "ok", "o"])
def test_search_finds_exactly_the_trajectories_holding_the_text(server, runs, q):
    _, dirs = runs
    run = load_run(dirs["custom"])
    expected = sorted(t.example_id for t in run.trajectories if q.casefold() in _text_of(run, t))
    got = api(server, "/api/runs/custom/trajectories", q=q, per_page=100)
    assert _ids(got["rows"]) == expected and expected
    for row in got["rows"]:
        snippet = row["match"]["snippet"]
        marked = snippet.split("\x02", 1)[1].split("\x03", 1)[0]
        assert marked.casefold() == q.casefold()


def test_trajectory_keeps_every_value_whole(server, runs):
    _, dirs = runs
    run = load_run(dirs["custom"], with_examples=False)
    traj = next(t for t in run.trajectories if any(s.kind == "tool" and s.output == LONG_OUTPUT for s in t.steps))
    doc = api(server, f"/api/runs/custom/trajectories/{urllib.parse.quote(traj.example_id)}/0")
    steps = doc["trajectory"]["steps"]
    assert len(steps) == len(traj.steps)
    assert [s.get("output") for s in steps if s["kind"] == "tool"] == [s.output for s in traj.tool_steps]
    assert steps[0]["reasoning"] == traj.steps[0].reasoning
    assert [s["tool_index"] for s in steps if s["kind"] == "tool"] == list(range(len(traj.tool_steps)))
    assert {s["grader"] for s in doc["scores"]} == {s.grader for s in run.scores if s.example_id == traj.example_id}
    assert doc["example"]["input"] == "star"


def test_example_ids_with_slashes_and_payloads_round_trip(server, runs):
    _, dirs = runs
    ids = [t.example_id for t in load_run(dirs["scripted"], with_examples=False).trajectories]
    for eid in ids:
        doc = api(server, f"/api/runs/scripted/trajectories/{urllib.parse.quote(eid, safe='')}/0")
        assert doc["trajectory"]["example_id"] == eid


def test_diff_pairs_steps_by_a_sequence_alignment(server):
    doc = api(server, "/api/diff", a="oracle/tw-2-cat/0", b="scripted/tw-2-cat/0")
    # the oracle typed c, a, t; the scripted model typed c, an invalid letter, a, t
    assert doc["method"] == "sequence"
    assert [(p["a"], p["b"], p["status"]) for p in doc["pairs"]] == [
        (0, 0, "same"), (None, 1, "only_b"), (1, 2, "same"), (2, 3, "same")]
    same = api(server, "/api/diff", a="oracle/tw-0-a/0", b="oracle/tw-0-a/0")
    assert same["same"] is True
    loop = api(server, "/api/diff", a="oracle/tw-3-dog/0", b="scripted/tw-3-dog/0")
    different = [p for p in loop["pairs"] if p["status"] == "different"]
    assert different and all("arguments" in p["differences"] for p in different)


def test_compare_groups_examples_and_gives_the_paired_test(server, runs):
    _, dirs = runs
    doc = api(server, "/api/compare", a="oracle", b="scripted", grader="final_state")
    a = {s.example_id: s.value for s in load_run(dirs["oracle"], with_examples=False).scores if s.grader == "final_state"}
    b = {s.example_id: s.value for s in load_run(dirs["scripted"], with_examples=False).scores if s.grader == "final_state"}
    both = set(a) & set(b)
    assert doc["counts"]["both_pass"] == sum(a[e] == 1 and b[e] == 1 for e in both)
    assert doc["counts"]["only_a"] == sum(a[e] == 1 and b[e] != 1 for e in both)
    assert doc["test"]["n_paired"] == len(both) and doc["test"]["method"].startswith("mcnemar")


def test_bad_parameters_are_refused_with_the_parameter_named(server):
    for path, word in [
        ("/api/runs/custom/trajectories?sort=nope", "sort"),
        ("/api/runs/custom/trajectories?grader=nope&passed=1", "grader"),
        ("/api/runs/custom/trajectories?passed=maybe", "passed"),
        ("/api/runs/custom/trajectories?per_page=100000", "per_page"),
        ("/api/runs/custom/trajectories?min_duration=abc", "min_duration"),
        ("/api/runs/custom/trajectories?format=xml", "format"),
        ("/api/diff?a=oracle&b=scripted/tw-0-a/0", "a"),
        ("/api/runs/custom/trajectories?status=bogus", "status: 'bogus' is not one of completed"),
        ("/api/runs/custom/trajectories?first_error=bogus", "first_error: 'bogus' is not one of episode_error"),
    ]:
        status, _, body = get(server + path)
        assert status == 400 and word in json.loads(body)["error"], (path, body)
    assert get(server + "/api/runs/nope")[0] == 404
    assert get(server + "/api/runs/custom/trajectories/nope/0")[0] == 404
    for path in ("/api/runs/custom/trajectories/tw-0-a/x", "/api/nothing"):  # no route: still JSON
        status, headers, body = get(server + path)
        assert status == 404 and headers["content-type"].startswith("application/json") and "error" in json.loads(body)
    assert api(server, "/api/runs/custom/trajectories", first_error="none,missing", status="completed,error")["total"] >= 0


def test_csv_download_neutralises_formulas_and_matches_the_filter(server, runs):
    status, headers, body = get(server + "/api/runs/custom/trajectories?format=csv&meta.difficulty=easy")
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert "attachment" in headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    json_rows = api(server, "/api/runs/custom/trajectories", **{"meta.difficulty": "easy"}, per_page=100)["rows"]
    assert len(rows) == len(json_rows)
    ids = {r["example_id"] for r in rows}
    for formula in FORMULA_IDS:
        assert "'" + formula in ids and formula not in ids
    assert not any(cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r.values() if cell)
    status, _, body = get(server + "/api/runs/custom/trajectories?format=jsonl&status=error")
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert status == 200 and [r["example_id"] for r in lines] == [r["example_id"] for r in
                                                                  api(server, "/api/runs/custom/trajectories", status="error")["rows"]]


def test_only_the_run_directories_files_are_served(server, runs):
    files = api(server, "/api/runs/oracle/files")["files"]
    assert "run.json" in {f["name"] for f in files}
    status, headers, body = get(server + "/api/runs/oracle/files/run.json")
    assert status == 200 and "attachment" in headers["content-disposition"]
    assert headers["content-type"] == "application/octet-stream" and json.loads(body)["env"] == "typewriter_1"
    for path in ["/api/runs/oracle/files/..%2Fdataset.jsonl", "/api/runs/oracle/files/%2Fetc%2Fpasswd",
                 "/api/runs/oracle/files/.lock", "/static/..%2F..%2Fapi.py", "/static/view.html"]:
        assert get(server + path)[0] == 404, path


def test_security_headers_and_host_check(server):
    status, headers, _ = get(server + "/")
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert get(server + "/api/runs", {"Host": "evil.example"})[0] == 400  # DNS rebinding


def test_token_refusal(runs):
    root, _ = runs
    with view_server([root / "runs"], root / "cache", "--token", "s3cret") as (url, _):
        assert get(url + "/api/runs")[0] == 401
        assert get(url + "/")[0] == 401
        assert get(url + "/api/runs", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(url + "/api/runs", {"Authorization": "Bearer s3cret"})[0] == 200
        status, headers, _ = get(url + "/?token=s3cret")
        assert status == 303 and "toolgym_view_token=s3cret" in headers["set-cookie"]
        assert "httponly" in headers["set-cookie"].lower()
        assert get(url + "/api/runs", {"Cookie": "toolgym_view_token=s3cret"})[0] == 200


def test_listening_beyond_loopback_needs_a_token(tmp_path):
    import subprocess
    import sys

    from view_runs import ROOT

    done = subprocess.run([sys.executable, "run_agent.py", "view", str(tmp_path), "--host", "0.0.0.0", "--no-browser"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--token" in done.stderr


def test_a_run_being_written_updates_live(tmp_path):
    examples = custom_examples()
    out, dataset = tmp_path / "runs" / "growing", tmp_path / "growing.jsonl"
    write_custom_run(out, dataset, examples, n=3)
    with view_server([tmp_path / "runs"], tmp_path / "cache") as (url, _):
        first = api(url, "/api/runs/growing/trajectories")
        assert first["total"] == 3
        assert api(url, "/api/runs")["runs"][0]["live"] is False
        with locked_run_dir(out):
            assert api(url, "/api/runs")["runs"][0]["live"] is True
            write_custom_run(out, dataset, examples, n=8, graded=False)  # the run grades once it is done
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = api(url, "/api/runs/growing/trajectories")
                if now["total"] == 8:
                    break
                time.sleep(0.2)
            assert now["total"] == 8 and now["version"] > first["version"]
        assert api(url, "/api/runs")["runs"][0]["live"] is False


def test_state_changes_per_step_come_from_the_recorded_patches(server, runs):
    import toolgym

    _, dirs = runs
    traj = next(t for t in load_run(dirs["scripted"], with_examples=False).trajectories if t.example_id == "tw-2-cat")
    doc = api(server, "/api/runs/scripted/trajectories/tw-2-cat/0")
    tools = [s for s in doc["trajectory"]["steps"] if s["kind"] == "tool"]
    assert [s["state_patch"] for s in tools] == [s.state_patch for s in traj.tool_steps]
    assert [s["state_after"] for s in tools] == toolgym.states_after(traj)
    assert tools[0]["state_after"] == {"paper": "c"} and tools[1]["state_patch"] == []  # the refused letter
    diff = api(server, "/api/diff", a="oracle/tw-3-dog/0", b="scripted/tw-3-dog/0")
    assert any("state_patch" in p["differences"] for p in diff["pairs"])


def test_report_rows_and_view_rows_are_equal(server, runs):
    """Issue 27 item 9: the static report's table and the view's rows come from one function,
    so for the same run they hold the same status, pass/fail per grader, first error, duration
    and tokens."""
    from toolgym.views.report.payload import build_payload

    _, dirs = runs
    wait_indexed(server)
    for name, directory in dirs.items():
        index, _ = build_payload(load_runs([directory]))
        graders = index["graders"]
        report = [
            (it[1], it[2], it[3], it[4], it[5], bool(it[6]),
             {graders[int(i)]: v for i, v in it[8].items()}, {graders[int(i)]: bool(p) for i, p in it[9].items()},
             tuple(it[10]) if it[10] else None, it[11], it[12])
            for it in index["items"]
        ]
        rows = api(server, f"/api/runs/{name}/trajectories", per_page=1000)["rows"]
        view = [
            (r["example_id"], r["trial"], r["status"], r["n_tool_steps"], r["n_expected"], r["failed"],
             {g: s["value"] for g, s in r["scores"].items()},
             {g: s["passed"] for g, s in r["scores"].items() if s["passed"] is not None},
             (r["first_error"]["type"], r["first_error"]["step"], r["first_error"]["text"]) if r["first_error"] else None,
             r["duration_s"], r["tokens"])
            for r in rows
        ]
        assert len(report) == len(view) > 0, name
        assert report == view, name
        assert any(row[8] is not None for row in view) or name != "custom"  # first errors compared, not only None


def test_a_large_run_answers_from_the_first_batch_while_it_is_indexed(tmp_path):
    from view_runs import write_big_run

    n = 12_000
    write_big_run(tmp_path / "runs" / "big", tmp_path / "big.jsonl", n)
    with view_server([tmp_path / "runs"], tmp_path / "cache") as (url, _):
        first = api(url, "/api/runs/big/trajectories")
        # answered from the rows indexed so far, in file order, and said to be partial
        assert first["indexing"] is not None and 0 < first["indexing"]["rows"] < n and first["partial"] is True
        assert first["total"] < n
        assert [r["example_id"] for r in first["rows"]] == [f"b{i:05d}" for i in range(50)]
        assert all(r["n_expected"] is not None for r in first["rows"])  # a small dataset is read first
        searched = api(url, "/api/runs/big/trajectories", q="b0001")
        assert searched["indexing"] is not None and 0 < searched["total"] <= 10
        run = api(url, "/api/runs")["runs"][0]
        assert run["indexed"] is False and run["indexing"]["total_lines"] in (0, n)
        done = wait_indexed(url, timeout=300)[0]
        assert done["indexed"] is True and done["indexing"] is None and done["n_trajectories"] == n
        whole = api(url, "/api/runs/big/trajectories", passed="0", per_page=1000)
        assert whole["indexing"] is None and whole["partial"] is False and whole["version"] > first["version"]
        assert whole["total"] == n // 5  # every fifth typed a wrong letter
        assert api(url, "/api/runs/big/trajectories", q="b0001")["total"] == 10
        # built in batches (the first before the dataset), the rest in a child process: every
        # row is the one computed from the whole run read back at once
        (view,) = load_runs([tmp_path / "runs" / "big"])
        rows = [r for page in range(1, n // 1000 + 1)
                for r in api(url, "/api/runs/big/trajectories", per_page=1000, page=page)["rows"]]
        assert rows == [json.loads(json.dumps(view.row(t))) for t in view.trajectories]
    # opened again: the complete cache answers at once
    with view_server([tmp_path / "runs"], tmp_path / "cache") as (url, _):
        again = api(url, "/api/runs/big/trajectories")
        assert again["indexing"] is None and again["total"] == n


def test_a_fork_links_to_its_parent_and_diffs_against_it(runs, tmp_path):
    from view_runs import make_fork

    root, dirs = runs
    fork = make_fork(dirs["scripted"], tmp_path / "forks" / "scripted-fork")
    parent = load_run(fork, with_examples=False).trajectories[0].parent
    assert parent["run"] == str(dirs["scripted"].resolve()) and parent["example_id"] == "tw-2-cat"
    with view_server([root / "runs", tmp_path / "forks"], tmp_path / "cache") as (url, _):
        wait_indexed(url)
        row = api(url, "/api/runs/scripted-fork/trajectories")["rows"][0]
        assert row["parent"] == parent
        doc = api(url, "/api/runs/scripted-fork/trajectories/tw-2-cat/0")
        assert doc["parent_ref"] == "scripted/tw-2-cat/0"
        diff = api(url, "/api/diff", a=doc["parent_ref"], b="scripted-fork/tw-2-cat/0")
        assert diff["a"]["run"] == "scripted" and diff["b"]["run"] == "scripted-fork"
        pairs = diff["pairs"]
        # the tool steps before the fork's step were replayed: the same in both; then they part
        step = parent["step"]
        assert step > 1 and [p["status"] for p in pairs[: step - 1]] == ["same"] * (step - 1)
        assert [(p["a"], p["b"]) for p in pairs[: step - 1]] == [(i, i) for i in range(step - 1)]
        assert not diff["same"] and any(p["status"] != "same" for p in pairs[step - 1:])
        assert diff["b"]["trajectory"]["final_state"] == {"paper": "cat"}  # the fork typed it right
        assert diff["b"]["row"]["failed"] is False and diff["a"]["row"]["failed"] is True


def test_a_growing_run_is_read_on_in_place(tmp_path):
    """A run that grew is indexed from where the last build stopped, into the same database
    (not built again), and its rows are those of the whole run read back."""
    from toolgym.views.web.index import Query, RunIndex

    examples = custom_examples()
    out, dataset = tmp_path / "runs" / "growing", tmp_path / "growing.jsonl"
    write_custom_run(out, dataset, examples, n=3)
    index = RunIndex(out, tmp_path / "cache")
    assert index.refresh() and index.wait(60)
    inode, version = index.path.stat().st_ino, index.version
    assert index.query(Query())["total"] == 3 and index.indexing is None
    assert not index.refresh()  # nothing changed: nothing to do
    stamp = dataset.stat()
    write_custom_run(out, dataset, examples, n=9)
    os.utime(dataset, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the helper rewrote it unchanged: as a run leaves it
    assert index.refresh() and index.wait(60)
    assert index.error is None and index.version > version
    assert index.path.stat().st_ino == inode  # the same database, read on
    (view,) = load_runs([out])
    assert index.query(Query(per_page=100))["rows"] == [json.loads(json.dumps(view.row(t))) for t in view.trajectories]
    assert index.info["summary"] == json.loads(json.dumps(index.info["summary"]))
    assert [c["cells"]["n"] for c in index.info["summary"]] == [str(c.estimate.n) for c in summary_cells([view])]


def test_side_by_side_is_offered_only_with_runs_that_hold_the_example(server, runs):
    """The trajectory page's "side by side with the same example in" list: a run of another
    environment (oracle26) or without the example (custom) is not offered; each run offered
    serves that trajectory, so choosing it never gives an error page."""
    _, dirs = runs
    wait_indexed(server)
    doc = api(server, "/api/runs/scripted/trajectories/tw-2-cat/0")
    holders = {name for name, d in dirs.items() if name != "scripted" and any(
        t.example_id == "tw-2-cat" and t.trial == 0 and t.env == "typewriter_1"
        for t in load_run(d, with_examples=False).trajectories)}
    assert set(doc["same_example_in"]) == holders == {"oracle"}
    for other in doc["same_example_in"]:
        assert api(server, "/api/diff", a="scripted/tw-2-cat/0", b=f"{other}/tw-2-cat/0")["pairs"]
    custom = load_run(dirs["custom"], with_examples=False).trajectories[0]
    doc = api(server, f"/api/runs/custom/trajectories/{urllib.parse.quote(custom.example_id, safe='')}/0")
    assert doc["same_example_in"] == []

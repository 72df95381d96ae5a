"""``toolgym view`` used as a person would: Debian's headless Chromium (apt package ``chromium``)
driven by Playwright for Python (pointed at ``/usr/bin/chromium``; it never downloads a browser)
against a real server on 127.0.0.1. Skipped, with the reason, when either is missing. Expected
numbers come from the JSON API or the runs read back, never written down."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
import urllib.request

import pytest
from report_runs import make_runs
from view_runs import (
    LONG_OUTPUT,
    REASONING_PAYLOAD,
    custom_examples,
    make_custom_run,
    view_server,
    write_custom_run,
)

from toolgym import load_run
from toolgym.views.report.browser import CHROMIUM, CHROMIUM_ARGS

pytest.importorskip("starlette", reason="toolgym view needs starlette (pip install -e '.[view]')")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)"
)
pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists() and shutil.which("chromium") is None,
        reason="Debian's chromium is not installed (apt-get install -y chromium)",
    ),
    pytest.mark.slow,  # a server and a browser: about half a minute in all
]

SCREENSHOTS = os.environ.get("TOOLGYM_VIEW_SCREENSHOTS")
"""A folder to keep screenshots of the pages in (docs/view-*.png come from here)."""


def api(url: str, path: str, **params) -> dict:
    query = urllib.parse.urlencode(params)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}{path}" + (f"?{query}" if query else ""), timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewb")
    make_runs(root / "runs")
    make_custom_run(root / "runs")
    return root


@pytest.fixture(scope="module")
def server(root):
    with view_server([root / "runs"], root / "cache") as (url, _):
        deadline = time.monotonic() + 60
        while not all(r["indexed"] for r in api(url, "/api/runs")["runs"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        yield url


@pytest.fixture(scope="module")
def browser(server):
    executable = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _page(browser, url: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.events = {"dialogs": [], "errors": [], "console": []}
    pg.on("dialog", lambda d: (pg.events["dialogs"].append(d.message), d.dismiss()))
    pg.on("pageerror", lambda e: pg.events["errors"].append(str(e)))
    pg.on("console", lambda m: pg.events["console"].append(m.text))
    pg.goto(url)
    return pg


@pytest.fixture
def page(browser, server):
    pg = _page(browser, server + "/")
    wait(pg)
    yield pg
    assert pg.events["dialogs"] == [] and pg.evaluate("window.__xss") is None  # nothing from the runs ran
    assert pg.events["errors"] == [], pg.events
    pg.context.close()


def wait(pg, hash_: str | None = None) -> None:
    if hash_ is not None:
        pg.evaluate("h => { document.documentElement.dataset.ready = '0'; location.hash = h; }", hash_)
    pg.wait_for_selector("html[data-ready='1']", timeout=20_000)


def shot(pg, name: str) -> None:
    status = pg.inner_text("#status-line")
    assert not any(word in status for word in ("unreachable", "server error", "page error")), status  # a poll failed
    if SCREENSHOTS is not None:
        pg.screenshot(path=f"{SCREENSHOTS}/view-{name}.png")


def total(pg) -> int:
    text = pg.locator("#page-info").inner_text()  # "page 1 of 2 · 9 of 16 trajectories"
    return int(text.split("·")[1].split(" of ")[0].replace(",", ""))


def changed(pg, action) -> None:
    """Run ``action`` (which changes the hash) and wait for the new page."""
    pg.evaluate("document.documentElement.dataset.ready = '0'")
    action()
    pg.wait_for_selector("html[data-ready='1']", timeout=20_000)


def test_runs_page_shows_each_run_with_the_api_summary(page, server):
    runs = api(server, "/api/runs")["runs"]
    assert page.locator("#runs section.run").count() == len(runs)
    for run in runs:
        table = page.locator(f"section.run[data-name='{run['name']}'] table.summary")
        for s in run["summary"]:
            row = table.locator(f"tr[data-grader='{s['grader']}']")
            assert row.locator("td").nth(1).inner_text() == s["cells"]["mean ± stderr"]
            assert row.locator("td").nth(5).inner_text() == s["cells"]["passed"]


def test_search_marks_the_match_and_runs_nothing(page, server):
    wait(page, "#/run/scripted")
    changed(page, lambda: page.fill("#q", "onerror"))
    expected = api(server, "/api/runs/scripted/trajectories", q="onerror")
    assert page.locator("#rows tr.row").count() == expected["total"] > 0
    marks = page.locator("#rows mark").all_inner_texts()
    assert marks and all(m.lower() == "onerror" for m in marks)
    # the payloads are shown as text
    assert "<img src=x" in page.locator("#rows").inner_text()
    assert page.locator("#rows img").count() == 0
    shot(page, "search")


@pytest.mark.parametrize(
    ("control", "value", "params"),
    [
        ("#status", "error", {"status": "error"}),
        ("#first-error", "wrong_arguments", {"first_error": "wrong_arguments"}),
        ("#meta-difficulty", "hard", {"meta.difficulty": "hard"}),
    ],
)
def test_each_select_filter(page, server, control, value, params):
    wait(page, "#/run/custom")
    changed(page, lambda: page.select_option(control, value))
    expected = api(server, "/api/runs/custom/trajectories", **params)["total"]
    assert total(page) == expected > 0
    assert total(page) < api(server, "/api/runs/custom")["n_trajectories"]


def test_grader_pass_fail_filter(page, server):
    wait(page, "#/run/custom")
    changed(page, lambda: page.select_option("#grader", "final_state"))
    changed(page, lambda: page.select_option("#passed", "0"))
    expected = api(server, "/api/runs/custom/trajectories", grader="final_state", passed="0")["total"]
    assert total(page) == expected > 0
    assert page.eval_on_selector_all("#rows tr.row", "rs => rs.every(r => r.dataset.failed === '1')")


@pytest.mark.parametrize(("control", "value", "param"), [
    ("#min-duration", "3", "min_duration"), ("#max-duration", "2", "max_duration"),
    ("#min-tokens", "1000", "min_tokens"), ("#max-tokens", "500", "max_tokens")])
def test_each_number_filter(page, server, control, value, param):
    wait(page, "#/run/custom")
    changed(page, lambda: (page.fill(control, value), page.press(control, "Enter")))
    expected = api(server, "/api/runs/custom/trajectories", **{param: value})["total"]
    assert total(page) == expected > 0


def test_paging_and_sorting(page, server):
    wait(page, "#/run/custom")
    n = api(server, "/api/runs/custom")["n_trajectories"]
    changed(page, lambda: page.select_option("#per-page", "25"))
    assert page.locator("#rows tr.row").count() == min(25, n)
    wait(page, "#/run/custom?per_page=5")
    assert page.locator("#rows tr.row").count() == 5
    first = page.locator("#rows tr.row").first.get_attribute("data-example")
    changed(page, lambda: page.click("#next"))
    assert page.locator("#page-info").inner_text().startswith("page 2 of")
    assert page.locator("#rows tr.row").first.get_attribute("data-example") != first
    changed(page, lambda: page.click("th[data-sort='tokens']"))
    changed(page, lambda: page.click("th[data-sort='tokens']"))  # again: descending
    top = api(server, "/api/runs/custom/trajectories", sort="tokens", order="desc", per_page=5)["rows"]
    assert [r.get_attribute("data-example") for r in page.locator("#rows tr.row").all()] == [r["example_id"] for r in top]


def test_trajectory_view_folds_long_values_and_reasoning(page, server, root):
    run = load_run(root / "runs" / "custom", with_examples=False)
    traj = next(t for t in run.trajectories if any(s.kind == "tool" and s.output == LONG_OUTPUT for s in t.steps))
    wait(page, "#/run/custom")
    changed(page, lambda: page.click(f"#rows tr.row[data-example='{traj.example_id}'] a"))
    assert page.locator("#steps .step").count() == len(traj.steps)
    assert page.locator("#steps .step.tool").count() == len(traj.tool_steps)
    reasoning = page.locator("#steps details.reasoning").first
    assert reasoning.get_attribute("open") is None  # folded
    reasoning.locator("summary").click()
    assert REASONING_PAYLOAD in reasoning.inner_text()
    output = page.locator("#steps .step.tool").first.locator("pre.output")
    assert len(output.inner_text()) < len(LONG_OUTPUT)  # folded, with a button for the rest
    page.locator("#steps .step.tool").first.locator("button.more").click()
    assert output.inner_text() == LONG_OUTPUT  # never dropped
    assert "tokens" in page.locator("#steps .step.model").first.inner_text()


def test_first_error_is_marked_on_its_step(page, server):
    wait(page, "#/t/scripted/tw-2-cat/0")
    doc = api(server, "/api/runs/scripted/trajectories/tw-2-cat/0")
    step = doc["first_error"]["step"]
    marked = page.locator("#steps .step.first-error")
    assert marked.count() == 1 and marked.get_attribute("data-tool") == str(step - 1)
    assert doc["first_error"]["type"] in page.locator("#first-error-box").inner_text()
    shot(page, "trajectory")


def test_side_by_side_from_compare(page, server):
    wait(page, "#/")
    page.select_option("#cmp-a", "oracle")
    page.select_option("#cmp-b", "scripted")
    changed(page, lambda: page.click("#compare-form button"))
    compare = api(server, "/api/compare", a="oracle", b="scripted")
    for key in ("both_pass", "only_a", "only_b", "both_fail"):
        section = page.locator(f"section.group[data-group='{key}']")
        assert section.locator("li").count() == compare["counts"][key]
    assert "mcnemar" in page.locator("#paired-test").inner_text()
    shot(page, "compare")
    changed(page, lambda: page.click("section.group[data-group='both_pass'] a >> text=tw-2-cat"))
    diff = api(server, "/api/diff", a="oracle/tw-2-cat/0", b="scripted/tw-2-cat/0")
    statuses = page.eval_on_selector_all("#diff .pair", "ps => ps.map(p => p.dataset.status)")
    assert statuses == [p["status"] for p in diff["pairs"]] and "only_b" in statuses
    assert page.locator("#diff .cell.empty").count() == sum(p["a"] is None or p["b"] is None for p in diff["pairs"])
    assert "<img src=x" in page.locator("#diff").inner_text() and page.locator("#diff img").count() == 0
    shot(page, "diff")


def test_trajectory_links_to_the_same_example_in_another_run(page):
    wait(page, "#/t/scripted/tw-3-dog/0")
    page.select_option("#diff-run", "oracle")
    changed(page, lambda: page.click("#diff-form button"))
    assert page.locator("#diff .pair").count() > 0
    assert "A: scripted/tw-3-dog/0" in page.locator("#diff").inner_text()


def test_a_live_run_grows_on_the_page(browser, tmp_path):
    examples = custom_examples()
    out, dataset = tmp_path / "runs" / "growing", tmp_path / "growing.jsonl"
    write_custom_run(out, dataset, examples, n=3)
    with view_server([tmp_path / "runs"], tmp_path / "cache") as (url, _):
        pg = _page(browser, url + "/#/run/growing")
        wait(pg)
        assert total(pg) == 3
        write_custom_run(out, dataset, examples, n=9)
        deadline = time.monotonic() + 20  # the page polls the server; no reload, no click
        while total(pg) != 9 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert total(pg) == 9
        assert pg.locator("#rows tr.row").count() == 9
        assert pg.events["errors"] == []
        pg.context.close()


def _status_becomes(pg, words: str) -> str:
    deadline = time.monotonic() + 15  # the page polls every 1.5 s
    while words not in (status := pg.inner_text("#status-line")) and time.monotonic() < deadline:
        time.sleep(0.2)
    return status


def test_the_status_line_tells_a_stopped_server_from_an_error_answer_and_a_page_error(browser, root):
    with view_server([root / "runs"], root / "cache") as (url, _):
        pg = _page(browser, url + "/")
        wait(pg)
        assert pg.inner_text("#status-line") == ""
        pg.evaluate("window.realFetch = window.fetch")
        pg.evaluate("""window.fetch = async () => new Response('{"error": "the index broke"}',
                       {status: 500, headers: {"Content-Type": "application/json"}})""")
        assert _status_becomes(pg, "server error") == "server error 500 (the index broke)"
        pg.evaluate("""window.fetch = async () => new Response('{"runs": null}',
                       {status: 200, headers: {"Content-Type": "application/json"}})""")
        status = _status_becomes(pg, "page error")
        assert status.startswith("page error (") and status.endswith("reload the page"), status
        assert "unreachable" not in status
        pg.evaluate("window.fetch = window.realFetch")
    status = _status_becomes(pg, "server unreachable")  # the server has stopped
    assert status.startswith("server unreachable ("), status
    pg.context.close()


def test_token_refusal_in_the_browser(browser, root):
    with view_server([root / "runs"], root / "cache", "--token", "tok-123") as (url, _):
        pg = _page(browser, url + "/")
        assert "needs its token" in pg.locator("body").inner_text()
        assert pg.locator("#runs").count() == 0
        pg.goto(url + "/?token=wrong")
        assert "needs its token" in pg.locator("body").inner_text()
        pg.goto(url + "/?token=tok-123")  # sets the cookie, then the page loads
        wait(pg)
        assert pg.locator("#runs section.run").count() > 0
        assert "token" not in pg.url
        pg.context.close()


def test_state_change_is_shown_on_each_tool_step(page, server):
    wait(page, "#/t/scripted/tw-2-cat/0")
    doc = api(server, "/api/runs/scripted/trajectories/tw-2-cat/0")
    tools = [s for s in doc["trajectory"]["steps"] if s["kind"] == "tool"]
    patches = page.locator("#steps .step.tool .patch")
    assert patches.count() == len(tools)
    for i, step in enumerate(tools):
        text = patches.nth(i).inner_text()
        if step["state_patch"] == []:
            assert text == "state unchanged"
        else:
            assert all(op["path"] in text for op in step["state_patch"])


def test_a_large_run_shows_its_first_page_while_indexing_then_refreshes(browser, tmp_path):
    from view_runs import write_big_run

    n = 20_000
    write_big_run(tmp_path / "runs" / "big", tmp_path / "big.jsonl", n)
    with view_server([tmp_path / "runs"], tmp_path / "cache") as (url, _):
        pg = _page(browser, url + "/#/run/big")
        wait(pg)
        # the first page is there at once, from the rows indexed so far, and says so
        note = pg.locator("#indexing")
        assert note.count() == 1 and "so far" in note.inner_text() and "partial" in note.inner_text()
        assert pg.locator("#rows tr.row").count() == 50
        assert pg.locator("#rows tr.row").first.get_attribute("data-example") == "b00000"
        assert total(pg) < n
        shot(pg, "indexing")
        first_note = pg.locator("#indexing-text").inner_text()
        changed(pg, lambda: pg.click("#crumbs a"))  # the runs page: the summary said to be partial
        if api(url, "/api/runs")["runs"][0]["indexing"] is not None:
            assert "partial" in pg.locator("section.run .summary-partial").inner_text()
        changed(pg, lambda: pg.click("section.run h2 a"))
        deadline = time.monotonic() + 300  # the page polls; when the index is whole it redraws without the note
        while pg.locator("#indexing").count() and time.monotonic() < deadline:
            time.sleep(0.3)
        wait(pg)
        assert pg.locator("#indexing").count() == 0 and total(pg) == n
        assert first_note.startswith("indexing: ")
        assert pg.events["errors"] == []
        pg.context.close()


def test_a_fork_beside_its_parent(browser, root, tmp_path):
    from view_runs import make_fork

    fork = make_fork(root / "runs" / "scripted", tmp_path / "forks" / "scripted-fork")
    with view_server([root / "runs", fork.parent], tmp_path / "cache") as (url, _):
        deadline = time.monotonic() + 60
        while not all(r["indexed"] for r in api(url, "/api/runs")["runs"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        pg = _page(browser, url + "/#/t/scripted-fork/tw-2-cat/0")
        wait(pg)
        parent = load_run(fork, with_examples=False).trajectories[0].parent
        head = pg.locator("#parent")
        assert "fork of" in head.inner_text() and f"at step {parent['step']}" in head.inner_text()
        assert head.locator("a").get_attribute("href") == "#/t/scripted/tw-2-cat/0"
        changed(pg, lambda: pg.click("#diff-parent"))
        diff = api(url, "/api/diff", a="scripted/tw-2-cat/0", b="scripted-fork/tw-2-cat/0")
        text = pg.locator("#diff").inner_text()
        assert "A: scripted/tw-2-cat/0" in text and "B: scripted-fork/tw-2-cat/0" in text
        statuses = pg.eval_on_selector_all("#diff .pair", "ps => ps.map(p => p.dataset.status)")
        assert statuses == [p["status"] for p in diff["pairs"]]
        assert statuses[: parent["step"] - 1] == ["same"] * (parent["step"] - 1) and set(statuses) != {"same"}
        shot(pg, "fork-diff")
        changed(pg, lambda: pg.click("#parent a"))  # the parent's own page
        assert pg.locator("h1").inner_text().startswith("tw-2-cat")
        assert pg.events["errors"] == []
        pg.context.close()

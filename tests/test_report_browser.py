"""The HTML report opened as a person would: in Debian's headless Chromium (apt package
``chromium``), driven by Playwright for Python, which never downloads a browser here: it is
pointed at ``/usr/bin/chromium``. Skipped, with the reason, when either is missing."""

from __future__ import annotations

import shutil

import pytest
from report_runs import ID_PAYLOAD, IMG_PAYLOAD, SCRIPT_PAYLOAD, make_runs

from toolgym.views.report import build_report
from toolgym.views.report.browser import CHROMIUM, CHROMIUM_ARGS

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)"
)
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and shutil.which("chromium") is None,
    reason="Debian's chromium is not installed (apt-get install -y chromium)",
)


@pytest.fixture(scope="module")
def report_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    runs = make_runs(root / "runs")
    result = build_report(list(runs.values()), root / "report.html")
    return result.path.resolve().as_uri()


@pytest.fixture(scope="module")
def browser(report_url):
    # after report_url: Playwright's sync API keeps an event loop running, and the runner
    # that makes the run directories starts its own
    executable = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, report_url):
    """A fresh page on the report that records dialogs, script errors, console messages and
    every request it makes."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.events = {"dialogs": [], "errors": [], "console": [], "requests": []}
    pg.on("dialog", lambda d: (pg.events["dialogs"].append(d.message), d.dismiss()))
    pg.on("pageerror", lambda e: pg.events["errors"].append(str(e)))
    pg.on("console", lambda m: pg.events["console"].append(m.text))
    pg.on("request", lambda r: pg.events["requests"].append(r.url))
    pg.goto(report_url)
    pg.wait_for_selector("html[data-ready='1']", timeout=15_000)
    yield pg
    context.close()


def test_summary_and_charts_render(page, report_url):
    rows = page.locator("table.summary tbody tr")
    assert rows.count() == 9  # 3 runs x 3 graders
    assert "0.500 ± 0.204" in page.locator("table.summary").inner_text()
    images = page.locator("figure.chart img")
    assert images.count() == 5
    sizes = page.eval_on_selector_all(
        "figure.chart img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
    )
    assert all(complete and w > 100 and h > 100 for complete, w, h in sizes), sizes
    assert page.locator("#page-info").inner_text() == "page 1 of 1 · 20 of 20 trajectories"
    assert page.events["requests"] == [report_url]  # nothing fetched but the file itself
    assert page.events["errors"] == [] and page.events["console"] == []


def test_failed_example_trace_shows_payloads_as_text_and_nothing_runs(page):
    page.check("#failed-only")
    assert page.locator("#examples-table tr.item").count() == 6
    assert page.eval_on_selector_all(
        "#examples-table tr.item", "rs => rs.every(r => r.dataset.failed === '1')"
    )
    row = page.locator("#examples-table tr.item", has=page.locator("td.example-id", has_text="xss-"))
    assert row.locator("td.example-id").inner_text() == ID_PAYLOAD
    row.locator("button.toggle").click()
    trace = page.locator("tr.detail .trace-view")
    trace.wait_for()
    assert (
        trace.locator(".divergence").inner_text().startswith("First divergence: call 2: expected type_letter")
    )
    diverging = trace.locator("table.trace tr.diverge")
    assert diverging.count() == 1
    assert diverging.locator("td.actual .call").inner_text().startswith('type_letter({"letter":"c"})')
    assert diverging.locator("td.expected").inner_text() == 'type_letter({"letter":"b"})'
    assert trace.locator("pre.final-answer").inner_text() == f"Typed it. {SCRIPT_PAYLOAD} {IMG_PAYLOAD}"
    assert "final_state = 0" in trace.locator("ul.scores").inner_text()
    # the payloads are text: no element was made from them and none of their code ran
    assert page.locator("main img[src='x']").count() == 0
    assert page.locator("script").count() == 3
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.events["dialogs"] == [] and page.events["errors"] == []
    assert not [m for m in page.events["console"] if "Content Security Policy" in m]


def test_trace_of_an_early_stop_lists_the_missing_call_and_filters_by_grader(page):
    page.select_option("#failed-by", label="final_state not ≥ 1")
    page.check("#failed-only")
    assert page.locator("#examples-table tr.item").count() == 4
    page.fill("#filter-id", "hi")
    assert page.locator("#examples-table tr.item").count() == 1
    page.locator("#examples-table tr.item button.toggle").click()
    missing = page.locator("table.trace tr.missing")
    assert missing.count() == 1 and "diverge" in missing.get_attribute("class")
    assert missing.locator("td.expected").inner_text() == 'type_letter({"letter":"i"})'
    page.locator("#examples-table tr.item button.toggle").click()  # closes again
    assert page.locator("tr.detail").count() == 0


@pytest.fixture(scope="module")
def milestone_report_url(tmp_path_factory):
    """A report of a typewriter_26 run graded against milestones: a state milestone passed
    mid-trajectory, a minefield state, a milestone never reached."""
    import toolgym
    from toolgym.providers.scripted import ScriptedChatModel

    root = tmp_path_factory.mktemp("milestones")
    example = toolgym.Example(
        id="abc", input="Type abc", expected_calls=[{"name": n} for n in "abc"],
        milestones=[{"id": "ab", "state": {"paper": "ab"}}, {"id": "c", "after": ["ab"], "call": {"name": "c"}}],
        minefields=[{"state": {"paper": {"$contains": "zz"}}}], extra_calls="allow",
    )
    turns = [{"content": "", "tool_calls": [{"name": n, "args": {}, "id": str(k)}]} for k, n in enumerate("abzz")]
    toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=[*turns, {"content": "done"}]), dataset=[example],
                     out=root / "run", graders=["trajectory_match", "collateral_damage"])
    return build_report([root / "run"], root / "report.html").path.resolve().as_uri()


def test_trace_draws_the_alignment_and_the_state_change_of_each_step(browser, milestone_report_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(milestone_report_url)
    page.wait_for_selector("html[data-ready='1']", timeout=15_000)
    page.locator("#examples-table tr.item button.toggle").click()
    trace = page.locator("tr.detail .trace-view")
    trace.wait_for()
    tools = trace.locator("table.trace tr.tool")
    assert tools.count() == 4
    changes = [tools.nth(k).locator(".state-change").inner_text() for k in range(4)]
    assert changes == ['state /paper: "" → "a"', 'state /paper: "a" → "ab"',
                       'state /paper: "ab" → "abz"', 'state /paper: "abz" → "abzz"']
    labels = [tools.nth(k).locator(".align") for k in range(4)]
    # typing a and b brought the state milestone ab about: no extra calls
    assert labels[0].inner_text() == "✓ brings about state milestone ab"
    assert labels[2].get_attribute("data-type") == "wrong_tool"
    forbidden = labels[3]
    assert forbidden.get_attribute("data-type") == "forbidden" and "error" in forbidden.get_attribute("class")
    assert "the state after z matches minefield 0" in forbidden.inner_text()
    assert trace.locator(".missing-milestones").inner_text() == "milestones never reached: c"
    # z at step 3 is where c was due: the first error, even though extra calls are allowed
    assert trace.locator(".first-error").inner_text() == "first error: step 3 (z): wrong tool (c)"
    assert "error" in labels[2].get_attribute("class") and labels[2].inner_text().startswith("✗ wrong tool (c)")
    assert "collateral_damage = 0" in trace.locator("ul.scores").inner_text()
    assert errors == []
    context.close()

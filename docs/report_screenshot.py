"""Remake docs/report.png and docs/report-trace.png: the report of the test suite's run
directories (oracle and a scripted model that errs, on typewriter_1 and typewriter_26), opened
in Debian's headless Chromium.

    cd REPO && python docs/report_screenshot.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from playwright.sync_api import sync_playwright  # noqa: E402
from report_runs import make_runs  # noqa: E402

from toolgym.views.report import build_report  # noqa: E402
from toolgym.views.report.browser import CHROMIUM_ARGS as ARGS  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = make_runs(Path(tmp) / "runs")
        report = build_report([runs["oracle"], runs["scripted"], runs["oracle26"]], Path(tmp) / "report.html")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1180})
            page.goto(report.path.as_uri())
            page.wait_for_selector("html[data-ready='1']")
            page.screenshot(path=str(ROOT / "docs" / "report.png"))
            page.check("#failed-only")
            row = page.locator("#examples-table tr.item", has=page.locator("td.example-id", has_text="cat"))
            row.locator("button.toggle").click()
            page.locator("#examples").screenshot(path=str(ROOT / "docs" / "report-trace.png"))
            browser.close()
    print("wrote docs/report.png and docs/report-trace.png")


if __name__ == "__main__":
    main()

"""How ``toolgym view`` scales, against the static report on the same run.

Two runs:

* ``--kind typewriter --n 100000``: 100,000 simulated typewriter_1 episodes graded by the real
  graders (the generator of ``benchmarks/report_scale.py``);
* ``--kind jmultiwoz``: the full JMultiWOZ-TC run (31,303 turns), made by ``toolgym grade --env
  jmultiwoz_tc --result FILE`` from a result file in the published format written from the gold
  calls with seeded mistakes (a wrong argument, a missing, extra or no call).

Then, for ``toolgym view`` (a real server process on 127.0.0.1, Debian's headless Chromium through
Playwright): the first open (index built), the server restarted over the cached index (process
start to the first page of rows, in the API and in the browser), searches (API and browser),
a filter and the next page, and the bytes the browser received; for the static report: its
build time, its size and its first render in the same browser.

    cd REPO && python benchmarks/view_scale.py --kind typewriter --n 100000 --keep runs/vs
    cd REPO && python benchmarks/view_scale.py --kind jmultiwoz --keep runs/vs
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from toolgym.views.report.browser import CHROMIUM_ARGS  # noqa: E402

JMWOZ_ZIP = ROOT.parent / "shared" / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"
QUERIES = {
    "typewriter": ["Connection error", "次の文字を入力", "w04242", "malformed"],
    "jmultiwoz": ["Search_taxi", "仙台駅", "予約をお願い", "Booking_hotel"],
}
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str) -> tuple[float, bytes]:
    t = time.perf_counter()
    with OPENER.open(url, timeout=3600) as response:
        body = response.read()
    return time.perf_counter() - t, body


def make_typewriter(root: Path, n: int) -> Path:
    import report_scale

    out = root / "run0"
    if not (out / "scores.jsonl").exists():
        report_scale.make_runs(root, n, 1, 0)
    return out


def make_jmultiwoz(root: Path) -> Path:
    out = root / "jmwoz-full"
    if (out / "scores.jsonl").exists():
        return out
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    result = root / "result_simulated.jsonl"
    with zipfile.ZipFile(JMWOZ_ZIP) as z, open(result, "w", encoding="utf-8") as fh:
        for line in z.open("jmultiwoz_tc_ground.json"):
            r = json.loads(line)
            calls = [dict(c) for c in r["ground_truth"]]
            kind = rng.choices(["ok", "arg", "missing", "extra", "none"], [80, 10, 4, 3, 3])[0]
            if kind == "arg" and calls and calls[0]["arguments"]:
                args = dict(calls[0]["arguments"])
                args[rng.choice(sorted(args))] = rng.choice(["仙台", "札幌", 2])
                calls[0] = {**calls[0], "arguments": args}
            elif kind == "missing" and calls:
                calls = calls[1:]
            elif kind == "extra":
                calls.append({"name": "Search_weather", "arguments": {"area": "仙台", "month": 5, "day": 3}})
            elif kind == "none":
                calls = []
            fh.write(json.dumps({"data_id": r["data_id"], "dialogue_id": r["dialogue_id"], "tool_calls": calls},
                                ensure_ascii=False) + "\n")
    subprocess.run([sys.executable, "run_agent.py", "grade", "--env", "jmultiwoz_tc", "--result", str(result),
                    "--dataset", str(JMWOZ_ZIP), "--out", str(out)], cwd=ROOT, check=True)
    return out


class Server:
    """``toolgym view RUN --port 0 --no-browser --cache-dir CACHE`` as a child process."""

    def __init__(self, run: Path, cache: Path) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "run_agent.py", "view", str(run), "--port", "0", "--no-browser", "--cache-dir", str(cache)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )
        line = self.proc.stdout.readline()
        self.listening_s = time.perf_counter() - self.t0
        self.url = "http://" + line.split("http://", 1)[1].split()[0].rstrip("/")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def median_range(values: list[float]) -> str:
    values = sorted(values)
    return f"{statistics.median(values):.3f} ({values[0]:.3f}–{values[-1]:.3f})"


def peak_rss_mb(pid: int) -> float:
    """The peak resident set size of a process (``VmHWM`` in ``/proc/PID/status``, Linux), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def browser_view(url: str, name: str, queries: list[str], repeat: int, first_page_only: bool = False) -> dict[str, str]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"navigation → first page of rows (s)": [], "bytes received by the page": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            sizes: list[int] = []
            page.on("response", lambda r, sizes=sizes: sizes.append(len(r.body()) if r.ok else 0))
            t = time.perf_counter()
            page.goto(f"{url}/#/run/{urllib.parse.quote(name)}", wait_until="commit")
            page.wait_for_selector("html[data-ready='1']", timeout=600_000)
            out["navigation → first page of rows (s)"].append(time.perf_counter() - t)
            out.setdefault("first render, performance.now() (s)", []).append(page.evaluate("window.toolgymReadyMs") / 1e3)
            out["bytes received by the page"].append(float(sum(sizes)))
            if first_page_only:
                out.setdefault("indexing note shown", []).append(float(page.locator("#indexing").count()))
                page.close()
                continue
            for q in queries:
                key = f"search {q!r} in the page (s)"
                hash_ = f"#/run/{urllib.parse.quote(name)}?q={urllib.parse.quote(q)}"
                t = time.perf_counter()
                page.evaluate("h => { document.documentElement.dataset.ready = '0'; location.hash = h; }", hash_)
                page.wait_for_selector("html[data-ready='1']", timeout=600_000)
                out.setdefault(key, []).append(time.perf_counter() - t)
            for key, action in [("filter to failures (s)", "passed=0"), ("next page of failures (s)", "passed=0&page=2")]:
                t = time.perf_counter()
                page.evaluate("h => { document.documentElement.dataset.ready = '0'; location.hash = h; }",
                              f"#/run/{urllib.parse.quote(name)}?{action}")
                page.wait_for_selector("html[data-ready='1']", timeout=600_000)
                out.setdefault(key, []).append(time.perf_counter() - t)
            t = time.perf_counter()
            page.locator("#rows tr.row a").first.click()
            page.wait_for_selector("#steps", timeout=600_000)
            out.setdefault("open a trajectory (s)", []).append(time.perf_counter() - t)
            page.close()
        browser.close()
    return {k: (f"{statistics.median(v) / 1e3:.1f} kB" if k.startswith("bytes") else
                ("yes" if v[0] else "no") if k.startswith("indexing") else median_range(v)) for k, v in out.items()}


def browser_report(path: Path) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        t = time.perf_counter()
        page.goto(path.as_uri(), wait_until="commit")
        page.wait_for_selector("html[data-ready='1']", timeout=1_800_000)
        seconds = time.perf_counter() - t
        browser.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=["typewriter", "jmultiwoz"], default="typewriter")
    parser.add_argument("--n", type=int, default=100_000, help="typewriter episodes")
    parser.add_argument("--keep", type=Path, help="make (or reuse) the run in this folder")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per figure (median, min–max)")
    parser.add_argument("--no-report", action="store_true", help="skip the static report")
    parser.add_argument("--first-open-only", action="store_true", help="measure the first open only")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    root = args.keep or Path(tmp)
    t = time.perf_counter()
    run = make_typewriter(root / "tw", args.n) if args.kind == "typewriter" else make_jmultiwoz(root / "jm")
    print(f"| run | {run.name}: trajectories.jsonl {(run / 'trajectories.jsonl').stat().st_size / 1e6:.0f} MB "
          f"(made or found in {time.perf_counter() - t:.0f} s) |")
    cache = Path(tmp) / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    queries = QUERIES[args.kind]

    # first open: the index is built in the background; the API answers from the first batch
    server = Server(run, cache)
    seconds, body = get(f"{server.url}/api/runs/{run.name}/trajectories")
    first = json.loads(body)
    print(f"| first open: process start → listening (s) | {server.listening_s:.2f} |")
    print(f"| first open: listening → first page of rows from the API (s) | {time.perf_counter() - server.t0 - server.listening_s:.3f} "
          f"(rows indexed then: {(first.get('indexing') or {}).get('rows', first['total']):,}) |")
    for q in queries[:2]:
        seconds, body = get(f"{server.url}/api/runs/{run.name}/trajectories?q={urllib.parse.quote(q)}")
        found = json.loads(body)
        print(f"| first open: API search {q!r} while indexing (s) | {seconds:.3f} ({found['total']:,} matches so far, "
              f"{'partial' if found.get('indexing') else 'whole'}) |")
    for key, value in browser_view(server.url, run.name, [], 1, first_page_only=True).items():
        print(f"| first open: browser {key} | {value} |")
    while True:
        runs = json.loads(get(f"{server.url}/api/runs")[1])["runs"]
        if runs[0]["indexed"] or runs[0]["error"]:
            break
        time.sleep(0.5)
    print(f"| first open: process start → index complete (s) | {time.perf_counter() - server.t0:.1f} |")
    print(f"| first open: server's peak resident memory (MB) | {peak_rss_mb(server.proc.pid):.0f} |")
    build = json.loads(get(f"{server.url}/api/runs/{run.name}")[1]).get("build") or {}
    print(f"| first open: peak resident memory of the {build.get('process')} process that indexed the rest (MB) "
          f"| {build.get('peak_rss_mb')} |")
    seconds, body = get(f"{server.url}/api/runs/{run.name}/trajectories")
    total = json.loads(body)["total"]
    print(f"| trajectories | {total:,} |")
    server.stop()
    print(f"| index size | {sum(p.stat().st_size for p in cache.iterdir()) / 1e6:.0f} MB |")
    if args.first_open_only:
        shutil.rmtree(tmp, ignore_errors=True)
        return

    starts, firsts, after = [], [], []
    for _ in range(args.repeat):
        server = Server(run, cache)
        get(f"{server.url}/api/runs/{run.name}/trajectories")
        firsts.append(time.perf_counter() - server.t0)
        starts.append(server.listening_s)
        after.append(firsts[-1] - starts[-1])
        server.stop()
    print(f"| cached index: process start → listening (s; Python imports of the command line) | {median_range(starts)} |")
    print(f"| cached index: listening → first page of rows from the API (s) | {median_range(after)} |")
    print(f"| cached index: process start → first page of rows from the API (s) | {median_range(firsts)} |")

    server = Server(run, cache)
    get(f"{server.url}/api/runs/{run.name}/trajectories")
    for q in queries:
        times = []
        for _ in range(args.repeat):
            seconds, body = get(f"{server.url}/api/runs/{run.name}/trajectories?q={urllib.parse.quote(q)}")
            times.append(seconds)
        print(f"| API search {q!r}: {json.loads(body)['total']:,} matches (s) | {median_range(times)} |")
    for key, value in browser_view(server.url, run.name, queries, args.repeat).items():
        print(f"| browser: {key} | {value} |")
    server.stop()

    if not args.no_report:
        from toolgym.views.report import build_report

        result = build_report([run], Path(tmp) / "report.html")
        print(f"| static report: build_report (s) | {result.seconds:.1f} |")
        print(f"| static report: file size | {result.size_bytes / 1e6:.1f} MB |")
        print(f"| static report: navigation → first page of rows (s) | {browser_report(result.path):.2f} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

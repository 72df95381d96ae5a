"""How the HTML report scales: 10,000 trajectories (the size of a JMultiWOZ-TC sample run).

Writes synthetic but valid run directories (a typewriter_1 dataset of random words, and
Trajectory records of an agent that is mostly right but sometimes types a wrong letter, stops
early, adds a call, sends a malformed call, loops to the step limit or crashes; with model text
in English and Japanese, latencies and token counts), grades them with the real graders
(toolgym.runner.grade), builds the report, and opens it in Debian's headless Chromium to time
the first render, opening a trace, paging and filtering.

    cd REPO && python benchmarks/report_scale.py [--n 10000] [--runs 1]
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toolgym.data import write_examples  # noqa: E402
from toolgym.plugins import get_grader  # noqa: E402
from toolgym.records import Example, ModelStep, ToolCall, ToolStep, Trajectory  # noqa: E402
from toolgym.runio import JsonlAppender, write_json_atomic, write_jsonl_atomic  # noqa: E402
from toolgym.runner import grade, grade_trajectories  # noqa: E402
from toolgym.suites.typewriter.environment import Typewriter1  # noqa: E402
from toolgym.views.report import build_report  # noqa: E402
from toolgym.views.report.browser import CHROMIUM_ARGS  # noqa: E402

JMWOZ_ZIP = ROOT.parent / "shared" / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"

THOUGHTS = [
    "I will type the next letter.",
    "次の文字を入力します。",
    "The previous call succeeded; continuing with the next character of the string.",
    "ツールの結果はOKでした。続けます。",
    "",
    "",
    "",
]


def make_dataset(path: Path, n: int, rng: random.Random) -> list[Example]:
    examples = []
    for i in range(n):
        word = "".join(
            rng.choice(string.ascii_lowercase) for _ in range(rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12]))
        )
        examples.append(
            Example(
                id=f"w{i:05d}-{word}",
                input=word,
                expected_steps=["type_letter"] * len(word),
                expected_calls=Typewriter1.calls_for(word),
                reference=word,
                expected_state={"paper": word},
                metadata={"n_steps": len(word)},
            )
        )
    write_examples(path, examples)
    return examples


class Sim:
    """Plays one episode of a simulated model against the real typewriter tool."""

    def __init__(self, example: Example, rng: random.Random, max_steps: int = 40) -> None:
        self.ex, self.rng, self.max_steps = example, rng, max_steps
        self.env = Typewriter1()
        self.env.reset(example)
        self.steps: list = []
        self.turns = 0

    def model(self, text: str, calls: list[ToolCall]) -> None:
        self.turns += 1
        self.steps.append(
            ModelStep(
                text=text,
                tool_calls=calls,
                latency_s=self.rng.uniform(0.15, 2.5),
                input_tokens=320 + 45 * self.turns,
                output_tokens=self.rng.randint(12, 60),
            )
        )
        for call in calls:
            if call.malformed:
                self.steps.append(
                    ToolStep(
                        call_id=call.id,
                        name=call.name,
                        output=(
                            f"Error: malformed tool call ({call.malformed}). Use a tool call with a known tool name "
                            "and a JSON object of arguments."
                        ),
                        error=True,
                    )
                )
            else:
                result = self.env.call(call.name, call.arguments)
                self.steps.append(
                    ToolStep(
                        call_id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        output=result.output,
                        error=result.error,
                    )
                )

    def type(self, letter: str) -> None:
        call = ToolCall(id=f"call_{len(self.steps)}", name="type_letter", arguments={"letter": letter})
        self.model(self.rng.choice(THOUGHTS), [call])

    def play(self, trial: int) -> Trajectory:
        word, rng = self.ex.input, self.rng
        kind = rng.choices(
            ["ok", "wrong", "early", "extra", "malformed", "loop", "crash"], [70, 10, 7, 5, 3, 3, 2]
        )[0]
        status, error, answer = "completed", None, None
        letters = list(word)
        if kind == "wrong":
            letters[rng.randrange(len(letters))] = rng.choice(string.ascii_lowercase)
        elif kind == "early" and len(letters) > 1:
            letters = letters[: rng.randrange(1, len(letters))]
        elif kind == "extra":
            letters.insert(rng.randrange(len(letters) + 1), rng.choice(string.ascii_lowercase))
        if kind == "malformed":
            self.model(
                '<tool_call>{"name": "type_letter", "letter": ' + word[:1] + "</tool_call>",
                [
                    ToolCall(
                        id="bad_0",
                        name="type_letter",
                        malformed="tool call written as text instead of a tool call",
                        raw='{"name": "type_letter", "letter": ' + word[:1],
                    )
                ],
            )
        for i, letter in enumerate(letters):
            if kind == "crash" and i == len(letters) // 2:
                status, error = "error", "APIConnectionError: Connection error."
                break
            self.type(letter)
        if kind == "loop":
            while self.turns < self.max_steps:
                self.type(word[-1])
            status = "step_limit"
        elif status == "completed":
            answer = rng.choice([f"I typed “{word}”.", f"「{word}」と入力しました。", f"Done: {word}"])
            self.model(answer, [])
        return Trajectory(
            example_id=self.ex.id,
            trial=trial,
            env="typewriter_1",
            agent="tool_calling",
            model="simulated:bench",
            status=status,
            error=error,
            steps=self.steps,
            final_state=self.env.read_state(),
            final_answer=answer,
            duration_s=sum(s.latency_s for s in self.steps if s.kind == "model"),
        )


def make_runs(root: Path, n: int, n_runs: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    per_run = n // n_runs
    root.mkdir(parents=True, exist_ok=True)
    dataset = root / "dataset.jsonl"
    examples = make_dataset(dataset, per_run, rng)
    dirs = []
    for r in range(n_runs):
        out = root / f"run{r}"
        out.mkdir(parents=True)
        write_json_atomic(
            out / "run.json",
            {
                "env": "typewriter_1",
                "agent": {"agent": "tool_calling", "max_steps": 40},
                "model": f"simulated:bench-{r}",
                "dataset": {"path": str(dataset), "n_examples": len(examples)},
                "graders": ["final_state", "steps_exact", "step_ratio"],
                "trials": 1,
            },
        )
        with JsonlAppender(out / "trajectories.jsonl") as writer:
            for ex in examples:
                writer.write(Sim(ex, rng).play(0))
        grade(out)
        dirs.append(out)
    return dirs


def _jmwoz_examples(n: int, rng: random.Random) -> list[Example]:
    """``n`` user turns of JMultiWOZ-TC (read from the shared data by path), as Examples."""
    import json
    import zipfile

    with zipfile.ZipFile(JMWOZ_ZIP) as z:
        inputs = [json.loads(line) for line in z.open("jmultiwoz_tc_input.json")]
        gold = {r["data_id"]: r["ground_truth"] for r in map(json.loads, z.open("jmultiwoz_tc_ground.json"))}
    chosen = rng.sample(inputs, n)
    examples = []
    for r in chosen:
        calls = gold[r["data_id"]]
        examples.append(
            Example(
                id=str(r["data_id"]),
                input=r["question"],
                expected_steps=[c["name"] for c in calls],
                expected_calls=[{"name": c["name"], "arguments": c["arguments"]} for c in calls],
            )
        )
    return examples


def _search_result(rng: random.Random, name: str, args: dict) -> str:
    import json

    area = args.get("area", "仙台")
    rows = [
        {
            "name": f"{area}の{rng.choice(['かつどん家', '海鮮処', 'カフェ・ミナト', '湯元旅館', '市民ギャラリー'])}{i}",
            "address": f"{area}市青葉区{rng.randint(1, 9)}-{rng.randint(1, 30)}",
            "tel": f"022-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            "open": "11:00-21:00",
            "parking": rng.choice(["無料", "有料", "なし"]),
        }
        for i in range(rng.randint(0, 3))
    ]
    return json.dumps({"tool": name, "results": rows}, ensure_ascii=False)


def make_jmwoz_runs(root: Path, n: int, n_runs: int, seed: int) -> list[Path]:
    """Runs over real JMultiWOZ-TC inputs and gold calls with a simulated model: mostly the
    gold calls, sometimes a wrong argument value, a missing or an extra call, or no call."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    examples = _jmwoz_examples(n // n_runs, rng)
    dataset = root / "jmwoz_sample.jsonl"
    write_examples(dataset, examples)
    graders = [get_grader("steps_exact"), get_grader("step_ratio")]
    dirs = []
    for r in range(n_runs):
        out = root / f"jmwoz{r}"
        out.mkdir(parents=True)
        write_json_atomic(
            out / "run.json",
            {
                "env": "jmultiwoz_tc",
                "agent": {"agent": "tool_calling", "max_steps": 4},
                "model": f"simulated:jmwoz-{r}",
                "dataset": {"path": str(dataset), "n_examples": len(examples)},
                "graders": [g.name for g in graders],
                "trials": 1,
            },
        )
        trajectories = []
        for ex in examples:
            calls = [dict(c.arguments) for c in ex.expected_calls]
            names = [c.name for c in ex.expected_calls]
            kind = rng.choices(["ok", "arg", "missing", "extra", "none"], [62, 18, 8, 6, 6])[0]
            if kind == "arg" and calls and calls[0]:
                key = rng.choice(sorted(calls[0]))
                calls[0][key] = rng.choice(["仙台", "札幌", 2, "ＡＢＣホテル"])
            elif kind == "missing" and names:
                calls, names = calls[1:], names[1:]
            elif kind == "extra" or (kind == "arg" and not names):
                names.append("Search_weather")
                calls.append({"area": "仙台", "month": 5, "day": 3})
            elif kind == "none":
                calls, names = [], []
            tool_calls = [
                ToolCall(id=f"c{i}", name=nm, arguments=a)
                for i, (nm, a) in enumerate(zip(names, calls, strict=True))
            ]
            steps: list = [
                ModelStep(
                    text="",
                    tool_calls=tool_calls,
                    latency_s=rng.uniform(0.3, 3.0),
                    input_tokens=rng.randint(900, 2500),
                    output_tokens=rng.randint(20, 80),
                )
            ]
            for c in tool_calls:
                steps.append(
                    ToolStep(
                        call_id=c.id,
                        name=c.name,
                        arguments=c.arguments,
                        output=_search_result(rng, c.name, c.arguments),
                    )
                )
            answer = rng.choice(
                [
                    "承知しました。条件に合うお店が見つかりました。駅から徒歩圏内で、駐車場も無料です。ご予約もお手伝いできますが、いかがいたしましょうか。",
                    "申し訳ございません、ご希望の条件に合う施設は見つかりませんでした。エリアを広げて検索しましょうか？",
                    "かしこまりました。ご予約を承りました。予約番号は後ほどお伝えします。他にご用件はございますか。",
                ]
            )
            steps.append(
                ModelStep(
                    text=answer,
                    latency_s=rng.uniform(0.3, 3.0),
                    input_tokens=rng.randint(1500, 3500),
                    output_tokens=rng.randint(30, 90),
                )
            )
            trajectories.append(
                Trajectory(
                    example_id=ex.id,
                    env="jmultiwoz_tc",
                    agent="tool_calling",
                    model=f"simulated:jmwoz-{r}",
                    status="completed",
                    steps=steps,
                    final_answer=answer,
                    duration_s=sum(s.latency_s for s in steps if s.kind == "model"),
                )
            )
        write_jsonl_atomic(out / "trajectories.jsonl", trajectories)
        scores = grade_trajectories({ex.id: ex for ex in examples}, trajectories, graders)
        write_jsonl_atomic(out / "scores.jsonl", scores)
        exact = sum(s.value == 1.0 for s in scores if s.grader == "steps_exact")
        rows = [
            {
                "評価項目": item,
                "総データ数": len(examples),
                "評価対象数": len(examples),
                "正解数": k,
                "不正解数": len(examples) - k,
                "出力ミスのデータ数": 0,
                "全体の正答率(%)": round(100 * k / len(examples), 2),
            }
            for item, k in [
                ("ツール呼び出し全体", exact),
                ("ツール名", exact),
                ("引数", exact),
                ("呼び出し不要", exact),
                ("呼び出しあり", exact),
            ]
        ]
        import json

        (out / f"score_simulated-jmwoz-{r}.json").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
        dirs.append(out)
    return dirs


def browser_timings(path: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        t0 = time.perf_counter()
        page.goto(path.as_uri(), wait_until="commit")
        page.wait_for_selector("html[data-ready='1']", timeout=120_000)
        wall_ready = time.perf_counter() - t0
        ready_ms = float(page.evaluate("window.toolgymReadyMs"))
        images_ms = float(
            page.evaluate(
                "Promise.all([...document.images].map(i => i.decode())).then(() => performance.now())"
            )
        )
        t1 = time.perf_counter()
        page.locator("#examples-table tr.item button.toggle").first.click()
        page.locator("tr.detail .trace-view").wait_for()
        first_trace = time.perf_counter() - t1
        t2 = time.perf_counter()
        page.locator("#examples-table tr.item button.toggle").nth(3).click()
        page.locator("tr.detail .trace-view").nth(1).wait_for()
        second_trace = time.perf_counter() - t2
        t3 = time.perf_counter()
        page.check("#failed-only")
        page.wait_for_function("document.querySelector('#page-info').textContent.indexOf('page 1 of') === 0")
        filter_s = time.perf_counter() - t3
        page_s = float("nan")
        if page.locator("#page-next").is_enabled():  # more than one page of failures
            t4 = time.perf_counter()
            page.click("#page-next")
            page.wait_for_function(
                "document.querySelector('#page-info').textContent.indexOf('page 2 of') === 0"
            )
            page_s = time.perf_counter() - t4
        info = page.locator("#page-info").inner_text()
        browser.close()
    return {
        "goto→ready (s, wall)": wall_ready,
        "first render (ms, performance.now)": ready_ms,
        "charts decoded (ms, performance.now)": images_ms,
        "open first trace (s)": first_trace,
        "open another trace (s)": second_trace,
        "filter to failures (s)": filter_s,
        "next page (s)": page_s,
        "pager after filter": info,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="trajectories in all")
    parser.add_argument("--runs", type=int, default=1, help="split into this many run directories")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the runs and report in this directory")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument(
        "--kind",
        choices=["typewriter", "jmultiwoz"],
        default="typewriter",
        help="typewriter_1 episodes, or real JMultiWOZ-TC turns with a simulated model",
    )
    parser.add_argument("--repeat", type=int, default=3, help="browser measurements (median, min–max)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        t = time.perf_counter()
        maker = make_runs if args.kind == "typewriter" else make_jmwoz_runs
        dirs = maker(root, args.n, args.runs, args.seed)
        made = time.perf_counter() - t
        size_traj = sum((d / "trajectories.jsonl").stat().st_size for d in dirs)
        result = build_report(dirs, root / "report.html")
        print(
            f"| trajectories | {result.n_trajectories} in {len(dirs)} run(s); trajectories.jsonl {size_traj / 1e6:.1f} MB "
            f"(simulated and graded in {made:.1f} s) |"
        )
        print(f"| report size | {result.size_bytes / 1e6:.2f} MB |")
        print(f"| build_report: read runs and dataset, charts, HTML (s) | {result.seconds:.2f} |")
        if not args.no_browser:
            samples = [browser_timings(result.path) for _ in range(args.repeat)]
            for key, value in samples[0].items():
                if isinstance(value, float):
                    values = sorted(s[key] for s in samples)
                    print(f"| {key} | {values[len(values) // 2]:.2f} ({values[0]:.2f}–{values[-1]:.2f}) |")
                else:
                    print(f"| {key} | {value} |")


if __name__ == "__main__":
    main()

"""Fault injection: a full run against a stand-in OpenAI-compatible server that answers 20% of
requests with HTTP 500/502/503, 5% too slowly (past the client's timeout) and 5% with
malformed tool calls; checks that every example is in the output exactly once with the status
the server's log says it must have.

Usage: python benchmarks/faults.py [--examples 2000] [--concurrency 32] [--provider openai]
Prints a Markdown table for BENCHMARKS.md. ``fault_run`` is also used by the test suite on a
smaller run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakeserver import MALFORMED, FakeModelServer, exhausted, seeded_mix  # noqa: E402
from toolgym.providers import ModelSettings  # noqa: E402
from toolgym.records import Example, Trajectory  # noqa: E402
from toolgym.runio import read_jsonl, read_scores  # noqa: E402
from toolgym.runner import RunConfig, run  # noqa: E402

SPEC_RATES = {
    "http500": 0.07, "http502": 0.07, "http503": 0.06,  # 20% 5xx
    "slow": 0.05,  # 5% timeouts
    "bad_json_args": 0.01, "trailing_text_args": 0.01, "unknown_tool": 0.01,  # 5% malformed
    "fenced_call": 0.01, "non_object_args": 0.01,
}

# Error types the clients raise for each kind of fault, by category.
FAULT_CATEGORY = {"http500": "server", "http502": "server", "http503": "server", "http529": "server",
                  "http429": "rate_limit", "slow": "timeout", "close": "connection"}


def error_category(error: str) -> str:
    """Category of a recorded error text (``server``, ``timeout``, ``connection``, ...)."""
    if "Error code: 429" in error:
        return "rate_limit"
    if "Error code: 5" in error:
        return "server"
    if error.startswith(("APITimeoutError", "ModelTimeout", "TimeoutError")) or "timed out" in error.lower():
        return "timeout"
    if error.startswith("APIConnectionError") or "Connection error" in error:
        return "connection"
    return "other"


def write_dataset(path: Path, n: int, seed: int = 0) -> list[Example]:
    """``n`` typewriter_1 examples with distinct strings of 1-5 lowercase letters."""
    rng = random.Random(seed)
    seen: set[str] = set()
    examples = []
    while len(examples) < n:
        text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 5)))
        if text in seen:
            continue
        seen.add(text)
        calls = [{"name": "type_letter", "arguments": {"letter": c}} for c in text]
        examples.append(Example(
            id=f"f{len(examples):05d}-{text}", input=text, expected_steps=["type_letter"] * len(text),
            expected_calls=calls, reference=text, expected_state={"paper": text},
        ))
    path.write_text("".join(e.model_dump_json() + "\n" for e in examples), encoding="utf-8")
    return examples


def fault_run(
    n_examples: int,
    out: Path,
    rates: dict[str, float] | None = None,
    concurrency: int = 32,
    provider: str = "openai",
    timeout_s: float = 2.0,
    slow_s: float = 5.0,
    max_retries: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Run ``n_examples`` typewriter_1 examples against a faulty stand-in server and check the
    output against the server's log.

    Returns:
        Figures: examples, requests, faults injected by kind, lost, duplicated, wrong status,
        wrong error category, malformed steps recorded vs injected, failed-by-server, seconds.
    """
    rates = SPEC_RATES if rates is None else rates
    out.mkdir(parents=True, exist_ok=True)
    examples = write_dataset(out / "dataset.jsonl", n_examples, seed)
    os.environ.setdefault("OPENAI_API_KEY", "sk-fault-benchmark")
    os.environ.setdefault("ANTHROPIC_API_KEY", "ak-fault-benchmark")
    settings = ModelSettings(
        timeout_s=timeout_s, max_retries=max_retries, retry_initial_s=0.01, retry_max_s=0.05,
    )
    with FakeModelServer(seeded_mix(rates, seed), slow_s=slow_s) as server:
        settings.extra["base_url"] = server.url + ("/v1" if provider != "anthropic" else "")
        model = {"openai": "openai:fake", "anthropic": "anthropic:fake", "vllm": "vllm:fake"}[provider]
        config = RunConfig(
            env="typewriter_1", out=out / "run", model=model, dataset=str(out / "dataset.jsonl"),
            concurrency=concurrency, settings=settings, max_steps=40,
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(config, progress=False)
        seconds = time.perf_counter() - start
        log = list(server.log)
    trajectories = read_jsonl(out / "run" / "trajectories.jsonl", Trajectory)
    keys = Counter(t.key for t in trajectories)
    by_id = {t.example_id: t for t in trajectories}
    must_fail = exhausted(log, max_retries + 1)  # target -> last fault
    wrong_status, wrong_category = [], []
    for ex in examples:
        traj = by_id.get(ex.id)
        if traj is None:
            continue
        expected = "error" if ex.input in must_fail else "completed"
        if traj.status != expected:
            wrong_status.append((ex.id, expected, traj.status, traj.error))
        elif expected == "error" and error_category(traj.error or "") != FAULT_CATEGORY[must_fail[ex.input]]:
            wrong_category.append((ex.id, must_fail[ex.input], traj.error))
    scores = [s for s in read_scores(out / "run") if s.grader == "final_state"]
    malformed_recorded = sum(
        1 for t in trajectories for s in t.model_steps if any(c.malformed for c in s.tool_calls)
    )
    faults = Counter(e.fault for e in log)
    return {
        "examples": n_examples,
        "requests": len(log),
        "faults": dict(sorted(faults.items())),
        "faults_5xx": sum(v for k, v in faults.items() if k.startswith("http5")),
        "faults_timeout": faults["slow"],
        "faults_malformed": sum(v for k, v in faults.items() if k in MALFORMED),
        "malformed_recorded": malformed_recorded,
        "trajectories": len(trajectories),
        "lost": sum(1 for ex in examples if (ex.id, 0) not in keys),
        "duplicated": sum(c - 1 for c in keys.values() if c > 1),
        "errors": sum(t.status == "error" for t in trajectories),
        "errors_expected": len(must_fail),
        "wrong_status": wrong_status,
        "wrong_category": wrong_category,
        "final_state_mean": sum(s.value for s in scores) / len(scores) if scores else None,
        "scored": len(scores),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--provider", default="openai", choices=["openai", "anthropic", "vllm"])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = fault_run(args.examples, Path(tmp), concurrency=args.concurrency, provider=args.provider)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures
    print("| provider | examples | requests | 5xx injected | timeouts injected | malformed injected (recorded) "
          "| errors (expected from server log) | lost | duplicated | wrong status | final_state of the rest | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.provider} | {f['examples']} | {f['requests']} | {f['faults_5xx']} | {f['faults_timeout']} | "
          f"{f['faults_malformed']} ({f['malformed_recorded']}) | {f['errors']} ({f['errors_expected']}) | {f['lost']} | "
          f"{f['duplicated']} | {len(f['wrong_status']) + len(f['wrong_category'])} | "
          f"{f['final_state_mean']:.3f} (n={f['scored']}) | {f['seconds']:.0f} |")


if __name__ == "__main__":
    main()

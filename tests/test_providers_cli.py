"""The command line with hosted models against the stand-in server: run.json, accounting,
errors outside the denominators, and no API key in any output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeserver import FakeModelServer
from toolgym.accounting import account, error_type, percentile
from toolgym.cli import main
from toolgym.records import ModelStep, Trajectory
from toolgym.runio import read_scores, read_trajectories

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-SECRET-do-not-leak-7f3a9c2e1b"


def fail_on(target: str, fault: str):
    """A plan that answers every request about ``target`` with ``fault``."""
    return lambda request: fault if request.target == target else "ok"


def test_run_json_accounting_and_errors_outside_denominators(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    with FakeModelServer(fail_on("aa", "http400"), mistake=lambda t: t == "aaa") as server:
        code = main([
            "run", "--env", "typewriter_1", "--model", "openai:gpt-fake", "--base-url", server.url + "/v1",
            "--limit", "4", "--out", str(out), "--no-progress", "--concurrency", "2", "--seed", "7",
            "--max-retries", "2", "--retry-initial", "0.01", "--timeout", "5", "--rps", "50",
            "--price-in", "2.5", "--price-out", "10",
        ])
    assert code == 0
    printed = capsys.readouterr().out
    info = json.loads((out / "run.json").read_text())
    assert info["model"] == "openai:gpt-fake" and info["concurrency"] == 2
    settings = info["model_settings"]
    assert settings["temperature"] == 0 and settings["seed"] == 7
    assert settings["max_retries"] == 2 and settings["retry_initial_s"] == 0.01 and settings["rps"] == 50
    assert settings["timeout_s"] == 5 and settings["extra"]["base_url"] == server.url + "/v1"
    assert all(body["seed"] == 7 and body["temperature"] == 0 for body in server.requests)

    trajs = {t.example_id: t for t in read_trajectories(out)}
    error = trajs["tw-01-aa"].error
    assert trajs["tw-01-aa"].status == "error" and "Error code: 400" in error and error.endswith("(not retryable)")
    kind = error_type(error)
    assert kind.endswith(("InvalidRequestError", "BadRequestError"))
    assert [e.target for e in server.log].count("aa") == 1  # a 400 is not retried
    final = {s.example_id: s.value for s in read_scores(out) if s.grader == "final_state"}
    assert final == {"tw-00-a": 1.0, "tw-02-aaa": 0.0, "tw-03-aaaa": 1.0}  # the error is not a 0
    assert "0.667 ± 0.272" in printed and f"errors 1 (not in any denominator): {kind} 1" in printed

    acc = info["accounting"]
    steps = [s for t in trajs.values() for s in t.model_steps]
    assert acc["model_calls"] == len(steps) == 2 + 4 + 5  # letters + the final answer, per example
    assert acc["input_tokens"] == sum(s.input_tokens for s in steps) > 0
    assert acc["output_tokens"] == 7 * len(steps)
    assert acc["cost_usd"] == pytest.approx(acc["input_tokens"] * 2.5e-6 + acc["output_tokens"] * 10e-6)
    assert 0 < acc["latency_p50_s"] <= acc["latency_p95_s"]
    assert acc["errors"] == 1 and acc["error_types"] == {kind: 1}
    assert f"cost ${acc['cost_usd']:.4f}" in printed


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_no_api_key_in_any_output_or_log(tmp_path):
    """A subprocess run whose server echoes the key in a 401 answer (as real APIs echo part of
    it); the key must appear in no file of the run directory and not in stdout/stderr."""
    out = tmp_path / "run"
    env = dict(os.environ, OPENAI_API_KEY=SECRET, PYTHONWARNINGS="default")
    with FakeModelServer(fail_on("aa", "http401")) as server:
        proc = subprocess.run(
            [sys.executable, "run_agent.py", "run", "--env", "typewriter_1", "--model", "openai:gpt-fake",
             "--base-url", server.url + "/v1", "--limit", "3", "--out", str(out), "--retry-initial", "0.01"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert any(h.get("authorization") == f"Bearer {SECRET}" for h in server.headers)  # it was sent
    error = next(t.error for t in read_trajectories(out) if t.example_id == "tw-01-aa")
    assert "AuthenticationError" in error_type(error) and "Error code: 401" in error and "***" in error
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json", "trajectories.jsonl", "scores.jsonl"}
    for path in files:
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert SECRET not in proc.stdout and SECRET not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "openai:gpt-x"], "set OPENAI_API_KEY"),
        (["--model", "vllm:org/model"], "--base-url"),
        (["--model", "openai:gpt-x", "--serve"], "--serve starts vLLM"),
        (["--model", "vllm:m", "--max-retries", "-1"], "--max-retries must be >= 0"),
        (["--model", "vllm:m", "--base-url", "http://x/v1", "--rps", "0"], "--rps must be positive"),
    ],
)
def test_bad_provider_options_are_clear_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["run", "--env", "typewriter_1", "--limit", "1", "--out", str(tmp_path / "r"), "--no-progress", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
def test_anthropic_run_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-test")
    out = tmp_path / "run"
    plan = lambda r: "http529" if r.attempt == 1 and r.turn == 0 else ("fenced_call" if r.turn == 1 else "ok")  # noqa: E731
    with FakeModelServer(plan) as server:
        assert main(["run", "--env", "typewriter_26", "--model", "anthropic:claude-fake", "--base-url", server.url,
                     "--limit", "3", "--out", str(out), "--no-progress", "--retry-initial", "0.01"]) == 0
    assert server.protocol_errors == []
    trajs = read_trajectories(out)
    assert [t.status for t in trajs] == ["completed"] * 3
    assert all(s.value == 1.0 for s in read_scores(out) if s.grader == "final_state")
    assert sum(1 for e in server.log if e.fault == "http529") == 3  # one per example, each retried
    assert all(any(c.malformed for c in t.model_steps[1].tool_calls) for t in trajs if len(t.model_steps) > 2)


def test_accounting_percentiles_and_error_types():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert percentile([5.0], 95) == 5.0 and percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert error_type("APITimeoutError: Request timed out.") == "APITimeoutError"
    assert error_type(None) == "unknown"
    trajs = [
        Trajectory(example_id="a", env="e", agent="g", status="completed",
                   steps=[ModelStep(latency_s=1.0, input_tokens=10, output_tokens=2), ModelStep(latency_s=3.0)]),
        Trajectory(example_id="b", env="e", agent="g", status="error", error="RateLimitError: 429"),
    ]
    acc = account(trajs)
    assert (acc.model_calls, acc.calls_with_usage, acc.input_tokens, acc.errors) == (2, 1, 10, 1)
    assert acc.cost_usd is None and "reported by 1 of 2 calls" in "\n".join(acc.lines())
    assert account(trajs, price_out=1.0).cost_usd == pytest.approx(2e-6)
    with pytest.raises(ValueError):
        account(trajs, price_in=-1)

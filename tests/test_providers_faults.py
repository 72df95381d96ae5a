"""A whole run against a faulty stand-in server (a smaller, harsher version of
benchmarks/faults.py): every example is in the output exactly once, with the status the
server's log says it must have, and every malformed answer is recorded."""

from __future__ import annotations

import pytest

from benchmarks.faults import fault_run

HARSH = {
    "http500": 0.1, "http502": 0.1, "http503": 0.1, "http429": 0.03, "close": 0.03,  # 36% retryable
    "slow": 0.04,  # timeouts
    "bad_json_args": 0.02, "trailing_text_args": 0.02, "non_object_args": 0.02,
    "unknown_tool": 0.02, "fenced_call": 0.02, "tagged_call": 0.02,  # 12% malformed
}


@pytest.mark.slow  # end-to-end: run by .ci/run (-m slow), skipped by the default command
@pytest.mark.parametrize(("provider", "n"), [("openai", 40), ("anthropic", 24)])
def test_faulty_run_loses_nothing_and_counts_nothing_twice(tmp_path, provider, n):
    f = fault_run(n, tmp_path, rates=HARSH, provider=provider, max_retries=2, timeout_s=2.5, slow_s=6.0)
    assert f["trajectories"] == n and f["lost"] == 0 and f["duplicated"] == 0
    assert f["wrong_status"] == [] and f["wrong_category"] == []
    assert f["errors"] == f["errors_expected"] > 0  # some examples exhausted their 3 attempts
    assert f["faults_5xx"] > 0 and f["faults_timeout"] > 0 and f["faults"].get("close", 0) > 0
    assert f["malformed_recorded"] == f["faults_malformed"] > 0
    assert f["final_state_mean"] == 1.0 and f["scored"] == n - f["errors"]  # the rest all typed right

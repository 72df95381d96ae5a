"""Retries, timeouts and rate limits of hosted models, against a real HTTP server on 127.0.0.1
speaking the OpenAI and Anthropic protocols (tests/fakeserver.py)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from tests.fakeserver import FakeModelServer, sequence
from toolgym.plugins import get_environment
from toolgym.providers import ModelSettings, build_model
from toolgym.providers.retry import RetryPolicy, classify

KEY = "sk-test-key-0123456789abcdef"


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def model_for(api: str, server: FakeModelServer, **settings):
    base = {"timeout_s": 0.25, "max_retries": 3, "retry_initial_s": 0.01, "retry_max_s": 0.02}
    base.update(settings)
    s = ModelSettings(**base)
    s.extra["base_url"] = server.url + ("/v1" if api == "openai" else "")
    spec = "openai:fake-model" if api == "openai" else "anthropic:claude-fake"
    tools = list(get_environment("typewriter_1")().tools.values())
    return build_model(spec, s).bind_tools(tools)


def ask(model, text: str = "ab"):
    """One model call on a fresh event loop, closing the HTTP client before the loop ends."""

    async def go():
        try:
            return await model.ainvoke([SystemMessage("type it"), HumanMessage(text)])
        finally:
            await model.bound.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["http500", "http502", "http503", "http529", "slow", "close"])
def test_transient_faults_are_retried_until_an_answer(api, fault):
    with FakeModelServer(sequence(fault, fault), slow_s=0.6) as server:
        message = ask(model_for(api, server))
    assert message.tool_calls[0]["name"] == "type_letter"
    assert message.tool_calls[0]["args"] == {"letter": "a"}
    assert [e.fault for e in server.log] == [fault, fault, "ok"]
    assert [e.attempt for e in server.log] == [1, 2, 3]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_429_waits_for_retry_after(api):
    with FakeModelServer(sequence("http429"), retry_after="0.4") as server:
        start = time.perf_counter()
        message = ask(model_for(api, server, retry_initial_s=0.01))
        elapsed = time.perf_counter() - start
    assert message.tool_calls
    assert [e.fault for e in server.log] == ["http429", "ok"]
    assert elapsed >= 0.4  # the server's retry-after, not the 0.01 s backoff


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["http400", "http401"])
def test_other_4xx_fail_at_once_without_the_key_in_the_message(api, fault):
    with FakeModelServer(sequence(fault, fault)) as server, pytest.raises(Exception) as info:
        ask(model_for(api, server))
    assert len(server.log) == 1
    assert classify(info.value) is None
    assert f"Error code: {fault[4:]}" in str(info.value) and "not retryable" in str(info.value)
    assert KEY not in str(info.value)  # the 401 answer echoes the key; it is scrubbed


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_gives_up_after_the_last_attempt_keeping_the_error_type(api):
    with FakeModelServer(sequence(*["http503"] * 10)) as server, pytest.raises(Exception) as info:
        ask(model_for(api, server, max_retries=2))
    assert len(server.log) == 3
    assert classify(info.value) == "server"
    assert "InternalServerError" in type(info.value).__name__ or "APIError" in type(info.value).__name__
    assert str(info.value).endswith("(gave up after 3 attempts)")


def test_timeout_is_per_attempt_and_retried():
    with FakeModelServer(sequence("slow", "slow", "slow", "slow"), slow_s=2.0) as server:
        start = time.perf_counter()
        with pytest.raises(Exception) as info:
            ask(model_for("openai", server, timeout_s=0.2, max_retries=1))
        elapsed = time.perf_counter() - start
    assert classify(info.value) == "timeout"
    assert len(server.log) == 2
    assert elapsed < 1.5  # two attempts of 0.2 s, not the server's 2 s


def test_rps_limits_every_attempt_including_retries():
    with FakeModelServer(sequence("http500", "http500")) as server:
        model = model_for("openai", server, rps=10.0, retry_initial_s=0.0, retry_max_s=0.0)

        async def three() -> None:
            for text in ("a", "b", "c"):
                await model.ainvoke([SystemMessage("type it"), HumanMessage(text)])
            await model.bound.aclose()

        start = time.perf_counter()
        asyncio.run(three())
        elapsed = time.perf_counter() - start
    assert len(server.log) == 5
    assert elapsed >= 0.35  # 5 requests through a 10/s bucket of size 1: at least 4 gaps of 0.1 s


def test_backoff_grows_exponentially_with_equal_jitter():
    policy = RetryPolicy(max_retries=5, initial_s=1.0, max_s=8.0)
    rng = random.Random(1)
    for retry, cap in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 8.0)]:
        delays = [policy.delay(retry, None, rng) for _ in range(200)]
        assert cap / 2 <= min(delays) and max(delays) <= cap
        assert max(delays) - min(delays) > cap / 4  # jittered, not constant
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=500.0) <= 1.0  # beyond max_retry_after_s: not honoured here
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_retry_after_beyond_the_maximum_fails_instead_of_waiting():
    with FakeModelServer(sequence("http429", "http429"), retry_after="3600") as server:
        with pytest.raises(Exception) as info:
            ask(model_for("openai", server))
    assert len(server.log) == 1 and classify(info.value) == "rate_limit"


def test_settings_reach_the_provider():
    with FakeModelServer() as server:
        ask(model_for("openai", server))
        ask(model_for("anthropic", server))
    openai_body, anthropic_body = server.requests
    assert openai_body["temperature"] == 0 and openai_body["seed"] == 0
    assert openai_body.get("max_completion_tokens", openai_body.get("max_tokens")) == 512
    assert anthropic_body["temperature"] == 0 and anthropic_body["max_tokens"] == 512
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    assert server.headers[0].get("x-stainless-retry-count", "0") == "0"  # SDK retries are off
    assert KEY in (server.headers[1].get("x-api-key"), server.headers[1].get("authorization", "").removeprefix("Bearer "))


def test_missing_key_and_missing_url_are_clear_errors(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="set OPENAI_API_KEY"):
        build_model("openai:gpt-x", ModelSettings())
    with pytest.raises(ValueError, match="--base-url"):
        build_model("vllm:some/model", ModelSettings())
    with pytest.raises(ValueError, match="needs a model name"):
        build_model("anthropic", ModelSettings())


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_one_model_on_several_event_loops(api):
    """A model (or two built alike) used under successive asyncio.run calls, as by two runs in
    one process: the SDK clients' connections belong to one loop, so each loop gets its own."""
    with FakeModelServer() as server:
        model = model_for(api, server)
        first = asyncio.run(model.ainvoke([SystemMessage("type it"), HumanMessage("ab")]))  # not closed
        assert ask(model).tool_calls == first.tool_calls
        assert ask(model_for(api, server)).tool_calls == first.tool_calls
    assert len(server.log) == 3

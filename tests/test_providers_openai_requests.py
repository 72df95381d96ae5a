"""The OpenAI chat model's request path: payloads sent without the SDK's per-request
transform are what the SDK would have sent, extra body/headers still reach the server, and a
dropped connection is recorded as a connection error, not a timeout."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from openai._utils import maybe_transform
from openai.types.chat import completion_create_params

from tests.fakeserver import FakeModelServer, sequence
from toolgym.plugins import get_environment
from toolgym.providers import ModelSettings, build_model
from toolgym.providers.hosted import chat_openai_class

HISTORY = [
    SystemMessage("Answer with the tools."),
    HumanMessage("Which city does user 3 live in?"),
    AIMessage("", tool_calls=[{"id": "c1", "name": "get_user_name", "args": {"user_id": 3}}]),
    ToolMessage("Bob", tool_call_id="c1", name="get_user_name"),
    AIMessage("Bob lives in Paris."),
    HumanMessage([{"type": "text", "text": "And the weather there? 京都は？"}]),
]


def test_payload_is_what_the_sdk_transform_would_send():
    tools = list(get_environment("relational_data")().tools.values())
    model = chat_openai_class()(model="m", api_key="k", base_url="http://127.0.0.1:9/v1", temperature=0.3, seed=1,
                                max_tokens=50)
    payload = model._get_request_payload(HISTORY, **model.bind_tools(tools).kwargs)
    assert payload["tools"] and len(payload["messages"]) == len(HISTORY)
    transformed = maybe_transform(payload, completion_create_params.CompletionCreateParamsNonStreaming)
    assert transformed == payload


def play(server: FakeModelServer, **extra):
    settings = ModelSettings(timeout_s=5, max_retries=0)
    settings.extra["base_url"] = server.url + "/v1"
    model = build_model("openai-compatible:fake", settings)
    bound = model.bind(**extra) if extra else model

    async def go():
        try:
            return await bound.ainvoke("Type 'a'.")
        finally:
            await model.aclose()

    return asyncio.run(go())


def test_extra_body_and_headers_reach_the_server():
    with FakeModelServer(sequence("ok")) as server:
        play(server, extra_body={"top_k": 5}, extra_headers={"x-probe": "1"})
    body, headers = server.requests[-1], server.headers[-1]
    assert body["top_k"] == 5 and "extra_body" not in body and "extra_headers" not in body
    assert headers.get("x-probe") == "1"


def test_dropped_connection_is_a_connection_error_not_a_timeout():
    import openai

    with FakeModelServer(sequence("close")) as server, pytest.raises(openai.APIConnectionError) as info:
        play(server)
    assert not isinstance(info.value, openai.APITimeoutError)
    assert "Connection error" in str(info.value)

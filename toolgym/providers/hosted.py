"""Hosted and served models: ``openai:MODEL``, ``anthropic:MODEL`` and
``openai-compatible:MODEL`` (alias ``vllm:MODEL``) for any OpenAI-compatible server.

The clients are langchain-openai's ``ChatOpenAI`` and langchain-anthropic's ``ChatAnthropic``
(the optional extras ``toolgym[openai]`` and ``toolgym[anthropic]``), built with their SDK
retries off and wrapped in :class:`~toolgym.providers.retry.ResilientChatModel`, which retries,
applies the per-attempt timeout and the ``--rps`` limit.

API keys are read here and nowhere else: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, and for
OpenAI-compatible servers ``OPENAI_COMPATIBLE_API_KEY`` (or ``VLLM_API_KEY``), default
``EMPTY``. ``OPENAI_API_KEY`` is deliberately not sent to a third-party ``--base-url``.
Keys never reach ``run.json``, trajectories or logs: error messages are scrubbed of them.

Both chat models are subclassed to keep one kind of malformed output from crashing the
call: tool-call arguments that are valid JSON but not an object (``[1]``, ``"a"``; the
Anthropic API's ``input`` likewise). langchain-core rejects them while building the message;
here they become ``invalid_tool_calls``, which the agent records as malformed calls. The
OpenAI one also sends chat completions more cheaply (see ``chat_openai_class``): at hundreds
of requests a second the client's CPU, not the server, was the limit.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.messages.tool import invalid_tool_call

from toolgym.parsing import TOKENS_KEY
from toolgym.providers import ModelSettings, register_provider
from toolgym.providers.retry import ResilientChatModel, RetryPolicy

OPENAI_KEY_ENV = "OPENAI_API_KEY"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
COMPATIBLE_KEY_ENVS = ("OPENAI_COMPATIBLE_API_KEY", "VLLM_API_KEY")


class MissingDependencyError(ValueError):
    """An optional extra needed by a provider is not installed."""


def _require(module: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise MissingDependencyError(
            f"this model needs the {module} package: pip install -e '.[{extra}]' in the toolgym checkout"
        ) from None


def _not_object(value: Any) -> bool:
    return not isinstance(value, dict)


def _describe(value: Any) -> str:
    kind = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return kind.get(type(value), type(value).__name__)


def _add_invalid(message: AIMessage, bad: list[tuple[str, str, str, str]]) -> None:
    """Move calls ``(id, name, raw, error)`` from ``tool_calls`` to ``invalid_tool_calls``."""
    ids = {b[0] for b in bad}
    message.tool_calls = [c for c in message.tool_calls if c.get("id") not in ids]
    message.invalid_tool_calls = list(message.invalid_tool_calls) + [
        invalid_tool_call(name=name, args=raw, id=call_id, error=error) for call_id, name, raw, error in bad
    ]


def _connection_lost(exc: BaseException) -> BaseException | None:
    """The SDK's aiohttp transport reports every ``aiohttp.ClientConnectionError`` as a
    connect timeout, a connection the server dropped included; for those, an
    ``openai.APIConnectionError`` naming the real cause (``None`` for a real timeout)."""
    import openai

    cause = exc.__cause__
    while cause is not None:
        if type(cause).__module__.startswith("aiohttp"):
            import aiohttp

            if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, TimeoutError):
                return openai.APIConnectionError(
                    message=f"Connection error: {type(cause).__name__}: {cause}", request=exc.request
                )
        cause = cause.__cause__
    return None


@functools.cache
def chat_openai_class() -> type[BaseChatModel]:
    """``ChatOpenAI`` that turns non-object tool arguments into invalid tool calls and sends
    chat completions without the SDK's per-request parameter transform (see the class).

    Raises:
        MissingDependencyError: without langchain-openai.
    """
    _require("langchain_openai", "openai")
    from langchain_openai import ChatOpenAI

    class ToolgymChatOpenAI(ChatOpenAI):
        """ChatOpenAI whose malformed tool arguments are recorded, never raised, and whose
        chat-completion requests cost the client much less CPU.

        ``ChatOpenAI`` sends each request through ``chat.completions.create``, where the SDK
        walks every parameter (the whole history, every tool schema) against its TypedDict
        annotations, then builds the message in a worker thread: most of the harness's CPU
        per JMultiWOZ-TC turn (a 17-message history and 9 tools; BENCHMARKS.md).
        Chat-completion parameters carry no aliases or formats, so that walk returns the
        payload unchanged (``tests/test_providers_openai_requests.py`` checks it on the
        installed SDK); here the payload goes straight to the SDK's ``AsyncOpenAI.post``
        (same client, headers, auth and errors) and the result is built inline. Structured
        output and the Responses API take ``ChatOpenAI``'s own path.
        """

        async def _agenerate(
            self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            payload = self._get_request_payload(messages, stop=stop, **kwargs)
            if "response_format" in payload or payload.get("stream") or self._use_responses_api(payload):
                return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            import openai
            from openai.types.chat import ChatCompletion

            extra_body = payload.pop("extra_body", None) or {}
            options = {
                key: value
                for key, value in (("headers", payload.pop("extra_headers", None)),
                                   ("params", payload.pop("extra_query", None)))
                if value
            }
            body = {**payload, **extra_body}
            errors = sys.modules[ChatOpenAI.__module__]  # langchain-openai's own error mapping
            try:
                response = await self.root_async_client.post(
                    "/chat/completions", body=body, cast_to=ChatCompletion, options=options
                )
            except openai.APITimeoutError as exc:
                lost = _connection_lost(exc)
                if lost is None:
                    raise
                raise lost from exc
            except openai.BadRequestError as exc:
                errors._handle_openai_bad_request(exc)
                raise
            except openai.APIError as exc:
                errors._handle_openai_api_error(exc)
                raise
            return self._create_chat_result(response, {})

        def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> Any:
            result = self._chat_result(response, generation_info)
            _keep_reasoning(response, result)
            if self.logprobs:  # --record-tokens
                record = token_record(response)
                if record is not None and result.generations:
                    result.generations[0].message.response_metadata[TOKENS_KEY] = record
            return result

        def _chat_result(self, response: Any, generation_info: dict | None = None) -> Any:
            data = response if isinstance(response, dict) else None
            choices = (data or {}).get("choices") if data is not None else getattr(response, "choices", None)
            bad: list[tuple[str, str, str, str]] = []
            for choice in choices or []:
                message = choice.get("message") if isinstance(choice, dict) else getattr(choice, "message", None)
                calls = (message.get("tool_calls") if isinstance(message, dict) else getattr(message, "tool_calls", None)) or []
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else getattr(call, "function", None)
                    raw = (fn.get("arguments") if isinstance(fn, dict) else getattr(fn, "arguments", None)) or ""
                    try:
                        parsed = json.loads(raw) if raw else {}
                    except (json.JSONDecodeError, TypeError):
                        continue  # langchain-core records it as an invalid tool call itself
                    if _not_object(parsed):
                        name = fn.get("name") if isinstance(fn, dict) else getattr(fn, "name", "")
                        call_id = call.get("id") if isinstance(call, dict) else getattr(call, "id", "")
                        bad.append((call_id, name or "", raw, f"arguments are {_describe(parsed)}, not a JSON object"))
            if not bad:
                return super()._create_chat_result(response, generation_info)
            if data is None:
                data = response.model_dump(exclude={"choices": {"__all__": {"message": {"parsed"}}}}, warnings=False)
            data = json.loads(json.dumps(data, default=str))
            bad_ids = {b[0] for b in bad}
            for choice in data.get("choices") or []:
                message = choice.get("message") or {}
                if message.get("tool_calls"):
                    kept = [c for c in message["tool_calls"] if c.get("id") not in bad_ids]
                    message["tool_calls"] = kept or None
            result = super()._create_chat_result(data, generation_info)
            _add_invalid(result.generations[0].message, bad)
            return result

    return ToolgymChatOpenAI


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Fields of a chat-completion message where OpenAI-compatible servers put the reasoning:
``reasoning_content`` (vLLM's reasoning parsers, DeepSeek's API) and ``reasoning``
(OpenRouter, vLLM 0.10 and later)."""


def _keep_reasoning(response: Any, result: Any) -> None:
    """Copy each choice's reasoning fields into its message's ``additional_kwargs``, where
    :func:`toolgym.parsing.message_reasoning` reads them. langchain-openai's ``ChatOpenAI``
    targets the official OpenAI API and drops fields other servers add (its module docstring,
    "API scope"); the openai SDK keeps them as extra fields of the message model."""
    choices = response.get("choices") if isinstance(response, dict) else getattr(response, "choices", None)
    for choice, generation in zip(choices or [], result.generations, strict=False):
        message = choice.get("message") if isinstance(choice, dict) else getattr(choice, "message", None)
        if message is None:
            continue
        extra = message if isinstance(message, dict) else {**(getattr(message, "model_extra", None) or {}), **{
            k: getattr(message, k) for k in REASONING_FIELDS if k in type(message).model_fields}}
        for key in REASONING_FIELDS:
            value = extra.get(key)
            if isinstance(value, str | dict) and value and key not in generation.message.additional_kwargs:
                generation.message.additional_kwargs[key] = value


@functools.cache
def chat_anthropic_class() -> type[BaseChatModel]:
    """``ChatAnthropic`` that turns a non-object ``tool_use.input`` into invalid tool calls.

    Raises:
        MissingDependencyError: without langchain-anthropic.
    """
    _require("langchain_anthropic", "anthropic")
    from langchain_anthropic import ChatAnthropic

    class ToolgymChatAnthropic(ChatAnthropic):
        """ChatAnthropic whose malformed tool inputs are recorded, never raised, and whose
        async HTTP client is its own (langchain-anthropic shares a cached one per address,
        whose connections belong to the first event loop that used them)."""

        @functools.cached_property
        def _async_client(self) -> Any:
            import anthropic

            params = self._client_params
            http = {"base_url": params["base_url"]}
            if "timeout" in params:
                http["timeout"] = params["timeout"]
            return anthropic.AsyncClient(**params, http_client=anthropic.DefaultAsyncHttpxClient(**http))

        def _format_output(self, data: Any, **kwargs: Any) -> Any:
            blocks = list(getattr(data, "content", None) or [])
            bad = [
                (b.id, b.name, b.input if isinstance(b.input, str) else json.dumps(b.input),
                 f"tool input is {_describe(b.input)}, not a JSON object")
                for b in blocks
                if getattr(b, "type", None) == "tool_use" and _not_object(getattr(b, "input", None))
            ]
            if bad:
                ids = {b[0] for b in bad}
                # Keep the block (the next request must show the tool_use its result answers)
                # with an empty input, and record the call as invalid.
                blocks = [b.model_copy(update={"input": {}}) if getattr(b, "id", None) in ids else b for b in blocks]
                data = data.model_copy(update={"content": blocks})
            result = super()._format_output(data, **kwargs)
            if bad:
                _add_invalid(result.generations[0].message, bad)
            return result

    return ToolgymChatAnthropic


def base_url(settings: ModelSettings) -> str | None:
    """``--base-url`` (``settings.extra["base_url"]``) as the client connects to it: its
    ``${NAME}`` references expanded from the environment (:func:`toolgym.runio.expand_url`),
    so a credential can stay out of the command line and of ``run.json``, which records the
    URL as given (``https://h/v1?key=${KEY}``). ``None`` when none is given.

    Raises:
        ValueError: naming a variable the URL references that is not set.
    """
    from toolgym.runio import UnsetVariables, expand_url

    url = settings.extra.get("base_url")
    if not isinstance(url, str):
        return url
    try:
        return expand_url(url, os.environ)
    except UnsetVariables as exc:
        raise ValueError(f"--base-url: {exc} (the URL names it as ${{{exc.names[0]}}}); set it, or give the "
                         "address itself") from None


def _base_url_secrets(settings: ModelSettings) -> list[str]:
    """What to scrub of ``--base-url``: its user, password and query values as given and as
    expanded (:func:`toolgym.runio.url_secrets`), and the values of the variables it names."""
    from toolgym.runio import referenced_values, url_secrets

    given = settings.extra.get("base_url")
    if not isinstance(given, str):
        return []
    expanded = base_url(settings) or ""
    return [*url_secrets(given), *url_secrets(expanded), *referenced_values(given, os.environ)]


def _retrying(
    factory: Callable[[], BaseChatModel], settings: ModelSettings, secrets: list[str]
) -> ResilientChatModel:
    """The model behind retries; ``secrets`` (API keys) and those of ``--base-url`` (its user,
    password and query values, the values of the variables it names: :func:`_base_url_secrets`)
    are scrubbed from every error message before it is recorded."""
    policy = RetryPolicy(
        max_retries=settings.max_retries, initial_s=settings.retry_initial_s, max_s=settings.retry_max_s
    )
    in_url = _base_url_secrets(settings)
    return ResilientChatModel(
        inner=factory(), factory=factory, policy=policy, timeout_s=settings.timeout_s, rps=settings.rps,
        secrets=[*secrets, *in_url],
    )


def _need_name(provider: str, name: str) -> None:
    if not name:
        raise ValueError(f"the {provider} provider needs a model name: --model {provider}:MODEL")


def token_record(response: Any) -> dict[str, Any] | None:
    """The :class:`~toolgym.records.TokenRecord` (as a dict) of a chat completion's first
    choice, from what the server returned: ``logprobs.content[].logprob`` (OpenAI's
    ``logprobs: true``), and the token ids vLLM adds when asked with ``return_token_ids``
    (``prompt_token_ids`` at the top, ``token_ids`` in the choice). ``None`` when the server
    returned none of them."""
    data = response if isinstance(response, dict) else response.model_dump(warnings=False)
    choices = data.get("choices") or []
    if not choices:
        return None
    choice = choices[0]
    content = (choice.get("logprobs") or {}).get("content")
    logprobs = [float(e["logprob"]) for e in content] if content else None
    completion_ids = choice.get("token_ids")
    prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    if logprobs is None and completion_ids is None and prompt_ids is None:
        return None
    return {
        "prompt_ids": [int(t) for t in prompt_ids] if prompt_ids is not None else None,
        "completion_ids": [int(t) for t in completion_ids] if completion_ids is not None else None,
        "completion_logprobs": logprobs,
        "logprob_source": "server: chat completion logprobs" if logprobs is not None else None,
    }


def _openai_client(
    name: str, settings: ModelSettings, key: str, base_url: str | None, token_ids: bool = False, **kw: Any
) -> BaseChatModel:
    """A ChatOpenAI with its own async HTTP client (langchain-openai shares a cached one per
    address, whose connections belong to the first event loop that used them): the SDK's
    aiohttp transport (``openai[aiohttp]``, which the SDK recommends for concurrency; about
    0.8 ms less CPU per request than httpx at 64 in flight), or its httpx one when aiohttp
    is not installed."""
    cls = chat_openai_class()
    import openai

    try:
        import aiohttp  # noqa: F401

        http_client = openai.DefaultAioHttpClient()
    except ImportError:
        http_client = openai.DefaultAsyncHttpxClient()
    return cls(
        model=name,
        http_async_client=http_client,
        api_key=key,
        base_url=base_url,
        temperature=settings.temperature,
        seed=settings.seed,
        max_tokens=settings.max_tokens,
        timeout=settings.timeout_s,
        max_retries=0,
        # --record-tokens: log-probabilities; token_ids also asks vLLM for the token ids
        **({"logprobs": True} if settings.record_tokens else {}),
        **({"extra_body": {"return_token_ids": True}} if settings.record_tokens and token_ids else {}),
        **kw,
    )


@register_provider("openai")
def openai_provider(name: str, settings: ModelSettings) -> ResilientChatModel:
    """``openai:MODEL``: the OpenAI API (key from ``OPENAI_API_KEY``; ``--base-url`` for a
    proxy or a stand-in server).

    Raises:
        ValueError: without a model name or API key.
        MissingDependencyError: without langchain-openai.
    """
    _need_name("openai", name)
    key = os.environ.get(OPENAI_KEY_ENV)
    if not key:
        raise ValueError(f"set {OPENAI_KEY_ENV} to use openai:{name}")
    url = base_url(settings)
    return _retrying(lambda: _openai_client(name, settings, key, url), settings, [key])


def _compatible(provider: str, name: str, settings: ModelSettings) -> ResilientChatModel:
    _need_name(provider, name)
    url = base_url(settings)
    if not url:
        raise ValueError(
            f"{provider}:{name} needs the server's address: --base-url http://HOST:PORT/v1"
            + (" (or --serve to start vLLM)" if provider == "vllm" else "")
        )
    key = next((os.environ[k] for k in COMPATIBLE_KEY_ENVS if os.environ.get(k)), "EMPTY")
    # Chat completions, never the Responses API: that is what compatible servers implement.
    return _retrying(
        lambda: _openai_client(name, settings, key, url, token_ids=True, use_responses_api=False),
        settings,
        [key] if key != "EMPTY" else [],
    )


@register_provider("openai-compatible")
def openai_compatible_provider(name: str, settings: ModelSettings) -> ResilientChatModel:
    """``openai-compatible:MODEL --base-url URL``: any server speaking OpenAI chat completions
    with tool calls (vLLM, llama.cpp server, SGLang, ...). Key from
    ``OPENAI_COMPATIBLE_API_KEY`` or ``VLLM_API_KEY`` if the server wants one.

    Raises:
        ValueError: without a model name or ``--base-url``.
        MissingDependencyError: without langchain-openai.
    """
    return _compatible("openai-compatible", name, settings)


@register_provider("vllm")
def vllm_provider(name: str, settings: ModelSettings) -> ResilientChatModel:
    """``vllm:MODEL``: a vLLM server (``vllm serve MODEL --enable-auto-tool-choice
    --tool-call-parser hermes``) at ``--base-url``, or one started by ``--serve``."""
    return _compatible("vllm", name, settings)


@register_provider("anthropic")
def anthropic_provider(name: str, settings: ModelSettings) -> ResilientChatModel:
    """``anthropic:MODEL``: the Anthropic messages API (key from ``ANTHROPIC_API_KEY``). The
    API takes no seed; ``--seed`` is not forwarded.

    Raises:
        ValueError: without a model name or API key.
        MissingDependencyError: without langchain-anthropic.
    """
    _need_name("anthropic", name)
    key = os.environ.get(ANTHROPIC_KEY_ENV)
    if not key:
        raise ValueError(f"set {ANTHROPIC_KEY_ENV} to use anthropic:{name}")
    cls = chat_anthropic_class()
    kwargs: dict[str, Any] = {}
    if settings.extra.get("base_url"):
        kwargs["base_url"] = base_url(settings)
    return _retrying(
        lambda: cls(
            model=name,
            api_key=key,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            timeout=settings.timeout_s,
            max_retries=0,
            **kwargs,
        ),
        settings,
        [key],
    )

"""Fault tolerance for hosted chat models: retries with backoff, a per-attempt deadline and a
client-side request rate limit, wrapped around any langchain-core chat model.

The SDKs under langchain-openai and langchain-anthropic retry by themselves, but their first
backoff (0.5 s) is a module constant, they retry 409 conflicts, and they cannot share one
request-rate budget with the retries. Providers therefore build their clients with
``max_retries=0`` and wrap them in :class:`ResilientChatModel`, which owns all three, the same
way for every provider.

What is retried (see :func:`classify`): HTTP 429 (waiting ``retry-after`` when the server
sends one), 408 and every 5xx, timeouts, and dropped or refused connections. Any other 4xx
(bad request, authentication, not found) fails at once. After the last attempt the error
propagates; the agent records the episode with status ``error`` and the error's type.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.rate_limiters import BaseRateLimiter, InMemoryRateLimiter
from pydantic import ConfigDict, Field, PrivateAttr

log = logging.getLogger(__name__)

__all__ = ["ModelTimeout", "ResilientChatModel", "RetryPolicy", "classify", "retry_after_s", "scrub"]

_TIMEOUT_NAMES = {"APITimeoutError", "TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout"}
_CONNECTION_NAMES = {"APIConnectionError", "TransportError", "NetworkError", "RemoteProtocolError", "ProtocolError"}


class ModelTimeout(TimeoutError):
    """A model call exceeded its per-attempt deadline."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed model calls are retried.

    The n-th retry (n = 0, 1, ...) waits ``retry-after`` when the server sent one (up to
    ``max_retry_after_s``), otherwise a delay drawn with "equal jitter" from
    ``[c/2, c]`` where ``c = min(max_s, initial_s * 2**n)`` (M. Brooker, "Exponential Backoff
    And Jitter", AWS Architecture Blog, 2015): exponential growth, a guaranteed minimum wait,
    and de-synchronised clients.

    Attributes:
        max_retries: Retries after the first attempt (attempts = ``max_retries + 1``).
        initial_s: Backoff cap of the first retry, seconds.
        max_s: Largest backoff cap, seconds.
        max_retry_after_s: A ``retry-after`` longer than this is not waited for: the call
            fails at once (as the OpenAI and Anthropic SDKs do).
    """

    max_retries: int = 4
    initial_s: float = 1.0
    max_s: float = 30.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.initial_s < 0 or self.max_s < 0:
            raise ValueError("retry delays must be >= 0")

    def delay(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based).

        Args:
            retry: How many retries were made before this one.
            retry_after: The server's ``retry-after`` in seconds, if it sent one.
            rng: Random source for the jitter (default: the ``random`` module).
        """
        if retry_after is not None and 0 <= retry_after <= self.max_retry_after_s:
            return retry_after
        cap = min(self.max_s, self.initial_s * 2.0 ** min(retry, 60))
        return cap / 2 + (rng or random).uniform(0, cap / 2)

    def record(self) -> dict[str, Any]:
        """The settings as a dict for ``run.json``."""
        return asdict(self)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify(exc: BaseException) -> str | None:
    """Why ``exc`` is worth retrying, or ``None`` when it is not.

    Returns:
        ``"rate_limit"`` (HTTP 429), ``"server"`` (5xx), ``"timeout"`` (408, a client or SDK
        timeout), ``"connection"`` (refused, reset or closed connection), or ``None`` (any
        other error, including the other 4xx statuses).
    """
    for e in _chain(exc):
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            if status == 429:
                return "rate_limit"
            if status == 408:
                return "timeout"
            if status >= 500:
                return "server"
            return None
        names = {cls.__name__ for cls in type(e).__mro__}
        if isinstance(e, TimeoutError) or names & _TIMEOUT_NAMES:
            return "timeout"
        if isinstance(e, ConnectionError) or names & _CONNECTION_NAMES:
            return "connection"
    return None


def retry_after_s(exc: BaseException) -> float | None:
    """The ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date) header of the HTTP
    response behind ``exc``, in seconds; ``None`` when there is none or it is unreadable."""
    for e in _chain(exc):
        headers = getattr(getattr(e, "response", None), "headers", None)
        if headers is None:
            continue
        for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
            value = headers.get(name)
            if value is None:
                continue
            try:
                return max(0.0, float(value) / scale)
            except ValueError:
                pass
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(0.0, email.utils.mktime_tz(parsed) - time.time())
        return None
    return None


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def _scrub_exception(exc: BaseException, secrets: list[str], note: str) -> None:
    """Remove secrets from the exception's message (an API may echo a rejected key) and
    append ``note``; the exception keeps its type."""
    message = scrub(str(exc), secrets) + note
    exc.args = (message,)
    if hasattr(exc, "message"):
        with contextlib.suppress(AttributeError):
            exc.message = message


class ResilientChatModel(BaseChatModel):
    """A chat model that retries, bounds each attempt in time and limits the request rate.

    Every attempt (retries included) first takes a token from the rate limiter, then calls
    ``inner`` with a deadline of ``timeout_s``. The attempt calls ``inner._agenerate`` (the
    provider's request and response handling) directly: callbacks, message normalisation and
    ids are this model's own ``ainvoke``'s, and are not done twice.

    Attributes:
        inner: The provider's chat model, built with its SDK retries off.
        policy: The retry policy.
        timeout_s: Seconds per attempt before it is abandoned (and retried).
        rps: Requests per second allowed to this provider from this process (``None``: no
            limit); a token bucket (langchain-core ``InMemoryRateLimiter``) of size 1.
        secrets: Strings (API keys) removed from error messages before they are recorded.
        factory: Builds a fresh ``inner`` for each further event loop. SDK async clients
            keep connections bound to the loop that opened them, so a model used under a
            second ``asyncio.run`` (a second run in one process) needs new ones; without a
            factory, ``inner`` is used on every loop.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseChatModel
    policy: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_s: float = 120.0
    rps: float | None = None
    secrets: list[str] = Field(default_factory=list, repr=False, exclude=True)
    factory: Callable[[], BaseChatModel] | None = Field(default=None, repr=False, exclude=True)
    _per_loop: weakref.WeakKeyDictionary = PrivateAttr(default_factory=weakref.WeakKeyDictionary)
    _limiter: BaseRateLimiter | None = PrivateAttr(default=None)
    _rng: random.Random = PrivateAttr(default_factory=random.Random)

    def model_post_init(self, context: Any) -> None:
        if self.rps is not None:
            if self.rps <= 0:
                raise ValueError(f"rps must be positive, got {self.rps}")
            self._limiter = InMemoryRateLimiter(
                requests_per_second=self.rps,
                check_every_n_seconds=min(0.05, 0.5 / self.rps),
                max_bucket_size=1,
            )

    def share_rate_limiter(self, limiter: BaseRateLimiter) -> None:
        """Take every attempt's token from ``limiter`` instead of this model's own ``rps``
        bucket: one budget shared with other processes (the Ray executor's cluster-wide
        ``--rps``)."""
        self._limiter = limiter

    def inner_for_loop(self) -> BaseChatModel:
        """``inner`` on the first event loop that calls it; a fresh one from ``factory`` on
        every later loop."""
        loop = asyncio.get_running_loop()
        model = self._per_loop.get(loop)
        if model is None:
            model = self.inner if not self._per_loop or self.factory is None else self.factory()
            self._per_loop[loop] = model
        return model

    async def aclose(self) -> None:
        """Close the SDK client used on the running event loop (call before the loop ends;
        the runner does). Best effort: a client that cannot be closed is left to the
        garbage collector."""
        model = self._per_loop.pop(asyncio.get_running_loop(), None)
        client = None
        if model is not None:
            client = getattr(model, "root_async_client", None) or model.__dict__.get("_async_client")
        if client is not None and hasattr(client, "close"):
            with contextlib.suppress(Exception):
                await client.close()

    @property
    def _llm_type(self) -> str:
        return f"resilient-{self.inner._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"inner": self.inner._identifying_params, "policy": self.policy.record()}

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """Bind tools the way ``inner`` formats them; calls still go through the retries."""
        binding = self.inner.bind_tools(tools, **kwargs)
        return self.bind(**getattr(binding, "kwargs", {}))

    # --- one attempt -----------------------------------------------------------------
    def _give_up(self, exc: BaseException, attempt: int, reason: str | None) -> None:
        if reason is None:
            note = " (not retryable)" if attempt == 1 else f" (not retryable, attempt {attempt})"
        else:
            note = f" (gave up after {attempt} attempts)"
        _scrub_exception(exc, self.secrets, note)

    def _next_delay(self, exc: BaseException, attempt: int, reason: str | None) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` to give up."""
        if reason is None or attempt > self.policy.max_retries:
            return None
        after = retry_after_s(exc) if reason == "rate_limit" or reason == "server" else None
        if after is not None and after > self.policy.max_retry_after_s:
            return None
        delay = self.policy.delay(attempt - 1, after, self._rng)
        log.info("model call failed (%s: %s); retry %d in %.2f s", reason, type(exc).__name__, attempt, delay)
        return delay

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        attempt = 0
        while True:
            attempt += 1
            if self._limiter is not None:
                await self._limiter.aacquire()
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await self.inner_for_loop()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            except Exception as exc:  # CancelledError (Ctrl-C) is not an Exception: it propagates
                error: BaseException = exc
                if isinstance(exc, TimeoutError) and not str(exc):  # the deadline of asyncio.timeout
                    error = ModelTimeout(f"model call exceeded {self.timeout_s:g} s")
            reason = classify(error)
            delay = self._next_delay(error, attempt, reason)
            if delay is None:
                self._give_up(error, attempt, reason)
                raise error
            await asyncio.sleep(delay)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """Synchronous calls rely on the SDK client's own timeout (set by the provider)."""
        attempt = 0
        while True:
            attempt += 1
            if self._limiter is not None:
                self._limiter.acquire()
            try:
                return self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            except Exception as exc:
                error: BaseException = exc
            reason = classify(error)
            delay = self._next_delay(error, attempt, reason)
            if delay is None:
                self._give_up(error, attempt, reason)
                raise error
            time.sleep(delay)

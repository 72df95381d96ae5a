"""Chat models from a ``--model`` spec string.

A spec is ``PROVIDER:MODEL`` (``openai:gpt-4o-mini``) or a bare provider name (``local``).
Each provider is a factory registered by :func:`register_provider` in a module of this
package; it receives the model name and the run's model settings and returns a langchain-core
``BaseChatModel`` that supports ``bind_tools``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

from toolgym.registry import ExtensionError, Registry, is_spec

__all__ = ["PROVIDERS", "ModelSettings", "build_model", "register_provider", "split_spec"]


@dataclass
class ModelSettings:
    """Settings shared by all providers; recorded in ``run.json`` (never an API key).

    Attributes:
        temperature: Sampling temperature (default 0).
        seed: Forwarded to providers that accept one.
        max_tokens: Upper bound on generated tokens per model turn.
        timeout_s: Seconds before a model call is abandoned (and retried where supported).
        extra: Provider-specific options (base URL, server flags, ...).
        max_retries: Retries of a failed call of a hosted model (429, 5xx, timeouts, dropped
            connections) after the first attempt; see ``toolgym.providers.retry``.
        retry_initial_s: Backoff cap of the first retry, seconds (doubles per retry).
        retry_max_s: Largest backoff cap, seconds.
        rps: Requests per second allowed to the provider (``None``: unlimited).
        record_tokens: Ask the provider for each turn's prompt and completion token ids and
            completion log-probabilities, recorded in the trajectory
            (:class:`~toolgym.records.TokenRecord`) where the provider gives them.
    """

    temperature: float = 0.0
    seed: int | None = 0
    max_tokens: int = 512
    timeout_s: float = 120.0
    extra: dict[str, Any] = field(default_factory=dict)
    max_retries: int = 4
    retry_initial_s: float = 1.0
    retry_max_s: float = 30.0
    rps: float | None = None
    record_tokens: bool = False

    def record(self) -> dict[str, Any]:
        """JSON-safe dict for run.json, without secrets: no ``*key*`` entry, and a URL
        (``base_url``) without its user, password and query values
        (:func:`toolgym.runio.redact_url`)."""
        from toolgym.runio import redact_url

        data = asdict(self)
        data["extra"] = {k: redact_url(v) if isinstance(v, str) else v for k, v in self.extra.items()
                         if "key" not in k.lower()}
        return data


Factory = Callable[[str, ModelSettings], "BaseChatModel"]

_BUILTIN = {
    "local": "toolgym.providers.local",
    "scripted": "toolgym.providers.scripted",
    **{name: "toolgym.providers.hosted" for name in ("openai", "openai-compatible", "vllm", "anthropic")},
}
"""Built-in provider prefix → the module that registers it (imported when the prefix is used)."""


def _as_factory(obj: Any, name: str) -> Factory:
    from langchain_core.language_models import BaseChatModel

    if isinstance(obj, BaseChatModel):  # a model object: the same one whatever the name
        return lambda model_name, settings: obj
    if isinstance(obj, type) and issubclass(obj, BaseChatModel):
        return lambda model_name, settings: obj()
    if callable(obj):
        return obj
    raise TypeError(f"model {name!r}: expected a factory (model_name, settings) -> BaseChatModel, got {obj!r}")


PROVIDERS: Registry[Factory] = Registry("model provider", "toolgym.models", _BUILTIN, _as_factory)
"""Model factories by prefix (``local``, ``openai``, ...) and the ``toolgym.models`` entry
points."""


def register_provider(name: str) -> Callable[[Factory], Factory]:
    """Decorator registering a factory ``(model_name, settings) -> BaseChatModel``."""
    return PROVIDERS.register(name)


def split_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` → ``("openai", "gpt-4o")``; ``"local"`` → ``("local", "")``."""
    provider, _, name = spec.partition(":")
    return provider, name


def build_model(spec: str, settings: ModelSettings | None = None) -> BaseChatModel:
    """Build the chat model for ``spec``: ``PREFIX[:MODEL]`` for a registered prefix (built-in
    or a ``toolgym.models`` entry point), else ``module.path:Name`` / ``file.py:Name`` naming a
    factory ``(model_name, settings) -> BaseChatModel`` (called with ``""``), a
    ``BaseChatModel`` subclass or instance.

    Raises:
        UnknownNameError: for an unknown provider ("did you mean" included).
        ExtensionError: when a spec cannot be imported.
        ValueError: when the provider rejects the model name or settings.
    """
    provider, name = split_spec(spec)
    if provider not in PROVIDERS and is_spec(spec):
        factory, name, where = PROVIDERS.get(spec), "", spec
    else:
        entry = PROVIDERS.entry(provider)
        factory, where = entry.obj, None if entry.source == "built-in" else f"{spec} ({entry.describe()})"
    if where is None:  # toolgym's own providers raise their own clear errors
        return factory(name, settings or ModelSettings())
    try:
        model = factory(name, settings or ModelSettings())
    except Exception as exc:
        raise ExtensionError(f"model {where}: its factory raised {type(exc).__name__}: {exc}") from exc
    from langchain_core.language_models import BaseChatModel

    if not isinstance(model, BaseChatModel):
        raise ExtensionError(f"model {where}: its factory returned {type(model).__name__}, not a langchain-core BaseChatModel")
    return model

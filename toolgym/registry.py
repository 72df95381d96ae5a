"""Name → object registries with "did you mean" errors.

Environments, agents, graders and model providers register themselves by decorator at import
time; :func:`load_plugins` imports every module of a subpackage so that adding one is a new
module and no edit to existing files.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a registry lookup fails; the message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the plain message
        return str(self.args[0])


class Registry(Generic[T]):
    """A mapping from lowercase snake-case names to registered objects.

    Args:
        kind: What the registry holds ("environment", "agent", ...), used in error messages.
        package: Dotted name of the subpackage whose modules register into it; they are imported
            on first lookup.
    """

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}
        self._loaded = package is None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers an object under ``name``.

        Raises:
            ValueError: if ``name`` is already taken by a different object.
        """

        def decorator(obj: T) -> T:
            existing = self._items.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return decorator

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            load_plugins(self.package)

    def get(self, name: str) -> T:
        """Return the object registered under ``name``.

        Raises:
            UnknownNameError: if nothing is registered under ``name``; the message suggests the
                closest names and lists all known ones.
        """
        self._ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            known = sorted(self._items)
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(known)}"
            ) from None

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._ensure_loaded()
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._items


def load_plugins(package: str) -> None:
    """Import every module of ``package`` (non-recursively) so their decorators run."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")

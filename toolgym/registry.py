"""Name → object registries that load extensions from outside the package.

Three sources fill a registry, in this order:

* built-ins: what toolgym's own modules and suite folders register (loaded on first use);
* entry points of the registry's group (``toolgym.environments``, ``toolgym.agents``,
  ``toolgym.graders``, ``toolgym.models``), loaded lazily: an installed plugin is imported only
  when one of its names is used;
* specs, accepted wherever a name is: ``module.path:Name`` or ``path/to/file.py:Name``;
* declared spec forms: names starting with a declared prefix (``mcp:COMMAND``) are made by the
  form's factory from the whole name (:meth:`Registry.add_form`).

Two extensions that claim one name are an error naming both sources. Every lookup returns an
:class:`Entry` that says where the object came from, which ``run.json`` records so that a run
can be read again later (``toolgym.runio.ExtensionRef``).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = [
    "DuplicateNameError",
    "Entry",
    "ExtensionError",
    "Registry",
    "UnknownNameError",
    "describe_object",
    "first_sentence",
    "is_spec",
    "load_object",
]



_ENTRY_POINTS: tuple[tuple[str, ...], Any] | None = None


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """The entry points of ``group`` of the installed distributions. Every distribution's
    ``entry_points.txt`` is read once per value of ``sys.path`` (one scan for all of toolgym's
    groups, not one per group)."""
    global _ENTRY_POINTS
    key = tuple(sys.path)
    if _ENTRY_POINTS is None or _ENTRY_POINTS[0] != key:
        _ENTRY_POINTS = (key, metadata.entry_points())
    return list(_ENTRY_POINTS[1].select(group=group))


class UnknownNameError(KeyError):
    """Raised when a registry lookup fails; the message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the plain message
        return str(self.args[0])


class DuplicateNameError(ValueError):
    """Two extensions claim the same name; the message names both sources."""


class ExtensionError(ValueError):
    """A ``module:Name`` or ``file.py:Name`` spec, or an entry point, cannot be loaded (the
    message says which and why)."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object and where it came from.

    Attributes:
        name: The name it is registered under.
        obj: The object (after the registry's ``coerce``).
        spec: What loads it again: the name, or the ``module:Name`` / ``file.py:Name`` spec.
        source: For people: ``built-in``, ``suite NAME``, ``entry point GROUP``, ``module`` or
            ``file``.
        distribution: The installed distribution providing it (entry points, and modules of an
            installed distribution), else ``None``.
        version: That distribution's version.
    """

    name: str
    obj: T
    spec: str
    source: str
    distribution: str | None = None
    version: str | None = None

    def describe(self) -> str:
        """``source (distribution version)`` for tables."""
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"{self.source}{dist}"


_SPEC = re.compile(r"^(?P<target>[^:]+(?:\.py)|[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")


def is_spec(text: str) -> bool:
    """Whether ``text`` is a ``module.path:Name`` or ``file.py:Name`` spec."""
    return bool(_SPEC.match(text))


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    top = module.split(".")[0]
    names = metadata.packages_distributions().get(top) or []
    if not names:
        return None, None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return names[0], None


def load_object(spec: str) -> tuple[Any, str, str, str | None, str | None]:
    """Import the object a spec names.

    Args:
        spec: ``module.path:Name`` (``Name`` may be dotted: ``mod:Class.attr``) or
            ``path/to/file.py:Name`` (relative to the working directory).

    Returns:
        ``(object, spec to record, source, distribution, version)``; a file spec is recorded
        with its absolute path so the run can be read from another directory.

    Raises:
        ExtensionError: naming the spec when the module or file cannot be imported or has no
            such attribute.
    """
    m = _SPEC.match(spec)
    if not m:
        raise ExtensionError(f"{spec!r} is not a spec (expected module.path:Name or path/to/file.py:Name)")
    target, attr = m.group("target"), m.group("attr")
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise ExtensionError(f"{spec}: file {path} not found")
        name = f"toolgym_ext_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        module = sys.modules.get(name)
        if module is None:
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise ExtensionError(f"{spec}: cannot import {path}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            try:
                module_spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ExtensionError(f"{spec}: importing {path} failed: {type(exc).__name__}: {exc}") from exc
        recorded, source, dist, version = f"{path}:{attr}", "file", None, None
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:  # the user's own modules
            sys.path.append(str(Path.cwd()))
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ExtensionError(f"{spec}: cannot import module {target!r}: {exc}") from exc
        recorded, source = spec, "module"
        dist, version = _distribution_of(target)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ExtensionError(f"{spec}: {target} has no attribute {attr!r}") from None
    return obj, recorded, source, dist, version


class Registry(Generic[T]):
    """A mapping from names to objects, filled by built-ins, entry points and specs.

    Args:
        kind: What it holds ("environment", "agent", ...), used in messages.
        group: The entry-point group plugins declare their objects in.
        builtins: Either a callable, called once on first use to register the built-ins (it
            imports the modules whose decorators register into this registry), or a mapping
            ``name -> module path``: each name is known at once (``names``, ``sources``, ``in``)
            and its module is imported only when that name is looked up, so listing the
            registry imports nothing heavy.
        coerce: Turns a loaded object into what the registry holds (for example an
            ``Environment`` subclass into a ``Benchmark``), or raises ``TypeError`` saying
            what was expected. Default: identity.
    """

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Callable[[], None] | Mapping[str, str] | None = None,
        coerce: Callable[[Any, str], T] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self._builtins = builtins if callable(builtins) else None
        self._lazy: dict[str, str] = dict(builtins or {}) if not callable(builtins) else {}
        self._coerce = coerce or (lambda obj, name: obj)
        self._entries: dict[str, Entry[T]] = {}
        self._raw: dict[str, Any] = {}
        self._plugins: dict[str, metadata.EntryPoint] = {}
        self._specs: dict[str, Entry[T]] = {}
        self._forms: dict[str, tuple[Callable[[str], Any], str]] = {}
        self._loaded = False

    # --- registration --------------------------------------------------------------------
    def register(self, name: str, source: str = "built-in") -> Callable[[Any], Any]:
        """Decorator registering an object under ``name`` (the decorated object is returned
        unchanged; the registry holds its coerced form).

        Raises:
            DuplicateNameError: if ``name`` is already taken by a different object.
        """

        def decorator(obj: Any) -> Any:
            self.add(name, obj, source)
            return obj

        return decorator

    def add(self, name: str, obj: Any, source: str = "built-in") -> None:
        """Register ``obj`` under ``name``.

        Raises:
            DuplicateNameError: if ``name`` is already taken by a different object.
        """
        module = self._lazy.get(name)
        if module is not None and name not in self._entries and getattr(obj, "__module__", None) != module:
            raise DuplicateNameError(
                f"{self.kind} {name!r} is built in ({module}) and registered again by {_origin(obj)} ({source})"
            )
        existing = self._entries.get(name)
        if existing is not None:
            if _origin(self._raw[name]) == _origin(obj):  # the same definition imported again
                return
            raise DuplicateNameError(
                f"{self.kind} {name!r} is registered twice: {_origin(self._raw[name])} "
                f"({existing.describe()}) and {_origin(obj)} ({source})"
            )
        if name in self._plugins:
            ep = self._plugins[name]
            raise DuplicateNameError(
                f"{self.kind} {name!r} is declared by {_ep_source(ep)} ({ep.value}) and registered by {source}"
            )
        self._raw[name] = obj
        self._entries[name] = Entry(name, self._coerce(obj, name), name, source)

    def add_form(self, prefix: str, make: Callable[[str], Any], usage: str) -> None:
        """Declare a spec form: every name starting with ``prefix`` is made by ``make(name)``
        (once per name; the entry records the whole name as its spec, so a run is read again
        with the same object). Forms are checked before entry points and ``module:Name`` specs.

        Args:
            prefix: For example ``"mcp:"``.
            make: ``name -> object`` (coerced like any other); raises ``ExtensionError`` or
                ``ValueError`` naming what is wrong with the name.
            usage: How the form is written, for messages (``"mcp:COMMAND ARGS..."``).

        Raises:
            DuplicateNameError: if another form claims ``prefix``.
        """
        if prefix in self._forms and self._forms[prefix][0] is not make:
            raise DuplicateNameError(f"{self.kind} spec form {prefix!r} is declared twice")
        self._forms[prefix] = (make, usage)

    def forms(self) -> list[str]:
        """How each declared spec form is written, sorted."""
        return sorted(usage for _, usage in self._forms.values())

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self._builtins is not None:
            self._builtins()
        found: dict[str, list[metadata.EntryPoint]] = {}
        for ep in entry_points(self.group):
            found.setdefault(ep.name, []).append(ep)
        for name, eps in found.items():
            values = {ep.value for ep in eps}
            if len(values) > 1:  # one distribution installed twice gives the same value twice
                sources = " and ".join(f"{_ep_source(ep)} ({ep.value})" for ep in eps)
                raise DuplicateNameError(f"{self.kind} {name!r} is declared by two plugins: {sources}")
            ep = eps[0]
            if name in self._entries or name in self._lazy:
                where = self._entries[name].describe() if name in self._entries else "built-in"
                raise DuplicateNameError(
                    f"{self.kind} {name!r} is declared by {_ep_source(ep)} ({ep.value}) and is also "
                    f"{where}; uninstall or rename one"
                )
            self._plugins[name] = ep

    # --- lookup --------------------------------------------------------------------------
    def entry(self, name: str) -> Entry[T]:
        """The entry for a name or a spec.

        Raises:
            UnknownNameError: for an unknown name ("did you mean" and the known names).
            ExtensionError: when a spec or a plugin's entry point cannot be loaded.
            DuplicateNameError: when two extensions claim ``name``.
            TypeError: when the object is not of the kind this registry holds.
        """
        self._ensure_loaded()
        if name in self._entries:
            return self._entries[name]
        if name in self._lazy:
            importlib.import_module(self._lazy[name])  # its decorator registers the name
            if name not in self._entries:
                raise ExtensionError(f"{self.kind} {name!r}: module {self._lazy[name]} did not register it")
            return self._entries[name]
        form = next((p for p in self._forms if name.startswith(p)), None)
        if form is not None:
            if name not in self._specs:
                make, usage = self._forms[form]
                try:
                    obj = make(name)
                except (ExtensionError, ValueError) as exc:
                    raise ExtensionError(f"{self.kind} {name!r} (form {usage}): {exc}") from exc
                self._specs[name] = Entry(name, self._coerce(obj, name), name, f"spec form {form}")
            return self._specs[name]
        if name in self._plugins:
            ep = self._plugins[name]
            try:
                obj = ep.load()
            except Exception as exc:
                raise ExtensionError(
                    f"{self.kind} {name!r} from {_ep_source(ep)} ({ep.value}) cannot be loaded: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            dist = ep.dist.name if ep.dist else None
            version = ep.dist.version if ep.dist else None
            entry = Entry(name, self._coerce(obj, name), name, f"entry point {self.group}", dist, version)
            self._entries[name] = entry
            return entry
        if ":" in name and is_spec(name):
            if name not in self._specs:
                obj, recorded, source, dist, version = load_object(name)
                self._specs[name] = Entry(name, self._coerce(obj, name), recorded, source, dist, version)
            return self._specs[name]
        known = self.names()
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(known)} "
            f"(or give module.path:Name or path/to/file.py:Name{''.join(', or ' + u for u in self.forms())})"
        ) from None

    def get(self, name: str) -> T:
        """The object registered under ``name`` (or named by a spec); see :meth:`entry`."""
        return self.entry(name).obj

    def names(self) -> list[str]:
        """Every registered name (built-ins and installed plugins), sorted."""
        self._ensure_loaded()
        return sorted({*self._entries, *self._lazy, *self._plugins})

    def sources(self) -> list[tuple[str, str]]:
        """``(name, where it comes from)`` for every name, without importing plugins."""
        self._ensure_loaded()
        rows = [(n, e.describe()) for n, e in self._entries.items() if not e.source.startswith("entry point")]
        rows += [(n, "built-in") for n in self._lazy if n not in self._entries]
        for name, ep in self._plugins.items():
            rows.append((name, f"entry point {self.group} ({_ep_source(ep)})"))
        return sorted(rows)

    def description(self, name: str) -> str:
        """What ``name`` is, in one line (:func:`first_sentence` of its docstring), without
        importing a built-in or a plugin that is not loaded yet: their docstrings are read
        from the source. ``""`` when there is none to read."""
        self._ensure_loaded()
        if name in self._entries:
            return describe_object(self._raw.get(name, self._entries[name].obj))
        if name in self._lazy:
            return first_sentence(_source_docstring(self._lazy[name], registered_as=name))
        if name in self._plugins:
            ep = self._plugins[name]
            attr = ep.attr.split(".")[-1] if ep.attr else None
            return first_sentence(_source_docstring(ep.module, name=attr)) if attr else ""
        return ""

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._entries or name in self._lazy or name in self._plugins


_ROLE = re.compile(r":(class|func|meth|mod|attr|data|obj):`~?([^`]+)`")


def _plain_role(match: re.Match[str]) -> str:
    role, target = match.groups()
    return target if role == "mod" else target.rsplit(".", 1)[-1]


def describe_object(obj: Any, width: int = 90) -> str:
    """One line saying what a registered object is: :func:`first_sentence` of its own
    docstring (``""`` when it has none; a class's inherited docstring is not its own). For
    ``toolgym list``."""
    if isinstance(obj, type) and obj.__doc__ is None:
        return ""
    return first_sentence(inspect.getdoc(obj) or "", width)


def first_sentence(doc: str, width: int = 90) -> str:
    """The first sentence of a docstring's first paragraph, with reST markup (````x````,
    ``:class:`a.X``` as ``X``) written plainly and its end marked with a full stop; a sentence
    longer than ``width`` characters is cut at its first ``;`` outside parentheses (its
    leading clause). ``""`` for an empty docstring."""
    text = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    text = _ROLE.sub(_plain_role, text).replace("``", "")
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0]
    if len(sentence) > width:
        depth = 0
        for i, char in enumerate(sentence):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == ";" and depth == 0:
                sentence = sentence[:i]
                break
    sentence = sentence.rstrip(".:;, ")
    return f"{sentence}." if sentence else ""


def _source_docstring(module: str, name: str | None = None, registered_as: str | None = None) -> str:
    """The docstring of a top-level class or function of ``module``, read from its source
    without importing it: the one called ``name``, or the one whose decorator is called with
    ``registered_as`` as its first argument (``@register_agent("oracle")``). ``""`` when the
    source or the definition cannot be found."""
    import ast

    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(".py"):
            return ""
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (ImportError, OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ""
    for node in tree.body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if name is not None and node.name == name:
            return ast.get_docstring(node) or ""
        for decorator in node.decorator_list:
            if (registered_as is not None and isinstance(decorator, ast.Call) and decorator.args
                    and isinstance(decorator.args[0], ast.Constant) and decorator.args[0].value == registered_as):
                return ast.get_docstring(node) or ""
    return ""


def _ep_source(ep: metadata.EntryPoint) -> str:
    return f"{ep.dist.name} {ep.dist.version}" if ep.dist else "an unknown distribution"


def _origin(obj: Any) -> str:
    """``module.QualifiedName`` of a class or function (a module imported twice defines the
    same one); the identity of any other object."""
    if isinstance(obj, type) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"object at {id(obj):#x}"

"""Where environments, agents, graders and models come from.

Four registries, each filled by built-ins, entry points and specs
(:class:`toolgym.registry.Registry`):

=============  ==========================  ==============================================
registry       entry-point group           holds
=============  ==========================  ==============================================
environments   ``toolgym.environments``    :class:`~toolgym.benchmark.Benchmark` (an
                                           ``Environment`` subclass is wrapped in one)
agents         ``toolgym.agents``          ``Agent`` subclasses; a langgraph graph factory
                                           ``factory(model, tools, instructions)`` is run
                                           through :class:`toolgym.agents.graph.GraphAgent`
graders        ``toolgym.graders``         grader classes (``grade(example, trajectory)``)
models         ``toolgym.models``          factories ``(model_name, settings) -> BaseChatModel``,
                                           by prefix: ``--model PREFIX:NAME``
=============  ==========================  ==============================================

Suites (toolgym's own folders under ``toolgym/suites/``, each exposing ``SUITE``, and plugins'
:class:`~toolgym.benchmark.Suite` objects in the ``toolgym.suites`` group) add benchmarks,
graders and agents in one declaration. Suites are read on the first lookup of any registry;
per-kind entry points are imported only when their name is used.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from typing import Any

from toolgym.agents import AGENTS, Agent
from toolgym.benchmark import ENVIRONMENTS, Benchmark, Suite
from toolgym.environments import Environment
from toolgym.graders import GRADERS, Grader
from toolgym.providers import PROVIDERS
from toolgym.registry import Entry, Registry, entry_points

__all__ = [
    "SUITE_GROUP",
    "get_agent",
    "get_benchmark",
    "get_environment",
    "get_grader",
    "get_grader_class",
    "load_suites",
    "registries",
    "suite_problems",
]

SUITE_GROUP = "toolgym.suites"

_loaded = False
_problems: list[str] = []


def load_suites() -> None:
    """Read every suite once: the folders of ``toolgym.suites`` and the ``toolgym.suites``
    entry points. A suite that fails to import is skipped with a warning (``list`` shows why);
    the others stay usable.

    Raises:
        DuplicateNameError: when two suites (or a suite and a plugin) claim one name.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True
    import toolgym.suites as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"toolgym.suites.{info.name}")
            suite = module.SUITE
        except Exception as exc:  # noqa: BLE001 -- one broken suite must not hide the others
            _problem(f"suite {info.name}: {type(exc).__name__}: {exc}")
            continue
        _add_suite(suite, f"suite {suite.name}")
    for ep in entry_points(SUITE_GROUP):
        where = f"entry point {SUITE_GROUP} ({ep.dist.name} {ep.dist.version})" if ep.dist else f"entry point {SUITE_GROUP}"
        try:
            suite = ep.load()
        except Exception as exc:  # noqa: BLE001
            _problem(f"suite {ep.name} ({ep.value}) from {where}: {type(exc).__name__}: {exc}")
            continue
        _add_suite(suite, where)


def _mcp_server(spec: str) -> Benchmark:
    from toolgym.mcp.environment import benchmark_for_spec

    return benchmark_for_spec(spec)


# an outside MCP server's tools as an environment (toolgym.mcp.environment)
ENVIRONMENTS.add_form("mcp:", _mcp_server, 'mcp:"COMMAND ARGS..."')
ENVIRONMENTS.add_form("mcp+http://", _mcp_server, "mcp+http://HOST:PORT/PATH [--header 'Name: ${VAR}']...")
ENVIRONMENTS.add_form("mcp+https://", _mcp_server, "mcp+https://HOST:PORT/PATH [--header 'Name: ${VAR}']...")


def _problem(text: str) -> None:
    _problems.append(text)
    warnings.warn(text, stacklevel=3)


def _add_suite(suite: Suite, source: str) -> None:
    if not isinstance(suite, Suite):
        _problem(f"{source}: SUITE must be a toolgym.Suite, got {type(suite).__name__}")
        return
    for benchmark in suite.benchmarks:
        ENVIRONMENTS.add(benchmark.name, benchmark, source)
    for cls in suite.graders:
        GRADERS.add(cls.name, cls, source)
    for cls in suite.agents:
        AGENTS.add(cls.name, cls, source)


def suite_problems() -> list[str]:
    """Why suites were skipped (import errors), for ``list``."""
    load_suites()
    return list(_problems)


def registries() -> dict[str, Registry[Any]]:
    """The four registries, with every suite read: ``environments``, ``agents``,
    ``graders``, ``models``."""
    load_suites()
    return {"environments": ENVIRONMENTS, "agents": AGENTS, "graders": GRADERS, "models": PROVIDERS}


def benchmark_entry(spec: str) -> Entry[Benchmark]:
    """The environment named by ``spec`` (a name, ``module:Name`` or ``file.py:Name``) with
    its source.

    Raises:
        UnknownNameError, ExtensionError, DuplicateNameError, TypeError: see
            :meth:`toolgym.registry.Registry.entry`.
    """
    load_suites()
    return ENVIRONMENTS.entry(spec)


def get_benchmark(spec: str) -> Benchmark:
    """The :class:`Benchmark` named by ``spec``; see :func:`benchmark_entry`."""
    return benchmark_entry(spec).obj


def get_environment(spec: str) -> type[Environment]:
    """The environment class named by ``spec``; see :func:`benchmark_entry`."""
    return get_benchmark(spec).environment


def agent_entry(spec: str) -> Entry[type[Agent]]:
    """The agent class named by ``spec`` with its source (a graph factory comes back as a
    ``GraphAgent`` subclass)."""
    load_suites()
    return AGENTS.entry(spec)


def get_agent(spec: str) -> type[Agent]:
    """The agent class named by ``spec``; see :func:`agent_entry`."""
    return agent_entry(spec).obj


def grader_entry(spec: str) -> Entry[Any]:
    """The grader class named by ``spec`` with its source."""
    load_suites()
    return GRADERS.entry(spec)


def get_grader_class(spec: str) -> type[Grader]:
    """The grader class (or factory) named by ``spec``; see :func:`grader_entry`."""
    return grader_entry(spec).obj


def get_grader(spec: str, **settings: Any) -> Grader:
    """An instance of the grader named by ``spec``, made with ``settings``."""
    return get_grader_class(spec)(**settings)

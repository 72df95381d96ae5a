"""toolgym: an agent-environment simulator with a stepwise trajectory grader.

The public API. Everything a user or a plugin needs is importable from here::

    import toolgym

    class Counter(toolgym.Environment):
        ...

    result = toolgym.evaluate(Counter, agent="tool_calling", model=chat_model, dataset=[...])

Names are imported on first use, so ``import toolgym`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS: dict[str, str] = {
    # environments and their declarations
    "Environment": "toolgym.environments",
    "tool": "toolgym.environments",
    "schema_tool": "toolgym.environments",
    "ToolError": "toolgym.environments",
    "Benchmark": "toolgym.benchmark",
    "Suite": "toolgym.benchmark",
    "Generator": "toolgym.benchmark",
    "ReportTable": "toolgym.benchmark",
    # records
    "Example": "toolgym.records",
    "ToolCallSpec": "toolgym.records",
    "Trajectory": "toolgym.records",
    "Step": "toolgym.records",
    "ModelStep": "toolgym.records",
    "ToolStep": "toolgym.records",
    "UserStep": "toolgym.records",
    "UserSpec": "toolgym.records",
    "turn_of_steps": "toolgym.records",
    "ToolCall": "toolgym.records",
    "TokenRecord": "toolgym.records",
    "Score": "toolgym.records",
    "Measure": "toolgym.records",
    "BINARY": "toolgym.records",
    "states_after": "toolgym.records",
    "replay_calls": "toolgym.replay",
    "reference_replay": "toolgym.replay",
    "ReplayError": "toolgym.replay",
    "Run": "toolgym.runio",
    "RunRecord": "toolgym.runio",
    "DatasetError": "toolgym.data",
    "RunDirError": "toolgym.runio",
    # graders, agents, models
    "Grader": "toolgym.graders",
    "make_score": "toolgym.graders",
    "Agent": "toolgym.agents",
    "Episode": "toolgym.agents",
    "ModelSettings": "toolgym.providers",
    # running and reading
    "evaluate": "toolgym.api",
    "aevaluate": "toolgym.api",
    "EvalResult": "toolgym.api",
    "load_run": "toolgym.api",
    "fork": "toolgym.forks",
    "replay_run": "toolgym.forks",
    "Estimate": "toolgym.stats",
    "UnknownNameError": "toolgym.registry",
    "ExtensionError": "toolgym.registry",
    "DuplicateNameError": "toolgym.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolgym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from toolgym.agents import Agent, Episode
    from toolgym.api import EvalResult, aevaluate, evaluate, load_run
    from toolgym.benchmark import Benchmark, Generator, ReportTable, Suite
    from toolgym.data import DatasetError
    from toolgym.environments import Environment, ToolError, schema_tool, tool
    from toolgym.graders import Grader, make_score
    from toolgym.providers import ModelSettings
    from toolgym.records import (
        BINARY,
        Example,
        Measure,
        ModelStep,
        Score,
        Step,
        TokenRecord,
        ToolCall,
        ToolCallSpec,
        ToolStep,
        Trajectory,
        UserSpec,
        UserStep,
        states_after,
        turn_of_steps,
    )
    from toolgym.registry import DuplicateNameError, ExtensionError, UnknownNameError
    from toolgym.replay import ReplayError, reference_replay, replay_calls
    from toolgym.runio import Run, RunDirError, RunRecord
    from toolgym.stats import Estimate

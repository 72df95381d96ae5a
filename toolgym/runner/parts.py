"""Resolving the parts of a run: the benchmark, agent, model and graders from names, specs or objects (each with the record of where it came from), and the run's examples."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolgym.agents import Agent, as_agent_class
from toolgym.benchmark import Benchmark, as_benchmark
from toolgym.data import (
    DatasetError,
    check_tools,
    describe_error,
    load_examples,
    resolve_dataset,
)
from toolgym.graders import Grader, grader_name
from toolgym.plugins import agent_entry, benchmark_entry, grader_entry
from toolgym.providers import PROVIDERS, split_spec
from toolgym.records import Example
from toolgym.registry import Entry, ExtensionError, UnknownNameError, is_spec
from toolgym.runio import (
    ExtensionRef,
    RunDirError,
    RunRecord,
    redact_spec,
)

_IN_PROCESS: dict[str, Any] = {}
"""Objects recorded as ``<object Name>`` (no other process can import them: a class defined
in a script or inside a function), by their recorded spec, so that this process finds them
again when it grades, shows or exports the run (:func:`in_process`)."""


def _object_ref(obj: Any, value: Any = None) -> ExtensionRef:
    """How an object given in Python is recorded: ``module:QualName`` when another process
    can import it again, else ``<object QualName>`` (``<object QualName #2>`` for a second
    object of that name), which this process remembers (``value``, default ``obj``) so that
    it can read the run back with it; other processes read such a run without it."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and module != "__main__" and "<" not in qualname:
        return ExtensionRef(spec=f"{module}:{qualname}", source="object")
    script = _script_spec(obj, module, qualname)
    if script is not None:
        return ExtensionRef(spec=script, source="file")
    kept = obj if value is None else value
    base = f"{qualname or type(obj).__name__}"
    spec, n = f"<object {base}>", 1
    while spec in _IN_PROCESS and _IN_PROCESS[spec] is not kept:
        n += 1
        spec = f"<object {base} #{n}>"
    _IN_PROCESS[spec] = kept
    return ExtensionRef(spec=spec, source="object")


def _script_spec(obj: Any, module: str | None, qualname: str | None) -> str | None:
    """``/abs/path/script.py:Name`` for a top-level class or object of the script being run
    (module ``__main__``), when loading that file again from another process (``grade``,
    ``export``, ``--resume``) only defines things: its top level holds imports, definitions,
    assignments without calls, and ``if __name__ == "__main__":`` blocks (where the script
    calls ``evaluate``). ``None`` otherwise (an interactive session, ``python -c``, a script
    whose top level runs something), so that loading it never plays a run again."""
    import ast

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if module != "__main__" or not qualname or "." in qualname or "<" in qualname or not path:
        return None
    if getattr(main, qualname, None) is not obj or not str(path).endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and not any(isinstance(n, ast.Call) for n in ast.walk(node)):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            continue
        return None
    return f"{Path(path).resolve()}:{qualname}"


def in_process(spec: str | None) -> Any:
    """The object this process recorded as ``spec`` (``<object Name>``), else ``None``."""
    return _IN_PROCESS.get(spec) if spec else None


NOT_IMPORTABLE_HINT = (
    "it was given as a Python object no other process can import (a class defined in a script "
    "or inside a function): read, grade or export the run from the process that made it "
    "(toolgym.load_run, toolgym.views.export.export_runs), or define the class in a module or "
    "file and pass its spec (evaluate(\"envs.py:KeyValueStore\", ...)), which every process finds again"
)


def _ref(entry: Entry[Any]) -> ExtensionRef:
    return ExtensionRef(spec=entry.spec, source=entry.source, distribution=entry.distribution, version=entry.version)


def resolve_benchmark(env: Any) -> tuple[Benchmark, ExtensionRef]:
    """A benchmark and its record from a name, spec, ``Benchmark`` or ``Environment`` class.

    Raises:
        UnknownNameError / ExtensionError: for a name or spec that cannot be found.
        TypeError: for anything else.
    """
    if isinstance(env, str):
        entry = benchmark_entry(env)
        return entry.obj, _ref(entry)
    benchmark = as_benchmark(env)
    if isinstance(env, Benchmark):  # recorded by the module-level name it is bound to, if any
        module = sys.modules.get(benchmark.environment.__module__)
        for name, value in (vars(module).items() if module is not None else ()):
            if value is env and module.__name__ != "__main__":
                return benchmark, ExtensionRef(spec=f"{module.__name__}:{name}", source="object")
        return benchmark, _object_ref(benchmark.environment, env)
    return benchmark, _object_ref(benchmark.environment)


def _is_chat_model(obj: Any) -> bool:
    from langchain_core.language_models import BaseChatModel  # only runs with a model object

    return isinstance(obj, BaseChatModel)


def resolve_agent(agent: Any) -> tuple[type[Agent] | Agent, ExtensionRef]:
    """An agent class (or instance) and its record from a name, spec, class, instance or
    graph factory."""
    if isinstance(agent, str):
        entry = agent_entry(agent)
        return entry.obj, _ref(entry)
    if isinstance(agent, Agent):
        return agent, _object_ref(type(agent))
    return as_agent_class(agent, getattr(agent, "__name__", "")), _object_ref(agent)


def model_spec_ref(spec: str) -> tuple[str, ExtensionRef]:
    """The model spec to record (a ``file.py:Name`` spec made absolute) and where its provider
    came from (built-in prefix, a ``toolgym.models`` entry point, a module or a file).

    Raises:
        UnknownNameError / ExtensionError: when neither a registered prefix nor a loadable spec.
    """
    prefix, _ = split_spec(spec)
    if prefix not in PROVIDERS and is_spec(spec):
        entry = PROVIDERS.entry(spec)
        return entry.spec, _ref(entry)
    entry = PROVIDERS.entry(prefix)
    return spec, ExtensionRef(spec=spec, source=entry.source, distribution=entry.distribution, version=entry.version)


MILESTONE_GRADERS = ("trajectory_match", "milestone_progress", "step_precision", "step_recall")
"""Graders added to the defaults when a dataset has an example with ``milestones``."""


def make_graders(
    benchmark: Benchmark,
    names: Sequence[Any] | None,
    settings: dict[str, Any] | None = None,
    examples: Sequence[Example] | None = None,
) -> list[tuple[Grader, ExtensionRef]]:
    """Instantiate the requested graders.

    Args:
        benchmark: Without ``names`` its ``graders`` are used, plus its ``judge_graders``
            when ``settings`` name a ``judge_model``.
        names: Grader names or specs, classes or instances, or ``None`` for the defaults.
        settings: Grader settings by field name; each grader (a dataclass) receives only the
            settings it declares as fields, so one ``--judge-model`` reaches every judge.
            ``None`` values are dropped (the grader's default applies). A grader declaring a
            ``benchmark`` field (``final_state``, ``collateral_damage``: they replay the
            reference on a fresh environment) receives ``benchmark``.
        examples: The dataset; without ``names``, :data:`MILESTONE_GRADERS` join the
            defaults when one of its examples has ``milestones``, ``milestone_similarity`` when
            one of its milestones declares ``similarity``, and ``turn_state`` when one has
            ``expected_states``.

    Raises:
        UnknownNameError / ExtensionError: for an unknown grader.
        ValueError: when a grader rejects its settings (a judge without a judge model).
    """
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if names is None:
        names = list(benchmark.graders)
        if settings.get("judge_model"):
            names += [n for n in benchmark.judge_graders if n not in names]
        if examples is not None and any(ex.milestones is not None for ex in examples):
            names += [n for n in MILESTONE_GRADERS if n not in names]
            if "milestone_similarity" not in names and any(
                    ex.plan is not None and ex.plan.has_similarity for ex in examples):
                names.append("milestone_similarity")  # partial credit, reported beside the binary graders
        if examples is not None and any(ex.expected_states is not None for ex in examples) and "turn_state" not in names:
            names.append("turn_state")
        if (settings.get("trajectory_mode") or settings.get("args_mode")) and "trajectory_match" not in names:
            names.append("trajectory_match")  # the modes are its settings: asking for one asks for it
    if settings.get("trajectory_mode") and examples:
        given = sum(1 for ex in examples if ex.milestones is not None)
        if given == len(examples):
            warnings.warn(f"--trajectory-mode {settings['trajectory_mode']} grades examples with expected_calls and no "
                          f"milestones; all {given} examples here have milestones, which trajectory_match grades "
                          "instead", stacklevel=2)
    graders = []
    for item in names:
        if isinstance(item, str) and in_process(item) is not None:  # a run of this process, read back
            item = in_process(item)
        if isinstance(item, str):
            entry = grader_entry(item)
            cls, ref = entry.obj, _ref(entry)
        else:
            cls, ref = item, _object_ref(item if isinstance(item, type) else type(item), item)
        if isinstance(cls, type):
            accepted = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
            given = {k: v for k, v in settings.items() if k in accepted}
            if "benchmark" in accepted and "benchmark" not in given:  # graders that replay the reference
                given["benchmark"] = benchmark
            grader = cls(**given)
        else:  # an instance: used as it is
            grader = cls
        name = getattr(grader, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"grader {ref.spec}: has no name (give the class a `name` string)")
        taken = {grader_name(g): r for g, r in graders}
        if name in taken:
            if taken[name].spec == ref.spec:  # the same grader asked for twice
                continue
            raise ValueError(
                f"two graders named {name!r}: {taken[name].spec} and {ref.spec}; their scores would mix (rename one)"
            )
        graders.append((grader, ref))
    if examples and not any(ex.milestones is not None for ex in examples) and any(
            grader_name(g) == "trajectory_match" and getattr(g, "trajectory_mode", None) is None for g, _ in graders):
        warnings.warn(f"trajectory_match grades examples with milestones, or their expected_calls with "
                      f"--trajectory-mode (strict, unordered, subset, superset); none of the {len(examples)} "
                      "examples here has milestones, so it scores none", stacklevel=2)
    return graders


def load_run_examples(
    benchmark: Benchmark, dataset: Any, limit: int | None, options: dict[str, Any] | None = None
) -> tuple[Path | None, list[Example]]:
    """Resolve and load a run's examples (validated before any model is called).

    Args:
        dataset: A path, a built-in dataset name, ``None`` (the ``test`` set), or a list of
            :class:`Example` objects or dicts (then the returned path is ``None``).

    Raises:
        DatasetError: for an invalid record (file and line, or list index, named), or an
            example whose expected steps name tools the environment does not have.
    """
    if isinstance(dataset, (list, tuple)):
        examples = []
        for i, item in enumerate(dataset):
            try:
                examples.append(item if isinstance(item, Example) else Example.model_validate(item))
            except ValidationError as exc:
                raise DatasetError(f"dataset[{i}]: {describe_error(exc.errors()[0])}") from None
        if not examples:
            raise DatasetError("dataset: no examples")
        path = None
    else:
        path = resolve_dataset(benchmark, None if dataset is None else str(dataset))
        examples = load_examples(path, benchmark, options)
    check_tools(benchmark, examples, path or "dataset")
    return path, examples[:limit] if limit else examples


def benchmark_of(record: RunRecord, directory: Path | None = None, spec: str | None = None) -> Benchmark:
    """The benchmark a run was made with, found again from its recorded spec.

    Args:
        record: The run's ``run.json``.
        directory: The run directory, for messages.
        spec: The environment's spec as the user gives it again, with the credentials the run
            did not record (``mcp+http://user:pw@HOST/mcp``); used instead of the recorded one
            when both name the same environment (:func:`toolgym.runio.redact_spec`), else
            refused.

    Raises:
        RunDirError: when it can no longer be found (the spec, where it came from and why are
            named), or ``spec`` names another environment than the run's.
    """
    ref = record.extensions.get("env")
    if spec is not None and redact_spec(spec) not in {redact_spec(record.env), redact_spec(record.spec_of("env") or "")}:
        raise RunDirError(f"{directory or 'run'}: the spec {redact_spec(spec)!r} is not the environment of the run "
                          f"({record.env!r})")
    spec = spec or record.spec_of("env") or record.env
    kept = in_process(spec)
    if kept is not None:
        return as_benchmark(kept)
    try:
        return benchmark_entry(spec).obj
    except (UnknownNameError, ExtensionError, TypeError) as exc:
        where = f" ({ref.source}{f', {ref.distribution} {ref.version}' if ref and ref.distribution else ''})" if ref else ""
        why = NOT_IMPORTABLE_HINT if spec.startswith("<object ") else str(exc)
        raise RunDirError(
            f"{directory or 'run'}: run.json names environment {spec!r}{where}, which can no longer be "
            f"found: {why}"
        ) from None

"""Run directories as training data: supervised fine-tuning conversations in the OpenAI chat
format, and preference pairs in the shape of TRL's DPO trainer (``toolgym export``).

Each trajectory becomes one conversation: the prompt the episode started from
(``env.prompt(example)``: the environment's instructions as the system message, then the
example's input), each model turn as an assistant message (``tool_calls`` with their ids), each
tool result as a tool message answering its call, and the final answer
(:mod:`toolgym.openai_format`). The tools are the environment's, in the OpenAI function format.

The system prompt is the environment's: that is what the ``tool_calling``, ``oracle`` and
graph agents and the Gymnasium adapter send. Agents that write their own prompt (``react_json``,
``xml_prompting``) and the bundled local model's extra ``final_answer`` tool are not
reproduced: their trajectories export with the environment's prompt and tools.
"""

from __future__ import annotations

import json
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.api import load_run
from toolgym.benchmark import Benchmark
from toolgym.openai_format import prompt_messages, step_messages, tool_schemas, validate_chat
from toolgym.records import BINARY, Example, Measure, Trajectory
from toolgym.runio import Run, RunDirError
from toolgym.runner import benchmark_of

__all__ = ["FORMATS", "Condition", "ExportResult", "conversation", "export_runs", "parse_condition"]

FORMATS = ("openai-chat", "preference")

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([\w.:-]+)\s*(>=|<=|==|!=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)\s*$")


@dataclass(frozen=True)
class Condition:
    """A filter on one grader's value: ``GRADER OP VALUE`` (``steps_exact>=1``).

    A trajectory without a value for the grader (not graded, not applicable, unscored) never
    satisfies it."""

    grader: str
    op: str
    value: float

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` satisfies the condition."""
        return value is not None and _OPS[self.op](value, self.value)


def parse_condition(text: str) -> Condition:
    """Parse ``GRADER>=VALUE`` (operators ``>= <= == != > <``).

    Raises:
        ValueError: naming the text when it is not of that form.
    """
    m = _CONDITION.match(text)
    if not m:
        raise ValueError(f"--where {text!r}: expected GRADER>=VALUE (operators >= <= == != > <)")
    return Condition(m.group(1), m.group(2), float(m.group(3)))


@dataclass
class ExportResult:
    """What :func:`export_runs` wrote.

    Attributes:
        records: Lines written.
        trajectories: Trajectories read from the runs.
        kept: Trajectories that passed the filters.
        skipped: Why trajectories or records were left out, with counts.
    """

    records: int = 0
    trajectories: int = 0
    kept: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class _Conversations:
    """Builds conversations, reusing one reset environment per example for the prompt and
    tools (resetting may build a database)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}

    def prompt_and_tools(self, benchmark: Benchmark, example: Example) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        key = (id(benchmark), example.id)
        if key not in self._cache:
            env = benchmark.environment()
            try:
                env.reset(example)
                self._cache[key] = (prompt_messages(env, example), tool_schemas(env))
            finally:
                env.close()
        prompt, tools = self._cache[key]
        return json.loads(json.dumps(prompt)), json.loads(json.dumps(tools))


def conversation(benchmark: Benchmark, example: Example, trajectory: Trajectory) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages, tools)`` of one trajectory in the OpenAI chat format (see the module
    docstring)."""
    prompt, tools = _Conversations().prompt_and_tools(benchmark, example)
    return prompt + step_messages(trajectory.steps), tools


def _tokens(trajectory: Trajectory) -> list[dict[str, Any] | None]:
    """One entry per model turn (so per assistant message): its token record or ``None``."""
    return [s.tokens.model_dump() if s.tokens is not None else None for s in trajectory.model_steps]


def export_runs(
    directories: Sequence[str | Path],
    out: str | Path,
    fmt: str = "openai-chat",
    *,
    where: Iterable[Condition] = (),
    status: Iterable[str] = (),
    envs: Iterable[str] = (),
    with_tokens: bool = False,
    pass_grader: str | None = None,
) -> ExportResult:
    """Write the trajectories of run directories as JSON Lines training data.

    Formats:

    * ``openai-chat``: one line per trajectory, ``{"messages": [...], "tools": [...]}`` (the
      OpenAI chat fine-tuning format), after the filters.
    * ``preference``: for each example (same environment, over all the runs given) with both
      a passing and a failing trajectory after the filters, pairs ``{"prompt": [...],
      "chosen": [...], "rejected": [...], "tools": [...]}``: the prompt messages, then the
      rest of a passing and of a failing conversation (TRL's conversational preference
      format). Each failing trajectory is paired with one passing one, the passing ones taken
      in turn. Passing is ``pass_grader``'s pass rule (its :class:`~toolgym.Measure`;
      default: each run's first grader); an unscored trajectory is neither.

    With ``with_tokens`` each line also has ``tokens`` (``chosen_tokens`` and
    ``rejected_tokens`` for pairs): one entry per assistant message, the turn's
    :class:`~toolgym.TokenRecord` as a dict, or ``None`` where none was recorded.

    Every record is checked with :func:`toolgym.openai_format.validate_chat` before it is
    written; one that fails is left out and counted in ``skipped``.

    Args:
        directories: Run directories (``toolgym run``, ``evaluate(out=...)``, the Gymnasium
            adapter's ``out=``).
        out: The JSONL file to write (its folder is created).
        fmt: One of :data:`FORMATS`.
        where: Conditions every kept trajectory satisfies.
        status: Keep only these statuses (``completed``, ``step_limit``, ``error``); empty:
            all but ``error``.
        envs: Keep only these environments; empty: all.
        with_tokens: Add the recorded tokens.
        pass_grader: The grader deciding passing and failing for ``preference``.

    Returns:
        What was written and skipped.

    Raises:
        ValueError: for an unknown format.
        RunDirError: for an unreadable run directory, or one whose dataset cannot be read.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    where, statuses, env_set = list(where), set(status) or {"completed", "step_limit"}, set(envs)
    result = ExportResult()
    conversations = _Conversations()
    records: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[tuple[Trajectory, Example, Benchmark, bool | None]]] = defaultdict(list)
    for directory in directories:
        run = load_run(directory)
        if run.examples is None:
            raise RunDirError(f"{directory}: cannot read the run's dataset: {run.problem}")
        benchmark = benchmark_of(run.record, run.directory)
        values = {(s.example_id, s.trial, s.grader): s.value for s in run.scores}
        judge = pass_grader or (run.graders[0] if run.graders else None)
        measure = _measure(run, judge)
        for traj in run.trajectories:
            result.trajectories += 1
            if env_set and traj.env not in env_set:
                result.skipped["other environment"] += 1
                continue
            if traj.status not in statuses:
                result.skipped[f"status {traj.status}"] += 1
                continue
            failed = next((c for c in where if not c.holds(values.get((traj.example_id, traj.trial, c.grader)))), None)
            if failed is not None:
                result.skipped[f"not {failed.grader}{failed.op}{failed.value:g}"] += 1
                continue
            example = run.examples.get(traj.example_id)
            if example is None:
                result.skipped["example not in the dataset"] += 1
                continue
            result.kept += 1
            if fmt == "openai-chat":
                prompt, tools = conversations.prompt_and_tools(benchmark, example)
                record: dict[str, Any] = {"messages": prompt + step_messages(traj.steps), "tools": tools}
                if with_tokens:
                    record["tokens"] = _tokens(traj)
                records.append(record)
            else:
                passed = measure.passed(values.get((traj.example_id, traj.trial, judge))) if judge else None
                groups[(traj.env, traj.example_id)].append((traj, example, benchmark, passed))
    for (_, _), members in groups.items():
        passing = [m for m in members if m[3] is True]
        failing = [m for m in members if m[3] is False]
        if not passing or not failing:
            result.skipped["example without both a passing and a failing trajectory"] += len(members)
            continue
        for i, (bad, example, benchmark, _) in enumerate(failing):
            good = passing[i % len(passing)][0]
            prompt, tools = conversations.prompt_and_tools(benchmark, example)
            pair: dict[str, Any] = {
                "prompt": prompt, "chosen": step_messages(good.steps), "rejected": step_messages(bad.steps),
                "tools": tools,
            }
            if with_tokens:
                pair["chosen_tokens"], pair["rejected_tokens"] = _tokens(good), _tokens(bad)
            records.append(pair)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            if _problems(record):
                result.skipped["record failed validation"] += 1
                continue
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            result.records += 1
    result.skipped = dict(result.skipped)
    return result


def _measure(run: Run, grader: str | None) -> Measure:
    if grader is None:
        return BINARY
    return run.record.measures.get(grader, BINARY)


def _problems(record: dict[str, Any]) -> list[str]:
    if "messages" in record:
        return validate_chat(record["messages"], record["tools"])
    prompt = record["prompt"]
    return validate_chat(prompt + record["chosen"], record["tools"]) + validate_chat(prompt + record["rejected"], record["tools"])

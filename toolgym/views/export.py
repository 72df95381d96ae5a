"""Run directories as training data: supervised fine-tuning conversations in the OpenAI chat
format, and preference pairs in the shape of TRL's DPO trainer (``toolgym export``).

Each trajectory becomes one conversation: the prompt the episode started from
(``env.prompt(example)``: the environment's instructions as the system message, then the
example's input), each model turn as an assistant message (``tool_calls`` with their ids), each
tool result as a tool message answering its call, and the final answer
(:mod:`toolgym.openai_format`). The tools are the environment's, in the OpenAI function format.

A trajectory imported from a result file (``grade --result``, agent ``imported``) has the
model's calls and no tool results: its conversation ends with the assistant message holding
the calls, which are the target (a JMultiWOZ-TC turn is one decision; OpenAI's fine-tuning
guide writes tool-calling examples so). When the trajectory names its line (``source_line``),
its model step's text is that line of the file, not words of the model, so the assistant
message has no text; a turn without a call is then an empty assistant message.

Reasoning (``ModelStep.reasoning``: ``<think>`` blocks, ``reasoning_content``) is not exported:
assistant messages carry the text outside the reasoning and the tool calls.

Call ids must be unique in a conversation (:func:`toolgym.openai_format.validate_chat`); some
providers (toolgym's scripted one, some servers) repeat ids across turns, so a repeated id is
renamed ``ID~N`` in the export, in the call and in the tool message answering it.

The system prompt is the environment's: that is what the ``tool_calling``, ``oracle`` and
graph agents and the Gymnasium adapter send. Agents that write their own prompt (``react_json``,
``xml_prompting``) and the bundled local model's extra ``final_answer`` tool are not
reproduced: their trajectories export with the environment's prompt and tools.
"""

from __future__ import annotations

import difflib
import json
import math
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
from toolgym.runio import IMPORTED_AGENT, Run, RunDirError, RunRecord, redact_spec, refuse_run_file
from toolgym.runner import benchmark_of
from toolgym.views.rundata import measure_for

__all__ = ["FORMATS", "Condition", "ExportResult", "conversation", "export_runs", "parse_condition"]

FORMATS = ("openai-chat", "preference")

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([\w.:-]+)\s*(>=|<=|==|!=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)\s*$")
_RULE = re.compile(r"^\s*([\w.-]+):(pass|fail)\s*$")


@dataclass(frozen=True)
class Condition:
    """A filter on one grader's value: ``GRADER OP VALUE`` (``steps_exact>=1``), or
    ``GRADER:pass`` / ``GRADER:fail``, which read the grader's declared measure (its pass rule:
    ``step_ratio:pass`` keeps ratios of exactly 1, the best value of that two-sided measure).

    A trajectory without a value for the grader (not graded, not applicable, unscored) never
    satisfies it."""

    grader: str
    op: str
    value: float = math.nan

    @property
    def text(self) -> str:
        """The condition as written: ``steps_exact>=1``, ``step_ratio:pass``."""
        return f"{self.grader}:{self.op}" if self.op in ("pass", "fail") else f"{self.grader}{self.op}{self.value:g}"

    def holds(self, value: float | None, measure: Measure = BINARY) -> bool:
        """Whether ``value`` satisfies the condition (``measure``: the grader's, for
        ``:pass`` and ``:fail``).

        Raises:
            ValueError: for ``:pass`` / ``:fail`` on a measure without a pass rule.
        """
        if self.op in ("pass", "fail"):
            if not measure.pass_fail:
                raise ValueError(f"--where {self.text}: grader {self.grader} has no pass rule ({measure.direction_text})")
            passed = measure.passed(value)
            return passed is not None and passed == (self.op == "pass")
        return value is not None and _OPS[self.op](value, self.value)


def parse_condition(text: str) -> Condition:
    """Parse ``GRADER>=VALUE`` (operators ``>= <= == != > <``).

    Raises:
        ValueError: naming the text when it is not of that form.
    """
    rule = _RULE.match(text)
    if rule:
        return Condition(rule.group(1), rule.group(2))
    m = _CONDITION.match(text)
    if not m:
        hint = " (quote it: the shell reads > as a redirection)" if text.strip() and not re.search(r"[<>=!]", text) else ""
        raise ValueError(
            f"--where {text!r}: expected 'GRADER>=VALUE' (operators >= <= == != > <) or GRADER:pass / GRADER:fail{hint}"
        )
    return Condition(m.group(1), m.group(2), float(m.group(3)))


@dataclass
class ExportResult:
    """What :func:`export_runs` wrote.

    Attributes:
        records: Lines written.
        trajectories: Trajectories read from the runs.
        kept: Trajectories that passed the filters.
        used: Trajectories in at least one written record (for ``preference``, a passing
            trajectory may be the chosen side of several pairs). Every trajectory read is
            either used or counted once in ``skipped``: ``used + sum(skipped.values()) ==
            trajectories``.
        skipped: Why trajectories or records were left out, with counts.
        first_skipped: For each reason of ``skipped``, the first trajectory left out for it,
            as ``"EXAMPLE_ID trial N"``.
        warnings: Things the caller should know (``with_tokens`` on runs without tokens,
            imported turns whose assistant messages have no text).
    """

    records: int = 0
    trajectories: int = 0
    kept: int = 0
    used: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def skip(self, reason: str, trajectory: Trajectory, detail: str | None = None) -> None:
        """Count one trajectory left out for ``reason`` (``detail``: what this one showed of it,
        kept for the first one only: a validation problem with its call ids)."""
        self.skipped[reason] += 1
        first = f"{trajectory.example_id} trial {trajectory.trial}"
        self.first_skipped.setdefault(reason, f"{first}: {detail}" if detail and detail != reason else first)


class _Conversations:
    """Builds conversations, reusing one reset environment per example for the prompt and
    tools (resetting may build a database)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        self._described: dict[int, tuple[Any, list[dict[str, Any]]]] = {}  # describe_once: env, tools

    def prompt_and_tools(self, benchmark: Benchmark | RunRecord, example: Example) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The prompt messages and the tools of an example, from an environment reset on it
        (once per environment when it declares ``describe_once``).

        Raises:
            RunDirError: when the environment cannot be reset (an MCP server that is gone),
                naming it and why.
        """
        if isinstance(benchmark, RunRecord):  # recorded by the run (RunRecord.described)
            return _recorded_prompt_and_tools(benchmark, example)
        key = (id(benchmark), example.id)
        if key not in self._cache:
            once = benchmark.environment.describe_once
            if once and id(benchmark) in self._described:
                env, tools = self._described[id(benchmark)]
                self._cache[key] = (prompt_messages(env, example), tools)
            else:
                env = benchmark.environment()
                try:
                    try:
                        env.reset(example)
                    except Exception as exc:
                        raise RunDirError(
                            f"environment {benchmark.name!r} cannot be reset to give the prompt and tools of example "
                            f"{example.id!r} ({type(exc).__name__}: {exc})"
                        ) from None
                    tools = tool_schemas(env)
                    self._cache[key] = (prompt_messages(env, example), tools)
                    if once:
                        self._described[id(benchmark)] = (env, tools)
                finally:
                    env.close()
        prompt, tools = self._cache[key]
        return json.loads(json.dumps(prompt)), json.loads(json.dumps(tools))


def _recorded_prompt_and_tools(record: RunRecord, example: Example) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The prompt and tools of an example from ``run.json``'s ``described`` (an environment
    class no process but the one that made the run can import): the recorded system message,
    then the example's input (a text as the user's message, a chat history as its messages)."""
    described = record.described or {}
    system = described.get("system")
    prompt: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    if isinstance(example.input, str):
        prompt.append({"role": "user", "content": example.input})
    else:
        prompt += [{"role": str(t.get("role", "user")), "content": t.get("content", "")} for t in example.input]
    return prompt, json.loads(json.dumps(described.get("tools") or []))


def conversation(benchmark: Benchmark, example: Example, trajectory: Trajectory) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages, tools)`` of one trajectory in the OpenAI chat format (see the module
    docstring)."""
    prompt, tools = _Conversations().prompt_and_tools(benchmark, example)
    return prompt + step_messages(_model_steps(trajectory)), tools


def _imported(trajectory: Trajectory) -> bool:
    """Whether ``trajectory`` was read from a result file: calls without tool results."""
    return trajectory.agent == IMPORTED_AGENT


def _model_steps(trajectory: Trajectory) -> list[Any]:
    """The steps to write: for a trajectory that names its line (``source_line``), its first
    model step without the text, which is that line of the result file, not the model's."""
    steps = list(trajectory.steps)
    if trajectory.source_line is not None:
        at = next((i for i, s in enumerate(steps) if s.kind == "model"), None)
        if at is not None and steps[at].text:
            steps[at] = steps[at].model_copy(update={"text": ""})
    return steps


def _messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The conversation of ``trajectory`` after its prompt, call ids made unique."""
    return _unique_call_ids(step_messages(_model_steps(trajectory)))


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
    arguments: str = "string",
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

    Tool-call ``arguments`` (``arguments``): ``"string"``, a string holding the JSON object,
    as the OpenAI chat format and its fine-tuning API take them; ``"object"``, the object
    itself, the convention of Hugging Face chat templates (``tokenizer.apply_chat_template``,
    so TRL's trainers): those templates write ``arguments | tojson``, which would encode a
    string a second time.

    Every record is checked with :func:`toolgym.openai_format.validate_chat` before it is
    written (before its arguments become objects; an imported trajectory's may end with its
    calls, see the module docstring); one that fails is left out and counted in ``skipped``
    under its first problem without the call ids it names (``end: calls never answered``), so
    that records with the same problem are one count; ``first_skipped`` has the first one's ids.
    When ``with_tokens`` is set and no kept trajectory of a run has tokens, ``warnings`` says
    so (once, naming those runs).

    Args:
        directories: Run directories (``toolgym run``, ``evaluate(out=...)``, the Gymnasium
            adapter's ``out=``).
        out: The JSONL file to write (its folder is created).
        fmt: One of :data:`FORMATS`.
        where: Conditions every kept trajectory satisfies.
        status: Keep only these statuses (``completed``, ``step_limit``, ``repeat_limit``, ``error``); empty:
            all but ``error``. Teacher-forced trajectories (``prefix_steps`` set) are always
            skipped: their first steps replay the reference, which no model wrote.
        envs: Keep only these environments; empty: all. Each must be the environment of one
            of the runs. An environment spec given with the credentials its run did not record
            (``mcp+http://user:pw@HOST/mcp``, recorded as ``mcp+http://***@HOST/mcp``) names
            that environment and is also the spec its prompt and tools are read from
            (:func:`toolgym.runio.redact_spec`).
        with_tokens: Add the recorded tokens.
        pass_grader: The grader deciding passing and failing for ``preference``.
        arguments: ``"string"`` or ``"object"`` (see above).

    Returns:
        What was written and skipped.

    Raises:
        ValueError: for an unknown format or ``arguments`` value, a ``where`` /
            ``pass_grader`` grader that none of the runs has (the runs' graders are named), or
            an ``envs`` name that no run is of (the runs' environments are named).
        RunDirError: for an unreadable run directory, or one whose dataset cannot be read, or
            an ``out`` that is a record file of a run directory (nothing is written).
    """
    refuse_run_file(out, "the export", directories)
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if arguments not in ARGUMENTS:
        raise ValueError(f"unknown arguments form {arguments!r}; known: {', '.join(ARGUMENTS)}")
    envs = list(envs)
    given_specs = {redact_spec(env): env for env in envs if redact_spec(env) != env}  # with credentials
    where, statuses, env_set = list(where), set(status) or {"completed", "step_limit", "repeat_limit"}, set(map(redact_spec, envs))
    result = ExportResult()
    conversations = _Conversations()
    # record, its trajectory (a pair's rejected side), open ends, a pair's chosen side
    records: list[tuple[dict[str, Any], Trajectory, tuple[bool, ...], Trajectory | None]] = []
    groups: dict[tuple[str, str], list[tuple[Trajectory, Example, Benchmark, bool | None]]] = defaultdict(list)
    runs = [load_run(directory) for directory in directories]
    for directory, run in zip(directories, runs, strict=True):
        if run.examples is None:
            raise RunDirError(f"{directory}: cannot read the run's dataset: {run.problem}")
    _check_graders(runs, [c.grader for c in where], pass_grader)
    _check_envs(runs, env_set)
    without_tokens: list[str] = []
    for directory, run in zip(directories, runs, strict=True):
        assert run.examples is not None
        try:
            benchmark = benchmark_of(run.record, run.directory, spec=given_specs.get(redact_spec(run.record.env)))
        except RunDirError:
            if run.record.described is None:
                raise
            benchmark = run.record  # the class is not importable here: the recorded prompt and tools
        kept_before, tokens_seen, lines_kept = result.kept, False, 0
        values = {(s.example_id, s.trial, s.grader): s.value for s in run.scores}
        judge = pass_grader or (run.graders[0] if run.graders else None)
        measure = _measure(run, judge)
        measures = {c.grader: _measure(run, c.grader) for c in where}
        for traj in run.trajectories:
            result.trajectories += 1
            if env_set and traj.env not in env_set:
                result.skip("other environment", traj)
                continue
            if traj.status not in statuses:
                result.skip(f"status {traj.status}", traj)
                continue
            if traj.prefix_steps is not None:  # its first steps are the reference's, not a model's
                result.skip("teacher-forced", traj)
                continue
            failed = next(
                (c for c in where if not c.holds(values.get((traj.example_id, traj.trial, c.grader)), measures[c.grader])),
                None,
            )
            if failed is not None:
                result.skip(f"not {failed.text}", traj)
                continue
            example = run.examples.get(traj.example_id)
            if example is None:
                result.skip("example not in the dataset", traj)
                continue
            result.kept += 1
            tokens_seen = tokens_seen or any(s.tokens is not None for s in traj.model_steps)
            if traj.source_line is not None:
                lines_kept += 1
            if fmt == "openai-chat":
                prompt, tools = conversations.prompt_and_tools(benchmark, example)
                record: dict[str, Any] = {"messages": prompt + _messages(traj), "tools": tools}
                if with_tokens:
                    record["tokens"] = _tokens(traj)
                records.append((record, traj, (_imported(traj),), None))
            else:
                passed = measure.passed(values.get((traj.example_id, traj.trial, judge))) if judge else None
                groups[(traj.env, traj.example_id)].append((traj, example, benchmark, passed))
        if with_tokens and result.kept > kept_before and not tokens_seen:
            without_tokens.append(str(directory))
        if lines_kept:
            result.warnings.append(
                f"{directory}: {lines_kept} trajectories imported from a result file, which records each turn's calls "
                "and no reply: their assistant messages have no text (a turn without a call is an empty assistant "
                "message), and a turn with calls ends with them (no tool results)"
            )
    if without_tokens:
        result.warnings.append(
            f"--with-tokens: no exported trajectory of {', '.join(without_tokens)} has recorded tokens "
            "(record them with run --record-tokens, or a Gymnasium action's \"tokens\"); their tokens are null"
        )
    for (_, _), members in groups.items():
        passing = [m for m in members if m[3] is True]
        failing = [m for m in members if m[3] is False]
        if not passing or not failing:
            for member in members:
                result.skip("example without both a passing and a failing trajectory", member[0])
            continue
        for i, (bad, example, benchmark, _) in enumerate(failing):
            good = passing[i % len(passing)][0]
            prompt, tools = conversations.prompt_and_tools(benchmark, example)
            pair: dict[str, Any] = {
                "prompt": prompt, "chosen": _messages(good), "rejected": _messages(bad), "tools": tools,
            }
            if with_tokens:
                pair["chosen_tokens"], pair["rejected_tokens"] = _tokens(good), _tokens(bad)
            records.append((pair, bad, (_imported(good), _imported(bad)), good))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    used: set[int] = set()  # id() of each trajectory in a written record
    failed: set[int] = set()  # id() of each trajectory skipped for its record's problem
    with open(path, "w", encoding="utf-8") as fh:
        for record, traj, open_end, chosen in records:
            problems = _problems(record, open_end)
            if problems:
                first = _MESSAGE_INDEX.sub("", problems[0])
                result.skip(f"record failed validation: {_problem_kind(first)}", traj, first)
                failed.add(id(traj))
                continue
            if arguments == "object":
                record = _object_arguments(record)
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            result.records += 1
            used.update({id(traj)} if chosen is None else {id(traj), id(chosen)})
    result.used = len(used)
    for members in groups.values():  # the rest of an example that made pairs: no pair used them
        if not any(m[3] is True for m in members) or not any(m[3] is False for m in members):
            continue  # skipped above
        for traj, _, _, passed in members:
            if id(traj) in used or id(traj) in failed:
                continue
            if passed is None:
                result.skip("no score by the pass grader", traj)
            else:
                result.skip("passing trajectory in no pair (its example has fewer failing trajectories, "
                            "or their pairs failed validation)", traj)
    result.skipped = dict(result.skipped)
    return result


_MESSAGE_INDEX = re.compile(r"^message \d+: ")
_CALL_IDS = [  # the call ids in validate_chat's problems, so that one kind of problem is counted once
    (re.compile(r"\bcalls \[.*?\] "), "calls "),
    (re.compile(r"\barguments of .+? are not"), "arguments of a call are not"),
    (re.compile(r"\bcall \S+ names"), "a call names"),
    (re.compile(r"\btool call id .+? missing"), "a tool call id missing"),
    (re.compile(r"\banswers .+?, not a call"), "answers an id that is not a call"),
    (re.compile(r"\bcall .+? answered twice"), "a call answered twice"),
]


def _problem_kind(problem: str) -> str:
    """A problem of :func:`validate_chat` without the call ids it names: ``end: calls
    ['line2_0'] never answered`` -> ``end: calls never answered``."""
    for pattern, replacement in _CALL_IDS:
        problem = pattern.sub(replacement, problem)
    return problem


ARGUMENTS = ("string", "object")
"""How :func:`export_runs` writes tool-call arguments."""


def _object_arguments(record: dict[str, Any]) -> dict[str, Any]:
    """A validated record with each tool call's ``arguments`` string decoded to its object."""
    def convert(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            if m.get("tool_calls"):
                m = {**m, "tool_calls": [
                    {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                    for c in m["tool_calls"]
                ]}
            out.append(m)
        return out

    return {k: convert(v) if k in ("messages", "prompt", "chosen", "rejected") else v for k, v in record.items()}


def _check_graders(runs: Sequence[Run], wanted: Iterable[str], pass_grader: str | None) -> None:
    """Raise ValueError for a grader of ``--where`` / ``--pass-grader`` that no run has, or a
    ``--pass-grader`` without a pass rule (it would make no pair)."""
    known = list(dict.fromkeys(g for run in runs for g in run.graders))
    for option, name in [*(("--where", g) for g in wanted), *([("--pass-grader", pass_grader)] if pass_grader else [])]:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"{option}: unknown grader {name!r}: the runs have {', '.join(known) or 'no graders'}{hint}"
        )
    if pass_grader:
        rules = [measure_for(run, pass_grader) for run in runs if pass_grader in run.graders]
        if rules and not any(m.pass_fail for m in rules):
            with_rule = [g for g in known if any(g in run.graders and measure_for(run, g).pass_fail for run in runs)]
            raise ValueError(f"--pass-grader: grader {pass_grader!r} has no pass rule, so no trajectory passes or "
                             f"fails by it; graders with one: {', '.join(with_rule) or '(none)'}")


def _unique_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each repeated (or missing) tool call id renamed ``ID~N``, in the
    assistant message's call and in the tool message answering it (the first tool message with
    that id after the call, in call order). Messages with nothing to rename are kept as they are."""
    seen: set[str] = set()
    renamed: dict[str, list[str]] = {}
    out = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            renamed = {}
            calls = []
            for call in message["tool_calls"]:
                cid = call.get("id") if isinstance(call.get("id"), str) else ""
                new = cid
                n = 1
                while not new or new in seen:
                    new, n = f"{cid}~{n}", n + 1
                seen.add(new)
                renamed.setdefault(cid, []).append(new)
                calls.append(call if new == cid else {**call, "id": new})
            message = {**message, "tool_calls": calls}
        elif message.get("role") == "tool" and renamed.get(message.get("tool_call_id"), []):
            message = {**message, "tool_call_id": renamed[message["tool_call_id"]].pop(0)}
        out.append(message)
    return out


def _measure(run: Run, grader: str | None) -> Measure:
    if grader is None:
        return BINARY
    return measure_for(run, grader)  # recorded, else the installed grader's, else inferred


def _problems(record: dict[str, Any], open_end: tuple[bool, ...]) -> list[str]:
    """The validation problems of a record (``open_end``: per conversation, whether its last
    calls may stay unanswered: an imported trajectory's)."""
    if "messages" in record:
        return validate_chat(record["messages"], record["tools"], open_end=open_end[0])
    prompt, tools = record["prompt"], record["tools"]
    return (validate_chat(prompt + record["chosen"], tools, open_end=open_end[0])
            + validate_chat(prompt + record["rejected"], tools, open_end=open_end[1]))


def _check_envs(runs: Sequence[Run], wanted: set[str]) -> None:
    """Raise ValueError for an ``--env`` that none of the runs is of (it would keep nothing)."""
    known = list(dict.fromkeys([run.record.env for run in runs] + [t.env for run in runs for t in run.trajectories]))
    for name in sorted(wanted - set(known)):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"--env: no run is of environment {name!r}: the runs are of {', '.join(known)}{hint}")

"""Serialised records: examples, trajectories (steps), scores.

Every record is a pydantic model with a ``schema_version`` so stored runs stay readable. Data
flows one way: Example → (environment + agent) → Trajectory → graders → Score.
"""

from __future__ import annotations

import math
import re
import weakref
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from toolgym.matchers import SpecError
from toolgym.milestones import Plan, compile_plan

SCHEMA_VERSION = 1

JSONValue = Any

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def without_surrogates(value: Any) -> Any:
    """``value`` with every surrogate code point (U+D800-U+DFFF) in its strings and dict keys
    replaced by U+FFFD REPLACEMENT CHARACTER; the same object when there is none.

    A Python string decoded from JSON can hold a lone surrogate (``"\\ud800"`` is valid JSON
    syntax, RFC 8259 section 8.2), which no UTF-8 encoder accepts, so a record holding one
    could not be written. Replacing an ill-formed code unit with U+FFFD is the Unicode
    Standard's practice (chapter 3, "U+FFFD Substitution of Maximal Subparts").

    Args:
        value: A JSON value (str, list, tuple, dict, number, bool, None) or anything else
            (returned as it is).
    """
    if isinstance(value, str):
        return value if value.isascii() or _SURROGATE.search(value) is None else _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        pairs = [(k, v, without_surrogates(k), without_surrogates(v)) for k, v in value.items()]
        if all(k is k2 and v is v2 for k, v, k2, v2 in pairs):
            return value
        return {k2: v2 for _, _, k2, v2 in pairs}
    if isinstance(value, list | tuple):
        items = [without_surrogates(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    return value


class ToolCallSpec(BaseModel):
    """A tool call by name with its arguments (used for expected calls and JMultiWOZ-TC gold)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    turn: int | None = Field(default=None, ge=1, exclude_if=lambda value: value is None)
    """In a multi-turn example: the user turn (1-based) whose answer makes this call; ``None``
    is turn 1 (and left out of ``model_dump``, so a single-turn call dumps as before). The
    ``oracle`` agent plays each turn's calls in that turn."""


class UserSpec(BaseModel):
    """A simulated user (``Example.user``): a chat model plays the user from ``instructions``.

    Attributes:
        instructions: What the user wants and knows (the simulator's system prompt); never
            shown to the agent.
        max_turns: The most user turns of the conversation, the example's ``input`` (turn 1)
            included; the conversation ends there if the user has not stopped before.
    """

    model_config = ConfigDict(extra="forbid")

    instructions: str = Field(min_length=1)
    max_turns: int = Field(ge=1)


_PLANS: dict[int, tuple[Any, Plan]] = {}
"""id(example) → (its milestones list, their compiled plan), dropped when the example is
collected (pydantic models take no private state that unvalidated construction keeps)."""


class Example(BaseModel):
    """One task instance, one line of a dataset's JSONL file.

    Attributes:
        id: Unique within the dataset.
        input: The user's request: a string, or a chat history as a list of
            ``{"role": "user"|"assistant"|"system", "content": str}`` messages.
        expected_steps: Tool names the reference solution calls, in order; derived from
            ``expected_calls`` when only those are given.
        expected_calls: The reference solution's calls with arguments (lets the ``oracle``
            agent replay it); when given, its names must equal ``expected_steps``.
        order_matters: When false, ``steps_exact`` compares the tool names as multisets.
        reference: The reference answer (string or number), if the task has one.
        expected_state: The environment state the reference solution reaches, if graded.
        metadata: Free-form; ``n_steps`` and ``difficulty`` are used by the breakdowns.
        milestones: The steps a trajectory must take, as a partial order with argument
            matchers (:mod:`toolgym.milestones`); graded by ``trajectory_match`` and its
            companions. Kept as written; the compiled form is :attr:`plan`.
        minefields: Calls and states that fail a trajectory.
        read_only: Glob patterns of the tools that only read.
        extra_calls: ``forbid`` (default), ``allow_read_only`` or ``allow``: whether calls
            matched to no milestone are errors.
        turns: Scripted user messages that follow ``input``: user turn ``k + 1`` is
            ``turns[k - 1]`` (turn 1 is ``input``). Each arrives once the agent has answered
            the previous one without a tool call, in the same conversation and environment.
        user: A simulated user instead of ``turns`` (:class:`UserSpec`; a chat model given
            by ``--user-model`` plays it).
        expected_states: The state after each user turn, one per turn (``1 + len(turns)``
            with ``turns``, at most ``user.max_turns`` with ``user``, else 1); only the keys
            each names are compared, by the ``turn_state`` grader.
        allowed_changes: JSON Pointer patterns (``fnmatch`` globs, ``*`` also crossing ``/``)
            of state paths the task may change beyond what its reference changes (a draft, a
            log line): ``collateral_damage`` counts no change there, nor below it.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    id: str
    input: str | list[dict[str, Any]]
    expected_steps: list[str] = Field(default_factory=list)
    expected_calls: list[ToolCallSpec] | None = None
    order_matters: bool = True
    reference: str | float | int | None = None
    expected_state: dict[str, JSONValue] | None = None
    metadata: dict[str, JSONValue] = Field(default_factory=dict)
    milestones: list[JSONValue] | None = None
    minefields: list[JSONValue] | None = None
    read_only: list[str] | None = None
    extra_calls: Literal["forbid", "allow_read_only", "allow"] | None = None
    turns: list[str] | None = None
    user: UserSpec | None = None
    expected_states: list[dict[str, JSONValue]] | None = None
    allowed_changes: list[str] | None = None

    @property
    def multi_turn(self) -> bool:
        """Whether more than one user turn may be played (``turns`` or ``user`` given)."""
        return self.turns is not None or self.user is not None

    @property
    def first_message(self) -> str:
        """The text of user turn 1: ``input``, or the last user message of an ``input`` given
        as a chat history."""
        if isinstance(self.input, str):
            return self.input
        users = [m.get("content") for m in self.input if isinstance(m, dict) and m.get("role") == "user"]
        last = users[-1] if users else ""
        return last if isinstance(last, str) else str(last)

    @property
    def plan(self) -> Plan | None:
        """The compiled milestones, minefields and extra-call policy, or ``None`` when the
        example has no ``milestones`` (compiled when the example is validated, kept while it
        lives; an example built without validation compiles on first use).

        Raises:
            ValueError: for a spec that does not compile (only for an example built without
                validation; validation refuses it first).
        """
        if self.milestones is None:
            return None
        found = _PLANS.get(id(self))
        if found is None or found[0] is not self.milestones:
            self._keep_plan(compile_plan(self.milestones, self.minefields, self.read_only, self.extra_calls))
            found = _PLANS[id(self)]
        return found[1]

    def _keep_plan(self, plan: Plan) -> None:
        if id(self) not in _PLANS:
            weakref.finalize(self, _PLANS.pop, id(self), None)
        _PLANS[id(self)] = (self.milestones, plan)

    @field_validator("allowed_changes")
    @classmethod
    def _pointer_patterns(cls, value: list[str] | None) -> list[str] | None:
        for i, pattern in enumerate(value or ()):
            if pattern and not pattern.startswith("/"):
                raise ValueError(
                    f"field allowed_changes[{i}]: {pattern!r} is not a JSON Pointer pattern (RFC 6901: it starts "
                    "with '/', e.g. '/users/*/last_login'; '' is the whole state)")
        return value

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _steps_from_calls(self) -> Example:
        """``expected_steps`` are the names of ``expected_calls`` when only calls are given;
        when both are given they must agree."""
        if self.expected_calls is not None:
            names = [c.name for c in self.expected_calls]
            if not self.expected_steps:
                self.expected_steps = names
            elif names != self.expected_steps:
                raise ValueError("expected_calls names must equal expected_steps")
        if self.milestones is not None:
            try:
                self._keep_plan(compile_plan(self.milestones, self.minefields, self.read_only, self.extra_calls))
            except SpecError as exc:
                raise ValueError(f"field {exc}") from None
        elif self.minefields is not None or self.read_only is not None or self.extra_calls is not None:
            given = [k for k in ("minefields", "read_only", "extra_calls") if getattr(self, k) is not None]
            raise ValueError(f"field {given[0]}: only meaningful with milestones (give 'milestones', even [])")
        self._check_turns()
        return self

    def _check_turns(self) -> None:
        """The multi-turn fields agree: ``turns`` or ``user``, not both; ``expected_states`` one
        per user turn; an expected call's ``turn`` within the turns."""
        if self.turns is not None and self.user is not None:
            raise ValueError("field user: give scripted 'turns' or a simulated 'user', not both")
        most = 1 + len(self.turns) if self.turns is not None else self.user.max_turns if self.user is not None else 1
        if self.expected_states is not None:
            n = len(self.expected_states)
            if self.user is not None:
                if not 1 <= n <= most:
                    raise ValueError(f"field expected_states: {n} state(s) for a simulated user of at most "
                                     f"{most} turn(s); give one per user turn, 1 to {most}")
            elif n != most:
                raise ValueError(f"field expected_states: {n} state(s) for {most} user turn(s) (input and "
                                 f"{most - 1} in turns); give one per user turn")
        last = 1
        for i, call in enumerate(self.expected_calls or []):
            if call.turn is not None and call.turn > most:
                raise ValueError(f"field expected_calls[{i}].turn: turn {call.turn} of an example with {most} user turn(s)")
            if (call.turn or 1) < last:
                raise ValueError(f"field expected_calls[{i}].turn: turn {call.turn or 1} after a call of turn {last} "
                                 "(the calls are listed in the order played)")
            last = call.turn or 1
        turns = {m.get("id"): m.get("turn") for m in self.milestones or [] if isinstance(m, dict)}
        for i, milestone in enumerate(self.milestones or []):
            if not isinstance(milestone, dict):
                continue
            turn = milestone.get("turn")
            if not isinstance(turn, int) or isinstance(turn, bool):
                continue
            if turn > most:
                raise ValueError(f"field milestones[{i}].turn: turn {turn} of an example with {most} user turn(s)")
            if "answer" in milestone and self.user is None and turn < most:
                raise ValueError(f"field milestones[{i}].turn: an answer milestone reads the final answer, which ends "
                                 f"the last user turn ({most}), not turn {turn}; for what the agent says in turn "
                                 f"{turn}, use a message milestone")
            for a in milestone.get("after") or []:
                later = turns.get(a) if isinstance(a, str) else None
                if isinstance(later, int) and later > turn:
                    raise ValueError(f"field milestones[{i}].after: {a!r} belongs to user turn {later}, later than "
                                     f"this milestone's turn {turn}, so it can never be matched before it")


class ToolCall(BaseModel):
    """A tool call as the model emitted it.

    Attributes:
        id: The provider's call id (or one made up by the agent).
        name: The tool name as written by the model (may be unknown to the environment).
        arguments: Parsed arguments; ``{}`` when they could not be parsed.
        malformed: Why the call could not be parsed (arguments not JSON, call written as text,
            ...), or ``None`` for a well-formed call. A malformed call is sent back to the model
            as an error observation.
        raw: The unparsed text of a malformed call.
    """

    id: str
    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    malformed: str | None = None
    raw: str | None = None


class TokenRecord(BaseModel):
    """The exact tokens of one model turn, for training without re-tokenising text.

    Attributes:
        prompt_ids: Token ids of the whole prompt the model read (chat template applied).
        completion_ids: Token ids the model generated, in order (an end-of-turn token
            included when the model produced one), or ``None`` when the provider does not
            give them.
        completion_logprobs: Natural-log probability of each generated token, aligned with
            ``completion_ids``, or ``None`` when the provider does not give them. What the
            probability is taken over is provider-specific and named in ``logprob_source``.
        logprob_source: How ``completion_logprobs`` were obtained (for example the model's
            own softmax before a grammar mask), or ``None``.
    """

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    logprob_source: str | None = None


class ModelStep(BaseModel):
    """One model turn: its text and every tool call it made.

    Attributes:
        latency_s: Wall-clock seconds of the model call (including retries).
        text: The reply outside its reasoning (what is parsed for calls and answers).
        input_tokens / output_tokens: As reported by the model, else ``None``
            (``output_tokens`` includes the reasoning tokens).
        reasoning: The model's reasoning ("thinking") text, sent apart by the provider
            (``reasoning_content``, thinking blocks) or written inline (``<think>…</think>``);
            shown by the views, never parsed or graded. ``None`` when there was none.
        reasoning_tokens: Reasoning tokens as reported by the provider, else ``None``.
        tokens: Prompt and completion token ids and completion log-probabilities, recorded
            with ``--record-tokens`` where the provider gives them, else ``None``.
    """

    kind: Literal["model"] = "model"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    latency_s: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    tokens: TokenRecord | None = None


class ToolStep(BaseModel):
    """One tool execution and its observation.

    Attributes:
        error: True when the tool reported an expected failure (bad argument, unknown tool,
            malformed call); the agent saw ``output`` as an error observation.
        malformed: True when the call could not be parsed and was never executed.
        rejected: True when the environment refused the call before running the tool (unknown
            tool, arguments that do not fit its parameters): the step it names was not taken.
        state_patch: How this step changed the environment's state: an RFC 6902 JSON Patch
            (a list of ``{"op", "path", ...}`` operations) from the state before the step to
            the state after it, ``[]`` when it changed nothing, ``None`` when not recorded
            (an older run, an imported file, or recording stopped: see
            :attr:`Trajectory.state_note`). :func:`states_after` rebuilds the states.
    """

    kind: Literal["tool"] = "tool"
    call_id: str
    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    output: str = ""
    error: bool = False
    malformed: bool = False
    rejected: bool = False
    state_patch: list[dict[str, JSONValue]] | None = None


class UserStep(BaseModel):
    """One user message of a multi-turn episode, recorded where it arrived.

    Recorded for every user turn of an example with ``turns`` or ``user`` (turn 1, the
    ``input``, included), so the turn of any later step is the ``turn`` of the last user step
    before it (:meth:`Trajectory.turns`). A single-turn episode records none.

    Attributes:
        text: The message the agent received.
        turn: The user turn it starts (1-based).
        stop: True for a simulated user's closing message, the one that carried the stop
            token (removed from ``text``): it starts no turn (``turn`` is the turn it ends)
            and never reaches the agent.
        latency_s / input_tokens / output_tokens: The simulated user's model call (``None``
            for a scripted message); never counted as the agent's.
    """

    kind: Literal["user"] = "user"
    text: str = ""
    turn: int = 1
    stop: bool = False
    latency_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


Step = Annotated[ModelStep | ToolStep | UserStep, Field(discriminator="kind")]

Status = Literal["completed", "step_limit", "repeat_limit", "error", "aborted", "abandoned"]

UNSCORED_STATUSES: tuple[str, ...] = ("error", "aborted")
"""Statuses whose trajectories are not graded: the episode was cut short by toolgym, a tool,
the provider, the transport or the operator, so its steps are no verdict on the agent. Every
view counts them apart (the summary's ``errors``), outside every denominator. An ``abandoned``
episode (the agent walked away) is graded and counted: leaving is the agent's failure."""


class Trajectory(BaseModel):
    """Everything that happened in one (example, trial) episode; one line of trajectories.jsonl.

    Attributes:
        status: ``completed`` (the agent stopped by itself), ``step_limit`` (stopped after
            ``max_steps`` model turns; steps so far kept), ``repeat_limit`` (stopped by the
            repeat guard after ``max_repeats`` identical consecutive tool calls, the last one
            executed; steps so far kept) or ``error`` (a bug in a tool, or a
            model call that failed after its retries, or a tool result the transport could not
            carry; see ``error``), ``aborted`` (stopped mid-episode by something other than the
            agent: a server stopped by its operator, a Gymnasium loop that reset before the end;
            steps so far kept, not graded: :data:`UNSCORED_STATUSES`) or ``abandoned`` (the
            agent walked away mid-episode: an MCP client that closed its session, or went
            silent past the server's idle timeout, without ``end_episode``; graded as it stands,
            without a final answer, and counted like any other episode: leaving is the agent's
            failure, never a way out of a denominator).
        error: ``"ErrorType: message"`` when status is ``error``.
        final_state: ``Environment.read_state()`` at the end (JSON-safe snapshot).
        initial_state: ``Environment.read_state()`` after reset, before any step; with each
            tool step's ``state_patch`` it gives the state after every step
            (:func:`states_after`). ``None`` when not recorded.
        state_note: Why the states were not recorded for every step (the environment's cap
            :attr:`toolgym.Environment.state_record_chars` reached, ``read_state`` failing),
            else ``None``.
        final_answer: The agent's last text when it stopped, if any.
        duration_s: Wall-clock seconds of the whole episode.
        parent: For a fork (``toolgym fork``): the trajectory it continues, ``{"run": run
            directory, "example_id": str, "trial": int, "step": K}``, where tool step ``K`` is
            the first one the new agent played (steps before it were replayed); else ``None``.
        prefix_steps: For a teacher-forced episode (``--protocol teacher-forced``): how many
            reference tool steps were replayed before the model's first turn (``k - 1`` for
            step ``k`` of the reference path); ``None`` for a free-running episode.
        injected: The fault injected (``--inject KIND@K``): ``{"kind": "tool_error" |
            "wrong_value" | "empty", "step": K (1-based tool step), "output": the result the
            tool gave, or None when it was not executed}``; else ``None``.
        source_line: For a trajectory imported from a result file (``grade --result``; the file
            is named in ``run.json``'s ``result_file``): the line it was read from (1-based,
            lines ending at ``\\n``, ``\\r\\n`` or a lone ``\\r``), whose text, verbatim, is
            the ``text`` of its first model step. The record stores the number, not the text:
            :func:`toolgym.load_run` reads the text back from the file (an empty text, with a
            warning, when the file has moved or changed since the import). ``None`` otherwise.
        turn_states: For a multi-turn episode: ``Environment.read_state()`` after the
            agent's answer to each user turn, one per turn played (what ``turn_state``
            grades); ``None`` for a single-turn episode.
        user_model: The simulated user's model spec, when a model played the user.
    """

    schema_version: int = SCHEMA_VERSION
    example_id: str
    trial: int = 0
    env: str
    agent: str
    model: str | None = None
    status: Status
    error: str | None = None
    steps: list[Step] = Field(default_factory=list)
    final_state: dict[str, JSONValue] = Field(default_factory=dict)
    final_answer: str | None = None
    duration_s: float = 0.0
    initial_state: dict[str, JSONValue] | None = None
    state_note: str | None = None
    parent: dict[str, JSONValue] | None = None
    prefix_steps: int | None = None
    injected: dict[str, JSONValue] | None = None
    source_line: int | None = None
    turn_states: list[dict[str, JSONValue]] | None = None
    user_model: str | None = None

    @property
    def model_steps(self) -> list[ModelStep]:
        return [s for s in self.steps if s.kind == "model"]

    @property
    def user_steps(self) -> list[UserStep]:
        """The user messages of a multi-turn episode (``[]`` for a single-turn one)."""
        return [s for s in self.steps if s.kind == "user"]

    def turns(self) -> list[list[Step]]:
        """The steps grouped per user turn (:func:`turn_of_steps`): group ``k - 1`` holds user
        turn ``k``'s user step and the agent's steps that answer it. A single-turn episode
        (no user step) is one group of all its steps."""
        groups: list[list[Step]] = []
        for step, turn in zip(self.steps, turn_of_steps(self), strict=True):
            while len(groups) < turn:
                groups.append([])
            groups[turn - 1].append(step)
        return groups

    @property
    def tool_steps(self) -> list[ToolStep]:
        return [s for s in self.steps if s.kind == "tool"]

    @property
    def key(self) -> tuple[str, int]:
        return (self.example_id, self.trial)


def turn_of_steps(trajectory: Trajectory) -> list[int]:
    """The user turn (1-based) of every step of ``trajectory``, in step order: the ``turn`` of
    the last user step at or before it; 1 before any user step (a single-turn episode: all 1).
    """
    turn, out = 1, []
    for step in trajectory.steps:
        if step.kind == "user":
            turn = step.turn
        out.append(turn)
    return out


def states_after(trajectory: Trajectory) -> list[dict[str, JSONValue] | None]:
    """The environment's state after each tool step of ``trajectory``, rebuilt from its
    ``initial_state`` and the steps' ``state_patch`` (RFC 6902 JSON Patch, applied with the
    ``jsonpatch`` library).

    Returns:
        One entry per tool step (:attr:`Trajectory.tool_steps` order): the state as a dict,
        or ``None`` from the first step whose patch was not recorded on (and for every step
        when ``initial_state`` is ``None``: an older run, an imported file). A step that
        changed nothing shares its state object with the step before: read, never mutate.

    Raises:
        ValueError: when a stored patch does not apply to the state before it (a record
            edited by hand), naming the example, trial and tool step.
    """
    import jsonpatch

    state = trajectory.initial_state
    states: list[dict[str, JSONValue] | None] = []
    for k, step in enumerate(trajectory.tool_steps):
        if state is not None and step.state_patch is not None:
            try:
                state = jsonpatch.apply_patch(state, step.state_patch) if step.state_patch else state
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
                raise ValueError(
                    f"trajectory {trajectory.example_id!r} trial {trajectory.trial}: the state_patch of tool step "
                    f"{k + 1} does not apply: {exc}"
                ) from None
        else:
            state = None
        states.append(state)
    return states


class Score(BaseModel):
    """A grader's verdict on one trajectory; one line of scores.jsonl.

    Attributes:
        value: In [0, 1] for pass/fail graders, any non-negative number for ratios; ``None``
            (written as ``null``) when the trajectory could not be scored (for example an
            unparseable judge reply): reported as unscored, outside every denominator.
        explanation: One human-readable sentence.
        details: Grader-specific data (expected vs actual, the judge's prompt and reply, ...).
    """

    schema_version: int = SCHEMA_VERSION
    example_id: str
    trial: int = 0
    grader: str
    value: float | None
    explanation: str = ""
    details: dict[str, JSONValue] = Field(default_factory=dict)

    @field_validator("value", mode="before")
    @classmethod
    def _nan_to_none(cls, value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        return value


class Measure(BaseModel):
    """What a grader measures, declared once and read by every view (summary, ``show
    --failed``, ``compare``, statistics, report) and recorded in ``run.json``.

    Attributes:
        kind: ``binary`` (values 0 or 1), ``continuous`` (any real, e.g. a ratio or a
            log-likelihood) or ``categorical`` (a small set of coded outcomes).
        direction: ``higher`` or ``lower`` is better, or ``target``: a two-sided measure whose
            best value is ``target`` and which is worse the farther a value lies from it on
            either side (a ratio of steps taken to steps expected is best at 1).
        target: The best value of a ``target`` measure (required then, and only then).
        pass_if: The pass rule: the value compared with ``threshold`` by ``>=``, ``<=`` or
            ``==``; ``None`` when the grader has no pass/fail reading (a log-likelihood).
        threshold: The number ``pass_if`` compares with.
        aggregation: ``mean`` (mean with the standard error clustered by example,
            :func:`toolgym.stats.clustered_estimate`) or the name of a published formula that
            the suite computes over the whole run (for example the JMultiWOZ-TC rows).
        reference: Where the definition or the aggregation comes from.
        compares: What the grader compares, in a few words, when its name could suggest more
            (``steps_exact``: the tool names, not their arguments); every view shows it beside
            the rule (:func:`toolgym.views.rundata.rule_text`). ``""``: nothing to add.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["binary", "continuous", "categorical"] = "binary"
    direction: Literal["higher", "lower", "target"] = "higher"
    target: float | None = None
    pass_if: Literal[">=", "<=", "=="] | None = ">="
    threshold: float = 1.0
    aggregation: str = "mean"
    reference: str = ""
    compares: str = ""

    @model_serializer(mode="wrap")
    def _without_empty_compares(self, handler: Any) -> dict[str, Any]:
        """``compares`` is written only when set, so a run whose graders say nothing more
        reads in a toolgym from before the field."""
        data = handler(self)
        if not self.compares:
            data.pop("compares", None)
        return data

    @model_validator(mode="after")
    def _target_iff_two_sided(self) -> Measure:
        if self.direction == "target" and (self.target is None or not math.isfinite(self.target)):
            raise ValueError("a measure with direction 'target' needs a finite target (its best value)")
        if self.direction != "target" and self.target is not None:
            raise ValueError(f"target={self.target:g} only goes with direction 'target' (got {self.direction!r})")
        return self

    @property
    def pass_fail(self) -> bool:
        """Whether the grader gives a pass/fail reading (it has a pass rule)."""
        return self.pass_if is not None

    def passed(self, value: float | None) -> bool | None:
        """Whether ``value`` passes (``None`` for an unscored value or a grader without a
        pass rule)."""
        if value is None or self.pass_if is None or (isinstance(value, float) and math.isnan(value)):
            return None
        if self.pass_if == ">=":
            return value >= self.threshold
        if self.pass_if == "<=":
            return value <= self.threshold
        return value == self.threshold

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b`` in this grader's direction (for a
        ``target`` measure: strictly closer to the target)."""
        if self.direction == "target":
            return abs(a - self.target) < abs(b - self.target)
        return a > b if self.direction == "higher" else a < b

    @property
    def direction_text(self) -> str:
        """Which values are better, in words: ``"higher"``, ``"lower"`` or ``"best at 1"``."""
        return f"best at {self.target:g}" if self.direction == "target" else self.direction


BINARY = Measure()
"""A pass/fail grader: 1 passes, 0 fails; mean ± clustered standard error."""

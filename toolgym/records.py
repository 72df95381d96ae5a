"""Serialised records: examples, trajectories (steps), scores.

Every record is a pydantic model with a ``schema_version`` so stored runs stay readable. Data
flows one way: Example → (environment + agent) → Trajectory → graders → Score.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1

JSONValue = Any


class ToolCallSpec(BaseModel):
    """A tool call by name with its arguments (used for expected calls and JMultiWOZ-TC gold)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)


class Example(BaseModel):
    """One task instance, one line of a dataset's JSONL file.

    Attributes:
        id: Unique within the dataset.
        input: The user's request: a string, or a chat history as a list of
            ``{"role": "user"|"assistant"|"system", "content": str}`` messages.
        expected_steps: Tool names the reference solution calls, in order.
        expected_calls: The reference solution's calls with arguments (lets the ``oracle``
            agent replay it); when given, its names must equal ``expected_steps``.
        order_matters: When false, ``steps_exact`` compares the tool names as multisets.
        reference: The reference answer (string or number), if the task has one.
        expected_state: The environment state the reference solution reaches, if graded.
        metadata: Free-form; ``n_steps`` and ``difficulty`` are used by the breakdowns.
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

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @field_validator("expected_calls")
    @classmethod
    def _calls_match_steps(cls, calls, info):
        steps = info.data.get("expected_steps")
        if calls is not None and steps and [c.name for c in calls] != steps:
            raise ValueError("expected_calls names must equal expected_steps")
        return calls


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


class ModelStep(BaseModel):
    """One model turn: its text and every tool call it made.

    Attributes:
        latency_s: Wall-clock seconds of the model call (including retries).
        input_tokens / output_tokens: As reported by the model, else ``None``.
    """

    kind: Literal["model"] = "model"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    latency_s: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None


class ToolStep(BaseModel):
    """One tool execution and its observation.

    Attributes:
        error: True when the tool reported an expected failure (bad argument, unknown tool,
            malformed call); the agent saw ``output`` as an error observation.
        malformed: True when the call could not be parsed and was never executed.
    """

    kind: Literal["tool"] = "tool"
    call_id: str
    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    output: str = ""
    error: bool = False
    malformed: bool = False


Step = Annotated[ModelStep | ToolStep, Field(discriminator="kind")]

Status = Literal["completed", "step_limit", "error"]


class Trajectory(BaseModel):
    """Everything that happened in one (example, trial) episode; one line of trajectories.jsonl.

    Attributes:
        status: ``completed`` (the agent stopped by itself), ``step_limit`` (stopped after
            ``max_steps`` model turns; steps so far kept) or ``error`` (a bug in a tool, or a
            model call that failed after its retries; see ``error``).
        error: ``"ErrorType: message"`` when status is ``error``.
        final_state: ``Environment.read_state()`` at the end (JSON-safe snapshot).
        final_answer: The agent's last text when it stopped, if any.
        duration_s: Wall-clock seconds of the whole episode.
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

    @property
    def model_steps(self) -> list[ModelStep]:
        return [s for s in self.steps if s.kind == "model"]

    @property
    def tool_steps(self) -> list[ToolStep]:
        return [s for s in self.steps if s.kind == "tool"]

    @property
    def key(self) -> tuple[str, int]:
        return (self.example_id, self.trial)


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

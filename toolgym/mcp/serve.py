"""Serve an environment over the Model Context Protocol, recording and grading every episode.

``toolgym serve`` (stdio or streamable HTTP) lets an agent that runs elsewhere (an IDE agent,
Claude Code, an OpenAI Agents SDK app, a program in another language) play a dataset's
examples. Each MCP session has its own environment; beside the environment's tools (their JSON
schemas as the in-process agents' models see them) it offers two control tools:

* ``start_episode(example_id?)``: a fresh environment for that example (when no id is given,
  the next one in dataset order, over all sessions, that has trials left); returns the task:
  instructions, input and ``answer_with`` (:data:`ANSWER_WITH`: the final reply is
  ``end_episode``'s answer). An example is started at most ``trials`` times over the whole run
  (``--trials``, default 1; a continued run counts the trials it recorded); a further start is
  refused with a tool error naming the limit;
* ``end_episode(answer?)``: ends the episode and grades it on the server; the client is told
  only that it was recorded (example, trial, status). The scores and their explanations hold
  the reference answer, the expected calls and milestone ids, so an agent that saw them could
  replay an example with the gold answer (or retry until a bare pass): they reach the client
  only when the server was started with ``reveal_scores`` (``--reveal-scores``, for debugging or
  a training loop that wants feedback), which ``run.json`` records in ``agent.reveal_scores``.

Every episode becomes one trajectory appended to ``DIR/trajectories.jsonl`` and its scores to
``DIR/scores.jsonl``, exactly as a ``toolgym run`` (:func:`toolgym.runner.new_record`,
:func:`toolgym.runner.grade_trajectories`, :func:`toolgym.runner.finish_run`); ``run.json``
names the agent after the MCP client (its ``clientInfo`` name and version). The client's calls
are recorded as the model's turns (:meth:`Session._model_turn`: one turn per call, or one turn
for an environment whose protocol allows one, as JMultiWOZ-TC and BFCL) and its answer as the
last turn, so graders and exporters that read the model's turns see what an in-process agent's
trajectory gives them. Serving a directory
served before with the same settings continues it (a client configuration names the same
``--out`` at every launch): new episodes get the next trial numbers. A session that ends
mid-episode (the client disconnected, was killed and went silent for the idle timeout, or the
server was stopped) leaves a trajectory: ``abandoned`` when the client left (it closed the
session, or went silent for the idle timeout), graded as it stands and counted, since walking
away is the agent's failure and never a way to drop an episode it was failing; ``aborted``
when the server was stopped, not graded (not the agent's doing). Tool
errors and invalid arguments are results with ``isError: true`` carrying the messages the
in-process agents see; a broken tool ends the episode with status ``error``.

A multi-turn example with scripted ``turns`` is served as one episode: ``start_episode`` gives
user turn 1 (the input, ``user_turn`` 1); ``end_episode(answer)`` answers the current user
turn, and while the conversation has turns left its result is the next one, ``{"example_id",
"trial", "status": "running", "user_turn": k, "message": the user's message}``, not the end:
the client plays it with the same environment (the tool list may change, with a
``tools/list_changed`` notification) and answers with ``end_episode`` again. The episode is
recorded and graded when the last turn is answered. Examples with a simulated ``user`` are not
served (the server has no user model): the dataset is refused at start-up.

Definitions: MCP specification 2025-06-18, "Lifecycle", "Tools" and "Transports" (streamable
HTTP: Origin validation against DNS rebinding, loopback binding by default), and RFC 6750
(bearer tokens).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from langchain_core.messages import AIMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolgym.agents import Episode
from toolgym.data import DatasetError
from toolgym.environments import Environment, ToolBug
from toolgym.parsing import model_step
from toolgym.records import Example, ModelStep, Score, ToolCall, Trajectory, UserStep, without_surrogates
from toolgym.runio import (
    SCORES_FILE,
    TRAJECTORIES_FILE,
    JsonlAppender,
    RunDirError,
    read_jsonl,
    read_run,
    write_run,
)
from toolgym.runner import (
    RunResult,
    finish_run,
    grade_trajectories,
    load_run_examples,
    make_graders,
    new_record,
    resolve_benchmark,
)
from toolgym.users import ScriptedUser

__all__ = [
    "CONTROL_TOOLS",
    "LOOPBACK_HOSTS",
    "HttpSettings",
    "ServedRun",
    "build_server",
    "http_app",
    "serve_http",
    "serve_stdio",
]

log = logging.getLogger(__name__)
# the SDK warns on every call of a tool it has not listed (an unknown name is the agent's error,
# answered as one); keep stderr for what matters
logging.getLogger("mcp.server.lowlevel.server").setLevel(logging.ERROR)


class _ClosedStream(logging.Filter):
    """Drops the SDK's ``Error in standalone SSE writer`` traceback when the cause is the
    stream being closed: that is how every ordinary disconnect of an HTTP client ends."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        closed = isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream))
        return not (closed and record.getMessage().startswith("Error in standalone SSE writer"))


logging.getLogger("mcp.server.streamable_http").addFilter(_ClosedStream())


def _refusals_logged_alike() -> None:
    """Give the SDK's Host and Origin refusals (``mcp.server.transport_security``) one form,
    ``warning: refused a request: Invalid Origin header: ...``: without a handler of its own
    the first one went to Python's last-resort handler bare, and later ones, once the root
    logger had a handler, as ``WARNING:mcp.server.transport_security:...``."""
    security = logging.getLogger("mcp.server.transport_security")
    if not any(getattr(h, "toolgym", False) for h in security.handlers):
        handler = logging.StreamHandler()
        handler.toolgym = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("warning: refused a request: %(message)s"))
        security.addHandler(handler)
        security.propagate = False


class _ShutdownNoise(logging.Filter):
    """Drops uvicorn's ``ASGI callable returned without completing response`` once the server
    is shutting down (Ctrl-C, SIGTERM): the open streams it names are the sessions being closed
    on purpose, their episodes recorded as ``aborted``. The same line while serving is kept."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.server.should_exit and record.getMessage().startswith("ASGI callable returned without"))

START, END = "start_episode", "end_episode"
CONTROL_TOOLS = (START, END)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SERVER_INSTRUCTIONS = (
    "A toolgym environment. Call start_episode to receive a task (instructions and input), solve it "
    "with the other tools, then call end_episode with your final answer to have the episode graded."
)
NO_EPISODE = f"Error: no episode is running; call {START} first."
ABANDONED = (f"the client's session ended mid-episode without {END} (it closed the session, or stayed silent "
             "past the idle timeout): the agent walked away, graded as it stands")
"""The ``error`` of an ``abandoned`` trajectory (see :class:`toolgym.records.Trajectory`)."""
ANSWER_WITH = (
    f"Over MCP, your final reply is the `answer` of {END}: where the instructions say to reply in plain "
    f"text (without a tool), call {END} with that text; the episode is graded only when {END} is called."
)
"""The ``answer_with`` of every task: how the environment's instructions, written for an
in-process agent whose last reply is plain text, map onto the served protocol."""


class ServedRun:
    """The run directory of a server: the dataset, the graders and the files written.

    Args:
        env: An environment name or spec (as ``--env``), a ``Benchmark`` or an
            ``Environment`` subclass.
        out: The run directory: a new one, or one this server wrote before with the same
            environment, dataset, limit and graders, which is continued (new episodes are
            appended with the next trial numbers; see :meth:`_continue`).
        dataset: A path or built-in dataset name (``None``: the environment's ``test`` set).
        graders: Grader names or specs (``None``: the environment's own).
        grader_settings: As ``RunConfig.grader_settings`` (``judge_model``, ``judge_cache``).
        limit: Serve only the first N examples.
        transport: ``stdio`` or ``http``, recorded in ``run.json``.
        trials: How many times each example may be started over the run (``run.json``'s
            ``trials``; a continued run counts the episodes it recorded, whatever their status).
        reveal_scores: ``end_episode`` returns the scores with their explanations (which
            hold the gold); recorded in ``run.json`` as ``agent.reveal_scores`` (kept ``true``
            once any launch of the run revealed them).
        env_options: Options of the environment's dataset loader (``sample``, ``sample_seed``,
            ``shots``, ...), as ``RunConfig.env_options``; recorded in ``run.json``.
        max_steps: Model turns per episode (each tool call is one, see
            :meth:`Session.call`); a call beyond them is not run: the episode ends with status
            ``step_limit``, as an agent's episode in ``run`` does (``agent.max_steps`` in
            ``run.json``).

    Raises:
        DatasetError / UnknownNameError / ExtensionError: as :func:`toolgym.runner.run`.
        RunDirError: when ``out`` holds the trajectories of a ``run``, or of a served run with
            other settings.
        ValueError: when the environment has a tool named like a control tool, or ``trials``
            is below 1 or above what the suite allows (``Benchmark.max_trials``).
    """

    def __init__(
        self, env: Any, out: Path, dataset: Any = None, graders: list[Any] | None = None,
        grader_settings: dict[str, Any] | None = None, limit: int | None = None, transport: str = "stdio",
        trials: int = 1, reveal_scores: bool = False, max_steps: int = 40, env_options: dict[str, Any] | None = None,
    ) -> None:
        if trials < 1:
            raise ValueError(f"trials must be at least 1, got {trials}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_steps = max_steps
        self.benchmark, env_ref = resolve_benchmark(env)
        if self.benchmark.max_trials is not None and trials > self.benchmark.max_trials:
            raise ValueError(
                f"{self.benchmark.name} allows at most {self.benchmark.max_trials} trial(s) per example, got --trials {trials}"
            )
        self.max_trials = trials
        self.reveal_scores = reveal_scores
        self.env_cls: type[Environment] = self.benchmark.environment
        dataset_path, self.examples = load_run_examples(self.benchmark, dataset, limit, env_options or {})
        simulated = [ex.id for ex in self.examples if ex.user is not None]
        if simulated:
            raise DatasetError(f"{dataset_path or 'the dataset'}: {len(simulated)} example(s) have a simulated user "
                               f"(first: {simulated[0]!r}), which serve does not play; serve scripted turns only")
        self.by_id = {ex.id: ex for ex in self.examples}
        graders_made = make_graders(self.benchmark, graders, grader_settings, self.examples)
        self.graders = [g for g, _ in graders_made]
        self.tools = self._list_tools()
        self.out = Path(out)
        traj_path = self.out / TRAJECTORIES_FILE
        self.out.mkdir(parents=True, exist_ok=True)
        self.record = new_record(
            self.benchmark, env_ref, graders_made, self.examples, dataset_path,
            agent={"agent": "mcp-client", "served": "mcp", "transport": transport, "reveal_scores": reveal_scores,
                   "max_steps": max_steps},
            limit=limit, trials=trials, grader_settings=grader_settings, env_options=env_options,
        )
        self.trajectories: list[Trajectory] = []
        self.scores: list[Score] = []
        self.sessions: set[Session] = set()
        self.peak_sessions = 0
        self._trials: Counter[str] = Counter()  # episodes started per example id
        self._graded: set[tuple[str, int]] = set()
        self._round, self._next = 0, 0  # draws without an id: pass `_round` over the dataset, at `_next`
        self._clients: list[str] = []
        if traj_path.exists() and traj_path.stat().st_size:
            self._continue(traj_path)
        write_run(self.out, self.record)
        self._lock = threading.Lock()  # grading runs in worker threads
        self._traj_writer: JsonlAppender | None = JsonlAppender(traj_path)
        self._score_writer: JsonlAppender | None = JsonlAppender(self.out / SCORES_FILE)
        self.result: RunResult | None = None

    def _continue(self, traj_path: Path) -> None:
        """Continue a served run directory (a client configuration names the same ``--out`` at
        every launch): its trajectories and scores are kept, new episodes get the next trial
        numbers and count against ``trials`` (this launch's limit), ``run.json`` keeps its record
        (a ``resumes`` entry is added, naming this launch's ``trials`` and ``reveal_scores``).

        Raises:
            RunDirError: when the directory holds a ``run`` (not a served run), or a served run
                of another environment, dataset, limit, graders or grader settings (the grading
                modes; a judge cache's path may change).
        """
        previous = read_run(self.out)
        if previous.agent.get("served") != "mcp":
            raise RunDirError(f"{traj_path} already exists and is not from `toolgym serve`; choose another --out")
        fresh = self.record
        changed = [
            f"{name} {was!r} -> {now!r}"
            for name, was, now in (
                ("env", previous.env, fresh.env),
                ("dataset", previous.dataset.sha256, fresh.dataset.sha256),
                ("limit", previous.limit, fresh.limit),
                ("environment options", previous.env_options, fresh.env_options),
                ("graders", previous.graders, fresh.graders),
                *((("max_steps", previous.agent["max_steps"], fresh.agent["max_steps"]),)
                  if previous.agent.get("max_steps") is not None else ()),  # recorded since it was enforced
                *((f"grader setting {key}", previous.grader_settings.get(key), fresh.grader_settings.get(key))
                  for key in sorted((set(previous.grader_settings) | set(fresh.grader_settings)) - {"judge_cache"})),
            )
            if was != now
        ]
        if changed:
            raise RunDirError(
                f"{self.out} holds a served run with other settings ({'; '.join(changed)}); serve it with the "
                "same --env, --dataset, --limit, --max-steps, --grader and grading modes (--trajectory-mode, "
                "--args-mode, --judge-model), or choose another --out"
            )
        previous_trajectories = read_jsonl(traj_path, Trajectory, repair=True)
        previous_scores = read_jsonl(self.out / SCORES_FILE, Score, repair=True)
        scored = {(s.example_id, s.trial) for s in previous_scores}
        self.trajectories = previous_trajectories
        self.scores = previous_scores
        self._graded = {t.key for t in previous_trajectories if t.key in scored}  # others: graded by finish()
        for t in previous_trajectories:
            self._trials[t.example_id] = max(self._trials[t.example_id], t.trial + 1)
        agent = previous.agent
        if agent.get("clients"):
            self._clients = [str(c) for c in agent["clients"]]
        elif agent.get("agent") not in (None, "mcp-client"):
            self._clients = [f"{agent['agent']} {agent.get('version') or ''}".strip()]
        previous.agent = {**agent, "transport": fresh.agent["transport"], "max_steps": self.max_steps,
                          "reveal_scores": bool(agent.get("reveal_scores")) or self.reveal_scores}
        previous.trials = max([self.max_trials, *self._trials.values()])
        previous.finished_at = None
        previous.resumes = [*previous.resumes, {"at": fresh.started_at, "reran_errors": 0, "served_again": True,
                                                "trials": self.max_trials, "reveal_scores": self.reveal_scores}]
        self.record = previous

    def _list_tools(self) -> list[dict[str, Any]]:
        """The environment's tools as the model sees them (``{"name", "description",
        "parameters"}``), read from an environment reset on the first example."""
        env = self.env_cls()
        try:
            env.reset(self.examples[0])
            tools = [convert_to_openai_tool(t)["function"] for t in env.tools.values()]
        finally:
            env.close()
        clash = [t["name"] for t in tools if t["name"] in CONTROL_TOOLS]
        if clash:
            raise ValueError(f"environment {self.benchmark.name!r} has a tool named {clash[0]!r}, a control tool of serve")
        return tools

    # --- episodes --------------------------------------------------------------------------
    def client(self, name: str, version: str) -> None:
        """Name the agent of ``run.json`` after an MCP client (the first one; others are
        listed under ``clients``)."""
        label = f"{name} {version}".strip()
        with self._lock:
            if label in self._clients or self.result is not None:
                return
            self._clients.append(label)
            if len(self._clients) == 1:
                self.record.agent = {**self.record.agent, "agent": name, "version": version}
            else:
                self.record.agent = {**self.record.agent, "clients": list(self._clients)}
            write_run(self.out, self.record)

    def describe(self) -> str:
        """What the client is allowed, for the server's start-up line: the trials per example
        and whether ``end_episode`` reveals the scores."""
        scores = ("scores returned to the client (--reveal-scores)" if self.reveal_scores
                  else "scores kept from the client")
        return f"at most {self.max_trials} trial(s) per example, {scores}"

    def next_example(self, example_id: str | None) -> tuple[Example, int]:
        """The example to play and its trial number (episodes of it so far). Without an id:
        the first example in dataset order among those started the fewest times, if that is
        below ``trials`` (parallel clients split the dataset, and every example gets its first
        trial before any gets a second).

        Raises:
            ValueError: for an unknown id, for an example started ``trials`` times already,
                or when no id is given and no example has trials left.
        """
        with self._lock:
            if example_id is None:
                example = self._draw()
                if example is None:
                    raise ValueError(
                        f"no example is left to play: every example of the dataset ({len(self.examples)}) has "
                        f"been started {self.max_trials} time(s), the most this server allows (--trials "
                        f"{self.max_trials})"
                    )
            else:
                example = self.by_id.get(str(example_id))
                if example is None:
                    raise ValueError(f"unknown example_id {example_id!r} ({len(self.examples)} examples)")
                started = self._trials[example.id]
                if started >= self.max_trials:
                    raise ValueError(
                        f"example {example.id!r} has been started {started} time(s), the most this server allows "
                        f"(--trials {self.max_trials}); it cannot be played again"
                    )
            trial = self._trials[example.id]
            self._trials[example.id] += 1
            return example, trial

    def _draw(self) -> Example | None:
        """The next example with trials left (see :meth:`next_example`); called under the lock."""
        while self._round < self.max_trials:
            while self._next < len(self.examples):
                example = self.examples[self._next]
                self._next += 1
                if self._trials[example.id] <= self._round:
                    return example
            self._round, self._next = self._round + 1, 0
        return None

    def append(self, trajectory: Trajectory) -> bool:
        """Append a trajectory to ``trajectories.jsonl`` at once (before any grading, so a
        server stopped while grading keeps it); ``False`` after :meth:`finish`."""
        with self._lock:
            if self._traj_writer is None:
                log.warning("episode of %s ended after the server stopped; not recorded", trajectory.example_id)
                return False
            self._traj_writer.write(trajectory)
            self.trajectories.append(trajectory)
            return True

    def grade(self, trajectory: Trajectory) -> list[Score]:
        """Grade an appended trajectory (``error`` and ``aborted`` ones get no score) and append
        its scores to ``scores.jsonl``; safe in a worker thread. Returns the scores."""
        scores = grade_trajectories(self.by_id, [trajectory], self.graders)
        with self._lock:
            if self._score_writer is None or trajectory.key in self._graded:  # finish() graded it
                return scores
            self._graded.add(trajectory.key)
            for score in scores:
                self._score_writer.write(score)
            self.scores += scores
        return scores

    def record_trajectory(self, trajectory: Trajectory) -> list[Score]:
        """:meth:`append`, then :meth:`grade`; returns the scores."""
        return self.grade(trajectory) if self.append(trajectory) else []

    def abort_all(self, reason: str) -> None:
        """Record every running episode as ``aborted`` (the server is stopping)."""
        for session in list(self.sessions):
            session.abort(reason)

    def close(self) -> None:
        """Close the trajectory and score files without writing the run (the server could not
        start); :meth:`finish` does both. Idempotent."""
        with self._lock:
            for writer in (self._traj_writer, self._score_writer):
                if writer is not None:
                    writer.close()
            self._traj_writer = self._score_writer = None

    def finish(self) -> RunResult:
        """Close the files, then write ``run.json`` (``finished_at``) and ``scores.jsonl`` in
        run order and run the exporters, as a CLI run ends (idempotent)."""
        with self._lock:
            if self.result is not None:
                return self.result
            ungraded = [t for t in self.trajectories if t.key not in self._graded]  # stopped while grading
            self.scores += grade_trajectories(self.by_id, ungraded, self.graders)
            self._graded.update(t.key for t in ungraded)
            for writer in (self._traj_writer, self._score_writer):
                if writer is not None:
                    writer.close()
            self._traj_writer = self._score_writer = None
            scores = sorted(self.scores, key=lambda s: (s.example_id, s.trial))  # run order, as grade_trajectories
            self.record.concurrency = max(1, self.peak_sessions)  # sessions open at once, at most
            self.record.trials = max([self.record.trials, *self._trials.values()])  # a continued run's repeats
            self.result = finish_run(self.out, self.benchmark, self.record, self.trajectories, scores, self.by_id)
            return self.result


@dataclass(eq=False)
class Session:
    """One MCP session: its client and the episode it is playing, if any."""

    served: ServedRun
    client: str = "mcp-client"
    client_version: str = ""
    episode: Episode | None = None
    listed: list[dict[str, Any]] | None = None  # the tools last listed to the client

    def start(self, example_id: str | None) -> dict[str, Any]:
        """Start an episode on a fresh environment; returns the task.

        Raises:
            ValueError: see :meth:`ServedRun.next_example`; an episode already running.
            RuntimeError: when the environment's reset fails (an ``error`` trajectory is
                recorded).
        """
        if self.episode is not None:
            raise ValueError(f"an episode is running (example {self.episode.example.id!r}); call {END} first")
        example, trial = self.served.next_example(example_id)
        env = self.served.env_cls()
        episode = Episode(env, example, trial)
        try:
            env.reset(example)
        except Exception as exc:
            env.close()
            error = f"{type(exc).__name__} in reset: {exc}"
            self.served.record_trajectory(Trajectory(
                example_id=example.id, trial=trial, env=self.served.benchmark.name, agent=self.client,
                status="error", error=error,
            ))
            raise RuntimeError(f"the environment failed to start example {example.id!r}: {error}") from None
        episode.states.start()
        if example.multi_turn:
            episode.user = ScriptedUser(list(example.turns or []))
            episode.record_user(UserStep(text=example.first_message, turn=1))
        episode.begin_turn(1)
        self.episode = episode
        return {
            "example_id": example.id,
            "trial": trial,
            "instructions": env.instructions,
            "input": example.input,
            "answer_with": ANSWER_WITH,
            **({"user_turn": 1} if example.multi_turn else {}),
        }

    def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool call of the running episode: ``(observation, is_error)``."""
        if self.episode is None:
            return NO_EPISODE, True
        limit = self.episode.env.max_model_turns
        if self.episode.model_turns >= self.served.max_steps and (limit is None or limit > self.served.max_steps):
            example = self.episode.example.id
            self.episode.status = "step_limit"
            self.served.record_trajectory(self._trajectory())
            return (f"Error: the episode's {self.served.max_steps} model turns are used up (--max-steps); this call "
                    f"was not run and episode {example!r} ended with status step_limit. Call {START} for the next "
                    "one."), True
        call = self._model_turn(call_id, name, arguments)
        try:
            step = self.episode.execute(call)
        except ToolBug as exc:
            example = self.episode.example.id
            self._end(error=f"ToolBug: {exc}")
            return (f"Error: the environment failed ({exc}); episode {example!r} ended with status error. "
                    f"Call {START} for the next one."), True
        return step.output, step.error

    def _model_turn(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
        """Record the client's call as a model turn (the graders of JMultiWOZ-TC, BFCL and the
        exporters read the model's calls there), checked as a run checks a model's call (an
        unknown tool is malformed, :func:`toolgym.parsing.model_step`). Returns the call.

        Each call is one turn (its client saw the previous result before sending it, as far
        as the server can tell), except when the environment's protocol limits the turns
        (``max_model_turns``, JMultiWOZ-TC and BFCL: one): calls beyond the limit join the
        last turn, as parallel calls of one turn do in a run.
        """
        episode = self.episode
        assert episode is not None
        message = AIMessage("", tool_calls=[{"name": name, "args": arguments, "id": call_id, "type": "tool_call"}])
        call = model_step(message, 0.0, set(episode.env.functions)).tool_calls[0]
        limit = episode.env.max_model_turns
        turns = [s for s in episode.steps if isinstance(s, ModelStep)]
        if limit is not None and turns and episode.model_turns >= limit:
            turns[-1].tool_calls.append(call)
        else:
            episode.record_model(ModelStep(tool_calls=[call]))
        return call

    def end(self, answer: str | None) -> Trajectory | dict[str, Any]:
        """End the running episode (its final state read, its environment closed); the caller
        records and grades the trajectory with :meth:`ServedRun.record_trajectory`. In a
        multi-turn episode with turns left, the answer ends the user turn only: the next
        user turn starts and its message is returned (``{"status": "running", "user_turn",
        "message", ...}``); the episode goes on (at ``max_steps`` model turns it ends with
        status ``step_limit`` instead).

        The answer is the model's last turn (a turn without calls, as a run's last turn is),
        unless the environment's protocol turns are used up (``max_model_turns``); it is the
        trajectory's ``final_answer`` either way.

        Raises:
            ValueError: when no episode is running.
        """
        episode = self.episode
        if episode is None:
            raise ValueError(f"no episode is running; call {START} first")
        limit = episode.env.max_model_turns
        if limit is None or episode.model_turns < limit:
            episode.record_model(ModelStep(text=without_surrogates(answer or "")))
        episode.final_answer = answer
        if episode.user is not None:
            episode.end_turn()
            turns = episode.example.turns or []
            if episode.turn <= len(turns) and episode.model_turns < self.served.max_steps:
                turn = episode.turn + 1
                episode.begin_turn(turn)
                episode.record_user(UserStep(text=turns[turn - 2], turn=turn))
                return {"example_id": episode.example.id, "trial": episode.trial, "status": "running",
                        "user_turn": turn, "message": turns[turn - 2]}
            if episode.turn <= len(turns):
                episode.status = "step_limit"
        return self._trajectory()

    def abort(self, reason: str, by_agent: bool = False) -> None:
        """Record the running episode, if any, when its session ends before ``end_episode``.

        Args:
            reason: Why, recorded as the trajectory's ``error``.
            by_agent: The client closed its session or went silent past the idle timeout: the
                agent walked away, so the episode is ``abandoned`` and graded as it stands
                (no final answer), counted like any other. Otherwise (the server is stopping)
                it is ``aborted``: not the agent's doing, so not graded.
        """
        if self.episode is not None:
            status = "abandoned" if by_agent else "aborted"
            self.episode.status = status
            trajectory = self._trajectory()
            if trajectory.status == status:  # not an error met while reading the state
                trajectory.error = reason
            self.served.record_trajectory(trajectory)

    def _end(self, error: str) -> None:
        self.served.record_trajectory(self._trajectory(error))

    def _trajectory(self, error: str | None = None) -> Trajectory:
        """The running episode's trajectory; the environment is closed and the session has
        no episode afterwards. Called on the event loop's thread, where the environment lives."""
        episode, self.episode = self.episode, None
        assert episode is not None
        try:
            return episode.trajectory(self.client, None, error)
        finally:
            episode.env.close()

    def env_tools(self) -> list[dict[str, Any]]:
        """The tools of the running episode's environment (they may depend on the example),
        else those listed at start-up."""
        if self.episode is None:
            return self.served.tools
        return [convert_to_openai_tool(t)["function"] for t in self.episode.env.tools.values()]


# --- the MCP server -------------------------------------------------------------------------


def _text_result(payload: Any, is_error: bool = False) -> Any:
    from mcp import types

    if isinstance(payload, str):
        return types.CallToolResult(content=[types.TextContent(type="text", text=payload)], isError=is_error)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        structuredContent=payload, isError=is_error,
    )


def build_server(served: ServedRun, stopping: list[str] | None = None) -> Any:
    """The low-level MCP server (``mcp.server.lowlevel.Server``) of a served run. Its lifespan
    runs once per MCP session and holds that session's :class:`Session`; when it ends with an
    episode running, that episode is recorded as ``abandoned`` and graded (the client left) or,
    once the server is stopping, as ``aborted``.

    Args:
        stopping: Set to ``[reason]`` by the caller when the server stops, so aborted
            episodes say why.
    """
    from mcp import types
    from mcp.server.lowlevel import Server

    stopping = stopping if stopping is not None else []

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[Session]:
        session = Session(served)
        served.sessions.add(session)
        served.peak_sessions = max(served.peak_sessions, len(served.sessions))
        try:
            yield session
        finally:
            served.sessions.discard(session)
            if stopping:
                session.abort(stopping[0])
            else:  # the client closed the session, or stayed silent past the idle timeout
                session.abort(ABANDONED, by_agent=True)

    server: Any = Server("toolgym", instructions=SERVER_INSTRUCTIONS, lifespan=lifespan)
    initialization_options = server.create_initialization_options

    def with_list_changed(notification_options: Any = None, experimental_capabilities: Any = None) -> Any:
        # the tools of an environment may depend on the example (BFCL: each entry's own), so
        # the server says its list changes and notifies when a new episode changes it
        from mcp.server.lowlevel import NotificationOptions

        return initialization_options(notification_options or NotificationOptions(tools_changed=True),
                                      experimental_capabilities)

    server.create_initialization_options = with_list_changed  # the HTTP session manager calls it too
    control = [
        types.Tool(
            name=START,
            description="Start an episode: a fresh environment and a task (instructions and input). Without "
            f"example_id, the next example of the dataset. Each example can be started at most {served.max_trials} "
            "time(s).",
            inputSchema={"type": "object", "properties": {"example_id": {"type": "string", "description": "The example to play."}}},
        ),
        types.Tool(
            name=END,
            description="End the episode with your final answer; it is recorded and graded"
            + (" and the scores are returned." if served.reveal_scores else " (the scores stay with the evaluator)."),
            inputSchema={"type": "object", "properties": {"answer": {"type": "string", "description": "Your final answer."}}},
        ),
    ]

    def current() -> Session:
        ctx = server.request_context
        session: Session = ctx.lifespan_context
        params = ctx.session.client_params
        if params is not None and session.client == "mcp-client":
            session.client, session.client_version = params.clientInfo.name, params.clientInfo.version
            served.client(session.client, session.client_version)
        return session

    @server.list_tools()
    async def list_tools() -> list[Any]:
        session = current()
        tools = session.env_tools()
        session.listed = tools
        env_tools = [
            types.Tool(name=t["name"], description=t.get("description") or "",
                       inputSchema=t.get("parameters") or {"type": "object", "properties": {}})
            for t in tools
        ]
        return [*control, *env_tools]

    @server.call_tool(validate_input=False)  # the environment checks arguments, with its own messages
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        session = current()
        if name == START:
            example_id = arguments.get("example_id")
            try:
                task = session.start(None if example_id in (None, "") else str(example_id))
            except (ValueError, RuntimeError) as exc:
                return _text_result(f"Error: {exc}", True)
            if session.listed is not None and session.env_tools() != session.listed:
                ctx = server.request_context  # on this request's stream (streamable HTTP: its response)
                await ctx.session.send_notification(
                    types.ServerNotification(types.ToolListChangedNotification()), related_request_id=ctx.request_id)
            return _text_result(task)
        if name == END:
            answer = arguments.get("answer")
            if answer is not None and not isinstance(answer, str):  # an object: as JSON, never a Python repr
                answer = json.dumps(answer, ensure_ascii=False)
            try:
                trajectory = session.end(answer)
            except ValueError as exc:
                return _text_result(f"Error: {exc}", True)
            if isinstance(trajectory, dict):  # the next user turn of a multi-turn episode
                if session.listed is not None and session.env_tools() != session.listed:
                    ctx = server.request_context
                    await ctx.session.send_notification(
                        types.ServerNotification(types.ToolListChangedNotification()), related_request_id=ctx.request_id)
                return _text_result(trajectory)
            recorded = served.append(trajectory)  # False: the server is stopping
            # grading may be slow (a judge model): in a worker thread, the other sessions go on
            scores = await anyio.to_thread.run_sync(served.grade, trajectory) if recorded else []
            ended = {"example_id": trajectory.example_id, "trial": trajectory.trial, "status": trajectory.status,
                     "recorded": recorded}
            if not served.reveal_scores:  # values and explanations hold the gold (see the module's docstring)
                return _text_result(ended)
            return _text_result({
                **ended,
                "scores": [{"grader": s.grader, "value": s.value, "explanation": s.explanation} for s in scores],
            })
        output, is_error = session.call(str(server.request_context.request_id), name, arguments)
        return _text_result(output, is_error)

    return server


def serve_stdio(served: ServedRun) -> RunResult:
    """Serve one MCP session over stdin/stdout until the client closes it; SIGTERM or Ctrl-C
    records a running episode as ``aborted`` and writes the run before the process exits.

    Returns:
        The graded run (after the client closed the session).
    """
    from mcp.server.stdio import stdio_server

    stopping: list[str] = []
    server = build_server(served, stopping)

    def stop(signum: int, _frame: Any) -> None:
        # stdin is read in a thread that cancellation cannot interrupt: flush here and exit
        stopping.append(f"the server was stopped ({signal.Signals(signum).name})")
        served.abort_all(stopping[0])
        served.finish()
        sys.stderr.flush()
        os._exit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}

    print(f"serving {served.benchmark.name} over stdio (run directory {served.out}; {served.describe()})",
          file=sys.stderr, flush=True)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return served.finish()


@dataclass(frozen=True)
class HttpSettings:
    """How the streamable HTTP transport listens.

    Attributes:
        host: Address to bind; anything but a loopback address needs ``token``.
        port: TCP port (0: any free port, printed when listening).
        path: The MCP endpoint's path.
        token: Bearer token clients must send (RFC 6750); ``None``: none (loopback only).
        allowed_origins: ``Origin`` values accepted besides the loopback ones (requests
            without ``Origin`` are accepted: they do not come from a browser page).
        allowed_hosts: ``Host`` values accepted besides the loopback ones and ``host``.
        idle_timeout_s: A session with no request in flight and no open stream for this long
            is closed (a killed client's episode is then recorded as ``aborted``).
    """

    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/mcp"
    token: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    idle_timeout_s: float = 300.0

    def check(self) -> None:
        """Raises ValueError: listening beyond loopback without a token, or an empty token."""
        if self.token is not None and not self.token:
            raise ValueError("--token must not be empty")
        if self.host not in LOOPBACK_HOSTS and self.token is None:
            raise ValueError(
                f"--host {self.host} listens beyond this machine: give --token (clients send it as "
                "'Authorization: Bearer TOKEN')"
            )


class _TokenVerifier:
    """Accepts exactly one bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token=token, client_id="toolgym-serve", scopes=[])
        return None


def http_app(served: ServedRun, settings: HttpSettings, stopping: list[str] | None = None) -> Any:
    """The Starlette app of the streamable HTTP transport: the MCP endpoint at
    ``settings.path``, behind the bearer-token check when a token is set, with the ``Host`` and
    ``Origin`` checks of the MCP SDK's transport security (421 / 403). When the app stops, every
    session is closed (running episodes recorded as ``aborted``) and the run is written
    (:meth:`ServedRun.finish`)."""
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.routing import Route

    stopping = stopping if stopping is not None else []
    hosts = [*LOOPBACK_HOSTS, *([settings.host] if settings.host not in ("0.0.0.0", "::") else [])]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*(f"{_bracket(h)}:*" for h in hosts), *(_bracket(h) for h in hosts), *settings.allowed_hosts],
        allowed_origins=[*(f"{scheme}://{_bracket(h)}:*" for h in LOOPBACK_HOSTS for scheme in ("http", "https")),
                         *settings.allowed_origins],
    )
    manager = StreamableHTTPSessionManager(
        app=build_server(served, stopping), security_settings=security, session_idle_timeout=settings.idle_timeout_s,
    )

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    endpoint: Any = Endpoint()
    middleware = []
    if settings.token is not None:
        endpoint = RequireAuthMiddleware(endpoint, required_scopes=[])
        middleware = [Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(_TokenVerifier(settings.token)))]

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            async with manager.run():
                yield
                stopping.append("the server was stopped")
        finally:
            served.abort_all(stopping[0] if stopping else "the server was stopped")
            served.finish()

    return Starlette(routes=[Route(settings.path, endpoint=endpoint, methods=["GET", "POST", "DELETE"])],
                     middleware=middleware, lifespan=lifespan)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def _bound_socket(host: str, port: int) -> Iterator[socket.socket]:
    """A listening socket on ``host:port``.

    Raises:
        OSError: when the address cannot be resolved or bound; its ``filename`` is ``HOST:PORT``.
    """
    where = f"{_bracket(host)}:{port}"
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), where) from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(info[4])
            sock.listen(2048)  # connections wait in the backlog until the server accepts them
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), where) from None
        yield sock
    finally:
        sock.close()


def serve_http(served: ServedRun, settings: HttpSettings) -> RunResult:
    """Serve over streamable HTTP until Ctrl-C or SIGTERM (uvicorn's graceful shutdown: open
    sessions are closed and their running episodes recorded as ``aborted``, then the run is
    written). Prints ``listening on http://HOST:PORT/PATH`` on stderr once the socket is bound.

    Raises:
        ValueError: see :meth:`HttpSettings.check`.
        OSError: when the address cannot be bound (``filename`` is ``HOST:PORT``).
    """
    import uvicorn

    settings.check()
    app = http_app(served, settings)
    with _bound_socket(settings.host, settings.port) as sock:
        port = sock.getsockname()[1]
        _refusals_logged_alike()
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3)
        server = uvicorn.Server(config)
        quiet = _ShutdownNoise(server)
        logging.getLogger("uvicorn.error").addFilter(quiet)
        print(f"listening on http://{_bracket(settings.host)}:{port}{settings.path} (run directory {served.out}; "
              f"{served.describe()})", file=sys.stderr, flush=True)
        try:
            server.run(sockets=[sock])
        finally:
            logging.getLogger("uvicorn.error").removeFilter(quiet)
            served.finish()
    return served.finish()

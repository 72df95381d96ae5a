"""The pipeline behind ``toolgym.evaluate`` and ``toolgym run``: :func:`run` reads as its steps
(resolve the parts, load the examples, choose the protocol and graders, find what a resumed run
already played, build the agent, start the record, play, grade and finish)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.agents import Agent, repeat_guard
from toolgym.benchmark import Benchmark
from toolgym.data import DatasetError, write_examples
from toolgym.executor import Episodes, Executor, PartSpecs, make_executor
from toolgym.graders import Grader, grader_name
from toolgym.records import Example, Trajectory
from toolgym.runio import RUN_FILE as RUN_FILE_NAME
from toolgym.runio import (
    TRAJECTORIES_FILE,
    ExtensionRef,
    JsonlAppender,
    RunDirError,
    RunRecord,
    latest_attempts,
    read_jsonl,
    read_run,
    write_run,
)
from toolgym.runner.config import EXAMPLES_FILE, ErrorLimit, RunConfig, RunResult
from toolgym.runner.grading import _grading_gc, grade_trajectories
from toolgym.runner.parts import (
    _is_chat_model,
    _object_ref,
    load_run_examples,
    make_graders,
    model_spec_ref,
    resolve_agent,
    resolve_benchmark,
)
from toolgym.runner.play import _frozen_gc
from toolgym.runner.record import finish_run, new_record
from toolgym.runner.resume import resume_refusal, setting_differences


def run(config: RunConfig, progress: bool = True) -> RunResult:
    """Run ``config``: write run.json, append each trajectory to trajectories.jsonl as it
    finishes, then grade everything into scores.jsonl and export (see :func:`grade`). With
    ``config.out`` of ``None`` nothing is written and the run is returned in memory.

    Raises:
        DatasetError: for an invalid dataset (before any model is called).
        RunDirError: when ``out`` already holds trajectories and ``resume`` is off.
        UnknownNameError / ExtensionError: for an environment, agent, grader or model that
            cannot be found.
    """
    for field_name in ("trials", "max_steps", "workers"):
        if getattr(config, field_name) < 1:
            raise ValueError(f"{field_name} must be at least 1, got {getattr(config, field_name)}")
    benchmark, env_ref = resolve_benchmark(config.env)
    agent_obj, agent_ref = resolve_agent(config.agent)
    dataset_path, examples = _examples(config, benchmark, agent_obj)
    protocol = _Protocol.of(config, agent_obj, examples, dataset_path)
    graders = _graders(config, benchmark, examples, protocol)
    executor = make_executor(config.executor, config.executor_options)
    concurrency = config.concurrency if config.concurrency is not None else _default_concurrency(executor, benchmark)
    out = Path(config.out) if config.out is not None else None
    before = _Before.read(config, out)
    jobs = [
        (ex, k) for ex in examples for k in protocol.episode_numbers(ex, config.trials) if (ex.id, k) not in before.done
    ]
    error_limit = ErrorLimit.parse(config.max_errors, len(jobs), completed_before=len(before.kept))
    resumed = before.announce(out, jobs) if out is not None and config.resume else None
    workers = _workers(config, jobs, concurrency)
    agent, model_label, model_ref, model_part = _agent(config, agent_obj, jobs, executor, workers)
    user_part = _user(config, agent, examples, jobs, executor, workers)
    agent = protocol.wrap(agent, config, executor)
    if out is not None:  # only now: a model refused while it was built (a server's probe) leaves nothing behind
        out.mkdir(parents=True, exist_ok=True)
        if dataset_path is None:  # examples given in memory: kept beside the run
            dataset_path = out / EXAMPLES_FILE
            write_examples(dataset_path, examples)
    record = new_record(
        benchmark, env_ref, graders, examples, dataset_path,
        agent=agent.describe(), agent_ref=agent_ref, model=model_label, model_ref=model_ref,
        model_settings=config.settings.record(), limit=config.limit, env_options=config.env_options,
        trials=config.trials, concurrency=concurrency, workers=workers, grader_settings=config.grader_settings,
    )
    record.resumes = [*(before.record.resumes if before.record else []), *([resumed] if resumed else [])]
    if resumed and before.record is not None:  # the run began then, with that command; this one is in resumes
        record.started_at = before.record.started_at or record.started_at
        record.command = before.record.command or record.command
    record.protocol, record.inject = config.protocol, config.inject
    if out is not None:
        write_run(out, record)
    parts = PartSpecs(
        env=config.env if env_ref.source == "object" else env_ref.spec,
        agent=config.agent if agent_ref.source == "object" else agent_ref.spec,
        model=model_part, settings=config.settings, max_steps=config.max_steps, max_repeats=config.max_repeats,
        user_model=user_part,
    )
    episodes = Episodes(jobs, examples, concurrency, workers, agent, env_cls=benchmark.environment, parts=parts)
    finished = _play(executor, episodes, out, list(before.kept), error_limit, record,
                     f"{benchmark.name}/{agent.name}" if progress and jobs else None)
    by_id = {ex.id: ex for ex in examples}
    with _grading_gc():
        scores = grade_trajectories(by_id, finished, [g for g, _ in graders])
        return finish_run(out, benchmark, record, finished, scores, by_id)


# --- the steps of run ------------------------------------------------------------------------


def _agent_class(agent_obj: Any) -> type[Agent]:
    return agent_obj if isinstance(agent_obj, type) else type(agent_obj)


def _examples(config: RunConfig, benchmark: Benchmark, agent_obj: Any) -> tuple[Path | None, list[Example]]:
    """The run's examples, refused when the benchmark allows fewer trials or the agent cannot
    play some of them.

    Raises:
        ValueError: for more trials than the benchmark allows.
        DatasetError: for an invalid dataset, or examples the agent cannot play.
    """
    agent_cls = _agent_class(agent_obj)
    if benchmark.max_trials is not None and config.trials > benchmark.max_trials:
        raise ValueError(f"{benchmark.name} allows at most {benchmark.max_trials} trial(s) per example, got --trials {config.trials}")
    dataset_path, examples = load_run_examples(benchmark, config.dataset, config.limit, config.env_options)
    multi = [ex.id for ex in examples if ex.multi_turn]
    if multi and not getattr(agent_obj, "multi_turn", False):  # an instance (a fork) answers for its inner agent
        raise DatasetError(
            f"{dataset_path or 'the dataset'}: {len(multi)} example(s) are multi-turn (first: {multi[0]!r}), and the "
            f"{getattr(agent_obj, 'name', '') or agent_cls.__name__} agent plays single-turn episodes only; use tool_calling, react_json, xml_prompting "
            "or oracle")
    simulated = [ex.id for ex in examples if ex.user is not None]
    if simulated and config.user_model is None:
        raise DatasetError(
            f"{dataset_path or 'the dataset'}: {len(simulated)} example(s) have a simulated user (first: "
            f"{simulated[0]!r}): give the model that plays it with --user-model SPEC (user_model= in Python)")
    unplayable = getattr(agent_cls, "unplayable", None)
    missing = unplayable(examples) if unplayable is not None else []
    if missing:
        where = dataset_path or "the dataset"
        raise DatasetError(
            f"{where}: the {agent_cls.name} agent cannot play {len(missing)} of {len(examples)} examples "
            f"(first: {missing[0]!r}): they name expected steps without expected_calls (the arguments) to replay"
        )
    return dataset_path, examples


@dataclass(frozen=True)
class _Protocol:
    """How the run's episodes are played: free-running, teacher-forced (with an injected fault
    or not) or a fork (see :mod:`toolgym.forcing`)."""

    forced: bool
    injection: Any

    @classmethod
    def of(cls, config: RunConfig, agent_obj: Any, examples: list[Example], dataset_path: Path | None) -> _Protocol:
        """The protocol of ``config``, checked against the agent and the examples.

        Raises:
            ValueError: for an unknown protocol, an injection without forcing, or a fork
                not made by ``toolgym fork``.
            DatasetError: for a forced run over examples with no reference path.
        """
        from toolgym import forcing

        if config.protocol not in forcing.PROTOCOLS:
            raise ValueError(f"protocol {config.protocol!r}: expected one of {', '.join(forcing.PROTOCOLS)}")
        injection = forcing.Injection.parse(config.inject) if config.inject else None
        if injection is not None and config.protocol == "free-running":
            raise ValueError("--inject needs --protocol teacher-forced (or toolgym fork): a free-running episode has no "
                             "replayed step to put the fault in")
        if config.protocol == "fork" and not isinstance(agent_obj, forcing.ForkAgent):
            raise ValueError("protocol 'fork' is made by toolgym fork (toolgym.forks.fork), not by run")
        forced = config.protocol == "teacher-forced"
        if forced and (multi := [ex.id for ex in examples if ex.multi_turn]):
            raise DatasetError(
                f"{dataset_path or 'dataset'}: {len(multi)} example(s) are multi-turn (first: {multi[0]!r}); teacher "
                "forcing replays a single-turn reference path (fork a multi-turn trajectory instead: toolgym fork)")
        if forced:
            pathless = [ex.id for ex in examples if not forcing.reference_calls(ex)]
            if pathless:
                raise DatasetError(
                    f"{dataset_path or 'dataset'}: {len(pathless)} example(s) have no reference path to force (first: "
                    f"{pathless[0]!r}): give expected_calls, or milestones whose calls name plain arguments")
            if injection is not None and (short := [ex.id for ex in examples if len(forcing.reference_calls(ex) or []) < injection.step]):
                print(f"note: --inject {injection}: {len(short)} example(s) have a reference path shorter than "
                      f"{injection.step} steps and are played free-running only (first: {short[0]!r})", file=sys.stderr)
        return cls(forced, injection)

    def episode_numbers(self, example: Example, trials: int) -> Any:
        """The episode numbers (``trial``) of ``example``: its trials, and for a forced run one
        more per step of its reference path."""
        from toolgym import forcing

        return forcing.episode_numbers(example, trials, self.injection) if self.forced else range(trials)

    def wrap(self, agent: Agent, config: RunConfig, executor: Executor) -> Agent:
        """The agent that plays the run's episodes (a forced run wraps it).

        Raises:
            ValueError: for a forced run on an executor that does not play in this process.
        """
        if not self.forced:
            return agent
        from toolgym import forcing

        if not executor.in_process:
            raise ValueError(f"--protocol teacher-forced plays in this process only (--executor local), not {executor.name}")
        return forcing.TeacherForced(agent, config.trials, self.injection)


def _graders(
    config: RunConfig, benchmark: Benchmark, examples: list[Example], protocol: _Protocol
) -> list[tuple[Grader, ExtensionRef]]:
    """The graders asked for, plus those a forced episode is graded by."""
    graders = make_graders(benchmark, config.graders, config.grader_settings, examples)
    chosen = {grader_name(g) for g, _ in graders}
    forced, injection = protocol.forced, protocol.injection
    extra = [n for n in (["next_step"] if forced and injection is None else []) + (["recovery"] if injection else [])
             if n not in chosen]  # what a forced episode is graded by, whatever else was asked for
    return graders + (make_graders(benchmark, extra) if extra else [])


@dataclass
class _Before:
    """What a run directory already holds: the trajectories kept (a resumed run), the
    (example, trial) pairs played again (they ended in error), its record and the settings
    changed with ``force``."""

    kept: list[Trajectory] = field(default_factory=list)
    done: set[tuple[str, int]] = field(default_factory=set)
    errored: set[tuple[str, int]] = field(default_factory=set)
    record: RunRecord | None = None
    changed: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def read(cls, config: RunConfig, out: Path | None) -> _Before:
        """Read ``out`` (nothing for a run in memory).

        Raises:
            RunDirError: for a resume with another protocol or changed settings (without
                ``force``), an ``out`` that is a file, or trajectories without ``resume``.
        """
        before = cls()
        if out is None:
            return before
        if config.resume and (out / RUN_FILE_NAME).exists():
            before.record = read_run(out)
            if (before.record.protocol, before.record.inject) != (config.protocol, config.inject):
                raise RunDirError(
                    f"{out / RUN_FILE_NAME}: cannot resume a {before.record.protocol} run"
                    f"{f' (inject {before.record.inject})' if before.record.inject else ''} as a {config.protocol} one"
                    f"{f' (inject {config.inject})' if config.inject else ''}")
            before.changed = {k: [b, now] for k, b, now in setting_differences(config, before.record)}
            if before.changed and not config.force:
                raise RunDirError(resume_refusal(out, before.changed))
        if out.exists() and not out.is_dir():
            raise RunDirError(f"{out}: is a file, not a run directory; choose another --out (out= in Python)")
        traj_path = out / TRAJECTORIES_FILE
        if traj_path.exists() and traj_path.stat().st_size and not config.resume:
            raise RunDirError(f"{traj_path} already exists; continue it with --resume (resume=True in Python) or choose another --out")
        if config.resume:
            previous = latest_attempts(read_jsonl(traj_path, Trajectory, repair=True))
            before.errored = {t.key for t in previous if t.status == "error"}
            before.kept = [t for t in previous if t.key not in before.errored]  # played again; the new attempt counts
            before.done = {t.key for t in before.kept}
        return before

    def announce(self, out: Path, jobs: list[tuple[Example, int]]) -> dict[str, Any] | None:
        """Say what a resumed run keeps and plays; its entry of run.json's ``resumes``."""
        if self.record is None:
            return None
        rerun = sum(1 for ex, k in jobs if (ex.id, k) in self.errored)
        print(
            f"resuming {out}: {len(self.done)} finished episode(s) kept, {rerun} that ended in error played again, "
            f"{len(jobs) - rerun} not yet played",
            file=sys.stderr,
        )
        return {"at": dt.datetime.now(dt.UTC).isoformat(), "reran_errors": rerun, "forced": self.changed,
                "command": sys.argv}


def _default_concurrency(executor: Executor, benchmark: Benchmark) -> int:
    """The concurrency of a run that gives none: the executor's own default when it declares
    one (``default_concurrency()``: Ray, the cluster's CPUs), said once on stderr, else the
    environment's ``default_concurrency``."""
    hook = getattr(executor, "default_concurrency", None)
    found = hook() if callable(hook) else None
    if not isinstance(found, int) or found < 1:
        return benchmark.default_concurrency
    print(f"note: --executor {executor.name} plays {found} episodes at once (its default: the CPUs it has); "
          "--concurrency N sets another number", file=sys.stderr)
    return found


def _workers(config: RunConfig, jobs: list[tuple[Example, int]], concurrency: int) -> int:
    """The worker processes the run uses: no more than its episodes or its concurrency."""
    workers = max(1, min(config.workers, len(jobs), concurrency))
    if workers < config.workers and jobs:  # said once, so the recorded workers never surprise
        why = f"--concurrency {concurrency}" if concurrency <= len(jobs) else f"{len(jobs)} episode(s) to play"
        print(f"note: --workers {config.workers} lowered to {workers}: each worker needs an episode ({why})",
              file=sys.stderr)
    return workers


def _agent(
    config: RunConfig, agent_obj: Any, jobs: list[tuple[Example, int]], executor: Executor, workers: int
) -> tuple[Agent, str | None, ExtensionRef | None, Any]:
    """The agent with its model, the model's label and record, and what a remote executor
    builds the model from. The model is built only when this process plays episodes."""
    if isinstance(agent_obj, Agent):
        return agent_obj, agent_obj.model_spec, None, None
    agent_cls = _agent_class(agent_obj)
    settings = config.settings
    if workers > 1 and settings.rps is not None and executor.in_process:  # the limit holds for the run, not per worker
        settings = dataclasses.replace(settings, rps=settings.rps / workers)
    model_ref: ExtensionRef | None = None
    model_part: Any = None  # what a remote executor builds the model from
    model_label = None
    model: Any = None
    if agent_cls.needs_model:
        if not isinstance(config.model, str) and _is_chat_model(config.model):
            model, model_label = config.model, f"object:{type(config.model).__name__}"
            model_ref, model_part = _object_ref(type(config.model)), config.model
        else:
            model_label, model_ref = model_spec_ref(str(config.model))
            model_part = model_label
            model = agent_cls.make_model(model_label, settings) if jobs and executor.in_process else None
    agent = agent_cls(model=model, model_spec=model_label, max_steps=config.max_steps, **repeat_guard(config.max_repeats))
    return agent, model_label, model_ref, model_part


def _user(
    config: RunConfig, agent: Agent, examples: list[Example], jobs: list[tuple[Example, int]], executor: Executor,
    workers: int,
) -> Any:
    """Give ``agent`` the simulated user's model and its spec (recorded whenever given; the
    model built only when this process plays episodes that have a simulated user); returns
    what a remote executor builds it from (``None`` without one).

    Raises:
        UnknownNameError / ExtensionError / ValueError: for a user model that cannot be built.
    """
    if config.user_model is None:
        return None
    settings = config.settings
    if workers > 1 and settings.rps is not None and executor.in_process:
        settings = dataclasses.replace(settings, rps=settings.rps / workers)
    if not isinstance(config.user_model, str) and _is_chat_model(config.user_model):
        agent.user_model, agent.user_model_spec = config.user_model, f"object:{type(config.user_model).__name__}"
        return config.user_model
    spec, _ = model_spec_ref(str(config.user_model))
    agent.user_model_spec = spec
    if jobs and executor.in_process and any(ex.user is not None for ex, _ in jobs):
        from toolgym.providers import build_model

        agent.user_model = build_model(spec, settings)
    return spec


def _play(
    executor: Executor, episodes: Episodes, out: Path | None, finished: list[Trajectory],
    error_limit: ErrorLimit, record: RunRecord, bar_label: str | None,
) -> list[Trajectory]:
    """Play the episodes, appending each trajectory to ``trajectories.jsonl`` (with ``out``)
    and to ``finished`` as it arrives; returns ``finished``.

    Raises:
        TooManyErrors: when the error limit is passed (what finished is saved).
    """
    bar = None
    if bar_label is not None:
        from tqdm import tqdm

        # no monitor thread: the process may fork its workers while the bar is shown
        tqdm.monitor_interval = 0
        bar = tqdm(total=len(episodes.jobs), desc=bar_label, unit="episode", file=sys.stderr)
    writer = JsonlAppender(out / TRAJECTORIES_FILE) if out is not None else None
    try:
        def on_done(traj: Trajectory) -> None:
            if writer is not None:
                writer.write(traj)
            finished.append(traj)
            error_limit.count(traj)
            if len(finished) % 1024 == 0:  # finished trajectories live to the end: stop rescanning them
                gc.freeze()
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(traj.status)

        with _frozen_gc():
            executor.play(episodes, on_done)
        used = getattr(executor, "workers_used", None)  # a remote executor's own count (Ray: its actors)
        if isinstance(used, int) and used > 0:
            record.workers = used
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    return finished

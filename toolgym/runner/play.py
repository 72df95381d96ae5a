"""Playing episodes: one episode on a fresh environment, many with asyncio, or in forked worker processes; the ``local`` executor."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from toolgym.agents import Agent
from toolgym.environments import Environment
from toolgym.executor import EXECUTORS, Episodes
from toolgym.records import Example, Trajectory
from toolgym.runio import (
    record_line,
)


async def play_episode(agent: Agent, env_cls: type[Environment], example: Example, trial: int) -> Trajectory:
    """Play one (example, trial) episode on a fresh environment; never raises for a failing
    reset, model or tool (the trajectory gets status ``error``). Every executor plays an
    episode this way."""
    env = env_cls()
    try:
        env.reset(example)
    except Exception as exc:
        return Trajectory(
            example_id=example.id, trial=trial, env=env_cls.name, agent=agent.name,
            model=agent.model_spec, status="error",
            error=f"{type(exc).__name__} in reset: {exc}",
        )
    else:
        return await agent.arun(env, example, trial)
    finally:
        env.close()


async def play_all(
    agent: Agent,
    env_cls: type[Environment],
    jobs: list[tuple[Example, int]],
    concurrency: int,
    on_done: Callable[[Trajectory], None],
    on_start: Callable[[Example, int], None] | None = None,
) -> None:
    """Play every (example, trial) job with at most ``concurrency`` episodes in flight;
    ``on_start`` (if given) is called as each episode starts, ``on_done`` receives each
    trajectory as soon as it finishes."""
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(example: Example, trial: int) -> None:
        async with semaphore:
            if on_start is not None:
                on_start(example, trial)
            on_done(await play_episode(agent, env_cls, example, trial))

    try:
        await asyncio.gather(*(one(ex, trial) for ex, trial in jobs))
    finally:  # also on Ctrl-C: hosted models close their HTTP clients
        aclose = getattr(agent.model, "aclose", None)
        if aclose is not None:
            await aclose()


class WorkerDied(RuntimeError):
    """A worker process of ``--workers`` ended before playing its share of the episodes."""


def play_in_processes(
    agent: Agent,
    env_cls: type[Environment],
    jobs: list[tuple[Example, int]],
    concurrency: int,
    workers: int,
    on_done: Callable[[Trajectory], None],
) -> None:
    """Play the jobs in ``workers`` forked processes, each running :func:`play_all` on its
    share of the jobs with its share of ``concurrency`` (jobs are dealt in proportion to the
    slots); ``on_done`` is called in this process, in the order trajectories arrive, so this
    process stays the only writer of the run's files.

    One Python process tops out at a few hundred model calls a second against a fast server
    (each costs about 2.3 ms of CPU in the SDK, langchain and langgraph on a JMultiWOZ-TC
    turn; BENCHMARKS.md); one worker per core lifts that limit. The agent and its model are
    inherited through ``fork``, so agents, environments and providers registered by the
    caller's own code work unchanged; each worker opens its own HTTP connections on its own
    event loop. A per-process request rate (``--rps``) applies in each worker; the runner
    divides it between them.

    **A worker that dies** (a tool that kills its process, a crash in a C library, the out of
    memory killer) does not end the run. Each worker says which episodes it starts, so the
    episodes in flight when it died are known: one that was alone in flight there is recorded
    as an ``error`` trajectory naming the death (``WorkerDied: the worker process playing
    this episode died (exit code 7) ...``); when several were, each is played again alone in a
    fresh worker, so the one that kills its worker is named at its second death at most
    (:data:`WORKER_DEATHS`). Episodes the dead worker had not started are dealt to fresh
    workers. ``--resume`` plays such an error again, as any other, and records it again if
    it kills its worker again: it never stops the run.

    Ctrl-C is taken between two trajectories, never in the middle of ``on_done``; the
    workers are then terminated. A worker also ends when this process dies (Linux), so none
    is left holding the run directory.

    Raises:
        WorkerDied: when a worker dies with no episode in flight (at start-up, say): nothing
            can be blamed, so the run stops; every trajectory it sent whole was passed to
            ``on_done`` (``--resume`` plays the rest).
        ValueError: on a platform without ``fork`` (Windows), or with ``workers`` above
            ``concurrency``.
        KeyboardInterrupt: on Ctrl-C.
    """
    import multiprocessing as mp
    import signal
    import threading

    if "fork" not in mp.get_all_start_methods():
        raise ValueError("--workers above 1 needs the fork start method (Linux, macOS); use --workers 1")
    if not 1 <= workers <= concurrency:
        raise ValueError(f"--workers {workers} must be between 1 and --concurrency ({concurrency})")
    interrupted = threading.Event()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    if in_main_thread:
        signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    deaths: dict[tuple[str, int], list[str]] = {}  # episode -> the deaths it was in flight for
    alone: list[tuple[Example, int]] = []  # suspects: each played again alone
    pending = list(jobs)
    try:
        while pending or alone:
            if alone:  # one worker per suspect, one episode each, at most `workers` at a time
                batch, alone = alone[:workers], alone[workers:]
                shares, slots = [[job] for job in batch], [1] * len(batch)
            else:
                shares, slots = _deal(pending, concurrency, workers)
                pending = []
            dead = _play_round(agent, env_cls, shares, slots, on_done, interrupted, ctx=mp.get_context("fork"))
            for name, code, in_flight, unstarted in dead:
                pending += unstarted
                if not in_flight:
                    raise WorkerDied(f"worker process died: {name} (exit code {code}) with no episode in flight; "
                                     "finished episodes are saved, --resume plays the rest")
                for example, trial in in_flight:
                    seen = deaths.setdefault((example.id, trial), [])
                    seen.append(f"{name} (exit code {code})")
                    if len(in_flight) == 1 or len(seen) >= WORKER_DEATHS:
                        on_done(_died(agent, env_cls, example, trial, seen))
                    else:
                        alone.append((example, trial))
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


WORKER_DEATHS = 2
"""Worker deaths an episode may be in flight for before it is recorded as an ``error`` (one
when it was alone in flight: see :func:`play_in_processes`)."""


def _deal(jobs: list[tuple[Example, int]], concurrency: int, workers: int) -> tuple[list[list[tuple[Example, int]]], list[int]]:
    """The jobs dealt to ``workers`` in proportion to their slots of ``concurrency``."""
    slots = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
    deal = [w for w in range(workers) for _ in range(slots[w])]  # one entry per slot
    shares: list[list[tuple[Example, int]]] = [[] for _ in range(workers)]
    for k, job in enumerate(jobs):
        shares[deal[k % len(deal)]].append(job)
    return shares, slots


def _died(agent: Agent, env_cls: type[Environment], example: Example, trial: int, seen: list[str]) -> Trajectory:
    """The ``error`` trajectory of an episode whose worker died while playing it."""
    return Trajectory(
        example_id=example.id, trial=trial, env=env_cls.name, agent=agent.name, model=agent.model_spec, status="error",
        error=(f"WorkerDied: the worker process playing this episode (example {example.id!r}, trial {trial}) died: "
               f"{', '.join(seen)}; a tool or the agent ended its process (a crash, an exit, the out-of-memory "
               "killer), so it is recorded as an error and the run goes on"),
    )


def _play_round(
    agent: Agent, env_cls: type[Environment], shares: list[list[tuple[Example, int]]], slots: list[int],
    on_done: Callable[[Trajectory], None], interrupted: Any, ctx: Any,
) -> list[tuple[str, int | None, list[tuple[Example, int]], list[tuple[Example, int]]]]:
    """Play ``shares`` in one forked worker each (``slots`` episodes in flight in each);
    returns each dead worker's ``(name, exit code, episodes in flight, episodes not started)``."""
    from multiprocessing.connection import wait

    processes, readers, owner = [], [], {}
    started: dict[int, set[tuple[str, int]]] = {}
    finished: dict[int, set[tuple[str, int]]] = {}
    try:
        for i, share in enumerate(shares):
            if not share:
                continue
            reader, writer = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_worker, args=(writer, [*readers, reader], os.getpid(), agent, env_cls, share, slots[i]),
                name=f"toolgym-worker-{i}",
            )
            process.start()
            writer.close()
            processes.append((process, share))
            readers.append(reader)
            owner[id(reader)] = i
            started[i], finished[i] = set(), set()
        open_readers = list(readers)
        while open_readers:
            if interrupted.is_set():
                raise KeyboardInterrupt
            for reader in wait(open_readers, timeout=0.2):
                i = owner[id(reader)]
                try:
                    data = reader.recv_bytes()
                except (EOFError, OSError):  # the worker ended (a message cut short is dropped)
                    open_readers.remove(reader)
                    continue
                if data[:1] == b"S":
                    example_id, trial = json.loads(data[1:])
                    started[i].add((example_id, trial))
                    continue
                trajectory = Trajectory.model_validate_json(data[1:])
                finished[i].add(trajectory.key)
                on_done(trajectory)
        if interrupted.is_set():
            raise KeyboardInterrupt
    except BaseException:  # Ctrl-C or a failing on_done: stop the workers
        for process, _ in processes:
            process.terminate()
        raise
    finally:
        for process, _ in processes:
            process.join()
    dead = []
    for n, (process, share) in enumerate(processes):
        if process.exitcode == 0:
            continue
        i = [k for k, s in enumerate(shares) if s][n]
        in_flight = [job for job in share if (job[0].id, job[1]) in started[i] - finished[i]]
        unstarted = [job for job in share if (job[0].id, job[1]) not in started[i]]
        dead.append((process.name, process.exitcode, in_flight, unstarted))
    return dead


def _worker(
    writer: Any, inherited_readers: list[Any], parent: int, agent: Agent, env_cls: type[Environment],
    jobs: list[tuple[Example, int]], concurrency: int,
) -> None:
    """Body of a worker process: play ``jobs``, saying as each starts (``S`` and its key) and
    sending each trajectory as JSON (``T`` and the line) as it ends."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it terminates us
    for reader in inherited_readers:  # only the parent reads: a write after its death fails
        reader.close()
    try:  # Linux: SIGTERM when the parent dies, whatever this process is waiting for
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed pipe ends it at its next write
        pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)
    asyncio.run(play_all(agent, env_cls, jobs, concurrency, lambda t: writer.send_bytes(b"T" + record_line(t)),
                         on_start=lambda ex, trial: writer.send_bytes(b"S" + json.dumps([ex.id, trial]).encode())))
    writer.close()


@EXECUTORS.register("local")
class LocalExecutor:
    """Episodes in this process (asyncio, :func:`play_all`) or, with ``workers`` above 1, in
    forked processes (:func:`play_in_processes`)."""

    name = "local"
    in_process = True

    def play(self, episodes: Episodes, on_done: Callable[[Trajectory], None]) -> None:
        """Play ``episodes``; see :class:`toolgym.executor.Executor`.

        Raises:
            WorkerDied / ValueError / KeyboardInterrupt: as :func:`play_in_processes`.
        """
        e = episodes
        if e.workers > 1:
            play_in_processes(e.agent, e.env_cls, e.jobs, e.concurrency, e.workers, on_done)
        else:
            asyncio.run(play_all(e.agent, e.env_cls, e.jobs, e.concurrency, on_done))


@contextlib.contextmanager
def _frozen_gc() -> Iterator[None]:
    """Keep the cycle collector off what is loaded so far (the dataset: millions of objects
    for a large one, alive until the end): frozen, it is not rescanned while episodes
    allocate, and forked workers do not copy its pages (with two workers on JMultiWOZ-TC, CPU
    per turn 2.98 -> 2.52 ms; BENCHMARKS.md)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


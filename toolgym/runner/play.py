"""Playing episodes: one episode on a fresh environment, many with asyncio, or in forked worker processes; the ``local`` executor."""

from __future__ import annotations

import asyncio
import contextlib
import gc
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
) -> None:
    """Play every (example, trial) job with at most ``concurrency`` episodes in flight;
    ``on_done`` receives each trajectory as soon as it finishes."""
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(example: Example, trial: int) -> None:
        async with semaphore:
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

    Ctrl-C is taken between two trajectories, never in the middle of ``on_done``; the
    workers are then terminated. A worker also ends when this process dies (Linux), so none
    is left holding the run directory.

    Raises:
        WorkerDied: when a worker dies (killed, out of memory) before playing its share;
            every trajectory it sent whole was passed to ``on_done`` (``--resume`` plays the
            rest).
        ValueError: on a platform without ``fork`` (Windows), or with ``workers`` above
            ``concurrency``.
        KeyboardInterrupt: on Ctrl-C.
    """
    import multiprocessing as mp
    import signal
    import threading
    from multiprocessing.connection import wait

    if "fork" not in mp.get_all_start_methods():
        raise ValueError("--workers above 1 needs the fork start method (Linux, macOS); use --workers 1")
    if not 1 <= workers <= concurrency:
        raise ValueError(f"--workers {workers} must be between 1 and --concurrency ({concurrency})")
    ctx = mp.get_context("fork")
    slots = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
    deal = [w for w in range(workers) for _ in range(slots[w])]  # one entry per slot
    shares: list[list[tuple[Example, int]]] = [[] for _ in range(workers)]
    for k, job in enumerate(jobs):
        shares[deal[k % len(deal)]].append(job)

    interrupted = threading.Event()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    if in_main_thread:
        signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    processes, readers = [], []
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
            processes.append(process)
            readers.append(reader)
        while readers:
            if interrupted.is_set():
                raise KeyboardInterrupt
            for reader in wait(readers, timeout=0.2):
                try:
                    data = reader.recv_bytes()
                except (EOFError, OSError):  # the worker ended (a message cut short is dropped)
                    readers.remove(reader)
                    continue
                on_done(Trajectory.model_validate_json(data))
        if interrupted.is_set():
            raise KeyboardInterrupt
    except BaseException:  # Ctrl-C or a failing on_done: stop the workers
        for process in processes:
            process.terminate()
        raise
    finally:
        for process in processes:
            process.join()
        if in_main_thread:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    dead = [f"{p.name} (exit code {p.exitcode})" for p in processes if p.exitcode != 0]
    if dead:
        raise WorkerDied(f"worker process died: {', '.join(dead)}; finished episodes are saved, --resume plays the rest")


def _worker(
    writer: Any, inherited_readers: list[Any], parent: int, agent: Agent, env_cls: type[Environment],
    jobs: list[tuple[Example, int]], concurrency: int,
) -> None:
    """Body of a worker process: play ``jobs``, sending each trajectory as JSON."""
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
    asyncio.run(play_all(agent, env_cls, jobs, concurrency, lambda t: writer.send_bytes(record_line(t))))
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


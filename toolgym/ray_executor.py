"""The ``ray`` executor: episodes played by Ray actors across a cluster, results written by the
driver alone.

How a run goes (``toolgym run --executor ray`` or ``toolgym.evaluate(..., executor="ray")``):

1. The driver (the process that called :func:`toolgym.runner.run`) connects to the cluster
   (``address``: ``auto``, ``ray://HOST:PORT``, ``HOST:PORT``, or ``None`` for ``RAY_ADDRESS``
   or a new single-node Ray) and starts :class:`EpisodeWorker` actors spread over the alive
   nodes. Each actor receives the dataset with its constructor (by value, see
   :class:`EpisodeWorker`) and builds the environment, agent and model from the run's
   :class:`~toolgym.executor.PartSpecs`; an actor that cannot (an extension not installed on
   its node) stops the run before any episode, naming the node and the error.
2. The driver keeps at most ``concurrency`` episodes in flight over the whole cluster (each
   actor plays its share concurrently on its own event loop) and collects them with
   ``ray.wait`` as they finish; every trajectory goes through the runner's ``on_done``, so the
   driver is the only writer of ``trajectories.jsonl`` and the progress bar, summary and
   ``--resume`` are those of a local run.
3. ``--rps`` is one budget for the cluster: a :class:`RateLimiter` actor hands out request
   slots ``1/rps`` s apart, and each worker's hosted model
   (:class:`~toolgym.providers.retry.ResilientChatModel`) takes one per attempt, retries
   included, through :class:`SharedRateLimiter`.
4. Faults: an actor whose process dies is restarted by Ray on its node and its unfinished
   calls are resubmitted (``max_restarts=-1``, ``max_task_retries=-1``). Each actor is pinned
   to its node (Ray 2.60's "soft" node affinity may start it on another node, leaving nodes
   idle), so when a node dies its actors fail for good: the driver puts their in-flight
   episodes back in the queue, where the surviving actors and a replacement actor started
   anywhere in the cluster play them. An ``ObjectRef`` resolves once and a failed call yields
   no trajectory, so each (example, trial) reaches ``on_done`` once; the driver also refuses a
   second trajectory of a key it has already passed on. When the driver dies, the actors die
   with it (they are owned by it) and ``--resume`` plays what is missing.

Requires the ``ray`` extra: ``pip install -e '.[ray]'`` from a clone of the same revision, on the driver and on every node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from toolgym.registry import ExtensionError

try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ExtensionError("the ray executor needs Ray on the driver and every node: pip install -e '.[ray]' in the toolgym clone") from exc

from langchain_core.rate_limiters import BaseRateLimiter

from toolgym.agents import Agent, repeat_guard
from toolgym.executor import EXECUTORS, Episodes, PartSpecs
from toolgym.records import Example, Trajectory
from toolgym.runner import WorkerDied, play_episode, resolve_agent, resolve_benchmark

__all__ = ["EpisodeWorker", "RateLimiter", "RayExecutor", "SharedRateLimiter", "build_parts"]


@ray.remote(num_cpus=0)
class RateLimiter:
    """One request-rate budget for a whole cluster: grants are spaced ``1 / rps`` seconds
    apart in the order they are asked for (a token bucket of size 1, the shape of the
    per-process limit of :class:`~toolgym.providers.retry.ResilientChatModel`).

    Args:
        rps: Requests per second, positive.
    """

    def __init__(self, rps: float) -> None:
        if rps <= 0:
            raise ValueError(f"rps must be positive, got {rps}")
        self.interval = 1.0 / rps
        self.next = time.monotonic()

    def reserve(self, blocking: bool = True) -> float | None:
        """Reserve the next slot; returns seconds to wait before using it, or ``None`` (and
        reserves nothing) when ``blocking`` is false and no slot is free now."""
        now = time.monotonic()
        start = max(now, self.next)
        if not blocking and start > now:
            return None
        self.next = start + self.interval
        return start - now


class SharedRateLimiter(BaseRateLimiter):
    """A langchain-core rate limiter that takes its slots from a :class:`RateLimiter` actor,
    so that every process of the cluster shares one budget.

    Args:
        handle: The actor handle.
    """

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def acquire(self, *, blocking: bool = True) -> bool:
        """Wait for a slot (synchronous callers); ``False`` when not ``blocking`` and none is
        free now."""
        delay = ray.get(self.handle.reserve.remote(blocking))
        if delay is None:
            return False
        time.sleep(delay)
        return True

    async def aacquire(self, *, blocking: bool = True) -> bool:
        """Wait for a slot without blocking the event loop."""
        delay = await self.handle.reserve.remote(blocking)
        if delay is None:
            return False
        await asyncio.sleep(delay)
        return True


def build_parts(parts: PartSpecs, limiter: BaseRateLimiter | None = None) -> tuple[Agent, type]:
    """The agent and environment class of a run, built again from its part specs (what each
    worker does once).

    With ``limiter``, a hosted model's own per-process ``rps`` limit is replaced by it.

    Raises:
        UnknownNameError / ExtensionError: for a part that cannot be found or imported here.
        ValueError: when the provider rejects the model name or settings.
    """
    from toolgym.providers.retry import ResilientChatModel

    benchmark, _ = resolve_benchmark(parts.env)
    agent_obj, _ = resolve_agent(parts.agent)
    if isinstance(agent_obj, Agent):
        return agent_obj, benchmark.environment
    model: Any = None
    settings = parts.settings if limiter is None else dataclasses.replace(parts.settings, rps=None)
    if agent_obj.needs_model:
        model = agent_obj.make_model(parts.model, settings) if isinstance(parts.model, str) else parts.model
    if limiter is not None and isinstance(model, ResilientChatModel):
        model.share_rate_limiter(limiter)
    label = parts.model if isinstance(parts.model, str) or parts.model is None else f"object:{type(parts.model).__name__}"
    agent = agent_obj(model=model, model_spec=label if agent_obj.needs_model else None, max_steps=parts.max_steps,
                      **repeat_guard(parts.max_repeats))
    if parts.user_model is not None:  # a simulated user, built here as the driver built it
        from toolgym.providers import build_model

        user = parts.user_model
        agent.user_model = build_model(user, settings) if isinstance(user, str) else user
        agent.user_model_spec = user if isinstance(user, str) else f"object:{type(user).__name__}"
    return agent, benchmark.environment


@ray.remote(num_cpus=0)
class EpisodeWorker:
    """A Ray actor playing episodes concurrently on its event loop.

    Args:
        parts: How to build the environment, agent and model (see :func:`build_parts`).
        examples: The run's examples, passed by value (Ray moves a large argument through its
            object store itself). Not as an ``ObjectRef`` (top level or nested in a list): for
            an actor that may restart, such an argument makes Ray's core worker log an error
            line per actor, since the restart fails if that object is lost
            (ray-project/ray#53727).
        limiter: A :class:`RateLimiter` handle, or ``None`` without ``--rps``.
    """

    def __init__(self, parts: PartSpecs, examples: list[Example], limiter: Any = None) -> None:
        self.examples = examples
        self.node = ray.get_runtime_context().get_node_id()
        self.agent, self.env_cls = build_parts(parts, SharedRateLimiter(limiter) if limiter is not None else None)

    async def ready(self) -> str:
        """The id of the node this actor runs on (once it has built its parts)."""
        return self.node

    async def play(self, index: int, trial: int) -> tuple[str, Trajectory]:
        """Play example number ``index`` of the dataset, trial ``trial``; returns the id of
        the node that played it and the trajectory."""
        return self.node, await play_episode(self.agent, self.env_cls, self.examples[index], trial)

    async def close(self) -> None:
        """Close the model's HTTP client on this actor's event loop."""
        aclose = getattr(self.agent.model, "aclose", None)
        if aclose is not None:
            await aclose()


@EXECUTORS.register("ray")
class RayExecutor:
    """Plays episodes on a Ray cluster; see the module documentation.

    Args:
        address: The cluster: ``auto`` (the one ``ray start`` runs on this machine),
            ``ray://HOST:PORT`` (Ray Client), ``HOST:PORT``, or ``None``: ``RAY_ADDRESS`` if
            set, else a new single-node Ray on this machine. Ignored when Ray is already
            initialised in this process.
        actors: Episode-playing actors (default: the run's ``workers`` when above 1, else one
            per CPU of the cluster's alive nodes); never more than the episodes or
            ``concurrency``.
        init_options: Further keyword arguments of ``ray.init`` (``runtime_env``, ...).
    """

    name = "ray"
    in_process = False

    def __init__(self, address: str | None = None, actors: int | None = None, init_options: dict[str, Any] | None = None) -> None:
        self.address = address
        self.actors = actors
        self.init_options = dict(init_options or {})
        self.duplicates = 0
        """Trajectories refused because their (example, trial) was already passed on."""
        self.episodes_by_node: Counter[str] = Counter()
        """Episodes passed on, by the id of the node that played them (last run)."""
        self.actor_nodes: list[str] = []
        """The node each first actor started on (last run)."""
        self.replayed = 0
        """Episodes put back in the queue because their actor died (last run)."""
        self._actors: list[Any] = []
        self._new_actor: Callable[..., Any] | None = None
        self._started_here = False  # Ray initialised by default_concurrency, shut down after play

    def default_concurrency(self) -> int:
        """Episodes in flight for a run that gives no ``concurrency``: one per CPU of the
        cluster's alive nodes (an environment's own default, often 1, would leave all but one
        CPU idle). Initialises Ray here when it is not (then :meth:`play` shuts it down)."""
        self._started_here = self._connect() or self._started_here
        cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive"))
        return max(1, int(cpus))

    def _connect(self) -> bool:
        """Initialise Ray unless it is; returns whether this call did."""
        if ray.is_initialized():
            return False
        options = {"include_dashboard": False, "log_to_driver": True, **self.init_options}
        if self.address is not None and self.address.startswith("ray://"):
            options.pop("include_dashboard")
        ray.init(address=self.address, **options)
        return True

    @property
    def workers_used(self) -> int | None:
        """Actors started for the last run (not counting one started to replace the actor of a
        dead node), recorded as ``run.json``'s ``workers``; ``None`` before any."""
        return len(self.actor_nodes) or None

    def play(self, episodes: Episodes, on_done: Callable[[Trajectory], None]) -> None:
        """Play ``episodes`` on the cluster; see :class:`toolgym.executor.Executor`.

        Raises:
            ExtensionError: when a worker cannot build the run's parts (an extension or
                provider not importable on its node), before any episode is played.
            WorkerDied: when the actors keep dying (more replacements than actors were
                needed); the trajectories received were passed on (``--resume`` plays the
                rest).
            KeyboardInterrupt: on Ctrl-C (the actors are killed).
        """
        self.duplicates, self.episodes_by_node, self.actor_nodes, self.replayed = 0, Counter(), [], 0
        if not episodes.jobs:
            return
        started = self._connect() or self._started_here
        self._started_here = False
        self._actors = []
        limiter = None
        try:
            limiter = RateLimiter.remote(episodes.parts.settings.rps) if episodes.parts.settings.rps else None
            self._start_actors(episodes, limiter)
            self._drive(episodes, on_done)
        finally:
            for actor in self._actors:
                try:
                    ray.get(actor.close.remote(), timeout=10)
                except Exception:  # best effort: an actor that is gone closes nothing
                    pass
                ray.kill(actor)
            if limiter is not None:
                ray.kill(limiter)
            self._actors, self._new_actor = [], None
            if started:
                ray.shutdown()

    def _start_actors(self, episodes: Episodes, limiter: Any) -> None:
        """One actor per CPU of the alive nodes (or as many as asked), each pinned to its node;
        waits until every one has built the run's parts."""
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        if not nodes:
            raise WorkerDied("ray executor: the cluster has no alive node with a CPU")
        slots = [n["NodeID"] for n in nodes for _ in range(max(1, int(n["Resources"]["CPU"])))]
        wanted = self.actors or (episodes.workers if episodes.workers > 1 else len(slots))
        count = max(1, min(wanted, episodes.concurrency, len(episodes.jobs)))
        order = [slots[(i * len(slots)) // count] if count <= len(slots) else slots[i % len(slots)] for i in range(count)]
        options = {"max_restarts": -1, "max_task_retries": -1, "max_concurrency": -(-episodes.concurrency // count) + 8}

        def new_actor(node_id: str | None = None) -> Any:
            # Pinned (not "soft": Ray 2.60 may then place it on another node); a pinned actor
            # whose node dies is dead for good, and its replacement goes anywhere.
            where = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)} if node_id else {}
            return EpisodeWorker.options(**options, **where).remote(episodes.parts, episodes.examples, limiter)

        self._new_actor = new_actor
        self._actors = [new_actor(node_id) for node_id in order]
        readies = [a.ready.remote() for a in self._actors]
        for node_id, ref in zip(order, readies, strict=True):
            try:
                self.actor_nodes.append(ray.get(ref))
            except ray.exceptions.RayError as exc:
                cause = getattr(exc, "cause", None) or exc
                raise ExtensionError(
                    f"ray executor: a worker on node {node_id[:12]} cannot build this run's environment, agent "
                    f"or model: {_short(cause)}. Everything the run names (environment, agent, model provider "
                    "and their packages) must be importable on every node: install the same packages there "
                    "(docs/ray.md, 'What each node needs')"
                ) from None

    def _drive(self, episodes: Episodes, on_done: Callable[[Trajectory], None]) -> None:
        """Keep ``concurrency`` episodes in flight on the least-loaded live actors and pass
        each trajectory on as it arrives; the episodes of an actor that died for good go back
        to the queue, and a replacement actor is started."""
        actors = self._actors
        index = {ex.id: i for i, ex in enumerate(episodes.examples)}
        queue = [(index[ex.id], trial) for ex, trial in reversed(episodes.jobs)]  # popped from the end
        alive = set(range(len(actors)))
        load = [0] * len(actors)
        replacements = len(actors)
        pending: dict[Any, tuple[int, tuple[int, int]]] = {}
        passed: set[tuple[str, int]] = set()

        def submit() -> None:
            job = queue.pop()
            a = min(alive, key=load.__getitem__)
            load[a] += 1
            pending[actors[a].play.remote(*job)] = (a, job)

        while queue and len(pending) < episodes.concurrency:
            submit()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                continue
            if len(pending) > 1:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                a, job = pending.pop(ref)
                load[a] -= 1
                try:
                    node, traj = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as exc:  # its node died
                    queue.append(job)
                    self.replayed += 1
                    if a in alive:
                        alive.discard(a)
                        if replacements == 0:
                            raise WorkerDied(
                                f"ray executor: worker actors keep dying ({_short(exc)}); finished episodes "
                                "are saved, --resume plays the rest"
                            ) from None
                        replacements -= 1
                        actors.append(self._new_actor())
                        load.append(0)
                        alive.add(len(actors) - 1)
                else:
                    key = (traj.example_id, traj.trial)
                    if key in passed:
                        self.duplicates += 1
                    else:
                        passed.add(key)
                        self.episodes_by_node[node] += 1
                        on_done(traj)
                while queue and len(pending) < episodes.concurrency:
                    submit()


def _short(exc: BaseException) -> str:
    """The last line of an error's text (Ray's carry the remote traceback before it)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__

"""Where episodes are played: the executor interface of the runner.

The runner resolves a run, then hands its episodes to an executor and receives each trajectory
back through one ``on_done`` callback, in the process that called :func:`toolgym.runner.run`.
That process stays the only writer of the run directory, whatever the executor: the files,
the progress bar, the summary and ``--resume`` are the same for every executor.

Two executors are built in:

- ``local`` (:class:`toolgym.runner.play.LocalExecutor`): asyncio concurrency in this process, or
  ``--workers`` forked processes.
- ``ray`` (:class:`toolgym.ray_executor.RayExecutor`): Ray actors across a cluster; the
  optional extra ``toolgym[ray]``, imported only when named.

Others can be named by a ``module.path:Name`` spec or declared in the ``toolgym.executors``
entry-point group: a class whose instances have ``play(episodes, on_done)``, built with the
run's ``executor_options`` as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from toolgym.providers import ModelSettings
from toolgym.registry import Registry

if TYPE_CHECKING:
    from toolgym.agents import Agent
    from toolgym.environments import Environment
    from toolgym.records import Example, Trajectory

__all__ = ["EXECUTORS", "Episodes", "Executor", "PartSpecs", "make_executor"]


@dataclass
class PartSpecs:
    """How a process other than the driver builds the run's environment, agent and model
    again (what a remote worker receives instead of live objects).

    Each part is what the run resolved it from: a name or ``module.path:Name`` /
    ``file.py:Name`` spec (file specs made absolute), or the object itself when it was given
    as one (it then travels by pickling).

    Attributes:
        env: The environment or benchmark.
        agent: The agent name, spec, class or instance.
        model: The model spec, a chat-model object, or ``None`` for agents without one.
        settings: The run's model settings (``rps`` for the whole run, not divided).
        max_steps: Model turns per episode.
        max_repeats: The repeat guard (identical consecutive tool calls before
            ``repeat_limit``), or ``None``: off.
        user_model: The simulated user's model spec or chat-model object, or ``None``.
    """

    env: Any
    agent: Any
    model: Any
    settings: ModelSettings = field(default_factory=ModelSettings)
    max_steps: int = 40
    max_repeats: int | None = None
    user_model: Any = None


@dataclass
class Episodes:
    """The episodes of a run, as handed to an executor.

    Attributes:
        jobs: ``(example, trial)`` pairs still to play, in dataset order.
        examples: Every example of the run (the dataset a remote executor ships once).
        concurrency: Episodes in flight at once, over all processes and machines.
        workers: Processes (local) or actors (Ray) to play them; executors may choose their
            own default when it is 1.
        agent: The agent built in this process; its ``model`` is ``None`` when the executor
            is not :attr:`Executor.in_process`.
        env_cls: The environment class.
        parts: How a remote process builds the agent, environment and model again.
    """

    jobs: list[tuple[Example, int]]
    examples: list[Example]
    concurrency: int
    workers: int
    agent: Agent
    env_cls: type[Environment]
    parts: PartSpecs


@runtime_checkable
class Executor(Protocol):
    """Plays episodes and hands each trajectory to ``on_done`` in the calling process.

    Attributes:
        name: Short name recorded nowhere but shown in messages (``local``, ``ray``).
        in_process: Whether episodes run on the agent built by the runner (its model is then
            built in this process); remote executors build their own from
            :attr:`Episodes.parts`.
    """

    name: str
    in_process: bool

    def play(self, episodes: Episodes, on_done: Callable[[Trajectory], None]) -> None:
        """Play every job; call ``on_done`` once per (example, trial), in this process.

        Raises:
            KeyboardInterrupt: on Ctrl-C (trajectories passed to ``on_done`` are kept).
            RuntimeError subclasses: when episodes cannot be played any more (a worker
                died for good); every trajectory received before was passed on.
        """
        ...


def _as_executor_class(obj: Any, name: str) -> Callable[..., Executor]:
    if not callable(obj) or not hasattr(obj, "play"):
        raise TypeError(f"executor {name!r}: expected a class with a play(episodes, on_done) method, got {obj!r}")
    return obj


EXECUTORS: Registry[Callable[..., Executor]] = Registry(
    "executor", "toolgym.executors", {"local": "toolgym.runner.play", "ray": "toolgym.ray_executor"}, _as_executor_class
)
"""Executor classes by name (``local``, ``ray``) and the ``toolgym.executors`` entry points;
a module is imported only when its name is looked up."""


def make_executor(name: str | Executor, options: dict[str, Any] | None = None) -> Executor:
    """The executor ``name`` built with ``options`` as keyword arguments (an executor object
    is returned as it is, and then takes no options).

    Raises:
        UnknownNameError: for an unknown name ("did you mean" included).
        ExtensionError: when its module cannot be imported (for ``ray``: Ray is not installed;
            ``pip install -e '.[ray]'``).
        TypeError: for options the executor does not take.
    """
    if not isinstance(name, str):
        if options:
            raise TypeError(f"executor options {sorted(options)} given with an executor object; set them on it")
        if not isinstance(name, Executor):
            raise TypeError(f"expected an executor name or an object with play(episodes, on_done), got {name!r}")
        return name
    return EXECUTORS.get(name)(**(options or {}))

"""Every toolgym environment as a Gymnasium environment, for reinforcement learning and
rollout collection.

``import toolgym.gym`` registers ``toolgym/<name>-v0`` with :func:`gymnasium.register` for
every environment toolgym knows (its suites' and the installed plugins'), so::

    import gymnasium
    import toolgym.gym

    env = gymnasium.make("toolgym/typewriter_26-v0", dataset="test", max_steps=40, reward="stepwise")
    observation, info = env.reset(seed=0)          # OpenAI chat messages; info["tools"]
    observation, reward, terminated, truncated, info = env.step(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "c", "arguments": "{}"}}]})
    env.unwrapped.trajectory()                     # the same Trajectory record a run writes

One episode is one example of the dataset, played the way the ``tool_calling`` agent plays it
(:class:`toolgym.agents.Episode` records it): an action is one assistant turn; its tool calls
run in order against the environment; the episode ends when the assistant answers without a
call (``terminated``), when the environment's own protocol ends it (``max_model_turns``, e.g.
JMultiWOZ-TC: one episode per user turn, ``terminated``), or after ``max_steps`` turns
(``truncated``). A tool-free task (Vietnamese multiple choice) is one step per question: the
answer has no call, so the episode ends there and the answer is graded.

A multi-turn example (``turns``, or a simulated ``user`` played by ``user_model``) is one
episode too: when the assistant answers without a call, the next user message arrives as the
observation (``[{"role": "user", "content": ...}]``, ``info["user_turn"]`` its number) and the
episode goes on; it is ``terminated`` when the user has no more turns or stops (the stop token
never appears in an observation), ``truncated`` when ``max_steps`` turns are spent.

Gymnasium wrappers hide attributes of the environment: reach :meth:`ToolgymEnv.trajectory`,
:meth:`ToolgymEnv.areset` and :meth:`ToolgymEnv.astep` through ``env.unwrapped``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ModuleNotFoundError(
        f"toolgym.gym needs gymnasium ({exc}): install the extra in the toolgym clone: pip install -e '.[gym]'", name=exc.name
    ) from exc
import numpy as np

from toolgym.agents import Episode
from toolgym.data import DatasetError, write_examples
from toolgym.environments import Environment, ToolBug
from toolgym.graders import grader_name
from toolgym.graders.alignment import align, diagnose
from toolgym.graders.steps import first_divergence, step_names
from toolgym.graders.trajectory import (
    observations,
    plan_reads_states,
    recorded_states,
    step_views,
)
from toolgym.openai_format import assistant_message, prompt_messages, step_messages, tool_schemas
from toolgym.parsing import hermes_message, model_step, openai_assistant_message
from toolgym.plugins import registries
from toolgym.records import Example, Score, TokenRecord, Trajectory, UserStep
from toolgym.runio import (
    SCORES_FILE,
    TRAJECTORIES_FILE,
    JsonlAppender,
    RunDirError,
    RunRecord,
    locked_run_dir,
    read_jsonl,
    read_run,
    read_scores,
    read_trajectories,
    write_run,
)
from toolgym.runner import (
    EXAMPLES_FILE,
    finish_run,
    grade_trajectories,
    load_run_examples,
    make_graders,
    new_record,
    resolve_benchmark,
)
from toolgym.users import UserModelError, make_user

__all__ = [
    "AGENT_NAME",
    "PARSERS",
    "AssistantAction",
    "ChatMessages",
    "ToolgymEnv",
    "env_id",
    "matched_prefix",
    "register_environments",
]

AGENT_NAME = "gym"
"""The ``agent`` of trajectories played through this adapter (and of its run directories)."""

PARSERS: dict[str, Callable[[str], Any]] = {"hermes": hermes_message}
"""Parsers of raw model text by name: ``text -> AIMessage`` (``hermes``:
:func:`toolgym.parsing.hermes_message`, the ``<tool_call>`` format of Hermes and Qwen2.5)."""

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_CHARSET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "


class ChatMessages(spaces.Space[list]):
    """The observation space: a list of OpenAI chat messages (dicts with a ``role`` among
    system, user, assistant, tool and ``content`` a string, or ``None`` for an assistant
    message with ``tool_calls``). Not flattenable to arrays: text has no fixed shape."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in _ROLES
            and (isinstance(m.get("content"), str) or (m.get("content") is None and m.get("role") == "assistant"))
            for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        """One user message of random letters (for completeness; nothing here samples it)."""
        return [{"role": "user", "content": _random_text(self.np_random)}]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatMessages)

    def __repr__(self) -> str:
        return "ChatMessages()"


class AssistantAction(spaces.Space[Any]):
    """The action space: one assistant turn, either an OpenAI chat dict (``content`` and/or
    ``tool_calls``; ``role`` ``assistant`` when given) or raw model text for the environment's
    parser. :meth:`sample` gives random text (a reply without a call)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        return isinstance(x, dict) and x.get("role", "assistant") == "assistant" and (
            "content" in x or "tool_calls" in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Random letters and spaces, 1 to 16 characters, from this space's generator."""
        return _random_text(self.np_random)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantAction)

    def __repr__(self) -> str:
        return "AssistantAction()"


def _random_text(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, 17))
    return "".join(_CHARSET[int(i)] for i in rng.integers(0, len(_CHARSET), size=n))


def matched_prefix(expected: list[str], actual: list[str], order_matters: bool = True) -> int:
    """How many expected steps the actual tool calls have matched so far.

    With ``order_matters`` this is the position of the first divergence of the two name
    sequences (:func:`toolgym.graders.steps.first_divergence`, the stepwise grader's own
    rule), capped at ``len(expected)``; without it, the number of leading actual calls that
    each take one still-unmatched name of the expected multiset.

    Args:
        expected: Expected tool names (``Example.expected_steps``).
        actual: Tool names called so far (``"(malformed)"`` for malformed calls).
        order_matters: ``Example.order_matters``.

    Returns:
        An integer between 0 and ``len(expected)``.
    """
    if order_matters:
        diverge = first_divergence(expected, actual)
        return min(len(actual) if diverge is None else diverge, len(expected))
    remaining = Counter(expected)
    matched = 0
    for name in actual:
        if remaining[name] <= 0:
            break
        remaining[name] -= 1
        matched += 1
    return matched


_SCHEMA_CACHE: dict[tuple[Any, ...], list[dict[str, Any]]] = {}


def _schemas(env: Environment) -> list[dict[str, Any]]:
    """The tool schemas of ``env`` (computed once per class and schema objects; a copy)."""
    key = (type(env), *((name, id(env.args_schema(name))) for name in env.functions))
    if key not in _SCHEMA_CACHE:
        _SCHEMA_CACHE[key] = tool_schemas(env)
    return copy.deepcopy(_SCHEMA_CACHE[key])


def milestone_potential(example: Example, steps: list[Any], initial_state: dict[str, Any] | None = None) -> float:
    """The stepwise reward's potential for an example with milestones: required milestones
    matched by the optimal alignment of ``steps`` (the episode's steps so far) over required
    milestones (1.0 when all are optional), 0.0 once a call or a state hits a minefield. State
    milestones and minefields are checked against the state after each tool step, rebuilt from
    the steps' recorded patches and ``initial_state`` (the state after reset); without them they
    count only at the end (the final grader's value). ``message`` and ``result`` milestones count
    from the turn that says the text or the step that returns the result; ``answer`` ones only
    at the end, when the final answer is known."""
    plan = example.plan
    assert plan is not None
    required = sum(1 for m in plan.milestones if not m.optional)
    so_far = Trajectory.model_construct(steps=steps, initial_state=initial_state)
    views = step_views(so_far, results=any(m.refs for m in plan.milestones))
    states = recorded_states(so_far) if initial_state is not None and plan_reads_states(plan) else {}
    observed = observations(so_far) if plan.observes or plan.reads_tools else None
    alignment = align(plan, views, states, observed=observed)
    if diagnose(plan, views, alignment, states=states, observed=observed).mines:
        return 0.0
    return alignment.required_matched / required if required else 1.0


class ToolgymEnv(gymnasium.Env):
    """A toolgym environment and dataset as a Gymnasium environment (see the module
    docstring).

    Args:
        env: An environment name (``typewriter_26``), a ``module:Name`` / ``file.py:Name``
            spec, a :class:`~toolgym.Benchmark` or an :class:`~toolgym.Environment` subclass.
        dataset: A built-in dataset name, a path, or a list of examples (objects or dicts);
            ``None``: the environment's ``test`` set.
        max_steps: Assistant turns before the episode is ``truncated`` (status ``step_limit``).
        reward: ``"final"`` (the environment's first grader at the end of the episode, 0
            before), ``"stepwise"`` (see :meth:`step`), a grader name or spec, a grader
            object (``grade(example, trajectory)``), or a callable
            ``(example, trajectory) -> float`` called at the end.
        parser: How raw-text actions are read: a name in :data:`PARSERS` or a callable
            ``text -> AIMessage``.
        graders: Graders whose values ``info["scores"]`` carries at the end (default: the
            environment's own).
        env_options: Options of the environment's dataset loader (``shots``, ``sample``, ...).
        limit: Use only the first N examples.
        out: A run directory: each finished episode is appended to its
            ``trajectories.jsonl`` and its scores to ``scores.jsonl``; ``run.json`` records
            the environment, dataset and graders, so ``toolgym grade``, ``show``, ``report``
            and ``export`` read it like a run of ``toolgym run``. An episode left unfinished
            (``reset`` or ``close`` before it ended) is appended with status ``aborted``.
            The environment holds the directory's lock until :meth:`close`: each environment
            (each one of a vector environment) needs its own ``out=``. :meth:`close` writes
            the environment's published files there (JMultiWOZ-TC's ``result_<model>.jsonl``
            and ``score_<model>.json``, BFCL's ``BFCL_v4_<category>_result.json``, ...), the
            exporters ``toolgym run`` calls after grading, and ``run.json``'s ``finished_at``.
        model: A label recorded as the trajectories' ``model`` (the policy being trained).
        render_mode: ``None`` or ``"ansi"`` (:meth:`render` returns the conversation as text).
        user_model: The chat model (a spec or a langchain-core chat model) that plays the
            simulated user of examples with ``user`` (see :mod:`toolgym.users`).

    Raises:
        UnknownNameError / ExtensionError: for an environment or grader that cannot be found.
        DatasetError: for an invalid dataset (file and line named).
        ValueError: for an unknown reward mode or parser, ``max_steps`` below 1, or a
            ``limit`` that is not a positive integer (``limit=0`` is refused, as ``run
            --limit 0`` is).
        RunDirError: when ``out`` is a file, holds a run of another environment, or is
            being written by another environment or run (its lock is held).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        env: Any,
        dataset: Any = None,
        *,
        max_steps: int = 40,
        reward: str | Callable[..., Any] | Any = "final",
        parser: str | Callable[[str], Any] = "hermes",
        graders: list[Any] | None = None,
        env_options: dict[str, Any] | None = None,
        limit: int | None = None,
        out: str | Path | None = None,
        model: str | None = None,
        render_mode: str | None = None,
        user_model: Any = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive integer, got {limit!r}")  # as run --limit and RunConfig
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.benchmark, env_ref = resolve_benchmark(env)
        self.env_cls = self.benchmark.environment
        dataset_path, loaded = load_run_examples(self.benchmark, dataset, None, env_options or {})
        examples = loaded[:limit] if limit else loaded
        self.examples: list[Example] = examples
        self._by_id = {ex.id: ex for ex in examples}
        simulated = [ex.id for ex in examples if ex.user is not None]
        if simulated and user_model is None:
            raise DatasetError(f"{dataset_path or 'the dataset'}: {len(simulated)} example(s) have a simulated user "
                               f"(first: {simulated[0]!r}): give user_model= (a model spec or a chat model)")
        self.user_model, self.user_model_spec = user_model, None
        if isinstance(user_model, str):
            from toolgym.providers import ModelSettings, build_model

            self.user_model_spec = user_model
            self.user_model = build_model(user_model, ModelSettings()) if simulated else None
        elif user_model is not None:
            self.user_model_spec = f"object:{type(user_model).__name__}"
        made = make_graders(self.benchmark, graders, examples=examples)
        self.graders = [g for g, _ in made]
        self.primary = self.graders[0] if self.graders else None
        self.reward_mode, self._reward_grader, self._reward_fn = self._reward(reward, made)
        self._unscored_warned: set[str] = set()
        if isinstance(parser, str):
            if parser not in PARSERS:
                raise ValueError(f"unknown parser {parser!r}; known: {', '.join(PARSERS)} (or give a callable)")
            self.parser: Callable[[str], Any] = PARSERS[parser]
        else:
            self.parser = parser
        self.max_steps = max_steps
        self.model_label = model
        self.render_mode = render_mode
        self.observation_space = ChatMessages()
        self.action_space = AssistantAction()
        self._trials: Counter[str] = Counter()
        self._env: Environment | None = None
        self._episode: Episode | None = None
        self._messages: list[dict[str, Any]] = []
        self._done = True
        self._potential = 0.0
        self._frozen = False
        self._trajectory: Trajectory | None = None
        self._scores: list[Score] = []
        self._lock = contextlib.ExitStack()
        self._record: RunRecord | None = None  # run.json of out=, written again at close()
        self._earlier: dict[str, Example] = {}  # examples of out='s earlier trajectories beyond `limit`
        self.out = Path(out) if out is not None else None
        if self.out is not None:
            try:
                self._open_run(dataset_path, env_ref, made, env_options or {}, limit, reward, parser, loaded)
            except BaseException:
                self._lock.close()
                raise

    # --- set-up ----------------------------------------------------------------------------
    def _reward(self, reward: Any, made: list[Any]) -> tuple[str, Any, Callable[..., Any] | None]:
        if isinstance(reward, str) and reward in ("final", "stepwise"):
            return reward, self.primary, None
        if isinstance(reward, str) or isinstance(reward, type):
            grader, _ = make_graders(self.benchmark, [reward])[0]
            return "grader", grader, None
        if callable(getattr(reward, "grade", None)):
            return "grader", reward, None
        if callable(reward):
            return "callable", None, reward
        raise ValueError(f"reward must be 'final', 'stepwise', a grader name or object, or a callable; got {reward!r}")

    def _open_run(
        self, dataset_path: Path | None, env_ref: Any, made: list[Any], env_options: dict[str, Any],
        limit: int | None, reward: Any, parser: Any, loaded: list[Example],
    ) -> None:
        out = self.out
        assert out is not None
        if out.exists() and not out.is_dir():
            raise RunDirError(f"out={str(out)!r} is a file, not a run directory: give a directory path")
        try:
            # trial numbers are counted per environment: two writers of one directory would
            # give the same (example, trial) to different episodes
            self._lock.enter_context(locked_run_dir(out))
        except RunDirError as exc:
            holder = str(exc).rpartition("(")[2].rstrip(")")  # "pid N" (this process's own pid: an env here)
            raise RunDirError(
                f"out={str(out)!r} is already being written by another environment or run ({holder}); give each "
                "environment its own out= (for a vector environment, one directory per sub-environment), "
                "or close() the other one first"
            ) from None
        if (out / "run.json").exists():
            previous = read_run(out)
            if previous.env != self.benchmark.name or previous.agent_name != AGENT_NAME:
                raise RunDirError(
                    f"{out / 'run.json'}: holds a run of {previous.env!r} by agent {previous.agent_name!r}; "
                    f"choose another out= for rollouts of {self.benchmark.name!r}"
                )
            for traj in read_jsonl(out / TRAJECTORIES_FILE, Trajectory, repair=True):
                self._trials[traj.example_id] = max(self._trials[traj.example_id], traj.trial + 1)
            wanted = set(self._trials) - set(self._by_id)  # played by an earlier environment with a larger limit
            self._earlier = {ex.id: ex for ex in loaded if ex.id in wanted}
        if dataset_path is None:
            dataset_path = out / EXAMPLES_FILE
            write_examples(dataset_path, self.examples)
        record = new_record(
            self.benchmark, env_ref, made, self.examples, dataset_path,
            agent={
                "agent": AGENT_NAME, "max_steps": self.max_steps,
                "reward": reward if isinstance(reward, str) else getattr(reward, "__name__", type(reward).__name__),
                "parser": parser if isinstance(parser, str) else getattr(parser, "__name__", "callable"),
            },
            model=self.model_label, limit=limit, env_options=env_options,
        )
        write_run(out, record)
        self._record = record

    # --- Gymnasium API ---------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start an episode on one example.

        Args:
            seed: Seeds the generator that picks the example (reproducible: the same seed
                gives the same example and observation); ``None`` continues the generator.
            options: ``{"example_id": ID}`` plays that example.

        Returns:
            ``(observation, info)``: the conversation so far as OpenAI chat messages (the
            system prompt when the environment has instructions, then the example's input),
            and ``{"example_id", "trial", "tools"}`` with the tools in the OpenAI function
            format.

        Raises:
            KeyError: for an ``example_id`` not in the dataset.
            RuntimeError: when the environment's own ``reset`` fails for this example.
            ValueError: with ``out=``, for an example already played as often as the suite's
                published format allows (``Benchmark.max_trials``: JMultiWOZ-TC and BFCL, once).
        """
        super().reset(seed=seed)
        self._abandon()
        example_id = (options or {}).get("example_id")
        if example_id is not None:
            if str(example_id) not in self._by_id:
                raise KeyError(f"example_id {example_id!r} is not in the dataset ({len(self.examples)} examples)")
            example = self._by_id[str(example_id)]
        else:
            example = self.examples[int(self.np_random.integers(len(self.examples)))]
        most = self.benchmark.max_trials
        if self.out is not None and most is not None and self._trials[example.id] >= most:
            raise ValueError(
                f"example {example.id!r} has been played {self._trials[example.id]} time(s) in {self.out}, the most "
                f"{self.benchmark.name}'s published format allows (one result line per example): record repeated "
                "rollouts without out=, or give each pass its own out= directory"
            )
        self._close_env()
        env = self.env_cls()
        try:
            env.reset(example)
        except Exception as exc:
            env.close()
            raise RuntimeError(f"{self.benchmark.name}: reset failed on example {example.id!r}: {type(exc).__name__}: {exc}") from exc
        trial = self._trials[example.id]
        self._trials[example.id] += 1
        self._env = env
        self._episode = Episode(env, example, trial)
        self._episode.states.start()
        self._last_turn = False
        if example.multi_turn:
            self._episode.user = make_user(example, self.user_model, self.user_model_spec)
            self._episode.record_user(UserStep(text=example.first_message, turn=1))
        self._episode.begin_turn(1)
        self._messages = prompt_messages(env, example)
        self._done = False
        self._potential = 0.0
        self._frozen = False
        self._trajectory = None
        self._scores = []
        info = {"example_id": example.id, "trial": trial, "tools": _schemas(env)}
        return copy.deepcopy(self._messages), info

    def step(self, action: str | dict[str, Any]) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        """Play one assistant turn.

        The action is parsed into the turn's tool calls (raw text by the parser; a chat dict's
        ``tool_calls``). Calls that do not parse, name an unknown tool or carry arguments that
        are not a JSON object are recorded as malformed and answered with an error
        observation, as in a run. Each call runs in order; the observation is the new tool
        messages (``{"role": "tool", "tool_call_id", "content"}``), plus one user message with
        the errors of malformed calls. A chat-dict action may carry the turn's tokens under
        ``"tokens"`` (a :class:`~toolgym.TokenRecord` as a dict), kept in the trajectory.

        Rewards:

        * ``final``: 0 until the episode ends, then the environment's first grader's value
          (0 when it does not apply or the episode ended in error).
        * ``stepwise``: potential-based shaping (Ng, Harada and Russell 1999, "Policy
          invariance under reward transformations") with the potential
          ``Φ = matched / len(expected_steps)``, where ``matched`` is
          :func:`matched_prefix`: the expected steps matched before the first divergence,
          the rule of the ``steps_exact`` grader. Each step earns ``Φ_after − Φ_before``
          (credit for each next expected step it matches, nothing for a wrong or extra call);
          the last step adds ``F − Φ_end``, where ``F`` is the final reward above. The return
          therefore equals ``F``: for a perfect trajectory, the credit was paid step by step
          and the last term is 0; a trajectory that diverges gets its credit taken back at
          the end unless the final grader passes it anyway. Examples without expected steps
          get ``F`` at the end only. For an example with ``milestones`` the potential is
          :func:`milestone_potential` instead: the share of required milestones the optimal
          alignment of the steps so far matches (0 once a minefield is hit), so a valid order
          other than the written one, an optional or an allowed extra call earns the same.
        * a grader or callable: 0 until the end, then its value.

        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``info`` has
            ``example_id``, ``turn``, ``status`` and, at the end, ``scores`` (each grader's
            value, ``None`` when it does not apply), ``final_answer``, ``error`` and
            ``reward_scored``: ``False`` when the reward grader gave no value (it does not
            apply to the example, say ``trajectory_match`` without milestones, or it could
            not score the episode); the final reward is then 0.0, and a warning says so once
            per grader.

        Raises:
            RuntimeError: when no episode is running (call :meth:`reset`).
            TypeError: for an action that is neither text nor a dict.
            ValueError: for a dict that is not an assistant message (role, ``tool_calls``).
        """
        episode, env = self._episode, self._env
        if episode is None or env is None or self._done:
            raise RuntimeError("no episode is running: call reset() first")
        turn = episode.model_turns + 1
        tokens = None
        given_ids: set[str] = set()
        if isinstance(action, str):
            message = self.parser(action)
        elif isinstance(action, dict):
            message = openai_assistant_message(action)
            for key in ("reasoning_content", "reasoning"):  # reasoning sent beside the content
                if action.get(key) is not None:
                    message.additional_kwargs[key] = action[key]
            given_ids = {c["id"] for c in action.get("tool_calls") or [] if isinstance(c.get("id"), str) and c["id"]}
            if action.get("tokens") is not None:
                tokens = TokenRecord.model_validate(action["tokens"])
        else:
            raise TypeError(f"an action is text or an assistant message dict, got {type(action).__name__}")
        for k, call in enumerate([*message.tool_calls, *message.invalid_tool_calls]):
            if isinstance(action, str) or not call.get("id"):
                call["id"] = f"call_{turn}_{k}"  # reproducible ids (the parser's are random)
        model = model_step(message, 0.0, set(env.functions))
        if tokens is not None:
            model.tokens = tokens
        episode.record_model(model)
        # a malformed call the policy sent with its own id is answered by a tool message with
        # that id (chat servers reject a conversation with an unanswered call id)
        answered = {c.id for c in model.tool_calls if c.malformed and c.id in given_ids}
        self._messages.append(assistant_message(model, answered))
        first_tool = len(episode.steps)
        error = None
        for call in model.tool_calls:
            try:
                episode.execute(call)
            except ToolBug as exc:
                error = f"ToolBug: {exc}"
                break
        observation = step_messages([model, *episode.steps[first_tool:]], answered)[1:]
        self._messages.extend(observation)
        terminated = truncated = False
        user_turn = None
        if error is None and not model.tool_calls and episode.user is not None:
            episode.final_answer = model.text
            try:
                user_turn, ended = self._next_user_turn(episode)
            except UserModelError as exc:  # an infrastructure error: the episode ends in error
                user_turn, ended, error = None, "error", f"UserModelError: {exc}"
            if user_turn is not None:
                observation.append({"role": "user", "content": episode.steps[-1].text})
                self._messages.append(observation[-1])
            elif ended == "step_limit":
                truncated = True
                episode.status = "step_limit"
            else:
                terminated = True
        elif error is not None or not model.tool_calls:
            terminated = True
            if not model.tool_calls:
                episode.final_answer = model.text
        elif env.max_model_turns is not None and episode.model_turns >= env.max_model_turns:
            terminated = True
        elif episode.model_turns >= self.max_steps:
            truncated = True
            episode.status = "step_limit"
        reward = 0.0
        if self.reward_mode == "stepwise":
            reward = self._shaping()
        info: dict[str, Any] = {"example_id": episode.example.id, "turn": turn, "status": "running"}
        if user_turn is not None:
            info["user_turn"] = user_turn
        if terminated or truncated:
            reward += self._finish(error, info)
        return copy.deepcopy(observation), float(reward), terminated, truncated, info

    def _next_user_turn(self, episode: Episode) -> tuple[int | None, str | None]:
        """After the assistant's answer in a multi-turn episode: record the turn's state and
        start the next user turn (its message recorded as the last step). Returns ``(turn,
        None)``, or ``(None, why)`` when the conversation ends (``"ended"``, ``"step_limit"``).

        Raises:
            UserModelError: from a failing simulated user (the caller records the error).
        """
        user = episode.user
        episode.end_turn()
        if self._last_turn or episode.turn >= user.max_turns:
            return None, "ended"
        if episode.model_turns >= self.max_steps:
            return None, "step_limit"
        turn = episode.turn + 1
        reply = _run(user.reply(episode.conversation(), turn))
        if reply is None:
            return None, "ended"
        step = UserStep(text=reply.text, turn=turn, stop=reply.stop, latency_s=reply.latency_s,
                        input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
        if reply.stop and not reply.text:
            episode.record_user(step.model_copy(update={"turn": episode.turn}))
            return None, "ended"
        self._last_turn = reply.stop
        episode.begin_turn(turn)
        episode.record_user(step)
        return turn, None

    def _shaping(self) -> float:
        """``Φ_after − Φ_before`` of :meth:`step`'s stepwise reward."""
        episode = self._episode
        assert episode is not None
        if episode.example.plan is not None:
            potential = milestone_potential(episode.example, episode.steps, episode.states.initial_state)
            gained, self._potential = potential - self._potential, potential
            return gained
        expected = episode.example.expected_steps
        if not expected or self._frozen:
            return 0.0
        actual = step_names(Trajectory.model_construct(steps=episode.steps))
        matched = matched_prefix(expected, actual, episode.example.order_matters)
        # once diverged (or complete) the potential cannot change: stop recomputing it
        self._frozen = matched < len(actual) or matched == len(expected)
        potential = matched / len(expected)
        gained, self._potential = potential - self._potential, potential
        return gained

    def _finish(self, error: str | None, info: dict[str, Any]) -> float:
        """End the episode: trajectory, scores, run directory; returns the end-of-episode
        reward (for ``stepwise``, ``F − Φ_end``)."""
        episode = self._episode
        assert episode is not None
        self._done = True
        if episode.user is not None and error is None and len(episode.turn_states or []) < episode.turn:
            episode.end_turn()  # the state after the turn the episode ended in
        trajectory = episode.trajectory(AGENT_NAME, self.model_label, error)
        example = episode.example
        graders = list(self.graders)
        if self._reward_grader is not None and all(grader_name(g) != grader_name(self._reward_grader) for g in graders):
            graders.append(self._reward_grader)
        scores = grade_trajectories({example.id: example}, [trajectory], graders)
        by_name = {s.grader: s.value for s in scores}
        scored = True
        if self._reward_fn is not None:
            final = float(self._reward_fn(example, trajectory)) if trajectory.status != "error" else 0.0
        else:
            value = by_name.get(grader_name(self._reward_grader)) if self._reward_grader is not None else None
            final = float(value) if value is not None else 0.0
            scored = value is not None or trajectory.status == "error"
            if not scored and self._reward_grader is not None and grader_name(self._reward_grader) not in self._unscored_warned:
                self._unscored_warned.add(grader_name(self._reward_grader))
                warnings.warn(
                    f"reward grader {grader_name(self._reward_grader)} gave no value for example {example.id!r} "
                    f"(it does not apply to it, or it could not score the episode): its final reward is 0.0 and "
                    "info['reward_scored'] is False (warned once per grader)", stacklevel=3)
        self._trajectory = trajectory
        self._scores = scores
        info.update(
            status=trajectory.status, final_answer=trajectory.final_answer, error=trajectory.error,
            scores={grader_name(g): by_name.get(grader_name(g)) for g in graders}, reward_scored=scored,
        )
        if self.out is not None:
            with JsonlAppender(self.out / TRAJECTORIES_FILE) as writer:
                writer.write(trajectory)
            with JsonlAppender(self.out / SCORES_FILE) as writer:
                for score in scores:
                    writer.write(score)
        self._close_env()
        if self.reward_mode == "stepwise":
            return final - self._potential
        return final

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """:meth:`reset` for async rollout loops. The environment's tools are synchronous and
        run inline (some hold thread-bound resources, e.g. SQLite connections)."""
        return self.reset(seed=seed, options=options)

    async def astep(self, action: str | dict[str, Any]) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        """:meth:`step` for async rollout loops (tools run inline, as in :meth:`areset`)."""
        return self.step(action)

    # --- records ---------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """The whole conversation of the current (or last) episode, OpenAI chat dicts (a
        copy)."""
        return copy.deepcopy(self._messages)

    @property
    def example(self) -> Example | None:
        """The example of the current (or last) episode."""
        return self._episode.example if self._episode is not None else None

    def trajectory(self) -> Trajectory:
        """The current episode as a :class:`~toolgym.Trajectory`, the record ``toolgym run``
        writes (``model_dump(mode="json")`` is JSON-safe). A finished episode's is final (its
        status ``completed``, ``step_limit`` or ``error``); a running one's is a snapshot
        with status ``completed`` so far.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        if self._trajectory is not None:
            return self._trajectory
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self._episode.trajectory(AGENT_NAME, self.model_label).model_copy(deep=True)

    def scores(self) -> list[Score]:
        """The scores of the last finished episode (empty while one is running)."""
        return list(self._scores)

    def render(self) -> str | None:
        """With ``render_mode="ansi"``, the conversation so far as ``role: content`` lines."""
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self._messages:
            calls = "".join(
                f" [{c['function']['name']}({c['function']['arguments']})]" for c in m.get("tool_calls", [])
            )
            lines.append(f"{m['role']}: {m.get('content') or ''}{calls}")
        return "\n".join(lines) + "\n"

    def _abandon(self) -> None:
        """An episode left unfinished (``reset`` or ``close`` before it ended): with ``out=``,
        its steps so far are appended with status ``aborted`` (never graded)."""
        if self._episode is not None and not self._done:
            self._done = True
            trajectory = self._episode.trajectory(AGENT_NAME, self.model_label)
            self._trajectory = trajectory.model_copy(update={"status": "aborted"})
            if self.out is not None:
                with JsonlAppender(self.out / TRAJECTORIES_FILE) as writer:
                    writer.write(self._trajectory)
        self._close_env()

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def close(self) -> None:
        """End an unfinished episode as ``aborted`` (written with ``out=``) and release its
        environment. With ``out=``, then end the run as ``toolgym run`` does
        (:func:`toolgym.runner.finish_run`): ``run.json`` gets ``finished_at``, ``scores.jsonl``
        is rewritten with the same scores, and the benchmark's exporters write its published
        files from every trajectory of the directory (this environment's and earlier ones').
        The directory's lock is released even when an exporter fails. Idempotent."""
        self._abandon()
        try:
            self._finish_run()
        finally:
            self._lock.close()
            super().close()

    def _finish_run(self) -> None:
        """The end of a run of ``out=``: :func:`toolgym.runner.finish_run` on the directory's
        trajectories and scores (once; nothing without a finished or aborted episode)."""
        record, self._record = self._record, None
        if self.out is None or record is None:
            return
        trajectories = read_trajectories(self.out, record=record)
        if not trajectories:
            return
        examples = {**self._earlier, **self._by_id}
        unknown = sorted({t.example_id for t in trajectories} - set(examples))
        if unknown:  # an exporter would grade them against no gold
            warnings.warn(
                f"out={str(self.out)!r}: {len(unknown)} examples of its trajectories ({', '.join(unknown[:3])}"
                f"{', ...' if len(unknown) > 3 else ''}) are not in this environment's dataset, so the published "
                "files are not written; give the dataset they were played on", stacklevel=3)
            return
        scores = read_scores(self.out)
        record.trials = max([record.trials, *(t.trial + 1 for t in trajectories)])  # trials played so far
        finish_run(self.out, self.benchmark, record, trajectories, scores, examples)


def _run(coroutine: Any) -> Any:
    """Await ``coroutine`` from synchronous code: here when no event loop runs, else (inside
    :meth:`ToolgymEnv.astep`) on a thread of its own."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def env_id(name: str) -> str:
    """The Gymnasium id of a toolgym environment: ``toolgym/<name>-v0``."""
    return f"toolgym/{name}-v0"


def register_environments() -> list[str]:
    """Register ``toolgym/<name>-v0`` for every environment of the toolgym registry (built-in
    suites and installed plugins; plugins are imported only when made). Called on import;
    call it again after registering more environments.

    Returns:
        The Gymnasium ids registered by this call.
    """
    added = []
    for name in registries()["environments"].names():
        gid = env_id(name)
        if gid in gymnasium.registry:
            continue
        gymnasium.register(id=gid, entry_point=ToolgymEnv, kwargs={"env": name})
        added.append(gid)
    return added


register_environments()

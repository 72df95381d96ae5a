"""State graders: ``final_state`` (LangChain tool-usage benchmark: "the state of the
environment"; τ²-bench's replayed target state), ``turn_state`` (the state after every user
turn, as BFCL's multi-turn checker compares it) and ``collateral_damage`` (AppWorld's check
for changes nobody asked for).

Both read the stored trajectory; where they need the state the reference solution reaches,
they replay the example's ``expected_calls`` on a fresh environment of the run's benchmark
(:func:`toolgym.replay.reference_replay`, once per example), as τ²-bench does
(``src/tau2/evaluator/evaluator_env.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, ClassVar

from toolgym.graders import make_score, register_grader
from toolgym.records import Example, Measure, Score, Trajectory

__all__ = ["CollateralDamage", "FinalState", "TurnState", "allowed_by", "changed_paths", "leaves", "pointer"]

PATHS_SHOWN = 100
"""Changed paths ``collateral_damage`` lists in its details (the count covers all)."""


def pointer(parts: tuple[str | int, ...]) -> str:
    """The RFC 6901 JSON Pointer of a path of keys and indices (``~`` → ``~0``, ``/`` → ``~1``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def leaves(value: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON value as ``(JSON pointer, value)``: a scalar, or an empty object or
    list; objects by key, lists by index."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, (*parts, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, (*parts, i))
    else:
        yield pointer(parts), value


_ABSENT = object()


def _same(a: Any, b: Any) -> bool:
    if a is _ABSENT or b is _ABSENT:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def changed_paths(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The leaves that differ between two states: JSON pointer → ``(before, after)``, with
    :data:`ABSENT` for a leaf one side lacks. Numbers compare by value (1 equals 1.0), a boolean
    is never a number, lists compare index by index."""
    a, b = dict(leaves(before)), dict(leaves(after))
    out = {}
    for path in {**a, **b}:
        x, y = a.get(path, _ABSENT), b.get(path, _ABSENT)
        if not _same(x, y):
            out[path] = (x, y)
    return out


ABSENT = _ABSENT
"""Marks a leaf missing on one side of :func:`changed_paths`."""


NO_STATE = ("the environment exposes no state (its state is empty before and after the reference replay, as "
            "over MCP or without read_state): nothing to compare")
"""The explanation of an unscored state score on an environment whose state is never visible."""


def _reference(benchmark: Any, example: Example) -> Trajectory | str:
    """The example's reference replay, or why there is none to grade against (its failure,
    or :data:`NO_STATE`: every state would equal the empty one and pass)."""
    from toolgym.replay import reference_replay

    replay = reference_replay(benchmark, example)
    if replay.status == "error":
        return f"the reference replay fails ({replay.error}): a defect of the example, see `toolgym check`"
    if not replay.final_state and not replay.initial_state:
        return NO_STATE
    return replay


def _replay_target(benchmark: Any) -> bool:
    env_cls = getattr(benchmark, "environment", None)
    return bool(getattr(env_cls, "replay_target", True))


@register_grader("final_state")
@dataclass(frozen=True)
class FinalState:
    """1.0 when the environment's final state equals the target state, else 0.0.

    The target is ``example.expected_state`` when the example gives one (only the keys it
    names are compared: the LangChain tool-usage benchmark's definition). An example with
    ``expected_calls`` and no expected state is compared, on every key, with the state that
    replaying those calls on a fresh environment reaches (τ²-bench's target state), when the
    grader has the run's benchmark (the runner gives it) and its environment declares
    ``replay_target`` true (the default; suites whose state is bookkeeping, not the task's
    target, turn it off). Does not apply (returns ``None``) otherwise. When the reference
    replay itself fails, or the environment exposes no state (empty before and after the
    replay: an MCP server, an environment without ``read_state``, where every trajectory would
    pass), the score is unscored (``value`` ``None``), saying why.

    Attributes:
        benchmark: The :class:`toolgym.Benchmark` to replay the reference on (set by the
            runner; ``None``: only ``expected_state`` is graded).
    """

    benchmark: Any = field(default=None, compare=False, repr=False)

    name: ClassVar[str] = "final_state"

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        expected = example.expected_state
        source = "expected_state"
        if expected is None:
            if example.expected_calls is None or self.benchmark is None or not _replay_target(self.benchmark):
                return None
            replay = _reference(self.benchmark, example)
            if isinstance(replay, str):
                return make_score(self, trajectory, None, replay, target="reference replay")
            expected, source = replay.final_state, "reference replay"
        actual = {k: trajectory.final_state.get(k) for k in expected}
        ok = actual == expected
        diff = {k: {"expected": v, "actual": actual[k]} for k, v in expected.items() if actual[k] != v}
        if ok:
            explanation = "final state matches" if source == "expected_state" else "final state matches the reference replay's"
        else:
            explanation = f"final state differs in {sorted(diff)}"
            if source != "expected_state":
                explanation += " from the reference replay's"
        return make_score(self, trajectory, float(ok), explanation, diff=diff, target=source)


def allowed_by(path: str, patterns: tuple[str, ...] | list[str]) -> str | None:
    """The first of ``patterns`` that allows the state path ``path`` (a JSON Pointer), else
    ``None``. A pattern is an ``fnmatch`` glob over JSON Pointers (case-sensitive; ``*`` also
    crosses ``/``); it allows the paths it matches and every path below them (``/users/2``
    allows ``/users/2/email``), and ``""`` allows every path."""
    for pattern in patterns:
        if pattern == "" or fnmatchcase(path, pattern) or fnmatchcase(path, pattern + "/*"):
            return pattern
    return None


def _shown(value: Any) -> dict[str, Any]:
    return {} if value is _ABSENT else {"value": value}


@register_grader("collateral_damage")
@dataclass(frozen=True)
class CollateralDamage:
    """The number of state paths the trajectory changed that the reference solution leaves
    unchanged (lower is better; passes at 0), after AppWorld's collateral-damage checks
    (Trivedi et al. 2024, "AppWorld", section 3: changes nobody asked for).

    A state path is a leaf of the state as a JSON Pointer (RFC 6901; objects by key, lists by
    index, see :func:`leaves`). The trajectory changed a path when its value differs between
    the trajectory's ``initial_state`` and its ``final_state`` (the net change: a path changed
    and restored is no damage); the reference changes the paths that differ between the state
    after reset and the state after replaying the example's ``expected_calls`` on a fresh
    environment (:func:`toolgym.replay.reference_replay`). A trajectory that records no initial
    state (an older run) is compared from the replay's state after reset.

    ``details``: ``paths`` (up to :data:`PATHS_SHOWN`, each ``{"path", "before": {"value"},
    "after": {"value"}}``; an empty side means the path did not exist), ``count``, and
    ``reference_changed`` (the paths the reference changes).

    Applies to examples with ``expected_calls`` when the grader has the run's benchmark (the
    runner gives it); unscored when the reference replay fails or the environment exposes no
    state (no damage could ever be seen).

    Allowed changes, as AppWorld's checks ignore the models a task may touch and the ones that
    change as bookkeeping: a changed path that an example's ``allowed_changes`` pattern or the
    environment's ``volatile_state`` pattern allows (:func:`allowed_by`) is no damage; it is
    listed in ``details.allowed`` (``{"path", "pattern", "source": "allowed_changes" |
    "volatile_state"}``, up to :data:`PATHS_SHOWN`) and counted in ``allowed_count``.

    Attributes:
        benchmark: The :class:`toolgym.Benchmark` to replay the reference on.
    """

    benchmark: Any = field(default=None, compare=False, repr=False)

    name: ClassVar[str] = "collateral_damage"
    kept_details: ClassVar[tuple[str, ...]] = ("allowed", "allowed_count")  # what a pass allowed
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="lower", pass_if="<=", threshold=0.0,
        reference="toolgym issue 25, after AppWorld (Trivedi et al. 2024) collateral-damage checks: state paths "
                  "changed that replaying the reference on a fresh environment leaves unchanged",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        if example.expected_calls is None or self.benchmark is None:
            return None
        replay = _reference(self.benchmark, example)
        if isinstance(replay, str):
            return make_score(self, trajectory, None, replay)
        reference_before = replay.initial_state if replay.initial_state is not None else {}
        before = trajectory.initial_state if trajectory.initial_state is not None else reference_before
        wanted = changed_paths(reference_before, replay.final_state)
        made = changed_paths(before, trajectory.final_state)
        env_cls = getattr(self.benchmark, "environment", None)
        volatile = tuple(getattr(env_cls, "volatile_state", ()) or ())
        allowed_changes = tuple(example.allowed_changes or ())
        damage, allowed = [], []
        for p in sorted(made):
            if p in wanted:
                continue
            rule = allowed_by(p, allowed_changes)
            source = "allowed_changes"
            if rule is None:
                rule, source = allowed_by(p, volatile), "volatile_state"
            if rule is None:
                damage.append(p)
            else:
                allowed.append({"path": p, "pattern": rule, "source": source})
        paths = [{"path": p, "before": _shown(made[p][0]), "after": _shown(made[p][1])} for p in damage[:PATHS_SHOWN]]
        if damage:
            shown = ", ".join(damage[:3]) + (f" and {len(damage) - 3} more" if len(damage) > 3 else "")
            explanation = f"{len(damage)} state path(s) changed that the reference leaves unchanged: {shown}"
            if allowed:
                explanation += f" ({len(allowed)} more allowed)"
        elif allowed:
            explanation = (f"no collateral damage ({len(made)} path(s) changed: {len(made) - len(allowed)} changed "
                           f"by the reference too, {len(allowed)} allowed)")
        else:
            explanation = f"no collateral damage ({len(made)} path(s) changed, all changed by the reference too)"
        extra: dict[str, Any] = {}
        if allowed:
            extra = {"allowed": allowed[:PATHS_SHOWN], "allowed_count": len(allowed)}
        return make_score(
            self, trajectory, float(len(damage)), explanation,
            paths=paths, count=len(damage), reference_changed=sorted(wanted), **extra,
            initial_state="trajectory" if trajectory.initial_state is not None else "reference replay",
        )


@register_grader("turn_state")
@dataclass(frozen=True)
class TurnState:
    """The fraction of user turns after which the environment's state matches the example's
    ``expected_states`` (one per user turn; only the keys each names are compared, as
    ``final_state`` compares ``expected_state``); passes when every turn matches. The state
    after each turn is the trajectory's ``turn_states`` (recorded when the agent answered the
    turn; a single-turn trajectory's only state is its ``final_state``). A turn the episode
    never reached (the user stopped early, ``step_limit``) counts as a mismatch. After BFCL's
    multi-turn state check, made after every user turn
    (``bfcl_eval/eval_checker/multi_turn_eval/multi_turn_checker.py``).

    ``details``: ``turns`` (one ``{"turn", "matches", "diff"}`` per expected state, ``diff``
    as ``final_state``'s), ``first_mismatch`` (the first turn that does not match, or
    ``None``). Applies to examples with ``expected_states``.
    """

    name: ClassVar[str] = "turn_state"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="higher", pass_if=">=", threshold=1.0,
        reference="toolgym issue 36, after BFCL's multi-turn checker: the share of user turns whose state "
                  "matches expected_states; passes when all do",
    )
    kept_details: ClassVar[tuple[str, ...]] = ("first_mismatch",)

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        expected_states = example.expected_states
        if expected_states is None:
            return None
        states = trajectory.turn_states if trajectory.turn_states is not None else [trajectory.final_state]
        rows = []
        for k, expected in enumerate(expected_states, 1):
            actual_state = states[k - 1] if k <= len(states) else None
            if actual_state is None:
                rows.append({"turn": k, "matches": False, "diff": {}, "played": False})
                continue
            diff = {key: {"expected": v, "actual": actual_state.get(key)}
                    for key, v in expected.items() if actual_state.get(key) != v}
            rows.append({"turn": k, "matches": not diff, "diff": diff})
        matched = sum(r["matches"] for r in rows)
        first = next((r["turn"] for r in rows if not r["matches"]), None)
        if first is None:
            explanation = f"the state matches after all {len(rows)} user turn(s)"
        else:
            row = rows[first - 1]
            why = "never played" if row.get("played") is False else f"differs in {sorted(row['diff'])}"
            explanation = f"{matched}/{len(rows)} user turn(s) match; first mismatch after turn {first}: {why}"
        return make_score(self, trajectory, matched / len(rows), explanation, turns=rows, first_mismatch=first)

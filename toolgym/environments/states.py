"""Recording the environment's state after every tool step, as RFC 6902 JSON Patches.

Every place that plays tool calls on an environment (the agents' :class:`toolgym.Episode`, the
reference replay :mod:`toolgym.replay`) records states the same way: the state after reset
(``Trajectory.initial_state``), then for each tool step the patch from the state before it to
the state after it (``ToolStep.state_patch``, made by the ``jsonpatch`` library), bounded by the
environment's :attr:`~toolgym.Environment.state_record_chars`.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StateRecorder", "scalar_replacements"]

_SCALARS = (str, int, float, bool, type(None))


def scalar_replacements(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON Patch between two states with the same top-level keys whose changed values are
    all scalars (a string, a number, a boolean, null): one ``replace`` per changed key, what
    ``jsonpatch.make_patch`` returns for such a pair (``tests/test_states.py`` checks it); ``None``
    for any other pair, which :class:`StateRecorder` hands to ``jsonpatch``. The common step
    (a typewriter's sheet, a counter) is diffed in a few microseconds instead of tens."""
    if before.keys() != after.keys():
        return None
    ops = []
    for key, new in after.items():
        old = before[key]
        if old is new or (type(old) is type(new) and old == new and isinstance(new, _SCALARS)):
            continue
        if not (isinstance(old, _SCALARS) and isinstance(new, _SCALARS)):
            return None
        ops.append({"op": "replace", "path": "/" + key.replace("~", "~0").replace("/", "~1"), "value": new})
    return ops


class StateRecorder:
    """Reads an environment's state before the first step and after each tool step, and
    turns each change into a JSON Patch.

    What is kept (the initial state's JSON plus every patch's JSON, in characters) is bounded by
    the environment's ``state_record_chars`` (``None``: no bound; ``0``: nothing is recorded).
    At the first step that would pass the bound, recording stops: that step and every later
    one get ``state_patch = None`` and :attr:`note` says where and why. A ``read_state`` that
    raises or returns something that is not JSON stops recording the same way (the episode
    itself goes on).

    Args:
        env: The environment. Call :meth:`start` right after its reset (the first
            :meth:`patch` calls it otherwise).
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        limit = getattr(type(env), "state_record_chars", None)
        self.limit: int | None = limit
        self.note: str | None = None
        self.used = 0
        self.steps = 0
        self._started = False
        self._initial: dict[str, Any] | None = None
        self._state: dict[str, Any] | None = None
        self._text: str | None = None  # the last state's JSON: an unchanged state costs no diff

    @property
    def recording(self) -> bool:
        """Whether states are still recorded (no cap reached, no failure)."""
        self.start()
        return self._state is not None

    @property
    def initial_state(self) -> dict[str, Any] | None:
        """The state after reset, or ``None`` when it was not recorded (or :meth:`start` was
        never called)."""
        return self._initial

    def start(self) -> None:
        """Read the initial state (once; later calls do nothing)."""
        if self._started:
            return
        self._started = True
        if self.limit == 0:
            self.note = f"state recording is off for {self._env_name()} (state_record_chars = 0)"
            return
        read = self._read("after reset")
        if read is None:
            return
        state, text = read
        size = len(text)
        if self.limit is not None and size > self.limit:
            self.note = (
                f"state not recorded: the state after reset is {size:,} characters of JSON, over "
                f"{self._env_name()}.state_record_chars = {self.limit:,}"
            )
            return
        self.used = size
        self._initial = self._state = state
        self._text = text

    def patch(self) -> list[dict[str, Any]] | None:
        """The patch from the last recorded state to the state now (after one more tool step),
        or ``None`` once recording has stopped."""
        import jsonpatch

        self.start()
        self.steps += 1
        if self._state is None:
            return None
        read = self._read(f"after tool step {self.steps}", self._text)
        if read is None:
            return None
        state, text = read
        if state is None:  # the same JSON as before
            return []
        ops = scalar_replacements(self._state, state)
        if ops is None:
            ops = jsonpatch.make_patch(self._state, state).patch
        if ops:
            size = len(json.dumps(ops, ensure_ascii=False))
            if self.limit is not None and self.used + size > self.limit:
                self.note = (
                    f"states recorded up to tool step {self.steps - 1}: the patch of step {self.steps} "
                    f"({size:,} characters) would take the record past "
                    f"{self._env_name()}.state_record_chars = {self.limit:,}"
                )
                self._state = None
                return None
            self.used += size
        self._state, self._text = state, text
        return ops

    def unchanged(self) -> list[dict[str, Any]] | None:
        """The patch of a step that never ran (a malformed call): ``[]`` while recording, else
        ``None``."""
        self.start()
        self.steps += 1
        return [] if self._state is not None else None

    def _read(self, when: str, unchanged: str | None = None) -> tuple[dict[str, Any] | None, str] | None:
        """``(state, its JSON)``; ``(None, JSON)`` when the JSON is ``unchanged``; ``None`` when
        reading failed (recording stops, :attr:`note` says why)."""
        try:
            text = json.dumps(self.env.read_state(), ensure_ascii=False)
            if text == unchanged:
                return None, text
            state = json.loads(text)
        except Exception as exc:  # noqa: BLE001 - a broken read_state stops recording, never the episode
            self.note = f"state recording stopped {when}: {type(exc).__name__} in read_state: {exc}"
            self._state = None
            return None
        if not isinstance(state, dict):
            self.note = f"state recording stopped {when}: read_state returned {type(state).__name__}, not a dict"
            self._state = None
            return None
        return state, text

    def _env_name(self) -> str:
        return type(self.env).__name__

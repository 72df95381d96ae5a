"""collateral_damage with allowed changes: an example's ``allowed_changes`` and an
environment's ``volatile_state`` (after AppWorld's checks, which ignore the models a task may
touch and the bookkeeping ones). A real SQLite environment, a scripted model."""

from __future__ import annotations

import pytest

import toolgym
from toolgym.graders.state import allowed_by
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example


class Ledger(toolgym.Environment):
    """Accounts in a real SQLite database, and a count of the calls made (bookkeeping)."""

    instructions = "Manage the accounts."

    def reset(self, example):
        import sqlite3

        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, draft TEXT)")
        self.db.executemany("INSERT INTO users VALUES (?, ?, ?)", [(1, "k@old.org", ""), (2, "a@old.org", "")])
        self.calls = 0

    def read_state(self):
        rows = self.db.execute("SELECT id, email, draft FROM users ORDER BY id").fetchall()
        return {"users": {str(i): {"email": e, "draft": d} for i, e, d in rows}, "meta": {"calls": self.calls}}

    def close(self):
        self.db.close()

    @toolgym.tool
    def set_email(self, user_id: int, email: str) -> str:
        """Change a user's email.

        Args:
            user_id: The user.
            email: The new address.
        """
        self.calls += 1
        self.db.execute("UPDATE users SET email = ? WHERE id = ?", (email, user_id))
        return "ok"

    @toolgym.tool
    def save_draft(self, user_id: int, text: str) -> str:
        """Keep a draft note on a user.

        Args:
            user_id: The user.
            text: The note.
        """
        self.calls += 1
        self.db.execute("UPDATE users SET draft = ? WHERE id = ?", (text, user_id))
        return "ok"


class Clock(Ledger):
    """The same, whose state also says whether more than one call was made (bookkeeping
    that the one-call reference leaves alone)."""

    def read_state(self):
        state = super().read_state()
        state["meta"]["busy"] = self.calls > 1
        return state


class VolatileClock(Clock):
    """The same, declaring its bookkeeping volatile."""

    volatile_state = ("/meta",)


CALLS = [{"name": "set_email", "arguments": {"user_id": 1, "email": "k@new.org"}}]
SCRIPT = [{"content": "", "tool_calls": [{"id": "a", "name": "set_email", "args": {"user_id": 1, "email": "k@new.org"}}]},
          {"content": "", "tool_calls": [{"id": "b", "name": "save_draft", "args": {"user_id": 2, "text": "hi"}}]},
          {"content": "", "tool_calls": [{"id": "c", "name": "save_draft", "args": {"user_id": 1, "text": "done"}}]},
          "ok"]


def damage(env, **fields):
    example = Example(id="e", input="Give Kwame the address k@new.org", expected_calls=CALLS, **fields)
    result = toolgym.evaluate(env, model=ScriptedChatModel(turns=SCRIPT), dataset=[example],
                              graders=["collateral_damage"])
    (score,) = result.scores
    return score


def test_without_allowed_changes_every_path_the_reference_leaves_alone_counts():
    score = damage(Ledger)
    # the reference also bumps the counter (one call), so /meta/calls is "wanted"; the drafts are not
    assert score.value == 2.0
    assert [p["path"] for p in score.details["paths"]] == ["/users/1/draft", "/users/2/draft"]
    assert "allowed" not in score.details


def test_allowed_changes_patterns_allow_paths_and_everything_below_them():
    score = damage(Ledger, allowed_changes=["/users/*/draft"])
    assert score.value == 0.0
    assert score.details["allowed"] == [
        {"path": "/users/1/draft", "pattern": "/users/*/draft", "source": "allowed_changes"},
        {"path": "/users/2/draft", "pattern": "/users/*/draft", "source": "allowed_changes"},
    ]
    assert score.details["allowed_count"] == 2 and "2 allowed" in score.explanation
    only_two = damage(Ledger, allowed_changes=["/users/2"])  # a subtree
    assert only_two.value == 1.0 and [p["path"] for p in only_two.details["paths"]] == ["/users/1/draft"]
    assert "1 more allowed" in only_two.explanation


def test_an_environments_volatile_state_is_never_damage():
    plain = damage(Clock, allowed_changes=["/users/*/draft"])
    assert plain.value == 1.0 and [p["path"] for p in plain.details["paths"]] == ["/meta/busy"]
    score = damage(VolatileClock, allowed_changes=["/users/*/draft"])
    assert score.value == 0.0
    assert {"path": "/meta/busy", "pattern": "/meta", "source": "volatile_state"} in score.details["allowed"]


def test_allowed_by_reads_globs_over_pointers():
    assert allowed_by("/users/2/email", ["/users/2"]) == "/users/2"
    assert allowed_by("/users/22", ["/users/2"]) is None  # a sibling key is not below it
    assert allowed_by("/a/b", [""]) == ""
    assert allowed_by("/a/b", ["/c", "/a/*"]) == "/a/*"


def test_a_pattern_that_is_no_pointer_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"allowed_changes\[1\]: 'users/\*' is not a JSON Pointer pattern"):
        Example(id="e", input="x", allowed_changes=["/ok", "users/*"])

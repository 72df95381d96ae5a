"""The state after every step: initial state and RFC 6902 patches recorded by the runner, the
per-environment cap, old records, and the reference replay (toolgym.replay), on real
environments driven by scripted models."""

from __future__ import annotations

import json

import pytest

import toolgym
from toolgym.plugins import get_benchmark
from toolgym.providers.scripted import ScriptedChatModel
from toolgym.records import Example, Trajectory


def core(first):
    """A first error's step, type, milestone and argument (its tool and note left out)."""
    return {k: first[k] for k in ("step", "type", "milestone", "argument")}


def typed(*letters: str, extra: list[dict] | None = None) -> list[dict]:
    """A script typing ``letters`` one call per turn (then ``extra`` calls), then stopping."""
    turns = [{"content": "", "tool_calls": [{"name": c, "args": {}, "id": f"c{k}"}]} for k, c in enumerate(letters)]
    turns += [{"content": "", "tool_calls": [c]} for c in extra or []]
    return turns + [{"content": "done"}]


def test_runner_records_the_state_after_every_tool_step_and_load_run_reads_it_back(tmp_path):
    example = Example(id="ab", input="Type ab", expected_state={"paper": "ab"})
    script = typed("a", "b", extra=[{"name": "nope", "args": {}, "id": "x"}])
    result = toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=script), dataset=[example],
                              out=tmp_path / "run")
    loaded = toolgym.load_run(tmp_path / "run").trajectories[0]
    assert loaded.initial_state == {"paper": ""}
    assert [s.state_patch for s in loaded.tool_steps] == [
        [{"op": "replace", "path": "/paper", "value": "a"}],
        [{"op": "replace", "path": "/paper", "value": "ab"}],
        [],  # an unknown tool: never run, nothing changed
    ]
    assert loaded.tool_steps[2].malformed
    assert toolgym.states_after(loaded) == [{"paper": "a"}, {"paper": "ab"}, {"paper": "ab"}]
    assert toolgym.states_after(loaded)[-1] == loaded.final_state
    assert loaded.state_note is None
    assert result.trajectories[0].initial_state == loaded.initial_state


class Ledger(toolgym.Environment):
    """A list of entries that grows by one long line per call."""

    instructions = "Add entries."
    state_record_chars = 400

    def reset(self, example):
        self.entries = []

    def read_state(self):
        return {"entries": list(self.entries)}

    @toolgym.tool
    def add(self, text: str) -> str:
        """Add an entry.

        Args:
            text: The entry.
        """
        self.entries.append(text)
        return "ok"


def test_the_per_environment_cap_stops_recording_with_a_note():
    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"text": "x" * 100}, "id": f"c{k}"}]}
              for k in range(4)] + [{"content": "done"}]
    result = toolgym.evaluate(Ledger, model=ScriptedChatModel(turns=script), dataset=[Example(id="e", input="go")])
    t = result.trajectories[0]
    patches = [s.state_patch for s in t.tool_steps]
    # initial {"entries": []} = 15 characters, each patch about 150: two fit under 400
    assert patches[0] == [{"op": "add", "path": "/entries/0", "value": "x" * 100}]
    assert patches[1] is not None and patches[2] is None and patches[3] is None
    assert "up to tool step 2" in t.state_note and "Ledger.state_record_chars = 400" in t.state_note
    states = toolgym.states_after(t)
    assert states[1] == {"entries": ["x" * 100] * 2} and states[2:] == [None, None]
    assert t.final_state == {"entries": ["x" * 100] * 4}  # the final state is kept whatever the cap


def test_a_cap_of_zero_records_no_state():
    class Quiet(Ledger):
        state_record_chars = 0

    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"text": "y"}, "id": "c"}]}, {"content": "done"}]
    t = toolgym.evaluate(Quiet, model=ScriptedChatModel(turns=script), dataset=[Example(id="e", input="go")]).trajectories[0]
    assert t.initial_state is None and t.tool_steps[0].state_patch is None
    assert "state_record_chars = 0" in t.state_note
    assert toolgym.states_after(t) == [None]


def test_trajectories_of_older_runs_and_imported_files_load_without_states():
    old = {"example_id": "e", "env": "typewriter_26", "agent": "tool_calling", "status": "completed",
           "steps": [{"kind": "tool", "call_id": "1", "name": "a", "output": "OK"}], "final_state": {"paper": "a"}}
    t = Trajectory.model_validate(old)
    assert t.initial_state is None and t.state_note is None and t.tool_steps[0].state_patch is None
    assert toolgym.states_after(t) == [None]


def test_a_patch_that_does_not_apply_is_refused_naming_the_step():
    t = Trajectory.model_validate({
        "example_id": "e", "env": "x", "agent": "a", "status": "completed", "initial_state": {"paper": ""},
        "steps": [{"kind": "tool", "call_id": "1", "name": "a",
                   "state_patch": [{"op": "remove", "path": "/ink"}]}],
    })
    with pytest.raises(ValueError, match="tool step 1 does not apply"):
        toolgym.states_after(t)


def test_replay_records_the_reference_as_a_run_does_on_sqlite():
    bench = get_benchmark("relational_data")
    from toolgym.data import load_examples

    example = next(ex for ex in load_examples(bench.datasets / "test.jsonl") if len(ex.expected_calls or []) >= 2)
    replay = toolgym.replay_calls(bench, example, example.expected_calls)
    oracle = toolgym.evaluate(bench, agent="oracle", dataset=[example]).trajectories[0]
    assert replay.status == "completed" and replay.agent == "reference" and replay.env == "relational_data"
    assert [(s.name, s.arguments, s.output, s.error) for s in replay.tool_steps] == \
        [(s.name, s.arguments, s.output, s.error) for s in oracle.tool_steps]
    assert replay.initial_state == oracle.initial_state and replay.final_state == oracle.final_state
    assert [s.state_patch for s in replay.tool_steps] == [s.state_patch for s in oracle.tool_steps]
    assert toolgym.reference_replay(bench, example) is toolgym.reference_replay(bench, example)  # cached


def test_replay_records_failing_calls_and_goes_on():
    bench = get_benchmark("multiverse_math")
    example = Example(id="m", input="x")
    replay = toolgym.replay_calls(bench, example, [
        {"name": "multiply", "arguments": {"a": 2, "b": 3}},
        {"name": "multiply", "arguments": {"a": "two"}},
        {"name": "no_such_tool", "arguments": {}},
        toolgym.ToolCallSpec(name="add", arguments={"a": 1, "b": 1}),
    ])
    steps = replay.tool_steps
    assert [s.error for s in steps] == [False, True, True, False]
    assert [s.rejected for s in steps] == [False, True, True, False]
    assert [s.state_patch for s in steps] == [
        [{"op": "replace", "path": "/calls", "value": 1}], [], [], [{"op": "replace", "path": "/calls", "value": 2}],
    ]
    assert replay.model_steps[0].tool_calls[1].name == "multiply"
    with pytest.raises(toolgym.ReplayError, match="call 1"):
        toolgym.replay_calls(bench, example, [{"arguments": {}}])
    with pytest.raises(toolgym.ReplayError, match="no expected_calls"):
        toolgym.reference_replay(bench, example)


class Brittle(toolgym.Environment):
    """A tool with a bug."""

    def reset(self, example):
        self.n = 0

    def read_state(self):
        return {"n": self.n}

    @toolgym.tool
    def bump(self) -> str:
        """Add one."""
        self.n += 1
        return "ok"

    @toolgym.tool
    def crash(self) -> str:
        """Broken."""
        raise RuntimeError("boom")


def test_replay_of_a_broken_tool_ends_with_status_error_and_keeps_the_steps_before():
    replay = toolgym.replay_calls(Brittle, Example(id="b", input="x"),
                                  [{"name": "bump"}, {"name": "crash"}, {"name": "bump"}])
    assert replay.status == "error" and "boom" in replay.error
    assert [s.name for s in replay.tool_steps] == ["bump"]
    assert toolgym.states_after(replay) == [{"n": 1}] and replay.final_state == {"n": 1}
    json.dumps(replay.model_dump())


# --- state milestones and minefields against the state after each step ---------------------

def typewriter_run(example: Example, *letters: str) -> Trajectory:
    return toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=typed(*letters)), dataset=[example],
                            graders=["trajectory_match", "milestone_progress"]).trajectories[0]


def grade(example: Example, trajectory: Trajectory) -> dict[str, toolgym.Score]:
    from toolgym.graders.trajectory import MilestoneProgress, TrajectoryMatch

    return {g.name: g.grade(example, trajectory) for g in (TrajectoryMatch(), MilestoneProgress())}


def without_states(trajectory: Trajectory) -> Trajectory:
    """The same trajectory as an older run stored it: no initial state, no patches."""
    return Trajectory.model_validate({
        **trajectory.model_dump(), "initial_state": None,
        "steps": [{**s.model_dump(), "state_patch": None} if s.kind == "tool" else s.model_dump()
                  for s in trajectory.steps],
    })


def test_a_state_milestone_passed_through_mid_trajectory_is_matched_from_the_patches():
    example = Example(id="abc", input="Type abc", milestones=[
        {"id": "ab", "state": {"paper": "ab"}},
        {"id": "c", "after": ["ab"], "call": {"name": "c"}},
    ], extra_calls="allow")
    t = typewriter_run(example, "a", "b", "c")
    scores = grade(example, t)
    assert scores["trajectory_match"].value == 1.0
    assert scores["trajectory_match"].details["matched"]["ab"] == {"kind": "state", "at": 2, "met": 2}
    old = grade(example, without_states(t))  # only the final state "abc" is known: "ab" is never seen
    assert old["trajectory_match"].value == 0.0 and old["milestone_progress"].value == 0.0
    assert old["trajectory_match"].details["missing"] == ["ab", "c"]  # c waits for ab


def test_a_state_minefield_that_held_for_one_step_fails_the_trajectory_at_that_step():
    example = Example(id="abc", input="Type abc", milestones=[{"id": "c", "call": {"name": "c"}}],
                      minefields=[{"state": {"paper": "ab"}}], extra_calls="allow")
    t = typewriter_run(example, "a", "b", "c")
    scores = grade(example, t)
    assert scores["trajectory_match"].value == 0.0 and scores["milestone_progress"].value == 0.0
    assert core(scores["trajectory_match"].details["first_error"]) == {
        "step": 2, "type": "forbidden", "milestone": None, "argument": None}
    assert scores["trajectory_match"].details["minefields_hit"][0]["step"] == 2
    old = grade(example, without_states(t))  # the final state "abc" is no minefield
    assert old["trajectory_match"].value == 1.0


def test_a_state_minefield_seen_only_in_the_final_state_names_no_step_as_before():
    example = Example(id="ab", input="Type ab", milestones=[], minefields=[{"state": {"paper": "ab"}}],
                      extra_calls="allow")
    t = without_states(typewriter_run(example, "a", "b"))
    first = grade(example, t)["trajectory_match"].details["first_error"]
    assert core(first) == {"step": None, "type": "forbidden", "milestone": None, "argument": None}


def test_multiverse_math_counts_calls_in_its_state_and_a_milestone_reads_the_count_after_each_step():
    example = Example(id="m", input="x", milestones=[
        {"id": "two", "state": {"calls": 2}, "transient": True},
        {"id": "mul", "call": {"name": "multiply", "arguments": {"a": 2, "b": 3}}},
    ], extra_calls="allow")
    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}, "id": "1"}]},
              {"content": "", "tool_calls": [{"name": "multiply", "args": {"a": 2, "b": 3}, "id": "2"}]},
              {"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "3"}]},
              {"content": "done"}]
    t = toolgym.evaluate("multiverse_math", model=ScriptedChatModel(turns=script), dataset=[example],
                         graders=["trajectory_match"]).trajectories[0]
    assert [s["calls"] for s in toolgym.states_after(t)] == [1, 2, 3]
    score = grade(example, t)["trajectory_match"]
    assert score.value == 1.0 and score.details["matched"]["two"] == {"kind": "state", "at": 2, "met": 2}
    # not transient, the state milestone must still hold at the end: step 3 undid it
    lasting = example.model_copy(update={"milestones": [{"id": "two", "state": {"calls": 2}}, example.milestones[1]]})
    score = grade(Example.model_validate(lasting.model_dump()), t)["trajectory_match"]
    assert score.value == 0.0
    assert core(score.details["first_error"]) == {"step": 3, "type": "undone", "milestone": "two", "argument": None}
    assert score.explanation.startswith("step 3 (add): undone (two): state milestone two held after tool step 2 and no "
                                        "longer after tool step 3; it must hold at the end")


# --- collateral_damage and final_state from the reference replay ----------------------------

class Accounts(toolgym.Environment):
    """User accounts in a real SQLite database."""

    instructions = "Manage the accounts."

    def reset(self, example):
        import sqlite3

        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, email TEXT, plan TEXT)")
        self.db.executemany("INSERT INTO users VALUES (?, ?, ?, ?)",
                            [(1, "Kwame", "k@old.org", "free"), (2, "Ada", "a@old.org", "pro")])

    def read_state(self):
        rows = self.db.execute("SELECT id, name, email, plan FROM users ORDER BY id").fetchall()
        return {"users": {str(i): {"name": n, "email": e, "plan": p} for i, n, e, p in rows}}

    def close(self):
        self.db.close()

    @toolgym.tool
    def set_email(self, user_id: int, email: str) -> str:
        """Change a user's email.

        Args:
            user_id: The user.
            email: The new address.
        """
        self.db.execute("UPDATE users SET email = ? WHERE id = ?", (email, user_id))
        return "ok"

    @toolgym.tool
    def set_plan(self, user_id: int, plan: str) -> str:
        """Change a user's plan.

        Args:
            user_id: The user.
            plan: free or pro.
        """
        self.db.execute("UPDATE users SET plan = ? WHERE id = ?", (plan, user_id))
        return "ok"

    @toolgym.tool
    def delete_user(self, user_id: int) -> str:
        """Delete a user.

        Args:
            user_id: The user.
        """
        self.db.execute("DELETE FROM users WHERE id = ?", (user_id,))
        return "ok"


EMAIL = Example(id="email", input="Give Kwame the address k@new.org",
                expected_calls=[{"name": "set_email", "arguments": {"user_id": 1, "email": "k@new.org"}}])


def play(env, example: Example, *calls: dict) -> toolgym.EvalResult:
    script = [{"content": "", "tool_calls": [{"id": f"c{k}", **c}]} for k, c in enumerate(calls)] + [{"content": "ok"}]
    return toolgym.evaluate(env, model=ScriptedChatModel(turns=script), dataset=[example],
                            graders=["final_state", "collateral_damage"])


def scores_of(result: toolgym.EvalResult) -> dict[str, toolgym.Score]:
    return {s.grader: s for s in result.scores}


def test_collateral_damage_counts_the_paths_changed_that_the_reference_leaves_alone():
    result = play(Accounts, EMAIL,
                  {"name": "set_email", "args": {"user_id": 1, "email": "k@new.org"}},
                  {"name": "set_plan", "args": {"user_id": 2, "plan": "free"}},
                  {"name": "set_email", "args": {"user_id": 2, "email": "a@new.org"}})
    score = scores_of(result)["collateral_damage"]
    assert score.value == 2.0
    assert score.details["paths"] == [
        {"path": "/users/2/email", "before": {"value": "a@old.org"}, "after": {"value": "a@new.org"}},
        {"path": "/users/2/plan", "before": {"value": "pro"}, "after": {"value": "free"}},
    ]
    assert score.details["reference_changed"] == ["/users/1/email"]
    assert toolgym.Measure.model_validate(result.record.measures["collateral_damage"]).passed(score.value) is False


def test_collateral_damage_is_zero_for_the_reference_path_even_with_a_wrong_value_and_names_deletions():
    clean = scores_of(play(Accounts, EMAIL, {"name": "set_email", "args": {"user_id": 1, "email": "typo@new.org"}}))
    assert clean["collateral_damage"].value == 0.0
    assert clean["final_state"].value == 0.0  # the value is final_state's business
    assert clean["final_state"].details["target"] == "reference replay"
    deleted = scores_of(play(Accounts, EMAIL,
                             {"name": "set_email", "args": {"user_id": 1, "email": "k@new.org"}},
                             {"name": "delete_user", "args": {"user_id": 2}}))
    assert deleted["collateral_damage"].value == 3.0
    assert {"path": "/users/2/name", "before": {"value": "Ada"}, "after": {}} in deleted["collateral_damage"].details["paths"]
    assert deleted["final_state"].value == 0.0


def test_final_state_compares_with_the_reference_replay_when_no_expected_state_is_given():
    good = scores_of(play(Accounts, EMAIL, {"name": "set_email", "args": {"user_id": 1, "email": "k@new.org"}}))
    assert good["final_state"].value == 1.0 and good["collateral_damage"].value == 0.0
    # a different path to the same state passes, as in tau2-bench
    other = scores_of(play(Accounts, EMAIL,
                           {"name": "set_email", "args": {"user_id": 1, "email": "x@new.org"}},
                           {"name": "set_email", "args": {"user_id": 1, "email": "k@new.org"}}))
    assert other["final_state"].value == 1.0


def test_typewriter_keeps_its_expected_state_and_multiverse_math_keeps_final_state_off():
    bench = get_benchmark("typewriter_26")
    from toolgym.data import load_examples

    example = load_examples(bench.datasets / "test.jsonl")[3]
    letters = [c.name for c in example.expected_calls]
    s = scores_of(play("typewriter_26", example, *({"name": c, "args": {}} for c in letters[:-1])))
    assert s["final_state"].details["target"] == "expected_state" and s["final_state"].value == 0.0
    assert s["collateral_damage"].value == 0.0  # /paper is what the reference changes too
    mm = get_benchmark("multiverse_math")
    example = load_examples(mm.datasets / "test.jsonl")[0]
    s = scores_of(play("multiverse_math", example, {"name": "add", "args": {"a": 1, "b": 2}}))
    assert "final_state" not in s  # its state counts calls: no target, as before
    assert s["collateral_damage"].value == 0.0


def test_relational_data_is_read_only_so_final_state_keeps_off_and_nothing_is_damaged():
    bench = get_benchmark("relational_data")
    from toolgym.data import load_examples

    example = load_examples(bench.datasets / "test.jsonl")[0]
    s = scores_of(play("relational_data", example, {"name": "list_user_ids", "args": {}}))
    assert "final_state" not in s  # every trajectory would reach the replay's state: no figure
    assert s["collateral_damage"].value == 0.0  # a pass: its details are left out of the record


def test_a_reference_that_fails_to_replay_leaves_the_state_graders_unscored():
    broken = Example(id="b", input="x", expected_calls=[{"name": "crash", "arguments": {}}])
    script = [{"content": "", "tool_calls": [{"name": "bump", "args": {}, "id": "1"}]}, {"content": "ok"}]
    result = toolgym.evaluate(Brittle, model=ScriptedChatModel(turns=script), dataset=[broken],
                              graders=["final_state", "collateral_damage"])
    for score in result.scores:
        assert score.value is None and "reference replay fails" in score.explanation


# --- toolgym check: the reference replay through toolgym.replay -----------------------------

BRITTLE = '''
import toolgym


class Brittle(toolgym.Environment):
    """A counter with a broken tool."""

    def reset(self, example):
        self.n = 0

    def read_state(self):
        return {"n": self.n}

    @toolgym.tool
    def bump(self) -> str:
        """Add one."""
        self.n += 1
        return "ok"

    @toolgym.tool
    def crash(self) -> str:
        """Broken."""
        raise RuntimeError("boom")
'''


def test_check_reports_a_reference_whose_replay_errors_or_misses_its_own_milestones(tmp_path, capsys):
    from toolgym.cli import main

    (tmp_path / "brittle.py").write_text(BRITTLE, encoding="utf-8")
    env = f"{tmp_path / 'brittle.py'}:Brittle"
    rows = [
        {"id": "good", "input": "x", "expected_calls": [{"name": "bump"}],
         "milestones": [{"id": "one", "state": {"n": 1}}], "extra_calls": "allow"},
        {"id": "bug", "input": "x", "expected_calls": [{"name": "bump"}, {"name": "crash"}]},
    ]
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(json.dumps(r) for r in rows[:1]) + "\n", encoding="utf-8")
    assert main(["check", "--env", env, "--dataset", str(dataset)]) == 0
    dataset.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert main(["check", "--env", env, "--dataset", str(dataset)]) == 1
    err = capsys.readouterr().err
    assert "problem: bug: replaying its expected calls fails after 1 of its 2 expected calls: ToolBug" in err
    assert "boom" in err and "good" not in err
    # a reference that passes a state the milestones forbid is reported by its milestones
    rows[0]["minefields"] = [{"state": {"n": 1}}]
    dataset.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    assert main(["check", "--env", env, "--dataset", str(dataset)]) == 1
    assert "good: its expected calls do not satisfy its milestones (step 1 (bump): forbidden: the state after bump matches minefield 0" in capsys.readouterr().err


# --- show draws each tool step's state change ------------------------------------------------

def test_show_draws_the_state_change_of_each_tool_step_and_where_recording_stopped(tmp_path):
    import io

    from rich.console import Console

    from toolgym.views.show import show

    example = Example(id="ab", input="Type ab", milestones=[{"id": "ab", "state": {"paper": "ab"}}], extra_calls="allow")
    toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=typed("a", "b")), dataset=[example],
                     out=tmp_path / "tw", graders=["trajectory_match"])
    buf = io.StringIO()
    assert show(tmp_path / "tw", console=Console(file=buf, width=200)) == 0
    text = buf.getvalue()
    assert 'state /paper: "" → "a"' in text and 'state /paper: "a" → "ab"' in text
    assert text.index('"" → "a"') < text.index("  4 tool  b")  # under its own step

    script = [{"content": "", "tool_calls": [{"name": "add", "args": {"text": "x" * 100}, "id": f"c{k}"}]}
              for k in range(3)] + [{"content": "done"}]
    toolgym.evaluate(Ledger, model=ScriptedChatModel(turns=script), dataset=[Example(id="e", input="go")],
                     out=tmp_path / "ledger")
    buf = io.StringIO()
    assert show(tmp_path / "ledger", console=Console(file=buf, width=300)) == 0
    text = buf.getvalue()
    assert text.count("state /entries/") == 2
    assert "state not recorded from this step: states recorded up to tool step 2" in text


# --- the fast path for scalar states is the patch jsonpatch makes ----------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.text(max_size=3))
KEYS = st.text(alphabet="ab/~", min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, st.tuples(SCALAR, SCALAR), max_size=5))
def test_scalar_replacements_equal_jsonpatch(pairs):
    import jsonpatch

    from toolgym.environments.states import scalar_replacements

    before = {k: a for k, (a, _) in pairs.items()}
    after = {k: b for k, (_, b) in pairs.items()}
    fast = scalar_replacements(before, after)
    made = jsonpatch.make_patch(before, after).patch
    assert sorted(fast, key=lambda op: op["path"]) == sorted(made, key=lambda op: op["path"])
    assert jsonpatch.apply_patch(before, fast) == after


def test_scalar_replacements_leave_containers_and_new_keys_to_jsonpatch():
    from toolgym.environments.states import scalar_replacements

    assert scalar_replacements({"a": [1]}, {"a": [1, 2]}) is None
    assert scalar_replacements({"a": 1}, {"a": 1, "b": 2}) is None
    assert scalar_replacements({"a": "x", "b": {"c": 1}}, {"a": "y", "b": {"c": 1}}) is None


class Blind(toolgym.Environment):
    """An environment that shows no state (``read_state`` is the base class's ``{}``), as an MCP
    server is seen."""

    instructions = "Bump the counter."

    def reset(self, example):
        self.count = 0

    @toolgym.tool
    def bump(self) -> str:
        """Bump the counter."""
        self.count += 1
        return "bumped"


def test_state_graders_do_not_pass_what_they_cannot_see():
    example = Example(id="b", input="Bump it", expected_calls=[{"name": "bump", "arguments": {}}])
    result = toolgym.evaluate(Blind, model=ScriptedChatModel(turns=[{"content": "I will not."}]), dataset=[example],
                              graders=["final_state", "collateral_damage", "steps_exact"])
    by = {s.grader: s for s in result.scores}
    for name in ("final_state", "collateral_damage"):  # doing nothing used to pass both
        assert by[name].value is None and "exposes no state" in by[name].explanation, by[name]
    assert by["steps_exact"].value == 0.0
    # an environment that shows its state is graded as before
    seen = Example(id="ab", input="Type ab", expected_calls=[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])
    result = toolgym.evaluate("typewriter_26", model=ScriptedChatModel(turns=typed("a")), dataset=[seen],
                              graders=["final_state", "collateral_damage"])
    assert {s.grader: s.value for s in result.scores} == {"final_state": 0.0, "collateral_damage": 0.0}

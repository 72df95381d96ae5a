"""The pairing of two trajectories' tool steps (toolgym.views.web.diff) and the CSV cell rule,
as properties over generated trajectories and cells."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolgym.records import Score, ToolStep, Trajectory
from toolgym.views.web.app import FORMULA_START, neutralise
from toolgym.views.web.diff import align_steps

calls = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2)), max_size=8)


def trajectory(steps: list[tuple[str, int]]) -> Trajectory:
    return Trajectory(
        example_id="x", env="e", agent="a", status="completed",
        steps=[ToolStep(call_id=str(i), name=n, arguments={"v": v}, output=f"{n}{v}") for i, (n, v) in enumerate(steps)],
    )


def matched(steps: list[tuple[str, int]], milestones: list[str | None]) -> list[Score]:
    rows = [{"tool": n, "step": i + 1, **({"milestone": m} if m else {"type": "extra_call"})}
            for i, ((n, _), m) in enumerate(zip(steps, milestones, strict=True))]
    return [Score(example_id="x", grader="trajectory_match", value=0.0, details={"alignment": rows})]


@given(calls, calls)
def test_every_step_appears_once_and_in_order(a, b):
    _, pairs = align_steps(trajectory(a), [], trajectory(b), [])
    for side, n in (("a", len(a)), ("b", len(b))):
        indexes = [p[side] for p in pairs if p[side] is not None]
        assert indexes == list(range(n))
    for p in pairs:
        if p["a"] is not None and p["b"] is not None:
            assert (p["status"] == "same") == (a[p["a"]] == b[p["b"]])
        else:
            assert p["status"] == ("only_a" if p["b"] is None else "only_b")


@given(calls)
def test_a_trajectory_is_the_same_as_itself(a):
    _, pairs = align_steps(trajectory(a), [], trajectory(a), [])
    assert all(p["status"] == "same" for p in pairs) and len(pairs) == len(a)


def test_steps_pair_by_milestone_before_position():
    a = [("search", 1), ("book", 1)]
    b = [("search", 2), ("list", 0), ("book", 1)]
    method, pairs = align_steps(trajectory(a), matched(a, ["find", "book"]), trajectory(b), matched(b, ["find", None, "book"]))
    assert method == "milestones"
    assert [(p["a"], p["b"], p["status"], p["milestone"]) for p in pairs] == [
        (0, 0, "different", "find"), (None, 1, "only_b", None), (1, 2, "same", "book")]
    assert pairs[0]["differences"] == ["arguments", "output"]


@given(st.text(max_size=20))
def test_no_csv_cell_starts_as_a_formula(text):
    cell = neutralise(text)
    assert not cell.startswith(FORMULA_START)
    assert cell == text or cell == "'" + text
    assert neutralise(-3) == -3  # numbers stay numbers

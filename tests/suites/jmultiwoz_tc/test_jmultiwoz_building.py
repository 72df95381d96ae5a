"""Records built without validation (toolgym.suites.jmultiwoz_tc.building) are the records
validation would build."""

from __future__ import annotations

import pytest

from toolgym import ModelStep, Score, ToolCall, Trajectory
from toolgym.suites.jmultiwoz_tc.building import built


def test_built_equals_validated_and_serialises_the_same():
    call = {"id": "c1", "name": "Search_weather", "arguments": {"city": "東京"}, "malformed": None, "raw": None}
    step = {"kind": "model", "text": "{}", "tool_calls": [built(ToolCall, dict(call))], "latency_s": 0.0,
            "input_tokens": None, "output_tokens": None, "reasoning": None, "reasoning_tokens": None, "tokens": None}
    values = {"schema_version": 1, "example_id": "t", "trial": 0, "env": "jmultiwoz_tc", "agent": "imported",
              "model": "m", "status": "completed", "error": None, "steps": [built(ModelStep, step)],
              "final_state": {"result_file": {"file": "f", "line": 1}}, "final_answer": None, "duration_s": 0.0,
              "initial_state": None, "state_note": None, "parent": None, "prefix_steps": None, "injected": None,
              "source_line": 1, "turn_states": None, "user_model": None}
    made = built(Trajectory, dict(values))
    assert made == Trajectory.model_validate(values)
    assert made.model_dump_json() == Trajectory.model_validate(values).model_dump_json()
    score = built(Score, {"schema_version": 1, "example_id": "t", "trial": 0, "grader": "g", "value": 1.0,
                          "explanation": "", "details": {}})
    score.value = 0.0  # assigning a field leaves the shared set of field names as it is
    assert score.model_fields_set == set(Score.model_fields)


def test_built_refuses_missing_or_reordered_fields():
    with pytest.raises(ValueError, match="needs the fields"):
        built(ToolCall, {"id": "c", "name": "x"})
    with pytest.raises(ValueError, match="needs the fields"):
        built(ToolCall, {"name": "x", "id": "c", "arguments": {}, "malformed": None, "raw": None})

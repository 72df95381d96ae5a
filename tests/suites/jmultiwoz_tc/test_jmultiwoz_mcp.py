"""JMultiWOZ-TC through the Python API and through ``toolgym serve`` driven by the official MCP
SDK client: the same scores and the same model calls (the graders read the model's turn)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from tests.mcpio.test_mcp_cross_face import Plan, both_faces, examples_of, model_calls, scores  # noqa: E402
from tests.suites.jmultiwoz_tc.jmultiwoz_helpers import write_dataset  # noqa: E402


def test_jmultiwoz_tc_scores_equal_over_mcp(tmp_path):
    dataset = write_dataset(tmp_path / "data")
    examples = examples_of("jmultiwoz_tc", dataset)
    plan: Plan = {ex.id: ([{"name": c.name, "args": c.arguments} for c in ex.expected_calls or []], "はい。") for ex in examples}
    greeting = examples[0]  # こんにちは。: the gold calls nothing
    assert not greeting.expected_calls
    plan[greeting.id] = ([{"name": "Search_weather", "args": {"city": "東京"}}], "晴れです。")
    two = next(ex for ex in examples if len(ex.expected_calls or []) == 2)
    plan[two.id] = (plan[two.id][0][:1], "")  # one of the two gold calls is missing
    api_out, mcp_out = both_faces(tmp_path, "jmultiwoz_tc", dataset, plan)

    api, mcp = scores(api_out), scores(mcp_out)
    assert mcp == api
    assert api[(greeting.id, "jmultiwoz_exact")] == 0.0 and api[(two.id, "jmultiwoz_exact")] == 0.0
    golds = [ex.id for ex in examples if ex.expected_calls and ex.id != two.id]
    assert golds and all(api[(i, "jmultiwoz_exact")] == 1.0 for i in golds)
    assert model_calls(mcp_out) == model_calls(api_out)

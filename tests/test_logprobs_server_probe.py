"""The server scorer's probe against real HTTP servers on 127.0.0.1 (tests/completions_server.py):
a right server passes; a shifted one, one without the generated token's entry, one without
generated log-probabilities, one that echoes nothing of the prompt and others are refused in
one line naming the defect. (Whole runs against them: tests/suites/vietnamese/test_vi_server_probe.py.)
"""

import pytest

from tests.completions_server import AFTER_NEXT, NEXT, CompletionsServer, logprob, serve, tokenize
from toolgym.logprobs import WrongLogprobs, build_scorer
from toolgym.logprobs.openai_compat import PROBE_CONTEXTS, CompletionsScorer
from toolgym.providers import ModelSettings


def test_a_right_server_passes_the_probe_with_two_requests():
    with serve("right") as url:
        scorer, note = build_scorer("vllm:m", ModelSettings(extra={"base_url": url}))
        sent = list(CompletionsServer.requests)
        result = scorer.score("một hai", " ba bốn")
    assert note == "log-likelihood via openai-completions"
    context = PROBE_CONTEXTS[0]
    assert [(r["prompt"], r["echo"], r["max_tokens"], r["temperature"], r["logprobs"]) for r in sent] == [
        (context, False, 1, 0, 1), (context + NEXT, True, 1, 0, 1)]
    assert result.tokens == (" ba", " bốn")
    assert result.logprobs == (logprob(" hai", " ba", 2), logprob(" ba", " bốn", 3))


@pytest.mark.parametrize(("mode", "defect", "upstream"), [
    ("shifted", "when generated but", "abetlen/llama-cpp-python#1983, #1276"),
    ("first_scored", "though nothing precedes it", "abetlen/llama-cpp-python#1983, #1276"),
    ("shifted_tops", "is echoed as less probable", None),
    ("no_next_entry", "not one for the generated token", "abetlen/llama-cpp-python#1983, #1276"),
    ("no_generated_logprob", "cannot be checked", None),
    ("prompt_only", "no entries for the prompt's tokens", "ggml-org/llama.cpp#27174"),
    ("bos_offsets", "text_offset puts '<s>' at character 0, where the prompt has 'Mon'", None),
])
def test_a_wrong_server_is_refused_naming_the_defect_url_and_issue(mode, defect, upstream):
    with serve(mode) as url:
        with pytest.raises(WrongLogprobs) as caught:
            build_scorer("openai-compatible:m", ModelSettings(extra={"base_url": url}))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{url}/completions: refused")
    assert defect in message
    if upstream:
        assert upstream in message
    else:
        assert "#" not in message


def test_the_shifted_server_shows_both_defects_with_its_numbers():
    with serve("shifted") as url:
        with pytest.raises(WrongLogprobs) as caught:
            CompletionsScorer(url, "m").probe()
    message = str(caught.value)
    context = PROBE_CONTEXTS[0]
    tokens = tokenize(context)
    generated, echoed = logprob(tokens[-1], NEXT, len(tokens)), logprob(NEXT, NEXT, len(tokens))
    assert f"{generated:.4f} when generated but {echoed:.4f} when echoed" in message
    assert f"0 entries follow the prompt's {len(tokens) + 1}, not one for the generated token" in message


def test_top_logprobs_from_another_position_are_refused_with_their_numbers():
    with serve("shifted_tops") as url, pytest.raises(WrongLogprobs) as caught:
        CompletionsScorer(url, "m").probe()
    tokens = tokenize(PROBE_CONTEXTS[0])
    value = logprob(tokens[-1], NEXT, len(tokens))
    assert f"is echoed as less probable ({value:.4f}) than {AFTER_NEXT!r} ({value + 1.0:.4f})" in str(caught.value)


def test_scoring_through_a_shifted_server_is_refused_even_without_the_probe():
    with serve("shifted") as url, pytest.raises(WrongLogprobs, match="not one for the generated token"):
        CompletionsScorer(url, "m").score("một hai", " ba")


def test_a_probe_that_cannot_decide_says_why():
    with serve("ends") as url, pytest.raises(ValueError, match="cannot check") as caught:
        CompletionsScorer(url, "m").probe()
    assert not isinstance(caught.value, WrongLogprobs)
    assert len(CompletionsServer.requests) == len(PROBE_CONTEXTS)  # every context tried, one request each

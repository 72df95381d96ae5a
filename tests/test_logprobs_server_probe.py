"""The server scorer's probe against real HTTP servers on 127.0.0.1 (tests/completions_server.py):
a right server passes; a shifted one, one without the generated token's entry, one without
generated log-probabilities and one that echoes nothing of the prompt are refused before the
run, with one line, and nothing is written."""

import pytest

from tests.completions_server import AFTER_NEXT, NEXT, CompletionsServer, logprob, serve, tokenize
from tests.suites.vietnamese.vi_helpers import EXAMS_TEST
from toolgym.cli import main
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


@pytest.mark.parametrize("mode", ["shifted", "prompt_only"])
def test_the_cli_refuses_in_one_line_and_writes_nothing(mode, tmp_path, capsys):
    out = tmp_path / "run"
    with serve(mode) as url:
        code = main(["run", "--env", "exam_vi", "--dataset", str(EXAMS_TEST), "--agent", "loglik",
                     "--model", "vllm:m", "--base-url", url, "--shots", "1", "--out", str(out), "--no-progress"])
        prompts = [r["prompt"] for r in CompletionsServer.requests]
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {url}/completions: refused")
    assert not out.exists()
    assert all(p.startswith(PROBE_CONTEXTS[0]) for p in prompts)  # no question was scored


def test_a_refused_server_leaves_no_run_directory_through_the_python_api(tmp_path):
    from toolgym import evaluate

    out = tmp_path / "run"
    examples = [{"id": "q1", "input": "Câu hỏi: một hai ba?\nĐáp án:", "reference": "A",
                 "metadata": {"task": "choice", "continuations": {"A": " A. bốn", "B": " B. năm"}}}]
    with serve("shifted") as url, pytest.raises(WrongLogprobs):
        evaluate("exam_vi", agent="loglik", model="vllm:m", dataset=examples, out=out,
                 settings=ModelSettings(extra={"base_url": url}))
    assert not out.exists()  # not even the examples kept beside a run


def test_every_option_scores_the_same_in_either_order_and_alone(tmp_path):
    from toolgym import load_run

    lines = EXAMS_TEST.read_text(encoding="utf-8").splitlines()
    datasets = {"forward": lines, "backward": lines[::-1]} | {f"alone-{i}": [line] for i, line in enumerate(lines)}
    choices: dict[str, dict[str, dict]] = {}
    orders = {}
    with serve("right") as url:
        for name, rows in datasets.items():
            path = tmp_path / name / "multilingual_test_vi.jsonl"  # the shots come from the fixtures' dev split
            path.parent.mkdir()
            path.write_text("\n".join(rows) + "\n", encoding="utf-8")
            CompletionsServer.requests = []
            argv = ["run", "--env", "exam_vi", "--dataset", str(path), "--shots-from",
                    str(EXAMS_TEST.with_name("multilingual_dev_vi.jsonl")), "--agent", "loglik", "--model", "vllm:m",
                    "--base-url", url, "--shots", "1", "--out", str(tmp_path / name / "run"), "--no-progress"]
            assert main(argv) == 0
            orders[name] = [r["prompt"] for r in CompletionsServer.requests[2:]]  # past the probe
            for traj in load_run(tmp_path / name / "run").trajectories:
                choices.setdefault(traj.example_id, {})[name] = traj.final_state["choices"]
    assert orders["forward"] != orders["backward"] and sorted(orders["forward"]) == sorted(orders["backward"])
    assert len(choices) == len(lines)
    for example_id, by_run in choices.items():
        assert len(by_run) == 3, example_id  # forward, backward, alone
        first, *others = by_run.values()
        assert len(first) >= 2 and all(len(c["logprobs"]) for c in first.values())
        for other in others:
            assert other == first, example_id

"""Whole log-likelihood runs through stand-in completions servers on 127.0.0.1
(tests/completions_server.py): a server the probe refuses stops the run before anything is
written, and through a right one every option scores the same whatever the order."""

import pytest

from tests.completions_server import CompletionsServer, serve
from tests.suites.vietnamese.vi_helpers import EXAMS_DEV, EXAMS_TEST
from toolgym.cli import main
from toolgym.logprobs import WrongLogprobs
from toolgym.logprobs.openai_compat import PROBE_CONTEXTS
from toolgym.providers import ModelSettings


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
                    str(EXAMS_DEV), "--agent", "loglik", "--model", "vllm:m",
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

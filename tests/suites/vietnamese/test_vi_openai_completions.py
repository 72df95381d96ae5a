"""The OpenAI-compatible completions backend against a real HTTP server on 127.0.0.1 that
answers echo+logprobs requests like vLLM does (legacy completions format)."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.suites.vietnamese.vi_helpers import EXAMS_TEST
from toolgym.cli import main
from toolgym.logprobs import NoLogprobs, build_scorer
from toolgym.logprobs.openai_compat import PROBE_CONTEXTS, CompletionsScorer
from toolgym.providers import ModelSettings
from toolgym.runio import read_scores

# The stub's "model": a word (with its leading space) is one token; a word's log-probability
# is -0.1 per character, except the favourites below; a token is greedy when it is a favourite.
# " <gen>" is what it generates after any prompt (greedily, so the probe finds it on top).
FAVOURITES = {" Tim": -0.05, " Hà": -0.02, " Nội": -0.01, " <gen>": -0.5}


def token_logprob(token: str) -> float:
    return FAVOURITES.get(token, -0.1 * len(token.strip()))


class Completions(BaseHTTPRequestHandler):
    requests: list[dict] = []
    refuse_echo = False

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/v1/completions":
            return self.reply(404, {"error": {"message": "not found"}})
        if self.refuse_echo:
            return self.reply(400, {"error": {"message": "echo is not supported with logprobs"}})
        prompt = body["prompt"]
        if not body.get("echo"):  # the probe's generation: the one token and its log-probability
            value = token_logprob(" <gen>")
            return self.reply(200, {"choices": [{"text": " <gen>", "logprobs": {
                "tokens": [" <gen>"], "token_logprobs": [value], "top_logprobs": [{" <gen>": value}],
                "text_offset": [len(prompt)]}}]})
        tokens = re.findall(r"\s*\S+", prompt) + [" <gen>"]  # the one generated token
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        values = [None] + [token_logprob(t) for t in tokens[1:]]
        tops = [None] + [{t: v} if t in FAVOURITES else {" khác": v + 1.0} for t, v in zip(tokens[1:], values[1:], strict=True)]
        self.reply(200, {"choices": [{"text": prompt + " <gen>", "logprobs": {
            "tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}}]})

    def reply(self, code, doc):
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    Completions.requests = []
    Completions.refuse_echo = False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_scores_only_the_continuation_tokens(server):
    scorer = CompletionsScorer(server, "stub-model", api_key="k")
    result = scorer.score("Thủ đô của Việt Nam là", " Hà Nội")
    assert result.tokens == (" Hà", " Nội")
    assert result.logprobs == (-0.02, -0.01) and result.greedy
    other = scorer.score("Thủ đô của Việt Nam là", " Paris")
    assert other.logprobs == (pytest.approx(-0.5),) and not other.greedy
    sent = Completions.requests[0]
    assert sent["body"] == {"model": "stub-model", "prompt": "Thủ đô của Việt Nam là Hà Nội", "max_tokens": 1,
                            "temperature": 0, "echo": True, "logprobs": 1}
    assert sent["auth"] == "Bearer k"


def test_a_server_without_echo_means_no_logprobs(server, monkeypatch):
    Completions.refuse_echo = True
    with pytest.raises(NoLogprobs, match="HTTP 400"):
        CompletionsScorer(server, "m").score("a", " b")
    scorer, note = build_scorer("vllm:m", ModelSettings(extra={"base_url": server}))
    assert scorer is None and "echo is not supported" in note


def test_openai_itself_is_chat_only():
    scorer, note = build_scorer("openai:gpt-4o-mini", ModelSettings())
    assert scorer is None and "openai-compatible" in note


def test_compatible_server_needs_an_address_and_must_answer():
    with pytest.raises(ValueError, match="--base-url"):
        build_scorer("openai-compatible:m", ModelSettings())
    with pytest.raises(ValueError, match="cannot reach"):
        build_scorer("openai-compatible:m", ModelSettings(extra={"base_url": "http://127.0.0.1:9/v1"}))


def test_cli_loglik_run_over_http(server, monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_API_KEY", "secret")
    out = tmp_path / "run"
    argv = ["run", "--env", "exam_vi", "--dataset", str(EXAMS_TEST), "--agent", "loglik", "--model",
            "openai-compatible:stub", "--base-url", server, "--shots", "1", "--limit", "1", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    (score,) = read_scores(out)
    # " B. Tim": -0.1 (for "B.") - 0.05 = -0.15 beats " A. Phổi" (-0.1 - 0.4), " C. Gan" (-0.1 - 0.3), ...
    assert score.example_id == "t-bio-1" and score.details["chosen"] == "B" and score.value == 1.0
    prompts = [r["body"]["prompt"] for r in Completions.requests]
    probe = PROBE_CONTEXTS[0]
    assert prompts[:2] == [probe, probe + " <gen>"]  # the probe, before the run
    assert sum(p.endswith(" B. Tim") for p in prompts) == 1 and len(prompts) == 2 + 4
    assert {r["auth"] for r in Completions.requests} == {"Bearer secret"}
    assert "secret" not in (out / "run.json").read_text()

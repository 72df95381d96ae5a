"""toolgym's per-option log-likelihoods beside EleutherAI lm-evaluation-harness's, on the same
prompts and continuations (the Vietnamese multiple-choice suites, issue 29).

Three sources score every option of the first ``--xcopa`` XCOPA and ``--exam`` EXAMS Vietnamese
test questions (five-shot prompts, as ``toolgym run --agent loglik`` builds them):

* **lm-eval via the server**: lm-evaluation-harness, in its own virtual environment, with a
  custom task made of toolgym's prompts (``doc_to_text``) and option lines (``doc_to_choice``,
  ``target_delimiter: ""``), through two of its model types: ``local-completions`` (the
  harness tokenises over the server's ``/tokenize``, splits context and continuation itself and
  sends token ids) and ``gguf`` (text prompts; the continuation is found by ``text_offset``);
* **toolgym via the server**: ``toolgym run --model openai-compatible:NAME --base-url URL``,
  which probes the server first (docs/loglikelihood-servers.md);
* **toolgym local**: ``toolgym run --model local``, the bundled runtime directly.

No correct echo server is installed here, so this script starts one on 127.0.0.1: an
OpenAI-compatible ``/v1/completions`` (legacy format: ``echo``, ``logprobs``, at most one
generated token, greedy) over the bundled GGUF and the bundled runtime (xllamacpp, llama.cpp's
server). llama.cpp's server returns no prompt log-probabilities, so this one gets them by
generation: the prompt's first token is evaluated, then every later token is forced by a
grammar (:func:`toolgym.providers.local.forced_tokens_grammar`) and its log-probability is read
from the model's distribution before the grammar's mask (``n_probs``, ``post_sampling_probs:
false``): log P(token i | tokens 0..i-1), exactly what echo means. Every token is evaluated on
its own, one decoding step at a time, so a value does not depend on what the cache held before
(a prefix the cache already holds is reused: it was computed the same way). Each response's
``cache_n`` is checked against what the cache should hold; texts already scored are answered
from memory (the values a new computation would give, see ``--check``). The same server under
``/shifted`` moves every echoed value one token earlier and drops the generated token's entry:
toolgym's probe must refuse that one and accept the right one, or the script stops.

It is slow by design (one decoding step per distinct prompt token; a real server scores a
prompt in one pass): about 1 s per token on this 2-core machine under a load average of 10-15.

Usage::

    python benchmarks/loglik_vs_lm_eval.py --lm-eval-python PATH/TO/venv-lmeval/bin/python \\
        [--xcopa 30] [--exam 20] [--out runs/bench-lmeval]

where the harness's environment is ``python3 -m venv venv-lmeval && venv-lmeval/bin/pip install
'lm-eval[api]'`` (0.4.13 measured; ``[api]`` brings what ``local-completions`` needs; a benchmark
dependency, not toolgym's). The harness runs with
``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1`` and every proxy variable pointed at a closed
port (127.0.0.1 excepted), so nothing can be downloaded. Prints Markdown tables for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import toolgym  # noqa: E402
from toolgym.logprobs import WrongLogprobs  # noqa: E402
from toolgym.logprobs.openai_compat import CompletionsScorer  # noqa: E402
from toolgym.providers.local import LlamaServer, forced_tokens_grammar, load_server  # noqa: E402

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
TOP = 10
"""Alternatives kept per position (lm-eval's ``gguf`` asks for 10, the others for 1)."""


# --- the echo server --------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One token with its log-probability given the tokens before it and the most probable
    alternatives at its position (token id, log-probability, bytes)."""

    id: int
    logprob: float
    piece: bytes
    tops: tuple[tuple[int, float, bytes], ...]


class EchoModel:
    """Every prompt token's log-probability given what precedes it, from the bundled runtime,
    by forced generation (see the module docstring). One caller at a time (``lock``).

    Attributes:
        evaluated: Tokens run through the model (one decoding step each).
        requests: Runtime requests made.
        from_memory: Texts answered from memory.
    """

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.lock = threading.Lock()
        self._held: list[int] = []  # what the runtime's cache holds, every token evaluated alone
        self._entries: list[Entry | None] = []  # aligned with _held; None for the first token
        self._memo: dict[tuple[int, ...], tuple[list[Entry | None], Entry]] = {}
        self.evaluated = self.requests = self.from_memory = 0

    def _complete(self, prompt: list[int], n: int, grammar: str | None, cached: int | None) -> list[Entry]:
        body: dict[str, Any] = {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": TOP,
                                "post_sampling_probs": False, "cache_prompt": cached is not None,
                                "samplers": ["temperature"], "ignore_eos": True}
        if grammar:
            body["grammar"] = grammar
        result = self.server.complete(body)
        self.requests += 1
        got = int((result.get("timings") or {}).get("cache_n", -1))
        if cached is not None and got != cached:
            raise _CacheSurprise(f"the runtime reused {got} cached tokens, expected {cached}")
        self.evaluated += len(prompt) - max(got, 0) + max(n - 1, 0)
        content = (result["choices"][0].get("logprobs") or {}).get("content") or []
        return [Entry(int(e["id"]), float(e["logprob"]), bytes(e.get("bytes") or e["token"].encode()),
                      tuple((int(t["id"]), float(t["logprob"]), bytes(t.get("bytes") or t["token"].encode()))
                            for t in e["top_logprobs"])) for e in content]

    def score(self, ids: Sequence[int]) -> tuple[list[Entry | None], Entry]:
        """Entries of ``ids`` (``None`` for the first) and of the greedy next token.

        Raises:
            ValueError: for no tokens, or one the runtime did not reproduce under its grammar.
        """
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("an empty prompt")
        key = tuple(ids)
        with self.lock:
            if key in self._memo:
                self.from_memory += 1
                return self._memo[key]
            try:
                answer = self._score(ids, fresh=False)
            except _CacheSurprise:  # someone else used the runtime: start from an empty cache
                answer = self._score(ids, fresh=True)
            self._memo[key] = answer
            return answer

    def _score(self, ids: list[int], fresh: bool) -> tuple[list[Entry | None], Entry]:
        n = len(ids)
        same = 0 if fresh else next((i for i, (a, b) in enumerate(zip(ids, self._held, strict=False)) if a != b),
                                    min(n, len(self._held)))
        start = max(same, 1)  # the prompt: ids[:start]; ids[start:] are forced
        entries: list[Entry | None] = [None, *self._entries[1:start]]
        self._held, self._entries = [], []
        if start < n:
            forced = self._complete(ids[:start], n - start, forced_tokens_grammar(ids[start:]),
                                    None if fresh else start - 1)
            if [e.id for e in forced] != ids[start:]:
                raise ValueError(f"the runtime generated {[e.id for e in forced]} under a grammar forcing {ids[start:]}")
            entries += forced
        (following,) = self._complete(ids, 1, None, n - 1)
        self._held, self._entries = list(ids), entries
        return entries, following

    def piece(self, token: int) -> bytes:
        """The bytes of one token (for the first token of a prompt, never generated)."""
        return self.server.detokenize([token]).encode("utf-8")


class _CacheSurprise(Exception):
    pass


def legacy_logprobs(model: EchoModel, ids: list[int], echo: bool, generate: bool, top: int,
                    shifted: bool) -> tuple[str, str, dict[str, Any] | None]:
    """``(prompt text, generated text, logprobs object)`` in OpenAI's legacy completions format:
    one entry per prompt token (when echoing; the first ``null``) and one for the generated token;
    ``text_offset`` in characters of the prompt plus generated text."""
    entries, following = model.score(ids)
    pieces = [model.piece(ids[0]), *(e.piece for e in entries[1:])]  # type: ignore[union-attr]
    prompt_bytes = b"".join(pieces)
    prompt = prompt_bytes.decode("utf-8", errors="replace")
    generated = following.piece.decode("utf-8", errors="replace") if generate else ""

    def tops(e: Entry) -> dict[str, float]:
        found = {t[2].decode("utf-8", errors="replace"): t[1] for t in e.tops[:top]}
        found.setdefault(e.piece.decode("utf-8", errors="replace"), e.logprob)  # the token itself too, as vLLM
        return found

    rows: list[tuple[str, float | None, dict[str, float] | None, int]] = []
    if echo:
        at = 0
        for piece, entry in zip(pieces, entries, strict=True):
            offset = len(prompt_bytes[:at].decode("utf-8", errors="ignore"))  # the character holding its first byte
            rows.append((piece.decode("utf-8", errors="replace"), None if entry is None else entry.logprob,
                         None if entry is None else tops(entry), offset))
            at += len(piece)
        if shifted:  # each token shows the next one's value; the generated token's entry is gone
            values = [r[1] for r in rows[1:]] + [following.logprob]
            alts = [r[2] for r in rows[1:]] + [tops(following)]
            rows = [rows[0]] + [(r[0], v, a, r[3]) for r, v, a in zip(rows[1:], values[1:], alts[1:], strict=True)]
            generate_entry = False
        else:
            generate_entry = generate
    else:
        generate_entry = generate
    if generate_entry:
        rows.append((generated, following.logprob, tops(following), len(prompt)))
    if not rows:
        return prompt, generated, None
    return prompt, generated, {"tokens": [r[0] for r in rows], "token_logprobs": [r[1] for r in rows],
                               "top_logprobs": [r[2] for r in rows], "text_offset": [r[3] for r in rows]}


class EchoHandler(BaseHTTPRequestHandler):
    """``/v1/completions`` (and ``/shifted/v1/completions``), ``/tokenize``, ``/detokenize`` and
    ``/tokenizer_info`` (vLLM's shapes, which lm-eval's remote tokenizer reads)."""

    model: EchoModel

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/tokenizer_info":
            return self.reply(200, {"eos_token": "<|endoftext|>", "bos_token": None, "pad_token": None,
                                    "tokenizer_class": "llama.cpp"})
        self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            server = self.model.server
            if self.path == "/tokenize":
                ids = server.tokenize(str(body["prompt"]), add_special=bool(body.get("add_special_tokens", True)))
                return self.reply(200, {"tokens": ids, "count": len(ids), "max_model_len": server.n_ctx})
            if self.path == "/detokenize":
                return self.reply(200, {"prompt": server.detokenize(body["tokens"])})
            if self.path not in ("/v1/completions", "/shifted/v1/completions"):
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            return self.reply(200, self.complete(body, shifted=self.path.startswith("/shifted")))
        except (KeyError, TypeError, ValueError) as exc:
            return self.reply(400, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

    def complete(self, body: dict[str, Any], shifted: bool) -> dict[str, Any]:
        if float(body.get("temperature", 1.0)) != 0:
            raise ValueError("this stand-in only decodes greedily: temperature must be 0")
        max_tokens = int(body.get("max_tokens", 16))
        if max_tokens > 1:
            raise ValueError("this stand-in generates at most one token: max_tokens must be 0 or 1")
        prompts = body["prompt"]
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        echo, top = bool(body.get("echo")), int(body.get("logprobs") or 0)
        choices, used = [], 0
        for i, prompt in enumerate(prompts):
            ids = (self.model.server.tokenize(prompt, add_special=True, parse_special=False)
                   if isinstance(prompt, str) else [int(t) for t in prompt])
            text, generated, lp = legacy_logprobs(self.model, ids, echo, max_tokens == 1, max(top, 1), shifted)
            choices.append({"index": i, "text": (text if echo else "") + generated,
                            "logprobs": lp if body.get("logprobs") is not None else None, "finish_reason": "length"})
            used += len(ids)
        return {"id": "cmpl-bench", "object": "text_completion", "model": body.get("model", MODEL_NAME),
                "choices": choices, "usage": {"prompt_tokens": used, "completion_tokens": len(prompts)}}

    def reply(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(model: EchoModel) -> Iterator[str]:
    """The echo server on 127.0.0.1 (a free port); yields its root ``http://127.0.0.1:PORT``."""
    handler = type("Handler", (EchoHandler,), {"model": model})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- the runs ---------------------------------------------------------------------------------
def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> float:
    """Run ``command``; its wall seconds. Exits with its output when it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def toolgym_run(job: list[str], model: list[str], out: Path, walls: dict[str, float], label: str) -> None:
    """``toolgym run`` of ``job``; with ``out`` already there (``--reuse``), only its episodes that
    ended in error are played again (``--resume --force``: the new server has another port) and
    the wall times are added."""
    saved = out / "bench-wall.json"
    again = ["--resume", "--force"] if out.exists() else []  # --force: a new server has a new port
    if again and saved.exists() and not _errors(out):
        walls[label] = json.loads(saved.read_text())
        return
    wall = timed([sys.executable, str(ROOT / "run_agent.py"), "run", *job, "--agent", "loglik", *model,
                  "--out", str(out), "--no-progress", *again],
                 env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")})
    walls[label] = json.loads(saved.read_text()) + wall if saved.exists() else wall
    saved.write_text(json.dumps(walls[label]))
    if _errors(out):
        raise SystemExit(f"{out}: episodes ended in error: {_errors(out)}")


def _errors(out: Path) -> list[str]:
    return [t.example_id for t in toolgym.load_run(out, with_examples=False).trajectories if t.status == "error"]


def toolgym_scores(out: Path) -> tuple[dict[str, dict[str, float]], dict[str, tuple[str, dict[str, str], str]]]:
    """Example id → letter → log-likelihood, and id → (prompt, letter → continuation, key), in
    the run's order."""
    run = toolgym.load_run(out)
    if run.examples is None:
        raise SystemExit(f"{out}: {run.problem}")
    scores, prompts = {}, {}
    for traj in run.trajectories:
        choices = traj.final_state.get("choices") or {}
        scores[traj.example_id] = {k: math.fsum(v["logprobs"]) for k, v in choices.items()}
        ex = run.examples[traj.example_id]
        prompts[traj.example_id] = (ex.input, dict(ex.metadata["continuations"]), str(ex.reference or ""))
    return scores, prompts


def write_task(name: str, prompts: dict[str, tuple[str, dict[str, str], str]], folder: Path) -> None:
    """An lm-eval task ``name`` in ``folder``: toolgym's prompts and option lines, zero-shot."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for ex_id, (context, continuations, key) in prompts.items():
            letters = list(continuations)
            f.write(json.dumps({"id": ex_id, "context": context, "letters": letters,
                                "choices": [continuations[k] for k in letters],
                                "gold": letters.index(key) if key in letters else 0}, ensure_ascii=False) + "\n")
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\n"
        f"dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: context\n"
        "doc_to_choice: choices\n"
        "doc_to_target: gold\n"
        'target_delimiter: ""\n'
        "num_fewshot: 0\n"
        "metric_list:\n  - metric: acc\n", encoding="utf-8")


def lm_eval_run(python: str, model_type: str, root: str, tasks: list[str], folder: Path, out: Path) -> float:
    """Run the harness on ``tasks`` through the server at ``root``, offline."""
    if model_type == "local-completions":
        model_args = (f"base_url={root}/v1/completions,model={MODEL_NAME},tokenizer_backend=remote,"
                      "tokenized_requests=True,num_concurrent=1,max_retries=1,max_length=4096")
    else:
        model_args = f"base_url={root}"
    dead = "http://127.0.0.1:9"  # nothing listens there: any download attempt fails
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(out / "hf-home"), "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead,
           "https_proxy": dead, "ALL_PROXY": dead, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    if out.exists() and any(out.rglob("samples_*.jsonl")):  # --reuse: played already
        return float(json.loads((out / "bench-wall.json").read_text()))
    wall = timed([python, "-m", "lm_eval", "run", "--model", model_type, "--model_args", model_args,
                  "--tasks", ",".join(tasks), "--include_path", str(folder), "--batch_size", "1",
                  "--log_samples", "--output_path", str(out)], env=env, cwd=out.parent)
    (out / "bench-wall.json").write_text(json.dumps(wall))
    return wall


def lm_eval_scores(out: Path, task: str, letters: dict[str, list[str]]) -> tuple[dict[str, dict[str, float]], dict[str, list[tuple[str, str]]]]:
    """Example id → letter → the harness's log-likelihood, and id → its (context, continuation)
    requests, from its logged samples."""
    files = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    if not files:
        raise SystemExit(f"{out}: no samples_{task}_*.jsonl")
    scores, requests = {}, {}
    for line in files[-1].read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        ex_id = sample["doc"]["id"]
        values = [float(r[0][0]) for r in sample["resps"]]
        scores[ex_id] = dict(zip(letters[ex_id], values, strict=True))
        requests[ex_id] = [(a["arg_0"], a["arg_1"]) for a in sample["arguments"].values()] \
            if isinstance(sample["arguments"], dict) else [tuple(a) for a in sample["arguments"]]
    return scores, requests


# --- comparing --------------------------------------------------------------------------------
def compare(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> tuple[int, float, float, int, int]:
    """(options, max |Δ|, median |Δ|, questions with the same chosen option, questions)."""
    both = [q for q in a if a[q] and q in b and b[q]]
    if not both or any(set(a[q]) != set(b[q]) for q in both):
        raise SystemExit("the two sources did not score the same options")
    deltas = [abs(a[q][k] - b[q][k]) for q in both for k in a[q]]
    same = sum(max(a[q], key=a[q].__getitem__) == max(b[q], key=b[q].__getitem__) for q in both)
    return len(deltas), max(deltas), statistics.median(deltas), same, len(both)


def accuracy(scores: dict[str, dict[str, float]], keys: dict[str, str]) -> int:
    return sum(max(s, key=s.__getitem__) == keys[q] for q, s in scores.items() if s)


def probe(root: str) -> list[str]:
    """toolgym's probe against the right endpoint (must pass) and the shifted one (must be refused)."""
    lines = []
    CompletionsScorer(f"{root}/v1", MODEL_NAME).probe()
    lines.append(f"{root}/v1: accepted by toolgym's probe")
    try:
        CompletionsScorer(f"{root}/shifted/v1", MODEL_NAME).probe()
    except WrongLogprobs as exc:
        lines.append(f"shifted variant refused: {exc}")
    else:
        raise SystemExit("toolgym's probe accepted the shifted variant")
    return lines


def recheck(model: EchoModel, texts: list[list[int]]) -> float:
    """Largest difference between remembered values and a computation from an empty cache."""
    worst = 0.0
    with model.lock:
        for ids in texts:
            remembered, following = model._memo[tuple(ids)]
            fresh, fresh_next = model._score(ids, fresh=True)
            for r, f in zip([*remembered[1:], following], [*fresh[1:], fresh_next], strict=True):
                worst = max(worst, abs(r.logprob - f.logprob))  # type: ignore[union-attr]
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm-eval-python", required=True, help="python of the lm-evaluation-harness environment")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("TOOLGYM_REFERENCE_DATA", ROOT.parent / "shared" / "data")))
    parser.add_argument("--xcopa", type=int, default=30)
    parser.add_argument("--exam", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-lmeval")
    parser.add_argument("--shots", type=int, help="solved examples per prompt (default: the suites' 5)")
    parser.add_argument("--check", type=int, default=2,
                        help="options recomputed from an empty cache at the end, to compare with memory")
    parser.add_argument("--no-local", action="store_true", help="leave out toolgym's local backend")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the finished runs in --out; play only what is missing or ended in error")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    if out.exists() and not args.reuse:
        raise SystemExit(f"{out} exists: remove it, give another --out, or --reuse it")
    out.mkdir(parents=True, exist_ok=True)
    vi = args.data / "vietnamese"
    shots = [] if args.shots is None else ["--shots", str(args.shots)]
    jobs = {}
    if args.xcopa:
        jobs["xcopa_vi"] = (args.xcopa, ["--env", "xcopa_vi", "--dataset", str(vi / "xcopa_vi" / "test.vi.jsonl"),
                                         "--limit", str(args.xcopa), *shots])
    if args.exam:
        jobs["exam_vi"] = (args.exam, ["--env", "exam_vi", "--dataset", str(vi / "exams_vi" / "multilingual_test_vi.jsonl"),
                                       "--limit", str(args.exam), *shots])
    version = subprocess.run([args.lm_eval_python, "-c", "import importlib.metadata as m; print(m.version('lm_eval'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    walls: dict[str, float] = {}
    sources: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    prompts: dict[str, dict[str, tuple[str, dict[str, str], str]]] = {}
    requests: dict[str, dict[str, dict[str, list[tuple[str, str]]]]] = {}

    start = time.perf_counter()
    model = EchoModel(load_server(n_ctx=4096))
    with serve(model) as root:
        for line in probe(root):
            print(line, flush=True)
        for job, (_, job_args) in jobs.items():
            # one option of a five-shot EXAMS prompt takes minutes here: no timeout in the way
            toolgym_run(job_args, ["--model", f"openai-compatible:{MODEL_NAME}", "--base-url", f"{root}/v1",
                                   "--timeout", "7200", "--max-retries", "0"], out / f"{job}-server", walls,
                        f"toolgym via the server, {job}")
            sources.setdefault("toolgym via the server", {})[job], prompts[job] = toolgym_scores(out / f"{job}-server")
            print(f"toolgym via the server, {job}: {walls[f'toolgym via the server, {job}']:.0f} s "
                  f"({model.evaluated} tokens evaluated so far)", flush=True)
        folder = out / "tasks"
        for job in jobs:
            write_task(f"toolgym_{job}", prompts[job], folder)
        letters = {q: list(p[1]) for job in jobs for q, p in prompts[job].items()}
        for model_type in ("local-completions", "gguf"):
            label = f"lm-eval {model_type} via the server"
            walls[label] = lm_eval_run(args.lm_eval_python, model_type, root, [f"toolgym_{j}" for j in jobs], folder,
                                       out / f"lm-eval-{model_type}")
            for job in jobs:
                s, r = lm_eval_scores(out / f"lm-eval-{model_type}", f"toolgym_{job}", letters)
                sources.setdefault(label, {})[job] = s
                requests.setdefault(label, {})[job] = r
            print(f"{label}: {walls[label]:.0f} s", flush=True)
        checked = [tuple(model.server.tokenize(p[0] + c, add_special=True, parse_special=False))
                   for job in jobs for p in list(prompts[job].values())[:1] for c in list(p[1].values())[: args.check]]
        worst = recheck(model, [list(t) for t in checked]) if args.check else math.nan
        served = (model.evaluated, model.requests, model.from_memory)
    server_wall = time.perf_counter() - start
    model.server.close()
    for job, (_, job_args) in ([] if args.no_local else jobs.items()):
        toolgym_run(job_args, ["--model", "local"], out / f"{job}-local", walls, f"toolgym local, {job}")
        sources.setdefault("toolgym local", {})[job] = toolgym_scores(out / f"{job}-local")[0]
        print(f"toolgym local, {job}: {walls[f'toolgym local, {job}']:.0f} s", flush=True)

    # --- tables
    print(f"\nlm-evaluation-harness {version}; server: {served[0]} tokens evaluated in {served[1]} runtime requests, "
          f"{served[2]} texts answered from memory, {server_wall:.0f} s with the probe and every run through it; "
          f"recomputed from an empty cache: largest difference {worst:.2g} nats over {len(checked)} options\n")
    for label, per_job in requests.items():
        for job, reqs in per_job.items():
            same = sum(reqs[q] == [(p[0], c) for c in p[1].values()] for q, p in prompts[job].items())
            print(f"{label}, {job}: the harness's requests equal toolgym's (prompt, option line) on {same} of {len(reqs)} questions")
    pairs = [("lm-eval local-completions via the server", "toolgym via the server"),
             ("lm-eval gguf via the server", "toolgym via the server"),
             ("lm-eval local-completions via the server", "toolgym local"),
             ("toolgym via the server", "toolgym local")]
    print("\n| questions | compared | options | max \\|Δ\\| (nats) | median \\|Δ\\| | same chosen option |")
    print("|---|---|---|---|---|---|")
    for job, (n, _) in jobs.items():
        for a, b in [(a, b) for a, b in pairs if a in sources and b in sources]:
            k, mx, md, same, total = compare(sources[a][job], sources[b][job])
            print(f"| {job}, {n} | {a} vs {b} | {k} | {mx:.2g} | {md:.2g} | {same} of {total} |")
    print("\n| questions | source | correct |")
    print("|---|---|---|")
    for job, (n, _) in jobs.items():
        keys = {q: p[2] for q, p in prompts[job].items()}
        for label in sources:
            print(f"| {job}, {n} | {label} | {accuracy(sources[label][job], keys)} of {n} |")
    print("\n| run | wall time |")
    print("|---|---|")
    for label, wall in walls.items():
        print(f"| {label} | {wall:.0f} s |")
    (out / "bench.json").write_text(json.dumps({"walls": walls, "sources": sources, "lm_eval": version,
                                                "served": served, "recheck": worst}, indent=1))


if __name__ == "__main__":
    main()

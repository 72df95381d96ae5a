"""Cost of five-shot log-likelihood scoring with and without reusing the cached prompt prefix.

Scores the four options of N EXAMS questions (five-shot, as ``--agent loglik``) with the
llama.cpp backend, which keeps the key/value cache of the tokens shared with the previous call,
and counts the tokens it evaluated against the tokens a scorer without that reuse evaluates
(every call's whole prompt plus option). With ``--no-cache`` the cache is also cleared before
every call and timed, to measure rather than count the difference.

Usage: python benchmarks/vi_prefix_cache.py --dataset EXAMS_TEST.jsonl [--questions 10]
       [--model-path GGUF] [--no-cache]
Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolgym.data import load_examples  # noqa: E402
from toolgym.logprobs.llama import LlamaCppScorer  # noqa: E402
from toolgym.plugins import get_benchmark  # noqa: E402


def load(model_path: str | None, n_ctx: int) -> LlamaCppScorer:
    """The scorer over the bundled model (or ``model_path``), loaded by the local provider."""
    from toolgym.providers.local import LLAMA_LOCK, load_llama

    return LlamaCppScorer(load_llama(model_path, n_ctx=n_ctx), lock=LLAMA_LOCK)


def run(scorer: LlamaCppScorer, examples: list, clear: bool) -> tuple[float, int, int]:
    """Score every option; returns (seconds, tokens evaluated, tokens of every full call)."""
    full_tokens = 0
    before = scorer.evaluated_tokens
    start = time.perf_counter()
    for example in examples:
        for continuation in example.metadata["continuations"].values():
            if clear:
                scorer.llama.reset()  # forget the cached tokens: everything is evaluated again
            ctx, cont = scorer.tokenize(example.input, continuation)
            full_tokens += len(ctx) + len(cont)
            scorer.score(example.input, continuation)
    return time.perf_counter() - start, scorer.evaluated_tokens - before, full_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="EXAMS test JSONL (dev split beside it)")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--model-path", help="GGUF file (default: the bundled model)")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--no-cache", action="store_true", help="also time the run without reuse")
    args = parser.parse_args()
    examples = load_examples(args.dataset, get_benchmark("exam_vi"), {"sample": args.questions})
    scorer = load(args.model_path, args.n_ctx)
    rows = [("prefix reuse", *run(scorer, examples, clear=False))]
    if args.no_cache:
        rows.append(("no reuse", *run(scorer, examples, clear=True)))
    print(f"| {args.questions} five-shot questions × 4 options | seconds | tokens evaluated | "
          "tokens without reuse | evaluated / without |")
    print("|---|---:|---:|---:|---:|")
    for label, seconds, evaluated, full in rows:
        print(f"| {label} | {seconds:.1f} | {evaluated} | {full} | {evaluated / full:.2f} |")


if __name__ == "__main__":
    main()

"""Command-line options of the model providers (added to ``run``), and what the CLI does with
them: model settings, ``--serve``, and the accounting stored in ``run.json``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from toolgym.accounting import Accounting, account
from toolgym.providers import ModelSettings, split_spec
from toolgym.records import Trajectory
from toolgym.runio import read_run, write_run

__all__ = ["add_provider_arguments", "record_accounting", "serve_for", "settings_from_args", "vllm_args"]

SERVE_PROVIDERS = ("vllm", "openai-compatible")


def add_provider_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the provider, fault-tolerance, accounting and ``--serve`` options to ``parser``."""
    g = parser.add_argument_group("hosted models (openai, anthropic, openai-compatible, vllm)")
    g.add_argument("--base-url", help="server address, e.g. http://127.0.0.1:8000/v1 (openai-compatible, vllm; "
                   "also a proxy for openai/anthropic)")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per model call attempt (default 120)")
    g.add_argument("--max-retries", type=int, default=4,
                   help="retries of a call failing with 429, 5xx, a timeout or a dropped connection (default 4)")
    g.add_argument("--retry-initial", type=float, default=1.0,
                   help="backoff of the first retry in seconds, doubling per retry, with jitter (default 1)")
    g.add_argument("--retry-max", type=float, default=30.0, help="largest backoff in seconds (default 30)")
    g.add_argument("--rps", type=float, help="requests per second to the provider (default: no limit)")
    parser.add_argument(
        "--record-tokens", action="store_true",
        help="store each model turn's prompt and completion token ids and completion log-probabilities in the "
        "trajectory, where the provider gives them (local: always; OpenAI-compatible servers: when they return them)",
    )
    g.add_argument("--price-in", type=float, help="USD per million input tokens (for the cost line)")
    g.add_argument("--price-out", type=float, help="USD per million output tokens (for the cost line)")
    s = parser.add_argument_group("--serve: start vLLM for the run (vllm:MODEL)")
    s.add_argument("--serve", action="store_true",
                   help="start `vllm serve MODEL --enable-auto-tool-choice --tool-call-parser hermes` on a free "
                   "loopback port, and stop it at the end")
    s.add_argument("--serve-timeout", type=float, default=900.0, help="seconds to wait for the server (default 900)")
    s.add_argument("--tensor-parallel-size", type=int, help="passed to vllm serve")
    s.add_argument("--max-model-len", type=int, help="passed to vllm serve")
    s.add_argument("--gpu-memory-utilization", type=float, help="passed to vllm serve")
    s.add_argument("--dtype", help="passed to vllm serve")
    s.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                   help="any other vllm serve option, repeatable: --vllm-arg=--enforce-eager")


def vllm_args(args: argparse.Namespace) -> list[str]:
    """The pass-through options for ``vllm serve``."""
    out: list[str] = []
    for flag in ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization", "dtype"):
        value = getattr(args, flag, None)
        if value is not None:
            out += ["--" + flag.replace("_", "-"), str(value)]
    for raw in getattr(args, "vllm_arg", None) or []:
        out += raw.split("=", 1) if raw.startswith("--") and "=" in raw else [raw]
    return out


def settings_from_args(args: argparse.Namespace) -> ModelSettings:
    """Model settings from the ``run`` options.

    Raises:
        ValueError: for a negative retry count or non-positive timeout or rate.
    """
    if args.max_retries < 0:
        raise ValueError(f"--max-retries must be >= 0, got {args.max_retries}")
    if args.timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {args.timeout}")
    if args.rps is not None and args.rps <= 0:
        raise ValueError(f"--rps must be positive, got {args.rps}")
    extra: dict = {}
    if args.base_url:
        extra["base_url"] = args.base_url
    if args.serve:
        extra["serve"] = {"command": "vllm serve", "args": vllm_args(args)}
    return ModelSettings(
        temperature=args.temperature,
        seed=args.seed,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout,
        extra=extra,
        max_retries=args.max_retries,
        retry_initial_s=args.retry_initial,
        retry_max_s=args.retry_max,
        rps=args.rps,
        record_tokens=bool(getattr(args, "record_tokens", False)),
    )


@contextlib.contextmanager
def serve_for(args: argparse.Namespace, settings: ModelSettings, out: Path) -> Iterator[None]:
    """With ``--serve``, run the block with a vLLM server started for ``args.model`` (its URL
    goes into ``settings.extra["base_url"]``, its output into ``out/vllm.log``); otherwise
    just run the block. The dataset is validated before the (slow) server start.

    Raises:
        ValueError: for ``--serve`` with a provider other than vllm/openai-compatible, or
            together with ``--base-url``.
        ServeError: if the server does not start.
        DatasetError: for an invalid dataset (before the server is started).
    """
    if not args.serve:
        yield
        return
    from toolgym.providers.vllm_server import VLLMServer, serving

    provider, name = split_spec(args.model)
    if provider not in SERVE_PROVIDERS or not name:
        raise ValueError(f"--serve starts vLLM: use --model vllm:MODEL (got {args.model!r})")
    if args.base_url:
        raise ValueError("--serve chooses the server's address itself; drop --base-url")
    from toolgym.runner import load_run_examples, resolve_benchmark

    load_run_examples(resolve_benchmark(args.env)[0], args.dataset, args.limit)  # bad data: fail now
    out.mkdir(parents=True, exist_ok=True)
    server = VLLMServer(name, vllm_args(args), ready_timeout_s=args.serve_timeout, log_path=out / "vllm.log")
    with serving(server):
        settings.extra["base_url"] = server.base_url
        settings.extra["serve"]["command"] = " ".join(server.command())
        yield


def record_accounting(
    out: Path, trajectories: list[Trajectory], price_in: float | None, price_out: float | None
) -> Accounting:
    """Account for every trajectory of run directory ``out`` and store it in its ``run.json``
    (key ``accounting``).

    Raises:
        RunDirError: if ``out`` has no valid run.json.
    """
    record = read_run(out)
    totals = account(trajectories, price_in, price_out, with_model=record.model is not None)
    record.accounting = totals.record()
    write_run(Path(out), record)
    return totals

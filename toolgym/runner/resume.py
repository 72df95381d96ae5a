"""Checks before a run directory is continued (``--resume``): same environment, agent, model, dataset and result-changing settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.data import (
    load_examples,
    resolve_dataset,
    sha256_file,
)
from toolgym.runio import (
    RUN_FILE as RUN_FILE_NAME,
)
from toolgym.runio import (
    RunDirError,
    RunRecord,
    read_run,
    redact_spec,
)
from toolgym.runner.config import RunConfig
from toolgym.runner.parts import model_spec_ref, resolve_agent, resolve_benchmark


def check_resume(config: RunConfig) -> None:
    """Refuse to resume a run directory with a different environment, agent, model or dataset
    content than it was started with (the results would mix two runs).

    Raises:
        RunDirError: naming the fields that differ.
        DatasetError: for an invalid dataset (reported before any difference).
    """
    if config.out is None:
        return
    out = Path(config.out)
    if not config.resume or not (out / RUN_FILE_NAME).exists():
        return
    record = read_run(out)
    benchmark, _ = resolve_benchmark(config.env)
    agent_obj, _ = resolve_agent(config.agent)
    agent_cls = agent_obj if isinstance(agent_obj, type) else type(agent_obj)
    now: dict[str, Any] = {
        "env": benchmark.name,
        "agent": agent_cls.name,
        "model": (model_spec_ref(config.model)[0] if isinstance(config.model, str)
                  else f"object:{type(config.model).__name__}") if agent_cls.needs_model else None,
    }
    # a run.json written before credentials were redacted holds them: compare as recorded now
    before: dict[str, Any] = {"env": redact_spec(record.env), "agent": record.agent_name, "model": record.model}
    if not isinstance(config.dataset, (list, tuple)):
        path = resolve_dataset(benchmark, None if config.dataset is None else str(config.dataset))
        now["dataset sha256"] = sha256_file(path)
        before["dataset sha256"] = record.dataset.sha256
    differ = [f"{k}: {before[k]!r} before, {now[k]!r} now" for k in now if before[k] != now[k]]
    if differ and before.get("dataset sha256") != now.get("dataset sha256"):
        load_examples(path, benchmark, config.env_options)  # an invalid file: report that first
    if differ:
        raise RunDirError(f"{out / RUN_FILE_NAME}: cannot resume a different run ({'; '.join(differ)})")
    changed = setting_differences(config, record)
    if changed and not config.force:
        raise RunDirError(resume_refusal(out, {k: [b, n] for k, b, n in changed}))


RESUME_SETTINGS = ("max_steps", "max_repeats", "temperature", "seed", "max_tokens", "base_url", "user_model")
"""Settings a resumed run must share with the run it continues (they change the results)."""


def setting_differences(config: RunConfig, record: RunRecord) -> list[tuple[str, Any, Any]]:
    """The :data:`RESUME_SETTINGS` that differ between ``config`` and a recorded run, as
    ``(setting, before, now)``. The base URL is not compared when either run started its own
    server (``--serve`` picks a free port)."""
    saved = record.model_settings
    now = config.settings.record()
    before = {"max_steps": record.agent.get("max_steps"), "max_repeats": record.agent.get("max_repeats"),
              **{k: saved.get(k) for k in ("temperature", "seed", "max_tokens")}}
    current = {"max_steps": config.max_steps, "max_repeats": config.max_repeats,
               **{k: now.get(k) for k in ("temperature", "seed", "max_tokens")}}
    if record.agent.get("user_model") is not None or config.user_model is not None:
        user = config.user_model
        before["user_model"] = record.agent.get("user_model")
        current["user_model"] = (model_spec_ref(user)[0] if isinstance(user, str)
                                 else None if user is None else f"object:{type(user).__name__}")
    extra_before, extra_now = saved.get("extra") or {}, now.get("extra") or {}
    if "serve" not in extra_before and "serve" not in extra_now:
        before["base_url"], current["base_url"] = extra_before.get("base_url"), extra_now.get("base_url")
    return [(k, before[k], current[k]) for k in RESUME_SETTINGS if k in before and before[k] != current[k]]


def resume_refusal(out: Path, differ: dict[str, list[Any]]) -> str:
    """The message refusing to resume ``out`` with changed settings."""
    listed = "; ".join(f"{k}: {b!r} before, {n!r} now" for k, (b, n) in differ.items())
    return (f"{out / RUN_FILE_NAME}: cannot resume with different settings ({listed}); use the run's settings, "
            "or add --force to continue anyway (recorded in run.json)")

"""LLM-as-judge correctness graders.

``correctness`` asks a judge model (any ``--judge-model`` spec) whether the agent's final
answer matches the reference answer (the LangChain tool-usage benchmark's "correctness"
criterion, graded by an LLM); suites derive their own judges from it (the multiverse-math
suite's tells the judge that arithmetic in the question's universe differs). The deterministic ``answer_match`` grader
(:mod:`toolgym.graders.answer`: for numbers, the last number of the answer against the
reference, relative tolerance 1e-6) checks the same thing without a model, so the judge's
agreement with it can be measured (:func:`toolgym.views.analysis.agreement`).

Judge replies are parsed into CORRECT (1.0) / INCORRECT (0.0); a reply that cannot be parsed
scores ``None`` (reported as unscored) with the raw text kept, and a failing judge call scores
``None`` with the error; neither raises. Raw replies are cached on disk, keyed by the judge
model, the prompt and the inputs, so re-grading a run makes no new judge calls.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolgym.graders import make_score, register_grader
from toolgym.graders.answer import last_number
from toolgym.providers import ModelSettings, build_model
from toolgym.records import Example, Score, Trajectory

if TYPE_CHECKING:  # langchain-core loads with the first judge call, not with the grader's name
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

__all__ = [
    "Correctness",
    "JudgeCache",
    "Verdict",
    "default_cache_dir",
    "last_number",
    "numbers_match",
    "parse_verdict",
]

def default_cache_dir() -> Path:
    """``~/.cache/toolgym/judge``: where judge replies are cached unless told otherwise."""
    return Path.home() / ".cache" / "toolgym" / "judge"


# --- parsing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A parsed judge reply.

    Attributes:
        value: 1.0 for CORRECT, 0.0 for INCORRECT, ``None`` when the reply is unparseable.
        verdict: ``"CORRECT"``, ``"INCORRECT"`` or ``None``.
        reason: The judge's reason (the ``REASON:`` line, else the rest of the reply).
    """

    value: float | None
    verdict: str | None
    reason: str


_VERDICT_LINE = re.compile(r"VERDICT\W{0,4}(CORRECT|INCORRECT)\b", re.IGNORECASE)
_UPPER_WORD = re.compile(r"\b(CORRECT|INCORRECT)\b")
_ANY_WORD = re.compile(r"\b(correct|incorrect)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\bnot\s+(?:in)?correct\b", re.IGNORECASE)
_REASON = re.compile(r"REASON\W{0,4}(.+)", re.IGNORECASE | re.DOTALL)


def parse_verdict(text: str) -> Verdict:
    """Read CORRECT / INCORRECT and a reason from a judge reply.

    In order: a ``VERDICT: X`` line; else exactly one of the upper-case words ``CORRECT`` /
    ``INCORRECT``; else exactly one of them in any case, unless negated ("not correct").
    Anything else (both words, neither, a negation) is unparseable.

    Args:
        text: The judge's raw reply.

    Returns:
        The verdict; ``value`` is ``None`` when unparseable (never raises).
    """
    match = _VERDICT_LINE.search(text)
    verdict: str | None = match.group(1).upper() if match else None
    if verdict is None:
        upper = set(_UPPER_WORD.findall(text))
        if len(upper) == 1:
            verdict = upper.pop()
        elif not upper and not _NEGATED.search(text):
            words = {w.upper() for w in _ANY_WORD.findall(text)}
            if len(words) == 1:
                verdict = words.pop()
    reason_match = _REASON.search(text)
    reason = (reason_match.group(1) if reason_match else _VERDICT_LINE.sub("", text)).strip()
    reason = " ".join(reason.split())[:500]
    if verdict is None:
        return Verdict(None, None, reason)
    return Verdict(1.0 if verdict == "CORRECT" else 0.0, verdict, reason)


# --- cache -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeCache:
    """Raw judge replies on disk, one JSON file per key (``DIR/ab/abcdef....json``).

    Files are written through a temporary file and renamed, so concurrent graders never read
    half a record; a corrupt file counts as a miss.

    Attributes:
        directory: Cache folder (created on first write).
    """

    directory: Path

    @staticmethod
    def key(judge_model: str, prompt: list[dict[str, str]], inputs: dict[str, Any]) -> str:
        """sha256 of the judge model, the full prompt and the graded inputs."""
        blob = json.dumps(
            {"judge_model": judge_model, "prompt": prompt, "inputs": inputs},
            sort_keys=True, ensure_ascii=False, default=str,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached raw reply for ``key``, or ``None``."""
        try:
            record = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        reply = record.get("reply") if isinstance(record, dict) else None
        return reply if isinstance(reply, str) else None

    def put(self, key: str, reply: str, meta: dict[str, Any]) -> None:
        """Store a raw reply with its key material (``meta``) for inspection."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta | {"reply": reply}, ensure_ascii=False, default=str), encoding="utf-8")
        os.replace(tmp, path)


# --- graders ---------------------------------------------------------------------------------


def question_text(example: Example) -> str:
    """The example's request as plain text (a chat history becomes ``role: content`` lines)."""
    if isinstance(example.input, str):
        return example.input
    return "\n".join(f"{t.get('role', 'user')}: {t.get('content', '')}" for t in example.input)


def _as_dicts(messages: list[BaseMessage]) -> list[dict[str, str]]:
    from toolgym.parsing import message_text

    return [{"role": m.type, "content": message_text(m)} for m in messages]


CORRECTNESS_SYSTEM = """\
You grade an AI assistant's answer to a question against a reference answer.
The answer is CORRECT when it gives the same information as the reference answer; wording,
formatting, letter case and extra explanation do not matter. It is INCORRECT when it is wrong,
incomplete, missing, or contradicts the reference.
Reply in exactly this format:
VERDICT: CORRECT or INCORRECT
REASON: one short sentence"""

USER_TEMPLATE = """\
QUESTION:
{question}

REFERENCE ANSWER:
{reference}

ASSISTANT'S ANSWER:
{answer}"""


@register_grader("correctness")
@dataclass(frozen=True)
class Correctness:
    """An LLM judge decides whether the final answer matches ``example.reference``.

    1.0 for CORRECT, 0.0 for INCORRECT or for a trajectory without a final answer (no judge
    call), ``None`` (unscored) for an unparseable reply or a failing judge call. Does not
    apply to examples without a reference. The score's details hold the judge model, the
    prompt, the raw reply, the parsed verdict and reason, and whether the reply came from the
    cache.

    Attributes:
        judge_model: Model spec of the judge (``openai:gpt-4o``, ``scripted:FILE``, ...);
            required unless ``judge`` is given.
        judge_cache: Cache folder for raw replies (default ``~/.cache/toolgym/judge``); ``""``
            turns caching off.
        judge: A ready chat model (tests pass a ScriptedChatModel); built from
            ``judge_model`` with temperature 0 when omitted.

    Raises:
        ValueError: at construction, when neither ``judge_model`` nor ``judge`` is given.
    """

    judge_model: str | None = None
    judge_cache: str | None = None
    judge: BaseChatModel | None = field(default=None, compare=False, repr=False)

    name: ClassVar[str] = "correctness"
    kept_details: ClassVar[tuple[str, ...]] = (  # the judge's own words exist nowhere else (the prompt is rebuilt)
        "judge_model", "reply", "verdict", "reason", "cached")
    system_prompt: ClassVar[str] = CORRECTNESS_SYSTEM

    def __post_init__(self) -> None:
        if self.judge is None:
            if not self.judge_model:
                raise ValueError(
                    f"grader {self.name!r} needs a judge model: pass --judge-model SPEC "
                    "(for example openai:gpt-4o-mini or scripted:FILE)"
                )
            object.__setattr__(self, "judge", build_model(self.judge_model, ModelSettings(temperature=0.0)))

    @property
    def model_id(self) -> str:
        """The judge's identity in the cache key and the score details."""
        return self.judge_model or f"{type(self.judge).__module__}.{type(self.judge).__qualname__}"

    @property
    def cache(self) -> JudgeCache | None:
        """The reply cache, or ``None`` when turned off."""
        if self.judge_cache == "":
            return None
        return JudgeCache(Path(self.judge_cache) if self.judge_cache else default_cache_dir())

    def prompt(self, example: Example, answer: str) -> list[BaseMessage]:
        """The judge's messages: the grading instructions, then question, reference, answer."""
        from langchain_core.messages import HumanMessage, SystemMessage

        user = USER_TEMPLATE.format(question=question_text(example), reference=example.reference, answer=answer)
        return [SystemMessage(self.system_prompt), HumanMessage(user)]

    def extra_details(self, example: Example, answer: str) -> dict[str, Any]:
        """Details added to every score (subclasses add checks beside the judge)."""
        return {}

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        if example.reference is None:
            return None
        from toolgym.parsing import strip_reasoning

        answer = (strip_reasoning(trajectory.final_answer) or "").strip()  # the judge never sees reasoning
        if not answer:
            return make_score(
                self, trajectory, 0.0, "no final answer", judge_model=self.model_id,
                **self.extra_details(example, answer),
            )
        messages = self.prompt(example, answer)
        prompt = _as_dicts(messages)
        inputs = {"question": question_text(example), "reference": example.reference, "answer": answer}
        cache = self.cache
        key = JudgeCache.key(self.model_id, prompt, inputs)
        reply = cache.get(key) if cache else None
        cached = reply is not None
        details: dict[str, Any] = {"judge_model": self.model_id, "prompt": prompt, **self.extra_details(example, answer)}
        if reply is None:
            try:
                from toolgym.parsing import message_text

                reply = message_text(self.judge.invoke(messages))
            except Exception as exc:  # noqa: BLE001 - any provider failure is an unscored value
                error = f"{type(exc).__name__}: {exc}"
                return make_score(self, trajectory, None, f"judge call failed: {error}", error=error, **details)
            if cache:
                cache.put(key, reply, {"judge_model": self.model_id, "prompt": prompt, "inputs": inputs})
        verdict = parse_verdict(reply)
        explanation = (
            f"{verdict.verdict}: {verdict.reason}" if verdict.verdict else "unparseable judge reply (unscored)"
        )
        return make_score(
            self, trajectory, verdict.value, explanation,
            reply=reply, verdict=verdict.verdict, reason=verdict.reason, cached=cached, **details,
        )


# --- numeric comparison (the judge's details record the deterministic verdict) ---------------


def _reference_number(reference: Any) -> float | None:
    if isinstance(reference, bool):
        return None
    if isinstance(reference, (int, float)):
        return float(reference)
    if isinstance(reference, str):
        try:
            return float(reference.strip().replace(",", ""))
        except ValueError:
            return last_number(reference)
    return None


def numbers_match(answer: float | None, reference: Any, rel_tol: float = 1e-6) -> bool | None:
    """Whether ``answer`` equals the numeric ``reference`` within ``rel_tol`` (``math.isclose``
    with ``abs_tol=0``: a reference of 0 needs an exact 0).

    Returns:
        ``None`` when the reference is not a number; ``False`` when ``answer`` is ``None``.
    """
    ref = _reference_number(reference)
    if ref is None:
        return None
    if answer is None:
        return False
    return math.isclose(answer, ref, rel_tol=rel_tol, abs_tol=0.0)

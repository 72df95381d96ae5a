"""Answer grader: the agent's final answer against the example's reference (LangChain
tool-usage benchmark, "correctness of the final answer"), decided by fixed rules rather than a
judge model so that re-grading is deterministic."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from toolgym.graders import make_score, register_grader
from toolgym.parsing import strip_reasoning
from toolgym.records import Example, Score, Trajectory

# A number: optional sign (not glued to a preceding word, digit or dot), digits with optional
# thousands separators, an optional fraction and exponent (units may follow: "100km"). "−" (U+2212) counts as a minus sign.
_NUMBER = re.compile(
    r"(?<![\w.])[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\d)"
    r"|(?<![\w.])[-+\u2212]?\.\d+(?:[eE][-+]?\d+)?(?!\d)"
)


def normalize_text(text: str) -> str:
    """Case-fold and collapse every run of whitespace to one space (stripped at both ends)."""
    return " ".join(text.casefold().split())


def contains_phrase(answer: str, reference: str) -> bool:
    """True when the normalized ``reference`` equals the normalized ``answer`` or occurs in it
    as a whole phrase: not directly preceded or followed by a letter or digit (so ``"no"``
    is found in ``"No, it is not."`` but not in ``"I don't know"``)."""
    ans, ref = normalize_text(answer), normalize_text(reference)
    if not ref:
        return not ans
    if ans == ref:
        return True
    pattern = r"(?<![^\W_])" + re.escape(ref) + r"(?![^\W_])"
    return re.search(pattern, ans) is not None


def last_number(text: str | None) -> float | None:
    """The last number written in ``text`` (``"1,234.5"`` reads as 1234.5, a Unicode minus
    counts), or ``None`` when there is none."""
    if not text:
        return None
    found = _NUMBER.findall(text)
    if not found:
        return None
    token = found[-1].replace(",", "").replace("\u2212", "-")
    try:
        value = float(token)
    except ValueError:  # pragma: no cover - the pattern only matches valid floats
        return None
    return value if math.isfinite(value) else None


@register_grader("answer_match")
@dataclass(frozen=True)
class AnswerMatch:
    """1.0 when the final answer matches ``example.reference``, else 0.0.

    Rules (deterministic):

    * numeric reference (int or float): the **last number** in the final answer must satisfy
      ``math.isclose(number, reference, rel_tol=rel_tol, abs_tol=abs_tol)``;
    * string reference: after case-folding and collapsing whitespace, the reference must equal
      the answer or occur in it as a whole phrase (bounded by non-alphanumeric characters or
      the ends of the text). A numeric-looking string reference such as ``"42"`` is compared as
      text. Known limitation: a paraphrase ("milk and soy" for ``"milk, soy"``) scores 0, and
      an answer containing the reference inside a negation ("not yes") scores 1.

    A trajectory without a final answer (for example one stopped at its step limit) scores 0.
    Does not apply (returns ``None``) to examples without a reference.

    Attributes:
        rel_tol: Relative tolerance for numeric references (default 1e-6).
        abs_tol: Absolute tolerance, only matters for references at or near zero.
    """

    rel_tol: float = 1e-6
    abs_tol: float = 1e-12
    name = "answer_match"

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        reference = example.reference
        if reference is None:
            return None
        answer = strip_reasoning(trajectory.final_answer)  # reasoning is never graded
        if not answer or not answer.strip():
            return make_score(self, trajectory, 0.0, "no final answer", reference=reference, answer=answer)
        if isinstance(reference, bool) or not isinstance(reference, (int, float)):
            ok = contains_phrase(answer, str(reference))
            explanation = (
                f"answer contains {str(reference)!r}" if ok else f"answer does not contain {str(reference)!r}"
            )
            return make_score(self, trajectory, float(ok), explanation, reference=reference, answer=answer, rule="text")
        number = last_number(answer)
        if number is None:
            return make_score(
                self, trajectory, 0.0, "no number in the final answer",
                reference=reference, answer=answer, rule="number", extracted=None,
            )
        ok = math.isclose(number, float(reference), rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        explanation = f"last number {number!r} {'matches' if ok else 'differs from'} {reference!r}"
        return make_score(
            self, trajectory, float(ok), explanation,
            reference=reference, answer=answer, rule="number", extracted=number,
        )

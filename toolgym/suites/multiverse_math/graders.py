"""The multiverse-math judge: :class:`toolgym.graders.judge.Correctness` told that arithmetic
in the question's universe differs from the usual one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from toolgym import Example
from toolgym.graders.answer import last_number
from toolgym.graders.judge import Correctness, numbers_match

__all__ = ["MULTIVERSE_SYSTEM", "MultiverseCorrectness"]

MULTIVERSE_SYSTEM = """\
You grade an AI assistant's answer to an arithmetic question against a reference answer.
The question was asked in a different universe, where arithmetic operations (addition,
subtraction, multiplication, division, powers, logarithms, ...) are defined differently from the
usual ones; the assistant had tools that compute this universe's operations, and the reference
answer was computed with them. Do not recompute anything with ordinary arithmetic.
The answer is CORRECT when its final number equals the reference answer (differences of rounding
below one part in a million are fine), even if ordinary arithmetic gives something else. It is
INCORRECT when its final number differs from the reference or it gives no number, even if the
number is right in ordinary arithmetic.
Reply in exactly this format:
VERDICT: CORRECT or INCORRECT
REASON: one short sentence"""


@dataclass(frozen=True)
class MultiverseCorrectness(Correctness):
    """:class:`Correctness` for Multiverse Math: the judge is told that the answer must equal
    the reference in the question's universe, whose arithmetic differs from the usual one.
    Each score's details also carry the deterministic checker's verdict (``answer_match``:
    the last number in the answer within relative tolerance 1e-6 of the reference)."""

    name: ClassVar[str] = "multiverse_correctness"
    system_prompt: ClassVar[str] = MULTIVERSE_SYSTEM

    def extra_details(self, example: Example, answer: str) -> dict[str, Any]:
        found = last_number(answer)
        return {"answer_number": found, "answer_match": numbers_match(found, example.reference)}

"""Graders of multiple-choice and last-word tasks, scored either from the model's written
answer (answer extraction) or from token log-probabilities (log-likelihood), as in ViLLM-Eval
(Nguyen et al. 2024, "ViLLM-Eval: A Comprehensive Evaluation Suite for Vietnamese Large
Language Models") and lm-evaluation-harness (``acc``, ``acc_norm``, LAMBADA ``acc`` and
perplexity).

What the agent left in the trajectory decides the mode: a log-likelihood agent writes the
scored continuations into the final state (``{"scoring": "loglik", ...}``); otherwise the
answer is extracted from the final text. Everything is recomputed from the stored trajectory.
The suite's report (:mod:`toolgym.suites.vietnamese.report`) aggregates these scores per subject
and into a corpus perplexity.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import ClassVar

from toolgym import Example, Measure, Score, Trajectory, make_score
from toolgym.suites.vietnamese.text import strip_punct

# --- answer extraction -----------------------------------------------------------------------
_MARKER = (
    r"(?<!\w)(?:đáp\s*án|câu\s*trả\s*lời|trả\s*lời|phương\s*án|lựa\s*chọn|chọn|answer|option|choice)"
    r"(?:\s*(?:đúng|chính\s*xác|correct|is))*\s*(?:là|:|-|=)?\s*(?:là|:)?\s*"
)


def _patterns(letters: str) -> list[re.Pattern[str]]:
    upper = re.escape(letters.upper())
    both = re.escape(letters.upper() + letters.lower())
    return [
        # 1. an answer marker followed by the letter: "Đáp án: C", "đáp án đúng là (c)", "Answer: C"
        re.compile(_MARKER + rf"[\(\[\*\"']*\s*([{both}])(?!\w)", re.IGNORECASE),
        # 2. a letter in brackets, or starting a line as an option label: "(C)", "[C]", "C.", "C)"
        re.compile(rf"[\(\[]\s*([{both}])\s*[\)\]]|(?:^|\n)\s*\**([{upper}])\s*[\.\):]", re.MULTILINE),
        # 3. a capital letter standing alone as a word: "C", "... là C"
        re.compile(rf"(?<!\w)([{upper}])(?!\w)"),
    ]


def extract_letter(text: str | None, letters: str = "ABCD") -> str | None:
    """The option letter a written answer chooses, or ``None`` when it names none.

    The text is NFKC-normalised first (full-width ``Ｃ``, ``（Ｃ）`` and ``：`` become ASCII).
    Three forms are tried in order of reliability, and within the first form that occurs the
    **last** occurrence wins (a model that corrects itself, "A... không, đáp án là C"):

    1. an answer marker then the letter: ``Đáp án: C``, ``đáp án đúng là c``, ``Chọn (C)``,
       ``Answer: C`` (lower-case letters accepted here);
    2. a bracketed letter ``(C)``/``[C]``, or a line starting with an option label ``C.``/``C)``;
    3. a capital letter standing alone as a word (``C``; the ``D`` of ``DNA`` does not count).

    Args:
        text: The model's answer.
        letters: The valid option letters (``"AB"`` for two options).

    Returns:
        The upper-case letter, or ``None`` (the answer is counted as unanswered).
    """
    if not text:
        return None
    norm = unicodedata.normalize("NFKC", text)
    for pattern in _patterns(letters):
        found = [g for m in pattern.finditer(norm) for g in m.groups() if g]
        if found:
            return found[-1].upper()
    return None


# --- helpers over stored trajectories -------------------------------------------------------
def option_letters(example: Example) -> str:
    """The example's option letters in order (``"ABCD"``)."""
    return "".join(example.metadata.get("options", {})) or "ABCD"


def loglik_choice(state: dict, normalize: bool = False) -> str | None:
    """The option with the highest log-likelihood in a log-likelihood agent's final state.

    Args:
        state: ``{"scoring": "loglik", "choices": {letter: {"logprobs": [...], "chars": n}}}``.
        normalize: Divide each option's log-probability by its length in characters
            (lm-evaluation-harness ``acc_norm``).

    Returns:
        The letter, or ``None`` when the state holds no log-likelihoods.
    """
    choices = state.get("choices") if state.get("scoring") == "loglik" else None
    if not choices:
        return None

    def value(item: tuple[str, dict]) -> float:
        total = math.fsum(item[1]["logprobs"])
        return total / max(1, item[1].get("chars", 1)) if normalize else total

    return max(choices.items(), key=value)[0]


def normalize_word(word: str | None) -> str:
    """The first word of a text as compared by the last-word task: NFC, case-folded, without
    surrounding punctuation or quotes (``"Touchdown."`` → ``"touchdown"``)."""
    parts = unicodedata.normalize("NFC", word or "").split()
    return strip_punct(parts[0]).casefold() if parts else ""


# --- graders ---------------------------------------------------------------------------------
HARNESS = (
    "lm-evaluation-harness (Gao et al., github.com/EleutherAI/lm-evaluation-harness) as used by "
    "ViLLM-Eval (Nguyen et al. 2024)"
)


@dataclass(frozen=True)
class ChoiceAccuracy:
    """1.0 when the chosen option is the reference letter, else 0.0.

    The choice is the option with the highest summed token log-probability when the agent
    scored the options (lm-evaluation-harness ``acc``), otherwise the letter extracted from the
    answer by :func:`extract_letter`. An answer without a letter scores 0.0 with outcome
    ``unanswered`` (kept apart from ``wrong`` in the report). Applies to examples with
    ``metadata.options``.

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes.
        normalize (bool): Choose by log-probability per character instead of the sum.
    """

    name: ClassVar[str] = "choice_accuracy"
    kept_details: ClassVar[tuple[str, ...]] = ("outcome", "chosen", "mode")  # counted by the report; what was chosen
    measure: ClassVar[Measure] = Measure(reference=f"acc of {HARNESS}")
    normalize: ClassVar[bool] = False

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Score the option the trajectory chose.

        Args:
            example (Example): The question, with ``metadata.options`` and the key's letter as
                ``reference``.
            trajectory (Trajectory): The finished episode.

        Returns:
            Score | None: 1.0 or 0.0 with ``details.outcome`` (``correct``, ``wrong``,
            ``unanswered``), ``chosen``, ``expected``, ``mode`` and ``subject``; ``None`` for
            an example without options, or (normalised) a run without log-likelihoods.
        """
        if "options" not in example.metadata:
            return None
        gold = str(example.reference)
        chosen = loglik_choice(trajectory.final_state, normalize=self.normalize)
        mode = "loglik"
        if chosen is None:
            if self.normalize:
                return None  # length normalisation only exists for log-likelihoods
            mode = "extraction"
            chosen = extract_letter(trajectory.final_answer, option_letters(example))
        outcome = "unanswered" if chosen is None else ("correct" if chosen == gold else "wrong")
        return make_score(
            self, trajectory, float(outcome == "correct"),
            f"{outcome}: chose {chosen or 'nothing'}, key {gold}",
            outcome=outcome, chosen=chosen, expected=gold, mode=mode,
            subject=example.metadata.get("subject"),
        )


@dataclass(frozen=True)
class ChoiceAccuracyNorm(ChoiceAccuracy):
    """As ``choice_accuracy``, choosing by log-probability per character of the option's
    continuation (lm-evaluation-harness ``acc_norm``); log-likelihood runs only."""

    name: ClassVar[str] = "choice_accuracy_norm"
    measure: ClassVar[Measure] = Measure(reference=f"acc_norm of {HARNESS}")
    normalize: ClassVar[bool] = True


@dataclass(frozen=True)
class LastWordAccuracy:
    """1.0 when the model gets the paragraph's last word (LAMBADA accuracy, Paperno et al.
    2016, "The LAMBADA dataset: Word prediction requiring a broad discourse context").

    Log-likelihood runs: the target is the greedy continuation of the context (every target
    token is the arg-max). Answer extraction: the first word of the answer equals the target,
    compared after :func:`normalize_word` (case and surrounding punctuation ignored); an empty
    answer is ``unanswered``. Applies to examples with ``metadata.task == "last_word"``.

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Pass/fail, 1 passes.
    """

    name: ClassVar[str] = "last_word_accuracy"
    kept_details: ClassVar[tuple[str, ...]] = ("outcome", "chosen", "mode")  # counted by the report; what was chosen
    measure: ClassVar[Measure] = Measure(
        reference=f"LAMBADA accuracy (Paperno et al. 2016); acc of the lambada tasks of {HARNESS}"
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """Score whether the trajectory got the last word.

        Args:
            example (Example): The paragraph, with ``metadata.task == "last_word"`` and the
                target word as ``reference``.
            trajectory (Trajectory): The finished episode.

        Returns:
            Score | None: 1.0 or 0.0 with ``details.outcome``, ``mode`` and ``expected``;
            ``None`` for an example of another task.
        """
        if example.metadata.get("task") != "last_word":
            return None
        state = trajectory.final_state
        target = str(example.reference)
        if state.get("scoring") == "loglik" and "greedy" in state:
            ok = bool(state["greedy"])
            outcome = "correct" if ok else "wrong"
            return make_score(self, trajectory, float(ok), f"{outcome}: greedy continuation is {'' if ok else 'not '}the target {target!r}",
                              outcome=outcome, mode="loglik", expected=target)
        said = normalize_word(trajectory.final_answer)
        outcome = "unanswered" if not said else ("correct" if said == normalize_word(target) else "wrong")
        return make_score(
            self, trajectory, float(outcome == "correct"), f"{outcome}: said {said!r}, target {target!r}",
            outcome=outcome, mode="extraction", chosen=said, expected=target,
        )


@dataclass(frozen=True)
class TargetNLL:
    """Negative log-likelihood (nats) of the target continuation, summed over its tokens;
    ``details.n_tokens`` holds the token count and ``details.logprobs`` the values, so corpus
    perplexity is exp(Σ nll / Σ n_tokens) (see
    :func:`toolgym.suites.vietnamese.report.run_perplexity`). Log-likelihood runs only.

    Class attributes:
        name (str): The name its scores carry.
        measure (Measure): Continuous, lower is better, no pass/fail reading.
    """

    name: ClassVar[str] = "target_nll"
    measure: ClassVar[Measure] = Measure(
        kind="continuous", direction="lower", pass_if=None,
        reference=f"negative log-likelihood of the LAMBADA target (Paperno et al. 2016), perplexity of {HARNESS}",
    )

    def grade(self, example: Example, trajectory: Trajectory) -> Score | None:
        """The target's negative log-likelihood from a log-likelihood agent's answer sheet.

        Args:
            example (Example): The paragraph (unused: the sheet holds the target's tokens).
            trajectory (Trajectory): The finished episode.

        Returns:
            Score | None: The NLL in nats, or ``None`` when the final state holds no
            log-probabilities (a writing agent).
        """
        state = trajectory.final_state
        if state.get("scoring") != "loglik" or "logprobs" not in state:
            return None
        values = [float(v) for v in state["logprobs"]]
        nll = -math.fsum(values)
        return make_score(
            self, trajectory, nll, f"{nll:.3f} nats over {len(values)} tokens",
            n_tokens=len(values), logprobs=values,
        )

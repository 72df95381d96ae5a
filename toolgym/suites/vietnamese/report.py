"""The suite's section of a graded run (the benchmarks' ``report``): accuracy ± standard error
overall and per subject with the accuracy of uniform guessing, as ViLLM-Eval reports its exam
and reasoning tasks (Nguyen et al. 2024, "ViLLM-Eval: A Comprehensive Evaluation Suite for
Vietnamese Large Language Models"), and the corpus perplexity of the last-word targets, as
lm-evaluation-harness reports LAMBADA (``perplexity``; Paperno et al. 2016).

Everything is recomputed from the run's scores and examples (:class:`toolgym.Run`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from toolgym import Example, ReportTable, Run, Score
from toolgym.logprobs import Perplexity, perplexity
from toolgym.stats import clustered_estimate
from toolgym.suites.vietnamese.graders import ChoiceAccuracy, ChoiceAccuracyNorm, LastWordAccuracy, TargetNLL

__all__ = ["accuracy_table", "choice_report", "last_word_report", "run_perplexity"]

OUTCOMES = ("correct", "wrong", "unanswered")
"""The ``details.outcome`` values of the accuracy graders, counted in the report."""


def chance(examples: Iterable[Example]) -> float | None:
    """Expected accuracy of guessing an option uniformly at random.

    Args:
        examples (Iterable[Example]): Examples, those with ``metadata.options`` counted.

    Returns:
        float | None: The mean of 1 / (number of options) (0.25 for EXAMS, 0.5 for XCOPA), or
        ``None`` when no example has options.
    """
    odds = [1 / len(ex.metadata["options"]) for ex in examples if ex.metadata.get("options")]
    return sum(odds) / len(odds) if odds else None


def accuracy_table(run: Run, grader: str, by: str | None = "subject") -> ReportTable | None:
    """Accuracy of one grader overall and per ``metadata[by]`` group, with the correct / wrong /
    unanswered counts and, for multiple choice, the accuracy of uniform guessing.

    The standard error is clustered by example (:func:`toolgym.stats.clustered_estimate`), so
    repeated trials keep honest error bars; with one trial it is the binomial sqrt(p(1-p)/n).

    Args:
        run (Run): A graded run; its ``examples`` give the groups (``None``: overall only).
        grader (str): The accuracy grader's name (``choice_accuracy``, ...).
        by (str | None): Metadata field to group by, or ``None`` for the overall row only.
            Groups are listed when there are at least two.

    Returns:
        ReportTable | None: One row per group after the overall row ``all``, or ``None``
        when the run has no score of ``grader``.
    """
    mine = [s for s in run.scores if s.grader == grader]
    if not mine:
        return None
    examples = run.examples or {}
    label = by or "examples"
    with_chance = chance(examples.values()) is not None

    def row(name: str, group: list[Score]) -> dict[str, object]:
        est = clustered_estimate([s.value for s in group], [s.example_id for s in group])
        counts = Counter(s.details.get("outcome") for s in group)
        cells: dict[str, object] = {label: name, "accuracy ± s.e.": est.format(), "n": est.n}
        cells |= {outcome: counts[outcome] for outcome in OUTCOMES}
        if with_chance:
            guess = chance(examples[i] for i in dict.fromkeys(s.example_id for s in group) if i in examples)
            cells["chance"] = None if guess is None else f"{guess:.3f}"
        return cells

    rows = [row("all", mine)]
    groups: dict[str, list[Score]] = defaultdict(list)
    for s in mine:
        example = examples.get(s.example_id)
        key = example.metadata.get(by) if example is not None and by else None
        if key is not None:
            groups[str(key)].append(s)
    if len(groups) > 1:
        rows += [row(key, groups[key]) for key in sorted(groups)]
    notes = []
    unknown = {s.example_id for s in mine} - set(examples)
    if run.examples is not None and unknown:
        notes.append(f"{grader}: {len(unknown)} scored example(s) not in the dataset, counted in 'all' only")
    title = f"{run.env}: {grader}" + (f" by {by}" if by and len(groups) > 1 else "")
    return ReportTable(title=title, rows=rows, notes=notes)


def run_perplexity(scores: Iterable[Score]) -> Perplexity:
    """Corpus perplexity from a run's ``target_nll`` scores.

    Args:
        scores (Iterable[Score]): A run's scores (other graders ignored).

    Returns:
        Perplexity: exp(-mean log-probability per target token) over every scored target
        (:func:`toolgym.logprobs.perplexity`), with the token and target counts.
    """
    return perplexity(
        s.details.get("logprobs", []) for s in scores if s.grader == TargetNLL.name and s.value is not None
    )


def _error_notes(run: Run) -> list[str]:
    errors = sum(t.status == "error" for t in run.trajectories)
    return [f"{errors} trajectory(ies) ended in error and are not scored (see `show --failed`)"] if errors else []


def choice_report(run: Run) -> list[ReportTable]:
    """The report of ``exam_vi`` and ``xcopa_vi``: one accuracy table per subject (per
    question type for XCOPA) for each accuracy grader in the run.

    Args:
        run (Run): A graded run.

    Returns:
        list[ReportTable]: The ``choice_accuracy`` table, then ``choice_accuracy_norm`` when
        graded; empty when neither was.
    """
    tables = [t for g in (ChoiceAccuracy.name, ChoiceAccuracyNorm.name) if (t := accuracy_table(run, g))]
    if tables:
        tables[0].notes[:0] = _error_notes(run)
    return tables


def last_word_report(run: Run) -> list[ReportTable]:
    """The report of ``lambada_vi``: last-word accuracy, and the corpus perplexity of the
    targets with its token count (log-likelihood runs).

    Args:
        run (Run): A graded run.

    Returns:
        list[ReportTable]: The ``last_word_accuracy`` table and the perplexity table, each
        when its grader scored something.
    """
    tables = [t for t in (accuracy_table(run, LastWordAccuracy.name, by=None),) if t is not None]
    ppl = run_perplexity(run.scores)
    if ppl.n_tokens:
        tables.append(ReportTable(
            title=f"{run.env}: perplexity of the targets ({TargetNLL.name})",
            rows=[{"perplexity": f"{ppl.value:.2f}", "tokens": ppl.n_tokens, "targets": ppl.n_sequences,
                   "definition": "exp(-mean log-prob per token)"}],
            notes=["perplexity is over the model's own tokens: models with different tokenizers are not comparable"],
        ))
    if tables:
        tables[0].notes[:0] = _error_notes(run)
    return tables

"""Tool-free Vietnamese tasks after ViLLM-Eval (Nguyen et al. 2024, "ViLLM-Eval: A Comprehensive
Evaluation Suite for Vietnamese Large Language Models"), scored by answer extraction
(``--agent direct``) or by log-likelihood (``--agent loglik``, as lm-evaluation-harness does):

* ``exam_vi``: grade-12 exam questions of EXAMS (Hardalov et al. 2020), four options, K-shot;
* ``xcopa_vi``: causal reasoning of XCOPA (Ponti et al. 2020), two options, K-shot;
* ``lambada_vi``: the last word of a Wikipedia paragraph, LAMBADA-style (Paperno et al. 2016),
  built from XQuAD (Artetxe et al. 2020).

No data is shipped: each ``datasets/<env>/README.md`` says which public file to pass by path.
"""

from pathlib import Path

from toolgym import Benchmark, Suite
from toolgym.suites.vietnamese.graders import ChoiceAccuracy, ChoiceAccuracyNorm, LastWordAccuracy, TargetNLL
from toolgym.suites.vietnamese.lambada_vi import LambadaVi
from toolgym.suites.vietnamese.multiple_choice import ExamVi, XcopaVi
from toolgym.suites.vietnamese.report import choice_report, last_word_report

__all__ = ["SUITE"]

_DATA = Path(__file__).parent / "datasets"

SUITE = Suite(
    name="vietnamese",
    benchmarks=[
        Benchmark(
            environment=ExamVi,
            graders=(ChoiceAccuracy.name,),
            datasets=_DATA / ExamVi.name,
            load_dataset=ExamVi.load_dataset,
            report=choice_report,
            description="Vietnamese grade-12 exam questions (EXAMS, 4 options, K-shot), read by path",
        ),
        Benchmark(
            environment=XcopaVi,
            graders=(ChoiceAccuracy.name,),
            datasets=_DATA / XcopaVi.name,
            load_dataset=XcopaVi.load_dataset,
            report=choice_report,
            description="Vietnamese causal reasoning (XCOPA, 2 options, K-shot), read by path",
        ),
        Benchmark(
            environment=LambadaVi,
            graders=(LastWordAccuracy.name, TargetNLL.name),
            datasets=_DATA / LambadaVi.name,
            load_dataset=LambadaVi.load_dataset,
            report=last_word_report,
            description="last word of Vietnamese Wikipedia paragraphs (built from XQuAD), read by path",
        ),
    ],
    graders=[ChoiceAccuracy, ChoiceAccuracyNorm, LastWordAccuracy, TargetNLL],
)

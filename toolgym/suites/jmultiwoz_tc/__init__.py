"""JMultiWOZ-TC: every user turn of 4,246 Japanese travel dialogues, judged on the tool calls
the assistant makes at that point (github.com/llm-jp/JMultiWOZ-TC; data CC BY 4.0, derived from
JMultiWOZ, CC BY-SA 4.0).

The suite declares one benchmark:

* the environment :class:`~toolgym.suites.jmultiwoz_tc.environment.JMultiWOZTC` (the 9
  published tools, one model answer per turn), its data read from the published zip, the
  NDJSON files or a folder (:func:`~toolgym.suites.jmultiwoz_tc.data.load_examples`);
* the per-turn graders of :mod:`toolgym.suites.jmultiwoz_tc.graders`;
* after every grading, the published ``result_<model>.jsonl``, ``score_<model>.json``,
  ``incorrect_<model>.json`` and ``diagnostics_<model>.json`` derived from the run's
  trajectories (:func:`~toolgym.suites.jmultiwoz_tc.results.export_published`);
* ``grade --env jmultiwoz_tc --result FILE --dataset D``: a result file of any generator read
  into trajectories (:func:`~toolgym.suites.jmultiwoz_tc.results.import_result_file`);
* the report: the five published rows and the lenient columns
  (:func:`~toolgym.suites.jmultiwoz_tc.results.report`).

The published format has one line per turn, so a run has one trial per example.
"""

from toolgym import Benchmark, Suite
from toolgym.suites.jmultiwoz_tc.data import load_examples
from toolgym.suites.jmultiwoz_tc.environment import JMultiWOZTC
from toolgym.suites.jmultiwoz_tc.graders import JMultiWOZDecision, JMultiWOZExact, JMultiWOZLenient
from toolgym.suites.jmultiwoz_tc.results import export_published, import_result_file, report

GRADERS = (JMultiWOZExact, JMultiWOZLenient, JMultiWOZDecision)

SUITE = Suite(
    name="jmultiwoz_tc",
    benchmarks=[
        Benchmark(
            environment=JMultiWOZTC,
            graders=tuple(g.name for g in GRADERS),
            load_dataset=load_examples,
            default_concurrency=32,
            max_trials=1,
            report=report,
            exporters=(export_published,),
            importer=import_result_file,
            description="JMultiWOZ-TC: the tool calls of each user turn of Japanese travel dialogues",
        )
    ],
    graders=list(GRADERS),
)

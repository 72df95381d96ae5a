"""BFCL v4, the Berkeley Function Calling Leaderboard: its 13 single-turn categories
(github.com/ShishirPatil/gorilla, ``berkeley-function-call-leaderboard``; data Apache 2.0),
read by path, and its four multi-turn categories, by name or path, with the API classes and the
official checker imported from the ``bfcl-eval`` package (:mod:`toolgym.suites.bfcl.multi_turn`).
The agentic categories (web search, memory) are not run.

The suite declares:

* the environment ``bfcl`` (:class:`~toolgym.suites.bfcl.environment.BFCL`): one entry per
  episode, its functions as tools converted as the leaderboard's function-calling mode does,
  one model turn, nothing executed; the data read by
  :func:`~toolgym.suites.bfcl.data.load_examples` (``--dataset .../BFCL_v4_<category>.json``,
  the possible answers found beside it or given with ``--answers FILE``);
* the agent ``bfcl_prompting`` (:class:`~toolgym.suites.bfcl.agent.BFCLPromptingAgent`): the
  leaderboard's prompting format ``[func(a=1, b="x")]``; native tool calls are the default
  ``tool_calling`` agent;
* the graders ``bfcl_accuracy`` (official), ``bfcl_optimal`` and ``bfcl_abstention``
  (:mod:`~toolgym.suites.bfcl.graders`);
* after every grading, ``BFCL_v4_<category>_result.json`` and ``_score.json`` in the
  leaderboard's layout; ``grade --env bfcl --result FILE`` for result files of any tool; the
  report by category and by error type (:mod:`~toolgym.suites.bfcl.results`).

The leaderboard keeps one result per entry, so a run has one trial per example.
"""

from toolgym import Benchmark, Suite
from toolgym.suites.bfcl.agent import BFCLPromptingAgent
from toolgym.suites.bfcl.data import load_examples
from toolgym.suites.bfcl.environment import BFCL
from toolgym.suites.bfcl.graders import BFCLAbstention, BFCLAccuracy, BFCLOptimal
from toolgym.suites.bfcl.multi_turn import category_path
from toolgym.suites.bfcl.results import export_published, first_divergence, import_result_file, report

__all__ = ["SUITE"]

GRADERS = (BFCLAccuracy, BFCLOptimal, BFCLAbstention)

SUITE = Suite(
    name="bfcl",
    benchmarks=[
        Benchmark(
            environment=BFCL,
            graders=tuple(g.name for g in GRADERS),
            load_dataset=load_examples,
            dataset_by_name=category_path,
            max_trials=1,
            report=report,
            exporters=(export_published,),
            importer=import_result_file,
            divergence=first_divergence,
            description=("BFCL v4: the single-turn categories read by path (BFCL_v4_<category>.json); the multi-turn "
                         "ones by name (multi_turn_base, ...) from the bfcl-eval package or by path"),
        )
    ],
    graders=list(GRADERS),
    agents=[BFCLPromptingAgent],
)

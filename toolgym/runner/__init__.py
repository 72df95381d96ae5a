"""Running an agent over a dataset, grading stored trajectories, and exporting results.

:func:`run` is the whole pipeline behind ``toolgym.evaluate`` and ``toolgym run``: resolve the
parts (names, specs or objects), load and check the dataset, play every (example, trial)
episode, append each trajectory as it finishes, grade, export. Data flows one way:
dataset → episode → trajectory → scores → views and exporters.

Each job has its module; this package re-exports their public names:

- :mod:`toolgym.runner.config`: :class:`RunConfig`, :class:`RunResult`, the error limit.
- :mod:`toolgym.runner.parts`: resolving the benchmark, agent, model and graders; the examples.
- :mod:`toolgym.runner.play`: playing episodes (asyncio, forked workers), the ``local`` executor.
- :mod:`toolgym.runner.record`: ``run.json`` at the start and the end of a run; exporters.
- :mod:`toolgym.runner.grading`: grading trajectories; a run directory graded again.
- :mod:`toolgym.runner.importing`: a foreign result file imported as a run.
- :mod:`toolgym.runner.resume`: the checks before a run directory is continued.
- :mod:`toolgym.runner.pipeline`: :func:`run`, the pipeline.
"""

from toolgym.runner.config import (
    EXAMPLES_FILE,
    FIRST_ERRORS,
    ErrorLimit,
    RunConfig,
    RunResult,
    TooManyErrors,
    parse_max_errors,
)
from toolgym.runner.grading import grade, grade_trajectories, status_counts
from toolgym.runner.importing import import_results
from toolgym.runner.parts import (
    MILESTONE_GRADERS,
    NOT_IMPORTABLE_HINT,
    benchmark_of,
    in_process,
    load_run_examples,
    make_graders,
    model_spec_ref,
    resolve_agent,
    resolve_benchmark,
)
from toolgym.runner.pipeline import run
from toolgym.runner.play import LocalExecutor, WorkerDied, play_all, play_episode, play_in_processes
from toolgym.runner.record import export, finish_run, new_record
from toolgym.runner.resume import RESUME_SETTINGS, check_resume, resume_refusal, setting_differences

__all__ = [
    "EXAMPLES_FILE", "FIRST_ERRORS", "MILESTONE_GRADERS", "NOT_IMPORTABLE_HINT", "RESUME_SETTINGS",
    "ErrorLimit", "LocalExecutor", "RunConfig", "RunResult", "TooManyErrors", "WorkerDied",
    "benchmark_of", "check_resume", "export", "finish_run", "grade", "grade_trajectories", "import_results",
    "in_process", "load_run_examples", "make_graders", "model_spec_ref", "new_record", "parse_max_errors",
    "play_all", "play_episode", "play_in_processes", "resolve_agent", "resolve_benchmark", "resume_refusal",
    "run", "setting_differences", "status_counts",
]

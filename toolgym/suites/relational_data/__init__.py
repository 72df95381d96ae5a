"""Relational data (LangChain tool-usage benchmark): lookups over users, locations and foods in
a fresh SQLite database."""

from pathlib import Path

from toolgym import Benchmark, Generator, Suite
from toolgym.suites.relational_data.environment import RelationalData

SUITE = Suite(
    name="relational_data",
    benchmarks=[
        Benchmark(
            environment=RelationalData,
            graders=("steps_exact", "step_ratio", "answer_match"),
            judge_graders=("correctness",),
            datasets=Path(__file__).parent / "datasets" / "relational_data",
            load_dataset=RelationalData.load_dataset,
            generator=Generator(RelationalData.generate, RelationalData.default_levels, "hops"),
            answer_from_replay=RelationalData.reference_from_replay,
            description="17 lookups over users, locations and foods in a fresh SQLite database",
        )
    ],
)

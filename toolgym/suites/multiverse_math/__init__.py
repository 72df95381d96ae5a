"""Multiverse math (LangChain tool-usage benchmark): arithmetic whose operations were altered,
so a model cannot answer from memory."""

from pathlib import Path

from toolgym import Benchmark, Generator, Suite
from toolgym.suites.multiverse_math.environment import MultiverseMath
from toolgym.suites.multiverse_math.graders import MultiverseCorrectness

SUITE = Suite(
    name="multiverse_math",
    benchmarks=[
        Benchmark(
            environment=MultiverseMath,
            graders=("steps_exact", "step_ratio", "answer_match"),
            judge_graders=("multiverse_correctness",),
            datasets=Path(__file__).parent / "datasets" / "multiverse_math",
            from_langchain=MultiverseMath.from_langchain,
            generator=Generator(MultiverseMath.generate, MultiverseMath.default_levels, "operation-tree depth"),
            answer_from_replay=MultiverseMath.reference_from_replay,
            description="add, subtract, multiply, ... altered as published",
        )
    ],
    graders=[MultiverseCorrectness],
)
